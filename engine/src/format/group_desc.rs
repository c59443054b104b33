//! Block group descriptors: where each group's bitmaps and inode table live,
//! its free counts, its UNINIT flags and the checksums protecting it.
//!
//! 32-byte descriptors (no 64bit) carry only the low halves; 64-byte ones add
//! the high halves at 0x20..0x3C. The table starts in the block after the
//! superblock (block `first_data_block + 1`).

use crate::error::{ChecksumObject, Corrupt, Error, Result};
use crate::format::bytes::*;
use crate::format::checksum::{crc16, crc32c_raw};
use crate::format::superblock::Superblock;
use crate::format::GroupIndex;

/// The inode table and bitmap are not initialised; the bitmap reads as all free.
pub const BG_INODE_UNINIT: u16 = 0x1;
/// The block bitmap is not initialised; readers synthesise it from the geometry.
pub const BG_BLOCK_UNINIT: u16 = 0x2;
/// The inode table has been zeroed on disk.
pub const BG_INODE_ZEROED: u16 = 0x4;

const BG_BLOCK_BITMAP_LO: usize = 0x00;
const BG_INODE_BITMAP_LO: usize = 0x04;
const BG_INODE_TABLE_LO: usize = 0x08;
const BG_FREE_BLOCKS_COUNT_LO: usize = 0x0C;
const BG_FREE_INODES_COUNT_LO: usize = 0x0E;
const BG_USED_DIRS_COUNT_LO: usize = 0x10;
const BG_FLAGS: usize = 0x12;
const BG_EXCLUDE_BITMAP_LO: usize = 0x14;
const BG_BLOCK_BITMAP_CSUM_LO: usize = 0x18;
const BG_INODE_BITMAP_CSUM_LO: usize = 0x1A;
pub const BG_ITABLE_UNUSED_LO: usize = 0x1C;
/// `bg_checksum` (u16).
pub const BG_CHECKSUM: usize = 0x1E;
const BG_BLOCK_BITMAP_HI: usize = 0x20;
const BG_INODE_BITMAP_HI: usize = 0x24;
const BG_INODE_TABLE_HI: usize = 0x28;
const BG_FREE_BLOCKS_COUNT_HI: usize = 0x2C;
const BG_FREE_INODES_COUNT_HI: usize = 0x2E;
const BG_USED_DIRS_COUNT_HI: usize = 0x30;
const BG_ITABLE_UNUSED_HI: usize = 0x32;
const BG_EXCLUDE_BITMAP_HI: usize = 0x34;
const BG_BLOCK_BITMAP_CSUM_HI: usize = 0x38;
const BG_INODE_BITMAP_CSUM_HI: usize = 0x3A;
/// Descriptors at least this long carry the high halves.
pub const DESC_SIZE_64: usize = 64;

/// Which checksum protects descriptors (and whether bitmaps have one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescChecksum {
    /// No checksum: UNINIT flags are meaningless.
    None,
    /// `uninit_bg`: CRC-16 over uuid, group number and the descriptor.
    Crc16 { uuid: [u8; 16] },
    /// `metadata_csum`: low 16 bits of crc32c seeded with the fs seed.
    Crc32c { fs_seed: u32 },
}

impl DescChecksum {
    /// The kind the superblock's features call for.
    pub fn of(sb: &Superblock) -> DescChecksum {
        if sb.has_metadata_csum() {
            DescChecksum::Crc32c { fs_seed: sb.csum_seed() }
        } else if sb.has_gdt_csum() {
            DescChecksum::Crc16 { uuid: sb.uuid }
        } else {
            DescChecksum::None
        }
    }
}

/// One group descriptor, with lo/hi halves joined.
///
/// Layout (32-byte form): 0x00 block_bitmap, 0x04 inode_bitmap, 0x08 inode_table
/// (u32 each), 0x0C free_blocks, 0x0E free_inodes, 0x10 used_dirs, 0x12 flags
/// (u16 each), 0x14 exclude_bitmap u32, 0x18 block_bitmap_csum, 0x1A
/// inode_bitmap_csum, 0x1C itable_unused, 0x1E checksum (u16 each). The 64-byte
/// form adds the high halves in the same order from 0x20.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupDesc {
    pub block_bitmap: u64,
    pub inode_bitmap: u64,
    pub inode_table: u64,
    pub free_blocks: u32,
    pub free_inodes: u32,
    pub used_dirs: u32,
    pub flags: u16,
    pub exclude_bitmap: u64,
    pub block_bitmap_csum: u32,
    pub inode_bitmap_csum: u32,
    pub itable_unused: u32,
    /// As stored; [`GroupDesc::write`] recomputes it.
    pub checksum: u16,
}

