//! A direct write between its halves, its bios in flight.
//!
//! ext4_dio_write_iter takes i_rwsem and counts the I/O in flight
//! (inode_dio_begin), writes the range back and drops it from the page
//! cache, and maps its holes unwritten in a handle that stops before the
//! bios go out (ext4_iomap_begin). It then sleeps until they complete;
//! ext4_dio_write_end_io converts the unwritten extents and moves the
//! size, and the range is dropped from the page cache again. While it
//! sleeps, other writers, truncates, fallocates and direct I/O of the
//! file wait on i_rwsem, but buffered reads (the old bytes, from the disk),
//! stat and FIEMAP (the unwritten allocation), write-back, commits (which
//! may commit the allocation) and a crash come in between.
//!
//! Here the one part submits: the checks, the write-back, the cache
//! dropped, the holes mapped. The second half writes the data and
//! completes. A call that does not go the direct way in flight (buffered
//! under data=journal, empty, misaligned) is done whole by the part.

use ext4_model::{Errno, Op, Outcome, Reply};

use crate::device::BlockDevice;

use super::direct_io::{Submission, SubmittedWrite};
use super::direct_io_flight::DirectIoInFlight;
use super::Ext4;

/// A direct write between its halves ([`super::SecondHalf::DirectWrite`]):
/// the bios it submitted and their bytes, or its answer.
pub type DirectWriteInFlight = DirectIoInFlight<(SubmittedWrite, Vec<u8>), u64>;

impl<S> DirectIoInFlight<S, u64> {
    fn ended_with(&mut self, got: Result<u64, Errno>) -> Result<(), Errno> {
        self.ended = Some(got);
        got.map(drop)
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of a direct write: its locks (i_rwsem, the DIO
    /// count), as far as they can be had now.
    pub(super) fn begin_direct_write(&mut self, op: &Op) -> Result<DirectWriteInFlight, Errno> {
        self.begin_direct_io(op, |_| true)
    }

    /// The part of a direct write in flight: its bios submitted, its locks
    /// still held around it. None when it has no part to run, or when its
    /// name now leads to another file than the one it locked (its second
    /// half then does it whole, as any op's).
    pub fn direct_write_part(&mut self, d: &mut DirectWriteInFlight) -> Option<Result<(), Errno>> {
        if !d.has_more() {
            return None;
        }
        let Op::DirectWrite { path, offset, len, seed } = d.whole.op.clone() else { return None };
        let found = Some(self.open_path(&path).ok());
        let (plan, holder) = self.hand_back_for_part(&d.whole, found)?;
        let opened = self.prepare_data_change(u64::from(len)).and_then(|()| self.open_for_write(&path, false));
        let got = match opened {
            Ok(ino) => {
                d.ino = Some(ino);
                let data = ext4_model::op::pattern(seed, len as usize);
                let submitted = self.under_dio_write_locks(ino, |fs| fs.submit_direct_write(ino, offset, &data));
                match submitted {
                    Ok(Submission::InFlight(sub)) => {
                        d.submitted = Some((sub, data));
                        Ok(())
                    }
                    Ok(Submission::Done(n)) => d.ended_with(Ok(n)),
                    Err(e) => d.ended_with(Err(e)),
                }
            }
            Err(e) => d.ended_with(Err(e)),
        };
        // Asleep on its bios, it holds i_rwsem and its I/O is counted.
        d.whole.held = Some(self.take_back_after_part(plan, holder, |_| true));
        Some(got)
    }

    /// The second half: whole if the part did not run, else the data
    /// written and the completion, and the close.
    pub(super) fn finish_direct_write(&mut self, d: DirectWriteInFlight) -> Outcome {
        let complete = |fs: &mut Self, ino, (sub, data): (SubmittedWrite, Vec<u8>)| fs.under_dio_write_locks(ino, |fs| fs.complete_direct_write(ino, &sub, &data));
        self.finish_direct_io(d, complete, Reply::Written)
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{Errno, FileSystem, Op, Reply};

    use crate::fixtures::mounted_with;
    use crate::fs::SecondHalf;

    const BS: u64 = 4096;

    fn begin(fs: &mut crate::fs::Ext4<crate::device_mem::MemDevice>, offset: u64, len: u32) -> crate::fs::DirectWriteInFlight {
        let op = Op::DirectWrite { path: "/f".into(), offset, len, seed: 9 };
        let Some(Ok(SecondHalf::DirectWrite(d))) = fs.begin_split(&op) else { panic!("a direct write splits as one") };
        d
    }

    #[test]
    fn between_submission_and_completion_the_allocation_is_unwritten_and_reads_are_old() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[3; 2 * BS as usize]).unwrap();
        fs.sync().unwrap();
        // Over the written first block and into a hole past EOF.
        let mut d = begin(&mut fs, BS, 3 * BS as u32);
        assert_eq!(fs.direct_write_part(&mut d), Some(Ok(())));
        assert_eq!(fs.direct_write_part(&mut d), None, "one part: the submission");
        let st = fs.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (2 * BS, 4 * 8), "the size waits for completion; the holes are mapped");
        let map = fs.fiemap("/f", ext4_model::FiemapRequest { start: 0, len: 4 * BS, flags: 0 }).unwrap();
        let unwritten = ext4_model::op::fiemap_flags::UNWRITTEN;
        assert!(map.iter().any(|e| e.logical == 2 * BS && e.flags & unwritten != 0), "{map:?}");
        // A buffered read meanwhile sees the old bytes, and caches them.
        assert_eq!(fs.read("/f", BS, 10).unwrap(), vec![3; 10]);
        let held: Vec<_> = fs.locks_held().into_iter().map(|(lock, _)| lock).collect();
        assert!(held.contains(&crate::fs::locks::Lock::InodeRwsem), "{held:?}");
        // Another task's sync commits the allocation.
        fs.sync().unwrap();
        assert_eq!(fs.finish_split(SecondHalf::DirectWrite(d)), Ok(Reply::Written(3 * BS)));
        assert_eq!(fs.stat("/f").unwrap().size, 4 * BS);
        assert_eq!(fs.read("/f", BS, 3 * BS as u32).unwrap(), ext4_model::op::pattern(9, 3 * BS as usize), "the cached old bytes were dropped");
        assert!(fs.locks_held().is_empty());
        fs.check_allocator().unwrap();
    }

    #[test]
    fn a_misaligned_or_failed_call_is_over_at_its_part() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        let mut d = begin(&mut fs, 100, 512);
        assert_eq!(fs.direct_write_part(&mut d), Some(Err(Errno::EINVAL)));
        assert_eq!(fs.finish_split(SecondHalf::DirectWrite(d)), Err(Errno::EINVAL));
        fs.mkdir("/d", 0o755).unwrap();
        let op = Op::DirectWrite { path: "/d".into(), offset: 0, len: 512, seed: 1 };
        let Some(Ok(SecondHalf::DirectWrite(mut d))) = fs.begin_split(&op) else { panic!() };
        assert_eq!(fs.direct_write_part(&mut d), None, "a directory has no plan: its second half does it whole");
        assert_eq!(fs.finish_split(SecondHalf::DirectWrite(d)), Err(Errno::EISDIR));
        assert!(fs.locks_held().is_empty());
    }
}
