//! `ext4_change_inode_journal_flag`, with the flag ioctl's inode lock
//! around it, step by step (docs/concurrency.md):
//!
//! 1. i_rwsem (the ioctl). No journal: nothing to do; an aborted one: EROFS.
//! 2. `inode_dio_wait`: no direct I/O in flight.
//! 3. invalidate_lock, write back and wait, drop the page cache.
//! 4. s_writepages_rwsem, then jbd2's updates barrier.
//! 5. +j sets the flag; -j flushes the journal first, then clears it.
//! 6. The address-space operations and the mapping's folio orders anew.
//! 7. Release in reverse; a one-credit synchronous handle dirties the inode.
//!
//! An error at any step returns with every lock released. -j sleeps in the
//! flush, so it runs in two halves ([`first_half`], [`second_half`]), every
//! lock held between them; a +j is done in the first.

use ext4_model::Errno;

use super::dio::DioCount;
use super::lockdep::Acquired;
use super::rwsem::RwSem;
use super::updates::UpdatesBarrier;
use super::{LockClass, WouldWait, Waiting};

const BY: &str = "ext4_change_inode_journal_flag";

/// One inode's locks.
#[derive(Clone, Debug)]
pub struct InodeLocks {
    pub rwsem: RwSem,
    pub invalidate: RwSem,
    pub dio: DioCount,
}

impl InodeLocks {
    pub fn new(waiting: Waiting) -> InodeLocks {
        InodeLocks { rwsem: RwSem::new(LockClass::InodeRwsem, waiting), invalidate: RwSem::new(LockClass::InvalidateLock, waiting), dio: DioCount::new(waiting) }
    }

    pub fn is_idle(&self) -> bool {
        !self.rwsem.is_locked() && !self.invalidate.is_locked() && self.dio.in_flight() == 0
    }
}

/// A filesystem's own locks.
#[derive(Clone, Debug)]
pub struct FsLocks {
    pub writepages: RwSem,
    pub updates: UpdatesBarrier,
    /// A mutex: only ever taken exclusive.
    pub rename: RwSem,
}

impl FsLocks {
    pub fn new(waiting: Waiting) -> FsLocks {
        FsLocks { writepages: RwSem::new(LockClass::WritepagesRwsem, waiting), updates: UpdatesBarrier::new(waiting), rename: RwSem::new(LockClass::RenameMutex, waiting) }
    }
}

/// Where acquisitions are recorded: lockdep in the engine, nowhere in a
/// loom model (loom checks by exploring).
pub trait Tracker {
    fn acquired(&mut self, a: Acquired);
    fn released(&mut self, class: LockClass, instance: u64);
}

pub struct NoTracking;

impl Tracker for NoTracking {
    fn acquired(&mut self, _: Acquired) {}
    fn released(&mut self, _: LockClass, _: u64) {}
}

/// Whether the filesystem has a journal to switch against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalState {
    None,
    Aborted,
    Live,
}

/// What the switch does between its locks; the engine's page cache and
/// journal, or a model's stand-ins.
pub trait SwitchSteps {
    fn journal(&mut self) -> JournalState;
    /// filemap_write_and_wait.
    fn write_and_wait(&mut self) -> Result<(), Errno>;
    /// truncate_pagecache.
    fn truncate_pagecache(&mut self);
    /// -j: the running transaction closes; the switch sleeps after this.
    fn start_flush(&mut self) -> Result<(), Errno>;
    /// -j: the log reaches the device and is checkpointed.
    fn finish_flush(&mut self) -> Result<(), Errno>;
    fn set_flag(&mut self, enable: bool);
    /// ext4_set_aops and the mapping's folio orders for the new mode.
    fn set_aops(&mut self);
    /// Inside the final handle: ext4_mark_inode_dirty, ext4_handle_sync.
    fn mark_inode_dirty_sync(&mut self) -> Result<(), Errno>;
}

/// A bug re-injected for the loom models and the simulator's own tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SwitchBug {
    #[default]
    None,
    /// v3 of the LBS series: the flush-error path returns holding
    /// invalidate_lock.
    KeepInvalidateOnFlushError,
    /// No inode_dio_wait: direct I/O in flight across the flip.
    SkipDioWait,
}

/// The locks of one switch.
pub struct Switch<'a> {
    pub inode: &'a InodeLocks,
    pub fs: &'a FsLocks,
    /// The inode number, for lockdep's stacks.
    pub ino: u64,
    pub bug: SwitchBug,
}

/// A -j between its halves: it holds every lock.
#[derive(Debug, PartialEq, Eq)]
pub struct Halfway {
    held: Held,
}

/// What this switch holds, so each exit releases exactly that.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Held {
    inode: bool,
    invalidate: bool,
    writepages: bool,
    updates: bool,
}

fn refused(_: WouldWait) -> Errno {
    Errno::EDEADLK
}

