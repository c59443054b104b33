//! A direct write whose bios are in flight.
//!
//! ext4_dio_write_iter writes the range back, drops it from the page
//! cache and maps its holes unwritten in a handle that stops before the
//! bios go out; it then sleeps, holding i_rwsem, until they complete and
//! ext4_dio_write_end_io converts the unwritten blocks and moves the size.
//! Meanwhile a buffered read finds the old bytes (the completion drops
//! what it cached), stat and FIEMAP find the allocation, and a commit may
//! take it: a crash then keeps the blocks unwritten, zeros to a reader.
//! The part submits, logged as a call of its own
//! ([`Call::DirectWriteSubmit`]); the second half is the data and the
//! completion ([`Call::DirectWriteDone`]). A call that is not a direct
//! write in flight (buffered under data=journal, empty, misaligned) is
//! over at its part.

use crate::content::Source;
use crate::crash_log::Call;
use crate::model::Model;
use crate::op::{Op, Reply};
use crate::state::Ino;
use crate::{Errno, Outcome};

/// A direct write between its halves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingDirectWrite {
    pub path: String,
    pub offset: u64,
    pub len: u32,
    pub seed: u64,
    /// The file, once the part opened it.
    ino: Option<Ino>,
    /// Bytes its bios move, once submitted.
    submitted: Option<u64>,
    /// The answer, once the part failed or did the call whole.
    ended: Option<Result<u64, Errno>>,
}

impl PendingDirectWrite {
    /// The direct write `op` is, before its part (None for any other op).
    pub fn of(op: &Op) -> Option<PendingDirectWrite> {
        let Op::DirectWrite { path, offset, len, seed } = op else { return None };
        Some(PendingDirectWrite { path: path.clone(), offset: *offset, len: *len, seed: *seed, ino: None, submitted: None, ended: None })
    }

    pub fn whole_op(&self) -> Op {
        Op::DirectWrite { path: self.path.clone(), offset: self.offset, len: self.len, seed: self.seed }
    }

    /// Whether the part ran.
    pub fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether the part may still run.
    pub fn has_more(&self) -> bool {
        !self.begun()
    }

    /// Ends the write with `answer` before its part (the target had no
    /// memory for it).
    pub fn end_with(&mut self, answer: Errno) {
        self.ended = Some(Err(answer));
    }

    fn ended_with(&mut self, got: Result<u64, Errno>) -> Result<(), Errno> {
        self.ended = Some(got);
        got.map(drop)
    }
}

impl Model {
    /// The part of a direct write in flight: the open, and the bios
    /// submitted (or the whole call, where it is not a direct write in
    /// flight).
    pub fn direct_write_part(&mut self, d: &mut PendingDirectWrite) -> Result<(), Errno> {
        if d.begun() {
            return Err(Errno::EINVAL);
        }
        if d.len > crate::op::MAX_IO_LEN {
            return d.ended_with(Err(Errno::EINVAL));
        }
        let ino = match self.open_for_write(&d.path, false) {
            Ok(ino) => ino,
            Err(e) => return d.ended_with(Err(e)),
        };
        d.ino = Some(ino);
        if self.file(ino).is_none() {
            return d.ended_with(Err(Errno::EINVAL));
        }
        let (offset, len, seed) = (d.offset, d.len, d.seed);
        let source = Source::Pattern { seed, at: 0 };
        // Only a direct write in flight logs its halves apart; any other
        // call is one call, done here.
        if !self.submits_direct_write(ino, offset, len) {
            self.record(|| Call::DirectWriteDone { ino, offset, len, seed, submitted: false });
            let got = self.direct_write_at(ino, offset, len as usize, source);
            return d.ended_with(got);
        }
        self.record(|| Call::DirectWriteSubmit { ino, offset, len });
        match self.submit_direct_write(ino, offset, len as usize, source) {
            Ok(Some(count)) => {
                d.submitted = Some(count);
                Ok(())
            }
            Ok(None) => d.ended_with(Err(Errno::EINVAL)),
            Err(e) => d.ended_with(Err(e)),
        }
    }

    /// Whether a direct write of `len` bytes at `offset` to `ino` goes in
    /// flight: the direct path, aligned, something to write.
    fn submits_direct_write(&self, ino: Ino, offset: u64, len: u32) -> bool {
        let count = crate::vfs::write_count(offset, len as usize, self.mount.max_file_size()).unwrap_or(0) as u64;
        self.journal_mode(ino) != crate::InodeJournalMode::Journal && count > 0 && (offset | count) % crate::op::DIO_ALIGN == 0
    }

