//! A buffered read that goes on part by part.
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
use crate::vfs::LOFF_MAX;
use crate::{Errno, Outcome};

/// A buffered read between its halves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingRead {
    pub path: String,
    pub offset: u64,
    pub len: u32,
    /// The file, once the first part opened it, and that open's reference.
    ino: Option<Ino>,
    open: Option<u64>,
    /// The next byte to copy.
    pos: u64,
    data: Vec<u8>,
    /// Set once it is over: at the size or its end (Ok), or refused.
    ended: Option<Result<(), Errno>>,
}

impl PendingRead {
    /// The read `op` is, before its first part (None for any other op).
    pub fn of(op: &Op) -> Option<PendingRead> {
        let Op::Read { path, offset, len } = op else { return None };
        Some(PendingRead { path: path.clone(), offset: *offset, len: *len, ino: None, open: None, pos: *offset, data: Vec::new(), ended: None })
    }

    pub fn whole_op(&self) -> Op {
        Op::Read { path: self.path.clone(), offset: self.offset, len: self.len }
    }

    /// Whether a part ran.
    pub fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
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
        let ino = r.ino.or_else(|| self.open_path(&r.path).ok());
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

    /// The read returns: the rest copied if no part ended it, then its
    /// file closes. One with no part is done whole.
    pub fn finish_read(&mut self, mut r: PendingRead) -> Outcome {
        if !r.begun() {
            return crate::fs::FileSystem::apply(self, &r.whole_op());
        }
        if r.ended.is_none() {
            let bound = self.read_bound(&r);
            let _ = self.read_part(&mut r, bound);
        }
        if let Some(id) = r.open {
            self.close_read(id);
        }
        match r.ended {
            Some(Err(e)) => Err(e),
            _ => Ok(Reply::Data(r.data)),
        }
    }

    /// The first part's open: the name, a directory, the offset; then the
    /// read's own open file, which keeps an unlinked file as an orphan
    /// until the read returns. Not logged: a crash check's replay that
    /// frees the file at its unlink shows the same names and data.
    fn open_read(&mut self, r: &mut PendingRead) -> Result<(), Errno> {
        let ino = self.open_path(&r.path)?;
        if self.file(ino).is_none() {
            return Err(Errno::EISDIR);
        }
        if r.offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let id = self.st.next_fd_ref;
        self.st.next_fd_ref += 1;
        self.st.fd_refs.insert(id, FdRef { slot: None, ino });
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
