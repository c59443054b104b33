//! The buffer cache: metadata blocks (inode tables, bitmaps, descriptors,
//! extent-tree and directory blocks) held in memory with dirty tracking.
//!
//! Contract:
//! - A block is read from the device at most once; afterwards the cached copy
//!   is the truth. File data never passes through here.
//! - Nothing is written until [`BufferCache::write_back`], which sends every
//!   dirty block in ascending block order (adjacent blocks coalesced), so
//!   writeback is deterministic and seek-friendly.
//! - A freed block must be [`BufferCache::forget`]-ten: a stale dirty copy
//!   written later would overwrite whatever data the block holds by then.
//! - With a journal, the dirty blocks go into a transaction instead
//!   ([`BufferCache::dirty_blocks`], then [`BufferCache::mark_all_clean`]).
//! - Only reclaim evicts, and only folios whose every block is clean and
//!   whose home copy is the newest ([`BufferCache::drop_clean_folio`]): with
//!   lazy checkpoints the newest copy of a journaled block may be only here
//!   and in the log, not at home.
//! - Blocks live in folios of the block device's page cache
//!   ([`folios::MetadataFolios`]); their memory is the filesystem's to get.
//! - [`BufferCache::drop_all`] loses everything, as a crash does.

pub mod folios;

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet};

use crate::device::{BlockDevice, IoClass, WriteFlags};
use crate::error::{Error, Result};
use crate::format::BlockNumber;
use crate::pagecache::geometry::Geometry;
use folios::MetadataFolios;

/// Largest single coalesced write: bounds the staging buffer.
const MAX_WRITE_BYTES: usize = 1 << 20;

/// Cached metadata blocks of one filesystem.
#[derive(Clone, Debug)]
pub struct BufferCache {
    block_size: usize,
    blocks_count: u64,
    bufs: BTreeMap<BlockNumber, Box<[u8]>>,
    /// The cached blocks modified since they were last written or committed,
    /// kept apart so writeback and commits visit only them (the cache itself
    /// never shrinks) in ascending order.
    dirty: BTreeSet<BlockNumber>,
    /// Blocks whose contents a reader has checked whole since they entered
    /// the cache (the kernel's buffer_verified): a rewrite or a re-read
    /// clears it.
    verified: BTreeSet<BlockNumber>,
    folios: MetadataFolios,
}

impl BufferCache {
    pub fn new(geo: Geometry, blocks_count: u64) -> Self {
        let block_size = usize::try_from(geo.block_size()).unwrap_or(usize::MAX);
        BufferCache { block_size, blocks_count, bufs: BTreeMap::new(), dirty: BTreeSet::new(), verified: BTreeSet::new(), folios: MetadataFolios::new(geo) }
    }

    pub fn folios(&self) -> &MetadataFolios {
        &self.folios
    }

    pub fn folios_mut(&mut self) -> &mut MetadataFolios {
        &mut self.folios
    }

    /// Drops folio `index` when every cached block in it is clean and not
    /// `pinned` (its newest copy is not at home); whether it went.
    pub fn drop_clean_folio(&mut self, index: u64, pinned: &dyn Fn(BlockNumber) -> bool) -> bool {
        let blocks = self.folios.blocks_of(index);
        let cached: Vec<BlockNumber> = self.bufs.range(blocks).map(|(b, _)| *b).collect();
        if cached.is_empty() || cached.iter().any(|b| self.dirty.contains(b) || pinned(*b)) {
            return false;
        }
        for b in cached {
            self.bufs.remove(&b);
            self.verified.remove(&b);
            self.folios.block_removed(b);
        }
        true
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn is_dirty(&self, block: BlockNumber) -> bool {
        self.dirty.contains(&block)
    }

    /// Number of dirty blocks waiting for writeback.
    pub fn dirty_count(&self) -> usize {
        self.dirty.len()
    }

    fn check(&self, block: BlockNumber) -> Result<()> {
        if block == 0 || block >= self.blocks_count {
            // Block 0 holds the boot sectors and (bs > 1 KiB) the primary superblock.
            return Err(Error::InvalidArgument(format!("metadata block {block} outside 1..{}", self.blocks_count)));
        }
        Ok(())
    }

    fn load<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, block: BlockNumber) -> Result<&mut Box<[u8]>> {
        self.check(block)?;
        match self.bufs.entry(block) {
            Entry::Occupied(e) => {
                self.folios.touched(block);
                Ok(e.into_mut())
            }
            Entry::Vacant(e) => {
                let mut data = vec![0u8; self.block_size].into_boxed_slice();
                dev.read(block * self.block_size as u64, &mut data, IoClass::Metadata)?;
                self.folios.block_added(block);
                Ok(e.insert(data))
            }
        }
    }

