//! Block allocation around mballoc ([`super::mballoc`]): the goal a
//! new inode's data aims for, the bitmap side of taking and freeing
//! clusters, and the plain first fit kept for one case mballoc does not
//! serve: journaled metadata built during a commit when the only free
//! clusters are held ones.
//!
//! - The goal is where the file already is (continue its last extent) or the
//!   start of its inode's group, flex-aware per ext4_inode_to_goal_block:
//!   with 4+ groups per flex, a flex's first group is kept for directories
//!   and regular files start in the second.
//! - `skip_block_uninit` (the pre-75507efb1372 policy) keeps the cheap
//!   criteria out of never-initialised groups. Off (the default),
//!   BLOCK_UNINIT groups are as good as any.
//! - The first allocation in a BLOCK_UNINIT group turns its synthesised bitmap
//!   into a real one (cleared flag, bitmap written at writeback).

use crate::device::BlockDevice;
use crate::error::{Corrupt, Error, Result};
use crate::format::group_desc::BG_BLOCK_UNINIT;
use crate::format::{BlockNumber, GroupIndex, InodeNumber};

use super::Allocator;

/// A (group-relative start, length) free run.
type FreeRun = (u32, u32);
/// What a group scan found: a run long enough, and the longest shorter one.
type Scan = (Option<FreeRun>, Option<FreeRun>);

/// Groups per flex from which ext4 keeps the first for directories.
pub(super) const FLEX_SIZE_DIR_ALLOC_SCHEME: u32 = 4;

impl Allocator {
    /// The first block of the group a new inode's data should aim for.
    pub fn goal_for_inode(&self, ino: InodeNumber, regular: bool) -> BlockNumber {
        let Some((mut g, _)) = self.geo.inode_location(ino) else { return u64::from(self.geo.first_data_block) };
        let flex = self.geo.flex_size();
        if flex >= FLEX_SIZE_DIR_ALLOC_SCHEME {
            g &= !(flex - 1);
            if regular {
                g += 1;
            }
        }
        if g >= self.geo.group_count {
            g = self.geo.group_count - 1;
        }
        self.geo.group_first_block(g)
    }

    pub(super) fn skippable(&self, g: GroupIndex) -> bool {
        self.policy.skip_block_uninit && self.has_flag(g, BG_BLOCK_UNINIT)
    }

    /// First free run in group `g` starting at or after `from` (group-relative)
    /// of at least `want` clusters; otherwise the longest one seen.
    fn scan_group(&self, g: GroupIndex, from: u32, want: u64) -> Result<Scan> {
        let bm = self.scan_bitmap(g)?;
        let len = self.geo.group_clusters(g) as usize;
        let mut pos = (from as usize).max(self.block_hint[g as usize] as usize);
        let mut best: Option<(u32, u32)> = None;
        while let Some(start) = bm.next_zero(pos, len) {
            let end = bm.next_one(start, len.min(start + want as usize));
            let run = (start as u32, (end - start) as u32);
            if (end - start) as u64 >= want {
                return Ok((Some(run), best));
            }
            if best.is_none_or(|b| run.1 > b.1) {
                best = Some(run);
            }
            pos = bm.next_one(end, len);
        }
        Ok((None, best))
    }

    /// Marks clusters `start..start + len` of group `g` in use in the
    /// bitmap and counts (mballoc's view is the caller's); returns the first block.
    pub(super) fn take(&mut self, g: GroupIndex, start: u32, len: u32) -> Result<BlockNumber> {
        let gi = g as usize;
        let bm = self.block_bitmaps[gi].as_mut().ok_or_else(|| Error::InvalidArgument(format!("block bitmap {g} not loaded")))?;
        debug_assert!(bm.range_is_clear(start as usize, (start + len) as usize), "double allocation in group {g}");
        bm.set_range(start as usize, (start + len) as usize);
        self.block_calls += 1;
        self.take_held(g, start, len);
        let d = &mut self.descs[gi];
        d.free_blocks = d.free_blocks.checked_sub(len).ok_or_else(|| {
            Error::Corrupt(Corrupt::GroupDescriptor { group: g, what: "free block count below zero".into() })
        })?;
        d.flags &= !BG_BLOCK_UNINIT;
        self.free_clusters -= u64::from(len);
        if self.block_hint[gi] == start {
            self.block_hint[gi] = start + len;
        }
        self.dirty_block_bitmaps.insert(g);
        self.dirty_descs.insert(g);
        Ok(self.geo.group_first_block(g) + (u64::from(start) << self.geo.cluster_bits))
    }

