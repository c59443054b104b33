//! Linear directory blocks: a chain of variable-length entries that exactly
//! covers the block, ending (with metadata_csum) in a fake 12-byte entry that
//! holds the block's checksum.
//!
//! Entry layout: 0x0 inode u32, 0x4 rec_len u16, 0x6 name_len u8, 0x7 file_type
//! u8, 0x8 name. rec_len >= round4(8 + name_len). With 64 KiB blocks a rec_len
//! of 65536 does not fit in 16 bits: it is stored as 65535 (or 0), and larger
//! lengths keep bits 16-17 in the two low bits, which are otherwise always 0.

use crate::format::bytes::*;
use crate::format::checksum::crc32c_raw;

/// Size of the checksum tail: {inode 0, rec_len 12, name_len 0, type 0xDE, crc u32}.
pub const TAIL_LEN: usize = 12;
/// `file_type` of the tail entry.
pub const TAIL_FILE_TYPE: u8 = 0xDE;
/// Bytes before the name.
pub const ENTRY_HEADER_LEN: usize = 8;
/// Longest name.
pub const MAX_NAME_LEN: usize = 255;

const DE_INODE: usize = 0x0;
const DE_REC_LEN: usize = 0x4;
const DE_NAME_LEN: usize = 0x6;
const DE_FILE_TYPE: usize = 0x7;
const TAIL_CSUM: usize = 0x8;

/// `file_type` values.
pub const FT_UNKNOWN: u8 = 0;
pub const FT_REG_FILE: u8 = 1;
pub const FT_DIR: u8 = 2;
pub const FT_CHRDEV: u8 = 3;
pub const FT_BLKDEV: u8 = 4;
pub const FT_FIFO: u8 = 5;
pub const FT_SOCK: u8 = 6;
pub const FT_SYMLINK: u8 = 7;

/// One live entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub inode: u32,
    pub file_type: u8,
    pub name: Vec<u8>,
}

/// Smallest rec_len an entry with this name needs.
pub fn min_rec_len(name_len: usize) -> usize {
    (ENTRY_HEADER_LEN + name_len + 3) & !3
}

/// Decodes a stored rec_len for a block of `block_size` bytes.
pub fn rec_len_from_disk(raw: u16, block_size: usize) -> usize {
    let raw = usize::from(raw);
    if block_size < 65536 {
        raw
    } else if raw == 65535 || raw == 0 {
        block_size
    } else {
        (raw & 65532) | ((raw & 3) << 16)
    }
}

/// Encodes a rec_len (a multiple of 4, at most 65536) for storage.
pub fn rec_len_to_disk(len: usize) -> u16 {
    // 65536 and up do not fit: 65535 is the escape for a whole 64 KiB block.
    let raw = u16::try_from(len).unwrap_or(u16::MAX);
    // A 64 KiB block is the only size that decodes the escape and the low bits.
    debug_assert_eq!(rec_len_from_disk(raw, 65536), len, "rec_len {len} has no encoding");
    raw
}

/// The `name_len` of a name that can be stored: 1..=MAX_NAME_LEN bytes.
fn stored_name_len(name: &[u8]) -> Option<u8> {
    u8::try_from(name.len()).ok().filter(|&n| n != 0 && usize::from(n) <= MAX_NAME_LEN)
}

/// Why a block is not a valid linear directory block (a message naming the field).
pub type DirBlockError = String;

/// A parsed block: live entries plus the stored tail checksum, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirBlock {
    pub entries: Vec<DirEntry>,
    pub stored_checksum: Option<u32>,
}

