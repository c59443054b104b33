//! How a directory grows when a name does not fit, as ext4 grows it:
//!
//! - a linear directory takes a new empty block at its end;
//! - a one-block directory on a `dir_index` filesystem becomes an htree
//!   (make_indexed_dir): its names move to a new block 1, block 0 becomes
//!   the dx root, and block 1 splits by hash into a new block 2;
//! - a full htree leaf splits by hash into a new block (do_split), once its
//!   parent index block has room: a full index block splits in half by
//!   count under a parent with room, and a path full up to the root pushes
//!   the root's entries down into a new node (one more level).
//!
//! Every step uses one spare block the caller mapped (two for
//! make_indexed_dir) and leaves a complete htree: every block referenced,
//! every name in the leaf its hash routes to.

use crate::cache::BufferCache;
use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::dirent::{self, min_rec_len, DirEntry};

use super::htree::{DxIndex, Frame, Growth};
use super::{corrupt, Directory, Index};

impl Directory {
    /// The lowest spare block, now in use.
    pub(super) fn take_spare(&mut self) -> Option<usize> {
        if self.spare.is_empty() {
            return None;
        }
        Some(self.spare.remove(0))
    }

    /// Writes an empty leaf into block `lblk`.
    pub(super) fn format_leaf(&mut self, cache: &mut BufferCache, lblk: usize) -> Result<()> {
        self.put_leaf(cache, lblk, &[])
    }

    /// Writes `entries` as leaf `lblk`, packed, and notes where they are.
    fn put_leaf(&mut self, cache: &mut BufferCache, lblk: usize, entries: &[DirEntry]) -> Result<()> {
        let bytes = dirent::build_block(cache.block_size(), entries, self.seed).ok_or_else(|| corrupt(self.ino, lblk as u64, "names of one block do not fit a block".into()))?;
        self.free[lblk] = dirent::largest_free(&bytes, self.seed.is_some());
        cache.put(self.blocks[lblk], &bytes)?;
        let block = u32::try_from(lblk).map_err(|_| corrupt(self.ino, lblk as u64, "block past 2^32".into()))?;
        for e in entries {
            if let Some(slot) = self.entries.get_mut(e.name.as_slice()) {
                slot.block = block;
            }
        }
        Ok(())
    }

    /// Rewrites the index blocks `which` (None: the root) from the index.
    pub(super) fn write_index_blocks(&mut self, cache: &mut BufferCache, which: &[Option<u32>]) -> Result<()> {
        let Index::Kept(ix) = &self.index else { return Err(corrupt(self.ino, 0, "index write without an index".into())) };
        for &w in which {
            let lblk = w.unwrap_or(0) as usize;
            let bytes = ix.block_bytes(w, cache.block_size(), self.ino, self.parent, self.seed).map_err(|why| corrupt(self.ino, lblk as u64, why))?;
            let pblk = *self.blocks.get(lblk).ok_or_else(|| corrupt(self.ino, lblk as u64, "index block past the directory".into()))?;
            cache.put(pblk, &bytes)?;
            self.free[lblk] = 0;
        }
        Ok(())
    }

    /// make_indexed_dir, with the two lowest spares as blocks 1 and 2.
    pub(super) fn make_indexed<D: BlockDevice + ?Sized>(&mut self, cache: &mut BufferCache, dev: &mut D) -> Result<()> {
        let policy = self.htree.ok_or_else(|| corrupt(self.ino, 0, "indexing without dir_index".into()))?;
        let (Some(first), Some(second)) = (self.take_spare(), self.take_spare()) else {
            return Err(corrupt(self.ino, 0, "indexing without two spare blocks".into()));
        };
        let has_tail = self.seed.is_some();
        let parsed = dirent::parse_block(cache.get(dev, self.blocks[0])?, has_tail).map_err(|w| corrupt(self.ino, 0, w))?;
        let names: Vec<DirEntry> = parsed.entries.into_iter().skip(2).collect();
        self.put_leaf(cache, first, &names)?;
        let first_leaf = u32::try_from(first).map_err(|_| corrupt(self.ino, 0, "block past 2^32".into()))?;
        self.index = Index::Kept(DxIndex::start(policy, cache.block_size(), has_tail, first_leaf));
        self.write_index_blocks(cache, &[None])?;
        self.split_leaf(cache, dev, Frame { node: None, at: 0 }, first, second)
    }

