//! The inode flags that restrict change, chattr +i (immutable) and +a
//! (append-only), and the checks ops make against them, in the VFS's order
//! (may_open, may_create, may_delete, vfs_rename, ext4_ioctl_check_immutable).
//! The model holds the same rules (`model/src/namespace.rs`).

use ext4_model::op::inode_flags;
use ext4_model::{ChattrFlag, Errno, FileKind};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::Ext4;

impl<D: BlockDevice> Ext4<D> {
    fn flags_of(&mut self, ino: InodeNumber) -> Result<u32, Errno> {
        Ok(self.node(ino)?.disk.flags)
    }

    pub(crate) fn immutable(&mut self, ino: InodeNumber) -> Result<bool, Errno> {
        Ok(self.flags_of(ino)? & inode_flags::IMMUTABLE != 0)
    }

    /// Immutable or append-only: no unlink, rename, link or truncate of it.
    pub(crate) fn restricted(&mut self, ino: InodeNumber) -> Result<bool, Errno> {
        Ok(self.flags_of(ino)? & (inode_flags::IMMUTABLE | inode_flags::APPEND) != 0)
    }

    /// may_open for writing: an immutable inode refuses, and so does an
    /// append-only one unless the open appends.
    pub(crate) fn may_write(&mut self, ino: InodeNumber, append: bool) -> Result<(), Errno> {
        let flags = self.flags_of(ino)?;
        if flags & inode_flags::IMMUTABLE != 0 || (!append && flags & inode_flags::APPEND != 0) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// may_create: new names need a directory that is not immutable.
    pub(crate) fn may_create_in(&mut self, dir: InodeNumber) -> Result<(), Errno> {
        if self.immutable(dir)? {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// may_delete: neither the directory nor the victim may be immutable or
    /// append-only.
    pub(crate) fn may_delete(&mut self, dir: InodeNumber, victim: InodeNumber) -> Result<(), Errno> {
        if self.restricted(dir)? || self.restricted(victim)? {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// ext4_ioctl_check_immutable: an inode that is and stays immutable may
    /// change no other flag.
    pub(crate) fn check_flag_change(&mut self, ino: InodeNumber, bit: u32, enable: bool) -> Result<(), Errno> {
        let old = self.flags_of(ino)?;
        let new = if enable { old | bit } else { old & !bit };
        if old & new & inode_flags::IMMUTABLE != 0 && old != new {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// chattr +i/-i/+a/-a: FS_IOC_SETFLAGS with one bit changed.
    pub(crate) fn do_chattr(&mut self, path: &str, flag: ChattrFlag, enable: bool) -> Result<(), Errno> {
        let ino = self.open_path(path)?;
        // vfs_fileattr_set: the flag ioctl runs under the inode lock.
        let changed = self.under_inode_lock(ino, super::locks::Lock::InodeRwsem, false, "vfs_fileattr_set", |fs| fs.chattr_open(ino, flag, enable));
        self.closing(ino, changed)
    }

    fn chattr_open(&mut self, ino: InodeNumber, flag: ChattrFlag, enable: bool) -> Result<(), Errno> {
        self.ctx.writable()?;
        self.check_flag_change(ino, flag.bit(), enable)?;
        // ext4_ioctl_setflags: a regular file turning immutable is written
        // back first, so no dirty page can reach it after.
        if flag == ChattrFlag::Immutable && enable && !self.immutable(ino)? && self.kind_of(ino)? == FileKind::Regular {
            self.write_back_data(ino, 0)?;
        }
        let (ctx, node) = self.split(ino)?;
        if enable {
            node.disk.flags |= flag.bit();
        } else {
            node.disk.flags &= !flag.bit();
        }
        node.disk.ctime = ctx.now();
        self.mark_dirty(ino);
        Ok(())
    }
}
