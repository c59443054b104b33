//! A folio: 2^order contiguous pages of one file's data, with an uptodate
//! and a dirty bit per filesystem block (what iomap's per-block state and
//! ext4's buffer heads keep).
//!
//! - A block never straddles folios: the mapping's minimum order makes a
//!   folio at least one block (bs > ps), and folios are aligned to their
//!   size, so a folio holds `folio bytes / bs` whole blocks (at least one).
//! - A dirty block is uptodate: partial writes read the rest of the block
//!   first (read-modify-write).
//! - The bytes live behind an `Arc`, so cloning a page cache for a shadow
//!   mount copies pointers; the first write to a shared folio copies it.

use std::ops::Range;
use std::sync::Arc;

use super::geometry::Geometry;

/// One bit per block of a folio.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockBits {
    words: Box<[u64]>,
    set: u32,
}

impl BlockBits {
    fn new(blocks: u32) -> Self {
        BlockBits { words: vec![0u64; blocks.div_ceil(64) as usize].into_boxed_slice(), set: 0 }
    }

    pub fn get(&self, i: u32) -> bool {
        self.words.get((i / 64) as usize).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Sets bit `i`; returns whether it was clear.
    fn set(&mut self, i: u32) -> bool {
        let Some(w) = self.words.get_mut((i / 64) as usize) else { return false };
        let bit = 1u64 << (i % 64);
        let was_clear = *w & bit == 0;
        *w |= bit;
        self.set += u32::from(was_clear);
        was_clear
    }

    /// Clears bit `i`; returns whether it was set.
    fn clear(&mut self, i: u32) -> bool {
        let Some(w) = self.words.get_mut((i / 64) as usize) else { return false };
        let bit = 1u64 << (i % 64);
        let was_set = *w & bit != 0;
        *w &= !bit;
        self.set -= u32::from(was_set);
        was_set
    }

    pub fn count(&self) -> u32 {
        self.set
    }
}

/// One folio of a mapping.
#[derive(Clone, Debug)]
pub struct Folio {
    order: u8,
    block_size: u32,
    data: Arc<Vec<u8>>,
    uptodate: BlockBits,
    dirty: BlockBits,
    /// Where the folio stands in the cache's LRU (its last use).
    pub(super) stamp: u64,
    /// The page frame its memory starts at (the allocator's answer).
    pub(super) frame: u64,
}

impl Folio {
    /// A zeroed folio of `order` pages of `geo`, nothing uptodate. The
    /// caller has checked the folio holds at least one whole block.
    pub fn new(order: u8, geo: Geometry) -> Self {
        Self::from_buffer(order, geo, Vec::new())
    }

    /// [`Folio::new`] over a buffer a dropped folio left (see
    /// [`Folio::into_buffer`]): warm memory instead of fresh pages from the
    /// host for every folio. Its old bytes stay: no block is uptodate, and
    /// whatever makes one uptodate fills it whole (read, write, zeroing),
    /// as a page from the kernel's allocator holds garbage until then.
    pub fn from_buffer(order: u8, geo: Geometry, mut buf: Vec<u8>) -> Self {
        // Geometry's sizes are at most 64 KiB: these fit.
        let (page_size, block_size) = (geo.page_size() as usize, geo.block_size() as u32);
        let bytes = page_size << order;
        let blocks = geo.blocks_per_folio(order);
        debug_assert!(blocks.is_some(), "an order-{order} folio cannot hold {block_size}-byte blocks");
        // Never zero: a folio too small for a block is still one block's bits.
        let blocks = blocks.unwrap_or(1);
        if buf.len() != bytes {
            buf = vec![0u8; bytes];
        }
        Folio { order, block_size, data: Arc::new(buf), uptodate: BlockBits::new(blocks), dirty: BlockBits::new(blocks), stamp: 0, frame: 0 }
    }

    /// The folio's bytes for reuse, unless a shadow still shares them.
    pub fn into_buffer(self) -> Option<Vec<u8>> {
        Arc::try_unwrap(self.data).ok()
    }

