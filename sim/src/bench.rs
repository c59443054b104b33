//! `ext4sim bench`: host-time benchmarks against e2fsprogs, and lockstep
//! throughput. Host time is noisy, so each figure is a median of several runs
//! and comparisons are ratios measured in the same invocation. Benchmarks may
//! read the wall clock; simulations never do.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ext4_engine::check::check;
use ext4_engine::device::BlockDevice;
use ext4_engine::device_file::FileDevice;
use ext4_testkit::e2fsprogs::tool;
use ext4_engine::fs::Ext4;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::op::pattern;
use ext4_model::{FileSystem, MountConfig};

pub mod dd;
pub mod fiemap;
pub mod fsck;

use crate::run::{run_seed, RunSpec};
use crate::target::TargetFactory;

const GIB: u64 = 1 << 30;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(Duration, T), String> {
    let t = Instant::now();
    let out = f()?;
    Ok((t.elapsed(), out))
}

fn run_tool(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    // e2fsck -fn exits 0 on a clean image; anything else is a failure here.
    if !out.status.success() {
        return Err(format!("{:?} failed: {}", cmd, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

fn sparse_file(path: &Path, size: u64) -> Result<FileDevice, String> {
    let _ = std::fs::remove_file(path);
    FileDevice::create(path, size).map_err(|e| format!("{}: {e}", path.display()))
}

fn engine_mkfs(path: &Path, size: u64) -> Result<FileDevice, String> {
    let mut dev = sparse_file(path, size)?;
    let opts = MkfsOptions::new(size, [7; 16], [9; 16], crate::run::spec::SIM_EPOCH_SECS);
    mkfs(&mut dev, &opts).map_err(|e| e.to_string())?;
    dev.flush().map_err(|e| e.to_string())?;
    Ok(dev)
}

/// The 10,000-file tree both sides build: 100 directories of 100 files,
/// sizes 0..16 KiB from a fixed pattern.
fn tree_file(i: u32) -> (String, Vec<u8>) {
    let size = (i.wrapping_mul(2654435761) % 16384) as usize;
    (format!("/d{:03}/f{:03}", i / 100, i % 100), pattern(i as u64, size))
}

const TREE_FILES: u32 = 10_000;

fn write_host_tree(dir: &Path) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    for i in 0..TREE_FILES {
        let (p, data) = tree_file(i);
        let full = dir.join(p.trim_start_matches('/'));
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&full, data).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn engine_populate(path: &Path, size: u64) -> Result<(), String> {
    populate(engine_mkfs(path, size)?)
}

/// The same tree into memory: the engine's own cost without the host's I/O.
fn engine_populate_in_memory(size: u64) -> Result<(), String> {
    let mut dev = ext4_engine::device_mem::MemDevice::new(size);
    let opts = MkfsOptions::new(size, [7; 16], [9; 16], crate::run::spec::SIM_EPOCH_SECS);
    mkfs(&mut dev, &opts).map_err(|e| e.to_string())?;
    populate(dev)
}

fn populate<D: BlockDevice>(dev: D) -> Result<(), String> {
    let mut fs = Ext4::mount(dev, &MountConfig::default()).map_err(|e| e.to_string())?;
    for d in 0..TREE_FILES / 100 {
        fs.mkdir(&format!("/d{d:03}"), 0o755).map_err(|e| e.to_string())?;
    }
    for i in 0..TREE_FILES {
        let (p, data) = tree_file(i);
        fs.create(&p, 0o644).map_err(|e| e.to_string())?;
        if !data.is_empty() {
            fs.write(&p, 0, &data).map_err(|e| e.to_string())?;
        }
    }
    fs.unmount().map_err(|e| e.to_string())?;
    Ok(())
}

pub struct BenchRow {
    pub what: String,
    pub engine: Duration,
    pub reference: Option<(String, Duration)>,
}

impl BenchRow {
    pub fn line(&self) -> String {
        match &self.reference {
            Some((name, t)) => format!(
                "  {:<34} engine {:>10.3?}   {:<18} {:>10.3?}   ratio {:.2}",
                self.what,
                self.engine,
                name,
                t,
                self.engine.as_secs_f64() / t.as_secs_f64().max(1e-9)
            ),
            None => format!("  {:<34} {:>10.3?}", self.what, self.engine),
        }
    }
}

/// mkfs, populate and fsck against e2fsprogs.
pub fn bench_e2fsprogs(runs: usize, work: &Path) -> Result<Vec<BenchRow>, String> {
    std::fs::create_dir_all(work).map_err(|e| e.to_string())?;
    let img = work.join("bench.img");
    let ref_img = work.join("ref.img");
    let tree = work.join("tree");
    let (mke2fs, e2fsck) = (tool("mke2fs"), tool("e2fsck"));
    let tools = mke2fs.is_some() && e2fsck.is_some();
    let mke2fs = mke2fs.unwrap_or_else(|| "mke2fs".into());
    let e2fsck = e2fsck.unwrap_or_else(|| "e2fsck".into());
    let mut rows = Vec::new();

    let size = 16 * GIB;
    let mut e = Vec::new();
    let mut r = Vec::new();
    for _ in 0..runs {
        e.push(time(|| engine_mkfs(&img, size).map(drop))?.0);
        if tools {
            let _ = std::fs::remove_file(&ref_img);
            r.push(time(|| run_tool(Command::new(&mke2fs).args(["-t", "ext4", "-F", "-q", "-b", "4096"]).arg(&ref_img).arg("16G")))?.0);
        }
    }
    rows.push(BenchRow { what: "mkfs 16 GiB sparse".into(), engine: median(e), reference: tools.then(|| ("mke2fs -t ext4 -F".into(), median(r))) });

    write_host_tree(&tree)?;
    let size = GIB;
    let mut e = Vec::new();
    let mut r = Vec::new();
    for _ in 0..runs {
        e.push(time(|| engine_populate(&img, size))?.0);
        if tools {
            let _ = std::fs::remove_file(&ref_img);
            r.push(time(|| run_tool(Command::new(&mke2fs).args(["-t", "ext4", "-F", "-q", "-b", "4096", "-d"]).arg(&tree).arg(&ref_img).arg("1G")))?.0);
        }
    }
    rows.push(BenchRow { what: "mkfs + 10,000-file tree (1 GiB)".into(), engine: median(e), reference: tools.then(|| ("mke2fs -d".into(), median(r))) });
    let mem: Result<Vec<Duration>, String> = (0..runs).map(|_| time(|| engine_populate_in_memory(size)).map(|(t, _)| t)).collect();
    rows.push(BenchRow { what: "  same, into memory (engine only)".into(), engine: median(mem?), reference: None });

    let mut e = Vec::new();
    let mut r = Vec::new();
    for _ in 0..runs {
        let (t, clean) = time(|| {
            let dev = FileDevice::open(&img, false).map_err(|e| e.to_string())?;
            let (_, report) = check(dev);
            Ok(report.is_clean())
        })?;
        if !clean {
            return Err("engine fsck found problems in its own populated image".into());
        }
        e.push(t);
        if tools {
            r.push(time(|| run_tool(Command::new(&e2fsck).args(["-fn"]).arg(&img)))?.0);
        }
    }
    rows.push(BenchRow { what: "fsck of the populated image".into(), engine: median(e), reference: tools.then(|| ("e2fsck -fn".into(), median(r))) });
    let _ = std::fs::remove_file(&img);
    let _ = std::fs::remove_file(&ref_img);
    let _ = std::fs::remove_dir_all(&tree);
    Ok(rows)
}

/// Peak resident memory of this process so far, in MiB (0 where unknown).
fn peak_rss_mib() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: rusage is plain integers, for which all zeroes is a value.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: getrusage only writes the struct it is given.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } == 0 {
            return (usage.ru_maxrss.max(0) as u64) / 1024;
        }
    }
    0
}

/// Lockstep throughput on the ram profile: the same long run `runs` times,
/// and seeds per minute of 1,000-op runs.
///
/// The first long run faults its whole heap in from the kernel (1.6 GiB
/// at 200k ops), which on a virtual machine can cost more than the run's own
/// work and varies with the host; later runs reuse that heap, since the
/// process keeps freed memory. Both are reported: the first run as what a
/// one-off `ext4sim run` pays, the median of the rest as the simulator's
/// own throughput.
pub fn bench_lockstep<F: TargetFactory>(factory: &F, runs: usize, long_ops: u64, seeds: u64) -> Result<Vec<BenchRow>, String> {
    let mut rows = Vec::new();
    let spec = RunSpec { fsck_every: 0, ..RunSpec::new(1, long_ops, MountConfig::default()) };
    let mut times = Vec::new();
    let mut ops = 0;
    for _ in 0..runs.max(2) {
        let (t, r) = time(|| run_seed(factory, &spec))?;
        if let Some(f) = r.failure {
            return Err(format!("bench run failed: {f}"));
        }
        ops = r.stats.ops;
        times.push(t);
    }
    let rate = |t: Duration| ops as f64 / t.as_secs_f64();
    let first = times.remove(0);
    rows.push(BenchRow {
        what: format!("lockstep {ops} ops (ram), first run (fresh heap, peak RSS {} MiB), ops/s = {:.0}", peak_rss_mib(), rate(first)),
        engine: first,
        reference: None,
    });
    let n = times.len();
    let warm = median(times);
    rows.push(BenchRow { what: format!("lockstep {ops} ops (ram), median of {n} later runs, ops/s = {:.0}", rate(warm)), engine: warm, reference: None });
    let (t, _) = time(|| {
        for s in 0..seeds {
            let spec = RunSpec::new(1000 + s, 1000, MountConfig::default());
            let r = run_seed(factory, &spec)?;
            if let Some(f) = r.failure {
                return Err(format!("seed {}: {f}", 1000 + s));
            }
        }
        Ok(())
    })?;
    let per_min = seeds as f64 * 60.0 / t.as_secs_f64();
    rows.push(BenchRow { what: format!("{seeds} seeds x 1,000 ops, seeds/min = {per_min:.0}"), engine: t, reference: None });
    Ok(rows)
}

/// The block bitmap's checksum per allocation, at each block size: the
/// kernel's way (set the bit, crc32c the covered bitmap again) against the
/// engine's running checksum (set the bit, fold in what it flipped), both
/// through the engine's `Bitmap`. A group has at most 65,528 blocks
/// without bigalloc, so the checksum covers 8 KiB of a 64 KiB block's
/// bitmap. Rows give ns per allocation; the bits set walk the bitmap with
/// a stride, as allocations spread over a group.
pub fn bench_bitmap_checksum(allocations: u32) -> Vec<BenchRow> {
    use ext4_engine::format::bitmap::{Bitmap, BitmapChecksum};
    let seed = 0x5eed_c5c5;
    let mut rows = Vec::new();
    for kib in [1usize, 4, 16, 64] {
        let bytes = kib << 10;
        let items = ((bytes * 8) as u32).min(65_528);
        let bit = |i: u32| ((u64::from(i) * 7919) % u64::from(items)) as usize;
        let time = |how| {
            let mut bm = Bitmap::from_bytes(vec![0; bytes]);
            bm.track_checksum(seed, items, how);
            let t = Instant::now();
            let mut sink = 0u32;
            for i in 0..allocations {
                bm.set(bit(i));
                sink ^= bm.checksum(seed, items);
            }
            std::hint::black_box(sink);
            (t.elapsed(), bm)
        };
        let (full_time, full) = time(BitmapChecksum::Recompute);
        let (running_time, running) = time(BitmapChecksum::Running);
        assert_eq!(full.checksum(seed, items), running.checksum(seed, items), "both ways agree");
        let per = |d: Duration| d.as_nanos() as f64 / f64::from(allocations);
        rows.push(BenchRow {
            what: format!("{kib:>2} KiB blocks ({} B covered): {:.0} ns -> {:.0} ns per allocation", items / 8, per(full_time), per(running_time)),
            engine: running_time,
            reference: Some(("full crc32c".into(), full_time)),
        });
    }
    rows
}

pub fn default_work_dir() -> PathBuf {
    std::env::temp_dir().join("ext4sim-bench")
}
