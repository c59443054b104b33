//! Filesystem geometry: how blocks split into groups, which groups carry
//! superblock/GDT backups, how big the GDT and inode tables are, and (for mkfs)
//! where each group's bitmaps and inode table go.
//!
//! - Group g covers blocks `first_data_block + g * blocks_per_group ..`; the last
//!   group may be shorter.
//! - With sparse_super, only groups 0, 1 and powers of 3, 5 and 7 hold backups.
//! - With flex_bg, the bitmaps and tables of each flex (2^log groups) are packed
//!   into the flex's first group, spilling into following groups when they do
//!   not fit (past any backup they meet). Any placement the descriptors and
//!   bitmaps agree on is valid ext4; this one is mke2fs-like and deterministic.

use crate::error::{Corrupt, Error, Result};
use crate::format::bytes::usize_from_u32;
use crate::format::superblock::{Superblock, MAX_BLOCKS_PER_GROUP, MAX_LOG_CLUSTER_SIZE};
use crate::format::{BlockNumber, GroupIndex, InodeNumber};
use crate::range_set::RangeSet;

/// Block and inode layout of one filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Geometry {
    pub block_size: u32,
    pub blocks_count: u64,
    pub first_data_block: u32,
    pub blocks_per_group: u32,
    pub inodes_per_group: u32,
    pub inode_size: u16,
    pub group_count: u32,
    /// Effective descriptor size (32, or >= 64 with 64bit).
    pub desc_size: u16,
    pub log_groups_per_flex: Option<u8>,
    pub sparse_super: bool,
    pub reserved_gdt_blocks: u16,
    /// Blocks of the group descriptor table (without reserved GDT blocks).
    pub gdt_blocks: u32,
    /// Blocks of one group's inode table.
    pub inode_table_blocks: u32,
    /// log2 of blocks per allocation cluster: 0 without bigalloc. The block
    /// bitmap and the descriptors' free counts are in clusters.
    pub cluster_bits: u32,
}

fn corrupt(what: String) -> Error {
    Error::Corrupt(Corrupt::Superblock(what))
}

/// Whether `n` is a power of `base` (1 counts: base^0).
fn is_power_of(mut n: u32, base: u32) -> bool {
    if n == 0 {
        return false;
    }
    while n % base == 0 {
        n /= base;
    }
    n == 1
}

impl Geometry {
    /// Derives and checks the geometry a validated superblock describes.
    pub fn from_superblock(sb: &Superblock) -> Result<Self> {
        let bs = sb.block_size();
        let data_blocks = sb.blocks_count.checked_sub(u64::from(sb.first_data_block)).ok_or_else(|| {
            corrupt(format!("s_blocks_count {} below s_first_data_block {}", sb.blocks_count, sb.first_data_block))
        })?;
        if sb.blocks_per_group == 0 {
            return Err(corrupt("s_blocks_per_group 0".to_string()));
        }
        let groups = data_blocks.div_ceil(u64::from(sb.blocks_per_group));
        let group_count = u32::try_from(groups).map_err(|_| corrupt(format!("{groups} block groups do not fit in 32 bits")))?;
        let want_inodes = u64::from(group_count) * u64::from(sb.inodes_per_group);
        if u64::from(sb.inodes_count) != want_inodes {
            return Err(corrupt(format!(
                "s_inodes_count {} != {group_count} groups * s_inodes_per_group {}",
                sb.inodes_count, sb.inodes_per_group
            )));
        }
        let desc_size = sb.desc_size();
        let gdt_bytes = groups * u64::from(desc_size);
        let gdt_blocks = u32::try_from(gdt_bytes.div_ceil(u64::from(bs)))
            .map_err(|_| corrupt(format!("GDT of {gdt_bytes} bytes")))?;
        let inode_table_blocks = inode_table_blocks(sb.inodes_per_group, sb.inode_size(), bs).ok_or_else(|| {
            corrupt(format!(
                "inode table of s_inodes_per_group {} * s_inode_size {} bytes",
                sb.inodes_per_group,
                sb.inode_size()
            ))
        })?;
        let g = Geometry {
            block_size: bs,
            blocks_count: sb.blocks_count,
            first_data_block: sb.first_data_block,
            blocks_per_group: sb.blocks_per_group,
            inodes_per_group: sb.inodes_per_group,
            inode_size: sb.inode_size(),
            group_count,
            desc_size,
            log_groups_per_flex: sb.has_flex_bg().then_some(sb.log_groups_per_flex),
            sparse_super: sb.has_sparse_super(),
            reserved_gdt_blocks: sb.reserved_gdt_blocks,
            gdt_blocks,
            inode_table_blocks,
            cluster_bits: sb.cluster_bits(),
        };
        if u32::from(sb.reserved_gdt_blocks) > bs / 4 {
            return Err(corrupt(format!("s_reserved_gdt_blocks {} > {}", sb.reserved_gdt_blocks, bs / 4)));
        }
        let meta_end = u64::from(sb.first_data_block) + u64::from(g.base_meta_blocks(0));
        if meta_end > g.group_first_block(0) + u64::from(g.group_len(0)) {
            return Err(corrupt(format!(
                "superblock and {gdt_blocks} GDT blocks do not fit in group 0 of {} blocks",
                g.group_len(0)
            )));
        }
        Ok(g)
    }

