//! Writes through a shared mapping ([`crate::op::Op::MapWrite`]): stores
//! into pages of an `mmap(MAP_SHARED)` of the pages stored to, then
//! `msync(MS_SYNC)` of the mapping and `fdatasync` of the file.
//!
//! - The first store to a page faults (ext4_page_mkwrite), which backs
//!   every block of the page's folio inside EOF: under delalloc holes are
//!   reserved (delayed), under nodelalloc allocated (unwritten with
//!   dioread_nolock), a data=journal inode's folio is journaled. The
//!   blocks of the touched pages are certain; the rest of the folio is
//!   the page cache's choice of folio size (`FileData::maybe_allocated`;
//!   unwritten blocks there may be written as zeros: `Alloc::Zeroed`).
//! - Stores never move EOF: the harness stores only bytes before it (past
//!   it a store is SIGBUS), so no mapping is made when none would be
//!   stored.
//! - msync(MS_SYNC) is vfs_fsync_range over the mapped pages, datasync:
//!   they are written back and what their data needs committed. The
//!   fdatasync after it does the same for the rest of the file, so the
//!   op's durability is the whole file's (the model keeps durability per
//!   file, not per range).
//! - A fault that cannot reserve space is SIGBUS in a real program; the
//!   model answers ENOSPC and changes nothing.

use std::ops::Range;

use crate::crash_log::Call;
use crate::content::Source;
use crate::data::Alloc;
use crate::model::Model;
use crate::state::Ino;
use crate::Errno;

/// What an implementation has in a file's blocks: the written ones (data,
/// or a delayed reservation) and the unwritten ones; the rest are holes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockStates {
    pub written: Vec<Range<u64>>,
    pub unwritten: Vec<Range<u64>>,
}

impl Model {
    pub(crate) fn do_map_write(&mut self, path: &str, offset: u64, len: usize, source: Source) -> Result<u64, Errno> {
        // O_RDWR: a shared writable mapping needs it.
        let ino = self.open_for_write(path, false)?;
        let stored = self.map_write_open(ino, offset, len as u64, source);
        self.release(ino);
        stored
    }

    /// For a mapped write about to run: the states a crash may leave when
    /// its msync fails part way (some pages written back, the commit not
    /// made): its stores are written but not synced, as a plain write of
    /// the bytes before EOF would leave them. None for other ops.
    pub fn crash_envelope_unsynced(&self, op: &crate::op::Op) -> Option<crate::CrashEnvelope> {
        let crate::op::Op::MapWrite { path, offset, len, seed } = op else { return None };
        let ino = self.open_path(path).ok()?;
        let size = self.file(ino)?.size;
        let stored = size.saturating_sub(*offset).min(u64::from(*len));
        let mut stores = self.clone();
        let bytes: std::sync::Arc<[u8]> = crate::op::pattern(*seed, *len as usize)[..stored as usize].into();
        crate::FileSystem::write(&mut stores, path, *offset, &bytes).ok()?;
        Some(stores.crash_envelope())
    }

    /// The blocks a mapped write of `len` bytes at `offset` (inside EOF)
    /// faults for certain, and those its folio may cover: up to the
    /// mapping's largest folio around them, inside EOF.
    fn folio_blocks(&self, ino: Ino, size: u64, offset: u64, len: u64) -> (Range<u64>, Range<u64>) {
        let end = size.min(offset.saturating_add(len));
        let (bs, ps) = (self.bs(), u64::from(self.mount.page_size));
        let eof_block = size.div_ceil(bs);
        let pages = offset / ps * ps..end.div_ceil(ps) * ps;
        let faulted = pages.start / bs..pages.end.div_ceil(bs).min(eof_block);
        let (_, max_order) = self.mount.folio_orders(self.journal_mode(ino));
        let folio = ps << max_order;
        let could_be = pages.start / folio * folio / bs..(pages.end.div_ceil(folio) * folio).div_ceil(bs).min(eof_block);
        (faulted, could_be)
    }

    /// After `op`, a mapped write that succeeded: the blocks its folio
    /// may have covered where the model holds two states possible (holes
    /// `maybe_allocated`, unwritten blocks `Zeroed`), for the harness to
    /// ask the implementation which it has: the folio's size is its page
    /// cache's choice. None for any other op, or nothing to ask.
    pub fn folio_choice(&self, op: &crate::op::Op) -> Option<Range<u64>> {
        let crate::op::Op::MapWrite { path, offset, len, .. } = op else { return None };
        let ino = self.open_path(path).ok()?;
        let file = self.file(ino)?;
        if *len == 0 || *offset >= file.size {
            return None;
        }
        let (_, could_be) = self.folio_blocks(ino, file.size, *offset, u64::from(*len));
        let zeroed = file.blocks.overlapping(could_be.clone()).iter().any(|(_, a)| *a == Alloc::Zeroed);
        (zeroed || !file.maybe_allocated_in(could_be.clone()).is_empty()).then_some(could_be)
    }

