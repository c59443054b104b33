//! The lockstep runner: every op goes to the model and to the target; their
//! answers must agree ([`ext4_model::agree`]). Cheap invariants run after every
//! op, the target's own fsck every N ops and at the end, and crashes at seeded
//! moments are judged against the model's crash envelope.

use std::collections::BTreeMap;
use std::fmt;

use ext4_model::agree::agrees;
use ext4_engine::fs::locks::{Lock, LockHolder};
use ext4_engine::fs::SecondHalf;
use ext4_model::{Errno, FileSystem, Model, MountConfig, Op, OpKind, Outcome, Pending, Reply};

pub use crate::disk::hash::Fnv64;
use crate::disk::FaultEvent;

/// Feeds an outcome into the trace hash field by field (formatting bytes
/// through Debug would cost more than the op).
fn hash_outcome(h: &mut Fnv64, o: &Outcome) {
    match o {
        Err(e) => h.write(&[0xEE, e.code() as u8]),
        Ok(Reply::Done) => h.write(&[0]),
        Ok(Reply::Written(n)) => h.write(&n.to_le_bytes()),
        Ok(Reply::Data(d)) => {
            h.write(&(d.len() as u64).to_le_bytes());
            h.write_bulk(d);
        }
        Ok(Reply::Stat(s)) => {
            for v in [s.mode as u64, s.nlink as u64, s.size, s.blocks, s.flags as u64] {
                h.write(&v.to_le_bytes());
            }
        }
        Ok(Reply::Entries(es)) => {
            for e in es {
                h.write(e.name.as_bytes());
                h.write(&[e.kind as u8]);
            }
        }
        Ok(Reply::Target(t)) => h.write(t.as_bytes()),
        Ok(Reply::Extents(xs)) => {
            for x in xs {
                for v in [x.logical, x.length, x.flags as u64, x.writeback_pending as u64] {
                    h.write(&v.to_le_bytes());
                }
            }
        }
    }
}

/// Trace-hash marks that tell a split op's halves from a whole op.
const BEGIN_MARK: u8 = 0xB0;
const FINISH_MARK: u8 = 0xF0;

