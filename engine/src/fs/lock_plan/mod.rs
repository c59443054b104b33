//! The locks an op holds when it sleeps on I/O, as ext4 and the VFS take
//! them before its first folio read, bio or journal wait:
//! - on the file: i_rwsem exclusive for buffered and direct writes,
//!   truncate and fallocate (which add inode_dio_wait, and invalidate_lock
//!   exclusive where page cache goes), i_rwsem shared for a direct read,
//!   invalidate_lock shared for a page fault and for a read that reaches
//!   the page cache, and the DIO count for direct I/O in flight;
//! - on directories ([`namespace`]): the parent's i_rwsem for ops that add
//!   or remove a name (with s_vfs_rename_mutex first for a rename between
//!   two directories), then the i_rwsem of the inodes they unlink, link or
//!   move; shared for readdir;
//! - sync(2) sleeps in write-back under s_writepages_rwsem shared;
//! - truncate, fallocate and the directory ops that change names sleep
//!   inside their jbd2 handle (reading extent, bitmap or directory blocks),
//!   so the running transaction cannot commit meanwhile: fsync, sync, a
//!   page fault's msync and the journal-flag switch wait for the handle
//!   ([`Ext4::waits_for`]), and commits the engine starts by itself (the
//!   commit interval, a transaction grown big, space held by it) wait
//!   until it stops, as kjournald would.
//!
//! chattr, rewrite, ftruncate, SEEK_DATA/SEEK_HOLE and the journal-flag
//! switch have plans too, for [`Ext4::waits_for`]: they take those locks
//! but do not split this way.
//!
//! Such an op splits there ([`super::split`]): its first half takes these
//! locks as a holder of its own, so other tasks' ops run while it sleeps
//! and those that need the locks sleep too ([`Ext4::waits_for`]); its
//! second half hands them back and runs the op whole, which takes them
//! again at once. The op's own code takes the same locks (`under_inode_lock`
//! or `under_locks` at each call site), or fewer where it fails early: a
//! plan may name more than the op takes (it then sleeps longer than it
//! needed to), never less (the op would meet a lock nobody predicted), and
//! never one out of the kernel's order (a first half would take it, and
//! two first halves could wait on each other where ext4 cannot).
//! `a_plan_names_locks_the_op_itself_takes` holds the two together.

mod folios;
pub(crate) mod namespace;
#[cfg(test)]
mod tests;

use ext4_model::vfs::LOFF_MAX;
use ext4_model::{Errno, Op};

use crate::device::BlockDevice;
use crate::format::InodeNumber;
use crate::locking::lockdep::Acquired;
use crate::locking::rwsem::RwSem;
use crate::locking::switch::{FsLocks, InodeLocks, Tracker};
use crate::locking::WouldWait;

use super::locks::{Lock, LockHolder};
use super::Ext4;

/// One step of a plan, in the order ext4 takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlannedLock {
    /// A semaphore, shared or exclusive, taken in `by`: inode `ino`'s
    /// i_rwsem or invalidate_lock, or (`ino` 0) the filesystem's
    /// s_writepages_rwsem or s_vfs_rename_mutex.
    Sem { ino: InodeNumber, class: Lock, shared: bool, by: &'static str },
    /// inode_dio_wait: no direct I/O in flight on the inode (truncate).
    DioWait(InodeNumber),
    /// inode_dio_begin: this op's direct I/O is in flight on the inode.
    DioBegin(InodeNumber),
    /// jbd2__journal_start: a handle on the running transaction, which
    /// cannot commit until the handle stops (and a -j's barrier waits for
    /// it). Last in a plan: ext4 starts its handle under its locks, except
    /// for the folio lock a truncate takes inside it.
    Handle,
    /// The folio holding byte `size` of the inode, locked by a truncate to
    /// a size inside a block (ext4_block_truncate_page, under its handle)
    /// to zero the block's tail, which it may sleep reading. Held only
    /// where a folio is cached there.
    EofFolio { ino: InodeNumber, size: u64 },
}

impl PlannedLock {
    /// The same step on inode `ino` (a filesystem-wide lock stays as it is).
    fn on(self, ino: InodeNumber) -> PlannedLock {
        match self {
            PlannedLock::Sem { class, shared, by, .. } if !fs_wide(class) => PlannedLock::Sem { ino, class, shared, by },
            PlannedLock::Sem { .. } => self,
            PlannedLock::DioWait(_) => PlannedLock::DioWait(ino),
            PlannedLock::DioBegin(_) => PlannedLock::DioBegin(ino),
            PlannedLock::Handle => PlannedLock::Handle,
            PlannedLock::EofFolio { size, .. } => PlannedLock::EofFolio { ino, size },
        }
    }
}

