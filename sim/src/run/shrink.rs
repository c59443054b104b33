//! A failing run made small: the steps that failed or only looked go first,
//! then delta debugging, then the spec, tasks, names and numbers made plain
//! ([`crate::shrink::shrink_trace`]), every candidate re-run from a fresh
//! model and target and kept only if it fails the same way
//! ([`Failure::same_kind`]). The algorithms are in [`crate::shrink`].

use super::{run_steps, RunResult};
use crate::shrink::{drop_by_class, shrink_trace, Budget};
use crate::target::TargetFactory;
use crate::trace::Trace;

/// A failure's shrunk trace and what shrinking it cost.
#[derive(Debug)]
pub struct ShrunkTrace {
    /// The steps, and the spec they fail under: the run's, with what the
    /// failure does not need back at its defaults.
    pub trace: Trace,
    pub runs: usize,
    /// The shrink budget ran out: `ext4sim shrink` on the trace goes on.
    pub budget_spent: bool,
    /// The run's own steps fail the same way when replayed. When they do not
    /// (a failure outside every step: a runner bug), nothing is shrunk and
    /// `trace` holds all the steps.
    pub replays: bool,
}

/// Shrinks a failing run to a minimal trace that fails the same way.
pub fn shrink_failure<F: TargetFactory>(factory: &F, result: &RunResult) -> Option<ShrunkTrace> {
    let failure = result.failure.as_ref()?;
    let fails = |candidate: &Trace| run_steps(factory, &candidate.spec, &candidate.steps).ok().and_then(|r| r.failure).is_some_and(|f| f.same_kind(failure));
    let whole = Trace { spec: result.spec.clone(), steps: result.steps.clone() };
    let mut budget = Budget::default();
    // One replay first: a failure its steps do not reproduce would spend the
    // whole budget on candidates that cannot fail.
    budget.spend(whole.steps.len());
    if !fails(&whole) {
        return Some(ShrunkTrace { trace: whole, runs: budget.runs(), budget_spent: false, replays: false });
    }
    let start = drop_by_class(&result.steps, &result.errored_steps, &mut budget, |steps| fails(&Trace { spec: result.spec.clone(), steps: steps.to_vec() }));
    let trace = shrink_trace(&Trace { spec: result.spec.clone(), steps: start }, &mut budget, fails);
    Some(ShrunkTrace { trace, runs: budget.runs(), budget_spent: budget.exhausted(), replays: true })
}
