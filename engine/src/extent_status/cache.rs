//! The extent status cache of one inode: written, unwritten and hole
//! ranges with their physical blocks, as ext4 keeps them beside the delayed
//! ones (EXTENT_STATUS_WRITTEN, _UNWRITTEN, _HOLE). A lookup asks here
//! first; a miss asks the tree behind ([`ExtentSource`]) and caches what it
//! found, the hole up to the next extent included, as ext4_map_blocks does.
//! FIEMAP_FLAG_CACHE loads every extent and hole at once (ext4_ext_precache).
//!
//! Layout, kept small because a million-extent file caches a million
//! entries: one 12-byte [`Entry`] per mapped range, keyed by its first block
//! (ext4's lblk is 32 bits). A hole is not an entry of its own: the entry
//! after it carries `HOLE_BEFORE`, "the blocks from the previous entry's
//! end (or 0) to here are a hole". Where a hole has no mapped range on a
//! side, a zero-length marker entry stands there. So a file of alternating
//! extents and holes costs one entry per extent.
//!
//! Invariants:
//! - entries are disjoint, in order; a mapped entry says what the tree
//!   says for its blocks, and so does a hole;
//! - every change to the mapping drops the entries it touches
//!   ([`StatusCache::forget`], as ext4_es_remove_extent does): an entry is
//!   never trimmed, only dropped, since a smaller cache is never a wrong one.

use std::collections::BTreeMap;
use std::ops::Range;

use super::source::{ExtentSource, Found};
use crate::error::Result;
use crate::extent_tree::map::EXT_MAX_BLOCKS;
use crate::extent_tree::{ExtentMap, Piece};
use crate::format::extent::MAX_PHYSICAL;

const UNWRITTEN: u32 = 1 << 31;
const HOLE_BEFORE: u32 = 1 << 30;
const PHYSICAL_HI: u32 = 0xFFFF;

/// `len` blocks at physical `pblk_lo | (hi & 0xFFFF) << 32`; the top bits
/// of `hi` are the flags. `len` 0 is a marker with no blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    len: u32,
    pblk_lo: u32,
    hi: u32,
}

impl Entry {
    fn new(len: u32, pblk: u64, unwritten: bool, hole_before: bool) -> Entry {
        debug_assert!(pblk <= MAX_PHYSICAL);
        let flags = if unwritten { UNWRITTEN } else { 0 } | if hole_before { HOLE_BEFORE } else { 0 };
        Entry { len, pblk_lo: pblk as u32, hi: ((pblk >> 32) as u32 & PHYSICAL_HI) | flags }
    }

    fn marker(hole_before: bool) -> Entry {
        Entry::new(0, 0, false, hole_before)
    }

    fn pblk(self) -> u64 {
        u64::from(self.pblk_lo) | u64::from(self.hi & PHYSICAL_HI) << 32
    }

    fn unwritten(self) -> bool {
        self.hi & UNWRITTEN != 0
    }

    fn hole_before(self) -> bool {
        self.hi & HOLE_BEFORE != 0
    }

    fn with_hole_before(self, hole: bool) -> Entry {
        Entry { hi: if hole { self.hi | HOLE_BEFORE } else { self.hi & !HOLE_BEFORE }, ..self }
    }

    fn piece(self, key: u32) -> Piece {
        Piece { logical: u64::from(key), len: u64::from(self.len), physical: self.pblk(), unwritten: self.unwritten() }
    }

    /// Whether `next`, starting where this ends, continues it on disk.
    fn continues_into(self, next: Entry) -> bool {
        self.len > 0 && next.len > 0 && self.unwritten() == next.unwritten() && self.pblk() + u64::from(self.len) == next.pblk() && self.len.checked_add(next.len).is_some()
    }
}

/// Cached ranges of one inode by first logical block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusCache {
    entries: BTreeMap<u32, Entry>,
}

/// A cacheable block number: ext4's logical blocks end at EXT_MAX_BLOCKS.
fn key(lblk: u64) -> Option<u32> {
    u32::try_from(lblk).ok().filter(|_| lblk <= EXT_MAX_BLOCKS)
}

impl StatusCache {
    /// Entries held, markers included: what the cache's memory is.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Mapped ranges held.
    pub fn mapped(&self) -> usize {
        self.entries.values().filter(|e| e.len > 0).count()
    }

