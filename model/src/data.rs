//! A regular file's contents and block allocation, in logical blocks.
//!
//! Contents and allocation are kept apart: `blocks` says what each logical
//! block is (written, unwritten, delayed), `content` holds the bytes of blocks
//! that were ever written. A block without content reads as zeros. Bytes past
//! `size` are always zero, so growing a file never exposes old data.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

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
    /// Held data, then ZERO_RANGE: reads as zeros, and ext4 either converted
    /// it to unwritten or left it written with zeros on disk, which FIEMAP
    /// shows as a written extent (the Linux oracle sees both).
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
    /// Block index -> exactly one block of bytes.
    pub content: BTreeMap<u64, Arc<[u8]>>,
}

pub use crate::vfs::block_span;

impl FileData {
    /// Bytes of block `b` as read returns them (ignoring size).
    pub fn block_bytes(&self, b: u64, bs: usize) -> Vec<u8> {
        match self.content.get(&b) {
            Some(bytes) => bytes.to_vec(),
            None => vec![0; bs],
        }
    }

    pub fn read(&self, offset: u64, len: u64, bs: u64) -> Vec<u8> {
        if offset >= self.size {
            return Vec::new();
        }
        let end = self.size.min(offset.saturating_add(len));
        let mut out = Vec::with_capacity((end - offset) as usize);
        let mut pos = offset;
        while pos < end {
            let b = pos / bs;
            let within = (pos % bs) as usize;
            let take = ((bs - pos % bs).min(end - pos)) as usize;
            match self.content.get(&b) {
                Some(bytes) => out.extend_from_slice(&bytes[within..within + take]),
                None => out.resize(out.len() + take, 0),
            }
            pos += take as u64;
        }
        out
    }

    /// Blocks a write would newly allocate (holes in its span).
    pub fn holes_in(&self, span: Range<u64>) -> u64 {
        let covered: u64 = self.blocks.overlapping(span.clone()).iter().map(|(r, _)| r.end - r.start).sum();
        (span.end - span.start) - covered
    }

    /// Copies `data` in at `offset`; holes become `fill` (delayed, unwritten
    /// or written, as the inode's mode says). Returns blocks newly allocated.
    pub fn write(&mut self, offset: u64, data: &[u8], bs: u64, fill: Alloc) -> u64 {
        let span = block_span(offset, data.len() as u64, bs);
        let new_blocks = self.holes_in(span.clone());
        let mut pos = offset;
        let mut src = data;
        while !src.is_empty() {
            let b = pos / bs;
            let within = (pos % bs) as usize;
            let take = ((bs as usize) - within).min(src.len());
            let part = &src[..take];
            // A block no snapshot shares is rewritten in place; a shared or
            // missing one gets a fresh copy (built straight from the data
            // when the write covers it whole).
            match self.content.get_mut(&b).and_then(Arc::get_mut) {
                Some(block) => block[within..within + take].copy_from_slice(part),
                None if take == bs as usize => {
                    self.content.insert(b, Arc::from(part));
                }
                None => {
                    let mut block = self.block_bytes(b, bs as usize);
                    block[within..within + take].copy_from_slice(part);
                    self.content.insert(b, block.into());
                }
            }
            src = &src[take..];
            pos += take as u64;
        }
        let existing = self.blocks.overlapping(span.clone());
        self.blocks.insert(span, fill);
        self.size = self.size.max(offset + data.len() as u64);
        for (r, old) in existing {
            let converts = matches!(old, Alloc::Unwritten | Alloc::Zeroed);
            self.blocks.insert(r.clone(), if converts { Alloc::UnwrittenDirty } else { old });
            if converts {
                self.zeroout_around(r, bs);
            }
        }
        new_blocks
    }

