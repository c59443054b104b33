//! One run's moving parts and how a step moves them: the lockstep pair, the
//! ops in flight, the task running, and the steps recorded so far (the
//! trace that replays the run).

use ext4_model::{Op, Outcome};

use super::flights::Flights;
use crate::failure::Failure;
use crate::lockstep::Lockstep;
use crate::target::{Begun, Target};
use crate::trace::Step;

/// What a step that ran an op did.
#[derive(Debug)]
pub struct Ran {
    pub op: Op,
    /// A new op (not the second half of one).
    pub new_op: bool,
    /// Its answer; None while it is in flight, or when a resync dropped it.
    pub outcome: Option<Outcome>,
    /// The model adopted the target's state after it (ENOSPC or a fault).
    pub resynced: bool,
}

pub struct RunState<T: Target> {
    pub ls: Lockstep<T>,
    pub flights: Flights<T::SecondHalf>,
    /// The task whose steps run now.
    pub task: u32,
    /// Every step run, task switches included: the run's trace.
    pub steps: Vec<Step>,
    /// Indices into `steps` of ops the model answered with an errno.
    pub errored: Vec<usize>,
    /// Ops each task ran.
    pub task_ops: Vec<u64>,
    /// New ops run so far.
    pub ops_run: u64,
    fsck_every: u64,
    fsck_due: bool,
    /// Faults an op meets go into the trace before it (a generated run;
    /// a replay's faults are its trace's own).
    records_faults: bool,
    /// Fault steps (indices into `steps`) whose op never issued the device
    /// command they name, with the commands it did issue.
    pub unfired: Vec<(usize, u32)>,
}

impl<T: Target> RunState<T> {
    pub fn new(mut ls: Lockstep<T>, tasks: u32, fsck_every: u64, records_faults: bool) -> Self {
        // Timed write-back is a task of the run's scheduler (Step::Flusher).
        ls.target_mut().run_flusher_as_task();
        let tasks = usize::try_from(tasks).expect("task counts are validated to 1..=64");
        RunState { ls, flights: Flights::default(), task: 0, steps: Vec::new(), errored: Vec::new(), task_ops: vec![0; tasks], ops_run: 0, fsck_every, fsck_due: false, records_faults, unfired: Vec::new() }
    }

    /// Makes `task` the running one, recording the switch as a step.
    pub fn switch_to(&mut self, task: u32) {
        if task != self.task {
            self.steps.push(Step::Task(task));
            self.task = task;
        }
    }

    /// Runs one step and the checks after it. Returns what it ran, if it
    /// ran an op.
    pub fn execute(&mut self, step: Step) -> Result<Option<Ran>, Failure> {
        if matches!(step, Step::Op(_) | Step::Begin(_)) && self.flights.get(self.task).is_some() {
            // A task runs one op at a time: a shrink that dropped the
            // switch before this op left it to a task whose op is still
            // in flight, which no schedule does. Skipped, as if shrunk away.
            return Ok(None);
        }
        self.steps.push(step.clone());
        let (op, new_op, outcome) = match step {
            Step::Crash { seed } => {
                self.crash(seed)?;
                return Ok(None);
            }
            Step::Fault(event) => {
                self.ls.arm_fault(event);
                return Ok(None);
            }
            Step::Task(t) => {
                self.task = t;
                return Ok(None);
            }
            Step::Pause { ns } => {
                self.ls.pass_time(ns);
                return Ok(None);
            }
            Step::Reclaim => {
                self.ls.reclaim()?;
                return Ok(None);
            }
            Step::Flusher => {
                self.ls.flusher()?;
                // Its write-back takes and gives back locks: the same
                // discipline as an op's.
                self.ls.check_locks(self.owed_holders())?;
                return Ok(None);
            }
            Step::Op(op) => {
                let outcome = self.ls.step(&op).map(Some);
                (op, true, outcome)
            }
            Step::Begin(op) => {
                let outcome = match self.ls.begin(&op) {
                    Ok(Begun::Completed(o)) => Ok(Some(o)),
                    Ok(Begun::InFlight(flight)) => {
                        self.flights.begin(self.task, flight);
                        Ok(None)
                    }
                    Err(f) => Err(f),
                };
                (op, true, outcome)
            }
            Step::Part => match self.flights.take(self.task) {
                Some(mut flight) => {
                    let ran = self.ls.part_step(&mut flight);
                    let op = flight.op.clone();
                    self.flights.begin(self.task, flight);
                    match ran {
                        Ok(false) => return Ok(None),
                        Ok(true) => (op, false, Ok(None)),
                        Err(f) => (op, false, Err(f)),
                    }
                }
                // Its begin was shrunk away: nothing to go on with.
                None => return Ok(None),
            },
            Step::Finish => match self.flights.take(self.task) {
                Some(flight) => (flight.op.clone(), false, self.ls.finish(flight).map(Some)),
                // Its begin was shrunk away: nothing to finish.
                None => return Ok(None),
            },
        };
        if new_op {
            self.ops_run += 1;
            if let Some(n) = usize::try_from(self.task).ok().and_then(|t| self.task_ops.get_mut(t)) {
                *n += 1;
            }
        }
        if self.records_faults {
            let fired = self.ls.take_fired_faults();
            if !fired.is_empty() {
                let op_step = self.steps.pop();
                self.steps.extend(fired.into_iter().map(Step::Fault));
                self.steps.extend(op_step);
            }
        } else {
            self.note_unfired();
        }
        let outcome = outcome?;
        if outcome.as_ref().is_some_and(|o| o.is_err()) {
            self.errored.push(self.steps.len() - 1);
        }
        let resynced = self.after_op(new_op)?;
        Ok(Some(Ran { op, new_op, outcome, resynced }))
    }

