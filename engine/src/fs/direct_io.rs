//! O_DIRECT: file data between an op and the device, around the page
//! cache, as ext4's iomap path moves it (the model's direct_io.rs says
//! what a user sees).
//!
//! - A data=journal inode has no direct path (ext4_dio_alignment is 0):
//!   its calls are buffered.
//! - The range's dirty pages are written back first and its cached blocks
//!   dropped (kiocb_invalidate_pages), so the cache never holds older
//!   bytes than the device.
//! - Writes map their holes unwritten, write the data (whole zero-padded
//!   blocks where the block is not the file's yet, the sectors asked for
//!   where it is), then convert: a crash or a failed write never exposes a
//!   block's old contents. Nothing waits for a commit: the data is on the
//!   device before the allocation and the size can commit.
//! - iomap checks [`DIO_ALIGN`] per mapped extent once it is mapped, so
//!   a misaligned write does part of its work before its EINVAL, and a
//!   misaligned read fails only on a written block (`misaligned_write`).

use std::ops::Range;

use ext4_model::op::DIO_ALIGN;
use ext4_model::{Errno, FileKind, InodeJournalMode};

use crate::device::{BlockDevice, WriteFlags};
use crate::error::Error;
use crate::format::InodeNumber;

use super::locks::Lock;
use super::data::{block_span, LOFF_MAX};
use super::node::Node;
use super::{Ctx, Ext4};

/// A direct write whose bios are submitted: what its completion needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmittedWrite {
    offset: u64,
    /// Bytes the write moves (clipped to the largest file).
    count: usize,
    /// ext4_extending_io when it began, and the size then: a failure
    /// truncates back to it.
    extending: bool,
    old_size: u64,
    /// It put the file on the orphan list (an extending write, under a
    /// journal): a crash before its completion leaves mount to free
    /// what it mapped past EOF.
    orphaned: bool,
    /// The bug twin `DirectWriteMapsWritten`: holes it mapped written
    /// before the bios, made unwritten again for them (so their blocks
    /// are padded): only the flight shows it.
    #[cfg(feature = "test-hooks")]
    mapped_written: Vec<Range<u64>>,
}

/// What the submission left to do.
pub(super) enum Submission {
    /// Nothing: the call is over, with this answer.
    Done(u64),
    /// The bios and the completion.
    InFlight(SubmittedWrite),
}

/// A direct read whose bios are submitted: the bytes they bring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmittedRead {
    offset: u64,
    /// Bytes up to the size when it was submitted.
    count: u64,
}

/// What a direct read's submission left to do.
pub(super) enum ReadSubmission {
    /// Nothing: the call is over, with these bytes.
    Done(Vec<u8>),
    /// The bios and the completion.
    InFlight(SubmittedRead),
}

/// Blocks ext4_iomap_alloc maps for one direct write at most (DIO_MAX_BLOCKS).
const DIO_MAX_BLOCKS: u64 = 4096;

/// What the direct path did, for a run's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectIoStats {
    pub reads: u64,
    pub writes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Device commands the direct path issued.
    pub commands: u64,
    /// Refused for alignment (EINVAL from iomap).
    pub misaligned: u64,
    /// Calls on data=journal inodes, run buffered.
    pub buffered: u64,
}

impl<D: BlockDevice> Ctx<D> {
    fn direct_path(&self, node: &Node) -> bool {
        self.data_mode(node) != InodeJournalMode::Journal
    }

    /// Where the range's write-back before direct I/O moves i_disksize:
    /// the end of the page of its last delayed block (as the model's
    /// direct_io.rs says), counting those background write-back allocated
    /// under the lag as delayed still. Asked before that write-back,
    /// applied after.
    fn disksize_after_range(&self, node: &Node, span: Range<u64>) -> Option<u64> {
        let geo = self.pages.geometry();
        let delayed = node.es.delayed_in(span.clone()).map(|r| r.end).max();
        let quiet = node.quietly_written.iter_in(span).map(|r| r.end).max();
        let end_block = delayed.max(quiet)?;
        // The end of the page holding the last delayed block's end.
        let end_page = geo.byte_to_pg_up(end_block.saturating_mul(geo.block_size()));
        Some(geo.pg_to_byte(end_page).min(node.disk.size))
    }

