//! Time drives the filesystem: jbd2 commits a running transaction at most
//! the commit interval (`commit=`, 5 s) after it began, and the flusher
//! wakes every 5 s to write back inodes dirty for 30 s or more
//! (dirty_writeback_centisecs, dirty_expire_centisecs). The clock is the
//! device's ([`BlockDevice::now_ns`]): simulated time on a simulated disk,
//! none on a plain one, where these timers never fire.
//!
//! Timers are looked at when a handle starts (`prepare_change`), before the
//! op changes anything. A kernel fires them on time even when only reads
//! come; here such a commit or write-back waits for the next change. No
//! answer can tell, and a crash in between loses only what nothing
//! promised.

use std::collections::{BTreeMap, BTreeSet};

use crate::device::BlockDevice;
use crate::error::Result;
use crate::format::InodeNumber;

use super::Ext4;

pub(crate) const SEC_NS: u64 = 1_000_000_000;
/// How often the flusher wakes (dirty_writeback_centisecs = 500).
const FLUSHER_INTERVAL_NS: u64 = 5 * SEC_NS;
/// Dirty this long, an inode is written back (dirty_expire_centisecs = 3000).
const DIRTY_EXPIRE_NS: u64 = 30 * SEC_NS;

/// The timers' state, kept across ops of one mount.
#[derive(Clone, Debug, Default)]
pub(crate) struct Timers {
    /// When the running transaction began (its first handle), if one runs.
    running_since_ns: Option<u64>,
    /// When the flusher wakes next.
    next_flush_ns: u64,
    /// Inodes the flusher found dirty, with the wake-up that first did:
    /// dirtied_when, to the flusher's 5 s.
    dirty_since_ns: BTreeMap<InodeNumber, u64>,
    pub stats: TimerStats,
}

/// What the timers did, for a run's report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Transactions the commit timer committed.
    pub timer_commits: u64,
    /// Inodes the flusher wrote back for having been dirty too long.
    pub expired_inodes: u64,
}

impl Timers {
    pub(crate) fn new(now_ns: u64) -> Timers {
        Timers { next_flush_ns: now_ns.saturating_add(FLUSHER_INTERVAL_NS), ..Timers::default() }
    }

