//! Buffered I/O: file data between an op and the page cache. Reads see the
//! cache first (dirty data is visible before write-back), then the device;
//! writes and zeroing land in folios and are written back later
//! (`writepages`).
//!
//! - **Reads** ask readahead for a window, fill its uncached pages with
//!   new folios (one device command per physically contiguous run of
//!   written blocks across them), fill every stale block of a cached folio
//!   the read reaches (as read_folio does), and copy out. Only clean folios are evicted to make room for
//!   a read; with none left, the read goes around the cache.
//! - **Writes** dirty whole or partial blocks; a partial block that is not
//!   uptodate is read first if its bytes on disk are the file's
//!   (read-modify-write), else zero-filled. Bytes past the old EOF in such
//!   a block are zeroed: a crash may have left a lost write's bytes there.
//! - **Zeroing** (truncate tails, punch and zero-range edges, growth past
//!   an old EOF) goes through the cache too; zeroing a written block on
//!   disk is ordered before the next commit, as ext4's
//!   ext4_block_zero_page_range puts the inode on the transaction's list.
//! - Invariant: cached bytes past EOF are zero.

use std::ops::Range;

use ext4_model::{Errno, InodeJournalMode};

use crate::device::{BlockDevice, IoClass};
use crate::error::Error;
use crate::extent_status::ExtentStatus;
use crate::format::InodeNumber;
use crate::range_set::RangeSet;

use super::node::Node;
use super::Ctx;

/// Most pages one device command carries (a bio's BIO_MAX_VECS).
pub(crate) const MAX_IO_PAGES: u64 = 256;

impl<D: BlockDevice> Ctx<D> {
    /// How `node`'s data is journaled (ext4_inode_journal_mode).
    pub fn data_mode(&self, node: &Node) -> InodeJournalMode {
        self.mount.inode_journal_mode(node.disk.is_reg(), node.disk.has_flag(ext4_model::op::inode_flags::JOURNAL_DATA))
    }

    /// `(min, max)` folio order of `node`'s mapping.
    pub fn folio_orders(&self, node: &Node) -> (u8, u8) {
        self.mount.folio_orders(self.data_mode(node))
    }

    /// Whether buffered writes to `node` reserve space and allocate at
    /// write-back (delalloc; data=journal inodes never do).
    pub fn delays_allocation(&self, node: &Node) -> bool {
        self.mount.delalloc && self.data_mode(node) != InodeJournalMode::Journal
    }

    /// Bytes one device command may carry.
    pub fn max_io_bytes(&self) -> u64 {
        MAX_IO_PAGES * u64::from(self.mount.page_size)
    }

    /// Makes logical blocks `blocks` of cached folios uptodate from what
    /// they hold: written blocks from the device (one command per
    /// physically contiguous stretch), everything else zeros. Then zeroes
    /// what lies past `size`.
    pub(super) fn fill_blocks(&mut self, ino: InodeNumber, node: &Node, blocks: Range<u64>, size: u64) -> Result<(), Errno> {
        let bs = self.bs();
        let mut staged = std::mem::take(&mut self.scratch);
        let filled = self.fill_blocks_with(ino, node, blocks.clone(), &mut staged);
        self.scratch = staged;
        filled?;
        for b in blocks {
            let start = b * bs;
            if start + bs > size {
                let from = size.saturating_sub(start) as usize;
                self.pages.zero_cached(ino, b, from, bs as usize);
            }
        }
        Ok(())
    }

