//! jbd2 journaling for the internal journal (inode 8), byte-compatible with
//! the kernel and e2fsck: metadata changes reach their home blocks only after
//! the transaction holding them is committed in the log, so a crash recovers
//! to the last committed transaction.
//!
//! The log is a ring of journal blocks `s_first..s_maxlen`; block 0 is the
//! jbd2 superblock, whose `s_start`/`s_sequence` name the oldest transaction
//! still needed (0 = empty). Contract:
//! - **Commit** ([`transaction`]): flush (ordered data is durable first),
//!   descriptor + copies + revokes, flush, commit block with FUA; under
//!   journal_async_commit the commit block goes with the log blocks and
//!   one flush follows.
//! - **Checkpoint** ([`checkpoint`]): the newest committed copy of each block
//!   goes home, flush, then the log is marked empty.
//! - **Recovery** ([`recovery`]): scan, revoke, replay as e2fsck/recovery.c,
//!   stopping at the first transaction that is torn, uncommitted or fails a
//!   checksum.
//! - The ext4 `needs_recovery` flag is set on disk before the first commit
//!   into an empty log, and cleared once a checkpoint (or recovery) empties it
//!   for good.
//! - Commits always write csum v3 with 64-bit tags (the features a kernel
//!   mount enables); recovery reads no-checksum, v2 and v3 logs, 32- or 64-bit.
//!
//! Limitation: a transaction must fit in the log; the caller keeps them small.

pub mod block;
pub mod checkpoint;
pub mod commit;
pub mod descriptor;
pub mod map;
pub mod recovery;
pub mod revoke;
pub mod transaction;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::device::{BlockDevice, IoClass, WriteFlags};
use crate::error::{Corrupt, Error, Result};
use crate::format::journal_superblock::{JournalSuperblock, JOURNAL_SB_SIZE};
use crate::format::superblock::{feature, Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::format::BlockNumber;

use block::LogFormat;
use map::LogMap;

pub use transaction::Transaction;

/// Counts of what the journal did, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    pub commits: u64,
    pub checkpoints: u64,
    pub log_blocks_written: u64,
    pub revokes: u64,
}

/// A mounted, writable journal.
#[derive(Clone, Debug)]
pub struct Journal {
    jsb: JournalSuperblock,
    map: LogMap,
    /// Filesystem block of the jbd2 superblock (journal block 0).
    jsb_block: BlockNumber,
    fs_blocks: u64,
    /// Next journal block a commit writes.
    head: u32,
    /// First block of the oldest live transaction; 0 when the log is empty.
    tail: u32,
    /// Log blocks between tail and head.
    used: u32,
    next_tid: u32,
    /// Newest committed copy of every block whose home copy is older.
    /// Invariant: empty exactly when `tail == 0`.
    unhomed: BTreeMap<BlockNumber, Box<[u8]>>,
    /// Those of `unhomed` that are file data: their checkpoint writes count as data I/O.
    unhomed_data: std::collections::BTreeSet<BlockNumber>,
    stats: JournalStats,
    /// journal_async_commit: the commit block goes out with the log blocks,
    /// one flush after both (see [`transaction`]).
    async_commit: bool,
}

fn bad(what: String) -> Error {
    Error::Corrupt(Corrupt::Journal(what))
}

/// Reads the jbd2 superblock at filesystem block `block`.
pub(crate) fn read_jsb<D: BlockDevice>(dev: &mut D, block: BlockNumber, block_size: u32) -> Result<JournalSuperblock> {
    let mut raw = [0u8; JOURNAL_SB_SIZE];
    dev.read(block * u64::from(block_size), &mut raw, IoClass::Journal)?;
    JournalSuperblock::parse(&raw, block_size)
}

/// Sets or clears the ext4 superblock's needs_recovery flag in place (the
/// home copy, which is the last checkpointed one). The caller flushes.
pub(crate) fn set_needs_recovery<D: BlockDevice>(dev: &mut D, on: bool) -> Result<()> {
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    dev.read(SUPERBLOCK_OFFSET, &mut raw, IoClass::Metadata)?;
    let mut sb = Superblock::parse(&raw)?;
    if (sb.feature_incompat & feature::INCOMPAT_RECOVER != 0) == on {
        return Ok(());
    }
    if on {
        sb.feature_incompat |= feature::INCOMPAT_RECOVER;
    } else {
        sb.feature_incompat &= !feature::INCOMPAT_RECOVER;
    }
    dev.write(SUPERBLOCK_OFFSET, &sb.to_bytes(), WriteFlags::METADATA)?;
    Ok(())
}

