//! Inode allocation within a group, and freeing.
//!
//! - The first inode taken in an INODE_UNINIT group initialises its bitmap;
//!   if the group is still BLOCK_UNINIT its block bitmap becomes real too
//!   (the kernel does both in __ext4_new_inode).
//! - `bg_itable_unused` shrinks to cover the highest inode in use, so e2fsck
//!   never reads the untouched tail; the grant says which table slots just
//!   became part of the initialised area so the caller can zero them when the
//!   table was never zeroed (no ITABLE_ZEROED).
//! - used_dirs and the free counts are exact after every call.

use std::ops::Range;

use crate::device::BlockDevice;
use crate::error::{Corrupt, Error, Result};
use crate::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::format::{GroupIndex, InodeNumber};

use super::Allocator;

/// An allocated inode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeGrant {
    pub ino: InodeNumber,
    pub group: GroupIndex,
    /// Group-relative table slots that were outside the initialised area
    /// before this allocation (they may hold garbage unless `table_zeroed`).
    pub fresh_slots: Range<u32>,
    pub table_zeroed: bool,
}

impl Allocator {
    /// Allocates an inode for a child of `parent` named `name`.
    pub fn alloc_inode<D: BlockDevice + ?Sized>(
        &mut self,
        dev: &mut D,
        parent: InodeNumber,
        is_dir: bool,
        top_level: bool,
        name: &[u8],
    ) -> Result<Option<InodeGrant>> {
        let parent_group = self.geo.inode_location(parent).map_or(0, |(g, _)| g);
        let Some(first) = self.choose_inode_group(parent_group, is_dir, top_level, name) else { return Ok(None) };
        let n = self.geo.group_count;
        for i in 0..n {
            let g = (first + i) % n;
            if self.descs[g as usize].free_inodes == 0 {
                continue;
            }
            self.load_inode_bitmap(dev, g)?;
            let ipg = self.geo.inodes_per_group as usize;
            let from = if g == 0 { self.first_ino.saturating_sub(1) as usize } else { 0 };
            let bm = self.inode_bitmaps[g as usize].as_ref().ok_or_else(|| Error::InvalidArgument(format!("inode bitmap {g} not loaded")))?;
            let Some(idx) = bm.next_zero(from, ipg) else {
                return Err(Error::Corrupt(Corrupt::GroupDescriptor { group: g, what: "free inodes counted but none in the bitmap".into() }));
            };
            return self.take_inode(dev, g, idx as u32, is_dir).map(Some);
        }
        Ok(None)
    }