    pub fn group_first_block(&self, g: GroupIndex) -> BlockNumber {
        u64::from(self.first_data_block) + u64::from(g) * u64::from(self.blocks_per_group)
    }

    /// Blocks in group `g` (the last group may be short).
    pub fn group_len(&self, g: GroupIndex) -> u32 {
        let start = self.group_first_block(g);
        // What is left of the filesystem, up to a whole group.
        let rest = self.blocks_count.saturating_sub(start);
        u32::try_from(rest).map_or(self.blocks_per_group, |rest| rest.min(self.blocks_per_group))
    }

    /// Blocks per allocation cluster (1 without bigalloc).
    pub fn cluster_ratio(&self) -> u64 {
        1 << self.cluster_bits
    }

    pub fn clusters_per_group(&self) -> u32 {
        self.blocks_per_group >> self.cluster_bits
    }

    /// Clusters in group `g`: bits of its block bitmap that stand for space.
    pub fn group_clusters(&self, g: GroupIndex) -> u32 {
        self.group_len(g).div_ceil(1 << self.cluster_bits)
    }

    /// The first block of the cluster holding `b` (bigalloc's first data
    /// block is 0, so clusters are aligned on block numbers).
    pub fn cluster_start(&self, b: BlockNumber) -> BlockNumber {
        b & !(self.cluster_ratio() - 1)
    }

    /// Blocks rounded up to whole clusters.
    pub fn round_to_clusters(&self, blocks: u64) -> u64 {
        blocks.div_ceil(self.cluster_ratio()) << self.cluster_bits
    }

    /// The group holding block `b`, if `b` belongs to any group.
    pub fn group_of_block(&self, b: BlockNumber) -> Option<GroupIndex> {
        if b < u64::from(self.first_data_block) || b >= self.blocks_count {
            return None;
        }
        u32::try_from((b - u64::from(self.first_data_block)) / u64::from(self.blocks_per_group)).ok()
    }

    /// Whether group `g` holds a superblock copy and GDT.
    pub fn group_has_super(&self, g: GroupIndex) -> bool {
        if !self.sparse_super || g <= 1 {
            return true;
        }
        is_power_of(g, 3) || is_power_of(g, 5) || is_power_of(g, 7)
    }

    /// Blocks at the start of group `g` taken by its superblock, GDT and reserved GDT.
    pub fn base_meta_blocks(&self, g: GroupIndex) -> u32 {
        if self.group_has_super(g) {
            1 + self.gdt_blocks + u32::from(self.reserved_gdt_blocks)
        } else {
            0
        }
    }

    /// Groups sharing one flex group (1 without flex_bg).
    pub fn flex_size(&self) -> u32 {
        self.log_groups_per_flex.map_or(1, |l| 1u32 << l.min(31))
    }

    pub fn inodes_count(&self) -> u64 {
        u64::from(self.group_count) * u64::from(self.inodes_per_group)
    }

    pub fn inodes_per_block(&self) -> u32 {
        self.block_size / u32::from(self.inode_size)
    }

