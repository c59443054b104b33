//! A fallocate that allocates its range piece by piece.
//!
//! ext4_alloc_file_blocks maps an allocating fallocate's range (the
//! default mode or KEEP_SIZE) one ext4_map_blocks call at a time, each in
//! a handle of its own: a hole gets as long an unwritten extent as the
//! allocator gives, and the size (unless KEEP_SIZE) grows to the end of
//! what is mapped so far. Between pieces the running transaction may
//! commit, so a crash can keep some pieces and not the rest, and nothing
//! finishes them after it: the crash log holds each piece as a call of its
//! own ([`Call::FallocatePart`]). i_rwsem is held throughout, so writers,
//! truncates and other fallocates of the file wait, while stat, FIEMAP,
//! reads, write-back and commits may find it part done.
//!
//! The first part opens the file and makes fallocate(2)'s checks; each
//! part checks room for the rest of the range and maps the next piece; the
//! second half maps what is left, grows the size to the end and closes the
//! file. Where a piece ends is the target's choice (its allocator); the
//! model takes it from the target and maps the same blocks. Room is
//! checked for the whole rest at every part, as the whole op checks it up
//! front: an ENOSPC after a piece (another task took the space) keeps the
//! pieces mapped, as ext4 keeps them. Any other fallocate, or one without
//! a journal, is done whole by its first part.
//!
//! A punch (ext4_punch_hole) zeroes its partial edges and drops the page
//! cache and delayed blocks of its whole blocks first, then frees the
//! mapped blocks from the end back (ext4_ext_remove_space), restarting its
//! handle when its credits run low, holding i_rwsem and invalidate_lock
//! throughout. Its first part does the edges and frees the last extent,
//! each later part the next last one, the second half the rest; no orphan
//! entry finishes it after a crash, so each part is a call of its own in
//! the crash log ([`Call::PunchPart`]). Which extent each part frees is
//! the target's layout: the model takes where its blocks begin.

use std::ops::Range;

use crate::crash_log::Call;
use crate::model::Model;
use crate::op::{FallocFlags, Op, Reply};
use crate::state::Ino;
use crate::vfs::{block_span, piecewise_fallocate, punch_span, FallocateMode};
use crate::{Errno, Outcome};

/// How far a fallocate in parts has gone.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pieces {
    /// An allocating one: the first block not yet mapped.
    Allocate { next: u64 },
    /// A punch: where it ends (clipped to EOF's folio), its whole blocks,
    /// and the lowest block freed so far (mapped blocks from there on are gone).
    Punch { end: u64, blocks: Range<u64>, freed_from: u64 },
}

/// A fallocate between its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingFallocate {
    pub path: String,
    pub mode: FallocFlags,
    pub offset: u64,
    pub len: u64,
    /// The file, once a first part that goes on in parts opened it.
    ino: Option<Ino>,
    /// What the parts have done so far, once the first part began them.
    pieces: Option<Pieces>,
    /// The answer, once a part failed or the first did it whole.
    ended: Option<Result<(), Errno>>,
}

impl PendingFallocate {
    /// The fallocate `op` is, before any part (None for any other op).
    pub fn of(op: &Op) -> Option<PendingFallocate> {
        let Op::Fallocate { path, mode, offset, len } = op else { return None };
        Some(PendingFallocate { path: path.clone(), mode: *mode, offset: *offset, len: *len, ino: None, pieces: None, ended: None })
    }

    pub fn whole_op(&self) -> Op {
        Op::Fallocate { path: self.path.clone(), mode: self.mode, offset: self.offset, len: self.len }
    }

