//! What the loom models share: one inode and its filesystem, the page
//! cache and journal as counters, and the switch's steps over them. Built
//! only under `--cfg loom` (see the README's loom command).

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering as StdOrdering};

use ext4_engine::locking::switch::{FsLocks, InodeLocks, JournalState, SwitchSteps};
use ext4_engine::locking::rwsem::RwSem;
use ext4_engine::locking::{LockClass, Waiting};
use ext4_engine::sync::{lock, wait, Arc, Condvar, Mutex};
use ext4_model::Errno;

/// The inode's state the locks protect.
#[derive(Debug, Default)]
pub struct InodeState {
    /// The journal-data flag.
    pub journal_data: bool,
    /// Cached pages, each with the mode it was dirtied in (None: clean).
    pub pages: Vec<Option<bool>>,
    /// Direct I/O submitted in the current mode and not yet complete.
    pub dio_mode: Option<bool>,
    /// Blocks allocated to the file, by write-back; freed by truncate.
    pub blocks: u32,
    /// Transactions closed, committed.
    pub closed: u32,
    pub committed: u32,
}

pub struct Shared {
    pub inode: InodeLocks,
    /// The one page's folio lock.
    pub folio: RwSem,
    pub fs: FsLocks,
    pub state: Mutex<InodeState>,
    /// Signalled when a transaction commits.
    pub commit: Condvar,
    /// Errors the steps inject: at write-back, at the journal flush.
    pub fail_writeback: bool,
    pub fail_flush: bool,
    /// Whether a commit thread runs; without one the flush commits itself.
    pub commit_thread: bool,
}

impl Shared {
    pub fn new(journal_data: bool) -> Arc<Shared> {
        Arc::new(Shared {
            inode: InodeLocks::new(Waiting::Sleep),
            folio: RwSem::new(LockClass::FolioLock, Waiting::Sleep),
            fs: FsLocks::new(Waiting::Sleep),
            state: Mutex::new(InodeState { journal_data, ..InodeState::default() }),
            commit: Condvar::new(),
            fail_writeback: false,
            fail_flush: false,
            commit_thread: false,
        })
    }

    pub fn failing(journal_data: bool, fail_writeback: bool, fail_flush: bool) -> Arc<Shared> {
        Shared::with(journal_data, |s| {
            s.fail_writeback = fail_writeback;
            s.fail_flush = fail_flush;
        })
    }

    /// A commit thread will commit what the switch's flush closes.
    pub fn with_commit_thread(journal_data: bool) -> Arc<Shared> {
        Shared::with(journal_data, |s| s.commit_thread = true)
    }

    fn with(journal_data: bool, set: impl FnOnce(&mut Shared)) -> Arc<Shared> {
        let mut s = Arc::try_unwrap(Shared::new(journal_data)).unwrap_or_else(|_| unreachable!("just made"));
        set(&mut s);
        Arc::new(s)
    }

    /// Every lock free, no handle running.
    pub fn assert_idle(&self) {
        assert!(self.inode.is_idle(), "an inode lock is still held");
        assert!(!self.fs.writepages.is_locked(), "s_writepages_rwsem is still held");
        assert!(!self.fs.updates.is_locked() && self.fs.updates.running() == 0, "the updates barrier is still up");
    }

    /// No page dirtied in another mode than the inode's now.
    pub fn assert_pages_match_mode(&self) {
        let s = lock(&self.state);
        for (i, p) in s.pages.iter().enumerate() {
            if let Some(mode) = p {
                assert_eq!(*mode, s.journal_data, "page {i} was dirtied in the other journaling mode and survived the switch");
            }
        }
    }
}

/// The switch's steps over [`Shared`].
pub struct Steps(pub Arc<Shared>);

impl SwitchSteps for Steps {
    fn journal(&mut self) -> JournalState {
        JournalState::Live
    }
    fn write_and_wait(&mut self) -> Result<(), Errno> {
        if self.0.fail_writeback {
            return Err(Errno::EIO);
        }
        let mut s = lock(&self.0.state);
        s.pages.iter_mut().for_each(|p| *p = None);
        Ok(())
    }
    fn truncate_pagecache(&mut self) {
        let mut s = lock(&self.0.state);
        assert!(s.pages.iter().all(Option::is_none), "dropping dirty pages: write-back raced the switch");
        s.pages.clear();
    }
    fn start_flush(&mut self) -> Result<(), Errno> {
        lock(&self.0.state).closed += 1;
        // Closing a transaction wakes the commit thread (j_wait_commit).
        self.0.commit.notify_all();
        Ok(())
    }
    fn finish_flush(&mut self) -> Result<(), Errno> {
        if self.0.fail_flush {
            return Err(Errno::EIO);
        }
        if !self.0.commit_thread {
            // jbd2_journal_flush committing in the caller: the barrier is
            // up, so no handle runs.
            self.0.fs.updates.wait_updates().unwrap();
            lock(&self.0.state).committed += 1;
            return Ok(());
        }
        let mut s = lock(&self.0.state);
        let want = s.closed;
        while s.committed < want {
            s = wait(&self.0.commit, s);
        }
        Ok(())
    }
    fn set_flag(&mut self, enable: bool) {
        let mut s = lock(&self.0.state);
        assert!(s.dio_mode.is_none(), "the journaling mode changed under direct I/O in flight");
        assert_eq!(self.0.fs.updates.running(), 0, "the mode changed under a running handle");
        s.journal_data = enable;
    }
    fn set_aops(&mut self) {}
    fn mark_inode_dirty_sync(&mut self) -> Result<(), Errno> {
        Ok(())
    }
}

