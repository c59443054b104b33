//! Extent tree nodes: a 12-byte header followed by 12-byte entries, either
//! leaves (logical -> physical runs) or indexes (pointers to child nodes).
//! The root lives in the inode's 60-byte `i_block` (room for 4 entries); other
//! nodes fill a block and end with a crc32c tail right after `eh_max` entries.
//!
//! Parsing checks each node on its own (magic, counts, depth, sorted entries);
//! walking a whole tree, with its cross-node checks, is the reader's job.

use crate::error::{ChecksumObject, Corrupt, Error, Result};
use crate::format::bytes::*;
use crate::format::checksum::crc32c_raw;
use crate::format::InodeNumber;

/// `eh_magic`.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// Size of the header and of each entry.
pub const HEADER_LEN: usize = 12;
pub const ENTRY_LEN: usize = 12;
/// Deepest tree the kernel builds (and accepts).
pub const MAX_DEPTH: u16 = 5;
/// Longest initialized extent; lengths above this encode unwritten extents.
pub const MAX_INIT_LEN: u32 = 32768;
/// Longest unwritten extent.
pub const MAX_UNWRITTEN_LEN: u32 = 32767;
/// Entries that fit in `i_block`.
pub const ROOT_MAX_ENTRIES: u16 = 4;

const EH_MAGIC: usize = 0x0;
const EH_ENTRIES: usize = 0x2;
const EH_MAX: usize = 0x4;
const EH_DEPTH: usize = 0x6;
const EH_GENERATION: usize = 0x8;

const EE_BLOCK: usize = 0x0;
const EE_LEN: usize = 0x4;
const EE_START_HI: usize = 0x6;
const EE_START_LO: usize = 0x8;

const EI_BLOCK: usize = 0x0;
const EI_LEAF_LO: usize = 0x4;
const EI_LEAF_HI: usize = 0x8;

/// Largest physical block number an extent can name (48 bits).
pub const MAX_PHYSICAL: u64 = (1 << 48) - 1;

/// Node header: 0x0 magic u16, 0x2 entries u16, 0x4 max u16, 0x6 depth u16, 0x8 generation u32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentHeader {
    pub entries: u16,
    pub max: u16,
    pub depth: u16,
    pub generation: u32,
}

/// Leaf entry: 0x0 first logical block u32, 0x4 len u16 (> 32768 = unwritten),
/// 0x6 physical start hi u16, 0x8 physical start lo u32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Extent {
    pub logical: u32,
    /// Blocks covered, 1..=32768 (1..=32767 when unwritten).
    pub len: u32,
    pub physical: u64,
    pub unwritten: bool,
}

impl Extent {
    /// One past the last logical block.
    pub fn logical_end(&self) -> u64 {
        u64::from(self.logical) + u64::from(self.len)
    }
}

/// Index entry: 0x0 first logical block u32, 0x4 child block lo u32, 0x8 child hi u16, 0xA unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentIndex {
    pub logical: u32,
    pub child: u64,
}

/// A parsed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtentNode {
    Leaf(Vec<Extent>),
    Index { depth: u16, children: Vec<ExtentIndex> },
}

fn bad(ino: InodeNumber, what: String) -> Error {
    Error::Corrupt(Corrupt::Extent { ino, what })
}

/// How many entries fit in a node of `len` bytes (with room for the tail in blocks).
pub fn capacity(len: usize) -> u16 {
    u16::try_from(len.saturating_sub(HEADER_LEN) / ENTRY_LEN).unwrap_or(u16::MAX)
}

/// The header's fields as stored, checked for nothing (not even the
/// magic): for tools that change nodes on purpose. None when `b` is too
/// short to hold a header.
pub fn stated_header(b: &[u8]) -> Option<ExtentHeader> {
    (b.len() >= HEADER_LEN).then(|| ExtentHeader {
        entries: le16(b, EH_ENTRIES),
        max: le16(b, EH_MAX),
        depth: le16(b, EH_DEPTH),
        generation: le32(b, EH_GENERATION),
    })
}

