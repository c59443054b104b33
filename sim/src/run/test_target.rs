//! A test double for the runner's unit tests: the model as a target (no
//! device, no clock, no disk), with knobs that make it misbehave the ways
//! the runner must notice: a wrong answer, a panic, a failing fsck, an
//! image that reads back other than memory, a lock left held, and fsyncs
//! run in two halves. It records what the runner asked of it so a test can
//! say when a check ran and what it read.

use ext4_model::{DirEntry, Errno, FallocFlags, FiemapExtent, FiemapRequest, FileSystem, Model, MountConfig, Op, OpKind, Outcome, Pending, Stat};

use super::spec::RunSpec;
use super::state::RunState;
use crate::figure::Figure;
use crate::lockstep::Lockstep;
use crate::target::{ReadBack, Target, TargetFactory};

/// How the double misbehaves; all off by default. Also its factory: every
/// target made misbehaves alike, so a replay meets the same double.
#[derive(Clone, Copy, Debug, Default)]
pub struct Knobs {
    /// An answer to give instead of the model's, for the ops it picks.
    /// Writes reach the target through `write`, not `apply`: never asked.
    pub lie: Option<fn(&Op) -> Option<Outcome>>,
    /// Panics in any op of this kind.
    pub panic_on: Option<OpKind>,
    /// Its fsck fails once this many ops have run.
    pub fsck_fails_from: Option<u64>,
    /// Its image keeps nothing written: the read-back sees a fresh mkfs.
    pub forgets_on_disk: bool,
    /// An op of this kind returns still holding a lock.
    pub leaks_lock_on: Option<OpKind>,
    /// Fsync runs in two halves (holding no lock between them).
    pub splits_fsync: bool,
    /// While it holds any lock, every op would sleep on one.
    pub every_op_waits: bool,
    /// Memory is always low: the reclaimer task may run after any op.
    pub memory_low: bool,
    /// An op of this kind meets a livelock (a no-fail allocation that
    /// could not be had).
    pub livelocks_on: Option<OpKind>,
}

/// The model as a target.
pub struct Plain {
    pub fs: Model,
    config: MountConfig,
    pub knobs: Knobs,
    /// What the read-back sees when the image is not what memory holds.
    cold: Option<Model>,
    /// True while the runner reads the image back through us.
    reading_back: bool,
    /// Ops the target ran (first halves included, second halves not).
    pub ops: u64,
    /// `ops` at each fsck, in order.
    pub fscks_at: Vec<u64>,
    /// Per fsck, the names the read-back looked at, in order.
    pub read_back: Vec<Vec<String>>,
    /// Locks held between calls: (lock, holder).
    pub locks: Vec<(String, u32)>,
    /// Reclaimer passes run.
    pub reclaims: u64,
    livelock: Option<String>,
}

impl Plain {
    pub fn new(config: &MountConfig, knobs: Knobs) -> Plain {
        let fs = Model::new(config).expect("test configs are valid");
        let cold = knobs.forgets_on_disk.then(|| fs.clone());
        Plain { fs, config: *config, knobs, cold, reading_back: false, ops: 0, fscks_at: Vec::new(), read_back: Vec::new(), locks: Vec::new(), reclaims: 0, livelock: None }
    }

    /// Memory, or the image while it is read back.
    fn view(&mut self) -> &mut Model {
        match (&mut self.cold, self.reading_back) {
            (Some(cold), true) => cold,
            _ => &mut self.fs,
        }
    }

    /// What every op does first: count it and maybe panic.
    fn enter(&mut self, kind: OpKind) {
        self.ops += 1;
        assert!(self.knobs.panic_on != Some(kind), "the double panics in {kind:?}");
    }

    fn leave(&mut self, kind: OpKind) {
        if self.knobs.livelocks_on == Some(kind) {
            self.livelock = Some(format!("a {kind:?} found nothing to reclaim"));
        }
        if self.knobs.leaks_lock_on == Some(kind) {
            self.locks.push((format!("the lock a {kind:?} took"), 9));
        }
    }
}