    fn fill_blocks_with(&mut self, ino: InodeNumber, node: &Node, blocks: Range<u64>, staged: &mut Vec<u8>) -> Result<(), Errno> {
        let bs = self.bs();
        let per_io = (self.max_io_bytes() / bs).max(1);
        // Written blocks come from the device; the rest (holes, unwritten
        // extents) are zeroed below, as a folio's bytes are undefined until
        // a block is uptodate.
        let written: Vec<_> = node.map().pieces(blocks.clone()).into_iter().filter(|p| !p.unwritten).collect();
        for p in &written {
            let mut l = p.logical;
            while l < p.logical + p.len {
                let n = per_io.min(p.logical + p.len - l);
                let at = (p.physical + (l - p.logical)) * bs;
                let (index, i) = self.pages.locate(ino, l).ok_or(Errno::EIO)?;
                let Ctx { pages, dev, journal, journaled_data, committing_data, .. } = self;
                let folio = pages.folio_mut(ino, index).ok_or(Errno::EIO)?;
                if u64::from(i) + n <= u64::from(folio.blocks()) {
                    // The stretch lies in one folio: read straight into it.
                    let range = folio.block_range(i).start..folio.block_range(i).start + (n * bs) as usize;
                    if let Err(e) = dev.read(at, &mut folio.bytes_mut()[range.clone()], IoClass::Data) {
                        // A stale block holds zeros, whatever a failed read left.
                        folio.bytes_mut()[range].fill(0);
                        return Err(Error::from(e).into());
                    }
                    super::data_journal::overlay_unhomed(journal.as_ref(), committing_data, journaled_data, bs, at / bs, &mut folio.bytes_mut()[range]);
                } else {
                    staged.resize((n * bs) as usize, 0);
                    dev.read(at, staged, IoClass::Data).map_err(Error::from)?;
                    self.overlay_unhomed_data(at / bs, staged);
                    for k in 0..n {
                        let Some((index, i)) = self.pages.locate(ino, l + k) else { continue };
                        if let Some(f) = self.pages.folio_mut(ino, index) {
                            f.block_mut(i).copy_from_slice(&staged[(k * bs) as usize..((k + 1) * bs) as usize]);
                        }
                    }
                }
                l += n;
            }
        }
        let mut next = written.iter().peekable();
        for b in blocks {
            while next.next_if(|p| p.logical + p.len <= b).is_some() {}
            let read = next.peek().is_some_and(|p| p.logical <= b);
            if let Some((index, i)) = self.pages.locate(ino, b) {
                if let Some(f) = self.pages.folio_mut(ino, index) {
                    let zero = !read && !f.is_uptodate(i);
                    if zero {
                        f.block_mut(i).fill(0);
                    }
                    f.set_uptodate(i);
                    if zero {
                        self.pages.note_zeroed(bs);
                    }
                }
            }
        }
        Ok(())
    }

