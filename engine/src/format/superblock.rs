//! The ext4 superblock: 1024 little-endian bytes at byte 1024 of the device (and
//! copies at the start of each backup group).
//!
//! Parsing validates what a reader must trust before it can compute anything
//! else (magic, block size, per-group counts, inode and descriptor sizes,
//! feature bits, checksum). Counts that need the whole geometry are checked in
//! [`crate::format::geometry`]. The original bytes are kept, so writing back a
//! superblock from another tool keeps the fields this engine does not model.

use crate::error::{Corrupt, Error, Result, Unsupported};
pub use crate::format::features::{feature, feature_names};
use crate::format::bytes::*;
use crate::format::checksum::{crc32c_raw, fs_seed_from_uuid, CRC32C_INITIAL};
use crate::format::features::FeatureWord;

/// Byte offset of the primary superblock on the device, whatever the block size.
pub const SUPERBLOCK_OFFSET: u64 = 1024;
/// Size of the superblock structure.
pub const SUPERBLOCK_SIZE: usize = 1024;
/// `s_magic`.
pub const EXT4_MAGIC: u16 = 0xEF53;
/// Largest `s_log_block_size`: 1024 << 6 = 64 KiB.
pub const MAX_LOG_BLOCK_SIZE: u32 = 6;
/// Largest blocks per group a 16-bit free count can describe (2^16 - 8).
pub const MAX_BLOCKS_PER_GROUP: u32 = 65528;
/// Largest cluster, as log2 of bytes (ext4's EXT4_MAX_CLUSTER_LOG_SIZE).
pub const MAX_LOG_CLUSTER_SIZE: u32 = 29;
/// `s_rev_level` of "dynamic" superblocks (variable inode size, feature words).
pub const REV_DYNAMIC: u32 = 1;
/// Inode size and first non-reserved inode of revision-0 filesystems.
pub const GOOD_OLD_INODE_SIZE: u16 = 128;
pub const GOOD_OLD_FIRST_INO: u32 = 11;
/// `s_state` bit: cleanly unmounted.
pub const STATE_CLEAN: u16 = 1;
/// `s_errors`: continue on errors.
pub const ERRORS_CONTINUE: u16 = 1;
/// `s_checksum_type` for crc32c.
pub const CHECKSUM_TYPE_CRC32C: u8 = 1;
/// `s_jnl_backup_type`: `s_jnl_blocks` holds a copy of the journal inode's blocks.
pub const JNL_BACKUP_BLOCKS: u8 = 1;
/// `s_def_hash_version`: half MD4.
pub const HASH_HALF_MD4: u8 = 1;
/// `s_flags`: directory hashes use signed chars (what x86 mke2fs writes).
pub const FLAGS_SIGNED_HASH: u32 = 1;
/// `s_flags`: directory hashes use unsigned chars.
pub const FLAGS_UNSIGNED_HASH: u32 = 2;
/// `s_default_mount_opts`: user_xattr | acl.
pub const DEFM_XATTR_USER_ACL: u32 = 0x0004 | 0x0008;
/// Smallest group descriptor size with 64bit.
pub const MIN_DESC_SIZE_64: u16 = 64;
/// Descriptor size without 64bit.
pub const DESC_SIZE_32: u16 = 32;
/// Largest descriptor size e2fsprogs accepts.
pub const MAX_DESC_SIZE: u16 = 1024;

