//! Metadata writeback: everything dirty goes to the device in a fixed
//! order, then a flush. File data has its own write-back (`writepages`);
//! the sync family runs it first.
//!
//! 1. Each dirty inode: its extent tree is rebuilt from the mapping into the
//!    blocks the old tree held (more allocated or the surplus freed), then
//!    the inode (with i_blocks = data + tree blocks) goes into its table slot.
//! 2. Bitmaps and descriptors (checksums recomputed) into the cache.
//! 3. The cache, in ascending block order.
//! 4. The superblock with exact free counts; then flush.
//!
//! With a journal, steps 1-2 are the same and the result is committed as one
//! transaction instead (see `journaling`).

use ext4_model::Errno;

use crate::device::{BlockDevice, WriteFlags};
use crate::error::{Error, Result};
use crate::extent_tree::{blocks_needed, disk_extents, encode};
use crate::format::inode::{FL_EXTENTS, FL_HUGE_FILE};
use crate::format::superblock::SUPERBLOCK_OFFSET;
use crate::format::InodeNumber;

use super::node::Node;
use super::{Ctx, Ext4};

/// Largest i_blocks value in 512-byte units (48 bits).
const MAX_I_BLOCKS: u64 = (1 << 48) - 1;

impl<D: BlockDevice> Ctx<D> {
    /// Rebuilds `node`'s extent tree if its mapping changed.
    pub(crate) fn write_tree(&mut self, ino: InodeNumber, node: &mut Node) -> Result<()> {
        if !node.map_dirty || !node.disk.has_flag(FL_EXTENTS) {
            node.map_dirty = false;
            return Ok(());
        }
        let extents = disk_extents(node.map())?;
        let need = blocks_needed(extents.len(), self.geo.block_size);
        while node.tree_blocks.len() > need {
            if let Some(b) = node.tree_blocks.pop() {
                self.free_tree_block(b)?;
            }
        }
        while node.tree_blocks.len() < need {
            let goal = node
                .tree_blocks
                .last()
                .map(|b| b + 1)
                .or_else(|| node.map().iter().next().map(|p| p.physical))
                .unwrap_or_else(|| self.alloc.goal_for_inode(ino, node.disk.is_reg()));
            // A cluster per tree block under bigalloc.
            let ratio = self.geo.cluster_ratio();
            let want = (need - node.tree_blocks.len()) as u64 * ratio;
            let (start, got) = self
                .alloc
                .alloc_blocks(&mut self.dev, goal, want)?
                .ok_or(Error::Device(crate::device::DeviceError::NoSpace))?;
            node.tree_blocks.extend((start..start + got).step_by(ratio as usize));
        }
        node.tree_blocks.sort_unstable();
        let seed = self.ino_seed(ino, node.disk.generation);
        let tree = encode(&extents, &node.tree_blocks, self.geo.block_size, seed)?;
        for (b, bytes) in &tree.nodes {
            self.cache.put(*b, bytes)?;
        }
        node.disk.block = tree.root;
        node.map_dirty = false;
        Ok(())
    }

    /// Writes one inode (and its tree) into the cache.
    fn write_node(&mut self, ino: InodeNumber, node: &mut Node) -> Result<()> {
        self.write_tree(ino, node)?;
        // A tree never loaded never changed: i_blocks as read still holds.
        if node.tree_loaded() {
            let bits = self.cluster_bits();
            let blocks = super::clusters::data_blocks(node.map(), &node.es, bits, false) + ((node.tree_blocks.len() as u64) << bits);
            let units = blocks.saturating_mul(self.bs() / 512);
            if units > MAX_I_BLOCKS {
                node.disk.flags |= FL_HUGE_FILE;
                node.disk.blocks = blocks;
            } else {
                node.disk.flags &= !FL_HUGE_FILE;
                node.disk.blocks = units;
            }
        }
        self.store_inode(ino, &node.disk)
    }

    /// The superblock's bytes with exact free counts.
    pub(crate) fn superblock_bytes(&mut self) -> [u8; crate::format::superblock::SUPERBLOCK_SIZE] {
        let totals = self.alloc.totals();
        self.sb.free_blocks_count = totals.free_blocks;
        self.sb.free_inodes_count = u32::try_from(totals.free_inodes).unwrap_or(u32::MAX);
        self.sb.to_bytes()
    }

    fn write_superblock(&mut self) -> Result<()> {
        let bytes = self.superblock_bytes();
        self.dev.write(SUPERBLOCK_OFFSET, &bytes, WriteFlags::METADATA)?;
        Ok(())
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// Dirty inodes (with their trees), bitmaps and descriptors into the cache.
    pub(crate) fn stage_metadata(&mut self) -> Result<()> {
        for ino in std::mem::take(&mut self.dirty) {
            let Some(node) = self.nodes.get_mut(&ino) else { continue };
            if let Err(e) = self.ctx.write_node(ino, node) {
                self.dirty.insert(ino);
                return Err(e);
            }
            #[cfg(feature = "test-hooks")]
            if let Some(wrong) = Self::bug_on_store(self.bug, &node.disk) {
                self.ctx.store_inode(ino, &wrong)?;
            }
        }
        let ctx = &mut self.ctx;
        ctx.alloc.write_back(&mut ctx.cache, &mut ctx.dev)?;
        Ok(())
    }

    /// Writes back every dirty inode, bitmap, descriptor and the superblock,
    /// then flushes; with a journal, commits them as one transaction.
    pub(crate) fn write_back_all(&mut self) -> Result<()> {
        if self.ctx.journal.is_some() {
            return self.commit_transaction();
        }
        self.stage_metadata()?;
        let ctx = &mut self.ctx;
        ctx.cache.write_back(&mut ctx.dev)?;
        ctx.write_superblock()?;
        ctx.dev.flush()?;
        Ok(())
    }

    /// sync(2): every file's dirty data, then all metadata.
    pub(crate) fn sync_all(&mut self) -> std::result::Result<(), Errno> {
        self.start_handle()?;
        if self.ctx.mount.read_only {
            return Ok(());
        }
        self.write_back_all_data().map_err(Errno::from)?;
        self.write_back_all().map_err(Errno::from)
    }

    /// fsync(2) and fdatasync(2) of `ino`: its dirty data, then all
    /// metadata (one transaction holds every inode's).
    pub(crate) fn sync_file(&mut self, ino: crate::format::InodeNumber) -> std::result::Result<(), Errno> {
        self.start_handle()?;
        if self.ctx.mount.read_only {
            return Ok(());
        }
        self.write_back_data(ino, 0).map_err(Errno::from)?;
        self.write_back_all().map_err(Errno::from)
    }

    /// A synchronous handle: all metadata, no file data beyond what the
    /// transaction is ordered after.
    pub(crate) fn sync_metadata(&mut self) -> std::result::Result<(), Errno> {
        self.start_handle()?;
        if self.ctx.mount.read_only {
            return Ok(());
        }
        self.write_back_all().map_err(Errno::from)
    }
}
