//! Walks one inode's extent tree, reporting every malformed node instead of
//! stopping at the first: header fields, depth against the parent, entry
//! order and coverage of the parent's index range, the child's first key
//! against its index, block checksums, and physical ranges inside the
//! filesystem. A bad subtree is skipped; its blocks then show up as bitmap
//! differences, as they would in e2fsck.

use crate::device::BlockDevice;
use crate::error::{Corrupt, Error};
use crate::format::extent::{self, capacity, Extent, ExtentNode, ROOT_MAX_ENTRIES};
use crate::format::inode::Inode;
use crate::format::{BlockNumber, InodeNumber};
use crate::image::MAX_EXTENT_NODES;

use super::problem::{Owner, Problem};
use super::state::Checker;

/// An inode's mapping as far as it could be read.
#[derive(Debug, Default)]
pub struct Mapping {
    /// Leaf extents in logical order (only those inside the filesystem).
    pub extents: Vec<Extent>,
    /// Index and leaf blocks below the root.
    pub tree_blocks: u64,
    pub depth: u16,
}

/// One past the largest logical block an extent tree can address.
const LOGICAL_END: u64 = 1 << 32;

fn what(e: Error) -> String {
    match e {
        Error::Corrupt(Corrupt::Extent { what, .. }) => what,
        other => other.to_string(),
    }
}

struct Walk<'a, D: BlockDevice> {
    c: &'a mut Checker<D>,
    ino: InodeNumber,
    seed: Option<u32>,
    map: Mapping,
    nodes: usize,
}

/// Walks `inode`'s tree; claims its tree blocks and extents for `ino`.
pub fn walk<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode, seed: Option<u32>) -> Mapping {
    let (h, root) = match extent::parse_node(&inode.block, ino) {
        Ok(x) => x,
        Err(e) => {
            c.report(Problem::ExtentTree { ino, block: 0, what: what(e) });
            return Mapping::default();
        }
    };
    let mut w = Walk { c, ino, seed, map: Mapping { depth: h.depth, ..Mapping::default() }, nodes: 1 };
    if h.max + 2 < ROOT_MAX_ENTRIES {
        w.c.report(Problem::ExtentTree { ino, block: 0, what: format!("eh_max {} < {}", h.max, ROOT_MAX_ENTRIES - 2) });
    }
    w.node(0, h.depth, root, 0, LOGICAL_END);
    for e in &w.map.extents {
        w.c.claims.add(e.physical, u64::from(e.len), Owner::Inode(ino));
    }
    w.map
}

impl<D: BlockDevice> Walk<'_, D> {
    fn bad(&mut self, block: BlockNumber, what: String) {
        self.c.report(Problem::ExtentTree { ino: self.ino, block, what });
    }

    /// Visits a parsed node at `block` (0 = root) covering logical `lo..hi`.
    fn node(&mut self, block: BlockNumber, depth: u16, node: ExtentNode, lo: u64, hi: u64) {
        match node {
            ExtentNode::Leaf(exts) => self.leaf(block, exts, lo, hi),
            ExtentNode::Index { children, .. } => {
                for (i, child) in children.iter().enumerate() {
                    let c_lo = u64::from(child.logical);
                    let c_hi = children.get(i + 1).map_or(hi, |n| u64::from(n.logical));
                    if c_lo < lo || c_lo >= hi {
                        self.bad(block, format!("index {i} at logical {c_lo} outside the parent's range {lo}..{hi}"));
                        continue;
                    }
                    self.child(child.child, depth, c_lo, c_hi);
                }
            }
        }
    }

    fn leaf(&mut self, block: BlockNumber, exts: Vec<Extent>, lo: u64, hi: u64) {
        let geo = &self.c.geo;
        let (first, count) = (u64::from(geo.first_data_block), geo.blocks_count);
        let mask = geo.cluster_ratio() - 1;
        for e in exts {
            if u64::from(e.logical) < lo || e.logical_end() > hi {
                self.bad(block, format!("extent at logical {}+{} outside the index range {lo}..{hi}", e.logical, e.len));
                continue;
            }
            if self.map.extents.last().is_some_and(|p| u64::from(e.logical) < p.logical_end()) {
                self.bad(block, format!("extent at logical {} overlaps the one before", e.logical));
                continue;
            }
            if (u64::from(e.logical) ^ e.physical) & mask != 0 {
                self.bad(block, format!("extent at logical {} starts at block {}, another offset in its cluster", e.logical, e.physical));
                continue;
            }
            let inside = e.physical >= first && e.physical.checked_add(u64::from(e.len)).is_some_and(|end| end <= count);
            if !inside {
                let p = Problem::BlockOutOfRange { ino: self.ino, logical: u64::from(e.logical), physical: e.physical, len: u64::from(e.len) };
                self.c.report(p);
                continue;
            }
            self.map.extents.push(e);
        }
    }

    /// Reads and checks the child node at `blk` under an index of depth `parent_depth`.
    fn child(&mut self, blk: BlockNumber, parent_depth: u16, lo: u64, hi: u64) {
        let ino = self.ino;
        self.nodes = self.nodes.saturating_add(1);
        if self.nodes > MAX_EXTENT_NODES {
            if self.nodes == MAX_EXTENT_NODES + 1 {
                self.bad(blk, format!("more than {MAX_EXTENT_NODES} tree nodes"));
            }
            return;
        }
        if blk < u64::from(self.c.geo.first_data_block) || blk >= self.c.geo.blocks_count {
            self.c.report(Problem::BlockOutOfRange { ino, logical: lo, physical: blk, len: 1 });
            return;
        }
        self.c.claims.add(blk, 1, Owner::Inode(ino));
        self.map.tree_blocks = self.map.tree_blocks.saturating_add(1);
        let b = match self.c.disk.block(blk) {
            Ok(b) => b,
            Err(p) => {
                self.c.report(p);
                return;
            }
        };
        let (h, node) = match extent::parse_node(&b, ino) {
            Ok(x) => x,
            Err(e) => {
                self.bad(blk, what(e));
                return;
            }
        };
        if let Some(seed) = self.seed {
            if let Err(Error::Corrupt(Corrupt::Checksum { stored, computed, .. })) = extent::verify_block_checksum(&b, &h, seed, ino, blk) {
                self.c.report(Problem::ExtentChecksum { ino, block: blk, stored, computed });
            }
        }
        if h.depth.checked_add(1) != Some(parent_depth) {
            self.bad(blk, format!("depth {} under a depth-{parent_depth} index", h.depth));
            return;
        }
        let cap = capacity(b.len());
        if h.max.saturating_add(2) < cap {
            self.bad(blk, format!("eh_max {} < {}", h.max, cap - 2));
        }
        let first_key = match &node {
            ExtentNode::Leaf(v) => v.first().map(|e| e.logical),
            ExtentNode::Index { children, .. } => children.first().map(|i| i.logical),
        };
        match first_key {
            None => {
                self.bad(blk, "empty node below the root".to_string());
                return;
            }
            Some(k) if u64::from(k) != lo => {
                self.bad(blk, format!("first entry at logical {k}, its index says {lo}"));
            }
            Some(_) => {}
        }
        self.node(blk, h.depth, node, lo, hi);
    }
}
