//! Many seeds on worker threads. Each seed is one deterministic run; the
//! results come back in seed order whatever the threads did. A seed whose
//! run panics (or whose target cannot even be built) is a failed seed like
//! any other, never the end of the swarm.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::panics::catching;
use crate::run::{run_seed, RunResult, RunSpec};
use crate::target::TargetFactory;

/// Most worker threads a swarm starts.
pub const MAX_JOBS: usize = 256;

/// One seed's outcome: its run, or why it could not run.
pub type SeedRun = (u64, Result<RunResult, String>);

/// Runs `specs` on `jobs` threads, calling `done(finished, total)` after
/// each; returns one entry per spec, in the order given.
pub fn run_swarm<F: TargetFactory + Sync>(factory: &F, specs: &[RunSpec], jobs: usize, done: &(dyn Fn(usize, usize) + Sync)) -> Vec<SeedRun> {
    let next = AtomicUsize::new(0);
    let finished = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, SeedRun)>> = Mutex::new(Vec::with_capacity(specs.len()));
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, MAX_JOBS) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(spec) = specs.get(i) else { break };
                // A panic outside the steps (building the target, say) is
                // the seed's failure too.
                let run = catching(|| run_seed(factory, spec)).unwrap_or_else(|panic| Err(format!("panic: {panic}")));
                results.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((i, (spec.seed, run)));
                done(finished.fetch_add(1, Ordering::SeqCst) + 1, specs.len());
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}
