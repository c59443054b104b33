//! The inode locks an op holds when it sleeps on I/O, as ext4 takes them
//! before its first folio read or bio: i_rwsem exclusive for buffered and
//! direct writes, truncate and fallocate (which add inode_dio_wait, and
//! invalidate_lock exclusive where page cache goes), i_rwsem shared for a
//! direct read, invalidate_lock shared for a page fault and for a read that
//! reaches the page cache, and the DIO count for direct I/O in flight.
//! sync(2) sleeps in write-back under s_writepages_rwsem shared. chattr,
//! rewrite, ftruncate, SEEK_DATA/SEEK_HOLE and the journal-flag switch
//! have plans too, for [`Ext4::waits_for`]: they take those locks but do
//! not split this way.
//!
//! Such an op splits there ([`super::split`]): its first half takes these
//! locks as a holder of its own, so other tasks' ops run while it sleeps
//! and those that need the locks sleep too ([`Ext4::waits_for`]); its
//! second half hands them back and runs the op whole, which takes them
//! again at once. The op's own code takes the same locks (`under_inode_lock`
//! at each call site); `a_plan_names_locks_the_op_itself_takes` holds the
//! two together.

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
    /// i_rwsem or invalidate_lock, shared or exclusive, taken in `by`.
    Sem { class: Lock, shared: bool, by: &'static str },
    /// inode_dio_wait: no direct I/O in flight (truncate).
    DioWait,
    /// inode_dio_begin: this op's direct I/O is in flight.
    DioBegin,
}

/// The locks an op holds across its I/O sleep, on one inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockPlan {
    /// The inode whose locks its inode steps take (0: it takes none).
    pub ino: InodeNumber,
    pub steps: Vec<PlannedLock>,
}

impl LockPlan {
    /// The first `n` steps, and the rest if any.
    pub fn split_at(&self, n: usize) -> (LockPlan, Option<LockPlan>) {
        let n = n.min(self.steps.len());
        let rest = (n < self.steps.len()).then(|| LockPlan { ino: self.ino, steps: self.steps[n..].to_vec() });
        (LockPlan { ino: self.ino, steps: self.steps[..n].to_vec() }, rest)
    }
}

const fn exclusive(class: Lock, by: &'static str) -> PlannedLock {
    PlannedLock::Sem { class, shared: false, by }
}

const fn shared(class: Lock, by: &'static str) -> PlannedLock {
    PlannedLock::Sem { class, shared: true, by }
}

