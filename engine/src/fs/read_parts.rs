//! A buffered read (by path, or pread through a held descriptor) between
//! its halves that goes on folio by folio.
//!
//! filemap_read holds no inode lock. It gets the folios at the read's
//! position (readahead fills what is not cached, under invalidate_lock
//! shared), reads i_size again, copies up to it, and goes on with the next
//! folios. Anything may run between two batches: a write, a truncate, a
//! punch, a journal-flag switch, write-back, a crash. The read returns what
//! each batch found, torn across them, and ends early where a batch finds
//! its position at or past i_size.
//!
//! Here a part copies one folio (the one cached at the read's position, or
//! the one the page cache would make there), taking invalidate_lock shared
//! around its fill; nothing is held between parts. The first half holds
//! what a whole read holds while its readahead is in flight
//! (invalidate_lock shared, where the read reaches the cache). The first
//! part gives that back, opens the file (its own open file, so an unlink
//! between parts leaves an orphan until the read returns) and copies the
//! first folio. The second half copies the rest and closes the file. A
//! pread takes its descriptor's file at its first half (fdget, before any
//! lock) and reads that file whatever the slot holds later; its reference
//! keeps the file in place of an open of its own.

use std::ops::Range;

use ext4_model::op::MAX_IO_LEN;
use ext4_model::{Errno, Op, Outcome, Reply};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::data::LOFF_MAX;
use super::lock_plan::{LockPlan, PlannedLock};
use super::locks::Lock;
use super::split::WholeOp;
use super::Ext4;

/// Who a read's fill names in a lock report.
const FILL: &str = "filemap_get_pages";

/// A buffered read between its halves ([`super::SecondHalf::Read`]).
#[derive(Debug, PartialEq, Eq)]
pub struct ReadInFlight {
    pub(super) whole: WholeOp,
    /// Its first part may run: the first half took every lock of its plan.
    may_part: bool,
    /// The file, once the first part opened it, and a path read's own
    /// open's id.
    ino: Option<InodeNumber>,
    open: Option<u64>,
    /// A pread's reference to its descriptor's file, from its first half
    /// to its return, and that file.
    fd_ref: Option<u64>,
    pinned: Option<InodeNumber>,
    /// The next byte to copy, and the end of the range asked for.
    pos: u64,
    end: u64,
    /// i_size as the first part saw it (for the bug twin that keeps it).
    first_size: u64,
    data: Vec<u8>,
    /// Set once it is over: at EOF or its end (Ok), or a part failed.
    ended: Option<Result<(), Errno>>,
}

/// What one part did: the bytes it copied (from where the read stood) or
/// its error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPartRan {
    pub range: Range<u64>,
    pub got: Result<Vec<u8>, Errno>,
}

impl ReadInFlight {
    /// Whether a part ran (or the first half refused the read).
    pub(super) fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether its file is fixed: a part ran, or its first half pinned its
    /// descriptor's file.
    pub(super) fn file_fixed(&self) -> bool {
        self.begun() || self.pinned.is_some()
    }

    /// Ends the read with `e` where it stands: what the failing part ran.
    fn fail(&mut self, e: Errno) -> ReadPartRan {
        self.ended = Some(Err(e));
        ReadPartRan { range: self.pos..self.pos, got: Err(e) }
    }

