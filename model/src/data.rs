//! A regular file's contents and block allocation, in logical blocks.
//!
//! Contents and allocation are kept apart: `blocks` says what each logical
//! block is (written, unwritten, delayed), `content` holds the bytes that
//! were ever written ([`Content`]); everything else reads as zeros. No
//! content lies past `size`, so growing a file never exposes old data.

use std::ops::Range;

use crate::content::{Content, Source};
use crate::op::{fiemap_flags, FiemapExtent};
use crate::range_map::RangeMap;

/// What a logical block is backed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Alloc {
    /// Allocated and initialised on disk.
    Written,
    /// Allocated, reads as zeros (fallocate, dioread_nolock before writeback).
    Unwritten,
    /// Unwritten on disk with dirty data in the page cache: writeback converts it.
    UnwrittenDirty,
    /// Reserved by delayed allocation: dirty data, no block yet.
    Delayed,
    /// Unwritten, next to a part of its extent that writeback converts: ext4
    /// may write zeros over it instead of splitting the extent
    /// (s_extent_max_zeroout_kb), so FIEMAP may show it written. Reads as
    /// zeros either way; the Linux oracle sees both. Also a hole a page
    /// fault may have backed (`maybe_allocated`) that fallocate allocated:
    /// written zeros if the fault's folio reached it, else unwritten.
    Zeroed,
}

