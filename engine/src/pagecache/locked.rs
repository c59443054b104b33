//! Folio locks held across a sleep: the flusher locks an inode's dirty
//! folios (mpage_prepare_extent_to_map) and sleeps on the I/O that maps
//! them (bitmap and extent reads under its handle). Anyone else who would
//! lock one of those folios meanwhile (a writer's write_begin, truncation,
//! another write-back, eviction) sleeps: the scheduler asks
//! [`PageCache::folios_locked`] first, and a touch it did not predict is
//! recorded ([`PageCache::take_locked_touches`]) and fails the run.
//!
//! Folio locks held only inside one op are not kept here: one op runs at
//! a time, so nobody could meet them.

use std::ops::Range;

use crate::format::InodeNumber;

use super::PageCache;

/// The folios one holder has locked: page ranges of whole folios of one inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockedFolios {
    pub ino: InodeNumber,
    pub folios: Vec<Range<u64>>,
}

impl LockedFolios {
    fn overlaps(&self, ino: InodeNumber, pages: &Range<u64>) -> bool {
        self.ino == ino && self.folios.iter().any(|f| f.start < pages.end && pages.start < f.end)
    }
}

impl PageCache {
    /// Locks every dirty folio of `ino` for one holder (at most one holds
    /// folios at a time: the flusher). None when nothing is dirty.
    pub fn lock_dirty_folios(&mut self, ino: InodeNumber) -> Option<LockedFolios> {
        debug_assert!(self.locked.is_none(), "one holder of folio locks at a time");
        let m = self.mappings.get(&ino)?;
        let folios: Vec<Range<u64>> = m.dirty.iter().filter_map(|&i| m.folios.get(&i).map(|f| i..i + (1u64 << f.order()))).collect();
        if folios.is_empty() {
            return None;
        }
        let locked = LockedFolios { ino, folios };
        self.locked = Some(locked.clone());
        Some(locked)
    }

    pub fn unlock_folios(&mut self) {
        self.locked = None;
    }

    /// Whether a folio of `ino` within bytes `bytes` is locked by a holder
    /// between its halves.
    pub fn folios_locked(&self, ino: InodeNumber, bytes: Range<u64>) -> bool {
        let Some(locked) = &self.locked else { return false };
        if bytes.start >= bytes.end {
            return false;
        }
        locked.overlaps(ino, &self.geo.pages_covering(bytes))
    }

    /// The inode whose folios are locked, if any.
    pub fn locked_inode(&self) -> Option<InodeNumber> {
        self.locked.as_ref().map(|l| l.ino)
    }

    /// Notes that `what` reached locked folios of `ino` in `pages`: a lock
    /// the scheduler's prediction missed.
    pub fn note_touch(&mut self, ino: InodeNumber, pages: Range<u64>, what: &'static str) {
        if self.locked.as_ref().is_some_and(|l| l.overlaps(ino, &pages)) {
            self.locked_touches.push(format!("{what} reached folio pages {}..{} of inode {ino}, locked by the flusher between its halves", pages.start, pages.end));
        }
    }

    /// Touches of locked folios since the last call.
    pub fn take_locked_touches(&mut self) -> Vec<String> {
        std::mem::take(&mut self.locked_touches)
    }
}

#[cfg(test)]
mod tests {
    use crate::memory::BoundedFolios;
    use crate::pagecache::geometry::Geometry;
    use crate::pagecache::PageCache;

    #[test]
    fn locked_dirty_folios_stop_writers_and_truncation_of_those_folios_only() {
        let geo = Geometry::new(4096, 4096).unwrap();
        let mut pc = PageCache::new(geo, Box::new(BoundedFolios::new(4096, 64 << 20)));
        let (added, _) = pc.add_folios(12, (0, 0), 0..4, 0);
        assert_eq!(added.len(), 4);
        assert!(pc.write_bytes(12, 4096, &[7; 4096]));
        assert!(pc.lock_dirty_folios(13).is_none(), "nothing dirty, nothing locked");
        let locked = pc.lock_dirty_folios(12).expect("one dirty folio");
        assert_eq!(locked.folios, vec![1..2]);
        assert!(pc.folios_locked(12, 4096..4097) && pc.folios_locked(12, 0..8192));
        assert!(!pc.folios_locked(12, 0..4096) && !pc.folios_locked(12, 8192..16384) && !pc.folios_locked(13, 4096..8192));
        // A write into the clean folio beside it is no touch; one into it is.
        assert!(pc.write_bytes(12, 0, &[1; 4096]));
        assert!(pc.take_locked_touches().is_empty());
        assert!(pc.write_bytes(12, 5000, &[1; 10]));
        pc.invalidate(12, 1..2);
        let touches = pc.take_locked_touches();
        assert_eq!(touches.len(), 2, "{touches:?}");
        pc.unlock_folios();
        assert!(!pc.folios_locked(12, 0..u64::MAX));
        pc.drop_mapping(12);
        assert!(pc.take_locked_touches().is_empty());
    }
}
