//! Preallocations: clusters mballoc found beyond what a request asked
//! for, kept in memory (never on disk: a crash or an unmount forgets
//! them) and used by the next requests.
//!
//! - An inode preallocation maps a window of logical clusters one to one
//!   onto physical ones, so a stream written in pieces lands contiguous.
//!   Dropped on the last close without delayed blocks, on truncate, punch
//!   and eviction (ext4_discard_preallocations).
//! - The locality group's preallocations are consumed from the front by
//!   small files, whichever the inode, the one nearest the goal first.
//!   Each order list (by free clusters) is trimmed to 5 when it passes 8
//!   (ext4_mb_add_n_trim). ext4 has a locality group per CPU; this
//!   engine runs on one.
//! - All of them are discarded when a request finds no free space.

use std::collections::BTreeMap;

use crate::format::{GroupIndex, InodeNumber};
use crate::range_set::RangeSet;

/// Order lists of the locality group (PREALLOC_TB_SIZE).
const LG_ORDERS: u32 = 10;
/// A list longer than this is trimmed ...
const LG_LIST_MAX: usize = 8;
/// ... down to this.
const LG_LIST_KEEP: usize = 5;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InodePa {
    pub group: GroupIndex,
    /// First cluster, group-relative.
    pub start: u32,
    pub len: u32,
    /// The logical cluster `start` belongs to.
    pub lstart: u64,
    /// Group-relative clusters not handed out yet.
    pub unused: RangeSet,
}

