//! The op vocabulary every side speaks: the model, the engine, the kernel oracle,
//! the workload generator and the fuzz targets.
//!
//! Ops name files by absolute path; each data op stands for open + syscall +
//! close. Write payloads are a seeded pattern so a trace stays small.

use std::fmt;

use crate::Errno;

pub use crate::pattern::{pattern, pattern_into};

mod memory;
mod seek;
mod text;

pub use memory::CutShort;
pub use seek::{SeekChoices, SeekWhence};

/// Longest file name component (EXT4_NAME_LEN).
pub const NAME_MAX: usize = 255;
/// Longest path including its NUL (PATH_MAX).
pub const PATH_MAX: usize = 4096;
/// The test bed's cap on one read or write; larger requests are EINVAL.
pub const MAX_IO_LEN: u32 = 16 << 20;
/// ext4's link limit for a non-directory (EXT4_LINK_MAX).
pub const LINK_MAX: u32 = 65000;
/// Descriptor slots a run may hold open across ops (`open ... slot=N`);
/// a slot number at or above this is EBADF everywhere.
pub const FD_SLOTS: u8 = 4;
/// The alignment direct I/O's offset and length need: the logical block
/// size of the devices the test bed runs on (the simulated disk, loop
/// devices, virtio-blk), checked by iomap per mapped extent.
pub const DIO_ALIGN: u64 = 512;

/// fallocate(2) mode bits, kept raw so that invalid combinations can be asked for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, arbitrary::Arbitrary)]
pub struct FallocFlags(pub u32);

impl FallocFlags {
    pub const ALLOCATE: FallocFlags = FallocFlags(0);
    pub const KEEP_SIZE: u32 = 0x01;
    pub const PUNCH_HOLE: u32 = 0x02;
    pub const COLLAPSE_RANGE: u32 = 0x08;
    pub const ZERO_RANGE: u32 = 0x10;
    pub const INSERT_RANGE: u32 = 0x20;
    pub const UNSHARE_RANGE: u32 = 0x40;
    pub const WRITE_ZEROES: u32 = 0x80;
    /// Bits that select the operation (FALLOC_FL_MODE_MASK); KEEP_SIZE modifies.
    pub const MODE_MASK: u32 = Self::PUNCH_HOLE
        | Self::COLLAPSE_RANGE
        | Self::ZERO_RANGE
        | Self::INSERT_RANGE
        | Self::UNSHARE_RANGE
        | Self::WRITE_ZEROES;

    pub fn keep_size(self) -> bool {
        self.0 & Self::KEEP_SIZE != 0
    }
}

impl fmt::Debug for FallocFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::KEEP_SIZE, "KEEP_SIZE"),
            (Self::PUNCH_HOLE, "PUNCH_HOLE"),
            (Self::COLLAPSE_RANGE, "COLLAPSE_RANGE"),
            (Self::ZERO_RANGE, "ZERO_RANGE"),
            (Self::INSERT_RANGE, "INSERT_RANGE"),
            (Self::UNSHARE_RANGE, "UNSHARE_RANGE"),
            (Self::WRITE_ZEROES, "WRITE_ZEROES"),
        ];
        let mut parts: Vec<String> = names.iter().filter(|(b, _)| self.0 & b != 0).map(|(_, n)| n.to_string()).collect();
        let known = names.iter().fold(0, |acc, (b, _)| acc | b);
        if self.0 & !known != 0 {
            parts.push(format!("{:#x}", self.0 & !known));
        }
        if parts.is_empty() {
            parts.push("ALLOCATE".into());
        }
        write!(f, "{}", parts.join("|"))
    }
}

/// renameat2(2) flags this vocabulary speaks (RENAME_WHITEOUT makes a
/// character device, which the model has no notion of).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, arbitrary::Arbitrary)]
pub enum RenameFlags {
    /// RENAME_NOREPLACE: EEXIST rather than replace the target.
    NoReplace,
    /// RENAME_EXCHANGE: swap two existing names atomically.
    Exchange,
}

impl RenameFlags {
    /// The bits renameat2(2) takes.
    pub fn bits(self) -> u32 {
        match self {
            RenameFlags::NoReplace => 1,
            RenameFlags::Exchange => 2,
        }
    }
}

