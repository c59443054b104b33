//! Lock discipline, checked rather than trusted, as the kernel's lockdep
//! checks it: every acquisition is recorded per holder (an op, or a split
//! op between its halves), and
//!
//! - taking B while holding A, after A was once taken while holding B, is an
//!   inversion: two tasks doing the two orders can deadlock. Reported with
//!   both stacks, the one now and the one that set the order.
//! - a lock still held when its op returns is a leak;
//! - releasing a lock the holder does not hold is an imbalance.
//!
//! Locks of one class nest without an order (two inodes' locks in a
//! rename): lockdep's subclasses, not modelled.

use std::collections::BTreeMap;
use std::fmt;

use super::LockClass;

/// One acquisition, as a stack entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquired {
    pub class: LockClass,
    pub shared: bool,
    /// Which lock of the class: an inode number, 0 for a filesystem's own.
    pub instance: u64,
    /// The kernel function that takes it here.
    pub by: &'static str,
}

impl fmt::Display for Acquired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mode = if self.shared { "shared" } else { "exclusive" };
        write!(f, "{} ({mode}", self.class)?;
        if self.instance != 0 {
            write!(f, ", inode {}", self.instance)?;
        }
        write!(f, ") in {}", self.by)
    }
}

fn show(stack: &[Acquired]) -> String {
    if stack.is_empty() {
        return "nothing".into();
    }
    stack.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" -> ")
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LockViolation {
    Inversion { holder: u64, taking: Acquired, stack: Vec<Acquired>, earlier: Vec<Acquired> },
    HeldAtReturn { holder: u64, op: String, stack: Vec<Acquired> },
    ReleasedUnheld { holder: u64, class: LockClass, stack: Vec<Acquired> },
}

impl fmt::Display for LockViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LockViolation::Inversion { holder, taking, stack, earlier } => write!(
                f,
                "lock order inversion: holder {holder} takes {taking} while holding [{}]; the reverse order was set by [{}]",
                show(stack),
                show(earlier)
            ),
            LockViolation::HeldAtReturn { holder, op, stack } => write!(f, "{op} returned holding [{}] (holder {holder})", show(stack)),
            LockViolation::ReleasedUnheld { holder, class, stack } => write!(f, "holder {holder} released {class} it does not hold; it holds [{}]", show(stack)),
        }
    }
}

/// The class lockdep orders by. jbd2's updates barrier and its handles
/// are one lock to lockdep (`j_trans_commit_map`): lock_updates waits for
/// every handle, so it sits where a handle sits in the order.
fn order_class(class: LockClass) -> LockClass {
    match class {
        LockClass::JournalUpdates => LockClass::JournalHandle,
        other => other,
    }
}

#[derive(Clone, Debug, Default)]
pub struct LockDep {
    held: BTreeMap<u64, Vec<Acquired>>,
    /// (outer, inner) -> the stack, ending in the inner lock, that first
    /// took them in that order.
    order: BTreeMap<(LockClass, LockClass), Vec<Acquired>>,
    violations: Vec<LockViolation>,
    acquisitions: u64,
}

impl LockDep {
    pub fn acquired(&mut self, holder: u64, a: Acquired) {
        self.acquisitions += 1;
        let stack = self.held.entry(holder).or_default();
        let inner = order_class(a.class);
        for outer in stack.iter() {
            let outer_class = order_class(outer.class);
            if outer_class == inner {
                continue;
            }
            if let Some(earlier) = self.order.get(&(inner, outer_class)) {
                self.violations.push(LockViolation::Inversion { holder, taking: a.clone(), stack: stack.clone(), earlier: earlier.clone() });
                continue;
            }
            self.order.entry((outer_class, inner)).or_insert_with(|| {
                let mut seen = stack.clone();
                seen.push(a.clone());
                seen
            });
        }
        stack.push(a);
    }

    pub fn released(&mut self, holder: u64, class: LockClass, instance: u64) {
        let stack = self.held.entry(holder).or_default();
        match stack.iter().rposition(|a| a.class == class && a.instance == instance) {
            Some(i) => {
                stack.remove(i);
            }
            None => {
                let stack = stack.clone();
                self.violations.push(LockViolation::ReleasedUnheld { holder, class, stack });
            }
        }
        if self.held.get(&holder).is_some_and(Vec::is_empty) {
            self.held.remove(&holder);
        }
    }

    /// The op of `holder` returned: it must hold nothing. What it held is
    /// forgotten, so one leak is reported once.
    pub fn op_returned(&mut self, holder: u64, op: &str) {
        if let Some(stack) = self.held.remove(&holder) {
            self.violations.push(LockViolation::HeldAtReturn { holder, op: op.to_string(), stack });
        }
    }

    pub fn held_by(&self, holder: u64) -> &[Acquired] {
        self.held.get(&holder).map_or(&[], Vec::as_slice)
    }

    /// Every holder with what it holds.
    pub fn holders(&self) -> impl Iterator<Item = (u64, &[Acquired])> {
        self.held.iter().map(|(h, s)| (*h, s.as_slice()))
    }

    pub fn take_violations(&mut self) -> Vec<LockViolation> {
        std::mem::take(&mut self.violations)
    }

    pub fn acquisitions(&self) -> u64 {
        self.acquisitions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(class: LockClass, by: &'static str) -> Acquired {
        Acquired { class, shared: false, instance: 12, by }
    }

    #[test]
    fn an_inversion_is_reported_with_both_stacks() {
        let mut dep = LockDep::default();
        dep.acquired(1, a(LockClass::WritepagesRwsem, "ext4_change_inode_journal_flag"));
        dep.acquired(1, a(LockClass::JournalUpdates, "ext4_change_inode_journal_flag"));
        dep.released(1, LockClass::JournalUpdates, 12);
        dep.released(1, LockClass::WritepagesRwsem, 12);
        assert!(dep.take_violations().is_empty());
        // Write-back that starts its handle before the writepages lock: a
        // handle orders as the updates barrier does.
        dep.acquired(2, a(LockClass::JournalHandle, "ext4_do_writepages"));
        dep.acquired(2, a(LockClass::WritepagesRwsem, "ext4_do_writepages"));
        let v = dep.take_violations();
        assert_eq!(v.len(), 1);
        let text = v[0].to_string();
        assert!(text.contains("inversion") && text.contains("ext4_do_writepages") && text.contains("ext4_change_inode_journal_flag"), "{text}");
    }

    #[test]
    fn a_lock_held_at_return_or_released_twice_is_reported() {
        let mut dep = LockDep::default();
        dep.acquired(7, a(LockClass::InvalidateLock, "ext4_change_inode_journal_flag"));
        dep.op_returned(7, "set_journal_data /f -j");
        dep.released(7, LockClass::InvalidateLock, 12);
        let v = dep.take_violations();
        assert!(matches!(&v[..], [LockViolation::HeldAtReturn { .. }, LockViolation::ReleasedUnheld { .. }]), "{v:?}");
        assert!(v[0].to_string().contains("invalidate_lock"));
        dep.op_returned(7, "again");
        assert!(dep.take_violations().is_empty(), "a leak is reported once");
    }
}