impl Journal {
    /// Opens the journal of the filesystem `sb` describes. The log must be
    /// empty: run [`recovery::recover`] first.
    pub fn open<D: BlockDevice>(dev: &mut D, sb: &Superblock) -> Result<Self> {
        let map = LogMap::load(dev, sb)?;
        let jsb_block = map.physical(0)?;
        let jsb = read_jsb(dev, jsb_block, sb.block_size())?;
        if jsb.maxlen > map.blocks() {
            return Err(bad(format!("s_maxlen {} > the journal inode's {} blocks", jsb.maxlen, map.blocks())));
        }
        if jsb.start != 0 {
            return Err(bad(format!("log not empty (s_start {}): recover first", jsb.start)));
        }
        let head = jsb.first;
        let next_tid = jsb.sequence;
        Ok(Journal {
            jsb,
            map,
            jsb_block,
            fs_blocks: sb.blocks_count,
            head,
            tail: 0,
            used: 0,
            next_tid,
            unhomed: BTreeMap::new(),
            unhomed_data: Default::default(),
            stats: JournalStats::default(),
            async_commit: false,
        })
    }

    /// Commits the way journal_async_commit says from the next one on; the
    /// jbd2 superblock carries the feature from the next log start.
    pub fn set_async_commit(&mut self, on: bool) {
        self.async_commit = on;
    }

    pub fn is_empty(&self) -> bool {
        self.tail == 0
    }

    /// Log blocks a transaction may use at most (the whole ring).
    pub fn capacity(&self) -> u32 {
        self.jsb.maxlen - self.jsb.first
    }

    /// Log blocks free before a checkpoint is needed.
    pub fn free(&self) -> u32 {
        self.capacity() - self.used
    }

    pub fn stats(&self) -> JournalStats {
        self.stats
    }

    pub fn superblock(&self) -> &JournalSuperblock {
        &self.jsb
    }

    /// The tid the next commit gets.
    pub fn next_tid(&self) -> u32 {
        self.next_tid
    }

    /// Blocks of `start..end` with a committed copy not yet home (a freed one
    /// needs a revoke, or recovery would copy old metadata over new data).
    pub fn unhomed_in(&self, start: BlockNumber, end: BlockNumber) -> impl Iterator<Item = BlockNumber> + '_ {
        self.unhomed.range(start..end).map(|(b, _)| *b)
    }

    /// The unhomed copies of blocks `start..end`, by block.
    pub fn unhomed_copies_in(&self, start: BlockNumber, end: BlockNumber) -> impl Iterator<Item = (BlockNumber, &[u8])> + '_ {
        self.unhomed.range(start..end).map(|(b, copy)| (*b, &copy[..]))
    }

    /// The newest committed copy of `block`, if its home copy is older.
    pub fn unhomed_copy(&self, block: BlockNumber) -> Option<&[u8]> {
        self.unhomed.get(&block).map(|b| &b[..])
    }

    fn format(&self) -> LogFormat {
        LogFormat::from_jsb(&self.jsb)
    }

    fn bs(&self) -> u64 {
        u64::from(self.jsb.block_size)
    }

    /// The journal block `n` blocks after `pos`, wrapping from the end of the
    /// ring to `s_first` (jbd2's wrap()).
    fn advance(&self, pos: u32, n: u32) -> u32 {
        let ring = self.capacity();
        let off = (pos - self.jsb.first + n % ring) % ring;
        self.jsb.first + off
    }

    /// Writes `blocks` to the log from `pos` on, one device write per
    /// physically contiguous piece. Returns the position after them.
    fn write_log<D: BlockDevice, B: AsRef<[u8]>>(&mut self, dev: &mut D, mut pos: u32, blocks: &[B]) -> Result<u32> {
        let bs = self.bs() as usize;
        let mut i = 0usize;
        while i < blocks.len() {
            let phys = self.map.physical(pos)?;
            let room = self.map.contiguous_from(pos).min(self.jsb.maxlen - pos) as usize;
            let n = room.min(blocks.len() - i).max(1);
            let mut buf = Vec::with_capacity(n * bs);
            for b in &blocks[i..i + n] {
                debug_assert_eq!(b.as_ref().len(), bs);
                buf.extend_from_slice(b.as_ref());
            }
            dev.write(phys * self.bs(), &buf, WriteFlags::JOURNAL)?;
            i += n;
            pos = self.advance(pos, n as u32);
        }
        self.stats.log_blocks_written += blocks.len() as u64;
        Ok(pos)
    }

    /// Writes the jbd2 superblock as it stands in memory.
    fn write_jsb<D: BlockDevice>(&mut self, dev: &mut D, fua: bool) -> Result<()> {
        let bytes = self.jsb.to_bytes();
        dev.write(self.jsb_block * self.bs(), &bytes, WriteFlags { fua, ..WriteFlags::JOURNAL })?;
        Ok(())
    }
}
