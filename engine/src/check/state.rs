//! What one check run knows and accumulates: the parsed superblock and
//! descriptors, which of each group's structures are usable, the block
//! claims, the live inodes, and the problems found so far (bounded).

use std::collections::BTreeMap;

use crate::device::BlockDevice;
use crate::format::extent::Extent;
use crate::format::geometry::Geometry;
use crate::format::group_desc::{GroupDesc, BG_INODE_UNINIT};
use crate::format::superblock::{feature, Superblock, SUPERBLOCK_SIZE};
use crate::format::{BlockNumber, GroupIndex, InodeNumber};

use super::claims::Claims;
use super::disk::Disk;
use super::problem::Problem;
use super::CheckStats;

const S_USR_QUOTA_INUM: usize = 0x240;
const S_GRP_QUOTA_INUM: usize = 0x244;
const S_PRJ_QUOTA_INUM: usize = 0x26C;
const S_ORPHAN_FILE_INUM: usize = 0x280;

/// Most problems one report keeps; a badly corrupt image would otherwise
/// produce one per block. The rest are counted in `CheckReport::dropped`.
pub const MAX_PROBLEMS: usize = 1000;

/// Which of a group's structures point somewhere readable.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupLayout {
    pub block_bitmap: bool,
    pub inode_bitmap: bool,
    pub inode_table: bool,
}

/// An inode in use (reserved, or links_count > 0), as the later passes need it.
#[derive(Debug, Clone)]
pub struct LiveInode {
    pub ino: InodeNumber,
    /// `i_mode & S_IFMT`.
    pub file_type: u16,
    pub links_count: u16,
}

/// A directory's mapping, kept from the inode pass for the directory pass.
#[derive(Debug, Clone)]
pub struct DirInfo {
    pub ino: InodeNumber,
    pub size: u64,
    pub generation: u32,
    pub htree: bool,
    pub extents: Vec<Extent>,
}

/// Per-group inode counts found by the inode pass.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupInodes {
    pub used: u32,
    pub dirs: u32,
    /// False when the table could not be read: its counts are unknown.
    pub scanned: bool,
}

pub struct Checker<D: BlockDevice> {
    pub disk: Disk<D>,
    pub sb: Superblock,
    /// The superblock bytes as read (for fields `Superblock` does not model).
    pub sb_raw: [u8; SUPERBLOCK_SIZE],
    pub geo: Geometry,
    pub descs: Vec<GroupDesc>,
    pub layout: Vec<GroupLayout>,
    /// Seed for metadata checksums (metadata_csum only).
    pub csum_seed: Option<u32>,
    /// Whether UNINIT flags and itable_unused are meaningful (metadata_csum or uninit_bg).
    pub lazy: bool,
    pub problems: Vec<Problem>,
    pub dropped: u64,
    pub stats: CheckStats,
    pub claims: Claims,
    /// Sorted by inode number (the scan visits inodes in order).
    pub live: Vec<LiveInode>,
    pub dirs: Vec<DirInfo>,
    /// The journal inode's size and mapping, when it has one.
    pub journal_map: Option<(u64, Vec<Extent>)>,
    /// Xattr block -> inodes referencing it.
    pub xattr_refs: BTreeMap<BlockNumber, Vec<InodeNumber>>,
    pub group_inodes: Vec<GroupInodes>,
}

impl<D: BlockDevice> Checker<D> {
    pub fn report(&mut self, p: Problem) {
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(p);
        } else {
            self.dropped = self.dropped.saturating_add(1);
        }
    }

    /// Inode slots of group `g` that hold initialised inodes (the rest is the lazy tail).
    pub fn initialised(&self, g: GroupIndex) -> u32 {
        let ipg = self.geo.inodes_per_group;
        let Some(d) = self.descs.get(g as usize) else { return 0 };
        if !self.lazy {
            return ipg;
        }
        if d.has_flag(BG_INODE_UNINIT) {
            return 0;
        }
        ipg.saturating_sub(d.itable_unused.min(ipg))
    }

    /// The live record of `ino`, if it is in use.
    pub fn live_inode(&self, ino: InodeNumber) -> Option<&LiveInode> {
        self.live.binary_search_by_key(&ino, |l| l.ino).ok().and_then(|i| self.live.get(i))
    }

    pub fn first_ino(&self) -> InodeNumber {
        self.sb.first_ino()
    }

    /// Inodes in use that no directory names by design: quota files (with
    /// the quota feature) and the orphan file (with orphan_file).
    pub fn hidden_inodes(&self) -> Vec<InodeNumber> {
        let word = |off: usize| crate::format::bytes::le32(&self.sb_raw, off);
        let mut v = Vec::new();
        if self.sb.feature_ro_compat & feature::RO_COMPAT_QUOTA != 0 {
            v.extend([word(S_USR_QUOTA_INUM), word(S_GRP_QUOTA_INUM), word(S_PRJ_QUOTA_INUM)]);
        }
        if self.sb.feature_compat & feature::COMPAT_ORPHAN_FILE != 0 {
            v.push(word(S_ORPHAN_FILE_INUM));
        }
        v.retain(|&i| i != 0);
        v
    }
}
