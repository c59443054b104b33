//! The in-flight direct I/O count (`inode->i_dio_count`): not a lock,
//! but `inode_dio_wait` sleeps on it. A direct write is submitted under
//! the inode lock and may complete after dropping it, so whoever must see
//! no I/O in flight (truncate, the journal-flag switch) waits here.

use crate::sync::{lock, wait, Condvar, Mutex};

use super::{LockClass, WouldWait, Waiting};

#[derive(Debug)]
pub struct DioCount {
    waiting: Waiting,
    count: Mutex<u32>,
    drained: Condvar,
}

impl DioCount {
    pub fn new(waiting: Waiting) -> DioCount {
        DioCount { waiting, count: Mutex::new(0), drained: Condvar::new() }
    }

    /// inode_dio_begin.
    pub fn begin(&self) {
        *lock(&self.count) += 1;
    }

    /// inode_dio_end.
    pub fn end(&self) {
        let mut n = lock(&self.count);
        debug_assert!(*n > 0, "a direct I/O ended that never began");
        *n = n.saturating_sub(1);
        let drained = *n == 0;
        drop(n);
        // With Waiting::Refuse nobody sleeps here; a notify would still
        // cost a futex syscall.
        if drained && self.waiting == Waiting::Sleep {
            self.drained.notify_all();
        }
    }

    /// inode_dio_wait. Refused (reported as the inode lock's wait, which
    /// is what the waiter holds) while I/O is in flight.
    pub fn wait(&self) -> Result<(), WouldWait> {
        let mut n = lock(&self.count);
        while *n > 0 {
            if self.waiting == Waiting::Refuse {
                return Err(WouldWait(LockClass::InodeRwsem));
            }
            n = wait(&self.drained, n);
        }
        Ok(())
    }

    pub fn in_flight(&self) -> u32 {
        *lock(&self.count)
    }
}

impl Clone for DioCount {
    fn clone(&self) -> DioCount {
        DioCount { waiting: self.waiting, count: Mutex::new(self.in_flight()), drained: Condvar::new() }
    }
}