    /// (group, index within group) of inode `ino`, or `None` if out of range.
    pub fn inode_location(&self, ino: InodeNumber) -> Option<(GroupIndex, u32)> {
        if ino == 0 || u64::from(ino) > self.inodes_count() {
            return None;
        }
        let i = ino - 1;
        Some((i / self.inodes_per_group, i % self.inodes_per_group))
    }

    /// Total blocks of superblocks, GDTs, bitmaps and inode tables.
    pub fn metadata_blocks(&self) -> u64 {
        let per_group = 2 + u64::from(self.inode_table_blocks);
        (0..self.group_count).map(|g| u64::from(self.base_meta_blocks(g))).sum::<u64>()
            + per_group * u64::from(self.group_count)
    }
}

/// Blocks of one group's inode table, if that count fits in 32 bits.
pub fn inode_table_blocks(inodes_per_group: u32, inode_size: u16, block_size: u32) -> Option<u32> {
    u32::try_from((u64::from(inodes_per_group) * u64::from(inode_size)).div_ceil(u64::from(block_size))).ok()
}

/// What mkfs asks of the geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeometryRequest {
    pub size_bytes: u64,
    pub block_size: u32,
    pub inode_size: u16,
    /// Exact inode count wanted (rounded up to fill whole inode-table blocks).
    pub inode_count: Option<u64>,
    /// Bytes of space per inode when `inode_count` is `None`.
    pub inode_ratio: u64,
    pub log_groups_per_flex: Option<u8>,
    pub want_64bit: bool,
    /// log2 of blocks per cluster (bigalloc); 0 for none.
    pub cluster_bits: u32,
}

/// Largest block count an extent can address (48-bit physical block numbers).
pub const MAX_BLOCKS: u64 = 1 << 48;
/// Blocks a last group needs beyond its own metadata to be worth keeping (as mke2fs).
const LAST_GROUP_SLACK: u64 = 50;

fn invalid(what: String) -> Error {
    Error::InvalidMkfs(what)
}