    /// The write returns: its bios' data and the completion, then the close.
    pub fn finish_direct_write(&mut self, d: PendingDirectWrite) -> Outcome {
        let answer = match (d.ended, d.ino, d.submitted) {
            (Some(answer), _, _) => answer,
            (None, Some(ino), Some(count)) if self.st.inodes.contains_key(&ino) => {
                let (offset, len, seed) = (d.offset, d.len, d.seed);
                self.record(|| Call::DirectWriteDone { ino, offset, len, seed, submitted: true });
                self.complete_direct_write(ino, offset, count, Source::Pattern { seed, at: 0 });
                Ok(count)
            }
            _ => Err(Errno::EBADF),
        };
        if let Some(ino) = d.ino.filter(|i| self.st.inodes.contains_key(i)) {
            self.release(ino);
        }
        answer.map(Reply::Written)
    }

    /// Replays a logged submission in a crash check's model.
    pub(crate) fn replay_direct_write_submit(&mut self, ino: Ino, offset: u64, len: u32) {
        self.record(|| Call::DirectWriteSubmit { ino, offset, len });
        if self.file(ino).is_some() {
            let _ = self.submit_direct_write(ino, offset, len as usize, Source::Pattern { seed: 0, at: 0 });
        }
    }

    /// Replays a logged completion (or a call done whole at its part).
    pub(crate) fn replay_direct_write_done(&mut self, ino: Ino, offset: u64, len: u32, seed: u64, submitted: bool) {
        self.record(|| Call::DirectWriteDone { ino, offset, len, seed, submitted });
        if self.file(ino).is_none() {
            return;
        }
        let source = Source::Pattern { seed, at: 0 };
        if submitted {
            let count = crate::vfs::write_count(offset, len as usize, self.mount.max_file_size()).unwrap_or(0) as u64;
            self.complete_direct_write(ino, offset, count, source);
        } else {
            let _ = self.direct_write_at(ino, offset, len as usize, source);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileSystem;
    use crate::{MountConfig, Pending};

    const BS: u64 = 4096;

    fn model() -> Model {
        let mut m = Model::new(&MountConfig::default()).unwrap();
        m.create("/f", 0o644).unwrap();
        m.write("/f", 0, &[5; 2 * BS as usize]).unwrap();
        m.sync().unwrap();
        m
    }

    #[test]
    fn in_flight_the_holes_are_unwritten_and_the_bytes_old_then_it_is_the_whole_write() {
        let op = Op::DirectWrite { path: "/f".into(), offset: BS, len: 3 * BS as u32, seed: 7 };
        let mut whole = model();
        assert_eq!(whole.apply(&op), Ok(Reply::Written(3 * BS)));
        let mut parted = model();
        parted.set_crash_log(true);
        let mut d = PendingDirectWrite::of(&op).unwrap();
        parted.direct_write_part(&mut d).unwrap();
        assert!(!d.has_more());
        let st = parted.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (2 * BS, 4 * 8), "the size waits; the holes are allocated");
        assert_eq!(parted.read("/f", BS, 10).unwrap(), vec![5; 10], "the old bytes");
        assert_eq!(parted.logged_calls(), 1, "the submission is a call of its own");
        assert_eq!(parted.finish_split(Pending::DirectWrite(d)), Ok(Reply::Written(3 * BS)));
        assert_eq!(parted.logged_calls(), 2);
        assert_eq!(parted.stat("/f"), whole.stat("/f"));
        assert_eq!(parted.read("/f", 0, 5 * BS as u32), whole.read("/f", 0, 5 * BS as u32));
        assert_eq!(parted.used_blocks(), whole.used_blocks());
        parted.check_invariants().unwrap();
    }

    #[test]
    fn a_misaligned_or_refused_call_is_over_at_its_part() {
        let mut m = model();
        let mut d = PendingDirectWrite::of(&Op::DirectWrite { path: "/f".into(), offset: 100, len: 512, seed: 1 }).unwrap();
        assert_eq!(m.direct_write_part(&mut d), Err(Errno::EINVAL));
        assert_eq!(m.finish_direct_write(d), Err(Errno::EINVAL));
        let mut d = PendingDirectWrite::of(&Op::DirectWrite { path: "/none".into(), offset: 0, len: 512, seed: 1 }).unwrap();
        assert_eq!(m.direct_write_part(&mut d), Err(Errno::ENOENT));
        assert_eq!(m.finish_direct_write(d), Err(Errno::ENOENT));
        m.limits.data_blocks = Some(m.used_blocks() + 2);
        let mut d = PendingDirectWrite::of(&Op::DirectWrite { path: "/f".into(), offset: 0, len: 8 * BS as u32, seed: 1 }).unwrap();
        assert_eq!(m.direct_write_part(&mut d), Err(Errno::ENOSPC));
        assert_eq!(m.finish_direct_write(d), Err(Errno::ENOSPC));
        assert_eq!(m.stat("/f").unwrap().blocks, 2 * 8, "nothing allocated");
    }
}
