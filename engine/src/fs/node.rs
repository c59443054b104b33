//! In-memory inodes: the on-disk fields, the extent mapping, and (for
//! directories, once listed or edited) the loaded directory. Reading an inode
//! from its table slot, writing it back, and the bookkeeping both need.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ops::Range;

use ext4_model::op::inode_flags;
use ext4_model::{Errno, FileKind};

use crate::device::BlockDevice;
use crate::dir::htree::Htree;
use crate::dir::Directory;
use crate::error::{Corrupt, Error, Result, Unsupported};
use crate::extent_status::source::{ExtentSource, Found, OnDiskTree};
use crate::extent_status::ExtentStatusTree;
use crate::extent_tree::find::Check;
use crate::extent_tree::{self, ExtentMap, Piece};
use crate::format::checksum::inode_seed;
use crate::format::features::feature;
use crate::format::extent;
use crate::format::inode::{Inode, FL_EXTENTS, FL_INDEX, FL_INLINE_DATA, I_BLOCK_LEN};
use crate::format::{BlockNumber, InodeNumber};
use crate::range_set::RangeSet;

use super::{Ctx, Ext4};

/// dir_nlink: a directory with more links than this stores 1.
pub const DIR_NLINK_MAX: u32 = 65000;

/// A loaded inode.
#[derive(Debug, Clone)]
pub struct Node {
    pub disk: Inode,
    /// Data blocks (directory blocks, the slow-symlink block); empty for
    /// fast symlinks. Read through [`Node::map`], changed through the
    /// `map_*` methods, which drop the extent status entries they touch.
    map: ExtentMap,
    /// Whether `map` holds the whole tree. A regular file whose tree has
    /// blocks below the root is first opened without it: lookups go
    /// through the extent status cache to the on-disk tree, block by block,
    /// until something needs the mapping whole ([`Ctx::load_tree`]).
    tree_loaded: bool,
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
    /// Delayed blocks background write-back allocated. The model still
    /// counts them delayed, so a direct I/O's range write-back moves
    /// i_disksize over them as over delayed ones, whether the lag it moves
    /// was there at that write-back or came with a later extending write.
    /// Forgotten when write-back an op asks for, a discard or sync reaches
    /// them.
    pub quietly_written: RangeSet,
}

impl Node {
    /// A new inode with nothing mapped.
    pub fn new(disk: Inode) -> Node {
        Node { disk, map: ExtentMap::new(), tree_loaded: true, tree_blocks: Vec::new(), dir: None, map_dirty: false, es: ExtentStatusTree::new(), da_alloc_close: false, disksize: None, quietly_written: RangeSet::new() }
    }

    /// The whole mapping; only once loaded (every accessor but the
    /// lookup-only one loads it).
    pub fn map(&self) -> &ExtentMap {
        debug_assert!(self.tree_loaded, "the mapping of an inode whose tree was not loaded");
        &self.map
    }

    pub fn tree_loaded(&self) -> bool {
        self.tree_loaded
    }

    /// Maps `logical..logical + len` (unmapped) to `physical..`.
    pub fn map_insert(&mut self, logical: u64, len: u64, physical: BlockNumber, unwritten: bool) {
        debug_assert!(self.tree_loaded);
        self.es.forget_mapped(logical..logical.saturating_add(len));
        self.map.insert(logical, len, physical, unwritten);
    }

    /// [`Node::map_insert`] that leaves the cached entries: the test hook's
    /// stale-hole bug.
    pub fn map_insert_keeping_cache(&mut self, logical: u64, len: u64, physical: BlockNumber, unwritten: bool) {
        self.map.insert(logical, len, physical, unwritten);
    }

    /// Unmaps `range`; returns the physical runs that were mapped there.
    pub fn map_remove(&mut self, range: Range<u64>) -> Vec<(BlockNumber, u64)> {
        debug_assert!(self.tree_loaded);
        self.es.forget_mapped(range.clone());
        self.map.remove(range)
    }

    /// Sets every mapped block of `range` written or unwritten.
    pub fn map_set_state(&mut self, range: Range<u64>, unwritten: bool) {
        debug_assert!(self.tree_loaded);
        self.es.forget_mapped(range.clone());
        self.map.set_state(range, unwritten);
    }

    /// Moves the mapping and the delayed extents at or after `from` by
    /// `delta` blocks. `keep_cached` is the test hook's stale-cache bug.
    pub fn map_shift_from(&mut self, from: u64, delta: i64, keep_cached: bool) -> Option<()> {
        debug_assert!(self.tree_loaded);
        self.map.shift_from(from, delta)?;
        if keep_cached {
            self.es.shift_keeping_mapped(from, delta)
        } else {
            self.es.shift_from(from, delta)
        }
    }

    /// ext4_ext_precache: every extent and hole into the extent status
    /// cache, from `tree` (the on-disk tree read whole) or else the loaded
    /// mapping; returns how many extents it holds.
    pub fn precache(&mut self, tree: Option<&ExtentMap>) -> usize {
        debug_assert!(tree.is_some() || self.tree_loaded);
        self.es.precache(tree.unwrap_or(&self.map).iter())
    }

