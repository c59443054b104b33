//! Block and inode allocation over the group descriptors and bitmaps.
//!
//! - Descriptors are all in memory from mount; bitmaps are read (checksum
//!   verified) on first use, or synthesised for UNINIT groups, and stay.
//! - Free counts are kept exact at every step: per group in the descriptors
//!   and in running totals the superblock is written from.
//! - Nothing reaches the device here: [`Allocator::write_back`] stores dirty
//!   bitmaps (with checksums and padding) and descriptors into the buffer cache.
//! - Policies: [`block`] (goal group, contiguous runs, the skip_block_uninit
//!   knob), [`inode`] (first use of a group, itable_unused), [`orlov`] (which
//!   group a new inode goes to), [`held`] (with a journal, blocks freed in
//!   the running transaction are not handed out before it commits).

pub mod block;
pub mod held;
pub mod inode;
pub mod mballoc;
pub mod orlov;

use std::collections::{BTreeMap, BTreeSet};

use ext4_model::AllocPolicy;

use crate::cache::BufferCache;
use crate::device::{BlockDevice, IoClass};
use crate::error::{ChecksumObject, Corrupt, Error, Result};
use crate::format::bitmap::{stored_bitmap_csum_matches, Bitmap, BitmapChecksum};
use crate::format::geometry::Geometry;
use crate::format::group_desc::{DescChecksum, GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::format::GroupIndex;

pub use inode::InodeGrant;
pub use mballoc::{AllocRequest, MbStats};

/// Allocation state of a mounted filesystem.
#[derive(Clone, Debug)]
pub struct Allocator {
    geo: Geometry,
    descs: Vec<GroupDesc>,
    block_bitmaps: Vec<Option<Bitmap>>,
    inode_bitmaps: Vec<Option<Bitmap>>,
    /// Lowest cluster of each group that may be free: scans start here.
    block_hint: Vec<u32>,
    dirty_descs: BTreeSet<GroupIndex>,
    dirty_block_bitmaps: BTreeSet<GroupIndex>,
    dirty_inode_bitmaps: BTreeSet<GroupIndex>,
    /// Free clusters (blocks without bigalloc), as the descriptors count.
    free_clusters: u64,
    free_inodes: u64,
    used_dirs: u64,
    /// UNINIT flags and itable_unused mean something (metadata_csum or uninit_bg).
    lazy_groups: bool,
    desc_csum: DescChecksum,
    bitmap_seed: Option<u32>,
    first_ino: u32,
    hash_seed: [u8; 16],
    policy: AllocPolicy,
    /// Journal on: frees are held until the transaction commits.
    hold_freed: bool,
    /// Test hook: synthesised bitmaps forget the reserved GDT blocks.
    #[cfg(feature = "test-hooks")]
    pub(crate) bug_skips_reserved_gdt: bool,
    /// Per group with held blocks: what allocation scans (in use or held).
    held: BTreeMap<GroupIndex, Bitmap>,
    held_clusters: u64,
    /// Scans may take held blocks (journaled metadata built during a commit).
    reuse_held: bool,
    /// Ranges freed since the last commit, for the journal's revokes.
    freed: Vec<(u64, u64)>,
    /// How loaded bitmaps keep their checksums.
    bitmap_checksum: BitmapChecksum,
    /// Runs allocated and group pieces freed (mballoc's work per call).
    block_calls: u64,
    /// mballoc's free runs per group, built when the bitmap loads.
    buddies: Vec<Option<mballoc::buddy::GroupBuddy>>,
    pa: mballoc::prealloc::Preallocations,
    /// Where the last stream allocation went (s_mb_last_group).
    stream_last_group: GroupIndex,
    mb_stats: MbStats,
}

/// The allocator's CPU work so far, for the simulator's cost model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocWork {
    /// Bytes of block and inode bitmaps run through crc32c.
    pub bitmap_crc_bytes: u64,
    /// Runs allocated and group pieces freed.
    pub block_calls: u64,
}

/// What the superblock needs after writeback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub free_blocks: u64,
    pub free_inodes: u64,
}

