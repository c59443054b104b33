//! ext4's on-disk structures, one per file: how each is laid out in bytes, how
//! it is parsed (validating every field a reader relies on) and written back,
//! and how its checksum is computed. Nothing here touches a device.

// Everything here turns disk bytes into numbers: conversions are checked.
#![deny(clippy::as_conversions)]

pub mod bitmap;
pub(crate) mod bytes;
pub mod checksum;
pub mod dirent;
pub mod dx;
pub mod extent;
pub mod features;
pub mod geometry;
pub mod group_desc;
pub mod inode;
pub mod journal_superblock;
pub mod superblock;

/// Index of a block group.
pub type GroupIndex = u32;
/// Inode number (1-based; 0 means "no inode").
pub type InodeNumber = u32;
/// Physical block number on the device.
pub type BlockNumber = u64;
