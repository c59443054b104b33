//! A reader-writer semaphore (`struct rw_semaphore`): many readers or one
//! writer. A waiting writer holds off new readers, as the kernel's does,
//! so a stream of readers cannot starve the switch.

use super::gate::Gate;
use super::{LockClass, WouldWait, Waiting};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct State {
    readers: u32,
    writer: bool,
    writers_waiting: u32,
}

#[derive(Debug)]
pub struct RwSem {
    class: LockClass,
    gate: Gate<State>,
}

impl RwSem {
    pub fn new(class: LockClass, waiting: Waiting) -> RwSem {
        RwSem { class, gate: Gate::new(waiting, State::default()) }
    }

    pub fn class(&self) -> LockClass {
        self.class
    }

    /// down_read.
    pub fn down_read(&self) -> Result<(), WouldWait> {
        let mut s = self.gate.wait_while(self.class, |s| s.writer || s.writers_waiting > 0)?;
        s.readers += 1;
        Ok(())
    }

    /// up_read.
    pub fn up_read(&self) {
        let mut s = self.gate.state();
        debug_assert!(s.readers > 0, "up_read of {} with no reader", self.class);
        s.readers = s.readers.saturating_sub(1);
        drop(s);
        self.gate.wake();
    }

    /// down_write. A writer counts itself in before it sleeps, so that new
    /// readers wait behind it.
    pub fn down_write(&self) -> Result<(), WouldWait> {
        let mut s = self.gate.state();
        if s.writer || s.readers > 0 {
            if self.gate.refuses() {
                return Err(WouldWait(self.class));
            }
            s.writers_waiting += 1;
            while s.writer || s.readers > 0 {
                s = self.gate.sleep(s);
            }
            s.writers_waiting -= 1;
        }
        s.writer = true;
        Ok(())
    }

    /// down_write_trylock (folio_trylock): takes it only if free now,
    /// whatever the waiting mode; whether it did.
    pub fn try_down_write(&self) -> bool {
        let mut s = self.gate.state();
        if s.writer || s.readers > 0 {
            return false;
        }
        s.writer = true;
        true
    }

    /// up_write.
    pub fn up_write(&self) {
        let mut s = self.gate.state();
        debug_assert!(s.writer, "up_write of {} with no writer", self.class);
        s.writer = false;
        drop(s);
        self.gate.wake();
    }

    /// Whether anyone holds it, shared or exclusive.
    pub fn is_locked(&self) -> bool {
        let s = self.gate.state();
        s.writer || s.readers > 0
    }

    /// Whether a writer holds it.
    pub fn is_write_locked(&self) -> bool {
        self.gate.state().writer
    }

    /// Whether down_write would wait now.
    pub fn write_would_wait(&self) -> bool {
        let s = self.gate.state();
        s.writer || s.readers > 0
    }

    /// Whether down_read would wait now.
    pub fn read_would_wait(&self) -> bool {
        let s = self.gate.state();
        s.writer || s.writers_waiting > 0
    }
}

/// A copy in the same state (an engine's shadow for a check); nobody waits
/// on a copy.
impl Clone for RwSem {
    fn clone(&self) -> RwSem {
        RwSem { class: self.class, gate: self.gate.copy(|s| State { writers_waiting: 0, ..s }) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_trylock_takes_only_a_free_lock_even_where_taking_would_sleep() {
        let r = RwSem::new(LockClass::FolioLock, Waiting::Sleep);
        assert!(r.try_down_write());
        assert!(!r.try_down_write(), "held: refused at once, no sleep");
        r.up_write();
        r.down_read().unwrap();
        assert!(!r.try_down_write(), "a reader holds it");
        r.up_read();
        assert!(r.try_down_write());
        r.up_write();
        assert!(!r.is_locked());
    }

    #[test]
    fn readers_share_and_a_writer_excludes_all() {
        let r = RwSem::new(LockClass::InvalidateLock, Waiting::Refuse);
        r.down_read().unwrap();
        r.down_read().unwrap();
        assert_eq!(r.down_write(), Err(WouldWait(LockClass::InvalidateLock)));
        r.up_read();
        r.up_read();
        r.down_write().unwrap();
        assert!(r.is_write_locked() && r.read_would_wait());
        assert_eq!(r.down_read(), Err(WouldWait(LockClass::InvalidateLock)));
        assert_eq!(r.down_write(), Err(WouldWait(LockClass::InvalidateLock)));
        r.up_write();
        assert!(!r.is_locked());
    }

    #[test]
    fn a_sleeping_writer_gets_the_lock_when_the_readers_leave() {
        let r = std::sync::Arc::new(RwSem::new(LockClass::WritepagesRwsem, Waiting::Sleep));
        r.down_read().unwrap();
        let w = {
            let r = r.clone();
            std::thread::spawn(move || {
                r.down_write().unwrap();
                r.up_write();
            })
        };
        while !r.read_would_wait() {
            std::thread::yield_now();
        }
        r.up_read();
        w.join().unwrap();
        assert!(!r.is_locked());
    }
}
