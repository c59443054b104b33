//! A map from disjoint half-open ranges of `u64` to values: the model's per-file
//! allocation state, sparse enough for a file with a terabyte of preallocation.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint ranges, each with a value. Adjacent ranges with equal values merge,
/// so equal contents always have one representation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeMap<V> {
    /// start -> (end, value); invariant: disjoint, non-empty, neighbours differ or are apart.
    ranges: BTreeMap<u64, (u64, V)>,
}

impl<V> Default for RangeMap<V> {
    fn default() -> Self {
        RangeMap { ranges: BTreeMap::new() }
    }
}

impl<V: Clone + Eq> RangeMap<V> {
    pub fn new() -> Self {
        RangeMap { ranges: BTreeMap::new() }
    }

    pub fn get(&self, pos: u64) -> Option<&V> {
        let (_, (end, v)) = self.ranges.range(..=pos).next_back()?;
        (pos < *end).then_some(v)
    }

    /// Sets `range` to `value`, replacing whatever was there.
    pub fn insert(&mut self, range: Range<u64>, value: V) {
        if range.is_empty() {
            return;
        }
        self.remove(range.clone());
        self.ranges.insert(range.start, (range.end, value));
        self.merge_around(range.start);
    }

    /// Clears `range`.
    pub fn remove(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        self.split_at(range.start);
        self.split_at(range.end);
        let inside: Vec<u64> = self.ranges.range(range.start..range.end).map(|(s, _)| *s).collect();
        for s in inside {
            self.ranges.remove(&s);
        }
    }

    /// The pieces of stored ranges that fall inside `range`, clipped, in order.
    pub fn overlapping(&self, range: Range<u64>) -> Vec<(Range<u64>, V)> {
        let mut out = Vec::new();
        if range.is_empty() {
            return out;
        }
        let first = self.ranges.range(..=range.start).next_back().map(|(s, _)| *s).unwrap_or(range.start);
        for (s, (e, v)) in self.ranges.range(first..range.end) {
            let lo = (*s).max(range.start);
            let hi = (*e).min(range.end);
            if lo < hi {
                out.push((lo..hi, v.clone()));
            }
        }
        out
    }

    /// The parts of `range` no stored range covers, in order.
    pub fn gaps(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut at = range.start;
        for (r, _) in self.overlapping(range.clone()) {
            if r.start > at {
                out.push(at..r.start);
            }
            at = r.end;
        }
        if at < range.end {
            out.push(at..range.end);
        }
        out
    }

    pub fn iter(&self) -> impl Iterator<Item = (Range<u64>, &V)> {
        self.ranges.iter().map(|(s, (e, v))| (*s..*e, v))
    }

    /// Total length covered.
    pub fn covered(&self) -> u64 {
        self.ranges.iter().map(|(s, (e, _))| e - s).sum()
    }

    /// Moves everything at or after `from` by `delta` (down when negative).
    /// The caller clears the range that would be overwritten.
    pub fn shift_from(&mut self, from: u64, delta: i64) {
        self.split_at(from);
        shift_entries(&mut self.ranges, from, delta);
        let starts: Vec<u64> = self.ranges.keys().copied().collect();
        for s in starts {
            if self.ranges.contains_key(&s) {
                self.merge_around(s);
            }
        }
    }

    /// Replaces values in `range` through `f` (None clears). A value `f`
    /// leaves as it is is not written again: the map is merged already, so
    /// the result is the same, without the churn (the model's sync settles
    /// every file this way).
    pub fn update(&mut self, range: Range<u64>, mut f: impl FnMut(&V) -> Option<V>) {
        for (r, v) in self.overlapping(range) {
            match f(&v) {
                Some(nv) if nv == v => {}
                Some(nv) => self.insert(r, nv),
                None => self.remove(r),
            }
        }
    }

    fn split_at(&mut self, pos: u64) {
        let Some((&s, (e, v))) = self.ranges.range(..pos).next_back() else { return };
        if *e > pos {
            let (e, v) = (*e, v.clone());
            self.ranges.insert(s, (pos, v.clone()));
            self.ranges.insert(pos, (e, v));
        }
    }

