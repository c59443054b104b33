//! htree index blocks: the dx root (a directory's block 0) and interior
//! dx nodes, with the checksum tail metadata_csum adds.
//!
//! dx root:
//! ```text
//! 0x00  "." dirent: inode u32, rec_len u16 = 12, name_len 1, file_type 2, ".\0\0\0"
//! 0x0C  ".." dirent: inode u32, rec_len u16 = block - 12, name_len 2, file_type 2, "..\0\0"
//! 0x18  dx_root_info: reserved_zero u32, hash_version u8, info_length u8 = 8,
//!       indirect_levels u8, unused_flags u8
//! 0x20  limit u16, count u16, block u32   (entry 0: hashes below entry 1's)
//! 0x28  (hash u32, block u32) x (count - 1), sorted by hash
//! ```
//! dx node: a dirent of inode 0 spanning the block (8 bytes), then limit,
//! count and entries from 0x08 as above.
//! dx tail (metadata_csum): right after `limit` entries, reserved u32 and
//! checksum u32; `limit` leaves room for it. The checksum is raw crc32c
//! from the inode's seed over the block up to the last used entry, then
//! the tail's reserved word, then four zero bytes (ext4_dx_csum).
//! A stored hash's low bit says the previous block holds the same hash too
//! (a collision split across leaves); dx_probe compares stored hashes whole.

use crate::format::bytes::{le16, le32, put_le16, put_le32};
use crate::format::checksum::crc32c_raw;

pub const ROOT_COUNT_AT: usize = 0x20;
pub const NODE_COUNT_AT: usize = 0x08;
const ROOT_INFO_AT: usize = 0x18;
const ROOT_INFO_LEN: u8 = 8;
const ENTRY_LEN: usize = 8;
const TAIL_LEN: usize = 8;
/// The collision bit of a stored hash.
pub const HASH_CONTINUED: u32 = 1;
const FT_DIR: u8 = 2;

/// One index entry: blocks holding names whose hash is at least `hash`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DxEntry {
    pub hash: u32,
    /// Logical block of the directory.
    pub block: u32,
}

/// A parsed dx root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxRoot {
    pub dot: u32,
    pub dotdot: u32,
    pub hash_version: u8,
    /// 0: entries point at leaves; 1 or 2: at dx nodes.
    pub indirect_levels: u8,
    /// entries[0].hash is 0 (not stored).
    pub entries: Vec<DxEntry>,
}

/// Entries an index block holds: from `count_at` to the end, less the tail.
pub fn limit(block_size: usize, count_at: usize, csum: bool) -> usize {
    (block_size - count_at) / ENTRY_LEN - usize::from(csum)
}

fn read_entries(b: &[u8], at: usize, csum: bool) -> Result<Vec<DxEntry>, String> {
    let lim = usize::from(le16(b, at));
    let count = usize::from(le16(b, at + 2));
    if lim != limit(b.len(), at, csum) {
        return Err(format!("dx limit {lim}, a {}-byte block holds {}", b.len(), limit(b.len(), at, csum)));
    }
    if count == 0 || count > lim {
        return Err(format!("dx count {count} outside 1..={lim}"));
    }
    let mut out = vec![DxEntry { hash: 0, block: le32(b, at + 4) }];
    for i in 1..count {
        let e = at + i * ENTRY_LEN;
        out.push(DxEntry { hash: le32(b, e), block: le32(b, e + 4) });
    }
    if out.windows(2).any(|w| w[1].hash & !HASH_CONTINUED < w[0].hash & !HASH_CONTINUED) {
        return Err("dx entries out of hash order".into());
    }
    Ok(out)
}

fn write_entries(b: &mut [u8], at: usize, entries: &[DxEntry], csum: bool) -> Result<(), String> {
    let lim = limit(b.len(), at, csum);
    if entries.is_empty() || entries.len() > lim {
        return Err(format!("{} dx entries, a block holds 1..={lim}", entries.len()));
    }
    let narrow = |n: usize| u16::try_from(n).map_err(|_| format!("{n} dx entries do not fit a 16-bit count"));
    put_le16(b, at, narrow(lim)?);
    put_le16(b, at + 2, narrow(entries.len())?);
    put_le32(b, at + 4, entries[0].block);
    for (i, e) in entries.iter().enumerate().skip(1) {
        put_le32(b, at + i * ENTRY_LEN, e.hash);
        put_le32(b, at + i * ENTRY_LEN + 4, e.block);
    }
    Ok(())
}

