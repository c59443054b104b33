//! What the checker can find wrong, as data: each [`Problem`] names the
//! structure it is about (group, inode, block, directory path) and what is
//! wrong with it, so a simulator failure can be read without a hex dump.
//!
//! Variants follow e2fsck's problem codes loosely: one variant per thing a
//! caller may want to match on, with a `what` string where the detail only
//! matters to a human.

use std::fmt;
use std::ops::Range;

use crate::format::{BlockNumber, GroupIndex, InodeNumber};

/// How much a problem matters for [`super::CheckReport::is_clean`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Something e2fsck -fn ignores but e2fsck -fy would still change (a missing lost+found).
    Warning,
    /// A real inconsistency.
    Error,
}

/// Which of a group's two bitmaps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BitmapKind {
    Block,
    Inode,
}

impl fmt::Display for BitmapKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BitmapKind::Block => "block bitmap",
            BitmapKind::Inode => "inode bitmap",
        })
    }
}

/// The kinds of filesystem metadata a block can belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaKind {
    /// Block 0 of a 1 KiB-block filesystem (outside every group).
    BootBlock,
    /// A superblock copy with its group descriptor table and reserved GDT blocks.
    SuperAndGdt,
    BlockBitmap,
    InodeBitmap,
    InodeTable,
}

/// Who claims a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// Filesystem metadata of a group (see [`MetaKind`], kept as its index for ordering).
    Metadata { group: GroupIndex, kind: u8 },
    /// Data or extent-tree block of an inode.
    Inode(InodeNumber),
    /// An extended-attribute block (possibly shared by several inodes).
    Xattr,
}

impl Owner {
    pub fn metadata(group: GroupIndex, kind: MetaKind) -> Owner {
        Owner::Metadata { group, kind: kind as u8 }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Metadata { group, kind } => {
                let what = match *kind {
                    k if k == MetaKind::BootBlock as u8 => "boot block",
                    k if k == MetaKind::SuperAndGdt as u8 => "superblock/GDT",
                    k if k == MetaKind::BlockBitmap as u8 => "block bitmap",
                    k if k == MetaKind::InodeBitmap as u8 => "inode bitmap",
                    _ => "inode table",
                };
                write!(f, "{what} of group {group}")
            }
            Owner::Inode(ino) => write!(f, "inode {ino}"),
            Owner::Xattr => write!(f, "an xattr block"),
        }
    }
}

/// Most runs a [`Runs`] keeps; the total still counts every item.
pub const MAX_RUNS_KEPT: usize = 8;

/// A summary of a set of block or inode numbers: the first few runs and the total.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Runs {
    pub total: u64,
    pub runs: Vec<Range<u64>>,
}

impl Runs {
    /// Adds `n` (callers add in increasing order).
    pub fn push(&mut self, n: u64) {
        self.total = self.total.saturating_add(1);
        if let Some(last) = self.runs.last_mut() {
            if last.end == n {
                last.end = n.saturating_add(1);
                return;
            }
        }
        if self.runs.len() < MAX_RUNS_KEPT {
            self.runs.push(n..n.saturating_add(1));
        }
    }

    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

impl fmt::Display for Runs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = 0u64;
        for (i, r) in self.runs.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            let last = r.end.saturating_sub(1);
            if r.start == last {
                write!(f, "{sep}{}", r.start)?;
            } else {
                write!(f, "{sep}{}-{last}", r.start)?;
            }
            shown = shown.saturating_add(r.end.saturating_sub(r.start));
        }
        if shown < self.total {
            write!(f, " (+{} more)", self.total - shown)?;
        }
        Ok(())
    }
}

