//! The engine on the simulated disk, as the lockstep runner's [`Target`].
//!
//! Every full check unmounts (writing everything back), runs the engine's own
//! fsck on the image, and mounts again, so persistence across a remount is
//! tested as often as consistency. A crash drops the engine's caches, lets the
//! disk lose or tear what was not flushed, and mounts what is left.

use ext4_engine::check::check;
use ext4_engine::device::BlockDevice;
use ext4_engine::fs::locks::{Lock, LockHolder};
use ext4_engine::fs::{Ext4, SecondHalf};
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::{DirEntry, Errno, FallocFlags, FiemapExtent, FileSystem, MountConfig, Op, Stat};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::disk::clock::DisplayNs;
use crate::disk::{CrashPolicy, DiskProfile, FaultConfig, SimDisk};
use crate::driver::{RunSpec, TargetFactory};
use crate::lockstep::Target;

/// Simulated disk size. Sparse: only written chunks take memory. Default: 8 GiB.
pub const DISK_BYTES: u64 = 8 << 30;
/// Below this many free blocks an ENOSPC the model did not expect is taken
/// as metadata the model does not count, not as a divergence.
pub const NEARLY_FULL_BLOCKS: u64 = 512;
/// Every timestamp mkfs and the engine write: a fixed instant, never the clock.
pub const SIM_EPOCH_SECS: i64 = 1_700_000_000;

pub struct EngineTarget {
    /// None only after a remount failed; every op then reports EIO.
    fs: Option<Ext4<SimDisk>>,
    config: MountConfig,
    crash_policy: CrashPolicy,
    /// The faults the run asked for; switched off while the runner judges.
    faults: FaultConfig,
    /// The runner holds faults off.
    held: bool,
    /// Free data blocks and inodes right after mkfs and the first mount.
    start_space: (u64, u64),
    /// Run on the engine after every mount (see [`EngineTarget::after_mount`]).
    after_mount: Option<fn(&mut Ext4<SimDisk>)>,
}

impl EngineTarget {
    /// The mounted engine, for tests that reach inside (e.g. to inject a bug).
    pub fn engine_mut(&mut self) -> Option<&mut Ext4<SimDisk>> {
        self.fs.as_mut()
    }

    /// Runs `hook` on the engine now and after every later mount (a crash,
    /// a check, a fault remount), e.g. to keep a test's injected bug in.
    pub fn after_mount(&mut self, hook: fn(&mut Ext4<SimDisk>)) {
        self.after_mount = Some(hook);
        if let Some(fs) = self.fs.as_mut() {
            hook(fs);
        }
    }

    /// Mounts `dev` as the target's filesystem.
    fn mount(&mut self, dev: SimDisk, what: &str) -> Result<(), String> {
        let mut fs = Ext4::mount(dev, &self.config).map_err(|e| format!("{what}: {e}"))?;
        if let Some(hook) = self.after_mount {
            hook(&mut fs);
        }
        self.fs = Some(fs);
        Ok(())
    }

    fn fs(&mut self) -> Result<&mut Ext4<SimDisk>, Errno> {
        self.fs.as_mut().ok_or(Errno::EIO)
    }

    fn disk(&self) -> Option<&SimDisk> {
        self.fs.as_ref().map(|f| f.device())
    }

    /// Unmounts, runs `f` on the bare disk, and mounts again, with faults
    /// held off throughout: checks judge the filesystem, not the disk.
    fn with_unmounted<R>(&mut self, f: impl FnOnce(SimDisk) -> (SimDisk, R)) -> Result<R, String> {
        let held = self.held;
        self.hold_faults(true);
        let out = (|| {
            let fs = self.fs.take().ok_or("filesystem is not mounted")?;
            let dev = fs.unmount().map_err(|e| format!("unmount: {e}"))?;
            let (dev, out) = f(dev);
            self.mount(dev, "mount")?;
            Ok(out)
        })();
        self.hold_faults(held);
        out
    }
}