    /// Learns what the implementation has in `span` (from
    /// [`Model::folio_choice`]): maybe-allocated holes it backed, and
    /// zeroed unwritten blocks, take its state (the msync wrote the
    /// folio's zeros, or conversion left them unwritten); other holes stay
    /// holes.
    pub fn settle_folio_choice(&mut self, path: &str, span: Range<u64>, has: &BlockStates) {
        let Some(ino) = self.open_path(path).ok().filter(|&ino| self.file(ino).is_some()) else { return };
        // Logged without a sequence number of its own: it completes the
        // mapped write before it, whose durability point it shares.
        if let Some(log) = &mut self.log {
            log.calls.push(Call::FolioChoice { path: path.into(), span: span.clone(), has: has.clone() });
        }
        let ratio = self.ratio();
        let file = self.file_mut(ino);
        let maybe = file.maybe_allocated_in(span.clone());
        let zeroed: Vec<Range<u64>> = file.blocks.overlapping(span.clone()).into_iter().filter(|(_, a)| *a == Alloc::Zeroed).map(|(r, _)| r).collect();
        let mut new_space = 0;
        for (ranges, alloc) in [(&has.written, Alloc::Written), (&has.unwritten, Alloc::Unwritten)] {
            for r in ranges {
                let clip = |c: &Range<u64>| c.start.max(r.start)..c.end.min(r.end);
                for hole in maybe.iter().map(clip).filter(|c| c.start < c.end) {
                    new_space += file.new_clusters_in(hole.clone(), ratio) * ratio;
                    file.blocks.insert(hole, alloc);
                }
                for z in zeroed.iter().map(clip).filter(|c| c.start < c.end) {
                    file.blocks.insert(z, alloc);
                }
            }
        }
        file.maybe_allocated.remove(span);
        self.st.used_blocks += new_space;
    }

    fn map_write_open(&mut self, ino: Ino, offset: u64, len: u64, source: Source) -> Result<u64, Errno> {
        let Some(file) = self.file(ino) else { return Err(Errno::EISDIR) };
        let size = file.size;
        if len == 0 || offset >= size {
            return Ok(0);
        }
        let (end, bs) = (size.min(offset.saturating_add(len)), self.bs());
        let (faulted, could_be) = self.folio_blocks(ino, size, offset, len);
        let ratio = self.ratio();
        let new_space = file.new_clusters_in(faulted.clone(), ratio) * ratio;
        self.reserve_blocks(new_space)?;
        let filled = file.holes_in(faulted.clone());
        let fill = self.write_fill(ino);
        let file = self.file_mut(ino);
        file.fault_in(faulted.clone(), bs, fill);
        file.content.put(offset, end - offset, source);
        for rest in [could_be.start..faulted.start, faulted.end..could_be.end] {
            file.maybe_allocated.insert(rest.clone(), ());
            // Unwritten blocks the folio covers get dirty zeros with the
            // rest of it, which the msync writes: unwritten or written.
            let unwritten: Vec<Range<u64>> = file.blocks.overlapping(rest).into_iter().filter(|(_, a)| *a == Alloc::Unwritten).map(|(r, _)| r).collect();
            for r in unwritten {
                file.blocks.insert(r, Alloc::Zeroed);
            }
        }
        self.st.used_blocks += new_space;
        if filled > 0 {
            self.touch_datasync(ino);
        }
        self.writeback(ino);
        self.mark_synced(ino, true);
        Ok(end - offset)
    }
}

#[cfg(test)]
mod tests {
    use crate::op::{fiemap_flags, Op, Reply};
    use crate::{Errno, FileSystem, Model, MountConfig};

    fn model(options: &str) -> Model {
        let mut m = Model::new(&options.parse::<MountConfig>().unwrap()).unwrap();
        m.apply(&Op::Create { path: "/f".into(), perm: 0o644 }).unwrap();
        m
    }

