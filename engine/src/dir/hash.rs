//! ext4's directory name hashes (dx hash): what htree indexes sort by and
//! what Orlov starts its scan of flex groups from.
//!
//! - Three functions, each in a signed and an unsigned flavour (how name
//!   bytes above 0x7f widen): legacy (dx_hack_hash), half MD4 (three rounds
//!   of MD4 over 32-byte chunks) and TEA (16 rounds over 16-byte chunks).
//! - The half MD4 and TEA state starts from the superblock's `s_hash_seed`
//!   read as four little-endian words, or MD4's initial words when the seed
//!   is all zero.
//! - The major hash has its low bit cleared, and 0xfffffffe (the htree EOF
//!   marker) becomes 0xfffffffc.
//!
//! `s_def_hash_version` numbers them 0..=5 (legacy, half MD4, TEA, then
//! the unsigned flavours); an unsigned superblock flag picks the unsigned
//! flavour for the filesystem's default.

/// A dx hash function (`s_def_hash_version`, `dx_root.hash_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DxHash {
    Legacy,
    HalfMd4,
    Tea,
    LegacyUnsigned,
    HalfMd4Unsigned,
    TeaUnsigned,
}

impl DxHash {
    /// The function a hash version byte names, if any.
    pub fn from_version(v: u8) -> Option<DxHash> {
        Some(match v {
            0 => DxHash::Legacy,
            1 => DxHash::HalfMd4,
            2 => DxHash::Tea,
            3 => DxHash::LegacyUnsigned,
            4 => DxHash::HalfMd4Unsigned,
            5 => DxHash::TeaUnsigned,
            _ => return None,
        })
    }

    fn unsigned(self) -> bool {
        matches!(self, DxHash::LegacyUnsigned | DxHash::HalfMd4Unsigned | DxHash::TeaUnsigned)
    }
}

/// How a filesystem hashes names in its indexes: the superblock's seed,
/// default function and signedness flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashPolicy {
    pub seed: [u8; 16],
    /// `s_def_hash_version`: what a new index's root records.
    pub default_version: u8,
    /// `s_flags` says unsigned: versions 0..=2 in a root mean 3..=5.
    pub unsigned: bool,
}

impl HashPolicy {
    pub fn of(sb: &crate::format::superblock::Superblock) -> Self {
        HashPolicy { seed: sb.hash_seed, default_version: sb.def_hash_version, unsigned: sb.flags & crate::format::superblock::FLAGS_UNSIGNED_HASH != 0 }
    }

    /// The function a root's `hash_version` byte names on this filesystem
    /// (ext4 adds `s_hash_unsigned` to the three signed versions).
    pub fn function(&self, root_version: u8) -> Option<DxHash> {
        let widened = if root_version <= 2 && self.unsigned { root_version + 3 } else { root_version };
        DxHash::from_version(widened)
    }

    /// The major hash of `name` under a root's `hash_version`.
    pub fn major(&self, root_version: u8, name: &[u8]) -> Option<u32> {
        Some(name_hash(self.function(root_version)?, name, &self.seed).major)
    }
}

/// A name's hash: the major value an htree sorts by and the minor one
/// that breaks its ties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameHash {
    pub major: u32,
    pub minor: u32,
}

/// MD4's initial state: the seed when `s_hash_seed` is all zero.
const DEFAULT_SEED: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
/// Round constants of MD4's second and third rounds (sqrt 2, sqrt 3).
const MD4_K2: u32 = 0x5a82_7999;
const MD4_K3: u32 = 0x6ed9_eba1;
/// TEA's key schedule constant (golden ratio).
const TEA_DELTA: u32 = 0x9e37_79b9;
/// The htree's end-of-directory major hash (EXT4_HTREE_EOF_32BIT << 1).
const HTREE_EOF: u32 = 0x7fff_ffff << 1;

/// Widens a name byte as the kernel's `char` does in each flavour.
fn widen(byte: u8, unsigned: bool) -> u32 {
    if unsigned {
        u32::from(byte)
    } else {
        i32::from(byte as i8) as u32
    }
}

/// Packs up to `words * 4` bytes of `name` into `out[..words]`, big end
/// first within each word, padding with the length repeated in every byte
/// (str2hashbuf). `name.len()` is the length still to hash, not the chunk's.
fn pack(name: &[u8], out: &mut [u32], unsigned: bool) {
    let len = name.len() as u32;
    let pad = {
        let p = len | (len << 8);
        p | (p << 16)
    };
    let take = name.len().min(out.len() * 4);
    let mut word = pad;
    let mut filled = 0;
    for (i, &b) in name[..take].iter().enumerate() {
        word = widen(b, unsigned).wrapping_add(word << 8);
        if i % 4 == 3 {
            out[filled] = word;
            filled += 1;
            word = pad;
        }
    }
    if filled < out.len() {
        out[filled] = word;
        filled += 1;
    }
    for slot in &mut out[filled..] {
        *slot = pad;
    }
}

