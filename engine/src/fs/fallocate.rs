//! fallocate(2), mode by mode as the model's fallocate.rs defines it.
//!
//! - Default / KEEP_SIZE: holes become unwritten extents.
//! - PUNCH_HOLE (with KEEP_SIZE): nothing at or past EOF; the end is clipped
//!   to the page holding EOF; whole blocks are freed, partial edges zeroed.
//! - ZERO_RANGE: whole blocks become unwritten (written ones are converted),
//!   holes are allocated unwritten, partial edges are zeroed on disk.
//! - COLLAPSE / INSERT: block aligned; extents move by whole blocks, after
//!   dirty data from the page holding the offset is written back and the
//!   page cache from there dropped (its contents move).
//! - Ranges that go (punched, zeroed whole) leave the page cache too, dirty
//!   or not, as truncate_pagecache_range drops them; partial edges are
//!   zeroed in the cache.
//! - PUNCH_HOLE and ZERO_RANGE from inside the file through its end make
//!   i_disksize the size first (ext4_update_disksize_before_punch).
//! - UNSHARE, WRITE_ZEROES and unknown bits: EOPNOTSUPP.

use ext4_model::{Errno, FallocFlags, FileKind};

use crate::device::BlockDevice;
use crate::extent_tree::map::EXT_MAX_BLOCKS;
use crate::format::InodeNumber;

use ext4_model::vfs::{block_span, classify_fallocate, fallocate_end, punch_span, FallocateMode as Mode};
use super::locks::Lock;
use super::Ext4;

/// ext4_update_disksize_before_punch: a punch or zero range from inside
/// the file through its end first makes i_disksize the size.
pub(super) fn disksize_before_punch(node: &mut super::node::Node, offset: u64, end: u64) {
    if offset <= node.disk.size && end >= node.disk.size {
        node.disksize = None;
    }
}

/// Whether a fallocate mode that passed its checks takes invalidate_lock
/// (it drops or moves page cache); every one takes i_rwsem.
pub(crate) fn fallocate_invalidates(kind: Mode) -> bool {
    !matches!(kind, Mode::Allocate { .. })
}

