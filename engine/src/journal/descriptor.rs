//! The descriptor block: which filesystem blocks the log blocks after it are
//! copies of. After the header come tags; the first is followed by the 16-byte
//! journal UUID, the rest say SAME_UUID; LAST_TAG ends the list. With csum v3
//! a tag is {blocknr_lo, flags, blocknr_hi, crc32c of the logged copy}, and the
//! block ends in a tail checksum.
//!
//! A copy whose first four bytes are the jbd2 magic would look like a log
//! block to recovery, so it is logged with those bytes zeroed and the tag
//! says ESCAPE; the checksum covers the copy as logged.

use crate::format::bytes::{be16, be32, put_be32, put_bytes};
use crate::format::checksum::crc32c_raw;
use crate::format::journal_superblock::JBD2_MAGIC;

use super::block::{set_tail, tail_ok, Header, LogCsum, LogFormat, BLOCKTYPE_DESCRIPTOR, HEADER_LEN};

pub const FLAG_ESCAPE: u16 = 1;
pub const FLAG_SAME_UUID: u16 = 2;
pub const FLAG_DELETED: u16 = 4;
pub const FLAG_LAST_TAG: u16 = 8;
/// Bytes of the UUID after a tag without SAME_UUID.
const UUID_LEN: usize = 16;

const T_BLOCKNR: usize = 0;
/// v2: 16-bit checksum; v3: the high half of the 32-bit flags word (zero).
const T_CSUM16: usize = 4;
/// Flags as jbd2 reads them: a be16 at +6 in both tag layouts.
const T_FLAGS: usize = 6;
const T_BLOCKNR_HIGH: usize = 8;
const T_CSUM32: usize = 12;

/// One tag: the next log block is a copy of `fs_block`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tag {
    pub fs_block: u64,
    /// The copy's first four bytes were the magic and are logged as zero.
    pub escaped: bool,
    /// Checksum of the logged copy (only the low 16 bits count under v2).
    pub checksum: u32,
}

/// The checksum a tag carries for `logged` (the copy as it sits in the log).
pub fn tag_checksum(fmt: &LogFormat, tid: u32, logged: &[u8]) -> u32 {
    let c = crc32c_raw(fmt.seed, &tid.to_be_bytes());
    crc32c_raw(c, logged)
}

/// Whether a tag's stored checksum matches the logged copy.
pub fn tag_checksum_ok(fmt: &LogFormat, tid: u32, tag: &Tag, logged: &[u8]) -> bool {
    let c = tag_checksum(fmt, tid, logged);
    match fmt.csum {
        LogCsum::None => true,
        LogCsum::V2 => tag.checksum & 0xFFFF == c & 0xFFFF,
        LogCsum::V3 => tag.checksum == c,
    }
}

/// Whether a block starts with the magic, so its logged copy must be escaped.
pub fn needs_escape(block: &[u8]) -> bool {
    block.len() >= 4 && be32(block, 0) == JBD2_MAGIC
}

/// Zeroes the magic at the start of a copy; true if it had to.
pub fn escape(copy: &mut [u8]) -> bool {
    if needs_escape(copy) {
        put_be32(copy, 0, 0);
        return true;
    }
    false
}

/// Puts the magic back into an escaped copy.
pub fn unescape(copy: &mut [u8]) {
    put_be32(copy, 0, JBD2_MAGIC);
}

/// How many tags fit in one descriptor block.
pub fn capacity(fmt: &LogFormat) -> usize {
    let tb = fmt.tag_bytes();
    let space = fmt.block_size.saturating_sub(HEADER_LEN + fmt.tail_len());
    match space.checked_sub(tb + UUID_LEN) {
        Some(rest) => 1 + rest / tb,
        None => 0,
    }
}

