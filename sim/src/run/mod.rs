//! One simulation run from its spec: build model and target, take steps
//! from their source (generated or replayed), run each in lockstep with the
//! checks after it, and end with a full check. A panic in a step is a
//! failure of the run like any other.
//!
//! - [`spec`]: what fixes a run, and the one table of defaults.
//! - [`source`]: where steps come from.
//! - [`state`]: how a step moves the run; [`flights`]: ops between halves.
//! - [`shrink`]: a failing run made small, its steps and its spec.

pub mod flights;
pub mod shrink;
pub mod source;
pub mod spec;
pub mod state;
#[cfg(test)]
pub(crate) mod test_target;

use ext4_model::{Model, Op, OpKind};

pub use shrink::{shrink_failure, ShrunkTrace};
pub use spec::{ProfileSpec, RunSpec};

use crate::disk::FaultConfig;
use crate::failure::Failure;
use crate::figure::Figure;
use crate::lockstep::{Lockstep, OpStats};
use crate::panics::catching;
use crate::sim_time::SimTime;
use crate::target::{Target, TargetFactory};
use crate::trace::Step;
use source::StepSource;
use state::RunState;

#[derive(Debug)]
pub struct RunResult {
    pub spec: RunSpec,
    /// Steps actually run (up to and including a failing one), crashes included.
    pub steps: Vec<Step>,
    pub stats: OpStats,
    pub time: SimTime,
    pub failure: Option<Failure>,
    pub trace_hash: u64,
    pub image_hash: u64,
    pub report: Vec<(String, Figure)>,
    pub enabled_kinds: Vec<OpKind>,
    /// Ops each task ran (one entry per task).
    pub task_ops: Vec<u64>,
    /// Indices into `steps` of ops the model answered with an errno: the
    /// first thing a shrink tries to drop.
    pub errored_steps: Vec<usize>,
    /// In a replay: fault steps (indices into `steps`) naming a device
    /// command their op never issued, with the commands it did issue.
    pub unfired_faults: Vec<(usize, u32)>,
}

impl RunResult {
    /// The trace of a replay of `replayed`, as `ext4sim replay` takes it:
    /// those steps less the faults whose op never issued the command they
    /// name (a replay refuses those). A replay runs its steps in order and
    /// adds no faults of its own, so the n-th fault it ran is the n-th of
    /// `replayed` (its other steps are not: it records the finishes and
    /// switches its scheduling adds).
    pub fn replayed_trace(&self, replayed: &[Step]) -> crate::trace::Trace {
        let is_fault = |s: &Step| matches!(s, Step::Fault(_));
        let unfired: std::collections::BTreeSet<usize> = self.unfired_faults.iter().map(|&(i, _)| self.steps[..i].iter().filter(|s| is_fault(s)).count()).collect();
        let mut fault = 0;
        let steps = replayed
            .iter()
            .filter(|s| {
                if !is_fault(s) {
                    return true;
                }
                fault += 1;
                !unfired.contains(&(fault - 1))
            })
            .cloned()
            .collect();
        crate::trace::Trace { spec: self.spec.clone(), steps }
    }
}

/// Told how many ops a run has done, now and then.
pub type Progress<'a> = &'a dyn Fn(u64);

/// Where a run's steps come from.
enum Plan {
    /// Drawn from the spec's seed.
    Seeded,
    /// Drawn from a fuzzer's input.
    Input(crate::draws::InputDraws),
    /// A fixed list.
    Replay(Vec<Step>),
}

fn execute<F: TargetFactory>(factory: &F, spec: &RunSpec, plan: Plan, progress: Progress) -> Result<(RunResult, F::Target), String> {
    spec.validate()?;
    let target = factory.make(spec)?;
    // The model's ENOSPC limits are the target's free space after mkfs.
    let mut model = Model::with_limits(&spec.mount, target.space_limits()).map_err(|e| format!("mount config refused: {e}"))?;
    // Crash checks replay a log holding every write's data; keep it only when crashing.
    let replays_crashes = matches!(&plan, Plan::Replay(steps) if steps.iter().any(|s| matches!(s, Step::Crash { .. })));
    model.set_crash_log(spec.crash_every > 0 || replays_crashes || spec.faults != FaultConfig::NONE);
    let mut ls = Lockstep::new(spec.mount, model, target);
    // A fuzzer has no use for the image's hash or the report's figures, and
    // they cost a tenth of a short input's run: left out for inputs.
    let figures = !matches!(plan, Plan::Input(_));
    let mut source = match plan {
        Plan::Replay(steps) => {
            // A replay fires exactly the trace's faults, each with its op.
            ls.script_faults();
            StepSource::replay(steps)
        }
        Plan::Seeded => StepSource::generated(spec),
        Plan::Input(input) => StepSource::from_input(spec, input),
    };
    let generated = matches!(source, StepSource::Generated(_));
    let mut st = RunState::new(ls, spec.tasks, spec.fsck_every, generated);
    let failure = run_steps_of(&mut source, &mut st, progress);
    let RunState { mut ls, steps, errored, task_ops, unfired, .. } = st;
    let trace_hash = ls.trace_hash();
    // A target that panicked may panic again when asked for its figures.
    let image_hash = if figures { catching(|| ls.target_mut().image_hash()).unwrap_or(0) } else { 0 };
    let report = if figures { catching(|| ls.target_mut().report()).unwrap_or_else(|p| vec![("report".into(), Figure::Text(format!("unavailable: {p}")))]) } else { Vec::new() };
    let result = RunResult {
        spec: spec.clone(),
        steps,
        stats: ls.stats().clone(),
        time: ls.time().clone(),
        failure,
        trace_hash,
        image_hash,
        report,
        enabled_kinds: source.enabled_kinds(),
        task_ops,
        errored_steps: errored,
        unfired_faults: unfired,
    };
    Ok((result, ls.into_target()))
}

