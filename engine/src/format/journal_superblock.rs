//! The jbd2 journal superblock (version 2): the first block of the journal,
//! 1024 **big-endian** bytes saying how long the log is, where the oldest live
//! transaction starts (0 = clean, nothing to replay) and which features the log
//! uses. With checksum v2/v3 it carries its own crc32c at 0xFC.

use crate::error::{ChecksumObject, Corrupt, Error, Result, Unsupported};
use crate::format::bytes::*;
use crate::format::checksum::{crc32c_raw, CRC32C_INITIAL};
use crate::format::features::FeatureWord;

/// Every jbd2 block header starts with this.
pub const JBD2_MAGIC: u32 = 0xC03B_3998;
/// `h_blocktype` of a v1 and a v2 superblock.
pub const BLOCKTYPE_SUPERBLOCK_V1: u32 = 3;
pub const BLOCKTYPE_SUPERBLOCK_V2: u32 = 4;
/// Smallest journal jbd2 accepts, in blocks.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;
/// Size of the structure.
pub const JOURNAL_SB_SIZE: usize = 1024;
/// `s_checksum_type` for crc32c.
pub const CSUM_TYPE_CRC32C: u8 = 4;

pub const COMPAT_CHECKSUM: u32 = 0x1;
pub const INCOMPAT_REVOKE: u32 = 0x1;
pub const INCOMPAT_64BIT: u32 = 0x2;
pub const INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
pub const INCOMPAT_CSUM_V2: u32 = 0x8;
pub const INCOMPAT_CSUM_V3: u32 = 0x10;
pub const INCOMPAT_FAST_COMMIT: u32 = 0x20;
/// Incompat features a reader of this journal can cope with.
pub const SUPPORTED_INCOMPAT: u32 =
    INCOMPAT_REVOKE | INCOMPAT_64BIT | INCOMPAT_ASYNC_COMMIT | INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3;

const H_MAGIC: usize = 0x00;
const H_BLOCKTYPE: usize = 0x04;
const H_SEQUENCE: usize = 0x08;
const S_BLOCKSIZE: usize = 0x0C;
const S_MAXLEN: usize = 0x10;
const S_FIRST: usize = 0x14;
const S_SEQUENCE: usize = 0x18;
const S_START: usize = 0x1C;
const S_ERRNO: usize = 0x20;
const S_FEATURE_COMPAT: usize = 0x24;
const S_FEATURE_INCOMPAT: usize = 0x28;
const S_FEATURE_RO_COMPAT: usize = 0x2C;
const S_UUID: usize = 0x30;
const S_NR_USERS: usize = 0x40;
const S_MAX_TRANSACTION: usize = 0x48;
const S_MAX_TRANS_DATA: usize = 0x4C;
const S_CHECKSUM_TYPE: usize = 0x50;
const S_NUM_FC_BLKS: usize = 0x54;
/// `s_checksum`: crc32c from ~0 over the 1024 bytes with this field zeroed.
pub const S_CHECKSUM: usize = 0xFC;

/// The journal superblock.
///
/// Layout (big-endian): 0x00 magic, 0x04 blocktype, 0x08 header sequence, 0x0C
/// blocksize, 0x10 maxlen, 0x14 first, 0x18 sequence (next tid), 0x1C start,
/// 0x20 errno, 0x24/0x28/0x2C compat/incompat/ro features, 0x30 uuid[16], 0x40
/// nr_users, 0x48 max_transaction, 0x4C max_trans_data, 0x50 checksum_type u8,
/// 0x54 num_fc_blocks, 0xFC checksum, 0x100 users[16 * 48].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalSuperblock {
    pub blocktype: u32,
    pub block_size: u32,
    pub maxlen: u32,
    pub first: u32,
    pub sequence: u32,
    pub start: u32,
    pub errno: i32,
    pub feature_compat: u32,
    pub feature_incompat: u32,
    pub feature_ro_compat: u32,
    pub uuid: [u8; 16],
    pub nr_users: u32,
    pub max_transaction: u32,
    pub max_trans_data: u32,
    pub checksum_type: u8,
    pub num_fc_blocks: u32,
    pub checksum: u32,
    raw: Box<[u8; JOURNAL_SB_SIZE]>,
}

fn bad(what: String) -> Error {
    Error::Corrupt(Corrupt::Journal(what))
}

impl JournalSuperblock {
    /// What mke2fs writes for a fresh internal journal of `maxlen` blocks: v2,
    /// clean (start 0), next transaction 1, no features, one user.
    pub fn new_internal(block_size: u32, maxlen: u32, uuid: [u8; 16]) -> Self {
        JournalSuperblock {
            blocktype: BLOCKTYPE_SUPERBLOCK_V2,
            block_size,
            maxlen,
            first: 1,
            sequence: 1,
            start: 0,
            errno: 0,
            feature_compat: 0,
            feature_incompat: 0,
            feature_ro_compat: 0,
            uuid,
            nr_users: 1,
            max_transaction: 0,
            max_trans_data: 0,
            checksum_type: 0,
            num_fc_blocks: 0,
            checksum: 0,
            raw: Box::new([0u8; JOURNAL_SB_SIZE]),
        }
    }

