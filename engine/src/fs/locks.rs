//! The engine's locks (`crate::locking`): the filesystem's own
//! (s_writepages_rwsem, jbd2's updates barrier) and each inode's (i_rwsem,
//! invalidate_lock, the DIO count), with lockdep over every acquisition.
//!
//! Every op runs to completion under `&mut` in one thread, so a lock that
//! cannot be had at once could never be released: it is refused, and the
//! op fails with EDEADLK. What matters is a lock held between the halves
//! of a split op while other tasks' ops run: the scheduler asks
//! [`Ext4::waits_for`] before it runs an op and puts the task to sleep
//! instead. A -j holds every lock of the switch across its journal flush
//! (`crate::locking::switch`); no handle may start meanwhile, so every op
//! that changes the filesystem or waits on the journal sleeps. Ops that
//! only look go on, except into the switching inode: a buffered read
//! takes its invalidate_lock shared, SEEK_DATA/SEEK_HOLE its i_rwsem.

use std::collections::BTreeMap;

use ext4_model::{Errno, Op};

use crate::device::BlockDevice;
use crate::format::InodeNumber;
use crate::locking::lockdep::{Acquired, LockDep, LockViolation};
use crate::locking::switch::{FsLocks, InodeLocks, Tracker};
use crate::locking::Waiting;
use crate::sync::{lock, Arc, Mutex};

use super::Ext4;

pub use crate::locking::LockClass as Lock;

/// Inodes' locks are made on first use and forgotten, once idle, when
/// more than this many are kept.
const PRUNE_ABOVE: usize = 256;

/// Who holds a lock: one op, by a number unique within a mount. Ops that
/// return take [`LockHolder::OP`]; a split op keeps its own across halves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockHolder(u64);

impl LockHolder {
    /// The op running now, which must hold nothing when it returns.
    pub const OP: LockHolder = LockHolder(0);

    /// Its number, as lockdep and the page cache's folio locks know it.
    pub(crate) fn number(self) -> u64 {
        self.0
    }
}

/// The locks, shared (by `Arc`) with a protocol that runs while the
/// engine itself is borrowed for the steps between them.
#[derive(Debug)]
pub(crate) struct LockSet {
    pub fs: FsLocks,
    inodes: Mutex<BTreeMap<InodeNumber, Arc<InodeLocks>>>,
    lockdep: Mutex<LockDep>,
}

#[derive(Debug)]
pub(crate) struct Locks {
    pub set: Arc<LockSet>,
    next_holder: u64,
    /// jbd2 handles split ops hold between their halves: the running
    /// transaction cannot close (commit) until they stop.
    pub split_handles: u32,
}

impl Default for Locks {
    fn default() -> Locks {
        let set = LockSet { fs: FsLocks::new(Waiting::Refuse), inodes: Mutex::new(BTreeMap::new()), lockdep: Mutex::new(LockDep::default()) };
        Locks { set: Arc::new(set), next_holder: 0, split_handles: 0 }
    }
}

/// A copy in the same state, sharing nothing (a check's shadow).
impl Clone for Locks {
    fn clone(&self) -> Locks {
        let inodes = lock(&self.set.inodes).iter().map(|(ino, l)| (*ino, Arc::new(InodeLocks::clone(l)))).collect();
        let set = LockSet { fs: self.set.fs.clone(), inodes: Mutex::new(inodes), lockdep: Mutex::new(lock(&self.set.lockdep).clone()) };
        Locks { set: Arc::new(set), next_holder: self.next_holder, split_handles: self.split_handles }
    }
}

impl Locks {
    /// A holder for a split op; never reused within a mount.
    pub fn new_holder(&mut self) -> LockHolder {
        self.next_holder += 1;
        LockHolder(self.next_holder)
    }

    /// Inode `ino`'s locks, made on first use.
    pub fn inode(&self, ino: InodeNumber) -> Arc<InodeLocks> {
        lock(&self.set.inodes).entry(ino).or_insert_with(|| Arc::new(InodeLocks::new(Waiting::Refuse))).clone()
    }

    /// Inode `ino`'s locks if anyone has taken them since they were
    /// last pruned (never taken: free).
    pub fn inode_if_known(&self, ino: InodeNumber) -> Option<Arc<InodeLocks>> {
        lock(&self.set.inodes).get(&ino).cloned()
    }

    /// Whether any lock is held (between ops: by a split op).
    pub fn any_held(&self) -> bool {
        lock(&self.set.lockdep).holders().next().is_some()
    }

    pub fn inode_count(&self) -> usize {
        lock(&self.set.inodes).len()
    }

    /// Forgets the locks of inodes nobody holds (evicted inodes).
    pub fn prune(&self) {
        lock(&self.set.inodes).retain(|_, l| !l.is_idle() || Arc::strong_count(l) > 1);
    }

    /// A lockdep tracker for `holder`.
    pub fn tracker(&self, holder: LockHolder) -> HolderTracker {
        HolderTracker { set: self.set.clone(), holder }
    }

    pub fn held(&self) -> Vec<(Lock, LockHolder)> {
        let dep = lock(&self.set.lockdep);
        dep.holders().flat_map(|(h, stack)| stack.iter().map(move |a| (a.class, LockHolder(h)))).collect()
    }

    pub fn holds(&self, holder: LockHolder) -> bool {
        !lock(&self.set.lockdep).held_by(holder.0).is_empty()
    }

    pub fn take_violations(&self) -> Vec<LockViolation> {
        lock(&self.set.lockdep).take_violations()
    }

    pub fn acquisitions(&self) -> u64 {
        lock(&self.set.lockdep).acquisitions()
    }
}

/// Records acquisitions for one holder in the engine's lockdep.
pub(crate) struct HolderTracker {
    set: Arc<LockSet>,
    holder: LockHolder,
}

