//! Reading an inode's on-disk extent tree into an [`ExtentMap`], checking each
//! node against its parent (depth, logical bounds, checksum) so a corrupt
//! tree becomes a typed error, never a panic or an endless walk.

use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::error::{Corrupt, Error, Result};
use crate::format::extent::{self, ExtentNode};
use crate::format::inode::Inode;
use crate::format::{BlockNumber, InodeNumber};

use super::map::ExtentMap;

/// Most tree nodes one inode may have: bounds the walk of a hostile tree.
pub const MAX_TREE_NODES: usize = 1 << 20;

/// What was read: the mapping and the blocks the tree occupies.
#[derive(Debug, Clone, Default)]
pub struct LoadedTree {
    pub map: ExtentMap,
    pub tree_blocks: Vec<BlockNumber>,
}

struct Walk<'a, D: BlockDevice + ?Sized> {
    cache: &'a mut BufferCache,
    dev: &'a mut D,
    ino: InodeNumber,
    seed: Option<u32>,
    blocks_count: u64,
    out: LoadedTree,
}

fn bad(ino: InodeNumber, what: String) -> Error {
    Error::Corrupt(Corrupt::Extent { ino, what })
}

impl<D: BlockDevice + ?Sized> Walk<'_, D> {
    fn node(&mut self, node: ExtentNode, lo: u64, hi: u64) -> Result<()> {
        match node {
            ExtentNode::Leaf(exts) => {
                for e in exts {
                    if u64::from(e.logical) < lo || e.logical_end() > hi {
                        return Err(bad(self.ino, format!("extent at {} outside its index range {lo}..{hi}", e.logical)));
                    }
                    let end = e.physical.checked_add(u64::from(e.len));
                    if e.physical == 0 || end.is_none_or(|x| x > self.blocks_count) {
                        return Err(bad(self.ino, format!("extent {e:?} outside the filesystem")));
                    }
                    if self.out.map.hole_blocks(u64::from(e.logical)..e.logical_end()) != u64::from(e.len) {
                        return Err(bad(self.ino, format!("extent at {} overlaps another", e.logical)));
                    }
                    self.out.map.insert(u64::from(e.logical), u64::from(e.len), e.physical, e.unwritten);
                }
                Ok(())
            }
            ExtentNode::Index { depth, children } => {
                for (i, c) in children.iter().enumerate() {
                    let c_lo = u64::from(c.logical).max(lo);
                    let c_hi = children.get(i + 1).map_or(hi, |n| u64::from(n.logical));
                    if c.child == 0 || c.child >= self.blocks_count {
                        return Err(bad(self.ino, format!("index points at block {} outside the filesystem", c.child)));
                    }
                    if self.out.tree_blocks.len() >= MAX_TREE_NODES {
                        return Err(bad(self.ino, format!("more than {MAX_TREE_NODES} tree nodes")));
                    }
                    self.out.tree_blocks.push(c.child);
                    let b = self.cache.get(self.dev, c.child)?.to_vec();
                    let (h, child) = extent::parse_node(&b, self.ino)?;
                    if h.depth + 1 != depth {
                        return Err(bad(self.ino, format!("block {} has depth {} under a depth-{depth} index", c.child, h.depth)));
                    }
                    if let Some(s) = self.seed {
                        extent::verify_block_checksum(&b, &h, s, self.ino, c.child)?;
                    }
                    self.node(child, c_lo, c_hi)?;
                }
                Ok(())
            }
        }
    }
}

/// Reads the tree rooted in `inode.block`.
pub fn load<D: BlockDevice + ?Sized>(
    cache: &mut BufferCache,
    dev: &mut D,
    ino: InodeNumber,
    inode: &Inode,
    ino_seed: Option<u32>,
    blocks_count: u64,
) -> Result<LoadedTree> {
    let (_, root) = extent::parse_node(&inode.block, ino)?;
    let mut w = Walk { cache, dev, ino, seed: ino_seed, blocks_count, out: LoadedTree::default() };
    w.node(root, 0, 1 << 32)?;
    let mut seen = w.out.tree_blocks.clone();
    seen.sort_unstable();
    if seen.windows(2).any(|p| p[0] == p[1]) {
        return Err(bad(ino, "a tree block is referenced twice".into()));
    }
    Ok(w.out)
}
