//! The lockstep runner: every op goes to the model and to the target; their
//! answers must agree ([`ext4_model::agree`]). Cheap invariants run after every
//! op, the target's own fsck when the run asks, and crashes are judged
//! against the model's crash envelope. Simulated time is kept by who spent
//! it ([`SimTime`]).

use std::collections::BTreeMap;

use ext4_model::agree::agrees;
use ext4_model::whole_tree::{tree_agrees, ReadBackBudget};
use ext4_model::{CrashEnvelope, Errno, FileSystem, Model, MountConfig, Op, OpKind, Outcome, Pending, Reply};

pub use crate::disk::hash::Fnv64;
use crate::disk::FaultEvent;
use crate::failure::{Divergence, Failure};
use crate::sim_time::SimTime;
use crate::target::{Begun, FlusherDid, InFlight, Target};

/// What a periodic full check reads back from the cold image and compares,
/// going on each time where the last stopped: enough to walk a typical
/// run's tree over a few checks without making checks the run's main cost.
pub const READ_BACK_PER_CHECK: ReadBackBudget = ReadBackBudget { names: 512, bytes: 1 << 20 };
/// What the check at the end of a run reads back: every name, and file
/// data up to a bound that keeps a long run's last check to a fraction of
/// a second.
pub const READ_BACK_AT_END: ReadBackBudget = ReadBackBudget { names: u64::MAX, bytes: 8 << 20 };

/// Feeds an outcome into the trace hash field by field (formatting bytes
/// through Debug would cost more than the op).
fn hash_outcome(h: &mut Fnv64, o: &Outcome) {
    match o {
        Err(e) => h.write(&[0xEE, e.code() as u8]),
        Ok(Reply::Done) => h.write(&[0]),
        Ok(Reply::Written(n)) => h.write(&n.to_le_bytes()),
        Ok(Reply::Data(d)) | Ok(Reply::DataOrEinval(d)) => {
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
        Ok(Reply::Extents(xs)) | Ok(Reply::ExtentsToCount { extents: xs, .. }) => {
            for x in xs {
                for v in [x.logical, x.length, x.flags as u64, x.writeback_pending as u64] {
                    h.write(&v.to_le_bytes());
                }
            }
        }
        Ok(Reply::Offset(x)) => h.write(&x.to_le_bytes()),
        Ok(Reply::SeekChoices(c)) => {
            for x in c.exact.iter().chain(c.block_starts.iter().flat_map(|r| [&r.start, &r.end])) {
                h.write(&x.to_le_bytes());
            }
            h.write(&[u8::from(c.enxio)]);
        }
        Ok(Reply::MappedCount(n)) => h.write(&n.to_le_bytes()),
    }
}

/// Trace-hash marks that tell a split op's halves from a whole op.
const BEGIN_MARK: u8 = 0xB0;
const FINISH_MARK: u8 = 0xF0;

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
    /// The same sleeps by the lock slept on.
    pub lock_sleeps_on: BTreeMap<String, u64>,
    /// Of those, the ops that took the locks before it and slept holding them.
    pub lock_sleeps_holding: u64,
    /// Second halves that gave back first-half locks their op no longer
    /// takes (its name leads elsewhere now) before sleeping.
    pub stale_locks_let_go: u64,
    /// Parts of buffered writes in flight run before their second half
    /// (a folio each), other tasks' steps between them.
    pub write_parts: u64,
    /// Parts of truncates in flight run before their second half (an
    /// extent freed each).
    pub truncate_parts: u64,
    /// Pieces of allocating fallocates mapped between their halves.
    pub fallocate_parts: u64,
    /// Direct writes' submissions run apart from their completion.
    pub direct_write_parts: u64,
    /// Direct reads' submissions run apart from their completion.
    pub direct_read_parts: u64,
    /// Parts of buffered reads in flight (a folio copied each, no lock
    /// held between them).
    pub read_parts: u64,
    /// Ops the nearly full target refused for space the model still had
    /// (state resynced from the target).
    pub space_resyncs: u64,
    /// Ops in flight at those resyncs, returned on the target alone.
    pub space_resync_flights: u64,
    /// Ops the target's page cache answered ENOMEM (no folio to be had).
    pub enomem: u64,
    /// Writes it cut short for the same reason (a short count).
    pub short_by_memory: u64,
    /// The flusher task: wake-ups, inodes it wrote back asleep holding
    /// their folio locks (a preemption point), steps it slept on a lock.
    pub flusher_wakes: u64,
    pub flusher_flights: u64,
    pub flusher_sleeps: u64,
}