/// Inode flags chattr sets that restrict what may change (EXT4_IMMUTABLE_FL,
/// EXT4_APPEND_FL); setting or clearing them needs CAP_LINUX_IMMUTABLE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, arbitrary::Arbitrary)]
pub enum ChattrFlag {
    /// +i: no write, truncate, link, unlink or rename of it, no new names in it.
    Immutable,
    /// +a: writes only append (O_APPEND), no truncate, unlink or rename.
    Append,
}

impl ChattrFlag {
    /// The FS_IOC_GETFLAGS bit.
    pub fn bit(self) -> u32 {
        match self {
            ChattrFlag::Immutable => inode_flags::IMMUTABLE,
            ChattrFlag::Append => inode_flags::APPEND,
        }
    }
}

/// One operation on a filesystem.
#[derive(Clone, Debug, PartialEq, Eq, Hash, arbitrary::Arbitrary)]
pub enum Op {
    /// open(O_CREAT|O_EXCL|O_WRONLY, perm) + close.
    Create { path: String, perm: u16 },
    Mkdir { path: String, perm: u16 },
    Unlink { path: String },
    Rmdir { path: String },
    Rename { from: String, to: String },
    /// link(2): a new name `to` for the inode at `from`.
    Link { from: String, to: String },
    /// symlink(2): `path` points at `target`.
    Symlink { target: String, path: String },
    Readlink { path: String },
    /// Names in a directory, without "." and "..".
    Readdir { path: String },
    /// lstat(2), and FS_IOC_GETFLAGS through an O_RDONLY|O_NOFOLLOW
    /// descriptor (closed, so a release like any other close).
    Stat { path: String },
    /// pwrite of `len` bytes of [`pattern`]`(seed, len)` at `offset`.
    Write { path: String, offset: u64, len: u32, seed: u64 },
    Read { path: String, offset: u64, len: u32 },
    Truncate { path: String, size: u64 },
    Fsync { path: String },
    Fdatasync { path: String },
    Sync,
    Fallocate { path: String, mode: FallocFlags, offset: u64, len: u64 },
    /// FS_IOC_FIEMAP of bytes `start..start + len` (`len` u64::MAX: to the
    /// end), `flags` the raw fm_flags word ([`FiemapRequest`]). With
    /// `count_only` fm_extent_count is 0 and the answer is how many extents
    /// there are ([`Reply::MappedCount`]).
    Fiemap { path: String, start: u64, len: u64, flags: u32, count_only: bool },
    /// chattr +j / -j (FS_IOC_SETFLAGS toggling JOURNAL_DATA_FL).
    SetJournalData { path: String, enable: bool },
    /// renameat2(2) with RENAME_NOREPLACE or RENAME_EXCHANGE.
    Renameat2 { from: String, to: String, flags: RenameFlags },
    /// chattr +i/-i/+a/-a (FS_IOC_GETFLAGS, then FS_IOC_SETFLAGS with the bit).
    Chattr { path: String, flag: ChattrFlag, enable: bool },
    /// open(O_WRONLY|O_APPEND) + write of `len` bytes of [`pattern`]`(seed,
    /// len)` at EOF + close.
    Append { path: String, len: u32, seed: u64 },
    /// open(O_RDONLY) + lseek(SEEK_DATA or SEEK_HOLE) + close.
    Lseek { path: String, offset: u64, whence: SeekWhence },
    /// open(O_WRONLY|O_TRUNC) of an existing file + write of `len` bytes of
    /// [`pattern`]`(seed, len)` at 0 + close: replacing a file's contents
    /// in place, which ext4's auto_da_alloc writes back at the close.
    Rewrite { path: String, len: u32, seed: u64 },
    /// open(O_RDWR) of an existing file, kept in descriptor slot `slot`
    /// across ops (dup2 onto it: what the slot held is closed after the
    /// open succeeds). With the file unlinked meanwhile, the slot keeps it
    /// alive as an orphan until its last close.
    Open { path: String, slot: u8 },
    /// close(2) of a slot's descriptor (EBADF when the slot is empty).
    Close { slot: u8 },
    /// pread(2) through a slot's descriptor.
    ReadFd { slot: u8, offset: u64, len: u32 },
    /// pwrite(2) of [`pattern`]`(seed, len)` through a slot's descriptor.
    WriteFd { slot: u8, offset: u64, len: u32, seed: u64 },
    /// fsync(2) of a slot's descriptor (an orphan's too).
    FsyncFd { slot: u8 },
    /// ftruncate(2) of a slot's descriptor.
    FtruncateFd { slot: u8, size: u64 },
    /// open(O_WRONLY|O_DIRECT) + pwrite of [`pattern`]`(seed, len)` at
    /// `offset` from a page-aligned buffer + close. Offset and length not
    /// multiples of [`DIO_ALIGN`] are EINVAL once ext4 has mapped the
    /// first extent; a data=journal inode takes the buffered path.
    DirectWrite { path: String, offset: u64, len: u32, seed: u64 },
    /// open(O_RDONLY|O_DIRECT) + pread into a page-aligned buffer + close.
    DirectRead { path: String, offset: u64, len: u32 },
    /// open(O_RDWR) + mmap(MAP_SHARED) of the pages stored to + a store of
    /// [`pattern`]`(seed, len)` at `offset`, cut at EOF (a store past it
    /// would be SIGBUS) + msync(MS_SYNC) of the mapping + munmap +
    /// fdatasync + close. Writes through page faults (ext4_page_mkwrite)
    /// and returns the bytes stored; with none to store, nothing is mapped
    /// or synced.
    MapWrite { path: String, offset: u64, len: u32, seed: u64 },
}

