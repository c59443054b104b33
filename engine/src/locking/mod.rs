//! ext4's locks where a journal-mode switch meets its rivals, built once
//! over the [`crate::sync`] shim and used two ways:
//!
//! - by the engine, one thread running every op: a lock that cannot be
//!   had at once is refused ([`Waiting::Refuse`]), since nothing else in the
//!   thread could ever release it; the scheduler asks first and puts the
//!   task to sleep instead ([`crate::fs::Ext4::waits_for`]);
//! - by the loom models (`engine/tests/loom_*.rs`), threads that sleep
//!   ([`Waiting::Sleep`]), so loom explores every interleaving of the same
//!   code and reports a wait that can never end as a deadlock.
//!
//! Locks are taken and released by explicit calls, as the kernel's are,
//! not by guards: a release forgotten on one error path (the bug of the
//! seed series in `ext4_change_inode_journal_flag`) must be expressible
//! to be caught. [`lockdep`] checks the order of acquisitions and that an
//! op returns holding nothing.

pub mod dio;
mod gate;
pub mod lockdep;
pub mod rwsem;
pub mod switch;
pub mod updates;

use std::fmt;

/// What a lock does when it cannot be had at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Sleep until it can be had (threads).
    Sleep,
    /// Say so at once: one thread runs everything here.
    Refuse,
}

/// The kinds of lock, in ext4's words; lockdep orders these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LockClass {
    /// The inode lock (`inode->i_rwsem`), taken by writers, truncate and
    /// the flag ioctl.
    InodeRwsem,
    /// The mapping's `invalidate_lock`: shared by page faults and
    /// readahead, exclusive by truncation and the journal-flag switch.
    InvalidateLock,
    /// `sbi->s_writepages_rwsem`: shared by write-back, exclusive by the
    /// switch.
    WritepagesRwsem,
    /// jbd2's updates barrier (`jbd2_journal_lock_updates`).
    JournalUpdates,
    /// A running jbd2 handle, which lockdep treats as a lock (`jbd2_handle`).
    JournalHandle,
    /// A folio's lock.
    FolioLock,
    /// `sb->s_vfs_rename_mutex`: a rename between two directories holds it
    /// (lock_rename) before the directories' i_rwsem, so no two such
    /// renames can lock directories in opposite orders.
    RenameMutex,
}

impl fmt::Display for LockClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockClass::InodeRwsem => "i_rwsem",
            LockClass::InvalidateLock => "invalidate_lock",
            LockClass::WritepagesRwsem => "s_writepages_rwsem",
            LockClass::JournalUpdates => "the journal's updates barrier",
            LockClass::JournalHandle => "jbd2_handle",
            LockClass::FolioLock => "folio lock",
            LockClass::RenameMutex => "s_vfs_rename_mutex",
        })
    }
}

/// A lock could not be had at once under [`Waiting::Refuse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WouldWait(pub LockClass);

impl fmt::Display for WouldWait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "would wait on {}", self.0)
    }
}
