//! The internal journal: inode `s_journal_inum` must map every block of its
//! size, and its first block must hold a jbd2 superblock whose block size and
//! length fit the inode.
//!
//! A log with `s_start != 0` is what a crash leaves before recovery: that is
//! legitimate, so the log's structure is validated instead (the scan
//! recovery runs), and needs_recovery must be set or e2fsck would discard
//! the log. A scan ends at the first torn or uncommitted transaction, which
//! is how every log ends; only unreadable log blocks are problems.

use crate::device::BlockDevice;
use crate::format::journal_superblock::{JournalSuperblock, JOURNAL_SB_SIZE};
use crate::format::superblock::feature;
use crate::journal::map::LogMap;
use crate::journal::recovery::scan;

use super::problem::Problem;
use super::state::Checker;

pub fn check<D: BlockDevice>(c: &mut Checker<D>) {
    if !c.sb.has_journal() || c.sb.journal_inum == 0 {
        return;
    }
    let j = c.sb.journal_inum;
    let Some((size, extents)) = c.journal_map.take() else {
        c.report(Problem::Journal { what: format!("journal inode {j} is not an in-use extent-mapped file") });
        return;
    };
    let bs = u64::from(c.geo.block_size);
    let blocks = size / bs;
    let mapped: u64 = extents.iter().filter(|e| u64::from(e.logical) < blocks).map(|e| u64::from(e.len).min(blocks - u64::from(e.logical))).sum();
    if mapped < blocks {
        c.report(Problem::Journal { what: format!("journal inode maps {mapped} of its {blocks} blocks") });
    }
    let Some(first) = extents.iter().find(|e| e.logical == 0 && !e.unwritten) else {
        c.report(Problem::Journal { what: "journal inode has no block 0".to_string() });
        return;
    };
    let b = match c.disk.block(first.physical) {
        Ok(b) => b,
        Err(p) => return c.report(p),
    };
    let mut raw = [0u8; JOURNAL_SB_SIZE];
    let Some(head) = b.get(..JOURNAL_SB_SIZE) else { return };
    raw.copy_from_slice(head);
    let jsb = match JournalSuperblock::parse(&raw, c.geo.block_size) {
        Ok(j) => j,
        Err(e) => return c.report(Problem::Journal { what: e.to_string() }),
    };
    if u64::from(jsb.maxlen) > blocks {
        c.report(Problem::Journal { what: format!("s_maxlen {} > the journal inode's {blocks} blocks", jsb.maxlen) });
    }
    if jsb.start == 0 && c.sb.feature_incompat & feature::INCOMPAT_RECOVER != 0 {
        // e2fsck: "needs_recovery flag is set, but journal has no data".
        c.report(Problem::Journal { what: "needs_recovery is set but the log is empty".to_string() });
    }
    if jsb.start != 0 {
        if c.sb.feature_incompat & feature::INCOMPAT_RECOVER == 0 {
            c.report(Problem::Journal { what: format!("s_start {} but the superblock lacks needs_recovery", jsb.start) });
        }
        let map = match LogMap::from_extents(&extents, u64::from(jsb.maxlen), c.geo.blocks_count) {
            Ok(m) => m,
            Err(e) => return c.report(Problem::Journal { what: e.to_string() }),
        };
        if let Err(e) = scan(&mut c.disk.dev, &map, &jsb, c.geo.blocks_count) {
            c.report(Problem::Journal { what: format!("log from s_start {} unreadable: {e}", jsb.start) });
        }
    }
}
