//! A direct read whose bios are in flight.
//!
//! ext4_dio_read_iter writes the range back and submits its bios holding
//! i_rwsem shared and the DIO count, and sleeps on them holding both: no
//! write, truncate, fallocate or page fault changes the file's blocks
//! until they complete. So what the read returns is fixed at its
//! submission, the part; what others see meanwhile is the write-back's
//! (i_disksize moved, the range's delayed blocks allocated). The second
//! half returns the answer and closes the file. The call's errors (a
//! missing file, a refused extent) are answers too, at the second half.

use crate::model::Model;
use crate::op::Op;
use crate::state::Ino;
use crate::{Errno, Outcome};

/// A direct read between its halves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingDirectRead {
    pub path: String,
    pub offset: u64,
    pub len: u32,
    /// The file, once the part opened it.
    ino: Option<Ino>,
    /// What the read returns, fixed at its part.
    answer: Option<Outcome>,
}

impl PendingDirectRead {
    /// The direct read `op` is, before its part (None for any other op).
    pub fn of(op: &Op) -> Option<PendingDirectRead> {
        let Op::DirectRead { path, offset, len } = op else { return None };
        Some(PendingDirectRead { path: path.clone(), offset: *offset, len: *len, ino: None, answer: None })
    }

    pub fn whole_op(&self) -> Op {
        Op::DirectRead { path: self.path.clone(), offset: self.offset, len: self.len }
    }

    /// Whether the part ran.
    pub fn begun(&self) -> bool {
        self.answer.is_some()
    }

    /// Whether the part may still run.
    pub fn has_more(&self) -> bool {
        !self.begun()
    }

    /// Ends the read with `answer` before its part (the target had no
    /// memory for it).
    pub fn end_with(&mut self, answer: Errno) {
        self.answer = Some(Err(answer));
    }
}

impl Model {
    /// The part of a direct read in flight: the open, the range written
    /// back, and the answer fixed. It fails only if it already ran.
    pub fn direct_read_part(&mut self, d: &mut PendingDirectRead) -> Result<(), Errno> {
        if d.begun() {
            return Err(Errno::EINVAL);
        }
        let answer = match self.open_path(&d.path) {
            Ok(ino) => {
                d.ino = Some(ino);
                self.direct_read_submitted(ino, d.offset, d.len)
            }
            Err(e) => Err(e),
        };
        d.answer = Some(answer);
        Ok(())
    }

    /// The read returns what its part fixed, and its file closes.
    pub fn finish_direct_read(&mut self, d: PendingDirectRead) -> Outcome {
        if let Some(ino) = d.ino.filter(|i| self.st.inodes.contains_key(i)) {
            let whole = d.whole_op();
            self.release_looking(ino, || whole);
        }
        d.answer.unwrap_or(Err(Errno::EINVAL))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileSystem;
    use crate::op::Reply;
    use crate::{MountConfig, Pending};

    const BS: u64 = 4096;

    fn model() -> Model {
        let mut m = Model::new(&MountConfig::default()).unwrap();
        m.create("/f", 0o644).unwrap();
        m.write("/f", 0, &[5; 2 * BS as usize]).unwrap();
        m
    }

    #[test]
    fn the_answer_is_fixed_at_the_part_and_given_at_the_second_half() {
        let op = Op::DirectRead { path: "/f".into(), offset: 0, len: 2 * BS as u32 };
        let mut whole = model();
        let want = whole.apply(&op);
        assert_eq!(want, Ok(Reply::Data(vec![5; 2 * BS as usize])));
        let mut parted = model();
        let mut d = PendingDirectRead::of(&op).unwrap();
        parted.direct_read_part(&mut d).unwrap();
        assert!(!d.has_more());
        assert_eq!(parted.direct_read_part(&mut d), Err(Errno::EINVAL), "one part");
        assert_eq!(parted.finish_split(Pending::DirectRead(d)), want);
        assert_eq!(parted.stat("/f"), whole.stat("/f"));
        parted.check_invariants().unwrap();
    }

    #[test]
    fn a_refused_call_answers_at_its_second_half() {
        let mut m = model();
        let mut d = PendingDirectRead::of(&Op::DirectRead { path: "/none".into(), offset: 0, len: 512 }).unwrap();
        assert_eq!(m.direct_read_part(&mut d), Ok(()));
        assert_eq!(m.finish_direct_read(d), Err(Errno::ENOENT));
        let mut d = PendingDirectRead::of(&Op::DirectRead { path: "/f".into(), offset: 100, len: 512 }).unwrap();
        assert_eq!(m.direct_read_part(&mut d), Ok(()));
        assert_eq!(m.finish_direct_read(d), Err(Errno::EINVAL), "a delayed block is written back, then refused off a sector");
    }
}
