//! mkfs: writes a fresh ext4 filesystem onto a [`BlockDevice`].
//!
//! Contract:
//! - **Deterministic.** UUID, hash seed and timestamp are inputs; there is no
//!   clock and no randomness. Same options => byte-identical image.
//! - **Lazy, like `mke2fs -E lazy_itable_init=1,lazy_journal_init=1`.** Only
//!   metadata that must be read is written: superblocks, GDTs, initialised
//!   bitmaps, the inode-table blocks holding inodes 1..=11, the root and
//!   lost+found directory blocks, the journal superblock and extent blocks.
//!   Unused groups get INODE_UNINIT (and BLOCK_UNINIT where a reader can
//!   synthesise the bitmap), and ITABLE_ZEROED only when `zero_inode_tables`
//!   actually zeroed them. A 16 TiB filesystem is a few hundred MiB of writes.
//! - **Assumes a fresh device** unless the zeroing options are set: unwritten
//!   inode tables and journal blocks are whatever the device holds.
//! - Features: has_journal (unless too small), ext_attr, dir_index, filetype,
//!   extent, flex_bg, sparse_super, large_file, huge_file, dir_nlink,
//!   extra_isize, metadata_csum (or uninit_bg without it), 64bit when asked or
//!   needed. No resize_inode: reserved GDT 0 and inode 7 all zero.

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::bitmap::Bitmap;
use crate::format::checksum::{fs_seed_from_uuid, inode_seed};
use crate::format::dirent::{build_block, DirEntry, FT_DIR};
use crate::format::extent::{self, ExtentNode};
use crate::format::geometry::{Geometry, GeometryRequest, Placement};
use crate::format::group_desc::{DescChecksum, GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::format::inode::{self, Inode, Timestamp, FL_EXTENTS, S_IFDIR};
use crate::format::journal_superblock::{JournalSuperblock, MIN_JOURNAL_BLOCKS};
use crate::format::superblock::{self as sbf, feature, Superblock, MAX_LOG_CLUSTER_SIZE, SUPERBLOCK_OFFSET};
use crate::format::BlockNumber;

mod journal;
mod writer;

pub use journal::default_journal_blocks;
use journal::{layout_journal, JournalLayout};
use writer::BlockWriter;

/// How big a journal to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JournalSize {
    /// mke2fs's table: none below 2048 blocks, 1024 blocks below 32768, ... up to 262144.
    Default,
    /// No journal (no has_journal feature).
    None,
    /// Exactly this many blocks (at least 1024).
    Blocks(u32),
}

/// Everything mkfs needs to know. Construct with [`MkfsOptions::new`] and
/// adjust fields; each field says its default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsOptions {
    /// Filesystem size in bytes (rounded down to whole blocks). Must fit the device.
    pub size_bytes: u64,
    /// Block size, a power of two in 1024..=65536. Default: 4096.
    pub block_size: u32,
    /// Exact inode count (rounded up to whole inode-table blocks). Default: from the ratio.
    pub inode_count: Option<u64>,
    /// Bytes per inode. Default (`None`): mke2fs's by size: 4096 below 512 MiB,
    /// 16384 below 4 TiB, 32768 below 16 TiB, 65536 above.
    pub inode_ratio: Option<u64>,
    /// log2 of groups per flex group; `None` disables flex_bg. Default: `Some(4)`.
    pub flex_bg_log: Option<u8>,
    /// metadata_csum (crc32c everywhere); without it uninit_bg (crc16 descriptors). Default: on.
    pub metadata_csum: bool,
    /// 64bit descriptors even when not needed. Default: off; forced on above 2^32 - 1 blocks.
    pub sixty_four_bit: bool,
    /// Journal size. Default: [`JournalSize::Default`]. The journal is one
    /// contiguous run whenever the layout has room for one; otherwise (1 KiB
    /// blocks with a big journal) it takes the free gaps in order.
    pub journal: JournalSize,
    /// Percent of blocks reserved for root. Default: 5.
    pub reserved_percent: u8,
    /// Filesystem UUID; must not be all zero.
    pub uuid: [u8; 16],
    /// Directory hash seed (`s_hash_seed`).
    pub hash_seed: [u8; 16],
    /// Creation time in seconds since the epoch, used for every timestamp written.
    pub timestamp_secs: i64,
    /// Zero every inode table and set ITABLE_ZEROED. Default: off (lazy).
    pub zero_inode_tables: bool,
    /// Zero every journal block. Default: off (lazy).
    pub zero_journal: bool,
    /// bigalloc with clusters of this many bytes (mke2fs `-O bigalloc -C`):
    /// a power of two above the block size, at most 2^29. Default: none.
    pub cluster_size: Option<u32>,
}