/// Parses a linear directory block. With `has_tail`, the last 12 bytes must be the
/// checksum tail and the entries must end exactly where it begins.
pub fn parse_block(b: &[u8], has_tail: bool) -> Result<DirBlock, DirBlockError> {
    let bs = b.len();
    let limit = if has_tail {
        bs.checked_sub(TAIL_LEN).ok_or_else(|| format!("block of {bs} bytes has no room for a tail"))?
    } else {
        bs
    };
    let mut entries = Vec::new();
    let mut off = 0usize;
    while off < limit {
        if off + ENTRY_HEADER_LEN > limit {
            return Err(format!("entry at {off} has no room for its 8-byte header"));
        }
        let rec_len = rec_len_from_disk(le16(b, off + DE_REC_LEN), bs);
        let name_len = usize::from(u8_at(b, off + DE_NAME_LEN));
        let inode = le32(b, off + DE_INODE);
        if rec_len % 4 != 0 || rec_len < ENTRY_HEADER_LEN {
            return Err(format!("entry at {off}: rec_len {rec_len} is not a multiple of 4 >= 8"));
        }
        if off + rec_len > limit {
            return Err(format!("entry at {off}: rec_len {rec_len} runs past {limit}"));
        }
        if inode != 0 && rec_len < min_rec_len(name_len) {
            return Err(format!("entry at {off}: rec_len {rec_len} too short for name_len {name_len}"));
        }
        if inode != 0 {
            if name_len == 0 {
                return Err(format!("entry at {off}: inode {inode} with an empty name"));
            }
            let name = b[off + ENTRY_HEADER_LEN..off + ENTRY_HEADER_LEN + name_len].to_vec();
            entries.push(DirEntry { inode, file_type: u8_at(b, off + DE_FILE_TYPE), name });
        }
        off += rec_len;
    }
    let stored_checksum = if has_tail {
        Some(read_tail(b).ok_or_else(|| format!("no checksum tail at {limit}"))?)
    } else {
        None
    };
    Ok(DirBlock { entries, stored_checksum })
}

/// The checksum stored in the block's last 12 bytes, if they are a checksum tail.
pub fn read_tail(b: &[u8]) -> Option<u32> {
    let t = &b[b.len().checked_sub(TAIL_LEN)?..];
    let ok = le32(t, DE_INODE) == 0
        && usize::from(le16(t, DE_REC_LEN)) == TAIL_LEN
        && u8_at(t, DE_NAME_LEN) == 0
        && u8_at(t, DE_FILE_TYPE) == TAIL_FILE_TYPE;
    ok.then(|| le32(t, TAIL_CSUM))
}

/// Checksum of a directory leaf block: raw crc32c from the inode seed over
/// everything before the tail.
pub fn block_checksum(b: &[u8], ino_seed: u32) -> u32 {
    crc32c_raw(ino_seed, &b[..b.len().saturating_sub(TAIL_LEN)])
}

/// Builds a directory block holding `entries` in order; the last entry's
/// rec_len runs to the tail (or the end). An empty list gives one empty entry
/// spanning the block, as in lost+found's spare blocks. Returns `None` if the
/// entries do not fit.
pub fn build_block(block_size: usize, entries: &[DirEntry], csum_seed: Option<u32>) -> Option<Vec<u8>> {
    let mut b = vec![0u8; block_size];
    let limit = if csum_seed.is_some() { block_size.checked_sub(TAIL_LEN)? } else { block_size };
    let mut off = 0usize;
    if entries.is_empty() {
        put_le16(&mut b, DE_REC_LEN, rec_len_to_disk(limit));
    }
    for (i, e) in entries.iter().enumerate() {
        let name_len = stored_name_len(&e.name)?;
        let need = min_rec_len(e.name.len());
        let rec_len = if i + 1 == entries.len() { limit.checked_sub(off)? } else { need };
        if rec_len < need || off + rec_len > limit {
            return None;
        }
        put_le32(&mut b, off + DE_INODE, e.inode);
        put_le16(&mut b, off + DE_REC_LEN, rec_len_to_disk(rec_len));
        put_u8(&mut b, off + DE_NAME_LEN, name_len);
        put_u8(&mut b, off + DE_FILE_TYPE, e.file_type);
        put_bytes(&mut b, off + ENTRY_HEADER_LEN, &e.name);
        off += rec_len;
    }
    if let Some(seed) = csum_seed {
        put_le16(&mut b, limit + DE_REC_LEN, rec_len_to_disk(TAIL_LEN));
        put_u8(&mut b, limit + DE_FILE_TYPE, TAIL_FILE_TYPE);
        let c = block_checksum(&b, seed);
        put_le32(&mut b, limit + TAIL_CSUM, c);
    }
    debug_assert_eq!(
        parse_block(&b, csum_seed.is_some()),
        // Entries with inode 0 are written but are dead records: they list as nothing.
        Ok(DirBlock {
            entries: entries.iter().filter(|e| e.inode != 0).cloned().collect(),
            stored_checksum: csum_seed.map(|s| block_checksum(&b, s)),
        }),
        "built directory block does not parse back to its entries"
    );
    Some(b)
}