impl InodePa {
    pub fn logical(&self) -> (u64, u64) {
        (self.lstart, self.lstart + u64::from(self.len))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupPa {
    pub group: GroupIndex,
    /// Next cluster to hand out, group-relative.
    pub start: u32,
    pub free: u32,
    /// Insertion order within its list (newest last).
    seq: u64,
}

impl GroupPa {
    /// The order list it sits in (by free clusters).
    fn list(&self) -> u32 {
        (31 - self.free.max(1).leading_zeros()).min(LG_ORDERS - 1)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preallocations {
    inode: BTreeMap<InodeNumber, Vec<InodePa>>,
    group: Vec<GroupPa>,
    seq: u64,
}

/// Group-relative cluster ranges preallocations keep out of the free
/// space, per group.
pub type Reserved = BTreeMap<GroupIndex, Vec<(u32, u32)>>;

/// Clusters given back: (group, start, length).
pub type Returned = Vec<(GroupIndex, u32, u32)>;

impl Preallocations {
    pub fn is_empty(&self) -> bool {
        self.inode.is_empty() && self.group.is_empty()
    }

    pub fn inode_pas(&self, ino: InodeNumber) -> &[InodePa] {
        self.inode.get(&ino).map_or(&[], Vec::as_slice)
    }

    pub fn inode_pas_mut(&mut self, ino: InodeNumber) -> Option<&mut Vec<InodePa>> {
        self.inode.get_mut(&ino)
    }

    pub fn add_inode_pa(&mut self, ino: InodeNumber, pa: InodePa) {
        if !pa.unused.is_empty() {
            self.inode.entry(ino).or_default().push(pa);
        }
    }

    /// Drops the inode's preallocations whose clusters are all used.
    pub fn prune_inode(&mut self, ino: InodeNumber) {
        if let Some(v) = self.inode.get_mut(&ino) {
            v.retain(|p| !p.unused.is_empty());
            if v.is_empty() {
                self.inode.remove(&ino);
            }
        }
    }

    /// Removes the inode's preallocations; returns their unused clusters.
    pub fn take_inode(&mut self, ino: InodeNumber) -> Returned {
        let pas = self.inode.remove(&ino).unwrap_or_default();
        pas.iter().flat_map(|p| p.unused.iter_in(0..u64::MAX).map(move |r| (p.group, r.start as u32, (r.end - r.start) as u32))).collect()
    }

    /// Removes every preallocation; returns their unused clusters.
    pub fn take_all(&mut self) -> Returned {
        let inodes: Vec<InodeNumber> = self.inode.keys().copied().collect();
        let mut out: Vec<_> = inodes.into_iter().flat_map(|i| self.take_inode(i)).collect();
        out.extend(self.group.drain(..).map(|p| (p.group, p.start, p.free)));
        out
    }

    /// The locality group's preallocation to serve `len` clusters near
    /// `goal` (as absolute cluster numbers through `at`): enough free, the
    /// nearest, ties to the first in list order (ext4_mb_check_group_pa).
    pub fn pick_group_pa(&self, len: u32, goal: u64, at: impl Fn(&GroupPa) -> u64) -> Option<usize> {
        let mut order: Vec<usize> = (0..self.group.len()).filter(|&i| self.group[i].free >= len).collect();
        order.sort_by_key(|&i| (self.group[i].list(), self.group[i].free, self.group[i].seq));
        order.into_iter().min_by_key(|&i| at(&self.group[i]).abs_diff(goal))
    }

    pub fn group_pa(&self, i: usize) -> &GroupPa {
        &self.group[i]
    }

    /// Hands out `len` clusters from the front of group preallocation `i`;
    /// returns (group, start). Re-files what is left, trimming its list;
    /// returns the clusters trimmed preallocations gave back too.
    pub fn use_group_pa(&mut self, i: usize, len: u32) -> ((GroupIndex, u32), Returned) {
        let mut pa = self.group.remove(i);
        let got = (pa.group, pa.start);
        pa.start += len;
        pa.free -= len;
        let trimmed = if pa.free > 0 { self.add_group_pa(pa.group, pa.start, pa.free) } else { Vec::new() };
        (got, trimmed)
    }

    /// Files a new locality-group preallocation (ext4_mb_add_n_trim);
    /// returns what trimming its list discarded.
    pub fn add_group_pa(&mut self, group: GroupIndex, start: u32, free: u32) -> Returned {
        self.seq += 1;
        let pa = GroupPa { group, start, free, seq: self.seq };
        let list = pa.list();
        self.group.push(pa);
        let mut members: Vec<usize> = (0..self.group.len()).filter(|&i| self.group[i].list() == list).collect();
        if members.len() <= LG_LIST_MAX {
            return Vec::new();
        }
        // The newest stays (it is in use); the smallest go first.
        members.pop();
        members.sort_by_key(|&i| (self.group[i].free, self.group[i].seq));
        let drop = members.len() + 1 - LG_LIST_KEEP;
        let mut gone: Vec<usize> = members.into_iter().take(drop).collect();
        gone.sort_unstable_by(|a, b| b.cmp(a));
        gone.into_iter().map(|i| self.group.remove(i)).map(|p| (p.group, p.start, p.free)).collect()
    }

    /// Every range preallocations keep, per group.
    pub fn reserved(&self) -> Reserved {
        let mut out = Reserved::new();
        for p in self.inode.values().flatten() {
            for r in p.unused.iter_in(0..u64::MAX) {
                out.entry(p.group).or_default().push((r.start as u32, (r.end - r.start) as u32));
            }
        }
        for p in &self.group {
            out.entry(p.group).or_default().push((p.start, p.free));
        }
        out
    }

    /// Clusters held by preallocations.
    pub fn clusters(&self) -> u64 {
        self.reserved().values().flatten().map(|&(_, l)| u64::from(l)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lists_are_trimmed_to_five_when_past_eight() {
        let mut p = Preallocations::default();
        let mut gave_back = Vec::new();
        for i in 0..9u32 {
            gave_back.extend(p.add_group_pa(0, i * 600, 300 + i));
        }
        // All nine sit in list 8 (256..511 free): the ninth trims it.
        assert_eq!(gave_back.len(), 4, "{gave_back:?}");
        assert_eq!(p.group.len(), 5);
        assert!(p.group.iter().any(|g| g.free == 308), "the newest stays");
        assert!(gave_back.iter().all(|&(_, _, f)| f < 304), "the smallest go");
    }

    #[test]
    fn the_nearest_preallocation_with_room_serves() {
        let mut p = Preallocations::default();
        p.add_group_pa(0, 0, 10);
        p.add_group_pa(3, 0, 500);
        p.add_group_pa(9, 0, 500);
        let at = |g: &GroupPa| u64::from(g.group) * 1000 + u64::from(g.start);
        let i = p.pick_group_pa(16, 8_000, at).unwrap();
        assert_eq!(p.group_pa(i).group, 9);
        let i = p.pick_group_pa(4, 0, at).unwrap();
        assert_eq!(p.group_pa(i).group, 0);
        let ((g, s), _) = p.use_group_pa(i, 4);
        assert_eq!((g, s), (0, 0));
        assert_eq!(p.pick_group_pa(7, 0, at).map(|i| p.group_pa(i).group), Some(3), "6 left is too few for 7");
    }
}
