//! chattr +j / -j: switching an inode into or out of data journaling, as
//! ext4_change_inode_journal_flag does it.
//!
//! - Either way the inode's dirty data is written back first and its page
//!   cache dropped (filemap_write_and_wait, truncate_pagecache), so the
//!   mapping starts again with the folio orders of the new mode.
//! - **+j** then sets the flag under the journal's updates lock without
//!   sleeping, and commits the flag: one call, nothing held across a sleep.
//! - **-j** must empty the journal first (jbd2_journal_flush), holding the
//!   updates lock so no handle starts meanwhile; it sleeps there. So it runs
//!   in two halves: [`Ext4::begin_journal_switch`] takes the lock and closes
//!   the running transaction; [`Ext4::finish_journal_switch`] writes it,
//!   checkpoints the log, clears the flag, drops the lock and commits the
//!   flag through a synchronous handle.
//!
//! The lock is released on every path out of a half that took it, error
//! paths included; a lock imbalance in exactly this function was a real
//! ext4 bug. The simulator holds the engine to it after every op.

use ext4_model::op::inode_flags::JOURNAL_DATA;
use ext4_model::Errno;

use crate::device::BlockDevice;
use crate::format::InodeNumber;

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
    /// The updates lock it holds.
    holder: LockHolder,
    /// The tid of the transaction the first half closed, if any.
    closed: Option<u32>,
}

impl SwitchTicket {
    /// The lock this switch holds until its second half.
    pub fn holder(&self) -> Option<LockHolder> {
        self.0.as_ref().map(|c| c.holder)
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half: finds the inode. A -j that clears the flag takes the
    /// updates lock and closes the running transaction; any other switch
    /// is done here.
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
            // ext4 leaves a flag that does not change alone (and without a
            // journal there is no flag to switch). The sync is this
            // engine's, more than ext4 promises; done now, it cannot wait
            // on another switch's lock in the second half.
            self.sync_metadata()?;
            return Ok(SwitchTicket(None));
        }
        self.write_back_data(ino, 0).map_err(Errno::from)?;
        self.ctx.pages.drop_mapping(ino);
        if enable {
            self.flip_journal_flag(ino, true)?;
            self.sync_metadata()?;
            return Ok(SwitchTicket(None));
        }
        let holder = self.locks.lock_updates()?;
        match self.close_transaction() {
            Ok(closed) => Ok(SwitchTicket(Some(Clearing { ino, holder, closed }))),
            Err(e) => {
                self.release_after_failed_flush(holder);
                Err(e.into())
            }
        }
    }

    /// The second half: the switch returns once the flag is durable.
    pub fn finish_journal_switch(&mut self, ticket: SwitchTicket) -> Result<(), Errno> {
        let SwitchTicket(Some(Clearing { ino, holder, closed })) = ticket else { return Ok(()) };
        if !self.locks.holds_updates(holder) {
            // A ticket from an earlier mount: its switch died with it.
            return Err(Errno::EINVAL);
        }
        let flushed = closed.map_or(Ok(()), |tid| self.wait_for_commit(tid)).and_then(|()| self.checkpoint_log());
        if let Err(e) = flushed {
            self.release_after_failed_flush(holder);
            return Err(e.into());
        }
        let flipped = self.flip_journal_flag(ino, false);
        self.locks.unlock_updates(holder);
        flipped?;
        // The synchronous handle that logs the flag.
        self.sync_metadata()
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

    /// Writes every logged block home and empties the log.
    fn checkpoint_log(&mut self) -> crate::error::Result<()> {
        let ctx = &mut self.ctx;
        match ctx.journal.as_mut() {
            Some(j) => j.checkpoint(&mut ctx.dev, false),
            None => Ok(()),
        }
    }

    /// The error path of a failed journal flush: new handles may start again.
    fn release_after_failed_flush(&mut self, holder: LockHolder) {
        #[cfg(feature = "test-hooks")]
        if self.bug_keeps_lock_on_failed_flush() {
            return;
        }
        self.locks.unlock_updates(holder);
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
    fn a_switch_between_its_halves_holds_off_every_op_but_those_that_look() {
        let mut fs = fresh();
        fs.create("/f", 0o644).unwrap();
        fs.set_journal_data("/f", true).unwrap();
        fs.write("/f", 0, &[7; 5000]).unwrap();
        let ticket = fs.begin_journal_switch("/f", false).unwrap();
        assert!(ticket.holder().is_some());
        assert_eq!(fs.locks_held().len(), 1);
        let write = Op::Write { path: "/f".into(), offset: 0, len: 1, seed: 1 };
        assert_eq!(fs.waits_for(&write), Some(Lock::JournalUpdates));
        assert_eq!(fs.waits_for(&Op::Fsync { path: "/f".into() }), Some(Lock::JournalUpdates));
        assert_eq!(fs.waits_for(&Op::Stat { path: "/f".into() }), None);
        // An op that reaches the lock anyway cannot sleep here.
        assert_eq!(fs.create("/g", 0o644), Err(Errno::EDEADLK));
        assert_eq!(fs.sync(), Err(Errno::EDEADLK));
        assert_eq!(fs.read("/f", 0, 10).unwrap(), vec![7; 10]);
        assert_ne!(fs.stat("/f").unwrap().flags & JOURNAL_DATA, 0, "the flag clears in the second half");

        fs.finish_journal_switch(ticket).unwrap();
        assert!(fs.locks_held().is_empty());
        assert_eq!(fs.waits_for(&write), None);
        assert_eq!(fs.stat("/f").unwrap().flags & JOURNAL_DATA, 0);
        assert_eq!(fs.journal_stats().map(|j| j.checkpoints > 0), Some(true), "-j empties the log");
        fs.create("/g", 0o644).unwrap();
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
