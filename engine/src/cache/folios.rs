//! Which folios of the block device's page cache the buffer cache's
//! blocks live in, and whether each has memory yet.
//!
//! A folio covers `max(bs, ps)` bytes: at bs < ps a page holds several
//! adjacent blocks (a buffer head each), at bs > ps a block is one folio of
//! order log2(bs/ps). The buffer cache notes folios as blocks come and go;
//! the filesystem backs new ones with no-fail allocations and releases the
//! frames of dropped ones (`fs::memory`), so the cache itself never talks
//! to the allocator and can be used where no allocator is at hand.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::format::BlockNumber;
use crate::pagecache::geometry::Geometry;

#[derive(Clone, Debug)]
struct MetaFolio {
    /// Cached blocks in it.
    blocks: u32,
    /// Page frame once backed.
    frame: Option<u64>,
    /// Last use, for reclaim's oldest-first order.
    stamp: u64,
}

/// The buffer cache's folios.
#[derive(Clone, Debug)]
pub struct MetadataFolios {
    geo: Geometry,
    /// The block device mapping's minimum order: every folio has it.
    order: u8,
    blocks_per_folio: u64,
    folios: BTreeMap<u64, MetaFolio>,
    /// Folios with blocks and no memory yet.
    unbacked: BTreeSet<u64>,
    /// (order, frame) of folios dropped since the last settle.
    released: Vec<(u8, u64)>,
    clock: u64,
}

impl MetadataFolios {
    pub fn new(geo: Geometry) -> Self {
        let order = geo.min_folio_order();
        // At the minimum order a folio holds at least one block.
        let blocks_per_folio = geo.blocks_per_folio(order).map_or(1, u64::from);
        MetadataFolios { geo, order, blocks_per_folio, folios: BTreeMap::new(), unbacked: BTreeSet::new(), released: Vec::new(), clock: 0 }
    }

    /// Order of every folio (the block device mapping's minimum).
    pub fn order(&self) -> u8 {
        self.order
    }

    pub fn folio_of(&self, block: BlockNumber) -> u64 {
        self.geo.lblk_to_pg(block) >> self.order
    }

    /// Blocks folio `index` covers.
    pub fn blocks_of(&self, index: u64) -> Range<BlockNumber> {
        let first = self.geo.pg_to_lblk(index << self.order);
        first..first + self.blocks_per_folio
    }

    /// A block entered the cache.
    pub fn block_added(&mut self, block: BlockNumber) {
        let index = self.folio_of(block);
        self.clock += 1;
        let stamp = self.clock;
        let f = self.folios.entry(index).or_insert_with(|| MetaFolio { blocks: 0, frame: None, stamp });
        f.blocks += 1;
        f.stamp = stamp;
        if f.frame.is_none() {
            self.unbacked.insert(index);
        }
    }

    /// A cached block was used again.
    pub fn touched(&mut self, block: BlockNumber) {
        let index = self.folio_of(block);
        if let Some(f) = self.folios.get_mut(&index) {
            self.clock += 1;
            f.stamp = self.clock;
        }
    }

    /// A block left the cache; its folio goes with its last block.
    pub fn block_removed(&mut self, block: BlockNumber) {
        let index = self.folio_of(block);
        let Some(f) = self.folios.get_mut(&index) else {
            return;
        };
        debug_assert!(f.blocks > 0);
        f.blocks = f.blocks.saturating_sub(1);
        if f.blocks == 0 {
            if let Some(frame) = f.frame {
                self.released.push((self.order, frame));
            }
            self.unbacked.remove(&index);
            self.folios.remove(&index);
        }
    }

    /// Folios waiting for memory, lowest first.
    pub fn unbacked(&self) -> Vec<u64> {
        self.unbacked.iter().copied().collect()
    }

    /// Folio `index` got memory at `frame`.
    pub fn back(&mut self, index: u64, frame: u64) {
        if let Some(f) = self.folios.get_mut(&index) {
            debug_assert!(f.frame.is_none(), "folio {index} backed twice");
            f.frame = Some(frame);
            self.unbacked.remove(&index);
        } else {
            // Its blocks went before memory came: give it straight back.
            self.released.push((self.order, frame));
        }
    }

    /// Frames to give back to the allocator.
    pub fn take_released(&mut self) -> Vec<(u8, u64)> {
        std::mem::take(&mut self.released)
    }

    /// Backed folios, least recently used first: reclaim's candidates.
    pub fn oldest_backed(&self) -> Vec<u64> {
        let mut v: Vec<(u64, u64)> = self.folios.iter().filter(|(_, f)| f.frame.is_some()).map(|(i, f)| (f.stamp, *i)).collect();
        v.sort_unstable();
        v.into_iter().map(|(_, i)| i).collect()
    }

    /// Bytes of backed folios.
    pub fn backed_bytes(&self) -> u64 {
        (self.folios.len() - self.unbacked.len()) as u64 * self.folio_bytes()
    }

    pub fn folio_bytes(&self) -> u64 {
        self.geo.pg_to_byte(1 << self.order)
    }

    /// Forgets every folio (a crash): their memory goes with the mount.
    pub fn clear(&mut self) {
        for f in self.folios.values() {
            if let Some(frame) = f.frame {
                self.released.push((self.order, frame));
            }
        }
        self.folios.clear();
        self.unbacked.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_blocks_share_a_page_and_large_ones_are_a_folio_each() {
        let geo = |bs, ps| Geometry::new(bs, ps).expect("a supported pair");
        let mut small = MetadataFolios::new(geo(1024, 4096));
        for b in [8, 9, 11, 12] {
            small.block_added(b);
        }
        assert_eq!(small.order(), 0);
        assert_eq!(small.unbacked(), vec![2, 3]);
        small.back(2, 40);
        small.block_removed(8);
        assert!(small.take_released().is_empty(), "block 9 and 11 still use folio 2");
        small.block_removed(9);
        small.block_removed(11);
        assert_eq!(small.take_released(), vec![(0, 40)]);
        assert_eq!(small.unbacked(), vec![3]);

        let mut large = MetadataFolios::new(geo(65536, 4096));
        assert_eq!(large.order(), 4);
        large.block_added(5);
        large.block_added(6);
        assert_eq!(large.unbacked(), vec![5, 6]);
        large.back(5, 0);
        large.back(6, 16);
        assert_eq!(large.backed_bytes(), 2 * 65536);
        large.touched(5);
        assert_eq!(large.oldest_backed(), vec![6, 5]);
        large.clear();
        assert_eq!(large.take_released(), vec![(4, 0), (4, 16)]);
    }

    #[test]
    fn memory_for_a_folio_whose_blocks_went_is_given_straight_back() {
        let mut m = MetadataFolios::new(Geometry::new(4096, 4096).expect("a supported pair"));
        m.block_added(3);
        m.block_removed(3);
        assert!(m.unbacked().is_empty());
        m.back(3, 9);
        assert_eq!(m.take_released(), vec![(0, 9)]);
    }
}