/// A descriptor block of transaction `tid` for `tags` (at most [`capacity`]).
pub fn write(fmt: &LogFormat, tid: u32, tags: &[Tag]) -> Vec<u8> {
    assert!(!tags.is_empty() && tags.len() <= capacity(fmt), "{} tags for a descriptor of {}", tags.len(), capacity(fmt));
    let mut b = vec![0u8; fmt.block_size];
    Header { blocktype: BLOCKTYPE_DESCRIPTOR, sequence: tid }.write(&mut b);
    let tb = fmt.tag_bytes();
    let mut at = HEADER_LEN;
    for (i, t) in tags.iter().enumerate() {
        let mut flags = 0u16;
        if t.escaped {
            flags |= FLAG_ESCAPE;
        }
        if i > 0 {
            flags |= FLAG_SAME_UUID;
        }
        if i + 1 == tags.len() {
            flags |= FLAG_LAST_TAG;
        }
        put_be32(&mut b, at + T_BLOCKNR, (t.fs_block & 0xFFFF_FFFF) as u32);
        b[at + T_FLAGS..at + T_FLAGS + 2].copy_from_slice(&flags.to_be_bytes());
        if fmt.is64 {
            put_be32(&mut b, at + T_BLOCKNR_HIGH, (t.fs_block >> 32) as u32);
        }
        match fmt.csum {
            LogCsum::V3 => put_be32(&mut b, at + T_CSUM32, t.checksum),
            LogCsum::V2 => b[at + T_CSUM16..at + T_CSUM16 + 2].copy_from_slice(&((t.checksum & 0xFFFF) as u16).to_be_bytes()),
            LogCsum::None => {}
        }
        at += tb;
        if i == 0 {
            put_bytes(&mut b, at, &fmt.uuid);
            at += UUID_LEN;
        }
    }
    set_tail(fmt, &mut b);
    b
}

/// Where each tag of descriptor `b` starts, walked as jbd2's recovery
/// walks them: a UUID after each tag without SAME_UUID, LAST_TAG or the
/// tail ends the list. The flags of each tag decide where the next is.
fn tag_offsets(fmt: &LogFormat, b: &[u8]) -> Vec<usize> {
    let tb = fmt.tag_bytes();
    let limit = b.len().min(fmt.block_size).saturating_sub(fmt.tail_len());
    let mut at = HEADER_LEN;
    let mut offsets = Vec::new();
    while at + tb <= limit {
        offsets.push(at);
        let flags = be16(b, at + T_FLAGS);
        at += tb;
        if flags & FLAG_SAME_UUID == 0 {
            at += UUID_LEN;
        }
        if flags & FLAG_LAST_TAG != 0 {
            break;
        }
    }
    offsets
}

/// Stores `checksum` in the `index`th tag of descriptor `b` (the low 16
/// bits under v2), leaving every other byte as it was; the tail is the
/// caller's to reseal. False when the block has no such tag or the log
/// no tag checksums.
pub fn set_tag_checksum(fmt: &LogFormat, b: &mut [u8], index: usize, checksum: u32) -> bool {
    let Some(&at) = tag_offsets(fmt, b).get(index) else { return false };
    match fmt.csum {
        LogCsum::V3 => put_be32(b, at + T_CSUM32, checksum),
        LogCsum::V2 => b[at + T_CSUM16..at + T_CSUM16 + 2].copy_from_slice(&((checksum & 0xFFFF) as u16).to_be_bytes()),
        LogCsum::None => return false,
    }
    true
}

