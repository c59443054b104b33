//! File data: reserving, mapping and unmapping block ranges, write, read
//! and truncate, following the model's file_ops.rs. The bytes go through
//! the page cache (`buffered`); this file decides what backs each block.
//!
//! - **Delayed allocation** (delalloc, not data=journal): a write reserves
//!   its holes as delayed extents and maps nothing; ENOSPC comes here, at
//!   write time, when the reservation does not fit. Write-back allocates.
//! - **nodelalloc**: a write allocates its holes at once, unwritten under
//!   dioread_nolock (converted at write-back), else written (ordered before
//!   the next commit); the data is still written back later.
//! - Writes into unwritten extents leave them unwritten with dirty pages;
//!   write-back converts them once the data is written.
//! - Large writes go into the cache in chunks of at most a quarter of its
//!   bound, making room before each, so no write needs more memory than
//!   the bound; the size grows chunk by chunk, so a commit in between never
//!   sees written blocks past EOF.

use std::ops::Range;

use ext4_model::{Errno, FileKind, InodeJournalMode};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::locks::Lock;
use super::node::Node;
use super::{Ctx, Ext4};

pub(crate) use ext4_model::vfs::{block_span, LOFF_MAX};

impl<D: BlockDevice> Ctx<D> {
    /// ENOSPC unless `need` more blocks fit beside what delayed allocation
    /// has reserved, leaving the metadata reserve.
    pub fn check_room_blocks(&self, need: u64) -> Result<(), Errno> {
        let promised = need.saturating_add(self.alloc.metadata_reserve()).saturating_add(self.reserved_blocks);
        if need > 0 && promised > self.alloc.totals().free_blocks {
            return Err(Errno::ENOSPC);
        }
        Ok(())
    }

    /// ENOSPC unless the holes of `range` (blocks neither mapped nor
    /// delayed, in clusters nothing holds yet) fit.
    pub fn check_room(&self, node: &Node, range: Range<u64>) -> Result<(), Errno> {
        self.check_room_blocks(self.room_needed(node, range))
    }

    /// Reserves the holes of `range` as delayed extents (a delalloc write).
    pub fn reserve_delayed(&mut self, node: &mut Node, range: Range<u64>) -> Result<(), Errno> {
        self.check_room(node, range.clone())?;
        let before = self.reserved_in(node, range.clone());
        for hole in node.map().holes(range.clone()) {
            node.es.insert_delayed(hole);
        }
        self.settle_reservation(node, range, before);
        Ok(())
    }

    /// Allocates every unmapped block of `range`, as unwritten or written
    /// extents. Delayed blocks among them get their blocks now (their
    /// reservation becomes the allocation; their pages stay dirty).
    pub fn map_range(&mut self, ino: InodeNumber, node: &mut Node, range: Range<u64>, unwritten: bool) -> Result<(), Errno> {
        self.check_room(node, range.clone())?;
        let holes = node.map().holes(range.clone());
        if holes.is_empty() {
            return Ok(());
        }
        let regular = node.disk.is_reg();
        let reserved_before = self.reserved_in(node, range.clone());
        // All or nothing: blocks held until a commit can leave the count
        // ahead of what the allocator can give; then this call's blocks go back.
        let mut mapped: Vec<(u64, u64)> = Vec::new();
        for hole in &holes {
            let mut l = hole.start;
            while l < hole.end {
                let Some((p, got)) = self.place_blocks(ino, node, l, hole.end, regular)? else {
                    for (l, got) in mapped {
                        self.unmap_range(node, l..l + got)?;
                    }
                    return Err(Errno::ENOSPC);
                };
                debug_assert!(got > 0 && got <= hole.end - l);
                self.cache.forget(p, got);
                node.map_insert(l, got, p, unwritten);
                mapped.push((l, got));
                l += got;
            }
        }
        for hole in holes {
            node.es.remove_delayed(hole);
        }
        self.settle_reservation(node, range, reserved_before);
        node.map_dirty = true;
        Ok(())
    }

    /// Unmaps every mapped block of `range`, freeing what no longer holds
    /// any (whole clusters under bigalloc); returns how many were unmapped.
    pub fn unmap_range(&mut self, node: &mut Node, range: Range<u64>) -> Result<u64, Errno> {
        let n = self.unmap_and_free(node, range)?;
        if n > 0 {
            node.map_dirty = true;
        }
        Ok(n)
    }

