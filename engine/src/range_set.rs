//! A set of disjoint half-open `u64` ranges kept merged in a `BTreeMap`: the
//! used-block map mkfs lays metadata out with, cheap even for 2^32 blocks
//! because it stores runs, not bits.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, merged ranges. Invariant: no two stored ranges overlap or touch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start -> end (exclusive).
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of stored (merged) runs.
    pub fn run_count(&self) -> usize {
        self.ranges.len()
    }

    /// Total number of values covered.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|(s, e)| e - s).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether any value of `r` is already in the set.
    pub fn overlaps(&self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return false;
        }
        if let Some((_, &e)) = self.ranges.range(..=r.start).next_back() {
            if e > r.start {
                return true;
            }
        }
        self.ranges.range(r.start..r.end).next().is_some()
    }

    /// Adds `r`, which must not overlap anything already present. Returns false
    /// (and changes nothing) if it does.
    pub fn insert(&mut self, r: Range<u64>) -> bool {
        if r.start >= r.end {
            return true;
        }
        if self.overlaps(r.clone()) {
            return false;
        }
        let mut start = r.start;
        let mut end = r.end;
        if let Some((&s, &e)) = self.ranges.range(..start).next_back() {
            if e == start {
                start = s;
                self.ranges.remove(&s);
            }
        }
        if let Some(&e) = self.ranges.get(&end) {
            self.ranges.remove(&end);
            end = e;
        }
        self.ranges.insert(start, end);
        true
    }

    /// Adds `r`, merging with whatever it overlaps or touches.
    pub fn add(&mut self, r: Range<u64>) {
        self.remove(r.clone());
        let fitted = self.insert(r);
        debug_assert!(fitted, "a removed range still overlaps");
    }

    /// Takes `r` out of the set, splitting runs it cuts; returns how many
    /// values were in it.
    pub fn remove(&mut self, r: Range<u64>) -> u64 {
        if r.start >= r.end {
            return 0;
        }
        let inside: Vec<Range<u64>> = self.iter_in(r.clone()).collect();
        let mut removed = 0;
        for cut in inside {
            // The stored run holding this piece: the last starting at or before it.
            let Some((&s, &e)) = self.ranges.range(..=cut.start).next_back() else { continue };
            self.ranges.remove(&s);
            if s < cut.start {
                self.ranges.insert(s, cut.start);
            }
            if cut.end < e {
                self.ranges.insert(cut.end, e);
            }
            removed += cut.end - cut.start;
        }
        removed
    }

    /// Moves every value at or after `from` by `delta`. The caller has
    /// emptied what a downward move lands on; `None` (and nothing moved)
    /// if a value would leave u64.
    pub fn shift_from(&mut self, from: u64, delta: i64) -> Option<()> {
        let tail: Vec<Range<u64>> = self.iter_in(from..u64::MAX).collect();
        for r in &tail {
            r.start.checked_add_signed(delta)?;
            r.end.checked_add_signed(delta)?;
        }
        self.remove(from..u64::MAX);
        for r in tail {
            let moved = r.start.checked_add_signed(delta)?..r.end.checked_add_signed(delta)?;
            let fitted = self.insert(moved);
            debug_assert!(fitted, "a shift landed on values still in the set");
        }
        Some(())
    }

    /// The lowest start `>= goal` such that `start..start + len` is free and ends
    /// at or before `limit`.
    pub fn first_fit(&self, goal: u64, len: u64, limit: u64) -> Option<u64> {
        let mut candidate = goal;
        if let Some((_, &e)) = self.ranges.range(..=goal).next_back() {
            candidate = candidate.max(e);
        }
        for (&s, &e) in self.ranges.range(candidate..) {
            if s >= candidate.checked_add(len)? {
                break;
            }
            candidate = candidate.max(e);
        }
        let end = candidate.checked_add(len)?;
        (end <= limit).then_some(candidate)
    }

    /// The gaps (values not in the set) within `goal..limit`, in order.
    pub fn gaps(&self, goal: u64, limit: u64) -> impl Iterator<Item = Range<u64>> + '_ {
        let mut cursor = goal;
        if let Some((_, &e)) = self.ranges.range(..=goal).next_back() {
            cursor = cursor.max(e);
        }
        let mut ranges = self.ranges.range(cursor..);
        let mut done = false;
        std::iter::from_fn(move || {
            while !done && cursor < limit {
                let (gap_end, next_cursor) = match ranges.next() {
                    Some((&s, &e)) => (s.min(limit), e),
                    None => {
                        done = true;
                        (limit, limit)
                    }
                };
                let gap = cursor..gap_end;
                cursor = next_cursor;
                if gap.start < gap.end {
                    return Some(gap);
                }
            }
            None
        })
    }

    /// How many values of `r` are in the set.
    pub fn count_in(&self, r: Range<u64>) -> u64 {
        self.iter_in(r).map(|x| x.end - x.start).sum()
    }

    /// The stored runs clipped to `r`, in order.
    pub fn iter_in(&self, r: Range<u64>) -> impl Iterator<Item = Range<u64>> + '_ {
        let first = self.ranges.range(..=r.start).next_back().map(|(&s, _)| s).unwrap_or(r.start);
        let Range { start, end } = r;
        self.ranges
            .range(first..end.max(first))
            .map(move |(&s, &e)| s.max(start)..e.min(end))
            .filter(|x| x.start < x.end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_merge_and_refuse_overlap() {
        let mut s = RangeSet::new();
        assert!(s.insert(10..20));
        assert!(s.insert(20..25));
        assert!(s.insert(5..10));
        assert_eq!(s.run_count(), 1);
        assert!(!s.insert(24..30), "overlaps 5..25");
        assert!(s.insert(30..40));
        assert_eq!(s.len(), 30);
        assert!(s.overlaps(39..41) && !s.overlaps(25..30));
    }

    #[test]
    fn add_unions_what_it_overlaps_and_touches() {
        let mut s = RangeSet::new();
        s.add(10..20);
        s.add(30..40);
        s.add(15..32);
        assert_eq!(s.iter_in(0..100).collect::<Vec<_>>(), vec![10..40]);
        s.add(40..41);
        s.add(5..6);
        assert_eq!(s.iter_in(0..100).collect::<Vec<_>>(), vec![5..6, 10..41]);
        assert_eq!(s.len(), 32);
    }

    #[test]
    fn first_fit_skips_used_runs_and_respects_limit() {
        let mut s = RangeSet::new();
        s.insert(0..3);
        s.insert(5..10);
        s.insert(12..13);
        assert_eq!(s.first_fit(0, 2, 100), Some(3));
        assert_eq!(s.first_fit(0, 3, 100), Some(13));
        assert_eq!(s.first_fit(6, 1, 100), Some(10));
        assert_eq!(s.first_fit(0, 90, 100), None, "13 + 90 > 100");
        assert_eq!(s.first_fit(u64::MAX - 1, 5, u64::MAX), None, "no overflow");
    }

    #[test]
    fn gaps_are_the_complement() {
        let mut s = RangeSet::new();
        s.insert(0..3);
        s.insert(5..10);
        s.insert(12..13);
        assert_eq!(s.gaps(0, 20).collect::<Vec<_>>(), vec![3..5, 10..12, 13..20]);
        assert_eq!(s.gaps(6, 11).collect::<Vec<_>>(), vec![10..11]);
        assert_eq!(s.gaps(4, 4).count(), 0);
    }

    #[test]
    fn removing_splits_runs_and_shifting_moves_the_tail() {
        let mut s = RangeSet::new();
        s.insert(0..10);
        s.insert(20..30);
        assert_eq!(s.remove(5..25), 10);
        assert_eq!(s.iter_in(0..100).collect::<Vec<_>>(), vec![0..5, 25..30]);
        assert_eq!(s.remove(40..50), 0);
        s.shift_from(3, 10).unwrap();
        assert_eq!(s.iter_in(0..100).collect::<Vec<_>>(), vec![0..3, 13..15, 35..40]);
        s.shift_from(13, -10).unwrap();
        assert_eq!(s.iter_in(0..100).collect::<Vec<_>>(), vec![0..5, 25..30]);
        assert_eq!(s.shift_from(0, -1), None, "0 would move below zero");
        assert_eq!(s.iter_in(0..100).collect::<Vec<_>>(), vec![0..5, 25..30], "and nothing moved");
    }

    #[test]
    fn counts_clip_to_the_query() {
        let mut s = RangeSet::new();
        s.insert(0..10);
        s.insert(20..30);
        assert_eq!(s.count_in(5..25), 10);
        assert_eq!(s.iter_in(5..25).collect::<Vec<_>>(), vec![5..10, 20..25]);
        assert_eq!(s.count_in(10..20), 0);
        assert_eq!(s.count_in(100..200), 0);
    }
}
