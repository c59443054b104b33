//! Model 5: two tasks, each holding a folio lock, make no-fail allocations
//! against the reclaimer (kswapd) under a budget with no free page: they
//! never fail and never deadlock, and no page is made or lost. The twin is
//! a reclaimer that sleeps on a folio lock an allocating task holds while
//! it waits for memory: loom finds the deadlock.

#![cfg(loom)]

mod loom_support;

use ext4_engine::memory::reclaim::{CachedFolio, MemoryPool, ReclaimBug, Reclaimer};
use ext4_engine::sync::Arc;
use loom_support::*;

/// The model with `bug` in the reclaimer.
fn model(bug: ReclaimBug) {
    let pool = MemoryPool::new(0);
    let lru: Vec<Arc<CachedFolio>> = (0..3).map(|_| CachedFolio::new(1)).collect();
    // Each task is inside its folio (write-back, say) when it needs memory.
    assert!(lru[0].lock.try_down_write() && lru[1].lock.try_down_write());
    let kswapd = Reclaimer { pool: pool.clone(), lru: lru.clone(), bug };
    let k = loom::thread::spawn(move || kswapd.run());
    let task = |i: usize| {
        let (pool, folio) = (pool.clone(), lru[i].clone());
        loom::thread::spawn(move || {
            pool.allocate_nofail(1);
            pool.release(1);
            folio.unlock(&pool);
        })
    };
    let (a, b) = (task(0), task(1));
    a.join().unwrap();
    b.join().unwrap();
    pool.stop();
    k.join().unwrap();
    let resident: u64 = lru.iter().filter(|f| f.is_resident()).map(|f| f.pages).sum();
    assert_eq!(pool.free_pages() + resident, 3, "a page was made or lost");
    assert_eq!(pool.counts().0, 2, "both no-fail requests were granted");
    assert!(lru.iter().all(|f| !f.lock.is_locked()), "a folio lock is still held");
}

#[test]
fn no_fail_allocations_against_the_reclaimer_never_fail_or_deadlock() {
    explore("5 (no-fail allocations vs kswapd)", Some(2), || model(ReclaimBug::None));
}

#[test]
fn bug_twin_a_reclaimer_sleeping_on_a_held_folio_lock_deadlocks() {
    expect_caught("twin_reclaimer_sleeps_on_folio_lock", "deadlock");
}

#[test]
#[ignore = "a bug twin: run, expecting failure, by bug_twin_a_reclaimer_sleeping_on_a_held_folio_lock_deadlocks"]
fn twin_reclaimer_sleeps_on_folio_lock() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(|| model(ReclaimBug::SleepsOnFolioLock));
}
