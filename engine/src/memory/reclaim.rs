//! No-fail allocation against a reclaimer, for threads: the contract the
//! engine keeps inline when it runs one op at a time (`fs::memory`), made
//! of the `sync` shim's types so a loom model explores every interleaving
//! of it (`engine/tests/loom_nofail_reclaim.rs`).
//!
//! - [`MemoryPool::allocate_nofail`] never returns failure: short of pages,
//!   it wakes the reclaimer and sleeps until memory is given back, counting
//!   each retry.
//! - [`Reclaimer::run`] (kswapd) evicts clean cached folios while anyone
//!   waits. It takes each folio's lock with a *trylock* and passes over
//!   folios someone holds: an allocating task may hold a folio lock while
//!   it waits for memory (write-back reading an extent block through
//!   `sb_getblk`), so a reclaimer that slept on that lock would wait for a
//!   task that waits for it. [`ReclaimBug::SleepsOnFolioLock`] re-injects
//!   exactly that, for the model's bug twin.
//! - A pass that freed nothing sleeps until memory or a folio is given back
//!   (a new chance), so a reclaimer never spins.

use crate::locking::rwsem::RwSem;
use crate::locking::{LockClass, Waiting};
use crate::sync::{lock, wait, Arc, Condvar, Mutex};

#[derive(Debug, Default)]
struct PoolState {
    free_pages: u64,
    /// Allocating tasks asleep, waiting for memory.
    waiting: u32,
    /// Bumped whenever memory or a folio lock is given back.
    generation: u64,
    stop: bool,
    /// Sleeps of allocating tasks (each a retry after reclaim).
    retries: u64,
    granted: u64,
}

/// Free pages shared by allocating tasks and the reclaimer.
#[derive(Debug)]
pub struct MemoryPool {
    state: Mutex<PoolState>,
    /// Allocating tasks sleep here for memory.
    freed: Condvar,
    /// The reclaimer sleeps here for work.
    wake: Condvar,
}

impl MemoryPool {
    pub fn new(free_pages: u64) -> Arc<MemoryPool> {
        Arc::new(MemoryPool { state: Mutex::new(PoolState { free_pages, ..PoolState::default() }), freed: Condvar::new(), wake: Condvar::new() })
    }

    /// Takes `pages`, waiting for the reclaimer as long as it takes;
    /// returns the retries it needed.
    pub fn allocate_nofail(&self, pages: u64) -> u64 {
        let mut s = lock(&self.state);
        let mut retries = 0;
        while s.free_pages < pages {
            retries += 1;
            s.retries += 1;
            s.waiting += 1;
            self.wake.notify_all();
            s = wait(&self.freed, s);
            s.waiting -= 1;
        }
        s.free_pages -= pages;
        s.granted += 1;
        retries
    }

    /// Gives `pages` back.
    pub fn release(&self, pages: u64) {
        let mut s = lock(&self.state);
        s.free_pages += pages;
        s.generation += 1;
        drop(s);
        self.freed.notify_all();
        self.wake.notify_all();
    }

    /// A folio lock was given back: a pass that skipped it may now take it.
    pub fn folio_unlocked(&self) {
        lock(&self.state).generation += 1;
        self.wake.notify_all();
    }

    /// Tells the reclaimer to exit once no one waits.
    pub fn stop(&self) {
        lock(&self.state).stop = true;
        self.wake.notify_all();
    }

    pub fn free_pages(&self) -> u64 {
        lock(&self.state).free_pages
    }

    /// (granted, retries) so far.
    pub fn counts(&self) -> (u64, u64) {
        let s = lock(&self.state);
        (s.granted, s.retries)
    }
}

/// A clean folio in the page cache: its lock, its size, whether resident.
#[derive(Debug)]
pub struct CachedFolio {
    pub lock: RwSem,
    pub pages: u64,
    resident: Mutex<bool>,
}

impl CachedFolio {
    pub fn new(pages: u64) -> Arc<CachedFolio> {
        Arc::new(CachedFolio { lock: RwSem::new(LockClass::FolioLock, Waiting::Sleep), pages, resident: Mutex::new(true) })
    }

    pub fn is_resident(&self) -> bool {
        *lock(&self.resident)
    }

    /// Unlocks the folio and tells the pool (a task's folio_unlock).
    pub fn unlock(&self, pool: &MemoryPool) {
        self.lock.up_write();
        pool.folio_unlocked();
    }
}

/// A reclaimer bug the loom model's twin re-injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReclaimBug {
    None,
    /// Sleeps on a folio's lock instead of passing over a held folio.
    SleepsOnFolioLock,
}

/// kswapd over an LRU of clean folios, oldest first.
pub struct Reclaimer {
    pub pool: Arc<MemoryPool>,
    pub lru: Vec<Arc<CachedFolio>>,
    pub bug: ReclaimBug,
}

impl Reclaimer {
    /// Runs until stopped; returns the folios it evicted.
    pub fn run(&self) -> u64 {
        let mut evicted = 0;
        let mut fruitless: Option<u64> = None;
        loop {
            {
                let mut s = lock(&self.pool.state);
                while !s.stop && (s.waiting == 0 || fruitless == Some(s.generation)) {
                    s = wait(&self.pool.wake, s);
                }
                if s.stop && s.waiting == 0 {
                    return evicted;
                }
                fruitless = Some(s.generation);
            }
            let freed = self.pass();
            evicted += freed;
            if freed > 0 {
                fruitless = None;
            }
        }
    }

    /// One pass over the LRU: evicts every resident folio it can lock.
    fn pass(&self) -> u64 {
        let mut freed = 0;
        for f in &self.lru {
            let locked = match self.bug {
                ReclaimBug::None => f.lock.try_down_write(),
                ReclaimBug::SleepsOnFolioLock => f.lock.down_write().is_ok(),
            };
            if !locked {
                continue;
            }
            let was = std::mem::replace(&mut *lock(&f.resident), false);
            f.lock.up_write();
            if was {
                self.pool.release(f.pages);
                freed += 1;
            }
        }
        freed
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// With threads for real: two tasks each hold a folio lock while they
    /// ask for a page that only evicting the third folio can give.
    #[test]
    fn no_fail_allocations_get_memory_from_the_reclaimer_past_held_folios() {
        let pool = MemoryPool::new(0);
        let lru: Vec<Arc<CachedFolio>> = (0..3).map(|_| CachedFolio::new(1)).collect();
        let kswapd = Reclaimer { pool: pool.clone(), lru: lru.clone(), bug: ReclaimBug::None };
        let k = std::thread::spawn(move || kswapd.run());
        let tasks: Vec<_> = (0..2)
            .map(|i| {
                let (pool, folio) = (pool.clone(), lru[i].clone());
                assert!(folio.lock.try_down_write());
                std::thread::spawn(move || {
                    let retries = pool.allocate_nofail(1);
                    pool.release(1);
                    folio.unlock(&pool);
                    retries
                })
            })
            .collect();
        let retries: u64 = tasks.into_iter().map(|t| t.join().unwrap()).sum();
        pool.stop();
        let evicted = k.join().unwrap();
        assert!(retries >= 1 && evicted >= 1, "retries {retries}, evicted {evicted}");
        assert!(!lru[2].is_resident(), "the unlocked folio was evicted");
        let resident: u64 = lru.iter().filter(|f| f.is_resident()).map(|f| f.pages).sum();
        assert_eq!(pool.free_pages() + resident, 3, "no page made or lost");
        assert_eq!(pool.counts().0, 2);
    }
}
