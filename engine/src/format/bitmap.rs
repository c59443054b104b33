//! Block and inode bitmaps: one block per group, bit i = item i of the group
//! (LSB first). Bits past the group's real items are padding and must be 1.
//!
//! Checksums cover only the bytes that describe real items: clusters_per_group/8
//! bytes of a block bitmap and inodes_per_group/8 of an inode bitmap, never the
//! whole block. 32-byte descriptors keep only their low 16 bits.

use crate::format::bytes::usize_from_u32;
use crate::format::checksum::crc32c_raw;

/// A bitmap block held in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bitmap {
    bytes: Vec<u8>,
}

impl Bitmap {
    /// A bitmap of `block_size` bytes whose first `valid_bits` bits are clear
    /// and whose padding (every bit from `valid_bits` on) is set.
    pub fn new_padded(block_size: usize, valid_bits: usize) -> Self {
        let mut b = Bitmap { bytes: vec![0u8; block_size] };
        let total = block_size * 8;
        b.set_range(valid_bits.min(total), total);
        debug_assert!(b.next_one(0, valid_bits) >= valid_bits.min(total), "new bitmap has a set bit below {valid_bits}");
        b
    }

    /// Wraps bytes read from disk.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        Bitmap { bytes }
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

    pub fn set(&mut self, i: usize) {
        if let Some(byte) = self.bytes.get_mut(i / 8) {
            *byte |= 1 << (i % 8);
        }
        debug_assert!(self.get(i), "bit {i} reads clear after set");
    }

    /// Sets bits `start..end` (clamped to the bitmap), whole bytes at a time where possible.
    pub fn set_range(&mut self, start: usize, end: usize) {
        let end = end.min(self.bit_len());
        let mut i = start;
        while i < end && i % 8 != 0 {
            self.set(i);
            i += 1;
        }
        let full_end = end - end % 8;
        if i < full_end {
            self.bytes[i / 8..full_end / 8].fill(0xFF);
            i = full_end;
        }
        while i < end {
            self.set(i);
            i += 1;
        }
        debug_assert!(self.next_zero(start, end).is_none(), "bits {start}..{end} read back with a clear bit");
    }

    pub fn clear(&mut self, i: usize) {
        if let Some(byte) = self.bytes.get_mut(i / 8) {
            *byte &= !(1 << (i % 8));
        }
        // Bits past the end read as set: only in-range bits can read back clear.
        debug_assert!(i >= self.bit_len() || !self.get(i), "bit {i} reads set after clear");
    }

    /// Clears bits `start..end` (clamped to the bitmap).
    pub fn clear_range(&mut self, start: usize, end: usize) {
        let end = end.min(self.bit_len());
        let mut i = start;
        while i < end && i % 8 != 0 {
            self.clear(i);
            i += 1;
        }
        let full_end = end - end % 8;
        if i < full_end {
            self.bytes[i / 8..full_end / 8].fill(0);
            i = full_end;
        }
        while i < end {
            self.clear(i);
            i += 1;
        }
        debug_assert!(self.next_one(start, end) >= end, "bits {start}..{end} read back with a set bit");
    }

    /// Whether every bit of `start..end` is clear (bits past the end count as set).
    pub fn range_is_clear(&self, start: usize, end: usize) -> bool {
        (start..end).all(|i| !self.get(i))
    }

    /// First clear bit in `from..limit`, skipping whole 0xFF bytes.
    pub fn next_zero(&self, from: usize, limit: usize) -> Option<usize> {
        let limit = limit.min(self.bit_len());
        let mut i = from;
        while i < limit {
            if i % 8 == 0 && self.bytes[i / 8] == 0xFF {
                i += 8;
                continue;
            }
            if !self.get(i) {
                return Some(i);
            }
            i += 1;
        }
        None
    }

    /// First set bit in `from..limit` (or `limit`), skipping whole 0x00 bytes.
    pub fn next_one(&self, from: usize, limit: usize) -> usize {
        let limit = limit.min(self.bit_len());
        let mut i = from;
        while i < limit {
            if i % 8 == 0 && self.bytes[i / 8] == 0 {
                i += 8;
                continue;
            }
            if self.get(i) {
                return i;
            }
            i += 1;
        }
        limit
    }

    /// Number of clear bits among the first `n`.
    pub fn count_zeros(&self, n: usize) -> usize {
        let n = n.min(self.bit_len());
        let whole = n / 8;
        let mut zeros: usize = self.bytes[..whole].iter().map(|b| usize_from_u32(b.count_zeros())).sum();
        for i in whole * 8..n {
            zeros += usize::from(!self.get(i));
        }
        zeros
    }

    /// Whether every bit from `valid_bits` to the end of the block is set.
    pub fn padding_is_set(&self, valid_bits: usize) -> bool {
        (valid_bits..self.bit_len()).all(|i| self.get(i))
    }

    /// Checksum of the first `items / 8` bytes, seeded with the fs seed.
    pub fn checksum(&self, fs_seed: u32, items: u32) -> u32 {
        let n = usize_from_u32(items / 8).min(self.bytes.len());
        crc32c_raw(fs_seed, &self.bytes[..n])
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
