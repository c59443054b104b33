//! bigalloc: space comes in clusters of 2^n blocks, files still map blocks.
//! The rules ext4 keeps (fs/ext4/extents.c, get_implied_cluster_alloc and
//! the partial-cluster handling of extent removal):
//!
//! - A logical cluster of a file lives in one physical cluster, at the same
//!   offset: block `l` sits at `cluster(p) + l % ratio`. A hole in a cluster
//!   that already maps a block is filled from that cluster, allocating
//!   nothing; a cluster with no mapped block gets a whole new one.
//! - A physical cluster is freed when the last block of its logical
//!   cluster is unmapped, not before.
//! - Delayed allocation reserves a cluster per logical cluster that has
//!   delayed blocks and no mapped one (i_reserved_data_blocks counts
//!   clusters); space checks ask for the clusters a range would newly touch.
//! - Every extent-tree block takes a cluster of its own; i_blocks and
//!   st_blocks count whole clusters.
//!
//! With one block per cluster every function here is the plain block rule.

use std::collections::BTreeSet;
use std::ops::Range;

use crate::alloc::AllocRequest;
use crate::device::BlockDevice;
use crate::error::Result;
use crate::extent_status::ExtentStatusTree;
use crate::extent_tree::ExtentMap;
use crate::format::{BlockNumber, InodeNumber};
use crate::range_set::RangeSet;

use super::node::Node;
use super::Ctx;

/// The clusters a non-empty range of blocks touches.
fn clusters_of(r: Range<u64>, bits: u32) -> Range<u64> {
    r.start >> bits..((r.end - 1) >> bits) + 1
}

/// Logical clusters touched by `ranges` of blocks, as a set of cluster numbers.
fn cluster_set(ranges: impl Iterator<Item = Range<u64>>, bits: u32) -> RangeSet {
    let mut set = RangeSet::new();
    for r in ranges.filter(|r| r.start < r.end) {
        set.add(clusters_of(r, bits));
    }
    set
}

/// `range` widened to whole clusters.
fn widen(range: &Range<u64>, bits: u32) -> Range<u64> {
    let mask = (1u64 << bits) - 1;
    (range.start & !mask)..range.end.saturating_add(mask) & !mask
}

/// Blocks (whole clusters) a file's data holds: logical clusters with a
/// mapped or delayed block, times the cluster. Stat's st_blocks and the
/// data part of i_blocks.
pub fn data_blocks(map: &ExtentMap, es: &ExtentStatusTree, bits: u32, delayed_too: bool) -> u64 {
    if bits == 0 {
        return map.blocks() + if delayed_too { es.delayed_blocks() } else { 0 };
    }
    let mapped = map.iter().map(|p| p.logical..p.logical + p.len);
    let delayed = es.delayed_in(0..u64::MAX).filter(|_| delayed_too);
    cluster_set(mapped.chain(delayed), bits).len() << bits
}

impl<D: BlockDevice> Ctx<D> {
    pub(crate) fn cluster_bits(&self) -> u32 {
        self.geo.cluster_bits
    }

    /// Blocks (whole clusters) the holes of `range` need that no mapped or
    /// delayed block of their cluster already holds.
    pub fn room_needed(&self, node: &Node, range: Range<u64>) -> u64 {
        let bits = self.cluster_bits();
        if bits == 0 {
            return node.es.holes_in(node.map(), range);
        }
        if range.start >= range.end {
            return 0;
        }
        let wide = widen(&range, bits);
        let mut need = cluster_set(node.map().holes(range).into_iter(), bits);
        for p in node.map().pieces(wide.clone()) {
            need.remove(clusters_of(p.logical..p.logical + p.len, bits));
        }
        for d in node.es.delayed_in(wide) {
            need.remove(clusters_of(d, bits));
        }
        need.len() << bits
    }

    /// Blocks (whole clusters) reserved for `range`'s clusters: those with
    /// a delayed block and no mapped one. Callers take it before and after
    /// a change to move the reservation by the difference.
    pub fn reserved_in(&self, node: &Node, range: Range<u64>) -> u64 {
        let bits = self.cluster_bits();
        if bits == 0 {
            return node.es.delayed_count(range);
        }
        let wide = widen(&range, bits);
        let mut reserved = cluster_set(node.es.delayed_in(wide.clone()), bits);
        for p in node.map().pieces(wide) {
            reserved.remove(clusters_of(p.logical..p.logical + p.len, bits));
        }
        reserved.len() << bits
    }

    /// Moves the reservation from `before` to what `range` holds now.
    pub fn settle_reservation(&mut self, node: &Node, range: Range<u64>, before: u64) {
        let after = self.reserved_in(node, range);
        self.reserved_blocks = (self.reserved_blocks + after).saturating_sub(before);
    }