impl Geometry {
    /// Chooses a geometry for a new filesystem. Returns it with whether 64bit is needed/used.
    pub fn for_mkfs(req: &GeometryRequest) -> Result<Self> {
        let bs = req.block_size;
        if !(1024..=65536).contains(&bs) || !bs.is_power_of_two() {
            return Err(invalid(format!("block size {bs} is not a power of two in 1024..=65536")));
        }
        if req.inode_size < 128 || u32::from(req.inode_size) > bs || !req.inode_size.is_power_of_two() {
            return Err(invalid(format!("inode size {} is not a power of two in 128..={bs}", req.inode_size)));
        }
        if let Some(l) = req.log_groups_per_flex {
            if l > 31 {
                return Err(invalid(format!("flex_bg log size {l} > 31")));
            }
        }
        let cluster_bits = req.cluster_bits;
        if cluster_bits > MAX_LOG_CLUSTER_SIZE - bs.trailing_zeros() {
            return Err(invalid(format!(
                "clusters of 2^{cluster_bits} blocks of {bs} bytes exceed 2^{MAX_LOG_CLUSTER_SIZE} bytes"
            )));
        }
        // Whole clusters only: a bitmap bit stands for a whole cluster.
        let mut blocks = (req.size_bytes / u64::from(bs)) >> cluster_bits << cluster_bits;
        if blocks > MAX_BLOCKS {
            return Err(invalid(format!("{blocks} blocks exceed the 2^48 an extent can address")));
        }
        // bigalloc numbers clusters from block 0, with 1 KiB blocks too.
        let first_data_block = u32::from(bs == 1024 && cluster_bits == 0);
        let cpg = (8 * bs).min(MAX_BLOCKS_PER_GROUP);
        let bpg = u32::try_from(u64::from(cpg) << cluster_bits)
            .map_err(|_| invalid(format!("{cpg} clusters of 2^{cluster_bits} blocks per group overflow 32 bits")))?;
        if blocks <= u64::from(first_data_block) + 64 {
            return Err(invalid(format!("{} bytes hold only {blocks} blocks of {bs}", req.size_bytes)));
        }
        let is64 = req.want_64bit || blocks > u64::from(u32::MAX);
        let desc_size: u16 = if is64 { 64 } else { 32 };
        let ipb = bs / u32::from(req.inode_size);
        let unit = ipb.max(8);
        let ipg_max = ((8 * bs).min(65536 - ipb) / unit) * unit;

        // Two passes: trimming a useless last group changes the group count,
        // which changes the inodes per group and the GDT size.
        let mut groups;
        let mut ipg;
        let mut pass = 0;
        loop {
            groups = (blocks - u64::from(first_data_block)).div_ceil(u64::from(bpg));
            let inodes_wanted = match req.inode_count {
                Some(n) => n,
                None => (blocks * u64::from(bs)) / req.inode_ratio.max(1024),
            };
            let per_group = inodes_wanted.div_ceil(groups).max(16);
            let rounded = per_group.div_ceil(u64::from(unit)) * u64::from(unit);
            ipg = if rounded > u64::from(ipg_max) {
                if req.inode_count.is_some() {
                    return Err(invalid(format!(
                        "{inodes_wanted} inodes need {rounded} per group, more than the {ipg_max} a group can hold"
                    )));
                }
                ipg_max
            } else {
                u32::try_from(rounded).map_err(|_| invalid(format!("{rounded} inodes per group")))?
            };
            if groups * u64::from(ipg) > u64::from(u32::MAX) {
                return Err(invalid(format!("{groups} groups of {ipg} inodes overflow the 32-bit inode count")));
            }
            let gdt_blocks = (groups * u64::from(desc_size)).div_ceil(u64::from(bs));
            let too_big = |what: &str, n: u64| invalid(format!("{n} {what} do not fit in 32 bits"));
            let group_count = u32::try_from(groups).map_err(|_| too_big("groups", groups))?;
            let gdt_blocks_u32 = u32::try_from(gdt_blocks).map_err(|_| too_big("GDT blocks", gdt_blocks))?;
            let itb_u32 = inode_table_blocks(ipg, req.inode_size, bs)
                .ok_or_else(|| invalid(format!("inode table of {ipg} inodes of {} bytes", req.inode_size)))?;
            let itb = u64::from(itb_u32);
            let last = groups - 1;
            let last_len = blocks - u64::from(first_data_block) - last * u64::from(bpg);
            let sparse_geo = Geometry {
                block_size: bs,
                blocks_count: blocks,
                first_data_block,
                blocks_per_group: bpg,
                inodes_per_group: ipg,
                inode_size: req.inode_size,
                group_count,
                desc_size,
                log_groups_per_flex: req.log_groups_per_flex,
                sparse_super: true,
                reserved_gdt_blocks: 0,
                gdt_blocks: gdt_blocks_u32,
                inode_table_blocks: itb_u32,
                cluster_bits,
            };
            // group_count >= 1: more than 64 blocks follow the first data block.
            let last_overhead = u64::from(sparse_geo.base_meta_blocks(group_count - 1)) + 2 + itb;
            if groups > 1 && last_len < (last_overhead + LAST_GROUP_SLACK).max(1 << cluster_bits) && pass == 0 {
                blocks = u64::from(first_data_block) + last * u64::from(bpg);
                pass += 1;
                continue;
            }
            if u64::from(sparse_geo.base_meta_blocks(0)) + 2 + itb >= u64::from(sparse_geo.group_len(0)) {
                return Err(invalid(format!(
                    "group 0 of {} blocks cannot hold its superblock, {gdt_blocks} GDT blocks, bitmaps and {itb} inode-table blocks",
                    sparse_geo.group_len(0)
                )));
            }
            return Ok(sparse_geo);
        }
    }
}

/// Where mkfs put every group's bitmaps and inode table, and every block they use.
#[derive(Debug, Clone)]
pub struct Placement {
    pub block_bitmap: Vec<BlockNumber>,
    pub inode_bitmap: Vec<BlockNumber>,
    pub inode_table: Vec<BlockNumber>,
    /// Superblocks, GDTs, bitmaps and inode tables.
    pub used: RangeSet,
}

