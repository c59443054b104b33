//! htree (indexed) directories: the dx root and dx nodes held in memory,
//! the path a name's hash takes through them (dx_probe), and the index
//! splits of ext4_dx_add_entry. Leaves and their splits are the
//! directory's ([`super::Directory`]); the index only routes hashes.
//!
//! - A root holds up to `root_limit` entries, a node `node_limit`; entry 0
//!   of each covers hashes below entry 1's. Entries point at leaves when
//!   the block sits `indirect_levels` below the root, at nodes above that.
//! - Without `large_dir` the index has at most two levels (root and one
//!   level of nodes), with it three (docs/htree.md).
//! - An index ext4 itself would not use (a hash version it does not know,
//!   more levels than allowed) is kept read-only: ext4 falls back to a
//!   linear scan of such a directory and drops the index on its next edit,
//!   and so does this engine ([`Fallback`]).
//!
//! Block roles in a directory the index is dropped from (ext4 layout):
//! block 0 is the dx root, "." then a ".." whose rec_len swallows the
//! index; an interior dx node is one empty record spanning the whole block.

use std::collections::BTreeMap;

use crate::format::dirent::{self, DirEntry, FT_DIR};
use crate::format::dx::{self, DxEntry, DxRoot, HASH_CONTINUED, NODE_COUNT_AT, ROOT_COUNT_AT};
use crate::format::features::feature;
use crate::format::superblock::Superblock;
use crate::format::InodeNumber;

use super::hash::HashPolicy;

/// Levels an index may have, root included: `EXT4_HTREE_LEVEL_COMPAT`,
/// and `EXT4_HTREE_LEVEL` with `large_dir`.
pub const LEVELS_COMPAT: u8 = 2;
pub const LEVELS_LARGEDIR: u8 = 3;

/// How this filesystem indexes directories (it has `dir_index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Htree {
    pub hash: HashPolicy,
    /// Index levels allowed, root included.
    pub max_levels: u8,
}

impl Htree {
    /// The superblock's hashing, and the levels `large_dir` allows.
    pub fn of(sb: &Superblock) -> Self {
        let levels = if sb.feature_incompat & feature::INCOMPAT_LARGEDIR != 0 { LEVELS_LARGEDIR } else { LEVELS_COMPAT };
        Htree { hash: HashPolicy::of(sb), max_levels: levels }
    }
}

/// One step of a probe: the index block (None for the root) and the entry
/// the hash goes through there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub node: Option<u32>,
    pub at: usize,
}

/// What a full leaf needs before a name fits (ext4_dx_add_entry's choice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Growth {
    /// The leaf's parent has room: split the leaf.
    SplitLeaf,
    /// The frame at this depth is full and its parent is not: split it.
    SplitNode { depth: usize },
    /// Every index block on the path is full: push the root's entries down.
    AddLevel,
    /// Full at the deepest level allowed: ENOSPC.
    Full,
}

/// A directory's index, as the blocks say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxIndex {
    /// The root's `hash_version` byte.
    version: u8,
    /// `indirect_levels`: node levels below the root.
    levels: u8,
    root: Vec<DxEntry>,
    /// Interior nodes by logical block.
    nodes: BTreeMap<u32, Vec<DxEntry>>,
    root_limit: usize,
    node_limit: usize,
    policy: Htree,
}

/// Where an index stops making sense, as a sentence.
type Why = String;

impl DxIndex {
    /// The index make_indexed_dir starts: one leaf, `first_leaf`, under the root.
    pub fn start(policy: Htree, block_size: usize, csum: bool, first_leaf: u32) -> Self {
        DxIndex {
            version: policy.hash.default_version,
            levels: 0,
            root: vec![DxEntry { hash: 0, block: first_leaf }],
            nodes: BTreeMap::new(),
            root_limit: dx::limit(block_size, ROOT_COUNT_AT, csum),
            node_limit: dx::limit(block_size, NODE_COUNT_AT, csum),
            policy,
        }
    }