/// What the runner needs of an implementation beyond [`FileSystem`].
pub trait Target: FileSystem {
    /// Full check of the implementation's own on-disk structures.
    fn fsck(&mut self) -> Result<(), String>;
    /// Crashes the device under the filesystem and mounts it again (journal
    /// replay included). `seed` drives which unflushed writes survive.
    fn crash_and_remount(&mut self, seed: u64) -> Result<(), String>;
    /// A digest of the durable image, for determinism checks.
    fn image_hash(&mut self) -> u64;
    /// Labelled figures for the summary: simulated time, I/O, layout.
    fn report(&mut self) -> Vec<(String, String)>;
    /// Writes everything back and stores the image at `path` for e2fsprogs.
    fn export_image(&mut self, path: &std::path::Path) -> Result<(), String>;
    /// Device faults met so far.
    fn faults_seen(&self) -> u64 {
        0
    }
    /// True when the run injects device faults.
    fn faults_enabled(&self) -> bool {
        false
    }
    /// Holds device faults off (true) or lets them fire again (false). The
    /// target's own checks and remounts keep whichever state the runner set.
    fn hold_faults(&mut self, _held: bool) {}
    /// After a fault: drop the caches and mount again (faults are held).
    fn remount_after_fault(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// ENOSPC limits for the model: the target's free space at the start.
    fn space_limits(&self) -> ext4_model::Limits {
        ext4_model::Limits::default()
    }
    /// True when the target is so full that metadata the model does not
    /// count (directory and extent-tree blocks) may decide an ENOSPC.
    fn nearly_full(&self) -> bool {
        false
    }
    /// Replays faults from trace steps instead of drawing them.
    fn script_faults(&mut self) {}
    /// Starts an op's fault window; `armed` are the trace's faults for it.
    fn begin_op(&mut self, _armed: Vec<FaultEvent>) {}
    /// The faults that fired since [`Target::begin_op`].
    fn take_fired_faults(&mut self) -> Vec<FaultEvent> {
        Vec::new()
    }
    /// True when `op` can run in two halves ([`Target::begin_split`]).
    fn splits(&self, _op: &Op) -> bool {
        false
    }
    /// The first half of a split op (fsync: close the running transaction;
    /// journal-flag switch: take the updates lock and close it). Only
    /// called when [`Target::splits`].
    fn begin_split(&mut self, _op: &Op) -> Result<SecondHalf, Errno> {
        Err(Errno::EINVAL)
    }
    /// The second half: the op returns.
    fn finish_split(&mut self, _half: SecondHalf) -> Result<(), Errno> {
        Ok(())
    }
    /// The lock `op` would sleep on now (held by a split op in flight).
    fn waits_for(&self, _op: &Op) -> Option<Lock> {
        None
    }
    /// Locks held between calls, with their holders.
    fn locks_held(&self) -> Vec<(Lock, LockHolder)> {
        Vec::new()
    }
}

/// A split op between its halves, on both sides.
#[derive(Debug)]
pub struct InFlight {
    pub op: Op,
    /// The op's index, for reports.
    index: u64,
    model: Pending,
    target: SecondHalf,
}

impl InFlight {
    /// The lock the target's first half took, if any.
    pub fn holder(&self) -> Option<LockHolder> {
        self.target.holder()
    }
}

/// What the first half of a split op left.
#[derive(Debug)]
pub enum Begun {
    /// The op is over (it failed, or it could not be split).
    Completed(Outcome),
    InFlight(InFlight),
}

/// The model and the target answered one op differently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Divergence {
    pub index: u64,
    pub op: Op,
    pub model: Outcome,
    pub actual: Outcome,
    pub why: String,
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    Divergence(Box<Divergence>),
    ModelInvariant { index: u64, what: String },
    TargetFsck { index: u64, what: String },
    Crash { index: u64, what: String },
    /// A lock held after the op that took it returned, or every task asleep.
    Lock { index: u64, what: String },
}

impl Failure {
    pub fn index(&self) -> u64 {
        match self {
            Failure::Divergence(d) => d.index,
            Failure::ModelInvariant { index, .. }
            | Failure::TargetFsck { index, .. }
            | Failure::Crash { index, .. }
            | Failure::Lock { index, .. } => *index,
        }
    }

    /// A failure's kind, so shrinking keeps the same bug rather than any bug.
    pub fn same_kind(&self, other: &Failure) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// An outcome short enough for a failure report: bytes read by count, long
/// replies cut (at a character boundary: names may be any UTF-8).
pub(crate) fn brief(o: &Outcome) -> String {
    match o {
        Ok(Reply::Data(d)) => format!("Ok({} bytes)", d.len()),
        Ok(r) => {
            let s = format!("Ok({r:?})");
            match s.char_indices().nth(300) {
                Some((cut, _)) => format!("{}...", &s[..cut]),
                None => s,
            }
        }
        Err(e) => format!("Err({e:?})"),
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Divergence(d) => write!(
                f,
                "divergence at op {}: {}\n  model:  {}\n  target: {}\n  why:    {}",
                d.index,
                d.op.to_string(),
                brief(&d.model),
                brief(&d.actual),
                d.why
            ),
            Failure::ModelInvariant { index, what } => write!(f, "model invariant broken after op {index}: {what}"),
            Failure::TargetFsck { index, what } => write!(f, "target fsck failed after op {index}: {what}"),
            Failure::Crash { index, what } => write!(f, "crash after op {index}: {what}"),
            Failure::Lock { index, what } => write!(f, "lock discipline broken after op {index}: {what}"),
        }
    }
}

