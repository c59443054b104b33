//! Directories: blocks of variable-length entries edited in place the way
//! ext4 does (split a record's slack to insert, merge into the previous
//! record to delete), plus an in-memory name index so a lookup never scans.
//!
//! - Block bytes live in the buffer cache; every edit refreshes the block's
//!   checksum tail (metadata_csum) and the block's free-space hint.
//! - "." and ".." are the first two records of block 0 and never in the index;
//!   the parent is remembered from "..".
//! - On a `dir_index` filesystem a directory that outgrows its one block
//!   becomes an htree, and an htree's names go to the leaf their hash routes
//!   to ([`htree`], [`grow`]); other directories take a name in the first
//!   block with room.
//! - Allocation is the caller's: when a name needs a new block,
//!   [`Directory::insert`] says so, the caller maps one at the end
//!   ([`Directory::add_spare`]) and asks again.

mod grow;
pub mod hash;
pub mod htree;

use std::collections::BTreeMap;

use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::error::{ChecksumObject, Corrupt, Error, Result};
use crate::format::dirent::{self, min_rec_len, DirEntry, FT_DIR};
use crate::format::{BlockNumber, InodeNumber};

use htree::{BlockRole, DxIndex, Fallback, Htree};

/// One name in a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub ino: InodeNumber,
    pub file_type: u8,
    /// Logical block of the directory holding the entry.
    pub block: u32,
}

/// A loaded directory.
#[derive(Debug, Clone)]
pub struct Directory {
    ino: InodeNumber,
    seed: Option<u32>,
    /// Physical block of each logical block.
    blocks: Vec<BlockNumber>,
    /// Largest record each block could still take.
    free: Vec<usize>,
    entries: BTreeMap<Vec<u8>, Slot>,
    parent: InodeNumber,
    subdirs: u32,
    index: Index,
    /// How this filesystem indexes directories; None without `dir_index`.
    htree: Option<Htree>,
    /// Blocks mapped at the end for a growth step and not used yet.
    spare: Vec<usize>,
}

/// A directory's index.
#[derive(Debug, Clone)]
enum Index {
    Linear,
    /// An htree kept up to date by every edit.
    Kept(DxIndex),
    /// An htree read through its leaves and dropped before the first edit.
    Fallback(Fallback),
}

/// What [`Directory::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Insert {
    Done,
    /// Map one more block at the end ([`Directory::add_spare`]) and ask again.
    NeedBlock,
    /// The htree is full at the deepest level allowed (ENOSPC).
    IndexFull,
}

fn corrupt(ino: InodeNumber, block: u64, what: String) -> Error {
    Error::Corrupt(Corrupt::Dirent { ino, block, what })
}

