//! Turning an [`ExtentMap`] into an on-disk extent tree: split runs at ext4's
//! length limits, pack leaves full, add index levels until the top fits the
//! four slots of `i_block`.
//!
//! Packing every node full gives the shallowest, narrowest tree for the
//! extent count, which is what e2fsck's extent-tree optimiser checks for
//! ("could be narrower/shorter"); a tree rebuilt on every writeback therefore
//! never draws that complaint, grows a level when a leaf overflows and loses
//! one when the entries fit again.

use crate::error::{Error, Result};
use crate::format::extent::{self, Extent, ExtentIndex, ExtentNode, MAX_INIT_LEN, MAX_UNWRITTEN_LEN, ROOT_MAX_ENTRIES};
use crate::format::inode::I_BLOCK_LEN;
use crate::format::BlockNumber;

use super::map::ExtentMap;

/// The on-disk extents for a map: each run split into encodable pieces.
pub fn disk_extents(map: &ExtentMap) -> Result<Vec<Extent>> {
    let mut out = Vec::with_capacity(map.run_count());
    for p in map.iter() {
        let max = u64::from(if p.unwritten { MAX_UNWRITTEN_LEN } else { MAX_INIT_LEN });
        let mut done = 0u64;
        while done < p.len {
            let len = (p.len - done).min(max);
            let logical = p.logical + done;
            let logical = u32::try_from(logical)
                .ok()
                .filter(|l| u64::from(*l) + len <= 1 << 32)
                .ok_or_else(|| Error::InvalidArgument(format!("logical block {logical} beyond the 32-bit extent space")))?;
            out.push(Extent { logical, len: len as u32, physical: p.physical + done, unwritten: p.unwritten });
            done += len;
        }
    }
    Ok(out)
}

/// Entries per tree block.
pub fn block_capacity(block_size: u32) -> usize {
    usize::from(extent::capacity(block_size as usize))
}

/// Blocks per level, leaves first, for `entries` extents (empty: all in the inode).
pub fn level_sizes(entries: usize, block_size: u32) -> Vec<usize> {
    let cap = block_capacity(block_size).max(1);
    let mut levels = Vec::new();
    let mut n = entries;
    while n > usize::from(ROOT_MAX_ENTRIES) {
        n = n.div_ceil(cap);
        levels.push(n);
    }
    levels
}

/// Tree blocks a map of `entries` on-disk extents needs.
pub fn blocks_needed(entries: usize, block_size: u32) -> usize {
    level_sizes(entries, block_size).iter().sum()
}

/// A tree ready to store: the root for `i_block` and every other node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedTree {
    pub root: [u8; I_BLOCK_LEN],
    /// (block, bytes) of every non-root node, checksummed when a seed is given.
    pub nodes: Vec<(BlockNumber, Vec<u8>)>,
    pub depth: u16,
}