impl Tracker for HolderTracker {
    fn acquired(&mut self, a: Acquired) {
        lock(&self.set.lockdep).acquired(self.holder.0, a);
    }
    fn released(&mut self, class: Lock, instance: u64) {
        lock(&self.set.lockdep).released(self.holder.0, class, instance);
    }
}

/// Whether `op` commits the running transaction.
pub(crate) fn commits(op: &Op) -> bool {
    matches!(op, Op::Fsync { .. } | Op::Fdatasync { .. } | Op::FsyncFd { .. } | Op::Sync | Op::MapWrite { .. } | Op::SetJournalData { .. })
}

impl<D: BlockDevice> Ext4<D> {
    /// The lock `op` would sleep on now, if any. Only a split op holds
    /// locks between ops. While a -j holds the updates barrier, an op that
    /// would start a handle sleeps on it. Otherwise an op sleeps where it
    /// takes a lock another op holds: those of its plan (`lock_plan`: the
    /// locks a write, read or truncate holds across its own I/O,
    /// SEEK_DATA/SEEK_HOLE's i_rwsem, the switch's i_rwsem, DIO count,
    /// invalidate_lock and s_writepages_rwsem; a directory op's parents,
    /// s_vfs_rename_mutex and the inodes it unlinks, links or moves), and
    /// an op that commits sleeps while split ops hold handles.
    /// Finding the inodes may read directories, as the op itself would
    /// first.
    pub fn waits_for(&mut self, op: &Op) -> Option<Lock> {
        if !self.locks.any_held() {
            return None;
        }
        if self.locks.set.fs.updates.handle_would_wait() && !op.only_looks() {
            return Some(Lock::JournalUpdates);
        }
        if self.waits_for_commit(op) {
            return Some(Lock::JournalHandle);
        }
        if let Some(plan) = self.lock_plan(op) {
            return self.plan_would_wait(&plan).or_else(|| self.folio_wait(op));
        }
        match op {
            // A switch whose name finds no inode has no plan; it is still
            // held to s_writepages_rwsem, as it always was (it fails at the
            // lookup, so this sleep is more than ext4's).
            Op::SetJournalData { .. } => self.locks.set.fs.writepages.write_would_wait().then_some(Lock::WritepagesRwsem),
            _ => self.folio_wait(op),
        }
    }

    /// Whether `op` commits the running transaction (fsync, fdatasync,
    /// sync, a page fault's msync and fdatasync, the journal-flag switch),
    /// which waits for the handles split ops hold.
    pub(crate) fn waits_for_commit(&self, op: &Op) -> bool {
        commits(op) && self.locks.split_handles > 0
    }

    /// Every lock held between calls, with its holder.
    pub fn locks_held(&self) -> Vec<(Lock, LockHolder)> {
        self.locks.held()
    }

    /// Lock-order inversions and unbalanced releases since the last call,
    /// each with the stacks that show it.
    /// Touches of folios the flusher has locked count too: a lock the
    /// prediction missed.
    pub fn lock_violations(&mut self) -> Vec<String> {
        let mut out: Vec<String> = self.locks.take_violations().iter().map(|v| v.to_string()).collect();
        out.extend(self.ctx.pages.take_locked_touches());
        out
    }

    /// Lock acquisitions lockdep has recorded in this mount.
    pub fn lock_acquisitions(&self) -> u64 {
        self.locks.acquisitions()
    }

    /// Runs `f` holding inode `ino`'s `class` lock (i_rwsem or
    /// invalidate_lock) as the running op, as `by` takes it in ext4: a
    /// one-step plan. Lockdep sees both ends.
    pub(crate) fn under_inode_lock<T>(&mut self, ino: InodeNumber, class: Lock, shared: bool, by: &'static str, f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        if !matches!(class, Lock::InodeRwsem | Lock::InvalidateLock) {
            debug_assert!(false, "{class} is not an inode's lock");
            return Err(Errno::EINVAL);
        }
        self.under_locks(&[super::lock_plan::PlannedLock::Sem { ino, class, shared, by }], f)
    }

    /// Forgets idle inodes' locks once many are kept.
    pub(crate) fn prune_locks(&mut self) {
        if self.locks.inode_count() > PRUNE_ABOVE {
            self.locks.prune();
        }
    }

    /// Runs `f` as a direct I/O in flight on `ino` (inode_dio_begin/end).
    pub(crate) fn as_direct_io<T>(&mut self, ino: InodeNumber, f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        let locks = self.locks.inode(ino);
        locks.dio.begin();
        let out = f(self);
        locks.dio.end();
        out
    }

    /// inode_dio_wait on `ino`.
    pub(crate) fn dio_wait(&self, ino: InodeNumber) -> Result<(), Errno> {
        self.locks.inode(ino).dio.wait().map_err(|w| Errno::from(crate::error::Error::WouldWait(w)))
    }

    /// Called where an op starts a handle or waits on the journal: with the
    /// updates barrier up (a split op holds it), it would sleep until that
    /// op's second half, which cannot run in this thread.
    pub(crate) fn start_handle(&self) -> Result<(), Errno> {
        match self.locks.set.fs.updates.handle_would_wait() {
            true => Err(Errno::EDEADLK),
            false => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_shares_no_lock_with_its_original() {
        let locks = Locks::default();
        let l = locks.inode(12);
        l.invalidate.down_write().unwrap();
        let copy = locks.clone();
        assert!(copy.inode(12).invalidate.is_write_locked(), "a copy starts in the same state");
        copy.inode(12).invalidate.up_write();
        assert!(l.invalidate.is_write_locked(), "and changes apart");
        l.invalidate.up_write();
    }
}
