//! A truncate that shrinks a file, freeing its blocks extent by extent.
//!
//! ext4 sets the new size, puts the file on the orphan list and drops the
//! page cache past the size first, then frees the mapped blocks from the
//! end back, letting the journal commit between extents. It holds i_rwsem
//! and invalidate_lock throughout, so only ops that look (stat, FIEMAP,
//! reads), write-back, commits and a crash come in between: they see the
//! new size with some blocks past it not yet freed. A crash leaves the file
//! on the orphan list, and mount finishes the truncate, so the crash log
//! holds the whole truncate from its first part on. An ftruncate holds its
//! descriptor's file from its first part to its return, as a write through
//! a descriptor does (`crate::descriptors`).
//!
//! Which extent each part frees is the target's choice (its layout); the
//! model takes where the freed blocks begin from it and frees the same
//! blocks, so both sides show the same part-done truncate. A truncate that
//! does not shrink, or runs without a journal, is done whole by its first
//! part.

use crate::crash_log::Call;
use crate::model::Model;
use crate::op::{Op, Reply};
use crate::state::Ino;
use crate::{Errno, Outcome};

/// What a truncate in flight truncates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TruncateOf {
    /// truncate(2) of a path.
    Path(String),
    /// ftruncate(2) of a held descriptor: its first part takes a reference
    /// to the descriptor's file (fdget), which its return drops.
    Slot(u8),
}

/// A truncate or ftruncate between its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingTruncate {
    pub of: TruncateOf,
    pub size: u64,
    /// The file, once the first part found it.
    ino: Option<Ino>,
    /// An ftruncate's reference to its file, from its first half (fdget at
    /// the syscall's entry, before any lock: [`Model::pin_truncate`]).
    fd_ref: Option<u64>,
    /// That file: the slot may lead elsewhere by the first part.
    pinned: Option<Ino>,
    /// The first block past the new size.
    keep: u64,
    /// The answer, once the first part failed or did the truncate whole.
    ended: Option<Result<(), Errno>>,
}

impl PendingTruncate {
    /// The truncate `op` is, before any part (None for any other op).
    pub fn of(op: &Op) -> Option<PendingTruncate> {
        let (of, size) = match op {
            Op::Truncate { path, size } => (TruncateOf::Path(path.clone()), *size),
            Op::FtruncateFd { slot, size } => (TruncateOf::Slot(*slot), *size),
            _ => return None,
        };
        Some(PendingTruncate { of, size, ino: None, fd_ref: None, pinned: None, keep: 0, ended: None })
    }

    pub fn whole_op(&self) -> Op {
        match &self.of {
            TruncateOf::Path(path) => Op::Truncate { path: path.clone(), size: self.size },
            TruncateOf::Slot(slot) => Op::FtruncateFd { slot: *slot, size: self.size },
        }
    }

    /// Whether any part ran.
    pub fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether its file is fixed: a part ran, or its first half pinned
    /// its descriptor's file.
    pub fn file_fixed(&self) -> bool {
        self.begun() || self.pinned.is_some()
    }

    /// Ends the truncate with `answer` before any part (the target had no
    /// memory for its first).
    pub fn end_with(&mut self, answer: Errno) {
        self.ended = Some(Err(answer));
    }

    /// Whether a part may still free something (the target knows whether
    /// mapped blocks are left).
    pub fn has_more(&self) -> bool {
        self.ended.is_none()
    }
}

impl Model {
    /// An ftruncate's first half: fdget, after the length's check
    /// (do_sys_ftruncate), so the rest goes to the file the slot held then.
    pub fn pin_truncate(&mut self, mut t: PendingTruncate) -> PendingTruncate {
        if let (TruncateOf::Slot(slot), true) = (&t.of, t.size <= crate::vfs::LOFF_MAX) {
            match self.fdget(*slot) {
                Ok((id, ino)) => (t.fd_ref, t.pinned) = (Some(id), Some(ino)),
                Err(e) => t.ended = Some(Err(e)),
            }
        }
        t
    }