/// A model and a target in lockstep.
pub struct Lockstep<T: Target> {
    model: Model,
    target: T,
    config: MountConfig,
    /// Ops run so far; the index of the next op.
    index: u64,
    stats: OpStats,
    time: SimTime,
    trace: Fnv64,
    last_op: Option<Op>,
    /// The target's clock when the current op (or half) began.
    op_start_ns: u64,
    faults_before: u64,
    /// With faults on: what a crash just before the current op could leave,
    /// since a faulted op may or may not have taken effect.
    envelope_before: Option<CrashEnvelope>,
    /// For an op that stores and then syncs (a mapped write): the states
    /// when its sync failed part way, its stores written but not synced.
    envelope_unsynced: Option<CrashEnvelope>,
    /// Fault steps waiting for the next op.
    armed: Vec<FaultEvent>,
    /// The last op ran out of space on the target only.
    space_short: bool,
    /// Reused for every write's bytes.
    write_buf: Vec<u8>,
    /// Where the next full check's read-back starts (a name index).
    read_back_from: u64,
}

impl<T: Target> Lockstep<T> {
    pub fn new(config: MountConfig, model: Model, target: T) -> Self {
        Lockstep {
            model,
            target,
            config,
            index: 0,
            stats: OpStats::default(),
            time: SimTime::default(),
            trace: Fnv64::new(),
            last_op: None,
            op_start_ns: 0,
            faults_before: 0,
            envelope_before: None,
            envelope_unsynced: None,
            armed: Vec::new(),
            space_short: false,
            write_buf: Vec::new(),
            read_back_from: 0,
        }
    }

    /// Ops run so far: the index the next op gets.
    pub fn index(&self) -> u64 {
        self.index
    }

    pub fn stats(&self) -> &OpStats {
        &self.stats
    }

    pub fn time(&self) -> &SimTime {
        &self.time
    }

    /// Hash of every op and the model's answer so far.
    pub fn trace_hash(&self) -> u64 {
        self.trace.finish()
    }

    /// The target, for what the runner reads at the end (hash, report).
    pub fn target_mut(&mut self) -> &mut T {
        &mut self.target
    }

    pub fn into_target(self) -> T {
        self.target
    }

    /// The model and the target, for a test that reads both at the end.
    pub fn into_parts(self) -> (Model, T) {
        (self.model, self.target)
    }

    /// The lock `op` would sleep on now, if any: none while no split op
    /// holds one, which is asked first because this runs before every op.
    /// Finding the op's inode may read directories: that is the harness's
    /// I/O, on a healthy disk.
    pub fn waits_for(&mut self, op: &Op) -> Option<T::Lock> {
        if self.target.locks_held().is_empty() {
            return None;
        }
        self.harness(|ls| ls.target.waits_for(op))
    }

    /// Whether `op`, which would sleep on a lock, takes the locks before it
    /// first and sleeps holding them (begun, its first half takes them).
    pub fn sleeps_holding_first_locks(&mut self, op: &Op) -> bool {
        self.harness(|ls| ls.target.sleeps_holding_first_locks(op))
    }

    /// The lock the second half of `flight` would sleep on now, if any;
    /// first-half locks its op no longer takes are given back first.
    pub fn finish_waits_for(&mut self, flight: &mut InFlight<T::SecondHalf>) -> Option<T::Lock> {
        if self.target.locks_held().is_empty() {
            return None;
        }
        if self.target.let_go_of_stale_locks(&mut flight.target) {
            self.stats.stale_locks_let_go += 1;
        }
        self.target.finish_waits_for(&flight.target)
    }

