//! Metadata memory: the buffer cache's folios and jbd2's copies take
//! no-fail frames from the page cache's allocator ([`crate::memory::nofail`]).
//!
//! - The buffer cache notes the folios its blocks need; they are backed
//!   here, in [`Ext4::settle_metadata_memory`], before an op that changes
//!   anything, before the page cache makes room for data, and when a
//!   transaction closes. A folio a read-only op (stat, readdir) loaded is
//!   backed at the next of those: between them it is memory not counted.
//! - A refused request compacts when the bound has room but memory is
//!   fragmented, else reclaims and retries, GFP_NOFS-style: clean data
//!   folios oldest first, then clean metadata folios whose newest copy is at
//!   home (checkpointing the log when only it pins them); outside a commit
//!   it may also write back the oldest dirty inode's
//!   data (the flusher working for a waiting allocation). Nothing left to
//!   reclaim is a livelock ([`Error::Livelock`]).
//! - kswapd ([`Ext4::kswapd`]) is the simulator's reclaimer task: between
//!   other tasks' ops it frees memory down to a watermark the same way.
//! - jbd2 logs a block from its own buffer; a copy (frozen data) is made
//!   only when the running transaction dirties a block the committing one
//!   still has to write (a split fsync's commit, other tasks' ops running
//!   meanwhile). Copies go back when that commit is written.

use std::ops::Range;

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::{BlockNumber, InodeNumber};
use crate::memory::nofail::{Livelock, NoFailUse};
use crate::memory::refused::OutOfMemory;

use super::Ext4;

/// Extent status entries one reclaim pass asks the shrinker for (the
/// kernel's SHRINK_BATCH).
const ES_SHRINK_BATCH: u64 = 128;

/// kswapd wakes below bound/16 free and stops at bound/8.
const KSWAPD_LOW_SHARE: u64 = 16;
const KSWAPD_HIGH_SHARE: u64 = 8;

/// What kswapd passes freed (one pass, or a mount's sum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KswapdPass {
    pub passes: u64,
    pub data_folios: u64,
    pub metadata_folios: u64,
    pub checkpoints: u64,
    pub writebacks: u64,
    /// Cached extent status entries the shrinker dropped.
    pub extent_status: u64,
}

/// Where a no-fail request may reclaim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reclaim<'a> {
    /// Clean folios only (inside a commit: write-back would start handles
    /// the closing transaction cannot take).
    CleanOnly,
    /// Clean folios, then write-back; `spare` pages of an inode an op is
    /// filling stay.
    WriteBack { spare: Option<&'a (InodeNumber, Range<u64>)> },
}

impl<D: BlockDevice> Ext4<D> {
    /// Gives back the frames of metadata folios the buffer cache dropped
    /// and backs the ones it added (see the module docs).
    pub(crate) fn settle_metadata_memory(&mut self, reclaim: Reclaim<'_>) -> Result<()> {
        self.release_dropped_metadata();
        let order = self.ctx.cache.folios().order();
        for index in self.ctx.cache.folios().unbacked() {
            let frame = self.nofail_frame(order, NoFailUse::BufferCache, reclaim)?;
            self.ctx.cache.folios_mut().back(index, frame);
        }
        self.freeze_committing_blocks(reclaim)?;
        // Reclaim may have dropped folios while backing others.
        self.release_dropped_metadata();
        Ok(())
    }

    /// Frozen copies for the committing transaction's blocks the running
    /// one has dirtied since it closed: one folio each at bs >= ps, slab
    /// pages at bs < ps (`jbd2_alloc` below a page).
    fn freeze_committing_blocks(&mut self, reclaim: Reclaim<'_>) -> Result<()> {
        let Some(c) = self.committing.as_ref() else { return Ok(()) };
        let fresh: Vec<BlockNumber> = c.logged().filter(|b| !c.frozen.contains(b) && self.ctx.cache.is_dirty(*b)).collect();
        if fresh.is_empty() {
            return Ok(());
        }
        let folios = self.ctx.cache.folios();
        let order = folios.order();
        // A folio a block at bs >= ps, a page for several below.
        let frozen = (c.frozen.len() + fresh.len()) as u64;
        let want = (frozen * self.ctx.bs()).div_ceil(folios.folio_bytes());
        let have = c.copies.len() as u64;
        for _ in have..want {
            let frame = self.nofail_frame(order, NoFailUse::JournalCopy, reclaim)?;
            if let Some(c) = self.committing.as_mut() {
                c.copies.push((order, frame));
            }
        }
        if let Some(c) = self.committing.as_mut() {
            c.frozen.extend(fresh);
        }
        Ok(())
    }