    /// Blocks of `range` in cached folios that are not uptodate, as runs.
    pub(super) fn stale_runs(&self, ino: InodeNumber, range: Range<u64>) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        for b in range {
            let stale = match self.pages.locate(ino, b) {
                Some((index, i)) => self.pages.folio(ino, index).is_some_and(|f| !f.is_uptodate(i)),
                None => false,
            };
            if stale {
                match out.last_mut() {
                    Some(r) if r.end == b => r.end = b + 1,
                    _ => out.push(b..b + 1),
                }
            }
        }
        out
    }

    /// Reads `out.len()` bytes of `ino` at `offset` (all inside EOF)
    /// through the page cache.
    pub fn cache_read(&mut self, ino: InodeNumber, node: &Node, offset: u64, out: &mut [u8]) -> Result<(), Errno> {
        let geo = self.pages.geometry();
        let size = node.disk.size;
        let end = offset + out.len() as u64;
        let orders = self.folio_orders(node);
        let request = geo.pages_covering(offset..end);
        let eof_page = geo.byte_to_pg_up(size);
        let (mut window, order) = self.pages.readahead_window(ino, orders, request.clone(), eof_page);
        // Reads only evict clean folios; write-back is not theirs to start.
        let spare = Some((ino, window.start.min(request.start)..window.end.max(request.end)));
        if !self.pages.evict_clean(self.pages.uncached_bytes(ino, orders, window.clone()), spare.clone()) {
            window = request.clone();
            self.pages.evict_clean(self.pages.uncached_bytes(ino, orders, window.clone()), spare);
        }
        let (made, _refused) = self.pages.add_folios(ino, orders, window.clone(), order);
        let extra = made.iter().filter(|p| **p >= request.end).count() as u64;
        self.pages.count_readahead(extra);
        // Fill what is not uptodate: the new folios whole, and the folios
        // the request reaches that partial writes left part stale, whole too
        // (read_folio reads every block of a folio not uptodate). Readahead
        // leaves folios already cached alone (page_cache_ra_unbounded skips
        // them): one past the request may be locked by write-back.
        let (from, to) = (request.start, request.end.max(request.start + 1));
        let from = self.pages.folio_span(ino, from).map_or(from, |s| s.start);
        let to = self.pages.folio_span(ino, to - 1).map_or(to, |s| s.end.max(to));
        // Touching spans as one, so a window reads in as few commands as before.
        let mut spans = RangeSet::new();
        spans.add(from..to);
        for span in made.iter().filter_map(|&p| self.pages.folio_span(ino, p)) {
            spans.add(span);
        }
        for span in spans.iter_in(0..u64::MAX) {
            let first = self.pages.block_of_page(span.start);
            let last = self.pages.block_of_page(span.end).max(first + 1);
            for run in self.stale_runs(ino, first..last) {
                self.fill_blocks(ino, node, run, size)?;
            }
        }
        let missing = self.pages.read_bytes(ino, offset, out);
        self.read_around(node, offset, out, &missing)
    }

    /// Reads blocks `missing` (no folio could be had for them) straight
    /// from the device into `out`, which holds bytes from `offset`: one
    /// command per physically contiguous stretch, as a direct read would.
    fn read_around(&mut self, node: &Node, offset: u64, out: &mut [u8], missing: &[u64]) -> Result<(), Errno> {
        if missing.is_empty() {
            return Ok(());
        }
        self.pages.count_read_around(missing.len() as u64);
        let mut runs: Vec<Range<u64>> = Vec::new();
        for &b in missing {
            match runs.last_mut() {
                Some(r) if r.end == b => r.end = b + 1,
                _ => runs.push(b..b + 1),
            }
        }
        self.read_from_device(node, offset, out, &runs, &mut 0)
    }

    /// Blocks `runs` of `node` from the device into `out` (bytes from
    /// `offset`): written pieces one command per physically contiguous
    /// stretch, with the journal's newer copies laid over, the rest zeros.
    /// `commands` counts the reads issued.
    pub(super) fn read_from_device(&mut self, node: &Node, offset: u64, out: &mut [u8], runs: &[Range<u64>], commands: &mut u64) -> Result<(), Errno> {
        let bs = self.bs();
        let end = offset + out.len() as u64;
        let per_io = (self.max_io_bytes() / bs).max(1);
        let mut staged = std::mem::take(&mut self.scratch);
        let mut result = Ok(());
        'runs: for run in runs.iter().cloned() {
            // What is not read below is a hole or unwritten: zeros.
            let (lo, hi) = ((run.start * bs).max(offset), (run.end * bs).min(end));
            out[(lo - offset) as usize..(hi - offset) as usize].fill(0);
            for p in node.map().pieces(run).into_iter().filter(|p| !p.unwritten) {
                let mut l = p.logical;
                while l < p.logical + p.len {
                    let n = per_io.min(p.logical + p.len - l);
                    let at = (p.physical + (l - p.logical)) * bs;
                    let (lo, hi) = ((l * bs).max(offset), ((l + n) * bs).min(end));
                    let dst = &mut out[(lo - offset) as usize..(hi - offset) as usize];
                    let read = if lo == l * bs && hi == (l + n) * bs {
                        let read = self.dev.read(at, dst, IoClass::Data);
                        self.overlay_unhomed_data(at / bs, dst);
                        read
                    } else {
                        staged.resize((n * bs) as usize, 0);
                        let read = self.dev.read(at, &mut staged, IoClass::Data);
                        self.overlay_unhomed_data(at / bs, &mut staged);
                        dst.copy_from_slice(&staged[(lo - l * bs) as usize..(hi - l * bs) as usize]);
                        read
                    };
                    if let Err(e) = read {
                        result = Err(Error::from(e).into());
                        break 'runs;
                    }
                    *commands += 1;
                    l += n;
                }
            }
        }
        self.scratch = staged;
        result
    }

    /// Copies `data` (bytes `offset..` of the file, inside one write) into
    /// the page cache, dirtying the blocks. `fresh` lists blocks the write
    /// allocated (their bytes on disk are not the file's); `old_size` is the
    /// size before the write. Whether an edge block's bytes on disk are kept
    /// is decided here, not when the write began: making room may have
    /// written a delayed edge back and evicted it since.
    pub fn cache_write(&mut self, ino: InodeNumber, node: &Node, offset: u64, data: &[u8], fresh: &[Range<u64>], old_size: u64) -> Result<(), Errno> {
        let bs = self.bs();
        let end = offset + data.len() as u64;
        let orders = self.folio_orders(node);
        let pages = self.pages.geometry().pages_covering(offset..end);
        let (_, refused) = self.pages.add_folios(ino, orders, pages, orders.1);
        if let Some(r) = refused {
            return Err(self.folio_refused(r.to_string()));
        }
        // Read-modify-write of the partial edge blocks.
        let first = offset / bs;
        let last = (end - 1) / bs;
        for b in [first, last] {
            let partial = b * bs < offset || (b + 1) * bs > end;
            if !partial || self.stale_runs(ino, b..b + 1).is_empty() {
                continue;
            }
            let on_disk = node.es.status(node.map(), b) == ExtentStatus::Written && !fresh.iter().any(|r| r.contains(&b));
            if on_disk {
                self.fill_blocks(ino, node, b..b + 1, old_size)?;
            } else {
                // Nothing of the file's is on disk there: zeros.
                self.pages.zero_block(ino, b);
            }
        }
        if !self.pages.write_bytes(ino, offset, data) {
            return Err(self.folio_refused(format!("no folio for bytes {offset}..{end} of inode {ino}")));
        }
        Ok(())
    }

    /// Zeroes bytes `from..to` of the file as the page cache sees them.
    /// Blocks written on disk are read in (when partly zeroed), zeroed and
    /// dirtied, and their inode is ordered before the next commit; cached
    /// blocks of any other state are zeroed where they are; the rest reads
    /// as zeros already.
    pub fn cache_zero(&mut self, ino: InodeNumber, node: &Node, from: u64, to: u64) -> Result<(), Errno> {
        self.cache_zero_ranges(ino, node, std::slice::from_ref(&(from..to)))
    }

    /// [`Ctx::cache_zero`] of several byte ranges, all or nothing: every
    /// folio the zeroing needs is had before any byte is zeroed, so ENOMEM
    /// leaves the file as it was.
    pub fn cache_zero_ranges(&mut self, ino: InodeNumber, node: &Node, ranges: &[Range<u64>]) -> Result<(), Errno> {
        let bs = self.bs();
        let orders = self.folio_orders(node);
        let written = |r: &Range<u64>| (r.start / bs..r.end.div_ceil(bs)).filter(|&b| node.es.status(node.map(), b) == ExtentStatus::Written);
        let needed: Vec<u64> = ranges.iter().filter(|r| r.start < r.end).flat_map(written).collect();
        for &b in &needed {
            let page = self.pages.page_of_block(b);
            let (_, refused) = self.pages.add_folios(ino, orders, page..page + 1, orders.0);
            if let Some(r) = refused {
                return Err(self.folio_refused(r.to_string()));
            }
        }
        // Direct reclaim for a later edge may have taken an earlier one's.
        if let Some(b) = needed.iter().find(|&&b| self.pages.locate(ino, b).is_none()) {
            return Err(self.folio_refused(format!("the folio of block {b} of inode {ino} went to reclaim before its zeroing")));
        }
        for r in ranges {
            self.zero_cached_range(ino, node, r.start, r.end)?;
        }
        Ok(())
    }

    /// The zeroing itself, once the folios are had.
    fn zero_cached_range(&mut self, ino: InodeNumber, node: &Node, from: u64, to: u64) -> Result<(), Errno> {
        let bs = self.bs();
        let orders = self.folio_orders(node);
        let mut pos = from;
        while pos < to {
            let b = pos / bs;
            let within = (pos % bs) as usize;
            let take = (bs - pos % bs).min(to - pos) as usize;
            pos += take as u64;
            if node.es.status(node.map(), b) != ExtentStatus::Written {
                self.pages.zero_cached(ino, b, within, within + take);
                continue;
            }
            let page = self.pages.page_of_block(b);
            let (_, refused) = self.pages.add_folios(ino, orders, page..page + 1, orders.0);
            if let Some(r) = refused {
                return Err(self.folio_refused(r.to_string()));
            }
            let stale = self.stale_runs(ino, b..b + 1);
            if !stale.is_empty() {
                if take as u64 == bs {
                    self.pages.zero_block(ino, b);
                } else {
                    self.fill_blocks(ino, node, b..b + 1, node.disk.size)?;
                }
            }
            let Some((index, i)) = self.pages.locate(ino, b) else { return Err(Errno::EIO) };
            self.pages.zero_cached(ino, b, within, within + take);
            self.pages.mark_dirty(ino, index, i);
            if self.orders_data(node) {
                self.pages.order_data(ino);
            }
        }
        Ok(())
    }

    /// Growing a file from `old` to `new` bytes: the block holding the old
    /// EOF may carry bytes past it on disk (a crash can keep an extending
    /// write's data and lose its size), and they must read as zeros once
    /// inside the file, as the page cache's zeroing past EOF guarantees in ext4.
    pub fn zero_past_eof(&mut self, ino: InodeNumber, node: &Node, old: u64, new: u64) -> Result<(), Errno> {
        self.cache_zero_ranges(ino, node, &[self.past_eof(old, new)])
    }

    /// The bytes [`Ctx::zero_past_eof`] zeroes (empty when none).
    pub fn past_eof(&self, old: u64, new: u64) -> Range<u64> {
        let bs = self.bs();
        if new > old && old % bs != 0 {
            old..new.min(old.div_ceil(bs) * bs)
        } else {
            old..old
        }
    }
}