// Field offsets, named after the C struct fields (ext2_fs.h).
const S_INODES_COUNT: usize = 0x00;
const S_BLOCKS_COUNT_LO: usize = 0x04;
const S_R_BLOCKS_COUNT_LO: usize = 0x08;
const S_FREE_BLOCKS_COUNT_LO: usize = 0x0C;
const S_FREE_INODES_COUNT: usize = 0x10;
const S_FIRST_DATA_BLOCK: usize = 0x14;
const S_LOG_BLOCK_SIZE: usize = 0x18;
const S_LOG_CLUSTER_SIZE: usize = 0x1C;
const S_BLOCKS_PER_GROUP: usize = 0x20;
const S_CLUSTERS_PER_GROUP: usize = 0x24;
const S_INODES_PER_GROUP: usize = 0x28;
const S_MTIME: usize = 0x2C;
const S_WTIME: usize = 0x30;
const S_MNT_COUNT: usize = 0x34;
const S_MAX_MNT_COUNT: usize = 0x36;
const S_MAGIC: usize = 0x38;
const S_STATE: usize = 0x3A;
const S_ERRORS: usize = 0x3C;
const S_MINOR_REV_LEVEL: usize = 0x3E;
const S_LASTCHECK: usize = 0x40;
const S_CHECKINTERVAL: usize = 0x44;
const S_CREATOR_OS: usize = 0x48;
const S_REV_LEVEL: usize = 0x4C;
const S_DEF_RESUID: usize = 0x50;
const S_DEF_RESGID: usize = 0x52;
const S_FIRST_INO: usize = 0x54;
const S_INODE_SIZE: usize = 0x58;
const S_BLOCK_GROUP_NR: usize = 0x5A;
const S_FEATURE_COMPAT: usize = 0x5C;
const S_FEATURE_INCOMPAT: usize = 0x60;
const S_FEATURE_RO_COMPAT: usize = 0x64;
const S_UUID: usize = 0x68;
const S_VOLUME_NAME: usize = 0x78;
const S_RESERVED_GDT_BLOCKS: usize = 0xCE;
const S_JOURNAL_UUID: usize = 0xD0;
const S_JOURNAL_INUM: usize = 0xE0;
const S_JOURNAL_DEV: usize = 0xE4;
const S_LAST_ORPHAN: usize = 0xE8;
const S_HASH_SEED: usize = 0xEC;
const S_DEF_HASH_VERSION: usize = 0xFC;
const S_JNL_BACKUP_TYPE: usize = 0xFD;
const S_DESC_SIZE: usize = 0xFE;
const S_DEFAULT_MOUNT_OPTS: usize = 0x100;
const S_FIRST_META_BG: usize = 0x104;
const S_MKFS_TIME: usize = 0x108;
const S_JNL_BLOCKS: usize = 0x10C;
const S_BLOCKS_COUNT_HI: usize = 0x150;
const S_R_BLOCKS_COUNT_HI: usize = 0x154;
const S_FREE_BLOCKS_HI: usize = 0x158;
const S_MIN_EXTRA_ISIZE: usize = 0x15C;
const S_WANT_EXTRA_ISIZE: usize = 0x15E;
const S_FLAGS: usize = 0x160;
const S_LOG_GROUPS_PER_FLEX: usize = 0x174;
const S_CHECKSUM_TYPE: usize = 0x175;
const S_KBYTES_WRITTEN: usize = 0x178;
const S_OVERHEAD_CLUSTERS: usize = 0x248;
const S_CHECKSUM_SEED: usize = 0x270;
const S_WTIME_HI: usize = 0x274;
const S_MTIME_HI: usize = 0x275;
const S_MKFS_TIME_HI: usize = 0x276;
const S_LASTCHECK_HI: usize = 0x277;
/// `s_checksum`: crc32c of bytes 0..0x3FC seeded with ~0 (never the fs seed).
pub const S_CHECKSUM: usize = 0x3FC;

/// Number of `u32` words in `s_jnl_blocks`: `i_block[15]`, `i_size_high`, `i_size`.
pub const JNL_BLOCKS_WORDS: usize = 17;

/// The superblock fields ext4 needs. 64-bit counts are already joined from
/// their lo/hi halves (a hi half is read only with the 64bit feature).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub inodes_count: u32,
    pub blocks_count: u64,
    pub r_blocks_count: u64,
    pub free_blocks_count: u64,
    pub free_inodes_count: u32,
    pub first_data_block: u32,
    pub log_block_size: u32,
    pub log_cluster_size: u32,
    pub blocks_per_group: u32,
    pub clusters_per_group: u32,
    pub inodes_per_group: u32,
    pub mtime: u64,
    pub wtime: u64,
    pub mnt_count: u16,
    pub max_mnt_count: u16,
    pub state: u16,
    pub errors: u16,
    pub minor_rev_level: u16,
    pub lastcheck: u64,
    pub checkinterval: u32,
    pub creator_os: u32,
    pub rev_level: u32,
    pub def_resuid: u16,
    pub def_resgid: u16,
    pub first_ino: u32,
    pub inode_size: u16,
    pub block_group_nr: u16,
    pub feature_compat: u32,
    pub feature_incompat: u32,
    pub feature_ro_compat: u32,
    pub uuid: [u8; 16],
    pub volume_name: [u8; 16],
    pub reserved_gdt_blocks: u16,
    pub journal_uuid: [u8; 16],
    pub journal_inum: u32,
    pub journal_dev: u32,
    pub last_orphan: u32,
    pub hash_seed: [u8; 16],
    pub def_hash_version: u8,
    pub jnl_backup_type: u8,
    /// Raw `s_desc_size`; see [`Superblock::desc_size`] for the effective size.
    pub desc_size_raw: u16,
    pub default_mount_opts: u32,
    pub first_meta_bg: u32,
    pub mkfs_time: u64,
    pub jnl_blocks: [u32; JNL_BLOCKS_WORDS],
    pub min_extra_isize: u16,
    pub want_extra_isize: u16,
    pub flags: u32,
    pub log_groups_per_flex: u8,
    pub checksum_type: u8,
    pub kbytes_written: u64,
    pub overhead_clusters: u32,
    pub checksum_seed: u32,
    /// The stored checksum as read (recomputed on write).
    pub checksum: u32,
    /// The bytes this was parsed from (zeros for a new superblock); fields this
    /// struct does not model are written back from here unchanged.
    raw: Box<[u8; SUPERBLOCK_SIZE]>,
}

