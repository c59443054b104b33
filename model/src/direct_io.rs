//! O_DIRECT reads and writes, as ext4 runs them through iomap
//! (ext4_dio_read_iter, ext4_dio_write_iter):
//!
//! - Only regular files open with O_DIRECT: a directory's read is EINVAL
//!   (its write is EISDIR, which may_open says first).
//! - A data=journal inode has no direct path: the call is buffered.
//! - Both write back the range's dirty pages first (which the model's
//!   pending states already allow) and bypass the page cache.
//! - Alignment to [`DIO_ALIGN`] is checked by iomap per mapped extent,
//!   after ext4 mapped it. A misaligned read of only holes and unwritten
//!   blocks succeeds (they are zeros, no device I/O); one that meets a
//!   written block is EINVAL. A misaligned write is EINVAL, but ext4 has
//!   allocated the first extent by then: a hole inside EOF stays behind as
//!   an unwritten extent, and an extending write's cleanup truncates what
//!   lies past EOF.
//! - An aligned write lands on disk before it returns: its blocks are
//!   written at once, never delayed. Only the metadata (allocation,
//!   conversion, size) waits for a commit, so crash rules are a write's.
//! - ENOSPC is all or nothing here; ext4 may overwrite in place part of a
//!   write that then runs out of space (README: not modelled).

use crate::content::Source;
use crate::data::Alloc;
use crate::model::Model;
use crate::op::{Op, Outcome, Reply, DIO_ALIGN};
use crate::state::{Ino, Node};
use crate::vfs::{block_span, write_count, LOFF_MAX};
use crate::{Errno, InodeJournalMode};

/// Blocks ext4_iomap_alloc maps for a direct write at most (DIO_MAX_BLOCKS).
const DIO_MAX_BLOCKS: u64 = 4096;

impl Model {
    fn direct_path(&self, ino: Ino) -> bool {
        self.journal_mode(ino) != InodeJournalMode::Journal
    }

    /// The range's write-back before direct I/O (kiocb_write_and_wait)
    /// moves i_disksize to the end of the page of its last delayed block
    /// (mpage_map_and_submit_extent). Its blocks' states stay pending.
    fn range_written_back(&mut self, ino: Ino, offset: u64, len: u64) {
        let (bs, ps) = (self.bs(), u64::from(self.mount.page_size));
        let Node::File(file) = &mut self.st.inode_mut(ino).node else { return };
        if file.disksize.is_none() {
            return;
        }
        let span = block_span(offset, len, bs);
        let last = file.blocks.overlapping(span).into_iter().filter(|(_, a)| *a == Alloc::Delayed).map(|(r, _)| r.end).max();
        if let Some(end_block) = last {
            file.move_disksize((end_block * bs).div_ceil(ps).saturating_mul(ps));
        }
    }

