//! A buffered read (by path, or pread through a held descriptor) that goes
//! on part by part.
//!
//! filemap_read holds no inode lock: between two batches of folios any op
//! may run, and each batch reads i_size again and copies what the file
//! holds then. So a read racing a write may return some of its bytes old
//! and some new, and one racing a truncate ends at the new size. Where a
//! part ends is the target's choice (its folio); each part here copies the
//! same bytes from the file as it is at that part. The first part opens the
//! file and makes read(2)'s checks; the read keeps the file open to its
//! return, so an unlink in between leaves an orphan until then. Once a
//! part finds its position at the size or the end of the range, the read
//! is over: a file that grows after that adds nothing to it.

use crate::crash_log::Call;
use crate::model::Model;
use crate::op::{Op, Reply};
use crate::state::{FdRef, Ino};
use crate::op::MAX_IO_LEN;
use crate::vfs::LOFF_MAX;
use crate::{Errno, Outcome};

/// What a read reads: a name it opens, or a held descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    Path(String),
    Slot(u8),
}

/// A buffered read between its halves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRead {
    pub from: ReadFrom,
    pub offset: u64,
    pub len: u32,
    /// The file, once the first part opened it, and a path read's own open.
    ino: Option<Ino>,
    open: Option<u64>,
    /// A pread's reference to its descriptor's file, from its first half
    /// ([`Model::pin_read`]) to its return, and that file.
    fd_ref: Option<u64>,
    pinned: Option<Ino>,
    /// The next byte to copy.
    pos: u64,
    data: Vec<u8>,
    /// Set once it is over: at the size or its end (Ok), or refused.
    ended: Option<Result<(), Errno>>,
}

impl PendingRead {
    /// The read `op` is, before its first part (None for any other op, and
    /// for a length every op refuses first).
    pub fn of(op: &Op) -> Option<PendingRead> {
        let (from, offset, len) = match op {
            Op::Read { path, offset, len } => (ReadFrom::Path(path.clone()), *offset, *len),
            Op::ReadFd { slot, offset, len } => (ReadFrom::Slot(*slot), *offset, *len),
            _ => return None,
        };
        (len <= MAX_IO_LEN).then_some(PendingRead { from, offset, len, ino: None, open: None, fd_ref: None, pinned: None, pos: offset, data: Vec::new(), ended: None })
    }

    pub fn whole_op(&self) -> Op {
        let (offset, len) = (self.offset, self.len);
        match &self.from {
            ReadFrom::Path(path) => Op::Read { path: path.clone(), offset, len },
            ReadFrom::Slot(slot) => Op::ReadFd { slot: *slot, offset, len },
        }
    }

    /// Whether a part ran (or the first half refused the read).
    pub fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether its file is fixed: a part ran, or its first half pinned its
    /// descriptor's file.
    pub fn file_fixed(&self) -> bool {
        self.begun() || self.pinned.is_some()
    }

    /// Whether a part may still run.
    pub fn has_more(&self) -> bool {
        self.ended.is_none()
    }

    /// Where the next part starts.
    pub fn next_at(&self) -> u64 {
        self.pos
    }

    fn end(&self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }
}

impl Model {
    /// Where the file's bytes for `r` end now: its size or the end of its
    /// range (before the first part, as if opened now).
    pub fn read_bound(&self, r: &PendingRead) -> u64 {
        let ino = r.ino.or(r.pinned).or_else(|| match &r.from {
            ReadFrom::Path(path) => self.open_path(path).ok(),
            ReadFrom::Slot(slot) => self.st.slots.get(slot).copied(),
        });
        let size = ino.and_then(|i| self.file(i)).map_or(0, |f| f.size);
        r.end().min(size)
    }

    /// The next part of a read in flight, up to byte `upto` (the target's
    /// choice): the open and its checks first if none ran, then the bytes
    /// from where the read stands, up to `upto` or the size, whichever is
    /// less. A part that finds nothing left ends the read.
    pub fn read_part(&mut self, r: &mut PendingRead, upto: u64) -> Outcome {
        if r.ended.is_some() {
            return Err(Errno::EINVAL);
        }
        if r.ino.is_none() {
            if let Err(e) = self.open_read(r) {
                r.ended = Some(Err(e));
                return Err(e);
            }
        }
        let bound = self.read_bound(r);
        if r.pos >= bound {
            r.ended = Some(Ok(()));
            return Ok(Reply::Data(Vec::new()));
        }
        let to = upto.min(bound).max(r.pos);
        let bytes = r.ino.and_then(|i| self.file(i)).map(|f| f.read(r.pos, to - r.pos)).unwrap_or_default();
        r.pos = to;
        r.data.extend_from_slice(&bytes);
        Ok(Reply::Data(bytes))
    }

