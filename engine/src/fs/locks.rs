//! Locks that outlive one call. Every op runs to completion under `&mut`, so
//! a lock taken and dropped inside one call is invisible; what matters is a
//! lock held between the halves of a split op, while other tasks' ops run.
//! The scheduler asks [`Ext4::waits_for`] before it runs an op and puts the
//! task to sleep instead; an op that reaches a held lock anyway cannot sleep
//! in a single thread and fails with EDEADLK.
//!
//! The one such lock today is jbd2's updates lock
//! (`jbd2_journal_lock_updates`), which a journal-flag switch holds from
//! before it flushes the journal until the flag has flipped: no handle may
//! start meanwhile, so every op that changes the filesystem or waits on the
//! journal sleeps; ops that only look go on.

use std::fmt;

use ext4_model::{Errno, Op};

use crate::device::BlockDevice;

use super::Ext4;

/// Who holds a lock: one split op, by a number unique within a mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockHolder(u64);

/// A lock an op can wait on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lock {
    /// jbd2's updates lock: new handles wait while it is held.
    JournalUpdates,
}

impl fmt::Display for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lock::JournalUpdates => f.write_str("the journal's updates lock"),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Locks {
    updates: Option<LockHolder>,
    next_holder: u64,
}

impl Locks {
    /// Takes the updates lock for a new holder. Taking it twice would sleep
    /// forever here.
    pub fn lock_updates(&mut self) -> Result<LockHolder, Errno> {
        if self.updates.is_some() {
            return Err(Errno::EDEADLK);
        }
        self.next_holder += 1;
        let holder = LockHolder(self.next_holder);
        self.updates = Some(holder);
        Ok(holder)
    }

    pub fn unlock_updates(&mut self, holder: LockHolder) {
        debug_assert_eq!(self.updates, Some(holder), "updates lock released by a non-holder");
        if self.updates == Some(holder) {
            self.updates = None;
        }
    }

    pub fn holds_updates(&self, holder: LockHolder) -> bool {
        self.updates == Some(holder)
    }

    pub fn held(&self) -> Vec<(Lock, LockHolder)> {
        self.updates.map(|h| (Lock::JournalUpdates, h)).into_iter().collect()
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The lock `op` would sleep on now, if any.
    pub fn waits_for(&self, op: &Op) -> Option<Lock> {
        (self.locks.updates.is_some() && !op.only_looks()).then_some(Lock::JournalUpdates)
    }

    /// Every lock held between calls, with its holder.
    pub fn locks_held(&self) -> Vec<(Lock, LockHolder)> {
        self.locks.held()
    }

    /// Called where an op starts a handle or waits on the journal: with the
    /// updates lock held by a split op, it would sleep until that op's
    /// second half, which cannot run in this thread.
    pub(crate) fn start_handle(&self) -> Result<(), Errno> {
        match self.locks.updates {
            Some(_) => Err(Errno::EDEADLK),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_updates_lock_has_one_holder_at_a_time() {
        let mut locks = Locks::default();
        let a = locks.lock_updates().unwrap();
        assert_eq!(locks.lock_updates(), Err(Errno::EDEADLK));
        assert_eq!(locks.held(), vec![(Lock::JournalUpdates, a)]);
        locks.unlock_updates(a);
        assert!(locks.held().is_empty());
        let b = locks.lock_updates().unwrap();
        assert_ne!(a, b, "holders are never reused within a mount");
    }
}
