//! Where mkfs puts the journal and how it describes it: mke2fs's size table,
//! one contiguous run when the layout has one (else the free gaps in order),
//! and the journal inode's extent tree (in the inode, or depth 1 with leaf
//! blocks when more than four extents are needed).

use crate::error::Result;
use crate::format::extent::{self, Extent, ExtentIndex, ExtentNode};
use crate::format::geometry::Geometry;
use crate::format::inode::{Inode, Timestamp, FL_EXTENTS, S_IFREG};
use crate::format::BlockNumber;
use crate::range_set::RangeSet;

use super::{alloc, invalid};

/// mke2fs's default journal size in blocks for a filesystem of `blocks` blocks.
pub fn default_journal_blocks(blocks: u64) -> Option<u32> {
    const K: u64 = 1024;
    let table: [(u64, u32); 8] = [
        (32 * K, 1024),
        (256 * K, 4096),
        (512 * K, 8192),
        (4096 * K, 16384),
        (8192 * K, 32768),
        (16384 * K, 65536),
        (32768 * K, 131072),
        (u64::MAX, 262144),
    ];
    if blocks < 2048 {
        return None;
    }
    table.iter().find(|(below, _)| blocks < *below).map(|&(_, j)| j)
}

/// Blocks taken by a journal and its extent tree.
pub(super) struct JournalLayout {
    pub(super) blocks: u32,
    /// First block: the journal superblock.
    pub(super) start: BlockNumber,
    /// (first block, length) of each physical run, in logical order.
    pub(super) runs: Vec<(BlockNumber, u64)>,
    /// Extent leaf blocks (empty when all extents fit in the inode).
    pub(super) leaves: Vec<(BlockNumber, Vec<Extent>)>,
    pub(super) inode: Inode,
}

/// Takes `len` blocks for the journal: one contiguous run when the layout has
/// one, otherwise the free gaps in order (as few as first-fit allows).
/// Under bigalloc the runs are whole clusters (`used` holds whole clusters).
fn journal_runs(used: &mut RangeSet, geo: &Geometry, len: u64) -> Result<Vec<(BlockNumber, u64)>> {
    let goal = u64::from(geo.first_data_block);
    let len = geo.round_to_clusters(len);
    if let Some(at) = used.first_fit(goal, len, geo.blocks_count) {
        used.insert(at..at + len);
        return Ok(vec![(at, len)]);
    }
    let mut runs = Vec::new();
    let mut left = len;
    for gap in used.gaps(goal, geo.blocks_count) {
        let take = (gap.end - gap.start).min(left);
        runs.push((gap.start, take));
        left -= take;
        if left == 0 {
            break;
        }
    }
    if left > 0 {
        return Err(invalid(format!("{len} journal blocks do not fit in the free space")));
    }
    for &(at, n) in &runs {
        used.insert(at..at + n);
    }
    Ok(runs)
}

pub(super) fn layout_journal(
    used: &mut RangeSet,
    geo: &Geometry,
    blocks: u32,
    time: Timestamp,
) -> Result<JournalLayout> {
    let runs = journal_runs(used, geo, u64::from(blocks))?;
    let mut all = Vec::new();
    let mut logical = 0u64;
    for &(at, n) in &runs {
        // The last cluster's tail past the journal's blocks stays unmapped.
        let n = n.min(u64::from(blocks) - logical);
        all.extend(extent::extents_for_run(logical as u32, at, n));
        logical += n;
    }
    let per_leaf = extent::capacity(geo.block_size as usize) as usize;
    let leaf_count = if all.len() <= usize::from(extent::ROOT_MAX_ENTRIES) { 0 } else { all.len().div_ceil(per_leaf) };
    if leaf_count > usize::from(extent::ROOT_MAX_ENTRIES) {
        return Err(invalid(format!("a journal of {} extents needs more than a depth-1 extent tree", all.len())));
    }
    // One cluster per leaf, as ext4 gives every extent block its own.
    let stride = geo.cluster_ratio();
    let leaf_start = if leaf_count > 0 { alloc(used, geo, leaf_count as u64 * stride, "journal extent blocks")? } else { 0 };
    let mut ino = Inode::new(geo.inode_size, S_IFREG | 0o600, time);
    ino.links_count = 1;
    ino.size = u64::from(blocks) * u64::from(geo.block_size);
    ino.blocks = (geo.round_to_clusters(u64::from(blocks)) + leaf_count as u64 * stride) * u64::from(geo.block_size / 512);
    ino.flags = FL_EXTENTS;
    let mut leaves = Vec::new();
    if leaf_count == 0 {
        extent::write_node(&mut ino.block, &ExtentNode::Leaf(all), 0)?;
    } else {
        let mut children = Vec::new();
        for (i, chunk) in all.chunks(per_leaf).enumerate() {
            let blk = leaf_start + i as u64 * stride;
            children.push(ExtentIndex { logical: chunk[0].logical, child: blk });
            leaves.push((blk, chunk.to_vec()));
        }
        extent::write_node(&mut ino.block, &ExtentNode::Index { depth: 1, children }, 0)?;
    }
    Ok(JournalLayout { blocks, start: runs[0].0, runs, leaves, inode: ino })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::geometry::{GeometryRequest, Placement};

    fn geometry(size: u64, bs: u32, flex: Option<u8>) -> Geometry {
        Geometry::for_mkfs(&GeometryRequest {
            size_bytes: size,
            block_size: bs,
            inode_size: 256,
            inode_count: None,
            inode_ratio: 16384,
            log_groups_per_flex: flex,
            want_64bit: false,
            cluster_bits: 0,
        })
        .unwrap()
    }

    #[test]
    fn contiguous_when_possible_in_the_inode_when_few_extents() {
        let geo = geometry(1 << 30, 4096, Some(4));
        let mut used = Placement::compute(&geo).unwrap().used;
        let j = layout_journal(&mut used, &geo, 16384, Timestamp::from_secs(0)).unwrap();
        assert_eq!(j.runs.len(), 1);
        assert!(j.leaves.is_empty());
        assert_eq!(j.inode.blocks, 16384 * 8);
    }

    #[test]
    fn scattered_runs_need_an_extent_leaf_block() {
        // 1 KiB blocks without flex_bg: every group has its own metadata, so an
        // 8192-block journal cannot be one run.
        let geo = geometry(256 << 20, 1024, None);
        let mut used = Placement::compute(&geo).unwrap().used;
        let before = used.len();
        let j = layout_journal(&mut used, &geo, 40000, Timestamp::from_secs(0)).unwrap();
        assert!(j.runs.len() > 4);
        assert_eq!(j.leaves.len(), 1, "more than 4 extents go to a depth-1 tree");
        assert_eq!(j.runs.iter().map(|r| r.1).sum::<u64>(), 40000);
        assert_eq!(used.len(), before + 40000 + 1, "journal plus its leaf block");
        assert_eq!(j.inode.blocks, 40001 * 2);
    }
}