/// Stores a disk's durable contents as a sparse image file.
pub fn write_sparse_image(disk: &SimDisk, path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.set_len(DISK_BYTES).map_err(|e| format!("{}: {e}", path.display()))?;
    for (offset, bytes) in disk.durable_extents() {
        file.write_all_at(bytes, offset).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    file.sync_all().map_err(|e| format!("{}: {e}", path.display()))
}

/// Builds the disk and the filesystem for a spec.
pub fn make_engine(spec: &RunSpec) -> Result<EngineTarget, String> {
    let profile = match DiskProfile::builtin(&spec.profile) {
        Some(p) => p,
        None => {
            let text = std::fs::read_to_string(&spec.profile).map_err(|e| format!("profile `{}`: not built in, and {e}", spec.profile))?;
            DiskProfile::parse(&text).map_err(|e| format!("profile `{}`: {e}", spec.profile))?
        }
    };
    let faults = crate::faults::parse_faults(&spec.faults)?;
    let mut disk = SimDisk::new(spec.disk_bytes, profile, spec.seed, FaultConfig::NONE).map_err(|e| e.to_string())?;
    let mut ids = ChaCha8Rng::seed_from_u64(spec.seed);
    ids.set_stream(0x0069_6473); // "ids"
    let mut uuid: [u8; 16] = ids.random();
    uuid[0] |= 1; // never all zero
    let opts = MkfsOptions::for_mount(&spec.mount, spec.disk_bytes, uuid, ids.random(), SIM_EPOCH_SECS);
    mkfs(&mut disk, &opts).map_err(|e| format!("mkfs: {e}"))?;
    disk.flush().map_err(|e| format!("flush after mkfs: {e}"))?;
    let mut fs = Ext4::mount(disk, &spec.mount).map_err(|e| format!("mount: {e}"))?;
    // Faults start after mkfs and the first mount: they test the running filesystem.
    fs.device_mut().set_faults(faults).map_err(|e| e.to_string())?;
    let start_space = fs.free_space();
    Ok(EngineTarget { fs: Some(fs), config: spec.mount, crash_policy: CrashPolicy::default(), faults, held: false, start_space, after_mount: None })
}

/// Makes [`EngineTarget`]s; what `ext4sim` runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineFactory;

impl TargetFactory for EngineFactory {
    type Target = EngineTarget;
    fn make(&self, spec: &RunSpec) -> Result<EngineTarget, String> {
        make_engine(spec)
    }
}

impl FileSystem for EngineTarget {
    fn create(&mut self, p: &str, perm: u16) -> Result<(), Errno> { self.fs()?.create(p, perm) }
    fn mkdir(&mut self, p: &str, perm: u16) -> Result<(), Errno> { self.fs()?.mkdir(p, perm) }
    fn unlink(&mut self, p: &str) -> Result<(), Errno> { self.fs()?.unlink(p) }
    fn rmdir(&mut self, p: &str) -> Result<(), Errno> { self.fs()?.rmdir(p) }
    fn rename(&mut self, a: &str, b: &str) -> Result<(), Errno> { self.fs()?.rename(a, b) }
    fn link(&mut self, a: &str, b: &str) -> Result<(), Errno> { self.fs()?.link(a, b) }
    fn symlink(&mut self, t: &str, p: &str) -> Result<(), Errno> { self.fs()?.symlink(t, p) }
    fn readlink(&mut self, p: &str) -> Result<String, Errno> { self.fs()?.readlink(p) }
    fn readdir(&mut self, p: &str) -> Result<Vec<DirEntry>, Errno> { self.fs()?.readdir(p) }
    fn stat(&mut self, p: &str) -> Result<Stat, Errno> { self.fs()?.stat(p) }
    fn write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.fs()?.write(p, o, d) }
    fn read(&mut self, p: &str, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.fs()?.read(p, o, l) }
    fn truncate(&mut self, p: &str, s: u64) -> Result<(), Errno> { self.fs()?.truncate(p, s) }
    fn fsync(&mut self, p: &str) -> Result<(), Errno> { self.fs()?.fsync(p) }
    fn fdatasync(&mut self, p: &str) -> Result<(), Errno> { self.fs()?.fdatasync(p) }
    fn sync(&mut self) -> Result<(), Errno> { self.fs()?.sync() }
    fn fallocate(&mut self, p: &str, m: FallocFlags, o: u64, l: u64) -> Result<(), Errno> { self.fs()?.fallocate(p, m, o, l) }
    fn fiemap(&mut self, p: &str, s: bool) -> Result<Vec<FiemapExtent>, Errno> { self.fs()?.fiemap(p, s) }
    fn set_journal_data(&mut self, p: &str, e: bool) -> Result<(), Errno> { self.fs()?.set_journal_data(p, e) }
}

impl Target for EngineTarget {
    fn fsck(&mut self) -> Result<(), String> {
        let problems = self.with_unmounted(|dev| {
            let (dev, report) = check(dev);
            let problems: Vec<String> = report.problems.iter().take(5).map(|p| p.to_string()).collect();
            (dev, (report.is_clean(), problems))
        })?;
        match problems {
            (true, _) => Ok(()),
            (false, list) => Err(list.join("; ")),
        }
    }

    fn crash_and_remount(&mut self, seed: u64) -> Result<(), String> {
        let fs = self.fs.take().ok_or("filesystem is not mounted")?;
        let mut dev = fs.into_device_dropping_caches();
        dev.crash_seeded(&self.crash_policy, seed);
        // Recovery mounts on a healthy disk; faults return as the runner says.
        let _ = dev.set_faults(FaultConfig::NONE);
        self.mount(dev, "mount after crash")?;
        self.hold_faults(self.held);
        Ok(())
    }

    fn export_image(&mut self, path: &std::path::Path) -> Result<(), String> {
        self.with_unmounted(|dev| {
            let written = write_sparse_image(&dev, path);
            (dev, written)
        })?
    }

