//! ext4_find_extent: one lookup in an inode's on-disk extent tree, from the
//! root in the inode down through index blocks read from the buffer cache,
//! a binary search in each node (ext4_ext_binsearch_idx, _binsearch).
//!
//! It serves the extent status cache's misses, and the uncached ("legacy")
//! lookups that reproduce the 2020 fiemap regression. The two differ in how
//! they trust what they read ([`Check`]).

use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::error::{Corrupt, Error, Result};
use crate::format::extent::{self, Extent, ExtentHeader};
use crate::format::inode::Inode;
use crate::format::InodeNumber;

use super::load::MAX_TREE_NODES;

/// How a lookup checks the nodes it reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// A block node is checked whole (entries, order, checksum with this
    /// inode seed) the first time it is read into the buffer cache, then
    /// trusted while it stays there, as ext4 trusts a buffer_verified block.
    Once { seed: Option<u32> },
    /// Every node is parsed whole on every read: the legacy mode, with no
    /// cache above the buffer cache at all.
    Every,
}

fn bad(ino: InodeNumber, what: String) -> Error {
    Error::Corrupt(Corrupt::Extent { ino, what })
}

/// How many of the node's entries start at or before `at`.
fn entries_up_to(b: &[u8], h: &ExtentHeader, at: u64) -> usize {
    let (mut lo, mut hi) = (0, usize::from(h.entries));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if entry_start(b, h, mid) <= at {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn entry_start(b: &[u8], h: &ExtentHeader, i: usize) -> u64 {
    extent::entry_logical(b, h, i).map_or(u64::MAX, u64::from)
}

/// What one lookup found around a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Near {
    /// The extent holding the block, or else the first one after it.
    pub extent: Option<Extent>,
    /// Where the extent before the block ends, when the leaf the descent
    /// reached holds one: where the hole the block is in starts
    /// (ext4_ext_find_hole).
    pub before_end: Option<u64>,
}

/// Finds what is at `lblk` by descending from the root (the next leaf is
/// reached by descending again from the key of the next index entry, as
/// ext4_ext_next_allocated_block gives it).
pub fn find_extent<D: BlockDevice + ?Sized>(cache: &mut BufferCache, dev: &mut D, ino: InodeNumber, inode: &Inode, lblk: u64, check: Check) -> Result<Near> {
    let root: &[u8] = &inode.block;
    // The root is small and in the inode: always checked whole.
    let (root_h, _) = extent::parse_node(root, ino)?;
    let mut at = lblk;
    let mut before_end: Option<Option<u64>> = None;
    for _ in 0..MAX_TREE_NODES {
        // The smallest key right of the path: where the next leaf starts.
        let mut next_key: Option<u64> = None;
        let mut h = root_h;
        let mut child = None;
        loop {
            let reading = child;
            let mut checked_now = false;
            let found = {
                let b: &[u8] = match reading {
                    None => root,
                    Some(block) => {
                        let trusted = matches!(check, Check::Once { .. }) && cache.is_verified(block);
                        let b = cache.get(dev, block)?;
                        let nh = extent::parse_header(b, ino)?;
                        if nh.depth + 1 != h.depth {
                            return Err(bad(ino, format!("block {block} has depth {} under a depth-{} index", nh.depth, h.depth)));
                        }
                        if !trusted {
                            extent::parse_node(b, ino)?;
                            if let Check::Once { seed: Some(s) } = check {
                                extent::verify_block_checksum(b, &nh, s, ino, block)?;
                            }
                            checked_now = true;
                        }
                        h = nh;
                        b
                    }
                };
                let i = entries_up_to(b, &h, at);
                if h.depth == 0 {
                    // The last extent starting at or before `at`: it holds
                    // `at`, or else the hole `at` is in starts where it ends.
                    let last = i.checked_sub(1).map(|j| extent::leaf_entry(b, &h, j, ino)).transpose()?;
                    let holding = last.filter(|e| e.logical_end() > at);
                    let after = if holding.is_none() && i < usize::from(h.entries) { Some(extent::leaf_entry(b, &h, i, ino)?) } else { None };
                    if before_end.is_none() {
                        before_end = Some(last.filter(|_| holding.is_none()).map(|e| e.logical_end()));
                    }
                    Some(holding.or(after))
                } else {
                    if i < usize::from(h.entries) {
                        let k = entry_start(b, &h, i);
                        next_key = Some(next_key.map_or(k, |n| n.min(k)));
                    }
                    let idx = extent::index_entry(b, &h, i.saturating_sub(1), ino)?;
                    if idx.child == 0 {
                        return Err(bad(ino, "an index entry points at block 0".into()));
                    }
                    child = Some(idx.child);
                    None
                }
            };
            if let (true, Check::Once { .. }, Some(block)) = (checked_now, check, reading) {
                cache.set_verified(block);
            }
            match found {
                Some(Some(e)) => return Ok(Near { extent: Some(e), before_end: before_end.flatten() }),
                Some(None) => break,
                None => {}
            }
        }
        match next_key {
            Some(k) if k > at => at = k,
            _ => return Ok(Near { extent: None, before_end: before_end.flatten() }),
        }
    }
    Err(bad(ino, format!("more than {MAX_TREE_NODES} leaves on one lookup")))
}