/// Parses the header of a node of `b.len()` bytes.
pub fn parse_header(b: &[u8], ino: InodeNumber) -> Result<ExtentHeader> {
    let Some(h) = stated_header(b) else {
        return Err(bad(ino, format!("node of {} bytes has no header", b.len())));
    };
    let magic = le16(b, EH_MAGIC);
    if magic != EXTENT_MAGIC {
        return Err(bad(ino, format!("eh_magic {magic:#06x} != {EXTENT_MAGIC:#06x}")));
    }
    let cap = capacity(b.len());
    if h.max > cap {
        return Err(bad(ino, format!("eh_max {} > {cap} entries that fit", h.max)));
    }
    if h.entries > h.max {
        return Err(bad(ino, format!("eh_entries {} > eh_max {}", h.entries, h.max)));
    }
    if h.depth > MAX_DEPTH {
        return Err(bad(ino, format!("eh_depth {} > {MAX_DEPTH}", h.depth)));
    }
    Ok(h)
}

/// Entry `i` of a node whose header said it has more than `i` entries (so
/// the bytes are there: [`parse_header`] bounds the count by the size).
fn entry(b: &[u8], i: usize) -> &[u8] {
    &b[HEADER_LEN + i * ENTRY_LEN..HEADER_LEN + (i + 1) * ENTRY_LEN]
}

/// First logical block of entry `i`, leaf or index alike: what a binary
/// search of a node compares.
pub fn entry_logical(b: &[u8], h: &ExtentHeader, i: usize) -> Option<u32> {
    (i < usize::from(h.entries)).then(|| le32(entry(b, i), EE_BLOCK))
}

/// Leaf entry `i`, with the checks [`parse_node`] makes on one entry.
pub fn leaf_entry(b: &[u8], h: &ExtentHeader, i: usize, ino: InodeNumber) -> Result<Extent> {
    if h.depth != 0 || i >= usize::from(h.entries) {
        return Err(bad(ino, format!("no leaf entry {i} in a depth-{} node of {} entries", h.depth, h.entries)));
    }
    let e = entry(b, i);
    let raw_len = u32::from(le16(e, EE_LEN));
    let (len, unwritten) = if raw_len > MAX_INIT_LEN { (raw_len - MAX_INIT_LEN, true) } else { (raw_len, false) };
    let ext = Extent { logical: le32(e, EE_BLOCK), len, physical: join64(le32(e, EE_START_LO), u32::from(le16(e, EE_START_HI))), unwritten };
    if ext.len == 0 {
        return Err(bad(ino, format!("extent {i} at logical {} has length 0", ext.logical)));
    }
    if ext.logical_end() > u64::from(u32::MAX) + 1 {
        return Err(bad(ino, format!("extent {i} runs past logical block 2^32")));
    }
    Ok(ext)
}

/// Index entry `i` of an index node.
pub fn index_entry(b: &[u8], h: &ExtentHeader, i: usize, ino: InodeNumber) -> Result<ExtentIndex> {
    if h.depth == 0 || i >= usize::from(h.entries) {
        return Err(bad(ino, format!("no index entry {i} in a depth-{} node of {} entries", h.depth, h.entries)));
    }
    let e = entry(b, i);
    Ok(ExtentIndex { logical: le32(e, EI_BLOCK), child: join64(le32(e, EI_LEAF_LO), u32::from(le16(e, EI_LEAF_HI))) })
}

/// Parses a node and checks that its entries are sorted and sane.
pub fn parse_node(b: &[u8], ino: InodeNumber) -> Result<(ExtentHeader, ExtentNode)> {
    let h = parse_header(b, ino)?;
    if h.depth == 0 {
        let mut out: Vec<Extent> = Vec::with_capacity(usize::from(h.entries));
        for i in 0..usize::from(h.entries) {
            let ext = leaf_entry(b, &h, i, ino)?;
            if let Some(prev) = out.last() {
                if u64::from(ext.logical) < prev.logical_end() {
                    return Err(bad(ino, format!("extent {i} at logical {} overlaps the one before", ext.logical)));
                }
            }
            out.push(ext);
        }
        Ok((h, ExtentNode::Leaf(out)))
    } else {
        let mut out: Vec<ExtentIndex> = Vec::with_capacity(usize::from(h.entries));
        for i in 0..usize::from(h.entries) {
            let idx = index_entry(b, &h, i, ino)?;
            if let Some(prev) = out.last() {
                if idx.logical <= prev.logical {
                    return Err(bad(ino, format!("index {i} at logical {} is not after the one before", idx.logical)));
                }
            }
            out.push(idx);
        }
        Ok((h, ExtentNode::Index { depth: h.depth, children: out }))
    }
}

