//! Linear directories: blocks of variable-length entries edited in place the
//! way ext4 does (split a record's slack to insert, merge into the previous
//! record to delete), plus an in-memory name index so a lookup never scans.
//!
//! - Block bytes live in the buffer cache; every edit refreshes the block's
//!   checksum tail (metadata_csum) and the block's free-space hint.
//! - "." and ".." are the first two records of block 0 and never in the index;
//!   the parent is remembered from "..".
//! - Growing the directory (a new block when nothing has room) is the
//!   caller's job: it owns allocation and the inode's mapping.
//! - An htree directory (a kernel made it) is read through its leaves; its
//!   index is dropped before the first edit ([`htree`]).

pub mod hash;
pub mod htree;

use std::collections::BTreeMap;

use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::error::{ChecksumObject, Corrupt, Error, Result};
use crate::format::dirent::{self, min_rec_len, DirEntry, FT_DIR};
use crate::format::{BlockNumber, InodeNumber};

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
    /// Logical blocks holding an htree index (empty for a linear directory).
    index_blocks: Vec<(usize, htree::BlockRole)>,
}

fn corrupt(ino: InodeNumber, block: u64, what: String) -> Error {
    Error::Corrupt(Corrupt::Dirent { ino, block, what })
}

impl Directory {
    /// Reads every block of directory `ino`, checking structure and checksums;
    /// with `htree`, index blocks are told apart from the leaves.
    pub fn load<D: BlockDevice + ?Sized>(
        cache: &mut BufferCache,
        dev: &mut D,
        ino: InodeNumber,
        seed: Option<u32>,
        blocks: Vec<BlockNumber>,
        htree: bool,
    ) -> Result<Self> {
        let has_tail = seed.is_some();
        let mut dir = Directory { ino, seed, blocks: Vec::new(), free: Vec::new(), entries: BTreeMap::new(), parent: 0, subdirs: 0, index_blocks: Vec::new() };
        for (lblk, &pblk) in blocks.iter().enumerate() {
            let b = cache.get(dev, pblk)?;
            let role = if htree { htree::role(lblk, b) } else { htree::BlockRole::Leaf };
            if role != htree::BlockRole::Leaf {
                // The index's own checksum (dx tail) is e2fsck's to judge;
                // the root's "." and ".." are all this engine takes from it.
                if role == htree::BlockRole::Root {
                    let parsed = dirent::parse_block(b, false).map_err(|w| corrupt(ino, 0, w))?;
                    match parsed.entries.get(..2) {
                        Some([d, dd]) if d.name == b"." && dd.name == b".." => dir.parent = dd.inode,
                        _ => return Err(corrupt(ino, 0, "dx root does not start with \".\" and \"..\"".into())),
                    }
                }
                dir.index_blocks.push((lblk, role));
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
        Ok(dir)
    }

    /// A new directory in `block`, holding "." and "..".
    pub fn create(cache: &mut BufferCache, ino: InodeNumber, parent: InodeNumber, seed: Option<u32>, block: BlockNumber) -> Result<Self> {
        let dot = |inode: u32, name: &str| DirEntry { inode, file_type: FT_DIR, name: name.as_bytes().to_vec() };
        let bytes = dirent::build_block(cache.block_size(), &[dot(ino, "."), dot(parent, "..")], seed)
            .ok_or_else(|| Error::InvalidArgument("\".\" and \"..\" do not fit a block".into()))?;
        let free = dirent::largest_free(&bytes, seed.is_some());
        cache.put(block, &bytes)?;
        Ok(Directory { ino, seed, blocks: vec![block], free: vec![free], entries: BTreeMap::new(), parent, subdirs: 0, index_blocks: Vec::new() })
    }

    /// The directory still has an htree index on disk.
    pub fn is_htree(&self) -> bool {
        !self.index_blocks.is_empty()
    }

    /// Rewrites the index blocks as linear ones ("." and ".." in block 0,
    /// interior nodes empty), so edits no longer bypass an index. The
    /// caller clears the inode's INDEX flag.
    pub fn drop_index(&mut self, cache: &mut BufferCache) -> Result<()> {
        for (lblk, role) in std::mem::take(&mut self.index_blocks) {
            let bytes = htree::linear_block(role, cache.block_size(), self.ino, self.parent, self.seed)
                .ok_or_else(|| corrupt(self.ino, lblk as u64, "an index block with no linear form".into()))?;
            cache.put(self.blocks[lblk], &bytes)?;
            self.free[lblk] = dirent::largest_free(&bytes, self.seed.is_some());
        }
        Ok(())
    }

    pub fn lookup(&self, name: &[u8]) -> Option<Slot> {
        self.entries.get(name).copied()
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

    /// Adds `name`; `Ok(false)` when no block has room (append one, retry).
    pub fn insert<D: BlockDevice + ?Sized>(
        &mut self,
        cache: &mut BufferCache,
        dev: &mut D,
        name: &[u8],
        ino: InodeNumber,
        file_type: u8,
    ) -> Result<bool> {
        debug_assert!(!self.entries.contains_key(name), "insert of an existing name");
        let need = min_rec_len(name.len());
        let Some(lblk) = self.free.iter().position(|&f| f >= need) else { return Ok(false) };
        let entry = DirEntry { inode: ino, file_type, name: name.to_vec() };
        let done = self.edit(cache, dev, lblk, |b, tail| dirent::insert_entry(b, tail, &entry))?;
        if !done {
            return Err(corrupt(self.ino, lblk as u64, "free-space hint and block disagree".into()));
        }
        if file_type == FT_DIR {
            self.subdirs += 1;
        }
        self.entries.insert(name.to_vec(), Slot { ino, file_type, block: lblk as u32 });
        Ok(true)
    }

    /// Appends an empty block at the end of the directory.
    pub fn append_block(&mut self, cache: &mut BufferCache, block: BlockNumber) -> Result<()> {
        let bytes = dirent::build_block(cache.block_size(), &[], self.seed).ok_or_else(|| Error::InvalidArgument("empty directory block".into()))?;
        self.free.push(dirent::largest_free(&bytes, self.seed.is_some()));
        cache.put(block, &bytes)?;
        self.blocks.push(block);
        Ok(())
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

    #[test]
    fn add_remove_lookup_over_many_blocks_and_reload() {
        let mut dev = MemDevice::new(4 << 20);
        let mut cache = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 4096);
        let seed = Some(0xABCD);
        let mut d = Directory::create(&mut cache, 20, 2, seed, 100).unwrap();
        let mut next_block = 101;
        for i in 0..400u32 {
            let name = format!("file-with-a-longish-name-{i}");
            while !d.insert(&mut cache, &mut dev, name.as_bytes(), 1000 + i, FT_REG_FILE).unwrap() {
                d.append_block(&mut cache, next_block).unwrap();
                next_block += 1;
            }
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
            assert!(d.insert(&mut cache, &mut dev, name.as_bytes(), 5000 + i, FT_DIR).unwrap(), "freed space is reused");
        }
        assert_eq!(d.blocks().len(), blocks_before);
        assert_eq!(d.subdirs(), 150);
        d.set_parent(&mut cache, &mut dev, 77).unwrap();
        cache.write_back(&mut dev).unwrap();
        let mut fresh_cache = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 4096);
        let back = Directory::load(&mut fresh_cache, &mut dev, 20, seed, d.blocks().to_vec(), false).unwrap();
        assert_eq!(back.len(), 350);
        assert_eq!(back.parent(), 77);
        assert_eq!(back.subdirs(), 150);
        assert_eq!(back.lookup(b"file-with-a-longish-name-1").map(|s| s.ino), Some(1001));
        assert!(back.lookup(b"file-with-a-longish-name-2").is_none());
        let wrong_seed = Directory::load(&mut BufferCache::new(Geometry::new(1024, 4096).unwrap(), 4096), &mut dev, 21, Some(1), d.blocks().to_vec(), false);
        assert!(matches!(wrong_seed, Err(Error::Corrupt(Corrupt::Checksum { .. }))));
    }
}