impl GroupDesc {
    /// Reads a descriptor from its `desc_size` bytes (32, or >= 64 with 64bit).
    pub fn parse(b: &[u8]) -> Self {
        debug_assert!(b.len() == 32 || b.len() >= DESC_SIZE_64);
        let wide = b.len() >= DESC_SIZE_64;
        let hi32 = |off: usize| if wide { le32(b, off) } else { 0 };
        let hi16 = |off: usize| if wide { u32::from(le16(b, off)) } else { 0 };
        let join16 = |lo: usize, hi: usize| u32::from(le16(b, lo)) | (hi16(hi) << 16);
        GroupDesc {
            block_bitmap: join64(le32(b, BG_BLOCK_BITMAP_LO), hi32(BG_BLOCK_BITMAP_HI)),
            inode_bitmap: join64(le32(b, BG_INODE_BITMAP_LO), hi32(BG_INODE_BITMAP_HI)),
            inode_table: join64(le32(b, BG_INODE_TABLE_LO), hi32(BG_INODE_TABLE_HI)),
            free_blocks: join16(BG_FREE_BLOCKS_COUNT_LO, BG_FREE_BLOCKS_COUNT_HI),
            free_inodes: join16(BG_FREE_INODES_COUNT_LO, BG_FREE_INODES_COUNT_HI),
            used_dirs: join16(BG_USED_DIRS_COUNT_LO, BG_USED_DIRS_COUNT_HI),
            flags: le16(b, BG_FLAGS),
            exclude_bitmap: join64(le32(b, BG_EXCLUDE_BITMAP_LO), hi32(BG_EXCLUDE_BITMAP_HI)),
            block_bitmap_csum: join16(BG_BLOCK_BITMAP_CSUM_LO, BG_BLOCK_BITMAP_CSUM_HI),
            inode_bitmap_csum: join16(BG_INODE_BITMAP_CSUM_LO, BG_INODE_BITMAP_CSUM_HI),
            itable_unused: join16(BG_ITABLE_UNUSED_LO, BG_ITABLE_UNUSED_HI),
            checksum: le16(b, BG_CHECKSUM),
        }
    }

    /// Writes the descriptor into `out` (its `desc_size` bytes) and fills in
    /// `bg_checksum` for `group`. Bytes past 64 are left as they are.
    pub fn write(&self, out: &mut [u8], group: GroupIndex, csum: DescChecksum) {
        let wide = out.len() >= DESC_SIZE_64;
        put_le32(out, BG_BLOCK_BITMAP_LO, lo32(self.block_bitmap));
        put_le32(out, BG_INODE_BITMAP_LO, lo32(self.inode_bitmap));
        put_le32(out, BG_INODE_TABLE_LO, lo32(self.inode_table));
        put_le16(out, BG_FREE_BLOCKS_COUNT_LO, lo16(self.free_blocks));
        put_le16(out, BG_FREE_INODES_COUNT_LO, lo16(self.free_inodes));
        put_le16(out, BG_USED_DIRS_COUNT_LO, lo16(self.used_dirs));
        put_le16(out, BG_FLAGS, self.flags);
        put_le32(out, BG_EXCLUDE_BITMAP_LO, lo32(self.exclude_bitmap));
        put_le16(out, BG_BLOCK_BITMAP_CSUM_LO, lo16(self.block_bitmap_csum));
        put_le16(out, BG_INODE_BITMAP_CSUM_LO, lo16(self.inode_bitmap_csum));
        put_le16(out, BG_ITABLE_UNUSED_LO, lo16(self.itable_unused));
        if wide {
            put_le32(out, BG_BLOCK_BITMAP_HI, hi32(self.block_bitmap));
            put_le32(out, BG_INODE_BITMAP_HI, hi32(self.inode_bitmap));
            put_le32(out, BG_INODE_TABLE_HI, hi32(self.inode_table));
            put_le16(out, BG_FREE_BLOCKS_COUNT_HI, hi16(self.free_blocks));
            put_le16(out, BG_FREE_INODES_COUNT_HI, hi16(self.free_inodes));
            put_le16(out, BG_USED_DIRS_COUNT_HI, hi16(self.used_dirs));
            put_le16(out, BG_ITABLE_UNUSED_HI, hi16(self.itable_unused));
            put_le32(out, BG_EXCLUDE_BITMAP_HI, hi32(self.exclude_bitmap));
            put_le16(out, BG_BLOCK_BITMAP_CSUM_HI, hi16(self.block_bitmap_csum));
            put_le16(out, BG_INODE_BITMAP_CSUM_HI, hi16(self.inode_bitmap_csum));
        }
        put_le16(out, BG_CHECKSUM, 0);
        let c = desc_checksum(out, group, csum);
        put_le16(out, BG_CHECKSUM, c);
        debug_assert_eq!(GroupDesc::parse(out), self.as_written(wide, c), "group descriptor {group} reads back wrong");
    }

    /// What [`GroupDesc::write`] stores: `bg_checksum` as computed, and in a
    /// 32-byte descriptor bitmap checksums keep their low half only (the format
    /// has no high half; [`crate::format::bitmap::stored_bitmap_csum_matches`]
    /// compares accordingly).
    fn as_written(&self, wide: bool, checksum: u16) -> GroupDesc {
        let narrow = |v: u32| if wide { v } else { v & 0xFFFF };
        GroupDesc {
            block_bitmap_csum: narrow(self.block_bitmap_csum),
            inode_bitmap_csum: narrow(self.inode_bitmap_csum),
            checksum,
            ..*self
        }
    }

