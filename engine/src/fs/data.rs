//! File data: mapping and unmapping block ranges, write, read, truncate, and
//! zeroing byte ranges, following the model's file_ops.rs.
//!
//! Data goes straight to the device (no page cache yet), so every block a
//! write touches is written and marked written at once: where the model still
//! has the data dirty (delalloc, unwritten-with-dirty-pages) it marks the
//! range `writeback_pending`, which allows exactly this answer.
//! Invariant: bytes of a written block past EOF are zero on disk, so growing
//! a file never shows old data; shrinking zeroes the partial tail block.

use std::ops::Range;

use ext4_model::{Errno, FileKind};

use crate::device::{BlockDevice, IoClass, WriteFlags};
use crate::error::Error;
use crate::format::InodeNumber;

use super::node::Node;
use super::{Ctx, Ext4};

pub(crate) use ext4_model::vfs::{block_span, LOFF_MAX};

impl<D: BlockDevice> Ctx<D> {
    /// ENOSPC unless the holes of `range` fit, leaving the metadata reserve.
    pub fn check_room(&self, node: &Node, range: Range<u64>) -> Result<(), Errno> {
        let need: u64 = node.map.holes(range).iter().map(|h| h.end - h.start).sum();
        if need > 0 && need.saturating_add(self.alloc.metadata_reserve()) > self.alloc.totals().free_blocks {
            return Err(Errno::ENOSPC);
        }
        Ok(())
    }

    /// Allocates every hole of `range`, as unwritten or written extents.
    pub fn map_range(&mut self, ino: InodeNumber, node: &mut Node, range: Range<u64>, unwritten: bool) -> Result<(), Errno> {
        self.check_room(node, range.clone())?;
        let holes = node.map.holes(range);
        if holes.is_empty() {
            return Ok(());
        }
        let regular = node.disk.is_reg();
        // All or nothing: blocks held until a commit can leave the count
        // ahead of what the allocator can give; then this call's blocks go back.
        let mut mapped: Vec<(u64, u64)> = Vec::new();
        for hole in holes {
            let mut l = hole.start;
            while l < hole.end {
                let goal = node.map.goal_for(l).unwrap_or_else(|| self.alloc.goal_for_inode(ino, regular));
                let Some((p, got)) = self.alloc.alloc_blocks(&mut self.dev, goal, hole.end - l)? else {
                    for (l, got) in mapped {
                        self.unmap_range(node, l..l + got)?;
                    }
                    return Err(Errno::ENOSPC);
                };
                debug_assert!(got > 0 && got <= hole.end - l);
                self.cache.forget(p, got);
                node.map.insert(l, got, p, unwritten);
                mapped.push((l, got));
                l += got;
            }
        }
        node.map_dirty = true;
        Ok(())
    }

    /// Frees every mapped block of `range`; returns how many.
    pub fn unmap_range(&mut self, node: &mut Node, range: Range<u64>) -> Result<u64, Errno> {
        let freed = node.map.remove(range);
        let mut n = 0;
        for (p, l) in freed {
            self.alloc.free_blocks(&mut self.dev, p, l)?;
            self.cache.forget(p, l);
            n += l;
        }
        if n > 0 {
            node.map_dirty = true;
        }
        Ok(n)
    }

    fn read_blocks(&mut self, physical: u64, buf: &mut [u8]) -> Result<(), Errno> {
        self.dev.read(physical * self.bs(), buf, IoClass::Data).map_err(Error::from)?;
        Ok(())
    }

    fn write_blocks(&mut self, physical: u64, buf: &[u8]) -> Result<(), Errno> {
        self.dev.write(physical * self.bs(), buf, WriteFlags::DATA).map_err(Error::from)?;
        Ok(())
    }