/// One inconsistency found by [`super::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// The superblock or geometry cannot be used; nothing else was checked.
    Unreadable { what: String },
    /// A read failed (device error, or a location outside the device).
    Io { block: BlockNumber, count: u64, what: String },
    SuperblockChecksum { stored: u32, computed: u32 },
    /// A superblock field is inconsistent (reserved count, orphan list, recovery flag...).
    Superblock { what: String },
    SuperblockFreeBlocks { stored: u64, counted: u64 },
    SuperblockFreeInodes { stored: u64, counted: u64 },
    /// The journal inode or journal superblock is wrong.
    Journal { what: String },

    GroupDescChecksum { group: GroupIndex, stored: u32, computed: u32 },
    /// A bitmap or inode table lies outside the filesystem or its group.
    GroupLayout { group: GroupIndex, what: String },
    /// UNINIT flags that cannot be right.
    GroupFlags { group: GroupIndex, what: String },
    GroupFreeBlocks { group: GroupIndex, stored: u32, counted: u32 },
    GroupFreeInodes { group: GroupIndex, stored: u32, counted: u32 },
    GroupUsedDirs { group: GroupIndex, stored: u32, counted: u32 },
    /// `bg_itable_unused` hides inodes the bitmap or a directory says are in use.
    ItableUnused { group: GroupIndex, itable_unused: u32, what: String },

    BitmapChecksum { group: GroupIndex, bitmap: BitmapKind, stored: u32, computed: u32 },
    /// Bits past the group's last item are not all set.
    BitmapPadding { group: GroupIndex, bitmap: BitmapKind },
    /// The block bitmap disagrees with what inodes and metadata use:
    /// `unmarked` are used but marked free, `unclaimed` are marked but unused.
    BlockBitmapDiffers { group: GroupIndex, unmarked: Runs, unclaimed: Runs },
    /// The inode bitmap disagrees with the inodes in use (runs of inode numbers).
    InodeBitmapDiffers { group: GroupIndex, unmarked: Runs, unclaimed: Runs },

    InodeChecksum { ino: InodeNumber, stored: u32, computed: u32 },
    /// A field of an inode is wrong (extra_isize, dtime, flags...).
    InodeField { ino: InodeNumber, what: String },
    /// The file type bits are not one of the seven types.
    InodeMode { ino: InodeNumber, mode: u16 },
    /// A reserved inode (below s_first_ino) is not as ext4 requires.
    ReservedInode { ino: InodeNumber, what: String },
    /// A node of an inode's extent tree is malformed (`block` 0 = the root in the inode).
    ExtentTree { ino: InodeNumber, block: BlockNumber, what: String },
    ExtentChecksum { ino: InodeNumber, block: BlockNumber, stored: u32, computed: u32 },
    /// An extent or tree node maps blocks outside the filesystem.
    BlockOutOfRange { ino: InodeNumber, logical: u64, physical: BlockNumber, len: u64 },
    /// Blocks claimed by two owners (two inodes, or an inode and metadata).
    MultiplyClaimed { first_block: BlockNumber, blocks: u64, a: Owner, b: Owner },
    /// `i_blocks` does not match the blocks the inode maps.
    BlockCount { ino: InodeNumber, stored: u64, counted: u64 },
    /// `i_size` is inconsistent with the mapped blocks.
    InodeSize { ino: InodeNumber, size: u64, what: String },
    Symlink { ino: InodeNumber, what: String },
    Xattr { ino: InodeNumber, block: BlockNumber, what: String },
    /// Something valid the checker cannot look inside (inline data...).
    Unsupported { ino: InodeNumber, what: String },

    /// A directory block does not parse (`lblk` is the logical block).
    DirBlock { dir: InodeNumber, lblk: u64, what: String },
    DirChecksum { dir: InodeNumber, lblk: u64, stored: u32, computed: u32 },
    /// "." or ".." is missing, misplaced or wrong.
    DotEntry { dir: InodeNumber, what: String },
    /// An entry names an impossible inode, or has a bad name.
    BadEntry { dir: InodeNumber, path: String, ino: InodeNumber, what: String },
    EntryToUnusedInode { dir: InodeNumber, path: String, ino: InodeNumber },
    FileType { dir: InodeNumber, path: String, ino: InodeNumber, stored: u8, expected: u8 },
    DuplicateName { dir: InodeNumber, path: String },
    /// A second name for a directory.
    DirHardLink { ino: InodeNumber, path: String },
    /// ".." does not point at the directory holding the entry.
    DotDot { dir: InodeNumber, stored: InodeNumber, expected: InodeNumber },
    /// `i_links_count` differs from the names (and subdirectories) found.
    LinkCount { ino: InodeNumber, stored: u16, counted: u64 },
    /// A directory not reachable from the root.
    UnconnectedDir { ino: InodeNumber },
    /// An in-use inode no directory names.
    Unattached { ino: InodeNumber },
    /// Root has no lost+found directory.
    NoLostFound,
}

