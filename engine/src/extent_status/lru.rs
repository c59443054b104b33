//! Which inodes used their extent status cache least recently: the order
//! the shrinker (ext4's es_shrinker, run by memory reclaim) drops cached
//! mapped entries in. Delayed extents are never dropped: they are the only
//! record of reserved, unallocated data.

use std::collections::BTreeMap;

use crate::format::InodeNumber;

/// Inodes with cached entries, by last use (a counter, never a clock).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EsLru {
    tick: u64,
    by_ino: BTreeMap<InodeNumber, u64>,
    by_tick: BTreeMap<u64, InodeNumber>,
}

impl EsLru {
    /// `ino` used its cache now.
    pub fn touch(&mut self, ino: InodeNumber) {
        self.tick += 1;
        if let Some(old) = self.by_ino.insert(ino, self.tick) {
            self.by_tick.remove(&old);
        }
        self.by_tick.insert(self.tick, ino);
    }

    /// The least recently used inode, taken off the list.
    pub fn pop_oldest(&mut self) -> Option<InodeNumber> {
        let (_, ino) = self.by_tick.pop_first()?;
        self.by_ino.remove(&ino);
        Some(ino)
    }

    pub fn len(&self) -> usize {
        self.by_ino.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ino.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_use_comes_out_first_and_a_new_use_moves_an_inode_back() {
        let mut lru = EsLru::default();
        for ino in [12, 13, 14] {
            lru.touch(ino);
        }
        lru.touch(12);
        assert_eq!(lru.len(), 3);
        assert_eq!(lru.pop_oldest(), Some(13));
        assert_eq!(lru.pop_oldest(), Some(14));
        assert_eq!(lru.pop_oldest(), Some(12));
        assert_eq!(lru.pop_oldest(), None);
        assert!(lru.is_empty());
    }
}