/// The checks fallocate makes before any lock (vfs_fallocate's, and the
/// mode ext4 refuses); the mode when they pass.
pub(crate) fn fallocate_checks(mode: FallocFlags, offset: u64, len: u64, max_file_size: u64) -> Result<Mode, Errno> {
    let kind = classify_fallocate(mode, offset, len)?;
    if fallocate_end(offset, len)? > max_file_size {
        return Err(Errno::EFBIG);
    }
    match kind {
        Mode::RefusedByExt4 => Err(Errno::EOPNOTSUPP),
        kind => Ok(kind),
    }
}

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn do_fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        let ino = self.open_for_write(path, false)?;
        let done = self.fallocate_open(ino, mode, offset, len);
        self.closing(ino, done)
    }

    fn fallocate_open(&mut self, ino: InodeNumber, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        // The mode's own errors come before the file's kind.
        classify_fallocate(mode, offset, len)?;
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EISDIR);
        }
        let kind = fallocate_checks(mode, offset, len, self.ctx.mount.max_file_size())?;
        let end = fallocate_end(offset, len)?;
        self.under_fallocate_locks(ino, fallocate_invalidates(kind), |fs| fs.fallocate_locked(ino, kind, offset, end, len))
    }

    /// ext4_fallocate's locks: the inode lock and inode_dio_wait for every
    /// mode, and invalidate_lock for the modes that drop page cache.
    pub(super) fn under_fallocate_locks<T>(&mut self, ino: InodeNumber, invalidates: bool, f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        self.under_inode_lock(ino, Lock::InodeRwsem, false, "ext4_fallocate", |fs| {
            fs.dio_wait(ino)?;
            match invalidates {
                true => fs.under_inode_lock(ino, Lock::InvalidateLock, false, "ext4_fallocate", f),
                false => f(fs),
            }
        })
    }

    fn fallocate_locked(&mut self, ino: InodeNumber, kind: Mode, offset: u64, end: u64, len: u64) -> Result<(), Errno> {
        let done = match kind {
            Mode::Allocate { keep_size } => self.allocate(ino, offset, end, keep_size),
            Mode::Punch => self.punch(ino, offset, end),
            Mode::Zero { keep_size } => self.zero_range(ino, offset, end, keep_size),
            Mode::Collapse => self.collapse(ino, offset, len),
            Mode::Insert => self.insert(ino, offset, len),
            Mode::RefusedByExt4 => Err(Errno::EOPNOTSUPP),
        };
        // A mode that failed part way may have mapped blocks already: the
        // inode must still be written, or those blocks leak.
        self.mark_dirty(ino);
        done?;
        let (ctx, node) = self.split(ino)?;
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        Ok(())
    }

    fn allocate(&mut self, ino: InodeNumber, offset: u64, end: u64, keep_size: bool) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        let span = block_span(offset, end - offset, ctx.bs());
        let grows = !keep_size && end > node.disk.size;
        if grows {
            ctx.zero_past_eof(ino, node, node.disk.size, end)?;
        }
        ctx.no_normalize = fits_one_extent(&span);
        let mapped = ctx.map_range(ino, node, span, true);
        ctx.no_normalize = false;
        mapped?;
        if grows {
            node.disk.size = end;
            node.disksize = None;
        }
        Ok(())
    }

    fn punch(&mut self, ino: InodeNumber, offset: u64, end: u64) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        let (bs, ps) = (ctx.bs(), u64::from(ctx.mount.page_size));
        let Some((end, blocks)) = punch_span(offset, end, node.disk.size, bs, ps) else { return Ok(()) };
        // ext4_zero_partial_blocks before the blocks go, both edges or
        // neither: a folio it cannot have leaves the file as it was.
        ctx.cache_zero_ranges(ino, node, &partial_edges(offset, end, bs))?;
        disksize_before_punch(node, offset, end);
        if !blocks.is_empty() {
            ctx.discard_blocks(ino, node, blocks)?;
        }
        Ok(())
    }

    fn zero_range(&mut self, ino: InodeNumber, offset: u64, end: u64, keep_size: bool) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let span = block_span(offset, end - offset, bs);
        // Room for the whole range is checked first, so ENOSPC leaves the
        // file as it was (the model reserves the same way).
        ctx.check_room(node, span.clone())?;
        // Written edges zeroed (and the old EOF block's tail, when the
        // file grows) before anything changes: all or nothing for memory.
        let grows = !keep_size && end > node.disk.size;
        let mut zeroed = partial_edges(offset, end, bs);
        if grows {
            zeroed.push(ctx.past_eof(node.disk.size, offset));
        }
        ctx.cache_zero_ranges(ino, node, &zeroed)?;
        disksize_before_punch(node, offset, end);
        let first_full = offset.div_ceil(bs);
        let last_full = end / bs;
        // A hole at a partial edge becomes a clean unwritten block (it reads
        // as zeros, so ext4 has nothing to zero there); written edges get
        // their bytes in the range zeroed below.
        let edges = [span.start..first_full.min(span.end), last_full.max(span.start)..span.end];
        for edge in edges.into_iter().filter(|e| !e.is_empty()) {
            ctx.map_range(ino, node, edge, true)?;
        }
        if first_full < last_full {
            // Whole blocks become unwritten whatever they held: written
            // extents convert, cached data (dirty or not) is dropped.
            ctx.map_range(ino, node, first_full..last_full, true)?;
            node.map_set_state(first_full..last_full, true);
            node.map_dirty = true;
            ctx.pages.invalidate(ino, first_full..last_full);
        }
        if grows {
            node.disk.size = end;
            node.disksize = None;
        }
        Ok(())
    }

    /// Cluster alignment (the block without bigalloc), then the file's size.
    fn check_shift(&mut self, ino: InodeNumber, offset: u64, len: u64) -> Result<u64, Errno> {
        let unit = self.ctx.bs() << self.ctx.cluster_bits();
        if offset % unit != 0 || len % unit != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(self.node(ino)?.disk.size)
    }

    /// Before extents move: dirty data from the page holding `offset` on
    /// is written back and the page cache from there dropped, as
    /// ext4_collapse_range and ext4_insert_range do. Returns the first
    /// block dropped.
    fn write_back_for_shift(&mut self, ino: InodeNumber, offset: u64) -> Result<u64, Errno> {
        let geo = self.ctx.pages.geometry();
        let from = geo.pg_to_lblk(geo.byte_to_pg(offset));
        self.write_back_data(ino, from)?;
        self.ctx.pages.invalidate(ino, from..u64::MAX);
        Ok(from)
    }

    fn collapse(&mut self, ino: InodeNumber, offset: u64, len: u64) -> Result<(), Errno> {
        let size = self.check_shift(ino, offset, len)?;
        if offset + len >= size {
            return Err(Errno::EINVAL);
        }
        self.write_back_for_shift(ino, offset)?;
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let (first, count) = (offset / bs, len / bs);
        ctx.discard_blocks(ino, node, first..first + count)?;
        let delta = i64::try_from(count).map_err(|_| Errno::EFBIG)?;
        node.map_shift_from(first + count, -delta, ctx.bug_keeps_stale_extents).ok_or(Errno::EIO)?;
        node.map_dirty = true;
        node.disk.size = size - len;
        node.disksize = None;
        Ok(())
    }

    fn insert(&mut self, ino: InodeNumber, offset: u64, len: u64) -> Result<(), Errno> {
        self.ctx.alloc.discard_inode_preallocations(ino);
        let size = self.check_shift(ino, offset, len)?;
        if offset >= size {
            return Err(Errno::EINVAL);
        }
        if len > self.ctx.mount.max_file_size() - size {
            return Err(Errno::EFBIG);
        }
        self.write_back_for_shift(ino, offset)?;
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        // ext4_insert_range grows the size before ext4_ext_shift_extents
        // refuses to move the last extent past EXT_MAX_BLOCKS; the size stays.
        if node.map().end() > offset / bs && node.map().end() + len / bs > EXT_MAX_BLOCKS {
            node.disk.size = size + len;
            node.disksize = None;
            return Err(Errno::EINVAL);
        }
        let delta = i64::try_from(len / bs).map_err(|_| Errno::EFBIG)?;
        node.map_shift_from(offset / bs, delta, false).ok_or(Errno::EFBIG)?;
        node.map_dirty = true;
        node.disk.size = size + len;
        node.disksize = None;
        Ok(())
    }
}

