//! Data write-back (ext4_writepages): an inode's dirty blocks go from the
//! page cache to the device.
//!
//! 1. Delayed extents under dirty blocks are allocated, one allocator
//!    request per contiguous delayed run (mballoc may answer a request
//!    with a shorter extent; the rest is asked for again), and leave the
//!    extent status tree; the reservation becomes real blocks.
//! 2. Dirty blocks are written, one device command per physically
//!    contiguous run (at most [`super::buffered::MAX_IO_PAGES`] pages),
//!    straight from the folios (a segment each, as a bio's vectors).
//! 3. Blocks written into unwritten extents convert them to written, after
//!    the data is on its way: a commit never marks data written before it
//!    was written.
//!
//! When write-back runs: fsync/fdatasync (that file), sync and unmount
//! (every file), FIEMAP with FIEMAP_FLAG_SYNC, collapse and insert range
//! (from the page holding the offset), the journal-flag switch, and
//! reclaim when new folios would pass the cache's bound.
//!
//! Ordering against the journal is decided in one place,
//! [`Ctx::orders_data`]: inodes whose dirty data must reach the device
//! before the commit record (blocks the transaction allocated as written,
//! zeroed tails of written blocks) are written back when a transaction
//! closes, before its metadata is staged; the journal flushes before it
//! logs. Delayed allocation needs no list: its blocks are allocated and
//! written in one go.

use ext4_model::InodeJournalMode;

use crate::device::{BlockDevice, WriteFlags};
use crate::locking::lockdep::Acquired;
use crate::locking::switch::Tracker;

use super::locks::{Lock, LockHolder};
use crate::error::{Error, Result};
use crate::format::InodeNumber;
use crate::range_set::RangeSet;

use super::node::Node;
use super::{Ctx, Ext4};

/// Blocks write-back may need beyond the delayed ones (extent-tree growth).
const SLACK_BLOCKS: u64 = 16;

/// What data write-back did over a mount, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritebackStats {
    /// Allocator requests made for delayed extents.
    pub delalloc_requests: u64,
    /// Blocks delayed allocation placed.
    pub delalloc_blocks: u64,
    /// Device commands write-back issued.
    pub commands: u64,
    pub bytes: u64,
    /// Unwritten blocks write-back converted.
    pub converted_blocks: u64,
    /// Blocks of journal-mode inodes handed to the journal instead.
    pub journaled_blocks: u64,
}

impl<D: BlockDevice> Ctx<D> {
    /// Whether `node`'s dirty data over blocks allocated (or zeroed) in
    /// the running transaction must reach the device before its commit
    /// record. The one place the data mode decides write-back order:
    /// - data=ordered: yes, that is the mode;
    /// - data=writeback: no, the commit goes first and the data follows
    ///   when write-back gets to it (stale blocks may show after a crash);
    /// - data=journal: the blocks go into the transaction itself
    ///   (`data_journal`), so write-back must come before it closes;
    /// - no journal: there is no commit to order against.
    pub fn orders_data(&self, node: &Node) -> bool {
        if self.journal.is_none() {
            return false;
        }
        match self.data_mode(node) {
            InodeJournalMode::Ordered => !self.bug_unordered_data,
            InodeJournalMode::Journal => true,
            InodeJournalMode::Writeback => false,
        }
    }

    /// Allocates delayed blocks `run` of `node` (one request, repeated for
    /// what a shorter answer left), mapping them written.
    fn allocate_delayed(&mut self, ino: InodeNumber, node: &mut Node, run: std::ops::Range<u64>) -> Result<()> {
        let reserved_before = self.reserved_in(node, run.clone());
        let placed = self.place_delayed(ino, node, run.clone());
        self.settle_reservation(node, run, reserved_before);
        placed
    }

