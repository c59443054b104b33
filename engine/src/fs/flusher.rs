//! The flusher as a task of the simulator's scheduler, not a side effect of
//! the next op: it wakes every 5 s, finds inodes dirty for 30 s
//! ([`super::timers`]) and writes each back as ext4_writepages does, taking
//! s_writepages_rwsem shared, a jbd2 handle and the inode's dirty folios'
//! locks, then sleeping on the I/O that maps them. That sleep is a
//! preemption point: other tasks run, and those that would lock one of its
//! folios (a writer into them, truncation, fsync's write-back, eviction) or
//! that wait for handles (a commit, the journal-flag switch) sleep until the
//! flusher's second half. It sleeps itself while a -j holds
//! s_writepages_rwsem or the updates barrier, or a truncate holds a folio
//! of the inode it would write back.
//!
//! Each [`Ext4::flusher_step`] runs the flusher to its next sleep: a wake-up
//! (when due), the first half of one inode's write-back, or its second half
//! (the locks handed back and the write-back run whole, as split ops do).
//! With the flusher left inline (the default, [`Ext4::run_flusher_as_task`]
//! not called) the timers write expired inodes back when a handle starts.

use std::collections::VecDeque;

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::InodeNumber;
use crate::locking::lockdep::Acquired;
use crate::locking::switch::Tracker;

use super::lock_plan::{LockPlan, PlannedLock};
use super::locks::{Lock, LockHolder};
use super::Ext4;

const BY: &str = "ext4_writepages";

/// The flusher thread's state on one mount.
#[derive(Clone, Debug, Default)]
pub(crate) struct Flusher {
    /// The scheduler runs it ([`Ext4::flusher_step`]); else the timers do.
    pub as_task: bool,
    /// Expired inodes this wake-up has still to write back.
    queue: VecDeque<InodeNumber>,
    flight: Option<FlusherFlight>,
    pub stats: FlusherStats,
}

/// One inode's write-back between its halves.
#[derive(Clone, Debug)]
struct FlusherFlight {
    ino: InodeNumber,
    plan: LockPlan,
    holder: LockHolder,
}

/// What the flusher task did over a mount.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlusherStats {
    pub wakes: u64,
    /// Inodes written back in two halves, asleep holding their folio locks.
    pub flights: u64,
    /// Steps it could not go on: a lock it needs was held (a -j's, or a
    /// folio of the inode a truncate holds).
    pub sleeps: u64,
}

/// What one step of the flusher did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlusherStep {
    /// Nothing due.
    Idle,
    /// It woke and found this many inodes dirty past the expiry.
    Woke(usize),
    /// It sleeps on the I/O of this inode's write-back, holding its locks.
    Began(InodeNumber),
    /// That write-back finished.
    WroteBack(InodeNumber),
    /// It cannot take this lock now: it stays asleep.
    Slept(Lock),
}

impl<D: BlockDevice> Ext4<D> {
    /// Hands the flusher to the caller's scheduler: the timers stop writing
    /// expired inodes back themselves.
    pub fn run_flusher_as_task(&mut self) {
        self.flusher.as_task = true;
    }

    /// Whether a flusher step would do anything: it is due, has inodes
    /// left, or sleeps between halves.
    pub fn flusher_runnable(&self) -> bool {
        let f = &self.flusher;
        f.as_task && !self.ctx.mount.read_only && (f.flight.is_some() || !f.queue.is_empty() || self.flusher_due())
    }

    /// The holder of the flusher's locks between its halves.
    pub fn flusher_holder(&self) -> Option<LockHolder> {
        self.flusher.flight.as_ref().map(|f| f.holder)
    }

    /// The lock the flusher's next step would sleep on. A second half
    /// never does: it holds all it needs.
    pub fn flusher_waits_for(&self) -> Option<Lock> {
        if self.flusher.flight.is_some() {
            return None;
        }
        self.flusher_blocked(*self.flusher.queue.front()?)
    }

    /// What the flusher would sleep on to write inode `next` back: a -j's
    /// locks, or a folio of it another holder locked (a truncate zeroing
    /// its EOF block).
    fn flusher_blocked(&self, next: InodeNumber) -> Option<Lock> {
        let fs = &self.locks.set.fs;
        if fs.writepages.read_would_wait() {
            return Some(Lock::WritepagesRwsem);
        }
        if fs.updates.handle_would_wait() {
            return Some(Lock::JournalUpdates);
        }
        self.ctx.pages.holds_any_folio_lock(next).then_some(Lock::FolioLock)
    }