    /// Counts a task put to sleep on `lock`.
    pub fn note_lock_sleep(&mut self, lock: &T::Lock) {
        self.stats.lock_sleeps += 1;
        *self.stats.lock_sleeps_on.entry(lock.to_string()).or_default() += 1;
    }

    /// Arms a trace's fault step for the next op.
    pub fn arm_fault(&mut self, event: FaultEvent) {
        self.armed.push(event);
    }

    /// From now on the device fires only the trace's faults.
    pub fn script_faults(&mut self) {
        if let Some(f) = self.target.faults() {
            f.script();
        }
    }

    /// The faults the last op met, for the trace.
    pub fn take_fired_faults(&mut self) -> Vec<FaultEvent> {
        self.target.faults().map(|f| f.take_fired()).unwrap_or_default()
    }

    /// Armed faults the last op never reached, and the commands it issued.
    pub fn take_unfired_faults(&mut self) -> (Vec<FaultEvent>, u32) {
        self.target.faults().map(|f| f.take_unfired()).unwrap_or_default()
    }

    pub fn step(&mut self, op: &Op) -> Result<Outcome, Failure> {
        let index = self.start_op(op);
        self.index += 1;
        // The target first: the model learns from it whether the op ran
        // out of memory.
        let actual = match op {
            // The model keeps a write's pattern by reference; the target gets
            // its bytes in a buffer reused for every write.
            Op::Write { path, offset, len, seed } if *len <= ext4_model::op::MAX_IO_LEN => {
                let bytes = *len as usize;
                if self.write_buf.len() < bytes {
                    self.write_buf.resize(bytes, 0);
                }
                let data = &mut self.write_buf[..bytes];
                ext4_model::op::pattern_into(*seed, data);
                self.target.write(path, *offset, data).map(Reply::Written)
            }
            _ => self.target.apply(op),
        };
        let expected = self.model_answer(op, index, &actual, |m, op| m.apply(op))?;
        std::hash::Hash::hash(op, &mut self.trace);
        self.stats.ops += 1;
        let spent = self.spent_ns();
        self.time.record_op(op.kind(), spent);
        self.judge(op, index, expected, actual)
    }

