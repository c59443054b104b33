//! In-memory inodes: the on-disk fields, the extent mapping, and (for
//! directories, once listed or edited) the loaded directory. Reading an inode
//! from its table slot, writing it back, and the bookkeeping both need.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use ext4_model::op::inode_flags;
use ext4_model::{Errno, FileKind};

use crate::device::BlockDevice;
use crate::dir::htree::Htree;
use crate::dir::Directory;
use crate::error::{Corrupt, Error, Result, Unsupported};
use crate::extent_status::ExtentStatusTree;
use crate::extent_tree::{self, ExtentMap};
use crate::format::checksum::inode_seed;
use crate::format::features::feature;
use crate::format::inode::{Inode, FL_EXTENTS, FL_INDEX, FL_INLINE_DATA, I_BLOCK_LEN};
use crate::format::{BlockNumber, InodeNumber};

use super::{Ctx, Ext4};

/// dir_nlink: a directory with more links than this stores 1.
pub const DIR_NLINK_MAX: u32 = 65000;

/// A loaded inode.
#[derive(Debug, Clone)]
pub struct Node {
    pub disk: Inode,
    /// Data blocks (directory blocks, the slow-symlink block); empty for fast symlinks.
    pub map: ExtentMap,
    /// Blocks the on-disk extent tree occupies below the root.
    pub tree_blocks: Vec<BlockNumber>,
    pub dir: Option<Directory>,
    /// The mapping changed since the tree was last written.
    pub map_dirty: bool,
    /// Delayed extents (reserved, not allocated); see [`ExtentStatusTree`].
    pub es: ExtentStatusTree,
    /// Truncated to 0 since its last close (EXT4_STATE_DA_ALLOC_CLOSE).
    pub da_alloc_close: bool,
    /// i_disksize where a delayed write grew the file past it and no
    /// write-back an op asked for has run since (ext4_extending_io asks
    /// it); None where it is the size. Background write-back leaves it,
    /// as the model cannot see when that runs (docs/direct-io.md).
    pub disksize: Option<u64>,
}

impl Node {
    pub fn kind(&self) -> Option<FileKind> {
        if self.disk.is_dir() {
            Some(FileKind::Directory)
        } else if self.disk.is_reg() {
            Some(FileKind::Regular)
        } else if self.disk.is_symlink() {
            Some(FileKind::Symlink)
        } else {
            None
        }
    }

    /// i_disksize moves up to `to` (never down, never past the size).
    pub fn move_disksize(&mut self, to: Option<u64>) {
        if let (Some(d), Some(to)) = (self.disksize, to) {
            let d = d.max(to);
            self.disksize = (d < self.disk.size).then_some(d);
        }
    }

    /// A symlink whose target lives in `i_block`.
    pub fn is_fast_symlink(&self) -> bool {
        self.disk.is_symlink() && !self.disk.has_flag(FL_EXTENTS) && self.disk.size < I_BLOCK_LEN as u64
    }

    /// Flags as FS_IOC_GETFLAGS shows the bits the model tracks.
    pub fn visible_flags(&self) -> u32 {
        self.disk.flags & (inode_flags::EXTENTS | inode_flags::JOURNAL_DATA | inode_flags::IMMUTABLE | inode_flags::APPEND)
    }

    /// `i_links_count` of a directory with `subdirs` subdirectories.
    pub fn dir_links(subdirs: u32) -> u16 {
        let n = 2 + u64::from(subdirs);
        if n > u64::from(DIR_NLINK_MAX) {
            1
        } else {
            n as u16
        }
    }
}

impl<D: BlockDevice> Ctx<D> {
    pub fn ino_seed(&self, ino: InodeNumber, generation: u32) -> Option<u32> {
        self.csum_seed.map(|s| inode_seed(s, ino, generation))
    }

    /// How directories are indexed here; None without `dir_index`.
    pub fn htree(&self) -> Option<Htree> {
        (self.sb.feature_compat & feature::COMPAT_DIR_INDEX != 0).then(|| Htree::of(&self.sb))
    }