impl Placement {
    /// Lays out the metadata of `geo`: backups first (they sit at fixed places),
    /// then per flex (or per group without flex_bg) the block bitmaps, inode
    /// bitmaps and inode tables, each first-fit from the flex's first block.
    pub fn compute(geo: &Geometry) -> Result<Self> {
        let n = usize_from_u32(geo.group_count);
        let mut used = RangeSet::new();
        if geo.first_data_block > 0 {
            // Block 0 of a 1 KiB filesystem is the boot block: outside every group.
            used.insert(0..u64::from(geo.first_data_block));
        }
        for g in 0..geo.group_count {
            let start = geo.group_first_block(g);
            used.insert(start..start + u64::from(geo.base_meta_blocks(g)));
        }
        let mut block_bitmap = vec![0u64; n];
        let mut inode_bitmap = vec![0u64; n];
        let mut inode_table = vec![0u64; n];
        let flex = geo.flex_size();
        let itb = u64::from(geo.inode_table_blocks);
        let mut first = 0u32;
        while first < geo.group_count {
            let last = first.saturating_add(flex).min(geo.group_count);
            let goal = geo.group_first_block(first);
            // Without flex_bg a group's metadata must stay inside the group.
            let limit = if geo.log_groups_per_flex.is_some() {
                geo.blocks_count
            } else {
                goal + u64::from(geo.group_len(first))
            };
            let mut take = |len: u64, what: &str, g: u32| -> Result<u64> {
                let at = used.first_fit(goal, len, limit).ok_or_else(|| {
                    invalid(format!("no room for the {len}-block {what} of group {g}"))
                })?;
                used.insert(at..at + len);
                Ok(at)
            };
            let count = u64::from(last - first);
            let bb = take(count, "block bitmaps", first)?;
            let ib = take(count, "inode bitmaps", first)?;
            for g in first..last {
                let gi = usize_from_u32(g);
                block_bitmap[gi] = bb + u64::from(g - first);
                inode_bitmap[gi] = ib + u64::from(g - first);
                inode_table[gi] = take(itb, "inode table", g)?;
            }
            first = last;
        }
        Ok(Placement { block_bitmap, inode_bitmap, inode_table, used })
    }