fn corrupt(what: String) -> Error {
    Error::Corrupt(Corrupt::Superblock(what))
}

impl Superblock {
    /// A superblock with every field zero, for mkfs to fill in.
    pub fn zeroed() -> Self {
        // Parsing zeros cannot fail: the unchecked reader only splits fields.
        Self::read_fields(&[0u8; SUPERBLOCK_SIZE])
    }

    /// The fields as stored, nothing checked ([`Superblock::parse`] checks
    /// them): for a tool that must size or describe an image the engine
    /// would refuse.
    pub fn read_fields(b: &[u8; SUPERBLOCK_SIZE]) -> Self {
        let is64 = le32(b, S_FEATURE_INCOMPAT) & feature::INCOMPAT_64BIT != 0;
        let hi = |off: usize| if is64 { le32(b, off) } else { 0 };
        let time = |lo: usize, hi: usize| join64(le32(b, lo), u32::from(u8_at(b, hi)));
        let mut jnl_blocks = [0u32; JNL_BLOCKS_WORDS];
        for (i, w) in jnl_blocks.iter_mut().enumerate() {
            *w = le32(b, S_JNL_BLOCKS + 4 * i);
        }
        Superblock {
            inodes_count: le32(b, S_INODES_COUNT),
            blocks_count: join64(le32(b, S_BLOCKS_COUNT_LO), hi(S_BLOCKS_COUNT_HI)),
            r_blocks_count: join64(le32(b, S_R_BLOCKS_COUNT_LO), hi(S_R_BLOCKS_COUNT_HI)),
            free_blocks_count: join64(le32(b, S_FREE_BLOCKS_COUNT_LO), hi(S_FREE_BLOCKS_HI)),
            free_inodes_count: le32(b, S_FREE_INODES_COUNT),
            first_data_block: le32(b, S_FIRST_DATA_BLOCK),
            log_block_size: le32(b, S_LOG_BLOCK_SIZE),
            log_cluster_size: le32(b, S_LOG_CLUSTER_SIZE),
            blocks_per_group: le32(b, S_BLOCKS_PER_GROUP),
            clusters_per_group: le32(b, S_CLUSTERS_PER_GROUP),
            inodes_per_group: le32(b, S_INODES_PER_GROUP),
            mtime: time(S_MTIME, S_MTIME_HI),
            wtime: time(S_WTIME, S_WTIME_HI),
            mnt_count: le16(b, S_MNT_COUNT),
            max_mnt_count: le16(b, S_MAX_MNT_COUNT),
            state: le16(b, S_STATE),
            errors: le16(b, S_ERRORS),
            minor_rev_level: le16(b, S_MINOR_REV_LEVEL),
            lastcheck: time(S_LASTCHECK, S_LASTCHECK_HI),
            checkinterval: le32(b, S_CHECKINTERVAL),
            creator_os: le32(b, S_CREATOR_OS),
            rev_level: le32(b, S_REV_LEVEL),
            def_resuid: le16(b, S_DEF_RESUID),
            def_resgid: le16(b, S_DEF_RESGID),
            first_ino: le32(b, S_FIRST_INO),
            inode_size: le16(b, S_INODE_SIZE),
            block_group_nr: le16(b, S_BLOCK_GROUP_NR),
            feature_compat: le32(b, S_FEATURE_COMPAT),
            feature_incompat: le32(b, S_FEATURE_INCOMPAT),
            feature_ro_compat: le32(b, S_FEATURE_RO_COMPAT),
            uuid: bytes16(b, S_UUID),
            volume_name: bytes16(b, S_VOLUME_NAME),
            reserved_gdt_blocks: le16(b, S_RESERVED_GDT_BLOCKS),
            journal_uuid: bytes16(b, S_JOURNAL_UUID),
            journal_inum: le32(b, S_JOURNAL_INUM),
            journal_dev: le32(b, S_JOURNAL_DEV),
            last_orphan: le32(b, S_LAST_ORPHAN),
            hash_seed: bytes16(b, S_HASH_SEED),
            def_hash_version: u8_at(b, S_DEF_HASH_VERSION),
            jnl_backup_type: u8_at(b, S_JNL_BACKUP_TYPE),
            desc_size_raw: le16(b, S_DESC_SIZE),
            default_mount_opts: le32(b, S_DEFAULT_MOUNT_OPTS),
            first_meta_bg: le32(b, S_FIRST_META_BG),
            mkfs_time: time(S_MKFS_TIME, S_MKFS_TIME_HI),
            jnl_blocks,
            min_extra_isize: le16(b, S_MIN_EXTRA_ISIZE),
            want_extra_isize: le16(b, S_WANT_EXTRA_ISIZE),
            flags: le32(b, S_FLAGS),
            log_groups_per_flex: u8_at(b, S_LOG_GROUPS_PER_FLEX),
            checksum_type: u8_at(b, S_CHECKSUM_TYPE),
            kbytes_written: le64(b, S_KBYTES_WRITTEN),
            overhead_clusters: le32(b, S_OVERHEAD_CLUSTERS),
            checksum_seed: le32(b, S_CHECKSUM_SEED),
            checksum: le32(b, S_CHECKSUM),
            raw: Box::new(*b),
        }
    }

