//! The CPU work an op stream made the engine do, counted where the engine
//! does it, for the simulator's CPU cost model (`ext4sim bench --what dd`):
//! what ext4 would spend cycles on for the same calls, never host time.
//! Device commands and journal blocks (each checksummed by jbd2) are the
//! simulated disk's to count.

use crate::device::BlockDevice;
use crate::format::bitmap::BitmapChecksum;

use super::Ext4;

/// Counts since mount; [`CpuWork::since`] gives a stretch's share.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuWork {
    /// Block and inode bitmap bytes run through crc32c.
    pub bitmap_crc_bytes: u64,
    /// Runs allocated and group pieces freed.
    pub block_calls: u64,
    /// Bytes copied between callers' buffers and the page cache.
    pub copied_bytes: u64,
    /// Bytes of cached blocks zeroed.
    pub zeroed_bytes: u64,
    /// Blocks buffered writes dirtied (per-buffer work).
    pub blocks_written: u64,
}

impl CpuWork {
    pub fn since(&self, earlier: &CpuWork) -> CpuWork {
        CpuWork {
            bitmap_crc_bytes: self.bitmap_crc_bytes - earlier.bitmap_crc_bytes,
            block_calls: self.block_calls - earlier.block_calls,
            copied_bytes: self.copied_bytes - earlier.copied_bytes,
            zeroed_bytes: self.zeroed_bytes - earlier.zeroed_bytes,
            blocks_written: self.blocks_written - earlier.blocks_written,
        }
    }
}

impl<D: BlockDevice> Ext4<D> {
    pub fn cpu_work(&self) -> CpuWork {
        let alloc = self.ctx.alloc.work();
        let cache = self.ctx.pages.stats();
        CpuWork {
            bitmap_crc_bytes: alloc.bitmap_crc_bytes,
            block_calls: alloc.block_calls,
            copied_bytes: cache.copied_in_bytes + cache.copied_out_bytes,
            zeroed_bytes: cache.zeroed_bytes,
            blocks_written: cache.blocks_written,
        }
    }

    /// How bitmaps keep their checksums: [`BitmapChecksum::Recompute`]
    /// reproduces the kernel's cost (the whole bitmap on each change), the
    /// default keeps them running. The bytes written are the same.
    pub fn set_bitmap_checksum(&mut self, how: BitmapChecksum) {
        self.ctx.alloc.set_bitmap_checksum(how);
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FileSystem, MountConfig};

    use crate::device_mem::MemDevice;
    use crate::format::bitmap::BitmapChecksum;
    use crate::mkfs::{mkfs, MkfsOptions};
    use crate::Ext4;

    fn mounted() -> Ext4<MemDevice> {
        let (config, bytes) = (MountConfig::default(), 64 << 20);
        let mut dev = MemDevice::new(bytes);
        mkfs(&mut dev, &MkfsOptions::for_mount(&config, bytes, *b"engine-unit-test", [3; 16], crate::fixtures::EPOCH_SECS)).expect("mkfs");
        Ext4::mount(dev, &config).expect("mount")
    }

    /// One 4 KiB append per block, then write-back: the work each way of
    /// keeping bitmap checksums did.
    fn appends(how: BitmapChecksum) -> super::CpuWork {
        let mut fs = mounted();
        fs.set_bitmap_checksum(how);
        fs.create("/f", 0o644).expect("create");
        let before = fs.cpu_work();
        for i in 0..64u64 {
            fs.write("/f", i * 4096, &[7; 4096]).expect("write");
            fs.fsync("/f").expect("fsync");
        }
        fs.cpu_work().since(&before)
    }

    #[test]
    fn recomputing_bitmap_checksums_costs_the_covered_bytes_per_change() {
        let running = appends(BitmapChecksum::Running);
        let recompute = appends(BitmapChecksum::Recompute);
        assert_eq!(running.block_calls, recompute.block_calls, "the same allocations either way");
        assert!(running.block_calls >= 64, "one allocation per fsynced block at least: {running:?}");
        // 4 KiB blocks: a group's block bitmap covers 4 KiB.
        assert!(recompute.bitmap_crc_bytes >= running.block_calls * 4096, "{recompute:?}");
        // Running: the first load's full pass, then the flipped bytes only.
        assert!(running.bitmap_crc_bytes <= 4096 + running.block_calls * 8, "{running:?}");
        assert_eq!(running.copied_bytes, 64 * 4096);
        assert_eq!(running.blocks_written, 64);
    }
}
