//! The runner's own machinery, against a test double: a model with one
//! deliberate bug. It must be caught, shrunk to a few ops, and replay.

use ext4_model::{DirEntry, Errno, FallocFlags, FiemapExtent, FiemapRequest, FileSystem, Model, MountConfig, Op, Stat};
use ext4_sim::run::{run_seed, run_steps, shrink_failure, RunSpec};
use ext4_sim::target::TargetFactory;
use ext4_sim::failure::Failure;
use ext4_sim::figure::Figure;
use ext4_sim::target::{NoLocks, Target};
use ext4_sim::trace::Trace;

/// A model that answers one kind of read wrongly: after any truncate, reads
/// that reach the last byte of the file return it flipped.
struct Buggy {
    inner: Model,
    truncated: bool,
    bug: bool,
}

impl FileSystem for Buggy {
    fn create(&mut self, p: &str, perm: u16) -> Result<(), Errno> { self.inner.create(p, perm) }
    fn mkdir(&mut self, p: &str, perm: u16) -> Result<(), Errno> { self.inner.mkdir(p, perm) }
    fn unlink(&mut self, p: &str) -> Result<(), Errno> { self.inner.unlink(p) }
    fn rmdir(&mut self, p: &str) -> Result<(), Errno> { self.inner.rmdir(p) }
    fn rename(&mut self, a: &str, b: &str) -> Result<(), Errno> { self.inner.rename(a, b) }
    fn renameat2(&mut self, a: &str, b: &str, f: ext4_model::RenameFlags) -> Result<(), Errno> { self.inner.renameat2(a, b, f) }
    fn link(&mut self, a: &str, b: &str) -> Result<(), Errno> { self.inner.link(a, b) }
    fn symlink(&mut self, t: &str, p: &str) -> Result<(), Errno> { self.inner.symlink(t, p) }
    fn readlink(&mut self, p: &str) -> Result<String, Errno> { self.inner.readlink(p) }
    fn readdir(&mut self, p: &str) -> Result<Vec<DirEntry>, Errno> { self.inner.readdir(p) }
    fn stat(&mut self, p: &str) -> Result<Stat, Errno> { self.inner.stat(p) }
    fn write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.inner.write(p, o, d) }
    fn read(&mut self, p: &str, o: u64, l: u32) -> Result<Vec<u8>, Errno> {
        let mut data = self.inner.read(p, o, l)?;
        let size = self.inner.stat(p)?.size;
        if self.bug && self.truncated && !data.is_empty() && o + data.len() as u64 == size {
            let last = data.len() - 1;
            data[last] ^= 0xFF;
        }
        Ok(data)
    }
    fn truncate(&mut self, p: &str, s: u64) -> Result<(), Errno> {
        let r = self.inner.truncate(p, s);
        self.truncated |= r.is_ok();
        r
    }
    fn fsync(&mut self, p: &str) -> Result<(), Errno> { self.inner.fsync(p) }
    fn fdatasync(&mut self, p: &str) -> Result<(), Errno> { self.inner.fdatasync(p) }
    fn sync(&mut self) -> Result<(), Errno> { self.inner.sync() }
    fn fallocate(&mut self, p: &str, m: FallocFlags, o: u64, l: u64) -> Result<(), Errno> { self.inner.fallocate(p, m, o, l) }
    fn fiemap(&mut self, p: &str, r: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> { self.inner.fiemap(p, r) }
    fn set_journal_data(&mut self, p: &str, e: bool) -> Result<(), Errno> { self.inner.set_journal_data(p, e) }
    fn chattr(&mut self, p: &str, f: ext4_model::ChattrFlag, e: bool) -> Result<(), Errno> { self.inner.chattr(p, f, e) }
    fn append(&mut self, p: &str, d: &[u8]) -> Result<u64, Errno> { self.inner.append(p, d) }
    fn rewrite(&mut self, p: &str, d: &[u8]) -> Result<u64, Errno> { self.inner.rewrite(p, d) }
    fn lseek(&mut self, p: &str, o: u64, w: ext4_model::SeekWhence) -> Result<ext4_model::SeekChoices, Errno> { self.inner.lseek(p, o, w) }
    fn open(&mut self, p: &str, s: u8) -> Result<(), Errno> { self.inner.open(p, s) }
    fn close(&mut self, s: u8) -> Result<(), Errno> { self.inner.close(s) }
    fn fsync_fd(&mut self, s: u8) -> Result<(), Errno> { self.inner.fsync_fd(s) }
    fn ftruncate(&mut self, s: u8, n: u64) -> Result<(), Errno> { self.inner.ftruncate(s, n) }
    fn pread(&mut self, s: u8, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.inner.pread(s, o, l) }
    fn pwrite(&mut self, s: u8, o: u64, d: &[u8]) -> Result<u64, Errno> { self.inner.pwrite(s, o, d) }
    fn direct_write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.inner.direct_write(p, o, d) }
    fn direct_read(&mut self, p: &str, o: u64, l: u32) -> Result<Vec<u8>, Errno> { self.inner.direct_read(p, o, l) }
    fn map_write(&mut self, p: &str, o: u64, d: &[u8]) -> Result<u64, Errno> { self.inner.map_write(p, o, d) }
}

