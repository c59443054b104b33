//! Simulated physical memory as the kernel's page allocator keeps it: free
//! blocks of 2^order pages on per-order free lists, the smallest block that
//! fits split for an allocation, a released block merged with its buddy
//! (the block it was split from) for as long as that buddy is free too
//! (mm/page_alloc.c's buddy system). Higher orders become scarce when
//! memory is used and released in mixed sizes and orders: the
//! fragmentation a large folio meets comes from the algorithm, not from a
//! coin.
//!
//! Pages are numbered (page frame numbers) from 0; every choice is the
//! lowest-numbered free block that fits, so the same calls give the same
//! frames on every run.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

/// A release the allocator cannot honour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BuddyError {
    /// No allocated block starts at this frame (never allocated, or freed twice).
    NotAllocated(u64),
}

impl fmt::Display for BuddyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuddyError::NotAllocated(pfn) => write!(f, "no allocated block starts at page frame {pfn}"),
        }
    }
}

impl std::error::Error for BuddyError {}

#[derive(Clone, Debug)]
pub struct Buddy {
    pages: u64,
    max_order: u8,
    /// Per order, the first frame of each free block.
    free: Vec<BTreeSet<u64>>,
    /// First frame of each allocated block, and its order.
    used: BTreeMap<u64, u8>,
    free_pages: u64,
}

/// Pages in a block of `order`.
const fn span(order: u8) -> u64 {
    1 << order
}

impl Buddy {
    /// `pages` frames, none allocated, carved into the largest aligned
    /// blocks of at most `max_order` (the kernel's MAX_PAGE_ORDER is 10).
    pub fn new(pages: u64, max_order: u8) -> Buddy {
        let max_order = max_order.min(40);
        let mut free = vec![BTreeSet::new(); usize::from(max_order) + 1];
        let mut at = 0;
        while at < pages {
            let mut order = max_order;
            while order > 0 && (at % span(order) != 0 || at + span(order) > pages) {
                order -= 1;
            }
            free[usize::from(order)].insert(at);
            at += span(order);
        }
        Buddy { pages, max_order, free, used: BTreeMap::new(), free_pages: pages }
    }

    pub fn pages(&self) -> u64 {
        self.pages
    }

    pub fn max_order(&self) -> u8 {
        self.max_order
    }

    pub fn free_pages(&self) -> u64 {
        self.free_pages
    }

    /// Free blocks of exactly `order`.
    pub fn free_blocks(&self, order: u8) -> usize {
        self.free.get(usize::from(order)).map_or(0, BTreeSet::len)
    }

    /// The largest order a block could be allocated at now.
    pub fn largest_free_order(&self) -> Option<u8> {
        (0..=self.max_order).rev().find(|&o| self.free_blocks(o) > 0)
    }

    /// A block of `order` pages: the first frame of the lowest free block of
    /// the smallest order that fits, split down (its upper halves freed).
    /// None when no free block is large enough, however many pages are free.
    pub fn allocate(&mut self, order: u8) -> Option<u64> {
        if order > self.max_order {
            return None;
        }
        let from = (order..=self.max_order).find(|&o| self.free_blocks(o) > 0)?;
        let pfn = self.free[usize::from(from)].pop_first()?;
        let mut o = from;
        while o > order {
            o -= 1;
            self.free[usize::from(o)].insert(pfn + span(o));
        }
        self.used.insert(pfn, order);
        self.free_pages -= span(order);
        Some(pfn)
    }

    /// Gives back the block that starts at `pfn`, merging it with its free
    /// buddies. Returns its order.
    pub fn release(&mut self, pfn: u64) -> Result<u8, BuddyError> {
        let order = self.used.remove(&pfn).ok_or(BuddyError::NotAllocated(pfn))?;
        self.free_pages += span(order);
        let (mut at, mut o) = (pfn, order);
        while o < self.max_order {
            let buddy = at ^ span(o);
            if !self.free[usize::from(o)].remove(&buddy) {
                break;
            }
            at = at.min(buddy);
            o += 1;
        }
        self.free[usize::from(o)].insert(at);
        Ok(order)
    }

