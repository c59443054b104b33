//! The engine on the simulated disk, as the lockstep runner's [`Target`].
//!
//! A full check observes without perturbing: a shadow of the mount (its whole
//! in-memory state) unmounts onto a shadow of the disk, writing everything
//! back there (dirty folios included), and the engine's own fsck reads what
//! that wrote; the checked image is then mounted with no page cache and read
//! back, so every byte compared comes from the device. The mount,
//! its disk, clock and random streams go on as if nothing had looked, so the
//! workload's simulated time and final image do not depend on how often the
//! harness checks. Persistence across a remount is tested by crashes, fault
//! remounts and the mount after every trace. A crash drops the engine's
//! caches, lets the disk lose or tear what was not flushed, and mounts what
//! is left.

use ext4_engine::check::check;
use ext4_engine::device::BlockDevice;
use ext4_engine::fs::locks::{Lock, LockHolder};
use ext4_engine::fs::{Ext4, FlusherStep, OrphanStats, SecondHalf};
use ext4_engine::image::Image;
use ext4_engine::layout::LayoutReport;
use ext4_engine::memory::BoundedFolios;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::pattern::pattern_into;
use ext4_model::{DirEntry, Errno, FallocFlags, FiemapExtent, FiemapRequest, FileSystem, MountConfig, Op, Outcome, Stat};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::disk::shadow::ShadowDisk;
use crate::disk::{CrashPolicy, SimDisk};
use crate::figure::Figure;
use crate::run::spec::{RunSpec, SIM_EPOCH_SECS};
use crate::target::{FaultPlane, FlusherDid, ReadBack, Target, TargetFactory};

/// Below this many free blocks an ENOSPC the model did not expect is taken
/// as metadata the model does not count, not as a divergence.
pub const NEARLY_FULL_BLOCKS: u64 = 512;

/// Pattern buffers up to this size are kept for the next write.
const PATTERN_BUF_KEPT: usize = 16 << 20;

