//! An inode's logical -> physical mapping in memory: disjoint runs kept merged,
//! the authoritative copy the on-disk tree is rebuilt from.
//!
//! - Runs merge when they touch logically *and* physically and share a state
//!   (written / unwritten), so a file written in order is one run however
//!   long; the on-disk encoder splits runs at ext4's extent length limits.
//! - Logical positions are `u64` so a shift never wraps; the encoder refuses
//!   anything past the 32-bit logical block space.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::format::BlockNumber;

/// One past the last logical block an extent may cover (ext4's EXT_MAX_BLOCKS).
pub const EXT_MAX_BLOCKS: u64 = 0xFFFF_FFFF;

/// One mapped run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub len: u64,
    pub physical: BlockNumber,
    pub unwritten: bool,
}

/// A clipped view of a run: `logical..logical + len` maps to `physical..`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub logical: u64,
    pub len: u64,
    pub physical: BlockNumber,
    pub unwritten: bool,
}

/// Disjoint merged runs by first logical block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentMap {
    runs: BTreeMap<u64, Run>,
    /// Sum of run lengths, kept so stat is O(1).
    mapped: u64,
}

impl ExtentMap {
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks mapped (written or unwritten).
    pub fn blocks(&self) -> u64 {
        self.mapped
    }

