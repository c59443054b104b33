//! The engine's `FolioAllocator` over the simulated buddy allocator: a
//! folio of order `o` is a block of 2^o page frames, refused when no block
//! that large is free, whatever the free total; the page cache then falls
//! back to smaller orders down to its mapping's minimum.
//!
//! Memory is the page cache's bound plus what seeded other users hold,
//! scattered ([`Buddy::fragment`]): the cache may still fill its bound,
//! but in smaller folios the more the others hold. The kernel groups
//! unmovable allocations (slab, page tables) into pageblocks of their own;
//! here the others' pages are unmovable in a seeded share of pageblocks as
//! large as the share they hold, movable elsewhere. Compaction cannot
//! clear a block that holds an unmovable page, so at block size > page
//! size the cache's folios fit only in the other pageblocks: filled with
//! dirty folios that reclaim cannot drop, a block's folio finds no block
//! and the op answers ENOMEM.

use std::collections::BTreeSet;

use ext4_engine::memory::{FolioAllocator, FolioRefused};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::buddy::Buddy;

/// MAX_PAGE_ORDER: the largest block the kernel's buddy allocator keeps.
pub const MAX_ORDER: u8 = 10;
/// pageblock_order: the unit the kernel groups allocations by mobility in.
pub const PAGEBLOCK_ORDER: u8 = 9;

#[derive(Clone, Debug)]
pub struct BuddyFolios {
    buddy: Buddy,
    page_size: u64,
    /// Frames other users hold for the whole mount that compaction may
    /// move (user memory).
    others: BTreeSet<u64>,
    /// Those it may not.
    unmovable: usize,
}

impl BuddyFolios {
    /// A page cache bound of `bound_bytes` in pages of `page_size`, with
    /// `held_percent` of all memory held by others (seeded by `seed`), so
    /// the cache's share stays the bound.
    pub fn new(page_size: u32, bound_bytes: u64, held_percent: u8, seed: u64) -> BuddyFolios {
        let page_size = u64::from(page_size.max(1));
        let held = u64::from(held_percent.min(90));
        let cache_pages = bound_bytes / page_size;
        let pages = cache_pages * 100 / (100 - held);
        let mut buddy = Buddy::new(pages, MAX_ORDER);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let taken = buddy.fragment(&mut rng, u8::try_from(held).unwrap_or(90));
        let mut blocks: Vec<u64> = (0..pages.div_ceil(1 << PAGEBLOCK_ORDER)).collect();
        blocks.shuffle(&mut rng);
        blocks.truncate((blocks.len() as u64 * held).div_ceil(100) as usize);
        let unmovable_blocks: BTreeSet<u64> = blocks.into_iter().collect();
        let (unmovable, others): (Vec<u64>, Vec<u64>) = taken.into_iter().partition(|f| unmovable_blocks.contains(&(f >> PAGEBLOCK_ORDER)));
        BuddyFolios { buddy, page_size, others: others.into_iter().collect(), unmovable: unmovable.len() }
    }

    fn held_pages(&self) -> u64 {
        (self.others.len() + self.unmovable) as u64
    }

    /// The largest order a folio could have now.
    pub fn largest_free_order(&self) -> Option<u8> {
        self.buddy.largest_free_order()
    }
}

impl FolioAllocator for BuddyFolios {
    fn allocate(&mut self, order: u8) -> Result<u64, FolioRefused> {
        // Never past the bound: the others' share is not the cache's.
        let bytes = self.page_size.checked_shl(u32::from(order)).unwrap_or(u64::MAX);
        if self.in_use_bytes().saturating_add(bytes) > self.bound_bytes() {
            return Err(FolioRefused { order, bytes });
        }
        self.buddy.allocate(order).ok_or(FolioRefused { order, bytes })
    }

    fn release(&mut self, order: u8, frame: u64) {
        let released = self.buddy.release(frame);
        debug_assert_eq!(released, Ok(order), "the page cache gave back a folio the allocator did not grant");
    }

    fn in_use_bytes(&self) -> u64 {
        (self.buddy.pages() - self.buddy.free_pages() - self.held_pages()) * self.page_size
    }

    fn bound_bytes(&self) -> u64 {
        (self.buddy.pages() - self.held_pages()) * self.page_size
    }

    fn fork(&self) -> Box<dyn FolioAllocator> {
        Box::new(self.clone())
    }

    fn compact(&mut self, order: u8) -> bool {
        let Some(moves) = self.buddy.compact(order, &self.others) else { return false };
        for (old, new) in moves {
            self.others.remove(&old);
            self.others.insert(new);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4_engine::fs::Ext4;
    use ext4_engine::memory::BoundedFolios;
    use ext4_model::{FileSystem, MountConfig};

    fn mounted(held_percent: u8) -> Ext4<ext4_engine::device_mem::MemDevice> {
        let mount: MountConfig = "page_cache_mb=4".parse().unwrap();
        let dev = ext4_testkit::fresh::image(&ext4_testkit::fresh::options(&mount, 64 << 20));
        let memory = BuddyFolios::new(4096, 4 << 20, held_percent, 11);
        Ext4::mount_with_memory(dev, &mount, Box::new(memory)).unwrap()
    }

    /// The same writes and reads with others holding none, and half, of
    /// memory: both read back what they wrote, the fragmented cache in
    /// smaller folios, falling back from the orders it asked for.
    #[test]
    fn a_fragmented_memory_gives_the_page_cache_smaller_folios_not_errors() {
        let mut results = Vec::new();
        for held in [0u8, 50] {
            let mut fs = mounted(held);
            let data: Vec<u8> = (0..6u32 << 20).map(|i| (i % 251) as u8).collect();
            fs.create("/f", 0o644).unwrap();
            fs.write("/f", 0, &data).unwrap();
            fs.sync().unwrap();
            assert_eq!(fs.read("/f", 0, 6 << 20).unwrap(), data, "held {held}%");
            let stats = fs.data_path_stats();
            let largest = stats.cache.folios_by_order.keys().max().copied().unwrap_or(0);
            results.push((largest, stats.cache.refused_folios));
            assert!(fs.lock_violations().is_empty());
        }
        let ((whole_largest, whole_refused), (frag_largest, frag_refused)) = (results[0], results[1]);
        assert!(frag_largest < whole_largest, "largest folio order {frag_largest} fragmented vs {whole_largest}");
        assert!(frag_refused > whole_refused, "refusals {frag_refused} fragmented vs {whole_refused}");
    }

    /// Others' pages are movable: an order-4 request fragmentation refuses
    /// gets its block once compaction moves some of them, and the cache's
    /// share is unchanged by the moves.
    #[test]
    fn compaction_moves_others_pages_so_a_large_block_forms() {
        let mut m = BuddyFolios::new(4096, 8 << 20, 80, 5);
        assert!(m.allocate(4).is_err());
        assert!(m.compact(4));
        assert!(m.allocate(4).is_ok());
        assert_eq!((m.in_use_bytes(), m.bound_bytes()), (64 << 10, 8 << 20));
        assert!(!BoundedFolios::new(4096, 1 << 20).compact(0), "a bound places nothing to move");
    }

    #[test]
    fn the_cache_share_is_the_bound_whatever_the_others_hold() {
        for held in [0u8, 30, 60] {
            let m = BuddyFolios::new(4096, 8 << 20, held, 3);
            assert_eq!(m.bound_bytes(), 8 << 20, "held {held}%");
            assert_eq!(m.in_use_bytes(), 0);
        }
    }
}
