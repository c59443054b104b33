//! `ext4sim bench --what dd`: the LBS series' bandwidth table in simulated
//! time. One stream writes a file sequentially (buffered then fsync, or
//! O_DIRECT) on an `nvme` disk; each cell's time is the disk's clock plus
//! the CPU cost model's charge for the work the engine counted
//! ([`crate::cpu_cost`]), the two serial as on one core issuing
//! synchronous I/O. Bitmap checksums are kept either way: recomputed whole
//! on each change (the kernel's cost) or running (the engine's). Rows are
//! LBS block sizes, then bigalloc: 4 KiB blocks in 8..64 KiB clusters.

use ext4_engine::format::bitmap::BitmapChecksum;
use ext4_model::{FileSystem, MountConfig};

use crate::cpu_cost::{CpuCost, Work};
use crate::engine_target::make_engine;
use crate::run::{ProfileSpec, RunSpec};

const KIB: u64 = 1024;
/// A row: the filesystem's block size, and bigalloc's cluster size if any
/// (page size 4 KiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub block: u64,
    pub cluster: Option<u64>,
}

const fn lbs(block: u64) -> Row {
    Row { block, cluster: None }
}

const fn bigalloc(cluster: u64) -> Row {
    Row { block: 4 * KIB, cluster: Some(cluster) }
}

/// Rows: LBS block sizes, then bigalloc clusters at 4 KiB blocks.
pub const ROWS: [Row; 9] = [
    lbs(4 * KIB),
    lbs(8 * KIB),
    lbs(16 * KIB),
    lbs(32 * KIB),
    lbs(64 * KIB),
    bigalloc(8 * KIB),
    bigalloc(16 * KIB),
    bigalloc(32 * KIB),
    bigalloc(64 * KIB),
];

impl Row {
    fn mount(&self) -> String {
        let mut m = format!("bs={}k,ps=4k", self.block / KIB);
        if let Some(c) = self.cluster {
            m += &format!(",cluster={}k", c / KIB);
        }
        m
    }

    fn label(&self) -> String {
        match self.cluster {
            None => format!("{}K", self.block / KIB),
            Some(c) => format!("4K/{}K c", c / KIB),
        }
    }
}
/// Columns: the size of each write.
pub const IO_SIZES: [u64; 5] = [4 * KIB, 8 * KIB, 16 * KIB, 32 * KIB, 64 * KIB];
const DISK_BYTES: u64 = 4 << 30;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Buffered,
    Direct,
}

/// One cell: where the time went.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cell {
    pub bytes: u64,
    pub device_ns: u64,
    pub cpu_ns: u64,
    pub work: Work,
}

impl Cell {
    /// Bandwidth in MB/s (10^6 bytes) of simulated time.
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 * 1e3 / (self.device_ns + self.cpu_ns).max(1) as f64
    }
}

/// Writes `total` bytes in `io`-sized pieces on `row`'s filesystem.
pub fn run_cell(stream: Stream, how: BitmapChecksum, row: Row, io: u64, total: u64, cost: &CpuCost) -> Result<Cell, String> {
    let mount: MountConfig = row.mount().parse().map_err(|e| format!("{}: {e}", row.mount()))?;
    let spec = RunSpec { disk_bytes: DISK_BYTES, profile: ProfileSpec::resolve("nvme")?, ..RunSpec::new(1, 0, mount) };
    let mut target = make_engine(&spec)?;
    let fs = target.engine_mut().ok_or("the engine is not mounted")?;
    fs.set_bitmap_checksum(how);
    fs.create("/dd", 0o644).map_err(|e| format!("create: {e:?}"))?;
    let buf = vec![0x5a; io as usize];
    let (disk0, t0, work0) = (fs.device().stats().clone(), fs.device().now(), fs.cpu_work());
    let mut at = 0;
    while at < total {
        let n = match stream {
            Stream::Buffered => fs.write("/dd", at, &buf),
            Stream::Direct => fs.direct_write("/dd", at, &buf),
        }
        .map_err(|e| format!("{stream:?} write at {at}: {e:?}"))?;
        if n != io {
            return Err(format!("{stream:?} write at {at} wrote {n} of {io}"));
        }
        at += io;
    }
    fs.fsync("/dd").map_err(|e| format!("fsync: {e:?}"))?;
    let device_ns = fs.device().now().saturating_since_ns(t0);
    let (commands, journal_bytes) = Work::disk(&disk0, fs.device().stats());
    let work = Work { engine: fs.cpu_work().since(&work0), syscalls: total / io + 1, commands, journal_bytes };
    Ok(Cell { bytes: total, device_ns, cpu_ns: cost.ns(&work), work })
}

