//! The journaled sync path: with has_journal, every sync, fsync, fdatasync,
//! journal-flag switch and unmount commits all dirty metadata (inodes, extent
//! trees, directories, bitmaps, descriptors, the superblock) as ONE jbd2
//! transaction, so a crash recovers to the state at some commit.
//!
//! - File data a transaction is ordered after is on the device before its
//!   commit: closing a transaction writes back the ordered inodes' dirty
//!   data (`writepages`, which decides the order per data mode), and the
//!   journal flushes before it logs anything, so committed metadata never
//!   points at data that is not durable (data=ordered; data=writeback gets
//!   the same for now).
//! - data=journal inodes' dirty data goes into the transaction itself and
//!   is logged with the metadata (`data_journal`); the checkpoint writes it
//!   home.
//! - Blocks freed since the last commit are held by the allocator until this
//!   commit; freed blocks with copies still in the log are revoked.
//! - Checkpoints are lazy: only when the next transaction does not fit the
//!   log, and at unmount (which also clears needs_recovery).
//! - Transactions stay small: before an op, a running transaction that
//!   could outgrow a quarter of the log (or whose dirty metadata holds a
//!   quarter of memory, which it pins until it commits), or held blocks that the op may
//!   need, commit first — as jbd2 commits when a handle does not fit, and
//!   ext4 forces a commit before giving ENOSPC.
//! - A transaction larger than the whole log (not reachable through the ops
//!   above) is written home in place after a checkpoint, without atomicity.

use ext4_model::Errno;

