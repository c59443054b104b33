//! Which group a new inode goes to (ext4's ialloc.c policy, simplified).
//!
//! - Directories under the root (or a TOPDIR directory), with `orlov` on:
//!   spread over flex groups. The scan starts at the name's half MD4 hash
//!   (signed, with the superblock's hash seed) modulo the flex count and takes
//!   the flex with the fewest directories among those with at least average
//!   free inodes and blocks (find_group_orlov).
//! - Other directories: the first flex from the parent's onwards that is not
//!   crowded (under max_dirs, above min_inodes/min_blocks).
//! - Everything else (and directories with `orlov` off): the parent's flex,
//!   then any group with a free inode (find_group_other).
//!
//! The chosen group's first group with a free inode is returned.

use crate::dir::hash::{name_hash, DxHash};
use crate::format::GroupIndex;

use super::Allocator;

/// Sums over one flex group.
#[derive(Debug, Clone, Copy, Default)]
struct FlexStats {
    free_inodes: u64,
    free_blocks: u64,
    used_dirs: u64,
}

impl Allocator {
    fn flex_count(&self) -> u32 {
        self.geo.group_count.div_ceil(self.geo.flex_size())
    }

    fn flex_groups(&self, f: u32) -> std::ops::Range<GroupIndex> {
        let size = self.geo.flex_size();
        let first = f.saturating_mul(size);
        first..first.saturating_add(size).min(self.geo.group_count)
    }

    fn flex_stats(&self, f: u32) -> FlexStats {
        let mut s = FlexStats::default();
        for g in self.flex_groups(f) {
            let d = &self.descs[g as usize];
            s.free_inodes += u64::from(d.free_inodes);
            s.free_blocks += u64::from(d.free_blocks);
            s.used_dirs += u64::from(d.used_dirs);
        }
        s
    }

    /// First group of flex `f` with a free inode.
    fn first_with_free_inode(&self, f: u32) -> Option<GroupIndex> {
        self.flex_groups(f).find(|&g| self.descs[g as usize].free_inodes > 0)
    }

    /// Where find_group_orlov starts: ext4 hashes the name with half MD4
    /// whatever the filesystem's default hash.
    fn name_hash(&self, name: &[u8]) -> u32 {
        name_hash(DxHash::HalfMd4, name, &self.hash_seed).major
    }

    /// find_group_orlov for a directory whose parent is the root or TOPDIR.
    fn orlov_top(&self, name: &[u8]) -> Option<GroupIndex> {
        let nflex = self.flex_count();
        let avg_inodes = self.free_inodes / u64::from(nflex);
        let avg_blocks = self.free_clusters / u64::from(nflex);
        let start = self.name_hash(name) % nflex;
        let mut best: Option<(u32, u64)> = None;
        for i in 0..nflex {
            let f = (start + i) % nflex;
            let s = self.flex_stats(f);
            if s.free_inodes == 0 || s.free_inodes < avg_inodes || s.free_blocks < avg_blocks {
                continue;
            }
            if best.is_none_or(|(_, dirs)| s.used_dirs < dirs) {
                best = Some((f, s.used_dirs));
            }
        }
        best.and_then(|(f, _)| self.first_with_free_inode(f))
    }

    /// The nested-directory half of find_group_orlov.
    fn orlov_nested(&self, parent_group: GroupIndex) -> Option<GroupIndex> {
        let nflex = self.flex_count();
        let flex = u64::from(self.geo.flex_size());
        let ipg = u64::from(self.geo.inodes_per_group);
        let max_dirs = self.used_dirs / u64::from(nflex) + ipg * flex / 16;
        let min_inodes = (self.free_inodes / u64::from(nflex)).saturating_sub(ipg * flex / 4);
        let min_blocks = (self.free_clusters / u64::from(nflex)).saturating_sub(u64::from(self.geo.clusters_per_group()) * flex / 4);
        let pf = parent_group / self.geo.flex_size();
        (0..nflex).map(|i| (pf + i) % nflex).find_map(|f| {
            let s = self.flex_stats(f);
            let roomy = s.used_dirs < max_dirs && s.free_inodes >= min_inodes.max(1) && s.free_blocks >= min_blocks;
            if roomy {
                self.first_with_free_inode(f)
            } else {
                None
            }
        })
    }

    /// find_group_other: the parent's flex, then the next group with a free inode.
    fn find_group_other(&self, parent_group: GroupIndex) -> Option<GroupIndex> {
        let pf = parent_group / self.geo.flex_size();
        if let Some(g) = self.first_with_free_inode(pf) {
            return Some(g);
        }
        let n = self.geo.group_count;
        (0..n).map(|i| (parent_group + i) % n).find(|&g| self.descs[g as usize].free_inodes > 0)
    }

    /// The group a new inode should go to, or `None` if every group is full.
    pub fn choose_inode_group(&self, parent_group: GroupIndex, is_dir: bool, top_level: bool, name: &[u8]) -> Option<GroupIndex> {
        if self.free_inodes == 0 {
            return None;
        }
        let picked = match (is_dir && self.policy.orlov, top_level) {
            (true, true) => self.orlov_top(name),
            (true, false) => self.orlov_nested(parent_group),
            (false, _) => None,
        };
        picked.or_else(|| self.find_group_other(parent_group))
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::fresh;
    use ext4_model::AllocPolicy;

    #[test]
    fn top_level_directories_spread_over_flex_groups_files_stay_home() {
        // 1 KiB blocks, 256 MiB: 32 groups = 2 flex groups of 16.
        let (mut dev, mut a) = fresh(256 << 20, 1024, AllocPolicy::default());
        assert_eq!(a.choose_inode_group(0, false, true, b"file"), Some(0), "files stay in the parent's flex");
        let mut groups = std::collections::BTreeSet::new();
        for i in 0..30 {
            let name = format!("dir{i}");
            let g = a.alloc_inode(&mut dev, 2, true, true, name.as_bytes()).unwrap().unwrap().group;
            groups.insert(g);
        }
        assert_eq!(groups, [0, 16].into_iter().collect(), "Orlov uses both flexes, each at its first group");
        a.check_counts().unwrap();
        let (_dev, plain) = fresh(256 << 20, 1024, AllocPolicy { orlov: false, ..AllocPolicy::default() });
        for name in ["a", "b", "c", "d"] {
            assert_eq!(plain.choose_inode_group(0, true, true, name.as_bytes()), Some(0), "orlov off keeps dirs home");
        }
    }
}
