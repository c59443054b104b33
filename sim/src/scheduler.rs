//! Several simulated tasks, each with its own seeded workload, interleaved by
//! a seeded scheduler: same seed, same interleaving. Tasks share the
//! namespace: each learns the names the others make, so they work on the
//! same files, but not the names they remove, so one task's ops hit names
//! another renamed or removed until it finds them missing itself. Files grow
//! side by side in the allocator.
//!
//! Ops run to completion under `&mut`, one filesystem-wide lock, except
//! those the engine can split where ext4 sleeps (`Step::Begin`, then
//! `Step::Finish` when its task runs again): an fsync at its commit, so other
//! tasks' ops go into the next transaction; chattr -j while it flushes the
//! journal under jbd2's updates lock; and writes, truncates, direct writes,
//! page faults and reads where they sleep on I/O holding their inode's
//! locks (i_rwsem, invalidate_lock, the DIO count); a pwrite goes on
//! folio by folio in between (`Step::Part`). Tasks whose next op
//! would take a held lock sleep (the driver asks the engine) and the
//! scheduler runs others. The flusher is a task outside these (see
//! `run::source`). Finer preemption points (between two locks of one op,
//! between a handle's start and stop) need the engine to yield there.

use ext4_model::{Op, OpKind, Outcome};
use rand::RngExt;

use crate::draws::{Draws, InputDraws};
use crate::workload::{Workload, WorkloadConfig};

/// Chance in 4 that the scheduler lets the running task go on.
const STAY_IN_4: u32 = 3;

pub struct Tasks {
    workloads: Vec<Workload>,
    rng: Draws,
    current: u32,
}

impl Tasks {
    /// `count` tasks (at least one). With one task the ops are exactly
    /// [`Workload::new`]'s and the scheduler draws nothing.
    pub fn new(seed: u64, count: u32, cfg: WorkloadConfig) -> Tasks {
        let count = count.max(1);
        let workloads = (0..count).map(|t| Workload::for_task(seed, t, cfg)).collect();
        let rng = Draws::seeded(seed, 0x73_6368_6564); // "sched"
        Tasks { workloads, rng, current: 0 }
    }

    /// `count` tasks whose ops and interleaving a fuzzer's input draws.
    pub fn from_input(input: &InputDraws, count: u32, cfg: WorkloadConfig) -> Tasks {
        let workloads = (0..count.max(1)).map(|_| Workload::from_input(input, cfg)).collect();
        Tasks { workloads, rng: Draws::Input(input.clone()), current: 0 }
    }

    pub fn count(&self) -> u32 {
        self.workloads.len() as u32
    }

    /// Op kinds any task generates.
    pub fn enabled_kinds(&self) -> Vec<OpKind> {
        let mut kinds: Vec<OpKind> = self.workloads.iter().flat_map(|w| w.enabled_kinds()).collect();
        kinds.sort_by_key(|k| OpKind::ALL.iter().position(|a| a == k));
        kinds.dedup();
        kinds
    }

    /// Picks who runs next. A task waiting on a commit (`waiting`) is
    /// passed over three times in four while another can run: a commit
    /// takes I/O time, in which the others get on.
    pub fn pick(&mut self, waiting: impl Fn(u32) -> bool) -> u32 {
        let n = self.count();
        if n > 1 && !self.rng.random_ratio(STAY_IN_4, 4) {
            self.current = self.rng.random_range(0..n);
        }
        if waiting(self.current) && self.rng.random_ratio(3, 4) {
            self.pick_among(|t| !waiting(t));
        }
        self.current
    }

    /// Picks among the tasks that can run, or leaves the pick as it is
    /// (None) when none can: for a task [`Tasks::pick`] chose that sleeps
    /// on a lock.
    pub fn pick_among(&mut self, mut runnable: impl FnMut(u32) -> bool) -> Option<u32> {
        let can: Vec<u32> = (0..self.count()).filter(|&t| runnable(t)).collect();
        if can.is_empty() {
            return None;
        }
        self.current = can[self.rng.random_range(0..can.len())];
        Some(self.current)
    }

    /// The current task's next op.
    pub fn op(&mut self) -> Op {
        self.workloads[self.current as usize].next_op()
    }

