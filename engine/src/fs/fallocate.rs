//! fallocate(2), mode by mode as the model's fallocate.rs defines it.
//!
//! - Default / KEEP_SIZE: holes become unwritten extents.
//! - PUNCH_HOLE (with KEEP_SIZE): nothing at or past EOF; the end is clipped
//!   to the page holding EOF; whole blocks are freed, partial edges zeroed.
//! - ZERO_RANGE: whole blocks become unwritten (written ones are converted),
//!   holes are allocated unwritten, partial edges are zeroed on disk.
//! - COLLAPSE / INSERT: block aligned; extents move by whole blocks.
//! - UNSHARE, WRITE_ZEROES and unknown bits: EOPNOTSUPP.

use ext4_model::{Errno, FallocFlags, FileKind};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use ext4_model::vfs::{block_span, classify_fallocate, fallocate_end, FallocateMode as Mode};
use super::Ext4;

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn do_fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        let ino = self.open_for_write(path)?;
        let kind = classify_fallocate(mode, offset, len)?;
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EISDIR);
        }
        let end = fallocate_end(offset, len)?;
        if end > self.ctx.mount.max_file_size() {
            return Err(Errno::EFBIG);
        }
        let done = match kind {
            Mode::Allocate { keep_size } => self.allocate(ino, offset, end, keep_size),
            Mode::Punch => self.punch(ino, offset, end),
            Mode::Zero { keep_size } => self.zero_range(ino, offset, end, keep_size),
            Mode::Collapse => self.collapse(ino, offset, len),
            Mode::Insert => self.insert(ino, offset, len),
        };
        // A mode that failed part way may have mapped blocks already: the
        // inode must still be written, or those blocks leak.
        self.mark_dirty(ino);
        done?;
        let (ctx, node) = self.split(ino)?;
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        Ok(())
    }

    fn allocate(&mut self, ino: InodeNumber, offset: u64, end: u64, keep_size: bool) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        let span = block_span(offset, end - offset, ctx.bs());
        ctx.map_range(ino, node, span, true)?;
        if !keep_size && end > node.disk.size {
            ctx.zero_past_eof(node, node.disk.size, end)?;
            node.disk.size = end;
        }
        Ok(())
    }

    fn punch(&mut self, ino: InodeNumber, offset: u64, end: u64) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let ps = u64::from(ctx.mount.page_size);
        let size = node.disk.size;
        if offset >= size {
            return Ok(());
        }
        // The hole ends with the folio holding EOF: a page, or a larger block.
        let unit = ps.max(bs);
        let end = if end > size { size.div_ceil(unit) * unit } else { end };
        let first_full = offset.div_ceil(bs);
        let last_full = end / bs;
        if first_full < last_full {
            ctx.unmap_range(node, first_full..last_full)?;
            ctx.zero_bytes(node, offset, (first_full * bs).min(end))?;
            ctx.zero_bytes(node, (last_full * bs).max(offset), end)?;
        } else {
            ctx.zero_bytes(node, offset, end)?;
        }
        Ok(())
    }

    fn zero_range(&mut self, ino: InodeNumber, offset: u64, end: u64, keep_size: bool) -> Result<(), Errno> {
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let span = block_span(offset, end - offset, bs);
        // Room for the whole range is checked first, so ENOSPC leaves the
        // file as it was (the model reserves the same way).
        ctx.check_room(node, span.clone())?;
        let first_full = offset.div_ceil(bs);
        let last_full = end / bs;
        // A hole at a partial edge becomes a clean unwritten block (it reads
        // as zeros, so ext4 has nothing to zero there); written edges get
        // their bytes in the range zeroed below.
        let edges = [span.start..first_full.min(span.end), last_full.max(span.start)..span.end];
        for edge in edges.into_iter().filter(|e| !e.is_empty()) {
            ctx.map_range(ino, node, edge, true)?;
        }
        if first_full < last_full {
            ctx.map_range(ino, node, first_full..last_full, true)?;
            node.map.set_state(first_full..last_full, true);
            node.map_dirty = true;
        }
        ctx.zero_bytes(node, offset, end)?;
        if !keep_size && end > node.disk.size {
            ctx.zero_past_eof(node, node.disk.size, offset)?;
            node.disk.size = end;
        }
        Ok(())
    }

    /// Block alignment, then the file's size.
    fn check_shift(&mut self, ino: InodeNumber, offset: u64, len: u64) -> Result<u64, Errno> {
        let bs = self.ctx.bs();
        if offset % bs != 0 || len % bs != 0 {
            return Err(Errno::EINVAL);
        }
        Ok(self.node(ino)?.disk.size)
    }

    fn collapse(&mut self, ino: InodeNumber, offset: u64, len: u64) -> Result<(), Errno> {
        let size = self.check_shift(ino, offset, len)?;
        if offset + len >= size {
            return Err(Errno::EINVAL);
        }
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let (first, count) = (offset / bs, len / bs);
        ctx.unmap_range(node, first..first + count)?;
        let delta = i64::try_from(count).map_err(|_| Errno::EFBIG)?;
        node.map.shift_from(first + count, -delta).ok_or(Errno::EIO)?;
        node.map_dirty = true;
        node.disk.size = size - len;
        Ok(())
    }

    fn insert(&mut self, ino: InodeNumber, offset: u64, len: u64) -> Result<(), Errno> {
        let size = self.check_shift(ino, offset, len)?;
        if offset >= size {
            return Err(Errno::EINVAL);
        }
        if len > self.ctx.mount.max_file_size() - size {
            return Err(Errno::EFBIG);
        }
        let (ctx, node) = self.split(ino)?;
        let bs = ctx.bs();
        let delta = i64::try_from(len / bs).map_err(|_| Errno::EFBIG)?;
        node.map.shift_from(offset / bs, delta).ok_or(Errno::EFBIG)?;
        node.map_dirty = true;
        node.disk.size = size + len;
        Ok(())
    }

    pub(crate) fn do_fiemap(&mut self, path: &str) -> Result<Vec<ext4_model::FiemapExtent>, Errno> {
        use ext4_model::op::fiemap_flags;
        // Directories map their blocks too; open_path followed any symlink.
        let ino = self.open_path(path)?;
        let bs = self.ctx.bs();
        let node = self.node(ino)?;
        let mut out: Vec<ext4_model::FiemapExtent> = node
            .map
            .iter()
            .map(|p| ext4_model::FiemapExtent {
                logical: p.logical * bs,
                length: p.len * bs,
                flags: if p.unwritten { fiemap_flags::UNWRITTEN } else { 0 },
                writeback_pending: false,
            })
            .collect();
        if let Some(last) = out.last_mut() {
            last.flags |= fiemap_flags::LAST;
        }
        Ok(out)
    }
}
