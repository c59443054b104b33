//! Sparse byte storage: only chunks that were ever written exist, so a 16 TiB
//! device with a few writes costs a few kilobytes. Unwritten bytes read as zero,
//! as on a fresh sparse file. Offsets are trusted here; the device checks ranges
//! before anything reaches the store.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use super::hash::ImageHasher;

/// Allocation granularity in bytes. 4 KiB is the block size of the host file
/// systems a sparse image would live on, so "bytes of backing store" means the
/// same here as there (the ENOSPC fault counts in these units).
pub const CHUNK_BYTES: u64 = 4096;
const CHUNK: usize = CHUNK_BYTES as usize;

/// A sparse, zero-filled byte space.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseStore {
    /// Chunk index (byte offset / [`CHUNK_BYTES`]) to contents. A `BTreeMap`, not a
    /// `HashMap`, so iteration (export, hashing) is in offset order on every run.
    chunks: BTreeMap<u64, Box<[u8; CHUNK]>>,
}

/// Splits `[offset, offset + len)` into pieces that each stay inside one chunk:
/// (chunk index, offset within chunk, position in the caller's buffer, length).
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let mut done = 0usize;
    std::iter::from_fn(move || {
        if done >= len {
            return None;
        }
        let pos = offset + done as u64;
        let within = (pos % CHUNK_BYTES) as usize;
        let take = (CHUNK - within).min(len - done);
        let piece = (pos / CHUNK_BYTES, within, done, take);
        done += take;
        Some(piece)
    })
}

/// A new chunk holding `src` at `within`, zeros elsewhere. A whole chunk is
/// copied straight in rather than zeroed first.
fn fresh_chunk(within: usize, src: &[u8]) -> Box<[u8; CHUNK]> {
    if src.len() == CHUNK {
        if let Ok(whole) = Box::<[u8]>::from(src).try_into() {
            return whole;
        }
    }
    let mut chunk = Box::new([0; CHUNK]);
    chunk[within..within + src.len()].copy_from_slice(src);
    chunk
}

impl SparseStore {
    pub fn new() -> SparseStore {
        SparseStore::default()
    }

    /// Fills `buf` with the bytes at `offset`; holes read as zero.
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        for (index, within, at, take) in pieces(offset, buf.len()) {
            let dst = &mut buf[at..at + take];
            match self.chunks.get(&index) {
                Some(chunk) => dst.copy_from_slice(&chunk[within..within + take]),
                None => dst.fill(0),
            }
        }
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) {
        for (index, within, at, take) in pieces(offset, data.len()) {
            let src = &data[at..at + take];
            match self.chunks.entry(index) {
                Entry::Occupied(mut chunk) => chunk.get_mut()[within..within + take].copy_from_slice(src),
                Entry::Vacant(slot) => {
                    slot.insert(fresh_chunk(within, src));
                }
            }
        }
    }

    /// Every allocated chunk as (byte offset, contents), in offset order.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.chunks.iter().map(|(&index, chunk)| (index * CHUNK_BYTES, &chunk[..]))
    }

    /// Indices of allocated chunks, ascending.
    pub fn chunk_indices(&self) -> impl Iterator<Item = u64> + '_ {
        self.chunks.keys().copied()
    }

    /// Bytes of backing store in use.
    pub fn allocated_bytes(&self) -> u64 {
        (self.chunks.len() as u64).saturating_mul(CHUNK_BYTES)
    }

    /// The content hash of [`super::hash`] over this store.
    pub fn content_hash(&self) -> u64 {
        let mut hasher = ImageHasher::new();
        for (offset, data) in self.chunks() {
            hasher.add_chunk(offset, data);
        }
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_read_as_zero_and_writes_span_chunk_boundaries() {
        let mut store = SparseStore::new();
        let data: Vec<u8> = (0..6000u32).map(|i| (i % 251) as u8 + 1).collect();
        store.write(3584, &data);
        let mut back = vec![0xEE; 6000];
        store.read(3584, &mut back);
        assert_eq!(back, data);

        let mut hole = vec![0xEE; 512];
        store.read(1 << 40, &mut hole);
        assert!(hole.iter().all(|&b| b == 0));
        // 3584..9584 touches chunks 0, 1 and 2.
        assert_eq!(store.allocated_bytes(), 3 * CHUNK_BYTES);
    }

    #[test]
    fn a_store_far_out_on_a_huge_device_stays_small() {
        let mut store = SparseStore::new();
        let end_of_16_tib = 16u64 << 40;
        store.write(end_of_16_tib - 512, &[9; 512]);
        store.write(0, &[1; 512]);
        assert_eq!(store.allocated_bytes(), 2 * CHUNK_BYTES);
        let offsets: Vec<u64> = store.chunks().map(|(offset, _)| offset).collect();
        assert_eq!(offsets, vec![0, end_of_16_tib - CHUNK_BYTES]);
    }

    #[test]
    fn hash_depends_on_contents_not_on_how_zeros_got_there() {
        let mut written_zeros = SparseStore::new();
        written_zeros.write(8192, &[0; 4096]);
        assert_eq!(written_zeros.content_hash(), SparseStore::new().content_hash());

        let mut a = SparseStore::new();
        a.write(0, &[1; 512]);
        let mut b = SparseStore::new();
        b.write(0, &[2; 512]);
        assert_ne!(a.content_hash(), b.content_hash());
    }
}