/// Every cell of one stream and checksum way, by [`ROWS`].
pub fn table(stream: Stream, how: BitmapChecksum, total: u64, cost: &CpuCost) -> Result<Vec<Vec<Cell>>, String> {
    ROWS.iter().map(|row| IO_SIZES.iter().map(|io| run_cell(stream, how, *row, *io, total, cost)).collect()).collect()
}

/// The table as text: MB/s per cell, then each row's share of CPU time.
pub fn render(title: &str, rows: &[Vec<Cell>]) -> String {
    let mut out = format!("{title}\n  {:<10}", "block\\I/O");
    for io in IO_SIZES {
        out += &format!("{:>9}", format!("{}K", io / KIB));
    }
    out += "   cpu share\n";
    for (r, row) in ROWS.iter().zip(rows) {
        out += &format!("  {:<10}", r.label());
        for cell in row {
            out += &format!("{:>9.0}", cell.mb_per_s());
        }
        let (cpu, all) = row.iter().fold((0, 0), |(c, a), cell| (c + cell.cpu_ns, a + cell.cpu_ns + cell.device_ns));
        out += &format!("   {:>5.1}%\n", 100.0 * cpu as f64 / all.max(1) as f64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOTAL: u64 = 2 << 20;

    #[test]
    fn direct_writes_at_small_sizes_pay_for_whole_bitmap_checksums_as_blocks_grow() {
        let cost = CpuCost::default();
        let cell = |how, bs| run_cell(Stream::Direct, how, lbs(bs), 4 * KIB, TOTAL, &cost).expect("cell");
        let (kernel, engine) = (cell(BitmapChecksum::Recompute, 64 * KIB), cell(BitmapChecksum::Running, 64 * KIB));
        assert_eq!(kernel.device_ns, engine.device_ns, "the same I/O either way");
        assert_eq!(kernel.work.engine.block_calls, engine.work.engine.block_calls);
        assert!(kernel.work.engine.bitmap_crc_bytes > 10 * engine.work.engine.bitmap_crc_bytes, "{kernel:?} vs {engine:?}");
        assert!(kernel.cpu_ns > engine.cpu_ns);
    }

    #[test]
    fn buffered_writes_count_their_copies_and_blocks() {
        let cost = CpuCost::default();
        let small = run_cell(Stream::Buffered, BitmapChecksum::Running, lbs(4 * KIB), 4 * KIB, TOTAL, &cost).expect("4K");
        let large = run_cell(Stream::Buffered, BitmapChecksum::Running, lbs(64 * KIB), 4 * KIB, TOTAL, &cost).expect("64K");
        assert_eq!(small.work.engine.copied_bytes, TOTAL);
        assert_eq!(small.work.engine.blocks_written, TOTAL / (4 * KIB), "one block per 4K write at 4K blocks");
        assert_eq!(large.work.engine.blocks_written, TOTAL / (4 * KIB), "a 4K write into a 64K block dirties that one block");
        assert!(small.work.syscalls == TOTAL / (4 * KIB) + 1);
        assert!(small.mb_per_s() > 0.0 && large.mb_per_s() > 0.0);
    }

    #[test]
    fn bigalloc_rows_allocate_whole_clusters() {
        let cost = CpuCost::default();
        let cell = |row| run_cell(Stream::Direct, BitmapChecksum::Running, row, 4 * KIB, TOTAL, &cost).expect("cell");
        let (plain, clustered) = (cell(lbs(4 * KIB)), cell(bigalloc(64 * KIB)));
        assert_eq!(plain.work.engine.copied_bytes, clustered.work.engine.copied_bytes);
        // A 4K direct write into a 64K cluster the file already has allocates nothing.
        assert!(clustered.work.engine.block_calls * 8 < plain.work.engine.block_calls, "{clustered:?} vs {plain:?}");
    }
}
