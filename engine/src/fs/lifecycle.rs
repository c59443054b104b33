//! Inodes coming and going: allocating and initialising one, adding and
//! removing directory entries (growing a directory by a block when full),
//! dropping a link and freeing an inode with all its blocks.

use ext4_model::op::inode_flags;
use ext4_model::{Errno, FileKind};

use crate::device::BlockDevice;
use crate::dir::{Directory, Insert, Slot};
use crate::format::dirent::{FT_DIR, FT_REG_FILE, FT_SYMLINK};
use crate::format::extent::{self, ExtentNode};
use crate::format::inode::{Inode, FL_EXTENTS, FL_INDEX, FL_TOPDIR, ROOT_INO, S_IFDIR, S_IFLNK, S_IFREG};
use crate::format::InodeNumber;

use super::node::Node;
use super::Ext4;

/// The directory-entry type of a kind.
pub fn file_type(kind: FileKind) -> u8 {
    match kind {
        FileKind::Regular => FT_REG_FILE,
        FileKind::Directory => FT_DIR,
        FileKind::Symlink => FT_SYMLINK,
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// Allocates inode for a new `kind` named `name` in `dir`, initialised
    /// (not yet linked). Directories get their first block with "." and "..".
    pub(crate) fn new_inode(&mut self, dir: InodeNumber, name: &str, kind: FileKind, perm: u16) -> Result<InodeNumber, Errno> {
        let parent_flags = self.node(dir)?.disk.flags;
        let top = dir == ROOT_INO || parent_flags & FL_TOPDIR != 0;
        let is_dir = kind == FileKind::Directory;
        let ctx = &mut self.ctx;
        let grant = ctx.alloc.alloc_inode(&mut ctx.dev, dir, is_dir, top, name.as_bytes())?.ok_or(Errno::ENOSPC)?;
        if !grant.table_zeroed && !grant.fresh_slots.is_empty() {
            ctx.zero_slots(grant.group, grant.fresh_slots.clone())?;
        }
        let ino = grant.ino;
        let type_bits = match kind {
            FileKind::Regular => S_IFREG,
            FileKind::Directory => S_IFDIR,
            FileKind::Symlink => S_IFLNK,
        };
        let now = ctx.now();
        let mut disk = Inode::new(ctx.geo.inode_size, type_bits | (perm & 0o7777), now);
        disk.generation = ctx.generation();
        disk.links_count = 1;
        if kind != FileKind::Symlink {
            disk.flags = FL_EXTENTS | (parent_flags & inode_flags::JOURNAL_DATA);
            extent::write_node(&mut disk.block, &ExtentNode::Leaf(Vec::new()), 0)?;
        }
        let mut node = Node::new(disk);
        node.map_dirty = true;
        if is_dir {
            let goal = ctx.alloc.goal_for_inode(ino, false);
            let got = ctx.alloc.alloc_blocks(&mut ctx.dev, goal, 1)?;
            let Some((block, _)) = got else {
                ctx.alloc.free_inode(&mut ctx.dev, ino, true)?;
                return Err(Errno::ENOSPC);
            };
            let seed = ctx.ino_seed(ino, node.disk.generation);
            let htree = ctx.htree();
            node.dir = Some(Directory::create(&mut ctx.cache, ino, dir, seed, block, htree)?);
            node.map_insert(0, 1, block, false);
            node.disk.size = ctx.bs();
            node.disk.links_count = Node::dir_links(0);
        }
        self.nodes.insert(ino, node);
        self.mark_dirty(ino);
        Ok(ino)
    }

    /// Adds `name -> ino` to `dir`, growing the directory when no block has
    /// room. ENOSPC leaves it as it was: blocks mapped for a growth step
    /// that could not finish are given back.
    pub(crate) fn add_entry(&mut self, dir: InodeNumber, name: &str, ino: InodeNumber, ft: u8) -> Result<(), Errno> {
        self.dir_for_edit(dir)?;
        let (ctx, node) = self.split(dir)?;
        loop {
            let d = node.dir.as_mut().ok_or(Errno::EIO)?;
            match d.insert(&mut ctx.cache, &mut ctx.dev, name.as_bytes(), ino, ft)? {
                Insert::Done => break,
                Insert::IndexFull => return Err(Errno::ENOSPC),
                Insert::NeedBlock => {}
            }
            let lblk = d.blocks().len() as u64;
            let Some((block, _)) = ctx.place_blocks(dir, node, lblk, lblk + 1, false)? else {
                let d = node.dir.as_mut().ok_or(Errno::EIO)?;
                let spares = d.drop_spares() as u64;
                if spares > 0 {
                    let end = d.blocks().len() as u64;
                    ctx.unmap_and_free(node, end..end + spares)?;
                    node.map_dirty = true;
                    node.disk.size = end * ctx.bs();
                }
                return Err(Errno::ENOSPC);
            };
            ctx.cache.forget(block, 1);
            let d = node.dir.as_mut().ok_or(Errno::EIO)?;
            d.add_spare(block);
            node.map_insert(lblk, 1, block, false);
            node.map_dirty = true;
            node.disk.size = (lblk + 1) * ctx.bs();
        }
        let now = ctx.now();
        let d = node.dir.as_ref().ok_or(Errno::EIO)?;
        node.disk.links_count = Node::dir_links(d.subdirs());
        if d.is_indexed() {
            node.disk.flags |= FL_INDEX;
        }
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(dir);
        Ok(())
    }

    /// Points `dir`'s existing entry `name` at `ino` (RENAME_EXCHANGE).
    pub(crate) fn replace_entry(&mut self, dir: InodeNumber, name: &str, ino: InodeNumber, ft: u8) -> Result<(), Errno> {
        self.dir_for_edit(dir)?;
        let (ctx, node) = self.split(dir)?;
        let d = node.dir.as_mut().ok_or(Errno::EIO)?;
        d.replace(&mut ctx.cache, &mut ctx.dev, name.as_bytes(), ino, ft)?;
        node.disk.links_count = Node::dir_links(d.subdirs());
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(dir);
        Ok(())
    }

    /// Removes `name` from `dir`.
    pub(crate) fn remove_entry(&mut self, dir: InodeNumber, name: &str) -> Result<Slot, Errno> {
        self.dir_for_edit(dir)?;
        let (ctx, node) = self.split(dir)?;
        let d = node.dir.as_mut().ok_or(Errno::EIO)?;
        let slot = d.remove(&mut ctx.cache, &mut ctx.dev, name.as_bytes())?.ok_or(Errno::EIO)?;
        node.disk.links_count = Node::dir_links(d.subdirs());
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(dir);
        Ok(slot)
    }

    /// Drops one name's reference to `ino`, freeing it with its last name.
    pub(crate) fn drop_link(&mut self, ino: InodeNumber) -> Result<(), Errno> {
        let open = self.is_open(ino);
        let (ctx, node) = self.split(ino)?;
        let is_dir = node.disk.is_dir();
        let gone = is_dir || node.disk.links_count <= 1;
        if gone && !is_dir && open {
            node.disk.links_count = 0;
            node.disk.ctime = ctx.now();
            self.mark_dirty(ino);
            return self.orphan_add(ino);
        }
        if gone {
            return self.free_inode(ino);
        }
        node.disk.links_count -= 1;
        node.disk.ctime = ctx.now();
        self.mark_dirty(ino);
        Ok(())
    }

    /// Frees inode `ino`: its blocks, its tree, its bitmap bit; the slot is
    /// rewritten as a deleted inode (links 0, dtime set).
    pub(crate) fn free_inode(&mut self, ino: InodeNumber) -> Result<(), Errno> {
        self.node(ino)?;
        let mut node = self.nodes.remove(&ino).ok_or(Errno::EIO)?;
        self.dirty.remove(&ino);
        let ctx = &mut self.ctx;
        // Its cached data goes unwritten, its reservation back to the pool.
        ctx.discard_blocks(ino, &mut node, 0..u64::MAX)?;
        ctx.pages.drop_mapping(ino);
        for b in std::mem::take(&mut node.tree_blocks) {
            ctx.free_tree_block(b)?;
        }
        let was_dir = node.disk.is_dir();
        ctx.alloc.free_inode(&mut ctx.dev, ino, was_dir)?;
        let now = ctx.now();
        let disk = &mut node.disk;
        disk.links_count = 0;
        disk.dtime = u32::try_from(now.secs).unwrap_or(u32::MAX);
        disk.ctime = now;
        disk.size = 0;
        disk.blocks = 0;
        if disk.has_flag(FL_EXTENTS) {
            disk.block = [0; 60];
            extent::write_node(&mut disk.block, &ExtentNode::Leaf(Vec::new()), 0)?;
        }
        ctx.store_inode(ino, disk)?;
        Ok(())
    }
}
