//! Writes through a shared mapping (the model's mapped_write.rs says what
//! a user sees): the page-fault path ext4_page_mkwrite, then msync.
//!
//! - The fault brings each touched page's folio into the cache uptodate
//!   (filemap_fault reads it), then backs every block of the folio inside
//!   EOF as a buffered write would back them (block_page_mkwrite): delayed
//!   under delalloc, allocated under nodelalloc, journaled for a
//!   data=journal inode. The whole folio is dirtied; the stores land in it.
//! - msync(MS_SYNC) of the mapped pages, then fdatasync: the file is
//!   written back and committed.
//! - The folio the engine's page cache picks may be larger than the page
//!   (up to the mapping's largest order): the model allows its other
//!   blocks to be holes or allocated.

use ext4_model::{Errno, FileKind};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::locks::Lock;
use super::Ext4;

/// What mapped writes did, for a run's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MappedWriteStats {
    pub writes: u64,
    /// Folios write faults backed.
    pub faulted_folios: u64,
    /// Blocks those folios backed (holes reserved or allocated, the rest dirtied).
    pub faulted_blocks: u64,
}

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn do_map_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        // The write faults (ext4_page_mkwrite) hold invalidate_lock shared;
        // here they come after any direct I/O in flight (its plan says why).
        let stored = self.dio_wait(ino).and_then(|()| self.under_inode_lock(ino, Lock::InvalidateLock, true, "ext4_page_mkwrite", |fs| fs.map_write_open(ino, offset, data)));
        self.closing(ino, stored)
    }

    fn map_write_open(&mut self, ino: InodeNumber, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        if self.kind_of(ino)? != FileKind::Regular {
            return Err(Errno::EISDIR);
        }
        let (ctx, node) = self.split(ino)?;
        let size = node.disk.size;
        if data.is_empty() || offset >= size {
            return Ok(0);
        }
        let end = size.min(offset.saturating_add(data.len() as u64));
        let data = &data[..(end - offset) as usize];
        let (bs, ps) = (ctx.bs(), u64::from(ctx.mount.page_size));
        let pages = ctx.pages.geometry().pages_covering(offset..end);
        let orders = ctx.folio_orders(node);
        // A chunk of pages at a time, making room before each, as a
        // buffered write does: no fault needs more than the cache holds.
        let chunk = (ctx.write_chunk_bytes() / ps).max(1);
        let mut at = pages.start;
        // A fault that gets no folio after others stored: the stores
        // before it landed, and msync writes them.
        let mut cut = None;
        while at < pages.end {
            let these = at..pages.end.min(at + chunk);
            let need = {
                let (ctx, node) = self.split(ino)?;
                ctx.pages.uncached_bytes(ino, ctx.folio_orders(node), these.clone())
            };
            self.make_room(need, Some((ino, these.clone()))).map_err(Errno::from)?;
            let (ctx, node) = self.split(ino)?;
            let (_, refused) = ctx.pages.add_folios(ino, orders, these.clone(), orders.1);
            if let Some(r) = refused {
                let e = ctx.folio_refused(r.to_string());
                if at == pages.start {
                    return Err(e);
                }
                ctx.note_memory_progress(ctx.pages.geometry().pg_to_byte(at).max(offset) - offset);
                cut = Some(e);
                break;
            }
            let first = ctx.pages.folio_span(ino, these.start).map_or(these.start, |s| s.start);
            let last = ctx.pages.folio_span(ino, these.end - 1).map_or(these.end, |s| s.end);
            let blocks = ctx.pages.block_of_page(first)..ctx.pages.block_of_page(last).min(size.div_ceil(bs));
            // filemap_fault: the folios uptodate; then ext4_page_mkwrite.
            for run in ctx.stale_runs(ino, blocks.clone()) {
                ctx.fill_blocks(ino, node, run, size)?;
            }
            ctx.back_write(ino, node, blocks.clone())?;
            let geo = ctx.pages.geometry();
            let (lo, hi) = (geo.pg_to_byte(these.start).max(offset), geo.pg_to_byte(these.end).min(end));
            if !ctx.pages.write_bytes(ino, lo, &data[(lo - offset) as usize..(hi - offset) as usize]) {
                return Err(ctx.folio_refused(format!("no folio for bytes {lo}..{hi} of inode {ino}")));
            }
            let mut folios = std::collections::BTreeSet::new();
            for b in blocks.clone() {
                if let Some((index, i)) = ctx.pages.locate(ino, b) {
                    ctx.pages.mark_dirty(ino, index, i);
                    folios.insert(index);
                }
            }
            ctx.mapped_stats.faulted_folios += folios.len() as u64;
            ctx.mapped_stats.faulted_blocks += blocks.end - blocks.start;
            at = these.end;
        }
        let (ctx, node) = self.split(ino)?;
        ctx.mapped_stats.writes += 1;
        let now = ctx.now();
        node.disk.mtime = now;
        node.disk.ctime = now;
        self.mark_dirty(ino);
        // msync(MS_SYNC) of the mapped pages, then fdatasync of the rest.
        self.sync_file(ino)?;
        match cut {
            Some(e) => Err(e),
            None => Ok(end - offset),
        }
    }

    /// What `blocks` of the file at `path` hold: written (data, or a
    /// delayed reservation) and unwritten runs; what a mapped write's folio
    /// backed, for a model that cannot know the folio's size. Reads only
    /// what is in memory: None for an inode whose tree is not loaded.
    pub fn block_states(&mut self, path: &str, blocks: std::ops::Range<u64>) -> Option<ext4_model::BlockStates> {
        let ino = self.open_path(path).ok()?;
        let node = self.nodes.get(&ino).filter(|n| n.tree_loaded())?;
        let (mut written, mut unwritten) = (crate::range_set::RangeSet::new(), crate::range_set::RangeSet::new());
        for p in node.map().pieces(blocks.clone()) {
            let states = if p.unwritten { &mut unwritten } else { &mut written };
            states.add(p.logical..p.logical + p.len);
        }
        for r in node.es.delayed_in(blocks.clone()) {
            written.add(r);
        }
        Some(ext4_model::BlockStates { written: written.iter_in(blocks.clone()).collect(), unwritten: unwritten.iter_in(blocks).collect() })
    }
}