impl Alloc {
    /// After writeback every dirty block is written.
    pub fn settled(self) -> Alloc {
        match self {
            Alloc::UnwrittenDirty | Alloc::Delayed => Alloc::Written,
            other => other,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FileData {
    pub size: u64,
    pub blocks: RangeMap<Alloc>,
    pub content: Content,
    /// Holes ext4 may have allocated, where how many it allocated is not
    /// the filesystem's promise: the rest of a page fault's folio
    /// (block_page_mkwrite backs every block of the folio inside EOF, and
    /// the folio's size is the page cache's choice), and the rest of the
    /// one extent a misaligned direct write maps (mballoc may give fewer
    /// blocks than asked). Each reads as zeros and is a hole or allocated
    /// (delayed, unwritten, or written as zeros). Only where `blocks` has
    /// no entry; kept out of `used_blocks`.
    pub maybe_allocated: RangeMap<()>,
    /// ext4's i_disksize where it lags the size: a delayed-allocation
    /// write grew the file and write-back has not reached its end yet.
    /// None where it is the size. Direct I/O asks it (ext4_extending_io).
    pub disksize: Option<u64>,
    /// Some block may await write-back (delayed, or unwritten under dirty
    /// pages): set whenever blocks get dirty data, cleared by write-back of
    /// the whole file. Spares a sync the scan of files with nothing dirty.
    pub writeback_pending: bool,
    /// Truncated to 0 since its last close: the next close starts write-back
    /// of its delayed blocks (auto_da_alloc). In memory only.
    pub da_alloc_close: bool,
    /// Dirty blocks whose write-back was submitted (filemap_flush) while
    /// their extent stays unwritten until the I/O ends: their buffer heads
    /// are mapped and no longer unwritten (mpage_process_page), so a write
    /// ending in one moves i_disksize at once, as into a written block. A
    /// write into an unwritten block (fallocated) has an unwritten buffer
    /// head and does not. Only read with the block's state.
    pub submitted: RangeMap<()>,
    /// A truncate in flight set the size and has not freed every block past
    /// it yet: written blocks may lie past EOF until it returns. In memory
    /// only.
    pub truncating: bool,
}

pub use crate::vfs::block_span;

/// Byte range of a block range (saturating: spans may run to `u64::MAX`).
fn byte_span(span: &Range<u64>, bs: u64) -> Range<u64> {
    span.start.saturating_mul(bs)..span.end.saturating_mul(bs)
}

/// Clusters of `ratio` blocks that sorted, disjoint block `ranges` meet,
/// each counted once.
fn count_clusters(ranges: impl Iterator<Item = Range<u64>>, ratio: u64) -> u64 {
    let (mut count, mut next) = (0, 0);
    for r in ranges {
        let (first, end) = ((r.start / ratio).max(next), r.end.div_ceil(ratio));
        if first < end {
            count += end - first;
            next = end;
        }
    }
    count
}

impl FileData {
    /// Up to `len` bytes at `offset`, as read returns them (none past size).
    pub fn read(&self, offset: u64, len: u64) -> Vec<u8> {
        if offset >= self.size {
            return Vec::new();
        }
        let end = self.size.min(offset.saturating_add(len));
        let mut out = vec![0; (end - offset) as usize];
        self.content.read_into(offset, &mut out);
        out
    }

    /// Blocks a write would newly allocate (holes in its span).
    pub fn holes_in(&self, span: Range<u64>) -> u64 {
        let covered: u64 = self.blocks.overlapping(span.clone()).iter().map(|(r, _)| r.end - r.start).sum();
        (span.end - span.start) - covered
    }

    /// Clusters of `ratio` blocks that meet `span` (whole clusters, where
    /// `span` starts or ends inside one too) and hold an allocated block,
    /// inside `span` or not. With `ratio` 1, the blocks of `span` allocated.
    pub fn allocated_clusters_in(&self, span: Range<u64>, ratio: u64) -> u64 {
        if span.is_empty() {
            return 0;
        }
        let whole = span.start / ratio * ratio..span.end.div_ceil(ratio).saturating_mul(ratio);
        count_clusters(self.blocks.overlapping(whole).into_iter().map(|(r, _)| r), ratio)
    }

    /// Clusters of `ratio` blocks that meet `span` and hold no allocated
    /// block: what backing all of `span` newly allocates. With `ratio` 1,
    /// [`FileData::holes_in`].
    pub fn new_clusters_in(&self, span: Range<u64>, ratio: u64) -> u64 {
        if span.is_empty() {
            return 0;
        }
        (span.end.div_ceil(ratio) - span.start / ratio) - self.allocated_clusters_in(span, ratio)
    }

    /// Clusters of `ratio` blocks holding an allocated block: the file's
    /// space, in clusters, as i_blocks counts it under bigalloc.
    pub fn allocated_clusters(&self, ratio: u64) -> u64 {
        if ratio == 1 {
            return self.allocated_blocks();
        }
        count_clusters(self.blocks.iter().map(|(r, _)| r), ratio)
    }

    /// Clusters of `ratio` blocks with no allocated block where a
    /// `maybe_allocated` hole lies: what those holes may add to the space.
    pub fn maybe_allocated_clusters(&self, ratio: u64) -> u64 {
        let (mut count, mut next) = (0, 0);
        for r in self.maybe_allocated_in(0..u64::MAX) {
            let (first, end) = ((r.start / ratio).max(next), r.end.div_ceil(ratio));
            if first < end {
                let whole = first * ratio..end.saturating_mul(ratio);
                count += (end - first) - self.allocated_clusters_in(whole, ratio);
                next = end;
            }
        }
        count
    }

    /// Puts `len` bytes of `source` at `offset`; holes become `fill`
    /// (delayed, unwritten or written, as the inode's mode says). Returns
    /// blocks newly allocated.
    pub fn write(&mut self, offset: u64, len: u64, source: Source, bs: u64, fill: Alloc) -> u64 {
        let span = block_span(offset, len, bs);
        if offset + len > self.size {
            // ext4_da_should_update_i_disksize: only a delayed write whose
            // last byte lands in a written block moves i_disksize at once.
            let last = (offset + len - 1) / bs;
            let last_written = match self.blocks.get(last) {
                Some(Alloc::Written) => true,
                Some(Alloc::UnwrittenDirty) => self.submitted.get(last).is_some(),
                _ => false,
            };
            self.disksize = if fill == Alloc::Delayed && !last_written { Some(self.disksize.unwrap_or(self.size)) } else { None };
        }
        self.content.put(offset, len, source);
        self.size = self.size.max(offset + len);
        self.fault_in(span, bs, fill)
    }

    /// Converting part of an unwritten extent, ext4 writes zeros over short
    /// unwritten neighbours instead of splitting them off (up to
    /// s_extent_max_zeroout_kb, 32 KiB, of an extent within EOF), so those may
    /// turn up written. Which ones is layout; they become [`Alloc::Zeroed`].
    pub(crate) fn zeroout_around(&mut self, converted: Range<u64>, bs: u64) {
        const MAX_ZEROOUT_BYTES: u64 = 32 << 10;
        let reach = MAX_ZEROOUT_BYTES / bs;
        let eof_block = self.size.div_ceil(bs);
        if reach == 0 {
            return;
        }
        let before = converted.start.saturating_sub(reach)..converted.start;
        let after = converted.end..converted.end.saturating_add(reach).min(eof_block);
        for side in [before, after] {
            for (r, a) in self.blocks.overlapping(side) {
                if a == Alloc::Unwritten && r.end <= eof_block {
                    self.blocks.insert(r, Alloc::Zeroed);
                }
            }
        }
    }

    /// Zeroes bytes `[from, to)` of content, keeping allocation as it is.
    pub fn zero_bytes(&mut self, from: u64, to: u64) {
        self.content.clear(from..to);
    }

    /// i_disksize: what ext4_extending_io holds a direct write's end to.
    pub fn disk_size(&self) -> u64 {
        self.disksize.unwrap_or(self.size)
    }

    /// i_disksize moves up to `to` where it lags (never down, never past
    /// the size).
    pub fn move_disksize(&mut self, to: u64) {
        if let Some(d) = self.disksize {
            let d = d.max(to);
            self.disksize = (d < self.size).then_some(d);
        }
    }

    /// ext4_update_disksize_before_punch: a punch or zero range from
    /// inside the file through its end first makes i_disksize the size.
    pub fn disksize_before_punch(&mut self, offset: u64, end: u64) {
        if offset <= self.size && end >= self.size {
            self.disksize = None;
        }
    }

    /// Holes of `span` ext4 may have allocated (see `maybe_allocated`).
    pub fn maybe_allocated_in(&self, span: Range<u64>) -> Vec<Range<u64>> {
        self.maybe_allocated.overlapping(span).into_iter().flat_map(|(r, ())| self.blocks.gaps(r)).collect()
    }

    /// Blocks `span` get dirty data, as a write or a page fault's write
    /// access (its folio's blocks inside EOF) gives them: holes are backed
    /// as `fill`, unwritten blocks turn dirty. Returns blocks newly allocated.
    pub fn fault_in(&mut self, span: Range<u64>, bs: u64, fill: Alloc) -> u64 {
        self.writeback_pending = true;
        let new_blocks = self.holes_in(span.clone());
        let existing = self.blocks.overlapping(span.clone());
        // A hole ext4 may have allocated unwritten (`maybe_allocated`) that
        // a written fill reaches stays unwritten until write-back, if it was.
        let maybe = if fill == Alloc::Written { self.maybe_allocated_in(span.clone()) } else { Vec::new() };
        self.blocks.insert(span, fill);
        for m in maybe {
            self.blocks.insert(m, Alloc::UnwrittenDirty);
        }
        for (r, old) in existing {
            let converts = matches!(old, Alloc::Unwritten | Alloc::Zeroed);
            self.blocks.insert(r.clone(), if converts { Alloc::UnwrittenDirty } else { old });
            if converts {
                self.submitted.remove(r.clone());
                self.zeroout_around(r, bs);
            }
        }
        new_blocks
    }

    /// truncate_pagecache over `span`: dirty folios go unwritten. Mapped
    /// blocks stay until freed. Which dirty blocks write-back reached
    /// before is ext4's choice (a partial write-back maps what its folios
    /// hold), which the model does not follow: a delayed block goes with
    /// its folio or was mapped and stays (`maybe_allocated`), and a dirty
    /// unwritten one stays unwritten or was written (`Zeroed`).
    pub fn drop_cached(&mut self, span: Range<u64>) {
        let delayed: Vec<Range<u64>> = self.blocks.overlapping(span.clone()).into_iter().filter(|(_, a)| *a == Alloc::Delayed).map(|(r, _)| r).collect();
        self.blocks.update(span, |a| match a {
            Alloc::Delayed => None,
            Alloc::UnwrittenDirty => Some(Alloc::Zeroed),
            other => Some(*other),
        });
        for r in delayed {
            self.maybe_allocated.insert(r, ());
        }
    }

    /// Drops blocks `span` entirely (allocation and content). Returns blocks freed.
    pub fn free_blocks(&mut self, span: Range<u64>, bs: u64) -> u64 {
        if span.is_empty() {
            return 0;
        }
        self.maybe_allocated.remove(span.clone());
        self.submitted.remove(span.clone());
        let freed: u64 = self.blocks.overlapping(span.clone()).iter().map(|(r, _)| r.end - r.start).sum();
        self.blocks.remove(span.clone());
        self.content.clear(byte_span(&span, bs));
        freed
    }

    /// Writeback of blocks at or after `from`: dirty blocks become written.
    /// Converting dirty unwritten blocks may zero out the short unwritten
    /// rest of their extent, whose neighbours (written since, or allocated
    /// by a later fallocate) ext4 has merged into it by now.
    pub fn settle_from(&mut self, from: u64, bs: u64) {
        // Write-back to the end pushes i_disksize to the size.
        self.disksize = None;
        if !self.writeback_pending {
            return;
        }
        if from == 0 {
            self.writeback_pending = false;
        }
        if !self.blocks.iter().any(|(r, a)| r.end > from && a.settled() != *a) {
            return;
        }
        let converting: Vec<Range<u64>> =
            self.blocks.overlapping(from..u64::MAX).into_iter().filter(|(_, a)| *a == Alloc::UnwrittenDirty).map(|(r, _)| r).collect();
        self.blocks.update(from..u64::MAX, |a| Some(a.settled()));
        for r in converting {
            self.zeroout_around(r, bs);
        }
    }

    pub fn allocated_blocks(&self) -> u64 {
        self.blocks.covered()
    }

    /// Moves blocks at or after `from` by `delta` blocks, content with them.
    pub fn shift_blocks(&mut self, from: u64, delta: i64, bs: u64) {
        self.blocks.shift_from(from, delta);
        self.maybe_allocated.shift_from(from, delta);
        self.submitted.shift_from(from, delta);
        self.content.shift_from(from * bs, delta * bs as i64);
    }

    /// FIEMAP of logical `blocks` as the model sees it: one extent per run
    /// of equal state, clipped to `blocks`, the last one flagged LAST. Dirty
    /// ranges carry `writeback_pending`.
    pub fn fiemap(&self, blocks: Range<u64>, bs: u64) -> Vec<FiemapExtent> {
        let maybe: Vec<(Range<u64>, Option<Alloc>)> = self.maybe_allocated_in(blocks.clone()).into_iter().map(|r| (r, None)).collect();
        let mut runs: Vec<(Range<u64>, Option<Alloc>)> = self.blocks.overlapping(blocks).into_iter().map(|(r, a)| (r, Some(a))).chain(maybe).collect();
        runs.sort_by_key(|(r, _)| r.start);
        let mut out: Vec<FiemapExtent> = runs
            .into_iter()
            .map(|(r, a)| {
                let (flags, pending) = match a {
                    Some(Alloc::Written) => (0, false),
                    Some(Alloc::Unwritten) => (fiemap_flags::UNWRITTEN, false),
                    Some(Alloc::UnwrittenDirty) => (fiemap_flags::UNWRITTEN, true),
                    Some(Alloc::Delayed) | None => (fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN, true),
                    Some(Alloc::Zeroed) => (fiemap_flags::UNWRITTEN, true),
                };
                FiemapExtent { writeback_pending: pending, maybe_hole: a.is_none(), ..FiemapExtent::new(r.start * bs, (r.end - r.start) * bs, flags) }
            })
            .collect();
        if let Some(last) = out.last_mut() {
            last.flags |= fiemap_flags::LAST;
        }
        out
    }

    /// Invariants that hold after every op.
    pub fn check(&self, bs: u64) -> Result<(), String> {
        if !self.writeback_pending && self.blocks.iter().any(|(_, a)| a.settled() != *a) {
            return Err("blocks await write-back but the file is not marked as having any".into());
        }
        // Only unwritten blocks may lie wholly past EOF: e2fsck rejects
        // initialised ones, and writeback never reaches dirty ones there.
        let first_past = if self.truncating { u64::MAX } else { self.size.div_ceil(bs) };
        for (r, a) in self.blocks.overlapping(first_past..u64::MAX) {
            if a != Alloc::Unwritten {
                return Err(format!("blocks {r:?} past EOF {} are {a:?}", self.size));
            }
        }
        if self.content.end() > self.size {
            return Err(format!("content runs to byte {}, past size {}", self.content.end(), self.size));
        }
        // Content and blocks are both in order: walk them alongside.
        let mut ranges = self.blocks.iter().peekable();
        for run in self.content.ranges() {
            let last = (run.end - 1) / bs;
            let mut b = run.start / bs;
            while b <= last {
                while ranges.next_if(|(r, _)| r.end <= b).is_some() {}
                match ranges.peek() {
                    Some((r, _)) if r.start <= b => b = r.end,
                    _ => return Err(format!("bytes {run:?}: block {b} has content but no allocation")),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn write_read_and_states() {
        let mut f = FileData::default();
        let sevens: Arc<[u8]> = Arc::from(&[7u8; 5000][..]);
        assert_eq!(f.write(100, 5000, Source::Literal { bytes: sevens, at: 0 }, 4096, Alloc::Delayed), 2);
        assert_eq!(f.size, 5100);
        assert_eq!(f.read(0, 200)[99..101], [0, 7]);
        assert_eq!(f.read(5000, 1000).len(), 100);
        assert_eq!(f.blocks.get(1), Some(&Alloc::Delayed));
        f.blocks.insert(2..4, Alloc::Unwritten);
        f.write(8192, 1, Source::Pattern { seed: 1, at: 0 }, 4096, Alloc::Delayed);
        assert_eq!(f.blocks.get(2), Some(&Alloc::UnwrittenDirty));
        assert_eq!(f.blocks.get(3), Some(&Alloc::Unwritten));
        f.settle_from(0, 4096);
        assert_eq!(f.blocks.get(2), Some(&Alloc::Written));
        assert_eq!(f.blocks.get(3), Some(&Alloc::Unwritten));
        assert!(f.check(4096).is_ok());
    }

    proptest::proptest! {
        /// The cluster counts agree with a look at every block, and with
        /// one-block clusters they are the block counts.
        #[test]
        fn cluster_counts_match_a_count_per_block(
            runs in proptest::collection::vec((0u64..64, 1u64..12, 0u8..2), 0..8),
            maybe in proptest::collection::vec((0u64..64, 1u64..12), 0..4),
            span in (0u64..80, 0u64..24),
            ratio_log in 0u32..4,
        ) {
            let ratio = 1u64 << ratio_log;
            let mut f = FileData::default();
            for (s, l, a) in runs {
                f.blocks.insert(s..s + l, if a == 0 { Alloc::Written } else { Alloc::Unwritten });
            }
            for (s, l) in maybe {
                f.maybe_allocated.insert(s..s + l, ());
            }
            let allocated = |c: u64| (c * ratio..(c + 1) * ratio).any(|b| f.blocks.get(b).is_some());
            let maybe_hole = |c: u64| (c * ratio..(c + 1) * ratio).any(|b| !f.maybe_allocated_in(b..b + 1).is_empty());
            let span = span.0..span.0 + span.1;
            let clusters = if span.is_empty() { 0..0 } else { span.start / ratio..span.end.div_ceil(ratio) };
            let held = clusters.clone().filter(|c| allocated(*c)).count() as u64;
            proptest::prop_assert_eq!(f.allocated_clusters_in(span.clone(), ratio), held);
            proptest::prop_assert_eq!(f.new_clusters_in(span.clone(), ratio), clusters.count() as u64 - held);
            proptest::prop_assert_eq!(f.allocated_clusters(ratio), (0..100).filter(|c| allocated(*c)).count() as u64);
            proptest::prop_assert_eq!(f.maybe_allocated_clusters(ratio), (0..100).filter(|c| maybe_hole(*c) && !allocated(*c)).count() as u64);
            if ratio == 1 {
                let maybe_blocks: u64 = f.maybe_allocated_in(0..u64::MAX).iter().map(|r| r.end - r.start).sum();
                proptest::prop_assert_eq!(f.new_clusters_in(span.clone(), 1), f.holes_in(span));
                proptest::prop_assert_eq!(f.allocated_clusters(1), f.allocated_blocks());
                proptest::prop_assert_eq!(f.maybe_allocated_clusters(1), maybe_blocks);
            }
        }
    }

    #[test]
    fn fiemap_marks_dirty_and_last() {
        let mut f = FileData::default();
        f.write(0, 4096, Source::Pattern { seed: 2, at: 0 }, 4096, Alloc::Delayed);
        f.blocks.insert(1..3, Alloc::Unwritten);
        let m = f.fiemap(0..u64::MAX, 4096);
        assert_eq!(m.len(), 2);
        assert!(m[0].writeback_pending);
        assert_eq!(m[0].flags, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN);
        assert_eq!(m[1].flags, fiemap_flags::UNWRITTEN | fiemap_flags::LAST);
        assert_eq!(m[1].length, 8192);
    }

    #[test]
    fn fiemap_of_a_range_clips_to_it_and_flags_its_own_last_extent() {
        let mut f = FileData::default();
        f.blocks.insert(0..4, Alloc::Written);
        f.blocks.insert(6..10, Alloc::Unwritten);
        let ext = |blocks| f.fiemap(blocks, 1024).into_iter().map(|e| (e.logical, e.length, e.flags)).collect::<Vec<_>>();
        assert_eq!(ext(1..3), vec![(1024, 2048, fiemap_flags::LAST)], "one extent, clipped both sides");
        assert_eq!(ext(2..8), vec![(2048, 2048, 0), (6144, 2048, fiemap_flags::UNWRITTEN | fiemap_flags::LAST)], "the hole never counts");
        assert_eq!(ext(4..6), vec![], "a range in a hole maps nothing");
        assert_eq!(ext(9..u64::MAX), vec![(9216, 1024, fiemap_flags::UNWRITTEN | fiemap_flags::LAST)]);
    }
}
