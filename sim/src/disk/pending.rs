//! The bytes of a pending write, and the spare buffers they come from.
//!
//! A write that starts and ends on chunk boundaries (nearly every block write
//! of a 4 KiB filesystem) keeps its bytes as whole store chunks, which the
//! store adopts when the write becomes durable: the bytes are copied once,
//! into the cache, not again into the store. Other writes keep a flat buffer.
//! Buffers of destaged writes, and chunks the store gives back, are kept for
//! the next writes, so a run of writes reuses memory instead of faulting in
//! fresh pages each time.

use std::collections::BTreeMap;

use super::store::{fresh_chunk, Chunk, CHUNK, CHUNK_BYTES};

/// Spare flat buffers are kept up to this many bytes in all.
const SPARE_FLAT_BYTES_MAX: usize = 64 << 20;
/// Spare chunks are kept up to this many (64 MiB).
const SPARE_CHUNKS_MAX: usize = 16 << 10;

#[derive(Clone, Debug)]
pub enum PendingBytes {
    Flat(Vec<u8>),
    /// Whole chunks, the first at the write's offset.
    Chunks(Vec<Chunk>),
}

impl PendingBytes {
    /// Copies the bytes from `at` on into `out`.
    pub fn copy_out(&self, at: usize, out: &mut [u8]) {
        match self {
            PendingBytes::Flat(bytes) => out.copy_from_slice(&bytes[at..at + out.len()]),
            PendingBytes::Chunks(chunks) => {
                let mut done = 0;
                while done < out.len() {
                    let (index, within) = ((at + done) / CHUNK, (at + done) % CHUNK);
                    let take = (CHUNK - within).min(out.len() - done);
                    out[done..done + take].copy_from_slice(&chunks[index][within..within + take]);
                    done += take;
                }
            }
        }
    }
}

/// Buffers for pending writes: spare flat buffers by capacity, spare chunks.
#[derive(Clone, Debug, Default)]
pub struct Spares {
    flat: BTreeMap<usize, Vec<Vec<u8>>>,
    flat_bytes: usize,
    chunks: Vec<Chunk>,
}

impl Spares {
    /// A copy of `data`, to be written at `offset`.
    pub fn copy_of(&mut self, offset: u64, data: &[u8]) -> PendingBytes {
        self.copy_of_segments(offset, &[data])
    }

    /// A copy of `segments` back to back (one command of several buffers),
    /// to be written at `offset`: each byte is copied once, straight from
    /// the caller's buffers into the pending write's.
    pub fn copy_of_segments(&mut self, offset: u64, segments: &[&[u8]]) -> PendingBytes {
        let len: usize = segments.iter().map(|s| s.len()).sum();
        let mut source = Gather { segments, at: 0 };
        if offset % CHUNK_BYTES == 0 && len % CHUNK == 0 && len > 0 {
            let chunks = (0..len / CHUNK)
                .map(|_| match self.chunks.pop() {
                    Some(mut chunk) => {
                        source.fill(&mut chunk[..]);
                        chunk
                    }
                    None => match source.whole_chunk() {
                        Some(piece) => fresh_chunk(0, piece),
                        None => {
                            let mut chunk = fresh_chunk(0, &[]);
                            source.fill(&mut chunk[..]);
                            chunk
                        }
                    },
                })
                .collect();
            return PendingBytes::Chunks(chunks);
        }
        let mut copy = self.take_flat(len);
        for segment in segments {
            copy.extend_from_slice(segment);
        }
        PendingBytes::Flat(copy)
    }

    /// Keeps a destaged write's buffers for the next writes.
    pub fn recycle(&mut self, bytes: PendingBytes) {
        match bytes {
            PendingBytes::Flat(mut buf) => {
                if self.flat_bytes + buf.capacity() <= SPARE_FLAT_BYTES_MAX {
                    buf.clear();
                    self.flat_bytes += buf.capacity();
                    self.flat.entry(buf.capacity()).or_default().push(buf);
                }
            }
            PendingBytes::Chunks(chunks) => {
                for chunk in chunks {
                    self.recycle_chunk(chunk);
                }
            }
        }
    }

    pub fn recycle_chunk(&mut self, chunk: Chunk) {
        if self.chunks.len() < SPARE_CHUNKS_MAX {
            self.chunks.push(chunk);
        }
    }