    /// Clusters (blocks without bigalloc) inside group `g` that a reader
    /// synthesising a BLOCK_UNINIT bitmap would mark: the group's own backup
    /// region plus its own bitmaps and inode table where they lie inside it.
    pub fn uninit_view_used(&self, geo: &Geometry, g: GroupIndex) -> u64 {
        let start = geo.group_first_block(g);
        let end = start + u64::from(geo.group_len(g));
        let gi = usize_from_u32(g);
        let mut view = RangeSet::new();
        let pieces = [
            (start, u64::from(geo.base_meta_blocks(g))),
            (self.block_bitmap[gi], 1),
            (self.inode_bitmap[gi], 1),
            (self.inode_table[gi], u64::from(geo.inode_table_blocks)),
        ];
        for (b, len) in pieces {
            let (s, e) = (b.max(start), (b + len).min(end));
            if s < e {
                view.add(geo.cluster_start(s)..geo.round_to_clusters(e));
            }
        }
        view.len() >> geo.cluster_bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(size_bytes: u64, block_size: u32) -> GeometryRequest {
        GeometryRequest {
            size_bytes,
            block_size,
            inode_size: 256,
            inode_count: None,
            inode_ratio: 16384,
            log_groups_per_flex: Some(4),
            want_64bit: false,
            cluster_bits: 0,
        }
    }

    #[test]
    fn backup_groups_are_0_1_and_powers_of_3_5_7() {
        let g = Geometry::for_mkfs(&req(1 << 40, 4096)).unwrap();
        let backups: Vec<u32> = (0..400).filter(|&i| g.group_has_super(i)).collect();
        assert_eq!(backups, vec![0, 1, 3, 5, 7, 9, 25, 27, 49, 81, 125, 243, 343]);
    }

    #[test]
    fn group_sizes_follow_the_block_size() {
        let g1 = Geometry::for_mkfs(&req(256 << 20, 1024)).unwrap();
        assert_eq!((g1.first_data_block, g1.blocks_per_group, g1.group_count), (1, 8192, 32));
        assert_eq!(g1.group_len(31), 8191, "block 0 is outside the groups");
        let g4 = Geometry::for_mkfs(&req(256 << 20, 4096)).unwrap();
        assert_eq!((g4.first_data_block, g4.blocks_per_group, g4.group_count), (0, 32768, 2));
        let g64 = Geometry::for_mkfs(&req(16 << 30, 65536)).unwrap();
        assert_eq!(g64.blocks_per_group, 65528);
        // 262144 blocks leave a 32-block fifth group: too small for its own table, so dropped.
        assert_eq!(g64.group_count, 4);
        assert_eq!(g64.blocks_count, 4 * 65528);
    }

    #[test]
    fn sixteen_tib_needs_64bit_and_a_big_gdt() {
        let g = Geometry::for_mkfs(&req(16 << 40, 4096)).unwrap();
        assert_eq!(g.blocks_count, 1 << 32);
        assert_eq!(g.desc_size, 64);
        assert_eq!(g.group_count, 131072);
        assert_eq!(g.gdt_blocks, 2048);
        let g32 = Geometry::for_mkfs(&req((16 << 40) - 4096, 4096)).unwrap();
        assert_eq!(g32.desc_size, 32, "2^32 - 1 blocks still fit 32 bits");
    }

    #[test]
    fn tiny_last_group_is_dropped() {
        // 1 KiB blocks: 3 groups + 20 blocks; the 20-block tail cannot hold a group.
        let g = Geometry::for_mkfs(&req((1 + 3 * 8192 + 20) * 1024, 1024)).unwrap();
        assert_eq!(g.group_count, 3);
        assert_eq!(g.blocks_count, 1 + 3 * 8192);
    }

    #[test]
    fn impossible_requests_are_named() {
        let bad = |r: GeometryRequest| match Geometry::for_mkfs(&r) {
            Err(Error::InvalidMkfs(why)) => why,
            other => panic!("expected InvalidMkfs, got {other:?}"),
        };
        assert!(bad(req(8 << 20, 3000)).starts_with("block size 3000"));
        assert!(bad(req(8 << 20, 131072)).starts_with("block size 131072"));
        assert!(bad(req(4096, 1024)).contains("hold only 4 blocks"));
        assert!(bad(GeometryRequest { inode_count: Some(1 << 40), ..req(8 << 20, 4096) }).contains("per group"));
        assert!(bad(req(1 << 62, 4096)).contains("2^48"));
    }

    #[test]
    fn flex_placement_packs_and_spills_past_backups() {
        let g = Geometry::for_mkfs(&GeometryRequest { inode_ratio: 2048, ..req(256 << 20, 1024) }).unwrap();
        let p = Placement::compute(&g).unwrap();
        // Group 0: boot block, superblock, GDT, then 16 block bitmaps, 16 inode bitmaps.
        let first = 1 + 1 + u64::from(g.gdt_blocks);
        assert_eq!(p.block_bitmap[0], first);
        assert_eq!(p.block_bitmap[15], first + 15);
        assert_eq!(p.inode_bitmap[0], first + 16);
        assert_eq!(p.inode_table[0], first + 32);
        // 16 tables of 1024 blocks do not fit in group 0: they must skip group 1's backup.
        for gi in 0..16usize {
            let t = p.inode_table[gi];
            let backup1 = g.group_first_block(1)..g.group_first_block(1) + u64::from(g.base_meta_blocks(1));
            assert!(t + u64::from(g.inode_table_blocks) <= backup1.start || t >= backup1.end, "group {gi}");
        }
        assert_eq!(p.used.len(), g.metadata_blocks() + 1, "everything placed once, plus the boot block");
    }

    #[test]
    fn without_flex_bg_metadata_stays_in_its_group() {
        let g = Geometry::for_mkfs(&GeometryRequest { log_groups_per_flex: None, ..req(64 << 20, 1024) }).unwrap();
        let p = Placement::compute(&g).unwrap();
        for gi in 0..g.group_count {
            assert_eq!(g.group_of_block(p.block_bitmap[usize_from_u32(gi)]), Some(gi));
            assert_eq!(g.group_of_block(p.inode_table[usize_from_u32(gi)]), Some(gi));
            assert_eq!(p.uninit_view_used(&g, gi), p.used.count_in(g.group_first_block(gi)..g.group_first_block(gi) + u64::from(g.group_len(gi))));
        }
    }
}