/// The tags of a descriptor block, the way jbd2's recovery walks them.
/// Errors name what is wrong (a bad tail checksum, a block too small).
pub fn parse(fmt: &LogFormat, b: &[u8]) -> Result<Vec<Tag>, String> {
    if b.len() != fmt.block_size {
        return Err(format!("descriptor of {} bytes in a {}-byte log", b.len(), fmt.block_size));
    }
    if !tail_ok(fmt, b) {
        return Err("descriptor tail checksum mismatch".into());
    }
    let tags: Vec<Tag> = tag_offsets(fmt, b)
        .into_iter()
        .map(|at| {
            let lo = u64::from(be32(b, at + T_BLOCKNR));
            let hi = if fmt.is64 { u64::from(be32(b, at + T_BLOCKNR_HIGH)) } else { 0 };
            let checksum = match fmt.csum {
                LogCsum::V3 => be32(b, at + T_CSUM32),
                LogCsum::V2 => u32::from(be16(b, at + T_CSUM16)),
                LogCsum::None => 0,
            };
            Tag { fs_block: lo | (hi << 32), escaped: be16(b, at + T_FLAGS) & FLAG_ESCAPE != 0, checksum }
        })
        .collect();
    if tags.is_empty() {
        return Err("descriptor without a tag".into());
    }
    Ok(tags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checksum::CRC32C_INITIAL;

    fn fmt(bs: usize) -> LogFormat {
        let uuid = *b"journal-uuid-abc";
        LogFormat { block_size: bs, csum: LogCsum::V3, is64: true, seed: crc32c_raw(CRC32C_INITIAL, &uuid), uuid }
    }

    #[test]
    fn round_trip_with_64bit_numbers_and_the_uuid_once() {
        let f = fmt(1024);
        let tags: Vec<Tag> = (0..capacity(&f) as u64)
            .map(|i| Tag { fs_block: (i << 33) | (i + 7), escaped: i % 3 == 0, checksum: 0xDEAD_0000 + i as u32 })
            .collect();
        assert_eq!(tags.len(), 62, "1 KiB: 12-byte header, 32 for the first tag + uuid, 16 each, 4-byte tail");
        let b = write(&f, 41, &tags);
        assert_eq!(Header::parse(&b), Some(Header { blocktype: BLOCKTYPE_DESCRIPTOR, sequence: 41 }));
        assert_eq!(&b[28..44], &f.uuid, "the uuid follows the first tag");
        assert_eq!(parse(&f, &b).unwrap(), tags);
        let one = write(&f, 1, &tags[..1]);
        assert_eq!(parse(&f, &one).unwrap(), tags[..1], "LAST_TAG stops the walk");
    }

    #[test]
    fn set_tag_checksum_changes_that_tag_only() {
        for csum in [LogCsum::V3, LogCsum::V2] {
            let f = LogFormat { csum, ..fmt(1024) };
            let tags: Vec<Tag> = (0..3).map(|i| Tag { fs_block: 50 + i, escaped: false, checksum: 0x1111 * (i as u32 + 1) }).collect();
            let mut b = write(&f, 5, &tags);
            assert!(set_tag_checksum(&f, &mut b, 1, 0xABCD_1234));
            assert!(!set_tag_checksum(&f, &mut b, 3, 1), "there is no fourth tag");
            set_tail(&f, &mut b);
            let kept = if csum == LogCsum::V3 { 0xABCD_1234 } else { 0x1234 };
            let mut want = tags.clone();
            want[1].checksum = kept;
            assert_eq!(parse(&f, &b).unwrap(), want, "{csum:?}");
        }
        let none = LogFormat { csum: LogCsum::None, ..fmt(1024) };
        let mut b = write(&none, 5, &[Tag { fs_block: 1, escaped: false, checksum: 0 }]);
        assert!(!set_tag_checksum(&none, &mut b, 0, 7), "a log without checksums has no field for one");
    }

    #[test]
    fn a_changed_byte_fails_the_tail() {
        let f = fmt(4096);
        let mut b = write(&f, 9, &[Tag { fs_block: 100, escaped: false, checksum: 1 }]);
        b[13] ^= 0x40;
        assert!(parse(&f, &b).unwrap_err().contains("checksum"));
    }

    #[test]
    fn escape_zeroes_only_the_magic_and_checksums_cover_the_logged_copy() {
        let f = fmt(1024);
        let mut copy = vec![7u8; 1024];
        put_be32(&mut copy, 0, JBD2_MAGIC);
        let original = copy.clone();
        assert!(escape(&mut copy));
        assert_eq!(&copy[..4], &[0; 4]);
        assert_eq!(copy[4..], original[4..]);
        let tag = Tag { fs_block: 5, escaped: true, checksum: tag_checksum(&f, 3, &copy) };
        assert!(tag_checksum_ok(&f, 3, &tag, &copy));
        assert!(!tag_checksum_ok(&f, 4, &tag, &copy), "the tid is part of the checksum");
        unescape(&mut copy);
        assert_eq!(copy, original);
        let mut plain = vec![1u8; 1024];
        assert!(!escape(&mut plain), "other blocks are logged as they are");
    }

    #[test]
    fn thirty_two_bit_tags_without_checksums() {
        let f = LogFormat { csum: LogCsum::None, is64: false, ..fmt(1024) };
        assert_eq!(capacity(&f), 1 + (1024 - 12 - 8 - 16) / 8);
        let tags = [Tag { fs_block: 9, escaped: false, checksum: 0 }, Tag { fs_block: 10, escaped: true, checksum: 0 }];
        assert_eq!(parse(&f, &write(&f, 2, &tags)).unwrap(), tags);
    }
}
