//! The two checksum functions ext4 uses, in the exact form e2fsprogs computes them.
//!
//! - `metadata_csum` uses CRC-32C **without** the usual pre- and post-inversion
//!   ("raw"): seeds chain by feeding one result in as the next seed. The standard
//!   crate computes the inverted form, so `raw(s, d) = !append(!s, d)`.
//! - Without `metadata_csum`, `uninit_bg` (gdt_csum) protects group descriptors with
//!   CRC-16 (polynomial 0x8005 reflected, no final inversion: CRC-16/MODBUS when
//!   seeded with 0xFFFF).

/// Seed every ext4 checksum chain starts from.
pub const CRC32C_INITIAL: u32 = !0;

/// CRC-32C of `data` continuing from `seed`, with no inversions (ext2fs_crc32c_le).
pub fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, data)
}

/// The filesystem-wide seed used when the superblock does not store one
/// (incompat CSUM_SEED clear): `raw(~0, uuid)`.
pub fn fs_seed_from_uuid(uuid: &[u8; 16]) -> u32 {
    crc32c_raw(CRC32C_INITIAL, uuid)
}

/// Seed for everything owned by one inode: its inode, extent blocks and dir blocks.
pub fn inode_seed(fs_seed: u32, ino: u32, generation: u32) -> u32 {
    let s = crc32c_raw(fs_seed, &ino.to_le_bytes());
    crc32c_raw(s, &generation.to_le_bytes())
}

/// CRC-32C's polynomial, reflected (bit 31 is x^0).
const CRC32C_POLY_REFLECTED: u32 = 0x82F6_3B78;

/// `a * b` modulo CRC-32C's polynomial, both as reflected polynomials
/// (bit 31 the constant term): shift-and-add over GF(2).
const fn gf2_mul(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ CRC32C_POLY_REFLECTED } else { b >> 1 };
    }
    product
}

/// x^(2^k) modulo the polynomial, k = 0..64: squaring the one before.
const fn x_pow2_table() -> [u32; 64] {
    let mut table = [0u32; 64];
    // x^1, reflected.
    table[0] = 1 << 30;
    let mut k = 1;
    while k < 64 {
        table[k] = gf2_mul(table[k - 1], table[k - 1]);
        k += 1;
    }
    table
}

const X_POW2: [u32; 64] = x_pow2_table();

/// The raw CRC-32C state `crc` after `n` more zero bytes, in time
/// logarithmic in `n`: the state times x^(8n) modulo the polynomial.
pub fn crc32c_zeros(crc: u32, n: u64) -> u32 {
    // x^(8n) as the product of x^(2^k) over the set bits k of 8n.
    let mut power = 1u32 << 31;
    let (mut rest, mut k) = (n, 3usize);
    while rest != 0 && k < 64 {
        if rest & 1 != 0 {
            power = gf2_mul(X_POW2[k], power);
        }
        rest >>= 1;
        k += 1;
    }
    gf2_mul(power, crc)
}

/// How the raw CRC-32C of `len` bytes changes when the bytes at `at` are
/// XORed with `flips`: raw CRC-32C (no inversions) is linear over GF(2),
/// so `raw(s, m ^ d) = raw(s, m) ^ raw(0, d)`, and `d`'s leading zeros add
/// nothing from a zero state. Costs the length of `flips` plus a
/// logarithm of the rest, not the whole message (the incremental bitmap
/// checksum the LBS series wanted).
pub fn crc32c_raw_delta(len: usize, at: usize, flips: &[u8]) -> u32 {
    debug_assert!(at + flips.len() <= len, "flips past the message");
    let trailing = len.saturating_sub(at + flips.len());
    crc32c_zeros(crc32c_raw(0, flips), u64::try_from(trailing).unwrap_or(u64::MAX))
}

/// Reflected polynomial of CRC-16/ARC and /MODBUS.
const CRC16_POLY_REFLECTED: u16 = 0xA001;

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    // The entry's index as a u16 runs alongside it: From is not const.
    let mut i = 0;
    let mut byte: u16 = 0;
    while i < 256 {
        let mut crc = byte;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ CRC16_POLY_REFLECTED } else { crc >> 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
        byte += 1;
    }
    table
}

static CRC16_TABLE: [u16; 256] = crc16_table();

/// CRC-16 continuing from `seed`, no final inversion (ext2fs_crc16).
pub fn crc16(seed: u16, data: &[u8]) -> u16 {
    data.iter().fold(seed, |crc, &byte| {
        let index = usize::from((crc ^ u16::from(byte)) & 0xFF);
        (crc >> 8) ^ CRC16_TABLE[index]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHECK_INPUT: &[u8] = b"123456789";

    #[test]
    fn standard_crc32c_check_value() {
        assert_eq!(crc32c::crc32c(CHECK_INPUT), 0xE306_9283);
    }

    #[test]
    fn raw_is_the_uninverted_standard_crc() {
        assert_eq!(crc32c_raw(CRC32C_INITIAL, CHECK_INPUT), !0xE306_9283);
        assert_ne!(crc32c_raw(0, CHECK_INPUT), crc32c_raw(CRC32C_INITIAL, CHECK_INPUT));
    }

    #[test]
    fn raw_chains_like_one_pass() {
        let (a, b) = CHECK_INPUT.split_at(4);
        let chained = crc32c_raw(crc32c_raw(0x1234_5678, a), b);
        assert_eq!(chained, crc32c_raw(0x1234_5678, CHECK_INPUT));
    }

    #[test]
    fn inode_seed_chains_number_then_generation() {
        let fs = fs_seed_from_uuid(&[7u8; 16]);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&11u32.to_le_bytes());
        bytes.extend_from_slice(&5u32.to_le_bytes());
        assert_eq!(inode_seed(fs, 11, 5), crc32c_raw(fs, &bytes));
        assert_ne!(inode_seed(fs, 11, 5), inode_seed(fs, 12, 5));
    }

    #[test]
    fn zeros_shift_matches_feeding_zeros() {
        for (crc, n) in [(0xDEAD_BEEFu32, 0usize), (1, 1), (0x1234_5678, 7), (0xFFFF_FFFF, 4096), (0x0BAD_F00D, 65_536), (3, 100_003)] {
            assert_eq!(crc32c_zeros(crc, u64::try_from(n).unwrap()), crc32c_raw(crc, &vec![0u8; n]), "crc {crc:#x} n {n}");
        }
    }

    proptest::proptest! {
        /// Flipping bytes changes the raw CRC by the delta alone, whatever
        /// the seed and the rest of the message.
        #[test]
        fn a_delta_updates_the_raw_crc_as_a_full_pass_would(seed in proptest::prelude::any::<u32>(), msg in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..3000), at in 0usize..3000, flips in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..40)) {
            let at = at % msg.len();
            let flips = &flips[..flips.len().min(msg.len() - at)];
            let mut changed = msg.clone();
            for (i, f) in flips.iter().enumerate() {
                changed[at + i] ^= f;
            }
            let updated = crc32c_raw(seed, &msg) ^ crc32c_raw_delta(msg.len(), at, flips);
            proptest::prop_assert_eq!(updated, crc32c_raw(seed, &changed));
        }
    }

    #[test]
    fn crc16_modbus_check_value() {
        assert_eq!(crc16(0xFFFF, CHECK_INPUT), 0x4B37);
        assert_eq!(crc16(0, CHECK_INPUT), 0xBB3D, "seed 0 gives CRC-16/ARC");
    }
}
