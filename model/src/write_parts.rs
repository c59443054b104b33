//! A buffered write that takes effect folio by folio.
//!
//! ext4's buffered write (generic_perform_write) copies one folio at a time,
//! each under its folio lock, and may sleep before the next one (the folio
//! lock, a read of a partial block, reclaim). It holds i_rwsem throughout,
//! so other writers wait, but buffered reads, stat, FIEMAP, write-back, and a
//! crash can come in between and see the write part done: the first folios
//! written and the size grown over them, the rest not yet. Ext4 checks the
//! write once, at its start (an append takes its offset, the size, then),
//! and closes the file once, at its end. A pwrite through a path and an
//! append go this way. A pwrite through a held descriptor does not yet: a
//! close of that descriptor by another task between its parts would have
//! to wait for the write's reference to the file (fdget), which no model
//! here keeps.
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

/// open + a write of `pattern(seed, len)` (at EOF with `append`) + close,
/// between its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingWrite {
    pub path: String,
    pub append: bool,
    /// Where it writes (an append's: the size when its first part opened).
    pub offset: u64,
    pub len: u32,
    pub seed: u64,
    /// The file, once the first part opened it.
    ino: Option<Ino>,
    /// Bytes written so far (the next part starts at `offset + done`).
    pub done: u64,
    /// The answer, once a part failed or fell short: later parts write nothing.
    ended: Option<Result<u64, Errno>>,
}

impl PendingWrite {
    /// The write `op` is, before any part (None for any other op).
    pub fn of(op: &Op) -> Option<PendingWrite> {
        let (path, append, offset, len, seed) = match op {
            Op::Write { path, offset, len, seed } => (path, false, *offset, *len, *seed),
            Op::Append { path, len, seed } => (path, true, 0, *len, *seed),
            _ => return None,
        };
        Some(PendingWrite { path: path.clone(), append, offset, len, seed, ino: None, done: 0, ended: None })
    }

    /// The whole op, as it was begun.
    pub fn whole_op(&self) -> Op {
        let (path, len, seed) = (self.path.clone(), self.len, self.seed);
        if self.append {
            Op::Append { path, len, seed }
        } else {
            Op::Write { path, offset: self.offset, len, seed }
        }
    }

    /// An op writing `len` bytes where the next part starts, which a part
    /// the target's memory cut short is cut from as a whole op would be.
    pub fn part_op(&self, len: u32) -> Op {
        Op::Write { path: self.path.clone(), offset: self.next_at(), len, seed: self.seed }
    }

    /// Whether any part ran: the file is open, and the rest of the write
    /// goes to it whatever its name leads to now.
    pub fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
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
    /// Opens the write's file for its first part: the checks ext4 makes once,
    /// before it copies anything (and an append's offset). An error ends
    /// the write with it.
    pub fn open_write_part(&mut self, w: &mut PendingWrite) -> Result<(), Errno> {
        if w.begun() {
            return Ok(());
        }
        let opened = self.open_for_write(&w.path, w.append).and_then(|ino| {
            if w.append {
                w.offset = self.file(ino).ok_or(Errno::EISDIR)?.size;
            }
            Ok(ino)
        });
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

    /// The write returns: its file closes (a release like any write's).
    pub fn finish_write(&mut self, w: PendingWrite) -> Outcome {
        if let Some(ino) = w.ino.filter(|i| self.st.inodes.contains_key(i)) {
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
    use crate::{FileSystem, MountConfig, Op};

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
}
