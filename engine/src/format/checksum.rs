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
    fn crc16_modbus_check_value() {
        assert_eq!(crc16(0xFFFF, CHECK_INPUT), 0x4B37);
        assert_eq!(crc16(0, CHECK_INPUT), 0xBB3D, "seed 0 gives CRC-16/ARC");
    }
}
