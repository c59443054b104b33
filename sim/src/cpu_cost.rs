//! A CPU cost model: simulated nanoseconds for the work the engine counted
//! ([`CpuWork`]) and the commands the simulated disk took. The figures are
//! per unit of work on one core of a current x86 server, chosen once from
//! what each operation costs (below), never fitted to a benchmark's table.
//! Only `ext4sim bench --what dd` charges it; runs keep the disk's clock.

use ext4_engine::fs::CpuWork;

use crate::disk::DiskStats;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuCost {
    /// crc32c with SSE4.2's crc32 instruction over three streams
    /// (crc32c-intel): about 8 GB/s.
    pub crc32c_bytes_per_s: f64,
    /// copy_from_user / copy_to_user of page-cache data (rep movsb).
    pub copy_bytes_per_s: f64,
    /// Zeroing cached blocks (rep stosb, no read of the destination).
    pub zero_bytes_per_s: f64,
    /// A write or read system call's entry, exit, file lookup and VFS checks.
    pub syscall_ns: f64,
    /// Per block a buffered write dirties: block_write_begin/end's buffer
    /// state, the mapping lookup, dirty accounting.
    pub block_ns: f64,
    /// One mballoc request or free: normalising, the group scan, buddy
    /// and descriptor updates under the group lock.
    pub block_call_ns: f64,
    /// One device command through the block layer: bio build, NVMe
    /// submission, completion interrupt.
    pub command_ns: f64,
}

impl Default for CpuCost {
    fn default() -> CpuCost {
        CpuCost {
            crc32c_bytes_per_s: 8e9,
            copy_bytes_per_s: 10e9,
            zero_bytes_per_s: 20e9,
            syscall_ns: 300.0,
            block_ns: 150.0,
            block_call_ns: 1500.0,
            command_ns: 2000.0,
        }
    }
}

/// A stretch's work, with the disk's share of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    pub engine: CpuWork,
    pub syscalls: u64,
    /// Commands the disk took (reads, writes, flushes).
    pub commands: u64,
    /// Journal bytes written: jbd2 checksums every logged block.
    pub journal_bytes: u64,
}

impl Work {
    /// The disk's part between two snapshots of its counters.
    pub fn disk(before: &DiskStats, after: &DiskStats) -> (u64, u64) {
        let commands = |s: &DiskStats| s.total().reads + s.total().writes + s.flushes;
        (commands(after) - commands(before), after.journal.write_bytes - before.journal.write_bytes)
    }
}

impl CpuCost {
    pub fn ns(&self, w: &Work) -> u64 {
        let per_byte = |bytes: u64, rate: f64| bytes as f64 * 1e9 / rate;
        let e = &w.engine;
        let ns = per_byte(e.bitmap_crc_bytes + w.journal_bytes, self.crc32c_bytes_per_s)
            + per_byte(e.copied_bytes, self.copy_bytes_per_s)
            + per_byte(e.zeroed_bytes, self.zero_bytes_per_s)
            + w.syscalls as f64 * self.syscall_ns
            + e.blocks_written as f64 * self.block_ns
            + e.block_calls as f64 * self.block_call_ns
            + w.commands as f64 * self.command_ns;
        ns.round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_work_costs_what_its_rate_says() {
        let cost = CpuCost::default();
        assert_eq!(cost.ns(&Work::default()), 0);
        let crc = Work { engine: CpuWork { bitmap_crc_bytes: 8_000, ..CpuWork::default() }, ..Work::default() };
        assert_eq!(cost.ns(&crc), 1_000, "8 kB at 8 GB/s");
        let journal = Work { journal_bytes: 8_000, ..Work::default() };
        assert_eq!(cost.ns(&journal), 1_000, "journal blocks are checksummed like bitmaps");
        let copy = Work { engine: CpuWork { copied_bytes: 10_000, zeroed_bytes: 20_000, ..CpuWork::default() }, ..Work::default() };
        assert_eq!(cost.ns(&copy), 2_000);
        let calls = Work { engine: CpuWork { block_calls: 2, blocks_written: 10, ..CpuWork::default() }, syscalls: 10, commands: 1, ..Work::default() };
        assert_eq!(cost.ns(&calls), 3_000 + 1_500 + 3_000 + 2_000);
    }
}