/// The locks an op holds across its I/O sleep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockPlan {
    pub steps: Vec<PlannedLock>,
}

impl LockPlan {
    /// `steps`, each on inode `ino` where it is an inode's lock.
    fn on(ino: InodeNumber, steps: &[PlannedLock]) -> LockPlan {
        LockPlan { steps: steps.iter().map(|s| s.on(ino)).collect() }
    }

    /// The first `n` steps.
    pub fn prefix(&self, n: usize) -> LockPlan {
        LockPlan { steps: self.steps[..n.min(self.steps.len())].to_vec() }
    }

    /// The steps of this plan that `held` does not already take: what a
    /// second half that hands `held` back and runs whole could sleep on.
    pub fn beyond(&self, held: &LockPlan) -> LockPlan {
        LockPlan { steps: self.steps.iter().filter(|s| !held.steps.contains(s)).copied().collect() }
    }
}

const fn exclusive(class: Lock, by: &'static str) -> PlannedLock {
    PlannedLock::Sem { ino: 0, class, shared: false, by }
}

const fn shared(class: Lock, by: &'static str) -> PlannedLock {
    PlannedLock::Sem { ino: 0, class, shared: true, by }
}

/// Locks of the filesystem, not of an inode.
fn fs_wide(class: Lock) -> bool {
    matches!(class, Lock::WritepagesRwsem | Lock::RenameMutex)
}

impl<D: BlockDevice> Ext4<D> {
    /// What `op` would hold when it sleeps on I/O, if it is such an op and
    /// would get that far: its inode is found and is a regular file, or its
    /// parent directory is (the op fails before any lock otherwise).
    /// Finding them may read directories, as the op itself does first.
    pub(crate) fn lock_plan(&mut self, op: &Op) -> Option<LockPlan> {
        const WRITE: &str = "ext4_buffered_write_iter";
        const TRUNCATE: [PlannedLock; 4] = [exclusive(Lock::InodeRwsem, "ext4_setattr"), PlannedLock::DioWait(0), exclusive(Lock::InvalidateLock, "ext4_setattr"), PlannedLock::Handle];
        let (ino, steps) = match op {
            Op::Write { path, .. } | Op::Append { path, .. } => (self.regular_at(path)?, vec![exclusive(Lock::InodeRwsem, WRITE)]),
            Op::WriteFd { slot, .. } => (self.slot_file(*slot).ok()?, vec![exclusive(Lock::InodeRwsem, WRITE)]),
            Op::Rewrite { path, .. } => (self.regular_at(path)?, vec![exclusive(Lock::InodeRwsem, "do_truncate")]),
            Op::Truncate { path, size } => {
                let ino = self.regular_at(path)?;
                (ino, self.truncate_plan(ino, *size, &TRUNCATE))
            }
            Op::FtruncateFd { slot, size } => {
                let ino = self.slot_file(*slot).ok()?;
                (ino, self.truncate_plan(ino, *size, &TRUNCATE))
            }
            Op::DirectWrite { path, .. } => (self.regular_at(path)?, vec![exclusive(Lock::InodeRwsem, "ext4_dio_write_iter"), PlannedLock::DioBegin(0)]),
            // A fault into a direct write's range while its bios are in
            // flight dirties a folio the completion cannot drop
            // (dio_warn_stale_pagecache): the fault waits for the direct
            // I/O here, one of the orders the kernel allows.
            Op::MapWrite { path, .. } => (self.regular_at(path)?, vec![PlannedLock::DioWait(0), shared(Lock::InvalidateLock, "ext4_page_mkwrite")]),
            Op::Fallocate { path, mode, offset, len } => {
                let ino = self.regular_at(path)?;
                let kind = super::fallocate::fallocate_checks(*mode, *offset, *len, self.ctx.mount.max_file_size()).ok()?;
                let mut steps = vec![exclusive(Lock::InodeRwsem, "ext4_fallocate"), PlannedLock::DioWait(0)];
                if super::fallocate::fallocate_invalidates(kind) {
                    steps.push(exclusive(Lock::InvalidateLock, "ext4_fallocate"));
                }
                steps.push(PlannedLock::Handle);
                (ino, steps)
            }
            Op::DirectRead { path, offset, len } => {
                let ino = self.regular_at(path)?;
                match self.reads_direct(ino) {
                    true => (*offset <= LOFF_MAX).then(|| (ino, vec![shared(Lock::InodeRwsem, "ext4_dio_read_iter"), PlannedLock::DioBegin(0)]))?,
                    // data=journal: a buffered read.
                    false => (ino, self.readahead_plan(ino, *offset, *len)?),
                }
            }
            // sync(2): write-back of every inode, each under s_writepages_rwsem
            // shared; no inode's lock.
            Op::Sync => (0, vec![shared(Lock::WritepagesRwsem, "ext4_writepages")]),
            Op::Chattr { path, .. } => (self.open_path(path).ok()?, vec![exclusive(Lock::InodeRwsem, "vfs_fileattr_set")]),
            // The switch's locks up to its journal flush (the updates barrier
            // after them is every handle's, which waits_for asks first).
            Op::SetJournalData { path, .. } => {
                const BY: &str = "ext4_change_inode_journal_flag";
                let steps = vec![exclusive(Lock::InodeRwsem, "vfs_fileattr_set"), PlannedLock::DioWait(0), exclusive(Lock::InvalidateLock, BY), exclusive(Lock::WritepagesRwsem, BY)];
                (self.open_path(path).ok()?, steps)
            }
            Op::Lseek { path, .. } => {
                let ino = self.open_path(path).ok()?;
                (ino, self.seek_takes_inode_lock(ino).then(|| vec![shared(Lock::InodeRwsem, "ext4_llseek")])?)
            }
            Op::Read { path, offset, len } => {
                let ino = self.open_path(path).ok()?;
                (ino, self.readahead_plan(ino, *offset, *len)?)
            }
            Op::ReadFd { slot, offset, len } => {
                let ino = self.slot_file(*slot).ok()?;
                (ino, self.readahead_plan(ino, *offset, *len)?)
            }
            _ => return self.namespace_plan(op),
        };
        Some(LockPlan::on(ino, &steps))
    }

