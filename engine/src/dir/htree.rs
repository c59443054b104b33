//! htree (indexed) directories, as far as this engine goes today: their
//! leaves hold the names and are read like a linear directory's blocks, and
//! before the first edit the index is dropped, the way ext4 itself falls
//! back to a linear directory (clearing the INDEX flag) when an index is
//! unusable. Keeping the index up to date is the allocator issue's work.
//!
//! Block roles (ext4 layout): block 0 is the dx root, "." then a ".." whose
//! rec_len swallows the index; an interior dx node is one empty record
//! (inode 0) spanning the whole block, with the index inside it.

use crate::format::dirent::{self, DirEntry, FT_DIR};
use crate::format::InodeNumber;

/// What a block of an htree directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRole {
    /// The dx root: "." and "..", then index entries.
    Root,
    /// An interior index node: no names.
    Interior,
    /// Names, as in a linear directory.
    Leaf,
}

/// The role of logical block `lblk` of an htree directory, read from `b`.
pub fn role(lblk: usize, b: &[u8]) -> BlockRole {
    if lblk == 0 {
        return BlockRole::Root;
    }
    if crate::format::dx::is_node(b) {
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
}
