//! A failing run made small: the steps that failed or only looked go first,
//! then delta debugging, then simpler steps, every candidate re-run from a
//! fresh model and target and kept only if it fails the same way
//! ([`Failure::same_kind`]). The algorithms are in [`crate::shrink`].

use super::{run_steps, RunResult};
use crate::shrink::{drop_by_class, shrink, simpler_step};
use crate::target::TargetFactory;
use crate::trace::{Step, Trace};

/// A failure's shrunk trace and what shrinking it cost.
#[derive(Debug)]
pub struct ShrunkTrace {
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
    let mut fails = |candidate: &[Step]| run_steps(factory, &result.spec, candidate).ok().and_then(|r| r.failure).is_some_and(|f| f.same_kind(failure));
    // One replay first: a failure its steps do not reproduce would spend the
    // whole budget on candidates that cannot fail.
    let replays = fails(&result.steps);
    let (steps, runs, budget_spent) = if replays {
        let (start, hinted) = drop_by_class(&result.steps, &result.errored_steps, &mut fails);
        let found = shrink(&start, simpler_step, fails);
        (found.items, 1 + hinted + found.runs, found.budget_spent)
    } else {
        (result.steps.clone(), 1, false)
    };
    Some(ShrunkTrace { trace: Trace { spec: result.spec.clone(), steps, mkfs: None }, runs, budget_spent, replays })
}
