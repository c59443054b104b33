//! A buffered write that takes effect folio by folio.
//!
//! ext4's buffered write (generic_perform_write) copies one folio at a time,
//! each under its folio lock, and may sleep before the next one (the folio
//! lock, a read of a partial block, reclaim). It holds i_rwsem throughout,
//! so other writers wait, but buffered reads, stat, FIEMAP, write-back, and a
//! crash can come in between and see the write part done: the first folios
//! written and the size grown over them, the rest not yet. Ext4 checks the
//! write once, at its start (an append takes its offset, the size, then),
//! and closes the file once, at its end. A pwrite through a path, an append,
//! a rewrite (whose first part makes the open's truncation to 0) and a
//! pwrite through a held descriptor go this way; the last checks the
//! descriptor at its start and holds its file (fdget) until it returns, so
//! a close of the descriptor by another task between its parts leaves the
//! rest of the write, and the file's release, to the write
//! (`crate::descriptors`).
//!
//! Where the parts end is the target's choice (its folios); the model takes
//! each part's range from it and writes the same bytes, so both sides show
//! the same half-done write to whatever runs in between.

use crate::content::Source;
use crate::crash_log::Call;
use crate::model::Model;
use crate::op::{Op, Reply};
use crate::state::Ino;
use crate::{Errno, Outcome};

/// Where a write in flight goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteTo {
    /// pwrite through a path: open, write at the offset, close.
    Path(String),
    /// Append through a path: the offset is the size at the open.
    Append(String),
    /// open(O_TRUNC) through a path, then a write at 0: the first part
    /// truncates.
    Rewrite(String),
    /// pwrite through a held descriptor: no open or close of its own.
    Slot(u8),
}

/// A write of `pattern(seed, len)` between its parts: through a path
/// (open + write + close) or a held descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWrite {
    pub to: WriteTo,
    /// Where it writes (an append's: the size when its first part opened).
    pub offset: u64,
    pub len: u32,
    pub seed: u64,
    /// The file, once the first part opened it.
    ino: Option<Ino>,
    /// A descriptor write's reference to its file, from its first half
    /// (fdget at the syscall's entry, before any lock: [`Model::pin_write`]).
    fd_ref: Option<u64>,
    /// That file: the slot may lead elsewhere by the first part.
    pinned: Option<Ino>,
    /// Bytes written so far (the next part starts at `offset + done`).
    pub done: u64,
    /// The answer, once a part failed or fell short: later parts write nothing.
    ended: Option<Result<u64, Errno>>,
}

impl PendingWrite {
    /// The write `op` is, before any part (None for any other op).
    pub fn of(op: &Op) -> Option<PendingWrite> {
        let (to, offset, len, seed) = match op {
            Op::Write { path, offset, len, seed } => (WriteTo::Path(path.clone()), *offset, *len, *seed),
            Op::Append { path, len, seed } => (WriteTo::Append(path.clone()), 0, *len, *seed),
            Op::Rewrite { path, len, seed } => (WriteTo::Rewrite(path.clone()), 0, *len, *seed),
            Op::WriteFd { slot, offset, len, seed } => (WriteTo::Slot(*slot), *offset, *len, *seed),
            _ => return None,
        };
        Some(PendingWrite { to, offset, len, seed, ino: None, fd_ref: None, pinned: None, done: 0, ended: None })
    }

    /// The whole op, as it was begun.
    pub fn whole_op(&self) -> Op {
        let (len, seed) = (self.len, self.seed);
        match &self.to {
            WriteTo::Path(path) => Op::Write { path: path.clone(), offset: self.offset, len, seed },
            WriteTo::Append(path) => Op::Append { path: path.clone(), len, seed },
            WriteTo::Rewrite(path) => Op::Rewrite { path: path.clone(), len, seed },
            WriteTo::Slot(slot) => Op::WriteFd { slot: *slot, offset: self.offset, len, seed },
        }
    }

