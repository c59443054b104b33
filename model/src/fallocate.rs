//! fallocate(2) as vfs_fallocate and ext4_fallocate (6.18) define it.
//!
//! - Default / KEEP_SIZE: holes in the range become unwritten; size grows to
//!   the end of the range unless KEEP_SIZE.
//! - PUNCH_HOLE needs KEEP_SIZE. It does nothing at or past EOF, ends at the
//!   page (or larger block) holding EOF, frees whole blocks and zeroes partial edges.
//! - ZERO_RANGE: whole blocks become unwritten, whatever they held; partial
//!   edges are zeroed, an edge that was a hole becomes a clean unwritten
//!   block, and a delayed edge gets an unwritten block with its page dirty.
//! - A hole a page fault may have backed with the rest of its folio
//!   (`FileData::maybe_allocated`) becomes unwritten or stays written:
//!   `Alloc::Zeroed`.
//! - Delayed data that fallocate or a ZERO_RANGE edge gives an unwritten
//!   block is dirty unwritten data, converted at writeback (where ext4 may
//!   zero short unwritten neighbours out: see `FileData::settle_from`).
//! - COLLAPSE_RANGE / INSERT_RANGE: cluster aligned (a block without
//!   bigalloc), no KEEP_SIZE; collapse must
//!   end before EOF, insert must start before it. Dirty data from the page
//!   holding the offset onwards is written back first.
//! - PUNCH_HOLE and ZERO_RANGE from inside the file through its end make
//!   i_disksize the size first (ext4_update_disksize_before_punch).
//! - Under bigalloc space comes in clusters: allocating a hole in a cluster
//!   that holds an allocated block takes no new space, and freeing blocks
//!   frees a cluster only with its last allocated block.
//! - UNSHARE_RANGE and WRITE_ZEROES: EOPNOTSUPP (no shared extents; a loop
//!   device does not unmap on write-zeroes).

use crate::data::Alloc;
use crate::model::Model;
use crate::op::FallocFlags;
use crate::state::Ino;
use crate::vfs::{block_span, classify_fallocate, fallocate_end, punch_span, FallocateMode as Mode};
use crate::Errno;

/// EXT_MAX_BLOCKS: one past the last logical block an extent may reach.
const LAST_LOGICAL_BLOCK: u64 = 0xFFFF_FFFF;