/// Which fields of each op are paths, written once for [`Op::paths`],
/// [`Op::path_strings`] and [`Op::path_strings_mut`] (a match cannot be
/// generic over `&` and `&mut`); the caller says what a symlink gives.
macro_rules! op_paths {
    ($op:expr, Symlink { target: $target:pat, path: $path:ident } => $symlink:expr) => {
        match $op {
            Op::Rename { from, to } | Op::Link { from, to } | Op::Renameat2 { from, to, .. } => vec![from, to],
            Op::Symlink { target: $target, path: $path } => $symlink,
            Op::Sync | Op::Close { .. } | Op::ReadFd { .. } | Op::WriteFd { .. } | Op::FsyncFd { .. } | Op::FtruncateFd { .. } => vec![],
            Op::Create { path, .. }
            | Op::Mkdir { path, .. }
            | Op::Unlink { path }
            | Op::Rmdir { path }
            | Op::Readlink { path }
            | Op::Readdir { path }
            | Op::Stat { path }
            | Op::Write { path, .. }
            | Op::Read { path, .. }
            | Op::Truncate { path, .. }
            | Op::Fsync { path }
            | Op::Fdatasync { path }
            | Op::Fallocate { path, .. }
            | Op::Fiemap { path, .. }
            | Op::SetJournalData { path, .. }
            | Op::Chattr { path, .. }
            | Op::Append { path, .. }
            | Op::Lseek { path, .. }
            | Op::Rewrite { path, .. }
            | Op::DirectWrite { path, .. }
            | Op::DirectRead { path, .. }
            | Op::MapWrite { path, .. }
            | Op::Open { path, .. } => vec![path],
        }
    };
}

impl Op {
    /// The paths an op names, in order (a symlink's target is not one).
    pub fn paths(&self) -> Vec<&str> {
        op_paths!(self, Symlink { target: _, path: path } => vec![path])
    }

    /// Every path-like string of the op: [`Op::paths`] and a symlink's
    /// target (first). The shrinker reads the names a trace uses through it.
    pub fn path_strings(&self) -> Vec<&str> {
        op_paths!(self, Symlink { target: target, path: path } => vec![target, path])
    }

    /// [`Op::path_strings`], to change: the shrinker rewrites names through
    /// it, and a fuzz input's decoding aims arbitrary paths at names that exist.
    pub fn path_strings_mut(&mut self) -> Vec<&mut String> {
        op_paths!(self, Symlink { target: target, path: path } => vec![target, path])
    }

    /// Ops that only look: they change nothing a later op sees and start no
    /// journal handle (a FIEMAP with FIEMAP_FLAG_SYNC writes back, so it is
    /// not one).
    pub fn only_looks(&self) -> bool {
        match self {
            Op::Read { .. } | Op::Stat { .. } | Op::Readdir { .. } | Op::Readlink { .. } | Op::Lseek { .. } | Op::ReadFd { .. } => true,
            Op::Fiemap { flags, .. } => flags & FiemapRequest::SYNC == 0,
            _ => false,
        }
    }

