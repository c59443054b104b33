//! Block and inode bitmaps: one block per group, bit i = item i of the group
//! (LSB first). Bits past the group's real items are padding and must be 1.
//!
//! Checksums cover only the bytes that describe real items: clusters_per_group/8
//! bytes of a block bitmap and inodes_per_group/8 of an inode bitmap, never the
//! whole block. 32-byte descriptors keep only their low 16 bits.

use crate::format::bytes::{u64_from_usize, usize_from_u32};
use crate::format::checksum::{crc32c_raw, crc32c_raw_delta};

/// A bitmap block held in memory, with its checksum kept up to date as
/// bits change once [`Bitmap::track_checksum`] asks for it.
#[derive(Debug, Clone)]
pub struct Bitmap {
    bytes: Vec<u8>,
    running: Option<RunningCsum>,
    /// Bytes run through crc32c to keep the checksum (the CPU cost the
    /// simulator charges).
    crc_bytes: u64,
}

/// How a tracked checksum follows an edit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BitmapChecksum {
    /// Folds only the flipped bytes in (crc32c is linear over GF(2)).
    #[default]
    Running,
    /// Recomputes every covered byte, as the kernel's
    /// ext4_block_bitmap_csum_set does on each allocation and free.
    Recompute,
}

/// The checksum of a bitmap's first `covered` bytes from `seed`, as of now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunningCsum {
    seed: u32,
    covered: usize,
    value: u32,
    how: BitmapChecksum,
}

/// Bitmaps are equal when their bits are: the running checksum is a cache.
impl PartialEq for Bitmap {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl Eq for Bitmap {}

impl Bitmap {
    /// A bitmap of `block_size` bytes whose first `valid_bits` bits are clear
    /// and whose padding (every bit from `valid_bits` on) is set.
    pub fn new_padded(block_size: usize, valid_bits: usize) -> Self {
        let mut b = Bitmap { bytes: vec![0u8; block_size], running: None, crc_bytes: 0 };
        let total = block_size * 8;
        // set_range checks its own bits; the rest are the zeros just made.
        b.set_range(valid_bits.min(total), total);
        b
    }

    /// Wraps bytes read from disk.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Bitmap { bytes, running: None, crc_bytes: 0 }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn bit_len(&self) -> usize {
        self.bytes.len() * 8
    }

    /// Whether bit `i` is set; bits past the end read as set (they describe nothing).
    pub fn get(&self, i: usize) -> bool {
        self.bytes.get(i / 8).is_none_or(|byte| byte & (1 << (i % 8)) != 0)
    }

    /// From now on [`Bitmap::checksum`] for (`fs_seed`, `items`) is kept as
    /// bits change, at a cost independent of the bitmap's length (the
    /// kernel recomputes the whole bitmap's crc32c on every allocation,
    /// which grows with the block size).
    pub fn track_checksum(&mut self, fs_seed: u32, items: u32, how: BitmapChecksum) {
        let covered = usize_from_u32(items / 8).min(self.bytes.len());
        self.crc_bytes += u64_from_usize(covered);
        self.running = Some(RunningCsum { seed: fs_seed, covered, value: crc32c_raw(fs_seed, &self.bytes[..covered]), how });
    }

    /// Changes how a tracked checksum follows edits from now on.
    pub fn set_checksum_mode(&mut self, how: BitmapChecksum) {
        if let Some(r) = &mut self.running {
            r.how = how;
        }
    }

    /// Bytes run through crc32c so far to keep the checksum.
    pub fn crc_bytes(&self) -> u64 {
        self.crc_bytes
    }

    /// Runs `edit` on bytes `lo..hi` and folds what it flipped into the
    /// running checksum.
    fn edit(&mut self, lo: usize, hi: usize, edit: impl FnOnce(&mut [u8])) {
        let hi = hi.min(self.bytes.len());
        let lo = lo.min(hi);
        let Some(running) = self.running else {
            edit(&mut self.bytes[lo..hi]);
            return;
        };
        let mut flips = self.bytes[lo..hi].to_vec();
        edit(&mut self.bytes[lo..hi]);
        let covered_hi = hi.min(running.covered);
        if lo >= covered_hi {
            return;
        }
        flips.truncate(covered_hi - lo);
        for (f, now) in flips.iter_mut().zip(&self.bytes[lo..covered_hi]) {
            *f ^= now;
        }
        if flips.iter().any(|f| *f != 0) {
            let value = match running.how {
                BitmapChecksum::Running => {
                    self.crc_bytes += u64_from_usize(flips.len());
                    running.value ^ crc32c_raw_delta(running.covered, lo, &flips)
                }
                BitmapChecksum::Recompute => {
                    self.crc_bytes += u64_from_usize(running.covered);
                    crc32c_raw(running.seed, &self.bytes[..running.covered])
                }
            };
            self.running = Some(RunningCsum { value, ..running });
        }
    }