/// Counts per op kind and errno, for the summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpStats {
    pub ok: BTreeMap<OpKind, u64>,
    pub errors: BTreeMap<Errno, u64>,
    pub ops: u64,
    pub fscks: u64,
    pub crashes: u64,
    /// Ops that met a device fault (answers not compared; state resynced).
    pub faults: u64,
    /// Times a task's op slept on a lock a split op held.
    pub lock_sleeps: u64,
    /// Ops the nearly full target refused for space the model still had
    /// (state resynced from the target).
    pub space_resyncs: u64,
}

/// A model and a target in lockstep.
pub struct Lockstep<T: Target> {
    pub model: Model,
    pub target: T,
    config: MountConfig,
    /// Ops run so far; the index of the next op.
    pub index: u64,
    pub stats: OpStats,
    trace: Fnv64,
    last_op: Option<Op>,
    faults_before: u64,
    /// With faults on: what a crash just before the current op could leave,
    /// since a faulted op may or may not have taken effect.
    envelope_before: Option<ext4_model::CrashEnvelope>,
    /// Fault steps waiting for the next op.
    armed: Vec<FaultEvent>,
    /// The last op ran out of space on the target only.
    space_short: bool,
    /// Reused for every write's bytes.
    write_buf: Vec<u8>,
}

impl<T: Target> Lockstep<T> {
    pub fn new(config: MountConfig, model: Model, target: T) -> Self {
        Lockstep { model, target, config, index: 0, stats: OpStats::default(), trace: Fnv64::new(), last_op: None, faults_before: 0, envelope_before: None, armed: Vec::new(), space_short: false, write_buf: Vec::new() }
    }

    /// Hash of every op and the model's answer so far.
    pub fn trace_hash(&self) -> u64 {
        self.trace.finish()
    }

    /// Arms a trace's fault step for the next op.
    pub fn arm_fault(&mut self, event: FaultEvent) {
        self.armed.push(event);
    }

    pub fn step(&mut self, op: &Op) -> Result<Outcome, Failure> {
        let index = self.start_op(op);
        self.index += 1;
        let (expected, actual) = match op {
            // The model keeps a write's pattern by reference; the target gets
            // its bytes in a buffer reused for every write.
            Op::Write { path, offset, len, seed } if *len <= ext4_model::op::MAX_IO_LEN => {
                let bytes = *len as usize;
                if self.write_buf.len() < bytes {
                    self.write_buf.resize(bytes, 0);
                }
                let data = &mut self.write_buf[..bytes];
                ext4_model::op::pattern_into(*seed, data);
                (
                    self.model.write_pattern(path, *offset, *len, *seed).map(Reply::Written),
                    self.target.write(path, *offset, data).map(Reply::Written),
                )
            }
            _ => (self.model.apply(op), self.target.apply(op)),
        };
        std::hash::Hash::hash(op, &mut self.trace);
        self.stats.ops += 1;
        self.judge(op, index, expected, actual)
    }

    /// The first half of an op that other tasks' ops may overtake (fsync,
    /// fdatasync, a journal-flag switch); the op returns in
    /// [`Lockstep::finish`]. Other ops, and targets that cannot split, run whole.
    pub fn begin(&mut self, op: &Op) -> Result<Begun, Failure> {
        if !self.target.splits(op) {
            return self.step(op).map(Begun::Completed);
        }
        let index = self.start_op(op);
        self.index += 1;
        let expected = self.model.begin_split(op).unwrap_or(Err(Errno::EINVAL));
        let actual = self.target.begin_split(op);
        self.trace.write(&[BEGIN_MARK]);
        std::hash::Hash::hash(op, &mut self.trace);
        self.stats.ops += 1;
        let (model, target) = match (expected, actual) {
            (Ok(model), Ok(target)) => (model, target),
            (expected, actual) => {
                let expected = expected.map(|_| Reply::Done);
                let actual = actual.map(|_| Reply::Done);
                return self.judge(op, index, expected, actual).map(Begun::Completed);
            }
        };
        if self.fault_pending() {
            // Counted as faulted; the op stays in flight (holding what it
            // took) until the resync drops it with the mount it began in.
            let _faulted: Outcome = self.judge(op, index, Ok(Reply::Done), Ok(Reply::Done))?;
        }
        Ok(Begun::InFlight(InFlight { op: op.clone(), index, model, target }))
    }

