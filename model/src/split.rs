//! Ops in two halves, between which the simulator runs other tasks' ops
//! (see the engine's `split` module for where ext4 sleeps):
//! - fsync and fdatasync: what they make durable is fixed when their
//!   transaction closes, and promised when they return;
//! - chattr -j that clears the flag: only ops that look run in between (the
//!   engine's updates lock holds the rest off), so the switch takes effect
//!   whole in its second half. Any other switch is over in its first half;
//! - ops that sleep on I/O holding their inode's locks (a buffered write,
//!   truncate, a direct write, a page fault, a read inside EOF): the
//!   engine's first half only takes the locks, so the op takes effect whole
//!   in its second half, after whatever ran in between. A crash between
//!   the halves leaves no trace of it, one outcome the kernel allows too.
//!   A buffered pwrite may also take effect folio by folio in between
//!   (`write_parts`): its second half then writes what is left; a
//!   shrinking truncate or ftruncate may free the file's blocks extent by
//!   extent (`truncate_parts`); an allocating fallocate may map its range
//!   piece by piece (`fallocate_parts`); a direct write or read may
//!   submit its bios (`direct_write_parts`, `direct_read_parts`).

use crate::model::{Call, Model};
use crate::op::{Op, Reply};
use crate::state::Ino;
use crate::direct_read_parts::PendingDirectRead;
use crate::direct_write_parts::PendingDirectWrite;
use crate::fallocate_parts::PendingFallocate;
use crate::read_parts::PendingRead;
use crate::truncate_parts::PendingTruncate;
use crate::write_parts::PendingWrite;
use crate::{Errno, Outcome};

/// An fsync between its halves ([`Model::begin_fsync`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingFsync {
    path: String,
    ino: Ino,
    datasync: bool,
    /// The last op its transaction holds.
    closed_at: u64,
    /// The namespace floor it sets: the file's last metadata (or, for
    /// fdatasync, size and allocation) change when it closed.
    committed: u64,
}

/// A journal-flag switch between its halves ([`Model::begin_journal_switch`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingSwitch {
    /// The path of a -j that clears the flag in the second half; None when
    /// the first half did it all (+j, or a flag that stays).
    clears: Option<String>,
}

/// A split op between its halves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pending {
    Fsync(PendingFsync),
    JournalSwitch(PendingSwitch),
    /// An op that holds its locks across an I/O sleep, done whole at the end.
    Whole(Op),
    /// A buffered pwrite, which may take effect part by part before its end.
    Write(PendingWrite),
    /// A truncate or ftruncate, which may free blocks extent by extent before
    /// its end.
    Truncate(PendingTruncate),
    /// An allocating fallocate, which may map its range piece by piece
    /// before its end.
    Fallocate(PendingFallocate),
    /// A direct write, which may submit its bios before its end.
    DirectWrite(PendingDirectWrite),
    /// A direct read, which may submit its bios before its end.
    DirectRead(PendingDirectRead),
    /// A buffered read (by path or through a descriptor), which may copy
    /// part by part before its end.
    Read(PendingRead),
}

impl Model {
    /// The first half of a splittable op (None for any other op).
    pub fn begin_split(&mut self, op: &Op) -> Option<Result<Pending, Errno>> {
        Some(match op {
            Op::Fsync { path } => self.begin_fsync(path, false).map(Pending::Fsync),
            Op::Fdatasync { path } => self.begin_fsync(path, true).map(Pending::Fsync),
            Op::SetJournalData { path, enable } => self.begin_journal_switch(path, *enable).map(Pending::JournalSwitch),
            Op::Write { .. } | Op::Append { .. } | Op::Rewrite { .. } | Op::WriteFd { .. } => PendingWrite::of(op).map(|w| Pending::Write(self.pin_write(w))).ok_or(Errno::EINVAL),
            Op::Truncate { .. } | Op::FtruncateFd { .. } => PendingTruncate::of(op).map(|t| Pending::Truncate(self.pin_truncate(t))).ok_or(Errno::EINVAL),
            Op::Fallocate { .. } => PendingFallocate::of(op).map(Pending::Fallocate).ok_or(Errno::EINVAL),
            Op::DirectWrite { .. } => PendingDirectWrite::of(op).map(Pending::DirectWrite).ok_or(Errno::EINVAL),
            Op::DirectRead { .. } => PendingDirectRead::of(op).map(Pending::DirectRead).ok_or(Errno::EINVAL),
            Op::Read { .. } | Op::ReadFd { .. } => PendingRead::of(op).map(|r| Pending::Read(self.pin_read(r))).ok_or(Errno::EINVAL),
            op if op.sleeps_holding_locks() => Ok(Pending::Whole(op.clone())),
            _ => return None,
        })
    }