impl FileSystem for Plain {
    fn create(&mut self, p: &str, m: u16) -> Result<(), Errno> { self.view().create(p, m) }
    fn mkdir(&mut self, p: &str, m: u16) -> Result<(), Errno> { self.view().mkdir(p, m) }
    fn unlink(&mut self, p: &str) -> Result<(), Errno> { self.view().unlink(p) }
    fn rmdir(&mut self, p: &str) -> Result<(), Errno> { self.view().rmdir(p) }
    fn rename(&mut self, a: &str, b: &str) -> Result<(), Errno> { self.view().rename(a, b) }
    fn renameat2(&mut self, a: &str, b: &str, f: ext4_model::RenameFlags) -> Result<(), Errno> { self.view().renameat2(a, b, f) }
    fn link(&mut self, a: &str, b: &str) -> Result<(), Errno> { self.view().link(a, b) }
    fn symlink(&mut self, t: &str, p: &str) -> Result<(), Errno> { self.view().symlink(t, p) }
    fn readlink(&mut self, p: &str) -> Result<String, Errno> { self.view().readlink(p) }
    fn readdir(&mut self, p: &str) -> Result<Vec<DirEntry>, Errno> { self.view().readdir(p) }
    fn stat(&mut self, p: &str) -> Result<Stat, Errno> {
        // The read-back stats every name it compares once: its trail.
        if let (true, Some(seen)) = (self.reading_back, self.read_back.last_mut()) {
            seen.push(p.to_string());
        }
        self.view().stat(p)
    }
    fn write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> {
        self.enter(OpKind::Write);
        let written = self.view().write(p, o, d);
        self.leave(OpKind::Write);
        written
    }
    fn read(&mut self, p: &str, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.view().read(p, o, l) }
    fn truncate(&mut self, p: &str, s: u64) -> Result<(), Errno> { self.view().truncate(p, s) }
    fn fsync(&mut self, p: &str) -> Result<(), Errno> { self.view().fsync(p) }
    fn fdatasync(&mut self, p: &str) -> Result<(), Errno> { self.view().fdatasync(p) }
    fn sync(&mut self) -> Result<(), Errno> { self.view().sync() }
    fn fallocate(&mut self, p: &str, m: FallocFlags, o: u64, l: u64) -> Result<(), Errno> { self.view().fallocate(p, m, o, l) }
    fn fiemap(&mut self, p: &str, r: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> { self.view().fiemap(p, r) }
    fn set_journal_data(&mut self, p: &str, e: bool) -> Result<(), Errno> { self.view().set_journal_data(p, e) }
    fn chattr(&mut self, p: &str, f: ext4_model::ChattrFlag, e: bool) -> Result<(), Errno> { self.view().chattr(p, f, e) }
    fn append(&mut self, p: &str, d: &[u8]) -> Result<u64, Errno> { self.view().append(p, d) }
    fn rewrite(&mut self, p: &str, d: &[u8]) -> Result<u64, Errno> { self.view().rewrite(p, d) }
    fn lseek(&mut self, p: &str, o: u64, w: ext4_model::SeekWhence) -> Result<ext4_model::SeekChoices, Errno> { self.view().lseek(p, o, w) }
    fn open(&mut self, p: &str, s: u8) -> Result<(), Errno> { self.view().open(p, s) }
    fn close(&mut self, s: u8) -> Result<(), Errno> { self.view().close(s) }
    fn fsync_fd(&mut self, s: u8) -> Result<(), Errno> { self.view().fsync_fd(s) }
    fn ftruncate(&mut self, s: u8, n: u64) -> Result<(), Errno> { self.view().ftruncate(s, n) }
    fn pread(&mut self, s: u8, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.view().pread(s, o, l) }
    fn pwrite(&mut self, s: u8, o: u64, d: &[u8]) -> Result<u64, Errno> { self.view().pwrite(s, o, d) }
    fn direct_write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.view().direct_write(p, o, d) }
    fn direct_read(&mut self, p: &str, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.view().direct_read(p, o, l) }
    fn map_write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.view().map_write(p, o, d) }
    fn close_all(&mut self) -> Result<(), Errno> { self.view().close_all() }

    // The runner sends every op but a write through here.
    fn apply(&mut self, op: &Op) -> Outcome {
        self.enter(op.kind());
        let out = match self.knobs.lie.and_then(|lie| lie(op)) {
            Some(lie) => lie,
            None => self.fs.apply(op),
        };
        self.leave(op.kind());
        out
    }
}