    /// Other users of memory, as a long-running machine has them: every
    /// free page taken one by one, then all but `held_percent` of them
    /// given back in a seeded order. What stays held is scattered, so free
    /// memory is left in small blocks. Returns the frames held.
    pub fn fragment(&mut self, rng: &mut ChaCha8Rng, held_percent: u8) -> Vec<u64> {
        let mut taken = Vec::new();
        while let Some(pfn) = self.allocate(0) {
            taken.push(pfn);
        }
        taken.shuffle(rng);
        let keep = taken.len() * usize::from(held_percent.min(100)) / 100;
        for pfn in taken.split_off(keep) {
            // Frames this call just took: always allocated.
            let _ = self.release(pfn);
        }
        taken.sort_unstable();
        taken
    }

    /// Compaction, in brief (mm/compaction.c migrates movable pages out of
    /// the way): finds the aligned block of `order` that the fewest moves
    /// free (lowest first on a tie) whose used frames are all single
    /// `movable` pages, and moves each to a free page outside it. Returns
    /// the moves (old frame, new frame); None when no block can be freed
    /// (an unmovable page in each, or too few free pages elsewhere).
    pub fn compact(&mut self, order: u8, movable: &BTreeSet<u64>) -> Option<Vec<(u64, u64)>> {
        if order > self.max_order || span(order) > self.pages {
            return None;
        }
        let size = span(order);
        let start = self.cheapest_block(order, movable)?;
        let region = start..start + size;
        let movers: Vec<u64> = self.used.range(region.clone()).map(|(&p, _)| p).collect();
        let (mut moves, mut parked) = (Vec::new(), Vec::new());
        for old in movers {
            // The lowest free page may be inside the block: park it.
            let new = loop {
                let pfn = self.allocate(0)?;
                if region.contains(&pfn) {
                    parked.push(pfn);
                } else {
                    break pfn;
                }
            };
            moves.push((old, new));
        }
        for pfn in moves.iter().map(|&(old, _)| old).chain(parked) {
            // Frames this call holds: always allocated.
            let _ = self.release(pfn);
        }
        Some(moves)
    }

    /// The aligned block of `order` compaction would empty: the fewest used
    /// frames, all of them single `movable` pages, with room for them
    /// outside; the lowest on a tie. One pass over the used blocks: a scan
    /// of every aligned block in memory was most of a fragmented run's time.
    fn cheapest_block(&self, order: u8, movable: &BTreeSet<u64>) -> Option<u64> {
        let size = span(order);
        // An aligned block with nothing used in it lies inside a free block
        // of `order` or more (every merge is made), so the lowest of those
        // starts the lowest empty one, which no block with moves beats.
        if let Some(&start) = self.free.iter().skip(usize::from(order)).filter_map(BTreeSet::first).min() {
            return Some(start);
        }
        // n pages moved out need n free pages outside the block's size - n.
        if self.free_pages < size {
            return None;
        }
        let mut best: Option<(u64, u64)> = None;
        let mut used = self.used.iter().peekable();
        while let Some((&first, &first_order)) = used.next() {
            // A used block larger than `order` covers its aligned block
            // and the ones after it, which then hold nothing of their own.
            let start = first / size * size;
            let (mut moves, mut movable_only) = (1, first_order == 0 && movable.contains(&first));
            while let Some((&pfn, &o)) = used.next_if(|(&pfn, _)| pfn < start + size) {
                moves += 1;
                movable_only &= o == 0 && movable.contains(&pfn);
            }
            if movable_only && start + size <= self.pages && best.is_none_or(|(fewest, _)| moves < fewest) {
                best = Some((moves, start));
            }
        }
        best.map(|(_, start)| start)
    }