impl<D: BlockDevice> Ext4<D> {
    /// What `op` would hold when it sleeps on I/O, if it is such an op and
    /// would get that far: its inode is found and is a regular file (the
    /// op fails before any lock otherwise). Finding the inode may read
    /// directories, as the op itself does first.
    pub(crate) fn lock_plan(&mut self, op: &Op) -> Option<LockPlan> {
        const WRITE: &str = "ext4_buffered_write_iter";
        const TRUNCATE: [PlannedLock; 3] = [exclusive(Lock::InodeRwsem, "ext4_setattr"), PlannedLock::DioWait, exclusive(Lock::InvalidateLock, "ext4_setattr")];
        let (ino, steps) = match op {
            Op::Write { path, .. } | Op::Append { path, .. } => (self.regular_at(path)?, vec![exclusive(Lock::InodeRwsem, WRITE)]),
            Op::WriteFd { slot, .. } => (self.slot_file(*slot).ok()?, vec![exclusive(Lock::InodeRwsem, WRITE)]),
            Op::Rewrite { path, .. } => (self.regular_at(path)?, vec![exclusive(Lock::InodeRwsem, "do_truncate")]),
            Op::Truncate { path, .. } => (self.regular_at(path)?, TRUNCATE.to_vec()),
            Op::FtruncateFd { slot, .. } => (self.slot_file(*slot).ok()?, TRUNCATE.to_vec()),
            Op::DirectWrite { path, .. } => (self.regular_at(path)?, vec![exclusive(Lock::InodeRwsem, "ext4_dio_write_iter"), PlannedLock::DioBegin]),
            Op::MapWrite { path, .. } => (self.regular_at(path)?, vec![shared(Lock::InvalidateLock, "ext4_page_mkwrite")]),
            Op::Fallocate { path, mode, offset, len } => {
                let ino = self.regular_at(path)?;
                let kind = super::fallocate::fallocate_checks(*mode, *offset, *len, self.ctx.mount.max_file_size()).ok()?;
                let mut steps = vec![exclusive(Lock::InodeRwsem, "ext4_fallocate"), PlannedLock::DioWait];
                if super::fallocate::fallocate_invalidates(kind) {
                    steps.push(exclusive(Lock::InvalidateLock, "ext4_fallocate"));
                }
                (ino, steps)
            }
            Op::DirectRead { path, offset, len } => {
                let ino = self.regular_at(path)?;
                match self.reads_direct(ino) {
                    true => (*offset <= LOFF_MAX).then(|| (ino, vec![shared(Lock::InodeRwsem, "ext4_dio_read_iter"), PlannedLock::DioBegin]))?,
                    // data=journal: a buffered read.
                    false => (ino, self.readahead_plan(ino, *offset, *len)?),
                }
            }
            // sync(2): write-back of every inode, each under s_writepages_rwsem
            // shared; no inode's lock (inode 0: none).
            Op::Sync => (0, vec![shared(Lock::WritepagesRwsem, "ext4_writepages")]),
            Op::Chattr { path, .. } => (self.open_path(path).ok()?, vec![exclusive(Lock::InodeRwsem, "vfs_fileattr_set")]),
            // The switch's locks up to its journal flush (the updates barrier
            // after them is every handle's, which waits_for asks first).
            Op::SetJournalData { path, .. } => {
                const BY: &str = "ext4_change_inode_journal_flag";
                let steps = vec![exclusive(Lock::InodeRwsem, "vfs_fileattr_set"), PlannedLock::DioWait, exclusive(Lock::InvalidateLock, BY), exclusive(Lock::WritepagesRwsem, BY)];
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
            _ => return None,
        };
        Some(LockPlan { ino, steps })
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
        // An inode whose locks were never made holds none.
        let inode = self.locks.inode_if_known(plan.ino);
        plan.steps.iter().find_map(|step| self.step_would_wait(inode.as_deref(), *step))
    }

    /// How many of `plan`'s first steps could be taken now.
    pub(crate) fn plan_free_prefix(&self, plan: &LockPlan) -> usize {
        let inode = self.locks.inode_if_known(plan.ino);
        plan.steps.iter().position(|step| self.step_would_wait(inode.as_deref(), *step).is_some()).unwrap_or(plan.steps.len())
    }

    /// The lock one step would sleep on now; `inode` is None for an inode
    /// nobody has locked.
    fn step_would_wait(&self, inode: Option<&InodeLocks>, step: PlannedLock) -> Option<Lock> {
        let fs = &self.locks.set.fs;
        match step {
            PlannedLock::Sem { class, shared, .. } => {
                let sem = match class {
                    Lock::WritepagesRwsem => &fs.writepages,
                    _ => sem_of(inode?, fs, class, 0).0,
                };
                let waits = if shared { sem.read_would_wait() } else { sem.write_would_wait() };
                waits.then_some(class)
            }
            // Reported as the inode lock the waiter holds, as DioCount does.
            PlannedLock::DioWait => (inode?.dio.in_flight() > 0).then_some(Lock::InodeRwsem),
            PlannedLock::DioBegin => None,
        }
    }

    /// Takes `plan`'s locks for `holder`, in order; on a lock that would
    /// wait, gives back what it took and says which.
    pub(crate) fn take_plan(&mut self, plan: &LockPlan, holder: LockHolder) -> Result<(), Errno> {
        let (inode, set) = (self.locks.inode(plan.ino), self.locks.set.clone());
        let mut lockdep = self.locks.tracker(holder);
        for (i, step) in plan.steps.iter().enumerate() {
            let taken = match *step {
                PlannedLock::Sem { class, shared, by } => {
                    let (sem, instance) = sem_of(&inode, &set.fs, class, plan.ino);
                    let got = if shared { sem.down_read() } else { sem.down_write() };
                    got.map(|()| lockdep.acquired(Acquired { class, shared, instance, by }))
                }
                PlannedLock::DioWait => inode.dio.wait(),
                PlannedLock::DioBegin => {
                    inode.dio.begin();
                    Ok(())
                }
            };
            if let Err(WouldWait(class)) = taken {
                self.give_back(&LockPlan { ino: plan.ino, steps: plan.steps[..i].to_vec() }, holder);
                return Err(Errno::from(crate::error::Error::WouldWait(WouldWait(class))));
            }
        }
        Ok(())
    }

    /// Releases what [`Ext4::take_plan`] took, in reverse.
    pub(crate) fn give_back(&mut self, plan: &LockPlan, holder: LockHolder) {
        let (inode, set) = (self.locks.inode(plan.ino), self.locks.set.clone());
        let mut lockdep = self.locks.tracker(holder);
        for step in plan.steps.iter().rev() {
            match *step {
                PlannedLock::Sem { class, shared, .. } => {
                    let (sem, instance) = sem_of(&inode, &set.fs, class, plan.ino);
                    if shared {
                        sem.up_read();
                    } else {
                        sem.up_write();
                    }
                    lockdep.released(class, instance);
                }
                PlannedLock::DioWait => {}
                PlannedLock::DioBegin => inode.dio.end(),
            }
        }
    }
}

/// The semaphore a plan's step names, and its lockdep instance: the
/// inode's own, or the filesystem's s_writepages_rwsem.
fn sem_of<'a>(inode: &'a InodeLocks, fs: &'a FsLocks, class: Lock, ino: InodeNumber) -> (&'a RwSem, u64) {
    match class {
        Lock::WritepagesRwsem => (&fs.writepages, 0),
        Lock::InodeRwsem => (&inode.rwsem, u64::from(ino)),
        _ => (&inode.invalidate, u64::from(ino)),
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FileSystem, Op};

    use super::*;
    use crate::device_mem::MemDevice;

    fn with_file() -> Ext4<MemDevice> {
        let mut fs = crate::fixtures::fresh_mounted(64 << 20);
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[7u8; 10_000]).unwrap();
        fs.open("/f", 3).unwrap();
        fs
    }

    fn ops() -> Vec<Op> {
        let p = || "/f".to_string();
        vec![
            Op::Write { path: p(), offset: 0, len: 100, seed: 1 },
            Op::Append { path: p(), len: 100, seed: 2 },
            Op::WriteFd { slot: 3, offset: 50, len: 100, seed: 3 },
            Op::Truncate { path: p(), size: 5000 },
            Op::FtruncateFd { slot: 3, size: 6000 },
            Op::Rewrite { path: p(), len: 300, seed: 6 },
            Op::DirectWrite { path: p(), offset: 4096, len: 4096, seed: 4 },
            Op::MapWrite { path: p(), offset: 10, len: 20, seed: 5 },
            Op::Read { path: p(), offset: 0, len: 100 },
            Op::DirectRead { path: p(), offset: 0, len: 4096 },
            Op::Fallocate { path: p(), mode: ext4_model::FallocFlags(0), offset: 0, len: 40_000 },
            Op::Fallocate { path: p(), mode: ext4_model::FallocFlags(ext4_model::FallocFlags::PUNCH_HOLE | ext4_model::FallocFlags::KEEP_SIZE), offset: 4096, len: 4096 },
            Op::Chattr { path: p(), flag: ext4_model::ChattrFlag::Append, enable: false },
            Op::ReadFd { slot: 3, offset: 0, len: 100 },
            Op::Sync,
            Op::Lseek { path: p(), offset: 0, whence: ext4_model::SeekWhence::Data },
            Op::SetJournalData { path: p(), enable: true },
        ]
    }

    /// Every op with a plan takes each lock of it itself: with any one of
    /// them held by someone else, the op run whole meets it (the engine
    /// refuses a wait in one thread: EDEADLK), and with none held it runs.
    #[test]
    fn a_plan_names_locks_the_op_itself_takes() {
        for op in ops() {
            let mut fs = with_file();
            let plan = fs.lock_plan(&op).unwrap_or_else(|| panic!("{op}: no plan"));
            assert!(!op.only_looks() || plan.steps.iter().all(|s| matches!(s, PlannedLock::Sem { shared: true, .. })), "{op}");
            for (i, step) in plan.steps.iter().enumerate() {
                let one = LockPlan { ino: plan.ino, steps: vec![*step] };
                let other = fs.locks.new_holder();
                let blocking = match *step {
                    // Held exclusive by another, which a shared taker meets too.
                    PlannedLock::Sem { class, by, .. } => LockPlan { ino: plan.ino, steps: vec![exclusive(class, by)] },
                    // Direct I/O in flight is what a waiter meets.
                    PlannedLock::DioWait => LockPlan { ino: plan.ino, steps: vec![PlannedLock::DioBegin] },
                    PlannedLock::DioBegin => continue,
                };
                fs.take_plan(&blocking, other).unwrap();
                assert!(fs.plan_would_wait(&one).is_some() || matches!(step, PlannedLock::DioBegin), "{op}: step {i}");
                assert_eq!(fs.apply(&op), Err(Errno::EDEADLK), "{op} ran past {step:?} held by another");
                fs.give_back(&blocking, other);
                assert!(!fs.locks.any_held(), "{op}: a lock left held");
            }
            assert!(fs.plan_would_wait(&plan).is_none());
            assert!(fs.apply(&op).is_ok(), "{op} alone");
        }
    }

    /// A truncate meeting a page fault's invalidate_lock takes i_rwsem
    /// first and sleeps holding it: writers wait on it meanwhile; once the
    /// fault returns, the truncate's second half runs.
    #[test]
    fn an_op_sleeps_holding_the_locks_before_the_one_it_waits_on() {
        let mut fs = with_file();
        let fault = Op::MapWrite { path: "/f".into(), offset: 0, len: 10, seed: 1 };
        let fault = fs.begin_split(&fault).unwrap().unwrap();
        let truncate = Op::Truncate { path: "/f".into(), size: 100 };
        assert_eq!(fs.waits_for(&truncate), Some(Lock::InvalidateLock));
        assert!(fs.sleeps_holding_first_locks(&truncate));
        let truncate = fs.begin_split(&truncate).unwrap().unwrap();
        assert_eq!(fs.finish_waits_for(&truncate), Some(Lock::InvalidateLock));
        let write = Op::Write { path: "/f".into(), offset: 0, len: 1, seed: 0 };
        assert_eq!(fs.waits_for(&write), Some(Lock::InodeRwsem), "the sleeping truncate holds i_rwsem");
        assert!(!fs.sleeps_holding_first_locks(&write), "its first lock is the one it waits on");
        assert_eq!(fs.finish_waits_for(&fault), None);
        assert_eq!(fs.finish_split(fault), Ok(ext4_model::Reply::Written(10)));
        assert_eq!(fs.finish_waits_for(&truncate), None);
        assert_eq!(fs.finish_split(truncate), Ok(ext4_model::Reply::Done));
        assert!(!fs.locks.any_held());
        assert_eq!(fs.stat("/f").unwrap().size, 100);
        assert!(fs.lock_violations().is_empty());
    }

    #[test]
    fn a_taken_plan_holds_off_rivals_until_given_back() {
        let mut fs = with_file();
        let plan = fs.lock_plan(&Op::Truncate { path: "/f".into(), size: 0 }).unwrap();
        let holder = fs.locks.new_holder();
        fs.take_plan(&plan, holder).unwrap();
        assert!(fs.locks.holds(holder));
        let write = fs.lock_plan(&Op::Write { path: "/f".into(), offset: 0, len: 1, seed: 0 }).unwrap();
        assert_eq!(fs.plan_would_wait(&write), Some(Lock::InodeRwsem));
        let read = fs.lock_plan(&Op::Read { path: "/f".into(), offset: 0, len: 1 }).unwrap();
        assert_eq!(fs.plan_would_wait(&read), Some(Lock::InvalidateLock));
        // A second taker is refused whole: it keeps nothing it took.
        let other = fs.locks.new_holder();
        assert_eq!(fs.take_plan(&write, other), Err(Errno::EDEADLK));
        assert!(!fs.locks.holds(other));
        fs.give_back(&plan, holder);
        assert!(!fs.locks.any_held());
        assert_eq!(fs.plan_would_wait(&write), None);
        // Ops on a directory or a missing name fail before any lock.
        assert_eq!(fs.lock_plan(&Op::Write { path: "/".into(), offset: 0, len: 1, seed: 0 }), None);
        assert_eq!(fs.lock_plan(&Op::Truncate { path: "/nothing".into(), size: 0 }), None);
    }
}