    /// Gives back the frames of the folios the buffer cache dropped.
    fn release_dropped_metadata(&mut self) {
        let frames = self.ctx.cache.folios_mut().take_released();
        self.release_frames(frames);
    }

    pub(crate) fn release_frames(&mut self, frames: Vec<(u8, u64)>) {
        for (order, frame) in frames {
            self.ctx.pages.release_frame(order, frame);
        }
    }

    /// One no-fail frame of `order`: never refused; reclaims and retries
    /// until it gets one, or reports a livelock when nothing is left.
    fn nofail_frame(&mut self, order: u8, what: NoFailUse, reclaim: Reclaim<'_>) -> Result<u64> {
        self.ctx.nofail.note_request(order, what);
        let mut retries = 0u64;
        let mut batch = 1usize;
        loop {
            if let Ok(frame) = self.ctx.pages.allocate_frame(order) {
                self.ctx.nofail.note_retries(retries);
                let pinned = self.metadata_bytes();
                let stats = &mut self.ctx.nofail;
                stats.peak_metadata_bytes = stats.peak_metadata_bytes.max(pinned);
                return Ok(frame);
            }
            retries += 1;
            // Room in the bound but no block of this order: fragmentation,
            // which compaction answers before anything is evicted.
            if self.ctx.pages.compact_memory(order) {
                self.ctx.nofail.compactions += 1;
                continue;
            }
            // Growing batches: a buddy allocator may need several
            // neighbours freed before a block of `order` forms.
            let spare = match reclaim {
                Reclaim::WriteBack { spare } => spare,
                Reclaim::CleanOnly => None,
            };
            let evicted = self.ctx.pages.evict_oldest_clean(u64::MAX, batch, spare);
            if evicted > 0 {
                self.ctx.nofail.reclaimed_data_folios += evicted as u64;
                batch = batch.saturating_mul(2);
                continue;
            }
            let (dropped, checkpointed) = self.reclaim_metadata(batch)?;
            self.ctx.nofail.reclaim_checkpoints += u64::from(checkpointed);
            if dropped > 0 {
                self.ctx.nofail.reclaimed_metadata_folios += dropped as u64;
                batch = batch.saturating_mul(2);
                continue;
            }
            if let Reclaim::WriteBack { .. } = reclaim {
                if let Some(progress) = self.write_back_oldest_dirty()? {
                    self.ctx.nofail.reclaim_writebacks += 1;
                    if progress {
                        continue;
                    }
                }
            }
            self.ctx.nofail.note_retries(retries);
            let livelock =
                Livelock { order, what, retries, in_use_bytes: self.ctx.pages.in_use_bytes(), bound_bytes: self.ctx.pages.bound_bytes(), pinned_bytes: self.metadata_bytes() };
            self.ctx.nofail.livelocks += 1;
            self.ctx.livelock.get_or_insert(livelock.clone());
            return Err(Error::Livelock(livelock));
        }
    }

    /// Whether a switch between its halves holds s_writepages_rwsem or the
    /// updates barrier, keeping write-back out: only clean folios can go.
    pub(crate) fn write_back_held_off(&self) -> bool {
        let fs_locks = &self.locks.set.fs;
        fs_locks.writepages.read_would_wait() || fs_locks.updates.handle_would_wait()
    }

