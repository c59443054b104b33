//! Test-only hooks (cargo feature `test-hooks`): a deliberately wrong answer,
//! so the simulator's tests can prove that an engine bug is caught, shrunk to
//! a few ops, and replayed. Absent from normal builds.

use crate::device::BlockDevice;

use super::Ext4;

/// A wrong answer the engine can be told to give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedBug {
    /// Once any truncate has succeeded, a read that reaches EOF returns its
    /// last byte flipped.
    ReadFlipsLastByteAfterTruncate,
    /// A commit frees every held block, also those the running transaction
    /// freed after the committing one closed (whose frees a crash can undo).
    CommitReleasesEveryHold,
    /// A journal-flag switch whose journal flush fails returns holding
    /// invalidate_lock (the seed series' lock imbalance, docs/concurrency.md).
    SwitchKeepsLockOnFailedFlush,
    /// Inodes are written back without their other-read permission bit;
    /// the mount's own copy keeps it, so only a cold read of the image can
    /// tell.
    WriteBackDropsOtherRead,
    /// The block bitmap synthesised for a BLOCK_UNINIT group leaves out the
    /// reserved GDT blocks after a backup superblock. The engine's own mkfs
    /// reserves none, so only an mke2fs-made image shows it.
    SynthesisedBitmapSkipsReservedGdt,
    /// data=ordered commits a transaction without writing the data of the
    /// blocks it allocated first (data=writeback's order), so a crash can
    /// show a reused block's old contents.
    OrderedCommitsBeforeData,
    /// SEEK_DATA/SEEK_HOLE take every unwritten block for a hole, dirty
    /// pages over it or not (the page cache is not asked).
    SeekIgnoresPageCache,
    /// The close after a truncate to 0 clears the flag but writes nothing
    /// back (auto_da_alloc forgotten at close; renames still flush).
    ReleaseForgetsTruncatedFile,
    /// An unlinked open file is kept (links 0) but never put on the
    /// orphan list, so a crash before its last close leaks it.
    OrphanListForgotten,
    /// Write-back of a journal-mode inode hands nothing to the journal:
    /// its data is neither logged nor written home.
    JournaledDataNeverLogged,
    /// A buffered write the page cache cuts short (no folio for a later
    /// chunk) answers ENOMEM instead of the bytes it copied, which stay
    /// in the file (generic_perform_write returning its status).
    CutWriteAnswersEnomem,
    /// The scheduler is not told that a truncate sleeps on the folio locks
    /// the flusher holds between its halves, so it runs into them.
    TruncateIgnoresFlusherFolios,
    /// bigalloc: unmapping a block frees its whole cluster although other
    /// blocks of the same logical cluster stay mapped (the partial-cluster
    /// bookkeeping of extent removal forgotten).
    FreesPartlyUsedCluster,
    /// A collapse shifts the extent map but keeps the extent status cache's
    /// mapped entries where they were, so a FIEMAP after FIEMAP_FLAG_CACHE
    /// reports the old states at the new positions (an entry not
    /// invalidated, the stale-cache bug class).
    CollapseKeepsCachedExtents,
    /// Write-back allocates delayed blocks but leaves the hole entries a
    /// lookup cached over them, so the next FIEMAP misses the data (an
    /// entry not invalidated at allocation).
    WriteBackKeepsCachedHoles,
    /// A buffered write's first part sets the size the whole write will
    /// reach before its other folios are copied (ext4 moves i_size folio by
    /// folio, at write_end), so whatever runs between its parts sees the
    /// file grown over bytes not yet written.
    WritePartSizesWholeWrite,
    /// A close of a descriptor releases its file at once although a write
    /// through it is in flight (no wait for the write's fdput): an unlinked
    /// file is freed under the write's remaining parts.
    CloseIgnoresWriteInFlight,
    /// A shrinking truncate frees its blocks extent by extent without
    /// putting the file on the orphan list first, so a crash after a commit
    /// between its extents leaves written blocks past EOF that nothing
    /// frees (ext4_setattr's ext4_orphan_add forgotten).
    TruncateLeavesNoOrphan,
    /// A piece of a growing fallocate sets the size to the end of the
    /// blocks it mapped, not clipped to the range's end
    /// (ext4_alloc_file_blocks' `epos > new_size` check forgotten): a range
    /// ending inside a block whose last piece maps between the halves
    /// leaves the file grown past the range.
    FallocatePieceSizesPastRange,
    /// A punch drops the page cache and delayed blocks of each extent as it
    /// frees it, not of the whole hole first (ext4_punch_hole's
    /// truncate_pagecache_range and extent status removal done late), so
    /// between its parts the hole's dirty data not yet reached is still
    /// cached and reserved, and write-back may still write it.
    PunchDropsCacheLate,
    /// A direct write marks the unwritten blocks of its range written
    /// before its bios are submitted, not at their completion: while the
    /// bios are in flight, FIEMAP, a read or a commit of the allocation
    /// finds blocks mapped over bytes that are not the file's. (Its bios
    /// still pad those blocks, so a write that completes leaves no trace.)
    DirectWriteMapsWritten,
    /// A direct write's completion leaves the range's page cache as it is
    /// (kiocb_invalidate_post_direct_write forgotten): a buffered read
    /// while the bios were in flight cached the old bytes, and later
    /// reads return them.
    DirectWriteKeepsStaleCache,
    /// A direct read lets go of i_rwsem once its bios are submitted, not
    /// at their completion (its DIO count stays): a buffered write of the
    /// file could then dirty the range and write-back put the new bytes in
    /// the blocks the bios read. The lock-discipline check sees the read
    /// in flight holding no lock first.
    DirectReadUnlocksEarly,
    /// A buffered read in flight reads i_size once, at its first part,
    /// and copies up to it however the file shrinks before its later parts
    /// (filemap_read reads it again for every batch): past a truncate it
    /// returns bytes the file no longer has.
    ReadPartKeepsFirstSize,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BugState {
    bug: Option<InjectedBug>,
    armed: bool,
}