    /// Ops that can run in two halves, between which other tasks' ops run
    /// (see `Model::begin_split`).
    pub fn has_two_halves(&self) -> bool {
        matches!(self, Op::Fsync { .. } | Op::Fdatasync { .. } | Op::SetJournalData { .. }) || self.sleeps_holding_locks()
    }

    /// Ops that may sleep on I/O holding their inode's locks, split there:
    /// i_rwsem (buffered and direct writes, truncate, ftruncate and fallocate, which
    /// may take invalidate_lock too; shared by a direct read),
    /// invalidate_lock shared (a page fault, a read's readahead), sync(2)
    /// in write-back (s_writepages_rwsem shared), and directory ops, which
    /// read directory blocks and start handles holding their parent's
    /// i_rwsem (shared for readdir) and the i_rwsem of what they unlink,
    /// link or move. They take effect whole in their second half, but
    /// buffered writes (by path, append, rewrite, through a descriptor),
    /// which may go on folio by folio before it (`crate::write_parts`), and
    /// shrinking truncates, extent by extent (`crate::truncate_parts`).
    pub fn sleeps_holding_locks(&self) -> bool {
        matches!(
            self,
            Op::Create { .. }
                | Op::Mkdir { .. }
                | Op::Symlink { .. }
                | Op::Link { .. }
                | Op::Unlink { .. }
                | Op::Rmdir { .. }
                | Op::Rename { .. }
                | Op::Renameat2 { .. }
                | Op::Readdir { .. }
                | Op::Write { .. }
                | Op::WriteFd { .. }
                | Op::Append { .. }
                | Op::Rewrite { .. }
                | Op::Truncate { .. }
                | Op::FtruncateFd { .. }
                | Op::Fallocate { .. }
                | Op::DirectWrite { .. }
                | Op::DirectRead { .. }
                | Op::Sync
                | Op::MapWrite { .. }
                | Op::Read { .. }
                | Op::ReadFd { .. }
        )
    }

    /// Short name of the op kind, for tables and swarm switches.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Create { .. } => OpKind::Create,
            Op::Mkdir { .. } => OpKind::Mkdir,
            Op::Unlink { .. } => OpKind::Unlink,
            Op::Rmdir { .. } => OpKind::Rmdir,
            Op::Rename { .. } => OpKind::Rename,
            Op::Link { .. } => OpKind::Link,
            Op::Symlink { .. } => OpKind::Symlink,
            Op::Readlink { .. } => OpKind::Readlink,
            Op::Readdir { .. } => OpKind::Readdir,
            Op::Stat { .. } => OpKind::Stat,
            Op::Write { .. } => OpKind::Write,
            Op::Read { .. } => OpKind::Read,
            Op::Truncate { .. } => OpKind::Truncate,
            Op::Fsync { .. } => OpKind::Fsync,
            Op::Fdatasync { .. } => OpKind::Fdatasync,
            Op::Sync => OpKind::Sync,
            Op::Fallocate { .. } => OpKind::Fallocate,
            Op::Fiemap { .. } => OpKind::Fiemap,
            Op::SetJournalData { .. } => OpKind::SetJournalData,
            Op::Renameat2 { .. } => OpKind::Renameat2,
            Op::Chattr { .. } => OpKind::Chattr,
            Op::Append { .. } => OpKind::Append,
            Op::Lseek { .. } => OpKind::Lseek,
            Op::Rewrite { .. } => OpKind::Rewrite,
            Op::Open { .. } => OpKind::Open,
            Op::Close { .. } => OpKind::Close,
            Op::ReadFd { .. } => OpKind::ReadFd,
            Op::WriteFd { .. } => OpKind::WriteFd,
            Op::FsyncFd { .. } => OpKind::FsyncFd,
            Op::FtruncateFd { .. } => OpKind::FtruncateFd,
            Op::DirectWrite { .. } => OpKind::DirectWrite,
            Op::DirectRead { .. } => OpKind::DirectRead,
            Op::MapWrite { .. } => OpKind::MapWrite,
        }
    }
}

/// The kinds of [`Op`], in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, arbitrary::Arbitrary)]
pub enum OpKind {
    Create,
    Mkdir,
    Unlink,
    Rmdir,
    Rename,
    Link,
    Symlink,
    Readlink,
    Readdir,
    Stat,
    Write,
    Read,
    Truncate,
    Fsync,
    Fdatasync,
    Sync,
    Fallocate,
    Fiemap,
    SetJournalData,
    Renameat2,
    Chattr,
    Append,
    Lseek,
    Rewrite,
    Open,
    Close,
    ReadFd,
    WriteFd,
    FsyncFd,
    FtruncateFd,
    DirectWrite,
    DirectRead,
    MapWrite,
}

