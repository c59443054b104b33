//! Coalesces mkfs's block writes: adjacent blocks go to the device in one
//! call (up to a bound), so laying out a 16 TiB filesystem is a few thousand
//! writes rather than one per block.

use crate::device::{BlockDevice, WriteFlags};
use crate::error::Result;
use crate::format::BlockNumber;

/// Coalesces writes to adjacent blocks into one device call.
pub(super) struct BlockWriter<'d, D: BlockDevice> {
    dev: &'d mut D,
    block_size: u64,
    start: BlockNumber,
    buf: Vec<u8>,
    pub(super) bytes_written: u64,
}

/// Largest coalesced write.
const MAX_WRITE_BYTES: usize = 4 << 20;

impl<'d, D: BlockDevice> BlockWriter<'d, D> {
    pub(super) fn new(dev: &'d mut D, block_size: u32) -> Self {
        BlockWriter { dev, block_size: u64::from(block_size), start: 0, buf: Vec::new(), bytes_written: 0 }
    }

    pub(super) fn put(&mut self, block: BlockNumber, data: &[u8]) -> Result<()> {
        debug_assert_eq!(data.len() as u64 % self.block_size, 0);
        let pending_end = self.start + self.buf.len() as u64 / self.block_size;
        if self.buf.is_empty() || block != pending_end || self.buf.len() + data.len() > MAX_WRITE_BYTES {
            self.finish()?;
            self.start = block;
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    /// Writes `count` zero blocks from `block`.
    pub(super) fn zero(&mut self, block: BlockNumber, count: u64) -> Result<()> {
        let chunk_blocks = (MAX_WRITE_BYTES as u64 / self.block_size).max(1);
        let zeros = vec![0u8; (chunk_blocks * self.block_size) as usize];
        let mut done = 0;
        while done < count {
            let n = (count - done).min(chunk_blocks);
            self.put(block + done, &zeros[..(n * self.block_size) as usize])?;
            done += n;
        }
        Ok(())
    }

    /// Sends any pending run to the device.
    pub(super) fn finish(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.dev.write(self.start * self.block_size, &self.buf, WriteFlags::METADATA)?;
            self.bytes_written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}


#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::IoClass;
    use crate::device_mem::MemDevice;

    #[test]
    fn adjacent_blocks_merge_and_others_land_where_asked() {
        let mut dev = MemDevice::new(1 << 20);
        let mut w = BlockWriter::new(&mut dev, 1024);
        w.put(3, &[1u8; 1024]).unwrap();
        w.put(4, &[2u8; 2048]).unwrap();
        w.put(10, &[3u8; 1024]).unwrap();
        w.zero(4, 1).unwrap();
        w.finish().unwrap();
        assert_eq!(w.bytes_written, 5 * 1024);
        let mut b = vec![0u8; 8 * 1024];
        dev.read(3 * 1024, &mut b, IoClass::Metadata).unwrap();
        assert!(b[..1024].iter().all(|&x| x == 1));
        assert!(b[1024..2048].iter().all(|&x| x == 0), "the later zero write wins");
        assert!(b[2048..3072].iter().all(|&x| x == 2));
        assert!(b[7 * 1024..].iter().all(|&x| x == 3));
    }
}