/// ext4_alloc_file_blocks' EXT4_GET_BLOCKS_NO_NORMALIZE: a range of
/// blocks one unwritten extent holds is not widened.
pub(super) fn fits_one_extent(span: &std::ops::Range<u64>) -> bool {
    span.end - span.start <= u64::from(crate::format::extent::MAX_UNWRITTEN_LEN)
}

/// The bytes of `offset..end` in blocks it covers only in part: one range
/// when both ends share a block or touch, else up to two.
pub(super) fn partial_edges(offset: u64, end: u64, bs: u64) -> Vec<std::ops::Range<u64>> {
    let (first_full, last_full) = (offset.div_ceil(bs), end / bs);
    if first_full < last_full {
        vec![offset..(first_full * bs).min(end), (last_full * bs).max(offset)..end]
    } else {
        let whole = offset..end;
        vec![whole]
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use ext4_model::{Errno, FallocFlags, FileSystem, MountConfig};

    use crate::check::check;
    use crate::device::{BlockDevice, DeviceError, IoClass, WriteFlags};
    use crate::device_mem::MemDevice;
    use crate::Ext4;

    const BS: u64 = 4096;

    fn fresh() -> Ext4<MemDevice> {
        crate::fixtures::fresh_mounted(32 << 20)
    }

    /// Blocks an unlink frees stay held until its transaction commits, yet
    /// the free count has them back at once. Ops commit first when held
    /// blocks could make them fail (ext4 forces a commit before ENOSPC), so
    /// `map_range` runs short only when an op's own frees or tree blocks
    /// beat that estimate; called here past it, it must give back what it
    /// took: ENOSPC, the file as before, every block back after the commit.
    #[test]
    fn a_mapping_that_runs_out_part_way_gives_back_its_blocks() {
        let mut fs = fresh();
        fs.create("/big", 0o644).unwrap();
        let (room, _) = fs.free_space();
        fs.fallocate("/big", FallocFlags::ALLOCATE, 0, room / 2 * BS).unwrap();
        fs.sync().unwrap();
        fs.unlink("/big").unwrap();
        fs.create("/f", 0o644).unwrap();
        let (now, inodes) = fs.free_space();
        assert!(now < room / 2 + room / 8, "the unlinked blocks are held: {now} of {room}");
        let want = now + room / 4;

        let (held, free) = (fs.ctx.alloc.held_blocks(), fs.ctx.alloc.totals().free_blocks);
        let ino = fs.stat("/f").unwrap().ino as crate::format::InodeNumber;
        let (ctx, node) = fs.split(ino).unwrap();
        assert_eq!(ctx.map_range(ino, node, 0..want, true), Err(Errno::ENOSPC));
        assert_eq!(node.map().blocks(), 0);
        // What it took went back, held until the commit as ext4's freed
        // data blocks are in data=ordered; none went missing.
        assert_eq!(fs.ctx.alloc.totals().free_blocks, free);
        fs.check_allocator().unwrap();
        fs.sync().unwrap();
        assert_eq!(fs.free_space(), (now + held, inodes));

        fs.fallocate("/f", FallocFlags::ALLOCATE, 0, want * BS).unwrap();
        assert_eq!(fs.stat("/f").unwrap().blocks, want * BS / 512);
        let (_, report) = check(fs.unmount().unwrap());
        assert!(report.is_clean(), "{:?}", report.problems);
    }

    /// A device whose reads and writes fail while `broken` is set.
    struct Flaky {
        inner: MemDevice,
        broken: Rc<Cell<bool>>,
    }

    impl BlockDevice for Flaky {
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), DeviceError> {
            if self.broken.get() && class == IoClass::Data {
                return Err(DeviceError::Io { offset });
            }
            self.inner.read(offset, buf, class)
        }
        fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DeviceError> {
            if self.broken.get() {
                return Err(DeviceError::Io { offset });
            }
            self.inner.write(offset, buf, flags)
        }
        fn flush(&mut self) -> Result<(), DeviceError> {
            self.inner.flush()
        }
    }

    /// An fallocate that grows the file zeroes the tail of the old EOF
    /// block before it maps anything (all or nothing, for memory and for
    /// I/O): when that block's read fails, nothing is mapped and nothing
    /// leaks, and the image stays clean.
    #[test]
    fn an_fallocate_whose_tail_zeroing_fails_maps_nothing() {
        let broken = Rc::new(Cell::new(false));
        let mut fs = Ext4::mount(Flaky { inner: fresh().unmount().unwrap(), broken: broken.clone() }, &MountConfig::default()).unwrap();
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[9; 100]).unwrap();
        // A cold cache: the old EOF block is on disk only.
        let mut fs = Ext4::mount(fs.unmount().unwrap(), &MountConfig::default()).unwrap();

        broken.set(true);
        assert_eq!(fs.fallocate("/f", FallocFlags::ALLOCATE, 0, 4 * BS), Err(Errno::EIO));
        broken.set(false);
        let st = fs.stat("/f").unwrap();
        assert_eq!(st.size, 100, "the size moves only once the tail is zeroed");
        assert_eq!(st.blocks, BS / 512, "the tail is zeroed before any block is mapped");
        fs.sync().unwrap();
        let (_, report) = check(fs.unmount().unwrap().inner);
        assert!(report.is_clean(), "{:?}", report.problems);
    }
}

