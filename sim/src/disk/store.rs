//! Sparse byte storage: only chunks that were ever written exist, so a 16 TiB
//! device with a few writes costs a few kilobytes. Unwritten bytes read as zero,
//! as on a fresh sparse file. Offsets are trusted here; the device checks ranges
//! before anything reaches the store.

use std::collections::BTreeMap;

use super::hash::ImageHasher;

/// Allocation granularity in bytes. 4 KiB is the block size of the host file
/// systems a sparse image would live on, so "bytes of backing store" means the
/// same here as there (the ENOSPC fault counts in these units).
pub const CHUNK_BYTES: u64 = 4096;
pub(super) const CHUNK: usize = CHUNK_BYTES as usize;

/// Chunk slots per index page: a page covers 2 MiB of the device.
const PAGE_CHUNKS: usize = 512;

/// One chunk's bytes, boxed so a whole chunk moves between the cache and
/// the store without a copy.
pub type Chunk = Box<[u8; CHUNK]>;

/// A sparse, zero-filled byte space.
///
/// Two levels: a map from 2 MiB page number to a page of chunk slots. A
/// large write then costs one tree search per page, not one per chunk (a
/// search per 4 KiB chunk was the store's whole cost on data-heavy runs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SparseStore {
    /// Page number to its [`PAGE_CHUNKS`] slots. A `BTreeMap`, not a `HashMap`,
    /// so iteration (export, hashing) is in offset order on every run.
    pages: BTreeMap<u64, Vec<Option<Chunk>>>,
    /// Chunks allocated in all pages.
    chunk_count: u64,
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

fn empty_page() -> Vec<Option<Chunk>> {
    vec![None; PAGE_CHUNKS]
}

/// (page number, slot within the page) of chunk `index`.
fn page_slot(index: u64) -> (u64, usize) {
    (index / PAGE_CHUNKS as u64, (index % PAGE_CHUNKS as u64) as usize)
}

/// A new chunk holding `src` at `within`, zeros elsewhere. A whole chunk is
/// copied straight in rather than zeroed first.
pub(super) fn fresh_chunk(within: usize, src: &[u8]) -> Chunk {
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
        let mut page: Option<(u64, Option<&Vec<Option<Chunk>>>)> = None;
        for (index, within, at, take) in pieces(offset, buf.len()) {
            let (number, slot) = page_slot(index);
            let slots = match page {
                Some((n, slots)) if n == number => slots,
                _ => {
                    let slots = self.pages.get(&number);
                    page = Some((number, slots));
                    slots
                }
            };
            let dst = &mut buf[at..at + take];
            match slots.and_then(|s| s[slot].as_ref()) {
                Some(chunk) => dst.copy_from_slice(&chunk[within..within + take]),
                None => dst.fill(0),
            }
        }
    }

    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut page: Option<(u64, &mut Vec<Option<Chunk>>)> = None;
        for (index, within, at, take) in pieces(offset, data.len()) {
            let (number, slot) = page_slot(index);
            let slots = match page {
                Some((n, slots)) if n == number => slots,
                _ => self.pages.entry(number).or_insert_with(empty_page),
            };
            let src = &data[at..at + take];
            match &mut slots[slot] {
                Some(chunk) => chunk[within..within + take].copy_from_slice(src),
                empty => {
                    *empty = Some(fresh_chunk(within, src));
                    self.chunk_count += 1;
                }
            }
            page = Some((number, slots));
        }
    }

    /// Makes `chunks` the contents of chunks `first..`, one tree search per
    /// page they fall in; what they replace goes to `replaced`.
    pub fn adopt(&mut self, first: u64, chunks: impl IntoIterator<Item = Chunk>, mut replaced: impl FnMut(Chunk)) {
        let mut page: Option<(u64, &mut Vec<Option<Chunk>>)> = None;
        for (index, chunk) in (first..).zip(chunks) {
            let (number, slot) = page_slot(index);
            let slots = match page {
                Some((n, slots)) if n == number => slots,
                _ => self.pages.entry(number).or_insert_with(empty_page),
            };
            match slots[slot].replace(chunk) {
                Some(old) => replaced(old),
                None => self.chunk_count += 1,
            }
            page = Some((number, slots));
        }
    }

    /// Every allocated chunk as (byte offset, contents), in offset order.
    pub fn chunks(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        self.pages.iter().flat_map(|(&number, slots)| {
            slots.iter().enumerate().filter_map(move |(slot, chunk)| {
                let index = number * PAGE_CHUNKS as u64 + slot as u64;
                chunk.as_ref().map(|c| (index * CHUNK_BYTES, &c[..]))
            })
        })
    }

    /// Bytes of backing store in use.
    pub fn allocated_bytes(&self) -> u64 {
        self.chunk_count.saturating_mul(CHUNK_BYTES)
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
    fn a_write_across_an_index_page_edge_lands_in_both_pages() {
        let mut store = SparseStore::new();
        let edge = (PAGE_CHUNKS as u64) * CHUNK_BYTES;
        let data: Vec<u8> = (0..3 * CHUNK).map(|i| (i % 253) as u8 + 1).collect();
        store.write(edge - CHUNK_BYTES - 512, &data);
        let mut back = vec![0; data.len() + 1024];
        store.read(edge - CHUNK_BYTES - 1024, &mut back);
        assert_eq!(&back[512..512 + data.len()], &data[..]);
        assert!(back[..512].iter().chain(&back[512 + data.len()..]).all(|&b| b == 0));
        // 4 chunks: two below the edge, two above; rewriting allocates none.
        assert_eq!(store.allocated_bytes(), 4 * CHUNK_BYTES);
        store.write(edge - 512, &[7; 1024]);
        assert_eq!(store.allocated_bytes(), 4 * CHUNK_BYTES);
        let offsets: Vec<u64> = store.chunks().map(|(offset, _)| offset).collect();
        assert_eq!(offsets, vec![edge - 2 * CHUNK_BYTES, edge - CHUNK_BYTES, edge, edge + CHUNK_BYTES]);
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