    /// One step of ext4_dx_add_entry's growth, into the spare block `new`.
    pub(super) fn grow_index<D: BlockDevice + ?Sized>(
        &mut self,
        cache: &mut BufferCache,
        dev: &mut D,
        growth: Growth,
        frames: &[Frame],
        leaf: usize,
        new: usize,
    ) -> Result<()> {
        let new_block = u32::try_from(new).map_err(|_| corrupt(self.ino, 0, "block past 2^32".into()))?;
        let Index::Kept(ix) = &mut self.index else { return Err(corrupt(self.ino, 0, "index growth without an index".into())) };
        let changed = match growth {
            Growth::SplitLeaf => {
                let frame = *frames.last().ok_or_else(|| corrupt(self.ino, 0, "empty dx path".into()))?;
                return self.split_leaf(cache, dev, frame, leaf, new);
            }
            Growth::SplitNode { depth } => ix.split_node(frames, depth, new_block).ok_or_else(|| corrupt(self.ino, 0, "dx node split off the path".into()))?,
            Growth::AddLevel => ix.add_level(new_block),
            Growth::Full => return Err(corrupt(self.ino, 0, "growth of a full index".into())),
        };
        self.write_index_blocks(cache, &changed)
    }

    /// do_split: the full leaf `leaf` keeps its lower hashes and the empty
    /// block `new` takes the upper ones, split near the middle by size;
    /// the index entry after `frame` sends the upper hashes to `new`.
    fn split_leaf<D: BlockDevice + ?Sized>(&mut self, cache: &mut BufferCache, dev: &mut D, frame: Frame, leaf: usize, new: usize) -> Result<()> {
        let bs = cache.block_size();
        let Index::Kept(ix) = &self.index else { return Err(corrupt(self.ino, leaf as u64, "leaf split without an index".into())) };
        let parsed = dirent::parse_block(cache.get(dev, self.blocks[leaf])?, self.seed.is_some()).map_err(|w| corrupt(self.ino, leaf as u64, w))?;
        // (hash, place in the block, entry), in hash order as dx_make_map and dx_sort_map leave them.
        let mut map: Vec<(u32, usize, DirEntry)> = parsed.entries.into_iter().enumerate().map(|(i, e)| (ix.hash(&e.name), i, e)).collect();
        if map.len() < 2 {
            return Err(corrupt(self.ino, leaf as u64, format!("a full leaf of {} names", map.len())));
        }
        map.sort_by_key(|&(h, i, _)| (h, i));
        let count = map.len();
        // Take entries from the top while less than half of each lands past the middle.
        let (mut size, mut moved, mut stopped_at) = (0, 0, None);
        for (i, (_, _, e)) in map.iter().enumerate().rev() {
            let len = min_rec_len(e.name.len());
            if size + len / 2 > bs / 2 {
                stopped_at = Some(i);
                break;
            }
            size += len;
            moved += 1;
        }
        let split = if stopped_at.is_some_and(|i| i > 0) { count - moved } else { count / 2 };
        let hash = map[split].0;
        let continued = u32::from(hash == map[split - 1].0);
        let upper: Vec<DirEntry> = map.split_off(split).into_iter().map(|(_, _, e)| e).collect();
        map.sort_by_key(|&(_, i, _)| i);
        let lower: Vec<DirEntry> = map.into_iter().map(|(_, _, e)| e).collect();
        let new_block = u32::try_from(new).map_err(|_| corrupt(self.ino, 0, "block past 2^32".into()))?;
        let Index::Kept(ix) = &mut self.index else { return Err(corrupt(self.ino, leaf as u64, "leaf split without an index".into())) };
        let changed = ix.insert_after(frame, hash | continued, new_block).ok_or_else(|| corrupt(self.ino, leaf as u64, "leaf split under a full index block".into()))?;
        self.put_leaf(cache, leaf, &lower)?;
        self.put_leaf(cache, new, &upper)?;
        self.write_index_blocks(cache, &[changed])
    }
}
