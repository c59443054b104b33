//! mballoc: how ext4 places blocks (docs/allocator.md).
//!
//! A request first tries the preallocations it may use (the inode's
//! window holding its logical block, or the locality group's nearest
//! with room), then is widened ([`normalize`]) and searched for
//! ([`criteria`]) over per-group buddy summaries ([`buddy`]). What the
//! search found beyond the request becomes a preallocation
//! ([`prealloc`]). When nothing is found, every preallocation is given
//! back and the search runs once more, so they never cause ENOSPC.
//!
//! The in-core free space a search sees is the on-disk bitmap less
//! clusters freed in an uncommitted transaction (held) and less
//! preallocations; the bitmaps on disk only ever record what files use.

pub mod buddy;
pub mod criteria;
pub mod normalize;
pub mod prealloc;

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::{BlockNumber, GroupIndex, InodeNumber};
use crate::range_set::RangeSet;

use super::Allocator;
use buddy::GroupBuddy;
use criteria::{FoundBy, Search};
use normalize::PaKind;
use prealloc::InodePa;

/// One allocation request (ext4_allocation_request), in blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocRequest {
    pub ino: InodeNumber,
    /// First logical block (cluster-aligned).
    pub logical: u64,
    /// Blocks wanted (whole clusters).
    pub len: u64,
    pub goal: BlockNumber,
    /// Regular file data (EXT4_MB_HINT_DATA): may preallocate.
    pub data: bool,
    /// The file is open for writing (inode_is_open_for_write).
    pub open_for_write: bool,
    /// The caller asks for no widening (EXT4_GET_BLOCKS_NO_NORMALIZE).
    pub no_normalize: bool,
    /// i_size in blocks, rounded up.
    pub isize_blocks: u64,
    /// The file's last mapped block before `logical`: (logical, physical).
    pub left: Option<(u64, BlockNumber)>,
    /// Its first mapped block after the request: (logical, physical).
    pub right: Option<(u64, BlockNumber)>,
}

impl AllocRequest {
    /// A request for metadata (extent-tree or directory blocks): no
    /// preallocation, no widening.
    pub fn metadata(goal: BlockNumber, len: u64) -> Self {
        AllocRequest { ino: 0, logical: 0, len, goal, data: false, open_for_write: false, no_normalize: true, isize_blocks: 0, left: None, right: None }
    }
}

/// What mballoc did so far, for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MbStats {
    /// Requests served by the exact goal, and by each criterion in order.
    pub goal_hits: u64,
    pub criterion_hits: [u64; 5],
    /// Requests served from an inode's / the locality group's preallocation.
    pub inode_pa_hits: u64,
    pub group_pa_hits: u64,
    /// Preallocations made, and clusters given back by discards.
    pub pas_made: u64,
    pub discarded_clusters: u64,
    /// Searches that found nothing until preallocations were given back.
    pub enospc_discards: u64,
}

impl Allocator {
    pub fn mb_stats(&self) -> MbStats {
        self.mb_stats
    }

    /// Clusters preallocations hold (free on disk, not for others).
    pub fn preallocated_clusters(&self) -> u64 {
        self.pa.clusters()
    }

    /// The inode's preallocated windows.
    pub fn inode_preallocations(&self, ino: InodeNumber) -> &[InodePa] {
        self.pa.inode_pas(ino)
    }

    /// Group `g`'s buddy summary, if its bitmap is loaded.
    pub fn buddy(&self, g: GroupIndex) -> Option<&GroupBuddy> {
        self.buddies.get(g as usize)?.as_ref()
    }

    fn cluster_of(&self, g: GroupIndex, rel: u32) -> u64 {
        (self.geo.group_first_block(g) >> self.geo.cluster_bits) + u64::from(rel)
    }

    fn block_of(&self, g: GroupIndex, rel: u32) -> BlockNumber {
        self.geo.group_first_block(g) + (u64::from(rel) << self.geo.cluster_bits)
    }

    /// Group and group-relative cluster of block `b` (clamped into the filesystem).
    pub(super) fn locate(&self, b: BlockNumber) -> (GroupIndex, u32) {
        let b = b.clamp(u64::from(self.geo.first_data_block), self.geo.blocks_count - 1);
        let g = self.geo.group_of_block(b).unwrap_or(0);
        (g, ((b - self.geo.group_first_block(g)) >> self.geo.cluster_bits) as u32)
    }

    /// What mballoc may not hand out in group `g`: in use or held.
    fn allocation_view(&self, g: GroupIndex) -> Option<&crate::format::bitmap::Bitmap> {
        self.held.get(&g).or(self.block_bitmaps[g as usize].as_ref())
    }