    /// What block `lblk` is, from the cache alone.
    fn hit(&self, lblk: u64) -> Option<Found> {
        let k = key(lblk).filter(|&k| k < u32::MAX)?;
        if let Some((&pk, e)) = self.entries.range(..=k).next_back() {
            if u64::from(pk) + u64::from(e.len) > lblk {
                return Some(Found::Mapped(e.piece(pk)));
            }
        }
        let (&nk, n) = self.entries.range(k + 1..).next()?;
        let start = self.entries.range(..=k).next_back().map_or(0, |(&pk, p)| u64::from(pk) + u64::from(p.len));
        n.hole_before().then_some(Found::Hole { start, end: u64::from(nk) })
    }

    /// What block `lblk` is: from the cache, else from `source`, cached.
    /// A mapped answer is the whole cached range holding `lblk`.
    pub fn lookup(&mut self, lblk: u64, source: &mut (impl ExtentSource + ?Sized)) -> Result<(Found, bool)> {
        if let Some(f) = self.hit(lblk) {
            return Ok((f, true));
        }
        Ok((self.fill(lblk, source)?, false))
    }

    /// Answers `pos..end` from the cache alone, in one pass over its
    /// entries, as far as it knows every block: pushes the mapped pieces
    /// (clipped) and returns where its knowledge stopped.
    pub fn walk(&self, mut pos: u64, end: u64, out: &mut Vec<Piece>) -> u64 {
        let Some(k) = key(pos).filter(|&k| k < u32::MAX) else { return pos };
        let from = self.entries.range(..=k).next_back().map_or(0, |(&pk, _)| pk);
        for (&ek, e) in self.entries.range(from..) {
            let start = u64::from(ek);
            if start > pos {
                if !e.hole_before() {
                    break;
                }
                pos = start;
            }
            if pos >= end {
                break;
            }
            let e_end = start + u64::from(e.len);
            if e_end > pos {
                let stop = e_end.min(end);
                out.push(Piece { logical: pos, len: stop - pos, physical: e.pblk() + (pos - start), unwritten: e.unwritten() });
                pos = stop;
            }
        }
        pos.min(end)
    }

    /// A miss at `lblk`: asks `source` and caches what it found. A hole
    /// is answered as cached: cut to the blocks no cached range holds.
    pub fn fill(&mut self, lblk: u64, source: &mut (impl ExtentSource + ?Sized)) -> Result<Found> {
        let found = source.find(lblk)?;
        Ok(match found {
            Found::Mapped(p) => {
                self.insert_mapped(self.clip_to_gap(p, lblk));
                found
            }
            Found::Hole { start, end } => {
                let (start, end) = self.clip_hole_to_gap(start.min(lblk), end, lblk);
                self.insert_hole(start, end);
                Found::Hole { start, end }
            }
        })
    }

    /// `p` (holding `lblk`, a miss) cut to the blocks around `lblk` no
    /// entry holds: a run that grew since part of it was cached overlaps
    /// that part, which still says the truth.
    fn clip_to_gap(&self, p: Piece, lblk: u64) -> Piece {
        let Some(k) = key(lblk).filter(|&k| k < u32::MAX) else { return p };
        let before = self.entries.range(..=k).next_back().map_or(0, |(&pk, e)| u64::from(pk) + u64::from(e.len));
        let after = self.entries.range(k + 1..).next().map_or(u64::MAX, |(&nk, _)| u64::from(nk));
        let (start, end) = (p.logical.max(before), (p.logical + p.len).min(after));
        Piece { logical: start, len: end - start, physical: p.physical + (start - p.logical), unwritten: p.unwritten }
    }

    /// A hole around `lblk` (a miss) cut to the blocks no cached mapped
    /// range holds. A consistent tree never reports a hole over a cached
    /// range; a hostile one (index ranges that disagree with their leaves)
    /// can, and the cache must stay disjoint then too.
    fn clip_hole_to_gap(&self, start: u64, end: u64, lblk: u64) -> (u64, u64) {
        let Some(k) = key(lblk).filter(|&k| k < u32::MAX) else { return (start, end) };
        let before = self.entries.range(..=k).rev().find(|(_, e)| e.len > 0).map_or(0, |(&pk, e)| u64::from(pk) + u64::from(e.len));
        let after = self.entries.range(k + 1..).find(|(_, e)| e.len > 0).map_or(u64::MAX, |(&nk, _)| u64::from(nk));
        (start.max(before), end.min(after))
    }