    pub fn has_csum(&self) -> bool {
        self.feature_incompat & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) != 0
    }

    /// Splits the fields out without checking them; v1 superblocks have no
    /// feature words or limits, which read as 0.
    fn read_fields(b: &[u8; JOURNAL_SB_SIZE]) -> Self {
        let blocktype = be32(b, H_BLOCKTYPE);
        let v2 = blocktype == BLOCKTYPE_SUPERBLOCK_V2;
        let word = |off: usize| if v2 { be32(b, off) } else { 0 };
        JournalSuperblock {
            blocktype,
            block_size: be32(b, S_BLOCKSIZE),
            maxlen: be32(b, S_MAXLEN),
            first: be32(b, S_FIRST),
            sequence: be32(b, S_SEQUENCE),
            start: be32(b, S_START),
            errno: be_i32(b, S_ERRNO),
            feature_compat: word(S_FEATURE_COMPAT),
            feature_incompat: word(S_FEATURE_INCOMPAT),
            feature_ro_compat: word(S_FEATURE_RO_COMPAT),
            uuid: bytes16(b, S_UUID),
            nr_users: word(S_NR_USERS),
            max_transaction: word(S_MAX_TRANSACTION),
            max_trans_data: word(S_MAX_TRANS_DATA),
            checksum_type: u8_at(b, S_CHECKSUM_TYPE),
            num_fc_blocks: word(S_NUM_FC_BLKS),
            checksum: be32(b, S_CHECKSUM),
            raw: Box::new(*b),
        }
    }

    /// Parses and validates against the filesystem's block size.
    pub fn parse(b: &[u8; JOURNAL_SB_SIZE], fs_block_size: u32) -> Result<Self> {
        let magic = be32(b, H_MAGIC);
        if magic != JBD2_MAGIC {
            return Err(bad(format!("h_magic {magic:#010x} != {JBD2_MAGIC:#010x}")));
        }
        let blocktype = be32(b, H_BLOCKTYPE);
        if blocktype != BLOCKTYPE_SUPERBLOCK_V1 && blocktype != BLOCKTYPE_SUPERBLOCK_V2 {
            return Err(bad(format!("h_blocktype {blocktype} is not a superblock (3 or 4)")));
        }
        let jsb = Self::read_fields(b);
        if jsb.block_size != fs_block_size {
            return Err(bad(format!("s_blocksize {} != filesystem block size {fs_block_size}", jsb.block_size)));
        }
        if jsb.maxlen < MIN_JOURNAL_BLOCKS {
            return Err(bad(format!("s_maxlen {} < {MIN_JOURNAL_BLOCKS}", jsb.maxlen)));
        }
        if jsb.first == 0 || jsb.first >= jsb.maxlen {
            return Err(bad(format!("s_first {} outside 1..{}", jsb.first, jsb.maxlen)));
        }
        if jsb.start != 0 && (jsb.start < jsb.first || jsb.start >= jsb.maxlen) {
            return Err(bad(format!("s_start {} outside {}..{}", jsb.start, jsb.first, jsb.maxlen)));
        }
        let unknown = jsb.feature_incompat & !SUPPORTED_INCOMPAT;
        if unknown != 0 {
            return Err(Unsupported::Features { word: FeatureWord::JournalIncompat, bits: unknown }.into());
        }
        if jsb.has_csum() {
            if jsb.checksum_type != CSUM_TYPE_CRC32C {
                return Err(bad(format!("s_checksum_type {} is not crc32c (4)", jsb.checksum_type)));
            }
            let computed = journal_sb_checksum(b);
            if computed != jsb.checksum {
                return Err(Error::Corrupt(Corrupt::Checksum {
                    object: ChecksumObject::JournalSuperblock,
                    stored: jsb.checksum,
                    computed,
                }));
            }
        }
        Ok(jsb)
    }

    /// Serializes, recomputing the checksum when a checksum feature is on.
    pub fn to_bytes(&self) -> [u8; JOURNAL_SB_SIZE] {
        let mut b = *self.raw;
        put_be32(&mut b, H_MAGIC, JBD2_MAGIC);
        put_be32(&mut b, H_BLOCKTYPE, self.blocktype);
        put_be32(&mut b, H_SEQUENCE, 0);
        put_be32(&mut b, S_BLOCKSIZE, self.block_size);
        put_be32(&mut b, S_MAXLEN, self.maxlen);
        put_be32(&mut b, S_FIRST, self.first);
        put_be32(&mut b, S_SEQUENCE, self.sequence);
        put_be32(&mut b, S_START, self.start);
        put_be_i32(&mut b, S_ERRNO, self.errno);
        put_be32(&mut b, S_FEATURE_COMPAT, self.feature_compat);
        put_be32(&mut b, S_FEATURE_INCOMPAT, self.feature_incompat);
        put_be32(&mut b, S_FEATURE_RO_COMPAT, self.feature_ro_compat);
        put_bytes(&mut b, S_UUID, &self.uuid);
        put_be32(&mut b, S_NR_USERS, self.nr_users);
        put_be32(&mut b, S_MAX_TRANSACTION, self.max_transaction);
        put_be32(&mut b, S_MAX_TRANS_DATA, self.max_trans_data);
        put_u8(&mut b, S_CHECKSUM_TYPE, self.checksum_type);
        put_be32(&mut b, S_NUM_FC_BLKS, self.num_fc_blocks);
        let c = if self.has_csum() { journal_sb_checksum(&b) } else { self.checksum };
        put_be32(&mut b, S_CHECKSUM, c);
        debug_assert_eq!(Self::read_fields(&b), self.as_written(&b, c), "journal superblock does not read back as written");
        b
    }

    /// What [`JournalSuperblock::to_bytes`] stored in `b` with `checksum`.
    fn as_written(&self, b: &[u8; JOURNAL_SB_SIZE], checksum: u32) -> Self {
        let v2 = self.blocktype == BLOCKTYPE_SUPERBLOCK_V2;
        // A v1 superblock's words are written but read as 0: v1 has none.
        let word = |v: u32| if v2 { v } else { 0 };
        JournalSuperblock {
            feature_compat: word(self.feature_compat),
            feature_incompat: word(self.feature_incompat),
            feature_ro_compat: word(self.feature_ro_compat),
            nr_users: word(self.nr_users),
            max_transaction: word(self.max_transaction),
            max_trans_data: word(self.max_trans_data),
            num_fc_blocks: word(self.num_fc_blocks),
            checksum,
            raw: Box::new(*b),
            ..self.clone()
        }
    }
}