    /// A pread's first half: fdget, after the offset's check
    /// (ksys_pread64), so the read goes to the file the slot held then.
    pub fn pin_read(&mut self, mut r: PendingRead) -> PendingRead {
        if let (ReadFrom::Slot(slot), true) = (&r.from, r.offset <= LOFF_MAX) {
            match self.fdget(*slot) {
                Ok((id, ino)) => (r.fd_ref, r.pinned) = (Some(id), Some(ino)),
                Err(e) => r.ended = Some(Err(e)),
            }
        }
        r
    }

    /// The read returns: the rest copied if no part ended it (all of it on
    /// a pinned file no part read yet), then its file closes or its
    /// descriptor's reference goes. One with its file not fixed is done
    /// whole.
    pub fn finish_read(&mut self, mut r: PendingRead) -> Outcome {
        if !r.file_fixed() {
            return crate::fs::FileSystem::apply(self, &r.whole_op());
        }
        if r.ended.is_none() {
            let _ = self.read_part(&mut r, u64::MAX);
        }
        if let Some(id) = r.open {
            self.close_read(id);
        }
        if let Some(id) = r.fd_ref {
            self.fdput(id);
        }
        match r.ended {
            Some(Err(e)) => Err(e),
            _ => Ok(Reply::Data(r.data)),
        }
    }

    /// The first part's open: the name (a pread's pinned file), a
    /// directory, the offset; then a path read's own open file, which keeps
    /// an unlinked file as an orphan until the read returns. Not logged: a
    /// crash check's replay that frees the file at its unlink shows the
    /// same names and data.
    fn open_read(&mut self, r: &mut PendingRead) -> Result<(), Errno> {
        let ino = match &r.from {
            ReadFrom::Path(path) => self.open_path(path)?,
            ReadFrom::Slot(_) => r.pinned.ok_or(Errno::EBADF)?,
        };
        if self.file(ino).is_none() {
            return Err(Errno::EISDIR);
        }
        if r.offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        if r.pinned.is_some() {
            // Its descriptor's reference keeps the file.
            r.ino = Some(ino);
            return Ok(());
        }
        let id = self.st.next_fd_ref;
        self.st.next_fd_ref += 1;
        self.st.fd_refs.insert(id, FdRef { slot: None, ino, own_open: true });
        r.ino = Some(ino);
        r.open = Some(id);
        Ok(())
    }

    /// The read's close (ext4_release_file of its own open file): logged
    /// when it changes the file (auto_da_alloc's flush), then an orphan no
    /// one else holds is freed.
    fn close_read(&mut self, id: u64) {
        let Some(FdRef { ino, .. }) = self.st.fd_refs.remove(&id) else { return };
        if !self.st.inodes.contains_key(&ino) {
            return;
        }
        if self.close_changes(ino) {
            self.record(|| Call::ReadClose { ino });
        }
        self.release_slot(ino);
    }

