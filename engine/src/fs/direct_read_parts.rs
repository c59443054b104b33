//! A direct read between its halves, its bios in flight.
//!
//! ext4_dio_read_iter takes i_rwsem shared and counts the I/O in flight
//! (inode_dio_begin); iomap writes the range back, maps it, submits the
//! bios and sleeps until they complete, still holding both. Meanwhile
//! writers, truncates, fallocates and a journal-flag switch of the file
//! wait on i_rwsem and page faults on the DIO count, so the blocks the
//! bios read stay the file's; other files, buffered reads, stat, commits,
//! write-back and a crash come in between.
//!
//! Here the one part submits: the open, the write-back, the alignment
//! checks. The second half reads the blocks and closes. Any other call
//! (buffered under data=journal, no plan to hold) has no part: its second
//! half does it whole. The call's errors are its answer, at the second
//! half; the part itself fails only for want of memory.

use ext4_model::{Errno, Op, Outcome, Reply};

use crate::device::BlockDevice;

use super::direct_io::{ReadSubmission, SubmittedRead};
use super::direct_io_flight::DirectIoInFlight;
use super::lock_plan::PlannedLock;
use super::split::WholeOp;
use super::Ext4;

/// A direct read between its halves ([`super::SecondHalf::DirectRead`]):
/// the bios it submitted, or its answer.
pub type DirectReadInFlight = DirectIoInFlight<SubmittedRead, Vec<u8>>;

impl<D: BlockDevice> Ext4<D> {
    /// The first half of a direct read: its locks (i_rwsem shared, the DIO
    /// count), as far as they can be had now.
    pub(super) fn begin_direct_read(&mut self, op: &Op) -> Result<DirectReadInFlight, Errno> {
        // Under data=journal the plan is a buffered read's: no part.
        let direct = |w: &WholeOp| w.held.as_ref().is_some_and(|(plan, _)| plan.steps.iter().any(|s| matches!(s, PlannedLock::DioBegin(_))));
        self.begin_direct_io(op, direct)
    }

    /// The part of a direct read in flight: its bios submitted, its locks
    /// still held around it. None when it has no part to run, or when its
    /// name now leads to another file than the one it locked.
    pub fn direct_read_part(&mut self, d: &mut DirectReadInFlight) -> Option<Result<(), Errno>> {
        if !d.has_more() {
            return None;
        }
        let Op::DirectRead { path, offset, len } = d.whole.op.clone() else { return None };
        let opened = self.open_path(&path);
        let (plan, holder) = self.hand_back_for_part(&d.whole, Some(opened.ok()))?;
        let started = if self.ctx.mount.read_only { Ok(()) } else { self.start_handle() };
        let submitted = started.and(opened).and_then(|ino| {
            d.ino = Some(ino);
            self.submit_direct_read(ino, offset, len)
        });
        let got = match submitted {
            Ok(ReadSubmission::InFlight(sub)) => {
                d.submitted = Some(sub);
                Ok(())
            }
            Ok(ReadSubmission::Done(data)) => {
                d.ended = Some(Ok(data));
                Ok(())
            }
            Err(e) => {
                d.ended = Some(Err(e));
                // Only memory fails the part: the model ends the call so.
                if e == Errno::ENOMEM { Err(e) } else { Ok(()) }
            }
        };
        // Asleep on its bios, it holds i_rwsem and its I/O is counted.
        d.whole.held = Some(self.take_back_after_part(plan, holder, keeps_after_submission(self)));
        Some(got)
    }

    /// The second half: whole if the part did not run, else the blocks
    /// read and the close.
    pub(super) fn finish_direct_read(&mut self, d: DirectReadInFlight) -> Outcome {
        let complete = |fs: &mut Self, ino, sub: SubmittedRead| fs.under_dio_read_locks(ino, |fs| fs.complete_direct_read(ino, &sub));
        self.finish_direct_io(d, complete, Reply::Data)
    }
}

