//! Where a run's steps come from.
//!
//! - **Generated**: the seeded tasks draw ops, the scheduler picks who
//!   runs, and crashes are drawn after ops; what ran is recorded as steps.
//! - **Replay**: a fixed list of steps (a trace, or a shrink candidate).
//!   An op (or a second half) that would sleep on a lock makes a lock's
//!   holder that can finish finish first, so a trace whose interleaving was
//!   shrunk away cannot deadlock.
//!
//! Either way, once the steps run out the ops in flight return, the
//! flusher's first (tasks may sleep on its folio locks), then the lowest
//! task's.
//!
//! The flusher is a task of its own, outside the workload's: after a step
//! that ran an op it gets the CPU about every other time it has something
//! to do, and one time in four while it sleeps on a write-back (its own
//! stream), so its write-back's halves fall anywhere, between other ops'
//! halves too. Asleep before a write-back it holds nothing, and its second
//! half never sleeps: when every task sleeps, it runs.

use rand::RngExt;

use super::spec::RunSpec;
use super::state::{Ran, RunState};
use crate::draws::{Draws, InputDraws};
use crate::failure::Failure;
use crate::scheduler::Tasks;
use crate::target::Target;
use crate::trace::Step;
use crate::workload::WorkloadConfig;

pub enum StepSource {
    Generated(Box<Generated>),
    Replay(Replay),
}

/// Largest read or write an input's op makes. A fuzzer's executions per
/// second fall with every byte an op moves (each is generated, copied and
/// compared in loops traced for coverage); 64 KiB still spans blocks and
/// folios up to order 4 at 4 KiB pages.
const INPUT_MAX_IO: u32 = 64 << 10;

pub struct Generated {
    tasks: Tasks,
    crash_rng: Draws,
    /// Draws pauses between ops; None with think time off.
    think_rng: Option<Draws>,
    /// Draws whether the reclaimer task runs while memory is low.
    kswapd_rng: Draws,
    /// Draws whether the flusher task runs when it has work.
    flusher_rng: Draws,
    /// A fuzzer's input every choice is drawn from; the run ends with it.
    input: Option<InputDraws>,
    ops: u64,
    crash_every: u64,
}

pub struct Replay {
    steps: std::iter::Peekable<std::vec::IntoIter<Step>>,
    /// The task to go back to after finishing a lock's holder.
    resume: Option<u32>,
}

impl StepSource {
    pub fn generated(spec: &RunSpec) -> StepSource {
        let seed = spec.seed;
        let tasks = Tasks::new(seed, spec.tasks, WorkloadConfig { swarm: spec.swarm, ..WorkloadConfig::new(spec.mount.block_size) });
        StepSource::Generated(Box::new(Generated {
            tasks,
            crash_rng: Draws::seeded(seed, 0x0063_7261_7368), // "crash"
            think_rng: spec.think.then(|| Draws::seeded(seed, 0x0074_6869_6e6b)), // "think"
            kswapd_rng: Draws::seeded(seed, 0x006b_7377_6170), // "kswap"
            flusher_rng: Draws::seeded(seed, 0x0066_6c75_7368), // "flush"
            input: None,
            ops: spec.ops,
            crash_every: spec.crash_every,
        }))
    }

    /// Generated as [`StepSource::generated`] makes them, every choice
    /// drawn from a fuzzer's input instead of the seed's streams; the run
    /// ends when the input does (or at `spec.ops`).
    pub fn from_input(spec: &RunSpec, input: InputDraws) -> StepSource {
        let cfg = WorkloadConfig { swarm: spec.swarm, max_io: INPUT_MAX_IO, ..WorkloadConfig::new(spec.mount.block_size) };
        let tasks = Tasks::from_input(&input, spec.tasks, cfg);
        let draws = || Draws::Input(input.clone());
        StepSource::Generated(Box::new(Generated {
            tasks,
            crash_rng: draws(),
            think_rng: spec.think.then(draws),
            kswapd_rng: draws(),
            flusher_rng: draws(),
            input: Some(input),
            ops: spec.ops,
            crash_every: spec.crash_every,
        }))
    }