/// Largest timestamp ext4's 34-bit inode seconds can carry.
pub const MAX_TIMESTAMP_SECS: i64 = i32::MAX as i64 + 3 * (1 << 32);

impl MkfsOptions {
    pub fn new(size_bytes: u64, uuid: [u8; 16], hash_seed: [u8; 16], timestamp_secs: i64) -> Self {
        MkfsOptions {
            size_bytes,
            block_size: 4096,
            inode_count: None,
            inode_ratio: None,
            flex_bg_log: Some(4),
            metadata_csum: true,
            sixty_four_bit: false,
            journal: JournalSize::Default,
            reserved_percent: 5,
            uuid,
            hash_seed,
            timestamp_secs,
            zero_inode_tables: false,
            zero_journal: false,
            cluster_size: None,
        }
    }

    /// The image a mount configuration needs: its block size, and a journal
    /// unless it mounts without one. The one place that recipe is written.
    pub fn for_mount(mount: &ext4_model::MountConfig, size_bytes: u64, uuid: [u8; 16], hash_seed: [u8; 16], timestamp_secs: i64) -> Self {
        let mut opts = MkfsOptions::new(size_bytes, uuid, hash_seed, timestamp_secs);
        opts.block_size = mount.block_size;
        opts.cluster_size = mount.cluster_size;
        if !mount.has_journal {
            opts.journal = JournalSize::None;
        }
        opts
    }

    fn default_inode_ratio(&self) -> u64 {
        const MIB: u64 = 1 << 20;
        const TIB: u64 = 1 << 40;
        match self.size_bytes {
            s if s < 512 * MIB => 4096,
            s if s < 4 * TIB => 16384,
            s if s < 16 * TIB => 32768,
            _ => 65536,
        }
    }
}

/// What mkfs built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsSummary {
    pub geometry: Geometry,
    pub journal_blocks: u32,
    pub free_blocks: u64,
    pub free_inodes: u32,
    /// Groups whose block bitmap was left uninitialised.
    pub block_uninit_groups: u32,
    /// Bytes handed to the device.
    pub bytes_written: u64,
}

pub(super) fn invalid(what: String) -> Error {
    Error::InvalidMkfs(what)
}

/// Takes `len` blocks, rounded up to whole clusters (`used` holds whole
/// clusters, so the run starts on one).
pub(super) fn alloc(used: &mut crate::range_set::RangeSet, geo: &Geometry, len: u64, what: &str) -> Result<BlockNumber> {
    let len = geo.round_to_clusters(len);
    let at = used
        .first_fit(u64::from(geo.first_data_block), len, geo.blocks_count)
        .ok_or_else(|| invalid(format!("no contiguous run of {len} free blocks for {what}")))?;
    used.insert(at..at + len);
    Ok(at)
}

fn dir_inode(geo: &Geometry, mode: u16, links: u16, start: BlockNumber, blocks: u32, time: Timestamp) -> Result<Inode> {
    let mut ino = Inode::new(geo.inode_size, S_IFDIR | mode, time);
    ino.links_count = links;
    ino.size = u64::from(blocks) * u64::from(geo.block_size);
    ino.blocks = geo.round_to_clusters(u64::from(blocks)) * u64::from(geo.block_size / 512);
    ino.flags = FL_EXTENTS;
    let leaf = ExtentNode::Leaf(extent::extents_for_run(0, start, u64::from(blocks)));
    extent::write_node(&mut ino.block, &leaf, 0)?;
    Ok(ino)
}