    /// The first half of an op that other tasks' ops may overtake (fsync,
    /// fdatasync, a journal-flag switch); the op returns in
    /// [`Lockstep::finish`]. Other ops, and targets that cannot split, run whole.
    pub fn begin(&mut self, op: &Op) -> Result<Begun<T::SecondHalf>, Failure> {
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
        let begun_ns = self.spent_ns();
        let (model, target) = match (expected, actual) {
            (Ok(model), Ok(target)) => (model, target),
            (expected, actual) => {
                self.time.record_op(op.kind(), begun_ns);
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
        // A first half that took some of its locks and waits on the next
        // sleeps holding them.
        if T::holder(&target).is_some() {
            if let Some(lock) = self.harness(|ls| ls.target.finish_waits_for(&target)) {
                self.note_lock_sleep(&lock);
                self.stats.lock_sleeps_holding += 1;
            }
        }
        Ok(Begun::InFlight(InFlight { op: op.clone(), index, model, target, begun_ns }))
    }

    /// The second half: the begun op returns on both sides.
    pub fn finish(&mut self, mut flight: InFlight<T::SecondHalf>) -> Result<Outcome, Failure> {
        // A write that began taking effect part by part copies the rest
        // the same way, each part compared, in the window its parts opened.
        let mut parted = false;
        if matches!(&flight.model, Pending::Write(w) if w.file_fixed()) {
            while self.part(&mut flight)? {
                parted = true;
                if self.fault_pending() || self.space_short {
                    break;
                }
            }
        }
        let InFlight { op, index, model, target, begun_ns } = flight;
        if !parted {
            self.start_op(&op);
        }
        let actual = self.target.finish_split(target);
        // An ftruncate whose first half pinned its descriptor's file and
        // ran no part yet (it took only some of its locks): whole now, on
        // that file.
        let pinned = matches!(&model, Pending::Truncate(t) if !t.begun() && t.file_fixed());
        let whole = match &model {
            Pending::Whole(_) => true,
            Pending::Write(w) => !w.file_fixed(),
            Pending::Truncate(t) => !t.file_fixed(),
            Pending::Fallocate(f) => !f.begun(),
            Pending::DirectWrite(d) => !d.begun(),
            Pending::DirectRead(d) => !d.begun(),
            Pending::Read(r) => !r.file_fixed(),
            _ => false,
        };
        let expected = if pinned {
            let pending = model;
            let got = self.model_answer(&op, index, &actual, |m, _| m.finish_split(pending.clone()))?;
            if got == Err(Errno::ENOMEM) {
                // Refused for memory before its first part: it still drops
                // the file it pinned as it returns.
                if let Pending::Truncate(mut t) = pending {
                    t.end_with(Errno::ENOMEM);
                    let _ = self.model.finish_split(Pending::Truncate(t));
                }
            }
            got
        } else if whole {
            // Done whole now (the op begun): it may run out of memory as a
            // whole op may.
            self.model_answer(&op, index, &actual, |m, op| m.finish_split(Pending::Whole(op.clone())))?
        } else {
            self.model.finish_split(model)
        };
        self.trace.write(&[FINISH_MARK]);
        let spent = self.spent_ns();
        self.time.record_op(op.kind(), begun_ns.saturating_add(spent));
        self.judge(&op, index, expected, actual)
    }

    /// Opens an op's fault window and notes what the checks after it need;
    /// returns the index a new op gets.
    fn start_op(&mut self, op: &Op) -> u64 {
        let armed = std::mem::take(&mut self.armed);
        let (faults_before, injects) = match self.target.faults() {
            Some(f) => {
                f.begin_op(armed);
                (f.faults_met(), f.injects())
            }
            None => (0, false),
        };
        self.faults_before = faults_before;
        self.envelope_before = injects.then(|| self.model.crash_envelope());
        self.envelope_unsynced = if injects { self.model.crash_envelope_unsynced(op) } else { None };
        // Whatever an earlier op left behind its errno is not this op's.
        let _ = self.target.explain_last_error();
        let _ = self.target.take_out_of_memory();
        self.last_op = Some(op.clone());
        self.op_start_ns = self.target.now_ns();
        self.index
    }

    /// Simulated ns since the current op (or half) began.
    fn spent_ns(&self) -> u64 {
        self.target.now_ns().saturating_sub(self.op_start_ns)
    }

    /// Counts an outcome and holds the target's answer to the model's.
    fn judge(&mut self, op: &Op, index: u64, expected: Outcome, actual: Outcome) -> Result<Outcome, Failure> {
        hash_outcome(&mut self.trace, &expected);
        if let Some(what) = self.target.take_livelock() {
            return Err(Failure::Livelock { index, op: Some(op.kind()), what });
        }
        match &expected {
            Ok(_) => *self.stats.ok.entry(op.kind()).or_default() += 1,
            Err(e) => *self.stats.errors.entry(*e).or_default() += 1,
        }
        if self.fault_pending() {
            self.stats.faults += 1;
            return Ok(expected);
        }
        if self.hold_to_model(op, index, &expected, actual, "")? && expected.is_ok() {
            self.learn_folio_choice(op);
        }
        Ok(expected)
    }

    /// Holds the target's answer to the model's: true when they agree,
    /// false when the nearly full target ran short where the model had room
    /// (the model takes the target's state next), else the divergence
    /// (`what` says which part of the op answered).
    fn hold_to_model(&mut self, op: &Op, index: u64, expected: &Outcome, actual: Outcome, what: &str) -> Result<bool, Failure> {
        let Err(d) = agrees(expected, &actual) else { return Ok(true) };
        if self.target_ran_short(expected, &actual) {
            self.stats.space_resyncs += 1;
            self.space_short = true;
            return Ok(false);
        }
        Err(self.diverged(index, op, expected.clone(), actual, format!("{what}{}", d.0)))
    }

    /// The divergence of `op`, with what lies behind the target's errno.
    fn diverged(&mut self, index: u64, op: &Op, model: Outcome, actual: Outcome, why: String) -> Failure {
        let detail = if actual.is_err() { self.target.explain_last_error() } else { None };
        Failure::Divergence(Box::new(Divergence { index, op: op.clone(), model, actual, why, detail }))
    }

    /// A mapped write's fault backs its whole folio, and the folio's size
    /// is the page cache's choice: the model holds the blocks it may have
    /// covered in two states possible, and learns here the target's, as it
    /// learns a folio the target was refused. Without that, a misaligned
    /// direct write over them later had two answers.
    fn learn_folio_choice(&mut self, op: &Op) {
        let Op::MapWrite { path, .. } = op else { return };
        let Some(span) = self.model.folio_choice(op) else { return };
        if let Some(has) = self.with_faults_held(|ls| ls.target.block_states(path, span.clone())) {
            self.model.settle_folio_choice(path, span, &has);
        }
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
        let adopted = self.harness(|ls| {
            // The adopted model holds no descriptors, so neither may the
            // target: its slots close (their orphans are freed) first.
            ls.target.close_all().map_err(|e| Failure::Crash { index, what: format!("closing descriptors before adopting state after ENOSPC: {e}") })?;
            ls.target.sync().map_err(|e| Failure::Crash { index, what: format!("sync before adopting state after ENOSPC: {e}") })?;
            Model::adopt(&ls.config, limits, &mut ls.target).map_err(|v| Failure::Crash { index, what: format!("adopting state after ENOSPC: {v}") })
        });
        self.target.forget_harness_reads();
        let logged = self.model.crash_log_enabled();
        self.model = adopted?;
        self.model.set_crash_log(logged);
        Ok(())
    }

    /// Runs the second halves of `flights` on the target alone, answers
    /// unheard, before the model adopts the target's state: those that
    /// cannot run now give their locks back and fail, so none stays held.
    pub fn finish_on_target_only(&mut self, flights: Vec<InFlight<T::SecondHalf>>) {
        for flight in flights {
            self.stats.space_resync_flights += 1;
            let _ = self.harness(|ls| ls.target.finish_split(flight.target));
        }
    }

    /// True when the last op met a device fault (its answer is not compared).
    pub fn fault_pending(&mut self) -> bool {
        let before = self.faults_before;
        self.target.faults().is_some_and(|f| f.faults_met() > before)
    }

    /// After a fault: remount, check the state is one a crash now could
    /// leave, and carry on from it.
    pub fn resync_after_fault(&mut self) -> Result<(), Failure> {
        let index = self.index;
        let after = self.model.crash_envelope();
        let before = self.envelope_before.take();
        let unsynced = self.envelope_unsynced.take();
        let judged = self.harness(|ls| {
            ls.target.remount_after_fault().map_err(|what| Failure::Crash { index, what: format!("remount after fault: {what}") })?;
            // Either the faulted op took effect or it did not, or (an op
            // that stores, then syncs) its sync failed part way.
            if let Err(v) = after.check(&mut ls.target) {
                let allowed = |e: &Option<CrashEnvelope>, t: &mut T| e.as_ref().is_some_and(|e| e.check(t).is_ok());
                if !allowed(&before, &mut ls.target) && !allowed(&unsynced, &mut ls.target) {
                    return Err(Failure::Crash { index, what: format!("after fault: {v}") });
                }
            }
            let limits = ls.model.limits();
            Model::adopt(&ls.config, limits, &mut ls.target).map_err(|v| Failure::Crash { index, what: format!("adopting state after fault: {v}") })
        });
        self.target.forget_harness_reads();
        self.model = judged?;
        self.faults_before = self.target.faults().map_or(0, |f| f.faults_met());
        Ok(())
    }

    /// Every lock the target holds belongs to an op in flight (`owed`: the
    /// holders their first halves took), and every op in flight still
    /// holds the lock it took.
    pub fn check_locks(&mut self, mut owed: Vec<T::Holder>) -> Result<(), Failure> {
        let op = self.last_op.as_ref().map(Op::kind);
        let last = |ls: &Self| ls.last_op.as_ref().map(|op| op.to_string()).unwrap_or_default();
        if let Some(v) = self.target.lock_violations().into_iter().next() {
            return Err(Failure::Lock { index: self.index, op, what: format!("{v} (last op: {})", last(self)) });
        }
        // A holder may hold several locks (a switch between its halves
        // holds four); each owed holder must hold at least one.
        let mut seen: Vec<T::Holder> = Vec::new();
        for (lock, holder) in self.target.locks_held() {
            if seen.contains(&holder) {
                continue;
            }
            match owed.iter().position(|h| *h == holder) {
                Some(i) => {
                    seen.push(owed.swap_remove(i));
                }
                None => {
                    let what = format!("{lock} is still held by {holder:?} after its op returned (last op: {})", last(self));
                    return Err(Failure::Lock { index: self.index, op, what });
                }
            }
        }
        match owed.first() {
            Some(h) => Err(Failure::Lock { index: self.index, op, what: format!("an op in flight took a lock as {h:?} and no longer holds it") }),
            None => Ok(()),
        }
    }

    /// A lock failure at the current op, for what the runner sees itself.
    /// Every lock held now, with its holder, for a failure's report.
    pub fn held_locks(&self) -> String {
        let held: Vec<String> = self.target.locks_held().iter().map(|(lock, holder)| format!("{lock} by {holder:?}")).collect();
        if held.is_empty() { "no lock held".into() } else { held.join(", ") }
    }

    pub fn lock_failure(&self, what: String) -> Failure {
        Failure::Lock { index: self.index, op: self.last_op.as_ref().map(Op::kind), what }
    }

    /// Cheap invariants after an op: what the last op touched.
    pub fn check_model(&self) -> Result<(), Failure> {
        let paths = self.last_op.as_ref().map(|o| o.paths()).unwrap_or_default();
        self.model.check_paths(&paths).map_err(|what| Failure::ModelInvariant { index: self.index, what })
    }

    /// The expensive checks: the model from scratch, the target's fsck, and
    /// the checked image read back cold within [`READ_BACK_PER_CHECK`],
    /// starting where the last check stopped.
    pub fn full_check(&mut self) -> Result<(), Failure> {
        self.full_check_within(READ_BACK_PER_CHECK)
    }

    /// The full check at the end of a run: every name read back.
    pub fn final_check(&mut self) -> Result<(), Failure> {
        self.full_check_within(READ_BACK_AT_END)
    }

    fn full_check_within(&mut self, budget: ReadBackBudget) -> Result<(), Failure> {
        self.model.check_invariants().map_err(|what| Failure::ModelInvariant { index: self.index, what })?;
        self.stats.fscks += 1;
        let index = self.index;
        let mut differs = None;
        let checked = self.harness(|ls| {
            let (model, next_file) = (&mut ls.model, &mut ls.read_back_from);
            let mut read_back = |fs: &mut dyn FileSystem| match model.looking(|m| tree_agrees(m, fs, budget, *next_file)) {
                Ok(seen) => {
                    *next_file = seen.next;
                    Ok(())
                }
                Err(d) => {
                    differs = Some(d.to_string());
                    Err("the image read back differs from the model".to_string())
                }
            };
            ls.target.fsck(&mut read_back)
        });
        match (checked, differs) {
            (_, Some(what)) => Err(Failure::ReadBack { index, what }),
            (Err(what), None) => Err(Failure::TargetFsck { index, what }),
            (Ok(()), None) => Ok(()),
        }
    }

    /// Memory is low on the target: its reclaimer may run.
    pub fn memory_low(&self) -> bool {
        self.target.memory_low()
    }

    /// One pass of the target's reclaimer (kswapd), between ops. It frees
    /// memory and asks the model nothing; its I/O runs on a healthy disk
    /// (a fault there would fall in no op) and counts as idle time.
    pub fn reclaim(&mut self) -> Result<(), Failure> {
        let start = self.target.now_ns();
        let out = self.with_faults_held(|ls| ls.target.reclaim());
        self.time.record_idle(self.target.now_ns().saturating_sub(start));
        out.map_err(|what| Failure::Reclaim { index: self.index, what })
    }

    /// Whether the flusher task has something to do.
    pub fn flusher_runnable(&self) -> bool {
        self.target.flusher_runnable()
    }

    /// The lock the flusher's next step would sleep on.
    pub fn flusher_waits_for(&mut self) -> Option<T::Lock> {
        self.target.flusher_waits_for()
    }

    /// The flusher's holder between its halves.
    pub fn flusher_holder(&self) -> Option<T::Holder> {
        self.target.flusher_holder()
    }

    /// One step of the flusher task, between ops (or between an op's
    /// halves). Its I/O runs on a healthy disk, as the reclaimer's does
    /// (a fault there would fall in no op), and counts as idle time.
    pub fn flusher(&mut self) -> Result<(), Failure> {
        let start = self.target.now_ns();
        let out = self.with_faults_held(|ls| ls.target.flusher_step());
        self.time.record_idle(self.target.now_ns().saturating_sub(start));
        match out.map_err(|what| Failure::Flusher { index: self.index, what })? {
            FlusherDid::Woke => self.stats.flusher_wakes += 1,
            FlusherDid::Began => self.stats.flusher_flights += 1,
            FlusherDid::Slept => self.stats.flusher_sleeps += 1,
            FlusherDid::Idle | FlusherDid::WroteBack => {}
        }
        Ok(())
    }

    /// Counts the flusher passed over for sleeping on a lock.
    pub fn note_flusher_sleep(&mut self) {
        self.stats.flusher_sleeps += 1;
    }

    /// Ends the flusher's write-back in flight (before the runner syncs or
    /// adopts the target's state).
    pub fn settle_flusher(&mut self) -> Result<(), Failure> {
        let index = self.index;
        self.harness(|ls| ls.target.settle_flusher()).map_err(|what| Failure::Flusher { index, what })
    }

    /// Simulated time passes with nothing asked of the target.
    pub fn pass_time(&mut self, ns: u64) {
        self.target.pass_time(ns);
        self.time.record_idle(ns);
    }

    /// Crashes the target, checks the recovered state is one the model
    /// allows, and continues from it.
    pub fn crash(&mut self, seed: u64) -> Result<(), Failure> {
        let index = self.index;
        let envelope = self.model.crash_envelope();
        self.stats.crashes += 1;
        let start = self.target.now_ns();
        // Recovery is judged on a healthy disk; faults come back for the next op.
        let recovered = self.with_faults_held(|ls| {
            ls.target.crash_and_remount(seed).map_err(|what| Failure::Crash { index, what: format!("remount: {what}") })
        });
        self.time.record_recovery(self.target.now_ns().saturating_sub(start));
        recovered?;
        let judged = self.harness(|ls| {
            // The recovered mount is cold already: the envelope reads it.
            ls.target.fsck(&mut |_| Ok(())).map_err(|what| Failure::Crash { index, what: format!("fsck after recovery: {what}") })?;
            envelope.check(&mut ls.target).map_err(|v| Failure::Crash { index, what: v.to_string() })?;
            let limits = ls.model.limits();
            Model::adopt(&ls.config, limits, &mut ls.target).map_err(|v| Failure::Crash { index, what: format!("adopting recovered state: {v}") })
        });
        self.target.forget_harness_reads();
        self.model = judged?;
        Ok(())
    }

    /// The runner's own work (syncs, remounts, checks), timed as the
    /// harness's and run with faults held.
    fn harness<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let (start, checks) = (self.target.now_ns(), self.target.check_ns());
        let out = self.with_faults_held(f);
        let spent = self.target.now_ns().saturating_sub(start) + self.target.check_ns().saturating_sub(checks);
        self.time.record_harness(spent);
        out
    }

    /// Runs the runner's own bookkeeping on a healthy disk: an injected
    /// fault there would fail the harness, not the filesystem, and would
    /// fall in no op a trace could replay.
    fn with_faults_held<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        if let Some(faults) = self.target.faults() {
            faults.hold(true);
        }
        let out = f(self);
        if let Some(faults) = self.target.faults() {
            faults.hold(false);
        }
        out
    }
}

mod out_of_memory;
mod extent_parts;
mod write_parts;
mod read_parts;
#[cfg(test)]
mod tests;