    /// Caches mapped range `p`, merged with touching neighbours that
    /// continue it on disk (ext4_es_try_to_merge_left/right).
    fn insert_mapped(&mut self, p: Piece) {
        let (Some(k), Ok(len)) = (key(p.logical), u32::try_from(p.len)) else { return };
        if len == 0 || p.logical + p.len > EXT_MAX_BLOCKS || p.physical > MAX_PHYSICAL || p.physical + p.len > MAX_PHYSICAL + 1 {
            return;
        }
        debug_assert!(self.entries.range(k + 1..).next().is_none_or(|(&nk, _)| u64::from(nk) >= p.logical + p.len), "a cached entry overlaps a mapped range the tree reports");
        let hole_before = match self.entries.get(&k) {
            Some(e) if e.len == 0 => e.hole_before(),
            Some(_) => {
                debug_assert!(false, "a mapped entry was a miss");
                return;
            }
            None => false,
        };
        let mut at = k;
        let mut entry = Entry::new(len, p.physical, p.unwritten, hole_before);
        if let Some((&pk, &prev)) = self.entries.range(..k).next_back() {
            if u64::from(pk) + u64::from(prev.len) == p.logical && prev.continues_into(entry) {
                self.entries.remove(&k);
                at = pk;
                entry = Entry { len: prev.len + entry.len, ..prev };
            }
        }
        let end = u64::from(at) + u64::from(entry.len);
        if let Some(ek) = key(end) {
            match self.entries.get(&ek).copied() {
                Some(next) if entry.continues_into(next) => {
                    self.entries.remove(&ek);
                    entry.len += next.len;
                }
                // A marker where a range now ends marks nothing.
                Some(next) if next.len == 0 => {
                    self.entries.remove(&ek);
                }
                _ => {}
            }
        }
        self.entries.insert(at, entry);
    }

    /// Caches `start..end` as a hole (clipped to the cacheable blocks).
    /// Where an entry already reaches past `start`, the hole starts at its end.
    fn insert_hole(&mut self, start: u64, end: u64) {
        let end = end.min(EXT_MAX_BLOCKS);
        let Some(s) = key(start).filter(|_| start < end) else { return };
        let e = end as u32;
        // Markers of smaller holes inside this one go: it is one hole now.
        let inside: Vec<u32> = self.entries.range(s + 1..e).map(|(&k, _)| k).collect();
        if inside.iter().any(|k| self.entries.get(k).is_some_and(|x| x.len > 0)) {
            return;
        }
        for k in inside {
            self.entries.remove(&k);
        }
        match self.entries.range(..=s).next_back().map(|(&pk, &p)| (pk, p, u64::from(pk) + u64::from(p.len))) {
            // A marker at `start` that ends a hole: the two holes are one.
            Some((pk, p, _)) if pk == s && p.len == 0 && p.hole_before() => {
                self.entries.remove(&s);
            }
            Some((_, _, prev_end)) if prev_end >= start => {
                if prev_end >= end {
                    return;
                }
            }
            None if start == 0 => {}
            _ => {
                self.entries.insert(s, Entry::marker(false));
            }
        }
        let next = self.entries.get(&e).copied().unwrap_or(Entry::marker(false));
        self.entries.insert(e, next.with_hole_before(true));
    }

    /// Replaces the cache with every run of `map` and the holes between
    /// them; returns how many mapped ranges it holds.
    pub fn load(&mut self, runs: impl IntoIterator<Item = Piece>) -> usize {
        self.entries.clear();
        let mut pos = 0;
        for p in runs {
            self.insert_hole(pos, p.logical);
            self.insert_mapped(p);
            pos = p.logical + p.len;
        }
        self.insert_hole(pos, EXT_MAX_BLOCKS);
        self.mapped()
    }