    pub fn set(&mut self, i: usize) {
        self.edit(i / 8, i / 8 + 1, |b| b.iter_mut().for_each(|byte| *byte |= 1 << (i % 8)));
        debug_assert!(self.get(i), "bit {i} reads clear after set");
    }

    /// Sets bits `start..end` (clamped to the bitmap).
    pub fn set_range(&mut self, start: usize, end: usize) {
        let end = end.min(self.bit_len());
        if start < end {
            self.edit(start / 8, end.div_ceil(8), |b| set_bits(b, start % 8, end - start / 8 * 8, true));
        }
        debug_assert!(self.next_zero(start, end).is_none(), "bits {start}..{end} read back with a clear bit");
    }

    pub fn clear(&mut self, i: usize) {
        self.edit(i / 8, i / 8 + 1, |b| b.iter_mut().for_each(|byte| *byte &= !(1 << (i % 8))));
        // Bits past the end read as set: only in-range bits can read back clear.
        debug_assert!(i >= self.bit_len() || !self.get(i), "bit {i} reads set after clear");
    }

    /// Clears bits `start..end` (clamped to the bitmap).
    pub fn clear_range(&mut self, start: usize, end: usize) {
        let end = end.min(self.bit_len());
        if start < end {
            self.edit(start / 8, end.div_ceil(8), |b| set_bits(b, start % 8, end - start / 8 * 8, false));
        }
        debug_assert!(self.next_one(start, end) >= end, "bits {start}..{end} read back with a set bit");
    }

    /// Bits past the end read as set, so a range reaching past it is not clear.
    pub fn range_is_clear(&self, start: usize, end: usize) -> bool {
        start >= end || (end <= self.bit_len() && self.find(start, end, true).is_none())
    }

    /// First clear bit in `from..limit`.
    pub fn next_zero(&self, from: usize, limit: usize) -> Option<usize> {
        self.find(from, limit, false)
    }

    /// First set bit in `from..limit` (or `limit`).
    pub fn next_one(&self, from: usize, limit: usize) -> usize {
        let limit = limit.min(self.bit_len());
        self.find(from, limit, true).unwrap_or(limit)
    }

