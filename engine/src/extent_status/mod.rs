//! The extent status tree of one inode (ext4's extents_status.c): what each
//! logical block is — written, unwritten, delayed or a hole.
//!
//! It keeps what nothing else knows: the **delayed extents**, ranges a
//! buffered write under delalloc has reserved space for but not allocated
//! (their data is dirty in the page cache); they are never dropped.
//! Beside them sits the **cache** ([`cache`]) of written, unwritten and
//! hole ranges, consulted before the extent tree and filled on each miss
//! from it ([`source`]): the on-disk tree read block by block, or the
//! inode's mapping once loaded whole ([`ExtentMap`], authoritative while
//! loaded). Memory reclaim shrinks the cache ([`lru`]).
//!
//! Invariants:
//! - a delayed block is never mapped in the extent map (allocation removes
//!   it from here first);
//! - the count of delayed blocks is the inode's share of the filesystem's
//!   reservation (i_reserved_data_blocks); the caller keeps the sum;
//! - a cached entry says what the tree says: whoever changes the mapping
//!   drops the entries there ([`ExtentStatusTree::forget_mapped`]).

use std::ops::Range;

use crate::error::Result;
use crate::extent_tree::{ExtentMap, Piece};
use crate::range_set::RangeSet;

pub mod cache;
pub mod lru;
pub mod source;

use cache::StatusCache;
use source::{ExtentSource, Found};

/// What a logical block is backed by (ext4's EXTENT_STATUS_* bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtentStatus {
    Written,
    Unwritten,
    /// Reserved, not allocated: the data is dirty in the page cache.
    Delayed,
    Hole,
}

/// One inode's extent status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentStatusTree {
    delayed: RangeSet,
    /// Blocks in `delayed`, kept so the reservation is O(1) to read.
    delayed_blocks: u64,
    cache: StatusCache,
}

impl ExtentStatusTree {
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks reserved and not yet allocated (i_reserved_data_blocks).
    pub fn delayed_blocks(&self) -> u64 {
        self.delayed_blocks
    }

    /// Marks `range` delayed where it is not already; returns how many
    /// blocks became delayed (the new reservation).
    pub fn insert_delayed(&mut self, range: Range<u64>) -> u64 {
        let gaps: Vec<Range<u64>> = self.delayed.gaps(range.start, range.end).collect();
        let mut added = 0;
        for gap in gaps {
            added += gap.end - gap.start;
            let fitted = self.delayed.insert(gap);
            debug_assert!(fitted, "a gap of the delayed set overlapped it");
        }
        self.delayed_blocks += added;
        added
    }

    /// Drops delayed extents in `range` (allocated, truncated or punched);
    /// returns how many blocks were delayed there (the reservation freed).
    pub fn remove_delayed(&mut self, range: Range<u64>) -> u64 {
        let removed = self.delayed.remove(range);
        debug_assert!(removed <= self.delayed_blocks);
        self.delayed_blocks -= removed;
        removed
    }

