//! The checker's only way to the device: whole-block reads, bounds-checked
//! against the filesystem and the device, counted, and split into bounded
//! chunks so one hostile length cannot ask for gigabytes of memory.

use crate::device::{BlockDevice, IoClass};
use crate::format::BlockNumber;

use super::problem::Problem;

/// Largest single read: big enough to stream inode tables, small enough to bound memory.
pub const MAX_READ_BYTES: u64 = 8 << 20;

/// A block device seen in filesystem blocks.
pub struct Disk<D: BlockDevice> {
    pub dev: D,
    pub block_size: u32,
    /// Blocks inside the filesystem (reads past this are refused).
    pub blocks_count: u64,
    /// Bytes read so far, for the report.
    pub bytes_read: u64,
    /// Read calls issued so far.
    pub reads: u64,
}

impl<D: BlockDevice> Disk<D> {
    pub fn new(dev: D, block_size: u32, blocks_count: u64) -> Self {
        Disk { dev, block_size, blocks_count, bytes_read: 0, reads: 0 }
    }

    /// Most blocks one [`Disk::read`] may ask for.
    pub fn max_blocks_per_read(&self) -> u64 {
        (MAX_READ_BYTES / u64::from(self.block_size.max(1))).max(1)
    }

    /// Reads `count` blocks from `start` into a fresh buffer.
    pub fn read(&mut self, start: BlockNumber, count: u64) -> Result<Vec<u8>, Problem> {
        let io = |what: String| Problem::Io { block: start, count, what };
        if count == 0 || count > self.max_blocks_per_read() {
            return Err(io(format!("read of {count} blocks refused (limit {})", self.max_blocks_per_read())));
        }
        let end = start.checked_add(count).filter(|&e| e <= self.blocks_count);
        if end.is_none() {
            return Err(io(format!("outside the {}-block filesystem", self.blocks_count)));
        }
        let bs = u64::from(self.block_size);
        let offset = start.checked_mul(bs).ok_or_else(|| io("byte offset overflows".to_string()))?;
        let len = usize::try_from(count.saturating_mul(bs)).map_err(|_| io("length overflows".to_string()))?;
        let mut buf = vec![0u8; len];
        self.dev.read(offset, &mut buf, IoClass::Metadata).map_err(|e| io(e.to_string()))?;
        self.bytes_read = self.bytes_read.saturating_add(len as u64);
        self.reads = self.reads.saturating_add(1);
        Ok(buf)
    }

    /// Reads one block.
    pub fn block(&mut self, b: BlockNumber) -> Result<Vec<u8>, Problem> {
        self.read(b, 1)
    }
}
