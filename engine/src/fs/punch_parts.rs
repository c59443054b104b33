//! A punch between its halves, freeing its blocks extent by extent.
//!
//! ext4_punch_hole drops the page cache of the hole and zeroes its partial
//! edges first, removes the hole's delayed extents, then frees the mapped
//! blocks from the end back (ext4_ext_remove_space), restarting its handle
//! when its credits run low: at each restart the running transaction may
//! commit with the hole part punched. It holds i_rwsem and invalidate_lock
//! throughout, so writers, page faults, reads that must fill a folio and
//! other fallocates wait. Nothing finishes it after a crash (no orphan
//! entry): the blocks freed by a committed transaction stay freed, the
//! rest stay mapped.
//!
//! Here the first part does the edges, the cache and the delayed blocks
//! and frees the last extent of the hole; each later part frees the next
//! last one; the second half frees what is left. Between parts the punch
//! holds its semaphores and no handle.

use std::ops::Range;

use ext4_model::vfs::punch_span;
use ext4_model::Errno;

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::fallocate::{disksize_before_punch, partial_edges};
use super::fallocate_parts::{FallocateInFlight, FallocatePartRan};
use super::Ext4;

/// A punch's progress between its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PunchInFlight {
    /// Its whole blocks (the end clipped to the folio holding EOF).
    blocks: Range<u64>,
    /// The lowest block freed so far: mapped blocks from here on are gone.
    freed_from: u64,
}

impl<D: BlockDevice> Ext4<D> {
    /// A punch's first part, its checks made: the edges zeroed, the cache
    /// and delayed blocks of its whole blocks dropped, its last extent
    /// freed. At or past EOF it does nothing, and is over.
    pub(super) fn first_punch_part(&mut self, f: &mut FallocateInFlight, ino: InodeNumber, offset: u64, end: u64) -> FallocatePartRan {
        let late = self.drops_cache_late();
        let begun = self.under_fallocate_locks(ino, true, |fs| {
            let (ctx, node) = fs.split(ino)?;
            let (bs, ps) = (ctx.bs(), u64::from(ctx.mount.page_size));
            let Some((end, blocks)) = punch_span(offset, end, node.disk.size, bs, ps) else { return Ok(None) };
            // ext4_zero_partial_blocks before the blocks go, both edges or
            // neither: a folio it cannot have leaves the file as it was.
            ctx.cache_zero_ranges(ino, node, &partial_edges(offset, end, bs))?;
            disksize_before_punch(node, offset, end);
            if !blocks.is_empty() && !late {
                ctx.drop_unmapped(ino, node, blocks.clone());
            }
            fs.mark_dirty(ino);
            Ok(Some(blocks))
        });
        match begun {
            Ok(Some(blocks)) => {
                f.punch = Some(PunchInFlight { freed_from: blocks.end, blocks });
                self.punch_next_extent(f, ino)
            }
            Ok(None) => {
                f.ended = Some(self.punch_stamp(ino));
                FallocatePartRan { at: None, got: Ok(()) }
            }
            Err(e) => f.ended_with(e),
        }
    }

    /// ext4_ext_remove_space after a handle restart: the hole's last
    /// extent not yet freed, from a cluster boundary under bigalloc so a
    /// part never frees half a cluster it could free whole.
    pub(super) fn punch_next_extent(&mut self, f: &mut FallocateInFlight, ino: InodeNumber) -> FallocatePartRan {
        let Some(PunchInFlight { blocks, freed_from }) = f.punch.clone() else { return f.ended_with(Errno::EINVAL) };
        let late = self.drops_cache_late();
        let freed = self.under_fallocate_locks(ino, true, |fs| {
            let (ctx, node) = fs.split(ino)?;
            let Some(start) = node.map().last_run_start(blocks.start..freed_from) else { return Ok(None) };
            let ratio = 1u64 << ctx.cluster_bits();
            let from = (start / ratio * ratio).max(blocks.start);
            if late {
                ctx.drop_unmapped(ino, node, from..freed_from);
            }
            ctx.free_mapped(node, from..freed_from.min(node.map().end()), blocks.clone())?;
            fs.mark_dirty(ino);
            Ok(Some(from))
        });
        match freed {
            Ok(at) => {
                let from = at.unwrap_or(blocks.start);
                f.punch = Some(PunchInFlight { blocks: blocks.clone(), freed_from: from });
                f.more = self.node(ino).is_ok_and(|n| n.map().last_run_start(blocks.start..from).is_some());
                FallocatePartRan { at, got: Ok(()) }
            }
            Err(e) => f.ended_with(e),
        }
    }