    /// Converting part of an unwritten extent, ext4 writes zeros over short
    /// unwritten neighbours instead of splitting them off (up to
    /// s_extent_max_zeroout_kb, 32 KiB, of an extent within EOF), so those may
    /// turn up written. Which ones is layout; they become [`Alloc::Zeroed`].
    fn zeroout_around(&mut self, converted: Range<u64>, bs: u64) {
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
    pub fn zero_bytes(&mut self, from: u64, to: u64, bs: u64) {
        let mut pos = from;
        while pos < to {
            let b = pos / bs;
            let within = (pos % bs) as usize;
            let take = ((bs - pos % bs).min(to - pos)) as usize;
            if let Some(bytes) = self.content.get(&b) {
                let mut block = bytes.to_vec();
                block[within..within + take].fill(0);
                if block.iter().all(|&x| x == 0) {
                    self.content.remove(&b);
                } else {
                    self.content.insert(b, block.into());
                }
            }
            pos += take as u64;
        }
    }

    /// Drops blocks `span` entirely (allocation and content). Returns blocks freed.
    pub fn free_blocks(&mut self, span: Range<u64>) -> u64 {
        if span.is_empty() {
            return 0;
        }
        let freed: u64 = self.blocks.overlapping(span.clone()).iter().map(|(r, _)| r.end - r.start).sum();
        self.blocks.remove(span.clone());
        let doomed: Vec<u64> = self.content.range(span).map(|(b, _)| *b).collect();
        for b in doomed {
            self.content.remove(&b);
        }
        freed
    }

    /// Writeback of blocks at or after `from`: dirty blocks become written.
    pub fn settle_from(&mut self, from: u64) {
        self.blocks.update(from..u64::MAX, |a| Some(a.settled()));
    }

    pub fn allocated_blocks(&self) -> u64 {
        self.blocks.covered()
    }

    /// Moves blocks at or after `from` by `delta` blocks, content with them.
    pub fn shift_blocks(&mut self, from: u64, delta: i64) {
        self.blocks.shift_from(from, delta);
        let moved: Vec<(u64, Arc<[u8]>)> = self.content.range(from..).map(|(b, c)| (*b, c.clone())).collect();
        for (b, _) in &moved {
            self.content.remove(b);
        }
        for (b, c) in moved {
            let nb = b.checked_add_signed(delta).expect("shift stays in the block space");
            self.content.insert(nb, c);
        }
    }

    /// FIEMAP as the model sees it: one extent per run of equal state, the
    /// last one flagged LAST. Dirty ranges carry `writeback_pending`.
    pub fn fiemap(&self, bs: u64) -> Vec<FiemapExtent> {
        let mut out: Vec<FiemapExtent> = self
            .blocks
            .iter()
            .map(|(r, a)| {
                let (flags, pending) = match a {
                    Alloc::Written => (0, false),
                    Alloc::Unwritten => (fiemap_flags::UNWRITTEN, false),
                    Alloc::UnwrittenDirty => (fiemap_flags::UNWRITTEN, true),
                    Alloc::Delayed => (fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN, true),
                    Alloc::Zeroed => (fiemap_flags::UNWRITTEN, true),
                };
                FiemapExtent { logical: r.start * bs, length: (r.end - r.start) * bs, flags, writeback_pending: pending }
            })
            .collect();
        if let Some(last) = out.last_mut() {
            last.flags |= fiemap_flags::LAST;
        }
        out
    }

    /// Invariants that hold after every op.
    pub fn check(&self, bs: u64) -> Result<(), String> {
        // Only unwritten blocks may lie wholly past EOF: e2fsck rejects
        // initialised ones, and writeback never reaches dirty ones there.
        let first_past = self.size.div_ceil(bs);
        for (r, a) in self.blocks.overlapping(first_past..u64::MAX) {
            if a != Alloc::Unwritten {
                return Err(format!("blocks {r:?} past EOF {} are {a:?}", self.size));
            }
        }
        // Both maps are in block order: walk the ranges alongside the
        // content instead of looking every block up.
        let mut ranges = self.blocks.iter().peekable();
        for (b, bytes) in &self.content {
            if bytes.len() as u64 != bs {
                return Err(format!("block {b} holds {} bytes, not {bs}", bytes.len()));
            }
            while ranges.next_if(|(r, _)| r.end <= *b).is_some() {}
            if ranges.peek().is_none_or(|(r, _)| r.start > *b) {
                return Err(format!("block {b} has content but no allocation"));
            }
            let start = b * bs;
            if start + bs > self.size {
                let from = self.size.saturating_sub(start) as usize;
                if bytes[from..].iter().any(|&x| x != 0) {
                    return Err(format!("block {b} has non-zero bytes past size {}", self.size));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_and_states() {
        let mut f = FileData::default();
        assert_eq!(f.write(100, &[7; 5000], 4096, Alloc::Delayed), 2);
        assert_eq!(f.size, 5100);
        assert_eq!(f.read(0, 200, 4096)[99..101], [0, 7]);
        assert_eq!(f.read(5000, 1000, 4096).len(), 100);
        assert_eq!(f.blocks.get(1), Some(&Alloc::Delayed));
        f.blocks.insert(2..4, Alloc::Unwritten);
        f.write(8192, &[1], 4096, Alloc::Delayed);
        assert_eq!(f.blocks.get(2), Some(&Alloc::UnwrittenDirty));
        assert_eq!(f.blocks.get(3), Some(&Alloc::Unwritten));
        f.settle_from(0);
        assert_eq!(f.blocks.get(2), Some(&Alloc::Written));
        assert_eq!(f.blocks.get(3), Some(&Alloc::Unwritten));
        assert!(f.check(4096).is_ok());
    }

    #[test]
    fn fiemap_marks_dirty_and_last() {
        let mut f = FileData::default();
        f.write(0, &[1; 4096], 4096, Alloc::Delayed);
        f.blocks.insert(1..3, Alloc::Unwritten);
        let m = f.fiemap(4096);
        assert_eq!(m.len(), 2);
        assert!(m[0].writeback_pending);
        assert_eq!(m[0].flags, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN);
        assert_eq!(m[1].flags, fiemap_flags::UNWRITTEN | fiemap_flags::LAST);
        assert_eq!(m[1].length, 8192);
    }
}
