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
        let before = self.held_runs_by_group();
        self.held.clear();
        self.held_clusters = 0;
        self.freed.clear();
        self.unhold_in_buddies(before);
    }

    /// Per group with a held view, its held clusters as runs.
    fn held_runs_by_group(&self) -> Vec<(GroupIndex, Vec<(u32, u32)>)> {
        self.held.keys().map(|&g| (g, self.held_runs(g))).collect()
    }

    /// Runs of clusters in group `g` that are free on disk but held.
    fn held_runs(&self, g: GroupIndex) -> Vec<(u32, u32)> {
        let (Some(view), Some(Some(real))) = (self.held.get(&g), self.block_bitmaps.get(g as usize)) else { return Vec::new() };
        let len = self.geo.group_clusters(g) as usize;
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for (i, (v, r)) in view.as_bytes().iter().zip(real.as_bytes()).enumerate() {
            let mut held = v & !r;
            while held != 0 {
                let bit = held.trailing_zeros() as usize;
                held &= held - 1;
                let c = i * 8 + bit;
                if c >= len {
                    break;
                }
                match runs.last_mut() {
                    Some((s, n)) if (*s + *n) as usize == c => *n += 1,
                    _ => runs.push((c as u32, 1)),
                }
            }
        }
        runs
    }

    /// mballoc's view after holds ended: what was held is free, except
    /// what is held again.
    fn unhold_in_buddies(&mut self, before: Vec<(GroupIndex, Vec<(u32, u32)>)>) {
        for (g, runs) in before {
            let again = self.held_runs(g);
            let Some(b) = self.buddies[g as usize].as_mut() else { continue };
            for (s, n) in runs {
                let ok = b.mark_free(s, n);
                debug_assert!(ok, "group {g}: held clusters {s}+{n} were free to mballoc");
            }
            for (s, n) in again {
                let ok = b.mark_used(s, n);
                debug_assert!(ok, "group {g}: clusters {s}+{n} held again were not free");
            }
        }
    }

    /// The committing transaction committed: the blocks it freed are
    /// reusable. Those freed since it closed (still listed for the running
    /// transaction's revokes) stay held until that one commits.
    pub fn release_committed(&mut self) {
        let before = self.held_runs_by_group();
        self.held.clear();
        self.held_clusters = 0;
        for (start, len) in self.freed.clone() {
            self.hold_again(start, len);
        }
        self.unhold_in_buddies(before);
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
    use super::super::Allocator;
    use crate::device_mem::MemDevice;
    use ext4_model::AllocPolicy;

    /// Allocates until the filesystem is full; the runs it got.
    fn fill(dev: &mut MemDevice, a: &mut Allocator) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        while let Some(r) = a.alloc_blocks(dev, 1, 64).unwrap() {
            runs.push(r);
        }
        runs
    }

    #[test]
    fn freed_blocks_are_not_reused_before_release() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        a.set_hold_freed(true);
        let runs = fill(&mut dev, &mut a);
        let (s, l) = runs[runs.len() / 2];
        a.free_blocks(&mut dev, s, l).unwrap();
        assert_eq!(a.totals().free_blocks, l, "the free counts at once");
        assert_eq!(a.held_blocks(), l);
        assert_eq!(a.available_blocks(), 0);
        a.check_held().unwrap();
        a.check_counts().unwrap();
        assert_eq!(a.alloc_blocks(&mut dev, s, 8).unwrap(), None, "held blocks are not handed out before the commit");
        assert_eq!(a.take_freed(), vec![(s, l)]);
        a.release_held();
        assert_eq!(a.alloc_blocks(&mut dev, s, l).unwrap(), Some((s, l)), "after the commit they are free again");
        a.check_counts().unwrap();
    }

    #[test]
    fn a_commit_releases_only_what_its_transaction_freed() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        a.set_hold_freed(true);
        let runs = fill(&mut dev, &mut a);
        let ((x, xl), (y, yl)) = (runs[3], runs[7]);
        a.free_blocks(&mut dev, x, xl).unwrap();
        // The transaction that freed x closes; y is freed in the next one.
        assert_eq!(a.take_freed(), vec![(x, xl)]);
        a.free_blocks(&mut dev, y, yl).unwrap();
        a.release_committed();
        assert_eq!(a.held_blocks(), yl, "y's free has not committed");
        a.check_held().unwrap();
        a.check_counts().unwrap();
        let mut got = Vec::new();
        while let Some((t, n)) = a.alloc_blocks(&mut dev, x, 8).unwrap() {
            got.push((t, n));
        }
        assert_eq!(got.iter().map(|g| g.1).sum::<u64>(), xl, "x's blocks, and only them");
        assert!(got.iter().all(|&(t, n)| t >= x && t + n <= x + xl), "{got:?}");
        a.check_held().unwrap();
        assert_eq!(a.take_freed(), vec![(y, yl)]);
        a.release_committed();
        assert_eq!(a.held_blocks(), 0);
        assert_eq!(a.alloc_blocks(&mut dev, y, yl).unwrap(), Some((y, yl)));
        a.check_counts().unwrap();
    }

    #[test]
    fn commit_time_metadata_may_reuse_held_blocks_when_nothing_else_is_free() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        a.set_hold_freed(true);
        let runs = fill(&mut dev, &mut a);
        let (s, l) = runs[5];
        a.free_blocks(&mut dev, s, l).unwrap();
        assert_eq!(a.alloc_blocks(&mut dev, s, 4).unwrap(), None);
        a.set_reuse_held(true);
        let (t, n) = a.alloc_blocks(&mut dev, s, 4).unwrap().unwrap();
        a.set_reuse_held(false);
        assert_eq!((t, n), (s, 4));
        assert_eq!(a.held_blocks(), l - 4);
        a.check_held().unwrap();
        a.check_counts().unwrap();
    }

    #[test]
    fn without_a_journal_nothing_is_held() {
        let (mut dev, mut a) = fresh(16 << 20, 1024, AllocPolicy::default());
        let runs = fill(&mut dev, &mut a);
        let (s, l) = runs[2];
        a.free_blocks(&mut dev, s, l).unwrap();
        assert_eq!(a.held_blocks(), 0);
        assert!(a.take_freed().is_empty());
        assert_eq!(a.alloc_blocks(&mut dev, s, 4).unwrap().unwrap().0, s);
        a.check_counts().unwrap();
    }
}
