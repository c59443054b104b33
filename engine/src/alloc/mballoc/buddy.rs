//! A group's free space as mballoc sees it: free runs, and the buddy
//! counts derived from them.
//!
//! ext4 keeps a bitmap per order (a clear bit is a free aligned chunk of
//! 2^k clusters whose buddy is not free too) and `bb_counters[k]`, the
//! number of such chunks. A free run splits into exactly those chunks by
//! greedy decomposition (at each position, the largest aligned power of
//! two that fits, capped at the top order), so runs are stored and chunks
//! computed: the same answers with one map instead of 14 bitmaps.
//!
//! "Free" here is the in-core view: free on disk, not held by an
//! uncommitted free, not in a preallocation.

use std::collections::BTreeMap;

/// Orders a buddy can have: 0..=bs_bits+1, and bs_bits is at most 16.
pub const ORDERS: usize = 18;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupBuddy {
    /// start -> length of each free run (group-relative clusters), never touching.
    runs: BTreeMap<u32, u32>,
    free: u32,
    counters: [u32; ORDERS],
    /// The top order (ext4: blocksize_bits + 1).
    top: u8,
}

/// The aligned chunks of the free run `start..start + len`, as (start, order).
pub fn chunks(start: u32, len: u32, top: u8) -> impl Iterator<Item = (u32, u8)> {
    let end = start + len;
    let mut at = start;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let align = if at == 0 { u32::from(top) } else { at.trailing_zeros().min(u32::from(top)) };
        let fit = 31 - (end - at).leading_zeros();
        let order = align.min(fit) as u8;
        let chunk = (at, order);
        at += 1 << order;
        Some(chunk)
    })
}

impl GroupBuddy {
    /// A buddy with no free space; `top` is blocksize_bits + 1.
    pub fn new(top: u8) -> Self {
        debug_assert!(usize::from(top) < ORDERS);
        GroupBuddy { runs: BTreeMap::new(), free: 0, counters: [0; ORDERS], top }
    }

    /// Free clusters (bb_free).
    pub fn free(&self) -> u32 {
        self.free
    }

    /// Free runs (bb_fragments).
    pub fn fragments(&self) -> u32 {
        self.runs.len() as u32
    }

    /// Chunks of order `k` (bb_counters[k]).
    pub fn counter(&self, k: usize) -> u32 {
        self.counters.get(k).copied().unwrap_or(0)
    }

    /// The largest order with a free chunk (bb_largest_free_order).
    pub fn largest_free_order(&self) -> Option<u8> {
        (0..=self.top).rev().find(|&k| self.counters[usize::from(k)] > 0)
    }

    /// bb_free / bb_fragments, 0 when nothing is free.
    pub fn avg_fragment(&self) -> u32 {
        self.free.checked_div(self.fragments()).unwrap_or(0)
    }

    pub fn top(&self) -> u8 {
        self.top
    }