    /// Drops every entry that overlaps `range`, and the hole the first one
    /// after it records (the hole before it then overlaps the range).
    pub fn forget(&mut self, range: Range<u64>) {
        let end = range.end.min(EXT_MAX_BLOCKS);
        let Some(s) = key(range.start).filter(|_| range.start < end) else { return };
        let e = end as u32;
        let straddling = self.entries.range(..s).next_back().filter(|(&k, p)| u64::from(k) + u64::from(p.len) > range.start).map(|(&k, _)| k);
        let doomed: Vec<u32> = straddling.into_iter().chain(self.entries.range(s..e).map(|(&k, _)| k)).collect();
        for k in doomed {
            self.entries.remove(&k);
        }
        // Its hole now reaches back over the range. A marker stays: it may
        // be where the hole recorded by the entry after it starts.
        if let Some((&nk, &next)) = self.entries.range(e..).next() {
            self.entries.insert(nk, next.with_hole_before(false));
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// The invariant: every entry and every recorded hole is what `map` says.
    pub fn agrees_with(&self, map: &ExtentMap) -> bool {
        let mut prev_end = 0;
        self.entries.iter().all(|(&k, e)| {
            let start = u64::from(k);
            let hole_ok = !e.hole_before() || map.pieces(prev_end..start).is_empty();
            let mapped_ok = e.len == 0 || map.pieces(start..start + u64::from(e.len)) == [e.piece(k)];
            prev_end = start + u64::from(e.len);
            hole_ok && mapped_ok
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> ExtentMap {
        let mut m = ExtentMap::new();
        m.insert(0, 4, 100, false);
        m.insert(10, 6, 200, true);
        m.insert(30, 2, 300, false);
        m
    }

    /// Looks `lblk` up through the cache: (what, whether it was a hit).
    fn look(c: &mut StatusCache, m: &ExtentMap, lblk: u64) -> (Found, bool) {
        c.lookup(lblk, &mut &*m).unwrap()
    }

    #[test]
    fn a_run_that_grew_past_a_cached_part_is_cached_around_it() {
        let mut m = ExtentMap::new();
        m.insert(10, 10, 110, false);
        let mut c = StatusCache::default();
        look(&mut c, &m, 15);
        m.insert(0, 10, 100, false);
        assert_eq!(m.run_count(), 1, "one run 0..20 now");
        assert_eq!(look(&mut c, &m, 5).0, Found::Mapped(m.run_at(0).unwrap()));
        assert_eq!(c.len(), 1, "the new part merged with the cached one");
        assert_eq!(c.hit(19), Some(Found::Mapped(m.run_at(0).unwrap())));
        assert!(c.agrees_with(&m));
    }

    #[test]
    fn misses_fill_the_cache_with_extents_and_holes_and_then_hit() {
        let m = map();
        let mut c = StatusCache::default();
        assert_eq!(look(&mut c, &m, 2), (Found::Mapped(m.run_at(0).unwrap()), false));
        assert_eq!(look(&mut c, &m, 5), (Found::Hole { start: 4, end: 10 }, false));
        assert_eq!(look(&mut c, &m, 10), (Found::Mapped(m.run_at(10).unwrap()), false));
        assert_eq!(c.len(), 2, "the hole 4..10 rides on the entry at 10");
        assert_eq!(look(&mut c, &m, 4), (Found::Hole { start: 4, end: 10 }, true));
        assert_eq!(look(&mut c, &m, 15), (Found::Mapped(m.run_at(10).unwrap()), true));
        // A hole with nothing cached before it gets a marker at its start.
        assert_eq!(look(&mut c, &m, 40), (Found::Hole { start: 32, end: u64::MAX }, false));
        assert_eq!(look(&mut c, &m, 1 << 31), (Found::Hole { start: 32, end: EXT_MAX_BLOCKS }, true));
        assert_eq!(look(&mut c, &m, 20), (Found::Hole { start: 16, end: 30 }, false));
        assert_eq!(look(&mut c, &m, 31), (Found::Mapped(m.run_at(30).unwrap()), false));
        assert!(c.agrees_with(&m));
        assert_eq!(look(&mut c, &m, 16), (Found::Hole { start: 16, end: 30 }, true));
        assert_eq!(look(&mut c, &m, 35), (Found::Hole { start: 32, end: EXT_MAX_BLOCKS }, true), "the trailing hole's marker went when 30..32 was cached");
        assert_eq!(c.len(), 4, "three extents and the end-of-file marker");
    }

    #[test]
    fn a_walk_answers_what_lookups_would_and_stops_where_knowledge_does() {
        let m = map();
        let mut c = StatusCache::default();
        let mut out = Vec::new();
        assert_eq!(c.walk(0, 40, &mut out), 0, "an empty cache knows nothing");
        c.load(m.iter());
        assert_eq!(c.walk(2, 31, &mut out), 31);
        assert_eq!(out, m.pieces(2..31));
        out.clear();
        assert_eq!(c.walk(20, 1 << 40, &mut out), EXT_MAX_BLOCKS, "known up to the last cacheable block");
        assert_eq!(out, m.pieces(20..40));
        c.forget(17..18);
        out.clear();
        assert_eq!(c.walk(1, 100, &mut out), 16, "the hole 16..30 is no longer known");
        assert_eq!(out, m.pieces(1..16));
    }

    #[test]
    fn touching_ranges_merge_past_the_tree_s_extent_limits() {
        let mut m = ExtentMap::new();
        m.insert(0, 8, 100, false);
        let mut c = StatusCache::default();
        c.insert_mapped(Piece { logical: 0, len: 4, physical: 100, unwritten: false });
        c.insert_mapped(Piece { logical: 4, len: 4, physical: 104, unwritten: false });
        assert_eq!(c.len(), 1);
        assert_eq!(c.hit(6), Some(Found::Mapped(Piece { logical: 0, len: 8, physical: 100, unwritten: false })));
        c.insert_mapped(Piece { logical: 8, len: 2, physical: 500, unwritten: false });
        assert_eq!(c.len(), 2, "physically apart: no merge");
    }

    #[test]
    fn forgetting_drops_whole_entries_and_the_holes_they_bound() {
        let m = map();
        let mut c = StatusCache::default();
        assert_eq!(c.load(m.iter()), 3);
        assert!(c.agrees_with(&m));
        assert_eq!(c.hit(7), Some(Found::Hole { start: 4, end: 10 }));
        c.forget(6..7);
        assert_eq!(c.hit(7), None, "a change inside a hole drops the hole");
        assert_eq!(c.hit(2).map(|f| matches!(f, Found::Mapped(_))), Some(true), "the extent before it stays");
        c.forget(11..12);
        assert_eq!(c.hit(10), None, "the entry at 10..16 is gone, not trimmed");
        assert_eq!(c.hit(20), None, "and so is the hole it ended");
        assert_eq!(c.hit(31).map(|f| matches!(f, Found::Mapped(_))), Some(true));
        // Re-filled from a changed map: the new mapping shows.
        let mut m2 = m.clone();
        m2.insert(20, 1, 900, false);
        assert_eq!(look(&mut c, &m2, 20), (Found::Mapped(m2.run_at(20).unwrap()), false));
        assert!(c.agrees_with(&m2));
        c.forget(0..u64::MAX);
        assert_eq!(c.hit(5), None);
        assert!(c.entries.values().all(|e| e.len == 0 && !e.hole_before()), "only a marker that records nothing is left");
    }

    #[test]
    fn forgetting_before_a_hole_s_start_marker_keeps_that_hole_its_own() {
        let mut m = ExtentMap::new();
        m.insert(0, 4, 100, false);
        m.insert(10, 2, 200, false);
        let mut c = StatusCache::default();
        look(&mut c, &m, 0);
        look(&mut c, &m, 10);
        // The marker at 6 starts the hole 6..10 the entry at 10 records.
        c.insert_hole(6, 10);
        assert_eq!(c.hit(7), Some(Found::Hole { start: 6, end: 10 }));
        c.forget(4..5);
        assert_eq!(c.hit(4), None, "4..6 was never known");
        assert_eq!(c.hit(7), Some(Found::Hole { start: 6, end: 10 }), "the change at 4 says nothing about 6..10");
        m.insert(4, 1, 900, false);
        assert!(c.agrees_with(&m));
    }

    #[test]
    fn a_stale_entry_breaks_the_invariant() {
        let mut m = map();
        let mut c = StatusCache::default();
        c.load(m.iter());
        m.insert(5, 1, 700, false);
        assert!(!c.agrees_with(&m), "a block mapped in a cached hole");
        let mut m = map();
        m.set_state(0..2, true);
        assert!(!c.agrees_with(&m), "a state change the cache was not told of");
    }

    /// A hostile tree may report a hole over what it reported mapped a
    /// lookup before (leaves that disagree with their index): the cache
    /// keeps the range and caches only the hole beside it.
    #[test]
    fn a_hole_reported_over_a_cached_range_is_cut_around_it() {
        let mut m = ExtentMap::new();
        m.insert(100, 10, 500, false);
        let mut c = StatusCache::default();
        look(&mut c, &m, 105);
        // The tree now claims 40..200 is a hole.
        struct Liar;
        impl ExtentSource for Liar {
            fn find(&mut self, _: u64) -> Result<Found> {
                Ok(Found::Hole { start: 40, end: 200 })
            }
        }
        assert_eq!(c.lookup(50, &mut Liar).unwrap(), (Found::Hole { start: 40, end: 100 }, false));
        assert_eq!(c.hit(105), Some(Found::Mapped(m.run_at(100).unwrap())), "the cached range stays");
        assert_eq!(c.hit(60), Some(Found::Hole { start: 40, end: 100 }), "the hole stops where it begins");
        assert_eq!(c.lookup(150, &mut Liar).unwrap(), (Found::Hole { start: 110, end: 200 }, false));
        assert_eq!(c.hit(150), Some(Found::Hole { start: 110, end: 200 }));
    }

    #[test]
    fn an_entry_is_twelve_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 12);
        let e = Entry::new(7, MAX_PHYSICAL, true, true);
        assert_eq!((e.len, e.pblk(), e.unwritten(), e.hole_before()), (7, MAX_PHYSICAL, true, true));
        assert!(!e.with_hole_before(false).hole_before());
    }
}