    /// A part of a truncate in flight. The first makes truncate(2)'s
    /// checks and the size change (whole, unless it shrinks a journaled
    /// file); each part then frees the blocks from `freed_from` on, where
    /// the target freed them. A `freed_from` before the new size is the
    /// target's error, answered EIO.
    pub fn truncate_part(&mut self, t: &mut PendingTruncate, freed_from: Option<u64>) -> Result<(), Errno> {
        if t.ended.is_some() {
            return Err(Errno::EINVAL);
        }
        if t.ino.is_none() {
            let (whole, size) = (t.whole_op(), t.size);
            match t.pinned {
                Some(ino) => self.record(|| Call::TruncateFile { ino, size }),
                None => self.record(|| Call::Op(whole)),
            }
            let found = match t.of.clone() {
                TruncateOf::Slot(_) if t.pinned.is_some() => {
                    let ino = t.pinned.ok_or(Errno::EBADF)?;
                    self.truncate_inode_checks(ino, size).map(|()| ino)
                }
                TruncateOf::Path(path) => self.truncate_path_checks(&path, size).and_then(|ino| self.truncate_inode_checks(ino, size).map(|()| ino)),
                TruncateOf::Slot(slot) => self.ftruncate_checks(slot, size).and_then(|ino| {
                    self.truncate_inode_checks(ino, size)?;
                    let (id, ino) = self.fdget(slot)?;
                    t.fd_ref = Some(id);
                    Ok(ino)
                }),
            };
            let ino = match found {
                Ok(ino) => ino,
                Err(e) => {
                    t.ended = Some(Err(e));
                    return Err(e);
                }
            };
            t.ino = Some(ino);
            let shrinks = self.mount.data.is_some() && self.file(ino).is_some_and(|f| size < f.size);
            if !shrinks {
                self.truncate_inode(ino, size);
                t.ended = Some(Ok(()));
                return Ok(());
            }
            t.keep = self.drop_past(ino, size);
            self.file_mut(ino).truncating = true;
            self.touch_datasync(ino);
        }
        let (Some(ino), Some(from)) = (t.ino, freed_from) else { return Ok(()) };
        if from < t.keep || !self.st.inodes.contains_key(&ino) {
            return Err(Errno::EIO);
        }
        self.free_past(ino, t.keep, from);
        Ok(())
    }

    /// The truncate returns: the blocks left past the size are freed, and
    /// an ftruncate drops its reference to the file (fdput).
    pub fn finish_truncate(&mut self, t: PendingTruncate) -> Outcome {
        let answer = match (t.ended, t.ino) {
            (Some(answer), _) => answer,
            (None, Some(ino)) => {
                if self.st.inodes.contains_key(&ino) {
                    self.free_past(ino, t.keep, t.keep);
                    self.file_mut(ino).truncating = false;
                }
                Ok(())
            }
            (None, None) => Err(Errno::EINVAL),
        };
        if let Some(id) = t.fd_ref {
            self.fdput(id);
        }
        answer.map(|()| Reply::Done)
    }

    /// The size change up to the mapped blocks: the size, the tail of the
    /// last block and what lay past it zeroed, cached data and delayed
    /// blocks past it dropped (a truncate to 0 flagged for auto_da_alloc).
    /// Returns the first block past the size, from which
    /// [`Model::free_past`] frees the mapped blocks.
    pub(crate) fn drop_past(&mut self, ino: Ino, size: u64) -> u64 {
        let (bs, ratio) = (self.bs(), self.ratio());
        let keep = size.div_ceil(bs);
        let file = self.file_mut(ino);
        let held = file.allocated_clusters_in(keep..u64::MAX, ratio);
        file.drop_cached(keep..u64::MAX);
        file.zero_bytes(size, u64::MAX);
        file.size = size;
        file.disksize = None;
        let freed = held - file.allocated_clusters_in(keep..u64::MAX, ratio);
        self.st.used_blocks -= freed * ratio;
        self.truncated_to_zero(ino);
        keep
    }