    /// Whether the extent status cache says what the mapping does (true
    /// while the mapping is not loaded: the cache is all there is).
    pub fn cache_agrees(&self) -> bool {
        !self.tree_loaded || self.es.cache_agrees(&self.map)
    }

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
        let mut node = self.read_node_shallow(ino, linked)?;
        self.load_tree(ino, &mut node)?;
        Ok(node)
    }

    /// Inode `ino` for lookups only: a regular file's extent tree is left
    /// on disk (its root is checked); other inodes are read whole.
    pub fn read_node_for_lookup(&mut self, ino: InodeNumber) -> Result<Node> {
        let mut node = self.read_node_shallow(ino, true)?;
        if node.disk.is_reg() && !node.tree_loaded {
            extent::parse_node(&node.disk.block, ino)?;
            return Ok(node);
        }
        self.load_tree(ino, &mut node)?;
        Ok(node)
    }

    /// The inode from its table slot, its extent tree not read.
    fn read_node_shallow(&mut self, ino: InodeNumber, linked: bool) -> Result<Node> {
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
        let mut node = Node::new(disk);
        if node.disk.has_flag(FL_EXTENTS) {
            node.tree_loaded = false;
        } else if !node.is_fast_symlink() && node.disk.blocks != 0 {
            return Err(Unsupported::Construct(format!("inode {ino} is block-mapped")).into());
        }
        Ok(node)
    }

    /// The mapped pieces of `range` through `node`'s extent status cache
    /// (ext4_map_blocks without create, repeated): a miss asks the mapping
    /// when loaded, else the on-disk tree from its root.
    pub fn mapped_pieces(&mut self, ino: InodeNumber, node: &mut Node, range: Range<u64>) -> Result<Vec<Piece>> {
        self.through_cache(ino, node, |es, tree| es.mapped_in(range, tree))
    }

    /// What block `lblk` of `node` is, through its extent status cache.
    pub fn lookup_block(&mut self, ino: InodeNumber, node: &mut Node, lblk: u64) -> Result<Found> {
        self.through_cache(ino, node, |es, tree| es.lookup(lblk, tree))
    }

    /// `f` with `node`'s extent status cache and the tree behind it: the
    /// mapping when loaded, else the on-disk tree.
    fn through_cache<R>(&mut self, ino: InodeNumber, node: &mut Node, f: impl FnOnce(&mut ExtentStatusTree, &mut dyn ExtentSource) -> Result<R>) -> Result<R> {
        if node.tree_loaded {
            return f(&mut node.es, &mut &node.map);
        }
        let check = Check::Once { seed: self.ino_seed(ino, node.disk.generation) };
        let mut tree = OnDiskTree { cache: &mut self.cache, dev: &mut self.dev, ino, inode: &node.disk, check };
        f(&mut node.es, &mut tree)
    }

    /// Reads `node`'s whole extent tree into its mapping, if not yet.
    pub fn load_tree(&mut self, ino: InodeNumber, node: &mut Node) -> Result<()> {
        if node.tree_loaded {
            return Ok(());
        }
        let seed = self.ino_seed(ino, node.disk.generation);
        let t = extent_tree::load(&mut self.cache, &mut self.dev, ino, &node.disk, seed, self.geo.blocks_count)?;
        debug_assert!(!node.map_dirty);
        node.map = t.map;
        node.tree_blocks = t.tree_blocks;
        node.tree_loaded = true;
        Ok(())
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
        if node.disk.size % bs != 0 || nblocks != node.map().blocks() || node.map().end() != nblocks {
            return Err(Error::Corrupt(Corrupt::Inode { ino, what: format!("directory size {} does not match its blocks", node.disk.size) }));
        }
        let mut blocks = Vec::with_capacity(nblocks as usize);
        for p in node.map().iter() {
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

    /// The shared context and inode `ino` for a lookup that goes through
    /// the extent status cache: the tree is not read whole for it.
    pub(crate) fn split_for_lookup(&mut self, ino: InodeNumber) -> std::result::Result<(&mut Ctx<D>, &mut Node), Errno> {
        let node = match self.nodes.entry(ino) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(self.ctx.read_node_for_lookup(ino)?),
        };
        Ok((&mut self.ctx, node))
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
        self.split_for_lookup(ino)?.1.kind().ok_or(Errno::EIO)
    }
}

/// Inode `ino` from `nodes`, read into it on a miss: one tree search when it
/// is already loaded, which is nearly every call.
fn load_node<'a, D: BlockDevice>(nodes: &'a mut BTreeMap<InodeNumber, Node>, ctx: &mut Ctx<D>, ino: InodeNumber) -> std::result::Result<&'a mut Node, Errno> {
    match nodes.entry(ino) {
        Entry::Occupied(e) => {
            let node = e.into_mut();
            if !node.tree_loaded {
                ctx.load_tree(ino, node)?;
            }
            Ok(node)
        }
        Entry::Vacant(e) => Ok(e.insert(ctx.read_node(ino)?)),
    }
}
