//! chattr +j / -j: switching an inode into or out of data journaling.
//! The locks and their order are ext4_change_inode_journal_flag's, run by
//! the shared protocol ([`crate::locking::switch`], docs/concurrency.md);
//! this file supplies the steps between them over the engine:
//!
//! - the inode's dirty data is written back and its page cache dropped
//!   (filemap_write_and_wait, truncate_pagecache), so the mapping starts
//!   again with the folio orders of the new mode;
//! - **+j** sets the flag under the updates barrier without sleeping and
//!   commits it: one call, nothing held across a sleep;
//! - **-j** must empty the journal first (jbd2_journal_flush), every lock
//!   held, and sleeps there. So it runs in two halves:
//!   [`Ext4::begin_journal_switch`] closes the running transaction;
//!   [`Ext4::finish_journal_switch`] writes it, checkpoints the log, clears
//!   the flag, releases and commits the flag through a synchronous handle.
//!
//! Every lock is released on every path out of a half, error paths
//! included; a lock left held in exactly this function was a real ext4
//! bug. Lockdep records each acquisition and the simulator holds the
//! engine to it after every op.

use ext4_model::op::inode_flags::JOURNAL_DATA;
use ext4_model::Errno;

use crate::device::BlockDevice;
use crate::format::InodeNumber;
use crate::locking::switch::{Halfway, JournalState, Switch, SwitchBug, SwitchSteps};

use super::locks::LockHolder;
use super::Ext4;

/// What the second half of a journal-flag switch has left to do: the rest
/// of a -j that clears the flag, or nothing (None).
#[derive(Debug, PartialEq, Eq)]
pub struct SwitchTicket(Option<Clearing>);

/// A -j between its halves.
#[derive(Debug, PartialEq, Eq)]
struct Clearing {
    ino: InodeNumber,
    /// Who holds the switch's locks.
    holder: LockHolder,
    halfway: Halfway,
    /// The tid of the transaction the first half closed, if any.
    closed: Option<u32>,
}

impl SwitchTicket {
    /// Who holds this switch's locks until its second half.
    pub fn holder(&self) -> Option<LockHolder> {
        self.0.as_ref().map(|c| c.holder)
    }
}

/// The switch's steps over the engine.
struct EngineSteps<'a, D: BlockDevice> {
    fs: &'a mut Ext4<D>,
    ino: InodeNumber,
    /// The transaction the flush closed.
    closed: Option<u32>,
    /// A step's failure that the protocol's infallible steps cannot return.
    failed: Option<Errno>,
}