    /// `data` (file bytes from `offset`, sector aligned) to the blocks
    /// `node` maps for them: whole blocks padded with zeros where a block
    /// is unwritten, only the sectors asked for where it is written.
    fn write_direct(&mut self, node: &Node, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let bs = self.bs();
        let end = offset + data.len() as u64;
        let per_io = (self.max_io_bytes() / bs).max(1);
        let mut staged = std::mem::take(&mut self.scratch);
        let mut result = Ok(());
        'pieces: for p in node.map().pieces(block_span(offset, data.len() as u64, bs)) {
            let mut l = p.logical;
            while l < p.logical + p.len {
                let n = per_io.min(p.logical + p.len - l);
                let at = (p.physical + (l - p.logical)) * bs;
                let (lo, hi) = ((l * bs).max(offset), ((l + n) * bs).min(end));
                let bytes = &data[(lo - offset) as usize..(hi - offset) as usize];
                let wrote = if p.unwritten {
                    staged.clear();
                    staged.resize((n * bs) as usize, 0);
                    staged[(lo - l * bs) as usize..(hi - l * bs) as usize].copy_from_slice(bytes);
                    self.dev.write(at, &staged, WriteFlags::DATA)
                } else {
                    self.dev.write(at + (lo - l * bs), bytes, WriteFlags::DATA)
                };
                if let Err(e) = wrote {
                    result = Err(Error::from(e).into());
                    break 'pieces;
                }
                self.dio_stats.commands += 1;
                l += n;
            }
        }
        self.scratch = staged;
        result
    }

    /// What a misaligned write does before iomap refuses it, extent by
    /// extent (see the model's direct_io.rs): holes inside EOF up to the
    /// refused extent mapped unwritten (only the first extent's, at most
    /// DIO_MAX_BLOCKS, when the offset is misaligned), and written blocks
    /// of the extents before it overwritten in place. Extents here are runs
    /// of one state, as the model takes them; ext4's also end where the
    /// blocks stop being contiguous on disk.
    fn misaligned_write(&mut self, ino: InodeNumber, node: &mut Node, offset: u64, data: &[u8]) -> Result<(), Errno> {
        let bs = self.bs();
        let end = offset + data.len() as u64;
        let span = block_span(offset, data.len() as u64, bs);
        let state = |b: u64| node.map().lookup(b).map(|p| p.unwritten);
        let at = if offset % DIO_ALIGN != 0 { span.start } else { span.end - 1 };
        let (mut first, mut last) = (at, at + 1);
        while first > span.start && state(first - 1) == state(at) {
            first -= 1;
        }
        while last < span.end && state(last) == state(at) {
            last += 1;
        }
        let reached = if offset % DIO_ALIGN != 0 { span.start } else { first };
        let eof_block = node.disk.size.div_ceil(bs);
        let mut holes: Vec<Range<u64>> = node.map().holes(span.start..last.min(eof_block)).into_iter().filter(|h| h.start < h.end).collect();
        if offset % DIO_ALIGN != 0 {
            holes.truncate(1);
            if let Some(h) = holes.first_mut() {
                h.end = h.end.min(h.start + DIO_MAX_BLOCKS);
            }
        }
        let need: u64 = holes.iter().map(|h| self.room_needed(node, h.clone())).sum();
        self.check_room_blocks(need)?;
        for h in holes {
            self.map_range(ino, node, h, true)?;
        }
        let written: Vec<Range<u64>> = node.map().pieces(span.start..reached).into_iter().filter(|p| !p.unwritten).map(|p| p.logical..p.logical + p.len).collect();
        for r in written {
            let (lo, hi) = ((r.start * bs).max(offset), (r.end * bs).min(end));
            self.write_direct(node, lo, &data[(lo - offset) as usize..(hi - offset) as usize])?;
        }
        Ok(())
    }
}

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn do_direct_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        let written = self.under_dio_write_locks(ino, |fs| fs.direct_write_at(ino, offset, data));
        self.closing(ino, written)
    }

    /// ext4_dio_write_iter's locks: the inode lock (exclusive: this engine
    /// does not tell overwrites apart), the I/O counted in flight.
    pub(super) fn under_dio_write_locks<T>(&mut self, ino: InodeNumber, f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        self.under_inode_lock(ino, Lock::InodeRwsem, false, "ext4_dio_write_iter", |fs| fs.as_direct_io(ino, f))
    }

    fn direct_write_at(&mut self, ino: InodeNumber, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        match self.submit_direct_write(ino, offset, data)? {
            Submission::Done(written) => Ok(written),
            Submission::InFlight(sub) => self.complete_direct_write(ino, &sub, data),
        }
    }

    /// ext4_dio_write_iter up to the bios' submission: the checks, the
    /// range written back and dropped from the page cache, and its holes
    /// mapped unwritten. A call that does not go the direct way in flight
    /// (buffered, empty, misaligned) is done here whole.
    pub(super) fn submit_direct_write(&mut self, ino: InodeNumber, offset: u64, data: &[u8]) -> Result<Submission, Errno> {
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EINVAL);
        }
        let (ctx, node) = self.split(ino)?;
        if !ctx.direct_path(node) {
            ctx.dio_stats.buffered += 1;
            return self.write_at(ino, offset, data).map(Submission::Done);
        }
        let count = ext4_model::vfs::write_count(offset, data.len(), ctx.mount.max_file_size())?;
        if count == 0 {
            return Ok(Submission::Done(0));
        }
        let data = &data[..count];
        let bs = ctx.bs();
        let end = offset + count as u64;
        let span = block_span(offset, count as u64, bs);
        let old_size = node.disk.size;
        // ext4_extending_io, asked before the range is written back.
        let extending = end > old_size || end > node.disksize.unwrap_or(old_size);
        let moved = ctx.disksize_after_range(node, span.clone());
        // ext4_dio_write_iter: an extending write's file goes on the orphan
        // list first (an unlinked one is there already).
        let orphaned = extending && ctx.journal.is_some() && node.disk.links_count > 0 && !self.orphans.contains(&ino);
        if orphaned {
            self.orphan_add(ino)?;
        }
        let (ctx, node) = self.split(ino)?;
        if offset > old_size {
            ctx.zero_past_eof(ino, node, old_size, offset)?;
        }
        self.write_back_quietly(ino, span.start).map_err(Errno::from)?;
        let (ctx, node) = self.split(ino)?;
        node.move_disksize(moved);
        ctx.pages.invalidate(ino, span.clone());
        let misaligned = (offset | count as u64) % DIO_ALIGN != 0;
        let mapped = if misaligned {
            ctx.dio_stats.misaligned += 1;
            Err(ctx.misaligned_write(ino, node, offset, data).err().unwrap_or(Errno::EINVAL))
        } else {
            ctx.map_range(ino, node, span.clone(), true)
        };
        #[cfg(feature = "test-hooks")]
        let mapped_written = match mapped.is_ok() && self.bug_dio_maps_written() {
            true => self.map_holes_written(ino, span.clone())?,
            false => Vec::new(),
        };
        self.mark_dirty(ino);
        let sub = SubmittedWrite {
            offset,
            count,
            extending,
            old_size,
            orphaned,
            #[cfg(feature = "test-hooks")]
            mapped_written,
        };
        match mapped {
            Ok(()) => Ok(Submission::InFlight(sub)),
            Err(e) => self.fail_direct_write(ino, &sub, e).map(Submission::Done),
        }
    }

    /// The bug twin `DirectWriteMapsWritten`: the unwritten blocks of
    /// `span` marked written before the bios go out.
    #[cfg(feature = "test-hooks")]
    fn map_holes_written(&mut self, ino: InodeNumber, span: Range<u64>) -> Result<Vec<Range<u64>>, Errno> {
        let (_, node) = self.split(ino)?;
        let unwritten = unwritten_runs(node, span);
        for r in &unwritten {
            node.map_set_state(r.clone(), false);
            node.map_dirty = true;
        }
        Ok(unwritten)
    }

    /// ext4_inode_extension_cleanup: a failed extending write truncates,
    /// and its file leaves the orphan list.
    fn fail_direct_write(&mut self, ino: InodeNumber, sub: &SubmittedWrite, e: Errno) -> Result<u64, Errno> {
        if sub.extending {
            self.truncate_inode(ino, sub.old_size)?;
        }
        if sub.orphaned {
            self.orphan_del(ino)?;
        }
        Err(e)
    }

    /// The bios of a submitted direct write, then its completion
    /// (ext4_dio_write_end_io): the unwritten blocks converted, the size
    /// and i_disksize moved to the write's end, and the range dropped from
    /// the page cache again (kiocb_invalidate_post_direct_write): a read
    /// while the bios were in flight may have cached the old bytes.
    pub(super) fn complete_direct_write(&mut self, ino: InodeNumber, sub: &SubmittedWrite, data: &[u8]) -> Result<u64, Errno> {
        let (offset, count) = (sub.offset, sub.count);
        let data = data.get(..count).ok_or(Errno::EINVAL)?;
        let (ctx, node) = self.split(ino)?;
        #[cfg(feature = "test-hooks")]
        for r in &sub.mapped_written {
            node.map_set_state(r.clone(), true);
        }
        let written = ctx.write_direct(node, offset, data);
        self.mark_dirty(ino);
        if let Err(e) = written {
            return self.fail_direct_write(ino, sub, e);
        }
        let (ctx, node) = self.split(ino)?;
        let end = offset + count as u64;
        let span = block_span(offset, count as u64, ctx.bs());
        for r in unwritten_runs(node, span.clone()) {
            node.map_set_state(r, false);
            node.map_dirty = true;
        }
        node.disk.size = node.disk.size.max(end);
        // ext4_handle_inode_extension moves i_disksize to the write's end.
        node.move_disksize(Some(end));
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        #[cfg(feature = "test-hooks")]
        let stale_ok = self.bug_dio_keeps_stale_cache();
        #[cfg(not(feature = "test-hooks"))]
        let stale_ok = false;
        let (ctx, _) = self.split(ino)?;
        if !stale_ok {
            ctx.pages.invalidate(ino, span);
        }
        ctx.dio_stats.writes += 1;
        ctx.dio_stats.bytes_written += count as u64;
        // ext4_handle_inode_extension: off the orphan list once sized.
        if sub.orphaned {
            self.orphan_del(ino)?;
        }
        Ok(count as u64)
    }

    pub(crate) fn do_direct_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        let ino = self.open_path(path)?;
        let read = self.direct_read_open(ino, offset, len);
        self.closing(ino, read)
    }

    fn direct_read_open(&mut self, ino: InodeNumber, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        match self.submit_direct_read(ino, offset, len)? {
            ReadSubmission::Done(data) => Ok(data),
            ReadSubmission::InFlight(sub) => self.under_dio_read_locks(ino, |fs| fs.complete_direct_read(ino, &sub)),
        }
    }

    /// ext4_dio_read_iter's locks: the inode lock shared, the I/O counted in flight.
    pub(super) fn under_dio_read_locks<T>(&mut self, ino: InodeNumber, f: impl FnOnce(&mut Self) -> Result<T, Errno>) -> Result<T, Errno> {
        self.under_inode_lock(ino, Lock::InodeRwsem, true, "ext4_dio_read_iter", |fs| fs.as_direct_io(ino, f))
    }

    /// Whether a direct read of `ino` goes the direct way (else buffered).
    pub(crate) fn reads_direct(&mut self, ino: InodeNumber) -> bool {
        self.split(ino).is_ok_and(|(ctx, node)| ctx.direct_path(node))
    }

    /// A direct read up to its bios: the checks, and under its locks the
    /// range written back and the extents checked for alignment. A call
    /// that does not go the direct way in flight (not a regular file,
    /// buffered under data=journal, nothing to read) is done here whole.
    pub(super) fn submit_direct_read(&mut self, ino: InodeNumber, offset: u64, len: u32) -> Result<ReadSubmission, Errno> {
        // Only regular files set FMODE_CAN_ODIRECT (do_dentry_open).
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EINVAL);
        }
        if offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let (ctx, node) = self.split(ino)?;
        if !ctx.direct_path(node) {
            ctx.dio_stats.buffered += 1;
            return self.read_open(ino, offset, len).map(ReadSubmission::Done);
        }
        self.under_dio_read_locks(ino, |fs| fs.submit_direct_read_locked(ino, offset, len))
    }

    fn submit_direct_read_locked(&mut self, ino: InodeNumber, offset: u64, len: u32) -> Result<ReadSubmission, Errno> {
        let (ctx, node) = self.split(ino)?;
        let size = node.disk.size;
        if len == 0 || offset >= size {
            return Ok(ReadSubmission::Done(Vec::new()));
        }
        let span = block_span(offset, u64::from(len), ctx.bs());
        let moved = ctx.disksize_after_range(node, span.clone());
        if !self.ctx.mount.read_only {
            self.write_back_quietly(ino, span.start).map_err(Errno::from)?;
        }
        let (ctx, node) = self.split(ino)?;
        node.move_disksize(moved);
        // ext4_iomap_begin refuses blocks past the last logical block,
        // which a direct read reaches where a buffered one stops.
        if offset + u64::from(len) > ctx.mount.max_file_size() {
            return Err(Errno::EINVAL);
        }
        // A mapped extent starting or ending off a sector is refused: the
        // first when the offset is off one, the last when the end is. The
        // simulated disk moves any byte: an extent that only lands off a
        // sector in the buffer (after a hole) is read.
        let edge = if offset % DIO_ALIGN != 0 { span.start } else { span.end - 1 };
        let looked_at = if (offset | u64::from(len)) % DIO_ALIGN != 0 { edge..edge + 1 } else { 0..0 };
        if node.map().pieces(looked_at).iter().any(|p| !p.unwritten) {
            ctx.dio_stats.misaligned += 1;
            return Err(Errno::EINVAL);
        }
        let end = size.min(offset.saturating_add(u64::from(len)));
        Ok(ReadSubmission::InFlight(SubmittedRead { offset, count: end - offset }))
    }

    /// The bios of a submitted direct read and their completion: the
    /// blocks the file maps now (its locks kept them as they were at the
    /// submission), zeros for holes and unwritten ones.
    pub(super) fn complete_direct_read(&mut self, ino: InodeNumber, sub: &SubmittedRead) -> Result<Vec<u8>, Errno> {
        let (ctx, node) = self.split(ino)?;
        let mut out = vec![0u8; usize::try_from(sub.count).map_err(|_| Errno::EINVAL)?];
        let blocks = block_span(sub.offset, sub.count, ctx.bs());
        let mut commands = 0;
        let read = ctx.read_from_device(node, sub.offset, &mut out, &[blocks], &mut commands);
        ctx.dio_stats.commands += commands;
        read?;
        ctx.dio_stats.reads += 1;
        ctx.dio_stats.bytes_read += out.len() as u64;
        Ok(out)
    }
}

/// The runs of `span` that `node` maps unwritten.
fn unwritten_runs(node: &Node, span: Range<u64>) -> Vec<Range<u64>> {
    node.map().pieces(span).into_iter().filter(|p| p.unwritten).map(|p| p.logical..p.logical + p.len).collect()
}
