//! A buffered pwrite between its halves that goes on folio by folio.
//!
//! generic_perform_write copies a folio at a time (write_begin, copy,
//! write_end) and may sleep before each one, holding i_rwsem the whole
//! way: other writers wait, but reads, stat, FIEMAP, write-back and a crash
//! may find the write part done. Each part here is one folio's copy: the
//! folio cached at the write's position, or the one the page cache would
//! make there. The write is checked once, by its first part's open (where
//! an append takes the size as its offset), and closed once, when it
//! returns. A pwrite through a path, an append, a rewrite (its first part
//! makes the open's truncation) and a pwrite through a held descriptor go
//! this way; the last holds the descriptor's file from its
//! first part to its return (fdget, `orphan`), and closes nothing.

use std::ops::Range;

use ext4_model::{Errno, Op, Outcome, Reply};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::locks::Lock;
use super::split::WholeOp;
use super::Ext4;

/// A pwrite between its halves ([`super::SecondHalf::Write`]).
#[derive(Debug, PartialEq, Eq)]
pub struct WriteInFlight {
    pub(super) whole: WholeOp,
    /// The file, once the first part opened it.
    ino: Option<InodeNumber>,
    /// Where the write starts, once its first part opened the file.
    offset: u64,
    /// A descriptor write's reference to its file, from its first half
    /// (fdget at the syscall's entry, before any lock).
    fd_ref: Option<u64>,
    /// That file: a close or reopen of the slot before the first part
    /// does not move it.
    pinned: Option<InodeNumber>,
    /// Bytes written so far.
    done: u64,
    /// The answer, once a part failed or fell short.
    ended: Option<Result<u64, Errno>>,
}