impl Directory {
    /// Reads every block of directory `ino`, checking structure and checksums;
    /// with `indexed` (the inode's INDEX flag), its htree is read as well.
    #[allow(clippy::too_many_arguments)]
    pub fn load<D: BlockDevice + ?Sized>(
        cache: &mut BufferCache,
        dev: &mut D,
        ino: InodeNumber,
        seed: Option<u32>,
        blocks: Vec<BlockNumber>,
        indexed: bool,
        htree: Option<Htree>,
    ) -> Result<Self> {
        let has_tail = seed.is_some();
        let index = match (indexed, htree, blocks.first()) {
            (true, Some(policy), Some(&root)) => {
                let root = cache.get(dev, root)?.to_vec();
                let nblocks = u32::try_from(blocks.len()).map_err(|_| corrupt(ino, 0, "more blocks than a directory can have".into()))?;
                let mut failed = None;
                let read = DxIndex::read(policy, &root, seed, nblocks, |b| match cache.get(dev, blocks[b as usize]) {
                    Ok(bytes) => Ok(bytes.to_vec()),
                    Err(e) => {
                        let why = e.to_string();
                        failed = Some(e);
                        Err(why)
                    }
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                match read.map_err(|w| corrupt(ino, 0, w))? {
                    Some(ix) => Index::Kept(ix),
                    None => Index::Fallback(Vec::new()),
                }
            }
            (true, _, _) => Index::Fallback(Vec::new()),
            (false, _, _) => Index::Linear,
        };
        let mut dir = Directory { ino, seed, blocks: Vec::new(), free: Vec::new(), entries: BTreeMap::new(), parent: 0, subdirs: 0, index, htree, spare: Vec::new() };
        for (lblk, &pblk) in blocks.iter().enumerate() {
            let b = cache.get(dev, pblk)?;
            let role = match &dir.index {
                Index::Linear => BlockRole::Leaf,
                Index::Kept(_) if lblk == 0 => BlockRole::Root,
                Index::Kept(ix) if u32::try_from(lblk).is_ok_and(|l| ix.is_node(l)) => BlockRole::Interior,
                Index::Kept(_) => BlockRole::Leaf,
                Index::Fallback(_) => htree::role(lblk, b),
            };
            if role != BlockRole::Leaf {
                if role == BlockRole::Root {
                    let parsed = dirent::parse_block(b, false).map_err(|w| corrupt(ino, 0, w))?;
                    match parsed.entries.get(..2) {
                        Some([d, dd]) if d.name == b"." && dd.name == b".." => dir.parent = dd.inode,
                        _ => return Err(corrupt(ino, 0, "dx root does not start with \".\" and \"..\"".into())),
                    }
                }
                if let Index::Fallback(roles) = &mut dir.index {
                    roles.push((lblk, role));
                }
                dir.free.push(0);
                dir.blocks.push(pblk);
                continue;
            }
            let parsed = dirent::parse_block(b, has_tail).map_err(|w| corrupt(ino, lblk as u64, w))?;
            if let (Some(s), Some(stored)) = (seed, parsed.stored_checksum) {
                let computed = dirent::block_checksum(b, s);
                if computed != stored {
                    return Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::DirBlock { ino, block: lblk as u64 }, stored, computed }));
                }
            }
            let mut list = parsed.entries.into_iter();
            if lblk == 0 {
                let dot = list.next();
                let dotdot = list.next();
                match (dot, dotdot) {
                    (Some(d), Some(dd)) if d.name == b"." && dd.name == b".." => dir.parent = dd.inode,
                    _ => return Err(corrupt(ino, 0, "block 0 does not start with \".\" and \"..\"".into())),
                }
            }
            for e in list {
                if e.name == b"." || e.name == b".." {
                    return Err(corrupt(ino, lblk as u64, "stray \".\" or \"..\" entry".into()));
                }
                let slot = Slot { ino: e.inode, file_type: e.file_type, block: lblk as u32 };
                if e.file_type == FT_DIR {
                    dir.subdirs += 1;
                }
                if dir.entries.insert(e.name, slot).is_some() {
                    return Err(corrupt(ino, lblk as u64, "duplicate name".into()));
                }
            }
            dir.free.push(dirent::largest_free(b, has_tail));
            dir.blocks.push(pblk);
        }
        if dir.blocks.is_empty() {
            return Err(corrupt(ino, 0, "directory has no blocks".into()));
        }
        // A name the index does not lead to is one ext4's lookups miss (and
        // a create would then add twice): the index is damaged.
        if let Index::Kept(ix) = &dir.index {
            if let Some((name, slot)) = dir.entries.iter().find(|(n, s)| !ix.reaches(ix.hash(n), s.block)) {
                return Err(corrupt(ino, u64::from(slot.block), format!("{:?} sits outside the leaf its hash leads to", String::from_utf8_lossy(name))));
            }
        }
        Ok(dir)
    }

    /// A new directory in `block`, holding "." and "..".
    pub fn create(cache: &mut BufferCache, ino: InodeNumber, parent: InodeNumber, seed: Option<u32>, block: BlockNumber, htree: Option<Htree>) -> Result<Self> {
        let dot = |inode: u32, name: &str| DirEntry { inode, file_type: FT_DIR, name: name.as_bytes().to_vec() };
        let bytes = dirent::build_block(cache.block_size(), &[dot(ino, "."), dot(parent, "..")], seed)
            .ok_or_else(|| Error::InvalidArgument("\".\" and \"..\" do not fit a block".into()))?;
        let free = dirent::largest_free(&bytes, seed.is_some());
        cache.put(block, &bytes)?;
        Ok(Directory { ino, seed, blocks: vec![block], free: vec![free], entries: BTreeMap::new(), parent, subdirs: 0, index: Index::Linear, htree, spare: Vec::new() })
    }

    /// The directory has an htree this engine keeps (the inode's INDEX flag).
    pub fn is_indexed(&self) -> bool {
        matches!(self.index, Index::Kept(_))
    }

    /// The directory has an index it must drop before an edit.
    pub fn has_fallback_index(&self) -> bool {
        matches!(self.index, Index::Fallback(_))
    }

    /// Index levels below the root, for an htree.
    pub fn index_levels(&self) -> Option<u8> {
        match &self.index {
            Index::Kept(ix) => Some(ix.levels()),
            _ => None,
        }
    }


    /// Rewrites the index blocks as linear ones ("." and ".." in block 0,
    /// interior nodes empty), so edits no longer bypass an index. The
    /// caller clears the inode's INDEX flag.
    pub fn drop_index(&mut self, cache: &mut BufferCache) -> Result<()> {
        let Index::Fallback(roles) = std::mem::replace(&mut self.index, Index::Linear) else { return Ok(()) };
        for (lblk, role) in roles {
            let bytes = htree::linear_block(role, cache.block_size(), self.ino, self.parent, self.seed)
                .ok_or_else(|| corrupt(self.ino, lblk as u64, "an index block with no linear form".into()))?;
            cache.put(self.blocks[lblk], &bytes)?;
            self.free[lblk] = dirent::largest_free(&bytes, self.seed.is_some());
        }
        Ok(())
    }

    /// The entry `name`. In an htree only the leaves the name's hash leads
    /// to are searched, as ext4's dx lookup does (the name map stands in
    /// for reading them).
    pub fn lookup(&self, name: &[u8]) -> Option<Slot> {
        let slot = self.entries.get(name).copied()?;
        match &self.index {
            Index::Kept(ix) => ix.reaches(ix.hash(name), slot.block).then_some(slot),
            Index::Linear | Index::Fallback(_) => Some(slot),
        }
    }

    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &Slot)> {
        self.entries.iter().map(|(n, s)| (n.as_slice(), s))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn parent(&self) -> InodeNumber {
        self.parent
    }

    /// Entries that are directories (each holds a link on this one via "..").
    pub fn subdirs(&self) -> u32 {
        self.subdirs
    }

    pub fn blocks(&self) -> &[BlockNumber] {
        &self.blocks
    }

    fn edit<D: BlockDevice + ?Sized, R>(
        &mut self,
        cache: &mut BufferCache,
        dev: &mut D,
        lblk: usize,
        f: impl FnOnce(&mut [u8], bool) -> R,
    ) -> Result<R> {
        let pblk = *self.blocks.get(lblk).ok_or_else(|| corrupt(self.ino, lblk as u64, "block past the directory".into()))?;
        let has_tail = self.seed.is_some();
        let b = cache.get_mut(dev, pblk)?;
        let out = f(b, has_tail);
        if let Some(s) = self.seed {
            dirent::set_tail_checksum(b, s);
        }
        self.free[lblk] = dirent::largest_free(b, has_tail);
        Ok(out)
    }

    /// Adds `name`, growing the directory as ext4 does when nothing has room
    /// (after [`Insert::NeedBlock`], the caller maps a block and asks again).
    pub fn insert<D: BlockDevice + ?Sized>(
        &mut self,
        cache: &mut BufferCache,
        dev: &mut D,
        name: &[u8],
        ino: InodeNumber,
        file_type: u8,
    ) -> Result<Insert> {
        debug_assert!(!self.entries.contains_key(name), "insert of an existing name");
        debug_assert!(!self.has_fallback_index(), "insert before the index was dropped");
        let need = min_rec_len(name.len());
        loop {
            let target = match &self.index {
                Index::Kept(ix) => {
                    let (frames, leaf) = ix.probe(ix.hash(name)).ok_or_else(|| corrupt(self.ino, 0, "dx probe left the index".into()))?;
                    if self.free.get(leaf as usize).is_some_and(|&f| f >= need) {
                        leaf as usize
                    } else {
                        let growth = ix.growth(&frames);
                        if growth == htree::Growth::Full {
                            return Ok(Insert::IndexFull);
                        }
                        let Some(new) = self.take_spare() else { return Ok(Insert::NeedBlock) };
                        self.grow_index(cache, dev, growth, &frames, leaf as usize, new)?;
                        continue;
                    }
                }
                Index::Linear | Index::Fallback(_) => match self.free.iter().position(|&f| f >= need) {
                    Some(lblk) => lblk,
                    None if self.htree.is_some() && matches!(self.index, Index::Linear) && self.blocks.len() - self.spare.len() == 1 => {
                        if self.spare.len() < 2 {
                            return Ok(Insert::NeedBlock);
                        }
                        self.make_indexed(cache, dev)?;
                        continue;
                    }
                    None => {
                        let Some(new) = self.take_spare() else { return Ok(Insert::NeedBlock) };
                        self.format_leaf(cache, new)?;
                        continue;
                    }
                },
            };
            let entry = DirEntry { inode: ino, file_type, name: name.to_vec() };
            let done = self.edit(cache, dev, target, |b, tail| dirent::insert_entry(b, tail, &entry))?;
            if !done {
                return Err(corrupt(self.ino, target as u64, "free-space hint and block disagree".into()));
            }
            if file_type == FT_DIR {
                self.subdirs += 1;
            }
            self.entries.insert(name.to_vec(), Slot { ino, file_type, block: target as u32 });
            return Ok(Insert::Done);
        }
    }

    /// A block the caller mapped at the end of the directory, for
    /// [`Directory::insert`] to use.
    pub fn add_spare(&mut self, block: BlockNumber) {
        self.spare.push(self.blocks.len());
        self.blocks.push(block);
        self.free.push(0);
    }

    /// Forgets the spare blocks (the caller could not map them all and
    /// unmaps them); returns how many there were.
    pub fn drop_spares(&mut self) -> usize {
        let n = self.spare.len();
        debug_assert!(self.spare.iter().all(|&l| l >= self.blocks.len() - n), "spares sit at the end");
        self.spare.clear();
        self.blocks.truncate(self.blocks.len() - n);
        self.free.truncate(self.blocks.len());
        n
    }

    /// Removes `name`, returning what it pointed at.
    pub fn remove<D: BlockDevice + ?Sized>(&mut self, cache: &mut BufferCache, dev: &mut D, name: &[u8]) -> Result<Option<Slot>> {
        let Some(slot) = self.entries.get(name).copied() else { return Ok(None) };
        let removed = self.edit(cache, dev, slot.block as usize, |b, tail| dirent::remove_entry(b, tail, name))?;
        if removed != Some(slot.ino) {
            return Err(corrupt(self.ino, u64::from(slot.block), "index and block disagree".into()));
        }
        self.entries.remove(name);
        if slot.file_type == FT_DIR {
            self.subdirs -= 1;
        }
        Ok(Some(slot))
    }

    /// Points the existing entry `name` at another inode, in place (one half
    /// of RENAME_EXCHANGE).
    pub fn replace<D: BlockDevice + ?Sized>(&mut self, cache: &mut BufferCache, dev: &mut D, name: &[u8], ino: InodeNumber, file_type: u8) -> Result<()> {
        let Some(old) = self.entries.get(name).copied() else { return Err(corrupt(self.ino, 0, "replace of a missing name".into())) };
        let ok = self.edit(cache, dev, old.block as usize, |b, tail| dirent::set_entry_inode(b, tail, name, ino, file_type))?;
        if !ok {
            return Err(corrupt(self.ino, u64::from(old.block), "index and block disagree".into()));
        }
        if old.file_type == FT_DIR {
            self.subdirs -= 1;
        }
        if file_type == FT_DIR {
            self.subdirs += 1;
        }
        self.entries.insert(name.to_vec(), Slot { ino, file_type, block: old.block });
        Ok(())
    }

    /// Points ".." at a new parent.
    pub fn set_parent<D: BlockDevice + ?Sized>(&mut self, cache: &mut BufferCache, dev: &mut D, parent: InodeNumber) -> Result<()> {
        if self.is_indexed() {
            self.parent = parent;
            return self.write_index_blocks(cache, &[None]);
        }
        let ok = self.edit(cache, dev, 0, |b, tail| dirent::set_entry_inode(b, tail, b"..", parent, FT_DIR))?;
        if !ok {
            return Err(corrupt(self.ino, 0, "no \"..\" entry".into()));
        }
        self.parent = parent;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_mem::MemDevice;
    use crate::format::dirent::FT_REG_FILE;
    use crate::pagecache::geometry::Geometry;

    /// Inserts `name`, mapping blocks from `next_block` on as asked.
    fn add(d: &mut Directory, cache: &mut BufferCache, dev: &mut MemDevice, name: &str, ino: InodeNumber, ft: u8, next_block: &mut BlockNumber) {
        loop {
            match d.insert(cache, dev, name.as_bytes(), ino, ft).unwrap() {
                Insert::Done => return,
                Insert::NeedBlock => {
                    d.add_spare(*next_block);
                    *next_block += 1;
                }
                Insert::IndexFull => panic!("index full at {name}"),
            }
        }
    }

    #[test]
    fn add_remove_lookup_over_many_blocks_and_reload() {
        let mut dev = MemDevice::new(4 << 20);
        let mut cache = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 4096);
        let seed = Some(0xABCD);
        let mut d = Directory::create(&mut cache, 20, 2, seed, 100, None).unwrap();
        let mut next_block = 101;
        for i in 0..400u32 {
            let name = format!("file-with-a-longish-name-{i}");
            add(&mut d, &mut cache, &mut dev, &name, 1000 + i, FT_REG_FILE, &mut next_block);
        }
        assert!(d.blocks().len() > 10, "400 entries need many 1 KiB blocks");
        assert_eq!(d.lookup(b"file-with-a-longish-name-399").map(|s| s.ino), Some(1399));
        for i in (0..400u32).step_by(2) {
            let name = format!("file-with-a-longish-name-{i}");
            assert_eq!(d.remove(&mut cache, &mut dev, name.as_bytes()).unwrap().map(|s| s.ino), Some(1000 + i));
        }
        assert_eq!(d.remove(&mut cache, &mut dev, b"file-with-a-longish-name-0").unwrap(), None);
        let blocks_before = d.blocks().len();
        for i in 0..150u32 {
            let name = format!("n{i}");
            assert_eq!(d.insert(&mut cache, &mut dev, name.as_bytes(), 5000 + i, FT_DIR).unwrap(), Insert::Done, "freed space is reused");
        }
        assert_eq!(d.blocks().len(), blocks_before);
        assert_eq!(d.subdirs(), 150);
        d.set_parent(&mut cache, &mut dev, 77).unwrap();
        cache.write_back(&mut dev).unwrap();
        let mut fresh_cache = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 4096);
        let back = Directory::load(&mut fresh_cache, &mut dev, 20, seed, d.blocks().to_vec(), false, None).unwrap();
        assert_eq!(back.len(), 350);
        assert_eq!(back.parent(), 77);
        assert_eq!(back.subdirs(), 150);
        assert_eq!(back.lookup(b"file-with-a-longish-name-1").map(|s| s.ino), Some(1001));
        assert!(back.lookup(b"file-with-a-longish-name-2").is_none());
        let wrong_seed = Directory::load(&mut BufferCache::new(Geometry::new(1024, 4096).unwrap(), 4096), &mut dev, 21, Some(1), d.blocks().to_vec(), false, None);
        assert!(matches!(wrong_seed, Err(Error::Corrupt(Corrupt::Checksum { .. }))));
    }

    fn htree_policy() -> Htree {
        Htree { hash: hash::HashPolicy { seed: [0x5a; 16], default_version: 1, unsigned: false }, max_levels: htree::LEVELS_COMPAT }
    }

    /// Every name sits in a leaf its hash leads to: a hashed lookup finds it.
    fn assert_routed(d: &Directory) {
        assert!(d.is_indexed());
        for (name, slot) in d.entries() {
            assert_eq!(d.lookup(name), Some(*slot), "{} is not where its hash routes", String::from_utf8_lossy(name));
        }
    }

    #[test]
    fn a_directory_becomes_an_htree_when_it_outgrows_its_block_and_stays_one() {
        let mut dev = MemDevice::new(16 << 20);
        let geo = Geometry::new(1024, 4096).unwrap();
        let mut cache = BufferCache::new(geo, 1 << 20);
        let seed = Some(0x1357);
        let mut d = Directory::create(&mut cache, 30, 2, seed, 1000, Some(htree_policy())).unwrap();
        let mut next = 1001;
        let mut i = 0u32;
        while d.blocks().len() == 1 {
            add(&mut d, &mut cache, &mut dev, &format!("file-with-a-longish-name-{i}"), 100 + i, FT_REG_FILE, &mut next);
            i += 1;
        }
        assert!(d.is_indexed(), "dir_index turns a second block into an index");
        assert_eq!(d.blocks().len(), 3, "make_indexed_dir: root, then the names split over two leaves");
        assert_eq!(d.index_levels(), Some(0));
        assert_routed(&d);
        while i < 4000 {
            add(&mut d, &mut cache, &mut dev, &format!("file-with-a-longish-name-{i}"), 100 + i, FT_REG_FILE, &mut next);
            i += 1;
        }
        assert_eq!(d.index_levels(), Some(1), "4,000 names at 1 KiB need a level of nodes");
        assert_routed(&d);
        for j in (0..4000u32).step_by(3) {
            d.remove(&mut cache, &mut dev, format!("file-with-a-longish-name-{j}").as_bytes()).unwrap().unwrap();
        }
        for j in 0..500u32 {
            add(&mut d, &mut cache, &mut dev, &format!("again-{j}"), 9000 + j, FT_DIR, &mut next);
        }
        d.set_parent(&mut cache, &mut dev, 44).unwrap();
        assert_routed(&d);
        cache.write_back(&mut dev).unwrap();
        let back = Directory::load(&mut BufferCache::new(geo, 1 << 20), &mut dev, 30, seed, d.blocks().to_vec(), true, Some(htree_policy())).unwrap();
        assert!(back.is_indexed());
        assert_eq!(back.parent(), 44);
        assert_eq!(back.subdirs(), 500);
        assert_eq!(back.entries().map(|(n, s)| (n.to_vec(), *s)).collect::<Vec<_>>(), d.entries().map(|(n, s)| (n.to_vec(), *s)).collect::<Vec<_>>());
        assert_routed(&back);
        // Without dir_index the same blocks read as a directory whose index must go.
        let mut linear = Directory::load(&mut cache, &mut dev, 30, seed, d.blocks().to_vec(), true, None).unwrap();
        assert!(linear.has_fallback_index());
        assert_eq!(linear.len(), d.len());
        linear.drop_index(&mut cache).unwrap();
        assert!(!linear.has_fallback_index() && !linear.is_indexed());
    }

    #[test]
    fn spare_blocks_a_step_could_not_finish_are_dropped() {
        let mut dev = MemDevice::new(4 << 20);
        let mut cache = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 4096);
        let mut d = Directory::create(&mut cache, 31, 2, None, 200, Some(htree_policy())).unwrap();
        let mut i = 0;
        while d.insert(&mut cache, &mut dev, format!("name-{i:03}").as_bytes(), 50 + i, FT_REG_FILE).unwrap() == Insert::Done {
            i += 1;
        }
        d.add_spare(201);
        assert_eq!(d.insert(&mut cache, &mut dev, format!("name-{i:03}").as_bytes(), 50 + i, FT_REG_FILE).unwrap(), Insert::NeedBlock, "indexing takes two blocks");
        assert_eq!(d.drop_spares(), 1);
        assert_eq!(d.blocks(), [200]);
        assert!(!d.is_indexed());
        assert_eq!(d.len(), i as usize);
    }
}