/// Writes a node into `out` (60 bytes for the root, a block otherwise) with
/// `eh_max` = what fits. Returns an error if the entries do not fit.
pub fn write_node(out: &mut [u8], node: &ExtentNode, generation: u32) -> Result<ExtentHeader> {
    let max = if out.len() == 60 { ROOT_MAX_ENTRIES } else { capacity(out.len()) };
    let (depth, count) = match node {
        ExtentNode::Leaf(v) => (0u16, v.len()),
        ExtentNode::Index { depth, children } => (*depth, children.len()),
    };
    let entries = u16::try_from(count)
        .ok()
        .filter(|&n| n <= max)
        .ok_or_else(|| Error::InvalidArgument(format!("{count} extent entries do not fit a node of {max}")))?;
    let h = ExtentHeader { entries, max, depth, generation };
    put_le16(out, EH_MAGIC, EXTENT_MAGIC);
    put_le16(out, EH_ENTRIES, h.entries);
    put_le16(out, EH_MAX, h.max);
    put_le16(out, EH_DEPTH, h.depth);
    put_le32(out, EH_GENERATION, h.generation);
    for i in 0..count {
        let at = HEADER_LEN + i * ENTRY_LEN;
        let e = &mut out[at..at + ENTRY_LEN];
        match node {
            ExtentNode::Leaf(v) => {
                let x = v[i];
                let max_len = if x.unwritten { MAX_UNWRITTEN_LEN } else { MAX_INIT_LEN };
                let cannot = || Error::InvalidArgument(format!("extent {x:?} cannot be encoded"));
                if x.len == 0 || x.len > max_len || x.physical > MAX_PHYSICAL {
                    return Err(cannot());
                }
                let raw_len = if x.unwritten { x.len + MAX_INIT_LEN } else { x.len };
                let raw_len = u16::try_from(raw_len).map_err(|_| cannot())?;
                put_le32(e, EE_BLOCK, x.logical);
                put_le16(e, EE_LEN, raw_len);
                put_le16(e, EE_START_HI, lo16(hi32(x.physical)));
                put_le32(e, EE_START_LO, lo32(x.physical));
            }
            ExtentNode::Index { children, .. } => {
                let x = children[i];
                put_le32(e, EI_BLOCK, x.logical);
                put_le32(e, EI_LEAF_LO, lo32(x.child));
                put_le16(e, EI_LEAF_HI, lo16(hi32(x.child)));
                put_le16(e, EI_LEAF_HI + 2, 0);
            }
        }
    }
    debug_assert_eq!(parse_node(out, 0), Ok((h, node.clone())), "extent node does not parse back as written");
    Ok(h)
}

/// Offset of the checksum tail in a block node.
pub fn tail_offset(max: u16) -> usize {
    HEADER_LEN + usize::from(max) * ENTRY_LEN
}

/// Computes the tail checksum of an extent block (`ino_seed` = the owning inode's seed).
pub fn block_checksum(b: &[u8], max: u16, ino_seed: u32) -> u32 {
    crc32c_raw(ino_seed, &b[..tail_offset(max).min(b.len())])
}

/// Stores the tail checksum of a block node written by [`write_node`].
pub fn set_block_checksum(b: &mut [u8], ino_seed: u32) {
    let max = le16(b, EH_MAX);
    let c = block_checksum(b, max, ino_seed);
    put_le32(b, tail_offset(max), c);
    debug_assert_eq!(le32(b, tail_offset(max)), block_checksum(b, max, ino_seed), "extent tail does not read back");
}

/// Verifies the tail checksum of a block node whose header was already parsed.
pub fn verify_block_checksum(b: &[u8], h: &ExtentHeader, ino_seed: u32, ino: InodeNumber, block: u64) -> Result<()> {
    let at = tail_offset(h.max);
    if at + 4 > b.len() {
        return Err(bad(ino, format!("block {block}: no room for the checksum tail after {} entries", h.max)));
    }
    let stored = le32(b, at);
    let computed = block_checksum(b, h.max, ino_seed);
    if stored != computed {
        return Err(Error::Corrupt(Corrupt::Checksum {
            object: ChecksumObject::ExtentBlock { ino, block },
            stored,
            computed,
        }));
    }
    Ok(())
}