/// Parses a dx root (`csum`: metadata_csum, the tail is there).
pub fn parse_root(b: &[u8], csum: bool) -> Result<DxRoot, String> {
    if b.len() < 0x40 {
        return Err("block too small for a dx root".into());
    }
    if le16(b, 4) != 12 || b[6] != 1 || b[8] != b'.' {
        return Err("dx root does not start with \".\"".into());
    }
    if b[12 + 6] != 2 || &b[12 + 8..12 + 10] != b".." {
        return Err("dx root's second entry is not \"..\"".into());
    }
    if le32(b, ROOT_INFO_AT) != 0 || b[ROOT_INFO_AT + 5] != ROOT_INFO_LEN {
        return Err("dx root info is not the 8 bytes ext4 writes".into());
    }
    let levels = b[ROOT_INFO_AT + 6];
    if levels > 2 {
        return Err(format!("dx root with {levels} indirect levels (3 needs largedir)"));
    }
    Ok(DxRoot { dot: le32(b, 0), dotdot: le32(b, 12), hash_version: b[ROOT_INFO_AT + 4], indirect_levels: levels, entries: read_entries(b, ROOT_COUNT_AT, csum)? })
}

/// Whether `b` starts as a dx node does: an empty record spanning the block.
pub fn is_node(b: &[u8]) -> bool {
    le32(b, 0) == 0 && crate::format::dirent::rec_len_from_disk(le16(b, 4), b.len()) == b.len()
}

/// Parses a dx node's entries.
pub fn parse_node(b: &[u8], csum: bool) -> Result<Vec<DxEntry>, String> {
    if !is_node(b) {
        return Err("dx node does not start with an empty record spanning the block".into());
    }
    read_entries(b, NODE_COUNT_AT, csum)
}

/// ext4_dx_csum over a finished index block.
pub fn checksum(b: &[u8], count_at: usize, seed: u32) -> u32 {
    let count = usize::from(le16(b, count_at + 2));
    let tail = count_at + usize::from(le16(b, count_at)) * ENTRY_LEN;
    let c = crc32c_raw(seed, &b[..count_at + count * ENTRY_LEN]);
    let c = crc32c_raw(c, &b[tail..tail + 4]);
    crc32c_raw(c, &[0; 4])
}

/// The checksum stored in an index block's tail.
pub fn stored_checksum(b: &[u8], count_at: usize) -> u32 {
    le32(b, count_at + usize::from(le16(b, count_at)) * ENTRY_LEN + 4)
}

fn seal(b: &mut [u8], count_at: usize, seed: Option<u32>) {
    if let Some(seed) = seed {
        let tail = count_at + usize::from(le16(b, count_at)) * ENTRY_LEN;
        debug_assert!(tail + TAIL_LEN <= b.len());
        let c = checksum(b, count_at, seed);
        put_le32(b, tail + 4, c);
    }
}

/// Writes a dx root; `seed` is the inode's checksum seed under metadata_csum.
pub fn write_root(root: &DxRoot, block_size: usize, seed: Option<u32>) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; block_size];
    put_le32(&mut b, 0, root.dot);
    put_le16(&mut b, 4, 12);
    b[6] = 1;
    b[7] = FT_DIR;
    b[8] = b'.';
    put_le32(&mut b, 12, root.dotdot);
    put_le16(&mut b, 12 + 4, crate::format::dirent::rec_len_to_disk(block_size - 12));
    b[12 + 6] = 2;
    b[12 + 7] = FT_DIR;
    b[12 + 8..12 + 10].copy_from_slice(b"..");
    b[ROOT_INFO_AT + 4] = root.hash_version;
    b[ROOT_INFO_AT + 5] = ROOT_INFO_LEN;
    b[ROOT_INFO_AT + 6] = root.indirect_levels;
    write_entries(&mut b, ROOT_COUNT_AT, &root.entries, seed.is_some())?;
    seal(&mut b, ROOT_COUNT_AT, seed);
    Ok(b)
}