    /// Reads the index from the root block and the nodes it reaches
    /// (`block(lblk)` reads one directory block; `nblocks` bounds them).
    /// `Ok(None)`: an index ext4 would fall back from (see the module).
    /// `Err`: a damaged index (bad checksum or structure).
    pub fn read(
        policy: Htree,
        root_block: &[u8],
        seed: Option<u32>,
        nblocks: u32,
        mut block: impl FnMut(u32) -> Result<Vec<u8>, Why>,
    ) -> Result<Option<Self>, Why> {
        let csum = seed.is_some();
        let root = dx::parse_root(root_block, csum)?;
        if policy.hash.function(root.hash_version).is_none() || root.indirect_levels >= policy.max_levels {
            return Ok(None);
        }
        check_sum(root_block, ROOT_COUNT_AT, seed, "dx root")?;
        let bs = root_block.len();
        let mut ix = DxIndex {
            version: root.hash_version,
            levels: root.indirect_levels,
            root: root.entries,
            nodes: BTreeMap::new(),
            root_limit: dx::limit(bs, ROOT_COUNT_AT, csum),
            node_limit: dx::limit(bs, NODE_COUNT_AT, csum),
            policy,
        };
        let mut seen = vec![false; nblocks as usize];
        let mut level: Vec<u32> = ix.root.iter().map(|e| e.block).collect();
        for depth in 0..=ix.levels {
            let mut next = Vec::new();
            for b in level {
                let slot = seen.get_mut(b as usize).filter(|_| b != 0).ok_or_else(|| format!("dx entry points at block {b} of {nblocks}"))?;
                if std::mem::replace(slot, true) {
                    return Err(format!("dx entries point at block {b} twice"));
                }
                if depth < ix.levels {
                    let bytes = block(b)?;
                    let entries = dx::parse_node(&bytes, csum).map_err(|w| format!("dx node {b}: {w}"))?;
                    check_sum(&bytes, NODE_COUNT_AT, seed, "dx node")?;
                    next.extend(entries.iter().map(|e| e.block));
                    ix.nodes.insert(b, entries);
                }
            }
            level = next;
        }
        Ok(Some(ix))
    }

    /// The major hash of `name` under this index's function.
    pub fn hash(&self, name: &[u8]) -> u32 {
        // `read` and `start` only keep versions the policy knows.
        self.policy.hash.major(self.version, name).unwrap_or(0)
    }

    pub fn levels(&self) -> u8 {
        self.levels
    }

    fn entries(&self, node: Option<u32>) -> Option<&Vec<DxEntry>> {
        match node {
            None => Some(&self.root),
            Some(b) => self.nodes.get(&b),
        }
    }

    fn entries_mut(&mut self, node: Option<u32>) -> Option<&mut Vec<DxEntry>> {
        match node {
            None => Some(&mut self.root),
            Some(b) => self.nodes.get_mut(&b),
        }
    }

    fn limit(&self, node: Option<u32>) -> usize {
        if node.is_none() { self.root_limit } else { self.node_limit }
    }

    /// dx_probe: the frames from the root down and the leaf `hash` belongs in.
    pub fn probe(&self, hash: u32) -> Option<(Vec<Frame>, u32)> {
        let mut frames = Vec::with_capacity(usize::from(self.levels) + 1);
        let mut node = None;
        loop {
            let entries = self.entries(node)?;
            let at = dx::route(entries, hash);
            frames.push(Frame { node, at });
            let block = entries.get(at)?.block;
            if frames.len() > usize::from(self.levels) {
                return Some((frames, block));
            }
            node = Some(block);
        }
    }

    /// Whether a lookup of `hash` reads `leaf`: the leaf dx_probe reaches,
    /// or one after it whose index entry carries the same hash (a run of
    /// collisions split across leaves, which ext4_htree_next_block follows).
    pub fn reaches(&self, hash: u32, leaf: u32) -> bool {
        let Some((mut frames, first)) = self.probe(hash) else { return false };
        if first == leaf {
            return true;
        }
        while let Some((next_hash, next)) = self.next_leaf(&mut frames) {
            if next_hash & !HASH_CONTINUED != hash & !HASH_CONTINUED {
                return false;
            }
            if next == leaf {
                return true;
            }
        }
        false
    }

    /// Moves `frames` to the next leaf in hash order: its index entry's
    /// hash (at the level that moved) and the leaf.
    fn next_leaf(&self, frames: &mut [Frame]) -> Option<(u32, u32)> {
        let mut depth = frames.len().checked_sub(1)?;
        while frames[depth].at + 1 >= self.entries(frames[depth].node)?.len() {
            depth = depth.checked_sub(1)?;
        }
        frames[depth].at += 1;
        let hash = self.entries(frames[depth].node)?[frames[depth].at].hash;
        for d in depth + 1..frames.len() {
            let parent = frames[d - 1];
            frames[d] = Frame { node: Some(self.entries(parent.node)?[parent.at].block), at: 0 };
        }
        let last = *frames.last()?;
        Some((hash, self.entries(last.node)?[last.at].block))
    }