    /// Blocks `range` leave the file: cached data dropped (dirty or not),
    /// delayed extents and their reservation released, mapped blocks freed.
    pub fn discard_blocks(&mut self, ino: InodeNumber, node: &mut Node, range: Range<u64>) -> Result<(), Errno> {
        self.drop_unmapped(ino, node, range.clone());
        let end = range.end.min(node.map().end().max(range.start));
        self.free_mapped(node, range.start..end, range)
    }

    /// What leaves `range` before any mapped block does (truncate_pagecache,
    /// then ext4_truncate's extent status removal): cached data, delayed
    /// extents and their reservation.
    pub fn drop_unmapped(&mut self, ino: InodeNumber, node: &mut Node, range: Range<u64>) {
        self.alloc.discard_inode_preallocations(ino);
        self.pages.invalidate(ino, range.clone());
        let reserved_before = self.reserved_in(node, range.clone());
        node.es.remove_delayed(range.clone());
        node.quietly_written.remove(range.clone());
        self.settle_reservation(node, range, reserved_before);
    }

    /// Mapped blocks `range` freed, the reservation of `settle` (which
    /// holds it) moved to what is left: under bigalloc a cluster that loses
    /// its last mapped block needs one again for its delayed blocks.
    pub fn free_mapped(&mut self, node: &mut Node, range: Range<u64>, settle: Range<u64>) -> Result<(), Errno> {
        let reserved_before = self.reserved_in(node, settle.clone());
        self.unmap_range(node, range)?;
        self.settle_reservation(node, settle, reserved_before);
        Ok(())
    }

