//! A truncate that shrinks a file, between its halves, freeing its blocks
//! extent by extent.
//!
//! ext4_setattr sets the new size and puts the file on the orphan list in
//! one handle, drops the page cache past the size, then ext4_truncate
//! frees the mapped blocks from the end back (ext4_ext_remove_space),
//! restarting its handle when its credits run low: at each restart the
//! running transaction may commit with the blocks part freed. It holds
//! i_rwsem and invalidate_lock throughout, so writers, page faults and
//! other truncates wait, while stat, FIEMAP, reads, write-back, commits
//! and a crash may find it part done. After a crash the file is still on
//! the orphan list, and mount finishes the truncate (`orphan`).
//!
//! Here the first part makes truncate(2)'s or ftruncate(2)'s checks (an
//! ftruncate then holds its descriptor's file until it returns, as fdget
//! does, so a close between parts leaves the file's release to it), the
//! new size, the orphan entry and the page cache's drop, and frees the
//! file's last extent; each later part frees the next last one; the second
//! half frees what is left and takes the file off the list. Between parts the
//! truncate holds its semaphores and no handle. A truncate that does not
//! shrink, or runs without a journal (which keeps no orphan list), is done
//! whole by its first part.

use ext4_model::{Errno, Op, Outcome, Reply};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::lock_plan::PlannedLock;
use super::split::WholeOp;
use super::Ext4;

/// A truncate between its halves ([`super::SecondHalf::Truncate`]).
#[derive(Debug, PartialEq, Eq)]
pub struct TruncateInFlight {
    pub(super) whole: WholeOp,
    /// Its first half took every lock of its plan: a part needs them all.
    planned_all: bool,
    /// The file, once the first part found it.
    ino: Option<InodeNumber>,
    /// An ftruncate's reference to its descriptor's file, from its first
    /// half (fdget at the syscall's entry, before any lock) to its return.
    fd_ref: Option<u64>,
    /// That file: a close or reopen of the slot does not move it.
    pinned: Option<InodeNumber>,
    /// The first block past the new size.
    keep: u64,
    /// The lowest block freed so far (mapped blocks from here on are gone).
    freed_from: u64,
    /// Mapped blocks remain in `keep..freed_from`.
    more: bool,
    /// The answer, once the first part failed or did the truncate whole.
    ended: Option<Result<(), Errno>>,
}

/// What one part did: where the blocks it freed begin (None when it freed
/// none) and its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruncatePartRan {
    pub freed_from: Option<u64>,
    pub got: Result<(), Errno>,
}

impl TruncateInFlight {
    pub(super) fn new(whole: WholeOp, planned_all: bool) -> TruncateInFlight {
        TruncateInFlight { whole, planned_all, ino: None, fd_ref: None, pinned: None, keep: 0, freed_from: u64::MAX, more: true, ended: None }
    }

    pub(super) fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether the truncate's file is fixed: a part ran, or its
    /// descriptor's file was pinned at the first half.
    /// The file it goes on with: the one its first part opened, or the
    /// one its first half pinned.
    pub(super) fn file(&self) -> Option<InodeNumber> {
        self.ino.or(self.pinned)
    }

    pub(super) fn file_fixed(&self) -> bool {
        self.begun() || self.pinned.is_some()
    }