    pub(crate) fn do_direct_write(&mut self, path: &str, offset: u64, len: usize, source: Source) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        let written = self.direct_write_at(ino, offset, len, source);
        self.release(ino);
        written
    }

    /// A direct write to an open file, whole: its submission, then its
    /// completion (or the buffered write it is under data=journal).
    pub(crate) fn direct_write_at(&mut self, ino: Ino, offset: u64, len: usize, source: Source) -> Result<u64, Errno> {
        match self.submit_direct_write(ino, offset, len, source.clone())? {
            Some(count) => {
                self.complete_direct_write(ino, offset, count, source);
                Ok(count)
            }
            None => self.write_at(ino, offset, len, source),
        }
    }

    /// A direct write up to its bios' submission: the checks, the range
    /// written back, its holes allocated unwritten (room checked). The
    /// bytes it will move, or None for a call that goes buffered.
    /// Misaligned calls are over here: their EINVAL (or ENOSPC).
    pub(crate) fn submit_direct_write(&mut self, ino: Ino, offset: u64, len: usize, source: Source) -> Result<Option<u64>, Errno> {
        if !self.direct_path(ino) {
            return Ok(None);
        }
        let count = write_count(offset, len, self.mount.max_file_size())? as u64;
        if count == 0 {
            return Ok(Some(0));
        }
        if (offset | count) % DIO_ALIGN != 0 {
            return Err(self.refuse_misaligned_write(ino, offset, count, source));
        }
        self.range_written_back(ino, offset, count);
        let span = block_span(offset, count, self.bs());
        if self.file(ino).is_none() {
            return Err(Errno::EINVAL);
        }
        self.room_for(ino, span.clone())?;
        if self.allocate_holes(ino, span) > 0 {
            self.touch_datasync(ino);
        }
        Ok(Some(count))
    }

    /// The bios of a submitted direct write, and its completion: the data
    /// on its blocks, the unwritten ones converted, the size moved.
    pub(crate) fn complete_direct_write(&mut self, ino: Ino, offset: u64, count: u64, source: Source) {
        if count == 0 || self.file(ino).is_none() {
            return;
        }
        if self.write_backed(ino, offset, count, source, Alloc::Written).is_err() {
            debug_assert!(false, "a submitted direct write's blocks are all allocated");
            return;
        }
        let span = block_span(offset, count, self.bs());
        let file = self.file_mut(ino);
        // Written on disk and converted at completion, whatever each block was.
        file.blocks.insert(span, Alloc::Written);
        // ext4_handle_inode_extension moves i_disksize to the write's end.
        file.move_disksize(offset + count);
    }

    /// What a misaligned direct write leaves before iomap refuses it.
    /// iomap maps one extent at a time (allocating a hole inside EOF as
    /// unwritten, EXT4_GET_BLOCKS_IO_CREATE_EXT) and checks it before its
    /// I/O: a misaligned offset fails the first extent, an aligned offset
    /// with a misaligned end the last. Extents before the last were written:
    /// in place where written, not converted where unwritten (so they
    /// still read as zeros). The model takes each run of one state as one
    /// extent; ext4's also split where the blocks are not contiguous on disk.
    fn refuse_misaligned_write(&mut self, ino: Ino, offset: u64, count: u64, source: Source) -> Errno {
        let bs = self.bs();
        let span = block_span(offset, count, bs);
        let Some(file) = self.file(ino) else { return Errno::EINVAL };
        let size = file.size;
        let end = offset + count;
        // ext4_extending_io, asked before the range is written back.
        let extending = end > size || end > file.disk_size();
        self.range_written_back(ino, offset, count);
        let Some(file) = self.file(ino) else { return Errno::EINVAL };
        let (reached, last) = if offset % DIO_ALIGN != 0 {
            (span.start, Extent::of(file, span.start, span.clone()))
        } else {
            let last = Extent::of(file, span.end - 1, span.clone());
            (last.blocks.start, last)
        };
        // Holes inside EOF up to the refused extent are allocated (past
        // EOF too, but the cleanup below frees those again).
        let mut holes = file.blocks.gaps(span.start..last.blocks.end.min(size.div_ceil(bs)));
        // Only the first extent was mapped: one allocation of at most
        // DIO_MAX_BLOCKS, of which mballoc may give fewer than asked (its
        // first block it gives).
        let mut maybe = 0..0;
        if last.state == State::Hole && offset % DIO_ALIGN != 0 {
            holes.truncate(1);
            if let Some(h) = holes.first_mut() {
                maybe = h.start + 1..h.end.min(h.start + DIO_MAX_BLOCKS);
                h.end = h.start + 1;
            }
        }
        let written: Vec<std::ops::Range<u64>> =
            file.blocks.overlapping(span.start..reached).into_iter().filter(|(_, a)| State::of(Some(*a)) == State::Written).map(|(r, _)| r).collect();
        let n: u64 = holes.iter().map(|h| h.end - h.start).sum();
        // Holes are gaps between allocated blocks: a cluster two of them
        // meet holds the block between them, so none is counted twice.
        let ratio = self.ratio();
        let new_space: u64 = holes.iter().map(|h| file.new_clusters_in(h.clone(), ratio)).sum::<u64>() * ratio;
        let mut refused = Errno::EINVAL;
        match self.reserve_blocks(new_space) {
            Ok(()) => {
                let keeps_past_eof = self.past_eof_writes.is_some();
                let file = self.file_mut(ino);
                for h in holes {
                    file.blocks.insert(h, Alloc::Unwritten);
                }
                file.maybe_allocated.insert(maybe, ());
                let mut past_eof = size;
                for r in written {
                    let (lo, hi) = ((r.start * bs).max(offset), (r.end * bs).min(end));
                    file.content.put(lo, hi - lo, source.advanced(lo - offset));
                    past_eof = past_eof.max(hi);
                }
                // The EOF block's bytes went to disk; the cleanup below
                // zeroes them in the page cache only.
                let on_disk = (keeps_past_eof && extending && past_eof > size).then(|| {
                    let mut on_disk = file.clone();
                    on_disk.size = past_eof;
                    on_disk
                });
                if let (Some(kept), Some(on_disk)) = (self.past_eof_writes.as_mut(), on_disk) {
                    kept.push((ino, on_disk));
                }
                self.st.used_blocks += new_space;
                if n > 0 {
                    self.touch_datasync(ino);
                }
            }
            Err(e) => refused = e,
        }
        // ext4_inode_extension_cleanup: a failed extending write truncates.
        if extending {
            self.truncate_inode(ino, size);
        }
        refused
    }

    pub(crate) fn do_direct_read(&mut self, path: &str, offset: u64, len: u32) -> Outcome {
        let ino = self.open_path(path)?;
        let read = self.direct_read_submitted(ino, offset, len);
        self.release_looking(ino, || Op::DirectRead { path: path.into(), offset, len });
        read
    }

    /// A direct read of an open file up to its bios: the range written
    /// back, and what the bios bring (fixed now: the read's locks keep the
    /// blocks as they are until they complete).
    pub(crate) fn direct_read_submitted(&mut self, ino: Ino, offset: u64, len: u32) -> Outcome {
        let flushes = self.file(ino).is_some_and(|f| len > 0 && offset < f.size) && self.direct_path(ino);
        if flushes {
            self.range_written_back(ino, offset, u64::from(len));
        }
        self.direct_read_open(ino, offset, len)
    }

    fn direct_read_open(&self, ino: Ino, offset: u64, len: u32) -> Outcome {
        // Only regular files set FMODE_CAN_ODIRECT: opening a directory
        // O_RDONLY|O_DIRECT is EINVAL (do_dentry_open).
        let Some(file) = self.file(ino) else { return Err(Errno::EINVAL) };
        if offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let data = file.read(offset, u64::from(len));
        if len == 0 || offset >= file.size || !self.direct_path(ino) {
            return Ok(Reply::Data(data));
        }
        // ext4_iomap_begin refuses blocks past the last logical block, which
        // a direct read reaches where a buffered one stops at s_maxbytes.
        let end = offset + u64::from(len);
        if end > self.mount.max_file_size() {
            return Err(Errno::EINVAL);
        }
        if offset % DIO_ALIGN == 0 && end % DIO_ALIGN == 0 {
            return Ok(Reply::Data(data));
        }
        // Write-back first makes dirty blocks written. iomap refuses a
        // mapped extent whose position or length is off a sector: the first
        // one when the offset is, the last one when the end is. Holes and
        // unwritten blocks are zeros with no I/O to check. A mapped extent
        // after a hole, when the offset is off a sector, starts at a sector
        // but lands off one in the buffer: whether the block layer refuses
        // that depends on the device's DMA alignment and on where the
        // buffer's pages split the I/O, not on the filesystem.
        let span = block_span(offset, u64::from(len), self.bs());
        let edge = if offset % DIO_ALIGN != 0 { span.start } else { span.end - 1 };
        let at_edge = file.blocks.get(edge).copied();
        let later = span.start + 1..span.end;
        let later_written = offset % DIO_ALIGN != 0 && file.blocks.overlapping(later.clone()).iter().any(|(_, a)| State::of(Some(*a)) == State::Written);
        // A hole a page fault's folio may have backed (the page cache's
        // choice of folio size) is written there, or not.
        let maybe_at_edge = !file.maybe_allocated_in(edge..edge + 1).is_empty();
        let maybe_later = offset % DIO_ALIGN != 0 && !file.maybe_allocated_in(later).is_empty();
        if State::of(at_edge) == State::Written {
            Err(Errno::EINVAL)
        } else if at_edge == Some(Alloc::Zeroed) || later_written || maybe_at_edge || maybe_later {
            Ok(Reply::DataOrEinval(data))
        } else {
            Ok(Reply::Data(data))
        }
    }
}