    /// Whether a part could run now: the first needs every lock of the
    /// plan its first half took; later ones need none.
    pub fn has_more(&self) -> bool {
        match (self.ended, self.ino) {
            (Some(_), _) => false,
            (None, Some(_)) => true,
            (None, None) => self.whole.held.is_some() && self.may_part,
        }
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of a buffered read: its plan's lock, as far as it
    /// can be had now; a pread's fdget, after the offset's check
    /// (ksys_pread64).
    pub(super) fn begin_read(&mut self, op: &Op) -> Result<ReadInFlight, Errno> {
        let (Op::Read { offset, len, .. } | Op::ReadFd { offset, len, .. }) = *op else { return Err(Errno::EINVAL) };
        if len > MAX_IO_LEN {
            return Err(Errno::EINVAL);
        }
        let (whole, may_part) = self.begin_whole_for_parts(op)?;
        let end = offset.saturating_add(u64::from(len));
        let mut r = ReadInFlight { whole, may_part, ino: None, open: None, fd_ref: None, pinned: None, pos: offset, end, first_size: 0, data: Vec::new(), ended: None };
        if let (Op::ReadFd { slot, .. }, true) = (op, offset <= LOFF_MAX) {
            match self.fdget(*slot) {
                Ok((id, ino)) => (r.fd_ref, r.pinned) = (Some(id), Some(ino)),
                Err(e) => r.ended = Some(Err(e)),
            }
        }
        Ok(r)
    }

    /// The next part of a read in flight. None when it has none, or when
    /// its name now leads to another file than the one it locked (its
    /// second half then reads whole, as any op's).
    pub fn read_part(&mut self, r: &mut ReadInFlight) -> Option<ReadPartRan> {
        if !r.has_more() {
            return None;
        }
        if r.ino.is_none() {
            let opened = match (&r.whole.op, r.pinned) {
                (Op::Read { path, .. }, _) => self.open_path(path),
                (Op::ReadFd { .. }, Some(ino)) => Ok(ino),
                _ => return None,
            };
            // Its plan's one lock is the file's invalidate_lock.
            let locked = r.whole.held.as_ref().and_then(|(plan, _)| plan.steps.iter().find_map(|s| if let PlannedLock::Sem { ino, .. } = s { Some(*ino) } else { None }));
            if opened.as_ref().ok() != locked.as_ref() {
                return None;
            }
            self.hand_back_for_part(&r.whole, None)?;
            // Its readahead is over: it holds nothing from here on.
            r.whole.held = None;
            if let Err(e) = self.open_read_file(r, opened) {
                return Some(r.fail(e));
            }
        }
        Some(self.copy_read_part(r, false))
    }

    /// read(2)'s checks on the file the first part found, then a path
    /// read's own open of it (a pread's reference already keeps it). An
    /// error ends the read.
    fn open_read_file(&mut self, r: &mut ReadInFlight, found: Result<InodeNumber, Errno>) -> Result<(), Errno> {
        let ino = found.and_then(|ino| self.read_checks(ino, r.pos).map(|()| ino)).inspect_err(|&e| r.ended = Some(Err(e)))?;
        r.ino = Some(ino);
        if r.pinned.is_none() {
            r.open = Some(self.open_for_read(ino));
        }
        r.first_size = self.node(ino).map_or(0, |n| n.disk.size);
        Ok(())
    }

    /// The second half: whole if its file is not fixed, else the rest (all
    /// of it on a pinned file no part read yet) and the close or fdput.
    pub(super) fn finish_read(&mut self, mut r: ReadInFlight) -> Outcome {
        if !r.file_fixed() {
            return self.finish_whole(r.whole);
        }
        self.hand_back_at_finish(&r.whole)?;
        if let (None, None, Some(ino)) = (r.ino, r.ended, r.pinned) {
            let _ = self.open_read_file(&mut r, Ok(ino));
        }
        if r.ended.is_none() {
            self.copy_read_part(&mut r, true);
        }
        let answer = match r.ended {
            Some(Err(e)) if r.data.is_empty() => Err(e),
            _ => Ok(r.data),
        };
        let closed = r.open.map_or(Ok(()), |id| self.close_read(id));
        let put = r.fd_ref.map_or(Ok(()), |id| self.fdput(id));
        answer.and_then(|data| closed.and(put).map(|()| Reply::Data(data)))
    }

    /// The lock a begun read's rest would sleep on: invalidate_lock held
    /// exclusive (a truncate, punch or switch in flight) where it fills a
    /// folio, a folio held locked across a sleep that it must fill, or, at
    /// its close, one on a file flagged for auto_da_alloc's flush or left
    /// without links.
    pub(super) fn read_rest_waits_for(&mut self, r: &ReadInFlight) -> Option<Lock> {
        let ino = r.ino.or(r.pinned)?;
        let size = self.nodes.get(&ino).map_or(0, |n| n.disk.size);
        let rest = r.pos..r.end.min(size);
        if r.ended.is_none() && rest.start < rest.end {
            let fill = LockPlan { steps: vec![PlannedLock::Sem { ino, class: Lock::InvalidateLock, shared: true, by: FILL }] };
            if let Some(lock) = self.plan_would_wait(&fill) {
                return Some(lock);
            }
            if self.ctx.pages.read_meets_locked_folio(ino, rest, None) {
                return Some(Lock::FolioLock);
            }
        }
        self.return_meets_locked_folios(ino, None).then_some(Lock::FolioLock)
    }

    /// Whether the close or fdput at an op's return meets folios of `ino`
    /// that a holder other than `except` keeps locked: it may flush the
    /// file (auto_da_alloc) or evict an orphan (truncate_inode_pages_final),
    /// both locking every folio.
    pub(super) fn return_meets_locked_folios(&self, ino: InodeNumber, except: Option<u64>) -> bool {
        let touches_all = self.nodes.get(&ino).is_some_and(|n| n.da_alloc_close || n.disk.links_count == 0);
        touches_all && self.ctx.pages.locked_inodes_except(except).contains(&ino)
    }

    /// One part: i_size read again, then one folio's copy (or, with
    /// `rest`, all that is left), filled under invalidate_lock shared.
    fn copy_read_part(&mut self, r: &mut ReadInFlight, rest: bool) -> ReadPartRan {
        let at = r.pos;
        let Some(ino) = r.ino else { return ReadPartRan { range: at..at, got: Err(Errno::EINVAL) } };
        let size = match self.node(ino) {
            Ok(n) => n.disk.size,
            Err(e) => return r.fail(e),
        };
        #[cfg(feature = "test-hooks")]
        let size = if self.bug_read_keeps_first_size() { r.first_size } else { size };
        let bound = r.end.min(size);
        if at >= bound {
            r.ended = Some(Ok(()));
            return ReadPartRan { range: at..at, got: Ok(Vec::new()) };
        }
        let to = if rest { bound } else { self.folio_part_end(ino, at, bound) };
        let mut out = vec![0u8; (to - at) as usize];
        let got = self.under_inode_lock(ino, Lock::InvalidateLock, true, FILL, |fs| {
            let (ctx, node) = fs.split(ino)?;
            ctx.cache_read(ino, node, at, &mut out)
        });
        match got {
            Ok(()) => {
                #[cfg(feature = "test-hooks")]
                self.bug_on_read(at, size, &mut out);
                r.pos = to;
                r.data.extend_from_slice(&out);
                ReadPartRan { range: at..to, got: Ok(out) }
            }
            Err(e) => r.fail(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{Errno, FileSystem, Op, Reply};

    use crate::device_mem::MemDevice;
    use crate::fixtures::mounted_with;
    use crate::fs::locks::Lock;
    use crate::fs::{Ext4, SecondHalf};

    const BS: u64 = 4096;

    fn begin(fs: &mut Ext4<MemDevice>, path: &str, offset: u64, len: u32) -> crate::fs::ReadInFlight {
        let op = Op::Read { path: path.into(), offset, len };
        let Some(Ok(SecondHalf::Read(r))) = fs.begin_split(&op) else { panic!("a buffered read splits as one") };
        r
    }

    #[test]
    fn a_read_goes_folio_by_folio_holding_nothing_and_sees_what_ran_between() {
        let mut fs = mounted_with("max_folio_order=0");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[1; 3 * BS as usize]).unwrap();
        let mut r = begin(&mut fs, "/f", 100, 3 * BS as u32);
        assert!(!fs.locks_held().is_empty(), "its readahead holds invalidate_lock");
        let first = fs.read_part(&mut r).unwrap();
        assert_eq!((first.range, first.got), (100..BS, Ok(vec![1; (BS - 100) as usize])));
        assert!(fs.locks_held().is_empty(), "nothing held between parts");
        // A writer needs no lock the read holds; the next folio shows it.
        fs.write("/f", BS, &[2; BS as usize]).unwrap();
        let second = fs.read_part(&mut r).unwrap();
        assert_eq!((second.range, second.got), (BS..2 * BS, Ok(vec![2; BS as usize])));
        // A truncate into the third folio: i_size is read again.
        fs.truncate("/f", 2 * BS + 10).unwrap();
        let mut want = vec![1; (BS - 100) as usize];
        want.extend([2; BS as usize]);
        want.extend([1; 10]);
        assert_eq!(fs.finish_split(SecondHalf::Read(r)), Ok(Reply::Data(want)));
        assert!(fs.locks_held().is_empty());
    }

    #[test]
    fn an_unlink_between_parts_leaves_an_orphan_until_the_read_returns() {
        let mut fs = mounted_with("max_folio_order=0");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[3; 2 * BS as usize]).unwrap();
        let mut r = begin(&mut fs, "/f", 0, 2 * BS as u32);
        assert_eq!(fs.read_part(&mut r).map(|p| p.range), Some(0..BS));
        fs.unlink("/f").unwrap();
        assert_eq!(fs.orphan_stats().freed_at_close, 0, "the read holds the file");
        assert_eq!(fs.finish_split(SecondHalf::Read(r)), Ok(Reply::Data(vec![3; 2 * BS as usize])));
        assert_eq!(fs.orphan_stats().freed_at_close, 1, "freed at the read's close");
        fs.check_allocator().unwrap();
    }

    #[test]
    fn a_missing_file_fails_at_the_first_part_and_a_read_past_eof_has_none() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[4; 10]).unwrap();
        let mut r = begin(&mut fs, "/f", 0, 10);
        fs.rename("/f", "/g").unwrap();
        // The first part opens by name: gone, the read is done whole.
        assert!(fs.read_part(&mut r).is_none());
        assert_eq!(fs.finish_split(SecondHalf::Read(r)), Err(Errno::ENOENT));
        let mut past = begin(&mut fs, "/g", 100, 10);
        assert!(fs.read_part(&mut past).is_none(), "nothing to read, nothing locked");
        assert_eq!(fs.finish_split(SecondHalf::Read(past)), Ok(Reply::Data(Vec::new())));
        assert!(fs.locks_held().is_empty());
    }