    /// An empty buffer for `len` bytes: a spare no more than twice that size,
    /// else a new one. A buffer that had to grow would be copied by realloc
    /// and a much larger one would leave the next large write none to take.
    fn take_flat(&mut self, len: usize) -> Vec<u8> {
        let (&cap, list) = match self.flat.range_mut(len..=len.saturating_mul(2)).next() {
            Some(fit) => fit,
            None => return Vec::with_capacity(len),
        };
        let buf = list.pop().unwrap_or_default();
        if list.is_empty() {
            self.flat.remove(&cap);
        }
        self.flat_bytes -= buf.capacity();
        buf
    }
}

/// Reads a list of buffers front to back as one stream of bytes.
struct Gather<'a> {
    segments: &'a [&'a [u8]],
    /// Position in the first segment.
    at: usize,
}

impl<'a> Gather<'a> {
    /// Fills `out` with the next `out.len()` bytes; the stream holds them.
    fn fill(&mut self, out: &mut [u8]) {
        let mut done = 0;
        while done < out.len() {
            let segment = self.segments[0];
            let take = (segment.len() - self.at).min(out.len() - done);
            out[done..done + take].copy_from_slice(&segment[self.at..self.at + take]);
            done += take;
            self.advance(take);
        }
    }

    /// The next whole chunk, when one segment holds all of it.
    fn whole_chunk(&mut self) -> Option<&'a [u8]> {
        let segment: &'a [u8] = self.segments.first()?;
        let piece = segment.get(self.at..self.at + CHUNK)?;
        self.advance(CHUNK);
        Some(piece)
    }

    fn advance(&mut self, n: usize) {
        self.at += n;
        while let Some(first) = self.segments.first() {
            if self.at < first.len() {
                break;
            }
            self.at -= first.len();
            self.segments = &self.segments[1..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_whole_chunks_are_kept_as_chunks_and_read_back_across_them() {
        let mut spares = Spares::default();
        let data: Vec<u8> = (0..3 * CHUNK).map(|i| (i % 241) as u8).collect();
        let bytes = spares.copy_of(8 * CHUNK_BYTES, &data);
        assert!(matches!(&bytes, PendingBytes::Chunks(c) if c.len() == 3));
        let mut out = vec![0; CHUNK + 100];
        bytes.copy_out(CHUNK - 50, &mut out);
        assert_eq!(out, data[CHUNK - 50..2 * CHUNK + 50]);

        // Unaligned or partial writes keep a flat buffer.
        assert!(matches!(spares.copy_of(512, &data[..CHUNK]), PendingBytes::Flat(_)));
        assert!(matches!(spares.copy_of(0, &data[..1024]), PendingBytes::Flat(_)));

        // Recycled chunks are reused, with the new bytes in them.
        spares.recycle(bytes);
        let again = spares.copy_of(0, &[7; CHUNK]);
        assert!(spares.chunks.len() == 2);
        let mut back = vec![0; CHUNK];
        again.copy_out(0, &mut back);
        assert_eq!(back, vec![7; CHUNK]);
    }

    #[test]
    fn segments_are_copied_as_one_stream_whatever_their_edges() {
        let data: Vec<u8> = (0..4 * CHUNK).map(|i| (i % 239) as u8).collect();
        let whole = |bytes: &PendingBytes| {
            let mut out = vec![0; data.len()];
            bytes.copy_out(0, &mut out);
            out
        };
        // Chunk-aligned: segments of a chunk and a half, one short, the rest;
        // with no spare chunks, then with spares.
        let cuts = [0, CHUNK + CHUNK / 2, CHUNK + CHUNK / 2 + 1024, 4 * CHUNK];
        let segments: Vec<&[u8]> = cuts.windows(2).map(|w| &data[w[0]..w[1]]).collect();
        let mut spares = Spares::default();
        let fresh = spares.copy_of_segments(0, &segments);
        assert!(matches!(&fresh, PendingBytes::Chunks(c) if c.len() == 4));
        assert_eq!(whole(&fresh), data);
        spares.recycle(fresh);
        let reused = spares.copy_of_segments(CHUNK_BYTES, &segments);
        assert_eq!(whole(&reused), data);
        // Off a chunk boundary: one flat buffer.
        let flat = spares.copy_of_segments(512, &segments);
        assert!(matches!(&flat, PendingBytes::Flat(b) if b.len() == data.len()));
        assert_eq!(whole(&flat), data);
    }
}
