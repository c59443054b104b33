//! data=journal: file data logged with the metadata (ext4's journalled
//! address-space operations).
//!
//! Write-back of an inode in journal mode (a data=journal mount, or
//! chattr +j under nodelalloc: under delalloc ext4 only stores the flag)
//! does not write its dirty blocks home. It hands their bytes to the
//! running transaction, which logs them like metadata at its close; the
//! checkpoint writes them home later, and a crash replays them from the
//! log. Until a block is home its newest bytes live in the transaction
//! (this module's staging), in the committing one (closed, not yet
//! written: a split fsync leaves it so while other ops run), or in the
//! journal's unhomed copies, so a read
//! that misses the page cache lays those over what the device returns,
//! as the kernel keeps such pages pinned in the page cache until the
//! checkpoint. A staged block that is freed before its transaction closes
//! is dropped there (its frees commit in the same transaction, so it can
//! not have been reused); one already in the log is revoked, as ext4
//! revokes freed journaled data (jbd2_journal_forget).

use std::collections::BTreeMap;

use crate::device::BlockDevice;
use crate::format::BlockNumber;
use crate::journal::Journal;

use super::Ctx;

/// Data blocks of journal-mode inodes written back since the running
/// transaction began, by physical block: the newest bytes of each.
pub(crate) type StagedData = BTreeMap<BlockNumber, Box<[u8]>>;

impl<D: BlockDevice> Ctx<D> {
    /// Stages block `physical` of journal-mode data for the running transaction.
    pub(crate) fn log_data_block(&mut self, physical: BlockNumber, bytes: &[u8]) {
        if self.bug_unlogged_data {
            return;
        }
        self.journaled_data.insert(physical, bytes.into());
        self.wb_stats.journaled_blocks += 1;
    }

    /// Lays over `buf` (read from the device at block `first`) the newer
    /// copies of its blocks that are not home yet.
    pub(crate) fn overlay_unhomed_data(&self, first: BlockNumber, buf: &mut [u8]) {
        overlay_unhomed(self.journal.as_ref(), &self.committing_data, &self.journaled_data, self.bs(), first, buf);
    }

    /// The staged data the closing transaction logs: everything staged
    /// but blocks freed since (`freed`: (start, len) runs).
    pub(crate) fn take_staged_data(&mut self, freed: &[(BlockNumber, u64)]) -> StagedData {
        let mut staged = std::mem::take(&mut self.journaled_data);
        staged.retain(|b, _| !freed.iter().any(|(start, len)| (*start..start.saturating_add(*len)).contains(b)));
        staged
    }
}

/// [`Ctx::overlay_unhomed_data`] for a caller that holds a folio of the
/// page cache borrowed. Newest wins: the running transaction's staging,
/// then the committing transaction's blocks, then the journal's
/// committed copies, then what the device gave.
pub(crate) fn overlay_unhomed(journal: Option<&Journal>, committing: &StagedData, staged: &StagedData, bs: u64, first: BlockNumber, buf: &mut [u8]) {
    let bs = bs as usize;
    let end = first + (buf.len() / bs) as u64;
    let mut put = |b: BlockNumber, copy: &[u8]| {
        let at = (b - first) as usize * bs;
        buf[at..at + bs].copy_from_slice(copy);
    };
    let logged = journal.into_iter().flat_map(|j| j.unhomed_copies_in(first, end));
    let newer = committing.range(first..end).chain(staged.range(first..end)).map(|(b, copy)| (*b, &copy[..]));
    for (b, copy) in logged.chain(newer) {
        put(b, copy);
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FallocFlags, FileSystem, MountConfig};

    use crate::fixtures::mounted_with;
    use crate::fs::Ext4;

    /// A split fsync leaves its transaction closed and unwritten while other
    /// ops run. A read-modify-write of a block that transaction logged
    /// (here one collapse moved to block 0 and dropped from the cache) must
    /// start from the logged bytes, not the stale home copy. Found by a
    /// four-task crash swarm under data=journal (seed 6033).
    #[test]
    fn a_block_in_the_committing_transaction_is_read_from_there() {
        let mut fs = mounted_with("data=journal");
        fs.create("/a", 0o644).unwrap();
        let first: Vec<u8> = (0..5690u32).map(|i| (i % 251) as u8 + 1).collect();
        fs.write("/a", 0, &first).unwrap();
        fs.fallocate("/a", FallocFlags(FallocFlags::COLLAPSE_RANGE), 0, 4096).unwrap();
        let ticket = fs.begin_fsync("/a").unwrap();
        assert!(!fs.ctx.committing_data.is_empty(), "the shifted block waits in the committing transaction");
        fs.write("/a", 0, &[0xEE]).unwrap();
        fs.finish_sync(ticket).unwrap();
        let mut want = first[4096..].to_vec();
        want[0] = 0xEE;
        assert_eq!(fs.read("/a", 0, 4096).unwrap(), want);
        let dev = fs.unmount().unwrap();
        let mut fs = Ext4::mount(dev, &"data=journal".parse::<MountConfig>().unwrap()).unwrap();
        assert_eq!(fs.read("/a", 0, 4096).unwrap(), want, "and so does the image");
    }
}