pub struct EngineTarget {
    /// None only after a remount failed; every op then reports EIO.
    fs: Option<Ext4<SimDisk>>,
    config: MountConfig,
    crash_policy: CrashPolicy,
    /// Free data blocks and inodes right after mkfs and the first mount.
    start_space: (u64, u64),
    /// Run on the engine after every mount (see [`EngineTarget::after_mount`]).
    after_mount: Option<fn(&mut Ext4<SimDisk>)>,
    /// Simulated ns the checks' shadows spent, on their own clocks.
    check_ns: u64,
    /// The orphan list's work in mounts that have ended.
    past_orphans: OrphanStats,
    /// Bytes of the current pattern write, kept between ops at the largest
    /// size seen: a fresh buffer per write was zeroed, then overwritten,
    /// and large ones were fresh pages from the host every time.
    pattern_buf: Vec<u8>,
    /// (percent others hold, seed) of fragmented memory; None: the bound.
    fragment: Option<(u8, u64)>,
    /// The runner's scheduler runs the flusher ([`Target::run_flusher_as_task`]).
    flusher_task: bool,
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
        let mut fs = mount_engine(dev, &self.config, self.fragment).map_err(|e| format!("{what}: {e}"))?;
        if let Some(hook) = self.after_mount {
            hook(&mut fs);
        }
        if self.flusher_task {
            fs.run_flusher_as_task();
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

    /// Unmounts a shadow of the mount onto a shadow of its disk and runs `f`
    /// on what that wrote; the mount and its disk stay as they were. Faults
    /// do not reach a shadow: checks judge the filesystem, not the disk.
    /// `f` hands the shadow disk back when it can, so its time is counted.
    fn with_shadow<R>(&mut self, f: impl FnOnce(ShadowDisk<'_>) -> (Option<ShadowDisk<'_>>, R)) -> Result<R, String> {
        let fs = self.fs.as_ref().ok_or("filesystem is not mounted")?;
        let shadow = fs.shadow(fs.device().shadow());
        let dev = shadow.unmount().map_err(|e| format!("unmount of a shadow: {e}"))?;
        let mut spent = dev.elapsed_ns();
        let (dev, out) = f(dev);
        spent = dev.map_or(spent, |d| d.elapsed_ns());
        self.check_ns = self.check_ns.saturating_add(spent);
        Ok(out)
    }

    /// Unmounts, runs `f` on the bare disk, and mounts again, with faults
    /// held off throughout: checks judge the filesystem, not the disk.
    fn with_unmounted<R>(&mut self, f: impl FnOnce(SimDisk) -> (SimDisk, R)) -> Result<R, String> {
        let mut fs = self.fs.take().ok_or("filesystem is not mounted")?;
        let held = fs.device().faults_held();
        fs.device_mut().hold_faults(true);
        let dev = fs.unmount().map_err(|e| format!("unmount: {e}"))?;
        let (dev, out) = f(dev);
        self.mount(dev, "mount")?;
        if let Some(fs) = self.fs.as_mut() {
            fs.device_mut().hold_faults(held);
        }
        Ok(out)
    }
}

/// The run summary's view of the layout report.
fn layout_figures(layout: &LayoutReport) -> Vec<(String, Figure)> {
    let named = |items: Vec<(&str, Figure)>| Figure::Group(items.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
    let files = layout.files_with_data().count();
    let mean_hundredths = (layout.file_extents() * 100 + files / 2).checked_div(files).unwrap_or(0);
    vec![
        (
            "groups".into(),
            named(vec![
                ("in all", Figure::Count(layout.groups.into())),
                ("per flex", Figure::Count(layout.flex_size.into())),
                ("never touched", Figure::Count(layout.untouched_groups.into())),
            ]),
        ),
        ("data blocks by group".into(), Figure::PerGroup(layout.data_blocks_per_group.clone())),
        ("dirs by group".into(), Figure::PerGroup(layout.dirs_per_group.clone())),
        (
            "files".into(),
            named(vec![
                ("with data", Figure::Count(files as u64)),
                ("extents", Figure::Count(layout.file_extents() as u64)),
                ("fragmented", Figure::Count(layout.fragmented_files() as u64)),
                ("extents/file", Figure::Hundredths(mean_hundredths as u64)),
            ]),
        ),
    ]
}

/// Stores a disk's durable contents as a sparse image file.
pub fn write_sparse_image(disk: &SimDisk, path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    file.set_len(disk.size_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    for (offset, bytes) in disk.durable_extents() {
        file.write_all_at(bytes, offset).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    file.sync_all().map_err(|e| format!("{}: {e}", path.display()))
}

/// Builds the disk and the filesystem for a spec.
pub fn make_engine(spec: &RunSpec) -> Result<EngineTarget, String> {
    let mut disk = SimDisk::new(spec.disk_bytes, spec.profile.profile.clone(), spec.seed, crate::disk::FaultConfig::NONE).map_err(|e| e.to_string())?;
    match &spec.mkfs {
        Some(args) => crate::mke2fs::image::format_with_mke2fs(&mut disk, args, &spec.mount, spec.seed)?,
        None => {
            let mut ids = ChaCha8Rng::seed_from_u64(spec.seed);
            ids.set_stream(0x0069_6473); // "ids"
            let mut uuid: [u8; 16] = ids.random();
            uuid[0] |= 1; // never all zero
            let opts = MkfsOptions::for_mount(&spec.mount, spec.disk_bytes, uuid, ids.random(), SIM_EPOCH_SECS);
            mkfs(&mut disk, &opts).map_err(|e| format!("mkfs: {e}"))?;
            disk.flush().map_err(|e| format!("flush after mkfs: {e}"))?;
        }
    }
    let fragment = (spec.fragment > 0).then_some((spec.fragment, spec.seed));
    let mut fs = mount_engine(disk, &spec.mount, fragment).map_err(|e| format!("mount: {e}"))?;
    // Faults start after mkfs and the first mount: they test the running filesystem.
    fs.device_mut().set_faults(spec.faults).map_err(|e| e.to_string())?;
    let start_space = fs.free_space();
    Ok(EngineTarget { fs: Some(fs), config: spec.mount, crash_policy: CrashPolicy::default(), start_space, after_mount: None, check_ns: 0, past_orphans: OrphanStats::default(), pattern_buf: Vec::new(), fragment, flusher_task: false })
}

/// A mount whose page cache takes folios from the plain bound, or from
/// fragmented buddy memory (every mount of a run seeded alike).
fn mount_engine(disk: SimDisk, mount: &MountConfig, fragment: Option<(u8, u64)>) -> ext4_engine::error::Result<Ext4<SimDisk>> {
    match fragment {
        None => Ext4::mount(disk, mount),
        Some((held, seed)) => {
            let bound = mount.validate().map(|m| m.page_cache_bytes).unwrap_or(0);
            let memory = crate::memory::folios::BuddyFolios::new(mount.page_size, bound, held, seed);
            Ext4::mount_with_memory(disk, mount, Box::new(memory))
        }
    }
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

impl EngineTarget {
    /// Runs `write` on the engine with `pattern(seed, len)`.
    fn with_pattern(&mut self, seed: u64, len: u32, write: impl FnOnce(&mut Ext4<SimDisk>, &[u8]) -> Result<u64, Errno>) -> Result<u64, Errno> {
        let len = len as usize;
        let mut buf = std::mem::take(&mut self.pattern_buf);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        pattern_into(seed, &mut buf[..len]);
        let written = match self.fs() {
            Ok(fs) => write(fs, &buf[..len]),
            Err(e) => Err(e),
        };
        if buf.len() <= PATTERN_BUF_KEPT {
            self.pattern_buf = buf;
        }
        written
    }
}

impl FileSystem for EngineTarget {
    fn create(&mut self, p: &str, perm: u16) -> Result<(), Errno> { self.fs()?.create(p, perm) }
    fn mkdir(&mut self, p: &str, perm: u16) -> Result<(), Errno> { self.fs()?.mkdir(p, perm) }
    fn unlink(&mut self, p: &str) -> Result<(), Errno> { self.fs()?.unlink(p) }
    fn rmdir(&mut self, p: &str) -> Result<(), Errno> { self.fs()?.rmdir(p) }
    fn rename(&mut self, a: &str, b: &str) -> Result<(), Errno> { self.fs()?.rename(a, b) }
    fn renameat2(&mut self, a: &str, b: &str, f: ext4_model::RenameFlags) -> Result<(), Errno> { self.fs()?.renameat2(a, b, f) }
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
    fn fiemap(&mut self, p: &str, r: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> { self.fs()?.fiemap(p, r) }
    fn fiemap_count(&mut self, p: &str, r: FiemapRequest) -> Outcome { self.fs()?.fiemap_count(p, r) }
    fn set_journal_data(&mut self, p: &str, e: bool) -> Result<(), Errno> { self.fs()?.set_journal_data(p, e) }
    fn chattr(&mut self, p: &str, f: ext4_model::ChattrFlag, e: bool) -> Result<(), Errno> { self.fs()?.chattr(p, f, e) }
    fn append(&mut self, p: &str, d: &[u8]) -> Result<u64, Errno> { self.fs()?.append(p, d) }
    fn rewrite(&mut self, p: &str, d: &[u8]) -> Result<u64, Errno> { self.fs()?.rewrite(p, d) }
    fn lseek(&mut self, p: &str, o: u64, w: ext4_model::SeekWhence) -> Result<ext4_model::SeekChoices, Errno> { self.fs()?.lseek(p, o, w) }
    fn open(&mut self, p: &str, s: u8) -> Result<(), Errno> { self.fs()?.open(p, s) }
    fn close(&mut self, s: u8) -> Result<(), Errno> { self.fs()?.close(s) }
    fn fsync_fd(&mut self, s: u8) -> Result<(), Errno> { self.fs()?.fsync_fd(s) }
    fn ftruncate(&mut self, s: u8, n: u64) -> Result<(), Errno> { self.fs()?.ftruncate(s, n) }
    fn pread(&mut self, s: u8, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.fs()?.pread(s, o, l) }
    fn pwrite(&mut self, s: u8, o: u64, d: &[u8]) -> Result<u64, Errno> { self.fs()?.pwrite(s, o, d) }
    fn direct_write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.fs()?.direct_write(p, o, d) }
    fn direct_read(&mut self, p: &str, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.fs()?.direct_read(p, o, l) }
    fn map_write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.fs()?.map_write(p, o, d) }
    fn close_all(&mut self) -> Result<(), Errno> { self.fs()?.close_all() }
    fn write_pattern(&mut self, p: &str, o: u64, l: u32, seed: u64) -> Result<u64, Errno> { self.with_pattern(seed, l, |fs, d| fs.write(p, o, d)) }
    fn append_pattern(&mut self, p: &str, l: u32, seed: u64) -> Result<u64, Errno> { self.with_pattern(seed, l, |fs, d| fs.append(p, d)) }
    fn rewrite_pattern(&mut self, p: &str, l: u32, seed: u64) -> Result<u64, Errno> { self.with_pattern(seed, l, |fs, d| fs.rewrite(p, d)) }
    fn pwrite_pattern(&mut self, s: u8, o: u64, l: u32, seed: u64) -> Result<u64, Errno> { self.with_pattern(seed, l, |fs, d| fs.pwrite(s, o, d)) }
    fn direct_write_pattern(&mut self, p: &str, o: u64, l: u32, seed: u64) -> Result<u64, Errno> { self.with_pattern(seed, l, |fs, d| fs.direct_write(p, o, d)) }
    fn map_write_pattern(&mut self, p: &str, o: u64, l: u32, seed: u64) -> Result<u64, Errno> { self.with_pattern(seed, l, |fs, d| fs.map_write(p, o, d)) }
}

impl Target for EngineTarget {
    type Lock = Lock;
    type Holder = LockHolder;
    type SecondHalf = SecondHalf;

    fn fsck(&mut self, read_back: ReadBack<'_>) -> Result<(), String> {
        let config = self.config;
        self.with_shadow(|dev| {
            let (dev, report) = check(dev);
            if !report.is_clean() {
                let problems: Vec<String> = report.problems.iter().take(5).map(|p| p.to_string()).collect();
                return (Some(dev), Err(problems.join("; ")));
            }
            // No page cache on the checked mount: every byte read back
            // comes from the device, straight into the answer.
            let no_cache = Box::new(BoundedFolios::new(config.page_size, 0));
            match Ext4::mount_with_memory(dev, &config, no_cache) {
                Ok(mut cold) => {
                    let read = read_back(&mut cold);
                    (Some(cold.into_device_dropping_caches()), read)
                }
                Err(e) => (None, Err(format!("mount of the checked image: {e}"))),
            }
        })?
    }

    fn crash_and_remount(&mut self, seed: u64) -> Result<(), String> {
        let fs = self.fs.take().ok_or("filesystem is not mounted")?;
        self.past_orphans += fs.orphan_stats();
        let mut dev = fs.into_device_dropping_caches();
        dev.crash_seeded(&self.crash_policy, seed);
        self.mount(dev, "mount after crash")
    }

    fn export_image(&mut self, path: &std::path::Path) -> Result<(), String> {
        self.with_unmounted(|dev| {
            let written = write_sparse_image(&dev, path);
            (dev, written)
        })?
    }

    fn now_ns(&self) -> u64 {
        self.disk().map_or(0, |d| d.stats().elapsed_ns)
    }

    fn check_ns(&self) -> u64 {
        self.check_ns
    }

    fn faults(&mut self) -> Option<&mut dyn FaultPlane> {
        self.fs.as_mut().map(|fs| fs.device_mut() as &mut dyn FaultPlane)
    }

    fn remount_after_fault(&mut self) -> Result<(), String> {
        let fs = self.fs.take().ok_or("filesystem is not mounted")?;
        self.past_orphans += fs.orphan_stats();
        let mut dev = fs.into_device_dropping_caches();
        // The model adopts what this mount shows as durable: so it must be.
        // Flushing what the device already took is the crash in which its
        // cache survived whole, one the runner's check allows.
        dev.flush().map_err(|e| format!("flush after fault: {e}"))?;
        self.mount(dev, "mount after fault")
    }

    fn forget_harness_reads(&mut self) {
        if let Some(fs) = self.fs.as_mut() {
            fs.drop_clean_folios();
        }
    }

    fn take_livelock(&mut self) -> Option<String> {
        self.fs.as_mut().and_then(|fs| fs.take_livelock()).map(|l| l.to_string())
    }

    fn take_out_of_memory(&mut self) -> Option<(u64, String)> {
        self.fs.as_mut().and_then(|fs| fs.take_out_of_memory()).map(|o| (o.done, o.what))
    }

    fn block_states(&mut self, path: &str, blocks: std::ops::Range<u64>) -> Option<ext4_model::BlockStates> {
        self.fs.as_mut()?.block_states(path, blocks)
    }

    fn explain_last_error(&mut self) -> Option<String> {
        ext4_engine::fs::take_last_error().map(|e| e.to_string())
    }

    fn splits(&self, op: &Op) -> bool {
        op.has_two_halves()
    }

    fn begin_split(&mut self, op: &Op) -> Result<SecondHalf, Errno> {
        self.fs()?.begin_split(op).unwrap_or(Err(Errno::EINVAL))
    }

    fn finish_split(&mut self, half: SecondHalf) -> Outcome {
        self.fs()?.finish_split(half)
    }

    fn has_part(&self, half: &SecondHalf) -> bool {
        match half {
            SecondHalf::Write(w) => w.has_more(),
            SecondHalf::Truncate(t) => t.has_more(),
            SecondHalf::Fallocate(f) => f.has_more(),
            SecondHalf::DirectWrite(d) => d.has_more(),
            SecondHalf::DirectRead(d) => d.has_more(),
            SecondHalf::Read(r) => r.has_more(),
            _ => false,
        }
    }

    fn truncate_part(&mut self, half: &mut SecondHalf) -> Option<(Option<u64>, Result<(), Errno>)> {
        let SecondHalf::Truncate(t) = half else { return None };
        let ran = self.fs.as_mut()?.truncate_part(t)?;
        Some((ran.freed_from, ran.got))
    }

    fn fallocate_part(&mut self, half: &mut SecondHalf) -> Option<(Option<u64>, Result<(), Errno>)> {
        let SecondHalf::Fallocate(f) = half else { return None };
        let ran = self.fs.as_mut()?.fallocate_part(f)?;
        Some((ran.at, ran.got))
    }

    fn direct_io_part(&mut self, half: &mut SecondHalf) -> Option<Result<(), Errno>> {
        match half {
            SecondHalf::DirectWrite(d) => self.fs.as_mut()?.direct_write_part(d),
            SecondHalf::DirectRead(d) => self.fs.as_mut()?.direct_read_part(d),
            _ => None,
        }
    }

    fn write_part(&mut self, half: &mut SecondHalf) -> Option<(std::ops::Range<u64>, Result<u64, Errno>)> {
        let SecondHalf::Write(w) = half else { return None };
        let ran = self.fs.as_mut()?.write_part(w)?;
        Some((ran.range, ran.got))
    }

    fn read_part(&mut self, half: &mut SecondHalf) -> Option<crate::target::ReadPart> {
        let SecondHalf::Read(r) = half else { return None };
        let ran = self.fs.as_mut()?.read_part(r)?;
        Some((ran.range, ran.got))
    }

    fn finish_waits_for(&mut self, half: &SecondHalf) -> Option<Lock> {
        self.fs.as_mut().and_then(|fs| fs.finish_waits_for(half))
    }

    fn let_go_of_stale_locks(&mut self, half: &mut SecondHalf) -> bool {
        self.fs.as_mut().is_some_and(|fs| fs.let_go_of_stale_locks(half))
    }

    fn holder(half: &SecondHalf) -> Option<LockHolder> {
        half.holder()
    }

    fn waits_for(&mut self, op: &Op) -> Option<Lock> {
        self.fs.as_mut().and_then(|fs| fs.waits_for(op))
    }

    fn sleeps_holding_first_locks(&mut self, op: &Op) -> bool {
        self.fs.as_mut().is_some_and(|fs| fs.sleeps_holding_first_locks(op))
    }

    fn lock_violations(&mut self) -> Vec<String> {
        self.fs.as_mut().map(|fs| fs.lock_violations()).unwrap_or_default()
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

    fn memory_low(&self) -> bool {
        self.fs.as_ref().is_some_and(|fs| fs.memory_low())
    }
    fn reclaim(&mut self) -> Result<(), String> {
        match self.fs.as_mut() {
            Some(fs) => fs.kswapd().map(|_| ()).map_err(|e| format!("kswapd: {e}")),
            None => Ok(()),
        }
    }
    fn run_flusher_as_task(&mut self) {
        self.flusher_task = true;
        if let Some(fs) = self.fs.as_mut() {
            fs.run_flusher_as_task();
        }
    }
    fn flusher_runnable(&self) -> bool {
        self.fs.as_ref().is_some_and(|fs| fs.flusher_runnable())
    }
    fn flusher_waits_for(&mut self) -> Option<Lock> {
        self.fs.as_ref().and_then(|fs| fs.flusher_waits_for())
    }
    fn flusher_holder(&self) -> Option<LockHolder> {
        self.fs.as_ref().and_then(|fs| fs.flusher_holder())
    }
    fn flusher_step(&mut self) -> Result<FlusherDid, String> {
        let Some(fs) = self.fs.as_mut() else { return Ok(FlusherDid::Idle) };
        Ok(match fs.flusher_step().map_err(|e| format!("flusher: {e}"))? {
            FlusherStep::Idle => FlusherDid::Idle,
            FlusherStep::Woke(_) => FlusherDid::Woke,
            FlusherStep::Began(_) => FlusherDid::Began,
            FlusherStep::WroteBack(_) => FlusherDid::WroteBack,
            FlusherStep::Slept(_) => FlusherDid::Slept,
        })
    }
    fn settle_flusher(&mut self) -> Result<(), String> {
        match self.fs.as_mut() {
            Some(fs) => fs.settle_flusher().map_err(|e| format!("flusher: {e}")),
            None => Ok(()),
        }
    }
    fn pass_time(&mut self, ns: u64) {
        if let Some(fs) = self.fs.as_mut() {
            fs.device_mut().pass_time(ns);
        }
    }
    fn image_hash(&mut self) -> u64 {
        self.disk().map_or(0, |d| d.image_hash())
    }

    fn report(&mut self) -> Vec<(String, Figure)> {
        let Some(fs) = self.fs.as_ref() else { return vec![("engine".into(), Figure::Text("not mounted".into()))] };
        let disk = fs.device();
        let stats = disk.stats();
        let total = stats.total();
        let group = |items: Vec<(&str, Figure)>| Figure::Group(items.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
        let mut out = vec![
            (
                "disk I/O".to_string(),
                group(vec![
                    ("reads", Figure::Count(total.reads)),
                    ("writes", Figure::Count(total.writes)),
                    ("read", Figure::Bytes(total.read_bytes)),
                    ("written", Figure::Bytes(total.write_bytes)),
                    ("flushes", Figure::Count(stats.flushes)),
                ]),
            ),
            ("store".to_string(), group(vec![("touched", Figure::Bytes(disk.touched_bytes()))])),
        ];
        for (name, class) in [("data", &stats.data), ("metadata", &stats.metadata), ("journal", &stats.journal)] {
            let line = group(vec![
                ("reads", Figure::Count(class.reads)),
                ("writes", Figure::Count(class.writes)),
                ("read", Figure::Bytes(class.read_bytes)),
                ("written", Figure::Bytes(class.write_bytes)),
                ("busy", Figure::Ns(class.busy_ns)),
            ]);
            out.push((name.to_string(), line));
        }
        let data = fs.data_path_stats();
        out.push((
            "page cache".to_string(),
            group(vec![
                ("held", Figure::Bytes(data.cache_bytes)),
                ("metadata", Figure::Bytes(data.metadata_bytes)),
                ("bound", Figure::Bytes(data.cache_bound_bytes)),
                ("dirty blocks", Figure::Count(data.dirty_blocks)),
                ("reserved blocks", Figure::Count(data.reserved_blocks)),
                ("readahead folios", Figure::Count(data.cache.readahead_folios)),
                ("evicted", Figure::Count(data.cache.evicted_folios)),
                ("orders refused", Figure::Count(data.cache.refused_folios)),
                ("no folio at all", Figure::Count(fs.folios_refused())),
            ]),
        ));
        out.push(("folios by order".to_string(), Figure::PerOrder(data.cache.folios_by_order.clone())));
        let nofail = fs.nofail_stats();
        let first_warning = nofail.first_warning.map_or_else(|| "none".to_string(), |w| format!("order {} {} (request {})", w.order, w.what, w.request));
        out.push((
            "no-fail allocations".to_string(),
            group(vec![
                ("requests", Figure::Count(nofail.requests())),
                ("retries", Figure::Count(nofail.retries)),
                ("most retries", Figure::Count(nofail.max_retries)),
                ("order>1 warnings", Figure::Count(nofail.warnings)),
                ("first warned", Figure::Text(first_warning)),
                ("metadata peak", Figure::Bytes(nofail.peak_metadata_bytes)),
            ]),
        ));
        out.push((
            "reclaim for no-fail".to_string(),
            group(vec![
                ("data folios", Figure::Count(nofail.reclaimed_data_folios)),
                ("metadata folios", Figure::Count(nofail.reclaimed_metadata_folios)),
                ("compactions", Figure::Count(nofail.compactions)),
                ("checkpoints", Figure::Count(nofail.reclaim_checkpoints)),
                ("write-backs", Figure::Count(nofail.reclaim_writebacks)),
            ]),
        ));
        out.push(("no-fail by order".to_string(), Figure::PerOrder(nofail.by_order.clone())));
        let kswapd = fs.kswapd_stats();
        out.push((
            "reclaimer task".to_string(),
            group(vec![
                ("passes", Figure::Count(kswapd.passes)),
                ("data folios", Figure::Count(kswapd.data_folios)),
                ("metadata folios", Figure::Count(kswapd.metadata_folios)),
                ("checkpoints", Figure::Count(kswapd.checkpoints)),
                ("write-backs", Figure::Count(kswapd.writebacks)),
                ("extent status entries", Figure::Count(kswapd.extent_status)),
            ]),
        ));
        out.push((
            "write-back".to_string(),
            group(vec![
                ("commands", Figure::Count(data.writeback.commands)),
                ("written", Figure::Bytes(data.writeback.bytes)),
                ("delalloc requests", Figure::Count(data.writeback.delalloc_requests)),
                ("delalloc blocks", Figure::Count(data.writeback.delalloc_blocks)),
                ("converted blocks", Figure::Count(data.writeback.converted_blocks)),
                ("journaled blocks", Figure::Count(data.writeback.journaled_blocks)),
            ]),
        ));
        out.push((
            "direct I/O".to_string(),
            group(vec![
                ("reads", Figure::Count(data.direct.reads)),
                ("writes", Figure::Count(data.direct.writes)),
                ("read", Figure::Bytes(data.direct.bytes_read)),
                ("written", Figure::Bytes(data.direct.bytes_written)),
                ("commands", Figure::Count(data.direct.commands)),
                ("misaligned", Figure::Count(data.direct.misaligned)),
                ("buffered (data=journal)", Figure::Count(data.direct.buffered)),
            ]),
        ));
        out.push((
            "mapped writes".to_string(),
            group(vec![
                ("writes", Figure::Count(data.mapped.writes)),
                ("faulted folios", Figure::Count(data.mapped.faulted_folios)),
                ("faulted blocks", Figure::Count(data.mapped.faulted_blocks)),
            ]),
        ));
        let mut orphans = self.past_orphans;
        orphans += fs.orphan_stats();
        out.push((
            "orphans".to_string(),
            group(vec![
                ("added", Figure::Count(orphans.added)),
                ("freed at close", Figure::Count(orphans.freed_at_close)),
                ("freed at mount", Figure::Count(orphans.freed_at_mount)),
                ("truncated at mount", Figure::Count(orphans.truncated_at_mount)),
                ("closes under a write", Figure::Count(orphans.closes_under_write)),
            ]),
        ));
        let timers = fs.timer_stats();
        out.push(("timers".to_string(), group(vec![("commits", Figure::Count(timers.timer_commits)), ("expired inodes", Figure::Count(timers.expired_inodes))])));
        let mean_seek = stats.seek_distance_bytes / stats.seeks.max(1);
        out.push(("seeks".to_string(), group(vec![("seeks", Figure::Count(stats.seeks)), ("mean distance", Figure::Bytes(mean_seek)), ("positioning", Figure::Ns(stats.positioning_ns))])));
        let layout = self.with_shadow(|dev| match Image::open(dev) {
            Ok(mut image) => {
                let layout = LayoutReport::read(&mut image).map_err(|e| e.to_string());
                (Some(image.into_device()), layout)
            }
            Err(e) => (None, Err(e.to_string())),
        });
        match layout {
            Ok(Ok(layout)) => out.extend(layout_figures(&layout)),
            Ok(Err(e)) | Err(e) => out.push(("layout".into(), Figure::Text(format!("unavailable: {e}")))),
        }
        out
    }
}
