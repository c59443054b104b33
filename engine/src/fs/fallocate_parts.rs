//! An allocating fallocate between its halves, mapping its range piece by
//! piece.
//!
//! ext4_alloc_file_blocks maps the range of a default or KEEP_SIZE
//! fallocate one ext4_map_blocks call at a time, each in a handle of its
//! own: a hole gets as long an unwritten extent as mballoc gives, and the
//! size (unless KEEP_SIZE) grows to the end of what is mapped so far
//! (ext4_update_inode_size). Between pieces the running transaction may
//! commit, and a crash keeps what it committed: no orphan entry, nothing
//! finishes the fallocate at mount. i_rwsem is held throughout.
//!
//! Here the first part opens the file, makes fallocate(2)'s checks and
//! zeroes the old EOF block's tail (a growing fallocate), then maps the
//! first piece; each later part maps the next; the second half maps the
//! rest, grows the size to the range's end and closes the file. Every
//! part first checks room for the whole rest of the range, as the whole op
//! checks it up front. Between parts the fallocate holds i_rwsem and no
//! handle. A punch goes extent by extent (`punch_parts`). Any other mode,
//! or a mount without a journal, is done whole by the first part.

use std::ops::Range;

use ext4_model::vfs::{block_span, piecewise_fallocate, FallocateMode};
use ext4_model::{Errno, FileSystem, Op, Outcome, Reply};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::lock_plan::PlannedLock;
use super::fallocate::fits_one_extent;
use super::split::WholeOp;
use super::Ext4;

/// A fallocate between its halves ([`super::SecondHalf::Fallocate`]).
#[derive(Debug, PartialEq, Eq)]
pub struct FallocateInFlight {
    pub(super) whole: WholeOp,
    /// Its first half took every lock of its plan: a part needs them all.
    planned_all: bool,
    /// The file, once a first part that goes on in parts opened it.
    ino: Option<InodeNumber>,
    /// A punch's progress, once its first part began it.
    pub(super) punch: Option<super::punch_parts::PunchInFlight>,
    /// The range's blocks, and its end in bytes.
    span: Range<u64>,
    end: u64,
    keep_size: bool,
    /// The first block no part has mapped yet.
    next: u64,
    /// Holes remain in `next..span.end` (a punch: mapped blocks remain).
    pub(super) more: bool,
    /// The answer, once a part failed or the first did it whole.
    pub(super) ended: Option<Result<(), Errno>>,
}

/// What one part did: where the blocks it mapped end, or where those it
/// punched out begin (None when it did neither), and its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FallocatePartRan {
    pub at: Option<u64>,
    pub got: Result<(), Errno>,
}

impl FallocateInFlight {
    pub(super) fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether a part could run now: the first, or one mapping another
    /// piece, with every lock of the fallocate held.
    pub fn has_more(&self) -> bool {
        self.whole.held.is_some() && self.planned_all && self.ended.is_none() && self.more
    }

