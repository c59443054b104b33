//! Bitmaps and free counts against what is really used: each group's block
//! bitmap (or, for BLOCK_UNINIT groups, the bitmap the kernel would
//! synthesise) must equal the claimed blocks, each inode bitmap the inodes in
//! use; padding bits must be set and checksums match. Group and superblock
//! free counts and directory counts must be exact.

use std::ops::Range;

use crate::device::BlockDevice;
use crate::format::bitmap::{bytes_all, stored_bitmap_csum_matches, Bitmap};
use crate::format::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use crate::format::GroupIndex;

use super::claims::UsedBlocks;
use super::problem::{BitmapKind, Problem, Runs};
use super::state::Checker;

/// Whether every bit from `valid` to the end of `bytes` is set.
fn padding_ok(bytes: &[u8], valid: usize) -> bool {
    let first_full = valid.div_ceil(8);
    let partial_ok = (valid..(first_full * 8).min(bytes.len() * 8)).all(|i| bytes.get(i / 8).is_some_and(|b| b & (1 << (i % 8)) != 0));
    partial_ok && bytes.get(first_full..).is_none_or(|rest| bytes_all(rest, 0xFF))
}

/// An expected bitmap of `valid_bits` clear bits: only the bytes holding
/// them (plus the set padding bits sharing their last byte), since [`diff`]
/// reads no further and a 64 KiB block's bitmap is mostly padding.
pub(super) fn expected_bitmap(valid_bits: usize) -> Bitmap {
    let bytes = valid_bits.div_ceil(8);
    let mut bm = Bitmap::from_bytes(vec![0; bytes]);
    bm.set_range(valid_bits, bytes * 8);
    bm
}

/// Differences between `want` and `have` over bits `0..n`, numbered from `base`.
fn diff(want: &Bitmap, have: &Bitmap, n: usize, base: u64) -> (Runs, Runs) {
    let (mut unmarked, mut unclaimed) = (Runs::default(), Runs::default());
    let (w, h) = (want.as_bytes(), have.as_bytes());
    let bytes = n.div_ceil(8).min(w.len()).min(h.len());
    // Mostly they agree: one memcmp says so.
    if w[..bytes] == h[..bytes] {
        return (unmarked, unclaimed);
    }
    for byte in 0..bytes {
        if w[byte] == h[byte] {
            continue;
        }
        for bit in byte * 8..(byte * 8 + 8).min(n) {
            match (want.get(bit), have.get(bit)) {
                (true, false) => unmarked.push(base + bit as u64),
                (false, true) => unclaimed.push(base + bit as u64),
                _ => {}
            }
        }
    }
    (unmarked, unclaimed)
}

/// Compares group `g`'s inode bitmap with the inodes found in use (`expected`).
pub fn check_inode_bitmap<D: BlockDevice>(c: &mut Checker<D>, g: GroupIndex, expected: &Bitmap, init: u32) {
    let d = c.descs[g as usize];
    if (c.lazy && d.has_flag(BG_INODE_UNINIT)) || !c.layout[g as usize].inode_bitmap {
        return;
    }
    let have = match c.disk.block(d.inode_bitmap) {
        Ok(b) => Bitmap::from_bytes(b),
        Err(p) => return c.report(p),
    };
    let ipg = c.geo.inodes_per_group;
    if let Some(seed) = c.csum_seed {
        let computed = have.checksum(seed, ipg);
        if !stored_bitmap_csum_matches(d.inode_bitmap_csum, computed, c.geo.desc_size) {
            c.report(Problem::BitmapChecksum { group: g, bitmap: BitmapKind::Inode, stored: d.inode_bitmap_csum, computed });
        }
    }
    if !padding_ok(have.as_bytes(), ipg as usize) {
        c.report(Problem::BitmapPadding { group: g, bitmap: BitmapKind::Inode });
    }
    let base = u64::from(g) * u64::from(ipg) + 1;
    let (unmarked, unclaimed) = diff(expected, &have, ipg as usize, base);
    if !unmarked.is_empty() || !unclaimed.is_empty() {
        c.report(Problem::InodeBitmapDiffers { group: g, unmarked, unclaimed });
    }
    if c.lazy {
        let idx = have.next_one(init as usize, ipg as usize);
        if idx < ipg as usize {
            let what = format!("inode {} is marked in use inside the unused tail", base + idx as u64);
            c.report(Problem::ItableUnused { group: g, itable_unused: d.itable_unused, what });
        }
    }
}