    /// The checks after an op; true when the model adopted the target's state.
    fn after_op(&mut self, new_op: bool) -> Result<bool, Failure> {
        // Before any resync remounts: a lock left held by an op that has
        // returned, error paths included, puts every later handle to sleep.
        self.ls.check_locks(self.owed_holders())?;
        let space = self.ls.space_pending();
        if space || self.ls.fault_pending() {
            // The model adopts the target's state next: what was in flight
            // is dropped with the model it began in.
            let in_flight = self.flights.take_all();
            if space {
                self.ls.settle_flusher()?;
                // The target ran out of room where the model, blind to
                // metadata, still had some: the model takes its state. The
                // target stays mounted, so its ops in flight return first
                // (what they do is in the state adopted), else their locks
                // would stay held.
                self.ls.finish_on_target_only(in_flight);
                self.ls.resync_after_space()?;
            } else {
                // The op met a device fault: its answer is not comparable,
                // and the state is whatever the fault left.
                self.ls.resync_after_fault()?;
            }
            return Ok(true);
        }
        self.fsck_due |= new_op && self.fsck_every > 0 && self.ops_run % self.fsck_every == 0;
        self.ls.check_model()?;
        // An op in flight holds what its first half took: the check waits
        // until none is, so it sees the filesystem between ops.
        if self.fsck_due && self.flights.is_empty() && self.ls.flusher_holder().is_none() {
            self.fsck_due = false;
            self.ls.full_check()?;
        }
        Ok(false)
    }

    /// Holders that may hold locks now: ops in flight and the flusher.
    fn owed_holders(&self) -> Vec<T::Holder> {
        let mut owed = self.flights.holders(T::holder);
        owed.extend(self.ls.flusher_holder());
        owed
    }

    /// Notes the fault steps just before the op that the op never reached.
    fn note_unfired(&mut self) {
        let (events, commands) = self.ls.take_unfired_faults();
        let op_at = self.steps.len() - 1;
        for event in events {
            let armed_at = (0..op_at).rev().take_while(|&i| matches!(self.steps[i], Step::Fault(_))).find(|&i| self.steps[i] == Step::Fault(event));
            if let Some(i) = armed_at {
                self.unfired.push((i, commands));
            }
        }
    }