fn check_options<D: BlockDevice>(dev: &D, opts: &MkfsOptions) -> Result<()> {
    if opts.uuid == [0; 16] {
        return Err(invalid("uuid is all zero (e2fsck would replace it)".to_string()));
    }
    if !(0..=MAX_TIMESTAMP_SECS).contains(&opts.timestamp_secs) {
        return Err(invalid(format!("timestamp {} outside 0..={MAX_TIMESTAMP_SECS}", opts.timestamp_secs)));
    }
    if opts.size_bytes > dev.size_bytes() {
        return Err(invalid(format!("size {} exceeds the {}-byte device", opts.size_bytes, dev.size_bytes())));
    }
    if opts.reserved_percent > 50 {
        return Err(invalid(format!("reserved_percent {} > 50", opts.reserved_percent)));
    }
    if let Some(c) = opts.cluster_size {
        if opts.block_size == 1024 {
            return Err(invalid("bigalloc with 1 KiB blocks is not modelled (superblock in block 1 of group 0)".to_string()));
        }
        if !c.is_power_of_two() || c <= opts.block_size || c.trailing_zeros() > MAX_LOG_CLUSTER_SIZE {
            return Err(invalid(format!(
                "cluster size {c} is not a power of two above the {}-byte block and at most 2^{MAX_LOG_CLUSTER_SIZE}",
                opts.block_size
            )));
        }
    }
    if let JournalSize::Blocks(n) = opts.journal {
        if n < MIN_JOURNAL_BLOCKS {
            return Err(invalid(format!("journal of {n} blocks < the {MIN_JOURNAL_BLOCKS} jbd2 needs")));
        }
    }
    Ok(())
}

/// The superblock of a fresh filesystem (block_group_nr 0; copies change it).
fn build_superblock(
    geo: &Geometry,
    opts: &MkfsOptions,
    free_blocks: u64,
    journal: Option<&JournalLayout>,
    metadata_blocks: u64,
) -> Superblock {
    let mut sb = Superblock::zeroed();
    sb.inodes_count = geo.inodes_count() as u32;
    sb.blocks_count = geo.blocks_count;
    sb.r_blocks_count = geo.cluster_start(
        geo.blocks_count / 100 * u64::from(opts.reserved_percent) + geo.blocks_count % 100 * u64::from(opts.reserved_percent) / 100,
    );
    sb.free_blocks_count = free_blocks;
    sb.free_inodes_count = sb.inodes_count - inode::LOST_AND_FOUND_INO;
    sb.first_data_block = geo.first_data_block;
    sb.log_block_size = geo.block_size.trailing_zeros() - 10;
    sb.log_cluster_size = sb.log_block_size + geo.cluster_bits;
    sb.blocks_per_group = geo.blocks_per_group;
    sb.clusters_per_group = geo.clusters_per_group();
    sb.inodes_per_group = geo.inodes_per_group;
    sb.wtime = opts.timestamp_secs as u64;
    sb.lastcheck = opts.timestamp_secs as u64;
    sb.mkfs_time = opts.timestamp_secs as u64;
    sb.max_mnt_count = u16::MAX; // -1: no mount-count checks
    sb.state = sbf::STATE_CLEAN;
    sb.errors = sbf::ERRORS_CONTINUE;
    sb.rev_level = sbf::REV_DYNAMIC;
    sb.first_ino = inode::LOST_AND_FOUND_INO;
    sb.inode_size = geo.inode_size;
    sb.feature_compat = feature::COMPAT_EXT_ATTR | feature::COMPAT_DIR_INDEX;
    sb.feature_incompat = feature::INCOMPAT_FILETYPE | feature::INCOMPAT_EXTENTS;
    sb.feature_ro_compat = feature::RO_COMPAT_SPARSE_SUPER
        | feature::RO_COMPAT_LARGE_FILE
        | feature::RO_COMPAT_HUGE_FILE
        | feature::RO_COMPAT_DIR_NLINK
        | feature::RO_COMPAT_EXTRA_ISIZE;
    if geo.cluster_bits > 0 {
        sb.feature_ro_compat |= feature::RO_COMPAT_BIGALLOC;
    }
    sb.feature_ro_compat |= if opts.metadata_csum { feature::RO_COMPAT_METADATA_CSUM } else { feature::RO_COMPAT_GDT_CSUM };
    if let Some(l) = geo.log_groups_per_flex {
        sb.feature_incompat |= feature::INCOMPAT_FLEX_BG;
        sb.log_groups_per_flex = l;
    }
    if geo.desc_size >= 64 {
        sb.feature_incompat |= feature::INCOMPAT_64BIT;
        sb.desc_size_raw = geo.desc_size;
    }
    if let Some(j) = journal {
        sb.feature_compat |= feature::COMPAT_HAS_JOURNAL;
        sb.journal_inum = inode::JOURNAL_INO;
        sb.jnl_backup_type = sbf::JNL_BACKUP_BLOCKS;
        sb.jnl_blocks = jnl_blocks_copy(&j.inode);
        sb.overhead_clusters = ((metadata_blocks + geo.round_to_clusters(u64::from(j.blocks))) >> geo.cluster_bits) as u32;
    } else {
        sb.overhead_clusters = (metadata_blocks >> geo.cluster_bits) as u32;
    }
    sb.uuid = opts.uuid;
    sb.hash_seed = opts.hash_seed;
    sb.def_hash_version = sbf::HASH_HALF_MD4;
    sb.default_mount_opts = sbf::DEFM_XATTR_USER_ACL;
    sb.min_extra_isize = inode::EXTRA_ISIZE;
    sb.want_extra_isize = inode::EXTRA_ISIZE;
    sb.flags = sbf::FLAGS_SIGNED_HASH;
    if opts.metadata_csum {
        sb.checksum_type = sbf::CHECKSUM_TYPE_CRC32C;
    }

    sb
}