    /// The second half of a punch: what is left of the hole freed.
    pub(super) fn punch_the_rest(&mut self, f: &FallocateInFlight, ino: InodeNumber) -> Result<(), Errno> {
        let Some(PunchInFlight { blocks, freed_from }) = f.punch.clone() else { return Err(Errno::EINVAL) };
        self.prepare_change(0)?;
        let late = self.drops_cache_late();
        let freed = self.under_fallocate_locks(ino, true, |fs| {
            let (ctx, node) = fs.split(ino)?;
            if late {
                ctx.drop_unmapped(ino, node, blocks.start..freed_from);
            }
            let end = freed_from.min(node.map().end()).max(blocks.start);
            ctx.free_mapped(node, blocks.start..end, blocks.clone())
        });
        freed.and(self.punch_stamp(ino))
    }

    /// The bug twin `PunchDropsCacheLate` armed.
    fn drops_cache_late(&self) -> bool {
        #[cfg(feature = "test-hooks")]
        return self.bug_punch_drops_cache_late();
        #[cfg(not(feature = "test-hooks"))]
        false
    }

    /// The punch's times, and its inode to write.
    fn punch_stamp(&mut self, ino: InodeNumber) -> Result<(), Errno> {
        self.mark_dirty(ino);
        let (ctx, node) = self.split(ino)?;
        super::fallocate_parts::grow_and_stamp(node, None, ctx.now());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FallocFlags, FileSystem, Op, Reply};

    use crate::fixtures::mounted_with;
    use crate::fs::SecondHalf;

    const BS: u64 = 4096;
    const PUNCH: u32 = FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE;

    /// Blocks 0..4, 10..14 and 20..24 written and synced.
    fn three_extents() -> crate::fs::Ext4<crate::device_mem::MemDevice> {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        for at in [0u64, 10, 20] {
            fs.write("/f", at * BS, &[7; 4 * BS as usize]).unwrap();
        }
        fs.sync().unwrap();
        fs
    }

    fn begin(fs: &mut crate::fs::Ext4<crate::device_mem::MemDevice>, offset: u64, len: u64) -> crate::fs::FallocateInFlight {
        let op = Op::Fallocate { path: "/f".into(), mode: FallocFlags(PUNCH), offset, len };
        let Some(Ok(SecondHalf::Fallocate(f))) = fs.begin_split(&op) else { panic!("a punch splits as a fallocate") };
        f
    }

    #[test]
    fn a_punch_frees_extent_by_extent_from_the_end_holding_its_semaphores() {
        let mut fs = three_extents();
        // From inside the first extent to inside the last: edges zeroed.
        let mut f = begin(&mut fs, 2 * BS + 100, 20 * BS);
        let first = fs.fallocate_part(&mut f).unwrap();
        assert_eq!((first.at, first.got), (Some(20), Ok(())), "the last whole blocks first: 20..22");
        let held: Vec<_> = fs.locks_held().into_iter().map(|(lock, _)| lock).collect();
        assert!(held.contains(&crate::fs::locks::Lock::InodeRwsem) && held.contains(&crate::fs::locks::Lock::InvalidateLock), "{held:?}");
        assert!(!held.contains(&crate::fs::locks::Lock::JournalHandle), "{held:?}");
        assert_eq!(fs.stat("/f").unwrap().blocks, 10 * 8, "blocks 0..4 and 10..14 and 22..24 left");
        // Another task's sync commits it part done.
        fs.sync().unwrap();
        let second = fs.fallocate_part(&mut f).unwrap();
        assert_eq!(second.at, Some(10));
        let third = fs.fallocate_part(&mut f).unwrap();
        assert_eq!(third.at, Some(3), "the first extent from the hole's first whole block");
        assert!(!f.has_more());
        assert_eq!(fs.finish_split(SecondHalf::Fallocate(f)), Ok(Reply::Done));
        assert_eq!(fs.stat("/f").unwrap().blocks, 5 * 8, "blocks 0..3 and 22..24");
        let read = fs.read("/f", 0, 24 * 4096).unwrap();
        assert_eq!(read[..2 * BS as usize + 100], vec![7; 2 * BS as usize + 100][..]);
        assert!(read[2 * BS as usize + 100..22 * BS as usize + 100].iter().all(|&b| b == 0), "the hole reads as zeros");
        assert_eq!(read[22 * BS as usize + 100..], vec![7; 2 * BS as usize - 100][..]);
        assert!(fs.locks_held().is_empty());
        fs.check_allocator().unwrap();
    }

    #[test]
    fn a_punch_at_or_past_eof_is_over_at_its_first_part() {
        let mut fs = three_extents();
        let mut f = begin(&mut fs, 30 * BS, BS);
        assert_eq!(fs.fallocate_part(&mut f).unwrap().at, None);
        assert!(!f.has_more());
        assert_eq!(fs.finish_split(SecondHalf::Fallocate(f)), Ok(Reply::Done));
        assert_eq!(fs.stat("/f").unwrap().blocks, 12 * 8);
    }
}