impl<D: BlockDevice> SwitchSteps for EngineSteps<'_, D> {
    fn journal(&mut self) -> JournalState {
        match &self.fs.ctx.journal {
            None => JournalState::None,
            Some(_) if self.fs.ctx.mount.read_only => JournalState::Aborted,
            Some(_) => JournalState::Live,
        }
    }

    fn write_and_wait(&mut self) -> Result<(), Errno> {
        self.fs.write_back_data(self.ino, 0).map_err(Errno::from)
    }

    fn truncate_pagecache(&mut self) {
        self.fs.ctx.pages.drop_mapping(self.ino);
    }

    fn start_flush(&mut self) -> Result<(), Errno> {
        self.closed = self.fs.close_transaction()?;
        Ok(())
    }

    fn finish_flush(&mut self) -> Result<(), Errno> {
        if let Some(tid) = self.closed {
            self.fs.wait_for_commit(tid)?;
        }
        self.fs.checkpoint_log(false)?;
        Ok(())
    }

    fn set_flag(&mut self, enable: bool) {
        if let Err(e) = self.fs.flip_journal_flag(self.ino, enable) {
            self.failed.get_or_insert(e);
        }
    }

    fn set_aops(&mut self) {
        // The mapping was dropped whole; its next folio takes the orders of
        // the new mode (`Ctx::folio_orders`), as ext4_set_aops and the
        // mapping's order reset leave it.
        debug_assert!(!self.fs.ctx.pages.has_dirty(self.ino), "the switch left dirty folios of inode {}", self.ino);
    }

    fn mark_inode_dirty_sync(&mut self) -> Result<(), Errno> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        self.fs.sync_metadata()
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half: finds the inode, then runs the switch up to a -j's
    /// journal flush, or whole for a +j.
    pub fn begin_journal_switch(&mut self, path: &str, enable: bool) -> Result<SwitchTicket, Errno> {
        self.start_handle()?;
        let ino = self.open_path(path)?;
        // Its close, early: the switch writes the file back anyway.
        self.release_file(ino)?;
        self.ctx.writable()?;
        self.check_flag_change(ino, JOURNAL_DATA, enable)?;
        let no_journal = self.ctx.mount.data.is_none();
        let (_, node) = self.split(ino)?;
        if node.disk.has_flag(JOURNAL_DATA) == enable || no_journal {
            // The ioctl calls the switch only for a flag that changes (and
            // without a journal there is no flag to switch). The sync is
            // this engine's, more than ext4 promises; done now, it cannot
            // wait on another switch's lock in the second half.
            self.sync_metadata()?;
            return Ok(SwitchTicket(None));
        }
        let holder = self.locks.new_holder();
        self.locks.prune();
        let (inode, set) = (self.locks.inode(ino), self.locks.set.clone());
        let switch = Switch { inode: &inode, fs: &set.fs, ino: u64::from(ino), bug: self.switch_bug() };
        let mut lockdep = self.locks.tracker(holder);
        let mut steps = EngineSteps { fs: self, ino, closed: None, failed: None };
        let halfway = switch.first_half(&mut steps, &mut lockdep, enable)?;
        let closed = steps.closed;
        Ok(SwitchTicket(halfway.map(|halfway| Clearing { ino, holder, halfway, closed })))
    }

    /// The second half: the switch returns once the flag is durable.
    pub fn finish_journal_switch(&mut self, ticket: SwitchTicket) -> Result<(), Errno> {
        let SwitchTicket(Some(Clearing { ino, holder, halfway, closed })) = ticket else { return Ok(()) };
        if !self.locks.holds(holder) {
            // A ticket from an earlier mount: its switch died with it.
            return Err(Errno::EINVAL);
        }
        let (inode, set) = (self.locks.inode(ino), self.locks.set.clone());
        let switch = Switch { inode: &inode, fs: &set.fs, ino: u64::from(ino), bug: self.switch_bug() };
        let mut lockdep = self.locks.tracker(holder);
        let mut steps = EngineSteps { fs: self, ino, closed, failed: None };
        switch.second_half(&mut steps, &mut lockdep, halfway)
    }

    /// chattr +j/-j as one call.
    pub(crate) fn set_journal_data_whole(&mut self, path: &str, enable: bool) -> Result<(), Errno> {
        let ticket = self.begin_journal_switch(path, enable)?;
        self.finish_journal_switch(ticket)
    }

    fn flip_journal_flag(&mut self, ino: InodeNumber, enable: bool) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        if enable {
            node.disk.flags |= JOURNAL_DATA;
        } else {
            node.disk.flags &= !JOURNAL_DATA;
        }
        node.disk.ctime = ctx.now();
        self.mark_dirty(ino);
        Ok(())
    }

    /// The bug a test re-injects into the switch, if any.
    fn switch_bug(&self) -> SwitchBug {
        #[cfg(feature = "test-hooks")]
        if self.bug_keeps_lock_on_failed_flush() {
            return SwitchBug::KeepInvalidateOnFlushError;
        }
        SwitchBug::None
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FileSystem, MountConfig, Op};

    use super::*;
    use crate::device_mem::MemDevice;
    use crate::fs::locks::Lock;

    fn fresh() -> Ext4<MemDevice> {
        crate::fixtures::fresh_mounted(64 << 20)
    }

    #[test]
    fn a_switch_between_its_halves_holds_off_every_op_but_those_that_look_elsewhere() {
        let mut fs = fresh();
        fs.create("/f", 0o644).unwrap();
        fs.create("/other", 0o644).unwrap();
        fs.write("/other", 0, &[5; 100]).unwrap();
        fs.set_journal_data("/f", true).unwrap();
        fs.write("/f", 0, &[7; 5000]).unwrap();
        fs.open("/f", 0).unwrap();
        let ticket = fs.begin_journal_switch("/f", false).unwrap();
        assert!(ticket.holder().is_some());
        let held: Vec<Lock> = fs.locks_held().iter().map(|(l, _)| *l).collect();
        assert_eq!(held, vec![Lock::InodeRwsem, Lock::InvalidateLock, Lock::WritepagesRwsem, Lock::JournalUpdates], "every lock of the switch, in order");
        let write = Op::Write { path: "/f".into(), offset: 0, len: 1, seed: 1 };
        assert_eq!(fs.waits_for(&write), Some(Lock::JournalUpdates));
        assert_eq!(fs.waits_for(&Op::Fsync { path: "/f".into() }), Some(Lock::JournalUpdates));
        assert_eq!(fs.waits_for(&Op::Stat { path: "/f".into() }), None);
        // An op that reaches the lock anyway cannot sleep here.
        assert_eq!(fs.create("/g", 0o644), Err(Errno::EDEADLK));
        assert_eq!(fs.sync(), Err(Errno::EDEADLK));
        // Ops that only look go on, but not into the switching inode's
        // page cache (invalidate_lock) or its extent map (i_rwsem).
        let read = |path: &str, offset, len| Op::Read { path: path.into(), offset, len };
        assert_eq!(fs.waits_for(&read("/f", 0, 10)), Some(Lock::InvalidateLock));
        assert_eq!(fs.waits_for(&Op::ReadFd { slot: 0, offset: 4000, len: 10 }), Some(Lock::InvalidateLock));
        assert_eq!(fs.waits_for(&Op::Lseek { path: "/f".into(), offset: 0, whence: ext4_model::SeekWhence::Hole }), Some(Lock::InodeRwsem));
        assert_eq!(fs.read("/f", 0, 10), Err(Errno::EDEADLK), "the read takes what waits_for named");
        assert_eq!(fs.pread(0, 4000, 10), Err(Errno::EDEADLK));
        assert_eq!(fs.lseek("/f", 0, ext4_model::SeekWhence::Hole), Err(Errno::EDEADLK));
        for nothing_to_read in [read("/f", 0, 0), read("/f", 5000, 10), read("/other", 0, 10)] {
            assert_eq!(fs.waits_for(&nothing_to_read), None, "{nothing_to_read:?}");
        }
        assert_eq!(fs.read("/f", 5000, 10).unwrap(), Vec::<u8>::new());
        assert_eq!(fs.read("/other", 0, 10).unwrap(), vec![5; 10]);
        assert_ne!(fs.stat("/f").unwrap().flags & JOURNAL_DATA, 0, "the flag clears in the second half");

        fs.finish_journal_switch(ticket).unwrap();
        assert!(fs.locks_held().is_empty());
        assert_eq!(fs.waits_for(&write), None);
        assert_eq!(fs.waits_for(&read("/f", 0, 10)), None);
        assert_eq!(fs.read("/f", 0, 10).unwrap(), vec![7; 10]);
        assert_eq!(fs.stat("/f").unwrap().flags & JOURNAL_DATA, 0);
        assert_eq!(fs.journal_stats().map(|j| j.checkpoints > 0), Some(true), "-j empties the log");
        fs.create("/g", 0o644).unwrap();
    }

    #[test]
    fn the_engine_takes_its_locks_in_one_order_and_returns_holding_none() {
        let mut fs = fresh();
        let before = fs.lock_acquisitions();
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[1; 9000]).unwrap();
        fs.truncate("/f", 100).unwrap();
        fs.direct_write("/f", 4096, &[2; 4096]).unwrap();
        fs.map_write("/f", 0, &[3; 10]).unwrap();
        fs.set_journal_data("/f", true).unwrap();
        fs.write("/f", 0, &[4; 5000]).unwrap();
        fs.set_journal_data("/f", false).unwrap();
        fs.sync().unwrap();
        assert!(fs.lock_acquisitions() >= before + 12, "{} acquisitions", fs.lock_acquisitions() - before);
        assert_eq!(fs.lock_violations(), Vec::<String>::new());
        assert!(fs.locks_held().is_empty());
    }

    #[test]
    fn a_whole_switch_or_one_that_changes_nothing_holds_no_lock() {
        let mut fs = fresh();
        fs.create("/f", 0o644).unwrap();
        fs.set_journal_data("/f", true).unwrap();
        assert!(fs.locks_held().is_empty());
        for enable in [true, true] {
            // +j sets the flag at once; setting it again changes nothing.
            let t = fs.begin_journal_switch("/f", enable).unwrap();
            assert_eq!(t.holder(), None);
            assert!(fs.locks_held().is_empty());
            assert_ne!(fs.stat("/f").unwrap().flags & JOURNAL_DATA, 0);
            fs.finish_journal_switch(t).unwrap();
        }
        assert_eq!(fs.set_journal_data("/missing", false), Err(Errno::ENOENT));
        // A -j's ticket outlives its mount only as an error.
        let stale = fs.begin_journal_switch("/f", false).unwrap();
        let dev = fs.into_device_dropping_caches();
        let mut fs = Ext4::mount(dev, &MountConfig::default()).unwrap();
        assert_eq!(fs.finish_journal_switch(stale), Err(Errno::EINVAL));
        assert!(fs.locks_held().is_empty());
        fs.set_journal_data("/f", true).unwrap();
        assert!(fs.locks_held().is_empty());
        fs.set_journal_data("/f", false).unwrap();
        assert_eq!(fs.stat("/f").unwrap().flags & JOURNAL_DATA, 0);
    }
}