    /// The buddy of group `g` from its allocation view and `reserved`
    /// (the preallocations' ranges).
    pub(super) fn build_buddy(&self, g: GroupIndex, reserved: &prealloc::Reserved) -> Option<GroupBuddy> {
        let view = self.allocation_view(g)?;
        let len = self.geo.group_clusters(g) as usize;
        let mut b = GroupBuddy::new(self.top_order());
        let mut at = 0;
        while let Some(s) = view.next_zero(at, len) {
            let e = view.next_one(s, len);
            b.mark_free(s as u32, (e - s) as u32);
            at = e;
        }
        for &(s, l) in reserved.get(&g).map_or(&[][..], Vec::as_slice) {
            b.mark_used(s, l);
        }
        Some(b)
    }

    /// Checks every loaded buddy against a rebuild from the bitmaps.
    pub fn check_buddies(&self) -> std::result::Result<(), String> {
        // A preallocated cluster is free on disk and not held.
        let reserved = self.pa.reserved();
        for (&g, ranges) in &reserved {
            let view = self.allocation_view(g).ok_or_else(|| format!("group {g}: preallocated but its bitmap is not loaded"))?;
            if let Some(&(s, l)) = ranges.iter().find(|&&(s, l)| !view.range_is_clear(s as usize, (s + l) as usize)) {
                return Err(format!("group {g}: preallocated clusters {s}+{l} are in use or held"));
            }
        }
        for g in 0..self.geo.group_count {
            let (Some(have), Some(want)) = (&self.buddies[g as usize], self.build_buddy(g, &reserved)) else { continue };
            if *have != want || have.recount() != *have {
                return Err(format!("group {g}: mballoc's free runs disagree with the bitmap, held and preallocated clusters"));
            }
        }
        Ok(())
    }

    /// Takes clusters free in the buddy: out of the buddy, into the bitmap.
    fn claim(&mut self, g: GroupIndex, start: u32, len: u32) -> Result<BlockNumber> {
        let ok = self.buddies[g as usize].as_mut().is_some_and(|b| b.mark_used(start, len));
        if !ok {
            return Err(Error::InvalidArgument(format!("group {g}: clusters {start}+{len} are not free to mballoc")));
        }
        self.take(g, start, len)
    }

    /// Gives preallocated clusters back to the free space.
    fn release_pa_space(&mut self, ranges: Vec<(GroupIndex, u32, u32)>) {
        for (g, s, l) in ranges {
            if let Some(b) = self.buddies[g as usize].as_mut() {
                let ok = b.mark_free(s, l);
                debug_assert!(ok, "group {g}: preallocated clusters {s}+{l} were free already");
            }
            self.mb_stats.discarded_clusters += u64::from(l);
        }
    }

    /// ext4_discard_preallocations: the inode's windows go back.
    pub fn discard_inode_preallocations(&mut self, ino: InodeNumber) {
        let ranges = self.pa.take_inode(ino);
        self.release_pa_space(ranges);
    }

    /// Every preallocation goes back (ENOSPC, or before journaled
    /// metadata may take held blocks).
    pub fn discard_all_preallocations(&mut self) {
        let ranges = self.pa.take_all();
        self.release_pa_space(ranges);
    }