    /// Number of merged runs.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = Piece> + '_ {
        self.runs.iter().map(|(&l, r)| Piece { logical: l, len: r.len, physical: r.physical, unwritten: r.unwritten })
    }

    /// One past the last mapped logical block (0 when empty).
    pub fn end(&self) -> u64 {
        self.runs.iter().next_back().map_or(0, |(l, r)| l + r.len)
    }

    /// Where the last run meeting `range` starts, clipped to the range:
    /// the extent a truncate frees next (None when nothing is mapped there).
    pub fn last_run_start(&self, range: Range<u64>) -> Option<u64> {
        if range.is_empty() {
            return None;
        }
        let (&l, r) = self.runs.range(..range.end).next_back()?;
        (l + r.len > range.start).then(|| l.max(range.start))
    }

    /// The run piece holding `lblk`, clipped to start there.
    pub fn lookup(&self, lblk: u64) -> Option<Piece> {
        let (&l, r) = self.runs.range(..=lblk).next_back()?;
        (lblk < l + r.len).then(|| Piece { logical: lblk, len: l + r.len - lblk, physical: r.physical + (lblk - l), unwritten: r.unwritten })
    }

    /// The whole run holding `lblk`, unclipped.
    pub fn run_at(&self, lblk: u64) -> Option<Piece> {
        let (&l, r) = self.runs.range(..=lblk).next_back()?;
        (lblk < l + r.len).then_some(Piece { logical: l, len: r.len, physical: r.physical, unwritten: r.unwritten })
    }

    /// First logical block of the first run starting after `lblk`.
    pub fn next_start(&self, lblk: u64) -> Option<u64> {
        self.runs.range(lblk.checked_add(1)?..).next().map(|(l, _)| *l)
    }

    /// Mapped pieces inside `range`, clipped, in order.
    pub fn pieces(&self, range: Range<u64>) -> Vec<Piece> {
        let mut out = Vec::new();
        if range.start >= range.end {
            return out;
        }
        let first = self.runs.range(..=range.start).next_back().map_or(range.start, |(l, _)| *l);
        for (&l, r) in self.runs.range(first..range.end) {
            let lo = l.max(range.start);
            let hi = (l + r.len).min(range.end);
            if lo < hi {
                out.push(Piece { logical: lo, len: hi - lo, physical: r.physical + (lo - l), unwritten: r.unwritten });
            }
        }
        out
    }

    /// Unmapped sub-ranges of `range`, in order.
    pub fn holes(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut pos = range.start;
        for p in self.pieces(range.clone()) {
            if p.logical > pos {
                out.push(pos..p.logical);
            }
            pos = p.logical + p.len;
        }
        if pos < range.end {
            out.push(pos..range.end);
        }
        out
    }

    /// Blocks of `range` that are unmapped.
    pub fn hole_blocks(&self, range: Range<u64>) -> u64 {
        self.holes(range).iter().map(|r| r.end - r.start).sum()
    }

    /// A physical goal for allocating at `lblk`: continue the nearest run
    /// before it (ext4_ext_find_goal), else sit just before the run after it.
    pub fn goal_for(&self, lblk: u64) -> Option<BlockNumber> {
        if let Some((&l, r)) = self.runs.range(..=lblk).next_back() {
            return Some(r.physical.saturating_add(lblk - l));
        }
        let (&l, r) = self.runs.range(lblk..).next()?;
        Some(r.physical.saturating_sub(l - lblk))
    }

    /// The last mapped block before `lblk`: (logical, physical).
    pub fn left_of(&self, lblk: u64) -> Option<(u64, BlockNumber)> {
        let (&l, r) = self.runs.range(..lblk).next_back()?;
        let last = (l + r.len).min(lblk) - 1;
        Some((last, r.physical + (last - l)))
    }

    /// The first mapped block at or after `lblk`: (logical, physical).
    pub fn right_of(&self, lblk: u64) -> Option<(u64, BlockNumber)> {
        if let Some(p) = self.lookup(lblk) {
            return Some((lblk, p.physical));
        }
        let (&l, r) = self.runs.range(lblk..).next()?;
        Some((l, r.physical))
    }

    /// Splits the run holding `pos` so that a run starts exactly at `pos`.
    fn split_at(&mut self, pos: u64) {
        let Some((&l, r)) = self.runs.range(..pos).next_back() else { return };
        let r = *r;
        if pos < l + r.len {
            let head = pos - l;
            self.runs.insert(l, Run { len: head, ..r });
            self.runs.insert(pos, Run { len: r.len - head, physical: r.physical + head, unwritten: r.unwritten });
        }
    }

    /// Merges the run starting at `pos` with touching neighbours of the same kind.
    fn merge_around(&mut self, pos: u64) {
        let Some(&cur) = self.runs.get(&pos) else { return };
        let mut start = pos;
        let mut run = cur;
        if let Some((&pl, &pr)) = self.runs.range(..pos).next_back() {
            if pl + pr.len == pos && pr.physical + pr.len == cur.physical && pr.unwritten == cur.unwritten {
                self.runs.remove(&pos);
                start = pl;
                run = Run { len: pr.len + cur.len, ..pr };
            }
        }
        let next_at = start + run.len;
        if let Some(&nr) = self.runs.get(&next_at) {
            if run.physical + run.len == nr.physical && run.unwritten == nr.unwritten {
                self.runs.remove(&next_at);
                run.len += nr.len;
            }
        }
        self.runs.insert(start, run);
    }

    /// Maps `logical..logical + len` (which must be unmapped) to `physical..`.
    pub fn insert(&mut self, logical: u64, len: u64, physical: BlockNumber, unwritten: bool) {
        if len == 0 {
            return;
        }
        debug_assert_eq!(self.hole_blocks(logical..logical + len), len, "insert over mapped blocks");
        self.runs.insert(logical, Run { len, physical, unwritten });
        self.mapped += len;
        self.merge_around(logical);
    }

    /// Unmaps `range`; returns the physical runs that were mapped there.
    pub fn remove(&mut self, range: Range<u64>) -> Vec<(BlockNumber, u64)> {
        let mut freed = Vec::new();
        if range.start >= range.end {
            return freed;
        }
        self.split_at(range.start);
        self.split_at(range.end);
        let inside: Vec<u64> = self.runs.range(range.start..range.end).map(|(l, _)| *l).collect();
        for l in inside {
            if let Some(r) = self.runs.remove(&l) {
                self.mapped -= r.len;
                freed.push((r.physical, r.len));
            }
        }
        freed
    }

    /// Sets every mapped block of `range` to written or unwritten.
    pub fn set_state(&mut self, range: Range<u64>, unwritten: bool) {
        if range.start >= range.end {
            return;
        }
        self.split_at(range.start);
        self.split_at(range.end);
        let inside: Vec<u64> = self.runs.range(range.start..range.end).map(|(l, _)| *l).collect();
        for l in &inside {
            if let Some(r) = self.runs.get_mut(l) {
                r.unwritten = unwritten;
            }
        }
        for l in inside {
            self.merge_around(l);
        }
        if let Some((&l, _)) = self.runs.range(range.end..).next() {
            self.merge_around(l);
        }
    }

    /// Moves every run at or after `from` by `delta` blocks. The caller has
    /// cleared what a downward move lands on; `None` if a run would leave u64.
    pub fn shift_from(&mut self, from: u64, delta: i64) -> Option<()> {
        self.split_at(from);
        let moved: Vec<(u64, Run)> = self.runs.range(from..).map(|(l, r)| (*l, *r)).collect();
        for (l, _) in &moved {
            l.checked_add_signed(delta)?;
        }
        for (l, _) in &moved {
            self.runs.remove(l);
        }
        for (l, r) in &moved {
            let nl = l.checked_add_signed(delta)?;
            debug_assert!(self.pieces(nl..nl + r.len).is_empty(), "shift onto mapped blocks");
            self.runs.insert(nl, *r);
        }
        if let Some((nl, _)) = moved.first().and_then(|(l, r)| Some((l.checked_add_signed(delta)?, r))) {
            self.merge_around(nl);
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_inserts_merge_and_state_changes_split() {
        let mut m = ExtentMap::new();
        m.insert(0, 10, 100, false);
        m.insert(10, 5, 110, false);
        assert_eq!(m.run_count(), 1, "logically and physically contiguous");
        m.insert(15, 5, 500, false);
        assert_eq!(m.run_count(), 2, "physically apart");
        m.set_state(3..7, true);
        assert_eq!(m.run_count(), 4);
        assert_eq!(m.lookup(5), Some(Piece { logical: 5, len: 2, physical: 105, unwritten: true }));
        m.set_state(0..20, false);
        assert_eq!(m.run_count(), 2, "converting back merges again");
        assert_eq!(m.blocks(), 20);
        assert_eq!(m.holes(0..30), vec![20..30]);
        assert_eq!(m.goal_for(25), Some(510));
        assert_eq!(m.goal_for(0), Some(100));
    }

    #[test]
    fn remove_splits_and_returns_physical_runs() {
        let mut m = ExtentMap::new();
        m.insert(0, 100, 1000, false);
        let freed = m.remove(10..20);
        assert_eq!(freed, vec![(1010, 10)]);
        assert_eq!(m.blocks(), 90);
        assert_eq!(m.run_count(), 2);
        assert_eq!(m.holes(0..100), vec![10..20]);
        assert_eq!(m.remove(50..200), vec![(1050, 50)]);
        assert_eq!(m.end(), 50);
        assert_eq!(m.pieces(5..15), vec![Piece { logical: 5, len: 5, physical: 1005, unwritten: false }]);
    }

    #[test]
    fn shifts_move_runs_and_remerge() {
        let mut m = ExtentMap::new();
        m.insert(0, 10, 100, false);
        m.insert(20, 10, 110, false);
        assert_eq!(m.run_count(), 2);
        m.remove(10..20);
        m.shift_from(20, -10).unwrap();
        assert_eq!(m.run_count(), 1, "collapse closed the gap: 0..20 -> 100..120");
        m.shift_from(5, 7).unwrap();
        assert_eq!(m.holes(0..27), vec![5..12]);
        assert_eq!(m.lookup(12).map(|p| p.physical), Some(105));
        assert!(m.shift_from(0, -100).is_none());
    }
}