    /// Runs the flusher to its next sleep.
    pub fn flusher_step(&mut self) -> Result<FlusherStep> {
        if let Some(flight) = self.flusher.flight.take() {
            return self.finish_flusher_flight(flight);
        }
        if self.flusher.queue.is_empty() {
            if !self.flusher_due() || self.ctx.mount.read_only {
                return Ok(FlusherStep::Idle);
            }
            let now = self.ctx.dev.now_ns();
            self.flusher.queue = self.expired_inodes(now).into();
            self.flusher.stats.wakes += 1;
            return Ok(FlusherStep::Woke(self.flusher.queue.len()));
        }
        while let Some(&ino) = self.flusher.queue.front() {
            if let Some(lock) = self.flusher_blocked(ino) {
                self.flusher.stats.sleeps += 1;
                return Ok(FlusherStep::Slept(lock));
            }
            self.flusher.queue.pop_front();
            if let Some(step) = self.begin_flusher_flight(ino)? {
                return Ok(step);
            }
        }
        Ok(FlusherStep::Idle)
    }

    /// Ends what the flusher has in flight (before the runner's own sync,
    /// remount or check): its second half, now.
    pub fn settle_flusher(&mut self) -> Result<()> {
        match self.flusher.flight.take() {
            Some(flight) => self.finish_flusher_flight(flight).map(|_| ()),
            None => Ok(()),
        }
    }

    pub fn flusher_stats(&self) -> FlusherStats {
        self.flusher.stats
    }

    /// ext4_writepages up to its sleep: s_writepages_rwsem shared, a
    /// handle, then the dirty folios locked. None when the inode has no
    /// dirty folio left (written back meanwhile).
    fn begin_flusher_flight(&mut self, ino: InodeNumber) -> Result<Option<FlusherStep>> {
        if !self.ctx.pages.has_dirty(ino) || !self.nodes.contains_key(&ino) {
            return Ok(None);
        }
        let mut steps = vec![PlannedLock::Sem { ino: 0, class: Lock::WritepagesRwsem, shared: true, by: BY }];
        if self.ctx.journal.is_some() {
            steps.push(PlannedLock::Handle);
        }
        let holder = self.locks.new_holder();
        self.take_plan(&steps, holder).map_err(|e| Error::InvalidArgument(format!("the flusher took locks it was told were free: {e:?}")))?;
        let Some(locked) = self.ctx.pages.lock_dirty_folios(ino, holder.number()) else {
            self.give_back(&steps, holder);
            return Ok(None);
        };
        debug_assert_eq!(locked.ino, ino);
        self.locks.tracker(holder).acquired(Acquired { class: Lock::FolioLock, shared: false, instance: u64::from(ino), by: "mpage_prepare_extent_to_map" });
        self.flusher.flight = Some(FlusherFlight { ino, plan: LockPlan { steps }, holder });
        self.flusher.stats.flights += 1;
        Ok(Some(FlusherStep::Began(ino)))
    }

    fn finish_flusher_flight(&mut self, flight: FlusherFlight) -> Result<FlusherStep> {
        self.ctx.pages.unlock_folios(flight.holder.number());
        self.locks.tracker(flight.holder).released(Lock::FolioLock, u64::from(flight.ino));
        self.give_back(&flight.plan.steps, flight.holder);
        // A folio dirtied after it began may be locked now by a truncate
        // asleep zeroing it, which ext4_writepages would sleep on: it
        // gives up this pass and tries the inode again next.
        if self.ctx.pages.holds_any_folio_lock(flight.ino) {
            self.flusher.queue.push_front(flight.ino);
            self.flusher.stats.sleeps += 1;
            return Ok(FlusherStep::Slept(Lock::FolioLock));
        }
        self.write_back_expired(flight.ino)?;
        Ok(FlusherStep::WroteBack(flight.ino))
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::{FileSystem, Op};

    use super::super::timers::tests::mounted;
    use super::super::timers::SEC_NS;
    use super::{FlusherStep, Lock};

    /// A mount whose flusher is a task, with 8 KiB of `/f` dirty.
    fn dirty_file() -> (crate::fs::Ext4<super::super::timers::tests::Clocked>, std::rc::Rc<std::cell::Cell<u64>>) {
        let (mut fs, now) = mounted("");
        fs.run_flusher_as_task();
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[1; 8192]).unwrap();
        (fs, now)
    }

    fn write(path: &str, offset: u64, len: u32) -> Op {
        Op::Write { path: path.into(), offset, len, seed: 1 }
    }