/// MD4's three rounds over one 8-word block, added into `state`.
fn half_md4_block(state: &mut [u32; 4], x: &[u32; 8]) {
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    let [mut a, mut b, mut c, mut d] = *state;
    // Per round: its function, its constant, and (word index, rotation)
    // for its 8 steps; the registers rotate a, d, c, b as in MD4.
    type Mix = fn(u32, u32, u32) -> u32;
    type Round = (Mix, u32, [(usize, u32); 8]);
    let rounds: [Round; 3] = [
        (f, 0, [(0, 3), (1, 7), (2, 11), (3, 19), (4, 3), (5, 7), (6, 11), (7, 19)]),
        (g, MD4_K2, [(1, 3), (3, 5), (5, 9), (7, 13), (0, 3), (2, 5), (4, 9), (6, 13)]),
        (h, MD4_K3, [(3, 3), (7, 9), (2, 11), (6, 15), (1, 3), (5, 9), (0, 11), (4, 15)]),
    ];
    for (mix, k, steps) in rounds {
        for (i, &(w, s)) in steps.iter().enumerate() {
            let input = x[w].wrapping_add(k);
            match i % 4 {
                0 => a = a.wrapping_add(mix(b, c, d)).wrapping_add(input).rotate_left(s),
                1 => d = d.wrapping_add(mix(a, b, c)).wrapping_add(input).rotate_left(s),
                2 => c = c.wrapping_add(mix(d, a, b)).wrapping_add(input).rotate_left(s),
                _ => b = b.wrapping_add(mix(c, d, a)).wrapping_add(input).rotate_left(s),
            }
        }
    }
    for (s, v) in state.iter_mut().zip([a, b, c, d]) {
        *s = s.wrapping_add(v);
    }
}

/// 16 TEA cycles over one 4-word block, added into the first two words.
fn tea_block(state: &mut [u32; 4], x: &[u32; 4]) {
    let (mut b0, mut b1) = (state[0], state[1]);
    let mut sum = 0u32;
    for _ in 0..16 {
        sum = sum.wrapping_add(TEA_DELTA);
        b0 = b0.wrapping_add((b1 << 4).wrapping_add(x[0]) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(x[1]));
        b1 = b1.wrapping_add((b0 << 4).wrapping_add(x[2]) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(x[3]));
    }
    state[0] = state[0].wrapping_add(b0);
    state[1] = state[1].wrapping_add(b1);
}

/// The legacy hash (dx_hack_hash): no seed, no minor hash.
fn legacy(name: &[u8], unsigned: bool) -> u32 {
    let (mut h0, mut h1) = (0x12a3_fe2d_u32, 0x37ab_e8f9_u32);
    for &b in name {
        let mut h = h1.wrapping_add(h0 ^ widen(b, unsigned).wrapping_mul(7_152_373));
        if h & 0x8000_0000 != 0 {
            h = h.wrapping_sub(0x7fff_ffff);
        }
        h1 = h0;
        h0 = h;
    }
    h0 << 1
}

/// The hash of `name` under `how`, seeded with `seed` (`s_hash_seed`).
pub fn name_hash(how: DxHash, name: &[u8], seed: &[u8; 16]) -> NameHash {
    let unsigned = how.unsigned();
    let mut state = DEFAULT_SEED;
    if seed.iter().any(|&b| b != 0) {
        for (i, w) in state.iter_mut().enumerate() {
            *w = u32::from_le_bytes([seed[4 * i], seed[4 * i + 1], seed[4 * i + 2], seed[4 * i + 3]]);
        }
    }
    let (major, minor) = match how {
        DxHash::Legacy | DxHash::LegacyUnsigned => (legacy(name, unsigned), 0),
        DxHash::HalfMd4 | DxHash::HalfMd4Unsigned => {
            let mut block = [0u32; 8];
            for at in (0..name.len()).step_by(32) {
                pack(&name[at..], &mut block, unsigned);
                half_md4_block(&mut state, &block);
            }
            (state[1], state[2])
        }
        DxHash::Tea | DxHash::TeaUnsigned => {
            let mut block = [0u32; 4];
            for at in (0..name.len()).step_by(16) {
                pack(&name[at..], &mut block, unsigned);
                tea_block(&mut state, &block);
            }
            (state[0], state[1])
        }
    };
    let major = major & !1;
    let major = if major == HTREE_EOF { HTREE_EOF - 2 } else { major };
    NameHash { major, minor }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `debugfs -R "dx_hash -h ALG -s SEED NAME"` (e2fsprogs 1.47.0).
    #[test]
    fn known_hashes_from_debugfs() {
        let seed: [u8; 16] = [0x5f, 0x3a, 0x0c, 0x2e, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x66, 0x66];
        assert_eq!(name_hash(DxHash::HalfMd4, b"hello", &seed), NameHash { major: 0x8015_8a8a, minor: 0xac35_93a2 });
        assert_eq!(name_hash(DxHash::Tea, b"hello", &[0; 16]), NameHash { major: 0x6f5b_b1a8, minor: 0x2319_17c2 });
        assert_eq!(name_hash(DxHash::Legacy, b"hello", &[0; 16]), NameHash { major: 0x3225_2546, minor: 0 });
    }

    #[test]
    fn the_flavours_differ_only_on_high_bytes() {
        let seed = [7u8; 16];
        for (signed, unsigned) in [(DxHash::Legacy, DxHash::LegacyUnsigned), (DxHash::HalfMd4, DxHash::HalfMd4Unsigned), (DxHash::Tea, DxHash::TeaUnsigned)] {
            assert_eq!(name_hash(signed, b"plain-ascii.txt", &seed), name_hash(unsigned, b"plain-ascii.txt", &seed));
            assert_ne!(name_hash(signed, "caf\u{e9}".as_bytes(), &seed), name_hash(unsigned, "caf\u{e9}".as_bytes(), &seed));
        }
    }

    #[test]
    fn majors_are_even_and_never_the_eof_marker() {
        for i in 0..2000u32 {
            let name = format!("f{i}");
            for how in [DxHash::Legacy, DxHash::HalfMd4, DxHash::Tea] {
                let h = name_hash(how, name.as_bytes(), &[3; 16]);
                assert_eq!(h.major & 1, 0);
                assert_ne!(h.major, HTREE_EOF);
            }
        }
    }
}