    /// Parses and validates a superblock. Geometry-wide counts (inode count vs
    /// groups, GDT fit) are checked by `Geometry::from_superblock`.
    pub fn parse(b: &[u8; SUPERBLOCK_SIZE]) -> Result<Self> {
        let sb = Self::read_fields(b);
        let magic = le16(b, S_MAGIC);
        if magic != EXT4_MAGIC {
            return Err(corrupt(format!("s_magic {magic:#06x} != {EXT4_MAGIC:#06x}")));
        }
        sb.check_features()?;
        if sb.has_metadata_csum() {
            if sb.checksum_type != CHECKSUM_TYPE_CRC32C {
                return Err(corrupt(format!("s_checksum_type {} is not crc32c (1)", sb.checksum_type)));
            }
            let computed = superblock_checksum(b);
            if computed != sb.checksum {
                return Err(Error::Corrupt(Corrupt::Checksum {
                    object: crate::error::ChecksumObject::Superblock,
                    stored: sb.checksum,
                    computed,
                }));
            }
        }
        sb.check_fields()?;
        Ok(sb)
    }

    fn check_features(&self) -> Result<()> {
        let incompat = self.feature_incompat & !feature::SUPPORTED_INCOMPAT;
        if incompat != 0 {
            return Err(Unsupported::Features { word: FeatureWord::Incompat, bits: incompat }.into());
        }
        let ro = self.feature_ro_compat & !feature::SUPPORTED_RO_COMPAT;
        if ro != 0 {
            return Err(Unsupported::Features { word: FeatureWord::RoCompat, bits: ro }.into());
        }
        if self.has_metadata_csum() && self.feature_ro_compat & feature::RO_COMPAT_GDT_CSUM != 0 {
            return Err(corrupt("both metadata_csum and uninit_bg are set".to_string()));
        }
        Ok(())
    }