    pub fn has_flag(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }
}

/// The checksum `bg_checksum` should hold for the serialized descriptor `b`
/// (its own checksum bytes are skipped).
pub fn desc_checksum(b: &[u8], group: GroupIndex, csum: DescChecksum) -> u16 {
    let group_le = group.to_le_bytes();
    let (before, rest) = b.split_at(BG_CHECKSUM.min(b.len()));
    let after = rest.get(2..).unwrap_or(&[]);
    match csum {
        DescChecksum::None => 0,
        DescChecksum::Crc16 { uuid } => {
            let c = crc16(0xFFFF, &uuid);
            let c = crc16(c, &group_le);
            let c = crc16(c, before);
            crc16(c, after)
        }
        DescChecksum::Crc32c { fs_seed } => {
            let c = crc32c_raw(fs_seed, &group_le);
            let c = crc32c_raw(c, before);
            let c = crc32c_raw(c, &[0, 0]);
            lo16(crc32c_raw(c, after))
        }
    }
}

/// Verifies a stored descriptor's checksum.
pub fn verify_desc_checksum(b: &[u8], group: GroupIndex, csum: DescChecksum) -> Result<()> {
    if csum == DescChecksum::None {
        return Ok(());
    }
    let stored = le16(b, BG_CHECKSUM);
    let computed = desc_checksum(b, group, csum);
    if stored == computed {
        Ok(())
    } else {
        Err(Error::Corrupt(Corrupt::Checksum {
            object: ChecksumObject::GroupDescriptor { group },
            stored: u32::from(stored),
            computed: u32::from(computed),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checksum::fs_seed_from_uuid;

    const MKE2FS_4K_GDT: &[u8; 4096] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.gdt");
    const MKE2FS_1K_UNINIT_GDT: &[u8; 1024] = include_bytes!("../../tests/fixtures/mke2fs_1k_uninit_bg.gdt");
    const UUID: [u8; 16] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00];

    #[test]
    fn parses_mke2fs_64_byte_descriptor_and_verifies_crc32c() {
        let b = &MKE2FS_4K_GDT[..64];
        let d = GroupDesc::parse(b);
        assert_eq!((d.block_bitmap, d.inode_bitmap, d.inode_table), (2, 18, 34));
        assert_eq!((d.free_blocks, d.free_inodes, d.used_dirs, d.itable_unused), (887, 2037, 2, 2037));
        assert_eq!(d.flags, BG_INODE_ZEROED);
        assert_eq!(d.checksum, 0x5dcb, "dumpe2fs printed csum 0x5dcb");
        assert_eq!(d.block_bitmap_csum, 0x033b_30e4);
        let csum = DescChecksum::Crc32c { fs_seed: fs_seed_from_uuid(&UUID) };
        verify_desc_checksum(b, 0, csum).unwrap();
        let mut out = [0u8; 64];
        d.write(&mut out, 0, csum);
        assert_eq!(&out[..], b, "write reproduces mke2fs's bytes, checksum included");
    }

    #[test]
    fn parses_mke2fs_uninit_bg_descriptor_and_verifies_crc16() {
        // 1.47 mke2fs with -O ^metadata_csum,uninit_bg and 64bit: 64-byte descriptors.
        let b = &MKE2FS_1K_UNINIT_GDT[..64];
        let d = GroupDesc::parse(b);
        assert_eq!((d.block_bitmap, d.inode_bitmap, d.inode_table), (3, 19, 35));
        assert_eq!(d.checksum, 0xbea7);
        verify_desc_checksum(b, 0, DescChecksum::Crc16 { uuid: UUID }).unwrap();
        assert!(verify_desc_checksum(b, 1, DescChecksum::Crc16 { uuid: UUID }).is_err(), "group number is covered");
    }

    #[test]
    fn narrow_descriptors_round_trip_and_mismatch_names_group() {
        let d = GroupDesc {
            block_bitmap: 300,
            inode_bitmap: 301,
            inode_table: 302,
            free_blocks: 8000,
            free_inodes: 2040,
            used_dirs: 3,
            flags: BG_INODE_UNINIT | BG_BLOCK_UNINIT,
            itable_unused: 2048,
            ..GroupDesc::default()
        };
        let csum = DescChecksum::Crc32c { fs_seed: 0xDEAD_BEEF };
        let mut out = [0u8; 32];
        d.write(&mut out, 7, csum);
        let back = GroupDesc::parse(&out);
        assert_eq!(GroupDesc { checksum: 0, ..back }, d);
        verify_desc_checksum(&out, 7, csum).unwrap();
        out[BG_FREE_BLOCKS_COUNT_LO] ^= 1;
        match verify_desc_checksum(&out, 7, csum) {
            Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::GroupDescriptor { group: 7 }, stored, computed })) => {
                assert_eq!(stored, u32::from(back.checksum));
                assert_ne!(stored, computed);
            }
            other => panic!("expected a descriptor checksum error, got {other:?}"),
        }
    }
}