    /// The physical block `l` has because another block of its logical
    /// cluster is mapped (get_implied_cluster_alloc); `None` without bigalloc.
    fn implied_block(&self, node: &Node, l: u64) -> Option<BlockNumber> {
        let bits = self.cluster_bits();
        if bits == 0 {
            return None;
        }
        let first = l >> bits << bits;
        let p = node.map().pieces(first..first + (1 << bits)).into_iter().next()?;
        Some(self.geo.cluster_start(p.physical) + (l - first))
    }

    /// Physical blocks for the hole `l..end` of `node`, as far as one
    /// allocator answer goes: `(first block, length)` from `l`, or `None`
    /// when the filesystem is full. Under bigalloc a cluster the file
    /// already has is used first, and new clusters are whole.
    pub fn place_blocks(&mut self, ino: InodeNumber, node: &Node, l: u64, end: u64, regular: bool) -> Result<Option<(BlockNumber, u64)>> {
        debug_assert!(l < end);
        let bits = self.cluster_bits();
        let goal = node.map().goal_for(l).unwrap_or_else(|| self.alloc.goal_for_inode(ino, regular));
        if bits == 0 {
            let req = self.alloc_request(ino, node, l..end, goal, regular);
            return self.alloc.allocate(&mut self.dev, &req);
        }
        let ratio = 1u64 << bits;
        let first = l >> bits << bits;
        if let Some(p) = self.implied_block(node, l) {
            return Ok(Some((p, end.min(first + ratio) - l)));
        }
        // The last cluster may already have a block past `end`: it is filled
        // from there later, not given a second cluster now.
        let mut last = end.saturating_add(ratio - 1) >> bits << bits;
        if last - ratio > first && self.implied_block(node, last - ratio).is_some() {
            last -= ratio;
        }
        let goal = self.geo.cluster_start(goal);
        let req = self.alloc_request(ino, node, first..last, goal, regular);
        let Some((p, got)) = self.alloc.allocate(&mut self.dev, &req)? else { return Ok(None) };
        debug_assert!(got >= ratio && got % ratio == 0);
        Ok(Some((p + (l - first), end.min(first + got) - l)))
    }

    /// What mballoc is asked for the blocks `range` of `node`.
    fn alloc_request(&self, ino: InodeNumber, node: &Node, range: Range<u64>, goal: BlockNumber, regular: bool) -> AllocRequest {
        AllocRequest {
            ino,
            logical: range.start,
            len: range.end - range.start,
            goal,
            data: regular,
            open_for_write: self.writers.contains(&ino),
            no_normalize: self.no_normalize,
            isize_blocks: node.disk.size.div_ceil(self.bs()),
            left: node.map().left_of(range.start),
            right: node.map().right_of(range.end),
        }
    }

    /// Unmaps `range` of `node` and frees what it held: whole clusters
    /// whose logical cluster has no mapped block left. Returns the blocks
    /// unmapped.
    pub fn unmap_and_free(&mut self, node: &mut Node, range: Range<u64>) -> Result<u64> {
        let bits = self.cluster_bits();
        let removed = node.map().pieces(range.clone());
        node.map_remove(range);
        let mut unmapped = 0;
        let mut freed: BTreeSet<BlockNumber> = BTreeSet::new();
        for p in &removed {
            unmapped += p.len;
            self.cache.forget(p.physical, p.len);
            if bits == 0 {
                self.alloc.free_blocks(&mut self.dev, p.physical, p.len)?;
                continue;
            }
            let mut lc = p.logical >> bits << bits;
            while lc < p.logical + p.len {
                let still_mapped = !node.map().pieces(lc..lc + (1 << bits)).is_empty();
                let at = lc.max(p.logical);
                if !still_mapped || self.bug_frees_partly_used_cluster {
                    freed.insert(self.geo.cluster_start(p.physical + (at - p.logical)));
                }
                lc += 1 << bits;
            }
        }
        // Neighbouring clusters go back as one run.
        let mut runs: Vec<(BlockNumber, u64)> = Vec::new();
        for c in freed {
            match runs.last_mut() {
                Some((s, n)) if *s + *n == c => *n += 1 << bits,
                _ => runs.push((c, 1 << bits)),
            }
        }
        for (s, n) in runs {
            self.cache.forget(s, n);
            self.alloc.free_blocks(&mut self.dev, s, n)?;
        }
        Ok(unmapped)
    }

    /// Frees an extent-tree block: the cluster it took.
    pub fn free_tree_block(&mut self, b: BlockNumber) -> Result<()> {
        let c = self.geo.cluster_start(b);
        self.cache.forget(c, self.geo.cluster_ratio());
        self.alloc.free_blocks(&mut self.dev, c, self.geo.cluster_ratio())
    }
}