/// Runs steps until the source ends or one fails; the full check at the end.
fn run_steps_of<T: Target>(source: &mut StepSource, st: &mut RunState<T>, progress: Progress) -> Option<Failure> {
    loop {
        let index = st.ls.index();
        let stepped = catching(|| -> Result<bool, Failure> {
            let Some(step) = source.next(st)? else { return Ok(false) };
            if let Some(ran) = st.execute(step)? {
                source.after(st, &ran)?;
            }
            Ok(true)
        });
        match stepped {
            Ok(Ok(true)) => progress(st.ops_run),
            Ok(Ok(false)) => break,
            Ok(Err(f)) => return Some(f),
            Err(message) => return Some(Failure::Panic { index, op: panicked_op(&st.steps), message }),
        }
    }
    match catching(|| st.ls.final_check()) {
        Ok(checked) => checked.err(),
        Err(message) => Some(Failure::Panic { index: st.ls.index(), op: None, message }),
    }
}

/// The op of the step that was running when a panic struck, if it ran one.
fn panicked_op(steps: &[Step]) -> Option<Op> {
    match steps.last() {
        Some(Step::Op(op) | Step::Begin(op)) => Some(op.clone()),
        _ => None,
    }
}

fn no_progress(_: u64) {}

/// Runs a spec with generated ops.
pub fn run_seed<F: TargetFactory>(factory: &F, spec: &RunSpec) -> Result<RunResult, String> {
    execute(factory, spec, Plan::Seeded, &no_progress).map(|(r, _)| r)
}

/// Runs a spec with generated ops, telling `progress` how far it got.
pub fn run_seed_with_progress<F: TargetFactory>(factory: &F, spec: &RunSpec, progress: Progress) -> Result<RunResult, String> {
    execute(factory, spec, Plan::Seeded, progress).map(|(r, _)| r)
}

/// Runs a spec and hands back the target too (to export its image).
pub fn run_seed_keeping_target<F: TargetFactory>(factory: &F, spec: &RunSpec) -> Result<(RunResult, F::Target), String> {
    execute(factory, spec, Plan::Seeded, &no_progress)
}

/// Runs a fixed list of steps (a replayed trace, a shrink candidate).
pub fn run_steps<F: TargetFactory>(factory: &F, spec: &RunSpec, steps: &[Step]) -> Result<RunResult, String> {
    execute(factory, spec, Plan::Replay(steps.to_vec()), &no_progress).map(|(r, _)| r)
}

/// Runs a spec whose ops, interleaving, crash points and pauses a fuzzer's
/// input draws (the `lockstep` fuzz target): what ran is in the result's
/// steps, a trace that replays like any other.
pub fn run_input<F: TargetFactory>(factory: &F, spec: &RunSpec, input: &[u8]) -> Result<RunResult, String> {
    execute(factory, spec, Plan::Input(crate::draws::InputDraws::new(input)), &no_progress).map(|(r, _)| r)
}