/// Checksum of a serialized journal superblock (the stored checksum is skipped).
pub fn journal_sb_checksum(b: &[u8; JOURNAL_SB_SIZE]) -> u32 {
    let c = crc32c_raw(CRC32C_INITIAL, &b[..S_CHECKSUM]);
    let c = crc32c_raw(c, &[0; 4]);
    crc32c_raw(c, &b[S_CHECKSUM + 4..])
}

#[cfg(test)]
mod tests {
    use super::*;

    const MKE2FS: &[u8; 1024] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.journal_sb");
    const UUID: [u8; 16] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00];

    #[test]
    fn matches_what_mke2fs_writes() {
        let j = JournalSuperblock::parse(MKE2FS, 4096).unwrap();
        assert_eq!((j.maxlen, j.first, j.sequence, j.start, j.nr_users), (1024, 1, 1, 0, 1));
        assert_eq!(j.uuid, UUID);
        assert_eq!(&JournalSuperblock::new_internal(4096, 1024, UUID).to_bytes(), MKE2FS);
        assert_eq!(&j.to_bytes(), MKE2FS);
    }

    #[test]
    fn checksum_v3_round_trip_and_mismatch() {
        let mut j = JournalSuperblock::new_internal(1024, 4096, UUID);
        j.feature_incompat = INCOMPAT_64BIT | INCOMPAT_CSUM_V3;
        j.checksum_type = CSUM_TYPE_CRC32C;
        let mut b = j.to_bytes();
        let back = JournalSuperblock::parse(&b, 1024).unwrap();
        assert_eq!(back.checksum, journal_sb_checksum(&b));
        b[S_SEQUENCE + 3] ^= 1;
        assert!(matches!(
            JournalSuperblock::parse(&b, 1024),
            Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::JournalSuperblock, .. }))
        ));
    }

    #[test]
    fn bad_fields_are_named() {
        let err = |b: &[u8; 1024], bs| match JournalSuperblock::parse(b, bs) {
            Err(Error::Corrupt(Corrupt::Journal(what))) => what,
            other => panic!("expected a journal corruption, got {other:?}"),
        };
        assert_eq!(err(MKE2FS, 1024), "s_blocksize 4096 != filesystem block size 1024");
        let mut b = *MKE2FS;
        b[S_FIRST..S_FIRST + 4].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(err(&b, 4096), "s_first 0 outside 1..1024");
        let mut b = *MKE2FS;
        b[S_FEATURE_INCOMPAT + 3] = 0x40;
        assert!(matches!(JournalSuperblock::parse(&b, 4096), Err(Error::Unsupported(_))));
    }
}