    /// The allocator's invariants: blocks aligned to their order and inside
    /// memory, none overlapping, free and used pages adding up, and no free
    /// block whose buddy is free at the same order (every merge made).
    pub fn check(&self) -> Result<(), String> {
        let mut blocks: Vec<(u64, u8, bool)> = self.used.iter().map(|(&p, &o)| (p, o, false)).collect();
        for (o, list) in self.free.iter().enumerate() {
            let o = u8::try_from(o).map_err(|_| "too many orders".to_string())?;
            blocks.extend(list.iter().map(|&p| (p, o, true)));
            for &p in list {
                if o < self.max_order && list.contains(&(p ^ span(o))) {
                    return Err(format!("free order-{o} blocks at {p} and {} are buddies left unmerged", p ^ span(o)));
                }
            }
        }
        blocks.sort_unstable();
        let mut end = 0;
        let mut free = 0;
        for &(p, o, is_free) in &blocks {
            if p % span(o) != 0 {
                return Err(format!("order-{o} block at {p} is not aligned"));
            }
            if p < end {
                return Err(format!("block at {p} overlaps the one before"));
            }
            end = p + span(o);
            free += if is_free { span(o) } else { 0 };
        }
        if end > self.pages {
            return Err(format!("a block ends at {end}, past {} pages", self.pages));
        }
        let covered: u64 = blocks.iter().map(|&(_, o, _)| span(o)).sum();
        if covered != self.pages || free != self.free_pages {
            return Err(format!("{covered} pages in blocks, {free} free, of {} ({} counted free)", self.pages, self.free_pages));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;

    #[test]
    fn a_block_splits_for_a_small_allocation_and_merges_back() {
        let mut b = Buddy::new(16, 4);
        assert_eq!(b.largest_free_order(), Some(4));
        assert_eq!(b.allocate(0), Some(0));
        // 16 = 1 (used) + 1 + 2 + 4 + 8 free.
        assert_eq!((b.free_blocks(0), b.free_blocks(1), b.free_blocks(2), b.free_blocks(3)), (1, 1, 1, 1));
        assert_eq!(b.allocate(3), Some(8));
        assert_eq!(b.allocate(3), None, "7 pages free, none 8 together");
        assert_eq!(b.free_pages(), 7);
        b.check().unwrap();
        assert_eq!(b.release(0), Ok(0));
        assert_eq!(b.release(0), Err(BuddyError::NotAllocated(0)), "freed twice");
        assert_eq!(b.release(8), Ok(3));
        assert_eq!((b.largest_free_order(), b.free_pages()), (Some(4), 16));
        b.check().unwrap();
    }

    #[test]
    fn memory_that_is_not_a_power_of_two_is_carved_into_aligned_blocks() {
        let b = Buddy::new(1000, 10);
        b.check().unwrap();
        assert_eq!(b.free_pages(), 1000);
        // 1000 = 512 + 256 + 128 + 64 + 32 + 8.
        assert_eq!(b.largest_free_order(), Some(9));
        assert_eq!(b.free_blocks(3), 1);
    }

    /// Half the memory held by others, scattered: far more than an
    /// order-4 folio's pages are free, yet no order-4 block is.
    #[test]
    fn scattered_holders_leave_free_memory_in_small_blocks() {
        let mut b = Buddy::new(1 << 14, 10);
        let held = b.fragment(&mut ChaCha8Rng::seed_from_u64(7), 50);
        b.check().unwrap();
        assert_eq!(held.len(), 1 << 13);
        assert_eq!(b.free_pages(), 1 << 13);
        assert!(b.largest_free_order().is_some_and(|o| o < 4), "{:?}", b.largest_free_order());
        assert_eq!(b.allocate(4), None);
        assert!(b.allocate(0).is_some());
        // Same seed, same frames.
        let mut again = Buddy::new(1 << 14, 10);
        assert_eq!(again.fragment(&mut ChaCha8Rng::seed_from_u64(7), 50), held);
        // The others leave: everything merges back.
        for pfn in held {
            b.release(pfn).unwrap();
        }
        b.check().unwrap();
        assert_eq!(b.largest_free_order(), Some(10));
    }

    /// Scattered movable holders: compaction frees an order-4 block by
    /// moving the fewest of them, and the allocation then succeeds; with
    /// every holder unmovable it cannot.
    #[test]
    fn compaction_moves_movable_pages_out_of_the_cheapest_block() {
        let mut b = Buddy::new(1 << 10, 10);
        let held = b.fragment(&mut ChaCha8Rng::seed_from_u64(3), 60);
        assert_eq!(b.allocate(4), None, "fragmented");
        assert_eq!(b.compact(4, &BTreeSet::new()), None, "nothing movable");
        let movable: BTreeSet<u64> = held.iter().copied().collect();
        let free = b.free_pages();
        let moves = b.compact(4, &movable).expect("a block can be freed");
        b.check().unwrap();
        assert_eq!(b.free_pages(), free, "moving keeps the count");
        assert!(moves.iter().all(|(old, new)| movable.contains(old) && !movable.contains(new) && old / 16 != new / 16));
        assert!(moves.len() < 16, "the cheapest block, not a full one: {}", moves.len());
        let got = b.allocate(4).expect("the freed block");
        assert!(moves.iter().all(|(old, _)| old / 16 == got / 16), "the block the moves emptied");
    }

    /// Compaction's choice as first written: every aligned block in
    /// memory, in order, counted.
    fn cheapest_block_by_scan(b: &Buddy, order: u8, movable: &BTreeSet<u64>) -> Option<u64> {
        let size = span(order);
        let mut best: Option<(usize, u64)> = None;
        let mut start = 0;
        while start + size <= b.pages {
            let covered = b.used.range(..start).next_back().is_some_and(|(&p, &o)| p + span(o) > start);
            let inside: Vec<(u64, u8)> = b.used.range(start..start + size).map(|(&p, &o)| (p, o)).collect();
            let movable_only = !covered && inside.iter().all(|&(p, o)| o == 0 && movable.contains(&p));
            let free_inside = size.saturating_sub(inside.len() as u64);
            let room_elsewhere = b.free_pages.saturating_sub(free_inside) >= inside.len() as u64;
            if movable_only && room_elsewhere && best.is_none_or(|(n, _)| inside.len() < n) {
                best = Some((inside.len(), start));
            }
            start += size;
        }
        best.map(|(_, start)| start)
    }

    proptest! {
        /// The one-pass choice is the scan's, over memory fragmented by
        /// others and by allocations of mixed orders, any of it movable.
        #[test]
        fn compaction_picks_the_block_a_full_scan_picks(pages in 16u64..3000, held in 0u8..100, seed: u64, steps in proptest::collection::vec((0u8..5, any::<u16>()), 0..60), movable_share in 0u8..=4, order in 0u8..8) {
            let mut b = Buddy::new(pages, 6);
            let others = b.fragment(&mut ChaCha8Rng::seed_from_u64(seed), held);
            let mut mine = Vec::new();
            for (o, pick) in steps {
                match b.allocate(o) {
                    Some(pfn) => mine.push(pfn),
                    None if !mine.is_empty() => {
                        let _ = b.release(mine.swap_remove(usize::from(pick) % mine.len()));
                    }
                    None => {}
                }
            }
            let movable: BTreeSet<u64> = others.iter().copied().filter(|p| p % 4 < u64::from(movable_share)).collect();
            if order <= b.max_order() && span(order) <= b.pages() {
                prop_assert_eq!(b.cheapest_block(order, &movable), cheapest_block_by_scan(&b, order, &movable));
            }
        }

        /// Any mix of allocations and releases keeps the invariants, and
        /// releasing everything gives back the memory as it began.
        #[test]
        fn allocations_and_releases_keep_the_invariants(pages in 1u64..5000, steps in proptest::collection::vec((any::<bool>(), 0u8..8, any::<u16>()), 1..300)) {
            let mut b = Buddy::new(pages, 6);
            let fresh = b.clone();
            let mut held: Vec<u64> = Vec::new();
            for (alloc, order, pick) in steps {
                if alloc || held.is_empty() {
                    if let Some(pfn) = b.allocate(order) {
                        held.push(pfn);
                    } else {
                        prop_assert!(order > b.max_order() || b.largest_free_order().is_none_or(|o| o < order));
                    }
                } else {
                    let pfn = held.swap_remove(usize::from(pick) % held.len());
                    prop_assert!(b.release(pfn).is_ok());
                }
                prop_assert_eq!(b.check(), Ok(()));
            }
            for pfn in held {
                prop_assert!(b.release(pfn).is_ok());
            }
            prop_assert_eq!(&b.free, &fresh.free);
            prop_assert_eq!(b.free_pages(), pages);
        }
    }
}
