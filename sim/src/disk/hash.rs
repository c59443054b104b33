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

    /// Bulk data a word at a time: the FNV step on 8-byte words, then the
    /// tail byte-wise. Deterministic like `write`, several times faster.
    pub fn write_bulk(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.0 ^= u64::from_le_bytes(b);
            self.0 = self.0.wrapping_mul(PRIME);
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
    fn zero_chunks_do_not_count_but_offsets_do() {
        let mut empty = ImageHasher::new();
        empty.add_chunk(0, &[0; 16]);
        assert_eq!(empty.finish(), ImageHasher::new().finish());

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
