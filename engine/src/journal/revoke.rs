//! The revoke block: filesystem blocks whose earlier logged copies must not
//! be replayed (the block was freed and may hold anything now). Layout: the
//! header, r_count @0x0C = bytes used including the 16-byte header, then
//! block numbers (be64 with INCOMPAT_64BIT, else be32), and the tail checksum.
//!
//! Recovery drops a copy logged in transaction T when a revoke of that block
//! was committed in any transaction >= T.

use crate::format::bytes::{be32, be64, put_be32, put_be64};

use super::block::{set_tail, tail_ok, Header, LogFormat, BLOCKTYPE_REVOKE};

const R_COUNT: usize = 0x0C;
/// Bytes before the first record.
pub const REVOKE_HEADER_LEN: usize = 16;

fn record_len(fmt: &LogFormat) -> usize {
    if fmt.is64 {
        8
    } else {
        4
    }
}

/// Records one revoke block holds.
pub fn capacity(fmt: &LogFormat) -> usize {
    fmt.block_size.saturating_sub(REVOKE_HEADER_LEN + fmt.tail_len()) / record_len(fmt)
}

/// A revoke block of transaction `tid` for `blocks` (at most [`capacity`]).
pub fn write(fmt: &LogFormat, tid: u32, blocks: &[u64]) -> Vec<u8> {
    assert!(!blocks.is_empty() && blocks.len() <= capacity(fmt), "{} revokes for a block of {}", blocks.len(), capacity(fmt));
    let mut b = vec![0u8; fmt.block_size];
    Header { blocktype: BLOCKTYPE_REVOKE, sequence: tid }.write(&mut b);
    let rl = record_len(fmt);
    let mut at = REVOKE_HEADER_LEN;
    for &blk in blocks {
        if fmt.is64 {
            put_be64(&mut b, at, blk);
        } else {
            debug_assert!(blk <= u64::from(u32::MAX), "block {blk} needs 64-bit revoke records");
            put_be32(&mut b, at, blk as u32);
        }
        at += rl;
    }
    put_be32(&mut b, R_COUNT, at as u32);
    set_tail(fmt, &mut b);
    b
}

/// The block numbers a revoke block lists.
pub fn parse(fmt: &LogFormat, b: &[u8]) -> Result<Vec<u64>, String> {
    if b.len() != fmt.block_size {
        return Err(format!("revoke block of {} bytes in a {}-byte log", b.len(), fmt.block_size));
    }
    if !tail_ok(fmt, b) {
        return Err("revoke block tail checksum mismatch".into());
    }
    let count = be32(b, R_COUNT) as usize;
    let max = fmt.block_size - fmt.tail_len();
    if count > max || count < REVOKE_HEADER_LEN {
        return Err(format!("revoke r_count {count} outside {REVOKE_HEADER_LEN}..={max}"));
    }
    let rl = record_len(fmt);
    let mut at = REVOKE_HEADER_LEN;
    let mut out = Vec::new();
    while at + rl <= count {
        out.push(if fmt.is64 { be64(b, at) } else { u64::from(be32(b, at)) });
        at += rl;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::block::LogCsum;

    fn fmt() -> LogFormat {
        LogFormat { block_size: 1024, csum: LogCsum::V3, is64: true, seed: 0x5555_AAAA, uuid: [2; 16] }
    }

    #[test]
    fn round_trip_and_r_count_includes_the_header() {
        let f = fmt();
        assert_eq!(capacity(&f), (1024 - 16 - 4) / 8);
        let blocks: Vec<u64> = (0..capacity(&f) as u64).map(|i| (i << 40) + 3).collect();
        let b = write(&f, 12, &blocks);
        assert_eq!(be32(&b, R_COUNT) as usize, 16 + 8 * blocks.len());
        assert_eq!(parse(&f, &b).unwrap(), blocks);
        let small = LogFormat { is64: false, ..f };
        assert_eq!(parse(&small, &write(&small, 1, &[7, 8])).unwrap(), vec![7, 8]);
    }

    #[test]
    fn bad_tail_or_count_is_refused() {
        let f = fmt();
        let mut b = write(&f, 3, &[1, 2, 3]);
        b[20] ^= 1;
        assert!(parse(&f, &b).unwrap_err().contains("checksum"));
        let mut b = write(&f, 3, &[1]);
        put_be32(&mut b, R_COUNT, 5000);
        set_tail(&f, &mut b);
        assert!(parse(&f, &b).unwrap_err().contains("r_count"));
    }
}