    /// A truncate's locks, with its EOF folio's where it zeroes a cached
    /// block's tail: a smaller size inside a block.
    fn truncate_plan(&self, ino: InodeNumber, size: u64, steps: &[PlannedLock]) -> Vec<PlannedLock> {
        let mut steps = steps.to_vec();
        let bs = u64::from(self.ctx.geo.block_size);
        let shrinks = self.nodes.get(&ino).is_some_and(|n| size < n.disk.size);
        if shrinks && size % bs != 0 && self.ctx.pages.folio_span(ino, self.ctx.pages.geometry().byte_to_pg(size)).is_some() {
            steps.push(PlannedLock::EofFolio { ino: 0, size });
        }
        steps
    }

    /// A buffered read's lock, if it reaches the page cache.
    fn readahead_plan(&mut self, ino: InodeNumber, offset: u64, len: u32) -> Option<Vec<PlannedLock>> {
        self.read_takes_invalidate_lock(ino, offset, len).then(|| vec![shared(Lock::InvalidateLock, "page_cache_ra_unbounded")])
    }

    /// The inode at `path` if it is a regular file.
    fn regular_at(&mut self, path: &str) -> Option<InodeNumber> {
        let ino = self.open_path(path).ok()?;
        (self.kind_of(ino).ok()? == ext4_model::FileKind::Regular).then_some(ino)
    }

    /// The lock the first step of `plan` that cannot be had now would
    /// sleep on.
    pub(crate) fn plan_would_wait(&self, plan: &LockPlan) -> Option<Lock> {
        plan.steps.iter().find_map(|step| self.step_would_wait(*step))
    }

    /// How many of `plan`'s first steps could be taken now.
    /// A prefix of waits alone (a page fault's inode_dio_wait) holds
    /// nothing: none.
    pub(crate) fn plan_free_prefix(&self, plan: &LockPlan) -> usize {
        let free = plan.steps.iter().position(|step| self.step_would_wait(*step).is_some()).unwrap_or(plan.steps.len());
        if plan.steps[..free].iter().all(|s| matches!(s, PlannedLock::DioWait(_))) {
            return 0;
        }
        free
    }

    /// The lock one step would sleep on now (an inode whose locks were
    /// never made holds none).
    fn step_would_wait(&self, step: PlannedLock) -> Option<Lock> {
        match step {
            PlannedLock::Sem { ino, class, shared, .. } => {
                let waits = self.with_sem(ino, class, false, |sem| if shared { sem.read_would_wait() } else { sem.write_would_wait() })?;
                waits.then_some(class)
            }
            // Reported as the inode lock the waiter holds, as DioCount does.
            PlannedLock::DioWait(ino) => (self.locks.inode_if_known(ino)?.dio.in_flight() > 0).then_some(Lock::InodeRwsem),
            PlannedLock::DioBegin(_) => None,
            PlannedLock::Handle => self.locks.set.fs.updates.handle_would_wait().then_some(Lock::JournalUpdates),
            PlannedLock::EofFolio { ino, size } => self.ctx.pages.folios_locked(ino, size..size + 1).then_some(Lock::FolioLock),
        }
    }