    /// Whether any part ran.
    pub fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Ends the fallocate with `answer` before any part (the target had no
    /// memory for its first).
    pub fn end_with(&mut self, answer: Errno) {
        self.ended = Some(Err(answer));
    }

    /// Whether a part may still map something (the target knows whether
    /// holes are left).
    pub fn has_more(&self) -> bool {
        self.ended.is_none()
    }

    fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

impl Model {
    /// A part of a fallocate in flight. The first opens the file and makes
    /// fallocate(2)'s checks (doing it whole unless it allocates or
    /// punches under a journal); a punch's first part also zeroes its
    /// edges and drops its cache. Each part of an allocating one then
    /// checks room for the rest of the range and maps blocks up to `at`,
    /// where the target's piece ended; each part of a punch frees its
    /// blocks from `at` on, where the target's extent began. A piece that
    /// does not move the fallocate on, or leaves its range, is the
    /// target's error, answered EIO.
    pub fn fallocate_part(&mut self, f: &mut PendingFallocate, at: Option<u64>) -> Result<(), Errno> {
        if f.ended.is_some() {
            return Err(Errno::EINVAL);
        }
        if f.ino.is_none() {
            let kind = piecewise_fallocate(f.mode, f.offset, f.len, self.mount.max_file_size()).filter(|_| self.mount.data.is_some());
            let Some(kind) = kind else {
                let (path, mode, offset, len) = (f.path.clone(), f.mode, f.offset, f.len);
                let got = crate::fs::FileSystem::fallocate(self, &path, mode, offset, len);
                f.ended = Some(got);
                return got;
            };
            let ino = self.open_for_write(&f.path, false).inspect_err(|e| f.ended = Some(Err(*e)))?;
            f.ino = Some(ino);
            let Some(size) = self.file(ino).map(|file| file.size) else {
                f.ended = Some(Err(Errno::EISDIR));
                return Err(Errno::EISDIR);
            };
            if kind == FallocateMode::Punch {
                let Some((end, blocks)) = punch_span(f.offset, f.end(), size, self.bs(), self.mount.page_size as u64) else {
                    // Nothing at or past EOF.
                    f.ended = Some(Ok(()));
                    return Ok(());
                };
                self.punch_part(ino, f.offset, end, blocks.clone(), None);
                f.pieces = Some(Pieces::Punch { end, blocks: blocks.clone(), freed_from: blocks.end });
            } else {
                f.pieces = Some(Pieces::Allocate { next: block_span(f.offset, f.len, self.bs()).start });
            }
        }
        let Some(ino) = f.ino.filter(|i| self.st.inodes.contains_key(i)) else {
            // Gone with a resync that adopted the target's state.
            f.ended = Some(Err(Errno::EBADF));
            return Err(Errno::EBADF);
        };
        match f.pieces.clone() {
            Some(Pieces::Allocate { next }) => {
                let span = block_span(f.offset, f.len, self.bs());
                if let Err(e) = self.room_for(ino, next..span.end) {
                    f.ended = Some(Err(e));
                    return Err(e);
                }
                let Some(to) = at else { return Ok(()) };
                if to <= next || to > span.end {
                    return Err(Errno::EIO);
                }
                let grow_to = (!f.mode.keep_size()).then(|| to.saturating_mul(self.bs()).min(f.end()));
                self.fallocate_piece(ino, next..to, grow_to);
                f.pieces = Some(Pieces::Allocate { next: to });
                Ok(())
            }
            Some(Pieces::Punch { end, blocks, freed_from }) => {
                let Some(from) = at else { return Ok(()) };
                if from < blocks.start || from >= freed_from {
                    return Err(Errno::EIO);
                }
                self.punch_part(ino, f.offset, end, blocks.clone(), Some(from..freed_from));
                f.pieces = Some(Pieces::Punch { end, blocks, freed_from: from });
                Ok(())
            }
            None => Err(Errno::EINVAL),
        }
    }

    /// The fallocate returns: what is left of the range mapped (room
    /// checked for it) and the size grown to the range's end, or what is
    /// left of the punch freed; the file closed.
    pub fn finish_fallocate(&mut self, f: PendingFallocate) -> Outcome {
        let answer = match (f.ended, f.ino, f.pieces.clone()) {
            (Some(answer), _, _) => answer,
            (None, Some(ino), Some(pieces)) if self.st.inodes.contains_key(&ino) => match pieces {
                Pieces::Allocate { next } => {
                    let span = block_span(f.offset, f.len, self.bs());
                    self.room_for(ino, next..span.end).map(|()| {
                        let grow_to = (!f.mode.keep_size()).then(|| f.end());
                        self.fallocate_piece(ino, next..span.end, grow_to);
                    })
                }
                Pieces::Punch { end, blocks, freed_from } => {
                    let rest = blocks.start..freed_from;
                    if !rest.is_empty() {
                        self.punch_part(ino, f.offset, end, blocks, Some(rest));
                    }
                    Ok(())
                }
            },
            (None, _, _) => Err(Errno::EBADF),
        };
        if let Some(ino) = f.ino.filter(|i| self.st.inodes.contains_key(i)) {
            self.release(ino);
        }
        answer.map(|()| Reply::Done)
    }

    /// A part of a punch, logged as a call of its own: its edges and
    /// cache (the first part, `piece` None) or the blocks `piece` freed.
    fn punch_part(&mut self, ino: Ino, offset: u64, end: u64, blocks: Range<u64>, piece: Option<Range<u64>>) {
        self.record(|| Call::PunchPart { ino, offset, end, blocks: blocks.clone(), piece: piece.clone() });
        match piece {
            None => self.punch_edges(ino, offset, end, blocks),
            Some(piece) => self.punch_out(ino, blocks, piece),
        }
    }

    /// Replays a logged part of a punch in a crash check's model.
    pub(crate) fn replay_punch_part(&mut self, ino: Ino, offset: u64, end: u64, blocks: Range<u64>, piece: Option<Range<u64>>) {
        if self.st.inodes.contains_key(&ino) {
            self.punch_part(ino, offset, end, blocks, piece);
        } else {
            self.record(|| Call::PunchPart { ino, offset, end, blocks, piece });
        }
    }

    /// One piece, logged as a call of its own: a crash may keep it without
    /// the rest.
    fn fallocate_piece(&mut self, ino: Ino, blocks: Range<u64>, grow_to: Option<u64>) {
        self.record(|| Call::FallocatePart { ino, blocks: blocks.clone(), grow_to });
        self.allocate_blocks(ino, blocks, grow_to);
    }

    /// Replays a logged piece in a crash check's model.
    pub(crate) fn replay_fallocate_part(&mut self, ino: Ino, blocks: Range<u64>, grow_to: Option<u64>) {
        if self.st.inodes.contains_key(&ino) {
            self.fallocate_piece(ino, blocks, grow_to);
        } else {
            // A call of its own, as it was live: the sequence numbers line up.
            self.record(|| Call::FallocatePart { ino, blocks, grow_to });
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
        m.write("/f", 0, &[5; 100]).unwrap();
        m.sync().unwrap();
        m
    }

    fn fallocate(offset: u64, len: u64, keep_size: bool) -> Op {
        let mode = FallocFlags(if keep_size { FallocFlags::KEEP_SIZE } else { 0 });
        Op::Fallocate { path: "/f".into(), mode, offset, len }
    }

    #[test]
    fn pieces_give_what_the_whole_fallocate_gives_and_grow_the_size_as_they_go() {
        let op = fallocate(0, 40 * BS + 10, false);
        let mut whole = model();
        whole.apply(&op).unwrap();
        let mut parted = model();
        let mut f = PendingFallocate::of(&op).unwrap();
        parted.fallocate_part(&mut f, Some(16)).unwrap();
        let st = parted.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (16 * BS, 16 * 8), "the size is as far as the first piece");
        parted.fallocate_part(&mut f, Some(30)).unwrap();
        assert_eq!(parted.stat("/f").unwrap().size, 30 * BS);
        assert_eq!(parted.finish_split(Pending::Fallocate(f)), Ok(Reply::Done));
        assert_eq!(parted.stat("/f"), whole.stat("/f"));
        assert_eq!(parted.read("/f", 0, 50 * 4096), whole.read("/f", 0, 50 * 4096));
        assert_eq!(parted.used_blocks(), whole.used_blocks());
        parted.check_invariants().unwrap();
    }

    #[test]
    fn a_crash_between_pieces_may_keep_the_first_piece_alone() {
        let mut m = model();
        m.set_crash_log(true);
        let mut f = PendingFallocate::of(&fallocate(0, 40 * BS, true)).unwrap();
        m.fallocate_part(&mut f, Some(10)).unwrap();
        let ino = m.open_path("/f").unwrap();
        assert_eq!(m.log.as_ref().unwrap().calls, vec![Call::FallocatePart { ino, blocks: 0..10, grow_to: None }]);
        m.finish_fallocate(f).unwrap();
        assert_eq!(m.stat("/f").unwrap().size, 100, "KEEP_SIZE");
        assert_eq!(m.stat("/f").unwrap().blocks, 40 * 8);
    }

    #[test]
    fn room_is_checked_for_the_rest_at_every_part() {
        let mut m = model();
        let used = m.used_blocks();
        m.limits.data_blocks = Some(used + 30);
        let mut f = PendingFallocate::of(&fallocate(0, 40 * BS, false)).unwrap();
        assert_eq!(m.fallocate_part(&mut f, None), Err(Errno::ENOSPC), "40 blocks do not fit");
        assert_eq!(m.stat("/f").unwrap().blocks, 8, "nothing mapped");
        assert_eq!(m.finish_fallocate(f), Err(Errno::ENOSPC));

        let mut f = PendingFallocate::of(&fallocate(0, 20 * BS, false)).unwrap();
        m.fallocate_part(&mut f, Some(8)).unwrap();
        // Another task takes the space the rest needs.
        m.create("/g", 0o644).unwrap();
        m.fallocate("/g", FallocFlags(0), 0, 20 * BS).unwrap();
        assert_eq!(m.fallocate_part(&mut f, Some(12)), Err(Errno::ENOSPC));
        assert_eq!(m.finish_fallocate(f), Err(Errno::ENOSPC));
        let st = m.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (8 * BS, 8 * 8), "the piece mapped stays, as ext4 keeps it");
        m.check_invariants().unwrap();
    }

    #[test]
    fn another_mode_or_a_refused_one_is_over_at_its_first_part() {
        let mut m = model();
        let zero = Op::Fallocate { path: "/f".into(), mode: FallocFlags(FallocFlags::ZERO_RANGE), offset: 0, len: 10 };
        let mut f = PendingFallocate::of(&zero).unwrap();
        assert_eq!(m.fallocate_part(&mut f, None), Ok(()));
        assert!(!f.has_more());
        assert_eq!(m.finish_fallocate(f), Ok(Reply::Done));
        assert_eq!(m.read("/f", 0, 20).unwrap(), [vec![0; 10], vec![5; 10]].concat());
        let mut f = PendingFallocate::of(&Op::Fallocate { path: "/none".into(), mode: FallocFlags(0), offset: 0, len: BS }).unwrap();
        assert_eq!(m.fallocate_part(&mut f, None), Err(Errno::ENOENT));
        assert_eq!(m.finish_fallocate(f), Err(Errno::ENOENT));
        let mut f = PendingFallocate::of(&fallocate(0, BS, false)).unwrap();
        assert_eq!(m.fallocate_part(&mut f, Some(2)), Err(Errno::EIO), "a piece past the range is the target's error");
    }

    #[test]
    fn a_punch_in_parts_gives_what_the_whole_punch_gives() {
        let mut whole = model();
        for at in [0u64, 10, 20] {
            whole.write("/f", at * BS, &[7; 4 * 4096]).unwrap();
        }
        whole.sync().unwrap();
        let mut parted = whole.clone();
        let punch = Op::Fallocate { path: "/f".into(), mode: FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE), offset: 2 * BS + 100, len: 20 * BS };
        whole.apply(&punch).unwrap();
        parted.set_crash_log(true);
        let mut f = PendingFallocate::of(&punch).unwrap();
        parted.fallocate_part(&mut f, Some(20)).unwrap();
        assert_eq!(parted.stat("/f").unwrap().blocks, 10 * 8, "blocks 20..22 freed first");
        parted.fallocate_part(&mut f, Some(10)).unwrap();
        assert_eq!(parted.fallocate_part(&mut f, Some(12)), Err(Errno::EIO), "a part may not free what is gone");
        assert_eq!(parted.logged_calls(), 3, "the edges, then each extent: a crash may keep any prefix");
        assert_eq!(parted.finish_split(Pending::Fallocate(f)), Ok(Reply::Done));
        assert_eq!(parted.stat("/f"), whole.stat("/f"));
        assert_eq!(parted.read("/f", 0, 24 * 4096), whole.read("/f", 0, 24 * 4096));
        assert_eq!(parted.used_blocks(), whole.used_blocks());
        parted.check_invariants().unwrap();
    }
}