    fn fiemap(m: &mut Model) -> Vec<(u64, u64, u32, bool)> {
        match m.apply(&Op::Fiemap { path: "/f".into(), start: 0, len: u64::MAX, flags: 0, count_only: false }) {
            Ok(Reply::Extents(e)) => e.into_iter().map(|e| (e.logical, e.length, e.flags & !fiemap_flags::LAST, e.maybe_hole)).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stores_stop_at_eof_and_fill_their_pages_blocks() {
        let mut m = model("bs=1k");
        m.apply(&Op::Truncate { path: "/f".into(), size: 64 << 10 }).unwrap();
        assert_eq!(m.apply(&Op::MapWrite { path: "/f".into(), offset: (64 << 10) - 10, len: 100, seed: 3 }), Ok(Reply::Written(10)));
        assert_eq!(m.apply(&Op::MapWrite { path: "/f".into(), offset: 64 << 10, len: 100, seed: 3 }), Ok(Reply::Written(0)));
        assert_eq!(m.apply(&Op::Stat { path: "/f".into() }).map(|r| matches!(r, Reply::Stat(s) if s.size == 64 << 10)), Ok(true));
        // The page's four 1 KiB blocks are written back; the rest of a
        // folio of up to 2 MiB around it (here the whole file) may be.
        let map = fiemap(&mut m);
        assert!(map.contains(&((60 << 10), 4096, 0, false)), "{map:?}");
        assert!(map.contains(&(0, 60 << 10, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN, true)), "{map:?}");
        let p = crate::op::pattern(3, 10);
        assert_eq!(m.apply(&Op::Read { path: "/f".into(), offset: (64 << 10) - 12, len: 100 }), Ok(Reply::Data([&[0, 0][..], &p[..]].concat())));
    }

    /// The rest of a fault's folio may be written zeros (a large folio,
    /// written back by the msync) or a hole: fallocate over it leaves it
    /// written or makes it unwritten, and the model allows both.
    #[test]
    fn fallocate_over_the_rest_of_a_faulted_folio_may_find_it_written() {
        let mut m = model("");
        m.apply(&Op::Truncate { path: "/f".into(), size: 12289 }).unwrap();
        m.apply(&Op::MapWrite { path: "/f".into(), offset: 0, len: 1, seed: 2 }).unwrap();
        m.apply(&Op::Fallocate { path: "/f".into(), mode: crate::op::FallocFlags(crate::op::FallocFlags::KEEP_SIZE), offset: 0, len: 7168 }).unwrap();
        let Ok(Reply::Extents(map)) = m.apply(&Op::Fiemap { path: "/f".into(), start: 0, len: u64::MAX, flags: 0, count_only: false }) else { panic!() };
        let ext = |logical, length, flags| crate::op::FiemapExtent::new(logical, length, flags);
        let big_folio = [ext(0, 8192, 0), ext(8192, 4096, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN | fiemap_flags::LAST)];
        let one_page = [ext(0, 4096, 0), ext(4096, 4096, fiemap_flags::UNWRITTEN), ext(8192, 4096, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN | fiemap_flags::LAST)];
        assert!(crate::agree::fiemap_agrees(&map, &big_folio).is_ok(), "{map:?}");
        assert!(crate::agree::fiemap_agrees(&map, &one_page).is_ok(), "{map:?}");
        let hole = [ext(0, 4096, 0), ext(8192, 4096, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN | fiemap_flags::LAST)];
        assert!(crate::agree::fiemap_agrees(&map, &hole).is_err(), "fallocate allocated it either way: {map:?}");
    }

    #[test]
    fn a_data_journal_folio_is_its_one_page_and_the_open_refuses_as_for_writing() {
        let mut m = model("data=journal");
        m.apply(&Op::Truncate { path: "/f".into(), size: 40960 }).unwrap();
        assert_eq!(m.apply(&Op::MapWrite { path: "/f".into(), offset: 5000, len: 10, seed: 1 }), Ok(Reply::Written(10)));
        assert_eq!(fiemap(&mut m), vec![(4096, 4096, 0, false)], "minimum-order folios only: no maybe blocks");
        assert_eq!(m.apply(&Op::MapWrite { path: "/".into(), offset: 0, len: 10, seed: 1 }), Err(Errno::EISDIR));
        m.apply(&Op::Chattr { path: "/f".into(), flag: crate::op::ChattrFlag::Append, enable: true }).unwrap();
        assert_eq!(m.apply(&Op::MapWrite { path: "/f".into(), offset: 0, len: 10, seed: 1 }), Err(Errno::EPERM));
    }
}