/// Where a write in flight goes, from its op.
enum WriteTo<'a> {
    Path(&'a str),
    Append(&'a str),
    /// open(O_TRUNC) then a write at 0: the first part truncates.
    Rewrite(&'a str),
    Slot(u8),
}

/// What one part did: the bytes it set out to write (empty when the open
/// failed) and its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartRan {
    pub range: Range<u64>,
    pub got: Result<u64, Errno>,
}

impl WriteInFlight {
    pub(super) fn new(whole: WholeOp) -> WriteInFlight {
        WriteInFlight { whole, ino: None, offset: 0, fd_ref: None, pinned: None, done: 0, ended: None }
    }

    /// Whether the write's file is fixed: a part ran, or its descriptor's
    /// file was pinned at the first half.
    /// The file it goes on with: the one its first part opened, or the
    /// one its first half pinned.
    pub(super) fn file(&self) -> Option<InodeNumber> {
        self.ino.or(self.pinned)
    }

    pub(super) fn file_fixed(&self) -> bool {
        self.begun() || self.pinned.is_some()
    }

    pub(super) fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// (where it goes, its offset before the open, length, seed).
    fn fields(&self) -> Option<(WriteTo<'_>, u64, u64, u64)> {
        match &self.whole.op {
            Op::Write { path, offset, len, seed } => Some((WriteTo::Path(path), *offset, u64::from(*len), *seed)),
            Op::Append { path, len, seed } => Some((WriteTo::Append(path), 0, u64::from(*len), *seed)),
            Op::Rewrite { path, len, seed } => Some((WriteTo::Rewrite(path), 0, u64::from(*len), *seed)),
            Op::WriteFd { slot, offset, len, seed } => Some((WriteTo::Slot(*slot), *offset, u64::from(*len), *seed)),
            _ => None,
        }
    }

    /// Whether a part could still write something: the write holds its
    /// file's i_rwsem (a first half that took nothing has no part to run
    /// until its second half) and has bytes left.
    pub fn has_more(&self) -> bool {
        self.whole.held.is_some() && self.has_more_unlocked()
    }

    /// [`WriteInFlight::has_more`] once its locks are handed back.
    fn has_more_unlocked(&self) -> bool {
        self.ended.is_none() && self.fields().is_some_and(|(_, _, len, _)| self.done < len)
    }

    fn note(&mut self, wanted: u64, got: Result<u64, Errno>) {
        match got {
            Ok(n) => {
                self.done += n;
                if n < wanted {
                    self.ended = Some(Ok(self.done));
                }
            }
            Err(e) => self.ended = Some(if self.done > 0 { Ok(self.done) } else { Err(e) }),
        }
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of a buffered write: its locks, and a descriptor
    /// write's fdget (after the offset's check, as pwrite64 makes it).
    pub(super) fn begin_write(&mut self, op: &Op) -> Result<WriteInFlight, Errno> {
        let mut w = WriteInFlight::new(self.begin_whole(op)?);
        if let Op::WriteFd { slot, offset, len, .. } = *op {
            // A write of nothing has nothing to go on with: done whole.
            if offset <= ext4_model::vfs::LOFF_MAX && len > 0 {
                match self.fdget(slot) {
                    Ok((id, ino)) => (w.fd_ref, w.pinned) = (Some(id), Some(ino)),
                    Err(e) => w.ended = Some(Err(e)),
                }
            }
        }
        Ok(w)
    }

    /// Runs the next part of a pwrite in flight: one folio's copy, with
    /// the locks its first half took still held around it. None when it has
    /// no part to run, or when its name now leads to another file than the
    /// one it locked (its second half then does it whole, as any op's).
    pub fn write_part(&mut self, w: &mut WriteInFlight) -> Option<PartRan> {
        if !w.has_more() {
            return None;
        }
        let found = match (w.ino, w.fields()?.0) {
            (Some(_), _) => None,
            (None, WriteTo::Slot(_)) if w.pinned.is_some() => Some(w.pinned),
            (None, WriteTo::Path(path) | WriteTo::Append(path) | WriteTo::Rewrite(path)) => Some(self.open_path(path).ok()),
            (None, WriteTo::Slot(slot)) => Some(self.slot_file(slot).ok()),
        };
        let (plan, holder) = self.hand_back_for_part(&w.whole, found)?;
        let ran = self.run_write_part(w, false);
        w.whole.held = Some(self.take_back_after_part(plan, holder, |_| true));
        Some(ran)
    }

    /// The second half of a pwrite: whole if no part ran, else the rest
    /// folio by folio and the close.
    pub(super) fn finish_write(&mut self, mut w: WriteInFlight) -> Outcome {
        if !w.file_fixed() {
            return self.finish_whole(w.whole);
        }
        self.hand_back_at_finish(&w.whole)?;
        while w.has_more_unlocked() {
            self.run_write_part(&mut w, true);
        }
        let answer = w.ended.unwrap_or(Ok(w.done));
        match (w.fd_ref, w.ino) {
            (Some(id), _) => {
                let put = self.fdput(id);
                answer.and_then(|n| put.map(|()| Reply::Written(n)))
            }
            (None, Some(ino)) => self.closing(ino, answer).map(Reply::Written),
            (None, None) => answer.map(Reply::Written),
        }
    }

    /// One part: the open and its checks first if none ran yet, then the
    /// copy into the next folio (or, with `rest`, of everything left).
    fn run_write_part(&mut self, w: &mut WriteInFlight, rest: bool) -> PartRan {
        let Some((offset, len, seed)) = w.fields().map(|(_, o, l, s)| (o, l, s)) else {
            return PartRan { range: 0..0, got: Err(Errno::EINVAL) };
        };
        let ino = match w.ino {
            Some(ino) => self.prepare_data_change(len - w.done).map(|()| ino),
            None => self.open_write(w, offset, len),
        };
        let at = w.offset + w.done;
        let ino = match ino {
            Ok(ino) => ino,
            Err(e) => {
                w.note(0, Err(e));
                return PartRan { range: at..at, got: Err(e) };
            }
        };
        w.ino = Some(ino);
        let end = w.offset + len;
        let end = if rest { end } else { self.folio_part_end(ino, at, end) };
        let mut data = vec![0u8; (end - at) as usize];
        ext4_model::pattern::pattern_at(seed, w.done, &mut data);
        let got = self.under_inode_lock(ino, Lock::InodeRwsem, false, "ext4_buffered_write_iter", |fs| fs.write_at(ino, at, &data));
        #[cfg(feature = "test-hooks")]
        if got.is_ok() && self.bug_sizes_whole_write() {
            let whole = (offset + len).min(self.ctx.mount.max_file_size());
            if let Ok(node) = self.node(ino) {
                node.disk.size = node.disk.size.max(whole);
            }
        }
        w.note(end - at, got);
        PartRan { range: at..end, got }
    }

    /// The first part's open and checks, in the order the whole op makes
    /// them: the file and where the write starts (an append's: the size),
    /// or a descriptor's checks and its reference to the file.
    fn open_write(&mut self, w: &mut WriteInFlight, offset: u64, len: u64) -> Result<InodeNumber, Errno> {
        if let Some(ino) = w.pinned {
            // Its reference is taken: the rest of pwrite's checks.
            w.offset = offset;
            if self.immutable(ino)? {
                return Err(Errno::EPERM);
            }
            self.prepare_data_change(len)?;
            return Ok(ino);
        }
        let (path, append, truncates) = match w.fields().ok_or(Errno::EINVAL)?.0 {
            WriteTo::Slot(slot) => {
                self.pwrite_checks(slot, offset)?;
                self.prepare_data_change(len)?;
                let (id, ino) = self.fdget(slot)?;
                w.fd_ref = Some(id);
                w.offset = offset;
                return Ok(ino);
            }
            WriteTo::Path(path) => (path.to_string(), false, false),
            WriteTo::Append(path) => (path.to_string(), true, false),
            WriteTo::Rewrite(path) => (path.to_string(), false, true),
        };
        self.prepare_data_change(len)?;
        let ino = self.open_for_write(&path, append)?;
        if truncates {
            // The open's truncation, under the i_rwsem the write holds; if
            // it fails, the file closes with its error.
            let truncated = self.under_inode_lock(ino, Lock::InodeRwsem, false, "do_truncate", |fs| fs.truncate_inode(ino, 0));
            if let Err(e) = truncated {
                return self.closing(ino, Err(e));
            }
        }
        w.offset = if append { self.node(ino)?.disk.size } else { offset };
        Ok(ino)
    }

    /// Where a write's or read's part starting at `at` ends: the end of
    /// the folio cached at `at` (or of the one the page cache would make
    /// there), or `end`.
    pub(super) fn folio_part_end(&mut self, ino: InodeNumber, at: u64, end: u64) -> u64 {
        let Ok((ctx, node)) = self.split(ino) else { return end };
        let orders = ctx.folio_orders(node);
        let geo = ctx.pages.geometry();
        let folio = ctx.pages.first_write_folio(ino, orders, geo.pages_covering(at..end));
        folio.end.saturating_mul(geo.page_size()).clamp(at + 1, end)
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FileSystem, Op, Reply};

    use crate::fixtures::mounted_with;
    use crate::fs::SecondHalf;

    #[test]
    fn a_write_in_flight_goes_folio_by_folio_and_shows_part_done_in_between() {
        // Order-0 folios: each part is one 4 KiB page.
        let mut fs = mounted_with("max_folio_order=0");
        fs.create("/f", 0o644).unwrap();
        let write = Op::Write { path: "/f".into(), offset: 1000, len: 9000, seed: 5 };
        let Some(Ok(SecondHalf::Write(mut w))) = fs.begin_split(&write) else { panic!("a pwrite splits as a write") };
        let first = fs.write_part(&mut w).unwrap();
        assert_eq!((first.range, first.got), (1000..4096, Ok(3096)), "to the end of the first folio");
        // Another task now sees the first folio written and the size over it.
        assert_eq!(fs.stat("/f").unwrap().size, 4096);
        let expect = ext4_model::op::pattern(5, 9000);
        assert_eq!(fs.read("/f", 0, 20_000).unwrap()[1000..], expect[..3096]);
        let second = fs.write_part(&mut w).unwrap();
        assert_eq!((second.range, second.got), (4096..8192, Ok(4096)));
        assert_eq!(fs.stat("/f").unwrap().size, 8192);
        // The second half copies the rest and returns the whole count.
        assert_eq!(fs.finish_split(SecondHalf::Write(w)), Ok(Reply::Written(9000)));
        assert_eq!(fs.read("/f", 1000, 9000).unwrap(), expect);
        assert!(fs.locks_held().is_empty(), "every lock given back");
    }

    #[test]
    fn an_append_takes_the_size_at_its_first_part_as_its_offset() {
        let mut fs = mounted_with("max_folio_order=0");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[1; 100]).unwrap();
        let Some(Ok(SecondHalf::Write(mut w))) = fs.begin_split(&Op::Append { path: "/f".into(), len: 5000, seed: 2 }) else { panic!() };
        let first = fs.write_part(&mut w).unwrap();
        assert_eq!((first.range, first.got), (100..4096, Ok(3996)));
        assert_eq!(fs.finish_split(SecondHalf::Write(w)), Ok(Reply::Written(5000)));
        assert_eq!(fs.read("/f", 100, 5000).unwrap(), ext4_model::op::pattern(2, 5000));
    }

    #[test]
    fn a_descriptor_closed_between_parts_keeps_its_file_until_the_write_returns() {
        let mut fs = mounted_with("max_folio_order=0");
        fs.create("/f", 0o644).unwrap();
        fs.open("/f", 2).unwrap();
        fs.unlink("/f").unwrap();
        let write = Op::WriteFd { slot: 2, offset: 0, len: 9000, seed: 6 };
        let Some(Ok(SecondHalf::Write(mut w))) = fs.begin_split(&write) else { panic!("a descriptor's pwrite splits as a write") };
        let first = fs.write_part(&mut w).unwrap();
        assert_eq!((first.range, first.got), (0..4096, Ok(4096)));
        // Another task closes the descriptor: the slot goes, the file stays.
        fs.close(2).unwrap();
        assert_eq!(fs.fsync_fd(2), Err(ext4_model::Errno::EBADF));
        assert_eq!((fs.orphan_stats().freed_at_close, fs.orphan_stats().closes_under_write), (0, 1), "the write still holds the orphan");
        let second = fs.write_part(&mut w).unwrap();
        assert_eq!((second.range, second.got), (4096..8192, Ok(4096)));
        assert_eq!(fs.finish_split(SecondHalf::Write(w)), Ok(Reply::Written(9000)));
        assert_eq!(fs.orphan_stats().freed_at_close, 1, "freed at the write's fdput");
        fs.check_allocator().unwrap();
        assert!(fs.locks_held().is_empty(), "every lock given back");

        // A descriptor write checks its slot once, at its first part.
        let Some(Ok(half)) = fs.begin_split(&Op::WriteFd { slot: 4, offset: 0, len: 10, seed: 1 }) else { panic!() };
        assert_eq!(fs.finish_split(half), Err(ext4_model::Errno::EBADF));
    }

    #[test]
    fn a_rewrite_truncates_at_its_first_part_then_goes_folio_by_folio() {
        let mut fs = mounted_with("max_folio_order=0");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[1; 20_000]).unwrap();
        let Some(Ok(SecondHalf::Write(mut w))) = fs.begin_split(&Op::Rewrite { path: "/f".into(), len: 6000, seed: 4 }) else { panic!("a rewrite splits as a write") };
        let first = fs.write_part(&mut w).unwrap();
        assert_eq!((first.range, first.got), (0..4096, Ok(4096)));
        // The old bytes went with the open's truncation.
        assert_eq!(fs.stat("/f").unwrap().size, 4096);
        assert_eq!(fs.finish_split(SecondHalf::Write(w)), Ok(Reply::Written(6000)));
        assert_eq!(fs.read("/f", 0, 20_000).unwrap(), ext4_model::op::pattern(4, 6000));
        assert!(fs.locks_held().is_empty(), "every lock given back");
    }

    #[test]
    fn a_failed_open_ends_the_write_and_a_write_with_no_part_is_done_whole() {
        let mut fs = mounted_with("");
        let missing = Op::Write { path: "/nothing".into(), offset: 0, len: 10, seed: 1 };
        let Some(Ok(SecondHalf::Write(mut w))) = fs.begin_split(&missing) else { panic!() };
        assert!(fs.write_part(&mut w).is_none(), "it locked nothing, so it has no part to run");
        assert_eq!(fs.finish_split(SecondHalf::Write(w)), Err(ext4_model::Errno::ENOENT));
        fs.create("/g", 0o644).unwrap();
        let Some(Ok(half)) = fs.begin_split(&Op::Write { path: "/g".into(), offset: 0, len: 10, seed: 1 }) else { panic!() };
        assert_eq!(fs.finish_split(half), Ok(Reply::Written(10)));
        assert_eq!(fs.stat("/g").unwrap().size, 10);
    }

    /// pwrite64 takes its descriptor's file (fdget) before any lock: a
    /// reopen of the slot while the write sleeps leaves it on that file.
    /// Looked up again, the slot's new file (whose i_rwsem another task
    /// holds) made it wait for a lock it does not need: a deadlock with a
    /// rename holding that lock and waiting for the write's.
    #[test]
    fn a_descriptor_write_goes_on_with_the_file_its_slot_held_when_it_began() {
        let mut fs = mounted_with("");
        fs.create("/a", 0o644).unwrap();
        fs.create("/c", 0o644).unwrap();
        fs.open("/a", 3).unwrap();
        let Some(Ok(w)) = fs.begin_split(&Op::WriteFd { slot: 3, offset: 0, len: 10, seed: 1 }) else { panic!("a pwrite splits") };
        fs.open("/c", 3).unwrap();
        let Some(Ok(other)) = fs.begin_split(&Op::Write { path: "/c".into(), offset: 0, len: 5, seed: 2 }) else { panic!("a write splits") };
        assert_eq!(fs.finish_waits_for(&w), None, "its file is /a, whose lock it holds");
        assert_eq!(fs.finish_split(w), Ok(Reply::Written(10)));
        assert_eq!(fs.finish_split(other), Ok(Reply::Written(5)));
        assert_eq!((fs.stat("/a").unwrap().size, fs.stat("/c").unwrap().size), (10, 5));
        assert!(fs.locks_held().is_empty());
    }
}