    pub fn replay(steps: Vec<Step>) -> StepSource {
        StepSource::Replay(Replay { steps: steps.into_iter().peekable(), resume: None })
    }

    /// The next step to run (task switches it implies already recorded),
    /// None when the run is over.
    pub fn next<T: Target>(&mut self, st: &mut RunState<T>) -> Result<Option<Step>, Failure> {
        match self {
            StepSource::Generated(g) => g.next(st),
            StepSource::Replay(r) => r.next(st),
        }
    }

    /// After a step ran an op: a generated run learns from its answer and
    /// may crash.
    pub fn after<T: Target>(&mut self, st: &mut RunState<T>, ran: &Ran) -> Result<(), Failure> {
        let StepSource::Generated(g) = self else { return Ok(()) };
        if ran.resynced {
            return Ok(());
        }
        if let Some(outcome) = &ran.outcome {
            g.tasks.observe(st.task, &ran.op, outcome);
        }
        // Crash points are drawn here and recorded as steps, so a trace
        // replays (and shrinks) with its crashes where they happened.
        if ran.new_op && g.crash_every > 0 && g.crash_rng.random_range(0..g.crash_every) == 0 {
            let seed = g.crash_rng.random();
            st.steps.push(Step::Crash { seed });
            st.crash(seed)?;
        }
        // Pauses too, from a stream of their own (drawing them moves no
        // other choice of the run).
        if let Some(ns) = g.think_rng.as_mut().filter(|_| ran.new_op).and_then(pause) {
            st.execute(Step::Pause { ns })?;
        }
        // The reclaimer task: woken by low memory, it gets the CPU between
        // other tasks' ops about every other time (its own stream again).
        if ran.new_op && st.ls.memory_low() && g.kswapd_rng.random_range(0..2) == 0 {
            st.execute(Step::Reclaim)?;
        }
        // Asleep on its write-back, it wakes one time in four: long enough
        // for other tasks to meet its folio locks.
        let odds = if st.ls.flusher_holder().is_some() { 4 } else { 2 };
        if st.ls.flusher_runnable() && g.flusher_rng.random_range(0..odds) == 0 {
            match st.ls.flusher_waits_for() {
                Some(_) => st.ls.note_flusher_sleep(),
                None => {
                    st.execute(Step::Flusher)?;
                }
            }
        }
        Ok(())
    }

    /// Op kinds the generator draws (all of them for a replay).
    pub fn enabled_kinds(&self) -> Vec<ext4_model::OpKind> {
        match self {
            StepSource::Generated(g) => g.tasks.enabled_kinds(),
            StepSource::Replay(_) => ext4_model::OpKind::ALL.to_vec(),
        }
    }
}

const SEC_NS: u64 = 1_000_000_000;

/// Whether a program pauses after an op, and for how long: one op in 40,
/// mostly under the 5 s commit interval, sometimes past it, and now and
/// then past the 30 s a dirty inode waits for the flusher.
fn pause(rng: &mut Draws) -> Option<u64> {
    if !rng.random_ratio(1, 40) {
        return None;
    }
    Some(match rng.random_range(0..20) {
        0..=9 => rng.random_range(SEC_NS / 10..2 * SEC_NS),
        10..=16 => rng.random_range(2 * SEC_NS..10 * SEC_NS),
        _ => rng.random_range(10 * SEC_NS..60 * SEC_NS),
    })
}

/// Whether task `t` is asleep on an op that would still wait, or has an
/// op in flight whose second half would.
fn sleeps<T: Target>(st: &mut RunState<T>, t: u32) -> bool {
    if let Some(flight) = st.flights.get_mut(t) {
        return st.ls.finish_waits_for(flight).is_some();
    }
    let Some(op) = st.flights.asleep_with(t).cloned() else { return false };
    st.ls.waits_for(&op).is_some()
}

/// The lock task `t`'s second half would sleep on now, if it has one.
fn finish_sleeps<T: Target>(st: &mut RunState<T>, t: u32) -> Option<T::Lock> {
    let flight = st.flights.get_mut(t)?;
    st.ls.finish_waits_for(flight)
}

