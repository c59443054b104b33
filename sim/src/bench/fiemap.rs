//! `ext4sim bench --what fiemap`: the 2020 fiemap regression study. A file
//! fallocated at 4 KiB blocks with every other block punched out (1.3
//! million extents at 10 GiB), then FIEMAP of the whole file, cold (after
//! caches are dropped: the extent tree comes back from the disk) and warm,
//! on the engine and, in the same invocation, on the host kernel (loop
//! mount, root only). In 2020 the kernel took 31.7 s cold and 3.4 s warm
//! with its extent status cache, over 15 minutes warm without it.
//!
//! - The engine runs on a simulated hdd-7200 disk: its cold pass has a
//!   simulated I/O time beside the host time. "Cold" is a fresh mount of
//!   the same disk, which is what dropping every cache leaves.
//! - Memory per extent is the engine's heap growth over a cold FIEMAP
//!   (the extent status entries its lookups cached and the tree blocks
//!   left in its buffer cache; no whole mapping is loaded for lookups),
//!   from glibc's allocator statistics.
//! - The engine also maps the file warm without its extent status cache,
//!   every extent looked up from the root of the on-disk tree
//!   ([`Ext4::set_uncached_fiemap`]): the regression's uncached path.
//! - Three sizes show how the cost grows with the extent count.

use std::path::Path;
use std::time::{Duration, Instant};

use ext4_engine::device::BlockDevice;
use ext4_engine::fs::Ext4;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::op::FallocFlags;
use ext4_model::{FileSystem, FiemapRequest, MountConfig};

use super::median;
use crate::disk::{DiskProfile, FaultConfig, SimDisk};

/// Extent counts measured; the last is the 2020 study's file.
pub const SIZES: [u64; 3] = [100_000, 300_000, 1_300_000];
const BLOCK: u64 = 4096;
/// Holds the largest file (10.6 GB) and its extent tree.
const DISK_BYTES: u64 = 16 << 30;
const WARM_RUNS: usize = 3;
const FILE: &str = "/punched";

/// One side's figures at one size.
#[derive(Clone, Debug)]
pub struct Side {
    pub extents: usize,
    pub punch: Duration,
    pub cold: Duration,
    /// Simulated I/O time of the cold pass (the engine only).
    pub cold_io: Option<Duration>,
    /// Median of [`WARM_RUNS`].
    pub warm: Duration,
    /// Warm, with every extent looked up in the on-disk tree (the engine's
    /// uncached mode; median of [`WARM_RUNS`]).
    pub uncached: Option<Duration>,
    pub bytes_per_extent: Option<f64>,
}

/// Fallocates `2 * extents` blocks and punches every other one out.
fn punch_file(fs: &mut dyn FileSystem, extents: u64) -> Result<Duration, String> {
    fs.create(FILE, 0o644).map_err(|e| format!("create: {e:?}"))?;
    fs.fallocate(FILE, FallocFlags::ALLOCATE, 0, 2 * extents * BLOCK).map_err(|e| format!("fallocate: {e:?}"))?;
    let punch = FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE);
    let t = Instant::now();
    for i in 0..extents {
        fs.fallocate(FILE, punch, (2 * i + 1) * BLOCK, BLOCK).map_err(|e| format!("punch {i}: {e:?}"))?;
    }
    let took = t.elapsed();
    fs.sync().map_err(|e| format!("sync: {e:?}"))?;
    Ok(took)
}

/// One whole-file FIEMAP: its host time and the extents it reported.
fn fiemap(fs: &mut dyn FileSystem, want: u64) -> Result<(Duration, usize), String> {
    let t = Instant::now();
    let map = fs.fiemap(FILE, FiemapRequest::whole(0)).map_err(|e| format!("fiemap: {e:?}"))?;
    let took = t.elapsed();
    if map.len() as u64 != want {
        return Err(format!("fiemap reported {} extents, the file has {want}", map.len()));
    }
    Ok((took, map.len()))
}

fn warm(fs: &mut dyn FileSystem, want: u64) -> Result<Duration, String> {
    let mut runs = Vec::new();
    for _ in 0..WARM_RUNS {
        runs.push(fiemap(fs, want)?.0);
    }
    Ok(median(runs))
}

/// Bytes the process's heap holds (glibc), when it can tell.
fn heap_in_use() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 only reads the allocator's counters.
        let info = unsafe { libc::mallinfo2() };
        Some(info.uordblks as u64)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// The engine's side on a simulated hdd-7200 disk.