impl Target for Buggy {
    type Lock = NoLocks;
    type Holder = ();
    type SecondHalf = ();
    fn fsck(&mut self, read_back: ext4_sim::target::ReadBack<'_>) -> Result<(), String> {
        self.inner.check_invariants()?;
        self.inner.looking(|m| read_back(m))
    }
    fn crash_and_remount(&mut self, _seed: u64) -> Result<(), String> { Ok(()) }
    fn image_hash(&mut self) -> u64 { self.inner.seq() }
    fn report(&mut self) -> Vec<(String, Figure)> { vec![("double".into(), Figure::Text("model with an injected bug".into()))] }
    fn export_image(&mut self, _path: &std::path::Path) -> Result<(), String> { Err("a test double has no image".into()) }
}

struct Factory {
    bug: bool,
}

impl TargetFactory for Factory {
    type Target = Buggy;
    fn make(&self, spec: &RunSpec) -> Result<Buggy, String> {
        Ok(Buggy { inner: Model::new(&spec.mount).map_err(|e| e.to_string())?, truncated: false, bug: self.bug })
    }
}

fn spec(seed: u64) -> RunSpec {
    RunSpec { swarm: false, ..RunSpec::new(seed, 3000, MountConfig::default()) }
}

#[test]
fn injected_wrong_answer_is_caught_shrunk_and_replays() {
    let factory = Factory { bug: true };
    let failing = (0..20)
        .map(|s| run_seed(&factory, &spec(s)).unwrap())
        .find(|r| r.failure.is_some())
        .expect("some seed trips the injected bug");
    assert!(matches!(&failing.failure, Some(Failure::Divergence(d)) if matches!(d.op, Op::Read { .. })));
    let ext4_sim::run::ShrunkTrace { trace, runs, budget_spent, replays } = shrink_failure(&factory, &failing).unwrap();
    assert!(replays && !budget_spent);
    // Create, write, read; and a truncate, of another file when the
    // read needs its bytes (names merge only where the failure allows).
    assert!(trace.steps.len() <= 5, "shrunk to {} steps after {runs} runs: {:?}", trace.steps.len(), trace.steps);
    // The trace file is the whole repro.
    let text = trace.to_text();
    let back = Trace::parse(&text).unwrap();
    let replay = run_steps(&factory, &back.spec, &back.steps).unwrap();
    assert!(replay.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
    // Without the bug, the same ops pass.
    assert!(run_steps(&Factory { bug: false }, &back.spec, &back.steps).unwrap().failure.is_none());
}

/// The bug only in the first target made: a failure that replaying the
/// run's own steps cannot reproduce, as one outside every step would be.
struct FirstRunOnly(std::cell::Cell<bool>);

impl TargetFactory for FirstRunOnly {
    type Target = Buggy;
    fn make(&self, spec: &RunSpec) -> Result<Buggy, String> {
        let bug = self.0.replace(false);
        Factory { bug }.make(spec)
    }
}

#[test]
fn a_failure_its_steps_do_not_replay_is_reported_unshrunk_at_once() {
    let (seed, failing) = (0..20)
        .map(|s| (s, run_seed(&FirstRunOnly(std::cell::Cell::new(true)), &spec(s)).unwrap()))
        .find(|(_, r)| r.failure.is_some())
        .expect("some seed trips the injected bug");
    let factory = FirstRunOnly(std::cell::Cell::new(false));
    let shrunk = shrink_failure(&factory, &failing).unwrap();
    assert!(!shrunk.replays, "seed {seed}");
    assert_eq!((shrunk.runs, shrunk.trace.steps.len()), (1, failing.steps.len()));
}

#[test]
fn same_seed_same_trace_hash_and_seeds_differ() {
    let f = Factory { bug: false };
    let a = run_seed(&f, &spec(11)).unwrap();
    let b = run_seed(&f, &spec(11)).unwrap();
    let c = run_seed(&f, &spec(12)).unwrap();
    assert!(a.failure.is_none(), "{:?}", a.failure);
    assert_eq!((a.trace_hash, a.steps.len()), (b.trace_hash, b.steps.len()));
    assert_ne!(a.trace_hash, c.trace_hash);
}