impl Problem {
    pub fn severity(&self) -> Severity {
        match self {
            Problem::NoLostFound => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

fn name(path: &str) -> &str {
    if path.is_empty() {
        "?"
    } else {
        path
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Problem::*;
        match self {
            Unreadable { what } => write!(f, "filesystem unreadable: {what}"),
            Io { block, count, what } => write!(f, "cannot read blocks {block}+{count}: {what}"),
            SuperblockChecksum { stored, computed } => {
                write!(f, "superblock checksum {stored:#010x}, computed {computed:#010x}")
            }
            Superblock { what } => write!(f, "superblock: {what}"),
            SuperblockFreeBlocks { stored, counted } => {
                write!(f, "superblock free blocks count {stored}, counted {counted}")
            }
            SuperblockFreeInodes { stored, counted } => {
                write!(f, "superblock free inodes count {stored}, counted {counted}")
            }
            Journal { what } => write!(f, "journal: {what}"),
            GroupDescChecksum { group, stored, computed } => {
                write!(f, "group {group} descriptor checksum {stored:#06x}, computed {computed:#06x}")
            }
            GroupLayout { group, what } => write!(f, "group {group} layout: {what}"),
            GroupFlags { group, what } => write!(f, "group {group} flags: {what}"),
            GroupFreeBlocks { group, stored, counted } => {
                write!(f, "group {group} free blocks count {stored}, counted {counted}")
            }
            GroupFreeInodes { group, stored, counted } => {
                write!(f, "group {group} free inodes count {stored}, counted {counted}")
            }
            GroupUsedDirs { group, stored, counted } => {
                write!(f, "group {group} directories count {stored}, counted {counted}")
            }
            ItableUnused { group, itable_unused, what } => {
                write!(f, "group {group} itable_unused {itable_unused}: {what}")
            }
            BitmapChecksum { group, bitmap, stored, computed } => {
                write!(f, "group {group} {bitmap} checksum {stored:#010x}, computed {computed:#010x}")
            }
            BitmapPadding { group, bitmap } => write!(f, "group {group} {bitmap} padding is not set"),
            BlockBitmapDiffers { group, unmarked, unclaimed } => {
                write!(f, "group {group} block bitmap differences:")?;
                if !unmarked.is_empty() {
                    write!(f, " used but marked free +({unmarked})")?;
                }
                if !unclaimed.is_empty() {
                    write!(f, " marked used but free -({unclaimed})")?;
                }
                Ok(())
            }
            InodeBitmapDiffers { group, unmarked, unclaimed } => {
                write!(f, "group {group} inode bitmap differences:")?;
                if !unmarked.is_empty() {
                    write!(f, " in use but marked free +({unmarked})")?;
                }
                if !unclaimed.is_empty() {
                    write!(f, " marked in use but free -({unclaimed})")?;
                }
                Ok(())
            }
            InodeChecksum { ino, stored, computed } => {
                write!(f, "inode {ino} checksum {stored:#010x}, computed {computed:#010x}")
            }
            InodeField { ino, what } => write!(f, "inode {ino}: {what}"),
            InodeMode { ino, mode } => write!(f, "inode {ino} has invalid mode {mode:#o}"),
            ReservedInode { ino, what } => write!(f, "reserved inode {ino}: {what}"),
            ExtentTree { ino, block: 0, what } => write!(f, "inode {ino} extent tree root: {what}"),
            ExtentTree { ino, block, what } => write!(f, "inode {ino} extent block {block}: {what}"),
            ExtentChecksum { ino, block, stored, computed } => {
                write!(f, "inode {ino} extent block {block} checksum {stored:#010x}, computed {computed:#010x}")
            }
            BlockOutOfRange { ino, logical, physical, len } => {
                write!(f, "inode {ino} maps logical {logical} to blocks {physical}+{len} outside the filesystem")
            }
            MultiplyClaimed { first_block, blocks, a, b } => {
                write!(f, "{blocks} block(s) from {first_block} claimed by both {a} and {b}")
            }
            BlockCount { ino, stored, counted } => {
                write!(f, "inode {ino} i_blocks is {stored}, should be {counted}")
            }
            InodeSize { ino, size, what } => write!(f, "inode {ino} i_size {size}: {what}"),
            Symlink { ino, what } => write!(f, "symlink inode {ino}: {what}"),
            Xattr { ino, block, what } => write!(f, "inode {ino} xattr block {block}: {what}"),
            Unsupported { ino, what } => write!(f, "inode {ino} not checked: {what}"),
            DirBlock { dir, lblk, what } => write!(f, "directory {dir} block {lblk}: {what}"),
            DirChecksum { dir, lblk, stored, computed } => {
                write!(f, "directory {dir} block {lblk} checksum {stored:#010x}, computed {computed:#010x}")
            }
            DotEntry { dir, what } => write!(f, "directory {dir}: {what}"),
            BadEntry { dir, path, ino, what } => {
                write!(f, "entry {} (inode {ino}) in directory {dir}: {what}", name(path))
            }
            EntryToUnusedInode { dir, path, ino } => {
                write!(f, "entry {} in directory {dir} names unused inode {ino}", name(path))
            }
            FileType { dir, path, ino, stored, expected } => write!(
                f,
                "entry {} in directory {dir} has file type {stored}, inode {ino} is type {expected}",
                name(path)
            ),
            DuplicateName { dir, path } => write!(f, "duplicate entry {} in directory {dir}", name(path)),
            DirHardLink { ino, path } => write!(f, "{} is a second name for directory {ino}", name(path)),
            DotDot { dir, stored, expected } => {
                write!(f, "directory {dir} has '..' = {stored}, its parent is {expected}")
            }
            LinkCount { ino, stored, counted } => {
                write!(f, "inode {ino} links count {stored}, counted {counted}")
            }
            UnconnectedDir { ino } => write!(f, "directory {ino} is not reachable from the root"),
            Unattached { ino } => write!(f, "inode {ino} is in use but has no name"),
            NoLostFound => write!(f, "/lost+found is missing (warning)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_merge_and_count_what_they_drop() {
        let mut r = Runs::default();
        for n in [3, 4, 5, 9] {
            r.push(n);
        }
        assert_eq!(r.to_string(), "3-5 9");
        for n in 0..20u64 {
            r.push(100 + 2 * n);
        }
        assert_eq!(r.total, 24);
        assert_eq!(r.runs.len(), MAX_RUNS_KEPT);
        assert!(r.to_string().ends_with("(+14 more)"), "{r}");
    }

    #[test]
    fn display_names_the_structure() {
        let p = Problem::LinkCount { ino: 12, stored: 7, counted: 1 };
        assert_eq!(p.to_string(), "inode 12 links count 7, counted 1");
        let p = Problem::MultiplyClaimed { first_block: 5, blocks: 2, a: Owner::metadata(0, MetaKind::InodeTable), b: Owner::Inode(12) };
        assert_eq!(p.to_string(), "2 block(s) from 5 claimed by both inode table of group 0 and inode 12");
        assert_eq!(Problem::NoLostFound.severity(), Severity::Warning);
    }
}
