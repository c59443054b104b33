//! The directory pass, htree part (e2fsck pass 2's index checks): the dx
//! root and nodes parse, their checksums verify, entries are in hash order,
//! every block past the root is referenced exactly once as a node or a
//! leaf, and every name in a leaf hashes into the range its index entry
//! gives it.

use std::collections::BTreeMap;

use crate::dir::htree::{DxIndex, Htree};
use crate::format::dx;
use crate::format::InodeNumber;

use super::problem::Problem;
use super::state::Checker;

/// What the directory read keeps of an htree directory for this check.
#[derive(Debug, Default)]
pub struct HtreeBlocks {
    root: Option<Vec<u8>>,
    /// The root's hash version, when it parses.
    version: Option<u8>,
    /// Blocks that start as a dx node does (an empty leaf without a tail
    /// does too; the index says which it is).
    nodes: BTreeMap<u32, Vec<u8>>,
    /// Each leaf's name hashes, under the root's hash version.
    leaves: BTreeMap<u32, Vec<(u32, Vec<u8>)>>,
}

impl HtreeBlocks {
    pub fn root<D: crate::device::BlockDevice>(&mut self, c: &Checker<D>, b: &[u8]) {
        self.root = Some(b.to_vec());
        self.version = dx::parse_root(b, c.csum_seed.is_some()).ok().map(|r| r.hash_version);
    }

    /// Keeps a block that looks like a dx node; true if it does.
    pub fn maybe_node(&mut self, lblk: u64, b: &[u8]) -> bool {
        let (Ok(l), true) = (u32::try_from(lblk), dx::is_node(b)) else { return false };
        self.nodes.insert(l, b.to_vec());
        true
    }

    /// Files a leaf's names by hash.
    pub fn leaf<D: crate::device::BlockDevice>(&mut self, c: &Checker<D>, lblk: u64, names: impl Iterator<Item = Vec<u8>>) {
        let (Some(version), Ok(l)) = (self.version, u32::try_from(lblk)) else { return };
        let p = Htree::of(&c.sb).hash;
        let hashes = names.filter_map(|n| Some((p.major(version, &n)?, n))).collect();
        self.leaves.insert(l, hashes);
    }
}

/// Judges one htree directory of `nblocks` blocks.
pub fn check<D: crate::device::BlockDevice>(c: &mut Checker<D>, dir: InodeNumber, nblocks: u64, seed: Option<u32>, blocks: HtreeBlocks) {
    let bad = |lblk: u64, what: String| Problem::DirBlock { dir, lblk, what: format!("htree: {what}") };
    let Some(root) = blocks.root else { return c.report(bad(0, "no dx root".into())) };
    let Ok(n) = u32::try_from(nblocks) else { return c.report(bad(0, format!("{nblocks} blocks"))) };
    let nodes = &blocks.nodes;
    let read = DxIndex::read(Htree::of(&c.sb), &root, seed, n, |b| nodes.get(&b).cloned().ok_or_else(|| format!("dx entry points at block {b}, which is no dx node")));
    let ix = match read {
        Ok(Some(ix)) => ix,
        Ok(None) => return c.report(bad(0, "the root names a hash version or a depth this filesystem cannot use".into())),
        Err(what) => return c.report(bad(0, what)),
    };
    let mut referenced = vec![false; n as usize];
    referenced[0] = true;
    for &b in nodes.keys().filter(|&&b| ix.is_node(b)) {
        referenced[b as usize] = true;
    }
    for (leaf, lo, hi) in ix.leaves() {
        referenced[leaf as usize] = true;
        for (h, name) in blocks.leaves.get(&leaf).into_iter().flatten() {
            if *h < lo || *h > hi {
                c.report(bad(u64::from(leaf), format!("{:?} hashes to {h:#010x}, outside its leaf's {lo:#010x}..={hi:#010x}", String::from_utf8_lossy(name))));
            }
        }
    }
    if let Some(b) = referenced.iter().position(|&r| !r) {
        c.report(bad(b as u64, "block not referenced by the index".into()));
    }
}
