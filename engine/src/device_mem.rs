//! A sparse in-memory [`BlockDevice`]: storage is a map of fixed-size chunks,
//! created on first non-zero write, so a 16 TiB device costs only what was written.
//!
//! - Every write is durable at once (there is no volatile cache to lose); the
//!   simulator layers its own cache and crash model on top when it needs one.
//! - Unwritten bytes read as zero, like a fresh sparse file.

use std::collections::BTreeMap;

use crate::device::{check_range, BlockDevice, DeviceError, IoClass, WriteFlags};
use crate::format::bitmap::bytes_all;

/// Bytes per stored chunk: one 4 KiB page, so scattered metadata (a bitmap
/// block every flex group of a 16 TiB image) costs what it holds.
pub const CHUNK_BYTES: u64 = 4096;

/// Sparse, always-durable memory device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemDevice {
    size_bytes: u64,
    /// Invariant: every chunk holds exactly `CHUNK_BYTES` bytes.
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl MemDevice {
    /// A zero-filled device of `size_bytes` (rounded down to a whole sector).
    pub fn new(size_bytes: u64) -> Self {
        let size_bytes = size_bytes - size_bytes % crate::device::SECTOR_SIZE;
        MemDevice { size_bytes, chunks: BTreeMap::new() }
    }

    /// Bytes of memory held by chunks, for tests that bound the cost of sparse images.
    pub fn stored_bytes(&self) -> u64 {
        (self.chunks.len() as u64).saturating_mul(CHUNK_BYTES)
    }

    /// Calls `f(chunk_index, offset_in_chunk, piece_range)` for each chunk piece of
    /// the byte range `[offset, offset + len)`.
    fn for_each_piece(offset: u64, len: usize, mut f: impl FnMut(u64, usize, std::ops::Range<usize>)) {
        let mut done = 0usize;
        while done < len {
            let pos = offset + done as u64;
            let chunk = pos / CHUNK_BYTES;
            let in_chunk = (pos % CHUNK_BYTES) as usize;
            let take = (CHUNK_BYTES as usize - in_chunk).min(len - done);
            f(chunk, in_chunk, done..done + take);
            done += take;
        }
    }
}

impl BlockDevice for MemDevice {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn read(&mut self, offset: u64, buf: &mut [u8], _class: IoClass) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        let chunks = &self.chunks;
        Self::for_each_piece(offset, buf.len(), |chunk, in_chunk, piece| {
            let dst = &mut buf[piece.clone()];
            match chunks.get(&chunk) {
                Some(data) => dst.copy_from_slice(&data[in_chunk..in_chunk + piece.len()]),
                None => dst.fill(0),
            }
        });
        Ok(())
    }

    fn write(&mut self, offset: u64, buf: &[u8], _flags: WriteFlags) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        let chunks = &mut self.chunks;
        Self::for_each_piece(offset, buf.len(), |chunk, in_chunk, piece| {
            let src = &buf[piece];
            let data = match chunks.get_mut(&chunk) {
                Some(data) => data,
                // Zeros over a hole change nothing: keep the hole.
                // A raw image is mostly zeros, written whole.
                None if bytes_all(src, 0) => return,
                None => chunks.entry(chunk).or_insert_with(|| vec![0u8; CHUNK_BYTES as usize].into_boxed_slice()),
            };
            data[in_chunk..in_chunk + src.len()].copy_from_slice(src);
        });
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIB: u64 = 1 << 40;

    #[test]
    fn unwritten_reads_zero_and_writes_read_back_across_chunks() {
        let mut dev = MemDevice::new(16 * TIB);
        let mut buf = vec![0xAAu8; 1024];
        dev.read(15 * TIB, &mut buf, IoClass::Metadata).unwrap();
        assert!(buf.iter().all(|&b| b == 0));
        let data: Vec<u8> = (0..3 * CHUNK_BYTES as usize).map(|i| (i % 251) as u8 + 1).collect();
        let at = 16 * TIB - 4 * CHUNK_BYTES + 512;
        dev.write(at, &data, WriteFlags::METADATA).unwrap();
        let mut back = vec![0u8; data.len()];
        dev.read(at, &mut back, IoClass::Metadata).unwrap();
        assert_eq!(back, data);
        assert_eq!(dev.stored_bytes(), 4 * CHUNK_BYTES, "an unaligned 3-chunk write touches 4 chunks");
    }

    #[test]
    fn zero_writes_into_holes_store_nothing() {
        let mut dev = MemDevice::new(TIB);
        dev.write(0, &vec![0u8; 1 << 20], WriteFlags::DATA).unwrap();
        assert_eq!(dev.stored_bytes(), 0);
    }

    #[test]
    fn out_of_range_and_unaligned_are_refused() {
        let mut dev = MemDevice::new(4096);
        let mut buf = [0u8; 512];
        assert!(matches!(dev.read(4096, &mut buf, IoClass::Data), Err(DeviceError::OutOfRange { .. })));
        assert!(matches!(dev.write(100, &buf, WriteFlags::DATA), Err(DeviceError::OutOfRange { .. })));
        assert!(matches!(dev.read(u64::MAX - 511, &mut buf, IoClass::Data), Err(DeviceError::OutOfRange { .. })));
    }
}