    /// The second half: the begun op returns on both sides.
    pub fn finish(&mut self, flight: InFlight) -> Result<Outcome, Failure> {
        let InFlight { op, index, model, target } = flight;
        self.start_op(&op);
        let expected = self.model.finish_split(model).map(|()| Reply::Done);
        let actual = self.target.finish_split(target).map(|()| Reply::Done);
        self.trace.write(&[FINISH_MARK]);
        self.judge(&op, index, expected, actual)
    }

    /// Opens an op's fault window and notes what the checks after it need;
    /// returns the index a new op gets.
    fn start_op(&mut self, op: &Op) -> u64 {
        self.target.begin_op(std::mem::take(&mut self.armed));
        self.last_op = Some(op.clone());
        self.faults_before = self.target.faults_seen();
        self.envelope_before = self.target.faults_enabled().then(|| self.model.crash_envelope());
        self.index
    }

    /// Counts an outcome and holds the target's answer to the model's.
    fn judge(&mut self, op: &Op, index: u64, expected: Outcome, actual: Outcome) -> Result<Outcome, Failure> {
        hash_outcome(&mut self.trace, &expected);
        match &expected {
            Ok(_) => *self.stats.ok.entry(op.kind()).or_default() += 1,
            Err(e) => *self.stats.errors.entry(*e).or_default() += 1,
        }
        if self.fault_pending() {
            self.stats.faults += 1;
            return Ok(expected);
        }
        if let Err(d) = agrees(&expected, &actual) {
            if self.target_ran_short(&expected, &actual) {
                self.stats.space_resyncs += 1;
                self.space_short = true;
                return Ok(expected);
            }
            return Err(Failure::Divergence(Box::new(Divergence { index, op: op.clone(), model: expected, actual, why: d.0 })));
        }
        Ok(expected)
    }

    /// An ENOSPC (or a short write) from a nearly full target where the
    /// model had room: metadata the model does not count.
    fn target_ran_short(&mut self, expected: &Outcome, actual: &Outcome) -> bool {
        let short = match (expected, actual) {
            (Err(Errno::ENOSPC), _) => false,
            (_, Err(Errno::ENOSPC)) => true,
            (Ok(Reply::Written(want)), Ok(Reply::Written(got))) => got < want,
            _ => false,
        };
        short && self.target.nearly_full()
    }

    /// True when the last op ran out of space on the target only.
    pub fn space_pending(&self) -> bool {
        self.space_short
    }

    /// After a target-only ENOSPC: the model takes the target's state
    /// (which the next full check holds to the target's own fsck).
    pub fn resync_after_space(&mut self) -> Result<(), Failure> {
        self.space_short = false;
        let index = self.index;
        // The adopted state is the new model's durable base, so it must be
        // durable on the target too: commit what is running first.
        let limits = self.model.limits();
        let adopted = self.with_faults_held(|ls| {
            ls.target.sync().map_err(|e| Failure::Crash { index, what: format!("sync before adopting state after ENOSPC: {e}") })?;
            Model::adopt(&ls.config, limits, &mut ls.target).map_err(|v| Failure::Crash { index, what: format!("adopting state after ENOSPC: {v}") })
        });
        let logged = self.model.crash_log_enabled();
        self.model = adopted?;
        self.model.set_crash_log(logged);
        Ok(())
    }

    /// True when the last op met a device fault (its answer is not compared).
    pub fn fault_pending(&self) -> bool {
        self.target.faults_seen() > self.faults_before
    }