/// Once the steps are over, begun ops return: the lowest task first whose
/// second half would not sleep. If each would, they wait on each other's
/// locks: the failure a generated run meets when every task sleeps, so a
/// replay of its trace fails alike.
fn wind_down<T: Target>(st: &mut RunState<T>) -> Result<Option<Step>, Failure> {
    if st.ls.flusher_holder().is_some() {
        return Ok(Some(Step::Flusher));
    }
    if st.flights.first().is_none() {
        return Ok(None);
    }
    let Some(task) = st.flights.tasks().into_iter().find(|&t| finish_sleeps(st, t).is_none()) else { return Err(never_ends(st)) };
    st.switch_to(task);
    Ok(Some(Step::Finish))
}

/// Tasks that each wait on a lock another sleeper holds, or no one.
fn never_ends<T: Target>(st: &mut RunState<T>) -> Failure {
    st.ls.lock_failure(format!("every task sleeps on a lock: a wait that can never end ({})", st.ls.held_locks()))
}

impl Generated {
    fn next<T: Target>(&mut self, st: &mut RunState<T>) -> Result<Option<Step>, Failure> {
        loop {
            if st.ops_run >= self.ops || self.input.as_ref().is_some_and(InputDraws::exhausted) {
                return wind_down(st);
            }
            let mut next = self.tasks.pick(|t| st.flights.has_flight(t));
            if sleeps(st, next) {
                match self.tasks.pick_among(|t| !sleeps(st, t)) {
                    Some(t) => next = t,
                    // Every task sleeps: the flusher's second half, which
                    // never does, may be what they wait for.
                    None if st.ls.flusher_holder().is_some() => return Ok(Some(Step::Flusher)),
                    None => return Err(never_ends(st)),
                }
            }
            let step = if let Some(flight) = st.flights.get(next) {
                // A write in flight mostly goes on a folio before it returns.
                if st.ls.has_part(flight) && self.tasks.part() {
                    Step::Part
                } else {
                    Step::Finish
                }
            } else {
                let op = match st.flights.wake(next) {
                    Some(op) => op,
                    None => self.tasks.op(),
                };
                if let Some(lock) = st.ls.waits_for(&op) {
                    // A task takes the locks before the one it sleeps on,
                    // as the kernel's would: its op begins, holding them
                    // (and the begin counts the sleep).
                    if !st.ls.sleeps_holding_first_locks(&op) {
                        st.ls.note_lock_sleep(&lock);
                        st.flights.sleep(next, op);
                        continue;
                    }
                    Step::Begin(op)
                } else if self.tasks.split(&op) {
                    Step::Begin(op)
                } else {
                    Step::Op(op)
                }
            };
            if self.tasks.count() > 1 {
                // A switch is a step: the trace shows who ran what.
                st.switch_to(next);
            }
            return Ok(Some(step));
        }
    }
}

