//! Blocks freed in a transaction that has not committed yet are *held*:
//! free in the bitmaps and counts (so the transaction records the free), but
//! not handed out for new data until it commits. Otherwise a crash could undo
//! the free (a deleted file comes back) while the block already holds another
//! file's data — stale data the model forbids, in data=ordered too.
//!
//! - A group with held blocks gets a second bitmap, the one allocation
//!   scans: in use or held. Taking blocks sets both.
//! - During a commit the engine builds journaled metadata (extent-tree
//!   blocks); those may take held blocks ([`Allocator::set_reuse_held`]),
//!   because their new contents reach home only after the commit.
//! - [`Allocator::release_held`] after the commit frees them for real.

use crate::error::{Error, Result};
use crate::format::bitmap::Bitmap;
use crate::format::{BlockNumber, GroupIndex};

use super::Allocator;

impl Allocator {
    /// Turns holding on (a journaled mount) or off.
    pub fn set_hold_freed(&mut self, on: bool) {
        self.hold_freed = on;
        if !on {
            self.release_held();
        }
    }

    /// Blocks (whole clusters) freed since the last commit and not yet reusable.
    pub fn held_blocks(&self) -> u64 {
        self.held_clusters << self.geo.cluster_bits
    }

    /// Free blocks (whole clusters) an allocation for data may get right now.
    pub fn available_blocks(&self) -> u64 {
        self.free_clusters.saturating_sub(self.held_clusters) << self.geo.cluster_bits
    }

    /// Lets scans take held blocks (metadata built while committing).
    pub fn set_reuse_held(&mut self, on: bool) {
        self.reuse_held = on;
    }

    /// The ranges freed since the last commit (for revokes), emptied.
    pub fn take_freed(&mut self) -> Vec<(BlockNumber, u64)> {
        std::mem::take(&mut self.freed)
    }

    /// Every transaction that freed held blocks committed: reusable now.
    pub fn release_held(&mut self) {
        self.held.clear();
        self.held_clusters = 0;
        self.freed.clear();
    }

    /// The committing transaction committed: the blocks it freed are
    /// reusable. Those freed since it closed (still listed for the running
    /// transaction's revokes) stay held until that one commits.
    pub fn release_committed(&mut self) {
        self.held.clear();
        self.held_clusters = 0;
        for (start, len) in self.freed.clone() {
            self.hold_again(start, len);
        }
    }

    /// Holds `start..start + len` (free in the bitmaps) once more.
    fn hold_again(&mut self, start: BlockNumber, len: u64) {
        let end = start.saturating_add(len);
        let mut b = start;
        while b < end {
            let Some(g) = self.geo.group_of_block(b) else { return };
            let gstart = self.geo.group_first_block(g);
            let piece_end = end.min(gstart + u64::from(self.geo.group_len(g)));
            let bits = self.geo.cluster_bits;
            let (lo, hi) = (((b - gstart) >> bits) as usize, (piece_end - gstart).div_ceil(1 << bits) as usize);
            if let Some(Some(real)) = self.block_bitmaps.get(g as usize) {
                let view = self.held.entry(g).or_insert_with(|| real.clone());
                for i in lo..hi {
                    // A block freed since and taken again is not held.
                    if !real.get(i) && !view.get(i) {
                        view.set(i);
                        self.held_clusters += 1;
                    }
                }
            }
            b = piece_end;
        }
    }

    /// The bitmap allocation scans in group `g`.
    pub(super) fn scan_bitmap(&self, g: GroupIndex) -> Result<&Bitmap> {
        if !self.reuse_held {
            if let Some(bm) = self.held.get(&g) {
                return Ok(bm);
            }
        }
        self.block_bitmap(g)
    }

    /// Marks `start..start + len` of group `g` taken in the held view too,
    /// counting held blocks a commit-time allocation reused.
    pub(super) fn take_held(&mut self, g: GroupIndex, start: u32, len: u32) {
        let Some(view) = self.held.get_mut(&g) else { return };
        let (lo, hi) = (start as usize, (start + len) as usize);
        let reused = (lo..hi).filter(|&i| view.get(i)).count() as u64;
        debug_assert!(self.reuse_held || reused == 0, "a held block in group {g} was handed out");
        view.set_range(lo, hi);
        self.held_clusters = self.held_clusters.saturating_sub(reused);
    }