    #[test]
    fn a_pread_reads_the_file_its_slot_held_at_its_first_half() {
        let mut fs = mounted_with("max_folio_order=0");
        for (path, byte) in [("/f", 6), ("/g", 7)] {
            fs.create(path, 0o644).unwrap();
            fs.write(path, 0, &[byte; 2 * BS as usize]).unwrap();
        }
        fs.open("/f", 0).unwrap();
        let pread = |fs: &mut Ext4<MemDevice>| {
            let Some(Ok(SecondHalf::Read(r))) = fs.begin_split(&Op::ReadFd { slot: 0, offset: 0, len: 2 * BS as u32 }) else { panic!("a pread splits as a read") };
            r
        };
        let mut parted = pread(&mut fs);
        let whole = pread(&mut fs);
        // The slot moves on to another file and /f loses its name: both
        // reads keep /f through their descriptor's reference.
        fs.close(0).unwrap();
        fs.open("/g", 0).unwrap();
        fs.unlink("/f").unwrap();
        assert_eq!(fs.read_part(&mut parted).map(|p| (p.range, p.got)), Some((0..BS, Ok(vec![6; BS as usize]))));
        assert_eq!(fs.finish_split(SecondHalf::Read(parted)), Ok(Reply::Data(vec![6; 2 * BS as usize])));
        assert_eq!(fs.orphan_stats().freed_at_close, 0, "the other read still holds /f");
        assert_eq!(fs.finish_split(SecondHalf::Read(whole)), Ok(Reply::Data(vec![6; 2 * BS as usize])), "no part ran: all of it from the pinned file");
        assert_eq!(fs.orphan_stats().freed_at_close, 1, "freed at the last fdput");
        assert!(fs.locks_held().is_empty());
        fs.check_allocator().unwrap();
        let Some(Ok(SecondHalf::Read(closed))) = fs.begin_split(&Op::ReadFd { slot: 1, offset: 0, len: 1 }) else { panic!("a pread splits as a read") };
        assert_eq!(fs.finish_split(SecondHalf::Read(closed)), Err(Errno::EBADF), "fdget at the first half");
    }

    #[test]
    fn a_truncate_holding_invalidate_lock_holds_the_rest_of_a_read_off() {
        let mut fs = mounted_with("max_folio_order=0");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[5; 3 * BS as usize]).unwrap();
        let mut half = SecondHalf::Read(begin(&mut fs, "/f", 0, 3 * BS as u32));
        let SecondHalf::Read(r) = &mut half else { unreachable!() };
        assert_eq!(fs.read_part(r).map(|p| p.range), Some(0..BS));
        let Some(Ok(truncate)) = fs.begin_split(&Op::Truncate { path: "/f".into(), size: BS }) else { panic!("a truncate splits") };
        assert_eq!(fs.finish_waits_for(&half), Some(Lock::InvalidateLock));
        assert_eq!(fs.finish_split(truncate), Ok(Reply::Done));
        assert_eq!(fs.finish_waits_for(&half), None);
        assert_eq!(fs.finish_split(half), Ok(Reply::Data(vec![5; BS as usize])), "a read torn by a truncate ends at the new size");
        assert!(fs.locks_held().is_empty());
    }
}
