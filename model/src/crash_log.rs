//! The crash log: every state-changing call since the last point a crash
//! cannot go behind, so the crash check can replay any prefix of it.

use std::sync::Arc;

use crate::op::Op;
use crate::state::State;

/// A state-changing call as the crash log keeps it, replayable exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    Op(Op),
    Write { path: String, offset: u64, data: Arc<[u8]> },
    Append { path: String, data: Arc<[u8]> },
    WriteFd { slot: u8, offset: u64, data: Arc<[u8]> },
    DirectWrite { path: String, offset: u64, data: Arc<[u8]> },
    MapWrite { path: String, offset: u64, data: Arc<[u8]> },
    /// What a mapped write's folio backed, learned from the target after
    /// it ran ([`crate::Model::settle_folio_choice`]): a replay must make
    /// the same choice, or a later direct write's extents differ.
    FolioChoice { path: String, span: std::ops::Range<u64>, has: crate::BlockStates },
    /// One part of a buffered write taken folio by folio
    /// ([`crate::Model::write_part`]): bytes `at..at + len` of the pattern
    /// of `seed` at `offset`, to the inode the write opened (its name may
    /// have changed since; the replay numbers inodes as the live model did).
    WritePart { ino: crate::state::Ino, offset: u64, len: u64, seed: u64, at: u64 },
    /// One piece of an allocating fallocate ([`crate::Model::fallocate_part`]):
    /// blocks `blocks` of the inode it opened allocated, the size grown to
    /// `grow_to` unless KEEP_SIZE.
    FallocatePart { ino: crate::state::Ino, blocks: std::ops::Range<u64>, grow_to: Option<u64> },
    /// One part of a punch ([`crate::Model::fallocate_part`]) of bytes
    /// `offset..end` of the inode it opened: the edges zeroed and the
    /// cache of its whole `blocks` dropped (the first part, `piece` None),
    /// or the blocks `piece` freed.
    PunchPart { ino: crate::state::Ino, offset: u64, end: u64, blocks: std::ops::Range<u64>, piece: Option<std::ops::Range<u64>> },
    /// A direct write's bios submitted ([`crate::Model::direct_write_part`]):
    /// the range of the inode it opened written back, its holes allocated
    /// unwritten.
    DirectWriteSubmit { ino: crate::state::Ino, offset: u64, len: u32 },
    /// A direct write's data and completion (`submitted`), or a direct
    /// write call done whole at its part (buffered, misaligned): the
    /// pattern of `seed` at `offset`, to the inode it opened.
    DirectWriteDone { ino: crate::state::Ino, offset: u64, len: u32, seed: u64, submitted: bool },
    /// An ftruncate through a descriptor, of the file its first half
    /// pinned (fdget): the slot may lead elsewhere by its first part.
    TruncateFile { ino: crate::state::Ino, size: u64 },
    /// A write through `slot` took reference `id` to its file
    /// ([`crate::Model::fdget`]): a close of the slot now defers the release.
    FdGet { slot: u8, id: u64 },
    /// The write returned and dropped reference `id`.
    FdPut { id: u64 },
    /// A buffered read in flight (`read_parts`) returned and closed its
    /// own open of inode `ino`, whose release flushed it (auto_da_alloc).
    ReadClose { ino: crate::state::Ino },
}

/// The state at the last sync and every call since.
#[derive(Clone, Debug)]
pub(crate) struct CrashLog {
    pub base: State,
    pub calls: Vec<Call>,
}

impl CrashLog {
    pub fn new(base: State) -> CrashLog {
        CrashLog { base, calls: Vec::new() }
    }

    pub fn restart(&mut self, base: State) {
        self.base = base;
        self.calls.clear();
    }
}