impl<D: BlockDevice> Ext4<D> {
    pub fn inject_bug(&mut self, bug: InjectedBug) {
        self.bug = BugState { bug: Some(bug), armed: false };
        self.ctx.alloc.bug_skips_reserved_gdt = bug == InjectedBug::SynthesisedBitmapSkipsReservedGdt;
        self.ctx.bug_unordered_data = bug == InjectedBug::OrderedCommitsBeforeData;
        self.ctx.bug_unlogged_data = bug == InjectedBug::JournaledDataNeverLogged;
        self.ctx.bug_frees_partly_used_cluster = bug == InjectedBug::FreesPartlyUsedCluster;
        self.ctx.bug_keeps_stale_extents = bug == InjectedBug::CollapseKeepsCachedExtents;
        self.ctx.bug_keeps_cached_holes = bug == InjectedBug::WriteBackKeepsCachedHoles;
    }

    pub(crate) fn bug_saw_truncate(&mut self) {
        self.bug.armed |= self.bug.bug.is_some();
    }

    pub(crate) fn bug_releases_every_hold(&self) -> bool {
        self.bug.bug == Some(InjectedBug::CommitReleasesEveryHold)
    }

    pub(crate) fn bug_release_forgets(&self) -> bool {
        self.bug.bug == Some(InjectedBug::ReleaseForgetsTruncatedFile)
    }

    pub(crate) fn bug_forgets_orphans(&self) -> bool {
        self.bug.bug == Some(InjectedBug::OrphanListForgotten)
    }

    pub(crate) fn bug_seek_ignores_page_cache(&self) -> bool {
        self.bug.bug == Some(InjectedBug::SeekIgnoresPageCache)
    }

    pub(crate) fn bug_cut_write_answers_enomem(&self) -> bool {
        self.bug.bug == Some(InjectedBug::CutWriteAnswersEnomem)
    }

    pub(crate) fn bug_truncate_ignores_flusher(&self) -> bool {
        self.bug.bug == Some(InjectedBug::TruncateIgnoresFlusherFolios)
    }

    pub(crate) fn bug_sizes_whole_write(&self) -> bool {
        self.bug.bug == Some(InjectedBug::WritePartSizesWholeWrite)
    }

    pub(crate) fn bug_truncate_leaves_no_orphan(&self) -> bool {
        self.bug.bug == Some(InjectedBug::TruncateLeavesNoOrphan)
    }

    pub(crate) fn bug_fallocate_piece_sizes_past_range(&self) -> bool {
        self.bug.bug == Some(InjectedBug::FallocatePieceSizesPastRange)
    }

    pub(crate) fn bug_punch_drops_cache_late(&self) -> bool {
        self.bug.bug == Some(InjectedBug::PunchDropsCacheLate)
    }

    pub(crate) fn bug_dio_maps_written(&self) -> bool {
        self.bug.bug == Some(InjectedBug::DirectWriteMapsWritten)
    }

    pub(crate) fn bug_dio_keeps_stale_cache(&self) -> bool {
        self.bug.bug == Some(InjectedBug::DirectWriteKeepsStaleCache)
    }

    pub(crate) fn bug_dio_read_unlocks_early(&self) -> bool {
        self.bug.bug == Some(InjectedBug::DirectReadUnlocksEarly)
    }

    pub(crate) fn bug_read_keeps_first_size(&self) -> bool {
        self.bug.bug == Some(InjectedBug::ReadPartKeepsFirstSize)
    }

    pub(crate) fn bug_close_ignores_writes(&self) -> bool {
        self.bug.bug == Some(InjectedBug::CloseIgnoresWriteInFlight)
    }

    pub(crate) fn bug_keeps_lock_on_failed_flush(&self) -> bool {
        self.bug.bug == Some(InjectedBug::SwitchKeepsLockOnFailedFlush)
    }

    /// The inode as this bug writes it back, if the bug changes it.
    pub(crate) fn bug_on_store(bug: BugState, disk: &crate::format::inode::Inode) -> Option<crate::format::inode::Inode> {
        (bug.bug == Some(InjectedBug::WriteBackDropsOtherRead) && disk.mode & 0o004 != 0).then(|| {
            let mut wrong = disk.clone();
            wrong.mode &= !0o004;
            wrong
        })
    }

    pub(crate) fn bug_on_read(&self, offset: u64, size: u64, data: &mut [u8]) {
        if self.bug.armed && self.bug.bug == Some(InjectedBug::ReadFlipsLastByteAfterTruncate) && offset + data.len() as u64 == size {
            if let Some(last) = data.last_mut() {
                *last ^= 0xFF;
            }
        }
    }
}