    /// Table block and byte offset of inode `ino`'s slot.
    pub fn slot_of(&self, ino: InodeNumber) -> Result<(BlockNumber, usize)> {
        let (g, idx) = self.geo.inode_location(ino).ok_or_else(|| Error::InvalidArgument(format!("inode {ino} out of range")))?;
        let isz = u64::from(self.geo.inode_size);
        let byte = u64::from(idx) * isz;
        let table = self.alloc.descs()[g as usize].inode_table;
        Ok((table + byte / self.bs(), (byte % self.bs()) as usize))
    }

    /// Reads inode `ino` and its extent tree.
    pub fn read_node(&mut self, ino: InodeNumber) -> Result<Node> {
        self.read_node_linked(ino, true)
    }

    /// Reads inode `ino`; with `linked` false an inode with no links (an
    /// orphan the orphan list names) is read too.
    pub fn read_node_linked(&mut self, ino: InodeNumber, linked: bool) -> Result<Node> {
        let (g, idx) = self.geo.inode_location(ino).ok_or_else(|| Error::InvalidArgument(format!("inode {ino} out of range")))?;
        let isz = usize::from(self.geo.inode_size);
        let disk = if self.alloc.slot_initialised(g, idx) {
            let (block, at) = self.slot_of(ino)?;
            let b = self.cache.get(&mut self.dev, block)?;
            let slot = b.get(at..at + isz).ok_or_else(|| Error::InvalidArgument(format!("inode {ino} slot past its block")))?;
            Inode::parse(slot, ino, self.csum_seed)?
        } else {
            Inode::zeroed(self.geo.inode_size)
        };
        if disk.mode == 0 || (linked && disk.links_count == 0) {
            return Err(Corrupt::entry_names_free_inode(ino));
        }
        if disk.has_flag(FL_INLINE_DATA) {
            return Err(Unsupported::Construct(format!("inode {ino} has inline data")).into());
        }
        let mut node = Node { disk, map: ExtentMap::new(), tree_blocks: Vec::new(), dir: None, map_dirty: false, es: ExtentStatusTree::new(), da_alloc_close: false, disksize: None };
        let fast_link = node.is_fast_symlink();
        if node.disk.has_flag(FL_EXTENTS) {
            let seed = self.ino_seed(ino, node.disk.generation);
            let t = extent_tree::load(&mut self.cache, &mut self.dev, ino, &node.disk, seed, self.geo.blocks_count)?;
            node.map = t.map;
            node.tree_blocks = t.tree_blocks;
        } else if !fast_link && node.disk.blocks != 0 {
            return Err(Unsupported::Construct(format!("inode {ino} is block-mapped")).into());
        }
        Ok(node)
    }

    /// Writes `node`'s inode into its table slot (in the cache).
    pub fn store_inode(&mut self, ino: InodeNumber, disk: &Inode) -> Result<()> {
        let bytes = disk.to_bytes(self.geo.inode_size, ino, self.csum_seed);
        let (block, at) = self.slot_of(ino)?;
        let b = self.cache.get_mut(&mut self.dev, block)?;
        let slot = b.get_mut(at..at + bytes.len()).ok_or_else(|| Error::InvalidArgument(format!("inode {ino} slot past its block")))?;
        slot.copy_from_slice(&bytes);
        Ok(())
    }

    /// Zeroes table slots `slots` of group `g` (slots entering the initialised
    /// area of a table that was never zeroed).
    pub fn zero_slots(&mut self, g: u32, slots: std::ops::Range<u32>) -> Result<()> {
        let ipg = self.geo.inodes_per_group;
        for idx in slots {
            let ino = g * ipg + idx + 1;
            let (block, at) = self.slot_of(ino)?;
            let isz = usize::from(self.geo.inode_size);
            let b = self.cache.get_mut(&mut self.dev, block)?;
            if let Some(slot) = b.get_mut(at..at + isz) {
                slot.fill(0);
            }
        }
        Ok(())
    }

