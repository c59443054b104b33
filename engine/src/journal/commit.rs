//! The commit block: the transaction it names is whole once this block is
//! durable. Layout (big-endian): header, 0x0C h_chksum_type u8, 0x0D
//! h_chksum_size u8, 0x10 h_chksum[0], 0x30 h_commit_sec u64, 0x38
//! h_commit_nsec u32. Under csum v2/v3 the type and size bytes are 0 and
//! h_chksum[0] = `raw(seed, block)` with that word zero.

use crate::format::bytes::{be32, be64, put_be32, put_be64};
use crate::format::checksum::crc32c_raw;

use super::block::{Header, LogFormat, BLOCKTYPE_COMMIT};

const H_CHKSUM_TYPE: usize = 0x0C;
const H_CHKSUM_SIZE: usize = 0x0D;
const H_CHKSUM: usize = 0x10;
const H_COMMIT_SEC: usize = 0x30;
const H_COMMIT_NSEC: usize = 0x38;

/// What a commit block says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    pub tid: u32,
    pub sec: u64,
    pub nsec: u32,
}

fn checksum(seed: u32, b: &[u8]) -> u32 {
    let c = crc32c_raw(seed, &b[..H_CHKSUM]);
    let c = crc32c_raw(c, &[0u8; 4]);
    crc32c_raw(c, &b[H_CHKSUM + 4..])
}

/// The commit block of `c`.
pub fn write(fmt: &LogFormat, c: &Commit) -> Vec<u8> {
    let mut b = vec![0u8; fmt.block_size];
    Header { blocktype: BLOCKTYPE_COMMIT, sequence: c.tid }.write(&mut b);
    put_be64(&mut b, H_COMMIT_SEC, c.sec);
    put_be32(&mut b, H_COMMIT_NSEC, c.nsec);
    seal(fmt, &mut b);
    b
}

/// Stores a commit block's checksum for what it now holds (no-op without
/// checksums, or for a block too short to carry one): what writing one
/// does last, and what a tool that edits a logged commit block needs.
pub fn seal(fmt: &LogFormat, b: &mut [u8]) {
    if fmt.has_csum() && b.len() >= H_CHKSUM + 4 {
        let sum = checksum(fmt.seed, b);
        put_be32(b, H_CHKSUM, sum);
    }
}

/// Reads a commit block, verifying its checksum when the log has them.
pub fn parse(fmt: &LogFormat, b: &[u8]) -> Result<Commit, String> {
    if b.len() != fmt.block_size || b.len() < H_COMMIT_NSEC + 4 {
        return Err(format!("commit block of {} bytes in a {}-byte log", b.len(), fmt.block_size));
    }
    let h = Header::parse(b).filter(|h| h.blocktype == BLOCKTYPE_COMMIT).ok_or("not a commit block")?;
    if fmt.has_csum() {
        let stored = be32(b, H_CHKSUM);
        let computed = checksum(fmt.seed, b);
        if stored != computed {
            return Err(format!("commit block of transaction {} checksum {stored:#010x} != {computed:#010x}", h.sequence));
        }
        if b[H_CHKSUM_TYPE] != 0 || b[H_CHKSUM_SIZE] != 0 {
            return Err(format!("commit block of transaction {} has a v1 checksum type under csum v2/v3", h.sequence));
        }
    }
    Ok(Commit { tid: h.sequence, sec: be64(b, H_COMMIT_SEC), nsec: be32(b, H_COMMIT_NSEC) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::block::LogCsum;

    fn fmt() -> LogFormat {
        LogFormat { block_size: 4096, csum: LogCsum::V3, is64: true, seed: 0xABCD_EF01, uuid: [1; 16] }
    }

    #[test]
    fn round_trip_and_field_offsets() {
        let c = Commit { tid: 0x0102_0304, sec: 1_234_567_890, nsec: 999 };
        let b = write(&fmt(), &c);
        assert_eq!(&b[8..12], &[1, 2, 3, 4]);
        assert_eq!(be64(&b, 0x30), 1_234_567_890);
        assert_eq!(parse(&fmt(), &b).unwrap(), c);
    }

    #[test]
    fn checksum_is_over_the_block_with_its_word_zero() {
        let f = fmt();
        let mut b = write(&f, &Commit { tid: 5, sec: 1, nsec: 2 });
        let stored = be32(&b, H_CHKSUM);
        put_be32(&mut b, H_CHKSUM, 0);
        assert_eq!(crc32c_raw(f.seed, &b), stored);
        put_be32(&mut b, H_CHKSUM, stored);
        b[4000] = 1;
        assert!(parse(&f, &b).unwrap_err().contains("checksum"), "a torn commit block is not a commit");
        assert!(parse(&LogFormat { csum: LogCsum::None, ..f }, &b).is_ok(), "without checksums any commit header counts");
    }
}