/// What iomap sees a block as once the range is written back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Hole,
    /// Reads as zeros: unwritten, or zeroed-out unwritten (the engine splits).
    Unwritten,
    /// Mapped and written (delayed and dirty blocks are, after write-back).
    Written,
}

impl State {
    fn of(a: Option<Alloc>) -> State {
        match a {
            None => State::Hole,
            Some(Alloc::Unwritten | Alloc::Zeroed) => State::Unwritten,
            Some(Alloc::Written | Alloc::Delayed | Alloc::UnwrittenDirty) => State::Written,
        }
    }
}

/// The run of one state around a block, inside a request's blocks.
struct Extent {
    blocks: std::ops::Range<u64>,
    state: State,
}

impl Extent {
    fn of(file: &crate::data::FileData, b: u64, within: std::ops::Range<u64>) -> Extent {
        let state = State::of(file.blocks.get(b).copied());
        let (mut start, mut end) = (b, b + 1);
        while start > within.start && State::of(file.blocks.get(start - 1).copied()) == state {
            start -= 1;
        }
        while end < within.end && State::of(file.blocks.get(end).copied()) == state {
            end += 1;
        }
        Extent { blocks: start..end, state }
    }
}

#[cfg(test)]
mod tests {
    use crate::op::{FallocFlags, Op, Reply};
    use crate::{Errno, FileSystem, Model, MountConfig};