    /// Whether a part could run now: the first, or one freeing another
    /// extent, with every lock of the truncate held.
    pub fn has_more(&self) -> bool {
        self.whole.held.is_some() && self.planned_all && self.ended.is_none() && self.more
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of a truncate or ftruncate: its locks, as far as
    /// they can be had now.
    pub(super) fn begin_truncate(&mut self, op: &Op) -> Result<TruncateInFlight, Errno> {
        let (whole, planned_all) = self.begin_whole_for_parts(op)?;
        let mut t = TruncateInFlight::new(whole, planned_all);
        // ftruncate's fdget, after the length's check (do_sys_ftruncate).
        if let Op::FtruncateFd { slot, size } = *op {
            if size <= ext4_model::vfs::LOFF_MAX {
                match self.fdget(slot) {
                    Ok((id, ino)) => (t.fd_ref, t.pinned) = (Some(id), Some(ino)),
                    Err(e) => t.ended = Some(Err(e)),
                }
            }
        }
        Ok(t)
    }

    /// Runs the next part of a truncate in flight, its semaphores still
    /// held around it. None when it has no part to run, or when its name
    /// now leads to another file than the one it locked (its second half
    /// then does it whole, as any op's).
    pub fn truncate_part(&mut self, t: &mut TruncateInFlight) -> Option<TruncatePartRan> {
        if !t.has_more() {
            return None;
        }
        let found = match (t.ino, &t.whole.op) {
            (Some(_), _) => None,
            (None, Op::Truncate { path, .. }) => Some(self.open_path(path).ok()),
            (None, Op::FtruncateFd { .. }) if t.pinned.is_some() => Some(t.pinned),
            (None, Op::FtruncateFd { slot, .. }) => Some(self.slot_file(*slot).ok()),
            (None, _) => return None,
        };
        let (plan, holder) = self.hand_back_for_part(&t.whole, found)?;
        let ran = match t.ino {
            None => self.first_truncate_part(t),
            Some(ino) => self.next_truncate_part(t, ino),
        };
        // Its handle restarts between parts, and the tail block's folio is
        // done with: it sleeps holding only its semaphores.
        t.whole.held = Some(self.take_back_after_part(plan, holder, |s| matches!(s, PlannedLock::Sem { .. })));
        Some(ran)
    }

    /// truncate(2)'s or ftruncate(2)'s checks (an ftruncate then takes its
    /// reference to the file), then ext4_setattr up to its first extent
    /// freed.
    fn first_truncate_part(&mut self, t: &mut TruncateInFlight) -> TruncatePartRan {
        let begun = match t.whole.op.clone() {
            Op::Truncate { path, size } => self.prepare_truncate().and_then(|()| {
                let ino = self.truncate_path_checks(&path, size)?;
                self.truncate_inode_checks(ino, size)?;
                Ok((ino, size))
            }),
            Op::FtruncateFd { size, .. } if t.pinned.is_some() => {
                let ino = t.pinned.ok_or(Errno::EBADF);
                ino.and_then(|ino| self.prepare_truncate().and_then(|()| self.truncate_inode_checks(ino, size)).map(|()| (ino, size)))
            }
            Op::FtruncateFd { slot, size } => self.ftruncate_checks(slot, size).and_then(|ino| {
                self.truncate_inode_checks(ino, size)?;
                let (id, ino) = self.fdget(slot)?;
                t.fd_ref = Some(id);
                Ok((ino, size))
            }),
            _ => Err(Errno::EINVAL),
        };
        let (ino, size) = match begun {
            Ok(ino) => ino,
            Err(e) => {
                t.ended = Some(Err(e));
                return TruncatePartRan { freed_from: None, got: Err(e) };
            }
        };
        t.ino = Some(ino);
        let shrinks = self.ctx.journal.is_some() && self.node(ino).is_ok_and(|n| size < n.disk.size);
        if !shrinks {
            let got = self.under_setattr_locks(ino, |fs| fs.truncate_inode(ino, size));
            t.ended = Some(got);
            return TruncatePartRan { freed_from: None, got };
        }
        let got = self.under_setattr_locks(ino, |fs| {
            let keep = fs.truncate_size(ino, size)?.unwrap_or(u64::MAX);
            // A crash from here on leaves the rest to mount's orphan cleanup.
            #[cfg(feature = "test-hooks")]
            if fs.bug_truncate_leaves_no_orphan() {
                return Ok(keep);
            }
            if fs.node(ino)?.disk.links_count > 0 {
                fs.orphan_add(ino)?;
            }
            Ok(keep)
        });
        match got {
            Ok(keep) => {
                t.keep = keep;
                self.free_next_extent(t, ino)
            }
            Err(e) => {
                t.ended = Some(Err(e));
                TruncatePartRan { freed_from: None, got: Err(e) }
            }
        }
    }

    /// ext4_ext_remove_space after a handle restart: the next extent.
    fn next_truncate_part(&mut self, t: &mut TruncateInFlight, ino: InodeNumber) -> TruncatePartRan {
        if let Err(e) = self.prepare_change(0) {
            t.ended = Some(Err(e));
            return TruncatePartRan { freed_from: None, got: Err(e) };
        }
        self.free_next_extent(t, ino)
    }

    /// Frees the last extent the truncate has left, under its semaphores.
    fn free_next_extent(&mut self, t: &mut TruncateInFlight, ino: InodeNumber) -> TruncatePartRan {
        let (keep, below) = (t.keep, t.freed_from);
        let got = self.under_setattr_locks(ino, |fs| {
            let (ctx, node) = fs.split(ino)?;
            let Some(start) = node.map().last_run_start(keep..below) else { return Ok(None) };
            // Whole clusters, so a part never splits one (ext4's partial
            // cluster is freed with the extent that empties it).
            let ratio = 1u64 << ctx.cluster_bits();
            let from = (start / ratio * ratio).max(keep);
            ctx.free_mapped(node, from..below.min(node.map().end()), keep..u64::MAX)?;
            fs.mark_dirty(ino);
            Ok(Some(from))
        });
        match got {
            Ok(freed) => {
                t.freed_from = freed.unwrap_or(keep);
                t.more = self.node(ino).is_ok_and(|n| n.map().last_run_start(keep..t.freed_from).is_some());
                TruncatePartRan { freed_from: freed, got: Ok(()) }
            }
            Err(e) => {
                t.ended = Some(Err(e));
                TruncatePartRan { freed_from: None, got: Err(e) }
            }
        }
    }

    /// The second half: whole if no part ran, else the blocks left freed
    /// and the file off the orphan list.
    pub(super) fn finish_truncate(&mut self, mut t: TruncateInFlight) -> Outcome {
        if !t.file_fixed() {
            return self.finish_whole(t.whole);
        }
        self.hand_back_at_finish(&t.whole)?;
        if !t.begun() {
            // Pinned but no part ran: the whole truncate, on the pinned file.
            self.first_truncate_part(&mut t);
        }
        let answer = match (t.ended, t.ino) {
            (Some(answer), _) => answer,
            (None, Some(ino)) => self.free_the_rest(ino, t.keep, t.freed_from),
            (None, None) => Err(Errno::EINVAL),
        };
        let put = t.fd_ref.map_or(Ok(()), |id| self.fdput(id));
        answer.and(put).map(|()| Reply::Done)
    }

    /// ext4_truncate's last extents, then ext4_setattr's ext4_orphan_del.
    fn free_the_rest(&mut self, ino: InodeNumber, keep: u64, below: u64) -> Result<(), Errno> {
        self.prepare_change(0)?;
        self.under_setattr_locks(ino, |fs| {
            let (ctx, node) = fs.split(ino)?;
            ctx.free_mapped(node, keep..below.min(node.map().end()).max(keep), keep..u64::MAX)?;
            fs.mark_dirty(ino);
            // An unlinked file stays on the list until its last close.
            if fs.node(ino)?.disk.links_count > 0 {
                fs.orphan_del(ino)?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{Errno, FileSystem, Op, Reply};

    use crate::fixtures::mounted_with;
    use crate::fs::SecondHalf;

    /// A file of three extents: blocks 0..4, 10..14 and 20..24 written.
    fn three_extents(fs: &mut crate::fs::Ext4<crate::device_mem::MemDevice>) {
        fs.create("/f", 0o644).unwrap();
        for at in [0u64, 10, 20] {
            fs.write("/f", at * 4096, &[7; 4 * 4096]).unwrap();
        }
        fs.sync().unwrap();
    }

    fn begin(fs: &mut crate::fs::Ext4<crate::device_mem::MemDevice>, size: u64) -> crate::fs::TruncateInFlight {
        let Some(Ok(SecondHalf::Truncate(t))) = fs.begin_split(&Op::Truncate { path: "/f".into(), size }) else { panic!("a truncate splits as a truncate") };
        t
    }

    #[test]
    fn a_shrinking_truncate_frees_extent_by_extent_from_the_end() {
        let mut fs = mounted_with("");
        three_extents(&mut fs);
        let mut t = begin(&mut fs, 6000);
        let first = fs.truncate_part(&mut t).unwrap();
        assert_eq!((first.freed_from, first.got), (Some(20), Ok(())), "the last extent first");
        // Another task sees the new size, and the blocks not yet freed.
        let st = fs.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (6000, 8 * 8));
        assert_eq!(fs.orphan_stats().added, 1, "on the orphan list until it returns");
        let second = fs.truncate_part(&mut t).unwrap();
        assert_eq!(second.freed_from, Some(10));
        assert_eq!(fs.stat("/f").unwrap().blocks, 4 * 8);
        let third = fs.truncate_part(&mut t).unwrap();
        assert_eq!(third.freed_from, Some(2), "the first extent from the new size on");
        assert!(!t.has_more(), "what is left is inside the new size");
        assert_eq!(fs.finish_split(SecondHalf::Truncate(t)), Ok(Reply::Done));
        assert_eq!(fs.stat("/f").unwrap().blocks, 2 * 8, "blocks 0 and 1 hold the 6000 bytes");
        assert_eq!(fs.read("/f", 0, 10_000).unwrap(), vec![7; 6000]);
        assert!(fs.locks_held().is_empty(), "every lock given back");
        fs.check_allocator().unwrap();
    }

    #[test]
    fn between_parts_a_truncate_holds_its_semaphores_but_no_handle() {
        let mut fs = mounted_with("");
        three_extents(&mut fs);
        let mut t = begin(&mut fs, 0);
        fs.truncate_part(&mut t).unwrap();
        let held: Vec<_> = fs.locks_held().into_iter().map(|(lock, _)| lock).collect();
        assert!(held.contains(&crate::fs::locks::Lock::InodeRwsem) && held.contains(&crate::fs::locks::Lock::InvalidateLock), "{held:?}");
        assert!(!held.contains(&crate::fs::locks::Lock::JournalHandle), "{held:?}");
        // So another task's sync commits the truncate part done.
        fs.sync().unwrap();
        assert_eq!(fs.finish_split(SecondHalf::Truncate(t)), Ok(Reply::Done));
        assert_eq!(fs.stat("/f").unwrap().blocks, 0);
    }

    #[test]
    fn an_ftruncate_holds_its_file_until_it_returns_though_its_descriptor_closes() {
        let mut fs = mounted_with("");
        three_extents(&mut fs);
        fs.open("/f", 3).unwrap();
        fs.unlink("/f").unwrap();
        let Some(Ok(SecondHalf::Truncate(mut t))) = fs.begin_split(&Op::FtruncateFd { slot: 3, size: 0 }) else { panic!("an ftruncate splits as a truncate") };
        assert_eq!(fs.truncate_part(&mut t).unwrap().freed_from, Some(20));
        // Another task closes the descriptor: the unlinked file stays.
        fs.close(3).unwrap();
        assert_eq!((fs.orphan_stats().freed_at_close, fs.orphan_stats().closes_under_write), (0, 1));
        assert_eq!(fs.truncate_part(&mut t).unwrap().freed_from, Some(10));
        assert_eq!(fs.finish_split(SecondHalf::Truncate(t)), Ok(Reply::Done));
        assert_eq!(fs.orphan_stats().freed_at_close, 1, "freed at the ftruncate's fdput");
        fs.check_allocator().unwrap();
        assert!(fs.locks_held().is_empty());
    }

    #[test]
    fn a_truncate_that_grows_or_fails_is_done_by_its_first_part() {
        let mut fs = mounted_with("");
        three_extents(&mut fs);
        let mut t = begin(&mut fs, 1 << 20);
        let ran = fs.truncate_part(&mut t).unwrap();
        assert_eq!((ran.freed_from, ran.got), (None, Ok(())));
        assert!(!t.has_more());
        assert_eq!(fs.finish_split(SecondHalf::Truncate(t)), Ok(Reply::Done));
        assert_eq!(fs.stat("/f").unwrap().size, 1 << 20);
        fs.chattr("/f", ext4_model::op::ChattrFlag::Append, true).unwrap();
        let mut t = begin(&mut fs, 0);
        assert_eq!(fs.truncate_part(&mut t).unwrap().got, Err(Errno::EPERM));
        assert_eq!(fs.finish_split(SecondHalf::Truncate(t)), Err(Errno::EPERM));
        assert!(fs.locks_held().is_empty());
    }

    /// ftruncate takes its descriptor's file (fdget) before any lock, so
    /// a reopen of the slot before its first part leaves it on that file.
    #[test]
    fn an_ftruncate_goes_on_with_the_file_its_slot_held_when_it_began() {
        let mut fs = mounted_with("");
        three_extents(&mut fs);
        fs.create("/c", 0o644).unwrap();
        fs.write("/c", 0, &[1; 100]).unwrap();
        fs.open("/f", 3).unwrap();
        let Some(Ok(SecondHalf::Truncate(t))) = fs.begin_split(&Op::FtruncateFd { slot: 3, size: 0 }) else { panic!("an ftruncate splits") };
        fs.open("/c", 3).unwrap();
        let half = SecondHalf::Truncate(t);
        assert_eq!(fs.finish_waits_for(&half), None);
        assert_eq!(fs.finish_split(half), Ok(Reply::Done));
        assert_eq!((fs.stat("/f").unwrap().size, fs.stat("/c").unwrap().size), (0, 100));
        assert!(fs.locks_held().is_empty());
        fs.check_allocator().unwrap();
    }
}