impl OpKind {
    pub const ALL: [OpKind; 33] = [
        OpKind::Create,
        OpKind::Mkdir,
        OpKind::Unlink,
        OpKind::Rmdir,
        OpKind::Rename,
        OpKind::Link,
        OpKind::Symlink,
        OpKind::Readlink,
        OpKind::Readdir,
        OpKind::Stat,
        OpKind::Write,
        OpKind::Read,
        OpKind::Truncate,
        OpKind::Fsync,
        OpKind::Fdatasync,
        OpKind::Sync,
        OpKind::Fallocate,
        OpKind::Fiemap,
        OpKind::SetJournalData,
        OpKind::Renameat2,
        OpKind::Chattr,
        OpKind::Append,
        OpKind::Lseek,
        OpKind::Rewrite,
        OpKind::Open,
        OpKind::Close,
        OpKind::ReadFd,
        OpKind::WriteFd,
        OpKind::FsyncFd,
        OpKind::FtruncateFd,
        OpKind::DirectWrite,
        OpKind::DirectRead,
        OpKind::MapWrite,
    ];
}

/// File type as readdir and stat report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, arbitrary::Arbitrary)]
pub enum FileKind {
    Regular,
    Directory,
    Symlink,
}

impl FileKind {
    /// The S_IFMT bits.
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Regular => 0o100000,
            FileKind::Directory => 0o040000,
            FileKind::Symlink => 0o120000,
        }
    }
}

/// Inode flags visible through FS_IOC_GETFLAGS that the model tracks.
pub mod inode_flags {
    pub const IMMUTABLE: u32 = 0x10;
    pub const APPEND: u32 = 0x20;
    /// A directory ext4 indexes (htree) once it outgrows one block.
    pub const INDEX: u32 = 0x1000;
    pub const JOURNAL_DATA: u32 = 0x4000;
    pub const EXTENTS: u32 = 0x80000;
}

/// What lstat reports. `ino` is the filesystem's own number: a physical choice,
/// never compared across implementations, only used to see hard links.
/// Directory `size` and `blocks` are layout and are not compared either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    pub ino: u64,
    pub kind: FileKind,
    /// S_IFMT | permission bits.
    pub mode: u32,
    pub nlink: u32,
    pub size: u64,
    /// 512-byte units of data blocks (allocated, unwritten, or reserved by
    /// delalloc); extent-tree blocks are not counted. Under bigalloc, whole
    /// clusters: each logical cluster with such a block counts once.
    pub blocks: u64,
    pub flags: u32,
    /// Model only: 512-byte units of extent-tree blocks a filesystem may count
    /// in `blocks` on top of the data (ext4's i_blocks does; how many is
    /// layout). Implementations set 0.
    pub blocks_slack: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DirEntry {
    pub name: String,
    pub kind: FileKind,
}

/// FIEMAP extent flags (linux/fiemap.h).
pub mod fiemap_flags {
    pub const LAST: u32 = 0x1;
    pub const UNKNOWN: u32 = 0x2;
    pub const DELALLOC: u32 = 0x4;
    pub const NOT_ALIGNED: u32 = 0x100;
    pub const DATA_INLINE: u32 = 0x200;
    pub const UNWRITTEN: u32 = 0x800;
    pub const MERGED: u32 = 0x1000;
}

/// What FS_IOC_FIEMAP asks besides the file: fm_start, fm_length and the
/// raw fm_flags word, unknown bits included (they are EBADR).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FiemapRequest {
    pub start: u64,
    pub len: u64,
    pub flags: u32,
}

impl FiemapRequest {
    /// FIEMAP_FLAG_SYNC: write the file's dirty data back first.
    pub const SYNC: u32 = 0x1;
    /// FIEMAP_FLAG_XATTR: map where the inode's extended attributes live.
    pub const XATTR: u32 = 0x2;
    /// FIEMAP_FLAG_CACHE: load the extent tree into the extent status cache.
    pub const CACHE: u32 = 0x4;

    /// The whole file, as `sync=` traces ask: start 0, length u64::MAX.
    pub fn whole(flags: u32) -> FiemapRequest {
        FiemapRequest { start: 0, len: u64::MAX, flags }
    }

