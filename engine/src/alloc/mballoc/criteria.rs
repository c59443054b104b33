//! ext4_mb_regular_allocator: the exact goal when the request continues
//! a neighbour, then the criteria passes, cheapest first, each over the
//! groups from the goal's.
//!
//! - POWER2_ALIGNED (goal length a power of two): a group whose largest
//!   free chunk is big enough; the first free chunk of the smallest such
//!   order. Data skips a flex's first group (kept for metadata).
//! - GOAL_LEN_FAST: a group whose average free run is at least the goal;
//!   runs shorter than the goal are not looked at.
//! - BEST_AVAIL_LEN: the same with the goal trimmed by up to 3 orders
//!   (never below the request), for fragmented filesystems.
//! - GOAL_LEN_SLOW: any group with that much free; every run looked at.
//! - ANY_FREE: any group with a free cluster.
//!
//! Within a group runs are measured as mb_find_extent measures them
//! (whole buddy chunks), keeping the best: exactly the goal wins at once;
//! else the longest while short of it, or the shortest that covers it,
//! decided after 10 runs or at the group's end; 200 runs stop the search.
//! After a pass the best seen so far is taken even if short.
//!
//! With 16 groups or more (mb_optimize_scan), the cheap passes try 4
//! groups in order from the goal, then the groups by order list (largest
//! free order, average run order) in group order from there, wrapping;
//! only groups whose buddy is loaded are on the lists, and a cheap pass
//! does not load a group unless it is a flex's first or BLOCK_UNINIT.
//! Bitmap prefetching is not modelled.

use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::group_desc::BG_BLOCK_UNINIT;
use crate::format::GroupIndex;

use super::super::block::FLEX_SIZE_DIR_ALLOC_SCHEME;
use super::super::Allocator;
use super::buddy::ORDERS;

/// mb_optimize_scan is on from this many groups (MB_DEFAULT_LINEAR_SCAN_THRESHOLD).
const OPTIMIZE_SCAN_GROUPS: u32 = 16;
/// Groups tried in order before the lists (MB_DEFAULT_LINEAR_LIMIT).
const LINEAR_GROUPS: u32 = 4;
const MIN_TO_SCAN: u32 = 10;
const MAX_TO_SCAN: u32 = 200;
/// s_mb_best_avail_max_trim_order.
const BEST_AVAIL_TRIM: u32 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Criterion {
    Power2Aligned,
    GoalLenFast,
    BestAvailLen,
    GoalLenSlow,
    AnyFree,
}

impl Criterion {
    const ALL: [Criterion; 5] = [Criterion::Power2Aligned, Criterion::GoalLenFast, Criterion::BestAvailLen, Criterion::GoalLenSlow, Criterion::AnyFree];

    fn cheap(self) -> bool {
        self < Criterion::GoalLenSlow
    }
}

/// How a search ended: the goal taken whole, or the criterion that found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FoundBy {
    Goal,
    Pass(Criterion),
}

/// One allocation context (ext4_allocation_context, the search part).
#[derive(Clone, Debug)]
pub struct Search {
    pub goal_group: GroupIndex,
    /// Goal offset in the group, tried exactly when `try_goal`.
    pub goal_start: u32,
    pub try_goal: bool,
    /// Clusters wanted (after widening); may be trimmed by BEST_AVAIL_LEN.
    pub goal_len: u32,
    pub orig_goal_len: u32,
    /// Clusters the caller asked for.
    pub request_len: u32,
    pub data: bool,
    /// Where a stream's search starts once the exact goal failed.
    pub stream_from: Option<GroupIndex>,
    two_order: Option<u8>,
    best: Option<(GroupIndex, u32, u32)>,
    found: u32,
    done: bool,
    stop: bool,
    criterion: Criterion,
}

/// What the search settled on: group, start, length (at most the goal).
pub type Found = (GroupIndex, u32, u32, FoundBy);

fn fls(x: u32) -> u32 {
    32 - x.leading_zeros()
}

/// mb_avg_fragment_size_order.
fn avg_order(len: u32, top: u8) -> usize {
    let order = fls(len).saturating_sub(2) as usize;
    order.min(usize::from(top))
}

impl Search {
    pub fn new(goal_group: GroupIndex, goal_start: u32, try_goal: bool, goal_len: u32, request_len: u32, data: bool) -> Self {
        Search {
            goal_group,
            goal_start,
            try_goal,
            goal_len,
            orig_goal_len: goal_len,
            request_len,
            data,
            stream_from: None,
            two_order: None,
            best: None,
            found: 0,
            done: false,
            stop: false,
            criterion: Criterion::Power2Aligned,
        }
    }

    fn finished(&self) -> bool {
        self.done || self.stop
    }

