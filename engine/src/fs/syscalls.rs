//! [`FileSystem`] for [`Ext4`]: each call is the matching `do_*` operation,
//! changes first asking the journal whether to commit the running
//! transaction (`prepare_change`).

use ext4_model::op::{DirEntry, FallocFlags, FiemapExtent, Stat};
use ext4_model::{Errno, FileSystem};

use crate::device::BlockDevice;

use super::Ext4;

impl<D: BlockDevice> FileSystem for Ext4<D> {
    fn create(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        self.prepare_change(4)?;
        self.do_create(path, perm)
    }
    fn mkdir(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        self.prepare_change(4)?;
        self.do_mkdir(path, perm)
    }
    fn unlink(&mut self, path: &str) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.do_unlink(path)
    }
    fn rmdir(&mut self, path: &str) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.do_rmdir(path)
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        self.prepare_change(4)?;
        self.do_rename(from, to)
    }
    fn link(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        self.prepare_change(4)?;
        self.do_link(from, to)
    }
    fn symlink(&mut self, target: &str, path: &str) -> Result<(), Errno> {
        self.prepare_change(4)?;
        self.do_symlink(target, path)
    }
    fn readlink(&mut self, path: &str) -> Result<String, Errno> {
        self.do_readlink(path)
    }
    fn readdir(&mut self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        self.do_readdir(path)
    }
    fn stat(&mut self, path: &str) -> Result<Stat, Errno> {
        self.do_stat(path)
    }
    fn write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        self.prepare_change(self.blocks_for_bytes(data.len() as u64))?;
        self.do_write(path, offset, data)
    }
    fn read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.do_read(path, offset, len)
    }
    fn truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.do_truncate(path, size)
    }
    fn fsync(&mut self, path: &str) -> Result<(), Errno> {
        self.open_path(path)?;
        self.sync_all()
    }
    fn fdatasync(&mut self, path: &str) -> Result<(), Errno> {
        self.open_path(path)?;
        self.sync_all()
    }
    fn sync(&mut self) -> Result<(), Errno> {
        self.sync_all()
    }
    fn fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        self.prepare_change(self.blocks_for_bytes(len))?;
        self.do_fallocate(path, mode, offset, len)
    }
    fn fiemap(&mut self, path: &str, _sync: bool) -> Result<Vec<FiemapExtent>, Errno> {
        // Data is never delayed here, so FIEMAP_FLAG_SYNC has nothing to flush.
        self.do_fiemap(path)
    }
    fn set_journal_data(&mut self, path: &str, enable: bool) -> Result<(), Errno> {
        self.do_set_journal_data(path, enable)?;
        // A journal-flag switch is a durability point: ext4 flushes the
        // journal (disable) or commits a sync handle (enable).
        self.sync_all()
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
    /// fsync or fdatasync in two halves, so other ops can run while its
    /// transaction commits, as jbd2 lets new handles into the next
    /// transaction then. This half finds the file and closes the running
    /// transaction: what the fsync makes durable is fixed here.
    pub fn begin_fsync(&mut self, path: &str) -> Result<SyncTicket, Errno> {
        self.open_path(path)?;
        if self.ctx.mount.read_only {
            return Ok(SyncTicket::Done);
        }
        if self.ctx.journal.is_none() {
            self.sync_all()?;
            return Ok(SyncTicket::Done);
        }
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
            SyncTicket::Commit(tid) if self.committing_tid() == Some(tid) => self.finish_commit(),
            // Committed already, by a later sync or a transaction that
            // needed the log (or dropped by a crash: nothing to wait for).
            SyncTicket::Commit(_) => Ok(()),
        };
        done.map_err(Errno::from)
    }
}