/// Where entries may live in a block: everything, or everything before the tail.
fn entry_limit(b: &[u8], has_tail: bool) -> usize {
    if has_tail {
        b.len().saturating_sub(TAIL_LEN)
    } else {
        b.len()
    }
}

/// (offset, rec_len) of every record of an already validated block, stopping
/// at the first record that does not fit (so a bad block cannot loop).
fn records(b: &[u8], has_tail: bool) -> Vec<(usize, usize)> {
    let limit = entry_limit(b, has_tail);
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + ENTRY_HEADER_LEN <= limit {
        let rec_len = rec_len_from_disk(le16(b, off + DE_REC_LEN), b.len());
        if rec_len < ENTRY_HEADER_LEN || rec_len % 4 != 0 || off + rec_len > limit {
            break;
        }
        out.push((off, rec_len));
        off += rec_len;
    }
    out
}

/// Bytes a record really uses: nothing for a dead (inode 0) record.
fn used_len(b: &[u8], off: usize) -> usize {
    if le32(b, off + DE_INODE) == 0 {
        0
    } else {
        min_rec_len(usize::from(u8_at(b, off + DE_NAME_LEN)))
    }
}

fn name_at(b: &[u8], off: usize) -> &[u8] {
    let len = usize::from(u8_at(b, off + DE_NAME_LEN));
    b.get(off + ENTRY_HEADER_LEN..off + ENTRY_HEADER_LEN + len).unwrap_or(&[])
}

fn rec_len_at(b: &[u8], off: usize) -> usize {
    rec_len_from_disk(le16(b, off + DE_REC_LEN), b.len())
}

fn put_entry(b: &mut [u8], off: usize, rec_len: usize, name_len: u8, e: &DirEntry) {
    put_le32(b, off + DE_INODE, e.inode);
    put_le16(b, off + DE_REC_LEN, rec_len_to_disk(rec_len));
    put_u8(b, off + DE_NAME_LEN, name_len);
    put_u8(b, off + DE_FILE_TYPE, e.file_type);
    put_bytes(b, off + ENTRY_HEADER_LEN, &e.name);
    debug_assert_eq!(
        (le32(b, off + DE_INODE), rec_len_at(b, off), u8_at(b, off + DE_FILE_TYPE), name_at(b, off)),
        (e.inode, rec_len, e.file_type, &e.name[..]),
        "entry at {off} does not read back as written"
    );
}

/// Longest name-bearing record that [`insert_entry`] could place in this block,
/// as a rec_len (0 when nothing fits).
pub fn largest_free(b: &[u8], has_tail: bool) -> usize {
    records(b, has_tail).iter().map(|&(off, rec)| rec - used_len(b, off)).max().unwrap_or(0)
}

/// Inserts `e` in place, the way ext4 does: into a dead record big enough, or
/// by splitting the slack off the end of a live one. Returns false if no
/// record has room (the caller then appends a block).
pub fn insert_entry(b: &mut [u8], has_tail: bool, e: &DirEntry) -> bool {
    let Some(name_len) = stored_name_len(&e.name) else { return false };
    let need = min_rec_len(e.name.len());
    for (off, rec) in records(b, has_tail) {
        let used = used_len(b, off);
        if rec - used < need {
            continue;
        }
        if used == 0 {
            put_entry(b, off, rec, name_len, e);
        } else {
            put_le16(b, off + DE_REC_LEN, rec_len_to_disk(used));
            debug_assert_eq!(rec_len_at(b, off), used, "shrunk record at {off}");
            put_entry(b, off + used, rec - used, name_len, e);
        }
        return true;
    }
    false
}