    /// ext4_mb_measure_extent.
    fn measure(&mut self, g: GroupIndex, start: u32, len: u32) {
        self.found += 1;
        if len == self.goal_len {
            self.best = Some((g, start, len));
            self.done = true;
            return;
        }
        let Some((_, _, blen)) = self.best else {
            self.best = Some((g, start, len));
            return;
        };
        if blen < self.goal_len {
            if len > blen {
                self.best = Some((g, start, len));
            }
        } else if len > self.goal_len && len < blen {
            self.best = Some((g, start, len));
        }
        self.check_limits(false);
    }

    /// ext4_mb_check_limits.
    fn check_limits(&mut self, group_done: bool) {
        if self.done {
            return;
        }
        if self.found > MAX_TO_SCAN {
            self.stop = true;
            return;
        }
        let Some((_, _, blen)) = self.best else { return };
        if blen >= self.goal_len && (group_done || self.found > MIN_TO_SCAN) {
            self.done = true;
        }
    }

    fn result(&self, by: FoundBy) -> Option<Found> {
        self.best.map(|(g, s, l)| (g, s, l.min(self.goal_len), by))
    }
}

impl Allocator {
    fn is_flex_first(&self, g: GroupIndex) -> bool {
        let flex = self.geo.flex_size();
        flex > 1 && g % flex == 0
    }

    /// Free clusters mballoc believes group `g` has (bb_free).
    fn group_free(&self, g: GroupIndex) -> u32 {
        match &self.buddies[g as usize] {
            Some(b) => b.free(),
            None => self.descs[g as usize].free_blocks,
        }
    }

    /// ext4_mb_good_group for a loaded group.
    fn good_group(&self, s: &Search, g: GroupIndex, cr: Criterion) -> bool {
        let Some(b) = &self.buddies[g as usize] else { return false };
        let (free, frags) = (b.free(), b.fragments());
        if free == 0 || frags == 0 {
            return false;
        }
        match cr {
            Criterion::Power2Aligned => {
                let flex = self.geo.flex_size();
                if s.data && flex >= FLEX_SIZE_DIR_ALLOC_SCHEME && g % flex == 0 {
                    return false;
                }
                free >= s.goal_len && b.largest_free_order().is_some_and(|k| Some(k) >= s.two_order)
            }
            Criterion::GoalLenFast | Criterion::BestAvailLen => free / frags >= s.goal_len,
            Criterion::GoalLenSlow => free >= s.goal_len,
            Criterion::AnyFree => true,
        }
    }

