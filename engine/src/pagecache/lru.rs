//! The page cache's LRU list: every folio by its last use, oldest first, so
//! reclaim evicts clean folios nobody touched for longest and picks the
//! inode whose dirty folio is oldest to write back.
//!
//! A use stamps the folio with the next value of a counter (never the
//! clock), so the order is the same on every run.

use std::collections::BTreeMap;

use crate::format::InodeNumber;

/// A folio's place: its inode and first page index.
pub type FolioKey = (InodeNumber, u64);

#[derive(Clone, Debug, Default)]
pub struct Lru {
    next_stamp: u64,
    by_stamp: BTreeMap<u64, FolioKey>,
}

impl Lru {
    /// Records a use of `key`, whose previous stamp was `old` (0: new);
    /// returns its new stamp.
    pub fn touch(&mut self, old: u64, key: FolioKey) -> u64 {
        if old != 0 {
            self.by_stamp.remove(&old);
        }
        self.next_stamp += 1;
        self.by_stamp.insert(self.next_stamp, key);
        self.next_stamp
    }

    /// Forgets the folio stamped `stamp` (evicted or dropped).
    pub fn remove(&mut self, stamp: u64) {
        self.by_stamp.remove(&stamp);
    }

    /// Folios from least to most recently used.
    pub fn oldest_first(&self) -> impl Iterator<Item = (u64, FolioKey)> + '_ {
        self.by_stamp.iter().map(|(s, k)| (*s, *k))
    }

    pub fn len(&self) -> usize {
        self.by_stamp.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_stamp.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_use_moves_a_folio_to_the_young_end() {
        let mut lru = Lru::default();
        let a = lru.touch(0, (12, 0));
        let b = lru.touch(0, (12, 4));
        let _c = lru.touch(0, (13, 0));
        let a2 = lru.touch(a, (12, 0));
        let order: Vec<FolioKey> = lru.oldest_first().map(|(_, k)| k).collect();
        assert_eq!(order, vec![(12, 4), (13, 0), (12, 0)]);
        lru.remove(b);
        lru.remove(a2);
        assert_eq!(lru.len(), 1);
    }
}