    pub fn syncs(&self) -> bool {
        self.flags & Self::SYNC != 0
    }
}

/// One FIEMAP extent in logical terms (byte offsets in the file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FiemapExtent {
    pub logical: u64,
    pub length: u64,
    pub flags: u32,
    /// Model only: dirty data whose writeback may already have happened, so the
    /// range may also be reported as plain written. Implementations set false.
    pub writeback_pending: bool,
    /// Model only: a directory's blocks in the asked range, of which there
    /// may be fewer (see [`FiemapExtent::directory_blocks`]). Implementations
    /// set false.
    pub directory: bool,
    /// Model only: blocks a page fault may have allocated with the rest of
    /// its folio ([`crate::data::FileData::maybe_allocated`]): absent, delayed or
    /// written are all allowed. Implementations set false.
    pub maybe_hole: bool,
}

impl FiemapExtent {
    /// An extent as an implementation reports it.
    pub fn new(logical: u64, length: u64, flags: u32) -> FiemapExtent {
        FiemapExtent { logical, length, flags, writeback_pending: false, directory: false, maybe_hole: false }
    }

    /// The model's FIEMAP answer for a directory asked about bytes `range`
    /// (block aligned): its blocks are written from offset 0 with no holes,
    /// but how many there are is layout (entry packing, htree index blocks),
    /// so only that shape is checked ([`crate::agree`]).
    pub fn directory_blocks(range: std::ops::Range<u64>) -> FiemapExtent {
        FiemapExtent { logical: range.start, length: range.end - range.start, flags: fiemap_flags::LAST, writeback_pending: false, directory: true, maybe_hole: false }
    }
}

/// The successful result of an op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Done,
    Written(u64),
    Data(Vec<u8>),
    Stat(Stat),
    Entries(Vec<DirEntry>),
    Target(String),
    Extents(Vec<FiemapExtent>),
    /// The file offset lseek returned.
    Offset(u64),
    /// Model only: the answers lseek(SEEK_DATA/SEEK_HOLE) may give, where
    /// ext4's answer depends on its page cache (see [`SeekChoices`]).
    SeekChoices(SeekChoices),
    /// fm_mapped_extents of a count-only FIEMAP (fm_extent_count = 0).
    MappedCount(u32),
    /// Model only: its answer to a count-only FIEMAP. Where extents split is
    /// layout, so the model gives the map it would report and the block
    /// size, and [`crate::agree`] allows a range of counts.
    ExtentsToCount { extents: Vec<FiemapExtent>, block_size: u32 },
    /// Model only: a misaligned direct read whose answer is not the
    /// filesystem's to give: blocks ext4 may have zeroed out instead of
    /// splitting their extent ([`crate::data::Alloc::Zeroed`]: mapped is
    /// EINVAL, unwritten reads zeros), or a mapped extent landing off a
    /// sector in the buffer (the device's DMA alignment decides).
    DataOrEinval(Vec<u8>),
}

/// What an op returns: its reply or the errno a user would see.
pub type Outcome = Result<Reply, Errno>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_cover_every_op() {
        // Declaration order, each kind once, the last one last.
        assert!(OpKind::ALL.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(OpKind::ALL.len(), OpKind::MapWrite as usize + 1);
        assert_eq!(Op::Sync.kind(), OpKind::Sync);
        assert_eq!(Op::Close { slot: 0 }.kind(), OpKind::Close);
    }

    #[test]
    fn a_fiemap_only_looks_unless_it_may_write_back() {
        let fiemap = |flags| Op::Fiemap { path: "/f".into(), start: 0, len: 1, flags, count_only: true };
        assert!(fiemap(0).only_looks() && fiemap(FiemapRequest::CACHE | FiemapRequest::XATTR).only_looks());
        assert!(!fiemap(FiemapRequest::SYNC).only_looks());
        assert!(!fiemap(FiemapRequest::SYNC | 0x80).only_looks(), "refused, but said so only once it runs");
    }

    #[test]
    fn falloc_flags_print_their_names() {
        let f = FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE | 0x1000);
        assert_eq!(format!("{f:?}"), "KEEP_SIZE|PUNCH_HOLE|0x1000");
        assert_eq!(format!("{:?}", FallocFlags::ALLOCATE), "ALLOCATE");
    }
}