    /// Checks the held view covers the real bitmap (every used block is
    /// unavailable) and its count matches.
    pub fn check_held(&self) -> std::result::Result<(), String> {
        let mut count = 0u64;
        for (&g, view) in &self.held {
            let real = self.block_bitmap(g).map_err(|e: Error| e.to_string())?;
            let len = self.geo.group_clusters(g) as usize;
            for i in 0..len {
                match (real.get(i), view.get(i)) {
                    (true, false) => return Err(format!("group {g}: cluster {i} in use but free in the held view")),
                    (false, true) => count += 1,
                    _ => {}
                }
            }
        }
        if count != self.held_clusters {
            return Err(format!("{count} clusters held in the views, count says {}", self.held_clusters));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fresh;
    use ext4_model::AllocPolicy;

    #[test]
    fn freed_blocks_are_not_reused_before_release() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        a.set_hold_freed(true);
        let (s, l) = a.alloc_blocks(&mut dev, 1, 64).unwrap().unwrap();
        let free_before = a.totals().free_blocks;
        a.free_blocks(&mut dev, s, l).unwrap();
        assert_eq!(a.totals().free_blocks, free_before + l, "the free counts at once");
        assert_eq!(a.held_blocks(), l);
        assert_eq!(a.available_blocks(), free_before);
        a.check_held().unwrap();
        for _ in 0..20 {
            let (t, n) = a.alloc_blocks(&mut dev, s, 8).unwrap().unwrap();
            assert!(t + n <= s || t >= s + l, "held block {t}+{n} reused before the commit");
        }
        a.check_held().unwrap();
        assert_eq!(a.take_freed(), vec![(s, l)]);
        a.release_held();
        let (t, _) = a.alloc_blocks(&mut dev, s, 8).unwrap().unwrap();
        assert_eq!(t, s, "after the commit the goal is free again");
        a.check_counts().unwrap();
    }

    #[test]
    fn a_commit_releases_only_what_its_transaction_freed() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        a.set_hold_freed(true);
        let (x, xl) = a.alloc_blocks(&mut dev, 1, 32).unwrap().unwrap();
        let (y, yl) = a.alloc_blocks(&mut dev, 1, 32).unwrap().unwrap();
        a.free_blocks(&mut dev, x, xl).unwrap();
        // The transaction that freed x closes; y is freed in the next one.
        assert_eq!(a.take_freed(), vec![(x, xl)]);
        a.free_blocks(&mut dev, y, yl).unwrap();
        a.release_committed();
        assert_eq!(a.held_blocks(), yl, "y's free has not committed");
        a.check_held().unwrap();
        let mut got = Vec::new();
        while let Some((t, n)) = a.alloc_blocks(&mut dev, x, 8).unwrap() {
            assert!(t + n <= y || t >= y + yl, "block {t}+{n} of y reused before its free committed");
            got.push(t);
            if got.len() == 4 {
                break;
            }
        }
        assert_eq!(got[0], x, "x's free committed: its blocks are the goal's again");
        a.check_held().unwrap();
        assert_eq!(a.take_freed(), vec![(y, yl)]);
        a.release_committed();
        assert_eq!(a.held_blocks(), 0);
        a.check_counts().unwrap();
    }

    #[test]
    fn commit_time_metadata_may_reuse_held_blocks() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        a.set_hold_freed(true);
        let (s, l) = a.alloc_blocks(&mut dev, 1, 16).unwrap().unwrap();
        a.free_blocks(&mut dev, s, l).unwrap();
        a.set_reuse_held(true);
        let (t, n) = a.alloc_blocks(&mut dev, s, 4).unwrap().unwrap();
        a.set_reuse_held(false);
        assert_eq!((t, n), (s, 4));
        assert_eq!(a.held_blocks(), l - 4);
        a.check_held().unwrap();
    }

    #[test]
    fn without_a_journal_nothing_is_held() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        let (s, l) = a.alloc_blocks(&mut dev, 1, 16).unwrap().unwrap();
        a.free_blocks(&mut dev, s, l).unwrap();
        assert_eq!(a.held_blocks(), 0);
        assert!(a.take_freed().is_empty());
        assert_eq!(a.alloc_blocks(&mut dev, s, 4).unwrap().unwrap().0, s);
    }
}