    /// The running transaction closed: the next handle begins another.
    pub(crate) fn transaction_closed(&mut self) {
        self.running_since_ns = None;
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// Runs what the clock says is due, as a handle is about to start.
    pub(crate) fn run_timers(&mut self) -> Result<()> {
        if self.ctx.mount.read_only {
            return Ok(());
        }
        let now = self.ctx.dev.now_ns();
        if now >= self.timers.next_flush_ns && !self.flusher.as_task {
            for ino in self.expired_inodes(now) {
                self.write_back_expired(ino)?;
            }
        }
        let interval = u64::from(self.ctx.mount.commit_interval_secs) * SEC_NS;
        match self.timers.running_since_ns {
            // kjournald's commit waits while a split op holds a handle.
            Some(began) if self.ctx.journal.is_some() && now.saturating_sub(began) >= interval && self.locks.split_handles == 0 => {
                self.commit_transaction()?;
                self.timers.stats.timer_commits += 1;
                self.timers.running_since_ns = Some(now);
            }
            Some(_) => {}
            None => self.timers.running_since_ns = Some(now),
        }
        Ok(())
    }

    /// Whether the flusher's next wake-up has come.
    pub(crate) fn flusher_due(&self) -> bool {
        self.ctx.dev.now_ns() >= self.timers.next_flush_ns
    }

    /// The flusher's wake-up: the inodes dirty for DIRTY_EXPIRE_NS, which
    /// it writes back next.
    pub(crate) fn expired_inodes(&mut self, now: u64) -> Vec<InodeNumber> {
        let dirty: BTreeSet<InodeNumber> = self.ctx.pages.dirty_inodes().into_iter().collect();
        self.timers.dirty_since_ns.retain(|ino, _| dirty.contains(ino));
        let mut expired = Vec::new();
        for ino in dirty {
            let since = *self.timers.dirty_since_ns.entry(ino).or_insert(now);
            if now.saturating_sub(since) >= DIRTY_EXPIRE_NS {
                expired.push(ino);
            }
        }
        self.timers.next_flush_ns = now.saturating_add(FLUSHER_INTERVAL_NS);
        expired
    }

    /// The flusher writes back one inode that stayed dirty too long.
    pub(crate) fn write_back_expired(&mut self, ino: InodeNumber) -> Result<()> {
        self.write_back_quietly(ino, 0)?;
        self.timers.dirty_since_ns.remove(&ino);
        self.timers.stats.expired_inodes += 1;
        Ok(())
    }

    /// What the timers did on this mount.
    pub fn timer_stats(&self) -> TimerStats {
        self.timers.stats
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use ext4_model::op::fiemap_flags;
    use ext4_model::{FiemapRequest, FileSystem, MountConfig};

    use super::SEC_NS;
    use crate::device::{BlockDevice, DeviceError, IoClass, WriteFlags};
    use crate::device_mem::MemDevice;
    use crate::fs::Ext4;
    use crate::mkfs::{mkfs, MkfsOptions};

    /// A memory device whose clock the test sets.
    pub(crate) struct Clocked {
        inner: MemDevice,
        now: Rc<Cell<u64>>,
    }

    impl BlockDevice for Clocked {
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), DeviceError> {
            self.inner.read(offset, buf, class)
        }
        fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DeviceError> {
            self.inner.write(offset, buf, flags)
        }
        fn flush(&mut self) -> Result<(), DeviceError> {
            self.inner.flush()
        }
        fn now_ns(&self) -> u64 {
            self.now.get()
        }
    }

    pub(crate) fn mounted(options: &str) -> (Ext4<Clocked>, Rc<Cell<u64>>) {
        let config: MountConfig = options.parse().unwrap();
        let bytes = 64 << 20;
        let mut inner = MemDevice::new(bytes);
        mkfs(&mut inner, &MkfsOptions::for_mount(&config, bytes, *b"engine-unit-test", [3; 16], crate::fixtures::EPOCH_SECS)).unwrap();
        let now = Rc::new(Cell::new(0));
        (Ext4::mount(Clocked { inner, now: now.clone() }, &config).unwrap(), now)
    }

    #[test]
    fn the_commit_timer_commits_a_transaction_older_than_the_interval() {
        for (options, interval) in [("", 5), ("commit=1", 1)] {
            let (mut fs, now) = mounted(options);
            fs.create("/a", 0o644).unwrap();
            now.set((interval - 1) * SEC_NS + SEC_NS / 2);
            fs.create("/b", 0o644).unwrap();
            assert_eq!(fs.timer_stats().timer_commits, 0, "{options}: too young");
            now.set(interval * SEC_NS + SEC_NS / 2);
            fs.create("/c", 0o644).unwrap();
            assert_eq!(fs.timer_stats().timer_commits, 1, "{options}");
        }
    }

    #[test]
    fn the_flusher_writes_back_what_stayed_dirty_for_thirty_seconds() {
        let (mut fs, now) = mounted("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[1; 8192]).unwrap();
        let delayed = |fs: &mut Ext4<Clocked>| fs.fiemap("/f", FiemapRequest::whole(0)).unwrap().iter().any(|e| e.flags & fiemap_flags::DELALLOC != 0);
        // The flusher first sees it dirty at 5 s and wakes at most every 5 s
        // (here at 5, 20, 34, then from 39 on): 30 s on, it writes it back.
        for (at, still) in [(5, true), (20, true), (34, true), (36, true), (40, false)] {
            now.set(at * SEC_NS);
            fs.create(&format!("/t{at}"), 0o644).unwrap();
            assert_eq!(delayed(&mut fs), still, "at {at} s");
        }
        assert_eq!(fs.timer_stats().expired_inodes, 1);
    }
}
