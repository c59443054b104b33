//! Data operations: write, read, truncate, the sync family, FIEMAP and the
//! per-inode journaling flag.

use crate::content::Source;
use crate::vfs::{block_span, check_fiemap, LOFF_MAX};
use crate::model::Model;
use crate::op::{inode_flags, ChattrFlag, FiemapExtent, FiemapRequest, Op};
use crate::state::{Ino, Inode, Node};
use crate::Errno;

impl Model {
    /// pwrite of `len` bytes of `source` (fewer at the size limit).
    pub(crate) fn do_write(&mut self, path: &str, offset: u64, len: usize, source: Source) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        let written = self.write_at(ino, offset, len, source);
        self.release(ino);
        written
    }

    /// write through an O_APPEND descriptor: at EOF, whatever the offset.
    pub(crate) fn do_append(&mut self, path: &str, len: usize, source: Source) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, true)?;
        let offset = self.file(ino).ok_or(Errno::EISDIR)?.size;
        let written = self.write_at(ino, offset, len, source);
        self.release(ino);
        written
    }

    pub(crate) fn write_at(&mut self, ino: Ino, offset: u64, len: usize, source: Source) -> Result<u64, Errno> {
        let count = crate::vfs::write_count(offset, len, self.mount.max_file_size())?;
        if count == 0 {
            return Ok(0);
        }
        let fill = self.write_fill(ino);
        self.write_backed(ino, offset, count as u64, source, fill)
    }

    /// `count` bytes (already held to the size limit) at `offset`, holes
    /// backed as `fill`: space reserved, size and marks kept.
    pub(crate) fn write_backed(&mut self, ino: Ino, offset: u64, count: u64, source: Source, fill: crate::data::Alloc) -> Result<u64, Errno> {
        let (bs, ratio) = (self.bs(), self.ratio());
        let span = block_span(offset, count, bs);
        let file = self.file(ino).ok_or(Errno::EINVAL)?;
        let new_space = file.new_clusters_in(span.clone(), ratio) * ratio;
        self.reserve_blocks(new_space)?;
        let filled = file.holes_in(span);
        let old_size = file.size;
        let file = self.file_mut(ino);
        file.write(offset, count, source, bs, fill);
        let grew = file.size != old_size;
        self.st.used_blocks += new_space;
        if grew || filled > 0 {
            self.touch_datasync(ino);
        }
        Ok(count)
    }

    pub(crate) fn do_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        let ino = self.open_path(path)?;
        let Some(file) = self.file(ino) else { return Err(Errno::EISDIR) };
        let read = if offset > LOFF_MAX { Err(Errno::EINVAL) } else { Ok(file.read(offset, len as u64)) };
        self.release_looking(ino, || Op::Read { path: path.into(), offset, len });
        read
    }

    pub(crate) fn do_truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        let ino = self.truncate_path_checks(path, size)?;
        self.truncate_checked(ino, size)
    }

    /// truncate(2)'s checks up to the inode: the size, the path, a
    /// directory, a read-only mount.
    pub(crate) fn truncate_path_checks(&self, path: &str, size: u64) -> Result<Ino, Errno> {
        if size > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.open_path(path)?;
        if self.st.is_dir(ino) {
            return Err(Errno::EISDIR);
        }
        self.writable()?;
        Ok(ino)
    }

    /// The checks truncate and ftruncate share, once the inode is known:
    /// immutable or append-only is EPERM, past the largest file EFBIG.
    pub(crate) fn truncate_checked(&mut self, ino: Ino, size: u64) -> Result<(), Errno> {
        self.truncate_inode_checks(ino, size)?;
        self.truncate_inode(ino, size);
        Ok(())
    }

    /// vfs_truncate's MAY_WRITE (an immutable inode), then IS_APPEND; then
    /// the largest file.
    pub(crate) fn truncate_inode_checks(&self, ino: Ino, size: u64) -> Result<(), Errno> {
        if self.restricted(ino) {
            return Err(Errno::EPERM);
        }
        if size > self.mount.max_file_size() {
            return Err(Errno::EFBIG);
        }
        Ok(())
    }

    /// ext4_setattr's size change, once the caller's checks passed.
    pub(crate) fn truncate_inode(&mut self, ino: Ino, size: u64) {
        let old = self.file_mut(ino).size;
        // ext4_truncate runs even when the size stays, dropping preallocation past EOF.
        if size <= old {
            let keep = self.drop_past(ino, size);
            self.free_past(ino, keep, keep);
        } else {
            let file = self.file_mut(ino);
            file.size = size;
            file.disksize = None;
        }
        if size != old {
            self.touch_datasync(ino);
        }
    }

    /// Writeback of one file: dirty blocks become written. Not durable by itself.
    pub(crate) fn writeback(&mut self, ino: Ino) {
        let bs = self.bs();
        if let Node::File(f) = &mut self.st.inode_mut(ino).node {
            f.settle_from(0, bs);
        }
    }

    pub(crate) fn do_fsync(&mut self, path: &str, datasync: bool) -> Result<(), Errno> {
        let ino = self.open_path(path)?;
        self.writeback(ino);
        self.release(ino);
        self.mark_synced(ino, datasync);
        Ok(())
    }

    /// fsync/fdatasync of `ino` once its data is written back: it and
    /// what its last change needed are durable.
    pub(crate) fn mark_synced(&mut self, ino: Ino, datasync: bool) {
        let seq = self.st.seq;
        let marks = &mut self.st.inode_mut(ino).marks;
        marks.durable_at = seq;
        let committed = if datasync { marks.datasync_op } else { marks.meta_op };
        self.st.namespace_floor = self.st.namespace_floor.max(committed);
    }

    pub(crate) fn do_sync(&mut self) {
        let (seq, bs) = (self.st.seq, self.bs());
        // Only inodes changed since the last sync can be unsettled: sync is
        // frequent and crowded directories make thousands of inodes.
        for ino in std::mem::take(&mut self.st.touched) {
            if let Some(Inode { node: Node::File(f), .. }) = self.st.inodes.get_mut(&ino) {
                f.settle_from(0, bs);
            }
        }
        self.st.synced_at = seq;
        self.st.namespace_floor = seq;
        if let Some(log) = &mut self.log {
            log.restart(self.st.clone());
        }
    }

    /// FS_IOC_FIEMAP: the open, the request's checks (vfs::check_fiemap),
    /// write-back for SYNC, then the map of the asked blocks.
    pub(crate) fn do_fiemap(&mut self, path: &str, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        let ino = self.open_path(path)?;
        let map = self.fiemap_open(ino, req);
        if req.syncs() {
            // Logged whole by the caller.
            self.release(ino);
        } else {
            let FiemapRequest { start, len, flags } = req;
            self.release_looking(ino, || Op::Fiemap { path: path.into(), start, len, flags, count_only: false });
        }
        map
    }

    fn fiemap_open(&mut self, ino: Ino, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        let bs = self.bs();
        let plan = check_fiemap(req, self.mount.max_file_size(), bs)?;
        if plan.sync {
            self.writeback(ino);
        }
        // No inode here has extended attributes: ext4's "none" (ENOENT) is
        // turned into success with nothing mapped.
        if plan.xattr {
            return Ok(Vec::new());
        }
        match self.file(ino) {
            Some(f) => Ok(f.fiemap(plan.blocks, bs)),
            // ext4 maps a directory's blocks like a file's (the kernel says so).
            None => Ok(vec![FiemapExtent::directory_blocks(plan.blocks.start * bs..plan.blocks.end * bs)]),
        }
    }

    /// chattr +i/-i/+a/-a: FS_IOC_SETFLAGS with one bit changed. The
    /// capability it needs (CAP_LINUX_IMMUTABLE) is the test bed's to have.
    pub(crate) fn do_chattr(&mut self, path: &str, flag: ChattrFlag, enable: bool) -> Result<(), Errno> {
        let ino = self.open_path(path)?;
        let changed = self.chattr_open(ino, flag, enable);
        self.release(ino);
        changed
    }

    fn chattr_open(&mut self, ino: Ino, flag: ChattrFlag, enable: bool) -> Result<(), Errno> {
        self.writable()?;
        self.check_flag_change(ino, flag.bit(), enable)?;
        // ext4_ioctl_setflags writes a regular file's dirty pages back before
        // it turns immutable, so later writes cannot slip in through them.
        if flag == ChattrFlag::Immutable && enable && !self.immutable(ino) && self.file(ino).is_some() {
            self.writeback(ino);
        }
        let inode = self.st.inode_mut(ino);
        if enable {
            inode.flags |= flag.bit();
        } else {
            inode.flags &= !flag.bit();
        }
        self.touch_meta(ino);
        Ok(())
    }

    /// ext4_ioctl_check_immutable: an inode that is and stays immutable may
    /// change no other flag.
    pub(crate) fn check_flag_change(&self, ino: Ino, bit: u32, enable: bool) -> Result<(), Errno> {
        let old = self.st.inode(ino).flags;
        let new = if enable { old | bit } else { old & !bit };
        let keeps_immutable = old & new & inode_flags::IMMUTABLE != 0;
        if keeps_immutable && old != new {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// chattr +j/-j. The switch flushes the inode's data and commits through a
    /// synchronous handle, so everything before it is durable. Without a journal
    /// ext4 returns success and leaves the flag alone.
    pub(crate) fn do_set_journal_data(&mut self, path: &str, enable: bool) -> Result<(), Errno> {
        let ino = self.open_path(path)?;
        let switched = self.switch_open(ino, enable);
        self.release(ino);
        switched
    }

    fn switch_open(&mut self, ino: Ino, enable: bool) -> Result<(), Errno> {
        self.writable()?;
        self.check_flag_change(ino, inode_flags::JOURNAL_DATA, enable)?;
        if self.st.inode(ino).journal_data() == enable || self.mount.data.is_none() {
            return Ok(());
        }
        self.writeback(ino);
        let seq = self.st.seq;
        let inode = self.st.inode_mut(ino);
        if enable {
            inode.flags |= inode_flags::JOURNAL_DATA;
        } else {
            inode.flags &= !inode_flags::JOURNAL_DATA;
        }
        inode.marks.meta_op = seq;
        inode.marks.durable_at = seq;
        self.st.namespace_floor = seq;
        Ok(())
    }
}
