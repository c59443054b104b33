//! Where the log lives: journal block `i` (0 = the jbd2 superblock) is
//! filesystem block `physical(i)`, through inode 8's extents. The journal may
//! be several runs (mkfs takes free gaps when there is no single one).
//!
//! Found from the superblock's `s_jnl_blocks` copy of inode 8's `i_block` and
//! size when present, so recovery does not depend on an inode-table block that
//! a torn checkpoint may have damaged; the tree's leaf blocks (if any) are
//! written once by mkfs and never again. Otherwise inode 8 is read.

use crate::device::{BlockDevice, IoClass};
use crate::error::{Corrupt, Error, Result};
use crate::format::extent::{self, Extent, ExtentNode, MAX_DEPTH};
use crate::format::inode::JOURNAL_INO;
use crate::format::superblock::{Superblock, JNL_BACKUP_BLOCKS};
use crate::format::BlockNumber;
use crate::image::Image;

/// Most extent-tree nodes a journal's tree may have.
const MAX_NODES: usize = 4096;

fn bad(what: String) -> Error {
    Error::Corrupt(Corrupt::Journal(what))
}

/// One physical run of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    logical: u32,
    physical: BlockNumber,
    len: u32,
}

/// Journal block -> filesystem block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogMap {
    runs: Vec<Run>,
    /// Blocks mapped from 0 without a hole.
    blocks: u32,
}

impl LogMap {
    /// From the journal inode's extents, which must map `0..size_blocks`
    /// without holes inside a `fs_blocks`-block filesystem.
    pub fn from_extents(extents: &[Extent], size_blocks: u64, fs_blocks: u64) -> Result<Self> {
        let mut runs = Vec::new();
        let mut next = 0u64;
        for e in extents {
            if next >= size_blocks {
                break;
            }
            if u64::from(e.logical) != next || e.unwritten {
                return Err(bad(format!("journal inode has a hole or unwritten extent at block {next}")));
            }
            let end = e.physical.checked_add(u64::from(e.len)).filter(|&x| x <= fs_blocks && e.physical > 0);
            if end.is_none() {
                return Err(bad(format!("journal extent {}+{} outside the filesystem", e.physical, e.len)));
            }
            runs.push(Run { logical: e.logical, physical: e.physical, len: e.len });
            next = e.logical_end();
        }
        if next < size_blocks {
            return Err(bad(format!("journal inode maps {next} of its {size_blocks} blocks")));
        }
        let blocks = u32::try_from(size_blocks).map_err(|_| bad(format!("journal of {size_blocks} blocks")))?;
        Ok(LogMap { runs, blocks })
    }

    /// Blocks the map covers.
    pub fn blocks(&self) -> u32 {
        self.blocks
    }

    /// The filesystem block of journal block `logical`.
    pub fn physical(&self, logical: u32) -> Result<BlockNumber> {
        if logical >= self.blocks {
            return Err(bad(format!("journal block {logical} past the {}-block journal", self.blocks)));
        }
        let i = self.runs.partition_point(|r| r.logical <= logical);
        let r = i.checked_sub(1).and_then(|i| self.runs.get(i)).ok_or_else(|| bad(format!("journal block {logical} unmapped")))?;
        Ok(r.physical + u64::from(logical - r.logical))
    }

    /// How many journal blocks from `logical` on sit contiguously on disk
    /// (at least 1, at most to the end of the run).
    pub fn contiguous_from(&self, logical: u32) -> u32 {
        let i = self.runs.partition_point(|r| r.logical <= logical);
        match i.checked_sub(1).and_then(|i| self.runs.get(i)) {
            Some(r) => (r.logical + r.len - logical).min(self.blocks - logical).max(1),
            None => 1,
        }
    }

    /// Finds the journal of the filesystem `sb` describes.
    pub fn load<D: BlockDevice>(dev: &mut D, sb: &Superblock) -> Result<Self> {
        let bs = u64::from(sb.block_size());
        let fs_blocks = sb.blocks_count;
        if sb.jnl_backup_type == JNL_BACKUP_BLOCKS {
            let mut root = [0u8; 60];
            for (i, w) in sb.jnl_blocks.iter().take(15).enumerate() {
                root[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
            }
            let size = (u64::from(sb.jnl_blocks[15]) << 32) | u64::from(sb.jnl_blocks[16]);
            let extents = walk_backup(dev, &root, bs, fs_blocks)?;
            return Self::from_extents(&extents, size / bs, fs_blocks);
        }
        let mut img = Image::open(&mut *dev)?;
        let inode = img.read_inode(sb.journal_inum)?;
        let extents = img.extents(sb.journal_inum, &inode)?;
        Self::from_extents(&extents, inode.size / bs, fs_blocks)
    }
}

/// The extents under the `s_jnl_blocks` root, reading index children.
fn walk_backup<D: BlockDevice>(dev: &mut D, root: &[u8], bs: u64, fs_blocks: u64) -> Result<Vec<Extent>> {
    let (h, node) = extent::parse_node(root, JOURNAL_INO)?;
    if h.depth > MAX_DEPTH {
        return Err(bad(format!("journal extent tree of depth {}", h.depth)));
    }
    let mut out = Vec::new();
    let mut stack = vec![(h.depth, node)];
    let mut visited = 1usize;
    while let Some((depth, node)) = stack.pop() {
        match node {
            ExtentNode::Leaf(exts) => out.extend(exts),
            ExtentNode::Index { children, .. } => {
                // Pushed in reverse so leaves come out in logical order.
                for c in children.iter().rev() {
                    visited += 1;
                    if visited > MAX_NODES || c.child == 0 || c.child >= fs_blocks {
                        return Err(bad(format!("journal extent index to block {} (node {visited})", c.child)));
                    }
                    let mut b = vec![0u8; bs as usize];
                    dev.read(c.child * bs, &mut b, IoClass::Journal)?;
                    let (ch, child) = extent::parse_node(&b, JOURNAL_INO)?;
                    if ch.depth.checked_add(1) != Some(depth) {
                        return Err(bad(format!("journal extent block {} has depth {} under depth {depth}", c.child, ch.depth)));
                    }
                    stack.push((ch.depth, child));
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(logical: u32, physical: u64, len: u32) -> Extent {
        Extent { logical, len, physical, unwritten: false }
    }

    #[test]
    fn several_runs_map_in_order() {
        let m = LogMap::from_extents(&[ext(0, 100, 10), ext(10, 500, 5), ext(15, 20, 1009)], 1024, 10_000).unwrap();
        assert_eq!(m.physical(0).unwrap(), 100);
        assert_eq!(m.physical(9).unwrap(), 109);
        assert_eq!(m.physical(10).unwrap(), 500);
        assert_eq!(m.physical(1023).unwrap(), 20 + 1008);
        assert!(m.physical(1024).is_err());
        assert_eq!(m.contiguous_from(3), 7);
        assert_eq!(m.contiguous_from(14), 1);
    }

    #[test]
    fn holes_and_out_of_range_runs_are_corruption() {
        assert!(LogMap::from_extents(&[ext(0, 100, 10), ext(11, 500, 1013)], 1024, 10_000).is_err());
        assert!(LogMap::from_extents(&[ext(0, 100, 1000)], 1024, 10_000).is_err());
        assert!(LogMap::from_extents(&[ext(0, 9_500, 1024)], 1024, 10_000).is_err());
    }
}