    fn merge_around(&mut self, start: u64) {
        let Some((end, value)) = self.ranges.get(&start).cloned() else { return };
        let mut start = start;
        let mut end = end;
        if let Some((&ps, (pe, pv))) = self.ranges.range(..start).next_back() {
            if *pe == start && *pv == value {
                self.ranges.remove(&start);
                start = ps;
            }
        }
        if let Some((ne, nv)) = self.ranges.get(&end).cloned() {
            if nv == value {
                self.ranges.remove(&end);
                end = ne;
            }
        }
        self.ranges.insert(start, (end, value));
    }
}

/// Moves every entry of a start -> (end, value) map that starts at or after
/// `from` by `delta`. The caller has split any entry across `from` and
/// cleared what a downward move lands on.
pub(crate) fn shift_entries<V>(map: &mut BTreeMap<u64, (u64, V)>, from: u64, delta: i64) {
    for (s, (e, v)) in map.split_off(&from) {
        let ns = s.checked_add_signed(delta).expect("shift keeps ranges in u64");
        let ne = e.checked_add_signed(delta).expect("shift keeps ranges in u64");
        debug_assert!(map.range(..ne).next_back().is_none_or(|(_, (pe, _))| *pe <= ns), "shift onto an occupied range");
        map.insert(ns, (ne, v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Edit {
        Insert(u64, u64, u8),
        Remove(u64, u64),
        Shift(u64, i8),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            (0u64..64, 0u64..16, 0u8..3).prop_map(|(s, l, v)| Edit::Insert(s, s + l, v)),
            (0u64..64, 0u64..16).prop_map(|(s, l)| Edit::Remove(s, s + l)),
            (0u64..64, -8i8..8).prop_map(|(f, d)| Edit::Shift(f, d)),
        ]
    }

    proptest! {
        /// The range map behaves exactly like one value per position.
        #[test]
        fn matches_a_map_per_position(edits in proptest::collection::vec(edit(), 0..40)) {
            let mut rm = RangeMap::new();
            let mut naive: BTreeMap<u64, u8> = BTreeMap::new();
            for e in edits {
                match e {
                    Edit::Insert(s, t, v) => {
                        rm.insert(s..t, v);
                        for p in s..t { naive.insert(p, v); }
                    }
                    Edit::Remove(s, t) => {
                        rm.remove(s..t);
                        for p in s..t { naive.remove(&p); }
                    }
                    Edit::Shift(from, d) => {
                        let d = d as i64;
                        if d < 0 {
                            if from < d.unsigned_abs() { continue; }
                            // Clear what a downward shift lands on, as callers do.
                            let lo = from - d.unsigned_abs();
                            rm.remove(lo..from);
                            for p in lo..from { naive.remove(&p); }
                        }
                        rm.shift_from(from, d);
                        let moved: Vec<(u64, u8)> = naive.range(from..).map(|(k, v)| (*k, *v)).collect();
                        for (k, _) in &moved { naive.remove(k); }
                        for (k, v) in moved { naive.insert(k.checked_add_signed(d).unwrap(), v); }
                    }
                }
                for p in 0..200 {
                    prop_assert_eq!(rm.get(p), naive.get(&p));
                }
                prop_assert_eq!(rm.covered(), naive.len() as u64);
                // Canonical form: no two adjacent ranges share a value.
                let pieces: Vec<_> = rm.iter().map(|(r, v)| (r, *v)).collect();
                for w in pieces.windows(2) {
                    prop_assert!(!(w[0].0.end == w[1].0.start && w[0].1 == w[1].1));
                }
            }
        }
    }

    #[test]
    fn gaps_are_what_no_range_covers() {
        let mut m = RangeMap::new();
        m.insert(2..4, 'a');
        m.insert(6..7, 'b');
        assert_eq!(m.gaps(0..10), vec![0..2, 4..6, 7..10]);
        assert_eq!(m.gaps(3..6), vec![4..6]);
        assert_eq!(m.gaps(2..4), Vec::<std::ops::Range<u64>>::new());
        let (from, to) = (5, 3);
        assert_eq!(m.gaps(from..to), Vec::<std::ops::Range<u64>>::new(), "a reversed range has none");
    }

    #[test]
    fn overlapping_clips() {
        let mut rm = RangeMap::new();
        rm.insert(10..20, 'a');
        rm.insert(30..40, 'b');
        assert_eq!(rm.overlapping(15..35), vec![(15..20, 'a'), (30..35, 'b')]);
        rm.insert(20..30, 'a');
        assert_eq!(rm.iter().count(), 2);
        assert_eq!(rm.overlapping(0..100).len(), 2);
    }
}
