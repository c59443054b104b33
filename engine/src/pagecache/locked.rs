//! Folio locks held across a sleep, by their holders (a split op's, the
//! flusher's): the flusher locks an inode's dirty folios
//! (mpage_prepare_extent_to_map) and sleeps on the I/O that maps them
//! (bitmap and extent reads under its handle); a truncate to a size inside
//! a block locks the folio of that block to zero its tail
//! (ext4_block_truncate_page) and may sleep reading it. Anyone else who
//! would lock one of those folios meanwhile (a writer's write_begin,
//! truncation, write-back, eviction) sleeps: the scheduler asks
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
    /// The lock holder's number.
    pub holder: u64,
    pub ino: InodeNumber,
    pub folios: Vec<Range<u64>>,
}

impl LockedFolios {
    fn overlaps(&self, ino: InodeNumber, pages: &Range<u64>) -> bool {
        self.ino == ino && self.folios.iter().any(|f| f.start < pages.end && pages.start < f.end)
    }
}

impl PageCache {
    /// Locks every dirty folio of `ino` for `holder`. None when nothing
    /// is dirty.
    pub fn lock_dirty_folios(&mut self, ino: InodeNumber, holder: u64) -> Option<LockedFolios> {
        let m = self.mappings.get(&ino)?;
        let folios: Vec<Range<u64>> = m.dirty.iter().filter_map(|&i| m.folios.get(&i).map(|f| i..i + (1u64 << f.order()))).collect();
        self.lock(ino, holder, folios)
    }

    /// Locks the cached folio holding byte `at` of `ino` for `holder`.
    /// None when no folio holds it.
    pub fn lock_folio_at(&mut self, ino: InodeNumber, at: u64, holder: u64) -> Option<LockedFolios> {
        let span = self.folio_span(ino, self.geo.byte_to_pg(at))?;
        self.lock(ino, holder, vec![span])
    }

    fn lock(&mut self, ino: InodeNumber, holder: u64, folios: Vec<Range<u64>>) -> Option<LockedFolios> {
        if folios.is_empty() {
            return None;
        }
        debug_assert!(!folios.iter().any(|f| self.folios_locked_except(ino, self.geo.pg_to_byte(f.start)..self.geo.pg_to_byte(f.end), None)), "a folio locked twice");
        let locked = LockedFolios { holder, ino, folios };
        self.locked.push(locked.clone());
        Some(locked)
    }

    /// Releases every folio lock `holder` holds.
    pub fn unlock_folios(&mut self, holder: u64) {
        self.locked.retain(|l| l.holder != holder);
    }

    /// Whether a folio of `ino` within bytes `bytes` is locked by a holder
    /// between its halves.
    pub fn folios_locked(&self, ino: InodeNumber, bytes: Range<u64>) -> bool {
        self.folios_locked_except(ino, bytes, None)
    }

    /// The same, leaving out the locks of `except` (a second half asking
    /// about locks other than its own).
    pub fn folios_locked_except(&self, ino: InodeNumber, bytes: Range<u64>, except: Option<u64>) -> bool {
        if bytes.start >= bytes.end || self.locked.is_empty() {
            return false;
        }
        let pages = self.geo.pages_covering(bytes);
        self.locked.iter().any(|l| Some(l.holder) != except && l.overlaps(ino, &pages))
    }

    /// Whether a read of `bytes` of `ino` would lock one of the folios held
    /// by a holder other than `except`: a read locks a folio that is not
    /// wholly uptodate to fill it (filemap_update_page), and leaves an
    /// uptodate one alone.
    pub fn read_meets_locked_folio(&self, ino: InodeNumber, bytes: Range<u64>, except: Option<u64>) -> bool {
        if bytes.start >= bytes.end || self.locked.is_empty() {
            return false;
        }
        let pages = self.geo.pages_covering(bytes);
        let Some(m) = self.mappings.get(&ino) else { return false };
        self.locked.iter().filter(|l| Some(l.holder) != except && l.ino == ino).any(|l| {
            l.folios.iter().filter(|f| f.start < pages.end && pages.start < f.end).any(|f| {
                m.folios.get(&f.start).is_none_or(|folio| (0..folio.blocks()).any(|i| !folio.is_uptodate(i)))
            })
        })
    }

    /// Whether anyone holds a folio lock of `ino`.
    pub fn holds_any_folio_lock(&self, ino: InodeNumber) -> bool {
        self.locked.iter().any(|l| l.ino == ino)
    }

    /// Whether `holder` holds a folio lock of `ino`.
    pub fn holds_folios(&self, holder: u64, ino: InodeNumber) -> bool {
        self.locked.iter().any(|l| l.holder == holder && l.ino == ino)
    }

    /// Inodes with a folio locked by a holder other than `except`, each
    /// once, lowest first.
    pub fn locked_inodes_except(&self, except: Option<u64>) -> Vec<InodeNumber> {
        let mut inodes: Vec<InodeNumber> = self.locked.iter().filter(|l| Some(l.holder) != except).map(|l| l.ino).collect();
        inodes.sort_unstable();
        inodes.dedup();
        inodes
    }

    /// Notes that `what` reached locked folios of `ino` in `pages`: a lock
    /// the scheduler's prediction missed.
    pub fn note_touch(&mut self, ino: InodeNumber, pages: Range<u64>, what: &'static str) {
        if let Some(l) = self.locked.iter().find(|l| l.overlaps(ino, &pages)) {
            let holder = l.holder;
            self.locked_touches.push(format!("{what} reached folio pages {}..{} of inode {ino}, locked by holder {holder} between its halves", pages.start, pages.end));
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
        assert!(pc.lock_dirty_folios(13, 1).is_none(), "nothing dirty, nothing locked");
        let locked = pc.lock_dirty_folios(12, 1).expect("one dirty folio");
        assert_eq!(locked.folios.first().cloned(), Some(1..2));
        assert!(pc.folios_locked(12, 4096..4097) && pc.folios_locked(12, 0..8192));
        assert!(!pc.folios_locked(12, 0..4096) && !pc.folios_locked(12, 8192..16384) && !pc.folios_locked(13, 4096..8192));
        // A write into the clean folio beside it is no touch; one into it is.
        assert!(pc.write_bytes(12, 0, &[1; 4096]));
        assert!(pc.take_locked_touches().is_empty());
        assert!(pc.write_bytes(12, 5000, &[1; 10]));
        pc.invalidate(12, 1..2);
        let touches = pc.take_locked_touches();
        assert_eq!(touches.len(), 2, "{touches:?}");
        assert!(pc.folios_locked_except(12, 0..u64::MAX, Some(2)) && !pc.folios_locked_except(12, 0..u64::MAX, Some(1)), "a holder's own locks left out");
        // A second holder locks the clean folio at byte 0.
        assert_eq!(pc.lock_folio_at(12, 100, 2).map(|l| l.folios.first().cloned()), Some(Some(0..1)));
        assert!(pc.lock_folio_at(12, 20 * 4096, 2).is_none(), "no folio cached there");
        assert_eq!(pc.locked_inodes_except(None), vec![12]);
        pc.unlock_folios(1);
        assert!(!pc.folios_locked(12, 4096..u64::MAX) && pc.folios_locked(12, 0..1));
        pc.unlock_folios(2);
        assert!(!pc.folios_locked(12, 0..u64::MAX));
        pc.drop_mapping(12);
        assert!(pc.take_locked_touches().is_empty());
    }
}
