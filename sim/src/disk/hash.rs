//! FNV-1a 64 over `(offset, data)` pairs in offset order: a deterministic image
//! hash with no `RandomState`, so the same image hashes the same on every run and
//! every machine.
//!
//! All-zero chunks are skipped. The hash is therefore a function of the image's
//! contents alone: a chunk that was written with zeros and one never written at
//! all hash alike, just as they read alike.

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// Incremental FNV-1a 64: stable across runs and platforms, unlike std's hasher.
#[derive(Clone, Copy, Debug)]
pub struct Fnv64(u64);

impl Fnv64 {
    pub const fn new() -> Self {
        Fnv64(OFFSET_BASIS)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(PRIME);
        }
    }

    /// Bulk data: four FNV lanes over 32-byte blocks (one lane's multiply
    /// chain would bound the speed), folded into the state, then the tail
    /// word-wise and byte-wise. Deterministic like `write`.
    pub fn write_bulk(&mut self, bytes: &[u8]) {
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        let mut blocks = bytes.chunks_exact(32);
        if bytes.len() >= 32 {
            let mut lanes = [self.0, self.0.rotate_left(16), self.0.rotate_left(32), self.0.rotate_left(48)];
            for block in &mut blocks {
                for (lane, w) in lanes.iter_mut().zip(block.chunks_exact(8)) {
                    *lane = (*lane ^ word(w)).wrapping_mul(PRIME);
                }
            }
            for lane in lanes {
                self.0 = (self.0 ^ lane).wrapping_mul(PRIME);
            }
        }
        let mut words = blocks.remainder().chunks_exact(8);
        for w in &mut words {
            self.0 = (self.0 ^ word(w)).wrapping_mul(PRIME);
        }
        self.write(words.remainder());
    }

    pub const fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv64 {
    fn default() -> Self {
        Self::new()
    }
}

/// For `#[derive(Hash)]` values (the trace hashes each op so, not its text).
/// Integers go in little-endian, so the hash is the same on every platform.
impl std::hash::Hasher for Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        Fnv64::write(self, bytes);
    }
    fn write_u16(&mut self, n: u16) {
        Fnv64::write(self, &n.to_le_bytes());
    }
    fn write_u32(&mut self, n: u32) {
        Fnv64::write(self, &n.to_le_bytes());
    }
    fn write_u64(&mut self, n: u64) {
        Fnv64::write(self, &n.to_le_bytes());
    }
    fn write_usize(&mut self, n: usize) {
        Fnv64::write(self, &(n as u64).to_le_bytes());
    }
    fn write_isize(&mut self, n: isize) {
        Fnv64::write(self, &(n as i64).to_le_bytes());
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// Plain FNV-1a 64 of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hasher = Fnv64::new();
    hasher.write(bytes);
    hasher.finish()
}

/// Accumulates an image chunk by chunk; feed chunks in ascending offset order.
#[derive(Clone, Debug)]
pub struct ImageHasher {
    state: Fnv64,
    /// Guards the "offset order" rule: two hashes of one image fed in different
    /// orders would silently differ.
    last_offset: Option<u64>,
}

impl Default for ImageHasher {
    fn default() -> Self {
        ImageHasher::new()
    }
}

impl ImageHasher {
    pub const fn new() -> ImageHasher {
        ImageHasher { state: Fnv64::new(), last_offset: None }
    }

    /// Adds the chunk that starts at byte `offset`, unless it is all zeros.
    pub fn add_chunk(&mut self, offset: u64, data: &[u8]) {
        assert!(
            self.last_offset.is_none_or(|last| last < offset),
            "chunks must be hashed in ascending offset order"
        );
        self.last_offset = Some(offset);
        if data.iter().all(|&byte| byte == 0) {
            return;
        }
        self.state.write(&offset.to_le_bytes());
        // Word-wise: the image hash is the costliest part of a short run.
        self.state.write_bulk(data);
    }

    pub const fn finish(&self) -> u64 {
        self.state.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_fnv1a64_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn bulk_hash_sees_every_byte_and_word_order() {
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        let hash = |d: &[u8]| {
            let mut h = Fnv64::new();
            h.write_bulk(d);
            h.finish()
        };
        let base = hash(&data);
        for at in [0, 7, 8, 31, 32, 4000, 4095] {
            let mut flipped = data.clone();
            flipped[at] ^= 1;
            assert_ne!(hash(&flipped), base, "byte {at}");
        }
        // Words trading places, within a block's lanes and across blocks.
        for (a, b) in [(0, 8), (0, 32), (8, 40)] {
            let mut swapped = data.clone();
            for i in 0..8 {
                swapped.swap(a + i, b + i);
            }
            assert_ne!(hash(&swapped), base, "words at {a} and {b}");
        }
        assert_ne!(hash(&data[..4095]), base);
    }

    #[test]
    fn zero_chunks_do_not_count_but_offsets_do() {
        let mut empty = ImageHasher::new();
        empty.add_chunk(0, &[0; 16]);
        empty.add_chunk(4096, &[0; 4096]);
        assert_eq!(empty.finish(), ImageHasher::new().finish());

        // One non-zero byte anywhere, in a word or in the tail, counts.
        for (len, at) in [(4096, 0), (4096, 4095), (4096, 2050), (4099, 4098), (20, 17)] {
            let mut data = vec![0u8; len];
            data[at] = 1;
            let mut one = ImageHasher::new();
            one.add_chunk(0, &data);
            assert_ne!(one.finish(), ImageHasher::new().finish(), "{len} bytes, non-zero at {at}");
        }

        let mut at_zero = ImageHasher::new();
        at_zero.add_chunk(0, &[7; 16]);
        let mut at_4k = ImageHasher::new();
        at_4k.add_chunk(4096, &[7; 16]);
        assert_ne!(at_zero.finish(), at_4k.finish());
    }

    #[test]
    #[should_panic(expected = "ascending offset order")]
    fn out_of_order_chunks_are_refused() {
        let mut hasher = ImageHasher::new();
        hasher.add_chunk(4096, &[1]);
        hasher.add_chunk(0, &[1]);
    }
}