/// `s_jnl_blocks`: the journal inode's `i_block` words, then `i_size_high`, `i_size`,
/// so e2fsck can rebuild a damaged journal inode.
fn jnl_blocks_copy(inode: &Inode) -> [u32; sbf::JNL_BLOCKS_WORDS] {
    let mut w = [0u32; sbf::JNL_BLOCKS_WORDS];
    for (i, word) in w.iter_mut().take(15).enumerate() {
        let b = &inode.block[4 * i..4 * i + 4];
        *word = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    w[15] = (inode.size >> 32) as u32;
    w[16] = (inode.size & 0xFFFF_FFFF) as u32;
    w
}

/// Builds a filesystem on `dev` as `opts` describe.
pub fn mkfs<D: BlockDevice>(dev: &mut D, opts: &MkfsOptions) -> Result<MkfsSummary> {
    check_options(dev, opts)?;
    let geo = Geometry::for_mkfs(&GeometryRequest {
        size_bytes: opts.size_bytes,
        block_size: opts.block_size,
        inode_size: 256,
        inode_count: opts.inode_count,
        inode_ratio: opts.inode_ratio.unwrap_or_else(|| opts.default_inode_ratio()),
        log_groups_per_flex: opts.flex_bg_log,
        want_64bit: opts.sixty_four_bit,
        cluster_bits: opts.cluster_size.map_or(0, |c| c.trailing_zeros() - opts.block_size.trailing_zeros()),
    })?;
    let placement = Placement::compute(&geo)?;
    // `used` grows with directories and the journal; `placement.used` stays
    // metadata only. A cluster holding any metadata is used whole.
    let mut used = crate::range_set::RangeSet::new();
    for r in placement.used.iter_in(0..geo.blocks_count) {
        used.add(geo.cluster_start(r.start)..geo.round_to_clusters(r.end));
    }
    let metadata_blocks = used.len();
    let cluster_bits = geo.cluster_bits;
    let time = Timestamp::from_secs(opts.timestamp_secs);
    let bs = geo.block_size as usize;
    let fs_seed = fs_seed_from_uuid(&opts.uuid);
    let csum = opts.metadata_csum.then_some(fs_seed);

    // Directories first so they sit right after group 0's metadata.
    let root_block = alloc(&mut used, &geo, 1, "the root directory")?;
    let lpf_blocks = (16384 / geo.block_size).max(2);
    let lpf_start = alloc(&mut used, &geo, u64::from(lpf_blocks), "lost+found")?;
    let journal_blocks = match opts.journal {
        JournalSize::None => None,
        JournalSize::Default => default_journal_blocks(geo.blocks_count),
        JournalSize::Blocks(n) => Some(n),
    };
    let journal = journal_blocks.map(|n| layout_journal(&mut used, &geo, n, time)).transpose()?;

    let root = dir_inode(&geo, 0o755, 3, root_block, 1, time)?;
    let lpf = dir_inode(&geo, 0o700, 2, lpf_start, lpf_blocks, time)?;

    // Per-group accounting and block bitmaps.
    let last_group = geo.group_count - 1;
    let mut descs = Vec::with_capacity(geo.group_count as usize);
    let mut writer = BlockWriter::new(dev, geo.block_size);
    let mut free_blocks_total = 0u64;
    let mut block_uninit_groups = 0u32;
    let first_ino = inode::LOST_AND_FOUND_INO;
    for g in 0..geo.group_count {
        let gi = g as usize;
        let start = geo.group_first_block(g);
        let len = geo.group_len(g);
        let clusters = geo.group_clusters(g);
        let in_use = used.count_in(start..start + u64::from(len)) >> cluster_bits;
        let free = u64::from(clusters) - in_use;
        free_blocks_total += free << cluster_bits;
        let mut d = GroupDesc {
            block_bitmap: placement.block_bitmap[gi],
            inode_bitmap: placement.inode_bitmap[gi],
            inode_table: placement.inode_table[gi],
            free_blocks: free as u32,
            ..GroupDesc::default()
        };
        if g != last_group && in_use == placement.uninit_view_used(&geo, g) {
            d.flags |= BG_BLOCK_UNINIT;
            block_uninit_groups += 1;
        } else {
            let mut bm = Bitmap::new_padded(bs, clusters as usize);
            for r in used.iter_in(start..start + u64::from(len)) {
                bm.set_range(((r.start - start) >> cluster_bits) as usize, ((r.end - start) >> cluster_bits) as usize);
            }
            debug_assert_eq!(bm.count_zeros(clusters as usize) as u64, free);
            if let Some(seed) = csum {
                d.block_bitmap_csum = bm.checksum(seed, geo.clusters_per_group());
            }
            writer.put(d.block_bitmap, bm.as_bytes())?;
        }
        if g == 0 {
            let mut ib = Bitmap::new_padded(bs, geo.inodes_per_group as usize);
            ib.set_range(0, first_ino as usize);
            if let Some(seed) = csum {
                d.inode_bitmap_csum = ib.checksum(seed, geo.inodes_per_group);
            }
            writer.put(d.inode_bitmap, ib.as_bytes())?;
            d.free_inodes = geo.inodes_per_group - first_ino;
            d.itable_unused = geo.inodes_per_group - first_ino;
            d.used_dirs = 2;
        } else {
            d.flags |= BG_INODE_UNINIT;
            d.free_inodes = geo.inodes_per_group;
            d.itable_unused = geo.inodes_per_group;
        }
        if opts.zero_inode_tables {
            d.flags |= BG_INODE_ZEROED;
        }
        descs.push(d);
    }

    if opts.zero_inode_tables {
        for d in &descs {
            writer.zero(d.inode_table, u64::from(geo.inode_table_blocks))?;
        }
    }

    // Inode-table blocks holding inodes 1..=11; every reserved inode but 2 and 8 stays zero.
    let isz = usize::from(geo.inode_size);
    let itable_bytes = (first_ino as usize * isz).div_ceil(bs) * bs;
    let mut itable = vec![0u8; itable_bytes];
    let mut place_inode = |ino: u32, inode: &Inode| {
        let at = (ino as usize - 1) * isz;
        itable[at..at + isz].copy_from_slice(&inode.to_bytes(geo.inode_size, ino, csum));
    };
    place_inode(inode::ROOT_INO, &root);
    place_inode(inode::LOST_AND_FOUND_INO, &lpf);
    if let Some(j) = &journal {
        place_inode(inode::JOURNAL_INO, &j.inode);
    }
    writer.put(descs[0].inode_table, &itable)?;

    // Directory blocks.
    let dirent = |ino: u32, name: &str| DirEntry { inode: ino, file_type: FT_DIR, name: name.as_bytes().to_vec() };
    let seed_of = |ino: u32| csum.map(|s| inode_seed(s, ino, 0));
    let root_dir = build_block(bs, &[dirent(2, "."), dirent(2, ".."), dirent(11, "lost+found")], seed_of(2));
    let lpf_first = build_block(bs, &[dirent(11, "."), dirent(2, "..")], seed_of(11));
    let lpf_spare = build_block(bs, &[], seed_of(11));
    let (Some(root_dir), Some(lpf_first), Some(lpf_spare)) = (root_dir, lpf_first, lpf_spare) else {
        return Err(invalid(format!("directory entries do not fit a {bs}-byte block")));
    };
    writer.put(root_block, &root_dir)?;
    writer.put(lpf_start, &lpf_first)?;
    for i in 1..u64::from(lpf_blocks) {
        writer.put(lpf_start + i, &lpf_spare)?;
    }

    // Journal: extent leaves, superblock, optional zeroing.
    if let Some(j) = &journal {
        let seed = inode_seed(fs_seed, inode::JOURNAL_INO, 0);
        for (blk, exts) in &j.leaves {
            let mut b = vec![0u8; bs];
            extent::write_node(&mut b, &ExtentNode::Leaf(exts.clone()), 0)?;
            if csum.is_some() {
                extent::set_block_checksum(&mut b, seed);
            }
            writer.put(*blk, &b)?;
        }
        let mut first = vec![0u8; bs];
        first[..1024].copy_from_slice(&JournalSuperblock::new_internal(geo.block_size, j.blocks, opts.uuid).to_bytes());
        writer.put(j.start, &first)?;
        if opts.zero_journal {
            for r in &j.runs {
                let skip = u64::from(r.0 == j.start);
                writer.zero(r.0 + skip, r.1 - skip)?;
            }
        }
    }

    let mut sb = build_superblock(&geo, opts, free_blocks_total, journal.as_ref(), metadata_blocks);

    // Group descriptor table, then every superblock copy with its GDT.
    let desc_csum = if opts.metadata_csum { DescChecksum::Crc32c { fs_seed } } else { DescChecksum::Crc16 { uuid: opts.uuid } };
    let ds = usize::from(geo.desc_size);
    let mut gdt = vec![0u8; geo.gdt_blocks as usize * bs];
    for (g, d) in descs.iter().enumerate() {
        d.write(&mut gdt[g * ds..(g + 1) * ds], g as u32, desc_csum);
    }
    for g in 0..geo.group_count {
        if !geo.group_has_super(g) {
            continue;
        }
        sb.block_group_nr = (g & 0xFFFF) as u16;
        let sb_bytes = sb.to_bytes();
        let gstart = geo.group_first_block(g);
        if g == 0 {
            // Block 0 (the boot sectors, and with 1 KiB blocks the whole block) is zeroed.
            let head_len = (SUPERBLOCK_OFFSET as usize + sbf::SUPERBLOCK_SIZE).max(bs);
            let mut head = vec![0u8; head_len];
            head[SUPERBLOCK_OFFSET as usize..SUPERBLOCK_OFFSET as usize + sbf::SUPERBLOCK_SIZE].copy_from_slice(&sb_bytes);
            writer.put(0, &head)?;
        } else {
            let mut blk = vec![0u8; bs];
            blk[..sbf::SUPERBLOCK_SIZE].copy_from_slice(&sb_bytes);
            writer.put(gstart, &blk)?;
        }
        writer.put(gstart + 1, &gdt)?;
    }
    writer.finish()?;
    let bytes_written = writer.bytes_written;
    dev.flush()?;
    Ok(MkfsSummary {
        geometry: geo,
        journal_blocks: journal.as_ref().map_or(0, |j| j.blocks),
        free_blocks: free_blocks_total,
        free_inodes: sb.free_inodes_count,
        block_uninit_groups,
        bytes_written,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device_mem::MemDevice;
    use crate::image::Image;

    const UUID: [u8; 16] = *b"mkfs-unit-tests!";

    fn opts(size: u64, block_size: u32) -> MkfsOptions {
        MkfsOptions { block_size, ..MkfsOptions::new(size, UUID, [5; 16], crate::fixtures::EPOCH_SECS) }
    }

    #[test]
    fn same_options_give_byte_identical_images() {
        let build = || {
            let mut dev = MemDevice::new(256 << 20);
            mkfs(&mut dev, &opts(256 << 20, 1024)).unwrap();
            dev
        };
        assert_eq!(build(), build());
        let mut other = MemDevice::new(256 << 20);
        mkfs(&mut other, &MkfsOptions { timestamp_secs: 1_700_000_001, ..opts(256 << 20, 1024) }).unwrap();
        assert_ne!(build(), other, "the timestamp is part of the image");
    }

    #[test]
    fn bitmaps_descriptors_and_superblock_agree() {
        for bs in [1024, 4096, 65536] {
            let mut dev = MemDevice::new(1 << 30);
            let summary = mkfs(&mut dev, &opts(1 << 30, bs)).unwrap();
            let mut img = Image::open(dev).unwrap();
            let geo = img.geometry().clone();
            let mut free = 0u64;
            let mut uninit = 0u32;
            for g in 0..geo.group_count {
                let d = img.group_descs()[g as usize];
                free += u64::from(d.free_blocks);
                match img.read_block_bitmap(g).unwrap() {
                    Some(bm) => {
                        assert_eq!(bm.count_zeros(geo.group_len(g) as usize) as u32, d.free_blocks, "bs {bs} group {g}");
                        assert!(bm.padding_is_set(geo.group_len(g) as usize));
                    }
                    None => uninit += 1,
                }
                assert_eq!(img.read_inode_bitmap(g).unwrap().is_some(), g == 0);
            }
            assert_eq!(free, summary.free_blocks);
            assert_eq!(uninit, summary.block_uninit_groups);
            assert!(!img.group_descs().last().unwrap().has_flag(BG_BLOCK_UNINIT));
            assert_eq!(img.superblock().free_inodes_count, summary.free_inodes);
        }
    }

    #[test]
    fn sixteen_tib_in_memory_stays_small() {
        let size = 16u64 << 40;
        let mut dev = MemDevice::new(size);
        let summary = mkfs(&mut dev, &opts(size, 4096)).unwrap();
        assert_eq!(summary.geometry.blocks_count, 1 << 32);
        assert!(dev.stored_bytes() < 400 << 20, "{} bytes stored", dev.stored_bytes());
        let img = Image::open(dev).unwrap();
        assert_eq!(img.group_descs().len(), 131072);
        assert!(img.superblock().is_64bit());
    }

    #[test]
    fn small_images_skip_the_journal_like_mke2fs() {
        let mut dev = MemDevice::new(8 << 20);
        let summary = mkfs(&mut dev, &opts(8 << 20, 16384)).unwrap();
        assert_eq!(summary.journal_blocks, 0, "512 blocks < 2048");
        let mut img = Image::open(dev).unwrap();
        assert!(!img.superblock().has_journal());
        assert!(img.journal_superblock().unwrap().is_none());
        assert_eq!(default_journal_blocks(2047), None);
        assert_eq!(default_journal_blocks(2048), Some(1024));
        assert_eq!(default_journal_blocks(65536), Some(4096));
        assert_eq!(default_journal_blocks(1 << 32), Some(262144));
    }

    #[test]
    fn impossible_options_are_rejected_with_a_reason() {
        let reject = |o: MkfsOptions, dev_size: u64| {
            let mut dev = MemDevice::new(dev_size);
            match mkfs(&mut dev, &o) {
                Err(Error::InvalidMkfs(why)) => {
                    assert_eq!(dev.stored_bytes(), 0, "nothing written for {why}");
                    why
                }
                other => panic!("expected InvalidMkfs, got {other:?}"),
            }
        };
        assert!(reject(opts(8 << 20, 3072), 8 << 20).starts_with("block size 3072"));
        assert!(reject(opts(16 << 20, 4096), 8 << 20).contains("exceeds"));
        assert!(reject(MkfsOptions { uuid: [0; 16], ..opts(8 << 20, 4096) }, 8 << 20).contains("uuid"));
        assert!(reject(MkfsOptions { timestamp_secs: -1, ..opts(8 << 20, 4096) }, 8 << 20).contains("timestamp"));
        assert!(reject(MkfsOptions { journal: JournalSize::Blocks(10), ..opts(8 << 20, 4096) }, 8 << 20).contains("journal of 10"));
        assert!(reject(MkfsOptions { journal: JournalSize::Blocks(4000), ..opts(8 << 20, 4096) }, 8 << 20).contains("journal blocks do not fit"));
        assert!(reject(MkfsOptions { inode_count: Some(u64::from(u32::MAX) * 4), ..opts(1 << 40, 4096) }, 1 << 40).contains("inodes"));
        assert!(reject(opts(64 << 10, 1024), 64 << 10).contains("hold only 64 blocks"));
        assert!(reject(MkfsOptions { inode_count: Some(2000), ..opts(200 << 10, 1024) }, 200 << 10).contains("cannot hold"));
    }
}