    pub(super) fn ended_with(&mut self, e: Errno) -> FallocatePartRan {
        self.ended = Some(Err(e));
        FallocatePartRan { at: None, got: Err(e) }
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of a fallocate: its locks, as far as they can be had now.
    pub(super) fn begin_fallocate(&mut self, op: &Op) -> Result<FallocateInFlight, Errno> {
        let (whole, planned_all) = self.begin_whole_for_parts(op)?;
        Ok(FallocateInFlight { whole, planned_all, ino: None, punch: None, span: 0..0, end: 0, keep_size: false, next: 0, more: true, ended: None })
    }

    /// Runs the next part of a fallocate in flight, its i_rwsem still held
    /// around it. None when it has no part to run, or when its name now
    /// leads to another file than the one it locked (its second half then
    /// does it whole, as any op's).
    pub fn fallocate_part(&mut self, f: &mut FallocateInFlight) -> Option<FallocatePartRan> {
        if !f.has_more() {
            return None;
        }
        let Op::Fallocate { path, .. } = &f.whole.op else { return None };
        let found = f.ino.is_none().then(|| self.open_path(path).ok());
        let (plan, holder) = self.hand_back_for_part(&f.whole, found)?;
        let ran = match f.ino {
            None => self.first_fallocate_part(f),
            Some(ino) if f.punch.is_some() => match self.prepare_change(0) {
                Ok(()) => self.punch_next_extent(f, ino),
                Err(e) => f.ended_with(e),
            },
            Some(ino) => match self.prepare_change(self.rest_blocks(f)) {
                Ok(()) => self.map_next_piece(f, ino),
                Err(e) => f.ended_with(e),
            },
        };
        // Its handle stops between pieces: it sleeps holding its semaphores
        // (i_rwsem; a punch, invalidate_lock too).
        f.whole.held = Some(self.take_back_after_part(plan, holder, |s| matches!(s, PlannedLock::Sem { .. })));
        Some(ran)
    }

    /// fallocate(2)'s open and checks, in the whole op's order; an
    /// allocating one under a journal then maps its first piece, a punch
    /// does its edges and frees its last extent, any other is done whole.
    fn first_fallocate_part(&mut self, f: &mut FallocateInFlight) -> FallocatePartRan {
        let Op::Fallocate { path, mode, offset, len } = f.whole.op.clone() else { return f.ended_with(Errno::EINVAL) };
        let kind = piecewise_fallocate(mode, offset, len, self.ctx.mount.max_file_size());
        let Some(kind) = kind.filter(|_| self.ctx.journal.is_some()) else {
            let got = self.fallocate(&path, mode, offset, len);
            f.ended = Some(got);
            return FallocatePartRan { at: None, got };
        };
        let keep_size = kind != (FallocateMode::Allocate { keep_size: false });
        let opened = self.prepare_data_change(len).and_then(|()| self.open_for_write(&path, false));
        let ino = match opened {
            Ok(ino) => ino,
            Err(e) => return f.ended_with(e),
        };
        f.ino = Some(ino);
        (f.end, f.keep_size) = (offset + len, keep_size);
        f.span = block_span(offset, len, self.ctx.bs());
        f.next = f.span.start;
        let begun = self.kind_of(ino).and_then(|kind| if kind == ext4_model::FileKind::Regular { Ok(()) } else { Err(Errno::EISDIR) });
        if kind == FallocateMode::Punch {
            return match begun {
                Ok(()) => self.first_punch_part(f, ino, offset, offset + len),
                Err(e) => f.ended_with(e),
            };
        }
        let grows = !keep_size && self.node(ino).is_ok_and(|n| f.end > n.disk.size);
        let begun = begun.and_then(|()| {
            self.under_fallocate_locks(ino, false, |fs| {
                if grows {
                    // The old EOF block's tail, before anything is mapped.
                    let (ctx, node) = fs.split(ino)?;
                    ctx.zero_past_eof(ino, node, node.disk.size, f.end)?;
                }
                Ok(())
            })
        });
        match begun {
            Ok(()) => self.map_next_piece(f, ino),
            Err(e) => f.ended_with(e),
        }
    }

    /// One ext4_map_blocks of ext4_alloc_file_blocks' loop, after room for
    /// the whole rest is checked: the first hole from `next` on gets one
    /// allocator answer's worth of unwritten blocks.
    fn map_next_piece(&mut self, f: &mut FallocateInFlight, ino: InodeNumber) -> FallocatePartRan {
        let (rest, end, keep_size) = (f.next..f.span.end, f.end, f.keep_size);
        let no_normalize = fits_one_extent(&f.span);
        #[cfg(feature = "test-hooks")]
        let end = if self.bug_fallocate_piece_sizes_past_range() { u64::MAX } else { end };
        let got = self.under_fallocate_locks(ino, false, |fs| {
            let (ctx, node) = fs.split(ino)?;
            ctx.check_room(node, rest.clone())?;
            let Some(hole) = node.map().holes(rest).into_iter().next() else { return Ok(None) };
            ctx.no_normalize = no_normalize;
            let placed = ctx.place_blocks(ino, node, hole.start, hole.end, true);
            ctx.no_normalize = false;
            let Some((p, n)) = placed? else { return Err(Errno::ENOSPC) };
            let piece = hole.start..hole.start + n;
            let reserved_before = ctx.reserved_in(node, piece.clone());
            ctx.cache.forget(p, n);
            node.map_insert(piece.start, n, p, true);
            node.es.remove_delayed(piece.clone());
            ctx.settle_reservation(node, piece.clone(), reserved_before);
            node.map_dirty = true;
            let epos = piece.end.saturating_mul(ctx.bs()).min(end);
            grow_and_stamp(node, (!keep_size).then_some(epos), ctx.now());
            fs.mark_dirty(ino);
            Ok(Some(piece.end))
        });
        match got {
            Ok(mapped_to) => {
                f.next = mapped_to.unwrap_or(f.span.end);
                f.more = self.node(ino).is_ok_and(|n| !n.map().holes(f.next..f.span.end).is_empty());
                FallocatePartRan { at: mapped_to, got: Ok(()) }
            }
            Err(e) => {
                self.mark_dirty(ino);
                f.ended_with(e)
            }
        }
    }

    /// The second half: whole if no part ran, else the rest mapped, the
    /// size grown to the range's end, and the close.
    pub(super) fn finish_fallocate(&mut self, f: FallocateInFlight) -> Outcome {
        if !f.begun() {
            return self.finish_whole(f.whole);
        }
        self.hand_back_at_finish(&f.whole)?;
        let answer = match (f.ended, f.ino) {
            (Some(answer), _) => answer,
            (None, Some(ino)) if f.punch.is_some() => self.punch_the_rest(&f, ino),
            (None, Some(ino)) => self.map_the_rest(&f, ino),
            (None, None) => Err(Errno::EINVAL),
        };
        match f.ino {
            Some(ino) => self.closing(ino, answer),
            None => answer,
        }
        .map(|()| Reply::Done)
    }

    /// What a handle for the rest of the range may allocate.
    fn rest_blocks(&self, f: &FallocateInFlight) -> u64 {
        self.blocks_for_bytes(f.end.saturating_sub(f.next.saturating_mul(self.ctx.bs())))
    }

    /// ext4_alloc_file_blocks' last pieces, as the whole op maps its range.
    fn map_the_rest(&mut self, f: &FallocateInFlight, ino: InodeNumber) -> Result<(), Errno> {
        self.prepare_change(self.rest_blocks(f))?;
        let no_normalize = fits_one_extent(&f.span);
        let (rest, end, keep_size) = (f.next..f.span.end, f.end, f.keep_size);
        self.under_fallocate_locks(ino, false, |fs| {
            let (ctx, node) = fs.split(ino)?;
            ctx.no_normalize = no_normalize;
            let mapped = ctx.map_range(ino, node, rest, true);
            ctx.no_normalize = false;
            grow_and_stamp(node, (mapped.is_ok() && !keep_size).then_some(end), ctx.now());
            fs.mark_dirty(ino);
            mapped
        })
    }
}

/// The size grown to `grow_to` where that is past it (ext4_update_inode_size),
/// and the fallocate's times.
pub(super) fn grow_and_stamp(node: &mut super::node::Node, grow_to: Option<u64>, now: crate::format::inode::Timestamp) {
    if let Some(to) = grow_to.filter(|&to| to > node.disk.size) {
        node.disk.size = to;
        node.disksize = None;
    }
    node.disk.ctime = now;
    node.disk.mtime = now;
}

#[cfg(test)]
mod tests {
    use ext4_model::{Errno, FallocFlags, FileSystem, Op, Reply};