use crate::device::{BlockDevice, IoClass, WriteFlags};
use crate::error::{Error, Result};
use crate::format::superblock::{feature, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::format::BlockNumber;
use crate::journal::Transaction;

use super::{Ctx, Ext4};

/// Blocks an op may allocate beyond its data (tree and directory growth).
const SLACK_BLOCKS: u64 = 16;
/// A running transaction commits once its estimate passes 1/this of the log.
const LOG_SHARE: u64 = 4;

impl<D: BlockDevice> Ctx<D> {
    /// The superblock's filesystem block as it must be logged: the newest copy
    /// of that block (committed or home) with the current superblock in it.
    fn superblock_block(&mut self) -> Result<(BlockNumber, Vec<u8>)> {
        self.sb.feature_incompat |= feature::INCOMPAT_RECOVER;
        let bytes = self.superblock_bytes();
        let bs = self.bs();
        let (block, at) = if bs == SUPERBLOCK_OFFSET { (1, 0) } else { (0, SUPERBLOCK_OFFSET as usize) };
        let committed = self.journal.as_ref().and_then(|j| j.unhomed_copy(block)).map(<[u8]>::to_vec);
        let mut b = match committed {
            Some(c) => c,
            None => {
                let mut b = vec![0u8; bs as usize];
                self.dev.read(block * bs, &mut b, IoClass::Metadata)?;
                b
            }
        };
        b[at..at + SUPERBLOCK_SIZE].copy_from_slice(&bytes);
        Ok((block, b))
    }

    /// The commit time: the engine's deterministic clock.
    fn commit_time(&self) -> (u64, u32) {
        (u64::try_from(self.clock_secs).unwrap_or(0), self.clock_ticks)
    }
}

/// A transaction closed and waiting to be written: jbd2's committing
/// transaction. Its blocks are copies taken when it closed, so ops that run
/// meanwhile build the next (running) transaction on the cache freely.
#[derive(Clone)]
pub(crate) struct Committing {
    /// The tid it commits under (its ticket).
    tid: u32,
    txn: Transaction,
    time: (u64, u32),
    /// Blocks it logs that the running transaction has dirtied since:
    /// jbd2 gives each a frozen copy (do_get_write_access).
    pub(crate) frozen: std::collections::BTreeSet<BlockNumber>,
    /// Frames of the frozen copies ([`super::memory`]).
    pub(crate) copies: Vec<(u8, u64)>,
}

impl Committing {
    /// Whether it logs `block`: until written, that block's newest copy is here.
    pub(crate) fn logs(&self, block: BlockNumber) -> bool {
        self.txn.contains(block)
    }

    /// The blocks it logs, ascending.
    pub(crate) fn logged(&self) -> impl Iterator<Item = BlockNumber> + '_ {
        self.txn.blocks().map(|(b, _)| b)
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// Writes every logged block home and empties the log (no journal:
    /// nothing); `clear_recovery` clears needs_recovery after it.
    pub(crate) fn checkpoint_log(&mut self, clear_recovery: bool) -> Result<()> {
        let ctx = &mut self.ctx;
        match ctx.journal.as_mut() {
            Some(j) => j.checkpoint(&mut ctx.dev, clear_recovery),
            None => Ok(()),
        }
    }

    /// Commits everything dirty as one transaction (see the module docs),
    /// after the transaction already committing, if any.
    pub(crate) fn commit_transaction(&mut self) -> Result<()> {
        self.finish_commit()?;
        let closed = self.close_transaction()?;
        self.finish_commit()?;
        if closed.is_none() {
            // Nothing to log; an fsync still owes the data its flush.
            self.ctx.dev.flush()?;
        }
        Ok(())
    }

    /// The first half of a commit: waits for the committing transaction,
    /// then closes the running one (staging dirty inodes, trees, bitmaps and
    /// descriptors, copying what it logs) and makes it the committing one.
    /// Returns its tid, or None when there was nothing to log.
    pub(crate) fn close_transaction(&mut self) -> Result<Option<u32>> {
        // T_LOCKED waits for the running handles to stop; one a split op
        // holds stops only in its second half, which this thread runs later.
        if self.locks.split_handles > 0 {
            return Err(crate::error::Error::WouldWait(crate::locking::WouldWait(crate::locking::LockClass::JournalHandle)));
        }
        self.finish_commit()?;
        // Room for what staging reads and copies, made while data may
        // still be written back: past this point reclaim can only drop
        // what is clean. A switch between its halves holds write-back off.
        if !self.write_back_held_off() {
            let staging = (self.dirty.len() as u64 + self.ctx.alloc.dirty_count() as u64 + 4).saturating_mul(self.ctx.cache.folios().folio_bytes());
            self.make_room(staging, None)?;
        }
        self.timers.transaction_closed();
        self.write_back_ordered_data()?;
        self.ctx.alloc.set_reuse_held(true);
        let staged = self.stage_metadata();
        self.ctx.alloc.set_reuse_held(false);
        staged?;
        let freed = self.ctx.alloc.take_freed();
        let data = self.ctx.take_staged_data(&freed);
        if self.ctx.cache.dirty_count() == 0 && freed.is_empty() && data.is_empty() {
            return Ok(None);
        }
        let mut txn = Transaction::new();
        for (b, bytes) in self.ctx.cache.dirty_blocks() {
            txn.add(b, bytes.to_vec());
        }
        for (b, bytes) in &data {
            txn.add_data(*b, bytes.to_vec());
        }
        // Until the log holds them, reads find these blocks here.
        self.ctx.committing_data = data;
        let (sb_block, sb_data) = self.ctx.superblock_block()?;
        txn.add(sb_block, sb_data);
        let time = self.ctx.commit_time();
        // Staging filled the cache; nothing here may write data back.
        self.settle_metadata_memory(super::memory::Reclaim::CleanOnly)?;
        let Ctx { journal, cache, .. } = &mut self.ctx;
        let journal = journal.as_ref().ok_or_else(|| Error::InvalidArgument("commit without a journal".into()))?;
        for (start, len) in &freed {
            let end = start.saturating_add(*len);
            let logged: Vec<BlockNumber> = journal.unhomed_in(*start, end).collect();
            for b in logged {
                txn.revoke(b);
            }
        }
        let tid = journal.next_tid();
        cache.mark_all_clean();
        self.committing = Some(Committing { tid, txn, time, frozen: Default::default(), copies: Vec::new() });
        Ok(Some(tid))
    }

    /// The second half: writes the committing transaction to the log (or
    /// home, when it is larger than the log) and frees the blocks it held.
    /// Blocks freed since it closed stay held: the running transaction has
    /// not committed their frees.
    pub(crate) fn finish_commit(&mut self) -> Result<()> {
        let Some(Committing { txn, time, copies, .. }) = self.committing.take() else { return Ok(()) };
        // Nothing below allocates: the copies' memory may go back first,
        // which keeps it from leaking on an I/O error.
        self.release_frames(copies);
        // Logged (or home) below; a failure leaves them to a crash's replay.
        let _in_log = std::mem::take(&mut self.ctx.committing_data);
        #[cfg(feature = "test-hooks")]
        let release_all = self.bug_releases_every_hold();
        #[cfg(not(feature = "test-hooks"))]
        let release_all = false;
        let Ctx { dev, journal, cache, alloc, .. } = &mut self.ctx;
        let journal = journal.as_mut().ok_or_else(|| Error::InvalidArgument("commit without a journal".into()))?;
        let need = journal.log_blocks_for(&txn);
        if need > u64::from(journal.free()) {
            journal.checkpoint(dev, false)?;
        }
        if need > u64::from(journal.capacity()) {
            dev.flush()?;
            let bs = u64::from(cache.block_size() as u32);
            for (b, data) in txn.blocks() {
                dev.write(b * bs, data, WriteFlags::METADATA)?;
            }
            dev.flush()?;
        } else {
            journal.commit(dev, txn, time)?;
        }
        if release_all {
            alloc.release_held();
        } else {
            alloc.release_committed();
        }
        Ok(())
    }

    /// Returns once transaction `tid` is durable: writes it if it is still
    /// the committing one. Otherwise a later sync, a transaction that needed
    /// the log, or a crash already ended it.
    pub(crate) fn wait_for_commit(&mut self, tid: u32) -> Result<()> {
        match &self.committing {
            Some(c) if c.tid == tid => self.finish_commit(),
            _ => Ok(()),
        }
    }

    /// Called before an op that may allocate up to `need_blocks` data blocks:
    /// commits first if held blocks could make it fail, or if the running
    /// transaction is getting big.
    pub(crate) fn prepare_change(&mut self, need_blocks: u64) -> std::result::Result<(), Errno> {
        self.start_handle()?;
        self.run_timers().map_err(Errno::from)?;
        self.settle_metadata_memory(super::memory::Reclaim::WriteBack { spare: None }).map_err(Errno::from)?;
        let Some(journal) = self.ctx.journal.as_ref() else { return Ok(()) };
        let alloc = &self.ctx.alloc;
        let short = alloc.held_blocks() > 0 && alloc.available_blocks() < need_blocks.saturating_add(SLACK_BLOCKS);
        let estimate = (self.ctx.cache.dirty_count() + self.ctx.journaled_data.len() + alloc.dirty_count() + 2 * self.dirty.len() + 1) as u64;
        // Dirty metadata is pinned until its commit: a quarter of memory
        // is as much as a transaction may hold of it.
        let pinned = (self.ctx.cache.dirty_count() as u64).saturating_mul(self.ctx.cache.folios().folio_bytes());
        let heavy = pinned.saturating_mul(LOG_SHARE) > self.ctx.pages.bound_bytes();
        let big = heavy || estimate.saturating_mul(LOG_SHARE) > u64::from(journal.capacity());
        // Not while a split op holds a handle: the commit would wait for
        // it, as the kernel's new handle would wait for that commit.
        if (short || big) && self.locks.split_handles == 0 {
            self.commit_transaction().map_err(Errno::from)?;
        }
        Ok(())
    }

    /// Blocks a write or allocation of `len` bytes may take.
    pub(crate) fn blocks_for_bytes(&self, len: u64) -> u64 {
        len.div_ceil(self.ctx.bs()).saturating_add(2)
    }

    /// What the journal did so far (None without one).
    pub fn journal_stats(&self) -> Option<crate::journal::JournalStats> {
        self.ctx.journal.as_ref().map(|j| j.stats())
    }
}