    /// Frees the blocks of `ino` from block `from` on, clusters counted
    /// over everything past `keep` (a cluster that keeps a block before
    /// `keep` stays allocated).
    pub(crate) fn free_past(&mut self, ino: Ino, keep: u64, from: u64) {
        let (bs, ratio) = (self.bs(), self.ratio());
        let file = self.file_mut(ino);
        let held = file.allocated_clusters_in(keep..u64::MAX, ratio);
        file.free_blocks(from..u64::MAX, bs);
        let freed = held - file.allocated_clusters_in(keep..u64::MAX, ratio);
        self.st.used_blocks -= freed * ratio;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileSystem;
    use crate::MountConfig;

    fn model_with_three_extents() -> Model {
        let mut m = Model::new(&MountConfig::default()).unwrap();
        m.create("/f", 0o644).unwrap();
        for at in [0u64, 10, 20] {
            m.write("/f", at * 4096, &[7; 4 * 4096]).unwrap();
        }
        m.sync().unwrap();
        m
    }

    #[test]
    fn parts_give_what_the_whole_truncate_gives_and_show_blocks_not_yet_freed() {
        let mut whole = model_with_three_extents();
        whole.truncate("/f", 6000).unwrap();
        let mut parted = model_with_three_extents();
        let op = Op::Truncate { path: "/f".into(), size: 6000 };
        let mut t = PendingTruncate::of(&op).unwrap();
        parted.truncate_part(&mut t, Some(20)).unwrap();
        let st = parted.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (6000, 8 * 8), "the size is new, blocks 2..4 and 10..14 not yet freed");
        parted.truncate_part(&mut t, Some(10)).unwrap();
        assert_eq!(parted.stat("/f").unwrap().blocks, 4 * 8);
        assert_eq!(parted.finish_truncate(t), Ok(Reply::Done));
        assert_eq!(parted.stat("/f"), whole.stat("/f"));
        assert_eq!(parted.read("/f", 0, 10_000), whole.read("/f", 0, 10_000));
        assert_eq!(parted.used_blocks(), whole.used_blocks());
    }

    #[test]
    fn an_ftruncate_keeps_its_unlinked_file_past_a_close_until_it_returns() {
        let mut m = model_with_three_extents();
        let with_f = m.inode_count();
        m.open("/f", 3).unwrap();
        m.unlink("/f").unwrap();
        let mut t = PendingTruncate::of(&Op::FtruncateFd { slot: 3, size: 0 }).unwrap();
        m.truncate_part(&mut t, Some(20)).unwrap();
        m.close(3).unwrap();
        let before = m.used_blocks();
        m.truncate_part(&mut t, Some(10)).unwrap();
        assert_eq!(m.used_blocks(), before - 4, "the file is still there, losing its blocks");
        assert_eq!(m.finish_truncate(t), Ok(Reply::Done));
        assert_eq!(m.inode_count(), with_f - 1, "freed at the fdput");
        m.check_invariants().unwrap();
    }

    #[test]
    fn a_part_that_frees_inside_the_new_size_is_an_error() {
        let mut m = model_with_three_extents();
        let mut t = PendingTruncate::of(&Op::Truncate { path: "/f".into(), size: 6000 }).unwrap();
        assert_eq!(m.truncate_part(&mut t, Some(1)), Err(Errno::EIO));
    }

    #[test]
    fn a_growing_or_refused_truncate_is_over_at_its_first_part() {
        let mut m = model_with_three_extents();
        let mut t = PendingTruncate::of(&Op::Truncate { path: "/f".into(), size: 1 << 20 }).unwrap();
        assert_eq!(m.truncate_part(&mut t, None), Ok(()));
        assert!(!t.has_more());
        assert_eq!(m.finish_truncate(t), Ok(Reply::Done));
        assert_eq!(m.stat("/f").unwrap().size, 1 << 20);
        let mut t = PendingTruncate::of(&Op::Truncate { path: "/none".into(), size: 0 }).unwrap();
        assert_eq!(m.truncate_part(&mut t, None), Err(Errno::ENOENT));
        assert_eq!(m.finish_truncate(t), Err(Errno::ENOENT));
    }

    #[test]
    fn an_ftruncate_goes_to_the_file_its_slot_held_when_it_began() {
        let mut m = model_with_three_extents();
        m.create("/g", 0o644).unwrap();
        m.write("/g", 0, &[1; 100]).unwrap();
        m.open("/f", 3).unwrap();
        let Some(Ok(p)) = m.begin_split(&Op::FtruncateFd { slot: 3, size: 0 }) else { panic!("an ftruncate splits") };
        m.open("/g", 3).unwrap();
        assert_eq!(m.finish_split(p), Ok(Reply::Done));
        assert_eq!((m.stat("/f").unwrap().size, m.stat("/g").unwrap().size), (0, 100));
        m.check_invariants().unwrap();
    }
}