impl Allocator {
    /// Takes over the descriptors of a validated image.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        geo: Geometry,
        descs: Vec<GroupDesc>,
        desc_csum: DescChecksum,
        bitmap_seed: Option<u32>,
        first_ino: u32,
        hash_seed: [u8; 16],
        policy: AllocPolicy,
    ) -> Self {
        let n = descs.len();
        let free_clusters = descs.iter().map(|d| u64::from(d.free_blocks)).sum();
        let free_inodes = descs.iter().map(|d| u64::from(d.free_inodes)).sum();
        let used_dirs = descs.iter().map(|d| u64::from(d.used_dirs)).sum();
        let lazy_groups = desc_csum != DescChecksum::None;
        Allocator {
            geo,
            descs,
            block_bitmaps: vec![None; n],
            inode_bitmaps: vec![None; n],
            block_hint: vec![0; n],
            dirty_descs: BTreeSet::new(),
            dirty_block_bitmaps: BTreeSet::new(),
            dirty_inode_bitmaps: BTreeSet::new(),
            free_clusters,
            free_inodes,
            used_dirs,
            lazy_groups,
            desc_csum,
            bitmap_seed,
            first_ino,
            hash_seed,
            policy,
            hold_freed: false,
            #[cfg(feature = "test-hooks")]
            bug_skips_reserved_gdt: false,
            held: BTreeMap::new(),
            held_clusters: 0,
            reuse_held: false,
            freed: Vec::new(),
            bitmap_checksum: BitmapChecksum::default(),
            block_calls: 0,
            buddies: vec![None; n],
            pa: Default::default(),
            stream_last_group: 0,
            mb_stats: MbStats::default(),
        }
    }

    /// How bitmaps keep their checksums from now on: running (the
    /// engine's) or recomputed whole on each change (the kernel's).
    pub fn set_bitmap_checksum(&mut self, how: BitmapChecksum) {
        self.bitmap_checksum = how;
        for bm in self.block_bitmaps.iter_mut().chain(self.inode_bitmaps.iter_mut()).flatten() {
            bm.set_checksum_mode(how);
        }
    }

    pub fn work(&self) -> AllocWork {
        let bitmap_crc_bytes = self.block_bitmaps.iter().chain(&self.inode_bitmaps).flatten().map(Bitmap::crc_bytes).sum();
        AllocWork { bitmap_crc_bytes, block_calls: self.block_calls }
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn descs(&self) -> &[GroupDesc] {
        &self.descs
    }

    /// Bitmaps and descriptors waiting for [`Allocator::write_back`].
    pub fn dirty_count(&self) -> usize {
        self.dirty_descs.len() + self.dirty_block_bitmaps.len() + self.dirty_inode_bitmaps.len()
    }

    pub fn totals(&self) -> Totals {
        Totals { free_blocks: self.free_clusters << self.geo.cluster_bits, free_inodes: self.free_inodes }
    }

    /// Blocks data allocation leaves free for extent-tree blocks, which are
    /// placed at writeback and must never fail there: ext4's reserved
    /// clusters, 2% of the filesystem capped at 4096 clusters.
    pub fn metadata_reserve(&self) -> u64 {
        ((self.geo.blocks_count >> self.geo.cluster_bits) / 50).min(4096) << self.geo.cluster_bits
    }

    fn has_flag(&self, g: GroupIndex, flag: u16) -> bool {
        self.lazy_groups && self.descs[g as usize].has_flag(flag)
    }

    fn read_block<D: BlockDevice + ?Sized>(&self, dev: &mut D, block: u64) -> Result<Vec<u8>> {
        let bs = u64::from(self.geo.block_size);
        if block == 0 || block >= self.geo.blocks_count {
            return Err(Error::Corrupt(Corrupt::Bitmap { group: 0, what: format!("bitmap block {block} outside the filesystem") }));
        }
        let mut b = vec![0u8; bs as usize];
        dev.read(block * bs, &mut b, IoClass::Metadata)?;
        Ok(b)
    }

    /// The block bitmap of a BLOCK_UNINIT group as the kernel synthesises it:
    /// backup superblock and GDT, metadata of the flex's groups that lies in
    /// this group, padding past the group's end. A cluster holding any of
    /// them is in use.
    fn synthesise_block_bitmap(&self, g: GroupIndex) -> Result<Bitmap> {
        let geo = &self.geo;
        let start = geo.group_first_block(g);
        let len = u64::from(geo.group_len(g));
        let clusters = geo.group_clusters(g) as usize;
        let bits = geo.cluster_bits;
        let mut bm = Bitmap::new_padded(geo.block_size as usize, clusters);
        #[allow(unused_mut)]
        let mut base = geo.base_meta_blocks(g);
        #[cfg(feature = "test-hooks")]
        if self.bug_skips_reserved_gdt && geo.group_has_super(g) {
            base -= u32::from(geo.reserved_gdt_blocks);
        }
        // Blocks lo..hi of the group, as the clusters that hold them.
        let mut mark = |lo: u64, hi: u64| bm.set_range((lo >> bits) as usize, ((hi - 1) >> bits) as usize + 1);
        if base > 0 {
            mark(0, u64::from(base));
        }
        let flex = geo.flex_size();
        let first = g - g % flex;
        let last = first.saturating_add(flex).min(geo.group_count);
        let itb = u64::from(geo.inode_table_blocks);
        for h in first..last {
            let d = &self.descs[h as usize];
            for (at, n) in [(d.block_bitmap, 1), (d.inode_bitmap, 1), (d.inode_table, itb)] {
                let lo = at.max(start);
                let hi = at.saturating_add(n).min(start + len);
                if lo < hi {
                    mark(lo - start, hi - start);
                }
            }
        }
        let free = bm.count_zeros(clusters) as u64;
        let want = u64::from(self.descs[g as usize].free_blocks);
        if free != want {
            return Err(Error::Corrupt(Corrupt::GroupDescriptor {
                group: g,
                what: format!("BLOCK_UNINIT group has {want} free blocks but its synthesised bitmap {free}"),
            }));
        }
        Ok(bm)
    }

    /// Loads group `g`'s block bitmap if needed.
    fn load_block_bitmap<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, g: GroupIndex) -> Result<()> {
        if self.block_bitmaps[g as usize].is_some() {
            return Ok(());
        }
        let bm = if self.has_flag(g, BG_BLOCK_UNINIT) {
            self.synthesise_block_bitmap(g)?
        } else {
            let d = self.descs[g as usize];
            let bm = Bitmap::from_bytes(self.read_block(dev, d.block_bitmap)?);
            if let Some(s) = self.bitmap_seed {
                let computed = bm.checksum(s, self.geo.clusters_per_group());
                if !stored_bitmap_csum_matches(d.block_bitmap_csum, computed, self.geo.desc_size) {
                    return Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::BlockBitmap { group: g }, stored: d.block_bitmap_csum, computed }));
                }
            }
            bm
        };
        let mut bm = bm;
        if let Some(s) = self.bitmap_seed {
            bm.track_checksum(s, self.geo.clusters_per_group(), self.bitmap_checksum);
        }
        self.block_bitmaps[g as usize] = Some(bm);
        // A group just loaded has nothing held or preallocated yet.
        self.buddies[g as usize] = self.build_buddy(g, &Default::default());
        Ok(())
    }

    /// Loads group `g`'s inode bitmap if needed.
    fn load_inode_bitmap<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, g: GroupIndex) -> Result<()> {
        if self.inode_bitmaps[g as usize].is_some() {
            return Ok(());
        }
        let ipg = self.geo.inodes_per_group as usize;
        let bm = if self.has_flag(g, BG_INODE_UNINIT) {
            Bitmap::new_padded(self.geo.block_size as usize, ipg)
        } else {
            let d = self.descs[g as usize];
            let bm = Bitmap::from_bytes(self.read_block(dev, d.inode_bitmap)?);
            if let Some(s) = self.bitmap_seed {
                let computed = bm.checksum(s, self.geo.inodes_per_group);
                if !stored_bitmap_csum_matches(d.inode_bitmap_csum, computed, self.geo.desc_size) {
                    return Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::InodeBitmap { group: g }, stored: d.inode_bitmap_csum, computed }));
                }
            }
            bm
        };
        let mut bm = bm;
        if let Some(s) = self.bitmap_seed {
            bm.track_checksum(s, self.geo.inodes_per_group, self.bitmap_checksum);
        }
        self.inode_bitmaps[g as usize] = Some(bm);
        Ok(())
    }

    fn block_bitmap(&self, g: GroupIndex) -> Result<&Bitmap> {
        self.block_bitmaps[g as usize].as_ref().ok_or_else(|| Error::InvalidArgument(format!("block bitmap {g} not loaded")))
    }

    /// Whether block `b` (its cluster) is in use (loads its bitmap).
    pub fn block_in_use<D: BlockDevice + ?Sized>(&mut self, dev: &mut D, b: u64) -> Result<bool> {
        let g = self.geo.group_of_block(b).ok_or_else(|| Error::InvalidArgument(format!("block {b} outside the groups")))?;
        self.load_block_bitmap(dev, g)?;
        Ok(self.block_bitmap(g)?.get(((b - self.geo.group_first_block(g)) >> self.geo.cluster_bits) as usize))
    }

    /// Stores dirty bitmaps and descriptors into `cache` with fresh checksums.
    pub fn write_back<D: BlockDevice + ?Sized>(&mut self, cache: &mut BufferCache, dev: &mut D) -> Result<Totals> {
        for g in std::mem::take(&mut self.dirty_block_bitmaps) {
            let Some(bm) = &self.block_bitmaps[g as usize] else { continue };
            let d = &mut self.descs[g as usize];
            if let Some(s) = self.bitmap_seed {
                d.block_bitmap_csum = bm.checksum(s, self.geo.clusters_per_group());
            }
            cache.put(d.block_bitmap, bm.as_bytes())?;
            self.dirty_descs.insert(g);
        }
        for g in std::mem::take(&mut self.dirty_inode_bitmaps) {
            let Some(bm) = &self.inode_bitmaps[g as usize] else { continue };
            let d = &mut self.descs[g as usize];
            if let Some(s) = self.bitmap_seed {
                d.inode_bitmap_csum = bm.checksum(s, self.geo.inodes_per_group);
            }
            cache.put(d.inode_bitmap, bm.as_bytes())?;
            self.dirty_descs.insert(g);
        }
        let bs = u64::from(self.geo.block_size);
        let ds = u64::from(self.geo.desc_size);
        let gdt_start = u64::from(self.geo.first_data_block) + 1;
        for g in std::mem::take(&mut self.dirty_descs) {
            let byte = u64::from(g) * ds;
            let block = cache.get_mut(dev, gdt_start + byte / bs)?;
            let at = (byte % bs) as usize;
            let slot = block.get_mut(at..at + ds as usize).ok_or_else(|| Error::InvalidArgument(format!("descriptor {g} past its GDT block")))?;
            self.descs[g as usize].write(slot, g, self.desc_csum);
        }
        Ok(self.totals())
    }

    /// Checks the running totals against the descriptors and loaded bitmaps.
    pub fn check_counts(&self) -> std::result::Result<(), String> {
        let fb: u64 = self.descs.iter().map(|d| u64::from(d.free_blocks)).sum();
        let fi: u64 = self.descs.iter().map(|d| u64::from(d.free_inodes)).sum();
        let ud: u64 = self.descs.iter().map(|d| u64::from(d.used_dirs)).sum();
        if (fb, fi, ud) != (self.free_clusters, self.free_inodes, self.used_dirs) {
            return Err(format!("totals {:?} vs descriptors {:?}", (self.free_clusters, self.free_inodes, self.used_dirs), (fb, fi, ud)));
        }
        for (g, bm) in self.block_bitmaps.iter().enumerate() {
            if let Some(bm) = bm {
                let free = bm.count_zeros(self.geo.group_clusters(g as u32) as usize) as u32;
                if free != self.descs[g].free_blocks {
                    return Err(format!("group {g}: bitmap has {free} free clusters, descriptor {}", self.descs[g].free_blocks));
                }
            }
        }
        for (g, bm) in self.inode_bitmaps.iter().enumerate() {
            if let Some(bm) = bm {
                let free = bm.count_zeros(self.geo.inodes_per_group as usize) as u32;
                if free != self.descs[g].free_inodes {
                    return Err(format!("group {g}: bitmap has {free} free inodes, descriptor {}", self.descs[g].free_inodes));
                }
            }
        }
        self.check_buddies()
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;
    use crate::device_mem::MemDevice;
    use crate::image::Image;
    use crate::mkfs::{mkfs, MkfsOptions};

    /// A fresh filesystem and an allocator over it.
    pub fn fresh(size: u64, block_size: u32, policy: AllocPolicy) -> (MemDevice, Allocator) {
        fresh_clustered(size, block_size, None, policy)
    }

    /// The same with bigalloc clusters of `cluster_size` bytes.
    pub fn fresh_clustered(size: u64, block_size: u32, cluster_size: Option<u32>, policy: AllocPolicy) -> (MemDevice, Allocator) {
        let mut dev = MemDevice::new(size);
        let mut o = MkfsOptions::new(size, [7; 16], [3; 16], crate::fixtures::EPOCH_SECS);
        o.block_size = block_size;
        o.cluster_size = cluster_size;
        mkfs(&mut dev, &o).unwrap();
        let img = Image::open(dev).unwrap();
        let sb = img.superblock().clone();
        let geo = img.geometry().clone();
        let descs = img.group_descs().to_vec();
        let seed = sb.csum_seed();
        let alloc = Allocator::new(geo, descs, DescChecksum::Crc32c { fs_seed: seed }, Some(seed), sb.first_ino(), sb.hash_seed, policy);
        (img.into_device(), alloc)
    }
}
