//! The interface model and engine both implement, and the one place an [`Op`]
//! is turned into calls on it.

use crate::op::{pattern, ChattrFlag, DirEntry, FallocFlags, FiemapExtent, FiemapRequest, Op, Outcome, RenameFlags, Reply, SeekChoices, SeekWhence, Stat, FD_SLOTS, MAX_IO_LEN};
use crate::Errno;

/// A mounted filesystem, seen through path-based system calls.
pub trait FileSystem {
    fn create(&mut self, path: &str, perm: u16) -> Result<(), Errno>;
    fn mkdir(&mut self, path: &str, perm: u16) -> Result<(), Errno>;
    fn unlink(&mut self, path: &str) -> Result<(), Errno>;
    fn rmdir(&mut self, path: &str) -> Result<(), Errno>;
    fn rename(&mut self, from: &str, to: &str) -> Result<(), Errno>;
    /// renameat2(2) with RENAME_NOREPLACE or RENAME_EXCHANGE.
    fn renameat2(&mut self, from: &str, to: &str, flags: RenameFlags) -> Result<(), Errno>;
    fn link(&mut self, from: &str, to: &str) -> Result<(), Errno>;
    fn symlink(&mut self, target: &str, path: &str) -> Result<(), Errno>;
    fn readlink(&mut self, path: &str) -> Result<String, Errno>;
    fn readdir(&mut self, path: &str) -> Result<Vec<DirEntry>, Errno>;
    fn stat(&mut self, path: &str) -> Result<Stat, Errno>;
    /// Returns the number of bytes written (short at the file size limit).
    fn write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno>;
    /// pwrite of [`pattern`]`(seed, len)` at `offset`. An implementation that
    /// can keep a pattern by reference instead of its bytes overrides this.
    fn write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.write(path, offset, &pattern(seed, len as usize))
    }
    fn read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno>;
    fn truncate(&mut self, path: &str, size: u64) -> Result<(), Errno>;
    fn fsync(&mut self, path: &str) -> Result<(), Errno>;
    fn fdatasync(&mut self, path: &str) -> Result<(), Errno>;
    fn sync(&mut self) -> Result<(), Errno>;
    fn fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno>;
    /// FS_IOC_FIEMAP of `req`'s range with its flags: the extents there.
    fn fiemap(&mut self, path: &str, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno>;
    /// FS_IOC_FIEMAP with fm_extent_count = 0: [`Reply::MappedCount`], how
    /// many extents [`FileSystem::fiemap`] would report. The model answers
    /// [`Reply::ExtentsToCount`] instead, since that number is layout.
    fn fiemap_count(&mut self, path: &str, req: FiemapRequest) -> Outcome {
        let extents = self.fiemap(path, req)?;
        Ok(Reply::MappedCount(u32::try_from(extents.len()).unwrap_or(u32::MAX)))
    }
    fn set_journal_data(&mut self, path: &str, enable: bool) -> Result<(), Errno>;
    /// chattr +i/-i/+a/-a.
    fn chattr(&mut self, path: &str, flag: ChattrFlag, enable: bool) -> Result<(), Errno>;
    /// Appends `data` at EOF through an O_APPEND descriptor; returns the bytes written.
    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno>;
    /// [`FileSystem::append`] of [`pattern`]`(seed, len)`.
    fn append_pattern(&mut self, path: &str, len: u32, seed: u64) -> Result<u64, Errno> {
        self.append(path, &pattern(seed, len as usize))
    }
    /// open(O_WRONLY|O_TRUNC) of an existing file, `data` written at 0, close.
    fn rewrite(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno>;
    /// [`FileSystem::rewrite`] of [`pattern`]`(seed, len)`.
    fn rewrite_pattern(&mut self, path: &str, len: u32, seed: u64) -> Result<u64, Errno> {
        self.rewrite(path, &pattern(seed, len as usize))
    }
    /// lseek(SEEK_DATA/SEEK_HOLE) through an O_RDONLY descriptor. A real
    /// filesystem gives one offset ([`SeekChoices::exactly`]); the model may
    /// allow several.
    fn lseek(&mut self, path: &str, offset: u64, whence: SeekWhence) -> Result<SeekChoices, Errno>;

    /// open(O_RDWR) of `path` into descriptor slot `slot` (below
    /// [`FD_SLOTS`]); the slot's old descriptor, if any, is closed once
    /// the open has succeeded, as dup2 onto it would.
    fn open(&mut self, path: &str, slot: u8) -> Result<(), Errno>;
    /// close(2) of a slot: EBADF when it is empty. The last close of an
    /// unlinked file frees it.
    fn close(&mut self, slot: u8) -> Result<(), Errno>;
    /// pread(2) through a slot.
    fn pread(&mut self, slot: u8, offset: u64, len: u32) -> Result<Vec<u8>, Errno>;
    /// pwrite(2) through a slot; returns the bytes written.
    fn pwrite(&mut self, slot: u8, offset: u64, data: &[u8]) -> Result<u64, Errno>;
    /// fsync(2) through a slot.
    fn fsync_fd(&mut self, slot: u8) -> Result<(), Errno>;
    /// ftruncate(2) through a slot.
    fn ftruncate(&mut self, slot: u8, size: u64) -> Result<(), Errno>;
    /// [`FileSystem::pwrite`] of [`pattern`]`(seed, len)`.
    fn pwrite_pattern(&mut self, slot: u8, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.pwrite(slot, offset, &pattern(seed, len as usize))
    }
    /// open(O_WRONLY|O_DIRECT) + pwrite + close; returns the bytes written.
    fn direct_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno>;
    /// [`FileSystem::direct_write`] of [`pattern`]`(seed, len)`.
    fn direct_write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.direct_write(path, offset, &pattern(seed, len as usize))
    }
    /// open(O_RDWR) + mmap(MAP_SHARED) + store + msync(MS_SYNC) + munmap +
    /// fdatasync + close ([`Op::MapWrite`]); returns the bytes stored (none
    /// past EOF).
    fn map_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno>;
    /// [`FileSystem::map_write`] of [`pattern`]`(seed, len)`.
    fn map_write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.map_write(path, offset, &pattern(seed, len as usize))
    }
    /// open(O_RDONLY|O_DIRECT) + pread + close.
    fn direct_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno>;
    /// [`FileSystem::direct_read`] as an outcome; the model may answer
    /// [`Reply::DataOrEinval`] where ext4's answer is layout.
    fn direct_read_outcome(&mut self, path: &str, offset: u64, len: u32) -> Outcome {
        self.direct_read(path, offset, len).map(Reply::Data)
    }
    /// The process holding the slots exits: each open slot is closed, in
    /// slot order. Runs end this way before an unmount, a kernel case
    /// ends this way when its process exits.
    fn close_all(&mut self) -> Result<(), Errno> {
        let mut first = Ok(());
        for slot in 0..FD_SLOTS {
            match self.close(slot) {
                Ok(()) | Err(Errno::EBADF) => {}
                Err(e) => first = first.and(Err(e)),
            }
        }
        first
    }

    /// Runs one op. I/O lengths above [`MAX_IO_LEN`] are refused here, once for
    /// every implementation.
    fn apply(&mut self, op: &Op) -> Outcome {
        let done = |r: Result<(), Errno>| r.map(|()| Reply::Done);
        match op {
            Op::Create { path, perm } => done(self.create(path, *perm)),
            Op::Mkdir { path, perm } => done(self.mkdir(path, *perm)),
            Op::Unlink { path } => done(self.unlink(path)),
            Op::Rmdir { path } => done(self.rmdir(path)),
            Op::Rename { from, to } => done(self.rename(from, to)),
            Op::Renameat2 { from, to, flags } => done(self.renameat2(from, to, *flags)),
            Op::Link { from, to } => done(self.link(from, to)),
            Op::Symlink { target, path } => done(self.symlink(target, path)),
            Op::Readlink { path } => self.readlink(path).map(Reply::Target),
            Op::Readdir { path } => self.readdir(path).map(Reply::Entries),
            Op::Stat { path } => self.stat(path).map(Reply::Stat),
            Op::Write { path, offset, len, seed } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.write_pattern(path, *offset, *len, *seed).map(Reply::Written)
            }
            Op::Read { path, offset, len } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.read(path, *offset, *len).map(Reply::Data)
            }
            Op::Truncate { path, size } => done(self.truncate(path, *size)),
            Op::Fsync { path } => done(self.fsync(path)),
            Op::Fdatasync { path } => done(self.fdatasync(path)),
            Op::Sync => done(self.sync()),
            Op::Fallocate { path, mode, offset, len } => done(self.fallocate(path, *mode, *offset, *len)),
            Op::Fiemap { path, start, len, flags, count_only } => {
                let req = FiemapRequest { start: *start, len: *len, flags: *flags };
                if *count_only {
                    self.fiemap_count(path, req)
                } else {
                    self.fiemap(path, req).map(Reply::Extents)
                }
            }
            Op::SetJournalData { path, enable } => done(self.set_journal_data(path, *enable)),
            Op::Chattr { path, flag, enable } => done(self.chattr(path, *flag, *enable)),
            Op::Append { path, len, seed } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.append_pattern(path, *len, *seed).map(Reply::Written)
            }
            Op::Rewrite { path, len, seed } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.rewrite_pattern(path, *len, *seed).map(Reply::Written)
            }
            // dup2 onto a descriptor number past the table. Other ops name
            // a slot nothing holds: each checks its arguments first
            // (a negative offset is EINVAL before the descriptor is looked up).
            Op::Open { slot, .. } if *slot >= FD_SLOTS => Err(Errno::EBADF),
            Op::Open { path, slot } => done(self.open(path, *slot)),
            Op::Close { slot } => done(self.close(*slot)),
            Op::FsyncFd { slot } => done(self.fsync_fd(*slot)),
            Op::FtruncateFd { slot, size } => done(self.ftruncate(*slot, *size)),
            Op::ReadFd { slot, offset, len } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.pread(*slot, *offset, *len).map(Reply::Data)
            }
            Op::WriteFd { slot, offset, len, seed } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.pwrite_pattern(*slot, *offset, *len, *seed).map(Reply::Written)
            }
            Op::DirectWrite { path, offset, len, seed } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.direct_write_pattern(path, *offset, *len, *seed).map(Reply::Written)
            }
            Op::DirectRead { path, offset, len } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.direct_read_outcome(path, *offset, *len)
            }
            Op::MapWrite { path, offset, len, seed } => {
                if *len > MAX_IO_LEN {
                    return Err(Errno::EINVAL);
                }
                self.map_write_pattern(path, *offset, *len, *seed).map(Reply::Written)
            }
            Op::Lseek { path, offset, whence } => match self.lseek(path, *offset, *whence) {
                Ok(choices) => choices.only().unwrap_or(Ok(Reply::SeekChoices(choices))),
                Err(e) => Err(e),
            },
        }
    }
}
