//! The 2009 experiment (ext4 commit 75507efb1372, "Don't avoid using
//! BLOCK_UNINIT block groups in mballoc"): the tree-copy workload onto a
//! 5,400 rpm disk under each BLOCK_UNINIT policy, then the reads of a full
//! e2fsck on the simulated disk, pass by pass, in simulated time:
//!
//! - pass 1: the inode tables of initialised groups, up to their unused
//!   tail (uninit_bg lets e2fsck skip it), 8 blocks a read as e2fsck's
//!   inode scan does; extent-tree blocks are not counted;
//! - pass 2: every directory block, sorted by block number as e2fsck
//!   sorts its directory block list;
//! - pass 5: the block and inode bitmaps of initialised groups.
//!
//! The 2009 thread saw pass 2 go from 21.16 s to 6.54 s when the allocator
//! stopped skipping BLOCK_UNINIT groups, for 14 more groups in use.

use ext4_engine::device::{BlockDevice, IoClass};
use ext4_engine::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use ext4_engine::layout::LayoutReport;
use ext4_model::MountConfig;

use crate::disk::SimDisk;
use crate::layout_run::LayoutRun;
use crate::workloads::Workload;

/// e2fsck's inode scan buffer (EXT2_INODE_SCAN_DEFAULT_BUFFER_BLOCKS).
const INODE_SCAN_BLOCKS: u64 = 8;

/// One pass's reads: simulated nanoseconds and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    pub ns: u64,
    pub bytes: u64,
}

impl Pass {
    pub fn mb_per_s(&self) -> f64 {
        if self.ns == 0 {
            return 0.0;
        }
        self.bytes as f64 / (1 << 20) as f64 / (self.ns as f64 / 1e9)
    }
}

/// One policy's row.
#[derive(Clone, Debug, PartialEq)]
pub struct FsckRow {
    pub policy: &'static str,
    pub pass1: Pass,
    pub pass2: Pass,
    pub pass5: Pass,
    pub noncontiguous_files: usize,
    pub noncontiguous_dirs: usize,
    pub block_uninit_groups: usize,
    pub inode_uninit_groups: usize,
    /// Groups holding file data or directories.
    pub groups_in_use: usize,
    pub directory_blocks: usize,
}

impl FsckRow {
    pub fn line(&self) -> String {
        let p = |x: &Pass| format!("{:>7.2} s {:>6.1} MB/s", x.ns as f64 / 1e9, x.mb_per_s());
        format!(
            "  {:<18} pass 1 {}  pass 2 {}  pass 5 {}  non-contiguous {} files {} dirs  BLOCK_UNINIT {} INODE_UNINIT {} groups, {} in use, {} dir blocks",
            self.policy,
            p(&self.pass1),
            p(&self.pass2),
            p(&self.pass5),
            self.noncontiguous_files,
            self.noncontiguous_dirs,
            self.block_uninit_groups,
            self.inode_uninit_groups,
            self.groups_in_use,
            self.directory_blocks
        )
    }
}

fn read_timed(disk: &mut SimDisk, reads: &[(u64, u64)], bs: u64) -> Result<Pass, String> {
    let start = disk.now_ns();
    let mut bytes = 0;
    let mut buf = Vec::new();
    for &(block, count) in reads {
        buf.resize((count * bs) as usize, 0);
        disk.read(block * bs, &mut buf, IoClass::Metadata).map_err(|e| format!("read of block {block}: {e}"))?;
        bytes += count * bs;
    }
    Ok(Pass { ns: disk.now_ns() - start, bytes })
}

/// Tree-copy at `scale` on a `disk_bytes` hdd-5400 disk under one policy, then the fsck reads.
pub fn run_policy(skip_block_uninit: bool, scale: u32, disk_bytes: u64) -> Result<FsckRow, String> {
    let mut mount = MountConfig::default();
    mount.alloc.skip_block_uninit = skip_block_uninit;
    let run = LayoutRun { workload: Workload::TreeCopy, seed: 1, scale, mount, disk_bytes };
    let (mut image, _) = run.run_on("hdd-5400")?;
    let layout = LayoutReport::read(&mut image).map_err(|e| format!("layout: {e}"))?;
    let geo = image.geometry().clone();
    let descs = image.group_descs().to_vec();
    let mut dir_blocks: Vec<u64> = Vec::new();
    for p in layout.placed.iter().filter(|p| p.is_dir) {
        let inode = image.read_named_inode(p.ino).map_err(|e| format!("inode {}: {e}", p.ino))?;
        for x in image.extents(p.ino, &inode).map_err(|e| format!("extents of {}: {e}", p.ino))? {
            dir_blocks.extend(x.physical..x.physical + u64::from(x.len));
        }
    }
    dir_blocks.sort_unstable();
    let bs = u64::from(geo.block_size);
    let mut pass1 = Vec::new();
    let mut pass5 = Vec::new();
    for d in &descs {
        if !d.has_flag(BG_INODE_UNINIT) {
            let used = u64::from(geo.inodes_per_group - d.itable_unused.min(geo.inodes_per_group));
            let blocks = (used * u64::from(geo.inode_size)).div_ceil(bs);
            let mut at = 0;
            while at < blocks {
                let n = INODE_SCAN_BLOCKS.min(blocks - at);
                pass1.push((d.inode_table + at, n));
                at += n;
            }
            pass5.push((d.inode_bitmap, 1));
        }
        if !d.has_flag(BG_BLOCK_UNINIT) {
            pass5.push((d.block_bitmap, 1));
        }
    }
    let (files, dirs) = layout.noncontiguous();
    let mut disk = image.into_device();
    let pass1 = read_timed(&mut disk, &pass1, bs)?;
    let pass2 = read_timed(&mut disk, &dir_blocks.iter().map(|&b| (b, 1)).collect::<Vec<_>>(), bs)?;
    let pass5 = read_timed(&mut disk, &pass5, bs)?;
    Ok(FsckRow {
        policy: if skip_block_uninit { "skip_block_uninit" } else { "use_block_uninit" },
        pass1,
        pass2,
        pass5,
        noncontiguous_files: files,
        noncontiguous_dirs: dirs,
        block_uninit_groups: descs.iter().filter(|d| d.has_flag(BG_BLOCK_UNINIT)).count(),
        inode_uninit_groups: descs.iter().filter(|d| d.has_flag(BG_INODE_UNINIT)).count(),
        groups_in_use: layout.groups_in_use(),
        directory_blocks: dir_blocks.len(),
    })
}

/// Both policies, the 2009 one (skipping) first.
pub fn bench_fsck(scale: u32, disk_bytes: u64) -> Result<Vec<FsckRow>, String> {
    Ok(vec![run_policy(true, scale, disk_bytes)?, run_policy(false, scale, disk_bytes)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pass_reads_something_and_the_run_is_the_same_twice() {
        let a = run_policy(false, 1, 4 << 30).unwrap();
        assert!(a.pass1.bytes > 0 && a.pass2.bytes > 0 && a.pass5.bytes > 0, "{a:?}");
        assert!(a.pass1.ns > 0 && a.pass2.ns > 0 && a.pass5.ns > 0, "{a:?}");
        assert_eq!(a.directory_blocks as u64 * 4096, a.pass2.bytes);
        assert_eq!(a, run_policy(false, 1, 4 << 30).unwrap());
    }
}