    /// A logged read's close, replayed.
    pub(crate) fn replay_read_close(&mut self, ino: Ino) {
        self.record(|| Call::ReadClose { ino });
        if self.st.inodes.contains_key(&ino) {
            self.release_slot(ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileSystem;
    use crate::{MountConfig, Pending};

    fn model() -> Model {
        let mut m = Model::new(&MountConfig::default()).unwrap();
        m.create("/f", 0o644).unwrap();
        m.write("/f", 0, &[1; 300]).unwrap();
        m
    }

    fn read(offset: u64, len: u32) -> PendingRead {
        PendingRead::of(&Op::Read { path: "/f".into(), offset, len }).unwrap()
    }

    #[test]
    fn parts_copy_the_file_as_it_is_at_each_and_end_at_the_size_they_find() {
        let mut m = model();
        let mut r = read(50, 1000);
        assert_eq!(m.read_part(&mut r, 100), Ok(Reply::Data(vec![1; 50])));
        m.write("/f", 100, &[2; 100]).unwrap();
        assert_eq!(m.read_part(&mut r, 150), Ok(Reply::Data(vec![2; 50])));
        m.truncate("/f", 180).unwrap();
        assert_eq!(m.read_bound(&r), 180);
        let mut want = vec![1; 50];
        want.extend([2; 80]);
        assert_eq!(m.finish_split(Pending::Read(r)), Ok(Reply::Data(want)), "torn by the write, cut by the truncate");
        m.check_invariants().unwrap();
    }

    #[test]
    fn a_read_over_stays_over_and_one_whole_matches_a_plain_read() {
        let mut m = model();
        let mut r = read(300, 10);
        assert_eq!(m.read_part(&mut r, 310), Ok(Reply::Data(Vec::new())), "at the size: over");
        m.write("/f", 300, &[3; 10]).unwrap();
        assert!(!r.has_more());
        assert_eq!(m.finish_read(r), Ok(Reply::Data(Vec::new())), "a later growth adds nothing");
        let whole = m.apply(&Op::Read { path: "/f".into(), offset: 0, len: 400 });
        assert_eq!(m.finish_read(read(0, 400)), whole, "no part: done whole");
    }

    #[test]
    fn an_unlink_between_parts_leaves_an_orphan_the_return_frees() {
        let mut m = model();
        let used = m.used_blocks();
        let mut r = read(0, 300);
        assert_eq!(m.read_part(&mut r, 100), Ok(Reply::Data(vec![1; 100])));
        m.unlink("/f").unwrap();
        m.check_invariants().unwrap();
        assert_eq!(m.used_blocks(), used, "the read holds the orphan");
        assert_eq!(m.finish_read(r), Ok(Reply::Data(vec![1; 300])));
        assert!(m.used_blocks() < used, "freed at the read's close");
        m.check_invariants().unwrap();
    }

    #[test]
    fn a_pread_reads_its_pinned_file_and_a_path_read_holds_the_orphan_past_its_fdput() {
        let mut m = model();
        m.create("/g", 0o644).unwrap();
        m.write("/g", 0, &[9; 300]).unwrap();
        m.open("/f", 0).unwrap();
        let pread = |m: &mut Model| {
            let Some(Ok(Pending::Read(r))) = m.begin_split(&Op::ReadFd { slot: 0, offset: 0, len: 300 }) else { panic!("a pread splits") };
            r
        };
        let (mut parted, whole) = (pread(&mut m), pread(&mut m));
        assert!(parted.file_fixed() && !parted.begun());
        let mut by_path = read(0, 300);
        assert_eq!(m.read_part(&mut by_path, 10), Ok(Reply::Data(vec![1; 10])));
        m.close(0).unwrap();
        m.open("/g", 0).unwrap();
        m.unlink("/f").unwrap();
        let used = m.used_blocks();
        assert_eq!(m.read_bound(&parted), 300, "its bound is the pinned file's");
        assert_eq!(m.read_part(&mut parted, 100), Ok(Reply::Data(vec![1; 100])));
        assert_eq!(m.finish_split(Pending::Read(parted)), Ok(Reply::Data(vec![1; 300])));
        assert_eq!(m.finish_split(Pending::Read(whole)), Ok(Reply::Data(vec![1; 300])), "no part ran: all of it from the pinned file");
        m.check_invariants().unwrap();
        assert_eq!(m.used_blocks(), used, "the path read's own open still holds the orphan");
        assert_eq!(m.finish_read(by_path), Ok(Reply::Data(vec![1; 300])));
        assert!(m.used_blocks() < used, "freed at the path read's close");
        m.check_invariants().unwrap();
        let Some(Ok(Pending::Read(closed))) = m.begin_split(&Op::ReadFd { slot: 1, offset: 0, len: 1 }) else { panic!("a pread splits") };
        assert_eq!(m.finish_split(Pending::Read(closed)), Err(Errno::EBADF), "fdget at the first half");
    }

    #[test]
    fn the_first_part_makes_reads_refusals() {
        let mut m = model();
        m.mkdir("/d", 0o755).unwrap();
        let mut none = PendingRead::of(&Op::Read { path: "/none".into(), offset: 0, len: 1 }).unwrap();
        assert_eq!(m.read_part(&mut none, 1), Err(Errno::ENOENT));
        assert_eq!(m.finish_read(none), Err(Errno::ENOENT));
        let mut dir = PendingRead::of(&Op::Read { path: "/d".into(), offset: 0, len: 1 }).unwrap();
        assert_eq!(m.read_part(&mut dir, 1), Err(Errno::EISDIR));
        assert_eq!(m.finish_read(dir), Err(Errno::EISDIR));
    }
}