/// The blocks of group `g` (as a range of block numbers).
fn group_range<D: BlockDevice>(c: &Checker<D>, g: GroupIndex) -> Range<u64> {
    let start = c.geo.group_first_block(g);
    start..start + u64::from(c.geo.group_len(g))
}

/// Marks blocks `lo..hi` of a group (group-relative) as the clusters holding them.
fn mark_clusters(bm: &mut Bitmap, lo: u64, hi: u64, bits: u32) {
    if lo < hi {
        bm.set_range((lo >> bits) as usize, ((hi - 1) >> bits) as usize + 1);
    }
}

/// What `used` says group `g`'s bitmap must hold (a bit per cluster).
fn expected_blocks<D: BlockDevice>(c: &Checker<D>, g: GroupIndex, used: &UsedBlocks) -> Bitmap {
    let r = group_range(c, g);
    let mut bm = expected_bitmap(c.geo.group_clusters(g) as usize);
    for run in used.runs_in(r.clone()) {
        mark_clusters(&mut bm, run.start - r.start, run.end - r.start, c.geo.cluster_bits);
    }
    bm
}

/// The bitmap the kernel builds for a BLOCK_UNINIT group: its backup
/// region and its own bitmaps and table where they lie inside the group.
fn synthesised<D: BlockDevice>(c: &Checker<D>, g: GroupIndex) -> Bitmap {
    let r = group_range(c, g);
    let bits = c.geo.cluster_bits;
    let mut bm = expected_bitmap(c.geo.group_clusters(g) as usize);
    mark_clusters(&mut bm, 0, u64::from(c.geo.base_meta_blocks(g)), bits);
    let d = c.descs[g as usize];
    for (start, len) in [(d.block_bitmap, 1u64), (d.inode_bitmap, 1), (d.inode_table, u64::from(c.geo.inode_table_blocks))] {
        let s = start.max(r.start);
        let e = start.saturating_add(len).min(r.end);
        if s < e {
            mark_clusters(&mut bm, s - r.start, e - r.start, bits);
        }
    }
    bm
}

/// Compares every group's block bitmap with the used blocks.
pub fn check_block_bitmaps<D: BlockDevice>(c: &mut Checker<D>, used: &UsedBlocks) {
    let mut g = 0;
    while g < c.geo.group_count {
        let d = c.descs[g as usize];
        if c.lazy && d.has_flag(BG_BLOCK_UNINIT) {
            let want = expected_blocks(c, g, used);
            let have = synthesised(c, g);
            compare_blocks(c, g, &want, &have);
            g += 1;
            continue;
        }
        if !c.layout[g as usize].block_bitmap {
            g += 1;
            continue;
        }
        // Bitmaps packed by flex_bg sit in a row: read them in one go.
        let mut n = 1u32;
        while g + n < c.geo.group_count && u64::from(n) < c.disk.max_blocks_per_read() {
            let next = c.descs[(g + n) as usize];
            let contiguous = next.block_bitmap == d.block_bitmap.saturating_add(u64::from(n));
            if !contiguous || !c.layout[(g + n) as usize].block_bitmap || (c.lazy && next.has_flag(BG_BLOCK_UNINIT)) {
                break;
            }
            n += 1;
        }
        let buf = match c.disk.read(d.block_bitmap, u64::from(n)) {
            Ok(b) => b,
            Err(p) => {
                c.report(p);
                g += n;
                continue;
            }
        };
        let bs = c.geo.block_size as usize;
        for (i, chunk) in buf.chunks(bs).enumerate() {
            let gi = g + i as u32;
            let have = Bitmap::from_bytes(chunk.to_vec());
            check_one_block_bitmap(c, gi, &have, used);
        }
        g += n;
    }
}