    /// Loads `node`'s directory blocks into a [`Directory`].
    pub fn load_dir(&mut self, ino: InodeNumber, node: &mut Node) -> Result<()> {
        if node.dir.is_some() {
            return Ok(());
        }
        let bs = self.bs();
        let nblocks = node.disk.size / bs;
        if node.disk.size % bs != 0 || nblocks != node.map.blocks() || node.map.end() != nblocks {
            return Err(Error::Corrupt(Corrupt::Inode { ino, what: format!("directory size {} does not match its blocks", node.disk.size) }));
        }
        let mut blocks = Vec::with_capacity(nblocks as usize);
        for p in node.map.iter() {
            blocks.extend(p.physical..p.physical + p.len);
        }
        let seed = self.ino_seed(ino, node.disk.generation);
        let htree = self.htree();
        node.dir = Some(Directory::load(&mut self.cache, &mut self.dev, ino, seed, blocks, node.disk.has_flag(FL_INDEX), htree)?);
        Ok(())
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The inode `ino`, read on first use.
    pub(crate) fn node(&mut self, ino: InodeNumber) -> std::result::Result<&mut Node, Errno> {
        load_node(&mut self.nodes, &mut self.ctx, ino)
    }

    /// The directory `ino`, loaded; EIO if `ino` is not one.
    pub(crate) fn dir_node(&mut self, ino: InodeNumber) -> std::result::Result<&mut Node, Errno> {
        let node = load_node(&mut self.nodes, &mut self.ctx, ino)?;
        if !node.disk.is_dir() {
            return Err(Errno::ENOTDIR);
        }
        self.ctx.load_dir(ino, node)?;
        Ok(node)
    }

    /// The directory `ino`, loaded and ready for an edit: an index this
    /// engine cannot keep is dropped first (an edit that ignored it would
    /// hide names from ext4's indexed lookups), and the inode loses its
    /// INDEX flag, as ext4 falls back from such an index.
    pub(crate) fn dir_for_edit(&mut self, ino: InodeNumber) -> std::result::Result<&mut Node, Errno> {
        self.dir_node(ino)?;
        let node = load_node(&mut self.nodes, &mut self.ctx, ino)?;
        let dir = node.dir.as_mut().ok_or(Errno::EIO)?;
        if dir.has_fallback_index() {
            dir.drop_index(&mut self.ctx.cache)?;
            node.disk.flags &= !FL_INDEX;
            self.dirty.insert(ino);
        }
        load_node(&mut self.nodes, &mut self.ctx, ino)
    }

    /// The shared context and inode `ino` at once, for edits that need both.
    pub(crate) fn split(&mut self, ino: InodeNumber) -> std::result::Result<(&mut Ctx<D>, &mut Node), Errno> {
        let node = load_node(&mut self.nodes, &mut self.ctx, ino)?;
        Ok((&mut self.ctx, node))
    }

    pub(crate) fn mark_dirty(&mut self, ino: InodeNumber) {
        self.dirty.insert(ino);
    }

    pub(crate) fn kind_of(&mut self, ino: InodeNumber) -> std::result::Result<FileKind, Errno> {
        self.node(ino)?.kind().ok_or(Errno::EIO)
    }
}

/// Inode `ino` from `nodes`, read into it on a miss: one tree search when it
/// is already loaded, which is nearly every call.
fn load_node<'a, D: BlockDevice>(nodes: &'a mut BTreeMap<InodeNumber, Node>, ctx: &mut Ctx<D>, ino: InodeNumber) -> std::result::Result<&'a mut Node, Errno> {
    match nodes.entry(ino) {
        Entry::Occupied(e) => Ok(e.into_mut()),
        Entry::Vacant(e) => Ok(e.insert(ctx.read_node(ino)?)),
    }
}