/// A first half's leftovers: the model's own pending op.
#[derive(Debug)]
pub struct Half(Pending);

impl Target for Plain {
    type Lock = String;
    type Holder = u32;
    type SecondHalf = Half;

    fn fsck(&mut self, read_back: ReadBack<'_>) -> Result<(), String> {
        self.fscks_at.push(self.ops);
        self.fs.check_invariants()?;
        if self.knobs.fsck_fails_from.is_some_and(|n| self.ops >= n) {
            return Err(format!("the double's fsck fails after {} ops", self.ops));
        }
        self.read_back.push(Vec::new());
        self.reading_back = true;
        // A check looks; the closes of its reads must not write anything back.
        let was = self.fs.set_looking(true);
        let agreed = read_back(self);
        self.fs.set_looking(was);
        self.reading_back = false;
        agreed
    }
    /// A crash in which everything the double shows survives: it becomes
    /// what a walk of it reads (what the runner adopts), so dirty state and
    /// the descriptors its process held are gone, as after any crash.
    fn crash_and_remount(&mut self, _seed: u64) -> Result<(), String> {
        let limits = self.fs.limits();
        let was = self.fs.set_looking(true);
        let adopted = Model::adopt(&self.config, limits, &mut self.fs).map_err(|v| format!("the double's own state: {v}"));
        self.fs.set_looking(was);
        self.fs = adopted?;
        Ok(())
    }
    fn image_hash(&mut self) -> u64 { self.fs.seq() }
    fn report(&mut self) -> Vec<(String, Figure)> { Vec::new() }
    fn export_image(&mut self, _: &std::path::Path) -> Result<(), String> { Err("a test double has no image".into()) }
    fn splits(&self, op: &Op) -> bool {
        self.knobs.splits_fsync && matches!(op, Op::Fsync { .. })
    }
    fn begin_split(&mut self, op: &Op) -> Result<Half, Errno> {
        self.enter(op.kind());
        self.fs.begin_split(op).unwrap_or(Err(Errno::EINVAL)).map(Half)
    }
    fn finish_split(&mut self, half: Half) -> Outcome {
        self.fs.finish_split(half.0)
    }
    fn locks_held(&self) -> Vec<(String, u32)> {
        self.locks.clone()
    }
    fn memory_low(&self) -> bool {
        self.knobs.memory_low
    }
    fn reclaim(&mut self) -> Result<(), String> {
        self.reclaims += 1;
        Ok(())
    }
    fn take_livelock(&mut self) -> Option<String> {
        self.livelock.take()
    }
    fn waits_for(&mut self, _op: &Op) -> Option<String> {
        (self.knobs.every_op_waits && !self.locks.is_empty()).then(|| "a lock held forever".to_string())
    }
    fn finish_waits_for(&mut self, _half: &Half) -> Option<String> {
        self.waits_for(&Op::Sync)
    }
}

impl TargetFactory for Knobs {
    type Target = Plain;
    fn make(&self, spec: &RunSpec) -> Result<Plain, String> {
        Ok(Plain::new(&spec.mount, *self))
    }
}

/// A model and a double in lockstep, both fresh.
pub fn lockstep(knobs: Knobs) -> Lockstep<Plain> {
    let config = MountConfig::default();
    Lockstep::new(config, Model::new(&config).expect("the default config is valid"), Plain::new(&config, knobs))
}

/// A run's state over a fresh lockstep pair that records faults (as a
/// generated run does).
pub fn run_state(knobs: Knobs, tasks: u32, fsck_every: u64) -> RunState<Plain> {
    RunState::new(lockstep(knobs), tasks, fsck_every, true)
}