/// Removes the live entry named `name`: its record merges into the one before
/// it, or (first in the block) becomes a dead record. Returns its inode.
pub fn remove_entry(b: &mut [u8], has_tail: bool, name: &[u8]) -> Option<u32> {
    let recs = records(b, has_tail);
    for (i, &(off, rec)) in recs.iter().enumerate() {
        let ino = le32(b, off + DE_INODE);
        if ino == 0 || name_at(b, off) != name {
            continue;
        }
        match i.checked_sub(1).map(|p| recs[p]) {
            Some((prev_off, prev_rec)) => {
                put_le16(b, prev_off + DE_REC_LEN, rec_len_to_disk(prev_rec + rec));
                debug_assert_eq!(rec_len_at(b, prev_off), prev_rec + rec, "merged record at {prev_off}");
            }
            None => {
                put_le32(b, off + DE_INODE, 0);
                debug_assert_eq!(le32(b, off + DE_INODE), 0, "dead record at {off}");
            }
        }
        return Some(ino);
    }
    None
}

/// Points the live entry named `name` at another inode (".." on a directory move).
pub fn set_entry_inode(b: &mut [u8], has_tail: bool, name: &[u8], ino: u32, file_type: u8) -> bool {
    for (off, _) in records(b, has_tail) {
        if le32(b, off + DE_INODE) != 0 && name_at(b, off) == name {
            put_le32(b, off + DE_INODE, ino);
            put_u8(b, off + DE_FILE_TYPE, file_type);
            debug_assert_eq!((le32(b, off + DE_INODE), u8_at(b, off + DE_FILE_TYPE)), (ino, file_type), "entry at {off}");
            return true;
        }
    }
    false
}