    /// Where a write's blocks come from: reserved (delalloc) or allocated
    /// now, unwritten or written (nodelalloc). Written allocations are
    /// ordered before the next commit once their data is in the cache.
    /// Returns the blocks allocated now: their bytes on disk are not the file's.
    pub(super) fn back_write(&mut self, ino: InodeNumber, node: &mut Node, span: Range<u64>) -> Result<Vec<Range<u64>>, Errno> {
        if self.delays_allocation(node) {
            self.reserve_delayed(node, span)?;
            return Ok(Vec::new());
        }
        let journaled = self.data_mode(node) == InodeJournalMode::Journal;
        let unwritten = self.mount.dioread_nolock && !journaled;
        let fresh = node.map().holes(span.clone());
        self.map_range(ino, node, span, unwritten)?;
        if !fresh.is_empty() && !unwritten && self.orders_data(node) {
            self.pages.order_data(ino);
        }
        Ok(fresh)
    }
}

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn do_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        let written = self.under_inode_lock(ino, Lock::InodeRwsem, false, "ext4_buffered_write_iter", |fs| fs.write_at(ino, offset, data));
        self.closing(ino, written)
    }

    /// write through an O_APPEND descriptor: at EOF, whatever the offset.
    pub(crate) fn do_append(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, true)?;
        let written = self.under_inode_lock(ino, Lock::InodeRwsem, false, "ext4_buffered_write_iter", |fs| {
            let offset = fs.node(ino)?.disk.size;
            fs.write_at(ino, offset, data)
        });
        self.closing(ino, written)
    }

    pub(crate) fn write_at(&mut self, ino: InodeNumber, offset: u64, data: &[u8]) -> Result<u64, Errno> {
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
        let end = offset + count as u64;
        let span = block_span(offset, count as u64, bs);
        // Room for the whole write first, so ENOSPC leaves the file as it was.
        ctx.check_room(node, span.clone())?;
        let old_size = node.disk.size;
        // Before anything is reserved: a folio it cannot have is ENOMEM
        // with the file as it was.
        if offset > old_size {
            ctx.zero_past_eof(ino, node, old_size, offset)?;
        }
        if ctx.delays_allocation(node) {
            ctx.reserve_delayed(node, span.clone())?;
        }
        let (delays, lag_before) = (ctx.delays_allocation(node), node.disksize);
        // ext4_da_should_update_i_disksize: only a delayed write whose last
        // byte lands in a written block moves i_disksize at once. Asked of
        // the map as the write found it, at each place the write may stop.
        let chunks: Vec<(Range<u64>, bool)> = write_chunks(offset, end, ctx.write_chunk_bytes(), bs).map(|c| (c.clone(), node.map().lookup((c.end - 1) / bs).is_some_and(|p| !p.unwritten))).collect();
        let disksize_after = |last_written: bool, lag: Option<u64>| if delays && !last_written { Some(lag.unwrap_or(old_size)) } else { None };
        if end > old_size {
            node.disksize = disksize_after(chunks.last().is_some_and(|c| c.1), node.disksize);
            if node.disksize.is_some() {
                ctx.write_back_lag.insert(ino);
            }
        }
        let mut at = offset;
        for (i, (c, _)) in chunks.iter().enumerate() {
            let (lo, hi) = (c.start, c.end);
            let (need, pages) = {
                let (ctx, node) = self.split(ino)?;
                let pages = ctx.pages.geometry().pages_covering(lo..hi);
                (ctx.pages.uncached_bytes(ino, ctx.folio_orders(node), pages.clone()), pages)
            };
            let room = self.make_room(need, Some((ino, pages))).map_err(Errno::from);
            let (ctx, node) = self.split(ino)?;
            let copied = room.and_then(|()| ctx.back_write(ino, node, block_span(lo, hi - lo, bs))).and_then(|fresh| {
                let copied = ctx.cache_write(ino, node, lo, &data[(lo - offset) as usize..(hi - offset) as usize], &fresh, old_size);
                if copied == Err(Errno::ENOMEM) {
                    // ext4 takes the folio before get_block: blocks this
                    // chunk allocated hold none of the file's bytes.
                    for r in fresh {
                        ctx.discard_blocks(ino, node, r)?;
                    }
                }
                copied
            });
            if let Err(e) = copied {
                ctx.release_unfilled(ino, node, span);
                // generic_perform_write: the bytes copied before a folio
                // could not be had are the answer; none copied, the error.
                let cut = e == Errno::ENOMEM && i > 0;
                if cut {
                    ctx.note_memory_progress(at - offset);
                    if at > old_size {
                        node.disksize = disksize_after(chunks[i - 1].1, node.disksize.or(lag_before));
                    }
                } else if e == Errno::ENOMEM {
                    node.disksize = lag_before;
                }
                self.mark_dirty(ino);
                #[cfg(feature = "test-hooks")]
                if cut && self.bug_cut_write_answers_enomem() {
                    return Err(e);
                }
                if cut {
                    break;
                }
                return Err(e);
            }
            node.disk.size = node.disk.size.max(hi);
            at = hi;
        }
        let (ctx, node) = self.split(ino)?;
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(ino);
        Ok(at - offset)
    }

    pub(crate) fn do_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        let ino = self.open_path(path)?;
        let read = self.read_open(ino, offset, len);
        self.closing(ino, read)
    }

    pub(crate) fn read_open(&mut self, ino: InodeNumber, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.read_checks(ino, offset)?;
        // The whole tree, read now: a damaged one is EIO, never a short read.
        let size = self.node(ino)?.disk.size;
        if !self.read_takes_invalidate_lock(ino, offset, len) {
            return Ok(Vec::new());
        }
        let end = size.min(offset.saturating_add(u64::from(len)));
        let mut out = vec![0u8; (end - offset) as usize];
        // ext4 takes it shared where a read misses the cache (readahead,
        // filemap_create_folio). Between ops only a split -j holds it
        // exclusive, and that has dropped this inode's cache: any read
        // inside EOF would miss then, so every one takes it.
        self.under_inode_lock(ino, Lock::InvalidateLock, true, "page_cache_ra_unbounded", |fs| {
            let (ctx, node) = fs.split(ino)?;
            ctx.cache_read(ino, node, offset, &mut out)
        })?;
        #[cfg(feature = "test-hooks")]
        self.bug_on_read(offset, size, &mut out);
        Ok(out)
    }

    /// read(2)'s refusals once the file is open: a directory, an offset
    /// past any loff_t.
    pub(super) fn read_checks(&mut self, ino: InodeNumber, offset: u64) -> Result<(), Errno> {
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EISDIR);
        }
        if offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        Ok(())
    }

    /// Whether a buffered read of `len` bytes at `offset` reaches the page
    /// cache (inside EOF, not empty; filemap_read returns before that
    /// otherwise), where it may take invalidate_lock. `ino` is a regular
    /// file and `offset` a valid loff_t, or the read fails first.
    pub(crate) fn read_takes_invalidate_lock(&mut self, ino: InodeNumber, offset: u64, len: u32) -> bool {
        let regular = self.kind_of(ino).is_ok_and(|k| k == FileKind::Regular);
        regular && offset <= LOFF_MAX && len > 0 && self.node(ino).is_ok_and(|n| offset < n.disk.size)
    }

    pub(crate) fn do_truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        let ino = self.truncate_path_checks(path, size)?;
        self.truncate_checked(ino, size)
    }

    /// truncate(2)'s checks up to the inode: the size, the path, a
    /// directory, a read-only mount.
    pub(crate) fn truncate_path_checks(&mut self, path: &str, size: u64) -> Result<InodeNumber, Errno> {
        if size > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.open_path(path)?;
        if self.kind_of(ino)? == FileKind::Directory {
            return Err(Errno::EISDIR);
        }
        self.ctx.writable()?;
        Ok(ino)
    }

    /// The checks truncate and ftruncate share, once the inode is known:
    /// immutable or append-only is EPERM, past the largest file EFBIG.
    pub(crate) fn truncate_checked(&mut self, ino: InodeNumber, size: u64) -> Result<(), Errno> {
        self.truncate_inode_checks(ino, size)?;
        self.under_setattr_locks(ino, |fs| fs.truncate_inode(ino, size))
    }

    /// vfs_truncate's MAY_WRITE (an immutable inode), then IS_APPEND; then
    /// the largest file.
    pub(crate) fn truncate_inode_checks(&mut self, ino: InodeNumber, size: u64) -> Result<(), Errno> {
        if self.restricted(ino)? {
            return Err(Errno::EPERM);
        }
        if size > self.ctx.mount.max_file_size() {
            return Err(Errno::EFBIG);
        }
        Ok(())
    }

    /// `f` as ext4_setattr runs a size change: under the inode lock, after
    /// inode_dio_wait, under invalidate_lock.
    pub(crate) fn under_setattr_locks<T>(&mut self, ino: InodeNumber, f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        self.under_inode_lock(ino, Lock::InodeRwsem, false, "ext4_setattr", |fs| {
            fs.dio_wait(ino)?;
            fs.under_inode_lock(ino, Lock::InvalidateLock, false, "ext4_setattr", f)
        })
    }

    /// ext4_setattr's size change, once the caller's checks passed.
    pub(crate) fn truncate_inode(&mut self, ino: InodeNumber, size: u64) -> Result<(), Errno> {
        let Some(keep) = self.truncate_size(ino, size)? else { return Ok(()) };
        let (ctx, node) = self.split(ino)?;
        let end = node.map().end().max(keep);
        ctx.free_mapped(node, keep..end, keep..u64::MAX)
    }

    /// A size change up to the mapped blocks it frees: the tail of the
    /// last block zeroed, cached data and delayed blocks past it dropped,
    /// the size and times set. Returns the first block past the new size
    /// when the size did not grow (ext4_truncate runs even when it stays,
    /// dropping preallocation past EOF): ext4_truncate frees its mapped
    /// blocks from there on.
    pub(crate) fn truncate_size(&mut self, ino: InodeNumber, size: u64) -> Result<Option<u64>, Errno> {
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let old = node.disk.size;
        let keep = (size <= old).then(|| size.div_ceil(bs));
        if let Some(keep) = keep {
            // ext4_block_truncate_page before anything goes: a folio it
            // cannot have leaves the file as it was.
            ctx.cache_zero(ino, node, size, keep * bs)?;
            ctx.drop_unmapped(ino, node, keep..u64::MAX);
            node.da_alloc_close |= size == 0 && ctx.mount.auto_da_alloc;
        }
        ctx.zero_past_eof(ino, node, old, size)?;
        node.disk.size = size;
        node.disksize = None;
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(ino);
        #[cfg(feature = "test-hooks")]
        self.bug_saw_truncate();
        Ok(keep)
    }
}