impl Model {
    pub(crate) fn do_fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        let ino = self.open_for_write(path, false)?;
        let done = self.fallocate_open(ino, mode, offset, len);
        self.release(ino);
        done
    }

    fn fallocate_open(&mut self, ino: Ino, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        let kind = classify_fallocate(mode, offset, len)?;
        if self.file(ino).is_none() {
            return Err(Errno::EISDIR);
        }
        let end = fallocate_end(offset, len)?;
        if end > self.mount.max_file_size() {
            return Err(Errno::EFBIG);
        }
        match kind {
            Mode::Allocate { keep_size } => self.allocate(ino, offset, end, keep_size),
            Mode::Punch => {
                self.punch(ino, offset, end);
                Ok(())
            }
            Mode::Zero { keep_size } => self.zero_range(ino, offset, end, keep_size),
            Mode::Collapse => self.collapse(ino, offset, len),
            Mode::Insert => self.insert(ino, offset, len),
            Mode::RefusedByExt4 => Err(Errno::EOPNOTSUPP),
        }
    }

    fn allocate(&mut self, ino: Ino, offset: u64, end: u64, keep_size: bool) -> Result<(), Errno> {
        let span = block_span(offset, end - offset, self.bs());
        self.room_for(ino, span.clone())?;
        self.allocate_blocks(ino, span, (!keep_size).then_some(end));
        Ok(())
    }

    /// ENOSPC unless the clusters `span` of `ino` needs fit.
    pub(crate) fn room_for(&self, ino: Ino, span: std::ops::Range<u64>) -> Result<(), Errno> {
        let ratio = self.ratio();
        let file = self.file(ino).ok_or(Errno::EISDIR)?;
        self.reserve_blocks(file.new_clusters_in(span, ratio) * ratio)
    }

    /// Blocks `span` of `ino` allocated unwritten where nothing was, and
    /// the size grown to `grow_to` if that is larger (room checked first).
    pub(crate) fn allocate_blocks(&mut self, ino: Ino, span: std::ops::Range<u64>, grow_to: Option<u64>) {
        if self.file(ino).is_none() {
            return;
        }
        let delayed: Vec<_> = self.file_mut(ino).blocks.overlapping(span.clone()).into_iter().filter(|(_, a)| *a == Alloc::Delayed).map(|(r, _)| r).collect();
        let filled = self.allocate_holes(ino, span);
        let file = self.file_mut(ino);
        // Delayed data gets a real (unwritten) block; the page stays dirty.
        for r in delayed {
            file.blocks.insert(r, Alloc::UnwrittenDirty);
        }
        let old_size = file.size;
        if let Some(end) = grow_to.filter(|&end| end > file.size) {
            file.size = end;
            file.disksize = None;
        }
        let grew = file.size != old_size;
        if grew || filled > 0 {
            self.touch_datasync(ino);
        }
    }

    /// The holes of blocks `span` of `ino` allocated unwritten (room
    /// checked first), the space counted; the blocks filled. A hole a page
    /// fault's folio may have backed (and its msync written as zeros)
    /// stays written where it did, else turns unwritten: zeros either way.
    pub(crate) fn allocate_holes(&mut self, ino: Ino, span: std::ops::Range<u64>) -> u64 {
        let ratio = self.ratio();
        let Some(file) = self.file(ino) else { return 0 };
        let new_space = file.new_clusters_in(span.clone(), ratio) * ratio;
        let holes = file.blocks.gaps(span.clone());
        let maybe = file.maybe_allocated_in(span);
        let file = self.file_mut(ino);
        for h in &holes {
            file.blocks.insert(h.clone(), Alloc::Unwritten);
        }
        for r in maybe {
            file.blocks.insert(r, Alloc::Zeroed);
        }
        self.st.used_blocks += new_space;
        holes.iter().map(|h| h.end - h.start).sum()
    }

    fn punch(&mut self, ino: Ino, offset: u64, end: u64) {
        let (bs, ps) = (self.bs(), self.mount.page_size as u64);
        let Some(size) = self.file(ino).map(|f| f.size) else { return };
        let Some((end, blocks)) = punch_span(offset, end, size, bs, ps) else { return };
        self.punch_edges(ino, offset, end, blocks.clone());
        self.punch_out(ino, blocks.clone(), blocks);
    }

    /// What a punch does before it frees blocks: i_disksize, the partial
    /// edges zeroed, cached data and delayed blocks of its whole `blocks`
    /// dropped (truncate_pagecache_range and the extent status removal).
    /// The file is touched if it held any of those blocks.
    pub(crate) fn punch_edges(&mut self, ino: Ino, offset: u64, end: u64, blocks: std::ops::Range<u64>) {
        let (bs, ratio) = (self.bs(), self.ratio());
        let file = self.file_mut(ino);
        let present = !file.blocks.overlapping(blocks.clone()).is_empty();
        file.disksize_before_punch(offset, end);
        if blocks.is_empty() {
            file.zero_bytes(offset, end);
        } else {
            file.zero_bytes(offset, (blocks.start * bs).min(end));
            file.zero_bytes((blocks.end * bs).max(offset), end);
        }
        let held = file.allocated_clusters_in(blocks.clone(), ratio);
        // Delayed data goes with its folio: nothing holds those bytes now.
        let delayed: Vec<_> = file.blocks.overlapping(blocks.clone()).into_iter().filter(|(_, a)| *a == Alloc::Delayed).map(|(r, _)| r).collect();
        file.drop_cached(blocks.clone());
        for r in delayed {
            file.zero_bytes(r.start * bs, r.end * bs);
        }
        let dropped = held - file.allocated_clusters_in(blocks, ratio);
        self.st.used_blocks -= dropped * ratio;
        if present {
            self.touch_datasync(ino);
        }
    }

    /// Frees `piece` of a punch's whole `blocks`: a cluster keeps its space
    /// while a block outside them holds it.
    pub(crate) fn punch_out(&mut self, ino: Ino, blocks: std::ops::Range<u64>, piece: std::ops::Range<u64>) {
        let (bs, ratio) = (self.bs(), self.ratio());
        let file = self.file_mut(ino);
        let held = file.allocated_clusters_in(blocks.clone(), ratio);
        let freed = file.free_blocks(piece, bs);
        let freed_clusters = held - file.allocated_clusters_in(blocks, ratio);
        self.st.used_blocks -= freed_clusters * ratio;
        if freed > 0 {
            self.touch_datasync(ino);
        }
    }

    fn zero_range(&mut self, ino: Ino, offset: u64, end: u64, keep_size: bool) -> Result<(), Errno> {
        let (bs, ratio) = (self.bs(), self.ratio());
        let span = block_span(offset, end - offset, bs);
        let file = self.file(ino).ok_or(Errno::EISDIR)?;
        let new_space = file.new_clusters_in(span.clone(), ratio) * ratio;
        self.reserve_blocks(new_space)?;
        let first_full = offset.div_ceil(bs);
        let last_full = end / bs;
        let file = self.file_mut(ino);
        file.disksize_before_punch(offset, end);
        let new_size = if !keep_size && end > file.size { end } else { file.size };
        // Edges keep their data outside the range. A hole at an edge is
        // allocated unwritten and stays clean: it reads as zeros already, so
        // there is nothing to zero (Linux 6.18 leaves it unwritten even
        // after fsync). Written and dirty edges keep their state; a delayed
        // edge gets its unwritten block now, as fallocate gives one.
        let edges = [span.start..first_full.min(span.end), last_full.max(span.start)..span.end];
        for edge in edges.iter().filter(|e| !e.is_empty()) {
            let existing = file.blocks.overlapping(edge.clone());
            file.blocks.insert(edge.clone(), Alloc::Unwritten);
            for (r, a) in existing {
                file.blocks.insert(r, if a == Alloc::Delayed { Alloc::UnwrittenDirty } else { a });
            }
        }
        // Whole blocks become unwritten whatever they held: ext4 converts
        // written extents and drops the pages of dirty ones.
        if first_full < last_full {
            file.blocks.insert(first_full..last_full, Alloc::Unwritten);
        }
        file.zero_bytes(offset, end);
        if new_size != file.size {
            file.disksize = None;
        }
        file.size = new_size;
        self.st.used_blocks += new_space;
        self.touch_datasync(ino);
        Ok(())
    }

    /// ext4_collapse_range and ext4_insert_range: the range must be
    /// aligned to the cluster (EXT4_CLUSTER_SIZE, the block without bigalloc).
    fn check_shift(&self, ino: Ino, offset: u64, len: u64) -> Result<u64, Errno> {
        let cluster = u64::from(self.mount.cluster_size);
        if offset % cluster != 0 || len % cluster != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(self.file(ino).ok_or(Errno::EISDIR)?.size)
    }

    /// Writes back dirty data from the page that holds `offset` to EOF, as
    /// collapse and insert do before they move extents.
    fn writeback_from(&mut self, ino: Ino, offset: u64) {
        let ps = self.mount.page_size as u64;
        let bs = self.bs();
        let from = (offset / ps * ps) / bs;
        self.file_mut(ino).settle_from(from, bs);
    }

    fn collapse(&mut self, ino: Ino, offset: u64, len: u64) -> Result<(), Errno> {
        let size = self.check_shift(ino, offset, len)?;
        if offset + len >= size {
            return Err(Errno::EINVAL);
        }
        self.writeback_from(ino, offset);
        let (bs, ratio) = (self.bs(), self.ratio());
        let (first, count) = (offset / bs, len / bs);
        let file = self.file_mut(ino);
        // Whole clusters go, and the rest moves by whole clusters.
        let freed = file.allocated_clusters_in(first..first + count, ratio);
        file.free_blocks(first..first + count, bs);
        file.shift_blocks(first + count, -(count as i64), bs);
        file.size -= len;
        file.disksize = None;
        self.st.used_blocks -= freed * ratio;
        self.touch_datasync(ino);
        Ok(())
    }

    fn insert(&mut self, ino: Ino, offset: u64, len: u64) -> Result<(), Errno> {
        let size = self.check_shift(ino, offset, len)?;
        if offset >= size {
            return Err(Errno::EINVAL);
        }
        if len > self.mount.max_file_size() - size {
            return Err(Errno::EFBIG);
        }
        let bs = self.bs();
        self.writeback_from(ino, offset);
        // Blocks past EOF (KEEP_SIZE preallocation) move too, and none may
        // move past the last logical block: ext4_ext_shift_extents refuses,
        // after ext4_insert_range has already grown the size ("to avoid
        // data loss if there is error while shifting"), and the size stays.
        let last_end = self.file(ino).and_then(|f| f.blocks.iter().last().map(|(r, _)| r.end)).unwrap_or(0);
        if last_end > offset / bs && last_end + len / bs > LAST_LOGICAL_BLOCK {
            self.file_mut(ino).size += len;
            self.touch_datasync(ino);
            return Err(Errno::EINVAL);
        }
        let file = self.file_mut(ino);
        file.shift_blocks(offset / bs, (len / bs) as i64, bs);
        file.size += len;
        file.disksize = None;
        self.touch_datasync(ino);
        Ok(())
    }
}