/// Recomputes the checksum stored in the tail of a block that has one.
pub fn set_tail_checksum(b: &mut [u8], ino_seed: u32) {
    let Some(limit) = b.len().checked_sub(TAIL_LEN) else { return };
    put_le32(b, limit + DE_INODE, 0);
    put_le16(b, limit + DE_REC_LEN, rec_len_to_disk(TAIL_LEN));
    put_u8(b, limit + DE_NAME_LEN, 0);
    put_u8(b, limit + DE_FILE_TYPE, TAIL_FILE_TYPE);
    let c = block_checksum(b, ino_seed);
    put_le32(b, limit + TAIL_CSUM, c);
    debug_assert_eq!(read_tail(b), Some(block_checksum(b, ino_seed)), "checksum tail does not read back");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checksum::{fs_seed_from_uuid, inode_seed};

    const UUID: [u8; 16] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00];
    const ROOT: &[u8; 4096] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.root_dir");
    const LPF: &[u8; 4096] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.lpf_dir");

    fn entry(inode: u32, ft: u8, name: &str) -> DirEntry {
        DirEntry { inode, file_type: ft, name: name.as_bytes().to_vec() }
    }

    #[test]
    fn parses_mke2fs_root_and_checks_its_tail() {
        let d = parse_block(ROOT, true).unwrap();
        assert_eq!(d.entries, vec![entry(2, FT_DIR, "."), entry(2, FT_DIR, ".."), entry(11, FT_DIR, "lost+found")]);
        let seed = inode_seed(fs_seed_from_uuid(&UUID), 2, 0);
        assert_eq!(d.stored_checksum, Some(block_checksum(ROOT, seed)));
    }

    #[test]
    fn builds_the_same_bytes_mke2fs_does() {
        let fs = fs_seed_from_uuid(&UUID);
        let root = build_block(4096, &[entry(2, FT_DIR, "."), entry(2, FT_DIR, ".."), entry(11, FT_DIR, "lost+found")], Some(inode_seed(fs, 2, 0)));
        assert_eq!(root.as_deref(), Some(&ROOT[..]));
        let lpf = build_block(4096, &[entry(11, FT_DIR, "."), entry(2, FT_DIR, "..")], Some(inode_seed(fs, 11, 0)));
        assert_eq!(lpf.as_deref(), Some(&LPF[..]));
    }

    #[test]
    fn sixty_four_k_blocks_encode_a_full_block_rec_len() {
        let b = build_block(65536, &[], None).unwrap();
        assert_eq!(le16(&b, DE_REC_LEN), 65535);
        assert_eq!(parse_block(&b, false).unwrap().entries, vec![]);
        assert_eq!(rec_len_from_disk(0, 65536), 65536);
        assert_eq!(rec_len_from_disk(65535, 4096), 65535, "only 64K blocks use the escape");
        let with_tail = build_block(65536, &[entry(5, FT_REG_FILE, "x")], Some(1)).unwrap();
        assert_eq!(parse_block(&with_tail, true).unwrap().entries, vec![entry(5, FT_REG_FILE, "x")]);
    }

    #[test]
    fn in_place_insert_and_remove_merge_records() {
        let seed = 77;
        let mut b = build_block(1024, &[entry(2, FT_DIR, "."), entry(2, FT_DIR, "..")], Some(seed)).unwrap();
        let big = largest_free(&b, true);
        assert_eq!(big, 1024 - 12 - 12 - 12);
        assert!(insert_entry(&mut b, true, &entry(20, FT_REG_FILE, "alpha")));
        assert!(insert_entry(&mut b, true, &entry(21, FT_REG_FILE, "beta")));
        set_tail_checksum(&mut b, seed);
        let parsed = parse_block(&b, true).unwrap();
        assert_eq!(parsed.entries.len(), 4);
        assert_eq!(parsed.stored_checksum, Some(block_checksum(&b, seed)));
        assert_eq!(remove_entry(&mut b, true, b"alpha"), Some(20));
        assert_eq!(remove_entry(&mut b, true, b"alpha"), None);
        let names: Vec<Vec<u8>> = parse_block(&b, true).unwrap().entries.into_iter().map(|e| e.name).collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"beta".to_vec()]);
        assert!(set_entry_inode(&mut b, true, b"..", 99, FT_DIR));
        assert_eq!(parse_block(&b, true).unwrap().entries[1].inode, 99);
        assert_eq!(remove_entry(&mut b, true, b"beta"), Some(21));
        assert_eq!(largest_free(&b, true), big, "deleting merged the space back");
        // A first record removed becomes dead and is reused.
        let mut e = build_block(1024, &[entry(5, FT_REG_FILE, "x")], None).unwrap();
        assert_eq!(remove_entry(&mut e, false, b"x"), Some(5));
        assert!(parse_block(&e, false).unwrap().entries.is_empty());
        assert!(insert_entry(&mut e, false, &entry(6, FT_REG_FILE, "y")));
        assert_eq!(parse_block(&e, false).unwrap().entries, vec![entry(6, FT_REG_FILE, "y")]);
        let mut full = build_block(64, &[entry(5, FT_REG_FILE, &"n".repeat(40))], None).unwrap();
        assert!(!insert_entry(&mut full, false, &entry(6, FT_REG_FILE, &"m".repeat(20))));
    }

    #[test]
    fn malformed_blocks_name_the_problem() {
        let mut b = ROOT.to_vec();
        b[DE_REC_LEN] = 10; // rec_len 10 for "."
        assert!(parse_block(&b, true).unwrap_err().contains("rec_len 10"));
        let mut b = ROOT.to_vec();
        b[4096 - 12 + DE_FILE_TYPE] = 0;
        assert_eq!(parse_block(&b, true).unwrap_err(), "no checksum tail at 4084");
        let mut b = ROOT.to_vec();
        b[24 + DE_REC_LEN..24 + DE_REC_LEN + 2].copy_from_slice(&4072u16.to_le_bytes());
        assert!(parse_block(&b, true).unwrap_err().contains("runs past 4084"));
        assert!(build_block(64, &[entry(1, 1, &"n".repeat(60))], None).is_none(), "too long for the block");
    }
}
