//! Who uses which blocks. Every metadata region and every inode's data and
//! tree blocks is recorded as a run; sorting the runs once finds blocks
//! claimed twice and yields the merged set of used blocks that the bitmaps
//! and free counts are compared against.
//!
//! Memory is proportional to the number of runs (extents, groups), not to the
//! filesystem size, so a 16 TiB image costs no more than its metadata.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::format::BlockNumber;

use super::problem::{Owner, Problem};

/// Most distinct owner pairs reported as multiply claimed.
const MAX_OVERLAP_PAIRS: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Claim {
    start: BlockNumber,
    end: BlockNumber,
    owner: Owner,
}

/// Runs claimed so far.
#[derive(Debug, Default)]
pub struct Claims {
    runs: Vec<Claim>,
}

impl Claims {
    /// Records that `owner` uses `start..start + len`; callers have checked the range.
    pub fn add(&mut self, start: BlockNumber, len: u64, owner: Owner) {
        if let Some(end) = start.checked_add(len).filter(|_| len > 0) {
            self.runs.push(Claim { start, end, owner });
        }
    }

    /// Sorts the runs, reports blocks claimed more than once and returns the
    /// union. Under bigalloc (`cluster_bits` > 0) a claim uses its whole
    /// clusters: an inode may share a cluster only with itself, metadata
    /// only with metadata, and the union is in whole clusters.
    pub fn finish(mut self, problems: &mut Vec<Problem>, cluster_bits: u32) -> UsedBlocks {
        let used = self.union_and_overlaps(problems);
        if cluster_bits == 0 {
            return used;
        }
        let mask = (1u64 << cluster_bits) - 1;
        for c in &mut self.runs {
            c.start &= !mask;
            c.end = c.end.saturating_add(mask) & !mask;
        }
        let pair = |p: &Problem| match p {
            Problem::MultiplyClaimed { a, b, .. } => Some((*a, *b)),
            _ => None,
        };
        let seen: Vec<(Owner, Owner)> = problems.iter().filter_map(pair).collect();
        let mut shared = Vec::new();
        let used = self.union_and_overlaps(&mut shared);
        problems.extend(shared.into_iter().filter(|p| match pair(p) {
            Some((Owner::Metadata { .. }, Owner::Metadata { .. })) => false,
            Some((a, b)) => a != b && !seen.contains(&(a, b)),
            None => true,
        }));
        used
    }

    fn union_and_overlaps(&mut self, problems: &mut Vec<Problem>) -> UsedBlocks {
        self.runs.sort_unstable();
        // (a, b) -> (first block, blocks) so one bad extent is one problem, not thousands.
        let mut overlaps: BTreeMap<(Owner, Owner), (BlockNumber, u64)> = BTreeMap::new();
        let mut merged: Vec<Range<BlockNumber>> = Vec::new();
        let mut reach: Option<(BlockNumber, Owner)> = None;
        for c in &self.runs {
            if let Some((end, owner)) = reach {
                if c.start < end {
                    let both = c.end.min(end) - c.start;
                    let key = if owner <= c.owner { (owner, c.owner) } else { (c.owner, owner) };
                    if overlaps.len() < MAX_OVERLAP_PAIRS || overlaps.contains_key(&key) {
                        let e = overlaps.entry(key).or_insert((c.start, 0));
                        e.1 = e.1.saturating_add(both);
                    }
                }
            }
            if reach.is_none_or(|(end, _)| c.end > end) {
                reach = Some((c.end, c.owner));
            }
            match merged.last_mut() {
                Some(last) if c.start <= last.end => last.end = last.end.max(c.end),
                _ => merged.push(c.start..c.end),
            }
        }
        for ((a, b), (first_block, blocks)) in overlaps {
            problems.push(Problem::MultiplyClaimed { first_block, blocks, a, b });
        }
        UsedBlocks { runs: merged }
    }
}

/// The union of all claims: sorted, disjoint, non-touching runs.
#[derive(Debug, Default)]
pub struct UsedBlocks {
    runs: Vec<Range<BlockNumber>>,
}

impl UsedBlocks {
    /// The runs clipped to `r`, in order.
    pub fn runs_in(&self, r: Range<BlockNumber>) -> impl Iterator<Item = Range<BlockNumber>> + '_ {
        let first = self.runs.partition_point(|x| x.end <= r.start);
        self.runs[first..]
            .iter()
            .take_while(move |x| x.start < r.end)
            .map(move |x| x.start.max(r.start)..x.end.min(r.end))
    }

    pub fn count_in(&self, r: Range<BlockNumber>) -> u64 {
        self.runs_in(r).map(|x| x.end - x.start).sum()
    }

}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::problem::MetaKind;

    #[test]
    fn overlaps_are_reported_per_owner_pair_and_union_merges() {
        let mut c = Claims::default();
        c.add(10, 5, Owner::metadata(0, MetaKind::InodeTable));
        c.add(14, 3, Owner::Inode(12));
        c.add(15, 1, Owner::Inode(13));
        c.add(17, 2, Owner::Inode(12));
        c.add(30, 1, Owner::Inode(14));
        let mut problems = Vec::new();
        let used = c.finish(&mut problems, 0);
        assert_eq!(used.runs, vec![10..19, 30..31]);
        assert_eq!(used.count_in(12..31), 8);
        assert_eq!(used.runs_in(0..12).collect::<Vec<_>>(), vec![10..12]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.contains(&Problem::MultiplyClaimed {
            first_block: 14,
            blocks: 1,
            a: Owner::metadata(0, MetaKind::InodeTable),
            b: Owner::Inode(12)
        }));
        assert!(problems.contains(&Problem::MultiplyClaimed { first_block: 15, blocks: 1, a: Owner::Inode(12), b: Owner::Inode(13) }));
    }
}
