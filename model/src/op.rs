//! The op vocabulary every side speaks: the model, the engine, the kernel oracle,
//! the workload generator and the fuzz targets.
//!
//! Ops name files by absolute path; each data op stands for open + syscall +
//! close. Write payloads are a seeded pattern so a trace stays small.

use std::fmt;

use crate::Errno;

/// Longest file name component (EXT4_NAME_LEN).
pub const NAME_MAX: usize = 255;
/// Longest path including its NUL (PATH_MAX).
pub const PATH_MAX: usize = 4096;
/// The test bed's cap on one read or write; larger requests are EINVAL.
pub const MAX_IO_LEN: u32 = 16 << 20;
/// ext4's link limit for a non-directory (EXT4_LINK_MAX).
pub const LINK_MAX: u32 = 65000;

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
    /// lstat(2).
    Stat { path: String },
    /// pwrite of `len` bytes of [`pattern`]`(seed, len)` at `offset`.
    Write { path: String, offset: u64, len: u32, seed: u64 },
    Read { path: String, offset: u64, len: u32 },
    Truncate { path: String, size: u64 },
    Fsync { path: String },
    Fdatasync { path: String },
    Sync,
    Fallocate { path: String, mode: FallocFlags, offset: u64, len: u64 },
    /// FS_IOC_FIEMAP over the whole file; `sync` is FIEMAP_FLAG_SYNC.
    Fiemap { path: String, sync: bool },
    /// chattr +j / -j (FS_IOC_SETFLAGS toggling JOURNAL_DATA_FL).
    SetJournalData { path: String, enable: bool },
}

impl Op {
    /// The paths an op names, in order.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            Op::Rename { from, to } | Op::Link { from, to } => vec![from, to],
            Op::Symlink { path, .. } => vec![path],
            Op::Sync => vec![],
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
            | Op::SetJournalData { path, .. } => vec![path],
        }
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
}

impl OpKind {
    pub const ALL: [OpKind; 19] = [
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
    ];
}

/// The bytes a [`Op::Write`] carries: the same (seed, len) always gives the
/// same bytes, a shorter write is a prefix of a longer one, and no two 4 KiB
/// pieces of a write (or of two writes) are alike, so misplaced or shifted
/// data shows.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    pattern_into(seed, &mut out);
    out
}

/// Bytes per piece of [`pattern`]: the first piece is a splitmix64 stream,
/// each later one that piece XOR a word drawn for it. Filling at copy speed
/// matters: writes average tens of KiB and this runs for every one.
const PATTERN_PIECE: usize = 4096;

/// One splitmix64 output.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `out` with [`pattern`]`(seed, out.len())`, so a caller can reuse
/// one buffer for every write.
pub fn pattern_into(seed: u64, out: &mut [u8]) {
    let (head, rest) = out.split_at_mut(out.len().min(PATTERN_PIECE));
    let mut state = seed;
    // Whole words by fixed-size stores: a tail-sized copy per word would be a
    // memcpy call each.
    let mut words = head.chunks_exact_mut(8);
    for word in &mut words {
        word.copy_from_slice(&splitmix64(&mut state).to_le_bytes());
    }
    let tail = words.into_remainder();
    let n = tail.len();
    tail.copy_from_slice(&splitmix64(&mut state).to_le_bytes()[..n]);
    // A stream of its own for the piece words, so they are not head words.
    let mut piece_state = !seed;
    for piece in rest.chunks_mut(PATTERN_PIECE) {
        let salt = splitmix64(&mut piece_state);
        let piece_len = piece.len();
        // `head` is a whole piece here, so words line up.
        let mut words = piece.chunks_exact_mut(8);
        for (word, first) in (&mut words).zip(head.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(first);
            word.copy_from_slice(&(u64::from_le_bytes(w) ^ salt).to_le_bytes());
        }
        let tail = words.into_remainder();
        let at = piece_len - tail.len();
        for ((byte, &first), s) in tail.iter_mut().zip(&head[at..]).zip(salt.to_le_bytes()) {
            *byte = first ^ s;
        }
    }
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
    /// delalloc); extent-tree blocks are not counted.
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
    pub const UNWRITTEN: u32 = 0x800;
    pub const MERGED: u32 = 0x1000;
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
}

impl FiemapExtent {
    /// The model's FIEMAP answer for a directory: its blocks are written from
    /// offset 0 with no holes, but how many there are is layout (entry
    /// packing), so only that shape is checked ([`crate::agree`]).
    pub const DIRECTORY_BLOCKS: FiemapExtent = FiemapExtent { logical: 0, length: u64::MAX, flags: fiemap_flags::LAST, writeback_pending: false };
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
}

/// What an op returns: its reply or the errno a user would see.
pub type Outcome = Result<Reply, Errno>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_deterministic_and_seed_dependent() {
        assert_eq!(pattern(7, 100), pattern(7, 100));
        assert_ne!(pattern(7, 100), pattern(8, 100));
        assert_eq!(&pattern(7, 100)[..13], &pattern(7, 13)[..]);
        assert_eq!(pattern(1, 0), Vec::<u8>::new());
        // Across piece boundaries too, and with a ragged last piece.
        assert_eq!(&pattern(7, 20_000)[..9_003], &pattern(7, 9_003)[..]);
    }

    #[test]
    fn no_two_pieces_of_a_pattern_are_alike() {
        let p = pattern(3, 16 * PATTERN_PIECE);
        let q = pattern(4, 16 * PATTERN_PIECE);
        let mut pieces: Vec<&[u8]> = p.chunks(PATTERN_PIECE).chain(q.chunks(PATTERN_PIECE)).collect();
        // Also a piece shifted by one word within itself.
        pieces.push(&p[8..8 + PATTERN_PIECE]);
        let n = pieces.len();
        pieces.sort();
        pieces.dedup();
        assert_eq!(pieces.len(), n);
    }

    #[test]
    fn kinds_cover_every_op() {
        assert_eq!(OpKind::ALL.len(), 19);
        assert_eq!(Op::Sync.kind(), OpKind::Sync);
    }

    #[test]
    fn falloc_flags_print_their_names() {
        let f = FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE | 0x1000);
        assert_eq!(format!("{f:?}"), "KEEP_SIZE|PUNCH_HOLE|0x1000");
        assert_eq!(format!("{:?}", FallocFlags::ALLOCATE), "ALLOCATE");
    }
}