    /// Allocates up to `want` contiguous blocks near `goal`, in whole
    /// clusters: the run starts on a cluster and its length is a multiple
    /// of the cluster (which may exceed `want` under bigalloc). Returns the
    /// run (shorter than `want` only when no run that long exists), or
    /// `None` when the filesystem is full.
    /// This is a metadata request: see [`Allocator::allocate`] for file data.
    pub fn alloc_blocks<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, goal: BlockNumber, want: u64) -> Result<Option<(BlockNumber, u64)>> {
        self.allocate(dev, &super::AllocRequest::metadata(goal, want))
    }

    /// Takes clusters whether mballoc sees them free or held.
    fn take_any(&mut self, g: GroupIndex, start: u32, len: u32) -> Result<BlockNumber> {
        if let Some(b) = self.buddies[g as usize].as_mut() {
            let free: Vec<(u32, u32)> = b.runs().filter(|&(s, l)| s < start + len && s + l > start).collect();
            for (s, l) in free {
                let lo = s.max(start);
                b.mark_used(lo, (s + l).min(start + len) - lo);
            }
        }
        self.take(g, start, len)
    }

    /// Goal, then a run of the wanted length, then the longest run, over
    /// the scan view (which takes held clusters while `reuse_held`).
    pub(super) fn first_fit_clusters<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, goal: BlockNumber, want: u64) -> Result<Option<(BlockNumber, u64)>> {
        if want == 0 || self.free_clusters == 0 {
            return Ok(None);
        }
        let (g0, goal_off) = self.locate(goal);
        let cap = want.min(u64::from(self.geo.clusters_per_group()));
        let n = self.geo.group_count;

        // Exact goal: extend the file in place.
        if !self.skippable(g0) && self.descs[g0 as usize].free_blocks > 0 {
            self.load_block_bitmap(dev, g0)?;
            let bm = self.scan_bitmap(g0)?;
            let len = self.geo.group_clusters(g0) as usize;
            if !bm.get(goal_off as usize) {
                let end = bm.next_one(goal_off as usize, len.min(goal_off as usize + cap as usize));
                let got = (end - goal_off as usize) as u32;
                return Ok(Some((self.take_any(g0, goal_off, got)?, u64::from(got))));
            }
        }
        // A full-length run, goal group onwards, initialised groups first if asked.
        let mut longest: Option<(GroupIndex, u32, u32)> = None;
        for pass_skips in [true, false] {
            if !pass_skips && !self.policy.skip_block_uninit {
                break;
            }
            for i in 0..n {
                let g = (g0 + i) % n;
                if u64::from(self.descs[g as usize].free_blocks) < cap || (pass_skips && self.skippable(g)) {
                    continue;
                }
                self.load_block_bitmap(dev, g)?;
                let from = if i == 0 { goal_off } else { 0 };
                let (found, best) = self.scan_group(g, from, cap)?;
                let (found, best) = match (found, i == 0 && from > 0) {
                    (None, true) => self.scan_group(g, 0, cap)?,
                    _ => (found, best),
                };
                if let Some((s, l)) = found {
                    return Ok(Some((self.take_any(g, s, l)?, u64::from(l))));
                }
                if let Some((s, l)) = best {
                    if longest.is_none_or(|b| l > b.2) {
                        longest = Some((g, s, l));
                    }
                }
            }
        }
        // No run that long: the longest free run anywhere, so a short answer
        // is the best the filesystem has. Groups with fewer free clusters
        // than asked were not scanned above; only they can hold a longer one.
        for i in 0..n {
            let g = (g0 + i) % n;
            let free = self.descs[g as usize].free_blocks;
            if free == 0 || u64::from(free) >= cap || longest.is_some_and(|b| free <= b.2) {
                continue;
            }
            self.load_block_bitmap(dev, g)?;
            if let (_, Some((s, l))) = self.scan_group(g, 0, cap)? {
                if longest.is_none_or(|b| l > b.2) {
                    longest = Some((g, s, l));
                }
            }
        }
        match longest {
            Some((g, s, l)) => Ok(Some((self.take_any(g, s, l)?, u64::from(l)))),
            None => Ok(None),
        }
    }

    /// Returns `start..start + len` to the free pool (the range may span
    /// groups). Under bigalloc it must be whole clusters: the caller knows
    /// when no block of a cluster is in use any more.
    pub fn free_blocks<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, start: BlockNumber, len: u64) -> Result<()> {
        let mut b = start;
        let bits = self.geo.cluster_bits;
        let end = start.checked_add(len).filter(|e| *e <= self.geo.blocks_count).ok_or_else(|| {
            Error::Corrupt(Corrupt::Bitmap { group: 0, what: format!("freeing blocks {start}+{len} past the end") })
        })?;
        if self.geo.cluster_start(start) != start || self.geo.round_to_clusters(len) != len {
            return Err(Error::InvalidArgument(format!("freeing blocks {start}+{len}: not whole clusters of {}", 1u64 << bits)));
        }
        while b < end {
            let g = self.geo.group_of_block(b).ok_or_else(|| Error::Corrupt(Corrupt::Bitmap { group: 0, what: format!("block {b} outside the groups") }))?;
            let gstart = self.geo.group_first_block(g);
            let gend = gstart + u64::from(self.geo.group_len(g));
            let piece_end = end.min(gend);
            self.load_block_bitmap(dev, g)?;
            let (lo, hi) = (((b - gstart) >> bits) as usize, (piece_end - gstart).div_ceil(1 << bits) as usize);
            let gi = g as usize;
            let bm = self.block_bitmaps[gi].as_mut().ok_or_else(|| Error::InvalidArgument(format!("block bitmap {g} not loaded")))?;
            if (lo..hi).any(|i| !bm.get(i)) {
                return Err(Error::Corrupt(Corrupt::Bitmap { group: g, what: format!("freeing free blocks in {b}..{piece_end}") }));
            }
            if self.hold_freed {
                let n = (hi - lo) as u64;
                self.held.entry(g).or_insert_with(|| bm.clone());
                self.held_clusters += n;
            }
            bm.clear_range(lo, hi);
            if !self.hold_freed {
                if let Some(b) = self.buddies[gi].as_mut() {
                    let ok = b.mark_free(lo as u32, (hi - lo) as u32);
                    debug_assert!(ok, "group {g}: freed clusters {lo}..{hi} were free to mballoc");
                }
            }
            self.block_calls += 1;
            let n = (hi - lo) as u32;
            self.descs[gi].free_blocks += n;
            self.descs[gi].flags &= !BG_BLOCK_UNINIT;
            self.free_clusters += u64::from(n);
            self.block_hint[gi] = self.block_hint[gi].min(lo as u32);
            self.dirty_block_bitmaps.insert(g);
            self.dirty_descs.insert(g);
            b = piece_end;
        }
        if self.hold_freed {
            self.freed.push((start, len));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fresh;
    use ext4_model::AllocPolicy;

    #[test]
    fn no_double_allocation_and_counts_stay_exact() {
        let (mut dev, mut a) = fresh(64 << 20, 1024, AllocPolicy::default());
        let before = a.totals().free_blocks;
        let mut got = Vec::new();
        for i in 0..200u64 {
            let (s, l) = a.alloc_blocks(&mut dev, 1 + i * 37, 1 + i % 9).unwrap().unwrap();
            got.push((s, l));
        }
        let mut all: Vec<u64> = got.iter().flat_map(|&(s, l)| s..s + l).collect();
        let n = all.len() as u64;
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len() as u64, n, "a block was handed out twice");
        assert_eq!(a.totals().free_blocks, before - n);
        a.check_counts().unwrap();
        for &(s, l) in got.iter().step_by(2) {
            a.free_blocks(&mut dev, s, l).unwrap();
        }
        a.check_counts().unwrap();
        assert!(a.free_blocks(&mut dev, got[0].0, 1).is_err(), "double free is corruption");
        let freed: u64 = got.iter().step_by(2).map(|g| g.1).sum();
        assert_eq!(a.totals().free_blocks, before - n + freed);
    }

    #[test]
    fn contiguous_runs_and_goal_continuation() {
        let (mut dev, mut a) = fresh(64 << 20, 4096, AllocPolicy::default());
        let (s, l) = a.alloc_blocks(&mut dev, 0, 100).unwrap().unwrap();
        assert_eq!(l, 100);
        let (s2, l2) = a.alloc_blocks(&mut dev, s + 100, 50).unwrap().unwrap();
        assert_eq!((s2, l2), (s + 100, 50), "the goal right after a run extends it");
        let (s3, _) = a.alloc_blocks(&mut dev, s + 10, 5).unwrap().unwrap();
        assert!(s3 >= s + 150 || s3 < s, "a taken goal moves on to free space");
    }

    #[test]
    fn skip_block_uninit_changes_where_file_data_lands() {
        // 4 KiB blocks, 512 MiB: 4 groups in one flex; group 1 is BLOCK_UNINIT,
        // and a regular file's goal is the flex's second group.
        let land = |skip: bool| {
            let policy = AllocPolicy { skip_block_uninit: skip, ..AllocPolicy::default() };
            let (mut dev, mut a) = fresh(512 << 20, 4096, policy);
            assert!(a.descs()[1].has_flag(crate::format::group_desc::BG_BLOCK_UNINIT));
            let goal = a.goal_for_inode(12, true);
            assert_eq!(goal, a.geometry().group_first_block(1));
            let (s, _) = a.alloc_blocks(&mut dev, goal, 8).unwrap().unwrap();
            let g = a.geometry().group_of_block(s).unwrap();
            a.check_counts().unwrap();
            (g, a.descs()[1].has_flag(crate::format::group_desc::BG_BLOCK_UNINIT))
        };
        let (g_default, uninit_after_default) = land(false);
        assert_eq!(g_default, 1, "BLOCK_UNINIT groups serve like any other");
        assert!(!uninit_after_default, "first use initialises the group");
        let (g_skip, uninit_after_skip) = land(true);
        assert_ne!(g_skip, 1, "the 2009 policy avoids the fresh group");
        assert!(uninit_after_skip);
    }

    #[test]
    fn full_filesystem_returns_none_then_recovers() {
        let (mut dev, mut a) = fresh(4 << 20, 1024, AllocPolicy::default());
        let mut runs = Vec::new();
        while let Some(r) = a.alloc_blocks(&mut dev, 1, 1000).unwrap() {
            runs.push(r);
        }
        assert_eq!(a.totals().free_blocks, 0);
        a.check_counts().unwrap();
        a.free_blocks(&mut dev, runs[0].0, 1).unwrap();
        assert_eq!(a.alloc_blocks(&mut dev, 1, 10).unwrap(), Some((runs[0].0, 1)));
    }

    mod liveness {
        use super::super::super::test_support::fresh_clustered;
        use super::super::super::Allocator;
        use crate::device_mem::MemDevice;
        use ext4_model::AllocPolicy;
        use proptest::prelude::*;

        /// The longest run of free clusters in any one group, in
        /// clusters, and how many free runs there are.
        fn free_runs(dev: &mut MemDevice, a: &mut Allocator) -> (u64, u64) {
            let geo = a.geometry().clone();
            let ratio = geo.cluster_ratio();
            let (mut best, mut runs) = (0, 0);
            for g in 0..geo.group_count {
                let start = geo.group_first_block(g);
                let mut run = 0;
                for c in 0..u64::from(geo.group_clusters(g)) {
                    if a.block_in_use(dev, start + c * ratio).unwrap() {
                        run = 0;
                    } else {
                        runs += u64::from(run == 0);
                        run += 1;
                        best = best.max(run);
                    }
                }
            }
            (best, runs)
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]
            /// Liveness: no "full" while a free cluster exists, and no run
            /// shorter than asked while a long enough one exists (up to a
            /// group), as long as mballoc's search may look at every free
            /// run (it stops after 200 and takes the best seen), under both
            /// BLOCK_UNINIT policies, with and without bigalloc; the counts
            /// and mballoc's free runs stay exact.
            #[test]
            fn no_enospc_and_no_short_run_while_space_that_fits_exists(
                cluster in prop::sample::select(vec![None, Some(4096u32)]),
                skip in any::<bool>(),
                steps in prop::collection::vec((any::<u16>(), 1u64..3000, any::<bool>()), 1..60),
            ) {
                let policy = AllocPolicy { skip_block_uninit: skip, ..AllocPolicy::default() };
                let bs = if cluster.is_some() { 2048 } else { 1024 };
                let (mut dev, mut a) = fresh_clustered(24 << 20, bs, cluster.map(|c| c * 2), policy);
                let ratio = a.geometry().cluster_ratio();
                let cpg = u64::from(a.geometry().clusters_per_group());
                let mut held: Vec<(u64, u64)> = Vec::new();
                for (goal_seed, want, free_one) in steps {
                    if free_one && !held.is_empty() {
                        let (s, l) = held.swap_remove(usize::from(goal_seed) % held.len());
                        a.free_blocks(&mut dev, s, l).unwrap();
                        continue;
                    }
                    let (longest, runs) = free_runs(&mut dev, &mut a);
                    let want_clusters = want.div_ceil(ratio);
                    let goal = u64::from(goal_seed) * 3;
                    match a.alloc_blocks(&mut dev, goal, want).unwrap() {
                        None => prop_assert_eq!(longest, 0, "None while a free run of {} clusters exists", longest),
                        Some((s, l)) => {
                            prop_assert!(l % ratio == 0 && s % ratio == 0 && l > 0);
                            let got = l / ratio;
                            prop_assert!(got <= want_clusters);
                            let fits = want_clusters.min(cpg);
                            if longest >= fits && runs <= 150 {
                                prop_assert!(got >= fits, "{} clusters while a run of {} exists ({} runs)", got, longest, runs);
                            }
                            held.push((s, l));
                        }
                    }
                    prop_assert!(a.check_counts().is_ok(), "{:?}", a.check_counts());
                }
            }
        }
    }
}
