//! An inode's logical -> physical mapping and its on-disk extent tree.
//!
//! - [`map`]: the in-memory mapping, authoritative while mounted.
//! - [`encode`]: the on-disk tree rebuilt from the mapping at writeback,
//!   reusing the blocks the old tree held (i_blocks and the bitmaps count them).
//! - [`load`]: the on-disk tree read back, checked node by node.
//! - [`find`]: one uncached lookup in the on-disk tree (ext4_find_extent).

pub mod encode;
pub mod find;
pub mod load;
pub mod map;

pub use encode::{blocks_needed, disk_extents, encode, EncodedTree};
pub use load::{load, LoadedTree};
pub use map::{ExtentMap, Piece, Run};
