//! Ops in two halves, so that the scheduler can run other tasks' ops between
//! them as the kernel would while the first task sleeps on I/O:
//! - fsync and fdatasync split where jbd2 commits: the running transaction
//!   closes in the first half, and new handles go into the next one while
//!   it is written;
//! - chattr -j splits while it flushes the journal, holding the updates
//!   lock (`journal_switch`), so only ops that look run meanwhile; +j has
//!   no such sleep and is done in its first half.

use ext4_model::{Errno, Op};

use crate::device::BlockDevice;

use super::journal_switch::SwitchTicket;
use super::locks::LockHolder;
use super::Ext4;

/// What a split op's second half has left to do.
#[derive(Debug, PartialEq, Eq)]
pub enum SecondHalf {
    Sync(SyncTicket),
    JournalSwitch(SwitchTicket),
}

impl SecondHalf {
    /// The lock held until the second half runs, if any.
    pub fn holder(&self) -> Option<LockHolder> {
        match self {
            SecondHalf::Sync(_) => None,
            SecondHalf::JournalSwitch(t) => t.holder(),
        }
    }
}

/// What the second half of a split fsync has left to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncTicket {
    /// Nothing (no journal: the first half wrote everything back; or read-only).
    Done,
    /// Nothing was logged; the file's data still owes its flush.
    Flush,
    /// Wait for transaction `tid`: commit it if it is still committing.
    Commit(u32),
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of an op with two halves ([`Op::has_two_halves`];
    /// None for any other op).
    pub fn begin_split(&mut self, op: &Op) -> Option<Result<SecondHalf, Errno>> {
        Some(match op {
            Op::Fsync { path } | Op::Fdatasync { path } => self.begin_fsync(path).map(SecondHalf::Sync),
            Op::SetJournalData { path, enable } => self.begin_journal_switch(path, *enable).map(SecondHalf::JournalSwitch),
            _ => return None,
        })
    }

    /// The second half: the op returns.
    pub fn finish_split(&mut self, half: SecondHalf) -> Result<(), Errno> {
        match half {
            SecondHalf::Sync(ticket) => self.finish_sync(ticket),
            SecondHalf::JournalSwitch(ticket) => self.finish_journal_switch(ticket),
        }
    }

    /// fsync or fdatasync in two halves, so other ops can run while its
    /// transaction commits, as jbd2 lets new handles into the next
    /// transaction then. This half finds the file and closes the running
    /// transaction: what the fsync makes durable is fixed here.
    pub fn begin_fsync(&mut self, path: &str) -> Result<SyncTicket, Errno> {
        self.start_handle()?;
        let ino = self.open_path(path)?;
        // Its close, early: the write-back below leaves it nothing to do
        // but clear the truncate's flag (auto_da_alloc).
        self.release_file(ino)?;
        if self.ctx.mount.read_only {
            return Ok(SyncTicket::Done);
        }
        if self.ctx.journal.is_none() {
            self.sync_file(ino)?;
            return Ok(SyncTicket::Done);
        }
        // The file's data first (filemap_write_and_wait_range), then the commit.
        self.write_back_data(ino, 0).map_err(Errno::from)?;
        match self.close_transaction().map_err(Errno::from)? {
            Some(tid) => Ok(SyncTicket::Commit(tid)),
            None => Ok(SyncTicket::Flush),
        }
    }

    /// The second half: returns once the transaction the first half closed
    /// is durable (committing it now unless another sync already did).
    pub fn finish_sync(&mut self, ticket: SyncTicket) -> Result<(), Errno> {
        let done = match ticket {
            SyncTicket::Done => Ok(()),
            SyncTicket::Flush => self.ctx.dev.flush().map_err(Into::into),
            SyncTicket::Commit(tid) => self.wait_for_commit(tid),
        };
        done.map_err(Errno::from)
    }
}
