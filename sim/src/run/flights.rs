//! Ops between their halves and tasks asleep on a lock, by task.
//!
//! - A task has at most one op in flight: its task runs nothing else until
//!   that op's second half.
//! - A task asleep keeps the op it drew and runs it once the lock it would
//!   wait on is free.
//! - Ops in flight die with the mount they began in (a crash, a resync):
//!   [`Flights::drop_all`]. Sleeping tasks keep their ops: those never began.

use std::collections::BTreeMap;

use ext4_model::Op;

use crate::target::InFlight;

#[derive(Debug)]
pub struct Flights<H> {
    in_flight: BTreeMap<u32, InFlight<H>>,
    asleep: BTreeMap<u32, Op>,
}

impl<H> Default for Flights<H> {
    fn default() -> Self {
        Flights { in_flight: BTreeMap::new(), asleep: BTreeMap::new() }
    }
}

impl<H> Flights<H> {
    pub fn begin(&mut self, task: u32, flight: InFlight<H>) {
        let earlier = self.in_flight.insert(task, flight);
        debug_assert!(earlier.is_none(), "task {task} began an op with one already in flight");
    }

    /// Task `task`'s op in flight, taken for its second half.
    pub fn take(&mut self, task: u32) -> Option<InFlight<H>> {
        self.in_flight.remove(&task)
    }

    /// Task `task`'s op in flight, left in place.
    pub fn get(&self, task: u32) -> Option<&InFlight<H>> {
        self.in_flight.get(&task)
    }

    /// The same, to change in place (its first half's locks).
    pub fn get_mut(&mut self, task: u32) -> Option<&mut InFlight<H>> {
        self.in_flight.get_mut(&task)
    }

    /// Tasks with an op in flight, lowest first.
    pub fn tasks(&self) -> Vec<u32> {
        self.in_flight.keys().copied().collect()
    }

    pub fn has_flight(&self, task: u32) -> bool {
        self.in_flight.contains_key(&task)
    }

    pub fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// The lowest task with an op in flight: who returns first when the
    /// run winds down.
    pub fn first(&self) -> Option<u32> {
        self.in_flight.keys().next().copied()
    }

    /// The holders the ops in flight took, to hold the target's locks to.
    pub fn holders<K>(&self, holder: impl Fn(&H) -> Option<K>) -> Vec<K> {
        self.in_flight.values().filter_map(|f| holder(&f.target)).collect()
    }

    /// Every op in flight, taken out (lowest task first).
    pub fn take_all(&mut self) -> Vec<InFlight<H>> {
        std::mem::take(&mut self.in_flight).into_values().collect()
    }

    /// Every op in flight dies with the mount it began in.
    pub fn drop_all(&mut self) {
        self.in_flight.clear();
    }

    /// Puts `task` to sleep with the op it drew.
    pub fn sleep(&mut self, task: u32, op: Op) {
        let earlier = self.asleep.insert(task, op);
        debug_assert!(earlier.is_none(), "task {task} slept twice");
    }

    /// The op `task` slept with, if it sleeps: it runs now.
    pub fn wake(&mut self, task: u32) -> Option<Op> {
        self.asleep.remove(&task)
    }

    /// The op `task` sleeps with, if it sleeps.
    pub fn asleep_with(&self, task: u32) -> Option<&Op> {
        self.asleep.get(&task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4_model::{FileSystem, Model, MountConfig};

    fn flight(op: Op, holds: bool) -> InFlight<bool> {
        let mut model = Model::new(&MountConfig::default()).unwrap();
        model.create("/a", 0o644).unwrap();
        let pending = model.begin_split(&Op::Fsync { path: "/a".into() }).unwrap().unwrap();
        InFlight { op, index: 0, model: pending, target: holds, begun_ns: 0 }
    }

    #[test]
    fn flights_are_per_task_and_die_together_while_sleepers_keep_their_ops() {
        let mut f: Flights<bool> = Flights::default();
        let fsync = Op::Fsync { path: "/a".into() };
        let switch = Op::SetJournalData { path: "/b".into(), enable: false };
        f.begin(2, flight(fsync.clone(), false));
        f.begin(1, flight(switch.clone(), true));
        assert_eq!((f.first(), f.tasks()), (Some(1), vec![1, 2]));
        assert_eq!((f.get(1).map(|x| x.target), f.get(3).is_none()), (Some(true), true));
        assert_eq!(f.holders(|h| h.then_some(7)), vec![7]);
        f.sleep(3, Op::Sync);
        assert_eq!(f.asleep_with(3), Some(&Op::Sync));
        assert_eq!(f.take(2).map(|x| x.op), Some(fsync));
        assert!(f.has_flight(1) && !f.has_flight(2));
        f.drop_all();
        assert!(f.is_empty() && f.first().is_none());
        assert_eq!(f.wake(3), Some(Op::Sync), "a sleeper's op never began, so it survives");
        assert_eq!(f.wake(3), None);
    }
}
