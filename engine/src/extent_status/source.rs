//! What stands behind the extent status cache: on a miss, ext4_map_blocks
//! asks the extent tree (ext4_ext_map_blocks). Here that is either the
//! inode's on-disk tree, searched from the root through the buffer cache,
//! or its mapping loaded whole once something had to change it.

use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::error::Result;
use crate::extent_tree::find::{find_extent, Check};
use crate::extent_tree::{ExtentMap, Piece};
use crate::format::inode::Inode;
use crate::format::InodeNumber;

/// What the tree holds at a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// The whole extent (or merged run) holding the block.
    Mapped(Piece),
    /// Unmapped from `start` (where the extent before ends, as far as the
    /// lookup saw; at most the block) up to `end`, where the next extent
    /// starts (`u64::MAX` when none does).
    Hole { start: u64, end: u64 },
}

/// The tree a cache miss is answered from.
pub trait ExtentSource {
    fn find(&mut self, lblk: u64) -> Result<Found>;
}

impl ExtentSource for &ExtentMap {
    fn find(&mut self, lblk: u64) -> Result<Found> {
        Ok(match self.run_at(lblk) {
            Some(p) => Found::Mapped(p),
            None => Found::Hole { start: self.left_of(lblk).map_or(0, |(last, _)| last + 1), end: self.next_start(lblk).unwrap_or(u64::MAX) },
        })
    }
}

/// An inode's on-disk extent tree, read block by block on each lookup.
pub struct OnDiskTree<'a, D: BlockDevice + ?Sized> {
    pub cache: &'a mut BufferCache,
    pub dev: &'a mut D,
    pub ino: InodeNumber,
    pub inode: &'a Inode,
    pub check: Check,
}

impl<D: BlockDevice + ?Sized> ExtentSource for OnDiskTree<'_, D> {
    fn find(&mut self, lblk: u64) -> Result<Found> {
        let near = find_extent(self.cache, self.dev, self.ino, self.inode, lblk, self.check)?;
        let start = near.before_end.filter(|&e| e <= lblk).unwrap_or(lblk);
        Ok(match near.extent {
            Some(e) if u64::from(e.logical) <= lblk => Found::Mapped(Piece { logical: u64::from(e.logical), len: u64::from(e.len), physical: e.physical, unwritten: e.unwritten }),
            Some(e) => Found::Hole { start, end: u64::from(e.logical) },
            None => Found::Hole { start, end: u64::MAX },
        })
    }
}