    /// The second half: the op returns.
    pub fn finish_split(&mut self, pending: Pending) -> Outcome {
        match pending {
            Pending::Fsync(p) => {
                self.finish_fsync(p);
                Ok(Reply::Done)
            }
            Pending::JournalSwitch(p) => self.finish_journal_switch(p).map(|()| Reply::Done),
            Pending::Whole(op) => crate::fs::FileSystem::apply(self, &op),
            Pending::Write(w) if !w.file_fixed() => crate::fs::FileSystem::apply(self, &w.whole_op()),
            Pending::Truncate(t) if !t.file_fixed() => crate::fs::FileSystem::apply(self, &t.whole_op()),
            Pending::Truncate(mut t) if !t.begun() => {
                // Pinned, no part ran: the whole truncate, on the pinned file.
                let _ = self.truncate_part(&mut t, None);
                self.finish_truncate(t)
            }
            Pending::Truncate(t) => self.finish_truncate(t),
            Pending::Fallocate(f) if !f.begun() => crate::fs::FileSystem::apply(self, &f.whole_op()),
            Pending::Fallocate(f) => self.finish_fallocate(f),
            Pending::DirectWrite(d) if !d.begun() => crate::fs::FileSystem::apply(self, &d.whole_op()),
            Pending::DirectWrite(d) => self.finish_direct_write(d),
            Pending::DirectRead(d) if !d.begun() => crate::fs::FileSystem::apply(self, &d.whole_op()),
            Pending::DirectRead(d) => self.finish_direct_read(d),
            Pending::Read(r) => self.finish_read(r),
            Pending::Write(mut w) => {
                let _ = self.open_write_part(&mut w);
                if w.has_more() {
                    let rest = u64::from(w.len) - w.done;
                    let got = self.write_part(&w, rest);
                    w.note_part(rest, got);
                }
                self.finish_write(w)
            }
        }
    }

    /// The first half of an fsync (or fdatasync) that other ops may overtake
    /// while its transaction commits: what it makes durable is fixed here,
    /// when its transaction closes. The file's data is written back now, as
    /// ext4 writes it before it commits. Nothing is promised until
    /// [`Model::finish_fsync`]; a crash before that leaves the floor as it was.
    pub fn begin_fsync(&mut self, path: &str, datasync: bool) -> Result<PendingFsync, Errno> {
        let ino = self.open_path(path)?;
        self.writeback(ino);
        // Its close comes at the end; done here it finds the same nothing
        // to flush, unless another task wrote the file in between (that
        // data then waits for a later close or write-back).
        self.release(ino);
        let marks = self.st.inode(ino).marks;
        let committed = if datasync { marks.datasync_op } else { marks.meta_op };
        Ok(PendingFsync { path: path.to_string(), ino, datasync, closed_at: self.st.seq, committed })
    }

    /// The second half: the fsync returns, and what it fixed is durable.
    /// Ops that ran in between are in the next transaction and are not.
    pub fn finish_fsync(&mut self, pending: PendingFsync) {
        let PendingFsync { path, ino, datasync, closed_at, committed } = pending;
        self.record(|| Call::Op(if datasync { Op::Fdatasync { path } } else { Op::Fsync { path } }));
        // The inode may be gone (unlinked in between); its number is not
        // reused while the run lasts, so the marks are its own if present.
        if self.st.inodes.contains_key(&ino) {
            let marks = &mut self.st.inode_mut(ino).marks;
            marks.durable_at = marks.durable_at.max(closed_at);
        }
        self.st.namespace_floor = self.st.namespace_floor.max(committed);
    }

    /// The first half of chattr +j/-j: its errors, and whether it clears
    /// the flag. One that clears it holds every op that changes anything off
    /// until its second half, so nothing in between can tell it from a
    /// switch that has not begun; any other is over here.
    pub fn begin_journal_switch(&mut self, path: &str, enable: bool) -> Result<PendingSwitch, Errno> {
        let ino = self.open_path(path)?;
        self.writable()?;
        self.check_flag_change(ino, crate::op::inode_flags::JOURNAL_DATA, enable)?;
        let clears = !enable && self.st.inode(ino).journal_data() && self.mount.data.is_some();
        if !clears {
            crate::fs::FileSystem::set_journal_data(self, path, enable)?;
        }
        Ok(PendingSwitch { clears: clears.then(|| path.to_string()) })
    }

    /// The second half: a switch that clears the flag takes effect as one op.
    pub fn finish_journal_switch(&mut self, pending: PendingSwitch) -> Result<(), Errno> {
        let Some(path) = pending.clears else { return Ok(()) };
        self.record(|| Call::Op(Op::SetJournalData { path: path.clone(), enable: false }));
        self.do_set_journal_data(&path, false)
    }
}

#[cfg(test)]
mod tests {
    use crate::fs::FileSystem;
    use crate::op::Op;
    use crate::write_parts::PendingWrite;
    use crate::{Model, MountConfig};

    /// Found by a fault swarm (seed 8139, bs=64k,ps=4k, shrunk to 17
    /// steps): a split fdatasync released its file at its first half, before
    /// a truncate to 0 flagged it for auto_da_alloc; its call, logged when
    /// it returned, replays whole there and clears the flag, so the read
    /// whose close the live model logged logs nothing in the replay. The
    /// replay's steps then ran one behind, and a later fsync's durable
    /// point covered a write part it never synced: a crash showing the file
    /// empty was refused.
    #[test]
    fn a_split_fsyncs_call_replays_as_one_step_though_its_close_moved() {
        let mut m = Model::new(&MountConfig::default()).unwrap();
        m.set_crash_log(true);
        m.create("/a", 0o644).unwrap();
        let first = m.begin_fsync("/a", true).unwrap();
        m.truncate("/a", 0).unwrap();
        m.finish_fsync(first);
        m.read("/a", 0, 1).unwrap();
        let write = Op::Write { path: "/a".into(), offset: 0, len: 1, seed: 1 };
        let mut w = PendingWrite::of(&write).unwrap();
        let second = m.begin_fsync("/a", false).unwrap();
        m.open_write_part(&mut w).unwrap();
        let got = m.write_part(&w, 1);
        w.note_part(1, got);
        m.finish_fsync(second);
        // The write began after the fsync's transaction closed: a crash may lose it.
        let mut empty = Model::new(&MountConfig::default()).unwrap();
        empty.create("/a", 0o644).unwrap();
        m.crash_envelope().check(&mut empty).unwrap();
    }
}