    /// An op writing `len` bytes where the next part starts, which a part
    /// the target's memory cut short is cut from as a whole op would be.
    pub fn part_op(&self, len: u32) -> Op {
        let (offset, seed) = (self.next_at(), self.seed);
        match &self.to {
            WriteTo::Path(path) | WriteTo::Append(path) | WriteTo::Rewrite(path) => Op::Write { path: path.clone(), offset, len, seed },
            WriteTo::Slot(slot) => Op::WriteFd { slot: *slot, offset, len, seed },
        }
    }

    /// Whether any part ran: the file is open, and the rest of the write
    /// goes to it whatever its name leads to now.
    pub fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether its file is fixed: a part ran, or its first half pinned its
    /// descriptor's file.
    pub fn file_fixed(&self) -> bool {
        self.begun() || self.pinned.is_some()
    }

    /// Whether a part could still write something.
    pub fn has_more(&self) -> bool {
        self.ended.is_none() && self.done < u64::from(self.len)
    }

    /// Where the next part starts.
    pub fn next_at(&self) -> u64 {
        self.offset + self.done
    }

    /// The write's answer so far: the bytes written, or the first part's
    /// error when nothing was.
    pub fn answer(&self) -> Result<u64, Errno> {
        self.ended.unwrap_or(Ok(self.done))
    }

    /// Notes a part's answer (`wanted` bytes asked for): an error or a short
    /// part ends the write, with the bytes written before it if any.
    pub fn note_part(&mut self, wanted: u64, got: Result<u64, Errno>) {
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

    /// Ends the write with `answer` before any part (its open failed).
    pub fn end_with(&mut self, answer: Errno) {
        self.ended = Some(Err(answer));
    }
}

impl Model {
    /// A descriptor write's first half: fdget, after the offset's check
    /// (pwrite64), so the write goes to the file the slot held then. A
    /// write of nothing is done whole.
    pub fn pin_write(&mut self, mut w: PendingWrite) -> PendingWrite {
        if let (WriteTo::Slot(slot), true) = (&w.to, w.offset <= crate::vfs::LOFF_MAX && w.len > 0) {
            match self.fdget(*slot) {
                Ok((id, ino)) => (w.fd_ref, w.pinned) = (Some(id), Some(ino)),
                Err(e) => w.end_with(e),
            }
        }
        w
    }

    /// Opens the write's file for its first part: the checks ext4 makes once,
    /// before it copies anything (and an append's offset; a descriptor's
    /// reference to its file). An error ends the write with it.
    pub fn open_write_part(&mut self, w: &mut PendingWrite) -> Result<(), Errno> {
        if w.begun() {
            return Ok(());
        }
        let opened = match &w.to {
            WriteTo::Path(path) => self.open_for_write(path, false),
            WriteTo::Append(path) => self.open_for_write(path, true).and_then(|ino| {
                w.offset = self.file(ino).ok_or(Errno::EISDIR)?.size;
                Ok(ino)
            }),
            WriteTo::Rewrite(path) => {
                // Logged as its own call, as a whole rewrite logs it: a
                // crash may fall between the truncate and the parts.
                let path = path.clone();
                self.record(|| Call::Op(Op::Truncate { path: path.clone(), size: 0 }));
                self.open_for_write(&path, false).inspect(|&ino| self.truncate_inode(ino, 0))
            }
            // Its reference is taken: the rest of pwrite's checks.
            WriteTo::Slot(_) if w.pinned.is_some() => w.pinned.filter(|&ino| !self.immutable(ino)).ok_or(Errno::EPERM),
            WriteTo::Slot(slot) => self.open_slot_write(*slot, w.offset).map(|(id, ino)| {
                w.fd_ref = Some(id);
                ino
            }),
        };
        match opened {
            Ok(ino) => {
                w.ino = Some(ino);
                Ok(())
            }
            Err(e) => {
                w.end_with(e);
                Err(e)
            }
        }
    }

    /// A descriptor write's checks, then its fdget.
    fn open_slot_write(&mut self, slot: u8, offset: u64) -> Result<(u64, Ino), Errno> {
        self.pwrite_checks(slot, offset)?;
        self.fdget(slot)
    }