    /// The block's bytes, read through on a miss.
    pub fn get<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, block: BlockNumber) -> Result<&[u8]> {
        Ok(self.load(dev, block)?)
    }

    /// The block's bytes for modification; the block becomes dirty.
    pub fn get_mut<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, block: BlockNumber) -> Result<&mut [u8]> {
        self.load(dev, block)?;
        self.dirty.insert(block);
        self.verified.remove(&block);
        let buf = self.bufs.get_mut(&block).ok_or_else(|| Error::InvalidArgument(format!("block {block} vanished from the cache")))?;
        Ok(buf)
    }

    /// Replaces the block's contents without reading it (a block just
    /// allocated, or one whose every byte is rewritten).
    pub fn put(&mut self, block: BlockNumber, data: &[u8]) -> Result<()> {
        self.check(block)?;
        debug_assert_eq!(data.len(), self.block_size);
        match self.bufs.entry(block) {
            Entry::Occupied(mut e) => {
                e.get_mut().copy_from_slice(data);
                self.folios.touched(block);
            }
            Entry::Vacant(e) => {
                e.insert(data.into());
                self.folios.block_added(block);
            }
        }
        self.dirty.insert(block);
        self.verified.remove(&block);
        Ok(())
    }

    /// Whether `block` was checked whole since it was last read or rewritten.
    pub fn is_verified(&self, block: BlockNumber) -> bool {
        self.verified.contains(&block)
    }

    /// Records that `block`, as cached now, was checked whole.
    pub fn set_verified(&mut self, block: BlockNumber) {
        if self.bufs.contains_key(&block) {
            self.verified.insert(block);
        }
    }

    /// Drops cached copies of blocks `start..start + len` without writing them.
    pub fn forget(&mut self, start: BlockNumber, len: u64) {
        let end = start.saturating_add(len);
        let doomed: Vec<BlockNumber> = self.bufs.range(start..end).map(|(b, _)| *b).collect();
        for b in doomed {
            self.bufs.remove(&b);
            self.dirty.remove(&b);
            self.verified.remove(&b);
            self.folios.block_removed(b);
        }
    }

    /// Writes every dirty block in ascending order, coalescing neighbours.
    pub fn write_back<D: BlockDevice + ?Sized>(&mut self, dev: &mut D) -> Result<()> {
        let bs = self.block_size;
        let mut run_start: Option<BlockNumber> = None;
        let mut staged: Vec<u8> = Vec::new();
        let emit = |dev: &mut D, start: BlockNumber, staged: &mut Vec<u8>| -> Result<()> {
            if !staged.is_empty() {
                dev.write(start * bs as u64, staged, WriteFlags::METADATA)?;
                staged.clear();
            }
            Ok(())
        };
        // A block leaves the dirty set once staged, as it did when each block
        // carried its own flag: an error part way leaves the rest dirty.
        while let Some(b) = self.dirty.pop_first() {
            let data = self.bufs.get(&b).ok_or_else(|| Error::InvalidArgument(format!("dirty block {b} not in the cache")))?;
            let contiguous = run_start.is_some_and(|s| s + (staged.len() / bs) as u64 == b);
            if !contiguous || staged.len() + bs > MAX_WRITE_BYTES {
                if let Some(s) = run_start {
                    emit(dev, s, &mut staged)?;
                }
                run_start = Some(b);
            }
            staged.extend_from_slice(data);
        }
        if let Some(s) = run_start {
            emit(dev, s, &mut staged)?;
        }
        Ok(())
    }

    /// Every dirty block in ascending order: what a transaction logs.
    pub fn dirty_blocks(&self) -> impl Iterator<Item = (BlockNumber, &[u8])> + '_ {
        self.dirty.iter().filter_map(|b| self.bufs.get(b).map(|d| (*b, &d[..])))
    }

    /// Marks every block clean: a committed transaction holds them now.
    pub fn mark_all_clean(&mut self) {
        self.dirty.clear();
    }

    /// Forgets everything, dirty or not (a crash).
    pub fn drop_all(&mut self) {
        self.bufs.clear();
        self.dirty.clear();
        self.verified.clear();
        self.folios.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_mem::MemDevice;

    fn read(dev: &mut MemDevice, block: u64) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        dev.read(block * 1024, &mut b, IoClass::Metadata).unwrap();
        b
    }

    #[test]
    fn nothing_reaches_the_device_before_write_back() {
        let mut dev = MemDevice::new(1 << 20);
        let mut c = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 1024);
        c.get_mut(&mut dev, 5).unwrap()[0] = 7;
        c.put(6, &[9u8; 1024]).unwrap();
        assert_eq!(c.dirty_count(), 2);
        assert_eq!(read(&mut dev, 5)[0], 0);
        c.write_back(&mut dev).unwrap();
        assert_eq!(c.dirty_count(), 0);
        assert_eq!(read(&mut dev, 5)[0], 7);
        assert_eq!(read(&mut dev, 6), vec![9u8; 1024]);
        assert_eq!(c.get(&mut dev, 5).unwrap()[0], 7, "the cached copy stays");
    }

    #[test]
    fn dirty_blocks_are_listed_in_order_until_marked_clean() {
        let mut dev = MemDevice::new(1 << 20);
        let mut c = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 1024);
        c.put(9, &[1u8; 1024]).unwrap();
        c.put(3, &[2u8; 1024]).unwrap();
        c.get(&mut dev, 5).unwrap();
        let listed: Vec<(u64, u8)> = c.dirty_blocks().map(|(b, d)| (b, d[0])).collect();
        assert_eq!(listed, vec![(3, 2), (9, 1)], "clean block 5 is not listed");
        c.mark_all_clean();
        assert_eq!(c.dirty_count(), 0);
        assert_eq!(c.dirty_blocks().count(), 0);
        c.write_back(&mut dev).unwrap();
        assert_eq!(read(&mut dev, 9), vec![0u8; 1024], "committed blocks are not written by write_back");
        assert_eq!(c.get(&mut dev, 9).unwrap()[0], 1, "but stay cached");
    }

    #[test]
    fn forgotten_blocks_are_never_written() {
        let mut dev = MemDevice::new(1 << 20);
        let mut c = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 1024);
        c.put(10, &[1u8; 1024]).unwrap();
        c.put(11, &[2u8; 1024]).unwrap();
        c.forget(10, 1);
        assert_eq!(c.dirty_count(), 1);
        c.write_back(&mut dev).unwrap();
        assert_eq!(read(&mut dev, 10), vec![0u8; 1024]);
        assert_eq!(read(&mut dev, 11), vec![2u8; 1024]);
        c.put(12, &[3u8; 1024]).unwrap();
        c.drop_all();
        c.write_back(&mut dev).unwrap();
        assert_eq!(read(&mut dev, 12), vec![0u8; 1024]);
        assert!(c.get(&mut dev, 1024).is_err(), "past the filesystem");
    }

    #[test]
    fn reclaim_drops_only_folios_whose_blocks_are_clean_and_unpinned() {
        let mut dev = MemDevice::new(1 << 20);
        let mut c = BufferCache::new(Geometry::new(1024, 4096).unwrap(), 1024);
        c.put(8, &[1u8; 1024]).unwrap();
        c.get(&mut dev, 9).unwrap();
        c.get(&mut dev, 12).unwrap();
        c.get(&mut dev, 16).unwrap();
        let none = |_b: BlockNumber| false;
        assert!(!c.drop_clean_folio(2, &none), "block 8 is dirty");
        assert!(!c.drop_clean_folio(4, &|b| b == 16), "block 16 is pinned");
        assert!(c.drop_clean_folio(3, &none));
        assert!(!c.drop_clean_folio(3, &none), "nothing left there");
        c.write_back(&mut dev).unwrap();
        assert!(c.drop_clean_folio(2, &none));
        assert_eq!(c.folios().unbacked(), vec![4], "folios 2 and 3 went with their blocks");
        assert_eq!(c.get(&mut dev, 8).unwrap(), &[1u8; 1024][..], "read again from home");
    }
}