/// Encodes `extents` using exactly `blocks` (as many as [`blocks_needed`] says)
/// for the nodes below the root.
pub fn encode(extents: &[Extent], blocks: &[BlockNumber], block_size: u32, ino_seed: Option<u32>) -> Result<EncodedTree> {
    let levels = level_sizes(extents.len(), block_size);
    let need: usize = levels.iter().sum();
    if blocks.len() != need {
        return Err(Error::InvalidArgument(format!("extent tree needs {need} blocks, {} given", blocks.len())));
    }
    let cap = block_capacity(block_size);
    let mut nodes = Vec::with_capacity(need);
    let mut next_block = blocks.iter().copied();
    // Entries of the level being built: (first logical, node) pairs.
    let mut children: Vec<ExtentIndex> = Vec::new();
    let mut depth = 0u16;
    for (level, &count) in levels.iter().enumerate() {
        let mut built = Vec::with_capacity(count);
        for i in 0..count {
            let block = next_block.next().ok_or_else(|| Error::InvalidArgument("ran out of tree blocks".into()))?;
            let node = if level == 0 {
                let chunk = &extents[i * cap..((i + 1) * cap).min(extents.len())];
                built.push(ExtentIndex { logical: chunk.first().map_or(0, |e| e.logical), child: block });
                ExtentNode::Leaf(chunk.to_vec())
            } else {
                let chunk = &children[i * cap..((i + 1) * cap).min(children.len())];
                built.push(ExtentIndex { logical: chunk.first().map_or(0, |c| c.logical), child: block });
                ExtentNode::Index { depth, children: chunk.to_vec() }
            };
            let mut b = vec![0u8; block_size as usize];
            extent::write_node(&mut b, &node, 0)?;
            if let Some(seed) = ino_seed {
                extent::set_block_checksum(&mut b, seed);
            }
            nodes.push((block, b));
        }
        children = built;
        depth += 1;
    }
    let mut root = [0u8; I_BLOCK_LEN];
    let top = if levels.is_empty() { ExtentNode::Leaf(extents.to_vec()) } else { ExtentNode::Index { depth, children } };
    extent::write_node(&mut root, &top, 0)?;
    Ok(EncodedTree { root, nodes, depth })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::extent::parse_node;

    fn spaced_map(n: u64) -> ExtentMap {
        let mut m = ExtentMap::new();
        for i in 0..n {
            m.insert(i * 2, 1, 1000 + i * 2, i % 3 == 0);
        }
        m
    }

    #[test]
    fn long_runs_split_at_the_length_limits() {
        let mut m = ExtentMap::new();
        m.insert(0, 70000, 5000, false);
        m.insert(70000, 40000, 90000, true);
        let lens: Vec<(u32, bool)> = disk_extents(&m).unwrap().iter().map(|e| (e.len, e.unwritten)).collect();
        assert_eq!(lens, vec![(32768, false), (32768, false), (4464, false), (32767, true), (7233, true)]);
        let mut far = ExtentMap::new();
        far.insert(u64::from(u32::MAX), 2, 7, false);
        assert!(disk_extents(&far).is_err());
    }

    #[test]
    fn depth_grows_with_extents_and_shrinks_back() {
        // 1 KiB blocks: 84 entries per block.
        assert_eq!(level_sizes(4, 1024), Vec::<usize>::new());
        assert_eq!(level_sizes(5, 1024), vec![1]);
        assert_eq!(level_sizes(336, 1024), vec![4]);
        assert_eq!(level_sizes(337, 1024), vec![5, 1]);
        assert_eq!(level_sizes(4 * 84 * 84 + 1, 1024), vec![337, 5, 1]);
        let m = spaced_map(400);
        let ext = disk_extents(&m).unwrap();
        let blocks: Vec<u64> = (0..blocks_needed(ext.len(), 1024) as u64).map(|b| 50 + b).collect();
        let t = encode(&ext, &blocks, 1024, Some(9)).unwrap();
        assert_eq!(t.depth, 2);
        let (h, root) = parse_node(&t.root, 12).unwrap();
        assert_eq!((h.depth, h.entries), (2, 1));
        let ExtentNode::Index { children, .. } = root else { panic!("root indexes") };
        assert_eq!(children[0].child, 55, "the index level comes after the 5 leaves");
        // Every leaf entry comes back in order.
        let mut seen = Vec::new();
        for (_, b) in &t.nodes {
            if let (h, ExtentNode::Leaf(v)) = parse_node(b, 12).unwrap() {
                extent::verify_block_checksum(b, &h, 9, 12, 0).unwrap();
                seen.extend(v);
            }
        }
        assert_eq!(seen, ext);
        let small = spaced_map(3);
        let t = encode(&disk_extents(&small).unwrap(), &[], 1024, None).unwrap();
        assert_eq!((t.depth, t.nodes.len()), (0, 0), "few extents live in the inode again");
        assert!(encode(&ext, &blocks[1..], 1024, None).is_err());
    }
}
