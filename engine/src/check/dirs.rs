//! The directory pass, part one: reads every directory's blocks (one read
//! per extent run), parses each linear block (rec_len bounds, name_len,
//! alignment, last entry reaching the tail), verifies its checksum tail, and
//! checks that "." and ".." come first. What it collects is judged in
//! [`super::links`], once every directory is known.
//!
//! htree directories are read through their leaves: the dx root's "." and
//! ".." are checked here, the index itself in [`super::htree`].

use crate::device::BlockDevice;
use crate::format::checksum::inode_seed;
use crate::format::dirent::{self, DirEntry};
use crate::format::InodeNumber;

use super::htree::{self, HtreeBlocks};
use super::problem::Problem;
use super::state::{Checker, DirInfo};

/// One directory's entries as read.
#[derive(Debug, Default)]
pub struct DirData {
    pub ino: InodeNumber,
    /// Target of "." when it is first in block 0.
    pub dot: Option<InodeNumber>,
    /// Target of ".." when it is second in block 0.
    pub dotdot: Option<InodeNumber>,
    /// Every other live entry, in block order ("." or ".." here are misplaced).
    pub entries: Vec<DirEntry>,
}

/// Reads every directory recorded by the inode pass.
pub fn read_all<D: BlockDevice>(c: &mut Checker<D>) -> Vec<DirData> {
    let dirs = std::mem::take(&mut c.dirs);
    dirs.iter().map(|d| read_dir(c, d)).collect()
}

fn read_dir<D: BlockDevice>(c: &mut Checker<D>, d: &DirInfo) -> DirData {
    let bs = u64::from(c.geo.block_size);
    let nblocks = d.size / bs;
    let seed = c.csum_seed.map(|s| inode_seed(s, d.ino, d.generation));
    let mut data = DirData { ino: d.ino, ..DirData::default() };
    let mut index = HtreeBlocks::default();
    let mut next = 0u64;
    for e in &d.extents {
        let logical = u64::from(e.logical);
        if logical >= nblocks {
            break;
        }
        if e.unwritten {
            continue;
        }
        if logical > next {
            c.report(Problem::DirBlock { dir: d.ino, lblk: next, what: format!("hole of {} blocks", logical - next) });
        }
        let take = u64::from(e.len).min(nblocks - logical);
        let mut done = 0u64;
        while done < take {
            let n = (take - done).min(c.disk.max_blocks_per_read());
            let buf = match c.disk.read(e.physical + done, n) {
                Ok(b) => b,
                Err(p) => {
                    c.report(p);
                    break;
                }
            };
            for (i, b) in buf.chunks(bs as usize).enumerate() {
                parse_block(c, d, &mut data, &mut index, logical + done + i as u64, b, seed);
            }
            done += n;
        }
        next = e.logical_end();
    }
    if d.htree {
        htree::check(c, d.ino, nblocks, seed, index);
    }
    data
}

fn parse_block<D: BlockDevice>(c: &mut Checker<D>, d: &DirInfo, data: &mut DirData, index: &mut HtreeBlocks, lblk: u64, b: &[u8], seed: Option<u32>) {
    c.stats.dir_blocks += 1;
    let bad = |what: String| Problem::DirBlock { dir: d.ino, lblk, what };
    if d.htree {
        if lblk == 0 {
            index.root(c, b);
            // The dx root: "." then a ".." whose rec_len covers the index.
            match dirent::parse_block(b, false) {
                Ok(p) => take_entries(c, data, lblk, p.entries.into_iter().take(2).collect()),
                Err(what) => c.report(bad(what)),
            }
            return;
        }
        if index.maybe_node(lblk, b) {
            return; // an interior dx node, or an empty leaf without a tail
        }
    }
    let parsed = match dirent::parse_block(b, seed.is_some()) {
        Ok(p) => p,
        Err(what) => return c.report(bad(what)),
    };
    if let (Some(s), Some(stored)) = (seed, parsed.stored_checksum) {
        let computed = dirent::block_checksum(b, s);
        if computed != stored {
            c.report(Problem::DirChecksum { dir: d.ino, lblk, stored, computed });
        }
    }
    if d.htree {
        index.leaf(c, lblk, parsed.entries.iter().map(|e| e.name.clone()));
    }
    take_entries(c, data, lblk, parsed.entries);
}

/// Files the entries of one block, checking "." and ".." in block 0.
fn take_entries<D: BlockDevice>(c: &mut Checker<D>, data: &mut DirData, lblk: u64, entries: Vec<DirEntry>) {
    c.stats.dir_entries += entries.len() as u64;
    for (i, e) in entries.into_iter().enumerate() {
        if lblk == 0 && i == 0 {
            if e.name == b"." {
                if e.inode != data.ino {
                    c.report(Problem::DotEntry { dir: data.ino, what: format!("'.' names inode {}", e.inode) });
                }
                data.dot = Some(e.inode);
                continue;
            }
            c.report(Problem::DotEntry { dir: data.ino, what: "first entry is not '.'".to_string() });
        }
        if lblk == 0 && i == 1 {
            if e.name == b".." {
                data.dotdot = Some(e.inode);
                continue;
            }
            c.report(Problem::DotEntry { dir: data.ino, what: "second entry is not '..'".to_string() });
        }
        data.entries.push(e);
    }
}