    fn check_fields(&self) -> Result<()> {
        if self.rev_level > REV_DYNAMIC {
            return Err(corrupt(format!("s_rev_level {} > {REV_DYNAMIC}", self.rev_level)));
        }
        if self.log_block_size > MAX_LOG_BLOCK_SIZE {
            return Err(corrupt(format!("s_log_block_size {} > {MAX_LOG_BLOCK_SIZE}", self.log_block_size)));
        }
        let bs = self.block_size();
        let bigalloc = self.has_bigalloc();
        if bigalloc {
            if self.log_cluster_size <= self.log_block_size || self.log_cluster_size > MAX_LOG_CLUSTER_SIZE - 10 {
                return Err(corrupt(format!(
                    "bigalloc s_log_cluster_size {} not above s_log_block_size {} and at most {}",
                    self.log_cluster_size,
                    self.log_block_size,
                    MAX_LOG_CLUSTER_SIZE - 10
                )));
            }
            if self.feature_incompat & feature::INCOMPAT_EXTENTS == 0 {
                return Err(corrupt("bigalloc without extents".to_string()));
            }
            if self.first_data_block != 0 {
                return Err(corrupt(format!("bigalloc with s_first_data_block {} (clusters start at 0)", self.first_data_block)));
            }
            if bs == 1024 {
                // The superblock then sits in block 1 of a group starting
                // at block 0, and the GDT after it: a layout not modelled.
                return Err(Unsupported::Construct("bigalloc with 1 KiB blocks".to_string()).into());
            }
        } else {
            if self.log_cluster_size != self.log_block_size {
                return Err(corrupt(format!(
                    "s_log_cluster_size {} != s_log_block_size {} without bigalloc",
                    self.log_cluster_size, self.log_block_size
                )));
            }
            let want_first = u32::from(bs == 1024);
            if self.first_data_block != want_first {
                return Err(corrupt(format!(
                    "s_first_data_block {} but {bs}-byte blocks need {want_first}",
                    self.first_data_block
                )));
            }
        }
        let cpg_max = (8 * bs).min(MAX_BLOCKS_PER_GROUP);
        if self.clusters_per_group < 8 || self.clusters_per_group > cpg_max || self.clusters_per_group % 8 != 0 {
            return Err(corrupt(format!(
                "s_clusters_per_group {} not a multiple of 8 in 8..={cpg_max}",
                self.clusters_per_group
            )));
        }
        if u64::from(self.blocks_per_group) != u64::from(self.clusters_per_group) << self.cluster_bits() {
            return Err(corrupt(format!(
                "s_blocks_per_group {} != s_clusters_per_group {} * {} blocks per cluster",
                self.blocks_per_group,
                self.clusters_per_group,
                1u64 << self.cluster_bits()
            )));
        }
        let isz = self.inode_size();
        if isz < GOOD_OLD_INODE_SIZE || u32::from(isz) > bs || !isz.is_power_of_two() {
            return Err(corrupt(format!("s_inode_size {isz} not a power of two in 128..={bs}")));
        }
        let ipb = bs / u32::from(isz);
        let ipg_max = (8 * bs).min(65536 - ipb);
        if self.inodes_per_group < ipb || self.inodes_per_group > ipg_max || self.inodes_per_group % 8 != 0 {
            return Err(corrupt(format!(
                "s_inodes_per_group {} not a multiple of 8 in {ipb}..={ipg_max}",
                self.inodes_per_group
            )));
        }
        let first_ino = self.first_ino();
        if first_ino < GOOD_OLD_FIRST_INO || first_ino >= self.inodes_count {
            return Err(corrupt(format!(
                "s_first_ino {first_ino} outside {GOOD_OLD_FIRST_INO}..{}",
                self.inodes_count
            )));
        }
        if self.is_64bit() {
            let d = self.desc_size_raw;
            if !(MIN_DESC_SIZE_64..=MAX_DESC_SIZE).contains(&d) || !d.is_power_of_two() {
                return Err(corrupt(format!(
                    "s_desc_size {d} with 64bit is not a power of two in {MIN_DESC_SIZE_64}..={MAX_DESC_SIZE}"
                )));
            }
        }
        if self.blocks_count <= u64::from(self.first_data_block) {
            return Err(corrupt(format!("s_blocks_count {} leaves no data blocks", self.blocks_count)));
        }
        if self.has_flex_bg() && self.log_groups_per_flex > 31 {
            return Err(corrupt(format!("s_log_groups_per_flex {} > 31", self.log_groups_per_flex)));
        }
        if isz > GOOD_OLD_INODE_SIZE {
            let room = isz - GOOD_OLD_INODE_SIZE;
            if self.min_extra_isize > room || self.want_extra_isize > room {
                return Err(corrupt(format!(
                    "s_min_extra_isize {} / s_want_extra_isize {} exceed the {room} bytes past 128",
                    self.min_extra_isize, self.want_extra_isize
                )));
            }
        }
        Ok(())
    }

    /// Bytes per block: 1024 << s_log_block_size.
    pub fn block_size(&self) -> u32 {
        1024u32 << self.log_block_size.min(MAX_LOG_BLOCK_SIZE)
    }
    /// Inode size (128 on revision-0 filesystems).
    pub fn inode_size(&self) -> u16 {
        if self.rev_level == 0 {
            GOOD_OLD_INODE_SIZE
        } else {
            self.inode_size
        }
    }
    /// First non-reserved inode (11 on revision-0 filesystems).
    pub fn first_ino(&self) -> u32 {
        if self.rev_level == 0 {
            GOOD_OLD_FIRST_INO
        } else {
            self.first_ino
        }
    }
    /// Effective group descriptor size: 32 without 64bit, s_desc_size with it.
    pub fn desc_size(&self) -> u16 {
        if self.is_64bit() {
            self.desc_size_raw
        } else {
            DESC_SIZE_32
        }
    }
    pub fn is_64bit(&self) -> bool {
        self.feature_incompat & feature::INCOMPAT_64BIT != 0
    }
    pub fn has_metadata_csum(&self) -> bool {
        self.feature_ro_compat & feature::RO_COMPAT_METADATA_CSUM != 0
    }
    pub fn has_gdt_csum(&self) -> bool {
        self.feature_ro_compat & feature::RO_COMPAT_GDT_CSUM != 0
    }
    pub fn has_flex_bg(&self) -> bool {
        self.feature_incompat & feature::INCOMPAT_FLEX_BG != 0
    }
    pub fn has_sparse_super(&self) -> bool {
        self.feature_ro_compat & feature::RO_COMPAT_SPARSE_SUPER != 0
    }
    pub fn has_journal(&self) -> bool {
        self.feature_compat & feature::COMPAT_HAS_JOURNAL != 0
    }
    pub fn has_bigalloc(&self) -> bool {
        self.feature_ro_compat & feature::RO_COMPAT_BIGALLOC != 0
    }
    /// log2 of blocks per cluster: 0 without bigalloc.
    pub fn cluster_bits(&self) -> u32 {
        if self.has_bigalloc() {
            self.log_cluster_size.saturating_sub(self.log_block_size).min(MAX_LOG_CLUSTER_SIZE)
        } else {
            0
        }
    }
    pub fn has_huge_file(&self) -> bool {
        self.feature_ro_compat & feature::RO_COMPAT_HUGE_FILE != 0
    }
    /// Seed for all metadata checksums except the superblock's own.
    pub fn csum_seed(&self) -> u32 {
        if self.feature_incompat & feature::INCOMPAT_CSUM_SEED != 0 {
            self.checksum_seed
        } else {
            fs_seed_from_uuid(&self.uuid)
        }
    }

