//! jbd2's updates barrier: handles (`t_updates`) against
//! `jbd2_journal_lock_updates`, which first stops new handles from
//! starting (`j_barrier_count`), then waits for the running ones to stop,
//! then serialises with other barrier holders (`j_barrier`).

use super::gate::Gate;
use super::{LockClass, WouldWait, Waiting};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct State {
    /// Handles running.
    updates: u32,
    /// Barrier holders and those waiting to become one.
    barrier_count: u32,
    /// Whether one holds the barrier.
    barrier_held: bool,
}

#[derive(Debug)]
pub struct UpdatesBarrier {
    gate: Gate<State>,
}

impl UpdatesBarrier {
    pub fn new(waiting: Waiting) -> UpdatesBarrier {
        UpdatesBarrier { gate: Gate::new(waiting, State::default()) }
    }

    /// jbd2__journal_start: waits while a barrier is up or coming.
    pub fn start_handle(&self) -> Result<(), WouldWait> {
        let mut s = self.gate.wait_while(LockClass::JournalUpdates, |s| s.barrier_count > 0)?;
        s.updates += 1;
        Ok(())
    }

    /// jbd2_journal_stop.
    pub fn stop_handle(&self) {
        let mut s = self.gate.state();
        debug_assert!(s.updates > 0, "a handle stopped that never started");
        s.updates = s.updates.saturating_sub(1);
        drop(s);
        self.gate.wake();
    }

    /// jbd2_journal_lock_updates. Under [`Waiting::Refuse`] it is refused
    /// unless it could be had at once, and then nothing changes.
    pub fn lock_updates(&self) -> Result<(), WouldWait> {
        let mut s = self.gate.state();
        if self.gate.refuses() && (s.updates > 0 || s.barrier_held) {
            return Err(WouldWait(LockClass::JournalUpdates));
        }
        s.barrier_count += 1;
        while s.updates > 0 || s.barrier_held {
            s = self.gate.sleep(s);
        }
        s.barrier_held = true;
        Ok(())
    }

    /// jbd2_journal_unlock_updates.
    pub fn unlock_updates(&self) {
        let mut s = self.gate.state();
        debug_assert!(s.barrier_held, "updates unlocked while nobody held them");
        s.barrier_held = false;
        s.barrier_count = s.barrier_count.saturating_sub(1);
        drop(s);
        self.gate.wake();
    }

    /// jbd2_journal_wait_updates: the commit thread waits for the running
    /// handles to stop, without holding new ones off.
    pub fn wait_updates(&self) -> Result<(), WouldWait> {
        self.gate.wait_while(LockClass::JournalHandle, |s| s.updates > 0).map(drop)
    }

    pub fn is_locked(&self) -> bool {
        self.gate.state().barrier_held
    }

    /// Whether a new handle would wait now.
    pub fn handle_would_wait(&self) -> bool {
        self.gate.state().barrier_count > 0
    }

    /// Handles running.
    pub fn running(&self) -> u32 {
        self.gate.state().updates
    }
}

/// A copy in the same state; barrier waiters are not copied.
impl Clone for UpdatesBarrier {
    fn clone(&self) -> UpdatesBarrier {
        UpdatesBarrier { gate: self.gate.copy(|s| State { barrier_count: u32::from(s.barrier_held), ..s }) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_barrier_waits_for_running_handles_and_holds_off_new_ones() {
        let b = UpdatesBarrier::new(Waiting::Refuse);
        b.start_handle().unwrap();
        assert_eq!(b.lock_updates(), Err(WouldWait(LockClass::JournalUpdates)), "a handle runs");
        assert!(!b.handle_would_wait(), "a refused barrier leaves no trace");
        b.stop_handle();
        b.lock_updates().unwrap();
        assert_eq!(b.start_handle(), Err(WouldWait(LockClass::JournalUpdates)));
        assert_eq!(b.lock_updates(), Err(WouldWait(LockClass::JournalUpdates)), "one holder at a time");
        b.unlock_updates();
        b.start_handle().unwrap();
        b.stop_handle();
        assert!(!b.is_locked() && b.running() == 0);
    }
}