    /// Free runs in group order.
    pub fn runs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.runs.iter().map(|(&s, &l)| (s, l))
    }

    /// The free run holding `pos`, if it is free.
    pub fn run_at(&self, pos: u32) -> Option<(u32, u32)> {
        let (&s, &l) = self.runs.range(..=pos).next_back()?;
        (pos < s + l).then_some((s, l))
    }

    /// Whether every cluster of `start..start + len` is free.
    pub fn is_free(&self, start: u32, len: u32) -> bool {
        self.run_at(start).is_some_and(|(s, l)| start + len <= s + l)
    }

    fn count(&mut self, start: u32, len: u32, add: bool) {
        for (_, k) in chunks(start, len, self.top) {
            let c = &mut self.counters[usize::from(k)];
            *c = if add { *c + 1 } else { *c - 1 };
        }
        self.free = if add { self.free + len } else { self.free - len };
    }

    fn put(&mut self, start: u32, len: u32) {
        if len > 0 {
            self.runs.insert(start, len);
            self.count(start, len, true);
        }
    }

    fn drop_run(&mut self, start: u32) -> u32 {
        let len = self.runs.remove(&start).unwrap_or(0);
        self.count(start, len, false);
        len
    }

    /// Marks `start..start + len` used (mb_mark_used); false, changing
    /// nothing, unless all of it was free.
    pub fn mark_used(&mut self, start: u32, len: u32) -> bool {
        let Some((s, l)) = self.run_at(start) else { return false };
        if len == 0 || start + len > s + l {
            return false;
        }
        self.drop_run(s);
        self.put(s, start - s);
        self.put(start + len, s + l - start - len);
        true
    }

    /// Marks `start..start + len` free (mb_free_blocks), merging with its
    /// neighbours; false, changing nothing, if any of it was free already.
    pub fn mark_free(&mut self, start: u32, len: u32) -> bool {
        if len == 0 {
            return true;
        }
        let end = start + len;
        if let Some((&s, &l)) = self.runs.range(..end).next_back() {
            if s + l > start {
                return false;
            }
        }
        let (mut lo, mut hi) = (start, end);
        if let Some((&s, &l)) = self.runs.range(..start).next_back() {
            if s + l == start {
                lo = s;
                self.drop_run(s);
            }
        }
        if self.runs.contains_key(&end) {
            hi = end + self.drop_run(end);
        }
        self.put(lo, hi - lo);
        true
    }

    /// mb_find_extent: from the free cluster `pos`, the chunk holding it
    /// and the chunks after it until `needed` is reached or the run ends.
    /// The answer may pass `needed` (a chunk is taken whole). 0 if `pos`
    /// is not free.
    pub fn extent_at(&self, pos: u32, needed: u32) -> u32 {
        let Some((s, l)) = self.run_at(pos) else { return 0 };
        let mut len = 0u32;
        for (c, k) in chunks(s, l, self.top) {
            let end = c + (1 << k);
            if end <= pos {
                continue;
            }
            len += end - c.max(pos);
            if len >= needed {
                break;
            }
        }
        len
    }

    /// The first free chunk of exactly order `k`, by position.
    pub fn first_chunk_of_order(&self, k: u8) -> Option<u32> {
        if self.counter(usize::from(k)) == 0 {
            return None;
        }
        self.runs.iter().find_map(|(&s, &l)| chunks(s, l, self.top).find(|&(_, o)| o == k).map(|(c, _)| c))
    }

    /// Recomputes the counts from the runs: what `debug_assert!`s compare.
    pub fn recount(&self) -> GroupBuddy {
        let mut fresh = GroupBuddy::new(self.top);
        for (s, l) in self.runs() {
            fresh.put(s, l);
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_run_splits_into_aligned_chunks() {
        let got: Vec<_> = chunks(3, 14, 13).collect();
        assert_eq!(got, vec![(3, 0), (4, 2), (8, 3), (16, 0)]);
        assert_eq!(chunks(0, 1 << 15, 13).count(), 4, "capped at the top order");
    }

    #[test]
    fn find_extent_takes_chunks_whole() {
        let mut b = GroupBuddy::new(13);
        b.mark_free(0, 100);
        // The chunk at 0 is 64 long: asking for 16 gets all of it.
        assert_eq!(b.extent_at(0, 16), 64);
        assert_eq!(b.extent_at(64, 16), 32);
        assert_eq!(b.extent_at(96, 16), 4, "the run ends");
        assert_eq!(b.extent_at(70, 40), 30, "from inside a chunk to the run's end");
        assert_eq!(b.extent_at(100, 1), 0);
        assert_eq!(b.first_chunk_of_order(5), Some(64));
        assert_eq!(b.largest_free_order(), Some(6));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]
        /// After any frees and uses the runs equal a plain bitmap's and
        /// the counts equal a fresh decomposition of them.
        #[test]
        fn runs_and_counts_follow_a_bitmap(steps in prop::collection::vec((0u32..500, 1u32..80, any::<bool>()), 1..80)) {
            let mut b = GroupBuddy::new(13);
            let mut bits = vec![false; 600];
            for (start, len, free) in steps {
                let range = start as usize..(start + len) as usize;
                // bits[i]: cluster i is free.
                let expect = if free { range.clone().all(|i| !bits[i]) } else { range.clone().all(|i| bits[i]) };
                let ok = if free { b.mark_free(start, len) } else { b.mark_used(start, len) };
                prop_assert_eq!(ok, expect);
                if ok {
                    for i in range {
                        bits[i] = free;
                    }
                }
                let mut runs = Vec::new();
                let mut i = 0;
                while i < bits.len() {
                    if bits[i] {
                        let s = i;
                        while i < bits.len() && bits[i] { i += 1; }
                        runs.push((s as u32, (i - s) as u32));
                    } else {
                        i += 1;
                    }
                }
                prop_assert_eq!(b.runs().collect::<Vec<_>>(), runs);
                prop_assert_eq!(&b.recount(), &b);
            }
        }
    }
}
