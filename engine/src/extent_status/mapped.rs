//! The extent status cache's mapped entries: written and unwritten extents
//! with their physical blocks, as ext4 keeps them beside the delayed ones
//! (EXTENT_STATUS_WRITTEN and _UNWRITTEN). FIEMAP_FLAG_CACHE loads every run
//! of the inode's mapping (ext4_ext_precache); a lookup asks here first and
//! falls back to the extent map, as ext4_map_blocks asks the cache before it
//! walks the tree.
//!
//! Invariant: an entry says what the extent map says for its blocks. Every
//! change to the map drops the entries it touches ([`MappedCache::forget`],
//! as ext4_es_remove_extent does); an entry is never trimmed, only dropped,
//! since a smaller cache is never a wrong one.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::extent_tree::{ExtentMap, Piece};

/// Cached mapped extents of one inode, disjoint, by first logical block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MappedCache {
    entries: BTreeMap<u64, Piece>,
}

impl MappedCache {
    /// Replaces the cache with every run of `map`; returns how many.
    pub fn load(&mut self, map: &ExtentMap) -> usize {
        self.entries = map.iter().map(|p| (p.logical, p)).collect();
        self.entries.len()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Drops every entry that overlaps `range`.
    pub fn forget(&mut self, range: Range<u64>) {
        if range.start >= range.end {
            return;
        }
        let straddling = self.entries.range(..range.start).next_back().filter(|(l, p)| *l + p.len > range.start).map(|(l, _)| *l);
        let doomed: Vec<u64> = straddling.into_iter().chain(self.entries.range(range).map(|(l, _)| *l)).collect();
        for l in doomed {
            self.entries.remove(&l);
        }
    }

    /// The entry holding `lblk`, clipped to start there.
    fn at(&self, lblk: u64) -> Option<Piece> {
        let (&l, p) = self.entries.range(..=lblk).next_back()?;
        (lblk < l + p.len).then(|| Piece { logical: lblk, len: l + p.len - lblk, physical: p.physical + (lblk - l), unwritten: p.unwritten })
    }

    /// The mapped pieces of `range` in order: from the entry holding a block
    /// where there is one, else from `map`. Only blocks `map` maps are
    /// looked up, so a stale entry can change a state, never add blocks.
    pub fn lookup(&self, map: &ExtentMap, range: Range<u64>) -> Vec<Piece> {
        let mut out = Vec::new();
        for p in map.pieces(range) {
            let end = p.logical + p.len;
            let mut pos = p.logical;
            while pos < end {
                let piece = match self.at(pos) {
                    Some(cached) => Piece { len: cached.len.min(end - pos), ..cached },
                    None => {
                        let next = self.entries.range(pos..end).next().map_or(end, |(l, _)| *l);
                        Piece { logical: pos, len: next - pos, physical: p.physical + (pos - p.logical), unwritten: p.unwritten }
                    }
                };
                debug_assert!(piece.len > 0, "a lookup must make progress");
                pos += piece.len;
                out.push(piece);
            }
        }
        out
    }

    /// The invariant: every entry is exactly what `map` maps there.
    pub fn agrees_with(&self, map: &ExtentMap) -> bool {
        self.entries.values().all(|e| map.pieces(e.logical..e.logical + e.len) == [*e])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map() -> ExtentMap {
        let mut m = ExtentMap::new();
        m.insert(0, 4, 100, false);
        m.insert(10, 6, 200, true);
        m
    }

    #[test]
    fn a_loaded_cache_answers_what_the_map_does_and_forgetting_drops_whole_entries() {
        let m = map();
        let mut c = MappedCache::default();
        assert_eq!(c.load(&m), 2);
        assert!(c.agrees_with(&m));
        assert_eq!(c.lookup(&m, 2..12), m.pieces(2..12));
        c.forget(3..4);
        assert_eq!(c.len(), 1, "the entry at 0..4 is gone, not trimmed");
        c.forget(16..20);
        assert_eq!(c.len(), 1, "a range past an entry leaves it");
        assert_eq!(c.lookup(&m, 0..16), m.pieces(0..16), "misses fall back to the map");
        c.forget(0..u64::MAX);
        assert!(c.is_empty());
    }

    #[test]
    fn lookups_split_at_entry_boundaries_and_a_stale_entry_shows() {
        let mut m = ExtentMap::new();
        m.insert(0, 4, 100, false);
        let mut c = MappedCache::default();
        c.load(&m);
        // The run grows past the cached entry: two pieces, the same blocks.
        m.insert(4, 4, 104, false);
        assert!(c.agrees_with(&m));
        let got = c.lookup(&m, 0..8);
        assert_eq!(got.iter().map(|p| (p.logical, p.len, p.physical)).collect::<Vec<_>>(), vec![(0, 4, 100), (4, 4, 104)]);
        // A state change the cache was not told of: the invariant catches it.
        m.set_state(0..2, true);
        assert!(!c.agrees_with(&m));
    }
}
