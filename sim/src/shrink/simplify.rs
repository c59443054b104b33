//! What is left of a failing trace once steps are dropped, made plain: a
//! spec nearer the defaults, fewer tasks, short names, small numbers. Each
//! pass offers candidates one at a time through a [`Trial`], which keeps a
//! candidate only if it still fails, on the shrink's one budget.

use super::{names, numbers, spec, tasks, Budget};
use crate::trace::Trace;

/// Judges candidates for the passes: keeps one only if it still fails, and
/// stops judging once the budget is spent.
pub struct Trial<'a> {
    budget: &'a mut Budget,
    fails: &'a mut dyn FnMut(&Trace) -> bool,
}

impl<'a> Trial<'a> {
    pub fn new(budget: &'a mut Budget, fails: &'a mut dyn FnMut(&Trace) -> bool) -> Trial<'a> {
        Trial { budget, fails }
    }

    /// Makes `candidate` (without its orphan finishes) the current trace if
    /// it still fails. False when it does not, when it is no change, or when
    /// the budget is spent.
    pub fn keep(&mut self, current: &mut Trace, candidate: Trace) -> bool {
        let candidate = candidate.without_orphan_finishes();
        if candidate == *current || self.budget.exhausted() {
            return false;
        }
        self.budget.spend(candidate.steps.len());
        if (self.fails)(&candidate) {
            *current = candidate;
            true
        } else {
            false
        }
    }

    pub fn exhausted(&self) -> bool {
        self.budget.exhausted()
    }
}

/// One round of every pass. Fewer tasks come first, since merging tasks
/// drops steps and so makes every later re-run cheaper; names before
/// numbers, since a rename never needs a number changed with it.
pub fn simplify(trace: &Trace, trial: &mut Trial) -> Trace {
    let mut current = trace.clone();
    tasks::fewer_tasks(&mut current, trial);
    spec::plainer_spec(&mut current, trial);
    names::shorter_names(&mut current, trial);
    numbers::smaller_numbers(&mut current, trial);
    current
}