impl Switch<'_> {
    fn acquired(&self, t: &mut dyn Tracker, class: LockClass) {
        let instance = if matches!(class, LockClass::InodeRwsem | LockClass::InvalidateLock) { self.ino } else { 0 };
        t.acquired(Acquired { class, shared: false, instance, by: BY });
    }

    fn released(&self, t: &mut dyn Tracker, class: LockClass) {
        let instance = if matches!(class, LockClass::InodeRwsem | LockClass::InvalidateLock) { self.ino } else { 0 };
        t.released(class, instance);
    }

    /// Releases what `held` says, in reverse order of taking; on the flush
    /// error path the re-injected bug keeps invalidate_lock.
    fn release(&self, t: &mut dyn Tracker, held: &mut Held, flush_error: bool) {
        if std::mem::take(&mut held.updates) {
            self.fs.updates.unlock_updates();
            self.released(t, LockClass::JournalUpdates);
        }
        if std::mem::take(&mut held.writepages) {
            self.fs.writepages.up_write();
            self.released(t, LockClass::WritepagesRwsem);
        }
        if std::mem::take(&mut held.invalidate) && !(flush_error && self.bug == SwitchBug::KeepInvalidateOnFlushError) {
            self.inode.invalidate.up_write();
            self.released(t, LockClass::InvalidateLock);
        }
        if std::mem::take(&mut held.inode) {
            self.inode.rwsem.up_write();
            self.released(t, LockClass::InodeRwsem);
        }
    }

    /// Steps 1 to 4, and 5 to 7 for a +j. Some(halfway) for a -j that
    /// must flush; None when the switch is over.
    pub fn first_half(&self, steps: &mut dyn SwitchSteps, t: &mut dyn Tracker, enable: bool) -> Result<Option<Halfway>, Errno> {
        let mut held = Held::default();
        let out = self.take_all(steps, t, &mut held);
        if let Err(e) = out {
            self.release(t, &mut held, false);
            return Err(e);
        }
        if !held.inode {
            return Ok(None);
        }
        if enable {
            steps.set_flag(true);
            self.finish(steps, t, held).map(|()| None)
        } else if let Err(e) = steps.start_flush() {
            self.release(t, &mut held, true);
            Err(e)
        } else {
            Ok(Some(Halfway { held }))
        }
    }

    /// Steps 1 to 4: every lock, the inode written back and dropped. With
    /// no journal, returns holding nothing.
    fn take_all(&self, steps: &mut dyn SwitchSteps, t: &mut dyn Tracker, held: &mut Held) -> Result<(), Errno> {
        self.inode.rwsem.down_write().map_err(refused)?;
        held.inode = true;
        self.acquired(t, LockClass::InodeRwsem);
        match steps.journal() {
            JournalState::None => {
                self.release(t, held, false);
                return Ok(());
            }
            JournalState::Aborted => return Err(Errno::EROFS),
            JournalState::Live => {}
        }
        if self.bug != SwitchBug::SkipDioWait {
            self.inode.dio.wait().map_err(refused)?;
        }
        self.inode.invalidate.down_write().map_err(refused)?;
        held.invalidate = true;
        self.acquired(t, LockClass::InvalidateLock);
        steps.write_and_wait()?;
        steps.truncate_pagecache();
        self.fs.writepages.down_write().map_err(refused)?;
        held.writepages = true;
        self.acquired(t, LockClass::WritepagesRwsem);
        self.fs.updates.lock_updates().map_err(refused)?;
        held.updates = true;
        self.acquired(t, LockClass::JournalUpdates);
        Ok(())
    }

    /// The rest of a -j: the flush, the flag, the release, the handle.
    pub fn second_half(&self, steps: &mut dyn SwitchSteps, t: &mut dyn Tracker, halfway: Halfway) -> Result<(), Errno> {
        let mut held = halfway.held;
        if let Err(e) = steps.finish_flush() {
            self.release(t, &mut held, true);
            return Err(e);
        }
        steps.set_flag(false);
        self.finish(steps, t, held)
    }

    /// Steps 6 and 7.
    fn finish(&self, steps: &mut dyn SwitchSteps, t: &mut dyn Tracker, mut held: Held) -> Result<(), Errno> {
        steps.set_aops();
        let inode = std::mem::take(&mut held.inode);
        self.release(t, &mut held, false);
        // The handle runs under the ioctl's inode lock.
        let handle = self.fs.updates.start_handle().map_err(refused).and_then(|()| {
            t.acquired(Acquired { class: LockClass::JournalHandle, shared: true, instance: 0, by: BY });
            let dirtied = steps.mark_inode_dirty_sync();
            self.fs.updates.stop_handle();
            t.released(LockClass::JournalHandle, 0);
            dirtied
        });
        if inode {
            self.inode.rwsem.up_write();
            self.released(t, LockClass::InodeRwsem);
        }
        handle
    }

    /// A whole switch, both halves back to back.
    pub fn run(&self, steps: &mut dyn SwitchSteps, t: &mut dyn Tracker, enable: bool) -> Result<(), Errno> {
        match self.first_half(steps, t, enable)? {
            Some(h) => self.second_half(steps, t, h),
            None => Ok(()),
        }
    }
}