impl<D: BlockDevice> Ctx<D> {
    /// Bytes a write puts into the cache between two chances to make room:
    /// a quarter of the bound, whole blocks, at least one.
    pub(super) fn write_chunk_bytes(&self) -> u64 {
        let bs = self.bs();
        (self.pages.bound_bytes() / 4 / bs * bs).max(bs)
    }

    /// After a write failed part way: delayed blocks of `span` no data
    /// reached are no longer promised (nothing would ever write them back).
    fn release_unfilled(&mut self, ino: InodeNumber, node: &mut Node, span: Range<u64>) {
        let delayed: Vec<Range<u64>> = node.es.delayed_in(span).collect();
        for r in delayed {
            for b in r {
                let dirty = self.pages.locate(ino, b).and_then(|(index, i)| self.pages.folio(ino, index).map(|f| f.is_dirty(i))).unwrap_or(false);
                if !dirty {
                    self.reserved_blocks = self.reserved_blocks.saturating_sub(node.es.remove_delayed(b..b + 1));
                }
            }
        }
    }
}

/// The pieces a buffered write of `offset..end` copies between chances to
/// make room: `chunk` bytes, ending on block boundaries but for the last.
fn write_chunks(offset: u64, end: u64, chunk: u64, bs: u64) -> impl Iterator<Item = Range<u64>> {
    let mut at = offset;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let to = if end - at <= chunk { end } else { ((at + chunk) / bs * bs).max(at.div_ceil(bs) * bs).min(end) };
        let piece = at..to;
        at = to;
        Some(piece)
    })
}