/// Runs a fixed op list with no crashes.
pub fn run_ops<F: TargetFactory>(factory: &F, spec: &RunSpec, ops: &[Op]) -> Result<RunResult, String> {
    let steps: Vec<Step> = ops.iter().cloned().map(Step::Op).collect();
    run_steps(factory, spec, &steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::test_target::Knobs;
    use ext4_model::MountConfig;

    fn spec(ops: u64) -> RunSpec {
        RunSpec { fsck_every: 0, ..RunSpec::new(7, ops, MountConfig::default()) }
    }

    fn create(path: &str) -> Op {
        Op::Create { path: path.into(), perm: 0o644 }
    }

    #[test]
    fn replaying_a_generated_runs_steps_gives_its_steps_and_trace_hash_again() {
        let knobs = Knobs { splits_fsync: true, memory_low: true, ..Knobs::default() };
        let spec = RunSpec { tasks: 3, fsck_every: 50, crash_every: 40, ..RunSpec::new(3, 300, MountConfig::default()) };
        let generated = run_seed(&knobs, &spec).unwrap();
        assert_eq!(generated.failure, None);
        let has = |f: fn(&Step) -> bool| generated.steps.iter().any(f);
        assert!(
            has(|s| matches!(s, Step::Begin(_))) && has(|s| matches!(s, Step::Task(_))) && has(|s| matches!(s, Step::Crash { .. })) && has(|s| matches!(s, Step::Reclaim)),
            "the run interleaves, splits, crashes and reclaims"
        );
        let replayed = run_steps(&knobs, &spec, &generated.steps).unwrap();
        assert_eq!(replayed.failure, None);
        assert_eq!(replayed.steps, generated.steps);
        assert_eq!(replayed.trace_hash, generated.trace_hash);
        assert_eq!((replayed.stats, replayed.task_ops), (generated.stats, generated.task_ops));
    }

    #[test]
    fn a_panic_in_a_target_op_is_a_panic_failure_naming_the_op_and_ends_the_run() {
        let knobs = Knobs { panic_on: Some(OpKind::Rename), ..Knobs::default() };
        let rename = Op::Rename { from: "/a".into(), to: "/b".into() };
        let result = run_ops(&knobs, &spec(3), &[create("/a"), rename.clone(), Op::Stat { path: "/b".into() }]).unwrap();
        match &result.failure {
            Some(Failure::Panic { index, op, message }) => {
                assert_eq!((*index, op.as_ref()), (1, Some(&rename)));
                assert!(message.starts_with("the double panics in Rename"), "{message}");
            }
            other => panic!("expected a panic failure, got {other:?}"),
        }
        assert_eq!(result.steps, [Step::Op(create("/a")), Step::Op(rename)], "nothing runs after the panic");
    }

    #[test]
    fn a_livelock_ends_the_run_as_one_at_its_op() {
        let knobs = Knobs { livelocks_on: Some(OpKind::Mkdir), ..Knobs::default() };
        let steps: Vec<Step> = [create("/a"), Op::Mkdir { path: "/d".into(), perm: 0o755 }, create("/b")].into_iter().map(Step::Op).collect();
        let r = run_steps(&knobs, &spec(3), &steps).unwrap();
        match r.failure {
            Some(Failure::Livelock { index, op, what }) => {
                assert_eq!((index, op), (1, Some(OpKind::Mkdir)), "ops count from 0");
                assert!(what.contains("nothing to reclaim"), "{what}");
            }
            other => panic!("expected a livelock, got {other:?}"),
        }
        assert_eq!(r.steps.len(), 2, "the run stops at the op that met it");
    }

    #[test]
    fn a_divergence_ends_the_run_at_its_step() {
        fn eio_on_stat(op: &Op) -> Option<ext4_model::Outcome> {
            matches!(op, Op::Stat { .. }).then_some(Err(ext4_model::Errno::EIO))
        }
        let knobs = Knobs { lie: Some(eio_on_stat), ..Knobs::default() };
        let ops = [create("/a"), Op::Stat { path: "/a".into() }, create("/b")];
        let result = run_ops(&knobs, &spec(3), &ops).unwrap();
        assert!(matches!(&result.failure, Some(Failure::Divergence(d)) if d.index == 1), "{:?}", result.failure);
        assert_eq!(result.steps.len(), 2);
        assert_eq!(result.stats.fscks, 0, "a failed run skips the final check");
    }

    #[test]
    fn the_check_at_the_end_reads_back_every_name() {
        let names = crate::lockstep::READ_BACK_PER_CHECK.names + 90;
        let ops: Vec<Step> = (0..names).map(|i| Step::Op(create(&format!("/f{i}")))).collect();
        let (result, target) = execute(&Knobs::default(), &spec(names), Plan::Replay(ops), &no_progress).unwrap();
        assert_eq!((result.failure, result.stats.fscks), (None, 1));
        let seen = &target.read_back[0];
        // Every file, the root and lost+found: more than a periodic check reads.
        assert_eq!(seen.len() as u64, names + 2);
        assert!(seen.iter().any(|p| p == "/f0") && seen.iter().any(|p| *p == format!("/f{}", names - 1)));
    }

    #[test]
    fn the_final_check_runs_at_the_end_of_every_run() {
        let knobs = Knobs { fsck_fails_from: Some(3), ..Knobs::default() };
        let two = run_ops(&knobs, &spec(2), &[create("/a"), create("/b")]).unwrap();
        assert_eq!((two.failure, two.stats.fscks), (None, 1), "no periodic checks, one at the end");
        let three = run_ops(&knobs, &spec(3), &[create("/a"), create("/b"), create("/c")]).unwrap();
        assert_eq!(three.failure, Some(Failure::TargetFsck { index: 3, what: "the double's fsck fails after 3 ops".into() }));
        assert_eq!(three.stats.fscks, 1);
    }
}