    pub fn order(&self) -> u8 {
        self.order
    }

    pub fn len_bytes(&self) -> usize {
        self.data.len()
    }

    /// Blocks the folio holds.
    pub fn blocks(&self) -> u32 {
        (self.data.len() / self.block_size as usize) as u32
    }

    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The folio's bytes for writing; a folio shared with a shadow is copied first.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        Arc::make_mut(&mut self.data).as_mut_slice()
    }

    /// Byte range of block `i` within the folio.
    pub fn block_range(&self, i: u32) -> Range<usize> {
        let bs = self.block_size as usize;
        let start = i as usize * bs;
        start..start + bs
    }

    pub fn block(&self, i: u32) -> &[u8] {
        &self.data[self.block_range(i)]
    }

    pub fn block_mut(&mut self, i: u32) -> &mut [u8] {
        let r = self.block_range(i);
        &mut self.bytes_mut()[r]
    }

    pub fn is_uptodate(&self, i: u32) -> bool {
        self.uptodate.get(i)
    }

    pub fn is_dirty(&self, i: u32) -> bool {
        self.dirty.get(i)
    }

    pub fn set_uptodate(&mut self, i: u32) {
        self.uptodate.set(i);
    }

    /// Marks block `i` dirty; it must be uptodate. Returns whether it was clean.
    pub fn set_dirty(&mut self, i: u32) -> bool {
        debug_assert!(self.uptodate.get(i), "dirtying block {i} that is not uptodate");
        self.dirty.set(i)
    }

    /// Marks block `i` clean (written back); it stays uptodate.
    pub fn clear_dirty(&mut self, i: u32) -> bool {
        self.dirty.clear(i)
    }

    /// Forgets block `i` (truncated or punched away): neither uptodate nor
    /// dirty. Its bytes stay until something fills the block again.
    pub fn invalidate(&mut self, i: u32) {
        self.dirty.clear(i);
        self.uptodate.clear(i);
    }

    pub fn dirty_blocks(&self) -> u32 {
        self.dirty.count()
    }

    pub fn is_dirty_any(&self) -> bool {
        self.dirty.count() > 0
    }

    pub fn all_uptodate(&self) -> bool {
        self.uptodate.count() == self.blocks()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(block_size: u32, page_size: u32) -> Geometry {
        Geometry::new(block_size, page_size).unwrap()
    }

    #[test]
    fn a_folio_holds_whole_blocks_with_a_state_each() {
        let mut f = Folio::new(2, geo(1024, 4096));
        assert_eq!((f.len_bytes(), f.blocks()), (16384, 16));
        assert!(!f.is_uptodate(3) && !f.is_dirty_any());
        f.block_mut(3).fill(7);
        f.set_uptodate(3);
        assert!(f.set_dirty(3));
        assert!(!f.set_dirty(3), "already dirty");
        assert_eq!(f.dirty_blocks(), 1);
        assert_eq!(f.block_range(3), 3072..4096);
        assert!(f.clear_dirty(3));
        assert!(f.is_uptodate(3) && !f.is_dirty(3));
        f.invalidate(3);
        assert!(!f.is_uptodate(3) && !f.is_dirty(3), "an invalidated block must be filled again before it is read");
    }

    #[test]
    fn a_block_larger_than_a_page_fills_a_minimum_order_folio() {
        let f = Folio::new(4, geo(65536, 4096));
        assert_eq!(f.blocks(), 1);
        let f = Folio::new(11, geo(1024, 4096));
        assert_eq!(f.blocks(), 8192);
    }

    #[test]
    fn a_shared_folio_is_copied_on_first_write() {
        let mut a = Folio::new(0, geo(4096, 4096));
        let b = a.clone();
        a.bytes_mut()[0] = 1;
        assert_eq!((a.bytes()[0], b.bytes()[0]), (1, 0));
    }
}