    use crate::fixtures::mounted_with;
    use crate::fs::SecondHalf;

    const BS: u64 = 4096;

    fn begin(fs: &mut crate::fs::Ext4<crate::device_mem::MemDevice>, mode: u32, offset: u64, len: u64) -> crate::fs::FallocateInFlight {
        let op = Op::Fallocate { path: "/f".into(), mode: FallocFlags(mode), offset, len };
        let Some(Ok(SecondHalf::Fallocate(f))) = fs.begin_split(&op) else { panic!("a fallocate splits as a fallocate") };
        f
    }

    #[test]
    fn an_allocating_fallocate_maps_piece_by_piece_and_grows_the_size_as_it_goes() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[3; 100]).unwrap();
        fs.sync().unwrap();
        let mut f = begin(&mut fs, 0, 0, 40 * BS);
        let first = fs.fallocate_part(&mut f).unwrap();
        assert_eq!(first.got, Ok(()));
        let to = first.at.expect("a piece mapped");
        assert!(to > 1 && to <= 40, "{to}");
        let st = fs.stat("/f").unwrap();
        assert_eq!(st.size, to * BS, "the size is as far as the pieces went");
        let held: Vec<_> = fs.locks_held().into_iter().map(|(lock, _)| lock).collect();
        assert_eq!(held, vec![crate::fs::locks::Lock::InodeRwsem], "between pieces only i_rwsem");
        // Another task's sync commits it part done.
        fs.sync().unwrap();
        while fs.fallocate_part(&mut f).is_some() {}
        assert_eq!(fs.finish_split(SecondHalf::Fallocate(f)), Ok(Reply::Done));
        let st = fs.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (40 * BS, 40 * 8));
        assert_eq!(fs.read("/f", 0, 200).unwrap(), [vec![3; 100], vec![0; 100]].concat());
        assert!(fs.locks_held().is_empty());
        fs.check_allocator().unwrap();
    }

    #[test]
    fn each_hole_is_mapped_by_pieces_of_its_own() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        for at in [10u64, 30] {
            fs.write("/f", at * BS, &[3; 4 * BS as usize]).unwrap();
        }
        fs.sync().unwrap();
        let size = fs.stat("/f").unwrap().size;
        let mut f = begin(&mut fs, FallocFlags::KEEP_SIZE, 0, 64 * BS);
        let mut ends = Vec::new();
        while let Some(ran) = fs.fallocate_part(&mut f) {
            assert_eq!(ran.got, Ok(()));
            ends.extend(ran.at);
        }
        assert_eq!(ends, vec![10, 30, 64], "the holes 0..10, 14..30 and 34..64, one allocator answer each");
        assert_eq!(fs.finish_split(SecondHalf::Fallocate(f)), Ok(Reply::Done));
        let st = fs.stat("/f").unwrap();
        assert_eq!((st.size, st.blocks), (size, 64 * 8), "KEEP_SIZE");
        fs.check_allocator().unwrap();
    }

    #[test]
    fn another_mode_or_a_failed_check_is_done_by_the_first_part() {
        let mut fs = mounted_with("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[3; 3 * BS as usize]).unwrap();
        let mut f = begin(&mut fs, FallocFlags::ZERO_RANGE, 0, BS);
        assert_eq!(fs.fallocate_part(&mut f).unwrap(), super::FallocatePartRan { at: None, got: Ok(()) });
        assert!(!f.has_more());
        assert_eq!(fs.finish_split(SecondHalf::Fallocate(f)), Ok(Reply::Done));
        assert_eq!(fs.read("/f", 0, 10).unwrap(), vec![0; 10]);
        fs.chattr("/f", ext4_model::op::ChattrFlag::Immutable, true).unwrap();
        let mut f = begin(&mut fs, 0, 0, BS);
        assert_eq!(fs.fallocate_part(&mut f).unwrap().got, Err(Errno::EPERM));
        assert_eq!(fs.finish_split(SecondHalf::Fallocate(f)), Err(Errno::EPERM));
        assert!(fs.locks_held().is_empty());
    }
}