    /// Allocates for `req`: `(first block, blocks)` in whole clusters,
    /// shorter than asked when no longer run exists (or a preallocation
    /// ends), `None` when the filesystem has no cluster left for it.
    pub fn allocate<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, req: &AllocRequest) -> Result<Option<(BlockNumber, u64)>> {
        if req.len == 0 || self.free_clusters == 0 {
            return Ok(None);
        }
        if let Some(got) = self.allocate_once(dev, req)? {
            return Ok(Some(got));
        }
        if !self.pa.is_empty() {
            self.mb_stats.enospc_discards += 1;
            self.discard_all_preallocations();
            if let Some(got) = self.allocate_once(dev, req)? {
                return Ok(Some(got));
            }
        }
        if self.reuse_held {
            return self.first_fit_clusters(dev, req.goal, req.len.div_ceil(self.geo.cluster_ratio())).map(|r| r.map(|(b, n)| (b, n << self.geo.cluster_bits)));
        }
        Ok(None)
    }

    fn allocate_once<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, req: &AllocRequest) -> Result<Option<(BlockNumber, u64)>> {
        let bits = self.geo.cluster_bits;
        let o_lc = req.logical >> bits;
        let o_len = u32::try_from(req.len.div_ceil(1 << bits)).unwrap_or(u32::MAX).min(self.geo.clusters_per_group());
        let stream_req = u64::from(self.policy.stream_request_blocks);
        let group_prealloc = self.group_prealloc_clusters();
        let kind = normalize::group_or_file(req, stream_req, group_prealloc);
        if req.data {
            if let Some(got) = self.use_inode_pa(req.ino, o_lc, o_len)? {
                self.mb_stats.inode_pa_hits += 1;
                return Ok(Some(got));
            }
            if kind == PaKind::Group {
                if let Some(got) = self.use_group_pa(req.goal, o_len)? {
                    self.mb_stats.group_pa_hits += 1;
                    return Ok(Some(got));
                }
            }
        }
        // Widen.
        let (g_lc, goal_len, goal, try_goal) = match kind {
            PaKind::Inode if !req.no_normalize => {
                // A window that already holds the request's block is stale.
                if self.pa.inode_pas(req.ino).iter().any(|p| (p.logical().0..p.logical().1).contains(&o_lc)) {
                    self.discard_inode_preallocations(req.ino);
                }
                let others: Vec<(u64, u64)> = self.pa.inode_pas(req.ino).iter().map(|p| (p.logical().0 << bits, p.logical().1 << bits)).collect();
                let bs_bits = self.geo.block_size.trailing_zeros();
                let w = normalize::widen_stream(req, bs_bits, u64::from(self.geo.blocks_per_group), u64::from(self.geo.first_data_block), self.geo.blocks_count, &others);
                let start = (w.logical >> bits).min(o_lc);
                let end = (w.logical + w.len).div_ceil(1 << bits).max(o_lc + 1);
                let len = u32::try_from(end - start).unwrap_or(u32::MAX).min(self.geo.clusters_per_group()).max(1);
                (start, len, w.goal, w.try_goal)
            }
            PaKind::Group if !req.no_normalize => (o_lc, group_prealloc.max(o_len), req.goal, false),
            _ => (o_lc, o_len, req.goal, false),
        };
        let normalized = matches!(kind, PaKind::Inode | PaKind::Group) && !req.no_normalize;
        let goal_group = self.locate(goal);
        let mut s = Search::new(goal_group.0, goal_group.1, try_goal, goal_len, o_len, req.data);
        if kind == PaKind::Inode {
            // Past the exact goal, streams go on from where the last
            // stream allocation was (s_mb_last_group; ext4 keeps one per
            // inode hash, one here).
            s.stream_from = Some(self.stream_last_group);
        }
        let Some((g, start, len, by)) = self.regular_allocator(dev, &mut s)? else { return Ok(None) };
        match by {
            FoundBy::Goal => self.mb_stats.goal_hits += 1,
            FoundBy::Pass(cr) => self.mb_stats.criterion_hits[cr as usize] += 1,
        }
        if kind == PaKind::Inode {
            self.stream_last_group = g;
        }
        if !normalized || len <= o_len {
            return Ok(Some((self.claim(g, start, len)?, u64::from(len) << bits)));
        }
        self.mb_stats.pas_made += 1;
        let ok = self.buddies[g as usize].as_mut().is_some_and(|b| b.mark_used(start, len));
        if !ok {
            return Err(Error::InvalidArgument(format!("group {g}: found clusters {start}+{len} are not free to mballoc")));
        }
        if kind == PaKind::Group {
            let trimmed = self.pa.add_group_pa(g, start, len);
            self.release_pa_space(trimmed);
            let Some(got) = self.use_group_pa(self.block_of(g, start), o_len)? else {
                return Err(Error::InvalidArgument(format!("group {g}: a new group preallocation cannot serve its own request")));
            };
            return Ok(Some(got));
        }
        // ext4_mb_new_inode_pa: when short of the widened goal, the window
        // still covers the request.
        let mut lstart = g_lc;
        if len < s.orig_goal_len {
            let goal_end = g_lc + u64::from(s.orig_goal_len);
            lstart = goal_end - u64::from(len);
            if o_lc < lstart {
                lstart = if o_lc + u64::from(o_len) <= g_lc + u64::from(len) { g_lc } else { o_lc };
            }
        }
        let mut unused = RangeSet::new();
        unused.insert(u64::from(start)..u64::from(start + len));
        self.pa.add_inode_pa(req.ino, InodePa { group: g, start, len, lstart, unused });
        match self.use_inode_pa(req.ino, o_lc, o_len)? {
            Some(got) => Ok(Some(got)),
            None => Err(Error::InvalidArgument(format!("inode {}: a new preallocation does not hold logical cluster {o_lc}", req.ino))),
        }
    }

    /// mb_group_prealloc in clusters (ext4 keeps at least 32 under bigalloc).
    fn group_prealloc_clusters(&self) -> u32 {
        let blocks = self.policy.group_prealloc_blocks;
        if self.geo.cluster_bits == 0 || blocks == 0 {
            return blocks;
        }
        (blocks >> self.geo.cluster_bits).max(32)
    }

    /// ext4_mb_use_inode_pa: the inode's window holding logical cluster `lc`.
    fn use_inode_pa(&mut self, ino: InodeNumber, lc: u64, want: u32) -> Result<Option<(BlockNumber, u64)>> {
        let Some(pas) = self.pa.inode_pas_mut(ino) else { return Ok(None) };
        let mut hit = None;
        for pa in pas.iter_mut() {
            let (ls, le) = pa.logical();
            if lc < ls || lc >= le {
                continue;
            }
            let rel = pa.start + (lc - ls) as u32;
            let room = pa.start + pa.len - rel;
            let take = room.min(want);
            let free_run = pa.unused.iter_in(u64::from(rel)..u64::from(rel + take)).next();
            let Some(r) = free_run.filter(|r| r.start == u64::from(rel)) else { continue };
            let n = (r.end - r.start) as u32;
            pa.unused.remove(r.start..r.end);
            hit = Some((pa.group, rel, n));
            break;
        }
        self.pa.prune_inode(ino);
        let Some((g, rel, n)) = hit else { return Ok(None) };
        Ok(Some((self.take(g, rel, n)?, u64::from(n) << self.geo.cluster_bits)))
    }

    /// ext4_mb_use_group_pa: `want` clusters from the locality group.
    fn use_group_pa(&mut self, goal: BlockNumber, want: u32) -> Result<Option<(BlockNumber, u64)>> {
        let goal_cluster = goal >> self.geo.cluster_bits;
        let Some(i) = self.pa.pick_group_pa(want, goal_cluster, |p| self.cluster_of(p.group, p.start)) else { return Ok(None) };
        let ((g, rel), trimmed) = self.pa.use_group_pa(i, want);
        self.release_pa_space(trimmed);
        Ok(Some((self.take(g, rel, want)?, u64::from(want) << self.geo.cluster_bits)))
    }
}