    /// Zeroes bytes `[from, to)` of the file on disk where blocks are written;
    /// holes and unwritten blocks read as zero already.
    /// Growing a file from `old` to `new` bytes: the block holding the old EOF
    /// may carry bytes past it on disk (a crash can keep an extending write's
    /// data and lose its size), and they must read as zeros once inside the
    /// file, as the page cache's zeroing past EOF guarantees in ext4.
    pub fn zero_past_eof(&mut self, node: &Node, old: u64, new: u64) -> Result<(), Errno> {
        let bs = self.bs();
        if new > old && old % bs != 0 {
            self.zero_bytes(node, old, new.min(old.div_ceil(bs) * bs))?;
        }
        Ok(())
    }

    pub fn zero_bytes(&mut self, node: &Node, from: u64, to: u64) -> Result<(), Errno> {
        let bs = self.bs();
        let mut pos = from;
        let mut block = vec![0u8; bs as usize];
        while pos < to {
            let b = pos / bs;
            let within = (pos % bs) as usize;
            let take = (bs - pos % bs).min(to - pos) as usize;
            if let Some(p) = node.map.lookup(b).filter(|p| !p.unwritten) {
                if take as u64 == bs {
                    block.fill(0);
                } else {
                    self.read_blocks(p.physical, &mut block)?;
                    block[within..within + take].fill(0);
                }
                self.write_blocks(p.physical, &block)?;
            }
            pos += take as u64;
        }
        Ok(())
    }
}

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn do_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        self.write_at(ino, offset, data)
    }

    /// write through an O_APPEND descriptor: at EOF, whatever the offset.
    pub(crate) fn do_append(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, true)?;
        let offset = self.node(ino)?.disk.size;
        self.write_at(ino, offset, data)
    }

    fn write_at(&mut self, ino: InodeNumber, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let count = ext4_model::vfs::write_count(offset, data.len(), self.ctx.mount.max_file_size())?;
        if count == 0 {
            return Ok(0);
        }
        let data = &data[..count];
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EINVAL);
        }
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let span = block_span(offset, count as u64, bs);
        let written_before = |node: &Node, b: u64| node.map.lookup(b).is_some_and(|p| !p.unwritten);
        let head_keep = offset % bs != 0 && written_before(node, span.start);
        let end = offset + count as u64;
        let tail_keep = end % bs != 0 && written_before(node, span.end - 1);
        ctx.map_range(ino, node, span.clone(), false)?;
        if node.map.pieces(span.clone()).iter().any(|p| p.unwritten) {
            node.map.set_state(span.clone(), false);
            node.map_dirty = true;
        }
        // Only the span's edge blocks that the data covers partly need a
        // buffer of their own (kept bytes read back where written, zeros past
        // the old EOF, then the data); every other block is the caller's
        // bytes as they stand. The reads are the ones a whole-span buffer
        // would take, in the same order.
        let first = span.start;
        let last = span.end - 1;
        let covered = |b: u64| b * bs >= offset && (b + 1) * bs <= end;
        let mut edges: Vec<(u64, Vec<u8>)> = Vec::with_capacity(2);
        if !covered(first) {
            let mut block = vec![0u8; bs as usize];
            if head_keep || (first == last && tail_keep) {
                let p = node.map.lookup(first).ok_or(Errno::EIO)?;
                ctx.read_blocks(p.physical, &mut block)?;
            }
            edges.push((first, block));
        }
        if last != first && !covered(last) {
            let mut block = vec![0u8; bs as usize];
            if tail_keep {
                let p = node.map.lookup(last).ok_or(Errno::EIO)?;
                ctx.read_blocks(p.physical, &mut block)?;
            }
            edges.push((last, block));
        }
        // Bytes past the old EOF read back from disk may be a lost write's.
        let old_size = node.disk.size;
        for (b, block) in &mut edges {
            let block_start = *b * bs;
            if old_size < block_start + bs {
                block[old_size.saturating_sub(block_start) as usize..].fill(0);
            }
            let lo = block_start.max(offset);
            let hi = (block_start + bs).min(end);
            block[(lo - block_start) as usize..(hi - block_start) as usize].copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
        }
        ctx.zero_past_eof(node, old_size, offset)?;
        // The caller's bytes of fully covered blocks `from..to`.
        let whole = |from: u64, to: u64| if from < to { &data[(from * bs - offset) as usize..(to * bs - offset) as usize] } else { &[][..] };
        for p in node.map.pieces(span.clone()) {
            let piece_end = p.logical + p.len;
            let inside: Vec<&(u64, Vec<u8>)> = edges.iter().filter(|(b, _)| (p.logical..piece_end).contains(b)).collect();
            if inside.is_empty() {
                ctx.write_blocks(p.physical, whole(p.logical, piece_end))?;
                continue;
            }
            // One device write per piece, as ever: stage it whole.
            let mut staged = std::mem::take(&mut ctx.scratch);
            staged.clear();
            let mut at = p.logical;
            for (b, block) in inside {
                staged.extend_from_slice(whole(at, *b));
                staged.extend_from_slice(block);
                at = b + 1;
            }
            staged.extend_from_slice(whole(at, piece_end));
            let written = ctx.write_blocks(p.physical, &staged);
            ctx.scratch = staged;
            written?;
        }
        if end > node.disk.size {
            node.disk.size = end;
        }
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(ino);
        Ok(count as u64)
    }

    pub(crate) fn do_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        let ino = self.open_path(path)?;
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EISDIR);
        }
        if offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let (ctx, node) = self.split(ino)?;
        let size = node.disk.size;
        if offset >= size {
            return Ok(Vec::new());
        }
        let end = size.min(offset.saturating_add(u64::from(len)));
        let bs = ctx.bs();
        let mut out = vec![0u8; (end - offset) as usize];
        for p in node.map.pieces(block_span(offset, end - offset, bs)) {
            if p.unwritten {
                continue;
            }
            let piece_start = p.logical * bs;
            let piece_end = piece_start + p.len * bs;
            let lo = piece_start.max(offset);
            let hi = piece_end.min(end);
            let dst = &mut out[(lo - offset) as usize..(hi - offset) as usize];
            if lo == piece_start && hi == piece_end {
                // The whole piece lands in the answer: read it in place.
                ctx.read_blocks(p.physical, dst)?;
                continue;
            }
            // The device reads the piece whole; stage it and keep the part asked for.
            let mut staged = std::mem::take(&mut ctx.scratch);
            staged.resize((p.len * bs) as usize, 0);
            let read = ctx.read_blocks(p.physical, &mut staged);
            if read.is_ok() {
                dst.copy_from_slice(&staged[(lo - piece_start) as usize..(hi - piece_start) as usize]);
            }
            ctx.scratch = staged;
            read?;
        }
        #[cfg(feature = "test-hooks")]
        self.bug_on_read(offset, size, &mut out);
        Ok(out)
    }

    pub(crate) fn do_truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        if size > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.open_path(path)?;
        if self.kind_of(ino)? == FileKind::Directory {
            return Err(Errno::EISDIR);
        }
        self.ctx.writable()?;
        // vfs_truncate: MAY_WRITE refuses an immutable inode, then IS_APPEND.
        if self.restricted(ino)? {
            return Err(Errno::EPERM);
        }
        if size > self.ctx.mount.max_file_size() {
            return Err(Errno::EFBIG);
        }
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let old = node.disk.size;
        // ext4_truncate runs even when the size stays, dropping preallocation past EOF.
        if size <= old {
            let keep = size.div_ceil(bs);
            let end = node.map.end().max(keep);
            ctx.unmap_range(node, keep..end)?;
            ctx.zero_bytes(node, size, keep * bs)?;
        }
        ctx.zero_past_eof(node, old, size)?;
        node.disk.size = size;
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(ino);
        #[cfg(feature = "test-hooks")]
        self.bug_saw_truncate();
        Ok(())
    }
}