    fn faults_seen(&self) -> u64 {
        self.disk().map_or(0, |d| d.stats().faults.total())
    }

    fn faults_enabled(&self) -> bool {
        self.faults != FaultConfig::NONE
    }

    fn hold_faults(&mut self, held: bool) {
        self.held = held;
        let faults = if held { FaultConfig::NONE } else { self.faults };
        if let Some(fs) = self.fs.as_mut() {
            // Both configs were validated when the run started.
            let _ = fs.device_mut().set_faults(faults);
        }
    }

    fn remount_after_fault(&mut self) -> Result<(), String> {
        let fs = self.fs.take().ok_or("filesystem is not mounted")?;
        let mut dev = fs.into_device_dropping_caches();
        let _ = dev.set_faults(FaultConfig::NONE);
        // The model adopts what this mount shows as durable: so it must be.
        // Flushing what the device already took is the crash in which its
        // cache survived whole, one the runner's check allows.
        dev.flush().map_err(|e| format!("flush after fault: {e}"))?;
        self.mount(dev, "mount after fault")?;
        self.hold_faults(self.held);
        Ok(())
    }

    fn script_faults(&mut self) {
        if let Some(fs) = self.fs.as_mut() {
            fs.device_mut().script_faults();
        }
    }

    fn begin_op(&mut self, armed: Vec<crate::disk::FaultEvent>) {
        if let Some(fs) = self.fs.as_mut() {
            fs.device_mut().begin_op(armed);
        }
    }

    fn take_fired_faults(&mut self) -> Vec<crate::disk::FaultEvent> {
        self.fs.as_mut().map(|fs| fs.device_mut().take_fired_faults()).unwrap_or_default()
    }

    fn splits(&self, op: &Op) -> bool {
        op.has_two_halves()
    }

    fn begin_split(&mut self, op: &Op) -> Result<SecondHalf, Errno> {
        self.fs()?.begin_split(op).unwrap_or(Err(Errno::EINVAL))
    }

    fn finish_split(&mut self, half: SecondHalf) -> Result<(), Errno> {
        self.fs()?.finish_split(half)
    }

    fn waits_for(&self, op: &Op) -> Option<Lock> {
        self.fs.as_ref().and_then(|fs| fs.waits_for(op))
    }

    fn locks_held(&self) -> Vec<(Lock, LockHolder)> {
        self.fs.as_ref().map(|fs| fs.locks_held()).unwrap_or_default()
    }

    fn space_limits(&self) -> ext4_model::Limits {
        let (blocks, inodes) = self.start_space;
        ext4_model::Limits { data_blocks: Some(blocks), inodes: Some(inodes) }
    }

    fn nearly_full(&self) -> bool {
        let Some(fs) = self.fs.as_ref() else { return false };
        let (blocks, inodes) = fs.free_space();
        // Directory and extent-tree blocks come out of the same pool as data;
        // the model does not count them, so it may see room the engine lacks.
        blocks < NEARLY_FULL_BLOCKS.max(self.start_space.0 / 16) || inodes == 0
    }

    fn image_hash(&mut self) -> u64 {
        self.disk().map_or(0, |d| d.image_hash())
    }

    fn report(&mut self) -> Vec<(String, String)> {
        let Some(fs) = self.fs.as_ref() else { return vec![("engine".into(), "not mounted".into())] };
        let disk = fs.device();
        let stats = disk.stats();
        let total = stats.total();
        let mut out = vec![
            ("sim time".to_string(), DisplayNs(stats.elapsed_ns).to_string()),
            ("disk I/O".to_string(), format!("{} reads / {} writes, {} / {} bytes, {} flushes, {} seeks", total.reads, total.writes, total.read_bytes, total.write_bytes, stats.flushes, stats.seeks)),
            ("store".to_string(), format!("{} MiB of backing store touched", disk.touched_bytes() >> 20)),
        ];
        for (name, class) in [("data", &stats.data), ("metadata", &stats.metadata), ("journal", &stats.journal)] {
            let (read_mib, write_mib) = (class.read_bytes >> 20, class.write_bytes >> 20);
            let line = format!("{} reads / {} writes, {read_mib} / {write_mib} MiB, busy {}", class.reads, class.writes, DisplayNs(class.busy_ns));
            out.push((name.to_string(), line));
        }
        let mean_seek_mib = (stats.seek_distance_bytes / stats.seeks.max(1)) >> 20;
        out.push(("seeks".to_string(), format!("{} of {mean_seek_mib} MiB on average, positioning {}", stats.seeks, DisplayNs(stats.positioning_ns))));
        match self.with_unmounted(|mut dev| {
            let layout = crate::layout::image_layout(&mut dev);
            (dev, layout)
        }) {
            Ok(Ok(layout)) => {
                for line in layout.to_string().lines() {
                    if let Some((k, v)) = line.split_once(": ") {
                        out.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
            }
            Ok(Err(e)) | Err(e) => out.push(("layout".into(), format!("unavailable: {e}"))),
        }
        out
    }
}
