//! ext4_find_extent: one lookup in an inode's on-disk extent tree, from the
//! root in the inode down through index blocks read from the buffer cache,
//! with no extent status cache in front. It serves the uncached ("legacy")
//! lookups that reproduce the 2020 fiemap regression; the engine's own
//! lookups go through its in-memory map.

use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::error::{Corrupt, Error, Result};
use crate::format::extent::{self, Extent, ExtentNode};
use crate::format::inode::Inode;
use crate::format::InodeNumber;

use super::load::MAX_TREE_NODES;

/// The extent holding `lblk`, or else the first one after it, found by
/// descending from the root (the next leaf is reached by descending again
/// from the key of the next index entry, as ext4_ext_next_allocated_block
/// gives it). Each node read is parsed whole.
pub fn find_extent<D: BlockDevice + ?Sized>(cache: &mut BufferCache, dev: &mut D, ino: InodeNumber, inode: &Inode, lblk: u64) -> Result<Option<Extent>> {
    let mut at = lblk;
    for _ in 0..MAX_TREE_NODES {
        let (_, mut node) = extent::parse_node(&inode.block, ino)?;
        // The smallest key right of the path: where the next leaf starts.
        let mut next_key: Option<u64> = None;
        loop {
            match node {
                ExtentNode::Leaf(exts) => {
                    if let Some(e) = exts.into_iter().find(|e| e.logical_end() > at) {
                        return Ok(Some(e));
                    }
                    break;
                }
                ExtentNode::Index { depth, children } => {
                    let i = children.partition_point(|c| u64::from(c.logical) <= at).saturating_sub(1);
                    if let Some(n) = children.get(i + 1) {
                        next_key = Some(next_key.map_or(u64::from(n.logical), |k| k.min(u64::from(n.logical))));
                    }
                    let child = children.get(i).ok_or_else(|| Error::Corrupt(Corrupt::Extent { ino, what: "an index node with no entries".into() }))?.child;
                    let b = cache.get(dev, child)?;
                    let (h, parsed) = extent::parse_node(b, ino)?;
                    if h.depth + 1 != depth {
                        return Err(Error::Corrupt(Corrupt::Extent { ino, what: format!("block {child} has depth {} under a depth-{depth} index", h.depth) }));
                    }
                    node = parsed;
                }
            }
        }
        match next_key {
            Some(k) if k > at => at = k,
            _ => return Ok(None),
        }
    }
    Err(Error::Corrupt(Corrupt::Extent { ino, what: format!("more than {MAX_TREE_NODES} leaves on one lookup") }))
}