    /// Reclaim's last resort: writes back the inode of the oldest dirty
    /// folio. None when nothing is dirty or write-back is held off, else
    /// whether it cleaned anything.
    fn write_back_oldest_dirty(&mut self) -> Result<Option<bool>> {
        if self.write_back_held_off() {
            return Ok(None);
        }
        let Some(ino) = self.ctx.pages.oldest_dirty_inode() else { return Ok(None) };
        let dirty = self.ctx.pages.dirty_block_count();
        self.write_back_quietly(ino, 0)?;
        Ok(Some(self.ctx.pages.dirty_block_count() < dirty))
    }

    /// Drops up to `count` clean metadata folios; when none can go but the
    /// log pins some, checkpoints first: jbd2's checkpoint buffers are
    /// dirty pages of the block device, which reclaim writes home.
    pub(crate) fn reclaim_metadata(&mut self, count: usize) -> Result<(usize, bool)> {
        let dropped = self.drop_clean_metadata(count);
        if dropped > 0 {
            return Ok((dropped, false));
        }
        let logged = self.ctx.journal.as_ref().is_some_and(|j| j.unhomed_in(0, BlockNumber::MAX).next().is_some());
        if !logged {
            return Ok((0, false));
        }
        self.checkpoint_log(false)?;
        Ok((self.drop_clean_metadata(count), true))
    }

    /// Drops up to `count` clean metadata folios, oldest first, whose
    /// blocks have no newer copy than home (none dirty, none in the log
    /// awaiting a checkpoint, none in the committing transaction).
    fn drop_clean_metadata(&mut self, count: usize) -> usize {
        let candidates = self.ctx.cache.folios().oldest_backed();
        let journal = self.ctx.journal.as_ref();
        let committing = self.committing.as_ref();
        let pinned = |b| journal.is_some_and(|j| j.unhomed_copy(b).is_some()) || committing.is_some_and(|c| c.logs(b));
        let mut dropped = 0;
        for index in candidates {
            if dropped >= count {
                break;
            }
            if self.ctx.cache.drop_clean_folio(index, &pinned) {
                dropped += 1;
            }
        }
        self.release_dropped_metadata();
        dropped
    }

    /// Bytes metadata holds: backed buffer-cache folios and the committing
    /// transaction's copies.
    pub(crate) fn metadata_bytes(&self) -> u64 {
        let page = u64::from(self.ctx.mount.page_size);
        let copies: u64 = self.committing.as_ref().map_or(0, |c| c.copies.iter().map(|(o, _)| page << o).sum());
        self.ctx.cache.folios().backed_bytes() + copies
    }

    /// Whether free memory is below kswapd's low watermark (a sixteenth
    /// of the bound): the simulator's reclaimer task may run.
    pub fn memory_low(&self) -> bool {
        let (used, bound) = (self.ctx.pages.in_use_bytes(), self.ctx.pages.bound_bytes());
        bound.saturating_sub(used) < bound / KSWAPD_LOW_SHARE
    }

    /// One kswapd pass: reclaims until an eighth of the bound is free
    /// (its high watermark) or nothing more can go: clean data folios
    /// oldest first (clean metadata before them while it holds more than
    /// half of what is used), clean metadata (checkpointing when the log pins it),
    /// then dirty data written back, unless a switch between its halves
    /// holds write-back off. Frees memory only; what files hold is unchanged.
    pub fn kswapd(&mut self) -> Result<KswapdPass> {
        let mut pass = KswapdPass::default();
        if self.ctx.mount.read_only {
            return Ok(pass);
        }
        self.release_dropped_metadata();
        let bound = self.ctx.pages.bound_bytes();
        let high = bound / KSWAPD_HIGH_SHARE;
        if bound.saturating_sub(self.ctx.pages.in_use_bytes()) < high {
            // Reclaim runs the shrinkers beside the LRUs (shrink_slab).
            pass.extent_status = self.shrink_extent_status(ES_SHRINK_BATCH);
        }
        let mut batch = 1usize;
        loop {
            let free = bound.saturating_sub(self.ctx.pages.in_use_bytes());
            if free >= high {
                break;
            }
            // One LRU in the kernel holds both; here there are two, kept
            // in balance: metadata goes first while it holds most of what
            // is used.
            let metadata_heavy = self.metadata_bytes().saturating_mul(2) > self.ctx.pages.in_use_bytes();
            if metadata_heavy {
                let dropped = self.drop_clean_metadata(batch);
                if dropped > 0 {
                    pass.metadata_folios += dropped as u64;
                    batch = batch.saturating_mul(2);
                    continue;
                }
            }
            let evicted = self.ctx.pages.evict_oldest_clean(high - free, usize::MAX, None);
            if evicted > 0 {
                pass.data_folios += evicted as u64;
                continue;
            }
            let (dropped, checkpointed) = self.reclaim_metadata(batch)?;
            pass.checkpoints += u64::from(checkpointed);
            if dropped > 0 {
                pass.metadata_folios += dropped as u64;
                batch = batch.saturating_mul(2);
                continue;
            }
            let Some(progress) = self.write_back_oldest_dirty()? else { break };
            pass.writebacks += 1;
            if !progress {
                break;
            }
        }
        let k = &mut self.ctx.kswapd;
        k.passes += 1;
        k.data_folios += pass.data_folios;
        k.metadata_folios += pass.metadata_folios;
        k.checkpoints += pass.checkpoints;
        k.writebacks += pass.writebacks;
        k.extent_status += pass.extent_status;
        Ok(pass)
    }

