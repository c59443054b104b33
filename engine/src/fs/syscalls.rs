//! [`FileSystem`] for [`Ext4`]: each call is the matching `do_*` operation,
//! changes first asking the journal whether to commit the running
//! transaction (`prepare_change`, which also starts the handle). Ops that
//! may put folios in the page cache make room first (`make_room`), where
//! writing back is safe: before the op has changed anything.

use ext4_model::op::{ChattrFlag, DirEntry, FallocFlags, FiemapExtent, FiemapRequest, RenameFlags, SeekChoices, SeekWhence, Stat};
use ext4_model::{Errno, FileSystem};

use crate::device::BlockDevice;

use super::Ext4;

impl<D: BlockDevice> Ext4<D> {
    /// Room for the few minimum-order folios an op zeroes edges in (a
    /// truncated tail, punched or zeroed edges, the block of an old EOF).
    pub(super) fn make_room_for_edges(&mut self) -> Result<(), Errno> {
        if self.ctx.mount.read_only {
            return Ok(());
        }
        let folio = u64::from(self.ctx.mount.page_size) << self.ctx.mount.min_folio_order;
        self.make_room(4 * folio, None).map_err(Errno::from)
    }

    /// Before an op that changes `bytes` of a file's data: its handle's
    /// credits and room, and room for its edge folios.
    pub(super) fn prepare_data_change(&mut self, bytes: u64) -> Result<(), Errno> {
        self.prepare_change(self.blocks_for_bytes(bytes))?;
        self.make_room_for_edges()
    }

    /// Before a truncate: its handle, and room for the tail block's folio
    /// (it allocates nothing).
    pub(super) fn prepare_truncate(&mut self) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.make_room_for_edges()
    }

    /// ftruncate's checks up to the inode: the size, the descriptor; then
    /// what a truncate prepares.
    pub(super) fn ftruncate_checks(&mut self, slot: u8, size: u64) -> Result<crate::format::InodeNumber, Errno> {
        if size > ext4_model::vfs::LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.slot_file(slot)?;
        self.prepare_truncate()?;
        Ok(ino)
    }

    /// pwrite's checks in its order: the offset (before the descriptor is
    /// looked up), the descriptor, and ext4_write_checks' immutable since
    /// the open (append-only is an open-time rule).
    pub(super) fn pwrite_checks(&mut self, slot: u8, offset: u64) -> Result<crate::format::InodeNumber, Errno> {
        if offset > ext4_model::vfs::LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.slot_file(slot)?;
        if self.immutable(ino)? {
            return Err(Errno::EPERM);
        }
        Ok(ino)
    }
}

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
        self.do_rename(from, to, None)
    }
    fn renameat2(&mut self, from: &str, to: &str, flags: RenameFlags) -> Result<(), Errno> {
        self.prepare_change(4)?;
        self.do_rename(from, to, Some(flags))
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
        self.prepare_data_change(data.len() as u64)?;
        self.do_write(path, offset, data)
    }
    fn read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.do_read(path, offset, len)
    }
    fn truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        self.prepare_truncate()?;
        self.do_truncate(path, size)
    }
    fn fsync(&mut self, path: &str) -> Result<(), Errno> {
        let ino = self.open_path(path)?;
        let synced = self.sync_file(ino);
        self.closing(ino, synced)
    }
    fn fdatasync(&mut self, path: &str) -> Result<(), Errno> {
        let ino = self.open_path(path)?;
        let synced = self.sync_file(ino);
        self.closing(ino, synced)
    }
    fn sync(&mut self) -> Result<(), Errno> {
        self.sync_all()
    }
    fn fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        self.prepare_data_change(len)?;
        self.do_fallocate(path, mode, offset, len)
    }
    fn fiemap(&mut self, path: &str, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        self.fiemap_request(path, req)
    }
    fn set_journal_data(&mut self, path: &str, enable: bool) -> Result<(), Errno> {
        self.set_journal_data_whole(path, enable)
    }
    fn chattr(&mut self, path: &str, flag: ChattrFlag, enable: bool) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.do_chattr(path, flag, enable)
    }
    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        self.prepare_change(self.blocks_for_bytes(data.len() as u64))?;
        self.do_append(path, data)
    }
    fn lseek(&mut self, path: &str, offset: u64, whence: SeekWhence) -> Result<SeekChoices, Errno> {
        self.do_lseek(path, offset, whence).map(SeekChoices::exactly)
    }
    fn rewrite(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        self.prepare_data_change(data.len() as u64)?;
        self.do_rewrite(path, data)
    }
    fn open(&mut self, path: &str, slot: u8) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.do_open(path, slot)
    }
    fn close(&mut self, slot: u8) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.do_close(slot)
    }
    fn pread(&mut self, slot: u8, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        // A negative offset is refused before the descriptor is looked up.
        if offset > ext4_model::vfs::LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.slot_file(slot)?;
        self.read_open(ino, offset, len)
    }
    fn pwrite(&mut self, slot: u8, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.pwrite_checks(slot, offset)?;
        self.prepare_data_change(data.len() as u64)?;
        self.under_inode_lock(ino, super::locks::Lock::InodeRwsem, false, "ext4_buffered_write_iter", |fs| fs.write_at(ino, offset, data))
    }
    fn fsync_fd(&mut self, slot: u8) -> Result<(), Errno> {
        let ino = self.slot_file(slot)?;
        self.sync_file(ino)
    }
    fn ftruncate(&mut self, slot: u8, size: u64) -> Result<(), Errno> {
        let ino = self.ftruncate_checks(slot, size)?;
        // IS_APPEND (do_sys_ftruncate), then immutable (ext4_setattr).
        self.truncate_checked(ino, size)
    }
    fn direct_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        self.prepare_data_change(data.len() as u64)?;
        self.do_direct_write(path, offset, data)
    }
    fn map_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        self.prepare_change(self.blocks_for_bytes(data.len() as u64))?;
        self.do_map_write(path, offset, data)
    }
    fn direct_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        // Write-back waits where a handle would (see `locks`).
        if !self.ctx.mount.read_only {
            self.start_handle()?;
        }
        self.do_direct_read(path, offset, len)
    }
    fn close_all(&mut self) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.close_every_slot()
    }
}
