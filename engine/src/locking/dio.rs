//! The in-flight direct I/O count (`inode->i_dio_count`): not a lock,
//! but `inode_dio_wait` sleeps on it. A direct write is submitted under
//! the inode lock and may complete after dropping it, so whoever must see
//! no I/O in flight (truncate, the journal-flag switch) waits here.

use super::gate::Gate;
use super::{LockClass, WouldWait, Waiting};

#[derive(Debug)]
pub struct DioCount {
    gate: Gate<u32>,
}

impl DioCount {
    pub fn new(waiting: Waiting) -> DioCount {
        DioCount { gate: Gate::new(waiting, 0) }
    }

    /// inode_dio_begin.
    pub fn begin(&self) {
        *self.gate.state() += 1;
    }

    /// inode_dio_end.
    pub fn end(&self) {
        let mut n = self.gate.state();
        debug_assert!(*n > 0, "a direct I/O ended that never began");
        *n = n.saturating_sub(1);
        let drained = *n == 0;
        drop(n);
        if drained {
            self.gate.wake();
        }
    }

    /// inode_dio_wait. Refused (reported as the inode lock's wait, which
    /// is what the waiter holds) while I/O is in flight.
    pub fn wait(&self) -> Result<(), WouldWait> {
        self.gate.wait_while(LockClass::InodeRwsem, |n| *n > 0).map(drop)
    }

    pub fn in_flight(&self) -> u32 {
        *self.gate.state()
    }
}

impl Clone for DioCount {
    fn clone(&self) -> DioCount {
        DioCount { gate: self.gate.copy(|n| n) }
    }
}