/// Writes a dx node.
pub fn write_node(entries: &[DxEntry], block_size: usize, seed: Option<u32>) -> Result<Vec<u8>, String> {
    let mut b = vec![0u8; block_size];
    put_le16(&mut b, 4, crate::format::dirent::rec_len_to_disk(block_size));
    write_entries(&mut b, NODE_COUNT_AT, entries, seed.is_some())?;
    seal(&mut b, NODE_COUNT_AT, seed);
    Ok(b)
}

/// The entry a name of `hash` (even, as name hashes are) goes through: the
/// last whose stored hash is at most `hash` (dx_probe's binary search). The
/// stored collision bit counts: a name whose hash starts a continued entry
/// routes to the leaf before it, and lookups then follow the run.
pub fn route(entries: &[DxEntry], hash: u32) -> usize {
    entries.get(1..).map_or(0, |rest| rest.partition_point(|e| e.hash <= hash))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: u32) -> Vec<DxEntry> {
        (0..n).map(|i| DxEntry { hash: if i == 0 { 0 } else { i * 1000 }, block: i + 1 }).collect()
    }

    #[test]
    fn roots_and_nodes_round_trip_with_and_without_the_tail() {
        for seed in [None, Some(0x1234_5678)] {
            let root = DxRoot { dot: 12, dotdot: 2, hash_version: 1, indirect_levels: 0, entries: entries(5) };
            let b = write_root(&root, 4096, seed).unwrap();
            assert_eq!(parse_root(&b, seed.is_some()).unwrap(), root);
            let n = write_node(&entries(9), 1024, seed).unwrap();
            assert_eq!(parse_node(&n, seed.is_some()).unwrap(), entries(9));
            if let Some(s) = seed {
                assert_eq!(stored_checksum(&b, ROOT_COUNT_AT), checksum(&b, ROOT_COUNT_AT, s));
                assert_eq!(stored_checksum(&n, NODE_COUNT_AT), checksum(&n, NODE_COUNT_AT, s));
            }
        }
        assert_eq!(limit(4096, ROOT_COUNT_AT, false), 508);
        assert_eq!(limit(4096, ROOT_COUNT_AT, true), 507);
        assert_eq!(limit(1024, NODE_COUNT_AT, true), 126);
        assert!(write_node(&entries(128), 1024, None).is_err(), "127 fit, not 128");
    }

    #[test]
    fn routing_takes_the_last_entry_at_or_below_the_hash() {
        let e = entries(4);
        assert_eq!(route(&e, 0), 0);
        assert_eq!(route(&e, 999), 0);
        assert_eq!(route(&e, 1000), 1);
        let continued = [DxEntry { hash: 0, block: 1 }, DxEntry { hash: 1000 | HASH_CONTINUED, block: 2 }];
        assert_eq!(route(&continued, 1000), 0, "a continued entry's hash is past the names it continues");
        assert_eq!(route(&continued, 1002), 1);
        assert_eq!(route(&e, u32::MAX), 3);
    }

    #[test]
    fn damaged_blocks_are_refused() {
        let root = DxRoot { dot: 12, dotdot: 2, hash_version: 1, indirect_levels: 0, entries: entries(3) };
        let mut b = write_root(&root, 4096, None).unwrap();
        b[ROOT_INFO_AT + 6] = 3;
        assert!(parse_root(&b, false).is_err());
        let mut b = write_root(&root, 4096, None).unwrap();
        put_le16(&mut b, ROOT_COUNT_AT + 2, 0);
        assert!(parse_root(&b, false).is_err());
        let mut n = write_node(&entries(3), 4096, None).unwrap();
        put_le32(&mut n, NODE_COUNT_AT + 8, 5000);
        assert!(parse_node(&n, false).unwrap_err().contains("hash order"));
    }
}