    /// A crash ends what was in flight: those ops never returned.
    pub fn crash(&mut self, seed: u64) -> Result<(), Failure> {
        self.flights.drop_all();
        self.ls.crash(seed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::test_target::{run_state, Knobs, Plain};
    use ext4_model::{Errno, OpKind, Reply};

    fn mkdir(path: &str) -> Step {
        Step::Op(Op::Mkdir { path: path.into(), perm: 0o755 })
    }

    fn run(st: &mut RunState<Plain>, steps: impl IntoIterator<Item = Step>) {
        for step in steps {
            st.execute(step).unwrap();
        }
    }

    #[test]
    fn full_checks_fall_due_every_fsck_every_ops_and_never_at_zero() {
        let mut st = run_state(Knobs::default(), 1, 3);
        run(&mut st, (0..7).map(|i| mkdir(&format!("/d{i}"))));
        assert_eq!(st.ls.target_mut().fscks_at, [3, 6]);
        assert_eq!(st.ls.stats().fscks, 2);

        let mut never = run_state(Knobs::default(), 1, 0);
        run(&mut never, (0..7).map(|i| mkdir(&format!("/d{i}"))));
        assert!(never.ls.target_mut().fscks_at.is_empty());
    }

    #[test]
    fn a_due_full_check_waits_for_the_op_in_flight_and_runs_once_it_returns() {
        let mut st = run_state(Knobs { splits_fsync: true, ..Knobs::default() }, 2, 2);
        let fsync = Op::Fsync { path: "/a".into() };
        run(&mut st, [Step::Op(Op::Create { path: "/a".into(), perm: 0o644 }), Step::Task(1), Step::Begin(fsync)]);
        // The second op made a check due, but the fsync is between its halves.
        assert!(st.flights.has_flight(1));
        run(&mut st, [Step::Task(0), Step::Op(Op::Stat { path: "/a".into() })]);
        assert_eq!(st.ls.stats().fscks, 0, "still in flight after another task's op");
        run(&mut st, [Step::Task(1), Step::Finish]);
        assert!(st.flights.is_empty());
        assert_eq!(st.ls.stats().fscks, 1);
        assert_eq!(st.ls.target_mut().fscks_at, [3], "after create, the fsync's first half and stat");
    }

    #[test]
    fn steps_are_recorded_in_order_errno_answers_listed_and_ops_counted_per_task() {
        let mut st = run_state(Knobs::default(), 2, 0);
        let steps = vec![
            mkdir("/d"),
            Step::Op(Op::Rmdir { path: "/nope".into() }),
            Step::Task(1),
            Step::Op(Op::Create { path: "/d/f".into(), perm: 0o644 }),
            Step::Op(Op::Unlink { path: "/missing".into() }),
            Step::Op(Op::Stat { path: "/d/f".into() }),
        ];
        let ran: Vec<_> = steps.iter().map(|s| st.execute(s.clone()).unwrap()).collect();
        assert_eq!(st.steps, steps);
        assert_eq!(st.errored, [1, 4]);
        assert_eq!((st.ops_run, st.task_ops.clone()), (5, vec![2, 3]));
        assert!(ran[2].is_none(), "a task switch runs no op");
        let rmdir = ran[1].as_ref().unwrap();
        assert_eq!((rmdir.new_op, &rmdir.outcome, rmdir.resynced), (true, &Some(Err(Errno::ENOENT)), false));
        assert_eq!(st.ls.stats().errors.get(&Errno::ENOENT), Some(&2));
        assert_eq!(st.ls.stats().ok.get(&OpKind::Stat), Some(&1));
    }

    #[test]
    fn a_finish_with_nothing_in_flight_is_recorded_and_runs_nothing() {
        let mut st = run_state(Knobs::default(), 1, 1);
        assert!(st.execute(Step::Finish).unwrap().is_none());
        assert_eq!(st.steps, [Step::Finish]);
        assert_eq!((st.ops_run, st.ls.index(), st.ls.stats().fscks), (0, 0, 0));
    }

    #[test]
    fn the_second_half_returns_the_op_but_counts_no_new_op() {
        let mut st = run_state(Knobs { splits_fsync: true, ..Knobs::default() }, 1, 0);
        run(&mut st, [Step::Op(Op::Create { path: "/a".into(), perm: 0o644 })]);
        let begun = st.execute(Step::Begin(Op::Fsync { path: "/a".into() })).unwrap().unwrap();
        assert_eq!((begun.new_op, begun.outcome), (true, None));
        let finished = st.execute(Step::Finish).unwrap().unwrap();
        assert_eq!((finished.op, finished.new_op, finished.outcome), (Op::Fsync { path: "/a".into() }, false, Some(Ok(Reply::Done))));
        assert_eq!((st.ops_run, st.task_ops.clone()), (2, vec![2]));
    }

    #[test]
    fn an_op_that_returns_holding_a_lock_fails_its_step() {
        let mut st = run_state(Knobs { leaks_lock_on: Some(OpKind::Mkdir), ..Knobs::default() }, 1, 0);
        run(&mut st, [Step::Op(Op::Sync)]);
        match st.execute(mkdir("/d")) {
            Err(Failure::Lock { index, op, what }) => {
                assert_eq!((index, op), (2, Some(OpKind::Mkdir)));
                assert!(what.contains("the lock a Mkdir took") && what.contains("mkdir"), "{what}");
            }
            other => panic!("expected a lock failure, got {other:?}"),
        }
        assert_eq!(st.steps.last(), Some(&mkdir("/d")), "the failing step is in the trace");
    }

    #[test]
    fn a_crash_drops_the_ops_in_flight() {
        let mut st = run_state(Knobs { splits_fsync: true, ..Knobs::default() }, 2, 0);
        run(&mut st, [Step::Op(Op::Create { path: "/a".into(), perm: 0o644 }), Step::Task(1), Step::Begin(Op::Fsync { path: "/a".into() })]);
        assert!(st.execute(Step::Crash { seed: 5 }).unwrap().is_none());
        assert!(st.flights.is_empty());
        assert_eq!(st.ls.stats().crashes, 1);
        assert!(st.execute(Step::Finish).unwrap().is_none(), "the fsync died with the mount");
    }
}
