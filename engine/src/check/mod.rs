//! The engine's own fsck: [`check`] reads an image and reports everything
//! `e2fsck -fn` would object to, as typed [`Problem`]s. The simulator runs it
//! after steps and at the end of every run, so it is built to be fast.
//!
//! Passes, in order (each in its own file):
//! 1. [`groups`]: superblock (checksum, counts that need no scan) and every
//!    group descriptor (checksum, locations, UNINIT flags, itable_unused).
//! 2. [`inodes`]: each group's initialised inode table, streamed in large
//!    reads; checksums of all non-zero slots; mode, dtime, extent trees
//!    ([`extents`]), i_blocks, i_size and symlinks of in-use inodes; the
//!    reserved inodes ([`reserved`]); the inode bitmap against the inodes found.
//! 3. [`xattr`] and [`journal`]: shared xattr blocks; the jbd2 superblock.
//! 4. [`claims`]: every block claimed by metadata or an inode, sorted once:
//!    multiply-claimed blocks, then [`bitmaps`]: block bitmaps (or the
//!    synthesised BLOCK_UNINIT view) and all free counts.
//! 5. [`dirs`] then [`links`]: every directory block, names, file types, "."
//!    and "..", link counts, reachability, lost+found.
//!
//! Contract:
//! - Never panics and never loops unboundedly on any input: reads are bounded
//!   ([`disk::MAX_READ_BYTES`]), tree walks are bounded, and problems beyond
//!   [`state::MAX_PROBLEMS`] are counted, not stored.
//! - Reads only: the device is returned unchanged.
//! - Memory grows with the number of extents, inodes in use and groups, not
//!   with the filesystem size; INODE_UNINIT tables and the itable_unused tail
//!   are never read.
//!
//! Limitations (what this checker cannot see):
//! - Block-mapped (non-extent) files other than the resize inode, inline data
//!   and meta_bg are not checked (reported as `Unsupported`, or the
//!   superblock does not open).
//! - Under bigalloc, block bitmaps and free counts are compared in clusters
//!   (bitmap problems number clusters); an inode may share a cluster only
//!   with itself, and its extents must keep their offset in the cluster.
//! - Backup superblocks and descriptor copies are not compared with the primary.
//! - The journal's contents are not replayed or parsed beyond its superblock.

mod bitmaps;
mod claims;
mod dirs;
mod disk;
mod extents;
mod groups;
mod htree;
mod inodes;
mod journal;
mod links;
pub mod problem;
mod reserved;
mod state;
mod xattr;

use crate::device::BlockDevice;

pub use problem::{BitmapKind, MetaKind, Owner, Problem, Runs, Severity};

/// What was seen, for reports and benchmarks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckStats {
    /// Non-reserved inodes in use.
    pub inodes: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Devices, fifos, sockets and inodes of invalid type.
    pub other: u64,
    /// Blocks in use (metadata included), as counted.
    pub blocks_used: u64,
    pub extents: u64,
    /// Extent-tree blocks below the roots.
    pub tree_blocks: u64,
    pub max_depth: u16,
    pub dir_blocks: u64,
    pub dir_entries: u64,
    /// Groups whose inode table was read (INODE_UNINIT groups count, as nothing needs reading).
    pub groups_scanned: u64,
    pub bytes_read: u64,
    pub reads: u64,
}

/// The result of one [`check`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub problems: Vec<Problem>,
    /// Problems found beyond the first [`state::MAX_PROBLEMS`].
    pub dropped: u64,
    pub stats: CheckStats,
}

impl CheckReport {
    /// No errors (warnings such as a missing lost+found are allowed).
    pub fn is_clean(&self) -> bool {
        self.dropped == 0 && self.problems.iter().all(|p| p.severity() < Severity::Error)
    }

    /// Whether any problem satisfies `f` (for tests: `r.has(|p| matches!(p, Problem::LinkCount { .. }))`).
    pub fn has(&self, f: impl Fn(&Problem) -> bool) -> bool {
        self.problems.iter().any(f)
    }
}

impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for p in &self.problems {
            writeln!(f, "{p}")?;
        }
        if self.dropped > 0 {
            writeln!(f, "... and {} more problems", self.dropped)?;
        }
        let s = &self.stats;
        write!(
            f,
            "{} inodes ({} files, {} dirs, {} symlinks), {} blocks used, {} extents, depth {}",
            s.inodes, s.files, s.dirs, s.symlinks, s.blocks_used, s.extents, s.max_depth
        )
    }
}

/// Checks the filesystem on `dev` and gives the device back with the report.
pub fn check<D: BlockDevice>(dev: D) -> (D, CheckReport) {
    let mut c = match groups::open(dev) {
        Ok(c) => c,
        Err((dev, p)) => return (dev, CheckReport { problems: vec![p], ..CheckReport::default() }),
    };
    inodes::scan(&mut c);
    xattr::check(&mut c);
    journal::check(&mut c);
    let claims = std::mem::take(&mut c.claims);
    let mut overlaps = Vec::new();
    let used = claims.finish(&mut overlaps, c.geo.cluster_bits);
    for p in overlaps {
        c.report(p);
    }
    bitmaps::check_block_bitmaps(&mut c, &used);
    bitmaps::check_counts(&mut c, &used);
    let dirs = dirs::read_all(&mut c);
    links::check(&mut c, &dirs);
    let mut stats = c.stats;
    stats.bytes_read = c.disk.bytes_read;
    stats.reads = c.disk.reads;
    let report = CheckReport { problems: c.problems, dropped: c.dropped, stats };
    (c.disk.dev, report)
}