pub fn engine(extents: u64) -> Result<Side, String> {
    let profile = DiskProfile::builtin("hdd-7200").ok_or("no hdd-7200 profile")?;
    let mut disk = SimDisk::new(DISK_BYTES, profile, 1, FaultConfig::NONE).map_err(|e| format!("disk: {e}"))?;
    let mount = MountConfig::default();
    let opts = MkfsOptions::for_mount(&mount, DISK_BYTES, [0x19; 16], [0x20; 16], crate::run::spec::SIM_EPOCH_SECS);
    mkfs(&mut disk, &opts).map_err(|e| format!("mkfs: {e}"))?;
    disk.flush().map_err(|e| format!("flush: {e}"))?;
    let mut fs = Ext4::mount(disk, &mount).map_err(|e| format!("mount: {e}"))?;
    let punch = punch_file(&mut fs, extents)?;
    let disk = fs.unmount().map_err(|e| format!("unmount: {e}"))?;
    let mut fs = Ext4::mount(disk, &mount).map_err(|e| format!("mount again: {e}"))?;
    let (heap, io) = (heap_in_use(), fs.device().now_ns());
    let (cold, n) = fiemap(&mut fs, extents)?;
    let cold_io = Duration::from_nanos(fs.device().now_ns() - io);
    let bytes_per_extent = heap.zip(heap_in_use()).map(|(before, after)| after.saturating_sub(before) as f64 / n as f64);
    let cached = warm(&mut fs, extents)?;
    fs.set_uncached_fiemap(true);
    let uncached = warm(&mut fs, extents)?;
    drop(fs);
    Ok(Side { extents: n, punch, cold, cold_io: Some(cold_io), warm: cached, uncached: Some(uncached), bytes_per_extent })
}

/// The host kernel's side: a sparse mke2fs image loop-mounted under
/// `scratch`; cold after `drop_caches`. Err when it cannot run here.
pub fn kernel(extents: u64, scratch: &Path) -> Result<Side, String> {
    use ext4_testkit::loop_mount::{is_root, LoopMount};
    if !is_root() {
        return Err("loop-mounting needs root".into());
    }
    let mk = ext4_testkit::e2fsprogs::tool("mke2fs").ok_or("mke2fs not installed")?;
    std::fs::create_dir_all(scratch.join("mnt")).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let img = scratch.join("fiemap.img");
    let _ = std::fs::remove_file(&img);
    std::fs::File::create(&img).and_then(|f| f.set_len(DISK_BYTES)).map_err(|e| format!("{}: {e}", img.display()))?;
    let out = std::process::Command::new(&mk).args(["-q", "-t", "ext4", "-F", "-b", "4096"]).arg(&img).output().map_err(|e| format!("mke2fs: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&img);
        return Err(format!("mke2fs: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let result = (|| {
        let guard = LoopMount::mount(&img, &scratch.join("mnt"), "")?;
        let mut fs = crate::oracle::syscalls::SyscallFs::new(scratch.join("mnt"));
        let punch = punch_file(&mut fs, extents)?;
        std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| format!("drop_caches: {e}"))?;
        let (cold, n) = fiemap(&mut fs, extents)?;
        let warm = warm(&mut fs, extents)?;
        drop(fs);
        drop(guard);
        Ok(Side { extents: n, punch, cold, cold_io: None, warm, uncached: None, bytes_per_extent: None })
    })();
    let _ = std::fs::remove_file(&img);
    result
}

/// The table: per size, both sides and the engine/kernel ratios.
pub fn render(rows: &[(Side, Result<Side, String>)]) -> String {
    let s = |d: Duration| format!("{:.3} s", d.as_secs_f64());
    let mut out = String::new();
    for (e, k) in rows {
        let mem = e.bytes_per_extent.map_or("?".to_string(), |b| format!("{b:.0} B"));
        let io = e.cold_io.map_or(String::new(), |d| format!(" (simulated I/O {})", s(d)));
        let uncached = e.uncached.map_or(String::new(), |d| format!("  uncached warm {} ({:.0}x)", s(d), d.as_secs_f64() / e.warm.as_secs_f64().max(1e-9)));
        out += &format!(
            "  {:>9} extents  engine: punch {}  cold {}{}  warm {}{}  memory/extent {}\n",
            e.extents,
            s(e.punch),
            s(e.cold),
            io,
            s(e.warm),
            uncached,
            mem
        );
        match k {
            Ok(k) => {
                let r = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
                out += &format!("  {:>9}          kernel: punch {}  cold {}  warm {}\n", "", s(k.punch), s(k.cold), s(k.warm));
                out += &format!(
                    "  {:>9}          engine/kernel: punch {:.2}x  cold {:.2}x  warm {:.2}x\n",
                    "",
                    r(e.punch, k.punch),
                    r(e.cold, k.cold),
                    r(e.warm, k.warm)
                );
            }
            Err(why) => out += &format!("  {:>9}          kernel: not run ({why})\n", ""),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's side maps every punched-out extent, and its cold pass
    /// reads the extent tree from the simulated disk.
    #[test]
    fn the_engine_side_maps_every_extent_and_reads_its_tree_cold() {
        let side = engine(5000).unwrap();
        assert_eq!(side.extents, 5000);
        assert!(side.cold_io.is_some_and(|d| d > Duration::ZERO), "a cold map reads tree blocks");
        assert!(side.uncached.is_some(), "the uncached pass ran (and mapped every extent)");
        if let Some(b) = side.bytes_per_extent {
            assert!(b > 0.0, "the map it loaded takes memory");
        }
        let table = render(&[(side, Err("not run here".into()))]);
        assert!(table.contains("5000 extents") && table.contains("not run here"), "{table}");
    }
}
