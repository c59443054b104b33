//! An ext4 implementation over a [`device::BlockDevice`], held to `ext4-model`
//! in lockstep by the simulator.
//!
//! Layers so far:
//! - [`device`], [`device_mem`], [`device_file`]: where bytes live.
//! - [`format`]: ext4's on-disk structures, parsed and written, with checksums.
//! - [`mkfs`]: builds a fresh filesystem, byte-identical for identical options.
//! - [`image`]: opens an existing image read-only and validates it.
//! - [`journal`]: jbd2 commits, checkpoints and recovery for inode 8.
//! - [`pagecache`], [`memory`], [`extent_status`]: the data path's page
//!   cache of folios, the allocator its memory comes from, and the delayed
//!   extents of delayed allocation.

#![forbid(unsafe_code)]

pub mod device;
pub mod device_file;
pub mod device_mem;
pub mod error;
pub mod format;
pub mod image;
pub mod layout;
pub mod mkfs;
pub mod range_set;
pub mod sync;
#[cfg(test)]
mod fixtures;

pub use error::{Corrupt, Error, Result};
pub mod alloc;
pub mod cache;
pub mod check;
pub mod dir;
pub mod extent_status;
pub mod extent_tree;
pub mod fs;
pub mod journal;
pub mod locking;
pub mod memory;
pub mod pagecache;

pub use fs::Ext4;
pub use layout::LayoutReport;