    /// After a fault: remount, check the state is one a crash now could
    /// leave, and carry on from it.
    pub fn resync_after_fault(&mut self) -> Result<(), Failure> {
        let index = self.index;
        let after = self.model.crash_envelope();
        let before = self.envelope_before.take();
        let judged = self.with_faults_held(|ls| {
            ls.target.remount_after_fault().map_err(|what| Failure::Crash { index, what: format!("remount after fault: {what}") })?;
            // Either the faulted op took effect or it did not.
            if let Err(v) = after.check(&mut ls.target) {
                match &before {
                    Some(b) if b.check(&mut ls.target).is_ok() => {}
                    _ => return Err(Failure::Crash { index, what: format!("after fault: {v}") }),
                }
            }
            let limits = ls.model.limits();
            Model::adopt(&ls.config, limits, &mut ls.target).map_err(|v| Failure::Crash { index, what: format!("adopting state after fault: {v}") })
        });
        self.model = judged?;
        self.faults_before = self.target.faults_seen();
        Ok(())
    }

    /// Every lock the target holds belongs to an op in flight, and every op
    /// in flight still holds the lock it took.
    pub fn check_locks<'a>(&self, in_flight: impl Iterator<Item = &'a InFlight>) -> Result<(), Failure> {
        let mut owed: Vec<LockHolder> = in_flight.filter_map(InFlight::holder).collect();
        for (lock, holder) in self.target.locks_held() {
            match owed.iter().position(|h| *h == holder) {
                Some(i) => {
                    owed.swap_remove(i);
                }
                None => {
                    let last = self.last_op.as_ref().map(|op| op.to_string()).unwrap_or_default();
                    let what = format!("{lock} is still held by {holder:?} after its op returned (last op: {last})");
                    return Err(Failure::Lock { index: self.index, what });
                }
            }
        }
        match owed.first() {
            Some(h) => Err(Failure::Lock { index: self.index, what: format!("an op in flight took a lock as {h:?} and no longer holds it") }),
            None => Ok(()),
        }
    }

    /// Cheap invariants after an op: what the last op touched.
    pub fn check_model(&self) -> Result<(), Failure> {
        let paths = self.last_op.as_ref().map(|o| o.paths()).unwrap_or_default();
        self.model.check_paths(&paths).map_err(|what| Failure::ModelInvariant { index: self.index, what })
    }

    /// The expensive checks: the model from scratch and the target's fsck.
    pub fn full_check(&mut self) -> Result<(), Failure> {
        self.model.check_invariants().map_err(|what| Failure::ModelInvariant { index: self.index, what })?;
        self.stats.fscks += 1;
        self.target.fsck().map_err(|what| Failure::TargetFsck { index: self.index, what })
    }

    /// Crashes the target, checks the recovered state is one the model
    /// allows, and continues from it.
    pub fn crash(&mut self, seed: u64) -> Result<(), Failure> {
        let index = self.index;
        let envelope = self.model.crash_envelope();
        self.stats.crashes += 1;
        // Recovery is judged on a healthy disk; faults come back for the next op.
        let judged = self.with_faults_held(|ls| {
            ls.target.crash_and_remount(seed).map_err(|what| Failure::Crash { index, what: format!("remount: {what}") })?;
            ls.target.fsck().map_err(|what| Failure::Crash { index, what: format!("fsck after recovery: {what}") })?;
            envelope.check(&mut ls.target).map_err(|v| Failure::Crash { index, what: v.to_string() })?;
            let limits = ls.model.limits();
            Model::adopt(&ls.config, limits, &mut ls.target).map_err(|v| Failure::Crash { index, what: format!("adopting recovered state: {v}") })
        });
        self.model = judged?;
        Ok(())
    }

    /// Runs the runner's own bookkeeping (syncs, remounts, checks) on a
    /// healthy disk: an injected fault there would fail the harness, not the
    /// filesystem, and would fall in no op a trace could replay.
    fn with_faults_held<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        self.target.hold_faults(true);
        let out = f(self);
        self.target.hold_faults(false);
        out
    }
}