    /// ext4's es_shrinker: drops the cached mapped entries of the least
    /// recently used inodes until `want` went (whole inodes at a time) or
    /// none are left; delayed extents stay. Returns how many went.
    pub fn shrink_extent_status(&mut self, want: u64) -> u64 {
        let mut freed = 0u64;
        while freed < want {
            let Some(ino) = self.ctx.es_lru.pop_oldest() else { break };
            if let Some(node) = self.nodes.get_mut(&ino) {
                freed += node.es.drop_mapped() as u64;
            }
        }
        freed
    }

    /// The first livelock since the last take: the op that met it answered
    /// an error no user of ext4 would see (the kernel would spin).
    pub fn take_livelock(&mut self) -> Option<Livelock> {
        self.ctx.livelock.take()
    }

    /// What kswapd passes did so far.
    pub fn kswapd_stats(&self) -> KswapdPass {
        self.ctx.kswapd
    }

    /// What no-fail requests did so far.
    pub fn nofail_stats(&self) -> crate::memory::nofail::NoFailStats {
        self.ctx.nofail.clone()
    }

    /// The folio refusal the last op met, if it met one: it answered ENOMEM
    /// or a short count (`done`). Taken once.
    pub fn take_out_of_memory(&mut self) -> Option<OutOfMemory> {
        self.ctx.out_of_memory.take()
    }

    /// Folio requests for file data refused so far.
    pub fn folios_refused(&self) -> u64 {
        self.ctx.folios_refused
    }
}

impl<D: BlockDevice> super::Ctx<D> {
    /// ENOMEM for a folio the page cache could not have, noted for
    /// [`Ext4::take_out_of_memory`] (nothing of the op done yet).
    pub(super) fn folio_refused(&mut self, what: String) -> ext4_model::Errno {
        self.folios_refused += 1;
        self.out_of_memory = Some(OutOfMemory { done: 0, what: what.clone() });
        Error::NoMemory(what).into()
    }

    /// The op got `done` bytes through before the refusal it met.
    pub(super) fn note_memory_progress(&mut self, done: u64) {
        if let Some(oom) = self.out_of_memory.as_mut() {
            oom.done = done;
        }
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FileSystem, MountConfig};

    use crate::device_mem::MemDevice;
    use crate::fs::Ext4;
    use crate::memory::nofail::NoFailUse;
    use crate::memory::{BoundedFolios, FolioAllocator};
    use crate::mkfs::{mkfs, MkfsOptions};

    fn mounted(options: &str, memory: Option<Box<dyn FolioAllocator>>) -> Ext4<MemDevice> {
        let config: MountConfig = options.parse().expect("mount options");
        let bytes = 256 << 20;
        let mut dev = MemDevice::new(bytes);
        let opts = MkfsOptions::for_mount(&config, bytes, *b"engine-unit-test", [5; 16], crate::fixtures::EPOCH_SECS);
        mkfs(&mut dev, &opts).expect("mkfs");
        match memory {
            Some(m) => Ext4::mount_with_memory(dev, &config, m).expect("mount"),
            None => Ext4::mount(dev, &config).expect("mount"),
        }
    }