    fn model(options: &str) -> Model {
        let mut m = Model::new(&options.parse::<MountConfig>().unwrap()).unwrap();
        m.apply(&Op::Create { path: "/f".into(), perm: 0o644 }).unwrap();
        m
    }

    fn fiemap(m: &mut Model) -> Vec<(u64, u64, u32)> {
        match m.apply(&Op::Fiemap { path: "/f".into(), start: 0, len: u64::MAX, flags: 0, count_only: false }) {
            Ok(Reply::Extents(e)) => e.into_iter().map(|e| (e.logical, e.length, e.flags)).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn aligned_writes_are_written_at_once_and_read_back() {
        let mut m = model("");
        assert_eq!(m.apply(&Op::DirectWrite { path: "/f".into(), offset: 8192, len: 1536, seed: 4 }), Ok(Reply::Written(1536)));
        assert_eq!(fiemap(&mut m), vec![(8192, 4096, crate::op::fiemap_flags::LAST)], "written, not delayed");
        let want = crate::op::pattern(4, 1536);
        assert_eq!(m.apply(&Op::DirectRead { path: "/f".into(), offset: 8192, len: 4096 }), Ok(Reply::Data(want)));
    }

    #[test]
    fn a_misaligned_write_is_einval_and_leaves_its_first_hole_unwritten() {
        let mut m = model("");
        m.apply(&Op::Truncate { path: "/f".into(), size: 40960 }).unwrap();
        m.apply(&Op::Write { path: "/f".into(), offset: 20480, len: 10, seed: 1 }).unwrap();
        m.apply(&Op::Sync).unwrap();
        assert_eq!(m.apply(&Op::DirectWrite { path: "/f".into(), offset: 4096, len: 100, seed: 4 }), Err(Errno::EINVAL));
        let map = fiemap(&mut m);
        assert_eq!(map[0], (4096, 4096, crate::op::fiemap_flags::UNWRITTEN));
        // Past EOF nothing stays, and an extending write's cleanup truncates.
        m.apply(&Op::Fallocate { path: "/f".into(), mode: FallocFlags(FallocFlags::KEEP_SIZE), offset: 40960, len: 8192 }).unwrap();
        assert_eq!(m.apply(&Op::DirectWrite { path: "/f".into(), offset: 40961, len: 512, seed: 4 }), Err(Errno::EINVAL));
        assert!(fiemap(&mut m).iter().all(|(l, _, _)| *l < 40960), "preallocation past EOF dropped");
    }

    #[test]
    fn a_misaligned_read_is_einval_only_where_a_block_is_written() {
        let mut m = model("");
        m.apply(&Op::Fallocate { path: "/f".into(), mode: FallocFlags::ALLOCATE, offset: 0, len: 8192 }).unwrap();
        m.apply(&Op::Truncate { path: "/f".into(), size: 20000 }).unwrap();
        m.apply(&Op::Write { path: "/f".into(), offset: 12288, len: 10, seed: 1 }).unwrap();
        assert_eq!(m.apply(&Op::DirectRead { path: "/f".into(), offset: 1, len: 9000 }), Ok(Reply::Data(vec![0; 9000])), "unwritten and holes only");
        assert_eq!(m.apply(&Op::DirectRead { path: "/f".into(), offset: 12289, len: 100 }), Err(Errno::EINVAL), "a delayed block is written back first");
        assert_eq!(m.apply(&Op::DirectRead { path: "/f".into(), offset: 12288, len: 100 }), Err(Errno::EINVAL), "the last extent ends off a sector");
        assert!(matches!(m.apply(&Op::DirectRead { path: "/f".into(), offset: 1, len: 13000 }), Ok(Reply::DataOrEinval(_))), "the device decides");
        assert_eq!(m.apply(&Op::DirectRead { path: "/f".into(), offset: 30001, len: 7 }), Ok(Reply::Data(vec![])), "past EOF, before any check");
        assert_eq!(m.apply(&Op::DirectRead { path: "/".into(), offset: 0, len: 512 }), Err(Errno::EINVAL), "no O_DIRECT for a directory");
        assert_eq!(m.apply(&Op::DirectWrite { path: "/".into(), offset: 0, len: 512, seed: 1 }), Err(Errno::EISDIR));
    }

    /// Found by a four-task swarm (seed 3710, bs=64k,ps=4k), shrunk to these
    /// ops, and settled by the host kernel (6.18): a write ending in a block
    /// a close's flush already submitted moves i_disksize at once (the
    /// flush cleared its buffer's unwritten bit), so the misaligned direct
    /// write after it is not extending and keeps the preallocation past EOF.
    #[test]
    fn a_write_into_a_flushed_block_moves_disksize_so_a_refused_direct_write_keeps_preallocation() {
        let mut m = model("");
        m.apply(&Op::Rewrite { path: "/f".into(), len: 1, seed: 1 }).unwrap();
        m.apply(&Op::Write { path: "/f".into(), offset: 0, len: 2, seed: 2 }).unwrap();
        m.apply(&Op::Fallocate { path: "/f".into(), mode: FallocFlags(FallocFlags::KEEP_SIZE), offset: 0, len: 16384 }).unwrap();
        assert_eq!(m.apply(&Op::DirectWrite { path: "/f".into(), offset: 0, len: 2, seed: 3 }), Err(Errno::EINVAL));
        let Ok(Reply::Stat(st)) = m.apply(&Op::Stat { path: "/f".into() }) else { panic!() };
        assert_eq!((st.size, st.blocks), (2, 4 * 8), "blocks 1..4 stay past EOF");
    }

    #[test]
    fn data_journal_inodes_take_the_buffered_path() {
        let mut m = model("data=journal");
        assert_eq!(m.apply(&Op::DirectWrite { path: "/f".into(), offset: 3, len: 5, seed: 4 }), Ok(Reply::Written(5)));
        let p = crate::op::pattern(4, 5);
        assert_eq!(m.apply(&Op::DirectRead { path: "/f".into(), offset: 1, len: 3 }), Ok(Reply::Data(vec![0, 0, p[0]])));
    }
}