    /// Writes bytes `w.done..w.done + len` of the pattern at
    /// `w.next_at()`, to the file the first part opened; answers the bytes
    /// written. The caller notes the answer ([`PendingWrite::note_part`]).
    pub fn write_part(&mut self, w: &PendingWrite, len: u64) -> Result<u64, Errno> {
        let Some(ino) = w.ino else { return Err(Errno::EBADF) };
        if !self.st.inodes.contains_key(&ino) {
            // Gone with a resync that adopted the target's state.
            return Err(Errno::EBADF);
        }
        let (offset, at, seed) = (w.next_at(), w.done, w.seed);
        self.record(|| Call::WritePart { ino, offset, len, seed, at });
        self.write_at(ino, offset, len as usize, Source::Pattern { seed, at })
    }

    /// The write returns: a path's file closes (a release like any
    /// write's), a descriptor's reference is dropped.
    pub fn finish_write(&mut self, w: PendingWrite) -> Outcome {
        if let Some(id) = w.fd_ref {
            self.fdput(id);
        } else if let Some(ino) = w.ino.filter(|i| self.st.inodes.contains_key(i)) {
            self.release(ino);
        }
        w.answer().map(Reply::Written)
    }

    /// Replays a logged part in a crash check's model.
    pub(crate) fn replay_write_part(&mut self, ino: Ino, offset: u64, len: u64, seed: u64, at: u64) {
        // A call of its own, as it was live: the sequence numbers line up.
        self.record(|| Call::WritePart { ino, offset, len, seed, at });
        if self.st.inodes.contains_key(&ino) {
            let _ = self.write_at(ino, offset, len as usize, Source::Pattern { seed, at });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileSystem, MountConfig, Op, Pending};

    fn write(path: &str, offset: u64, len: u32, seed: u64) -> PendingWrite {
        PendingWrite::of(&Op::Write { path: path.into(), offset, len, seed }).unwrap()
    }

    fn model() -> Model {
        let mut m = Model::new(&MountConfig::default()).unwrap();
        m.create("/f", 0o644).unwrap();
        m
    }

    #[test]
    fn parts_written_in_turn_leave_what_the_whole_write_leaves() {
        let mut whole = model();
        whole.apply(&Op::Write { path: "/f".into(), offset: 1000, len: 20_000, seed: 9 }).unwrap();
        let mut parted = model();
        let mut w = write("/f", 1000, 20_000, 9);
        parted.open_write_part(&mut w).unwrap();
        for len in [3096, 8192, 8712] {
            let got = parted.write_part(&w, len);
            w.note_part(len, got);
            // In between, the file is as far as the parts went.
            assert_eq!(parted.stat("/f").unwrap().size, w.next_at());
        }
        assert_eq!(parted.finish_write(w), Ok(Reply::Written(20_000)));
        assert_eq!(parted.read("/f", 0, 30_000), whole.read("/f", 0, 30_000));
    }

    #[test]
    fn the_rest_goes_to_the_file_the_write_opened_and_a_failed_part_ends_the_write_short() {
        let mut m = model();
        m.mkdir("/d", 0o755).unwrap();
        m.create("/d/f", 0o644).unwrap();
        let mut w = write("/d/f", 0, 8192, 4);
        m.open_write_part(&mut w).unwrap();
        let got = m.write_part(&w, 4096);
        w.note_part(4096, got);
        // A rename of its directory takes no lock the write holds.
        m.rename("/d", "/e").unwrap();
        let got = m.write_part(&w, 4096);
        w.note_part(4096, got);
        assert_eq!(m.stat("/e/f").unwrap().size, 8192, "the rest went to the file the write opened");

        let mut short = write("/g", 0, 100, 1);
        short.note_part(50, Ok(50));
        short.note_part(50, Err(Errno::ENOSPC));
        assert_eq!((short.answer(), short.has_more()), (Ok(50), false));
        let mut failed = write("/missing", 0, 100, 1);
        assert_eq!(m.open_write_part(&mut failed), Err(Errno::ENOENT));
        assert_eq!(m.finish_write(failed), Err(Errno::ENOENT));
    }

    #[test]
    fn a_rewrite_in_parts_leaves_what_the_whole_rewrite_leaves() {
        let mut whole = model();
        whole.write("/f", 0, &[1; 20_000]).unwrap();
        let mut parted = whole.clone();
        let rewrite = Op::Rewrite { path: "/f".into(), len: 6000, seed: 4 };
        assert_eq!(whole.apply(&rewrite), Ok(Reply::Written(6000)));
        let mut w = PendingWrite::of(&rewrite).unwrap();
        parted.open_write_part(&mut w).unwrap();
        // Sizes looked up without a stat: its descriptor's close would be a
        // release, taking the truncate's auto_da_alloc as any close does.
        let size = |m: &Model| m.file(m.open_path("/f").unwrap()).unwrap().size;
        assert_eq!(size(&parted), 0, "the open truncated");
        let got = parted.write_part(&w, 4096);
        w.note_part(4096, got);
        assert_eq!(size(&parted), 4096);
        assert_eq!(parted.finish_split(Pending::Write(w)), Ok(Reply::Written(6000)));
        assert_eq!(parted.read("/f", 0, 30_000), whole.read("/f", 0, 30_000));
        assert_eq!(parted.fiemap("/f", crate::op::FiemapRequest::whole(0)), whole.fiemap("/f", crate::op::FiemapRequest::whole(0)), "the close's auto_da_alloc too");
    }

    #[test]
    fn a_descriptor_closed_between_parts_keeps_its_file_until_the_write_returns() {
        let mut m = model();
        m.apply(&Op::Open { path: "/f".into(), slot: 2 }).unwrap();
        m.unlink("/f").unwrap();
        let used = m.st.used_blocks;
        let mut w = PendingWrite::of(&Op::WriteFd { slot: 2, offset: 0, len: 8192, seed: 3 }).unwrap();
        m.open_write_part(&mut w).unwrap();
        let got = m.write_part(&w, 4096);
        w.note_part(4096, got);
        // Another task closes the descriptor: the slot goes now, the orphan stays.
        m.apply(&Op::Close { slot: 2 }).unwrap();
        assert_eq!(m.apply(&Op::FsyncFd { slot: 2 }), Err(Errno::EBADF));
        let ino = w.ino.unwrap();
        assert!(m.st.inodes.contains_key(&ino) && m.st.is_open(ino), "the write still holds the file");
        m.check_invariants().unwrap();
        // A new file in the slot is not the one the write goes on with.
        m.create("/g", 0o644).unwrap();
        m.apply(&Op::Open { path: "/g".into(), slot: 2 }).unwrap();
        let got = m.write_part(&w, 4096);
        w.note_part(4096, got);
        assert_eq!(m.stat("/g").unwrap().size, 0);
        assert_eq!(m.finish_write(w), Ok(Reply::Written(8192)));
        assert!(!m.st.inodes.contains_key(&ino), "freed at the write's fdput");
        assert_eq!(m.st.used_blocks, used, "with its blocks");
        m.check_invariants().unwrap();

        // A descriptor write checks its slot once, at its first part.
        let mut bad = PendingWrite::of(&Op::WriteFd { slot: 5, offset: 0, len: 10, seed: 1 }).unwrap();
        assert_eq!(m.open_write_part(&mut bad), Err(Errno::EBADF));
        assert_eq!(m.finish_write(bad), Err(Errno::EBADF));
    }

    #[test]
    fn a_descriptor_write_goes_to_the_file_its_slot_held_when_it_began() {
        let mut m = model();
        m.create("/g", 0o644).unwrap();
        m.apply(&Op::Open { path: "/f".into(), slot: 2 }).unwrap();
        let Some(Ok(p)) = m.begin_split(&Op::WriteFd { slot: 2, offset: 0, len: 10, seed: 3 }) else { panic!("a pwrite splits") };
        m.apply(&Op::Open { path: "/g".into(), slot: 2 }).unwrap();
        assert_eq!(m.finish_split(p), Ok(Reply::Written(10)));
        assert_eq!((m.stat("/f").unwrap().size, m.stat("/g").unwrap().size), (10, 0));
        m.check_invariants().unwrap();
    }
}