    /// What must happen before the leaf at the end of `frames` can split.
    pub fn growth(&self, frames: &[Frame]) -> Growth {
        let full = |f: &Frame| self.entries(f.node).is_none_or(|e| e.len() >= self.limit(f.node));
        let Some(last) = frames.last() else { return Growth::Full };
        if !full(last) {
            return Growth::SplitLeaf;
        }
        for depth in (0..frames.len() - 1).rev() {
            if !full(&frames[depth]) {
                return Growth::SplitNode { depth: depth + 1 };
            }
        }
        if frames.len() >= usize::from(self.policy.max_levels) { Growth::Full } else { Growth::AddLevel }
    }

    /// dx_insert_block: `block` now holds the hashes from `hash` on, after
    /// the entry `frame` went through. Returns the index block changed.
    pub fn insert_after(&mut self, frame: Frame, hash: u32, block: u32) -> Option<Option<u32>> {
        let limit = self.limit(frame.node);
        let entries = self.entries_mut(frame.node)?;
        if entries.len() >= limit {
            return None;
        }
        entries.insert(frame.at + 1, DxEntry { hash, block });
        Some(frame.node)
    }

    /// Splits the full index block at `frames[depth]` (depth ≥ 1) in half by
    /// count into the empty block `new`, and tells its parent. Returns the
    /// index blocks changed.
    pub fn split_node(&mut self, frames: &[Frame], depth: usize, new: u32) -> Option<Vec<Option<u32>>> {
        let frame = *frames.get(depth)?;
        let parent = *frames.get(depth.checked_sub(1)?)?;
        let old = frame.node?;
        let entries = self.nodes.get_mut(&old)?;
        let keep = entries.len() / 2;
        let mut moved = entries.split_off(keep);
        // Entry 0's hash is not stored: the count and limit sit there.
        let hash = std::mem::take(&mut moved.first_mut()?.hash);
        self.nodes.insert(new, moved);
        self.insert_after(parent, hash, new)?;
        Some(vec![parent.node, Some(old), Some(new)])
    }

    /// Moves the root's entries into the empty block `new`, which the root
    /// then points at alone: one more level.
    pub fn add_level(&mut self, new: u32) -> Vec<Option<u32>> {
        let moved = std::mem::replace(&mut self.root, vec![DxEntry { hash: 0, block: new }]);
        self.nodes.insert(new, moved);
        self.levels += 1;
        vec![None, Some(new)]
    }

    /// Whether `lblk` is an interior node.
    pub fn is_node(&self, lblk: u32) -> bool {
        self.nodes.contains_key(&lblk)
    }

    /// The bytes of index block `which` (None: the root, with "." and "..").
    pub fn block_bytes(&self, which: Option<u32>, block_size: usize, ino: InodeNumber, parent: InodeNumber, seed: Option<u32>) -> Result<Vec<u8>, Why> {
        match which {
            None => dx::write_root(
                &DxRoot { dot: ino, dotdot: parent, hash_version: self.version, indirect_levels: self.levels, entries: self.root.clone() },
                block_size,
                seed,
            ),
            Some(b) => dx::write_node(self.nodes.get(&b).ok_or_else(|| format!("no dx node at block {b}"))?, block_size, seed),
        }
    }

    /// Every leaf with the hashes it may hold: (leaf, lowest, highest), the
    /// bounds as e2fsck reads them (collision bits cleared; the last leaf
    /// ends at the EOF hash).
    pub fn leaves(&self) -> Vec<(u32, u32, u32)> {
        let mut out = Vec::new();
        self.collect(None, 0, !HASH_CONTINUED, &mut out);
        out
    }

    fn collect(&self, node: Option<u32>, lo: u32, hi: u32, out: &mut Vec<(u32, u32, u32)>) {
        let Some(entries) = self.entries(node) else { return };
        for (i, e) in entries.iter().enumerate() {
            let from = if i == 0 { lo } else { e.hash & !HASH_CONTINUED };
            let to = entries.get(i + 1).map_or(hi, |n| n.hash & !HASH_CONTINUED);
            if self.nodes.contains_key(&e.block) {
                self.collect(Some(e.block), from, to, out);
            } else {
                out.push((e.block, from, to));
            }
        }
    }
}

