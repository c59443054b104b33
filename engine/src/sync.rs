//! The one place the engine's synchronisation types come from: std's
//! normally, loom's under `--cfg loom`, so the models in `tests/loom_*.rs`
//! explore every interleaving of the same lock code the engine runs.

#[cfg(loom)]
pub use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(loom)]
pub use loom::thread;
#[cfg(not(loom))]
pub use std::sync::{Arc, Condvar, Mutex, MutexGuard};
#[cfg(not(loom))]
pub use std::thread;

/// Locks `m`. A holder that panicked leaves counters that are consistent
/// between calls, so the poison is ignored rather than spread.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `cond`, giving up and retaking `guard`'s mutex.
pub fn wait<'a, T>(cond: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cond.wait(guard).unwrap_or_else(|e| e.into_inner())
}
