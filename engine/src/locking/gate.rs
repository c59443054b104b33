//! What each lock here is made of: its counters under a mutex, a condvar
//! to sleep on, and the one rule for a wait that cannot end at once
//! (sleep, or under [`Waiting::Refuse`] say so).

use crate::sync::{lock, wait, Condvar, Mutex, MutexGuard};

use super::{LockClass, WouldWait, Waiting};

#[derive(Debug)]
pub(crate) struct Gate<S> {
    waiting: Waiting,
    state: Mutex<S>,
    changed: Condvar,
}

impl<S> Gate<S> {
    pub fn new(waiting: Waiting, state: S) -> Gate<S> {
        Gate { waiting, state: Mutex::new(state), changed: Condvar::new() }
    }

    pub fn state(&self) -> MutexGuard<'_, S> {
        lock(&self.state)
    }

    /// The state once `blocked` no longer holds; refused as `class` if it
    /// holds now and nobody may sleep.
    pub fn wait_while(&self, class: LockClass, blocked: impl Fn(&S) -> bool) -> Result<MutexGuard<'_, S>, WouldWait> {
        let mut s = self.state();
        while blocked(&s) {
            if self.refuses() {
                return Err(WouldWait(class));
            }
            s = wait(&self.changed, s);
        }
        Ok(s)
    }

    /// One sleep, for a waiter that counts itself in before it loops.
    pub fn sleep<'a>(&'a self, guard: MutexGuard<'a, S>) -> MutexGuard<'a, S> {
        wait(&self.changed, guard)
    }

    pub fn refuses(&self) -> bool {
        self.waiting == Waiting::Refuse
    }

    /// Wakes sleepers after a release. Under Waiting::Refuse nobody sleeps,
    /// and a notify would still cost a futex syscall.
    pub fn wake(&self) {
        if self.waiting == Waiting::Sleep {
            self.changed.notify_all();
        }
    }

    /// A copy whose state is `adjust`ed from this one's (an engine's
    /// shadow for a check: nobody waits on a copy).
    pub fn copy(&self, adjust: impl FnOnce(S) -> S) -> Gate<S>
    where
        S: Copy,
    {
        Gate::new(self.waiting, adjust(*self.state()))
    }
}