/// A buffered write of one page: the inode lock, a handle, the page
/// dirtied in the mode the handle saw, which must hold until it stops.
pub fn buffered_write(sh: &Shared) {
    sh.inode.rwsem.down_write().unwrap();
    sh.fs.updates.start_handle().unwrap();
    dirty_page(sh);
    sh.fs.updates.stop_handle();
    sh.inode.rwsem.up_write();
}

/// A write fault (ext4_page_mkwrite): invalidate_lock shared, a handle.
pub fn page_fault(sh: &Shared) {
    sh.inode.invalidate.down_read().unwrap();
    sh.fs.updates.start_handle().unwrap();
    dirty_page(sh);
    sh.fs.updates.stop_handle();
    sh.inode.invalidate.up_read();
}

fn dirty_page(sh: &Shared) {
    let mut s = lock(&sh.state);
    let mode = s.journal_data;
    s.pages.push(Some(mode));
}

/// jbd2's commit thread: commits each closed transaction once no handle runs.
pub fn commit_thread(sh: &Shared, transactions: u32) {
    for _ in 0..transactions {
        let mut s = lock(&sh.state);
        while s.committed >= s.closed {
            s = wait(&sh.commit, s);
        }
        drop(s);
        sh.fs.updates.wait_updates().unwrap();
        let mut s = lock(&sh.state);
        s.committed += 1;
        drop(s);
        sh.commit.notify_all();
    }
}

/// A direct write: submitted under the inode lock shared, completed after
/// dropping it; the mode it was submitted in must hold until it completes.
pub fn direct_write(sh: &Shared) {
    sh.inode.rwsem.down_read().unwrap();
    sh.inode.dio.begin();
    {
        let mut s = lock(&sh.state);
        s.dio_mode = Some(s.journal_data);
    }
    sh.inode.rwsem.up_read();
    {
        let mut s = lock(&sh.state);
        let submitted = s.dio_mode.take();
        assert_eq!(submitted, Some(s.journal_data), "direct I/O completed in another journaling mode than it was submitted in");
    }
    sh.inode.dio.end();
}

/// Delayed-allocation write-back of the one page: s_writepages_rwsem
/// shared, then a handle for the allocation, then the folio lock (ext4's
/// order: jbd2_handle before the folio lock). With `inverted`, the handle
/// starts before the writepages lock: the bug twin.
pub fn write_back(sh: &Shared, inverted: bool) {
    if inverted {
        sh.fs.updates.start_handle().unwrap();
        sh.fs.writepages.down_read().unwrap();
    } else {
        sh.fs.writepages.down_read().unwrap();
        sh.fs.updates.start_handle().unwrap();
    }
    sh.folio.down_write().unwrap();
    {
        let mut s = lock(&sh.state);
        if let Some(p) = s.pages.first_mut().filter(|p| p.is_some()) {
            *p = None;
            s.blocks += 1;
        }
    }
    sh.folio.up_write();
    sh.fs.updates.stop_handle();
    sh.fs.writepages.up_read();
}

/// truncate to 0: the inode lock, inode_dio_wait, invalidate_lock, the
/// page cache dropped page by page under each folio lock, then a handle
/// frees the blocks.
pub fn truncate(sh: &Shared) {
    sh.inode.rwsem.down_write().unwrap();
    sh.inode.dio.wait().unwrap();
    sh.inode.invalidate.down_write().unwrap();
    sh.folio.down_write().unwrap();
    lock(&sh.state).pages.clear();
    sh.folio.up_write();
    sh.fs.updates.start_handle().unwrap();
    lock(&sh.state).blocks = 0;
    sh.fs.updates.stop_handle();
    sh.inode.invalidate.up_write();
    sh.inode.rwsem.up_write();
}

/// Runs `f` under loom with at most `preemptions` preemptions per
/// execution (None: loom's default, every interleaving), and reports how
/// many interleavings model `model` ran and in how long. Models of three
/// threads through the whole switch have more interleavings than a CI
/// minute allows; loom finds most bugs within two or three preemptions.
pub fn explore(model: &str, preemptions: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let started = std::time::Instant::now();
    let mut builder = loom::model::Builder::new();
    if preemptions.is_some() {
        builder.preemption_bound = preemptions;
    }
    builder.check(move || {
        counted.fetch_add(1, StdOrdering::Relaxed);
        f();
    });
    eprintln!("loom model {model}: {} interleavings in {:.1?}", runs.load(StdOrdering::Relaxed), started.elapsed());
}

/// A bug twin must fail. A deadlock loom finds aborts the process (its
/// blocked threads panic again while unwinding), which `should_panic`
/// cannot catch, so the twin's model runs in a child process of this test
/// binary (the `#[ignore]`d test `model`), and its failure is checked here:
/// it must fail, saying `expected`.
pub fn expect_caught(model: &str, expected: &str) {
    let exe = std::env::current_exe().expect("the test binary");
    let out = std::process::Command::new(exe).args([model, "--exact", "--ignored", "--nocapture", "--test-threads", "1"]).output().expect("run the twin");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the bug twin {model} passed: loom did not catch it");
    assert!(stderr.contains(expected), "the bug twin {model} failed, but not with \"{expected}\":\n{stderr}");
}