    /// Tries group `g` at `cr` (ext4_mb_scan_group).
    fn try_group<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, s: &mut Search, g: GroupIndex, cr: Criterion) -> Result<()> {
        let free = self.group_free(g);
        if free == 0 || (cr <= Criterion::GoalLenFast && free < s.goal_len) {
            return Ok(());
        }
        if cr.cheap() && self.skippable(g) {
            return Ok(());
        }
        if self.buddies[g as usize].is_none() {
            // Cheap passes do not pay for reading a bitmap, except for the
            // groups metadata and fresh data go to.
            if cr.cheap() && !self.is_flex_first(g) && !self.has_flag(g, BG_BLOCK_UNINIT) {
                return Ok(());
            }
            self.load_block_bitmap(dev, g)?;
        }
        if !self.good_group(s, g, cr) {
            return Ok(());
        }
        let Some(b) = self.buddies[g as usize].as_ref() else { return Ok(()) };
        if cr == Criterion::Power2Aligned {
            let from = s.two_order.unwrap_or(0);
            for k in from..=b.top() {
                if let Some(c) = b.first_chunk_of_order(k) {
                    s.found += 1;
                    s.best = Some((g, c, 1 << k));
                    s.done = true;
                    break;
                }
            }
            return Ok(());
        }
        for (rs, rl) in b.runs() {
            if cr.cheap() && rl < s.goal_len {
                continue;
            }
            let mut i = rs;
            while i < rs + rl {
                let ex = b.extent_at(i, s.goal_len);
                if ex == 0 {
                    break;
                }
                s.measure(g, i, ex);
                if s.finished() {
                    return Ok(());
                }
                i += ex;
            }
        }
        s.check_limits(true);
        Ok(())
    }

    /// The groups from `start` to the end, then from 0 to `start`.
    fn wrapped(&self, start: GroupIndex) -> [std::ops::Range<GroupIndex>; 2] {
        [start..self.geo.group_count, 0..start]
    }

    fn scan_groups<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, s: &mut Search, cr: Criterion) -> Result<()> {
        let n = self.geo.group_count;
        let mut start = s.goal_group % n;
        if n < OPTIMIZE_SCAN_GROUPS || !cr.cheap() {
            for part in self.wrapped(start) {
                for g in part {
                    self.try_group(dev, s, g, cr)?;
                    if s.finished() {
                        return Ok(());
                    }
                }
            }
            return Ok(());
        }
        for _ in 0..LINEAR_GROUPS {
            self.try_group(dev, s, start, cr)?;
            if s.finished() {
                return Ok(());
            }
            start = (start + 1) % n;
        }
        let top = self.top_order();
        match cr {
            Criterion::Power2Aligned => {
                let from = s.two_order.unwrap_or(0);
                for part in self.wrapped(start) {
                    for k in from..=top {
                        let list = |a: &Allocator, g: GroupIndex| a.buddies[g as usize].as_ref().is_some_and(|b| b.largest_free_order() == Some(k));
                        self.scan_list(dev, s, cr, part.clone(), list)?;
                        if s.finished() {
                            return Ok(());
                        }
                    }
                }
            }
            Criterion::GoalLenFast => {
                for part in self.wrapped(start) {
                    for o in avg_order(s.goal_len, top)..ORDERS.min(usize::from(top) + 1) {
                        self.scan_list(dev, s, cr, part.clone(), |a, g| a.avg_order_of(g) == Some(o))?;
                        if s.finished() {
                            return Ok(());
                        }
                    }
                }
            }
            Criterion::BestAvailLen => {
                let order = fls(s.goal_len).saturating_sub(1);
                let mut min_order = order.saturating_sub(BEST_AVAIL_TRIM);
                if (1u32 << min_order) < s.request_len {
                    min_order = fls(s.request_len);
                }
                for i in (min_order..=order).rev() {
                    s.goal_len = 1 << i;
                    let o = avg_order(s.goal_len, top);
                    for part in self.wrapped(start) {
                        self.scan_list(dev, s, cr, part, |a, g| a.avg_order_of(g) == Some(o))?;
                        if s.finished() {
                            return Ok(());
                        }
                    }
                }
                s.goal_len = s.orig_goal_len;
            }
            _ => {}
        }
        Ok(())
    }

    fn scan_list<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, s: &mut Search, cr: Criterion, part: std::ops::Range<GroupIndex>, on_list: impl Fn(&Allocator, GroupIndex) -> bool) -> Result<()> {
        for g in part {
            if on_list(self, g) {
                self.try_group(dev, s, g, cr)?;
                if s.finished() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn avg_order_of(&self, g: GroupIndex) -> Option<usize> {
        let b = self.buddies[g as usize].as_ref()?;
        (b.fragments() > 0).then(|| avg_order(b.avg_fragment(), b.top()))
    }

    /// The top buddy order: blocksize_bits + 1.
    pub(super) fn top_order(&self) -> u8 {
        (self.geo.block_size.trailing_zeros() + 1) as u8
    }

    /// Runs the search; `None` when no group has a free cluster mballoc may use.
    pub(super) fn regular_allocator<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, s: &mut Search) -> Result<Option<Found>> {
        let n = self.geo.group_count;
        if s.try_goal && s.goal_group < n && self.group_free(s.goal_group) > 0 {
            self.load_block_bitmap(dev, s.goal_group)?;
            if let Some(b) = &self.buddies[s.goal_group as usize] {
                if b.extent_at(s.goal_start, s.goal_len) >= s.goal_len {
                    return Ok(Some((s.goal_group, s.goal_start, s.goal_len, FoundBy::Goal)));
                }
            }
        }
        if let Some(g) = s.stream_from {
            s.goal_group = g;
        }
        let i = fls(s.goal_len);
        if i >= 2 && s.goal_len.is_power_of_two() {
            s.two_order = Some((i - 1) as u8);
        }
        for cr in Criterion::ALL {
            if cr == Criterion::Power2Aligned && s.two_order.is_none() {
                continue;
            }
            s.criterion = cr;
            self.scan_groups(dev, s, cr)?;
            if s.best.is_some() {
                return Ok(s.result(FoundBy::Pass(cr)));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measuring_prefers_exact_then_the_tightest_cover() {
        let mut s = Search::new(0, 0, false, 16, 16, true);
        s.measure(0, 0, 64);
        s.measure(0, 64, 32);
        s.measure(0, 96, 4);
        assert_eq!(s.best, Some((0, 64, 32)), "the smaller run that still covers the goal");
        assert!(!s.done);
        s.check_limits(true);
        assert!(s.done, "decided at the group's end");
        assert_eq!(s.result(FoundBy::Pass(Criterion::GoalLenFast)), Some((0, 64, 16, FoundBy::Pass(Criterion::GoalLenFast))));
        let mut s = Search::new(0, 0, false, 16, 16, true);
        s.measure(0, 0, 8);
        s.measure(0, 20, 16);
        assert!(s.done);
        assert_eq!(s.best, Some((0, 20, 16)));
    }

    #[test]
    fn average_run_orders_match_ext4() {
        assert_eq!(avg_order(1, 13), 0);
        assert_eq!(avg_order(3, 13), 0);
        assert_eq!(avg_order(4, 13), 1);
        assert_eq!(avg_order(512, 13), 8);
        assert_eq!(avg_order(1 << 20, 13), 13);
    }
}