/// Splits a contiguous physical run into extents of at most [`MAX_INIT_LEN`] blocks.
///
/// # Panics
/// If the run does not end within logical block 2^32; mkfs's runs (directory
/// and journal blocks, counted in u32) always do.
pub fn extents_for_run(logical: u32, physical: u64, blocks: u64) -> Vec<Extent> {
    let mut out = Vec::new();
    let mut done = 0u64;
    while done < blocks {
        let len = u32::try_from(blocks - done).map_or(MAX_INIT_LEN, |rest| rest.min(MAX_INIT_LEN));
        let at = u32::try_from(done)
            .ok()
            .and_then(|d| logical.checked_add(d))
            .expect("the caller's run ends within logical block 2^32");
        out.push(Extent { logical: at, len, physical: physical + done, unwritten: false });
        done += u64::from(len);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checksum::{fs_seed_from_uuid, inode_seed};

    const ITABLE0: &[u8; 4096] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.itable0");

    fn i_block_of(ino: usize) -> &'static [u8] {
        let at = (ino - 1) * 256 + 0x28;
        &ITABLE0[at..at + 60]
    }

    #[test]
    fn parses_the_journal_inode_mke2fs_wrote() {
        let (h, node) = parse_node(i_block_of(8), 8).unwrap();
        assert_eq!((h.entries, h.max, h.depth), (3, 4, 0));
        let ExtentNode::Leaf(ext) = node else { panic!("depth 0 is a leaf") };
        // debugfs: (0-9):8-17, (10-24):19-33, (25-1023):162-1160
        let want = [(0, 10, 8), (10, 15, 19), (25, 999, 162)];
        for (e, (l, n, p)) in ext.iter().zip(want) {
            assert_eq!((e.logical, e.len, e.physical, e.unwritten), (l, n, p, false));
        }
    }

    #[test]
    fn leaf_and_index_round_trip_with_tail_checksum() {
        let mut root = [0u8; 60];
        let leaf = ExtentNode::Leaf(vec![
            Extent { logical: 0, len: 32768, physical: 1 << 40, unwritten: false },
            Extent { logical: 40000, len: 100, physical: 77, unwritten: true },
        ]);
        write_node(&mut root, &leaf, 0).unwrap();
        assert_eq!(parse_node(&root, 12).unwrap().1, leaf);

        let seed = inode_seed(fs_seed_from_uuid(&[3; 16]), 12, 0);
        let mut block = vec![0u8; 1024];
        let index = ExtentNode::Index { depth: 1, children: vec![ExtentIndex { logical: 0, child: 500 }, ExtentIndex { logical: 9, child: 501 }] };
        let h = write_node(&mut block, &index, 0).unwrap();
        assert_eq!(h.max, 84, "(1024 - 12) / 12");
        set_block_checksum(&mut block, seed);
        verify_block_checksum(&block, &h, seed, 12, 99).unwrap();
        assert_eq!(parse_node(&block, 12).unwrap().1, index);
        block[20] ^= 1;
        assert!(matches!(
            verify_block_checksum(&block, &h, seed, 12, 99),
            Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::ExtentBlock { ino: 12, block: 99 }, .. }))
        ));
    }

    #[test]
    fn malformed_nodes_are_rejected_with_the_field() {
        let mut root = [0u8; 60];
        write_node(&mut root, &ExtentNode::Leaf(vec![Extent { logical: 5, len: 3, physical: 9, unwritten: false }]), 0).unwrap();
        let err = |b: &[u8]| match parse_node(b, 4) {
            Err(Error::Corrupt(Corrupt::Extent { ino: 4, what })) => what,
            other => panic!("expected an extent corruption, got {other:?}"),
        };
        let mut b = root;
        b[0] = 0;
        assert!(err(&b).starts_with("eh_magic"));
        let mut b = root;
        b[EH_MAX] = 5;
        assert_eq!(err(&b), "eh_max 5 > 4 entries that fit");
        let mut b = root;
        b[EH_ENTRIES] = 4;
        assert!(err(&b).starts_with("extent 1"), "a zeroed second entry has length 0");
        let mut b = root;
        b[EH_DEPTH] = 6;
        assert_eq!(err(&b), "eh_depth 6 > 5");
    }

    #[test]
    fn long_runs_split_at_32768() {
        let v = extents_for_run(0, 1000, 70000);
        assert_eq!(v.iter().map(|e| e.len).collect::<Vec<_>>(), vec![32768, 32768, 4464]);
        assert_eq!(v[2].physical, 1000 + 65536);
        assert_eq!(v[2].logical, 65536);
    }
}