    /// The delayed extents inside `range`, clipped, in order.
    pub fn delayed_in(&self, range: Range<u64>) -> impl Iterator<Item = Range<u64>> + '_ {
        self.delayed.iter_in(range)
    }

    /// Delayed blocks inside `range`.
    pub fn delayed_count(&self, range: Range<u64>) -> u64 {
        self.delayed.count_in(range)
    }

    pub fn is_delayed(&self, lblk: u64) -> bool {
        self.delayed.overlaps(lblk..lblk.saturating_add(1))
    }

    /// Moves delayed extents at or after `from` by `delta` blocks
    /// (collapse and insert range); `None` if one would leave u64. Cached
    /// entries from `from` on are dropped, as ext4 drops its cache there.
    pub fn shift_from(&mut self, from: u64, delta: i64) -> Option<()> {
        self.cache.forget(from..u64::MAX);
        self.delayed.shift_from(from, delta)
    }

    /// [`ExtentStatusTree::shift_from`] that leaves the cached entries in
    /// place: the test hook's stale-cache bug.
    pub fn shift_keeping_mapped(&mut self, from: u64, delta: i64) -> Option<()> {
        self.delayed.shift_from(from, delta)
    }

    /// ext4_ext_precache: every run and hole into the cache; returns how
    /// many runs.
    pub fn precache(&mut self, runs: impl IntoIterator<Item = Piece>) -> usize {
        self.cache.load(runs)
    }

    /// The shrinker: every cached entry goes (delayed extents stay);
    /// returns how many went.
    pub fn drop_mapped(&mut self) -> usize {
        let n = self.cache.len();
        self.cache.clear();
        n
    }

    /// Cached mapped ranges.
    pub fn cached_extents(&self) -> usize {
        self.cache.mapped()
    }

    /// Cached entries, hole markers included: the cache's size.
    pub fn cached_entries(&self) -> usize {
        self.cache.len()
    }

    /// The mapping is about to change in `range`: its cached entries go.
    pub fn forget_mapped(&mut self, range: Range<u64>) {
        self.cache.forget(range);
    }

    /// ext4_map_blocks without create: what block `lblk` is, from the cache
    /// or else from `tree`, cached. A mapped answer is the whole range.
    pub fn lookup(&mut self, lblk: u64, tree: &mut (impl ExtentSource + ?Sized)) -> Result<Found> {
        Ok(self.cache.lookup(lblk, tree)?.0)
    }

    /// The mapped pieces of `range` in order, looked up through the cache.
    pub fn mapped_in(&mut self, range: Range<u64>, tree: &mut (impl ExtentSource + ?Sized)) -> Result<Vec<Piece>> {
        let mut out = Vec::new();
        let mut pos = range.start;
        loop {
            pos = self.cache.walk(pos, range.end, &mut out);
            if pos >= range.end {
                break;
            }
            let next = match self.cache.fill(pos, tree)? {
                Found::Mapped(p) => {
                    let end = (p.logical + p.len).min(range.end);
                    out.push(Piece { logical: pos, len: end - pos, physical: p.physical + (pos - p.logical), unwritten: p.unwritten });
                    end
                }
                Found::Hole { end, .. } => end,
            };
            debug_assert!(next > pos, "a lookup must make progress");
            if next <= pos {
                break;
            }
            pos = next;
        }
        Ok(out)
    }

    /// Whether every cached entry still says what `map` says.
    pub fn cache_agrees(&self, map: &ExtentMap) -> bool {
        self.cache.agrees_with(map)
    }

    /// Blocks of `range` neither mapped in `map` nor delayed: what a new
    /// reservation or allocation there must find room for.
    pub fn holes_in(&self, map: &ExtentMap, range: Range<u64>) -> u64 {
        map.holes(range).into_iter().map(|h| (h.end - h.start) - self.delayed_count(h)).sum()
    }

    /// The status of block `lblk`, from this tree and the extent map.
    pub fn status(&self, map: &ExtentMap, lblk: u64) -> ExtentStatus {
        match map.lookup(lblk) {
            Some(p) if p.unwritten => ExtentStatus::Unwritten,
            Some(_) => ExtentStatus::Written,
            None if self.is_delayed(lblk) => ExtentStatus::Delayed,
            None => ExtentStatus::Hole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delayed_extents_count_the_reservation_as_they_come_and_go() {
        let mut es = ExtentStatusTree::new();
        assert_eq!(es.insert_delayed(4..10), 6);
        assert_eq!(es.insert_delayed(8..12), 2, "only blocks not delayed yet are reserved again");
        assert_eq!(es.delayed_blocks(), 8);
        assert_eq!(es.delayed_in(0..100).collect::<Vec<_>>(), vec![4..12]);
        assert_eq!(es.remove_delayed(6..8), 2);
        assert_eq!(es.delayed_in(0..100).collect::<Vec<_>>(), vec![4..6, 8..12]);
        assert_eq!(es.delayed_blocks(), 6);
        assert_eq!(es.remove_delayed(100..200), 0);
    }

    #[test]
    fn status_answers_from_the_map_first_then_the_delayed_extents() {
        let mut map = ExtentMap::new();
        map.insert(0, 2, 1000, false);
        map.insert(2, 2, 2000, true);
        let mut es = ExtentStatusTree::new();
        es.insert_delayed(4..6);
        let got: Vec<ExtentStatus> = (0..7).map(|b| es.status(&map, b)).collect();
        use ExtentStatus::*;
        assert_eq!(got, vec![Written, Written, Unwritten, Unwritten, Delayed, Delayed, Hole]);
        assert_eq!(es.holes_in(&map, 0..10), 4, "blocks 6..10");
    }

    #[test]
    fn shifting_moves_delayed_extents_with_their_blocks_and_drops_cached_ones() {
        let mut es = ExtentStatusTree::new();
        es.insert_delayed(10..12);
        let mut map = ExtentMap::new();
        map.insert(0, 2, 1000, false);
        map.insert(20, 2, 2000, false);
        assert_eq!(es.precache(map.iter()), 2);
        es.shift_from(5, -5).unwrap();
        assert_eq!(es.delayed_in(0..100).collect::<Vec<_>>(), vec![5..7]);
        assert_eq!(es.delayed_blocks(), 2);
        assert_eq!(es.cached_extents(), 1, "the entry before the shift stays");
        assert!(es.cache_agrees(&map));
    }

    #[test]
    fn mapped_pieces_come_through_the_cache_and_fill_it() {
        let mut map = ExtentMap::new();
        map.insert(0, 2, 1000, false);
        map.insert(5, 3, 2000, true);
        let mut es = ExtentStatusTree::new();
        let first = es.mapped_in(1..7, &mut &map).unwrap();
        assert_eq!(first, map.pieces(1..7));
        assert_eq!(es.cached_extents(), 2);
        assert_eq!(es.mapped_in(1..7, &mut &ExtentMap::new()).unwrap(), first, "a second pass needs no tree");
    }
}