fn check_one_block_bitmap<D: BlockDevice>(c: &mut Checker<D>, g: GroupIndex, have: &Bitmap, used: &UsedBlocks) {
    let d = c.descs[g as usize];
    if let Some(seed) = c.csum_seed {
        let computed = have.checksum(seed, c.geo.clusters_per_group());
        if !stored_bitmap_csum_matches(d.block_bitmap_csum, computed, c.geo.desc_size) {
            c.report(Problem::BitmapChecksum { group: g, bitmap: BitmapKind::Block, stored: d.block_bitmap_csum, computed });
        }
    }
    let len = c.geo.group_clusters(g) as usize;
    if !padding_ok(have.as_bytes(), len) {
        c.report(Problem::BitmapPadding { group: g, bitmap: BitmapKind::Block });
    }
    let want = expected_blocks(c, g, used);
    compare_blocks(c, g, &want, have);
}

/// Bits are clusters under bigalloc, and the problem numbers them so.
fn compare_blocks<D: BlockDevice>(c: &mut Checker<D>, g: GroupIndex, want: &Bitmap, have: &Bitmap) {
    let len = c.geo.group_clusters(g) as usize;
    let (unmarked, unclaimed) = diff(want, have, len, c.geo.group_first_block(g) >> c.geo.cluster_bits);
    if !unmarked.is_empty() || !unclaimed.is_empty() {
        c.report(Problem::BlockBitmapDiffers { group: g, unmarked, unclaimed });
    }
}

/// Group and superblock free counts and directory counts.
pub fn check_counts<D: BlockDevice>(c: &mut Checker<D>, used: &UsedBlocks) {
    let ipg = c.geo.inodes_per_group;
    let mut free_blocks = 0u64;
    let mut free_inodes = 0u64;
    let mut inodes_known = true;
    for g in 0..c.geo.group_count {
        let d = c.descs[g as usize];
        let r = group_range(c, g);
        let in_use = used.count_in(r) >> c.geo.cluster_bits;
        let counted = u64::from(c.geo.group_clusters(g)).saturating_sub(in_use) as u32;
        free_blocks += u64::from(counted) << c.geo.cluster_bits;
        if d.free_blocks != counted {
            c.report(Problem::GroupFreeBlocks { group: g, stored: d.free_blocks, counted });
        }
        let gi = c.group_inodes[g as usize];
        if !gi.scanned {
            inodes_known = false;
            continue;
        }
        let free = ipg.saturating_sub(gi.used);
        free_inodes += u64::from(free);
        if d.free_inodes != free {
            c.report(Problem::GroupFreeInodes { group: g, stored: d.free_inodes, counted: free });
        }
        if d.used_dirs != gi.dirs {
            c.report(Problem::GroupUsedDirs { group: g, stored: d.used_dirs, counted: gi.dirs });
        }
    }
    if c.sb.free_blocks_count != free_blocks {
        c.report(Problem::SuperblockFreeBlocks { stored: c.sb.free_blocks_count, counted: free_blocks });
    }
    if inodes_known && u64::from(c.sb.free_inodes_count) != free_inodes {
        c.report(Problem::SuperblockFreeInodes { stored: u64::from(c.sb.free_inodes_count), counted: free_inodes });
    }
    c.stats.blocks_used = c.geo.blocks_count.saturating_sub(free_blocks);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_checks_partial_and_whole_bytes() {
        let mut b = vec![0u8; 4];
        b[1] = 0b1111_1000;
        b[2] = 0xFF;
        b[3] = 0xFF;
        assert!(padding_ok(&b, 11));
        assert!(!padding_ok(&b, 10));
        b[3] = 0x7F;
        assert!(!padding_ok(&b, 11));
        assert!(padding_ok(&[0xFF; 2], 0));
    }

    #[test]
    fn diff_splits_both_directions() {
        let mut want = Bitmap::new_padded(8, 40);
        let mut have = Bitmap::new_padded(8, 40);
        want.set_range(3, 6);
        have.set_range(4, 8);
        let (unmarked, unclaimed) = diff(&want, &have, 40, 100);
        assert_eq!(unmarked.to_string(), "103");
        assert_eq!(unclaimed.to_string(), "106-107");
    }
}
