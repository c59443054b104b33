//! The per-group table of a layout: what each group's descriptor says
//! (free clusters and inodes, directories, flags, unused inode-table tail)
//! beside where the walk found directory and file blocks. One row per
//! group, fixed columns, so two images diff line by line.

use std::fmt;

use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::format::GroupIndex;
use crate::image::Image;

use super::LayoutReport;

/// One group of the table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupRow {
    pub group: GroupIndex,
    /// Clusters (blocks without bigalloc) the group has.
    pub clusters: u32,
    /// Free clusters (blocks without bigalloc), as the descriptor counts them.
    pub free_clusters: u32,
    pub free_inodes: u32,
    pub used_dirs: u32,
    pub itable_unused: u32,
    pub block_uninit: bool,
    pub inode_uninit: bool,
    pub itable_zeroed: bool,
    /// Blocks of directories' extents that start in the group.
    pub dir_blocks: u64,
    /// Blocks of regular files' extents that start in the group.
    pub file_blocks: u64,
}

/// Every group's row, from the descriptors and a layout walk of the same image.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupTable {
    pub rows: Vec<GroupRow>,
    /// Blocks a cluster holds (1 without bigalloc): the free column's unit.
    pub cluster_ratio: u64,
    /// Groups per flex group (1 without flex_bg).
    pub flex_size: u32,
}

impl GroupTable {
    pub fn read<D: BlockDevice>(image: &mut Image<D>, layout: &LayoutReport) -> Result<GroupTable> {
        let geo = image.geometry().clone();
        let mut rows: Vec<GroupRow> = image
            .group_descs()
            .iter()
            .zip(0..)
            .map(|(d, group)| GroupRow {
                group,
                clusters: geo.group_clusters(group),
                free_clusters: d.free_blocks,
                free_inodes: d.free_inodes,
                used_dirs: d.used_dirs,
                itable_unused: d.itable_unused,
                block_uninit: d.has_flag(BG_BLOCK_UNINIT),
                inode_uninit: d.has_flag(BG_INODE_UNINIT),
                itable_zeroed: d.has_flag(BG_INODE_ZEROED),
                ..GroupRow::default()
            })
            .collect();
        for p in &layout.placed {
            let inode = image.read_named_inode(p.ino)?;
            for x in image.extents(p.ino, &inode)? {
                let Some(row) = geo.group_of_block(x.physical).and_then(|g| rows.get_mut(g as usize)) else { continue };
                if p.is_dir {
                    row.dir_blocks += u64::from(x.len);
                } else {
                    row.file_blocks += u64::from(x.len);
                }
            }
        }
        Ok(GroupTable { rows, cluster_ratio: geo.cluster_ratio(), flex_size: geo.flex_size() })
    }
}

impl fmt::Display for GroupTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let unit = if self.cluster_ratio > 1 { "clusters" } else { "blocks" };
        let free = format!("free-{unit}");
        writeln!(f, "{:>5}  {free:>14} {:>12} {:>5} {:>7}  {:<8} {:>11} {:>12}", "group", "free-inodes", "dirs", "unused", "flags", "dir-blocks", "file-blocks")?;
        for r in &self.rows {
            let flags = format!(
                "{}{}{}",
                if r.block_uninit { "B" } else { "-" },
                if r.inode_uninit { "I" } else { "-" },
                if r.itable_zeroed { "Z" } else { "-" }
            );
            writeln!(
                f,
                "{:>5}  {:>14} {:>12} {:>5} {:>7}  {:<8} {:>11} {:>12}",
                r.group, r.free_clusters, r.free_inodes, r.used_dirs, r.itable_unused, flags, r.dir_blocks, r.file_blocks
            )?;
        }
        writeln!(f, "flags: B block bitmap uninitialised, I inode bitmap uninitialised, Z inode table zeroed")
    }
}
