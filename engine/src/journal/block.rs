//! What every jbd2 log block shares: the 12-byte big-endian header {magic,
//! blocktype, sequence}, the 4-byte tail checksum of descriptor and revoke
//! blocks, and the log's format (block size, checksum version, tag width) as
//! the journal superblock's features fix it.

use crate::format::bytes::{be32, put_be32};
use crate::format::checksum::{crc32c_raw, CRC32C_INITIAL};
use crate::format::journal_superblock::{
    JournalSuperblock, INCOMPAT_64BIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3, JBD2_MAGIC,
};

/// `h_blocktype` values of log blocks (the superblock types live with it).
pub const BLOCKTYPE_DESCRIPTOR: u32 = 1;
pub const BLOCKTYPE_COMMIT: u32 = 2;
pub const BLOCKTYPE_REVOKE: u32 = 5;
/// Bytes of {magic, blocktype, sequence}.
pub const HEADER_LEN: usize = 12;
/// Bytes of the checksum tail of descriptor and revoke blocks (csum v2/v3).
pub const TAIL_LEN: usize = 4;

const H_MAGIC: usize = 0;
const H_BLOCKTYPE: usize = 4;
const H_SEQUENCE: usize = 8;

/// Which checksums log blocks carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogCsum {
    None,
    /// 16-bit tag checksums.
    V2,
    /// 32-bit tag checksums in 16-byte tags.
    V3,
}

/// How the log's blocks are laid out, from the journal superblock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogFormat {
    pub block_size: usize,
    pub csum: LogCsum,
    /// Tags carry the high 32 bits of the block number (INCOMPAT_64BIT).
    pub is64: bool,
    /// `raw(~0, journal uuid)`: every log checksum starts here.
    pub seed: u32,
    pub uuid: [u8; 16],
}

impl LogFormat {
    pub fn from_jsb(jsb: &JournalSuperblock) -> Self {
        let csum = if jsb.feature_incompat & INCOMPAT_CSUM_V3 != 0 {
            LogCsum::V3
        } else if jsb.feature_incompat & INCOMPAT_CSUM_V2 != 0 {
            LogCsum::V2
        } else {
            LogCsum::None
        };
        LogFormat {
            block_size: jsb.block_size as usize,
            csum,
            is64: jsb.feature_incompat & INCOMPAT_64BIT != 0,
            seed: crc32c_raw(CRC32C_INITIAL, &jsb.uuid),
            uuid: jsb.uuid,
        }
    }

    pub fn has_csum(&self) -> bool {
        self.csum != LogCsum::None
    }

    /// Bytes of one descriptor tag (journal_tag_bytes in jbd2).
    pub fn tag_bytes(&self) -> usize {
        match (self.csum, self.is64) {
            (LogCsum::V3, _) => 16,
            (LogCsum::V2, true) => 14,
            (LogCsum::V2, false) => 10,
            (LogCsum::None, true) => 12,
            (LogCsum::None, false) => 8,
        }
    }

    /// Bytes at the end of descriptor and revoke blocks kept for the tail.
    pub fn tail_len(&self) -> usize {
        if self.has_csum() {
            TAIL_LEN
        } else {
            0
        }
    }
}

/// A log block's header, if it starts with the jbd2 magic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub blocktype: u32,
    pub sequence: u32,
}

impl Header {
    pub fn parse(b: &[u8]) -> Option<Header> {
        if b.len() < HEADER_LEN || be32(b, H_MAGIC) != JBD2_MAGIC {
            return None;
        }
        Some(Header { blocktype: be32(b, H_BLOCKTYPE), sequence: be32(b, H_SEQUENCE) })
    }

    pub fn write(&self, b: &mut [u8]) {
        put_be32(b, H_MAGIC, JBD2_MAGIC);
        put_be32(b, H_BLOCKTYPE, self.blocktype);
        put_be32(b, H_SEQUENCE, self.sequence);
    }
}

/// The checksum of a descriptor or revoke block: `raw(seed, block)` with the
/// tail's own four bytes read as zero.
pub fn tail_checksum(seed: u32, b: &[u8]) -> u32 {
    let at = b.len().saturating_sub(TAIL_LEN);
    let c = crc32c_raw(seed, &b[..at]);
    crc32c_raw(c, &[0u8; TAIL_LEN])
}

/// Stores the tail checksum (no-op without checksums).
pub fn set_tail(fmt: &LogFormat, b: &mut [u8]) {
    if fmt.has_csum() {
        let c = tail_checksum(fmt.seed, b);
        let at = b.len().saturating_sub(TAIL_LEN);
        put_be32(b, at, c);
    }
}

/// Whether the tail checksum matches (always, without checksums).
pub fn tail_ok(fmt: &LogFormat, b: &[u8]) -> bool {
    if !fmt.has_csum() {
        return true;
    }
    let at = b.len().saturating_sub(TAIL_LEN);
    be32(b, at) == tail_checksum(fmt.seed, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt() -> LogFormat {
        LogFormat { block_size: 1024, csum: LogCsum::V3, is64: true, seed: 0x1234_5678, uuid: [5; 16] }
    }

    #[test]
    fn header_round_trip_and_foreign_blocks() {
        let mut b = vec![0u8; 1024];
        assert_eq!(Header::parse(&b), None, "zeros are not a log block");
        Header { blocktype: BLOCKTYPE_COMMIT, sequence: 77 }.write(&mut b);
        assert_eq!(&b[..4], &[0xC0, 0x3B, 0x39, 0x98], "big-endian magic");
        assert_eq!(Header::parse(&b), Some(Header { blocktype: BLOCKTYPE_COMMIT, sequence: 77 }));
    }

    #[test]
    fn tail_checksum_covers_the_block_but_not_itself() {
        let f = fmt();
        let mut b = vec![0xA5u8; 1024];
        set_tail(&f, &mut b);
        assert!(tail_ok(&f, &b));
        let stored = be32(&b, 1020);
        b[1020..].copy_from_slice(&[0; 4]);
        assert_eq!(tail_checksum(f.seed, &b), stored, "the tail reads as zero while summing");
        put_be32(&mut b, 1020, stored);
        b[100] ^= 1;
        assert!(!tail_ok(&f, &b));
        assert!(tail_ok(&LogFormat { csum: LogCsum::None, ..f }, &b), "no checksum, nothing to fail");
    }

    #[test]
    fn tag_sizes_follow_jbd2() {
        let f = fmt();
        assert_eq!(f.tag_bytes(), 16);
        assert_eq!(LogFormat { is64: false, ..f }.tag_bytes(), 16, "v3 tags are 16 bytes either way");
        assert_eq!(LogFormat { csum: LogCsum::None, ..f }.tag_bytes(), 12);
        assert_eq!(LogFormat { csum: LogCsum::None, is64: false, ..f }.tag_bytes(), 8);
        assert_eq!(LogFormat { csum: LogCsum::V2, is64: false, ..f }.tag_bytes(), 10);
    }
}