fn check_sum(b: &[u8], count_at: usize, seed: Option<u32>, what: &str) -> Result<(), Why> {
    if let Some(s) = seed {
        let (stored, computed) = (dx::stored_checksum(b, count_at), dx::checksum(b, count_at, s));
        if stored != computed {
            return Err(format!("{what} checksum {stored:#010x}, computed {computed:#010x}"));
        }
    }
    Ok(())
}

/// What a block of an htree directory holds, in an index being dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRole {
    /// The dx root: "." and "..", then index entries.
    Root,
    /// An interior index node: no names.
    Interior,
    /// Names, as in a linear directory.
    Leaf,
}

/// An index this engine reads through its leaves and drops on the first
/// edit: the index blocks and their roles.
pub type Fallback = Vec<(usize, BlockRole)>;

/// The role of logical block `lblk` of an htree directory, read from `b`.
pub fn role(lblk: usize, b: &[u8]) -> BlockRole {
    if lblk == 0 {
        return BlockRole::Root;
    }
    if dx::is_node(b) {
        BlockRole::Interior
    } else {
        BlockRole::Leaf
    }
}

/// The linear replacement of an index block: block 0 holds "." and "..",
/// an interior node becomes an empty block.
pub fn linear_block(role: BlockRole, block_size: usize, ino: InodeNumber, parent: InodeNumber, seed: Option<u32>) -> Option<Vec<u8>> {
    let dot = |inode: u32, name: &str| DirEntry { inode, file_type: FT_DIR, name: name.as_bytes().to_vec() };
    match role {
        BlockRole::Root => dirent::build_block(block_size, &[dot(ino, "."), dot(parent, "..")], seed),
        BlockRole::Interior => dirent::build_block(block_size, &[], seed),
        BlockRole::Leaf => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_levels: u8) -> Htree {
        Htree { hash: HashPolicy { seed: [9; 16], default_version: 1, unsigned: false }, max_levels }
    }

    #[test]
    fn roles_follow_the_dx_layout_and_replacements_parse_as_linear_blocks() {
        let bs = 1024;
        let seed = Some(7);
        let root = linear_block(BlockRole::Root, bs, 12, 2, seed).unwrap();
        assert_eq!(role(0, &root), BlockRole::Root);
        let parsed = dirent::parse_block(&root, true).unwrap();
        let names: Vec<&[u8]> = parsed.entries.iter().map(|e| e.name.as_slice()).collect();
        assert_eq!(names, [&b"."[..], &b".."[..]]);
        // An interior dx node: inode 0, rec_len the whole block.
        let mut interior = vec![0u8; bs];
        interior[4..6].copy_from_slice(&u16::try_from(bs).unwrap().to_le_bytes());
        assert_eq!(role(3, &interior), BlockRole::Interior);
        let empty = linear_block(BlockRole::Interior, bs, 12, 2, seed).unwrap();
        assert!(dirent::parse_block(&empty, true).unwrap().entries.is_empty());
        // An empty leaf has a tail, so its first record does not span the block.
        assert_eq!(role(3, &empty), BlockRole::Leaf);
        assert_eq!(linear_block(BlockRole::Leaf, bs, 12, 2, seed), None);
    }

    /// Fills the root, pushes it down a level, splits a node, and reads the
    /// written blocks back to the same index.
    #[test]
    fn index_splits_and_levels_round_trip_through_their_blocks() {
        let bs = 1024;
        let seed = Some(0x5eed);
        let mut ix = DxIndex::start(policy(LEVELS_COMPAT), bs, true, 1);
        let mut next = 2u32;
        // Leaves with rising hashes until the root is full.
        while ix.growth(&ix.probe(u32::MAX - 1).unwrap().0) == Growth::SplitLeaf {
            let (frames, _) = ix.probe(u32::MAX - 1).unwrap();
            ix.insert_after(*frames.last().unwrap(), next << 20, next).unwrap();
            next += 1;
        }
        assert_eq!(ix.root.len(), ix.root_limit);
        assert_eq!(ix.growth(&ix.probe(0).unwrap().0), Growth::AddLevel);
        ix.add_level(next);
        next += 1;
        assert_eq!(ix.levels(), 1);
        assert_eq!(ix.growth(&ix.probe(0).unwrap().0), Growth::SplitLeaf, "a node holds more than a root");
        // Fill that one node, then it splits under the root.
        while ix.growth(&ix.probe(u32::MAX - 1).unwrap().0) == Growth::SplitLeaf {
            let (frames, _) = ix.probe(u32::MAX - 1).unwrap();
            ix.insert_after(*frames.last().unwrap(), next << 20, next).unwrap();
            next += 1;
        }
        let (frames, _) = ix.probe(u32::MAX - 1).unwrap();
        assert_eq!(ix.growth(&frames), Growth::SplitNode { depth: 1 });
        let changed = ix.split_node(&frames, 1, next).unwrap();
        assert_eq!(changed.len(), 3);
        assert_eq!(ix.root.len(), 2);
        let leaves = ix.leaves();
        assert!(leaves.windows(2).all(|w| w[0].2 == w[1].1 && w[0].1 <= w[1].1), "leaf ranges tile the hash space");
        for &(leaf, lo, hi) in &leaves {
            assert_eq!(ix.probe(lo).unwrap().1, leaf);
            assert!(hi < 2 || ix.probe(hi - 2).unwrap().1 == leaf || lo == hi);
        }

        let nblocks = next + 1;
        let mut blocks: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for &n in ix.nodes.keys() {
            blocks.insert(n, ix.block_bytes(Some(n), bs, 12, 2, seed).unwrap());
        }
        let root = ix.block_bytes(None, bs, 12, 2, seed).unwrap();
        let back = DxIndex::read(policy(LEVELS_COMPAT), &root, seed, nblocks, |b| blocks.get(&b).cloned().ok_or("no such block".into())).unwrap().unwrap();
        assert_eq!(back, ix);
        // A flipped byte in a node is a damaged index.
        let victim = *ix.nodes.keys().next().unwrap();
        blocks.get_mut(&victim).unwrap()[NODE_COUNT_AT + 12] ^= 1;
        let err = DxIndex::read(policy(LEVELS_COMPAT), &root, seed, nblocks, |b| blocks.get(&b).cloned().ok_or("no such block".into())).unwrap_err();
        assert!(err.contains("checksum"), "{err}");
        // With the second level full of full nodes, compat has nowhere to go.
        let full = DxIndex { levels: 1, root: vec![DxEntry { hash: 0, block: 1 }; ix.root_limit], ..ix.clone() };
        let frames = vec![Frame { node: None, at: 0 }, Frame { node: Some(1), at: 0 }];
        let mut full = full;
        full.nodes.insert(1, vec![DxEntry { hash: 0, block: 2 }; full.node_limit]);
        assert_eq!(full.growth(&frames), Growth::Full);
        full.policy = policy(LEVELS_LARGEDIR);
        assert_eq!(full.growth(&frames), Growth::AddLevel, "large_dir allows a third level");
    }

    #[test]
    fn lookups_follow_a_collision_run_into_the_next_leaves_and_no_further() {
        let mut ix = DxIndex::start(policy(LEVELS_COMPAT), 1024, false, 1);
        ix.levels = 1;
        ix.root = vec![DxEntry { hash: 0, block: 10 }, DxEntry { hash: 500, block: 11 }];
        ix.nodes.insert(10, vec![DxEntry { hash: 0, block: 1 }, DxEntry { hash: 400, block: 2 }]);
        // Leaf 3 continues hash 500 from leaf 2 across the node boundary; leaf 4 does not.
        ix.nodes.insert(11, vec![DxEntry { hash: 0, block: 3 }, DxEntry { hash: 600, block: 4 }]);
        ix.root[1].hash = 400 | HASH_CONTINUED;
        assert!(ix.reaches(400, 2));
        assert!(ix.reaches(400, 3), "the next leaf's entry carries the same hash");
        assert!(!ix.reaches(400, 4));
        assert!(ix.reaches(402, 3) && !ix.reaches(402, 2), "a different hash stops at its own leaf");
        assert!(ix.reaches(10, 1) && !ix.reaches(10, 2));
    }

    #[test]
    fn unknown_hash_versions_and_deep_roots_fall_back() {
        let ix = DxIndex::start(policy(LEVELS_COMPAT), 4096, false, 1);
        let mut root = ix.block_bytes(None, 4096, 12, 2, None).unwrap();
        root[0x18 + 4] = 6; // siphash (casefold): not modelled
        assert_eq!(DxIndex::read(policy(LEVELS_COMPAT), &root, None, 2, |_| Err("unread".into())), Ok(None));
    }
}