impl Replay {
    fn next<T: Target>(&mut self, st: &mut RunState<T>) -> Result<Option<Step>, Failure> {
        if let Some(task) = self.resume.take() {
            st.switch_to(task);
        }
        // A task's op returns before its next begins (a shrunk trace may
        // have lost the finish between them); that finish may sleep like
        // any other.
        let lost_finish = matches!(self.steps.peek(), Some(Step::Op(_) | Step::Begin(_))) && st.flights.has_flight(st.task);
        let sleeps = match self.steps.peek() {
            _ if lost_finish => finish_sleeps(st, st.task),
            // Such an op begins holding what it can take; its second half
            // is what sleeps.
            Some(Step::Begin(op)) if op.sleeps_holding_locks() => None,
            Some(Step::Op(op) | Step::Begin(op)) => st.ls.waits_for(op),
            Some(Step::Finish | Step::Part) => finish_sleeps(st, st.task),
            _ => None,
        };
        // With no holder in flight that can finish, the op runs and meets
        // the lock.
        let current = st.task;
        let free_holder = |st: &mut RunState<T>| {
            let holders: Vec<u32> = st.flights.tasks().into_iter().filter(|&t| t != current && st.flights.get(t).is_some_and(|f| T::holder(&f.target).is_some())).collect();
            holders.into_iter().find(|&t| finish_sleeps(st, t).is_none())
        };
        // The flusher's second half never sleeps: it goes first.
        if let (Some(lock), Some(_)) = (&sleeps, st.ls.flusher_holder()) {
            st.ls.note_lock_sleep(lock);
            return Ok(Some(Step::Flusher));
        }
        if let Some((lock, holder)) = sleeps.and_then(|l| free_holder(st).map(|h| (l, h))) {
            st.ls.note_lock_sleep(&lock);
            self.resume = Some(st.task);
            st.switch_to(holder);
            return Ok(Some(Step::Finish));
        }
        if lost_finish {
            return Ok(Some(Step::Finish));
        }
        match self.steps.next() {
            Some(step) => Ok(Some(step)),
            None => wind_down(st),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::test_target::{run_state, Knobs, Plain};
    use ext4_model::{MountConfig, Op};

    fn state(tasks: u32) -> RunState<Plain> {
        run_state(Knobs::default(), tasks, 0)
    }

    #[test]
    fn a_generated_source_stops_at_its_op_count_and_records_task_switches() {
        let spec = RunSpec { tasks: 3, ..RunSpec::new(4, 40, MountConfig::default()) };
        let mut source = StepSource::generated(&spec);
        let mut st = state(3);
        while let Some(step) = source.next(&mut st).unwrap() {
            if let Some(ran) = st.execute(step).unwrap() {
                source.after(&mut st, &ran).unwrap();
            }
        }
        assert_eq!(st.ops_run, 40);
        let switches = st.steps.iter().filter(|s| matches!(s, Step::Task(_))).count();
        assert!(switches > 0, "three tasks interleave");
        assert_eq!(st.task_ops.iter().sum::<u64>(), 40);
        assert!(st.steps.iter().all(|s| !matches!(s, Step::Crash { .. })), "no crashes were asked for");
    }

    /// Tasks that all sleep on locks no op in flight will release are a
    /// wait that can never end: the run fails, naming every held lock,
    /// instead of spinning.
    #[test]
    fn every_task_asleep_on_a_lock_fails_the_run() {
        let spec = RunSpec { tasks: 3, ..RunSpec::new(4, 40, MountConfig::default()) };
        let mut source = StepSource::generated(&spec);
        let mut st = run_state(Knobs { every_op_waits: true, ..Knobs::default() }, 3, 0);
        st.ls.target_mut().locks.push(("a stuck lock".into(), 7));
        let failure = source.next(&mut st).expect_err("no task can run");
        let shown = failure.to_string();
        assert!(shown.contains("can never end") && shown.contains("a stuck lock by 7"), "{shown}");
        assert_eq!(st.ops_run, 0);
    }

    /// A replay whose begun ops cannot return, each waiting on a lock,
    /// fails as the generated run did, so such a trace shrinks.
    #[test]
    fn a_replay_ending_with_every_op_in_flight_asleep_fails() {
        let fsync = || Op::Fsync { path: "/".into() };
        let mut source = StepSource::replay(vec![Step::Begin(fsync()), Step::Task(1), Step::Begin(fsync())]);
        let mut st = run_state(Knobs { every_op_waits: true, splits_fsync: true, ..Knobs::default() }, 2, 0);
        for _ in 0..3 {
            let step = source.next(&mut st).unwrap().expect("three steps");
            st.execute(step).unwrap();
        }
        // Now each second half waits on a lock no one will release.
        st.ls.target_mut().locks.push(("a stuck lock".into(), 7));
        let failure = source.next(&mut st).expect_err("neither op can return");
        assert!(failure.to_string().contains("can never end"), "{failure}");
        assert_eq!(st.flights.tasks().len(), 2);
    }

    #[test]
    fn a_replay_yields_its_steps_then_ends() {
        let steps = vec![Step::Op(Op::Sync), Step::Task(1), Step::Op(Op::Stat { path: "/".into() })];
        let mut source = StepSource::replay(steps.clone());
        let mut st = state(2);
        let mut seen = Vec::new();
        while let Some(step) = source.next(&mut st).unwrap() {
            seen.push(step.clone());
            st.execute(step).unwrap();
        }
        assert_eq!(seen, steps);
        assert_eq!((st.task, st.ops_run), (1, 2));
    }
}