    /// First bit in `from..limit` that reads `value`. A group's bitmap is
    /// up to 512 Ki bits, and the engine's fsck and debug assertions scan
    /// them whole: aligned stretches with nothing to find are skipped 512
    /// bits at a time (one slice comparison, a memcmp), then 64.
    fn find(&self, from: usize, limit: usize, value: bool) -> Option<usize> {
        const STRETCH: usize = 64;
        static CLEAR: [u8; STRETCH] = [0; STRETCH];
        static SET: [u8; STRETCH] = [0xFF; STRETCH];
        let limit = limit.min(self.bit_len());
        let (nothing, stretch) = if value { (0, &CLEAR) } else { (u64::MAX, &SET) };
        let mut i = from;
        while i < limit {
            if i % (STRETCH * 8) == 0 && i + STRETCH * 8 <= limit && self.bytes[i / 8..i / 8 + STRETCH] == *stretch {
                i += STRETCH * 8;
                continue;
            }
            if i % 64 == 0 && i + 64 <= limit {
                let mut word = [0u8; 8];
                word.copy_from_slice(&self.bytes[i / 8..i / 8 + 8]);
                let word = u64::from_le_bytes(word);
                if word == nothing {
                    i += 64;
                    continue;
                }
                let hits = if value { word } else { !word };
                return Some(i + usize_from_u32(hits.trailing_zeros()));
            }
            if self.get(i) == value {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// Number of clear bits among the first `n`.
    pub fn count_zeros(&self, n: usize) -> usize {
        let n = n.min(self.bit_len());
        let whole = n / 8;
        // A word at a time: mkfs and fsck count whole groups.
        let words = self.bytes[..whole].chunks_exact(8);
        let tail = words.remainder();
        let mut zeros: usize = words.map(|w| usize_from_u32(u64::from_le_bytes(w.try_into().unwrap_or([0xFF; 8])).count_zeros())).sum();
        zeros += tail.iter().map(|b| usize_from_u32(b.count_zeros())).sum::<usize>();
        for i in whole * 8..n {
            zeros += usize::from(!self.get(i));
        }
        zeros
    }

    /// Whether every bit from `valid_bits` to the end of the block is set.
    pub fn padding_is_set(&self, valid_bits: usize) -> bool {
        self.next_zero(valid_bits, self.bit_len()).is_none()
    }

    /// Checksum of the first `items / 8` bytes, seeded with the fs seed:
    /// the running one when it is kept for these.
    pub fn checksum(&self, fs_seed: u32, items: u32) -> u32 {
        let n = usize_from_u32(items / 8).min(self.bytes.len());
        match self.running {
            Some(r) if r.seed == fs_seed && r.covered == n => {
                debug_assert_eq!(r.value, crc32c_raw(fs_seed, &self.bytes[..n]), "the running bitmap checksum drifted");
                r.value
            }
            _ => crc32c_raw(fs_seed, &self.bytes[..n]),
        }
    }
}

/// Whether every byte is `value`: the bytes' differences from it ORed
/// together, with no branch per byte. That vectorizes, and under a
/// fuzzer's comparison tracing costs no callback per byte (nor one per
/// memcmp, as slice comparisons did: 64 a block).
pub fn bytes_all(bytes: &[u8], value: u8) -> bool {
    bytes.iter().fold(0u8, |acc, &b| acc | (b ^ value)) == 0
}

/// Sets (or clears) bits `from..to` of `bytes`, whole bytes at a time
/// between the edges.
fn set_bits(bytes: &mut [u8], from: usize, to: usize, value: bool) {
    let mut i = from;
    while i < to {
        if i % 8 == 0 && i + 8 <= to {
            let whole = (to - i) / 8;
            bytes[i / 8..i / 8 + whole].fill(if value { 0xFF } else { 0 });
            i += whole * 8;
            continue;
        }
        if value {
            bytes[i / 8] |= 1 << (i % 8);
        } else {
            bytes[i / 8] &= !(1 << (i % 8));
        }
        i += 1;
    }
}

/// A stored bitmap checksum read back from a descriptor: 32-byte descriptors keep
/// only the low half, so comparisons must mask the computed value the same way.
pub fn stored_bitmap_csum_matches(stored: u32, computed: u32, desc_size: u16) -> bool {
    if usize::from(desc_size) >= crate::format::group_desc::DESC_SIZE_64 {
        stored == computed
    } else {
        stored & 0xFFFF == computed & 0xFFFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::checksum::fs_seed_from_uuid;

    const UUID: [u8; 16] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00];
    const BLOCK_BITMAP: &[u8; 4096] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.block_bitmap");
    const INODE_BITMAP: &[u8; 4096] = include_bytes!("../../tests/fixtures/mke2fs_4k_8m.inode_bitmap");

    #[test]
    fn checksums_match_mke2fs_over_group_sized_prefixes() {
        let seed = fs_seed_from_uuid(&UUID);
        let bb = Bitmap::from_bytes(BLOCK_BITMAP.to_vec());
        assert_eq!(bb.checksum(seed, 32768), 0x033b_30e4, "dumpe2fs: block bitmap csum");
        let ib = Bitmap::from_bytes(INODE_BITMAP.to_vec());
        assert_eq!(ib.checksum(seed, 2048), 0xbab7_0096, "dumpe2fs: inode bitmap csum");
        assert_ne!(ib.checksum(seed, 32768), 0xbab7_0096, "the whole block is not covered");
    }

    #[test]
    fn mke2fs_bitmaps_have_set_padding_and_expected_free_counts() {
        let bb = Bitmap::from_bytes(BLOCK_BITMAP.to_vec());
        assert!(bb.padding_is_set(2048), "blocks past the 2048-block fs are marked used");
        assert_eq!(bb.count_zeros(2048), 887);
        let ib = Bitmap::from_bytes(INODE_BITMAP.to_vec());
        assert!(ib.padding_is_set(2048));
        assert_eq!(ib.count_zeros(2048), 2037);
        assert!((0..11).all(|i| ib.get(i)) && !ib.get(11), "inodes 1..=11 are in use");
    }

    #[test]
    fn set_range_and_padding() {
        let mut b = Bitmap::new_padded(1024, 8190);
        assert!(b.padding_is_set(8190));
        assert!(!b.get(8189) && b.get(8190) && b.get(8191));
        b.set_range(3, 21);
        assert_eq!(b.count_zeros(8190), 8190 - 18);
        assert!(b.get(3) && b.get(20) && !b.get(2) && !b.get(21));
        b.set_range(0, 100_000);
        assert_eq!(b.count_zeros(8192), 0);
    }

    #[test]
    fn clear_and_scans() {
        let mut b = Bitmap::new_padded(64, 500);
        b.set_range(0, 500);
        b.clear_range(5, 70);
        assert!(b.get(4) && !b.get(5) && !b.get(69) && b.get(70));
        assert!(b.range_is_clear(5, 70) && !b.range_is_clear(4, 70));
        assert_eq!(b.next_zero(0, 500), Some(5));
        assert_eq!(b.next_zero(70, 500), None);
        assert_eq!(b.next_one(5, 500), 70);
        b.clear(200);
        assert_eq!(b.next_zero(70, 500), Some(200));
        assert_eq!(b.next_one(200, 201), 201);
    }

    #[test]
    fn narrow_descriptors_compare_low_halves() {
        assert!(stored_bitmap_csum_matches(0x1234, 0xABCD_1234, 32));
        assert!(!stored_bitmap_csum_matches(0x1234, 0xABCD_1234, 64));
    }
}

#[cfg(test)]
mod running_checksum_tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Edit {
        Set(usize),
        Clear(usize),
        SetRange(usize, usize),
        ClearRange(usize, usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let bit = 0usize..(8192 * 8 + 16);
        prop_oneof![
            bit.clone().prop_map(Edit::Set),
            bit.clone().prop_map(Edit::Clear),
            (bit.clone(), 0usize..5000).prop_map(|(a, n)| Edit::SetRange(a, a + n)),
            (bit, 0usize..5000).prop_map(|(a, n)| Edit::ClearRange(a, a + n)),
        ]
    }

    proptest! {
        /// The running checksum (either way of keeping it) equals a full
        /// recomputation after any edits, bitmaps of 1 KiB to 8 KiB covering all or part of them
        /// (64 KiB blocks hold 8 KiB of a group's block bitmap).
        #[test]
        fn the_running_checksum_is_the_full_one(block_kib in 1usize..=8, items_eighths in 1u32..=8, seed in any::<u32>(), start in proptest::collection::vec(any::<u8>(), 8192), edits in proptest::collection::vec(edit(), 1..60), recompute in any::<bool>()) {
            let len = block_kib * 1024;
            let items = u32::try_from(len * 8).unwrap() * items_eighths / 8;
            let mut bm = Bitmap::from_bytes(start[..len].to_vec());
            bm.track_checksum(seed, items, if recompute { BitmapChecksum::Recompute } else { BitmapChecksum::Running });
            for e in &edits {
                match *e {
                    Edit::Set(i) => bm.set(i),
                    Edit::Clear(i) => bm.clear(i),
                    Edit::SetRange(a, b) => bm.set_range(a, b),
                    Edit::ClearRange(a, b) => bm.clear_range(a, b),
                }
                let covered = usize_from_u32(items / 8);
                prop_assert_eq!(bm.running.map(|r| r.value), Some(crc32c_raw(seed, &bm.as_bytes()[..covered])), "after {:?}", e);
            }
            prop_assert_eq!(bm.checksum(seed, items), crc32c_raw(seed, &bm.as_bytes()[..usize_from_u32(items / 8)]));
        }

        /// The word-at-a-time scans find what a bit-by-bit scan finds, from
        /// any start to any limit (past the end included), in sparse and
        /// dense bitmaps alike.
        #[test]
        fn scans_find_the_first_bit_a_bit_by_bit_scan_finds(bytes in proptest::collection::vec(prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 1..300), from in 0usize..2500, span in 0usize..2500) {
            let bm = Bitmap::from_bytes(bytes);
            let limit = from + span;
            let end = limit.min(bm.bit_len());
            let zero = (from..end).find(|&i| !bm.get(i));
            let one = (from..end).find(|&i| bm.get(i)).unwrap_or(end);
            prop_assert_eq!(bm.next_zero(from, limit), zero);
            prop_assert_eq!(bm.next_one(from, limit), one);
            // The predicates built on the scans, against their definitions.
            prop_assert_eq!(bm.range_is_clear(from, limit), (from..limit).all(|i| !bm.get(i)));
            prop_assert_eq!(bm.padding_is_set(from), (from..bm.bit_len()).all(|i| bm.get(i)));
            prop_assert_eq!(bm.count_zeros(limit), (0..end).filter(|&i| !bm.get(i)).count());
            let bytes = bm.as_bytes();
            prop_assert_eq!(bytes_all(bytes, 0), bytes.iter().all(|&b| b == 0));
            prop_assert_eq!(bytes_all(bytes, 0xFF), bytes.iter().all(|&b| b == 0xFF));
        }
    }
}