#[cfg(test)]
mod tests {
    use super::super::test_support::fresh;
    use super::*;
    use ext4_model::AllocPolicy;

    fn small_file(ino: InodeNumber, goal: BlockNumber) -> AllocRequest {
        AllocRequest { ino, logical: 0, len: 2, goal, data: true, open_for_write: false, no_normalize: false, isize_blocks: 2, left: None, right: None }
    }

    #[test]
    fn small_files_share_one_window_and_the_check_sees_a_cluster_taken_behind_its_back() {
        let (mut dev, mut a) = fresh(64 << 20, 1024, AllocPolicy::default());
        let (s1, n1) = a.allocate(&mut dev, &small_file(12, 1)).unwrap().unwrap();
        let (s2, n2) = a.allocate(&mut dev, &small_file(13, 5000)).unwrap().unwrap();
        assert_eq!((n1, n2), (2, 2));
        assert_eq!(s2, s1 + 2, "the second small file, goal elsewhere, takes the locality group's next clusters");
        assert_eq!(a.preallocated_clusters(), 512 - 4);
        a.check_counts().unwrap();
        // Taking a preallocated cluster without going through the window.
        let (g, rel) = a.locate(s2 + 2);
        a.take(g, rel, 1).unwrap();
        let err = a.check_counts().unwrap_err();
        assert!(err.contains("preallocated"), "{err}");
    }

    #[test]
    fn a_full_filesystem_gives_preallocations_back_rather_than_failing() {
        let (mut dev, mut a) = fresh(8 << 20, 1024, AllocPolicy::default());
        a.allocate(&mut dev, &small_file(12, 1)).unwrap().unwrap();
        assert!(a.preallocated_clusters() > 0);
        let mut got = 0;
        while let Some((_, n)) = a.alloc_blocks(&mut dev, 1, 256).unwrap() {
            got += n;
        }
        assert_eq!(a.totals().free_blocks, 0, "every cluster handed out, {got} as metadata");
        assert_eq!(a.preallocated_clusters(), 0);
        assert_eq!(a.mb_stats().enospc_discards, 1);
        a.check_counts().unwrap();
    }
}