    fn place_delayed(&mut self, ino: InodeNumber, node: &mut Node, run: std::ops::Range<u64>) -> Result<()> {
        let mut l = run.start;
        while l < run.end {
            self.wb_stats.delalloc_requests += 1;
            let Some((p, got)) = self.place_blocks(ino, node, l, run.end, true)? else {
                return Err(Error::DelayedAllocation(format!("inode {ino}: no room for delayed blocks {l}..{}", run.end)));
            };
            debug_assert!(got > 0 && got <= run.end - l);
            self.cache.forget(p, got);
            let released = node.es.remove_delayed(l..l + got);
            debug_assert_eq!(released, got, "allocating blocks that were not delayed");
            if self.bug_keeps_cached_holes {
                node.map_insert_keeping_cache(l, got, p, false);
            } else {
                node.map_insert(l, got, p, false);
            }
            node.map_dirty = true;
            self.wb_stats.delalloc_blocks += got;
            l += got;
        }
        Ok(())
    }

    /// Writes back `node`'s dirty blocks at or after block `from`
    /// (allocating delayed ones first when `allocate`; otherwise they stay
    /// dirty). Returns whether the extent map changed.
    pub fn writepages(&mut self, ino: InodeNumber, node: &mut Node, from: u64, allocate: bool) -> Result<bool> {
        let runs = self.pages.dirty_runs(ino, from);
        if runs.is_empty() {
            return Ok(false);
        }
        let mut changed = false;
        if allocate {
            for run in &runs {
                let delayed: Vec<std::ops::Range<u64>> = node.es.delayed_in(run.clone()).collect();
                for d in delayed {
                    self.allocate_delayed(ino, node, d)?;
                    changed = true;
                }
            }
        }
        let bs = self.bs();
        let per_io = (self.max_io_bytes() / bs).max(1);
        let journaled = self.journal.is_some() && self.data_mode(node) == InodeJournalMode::Journal;
        let mut result = Ok(());
        'runs: for run in runs {
            for p in node.map().pieces(run) {
                let mut l = p.logical;
                while l < p.logical + p.len {
                    let n = per_io.min(p.logical + p.len - l);
                    let physical = p.physical + (l - p.logical);
                    let wrote = if journaled { self.log_blocks(ino, l, n, physical) } else { self.write_blocks(ino, l, n, physical) };
                    if let Err(e) = wrote {
                        result = Err(e);
                        break 'runs;
                    }
                    for b in l..l + n {
                        if let Some((index, i)) = self.pages.locate(ino, b) {
                            self.pages.mark_clean(ino, index, i);
                        }
                    }
                    l += n;
                }
                if p.unwritten {
                    node.map_set_state(p.logical..p.logical + p.len, false);
                    node.map_dirty = true;
                    self.wb_stats.converted_blocks += p.len;
                    changed = true;
                }
            }
        }
        result.map(|()| changed)
    }

    /// Logical blocks `l..l + n` of journal-mode `ino` into the running
    /// transaction, for physical `physical..`.
    fn log_blocks(&mut self, ino: InodeNumber, l: u64, n: u64, physical: u64) -> Result<()> {
        for k in 0..n {
            let (index, i) = self.pages.locate(ino, l + k).ok_or_else(|| Error::InvalidArgument(format!("inode {ino}: dirty block {} has no folio", l + k)))?;
            let folio = self.pages.folio(ino, index).ok_or_else(|| Error::InvalidArgument(format!("inode {ino}: folio {index} vanished")))?;
            debug_assert!(folio.is_uptodate(i), "logging block {} that is not uptodate", l + k);
            let bytes = folio.block(i).to_vec();
            self.log_data_block(physical + k, &bytes);
        }
        Ok(())
    }

    /// One device command: logical blocks `l..l + n` of `ino`, all cached
    /// uptodate, to physical `physical..`, a segment per folio they lie in.
    fn write_blocks(&mut self, ino: InodeNumber, l: u64, n: u64, physical: u64) -> Result<()> {
        let bs = self.bs();
        let Ctx { pages, dev, .. } = self;
        let mut segments: Vec<&[u8]> = Vec::new();
        let mut b = l;
        while b < l + n {
            let (index, i) = pages.locate(ino, b).ok_or_else(|| Error::InvalidArgument(format!("inode {ino}: dirty block {b} has no folio")))?;
            let folio = pages.folio(ino, index).ok_or_else(|| Error::InvalidArgument(format!("inode {ino}: folio {index} vanished")))?;
            let take = u64::from(folio.blocks() - i).min(l + n - b);
            debug_assert!((i..i + take as u32).all(|j| folio.is_uptodate(j)), "writing back blocks from {b} that are not uptodate");
            let start = folio.block_range(i).start;
            segments.push(&folio.bytes()[start..start + (take * bs) as usize]);
            b += take;
        }
        dev.write_vectored(physical * bs, &segments, WriteFlags::DATA)?;
        self.wb_stats.commands += 1;
        self.wb_stats.bytes += n * bs;
        Ok(())
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// Writes back inode `ino`'s dirty data from block `from` on
    /// (filemap_write_and_wait_range). Allocation of its delayed blocks
    /// may need blocks a running transaction holds: that transaction
    /// commits first, as ext4 forces a commit before giving up.
    pub(crate) fn write_back_data(&mut self, ino: InodeNumber, from: u64) -> Result<()> {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.disksize = None;
            n.quietly_written.remove(from..u64::MAX);
        }
        if !self.ctx.pages.has_dirty(ino) || self.ctx.mount.read_only {
            return Ok(());
        }
        // Write-back locks the dirty folios: one locked between another
        // op's halves (the flusher's) is a sleep nobody predicted.
        if self.ctx.pages.holds_any_folio_lock(ino) {
            let bs = u64::from(self.ctx.geo.block_size);
            let locked = self.ctx.pages.dirty_runs(ino, from).into_iter().find(|r| self.ctx.pages.folios_locked(ino, r.start * bs..r.end * bs));
            if let Some(run) = locked {
                let pages = self.ctx.pages.geometry().pages_covering(run.start * bs..run.end * bs);
                self.ctx.pages.note_touch(ino, pages, "write-back");
                return Err(Error::WouldWait(crate::locking::WouldWait(Lock::FolioLock)));
            }
        }
        let delayed = self.nodes.get(&ino).map_or(0, |n| n.es.delayed_count(from..u64::MAX));
        if delayed > 0 && self.ctx.journal.is_some() {
            let alloc = &self.ctx.alloc;
            if alloc.held_blocks() > 0 && alloc.available_blocks() < delayed.saturating_add(SLACK_BLOCKS) && self.locks.split_handles == 0 {
                self.commit_transaction()?;
            }
        }
        let Some(node) = self.nodes.get_mut(&ino) else {
            // Dirty folios of an inode no longer loaded: nothing owns them.
            self.ctx.pages.drop_mapping(ino);
            return Ok(());
        };
        // ext4_writepages: s_writepages_rwsem shared, then its handles.
        let set = self.locks.set.clone();
        set.fs.writepages.down_read().map_err(Error::WouldWait)?;
        let mut lockdep = self.locks.tracker(LockHolder::OP);
        lockdep.acquired(Acquired { class: Lock::WritepagesRwsem, shared: true, instance: 0, by: "ext4_writepages" });
        lockdep.acquired(Acquired { class: Lock::JournalHandle, shared: true, instance: 0, by: "ext4_writepages" });
        let changed = self.ctx.writepages(ino, node, from, true);
        lockdep.released(Lock::JournalHandle, 0);
        set.fs.writepages.up_read();
        lockdep.released(Lock::WritepagesRwsem, 0);
        if changed? {
            self.dirty.insert(ino);
        }
        Ok(())
    }

    /// Write-back no op asked for (the flusher, memory pressure, a direct
    /// I/O's range): it moves ext4's i_disksize too, but when it runs is
    /// invisible to the model, so the lag an op left is kept.
    pub(crate) fn write_back_quietly(&mut self, ino: InodeNumber, from: u64) -> Result<()> {
        let (lag, mut quiet) = match self.nodes.get_mut(&ino) {
            Some(n) => {
                let mut quiet = std::mem::take(&mut n.quietly_written);
                for r in n.es.delayed_in(from..u64::MAX) {
                    quiet.add(r);
                }
                (n.disksize, quiet)
            }
            None => (None, RangeSet::new()),
        };
        let written = self.write_back_data(ino, from);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.disksize = lag;
            // What is still delayed (a failed write-back) is counted as such.
            for r in n.es.delayed_in(from..u64::MAX) {
                quiet.remove(r);
            }
            if !quiet.is_empty() {
                self.ctx.write_back_lag.insert(ino);
            }
            n.quietly_written = quiet;
        }
        written
    }

    /// Writes back every inode's dirty data (sync, unmount).
    pub(crate) fn write_back_all_data(&mut self) -> Result<()> {
        for ino in std::mem::take(&mut self.ctx.write_back_lag) {
            if let Some(n) = self.nodes.get_mut(&ino) {
                n.disksize = None;
                n.quietly_written = RangeSet::new();
            }
        }
        for ino in self.ctx.pages.dirty_inodes() {
            self.write_back_data(ino, 0)?;
        }
        Ok(())
    }

    /// Writes back the data a closing transaction is ordered after (see
    /// the module docs); allocates nothing, so it never commits.
    pub(crate) fn write_back_ordered_data(&mut self) -> Result<()> {
        for ino in self.ctx.pages.take_ordered() {
            let Some(node) = self.nodes.get_mut(&ino) else { continue };
            let written = self.ctx.writepages(ino, node, 0, false);
            if written.as_ref().is_ok_and(|changed| *changed) {
                self.dirty.insert(ino);
            }
            if let Err(e) = written {
                self.ctx.pages.order_data(ino);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Makes room for `need` bytes of new folios: evicts clean folios
    /// (sparing those of `spare`, which the op is about to use), and while
    /// that is not enough writes back the inode of the least recently used
    /// dirty folio. Without room at the end, allocation falls back to
    /// smaller folios or reads go around the cache.
    pub(crate) fn make_room(&mut self, need: u64, spare: Option<(InodeNumber, std::ops::Range<u64>)>) -> Result<()> {
        if !self.ctx.mount.read_only {
            self.settle_metadata_memory(super::memory::Reclaim::WriteBack { spare: spare.as_ref() })?;
        }
        let rounds = self.ctx.pages.dirty_inodes().len() + 1;
        for _ in 0..rounds {
            if self.ctx.pages.evict_clean(need, spare.clone()) || self.ctx.mount.read_only {
                return Ok(());
            }
            let Some(ino) = self.ctx.pages.oldest_dirty_inode() else { break };
            self.write_back_quietly(ino, 0)?;
        }
        // Metadata shares the bound: clean folios of it go last.
        let mut batch = 1;
        while !self.ctx.pages.evict_clean(need, spare.clone()) && self.reclaim_metadata(batch)?.0 > 0 {
            batch = batch.saturating_mul(2);
        }
        Ok(())
    }

    /// Evicts every clean folio of the page cache (drop_caches); dirty data
    /// stays. For a harness that has read through the mount.
    pub fn drop_clean_folios(&mut self) {
        self.ctx.pages.drop_clean();
    }

    /// What the page cache and data write-back did so far.
    pub fn data_path_stats(&self) -> DataPathStats {
        let metadata_bytes = self.metadata_bytes();
        DataPathStats {
            cache: self.ctx.pages.stats().clone(),
            resident_by_order: self.ctx.pages.resident_by_order(),
            cache_bytes: self.ctx.pages.in_use_bytes().saturating_sub(metadata_bytes),
            metadata_bytes,
            cache_bound_bytes: self.ctx.pages.bound_bytes(),
            dirty_blocks: self.ctx.pages.dirty_block_count(),
            reserved_blocks: self.ctx.reserved_blocks,
            writeback: self.ctx.wb_stats,
            direct: self.ctx.dio_stats,
            mapped: self.ctx.mapped_stats,
        }
    }
}

/// The data path's figures, for a run's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataPathStats {
    pub cache: crate::pagecache::PageCacheStats,
    pub resident_by_order: std::collections::BTreeMap<u8, u64>,
    /// Data folios' bytes.
    pub cache_bytes: u64,
    /// Metadata folios' and journal copies' bytes, in the same bound.
    pub metadata_bytes: u64,
    pub cache_bound_bytes: u64,
    pub dirty_blocks: u64,
    /// Blocks reserved by delayed allocation and not yet allocated.
    pub reserved_blocks: u64,
    pub writeback: WritebackStats,
    pub direct: super::DirectIoStats,
    pub mapped: super::MappedWriteStats,
}