/// What a submitted direct read goes on holding: all it took, unless the
/// bug twin `DirectReadUnlocksEarly` lets go of i_rwsem (its DIO count
/// would still hold truncates and page faults off, not buffered writers).
fn keeps_after_submission<D: BlockDevice>(_fs: &Ext4<D>) -> fn(&PlannedLock) -> bool {
    #[cfg(feature = "test-hooks")]
    if _fs.bug_dio_read_unlocks_early() {
        return |s| matches!(s, PlannedLock::DioBegin(_));
    }
    |_| true
}

#[cfg(test)]
mod tests {
    use ext4_model::{Errno, FileSystem, Op, Reply};

    use crate::fixtures::mounted_with;
    use crate::fs::SecondHalf;

    const BS: u64 = 4096;

    fn begin(fs: &mut crate::fs::Ext4<crate::device_mem::MemDevice>, offset: u64, len: u32) -> crate::fs::DirectReadInFlight {
        let op = Op::DirectRead { path: "/f".into(), offset, len };
        let Some(Ok(SecondHalf::DirectRead(d))) = fs.begin_split(&op) else { panic!("a direct read splits as one") };
        d
    }

    #[test]
    fn between_submission_and_completion_the_range_is_written_back_and_the_file_locked() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[5; 3 * BS as usize]).unwrap();
        let mut d = begin(&mut fs, BS, 2 * BS as u32);
        assert_eq!(fs.direct_read_part(&mut d), Some(Ok(())));
        assert_eq!(fs.direct_read_part(&mut d), None, "one part: the submission");
        // The write-back before the bios allocated the range's delayed
        // blocks (from its first on), not the block before it.
        let map = fs.fiemap("/f", ext4_model::FiemapRequest { start: 0, len: 3 * BS, flags: 0 }).unwrap();
        let delalloc = ext4_model::op::fiemap_flags::DELALLOC;
        let delayed: Vec<u64> = map.iter().filter(|e| e.flags & delalloc != 0).map(|e| e.logical).collect();
        assert_eq!(delayed, [0], "{map:?}");
        let held: Vec<_> = fs.locks_held().into_iter().map(|(lock, _)| lock).collect();
        assert!(held.contains(&crate::fs::locks::Lock::InodeRwsem), "{held:?}");
        // A buffered read needs no lock the direct read holds.
        assert_eq!(fs.read("/f", 0, 10).unwrap(), vec![5; 10]);
        assert_eq!(fs.finish_split(SecondHalf::DirectRead(d)), Ok(Reply::Data(vec![5; 2 * BS as usize])));
        assert!(fs.locks_held().is_empty());
    }

    #[test]
    fn a_refused_call_answers_at_its_second_half() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[1; BS as usize]).unwrap();
        let mut d = begin(&mut fs, 100, 512);
        assert_eq!(fs.direct_read_part(&mut d), Some(Ok(())), "the part ran; the call's answer waits");
        assert_eq!(fs.finish_split(SecondHalf::DirectRead(d)), Err(Errno::EINVAL), "a written block read off a sector");
        let mut past = begin(&mut fs, 8 * BS, 512);
        assert_eq!(fs.direct_read_part(&mut past), Some(Ok(())));
        assert_eq!(fs.finish_split(SecondHalf::DirectRead(past)), Ok(Reply::Data(Vec::new())));
        assert!(fs.locks_held().is_empty());
    }

    #[test]
    fn under_data_journal_there_is_no_part() {
        let mut fs = mounted_with("data=journal");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[2; BS as usize]).unwrap();
        let mut d = begin(&mut fs, 0, BS as u32);
        assert_eq!(fs.direct_read_part(&mut d), None, "buffered: done whole at its second half");
        assert_eq!(fs.finish_split(SecondHalf::DirectRead(d)), Ok(Reply::Data(vec![2; BS as usize])));
    }
}