    /// Whether `op` runs in two halves, so that other tasks' ops may
    /// overtake it, when tasks interleave: half the fsyncs, fdatasyncs and
    /// journal-flag switches, a quarter of the ops that sleep holding their
    /// inode's locks (there are many more of those).
    pub fn split(&mut self, op: &Op) -> bool {
        if self.count() < 2 || !op.has_two_halves() {
            return false;
        }
        let in_4 = if op.sleeps_holding_locks() { 1 } else { 2 };
        self.rng.random_ratio(in_4, 4)
    }

    /// Whether a buffered write in flight copies one more folio now rather
    /// than return: three times in four, so writes of several folios are
    /// seen part done.
    pub fn part(&mut self) -> bool {
        self.rng.random_ratio(3, 4)
    }

    /// Tells task `task` what its op returned, and the other tasks what
    /// names it made (see [`Workload::observe_other`]).
    pub fn observe(&mut self, task: u32, op: &Op, outcome: &Outcome) {
        for (t, w) in self.workloads.iter_mut().enumerate() {
            if t == task as usize {
                w.observe(op, outcome);
            } else {
                w.observe_other(op, outcome);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule(seed: u64, count: u32, ops: usize) -> Vec<(u32, Op)> {
        let mut t = Tasks::new(seed, count, WorkloadConfig::new(4096));
        (0..ops).map(|_| (t.pick(|_| false), t.op())).collect()
    }

    #[test]
    fn one_task_is_the_plain_workload_and_many_interleave_by_seed() {
        let mut plain = Workload::new(5, WorkloadConfig::new(4096));
        let single: Vec<Op> = schedule(5, 1, 50).into_iter().map(|(_, op)| op).collect();
        assert_eq!(single, (0..50).map(|_| plain.next_op()).collect::<Vec<_>>());

        let a = schedule(5, 3, 300);
        assert_eq!(a, schedule(5, 3, 300), "same seed, same interleaving");
        assert_ne!(a, schedule(6, 3, 300));
        let ran: std::collections::BTreeSet<u32> = a.iter().map(|(t, _)| *t).collect();
        assert_eq!(ran.len(), 3, "every task runs");
        let switches = a.windows(2).filter(|w| w[0].0 != w[1].0).count();
        assert!((20..200).contains(&switches), "{switches} switches in 300 ops");
    }

    #[test]
    fn a_task_waiting_on_a_commit_is_mostly_passed_over() {
        let mut t = Tasks::new(9, 3, WorkloadConfig::new(4096));
        let picks: Vec<u32> = (0..400).map(|_| t.pick(|task| task == 1)).collect();
        let waiting = picks.iter().filter(|&&p| p == 1).count();
        assert!((1..40).contains(&waiting), "task 1 picked {waiting} times in 400 while waiting");
        // With every task waiting there is no one else: the pick stands.
        let mut t = Tasks::new(9, 3, WorkloadConfig::new(4096));
        assert!((0..50).map(|_| t.pick(|_| true)).any(|p| p != 0));
        // A task asleep on a lock is never picked while another can run.
        let mut t = Tasks::new(9, 3, WorkloadConfig::new(4096));
        assert!((0..100).map(|_| t.pick_among(|task| task != 2)).all(|p| p.is_some_and(|p| p != 2)));
        assert_eq!(t.pick_among(|_| false), None);
        // Only ops with two halves split, and only when tasks interleave.
        let mut one = Tasks::new(9, 1, WorkloadConfig::new(4096));
        assert!(!(0..50).any(|_| one.split(&Op::Fsync { path: "/a".into() })));
        let mut many = Tasks::new(9, 2, WorkloadConfig::new(4096));
        assert!(!(0..50).any(|_| many.split(&Op::Stat { path: "/a".into() })));
        let splits = (0..200).filter(|_| many.split(&Op::Fdatasync { path: "/a".into() })).count();
        assert!((60..140).contains(&splits), "{splits} of 200 split");
        let switch = Op::SetJournalData { path: "/a".into(), enable: true };
        assert!((0..50).any(|_| many.split(&switch)));
        let write = Op::Write { path: "/a".into(), offset: 0, len: 1, seed: 0 };
        let splits = (0..400).filter(|_| many.split(&write)).count();
        assert!((60..140).contains(&splits), "{splits} of 400 writes split");
    }
}