    fn busy(fs: &mut Ext4<MemDevice>, dirs: usize) {
        for d in 0..dirs {
            fs.mkdir(&format!("/d{d}"), 0o755).unwrap();
            for f in 0..8 {
                let path = format!("/d{d}/f{f}");
                fs.create(&path, 0o644).unwrap();
                fs.write(&path, 0, &[d as u8; 40_000]).unwrap();
            }
            if d % 4 == 3 {
                fs.sync().unwrap();
            }
        }
    }

    /// At 64 KiB blocks on 4 KiB pages every metadata folio is order 4:
    /// each request is one the page allocator warned about, and metadata
    /// counts in the bound data folios are evicted for.
    #[test]
    fn metadata_at_block_size_above_page_size_asks_for_order_four_and_warns() {
        let mut fs = mounted("bs=64k,ps=4k,page_cache_mb=16", None);
        busy(&mut fs, 24);
        let s = fs.nofail_stats();
        assert!(s.requests() > 0);
        assert_eq!(s.by_order.keys().copied().collect::<Vec<_>>(), vec![4]);
        assert_eq!(s.warnings, s.requests());
        let first = s.first_warning.expect("a warning");
        assert_eq!((first.order, first.what, first.request), (4, NoFailUse::BufferCache, 1));
        let data = fs.data_path_stats();
        assert!(data.metadata_bytes > 0 && data.metadata_bytes % (64 << 10) == 0, "{}", data.metadata_bytes);
        assert!(data.metadata_bytes + data.cache_bytes <= data.cache_bound_bytes);
        assert_eq!(s.livelocks, 0);
        for d in 0..24 {
            assert_eq!(fs.read(&format!("/d{d}/f7"), 0, 40_000).unwrap(), vec![d as u8; 40_000]);
        }
    }

    /// Under a small bound, no-fail requests reclaim (data folios, clean
    /// metadata, the log's checkpoint) and never fail; small blocks share
    /// pages and never warn.
    #[test]
    fn a_small_bound_makes_no_fail_requests_reclaim_and_retry_never_fail() {
        let mut fs = mounted("page_cache_mb=1", None);
        busy(&mut fs, 40);
        let s = fs.nofail_stats();
        assert!(s.retries > 0, "{s:?}");
        assert!(s.reclaimed_data_folios + s.reclaimed_metadata_folios > 0, "{s:?}");
        assert_eq!((s.warnings, s.livelocks), (0, 0));
        assert!(fs.take_livelock().is_none());
        for d in 0..40 {
            assert_eq!(fs.read(&format!("/d{d}/f0"), 0, 40_000).unwrap(), vec![d as u8; 40_000]);
        }
        let data = fs.data_path_stats();
        assert!(data.metadata_bytes + data.cache_bytes <= data.cache_bound_bytes);
    }

    /// Memory that dirty metadata alone overflows: the next request has
    /// nothing to reclaim, and the op stops with a livelock report instead
    /// of spinning; what was durable before stays.
    #[test]
    fn a_request_with_nothing_to_reclaim_is_a_livelock_not_a_hang() {
        let mut fs = mounted("", Some(Box::new(BoundedFolios::new(4096, 2 * 4096))));
        fs.mkdir("/a", 0o755).unwrap();
        let failed = (0..4).map(|i| fs.create(&format!("/a/f{i}"), 0o644)).find(Result::is_err);
        assert_eq!(failed, Some(Err(ext4_model::Errno::EIO)), "some create must meet the livelock");
        let l = fs.take_livelock().expect("a livelock is reported");
        assert_eq!((l.what, l.order, l.bound_bytes), (NoFailUse::BufferCache, 0, 8192));
        assert!(l.pinned_bytes > 0 && l.retries >= 1, "{l}");
        assert!(l.to_string().contains("made no progress"), "{l}");
        assert!(fs.take_livelock().is_none(), "reported once");
        assert_eq!(fs.nofail_stats().livelocks, 1);
    }
}