    /// The flusher wakes on the clock, sleeps on a -j holding
    /// s_writepages_rwsem, then sleeps on its own write-back's I/O holding
    /// the dirty folios' locks: ops that would lock those folios sleep,
    /// others run, and an op that reaches them unpredicted is reported.
    #[test]
    fn the_flusher_task_sleeps_holding_the_folio_locks_of_what_it_writes_back() {
        let (mut fs, now) = dirty_file();
        fs.create("/h", 0o644).unwrap();
        fs.set_journal_data("/h", true).unwrap();
        assert!(!fs.flusher_runnable(), "not due before 5 s");
        now.set(5 * SEC_NS);
        assert!(fs.flusher_runnable());
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Woke(0), "dirty since 5 s: not yet expired");
        fs.create("/g", 0o644).unwrap();
        fs.write("/g", 0, &[2; 4096]).unwrap();
        now.set(36 * SEC_NS);
        assert_eq!(fs.timer_stats().expired_inodes, 0, "the timers leave the flusher to its task");
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Woke(1));

        let switch = fs.begin_split(&Op::SetJournalData { path: "/h".into(), enable: false }).unwrap().unwrap();
        assert_eq!(fs.flusher_waits_for(), Some(Lock::WritepagesRwsem));
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Slept(Lock::WritepagesRwsem));
        assert!(fs.finish_split(switch).is_ok());

        let f = fs.open_path("/f").unwrap();
        assert_eq!(fs.flusher_waits_for(), None);
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Began(f));
        assert!(fs.flusher_holder().is_some());
        for (op, sleeps) in [
            (write("/f", 0, 100), Some(Lock::FolioLock)),
            (write("/f", 4096, 10_000), Some(Lock::FolioLock)),
            (write("/f", 8192, 100), None),
            (write("/g", 0, 100), None),
            (Op::Truncate { path: "/f".into(), size: 0 }, Some(Lock::FolioLock)),
            (Op::Truncate { path: "/f".into(), size: 8192 }, None),
            (Op::Unlink { path: "/f".into() }, Some(Lock::FolioLock)),
            // Commits (the switch's too) wait for the flusher's handle.
            (Op::Fsync { path: "/g".into() }, Some(Lock::JournalHandle)),
            (Op::SetJournalData { path: "/g".into(), enable: true }, Some(Lock::JournalHandle)),
            (Op::Read { path: "/f".into(), offset: 0, len: 100 }, None),
        ] {
            assert_eq!(fs.waits_for(&op), sleeps, "{op}");
        }
        fs.write("/g", 100, &[3; 100]).unwrap();
        assert!(fs.lock_violations().is_empty());
        // A writer the scheduler was not told about reaches a locked folio.
        fs.write("/f", 10, &[4; 10]).unwrap();
        let reported = fs.lock_violations();
        assert!(reported.len() == 1 && reported[0].contains("locked by holder"), "{reported:?}");

        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::WroteBack(f));
        assert_eq!(fs.flusher_holder(), None);
        assert!(fs.locks_held().is_empty() && fs.lock_violations().is_empty());
        assert_eq!(fs.waits_for(&write("/f", 0, 100)), None);
        assert_eq!(fs.timer_stats().expired_inodes, 1);
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Idle);
        let stats = fs.flusher_stats();
        assert_eq!((stats.wakes, stats.flights, stats.sleeps), (2, 1, 1));
    }

    /// A truncate asleep zeroing its EOF block holds that folio's lock
    /// (taken under its handle): the flusher, due to write the file back,
    /// sleeps until the truncate's second half.
    #[test]
    fn a_truncate_holding_its_eof_folio_puts_the_flusher_to_sleep() {
        let (mut fs, now) = dirty_file();
        now.set(5 * SEC_NS);
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Woke(0));
        now.set(36 * SEC_NS);
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Woke(1));
        let truncate = fs.begin_split(&Op::Truncate { path: "/f".into(), size: 100 }).unwrap().unwrap();
        assert!(fs.locks_held().contains(&(Lock::FolioLock, truncate.holder().unwrap())));
        assert_eq!(fs.flusher_waits_for(), Some(Lock::FolioLock));
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Slept(Lock::FolioLock));
        assert_eq!(fs.finish_waits_for(&truncate), None, "its own folio lock is no wait");
        assert!(fs.finish_split(truncate).is_ok());
        let f = fs.open_path("/f").unwrap();
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Began(f));
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::WroteBack(f));
        assert!(fs.locks_held().is_empty() && fs.lock_violations().is_empty());
        assert_eq!(fs.read("/f", 0, 200).unwrap(), vec![1; 100]);

        // Begun first, it meets a folio dirtied since and locked by a
        // truncate: it gives up the pass and sleeps until the truncate ends.
        fs.write("/f", 0, &[2; 8192]).unwrap();
        now.set(80 * SEC_NS);
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Woke(0));
        now.set(120 * SEC_NS);
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Woke(1));
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Began(f));
        assert_eq!(fs.waits_for(&write("/f", 8192, 4096)), None, "a folio it has not locked");
        fs.write("/f", 8192, &[3; 4096]).unwrap();
        let truncate = fs.begin_split(&Op::Truncate { path: "/f".into(), size: 10_000 }).unwrap().unwrap();
        assert_eq!(fs.finish_waits_for(&truncate), None, "the folios past its size are not the flusher's");
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Slept(Lock::FolioLock));
        assert_eq!(fs.flusher_holder(), None);
        assert!(fs.finish_split(truncate).is_ok());
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::Began(f));
        assert_eq!(fs.flusher_step().unwrap(), FlusherStep::WroteBack(f));
        assert!(fs.locks_held().is_empty() && fs.lock_violations().is_empty());
    }
}