    /// Serializes the superblock, recomputing `s_checksum` when metadata_csum is on.
    pub fn to_bytes(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut b = *self.raw;
        let is64 = self.is_64bit();
        put_le32(&mut b, S_INODES_COUNT, self.inodes_count);
        put_le32(&mut b, S_BLOCKS_COUNT_LO, lo32(self.blocks_count));
        put_le32(&mut b, S_R_BLOCKS_COUNT_LO, lo32(self.r_blocks_count));
        put_le32(&mut b, S_FREE_BLOCKS_COUNT_LO, lo32(self.free_blocks_count));
        if is64 {
            put_le32(&mut b, S_BLOCKS_COUNT_HI, hi32(self.blocks_count));
            put_le32(&mut b, S_R_BLOCKS_COUNT_HI, hi32(self.r_blocks_count));
            put_le32(&mut b, S_FREE_BLOCKS_HI, hi32(self.free_blocks_count));
        }
        put_le32(&mut b, S_FREE_INODES_COUNT, self.free_inodes_count);
        put_le32(&mut b, S_FIRST_DATA_BLOCK, self.first_data_block);
        put_le32(&mut b, S_LOG_BLOCK_SIZE, self.log_block_size);
        put_le32(&mut b, S_LOG_CLUSTER_SIZE, self.log_cluster_size);
        put_le32(&mut b, S_BLOCKS_PER_GROUP, self.blocks_per_group);
        put_le32(&mut b, S_CLUSTERS_PER_GROUP, self.clusters_per_group);
        put_le32(&mut b, S_INODES_PER_GROUP, self.inodes_per_group);
        let mut put_time = |lo: usize, hi: usize, t: u64| {
            put_le32(&mut b, lo, lo32(t));
            put_u8(&mut b, hi, lo8(hi32(t)));
        };
        put_time(S_MTIME, S_MTIME_HI, self.mtime);
        put_time(S_WTIME, S_WTIME_HI, self.wtime);
        put_time(S_LASTCHECK, S_LASTCHECK_HI, self.lastcheck);
        put_time(S_MKFS_TIME, S_MKFS_TIME_HI, self.mkfs_time);
        put_le16(&mut b, S_MNT_COUNT, self.mnt_count);
        put_le16(&mut b, S_MAX_MNT_COUNT, self.max_mnt_count);
        put_le16(&mut b, S_MAGIC, EXT4_MAGIC);
        put_le16(&mut b, S_STATE, self.state);
        put_le16(&mut b, S_ERRORS, self.errors);
        put_le16(&mut b, S_MINOR_REV_LEVEL, self.minor_rev_level);
        put_le32(&mut b, S_CHECKINTERVAL, self.checkinterval);
        put_le32(&mut b, S_CREATOR_OS, self.creator_os);
        put_le32(&mut b, S_REV_LEVEL, self.rev_level);
        put_le16(&mut b, S_DEF_RESUID, self.def_resuid);
        put_le16(&mut b, S_DEF_RESGID, self.def_resgid);
        put_le32(&mut b, S_FIRST_INO, self.first_ino);
        put_le16(&mut b, S_INODE_SIZE, self.inode_size);
        put_le16(&mut b, S_BLOCK_GROUP_NR, self.block_group_nr);
        put_le32(&mut b, S_FEATURE_COMPAT, self.feature_compat);
        put_le32(&mut b, S_FEATURE_INCOMPAT, self.feature_incompat);
        put_le32(&mut b, S_FEATURE_RO_COMPAT, self.feature_ro_compat);
        put_bytes(&mut b, S_UUID, &self.uuid);
        put_bytes(&mut b, S_VOLUME_NAME, &self.volume_name);
        put_le16(&mut b, S_RESERVED_GDT_BLOCKS, self.reserved_gdt_blocks);
        put_bytes(&mut b, S_JOURNAL_UUID, &self.journal_uuid);
        put_le32(&mut b, S_JOURNAL_INUM, self.journal_inum);
        put_le32(&mut b, S_JOURNAL_DEV, self.journal_dev);
        put_le32(&mut b, S_LAST_ORPHAN, self.last_orphan);
        put_bytes(&mut b, S_HASH_SEED, &self.hash_seed);
        put_u8(&mut b, S_DEF_HASH_VERSION, self.def_hash_version);
        put_u8(&mut b, S_JNL_BACKUP_TYPE, self.jnl_backup_type);
        put_le16(&mut b, S_DESC_SIZE, self.desc_size_raw);
        put_le32(&mut b, S_DEFAULT_MOUNT_OPTS, self.default_mount_opts);
        put_le32(&mut b, S_FIRST_META_BG, self.first_meta_bg);
        for (i, w) in self.jnl_blocks.iter().enumerate() {
            put_le32(&mut b, S_JNL_BLOCKS + 4 * i, *w);
        }
        put_le16(&mut b, S_MIN_EXTRA_ISIZE, self.min_extra_isize);
        put_le16(&mut b, S_WANT_EXTRA_ISIZE, self.want_extra_isize);
        put_le32(&mut b, S_FLAGS, self.flags);
        put_u8(&mut b, S_LOG_GROUPS_PER_FLEX, self.log_groups_per_flex);
        put_u8(&mut b, S_CHECKSUM_TYPE, self.checksum_type);
        put_le64(&mut b, S_KBYTES_WRITTEN, self.kbytes_written);
        put_le32(&mut b, S_OVERHEAD_CLUSTERS, self.overhead_clusters);
        put_le32(&mut b, S_CHECKSUM_SEED, self.checksum_seed);
        let csum = if self.has_metadata_csum() { superblock_checksum(&b) } else { self.checksum };
        put_le32(&mut b, S_CHECKSUM, csum);
        debug_assert_eq!(Self::read_fields(&b), self.as_written(&b, csum), "superblock does not read back as written");
        b
    }

