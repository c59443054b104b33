//! Figures for reports: where data sits and how fragmented files are. Read
//! from the in-memory state (inodes loaded so far and every group descriptor),
//! so asking costs no I/O.

use std::fmt;

use crate::device::BlockDevice;

use super::Ext4;

/// A summary of the allocation layout.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LayoutReport {
    pub block_size: u32,
    pub groups: u32,
    /// Blocks in use per group (metadata included).
    pub used_blocks_per_group: Vec<u64>,
    /// Groups holding blocks of loaded regular files.
    pub groups_with_data: Vec<u32>,
    /// (inode, merged extents) of every loaded regular file with data.
    pub file_extents: Vec<(u32, usize)>,
    pub free_blocks: u64,
    pub free_inodes: u64,
}

impl LayoutReport {
    /// Files whose data is in more than one piece.
    pub fn fragmented_files(&self) -> usize {
        self.file_extents.iter().filter(|(_, n)| *n > 1).count()
    }

    /// Mean extents per file with data (1.0 is perfectly contiguous).
    pub fn mean_extents(&self) -> f64 {
        if self.file_extents.is_empty() {
            return 0.0;
        }
        self.file_extents.iter().map(|(_, n)| *n as f64).sum::<f64>() / self.file_extents.len() as f64
    }
}

impl fmt::Display for LayoutReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "block size: {}", self.block_size)?;
        writeln!(f, "groups: {}", self.groups)?;
        writeln!(f, "free blocks: {}", self.free_blocks)?;
        writeln!(f, "free inodes: {}", self.free_inodes)?;
        let groups: Vec<String> = self.groups_with_data.iter().map(|g| g.to_string()).collect();
        writeln!(f, "groups with data: {}", if groups.is_empty() { "-".to_string() } else { groups.join(" ") })?;
        writeln!(f, "files with data: {}", self.file_extents.len())?;
        writeln!(f, "fragmented files: {}", self.fragmented_files())?;
        writeln!(f, "mean extents per file: {:.2}", self.mean_extents())
    }
}

impl<D: BlockDevice> Ext4<D> {
    pub fn layout(&self) -> LayoutReport {
        let geo = &self.ctx.geo;
        let descs = self.ctx.alloc.descs();
        let used_blocks_per_group =
            (0..geo.group_count).map(|g| u64::from(geo.group_len(g)).saturating_sub(u64::from(descs[g as usize].free_blocks))).collect();
        let mut groups = std::collections::BTreeSet::new();
        let mut file_extents = Vec::new();
        for (&ino, node) in &self.nodes {
            if !node.disk.is_reg() || node.map.is_empty() {
                continue;
            }
            file_extents.push((ino, node.map.run_count()));
            for p in node.map.iter() {
                let first = geo.group_of_block(p.physical);
                let last = geo.group_of_block(p.physical + p.len - 1);
                if let (Some(a), Some(b)) = (first, last) {
                    groups.extend(a..=b);
                }
            }
        }
        let totals = self.ctx.alloc.totals();
        LayoutReport {
            block_size: geo.block_size,
            groups: geo.group_count,
            used_blocks_per_group,
            groups_with_data: groups.into_iter().collect(),
            file_extents,
            free_blocks: totals.free_blocks,
            free_inodes: totals.free_inodes,
        }
    }
}