    fn take_inode<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, g: GroupIndex, idx: u32, is_dir: bool) -> Result<InodeGrant> {
        let gi = g as usize;
        if self.has_flag(g, BG_BLOCK_UNINIT) {
            self.load_block_bitmap(dev, g)?;
            self.descs[gi].flags &= !BG_BLOCK_UNINIT;
            self.dirty_block_bitmaps.insert(g);
        }
        let ipg = self.geo.inodes_per_group;
        let bm = self.inode_bitmaps[gi].as_mut().ok_or_else(|| Error::InvalidArgument(format!("inode bitmap {g} not loaded")))?;
        debug_assert!(!bm.get(idx as usize), "inode {idx} of group {g} handed out twice");
        bm.set(idx as usize);
        let lazy = self.lazy_groups;
        let d = &mut self.descs[gi];
        let was_uninit = lazy && d.has_flag(BG_INODE_UNINIT);
        d.flags &= !BG_INODE_UNINIT;
        d.free_inodes = d.free_inodes.checked_sub(1).ok_or_else(|| Error::Corrupt(Corrupt::GroupDescriptor { group: g, what: "free inode count below zero".into() }))?;
        if is_dir {
            d.used_dirs += 1;
            self.used_dirs += 1;
        }
        let initialised = if was_uninit { 0 } else { ipg.saturating_sub(d.itable_unused) };
        let fresh_slots = if lazy && idx >= initialised {
            d.itable_unused = ipg - idx - 1;
            initialised..idx + 1
        } else {
            idx..idx
        };
        let table_zeroed = !lazy || d.has_flag(BG_INODE_ZEROED);
        self.free_inodes -= 1;
        self.dirty_inode_bitmaps.insert(g);
        self.dirty_descs.insert(g);
        let ino = g * ipg + idx + 1;
        Ok(InodeGrant { ino, group: g, fresh_slots, table_zeroed })
    }

    /// Returns inode `ino` to its group.
    pub fn free_inode<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, ino: InodeNumber, was_dir: bool) -> Result<()> {
        let (g, idx) = self.geo.inode_location(ino).ok_or_else(|| Error::InvalidArgument(format!("inode {ino} out of range")))?;
        self.load_inode_bitmap(dev, g)?;
        let gi = g as usize;
        let bm = self.inode_bitmaps[gi].as_mut().ok_or_else(|| Error::InvalidArgument(format!("inode bitmap {g} not loaded")))?;
        if !bm.get(idx as usize) {
            return Err(Error::Corrupt(Corrupt::Bitmap { group: g, what: format!("freeing free inode {ino}") }));
        }
        bm.clear(idx as usize);
        let d = &mut self.descs[gi];
        d.free_inodes += 1;
        if was_dir {
            d.used_dirs = d.used_dirs.saturating_sub(1);
            self.used_dirs = self.used_dirs.saturating_sub(1);
        }
        self.free_inodes += 1;
        self.dirty_inode_bitmaps.insert(g);
        self.dirty_descs.insert(g);
        Ok(())
    }

    /// Whether inode `ino` is marked in use in its group's bitmap.
    pub fn inode_in_use<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, ino: InodeNumber) -> Result<bool> {
        let (g, idx) = self.geo.inode_location(ino).ok_or_else(|| Error::InvalidArgument(format!("inode {ino} out of range")))?;
        self.load_inode_bitmap(dev, g)?;
        let bm = self.inode_bitmaps[g as usize].as_ref().ok_or_else(|| Error::InvalidArgument(format!("inode bitmap {g} not loaded")))?;
        Ok(bm.get(idx as usize))
    }

    /// Whether group `g`'s inode slot `idx` lies in the initialised table area.
    pub fn slot_initialised(&self, g: GroupIndex, idx: u32) -> bool {
        if !self.lazy_groups {
            return true;
        }
        let d = &self.descs[g as usize];
        !d.has_flag(BG_INODE_UNINIT) && idx < self.geo.inodes_per_group.saturating_sub(d.itable_unused)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fresh;
    use crate::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
    use ext4_model::AllocPolicy;

    #[test]
    fn inodes_come_in_order_and_counts_stay_exact() {
        let (mut dev, mut a) = fresh(64 << 20, 4096, AllocPolicy::default());
        let free0 = a.totals().free_inodes;
        let g1 = a.alloc_inode(&mut dev, 2, false, true, b"x").unwrap().unwrap();
        assert_eq!(g1.ino, 12, "first free after lost+found");
        assert_eq!(g1.fresh_slots, 11..12);
        let g2 = a.alloc_inode(&mut dev, 2, false, true, b"y").unwrap().unwrap();
        assert_eq!(g2.ino, 13);
        a.free_inode(&mut dev, 12, false).unwrap();
        let g3 = a.alloc_inode(&mut dev, 2, false, true, b"z").unwrap().unwrap();
        assert_eq!(g3.ino, 12, "the freed slot is reused");
        assert!(g3.fresh_slots.is_empty(), "already initialised");
        assert!(a.free_inode(&mut dev, 40, false).is_err(), "never allocated");
        assert_eq!(a.totals().free_inodes, free0 - 2);
        a.check_counts().unwrap();
    }

    #[test]
    fn first_inode_in_a_fresh_group_initialises_it() {
        // 1 KiB blocks, 256 MiB: two flex groups; a top-level dir may land in group 16.
        let (mut dev, mut a) = fresh(256 << 20, 1024, AllocPolicy::default());
        let mut dir_group = None;
        for name in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            let grant = a.alloc_inode(&mut dev, 2, true, true, name.as_bytes()).unwrap().unwrap();
            if grant.group != 0 {
                dir_group = Some(grant);
                break;
            }
        }
        let grant = dir_group.expect("Orlov used another flex");
        let d = a.descs()[grant.group as usize];
        assert!(!d.has_flag(BG_INODE_UNINIT) && !d.has_flag(BG_BLOCK_UNINIT));
        assert_eq!(d.itable_unused, a.geometry().inodes_per_group - 1);
        assert_eq!(d.used_dirs, 1);
        assert_eq!(grant.fresh_slots, 0..1);
        assert!(!grant.table_zeroed, "mkfs left the tables lazy");
        a.check_counts().unwrap();
    }
}