    /// What [`Superblock::to_bytes`] stored in `b` with checksum `csum`.
    fn as_written(&self, b: &[u8; SUPERBLOCK_SIZE], csum: u32) -> Self {
        // Times keep 40 bits of seconds: s_*time plus an 8-bit s_*time_hi.
        let time = |t: u64| t & 0xFF_FFFF_FFFF;
        Superblock {
            mtime: time(self.mtime),
            wtime: time(self.wtime),
            lastcheck: time(self.lastcheck),
            mkfs_time: time(self.mkfs_time),
            checksum: csum,
            raw: Box::new(*b),
            ..self.clone()
        }
    }
}

/// `s_checksum` of a serialized superblock: raw crc32c from ~0 over bytes 0..0x3FC.
pub fn superblock_checksum(b: &[u8; SUPERBLOCK_SIZE]) -> u32 {
    crc32c_raw(CRC32C_INITIAL, &b[..S_CHECKSUM])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Primary superblock of `mke2fs -t ext4 -b 4096 -O ^resize_inode` on 8 MiB
    /// (fixed UUID, hash seed and E2FSPROGS_FAKE_TIME).
    const MKE2FS_4K: &[u8; 1024] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.superblock");

    #[test]
    fn parses_an_image_mke2fs_made() {
        let sb = Superblock::parse(MKE2FS_4K).expect("mke2fs superblock is valid");
        assert_eq!(sb.block_size(), 4096);
        assert_eq!(sb.blocks_count, 2048);
        assert_eq!(sb.inodes_count, 2048);
        assert_eq!(sb.blocks_per_group, 32768);
        assert_eq!(sb.first_data_block, 0);
        assert_eq!(sb.inode_size(), 256);
        assert_eq!(sb.desc_size(), 64);
        assert_eq!(sb.journal_inum, 8);
        assert_eq!(sb.log_groups_per_flex, 4);
        assert_eq!(sb.reserved_gdt_blocks, 0);
        assert!(sb.has_metadata_csum() && sb.is_64bit() && sb.has_flex_bg() && sb.has_journal());
        assert_eq!(sb.uuid[..4], [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(sb.checksum, superblock_checksum(MKE2FS_4K), "our crc32c_raw reproduces mke2fs's s_checksum");
    }

    #[test]
    fn round_trip_is_byte_exact() {
        let sb = Superblock::parse(MKE2FS_4K).unwrap();
        assert_eq!(&sb.to_bytes(), MKE2FS_4K);
        let mut changed = sb.clone();
        changed.free_blocks_count -= 1;
        let bytes = changed.to_bytes();
        assert_eq!(Superblock::parse(&bytes).unwrap().free_blocks_count, sb.free_blocks_count - 1);
    }

    fn corrupted(off: usize, value: &[u8]) -> [u8; 1024] {
        let mut b = *MKE2FS_4K;
        b[off..off + value.len()].copy_from_slice(value);
        let csum = superblock_checksum(&b);
        b[S_CHECKSUM..].copy_from_slice(&csum.to_le_bytes());
        b
    }

    fn superblock_error(b: &[u8; 1024]) -> String {
        match Superblock::parse(b) {
            Err(Error::Corrupt(Corrupt::Superblock(what))) => what,
            other => panic!("expected a superblock corruption, got {other:?}"),
        }
    }

    #[test]
    fn bad_fields_are_named() {
        assert!(superblock_error(&corrupted(S_MAGIC, &[0x53, 0xEE])).starts_with("s_magic"));
        assert_eq!(superblock_error(&corrupted(S_LOG_BLOCK_SIZE, &17u32.to_le_bytes())), "s_log_block_size 17 > 6");
        assert!(superblock_error(&corrupted(S_BLOCKS_PER_GROUP, &0u32.to_le_bytes())).starts_with("s_blocks_per_group 0"));
        assert!(superblock_error(&corrupted(S_INODES_PER_GROUP, &70000u32.to_le_bytes())).starts_with("s_inodes_per_group 70000"));
        assert!(superblock_error(&corrupted(S_FIRST_DATA_BLOCK, &1u32.to_le_bytes())).starts_with("s_first_data_block 1"));
        assert!(superblock_error(&corrupted(S_INODE_SIZE, &100u16.to_le_bytes())).starts_with("s_inode_size 100"));
        assert!(superblock_error(&corrupted(S_DESC_SIZE, &32u16.to_le_bytes())).starts_with("s_desc_size 32"));
    }

    #[test]
    fn unknown_features_are_unsupported_and_named() {
        let b = corrupted(S_FEATURE_INCOMPAT, &(le32(MKE2FS_4K, S_FEATURE_INCOMPAT) | 0x10 | 0x4_0000).to_le_bytes());
        let err = Superblock::parse(&b).unwrap_err();
        assert_eq!(err, Error::Unsupported(Unsupported::Features { word: FeatureWord::Incompat, bits: 0x4_0010 }));
        assert_eq!(err.to_string(), "unsupported: incompat features meta_bg 0x40000");
        let b = corrupted(S_FEATURE_RO_COMPAT, &(le32(MKE2FS_4K, S_FEATURE_RO_COMPAT) | 0x4000).to_le_bytes());
        assert!(matches!(
            Superblock::parse(&b),
            Err(Error::Unsupported(Unsupported::Features { word: FeatureWord::RoCompat, bits: 0x4000 }))
        ));
    }

    #[test]
    fn bigalloc_fields_must_agree() {
        let ro = le32(MKE2FS_4K, S_FEATURE_RO_COMPAT) | feature::RO_COMPAT_BIGALLOC;
        let b = corrupted(S_FEATURE_RO_COMPAT, &ro.to_le_bytes());
        assert!(superblock_error(&b).starts_with("bigalloc s_log_cluster_size 2 not above s_log_block_size 2"), "{}", superblock_error(&b));
        // 16 KiB clusters, but s_blocks_per_group still equal to the clusters per group.
        let mut b = corrupted(S_LOG_CLUSTER_SIZE, &4u32.to_le_bytes());
        b[S_FEATURE_RO_COMPAT..S_FEATURE_RO_COMPAT + 4].copy_from_slice(&ro.to_le_bytes());
        let csum = superblock_checksum(&b);
        b[S_CHECKSUM..].copy_from_slice(&csum.to_le_bytes());
        assert!(superblock_error(&b).starts_with("s_blocks_per_group 32768 != s_clusters_per_group 32768 * 4"), "{}", superblock_error(&b));
        // A hostile s_log_cluster_size near 2^32 is refused, not overflowed
        // (found by the mount_image fuzz target).
        let mut b = corrupted(S_LOG_CLUSTER_SIZE, &0xFFFF_FFFBu32.to_le_bytes());
        b[S_FEATURE_RO_COMPAT..S_FEATURE_RO_COMPAT + 4].copy_from_slice(&ro.to_le_bytes());
        let csum = superblock_checksum(&b);
        b[S_CHECKSUM..].copy_from_slice(&csum.to_le_bytes());
        assert!(superblock_error(&b).starts_with("bigalloc s_log_cluster_size 4294967291 not above"), "{}", superblock_error(&b));
    }

    #[test]
    fn checksum_mismatch_reports_both_values() {
        let mut b = *MKE2FS_4K;
        b[S_FREE_INODES_COUNT] ^= 1;
        match Superblock::parse(&b) {
            Err(Error::Corrupt(Corrupt::Checksum { object, stored, computed })) => {
                assert_eq!(object, crate::error::ChecksumObject::Superblock);
                assert_eq!(stored, le32(MKE2FS_4K, S_CHECKSUM));
                assert_eq!(computed, superblock_checksum(&b));
            }
            other => panic!("expected a checksum error, got {other:?}"),
        }
    }
}