    /// Runs `f` on the semaphore a step names; None for an inode nobody
    /// has locked when `make` is false.
    fn with_sem<T>(&self, ino: InodeNumber, class: Lock, make: bool, f: impl FnOnce(&RwSem) -> T) -> Option<T> {
        let fs: &FsLocks = &self.locks.set.fs;
        match class {
            Lock::WritepagesRwsem => return Some(f(&fs.writepages)),
            Lock::RenameMutex => return Some(f(&fs.rename)),
            _ => {}
        }
        let inode: crate::sync::Arc<InodeLocks> = if make { self.locks.inode(ino) } else { self.locks.inode_if_known(ino)? };
        Some(f(sem_of(&inode, class)))
    }

    /// Runs `f` holding `steps`' locks as the running op, released after
    /// it whatever it returns.
    pub(crate) fn under_locks<T>(&mut self, steps: &[PlannedLock], f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        self.take_plan(steps, LockHolder::OP)?;
        let out = f(self);
        self.give_back(steps, LockHolder::OP);
        self.prune_locks();
        out
    }

    /// Takes a plan's locks (`steps`) for `holder`, in order; on a lock
    /// that would wait, gives back what it took and says which.
    pub(crate) fn take_plan(&mut self, steps: &[PlannedLock], holder: LockHolder) -> Result<(), Errno> {
        let mut lockdep = self.locks.tracker(holder);
        for (i, step) in steps.iter().enumerate() {
            let taken = match *step {
                PlannedLock::Sem { ino, class, shared, by } => {
                    let got = self.with_sem(ino, class, true, |sem| if shared { sem.down_read() } else { sem.down_write() });
                    got.unwrap_or(Ok(())).map(|()| lockdep.acquired(Acquired { class, shared, instance: u64::from(ino), by }))
                }
                PlannedLock::DioWait(ino) => self.locks.inode(ino).dio.wait(),
                PlannedLock::DioBegin(ino) => {
                    self.locks.inode(ino).dio.begin();
                    Ok(())
                }
                PlannedLock::Handle => self.locks.set.fs.updates.start_handle().map(|()| {
                    self.locks.split_handles += 1;
                    lockdep.acquired(Acquired { class: Lock::JournalHandle, shared: true, instance: 0, by: "jbd2__journal_start" });
                }),
                PlannedLock::EofFolio { ino, size } => match self.ctx.pages.folios_locked(ino, size..size + 1) {
                    true => Err(WouldWait(Lock::FolioLock)),
                    false => {
                        if self.ctx.pages.lock_folio_at(ino, size, holder.number()).is_some() {
                            lockdep.acquired(Acquired { class: Lock::FolioLock, shared: false, instance: u64::from(ino), by: "ext4_block_truncate_page" });
                        }
                        Ok(())
                    }
                },
            };
            if let Err(WouldWait(class)) = taken {
                self.give_back(&steps[..i], holder);
                return Err(Errno::from(crate::error::Error::WouldWait(WouldWait(class))));
            }
        }
        Ok(())
    }

    /// Releases what [`Ext4::take_plan`] took, in reverse.
    pub(crate) fn give_back(&mut self, steps: &[PlannedLock], holder: LockHolder) {
        let mut lockdep = self.locks.tracker(holder);
        for step in steps.iter().rev() {
            match *step {
                PlannedLock::Sem { ino, class, shared, .. } => {
                    self.with_sem(ino, class, true, |sem| if shared { sem.up_read() } else { sem.up_write() });
                    lockdep.released(class, u64::from(ino));
                }
                PlannedLock::DioWait(_) => {}
                PlannedLock::DioBegin(ino) => self.locks.inode(ino).dio.end(),
                PlannedLock::Handle => {
                    self.locks.set.fs.updates.stop_handle();
                    self.locks.split_handles = self.locks.split_handles.saturating_sub(1);
                    lockdep.released(Lock::JournalHandle, 0);
                }
                PlannedLock::EofFolio { ino, .. } => {
                    if self.ctx.pages.holds_folios(holder.number(), ino) {
                        self.ctx.pages.unlock_folios(holder.number());
                        lockdep.released(Lock::FolioLock, u64::from(ino));
                    }
                }
            }
        }
    }
}

/// An inode's semaphore of `class` (i_rwsem or invalidate_lock).
fn sem_of(inode: &InodeLocks, class: Lock) -> &RwSem {
    match class {
        Lock::InvalidateLock => &inode.invalidate,
        _ => &inode.rwsem,
    }
}
