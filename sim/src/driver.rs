//! One simulation run from its spec: build model and target, generate (or
//! replay) ops, check, crash, and on failure shrink to a trace that replays.

use std::collections::BTreeMap;

use ext4_model::{Model, MountConfig, Op, OpKind, Outcome};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::lockstep::{Begun, Failure, InFlight, Lockstep, OpStats, Target};
use crate::shrink::{drop_by_class, shrink, simpler_step};
use crate::trace::{Step, Trace};
use crate::scheduler::Tasks;
use crate::workload::WorkloadConfig;

/// Everything that fixes a run. Same spec, same binary: same result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSpec {
    pub seed: u64,
    /// Ops to generate. Default: 1000.
    pub ops: u64,
    pub mount: MountConfig,
    /// Disk profile name (see `disk::profile`). Default: "ram".
    pub profile: String,
    /// Full checks (model from scratch + target fsck) every this many ops; 0 = only at the end. Default: 500.
    pub fsck_every: u64,
    /// Mean ops between crashes; 0 = no crashes. Default: 0.
    pub crash_every: u64,
    /// Swarm testing in the workload. Default: true.
    pub swarm: bool,
    /// Device faults to inject (see `faults::parse_faults`). Default: none.
    pub faults: String,
    /// Simulated tasks interleaved by the seeded scheduler. Default: 1.
    pub tasks: u32,
    /// Size of the simulated disk. Default: [`crate::engine_target::DISK_BYTES`];
    /// small disks run into ENOSPC.
    pub disk_bytes: u64,
}

impl RunSpec {
    /// The spec a trace file describes.
    pub fn from_trace(t: &Trace) -> Result<RunSpec, String> {
        let mount = t.mount.parse::<MountConfig>().map_err(|e| e.to_string())?;
        Ok(RunSpec {
            seed: t.seed,
            ops: t.steps.len() as u64,
            mount,
            profile: t.profile.clone(),
            fsck_every: t.fsck_every,
            crash_every: t.crash_every,
            swarm: true,
            faults: t.faults.clone(),
            tasks: t.tasks,
            disk_bytes: t.disk_bytes,
        })
    }

    pub fn new(seed: u64, ops: u64, mount: MountConfig) -> Self {
        RunSpec { seed, ops, mount, profile: "ram".into(), fsck_every: 500, crash_every: 0, swarm: true, faults: String::new(), tasks: 1, disk_bytes: crate::engine_target::DISK_BYTES }
    }

    /// The command that repeats this run.
    pub fn command(&self) -> String {
        let mut cmd = format!("ext4sim run --seed {} --ops {}", self.seed, self.ops);
        let mount = self.mount.to_string();
        if !mount.is_empty() {
            cmd.push_str(&format!(" --mount {mount}"));
        }
        if self.profile != "ram" {
            cmd.push_str(&format!(" --profile {}", self.profile));
        }
        if self.crash_every > 0 {
            cmd.push_str(&format!(" --crash-every {}", self.crash_every));
        }
        if self.fsck_every != 500 {
            cmd.push_str(&format!(" --fsck-every {}", self.fsck_every));
        }
        if !self.swarm {
            cmd.push_str(" --no-swarm");
        }
        if !self.faults.is_empty() {
            cmd.push_str(&format!(" --faults {}", self.faults));
        }
        if self.tasks > 1 {
            cmd.push_str(&format!(" --tasks {}", self.tasks));
        }
        if self.disk_bytes != crate::engine_target::DISK_BYTES {
            cmd.push_str(&format!(" --disk-size {}", self.disk_bytes));
        }
        cmd
    }
}

/// Builds fresh targets for a spec (the engine, or a test double).
pub trait TargetFactory {
    type Target: Target;
    fn make(&self, spec: &RunSpec) -> Result<Self::Target, String>;
}

#[derive(Debug)]
pub struct RunResult {
    pub spec: RunSpec,
    /// Steps actually run (up to and including a failing one), crashes included.
    pub steps: Vec<Step>,
    pub stats: OpStats,
    pub failure: Option<Failure>,
    pub trace_hash: u64,
    pub image_hash: u64,
    pub report: Vec<(String, String)>,
    pub enabled_kinds: Vec<OpKind>,
    /// Ops each task ran (one entry per task).
    pub task_ops: Vec<u64>,
    /// Indices into `steps` of ops the model answered with an errno: the
    /// first thing a shrink tries to drop.
    pub errored_steps: Vec<usize>,
}

/// Where steps come from: the seeded generator, or a fixed list.
enum Source<'a> {
    Generated(Box<Tasks>),
    Fixed(std::iter::Peekable<std::slice::Iter<'a, Step>>),
}

fn execute<F: TargetFactory>(factory: &F, spec: &RunSpec, fixed: Option<&[Step]>) -> Result<(RunResult, F::Target), String> {
    spec.mount.validate().map_err(|e| format!("mount config refused: {e}"))?;
    let target = factory.make(spec)?;
    // The model's ENOSPC limits are the target's free space after mkfs.
    let mut model = Model::with_limits(&spec.mount, target.space_limits()).map_err(|e| format!("mount config refused: {e}"))?;
    // Crash checks replay a log holding every write's data; keep it only when crashing.
    let replays_crashes = fixed.is_some_and(|steps| steps.iter().any(|s| matches!(s, Step::Crash { .. })));
    model.set_crash_log(spec.crash_every > 0 || replays_crashes || !spec.faults.is_empty());
    let mut ls = Lockstep::new(spec.mount, model, target);
    if fixed.is_some() {
        // A replay fires exactly the trace's faults, each with its op.
        ls.target.script_faults();
    }
    let mut crash_rng = ChaCha8Rng::seed_from_u64(spec.seed);
    crash_rng.set_stream(0x0063_7261_7368); // "crash"
    let workload = Tasks::new(spec.seed, spec.tasks, WorkloadConfig { swarm: spec.swarm, ..WorkloadConfig::new(spec.mount.block_size) });
    let enabled_kinds = workload.enabled_kinds();
    let mut task_ops = vec![0u64; workload.count() as usize];
    let mut task = 0u32;
    let mut source = match fixed {
        Some(ops) => Source::Fixed(ops.iter().peekable()),
        None => Source::Generated(Box::new(workload)),
    };
    let mut ran: Vec<Step> = Vec::new();
    let mut errored_steps = Vec::new();
    let mut failure = None;
    let mut ops_run = 0u64;
    // Split ops (fsyncs, -j switches) waiting for their task to run again, by task.
    let mut in_flight: BTreeMap<u32, InFlight> = BTreeMap::new();
    // Ops drawn for a task that sleeps on a lock, by task: it runs them
    // once the lock is free.
    let mut asleep: BTreeMap<u32, Op> = BTreeMap::new();
    // In a replay, the task to go back to after finishing a lock's holder.
    let mut resume: Option<u32> = None;
    let mut fsck_due = false;
    loop {
        if let Some(t) = resume.take() {
            if t != task {
                ran.push(Step::Task(t));
                task = t;
            }
        }
        // Once the ops are all drawn (or the trace is over), begun ops return.
        let wind_down = |task: &mut u32, ran: &mut Vec<Step>, in_flight: &BTreeMap<u32, InFlight>| {
            let &next = in_flight.keys().next()?;
            if next != *task {
                ran.push(Step::Task(next));
                *task = next;
            }
            Some(Step::Finish)
        };
        let step = match &mut source {
            Source::Generated(_) if ops_run >= spec.ops => match wind_down(&mut task, &mut ran, &in_flight) {
                Some(s) => s,
                None => break,
            },
            Source::Generated(w) => {
                let sleeps = |t: u32| asleep.get(&t).is_some_and(|op| ls.target.waits_for(op).is_some());
                let mut next = w.pick(|t| in_flight.contains_key(&t));
                if sleeps(next) {
                    match w.pick_among(|t| !sleeps(t)) {
                        Some(t) => next = t,
                        None => {
                            let what = "every task sleeps on a lock that no op in flight holds".to_string();
                            failure = Some(Failure::Lock { index: ls.index, what });
                            break;
                        }
                    }
                }
                let step = if in_flight.contains_key(&next) {
                    Step::Finish
                } else {
                    let op = match asleep.remove(&next) {
                        Some(op) => op,
                        None => w.op(),
                    };
                    if ls.target.waits_for(&op).is_some() {
                        ls.stats.lock_sleeps += 1;
                        asleep.insert(next, op);
                        continue;
                    }
                    if w.split(&op) {
                        Step::Begin(op)
                    } else {
                        Step::Op(op)
                    }
                };
                if next != task && w.count() > 1 {
                    // A switch is a step: the trace shows who ran what.
                    ran.push(Step::Task(next));
                }
                task = next;
                step
            }
            Source::Fixed(it) => {
                // An op that would sleep on a lock waits until the lock's
                // holder runs its second half.
                let sleeps = matches!(it.peek(), Some(Step::Op(op) | Step::Begin(op)) if ls.target.waits_for(op).is_some());
                let holder = if sleeps { in_flight.iter().find(|(_, f)| f.holder().is_some()).map(|(t, _)| *t) } else { None };
                match holder {
                    Some(holder) => {
                        ls.stats.lock_sleeps += 1;
                        resume = Some(task);
                        if holder != task {
                            ran.push(Step::Task(holder));
                            task = holder;
                        }
                        Step::Finish
                    }
                    // With no holder in flight the op runs and meets the lock.
                    None => match it.next() {
                        Some(s) => s.clone(),
                        None => match wind_down(&mut task, &mut ran, &in_flight) {
                            Some(s) => s,
                            None => break,
                        },
                    },
                }
            }
        };
        ran.push(step.clone());
        // The op, whether it is a new one (not a finish), and its outcome
        // (None while it is in flight).
        let (op, new_op, stepped): (Op, bool, Result<Option<Outcome>, Failure>) = match step {
            Step::Crash { seed } => {
                // A crash ends what was in flight: those syncs never returned.
                in_flight.clear();
                if let Err(f) = ls.crash(seed) {
                    failure = Some(f);
                    break;
                }
                continue;
            }
            Step::Fault(event) => {
                ls.arm_fault(event);
                continue;
            }
            Step::Task(t) => {
                task = t;
                continue;
            }
            Step::Op(op) => {
                let stepped = ls.step(&op).map(Some);
                (op, true, stepped)
            }
            Step::Begin(op) => {
                let stepped = ls.begin(&op).map(|begun| match begun {
                    Begun::Completed(o) => Some(o),
                    Begun::InFlight(flight) => {
                        in_flight.insert(task, flight);
                        None
                    }
                });
                (op, true, stepped)
            }
            Step::Finish => match in_flight.remove(&task) {
                Some(flight) => (flight.op.clone(), false, ls.finish(flight).map(Some)),
                // Its begin was shrunk away: nothing to finish.
                None => continue,
            },
        };
        if new_op {
            ops_run += 1;
            if let Some(n) = task_ops.get_mut(task as usize) {
                *n += 1;
            }
        }
        if let Source::Generated(_) = source {
            // Faults the op met go into the trace just before it.
            let fired = ls.target.take_fired_faults();
            if !fired.is_empty() {
                let op_step = ran.pop();
                ran.extend(fired.into_iter().map(Step::Fault));
                ran.extend(op_step);
            }
        }
        let outcome = match stepped {
            Ok(o) => {
                if o.as_ref().is_some_and(|o| o.is_err()) {
                    errored_steps.push(ran.len() - 1);
                }
                o
            }
            Err(f) => {
                failure = Some(f);
                break;
            }
        };
        // Before any resync remounts: a lock left held by an op that has
        // returned, error paths included, puts every later handle to sleep.
        if let Err(f) = ls.check_locks(in_flight.values()) {
            failure = Some(f);
            break;
        }
        if ls.space_pending() || ls.fault_pending() {
            // The model adopts the target's state next: what was in flight
            // is dropped with the model it began in.
            in_flight.clear();
        }
        if ls.space_pending() {
            // The target ran out of room where the model, blind to metadata,
            // still had some: the model takes the target's state.
            if let Err(f) = ls.resync_after_space() {
                failure = Some(f);
                break;
            }
            continue;
        }
        if ls.fault_pending() {
            // The op met a device fault: its answer is not comparable, and the
            // filesystem's state is whatever the fault left.
            if let Err(f) = ls.resync_after_fault() {
                failure = Some(f);
                break;
            }
            continue;
        }
        fsck_due |= new_op && spec.fsck_every > 0 && ops_run % spec.fsck_every == 0;
        let mut checks = || -> Result<(), Failure> {
            ls.check_model()?;
            // The target's fsck unmounts it, which no op in flight would
            // live through: the check waits until none is.
            if fsck_due && in_flight.is_empty() {
                fsck_due = false;
                ls.full_check()?;
            }
            Ok(())
        };
        if let Err(f) = checks() {
            failure = Some(f);
            break;
        }
        if let Source::Generated(w) = &mut source {
            if let Some(outcome) = &outcome {
                w.observe(task, &op, outcome);
            }
            // Crash points are drawn here and recorded as steps, so a trace
            // replays (and shrinks) with its crashes where they happened.
            if new_op && spec.crash_every > 0 && crash_rng.random_range(0..spec.crash_every) == 0 {
                let seed = crash_rng.random();
                ran.push(Step::Crash { seed });
                in_flight.clear();
                if let Err(f) = ls.crash(seed) {
                    failure = Some(f);
                    break;
                }
            }
        }
    }
    if failure.is_none() {
        failure = ls.full_check().err();
    }
    let trace_hash = ls.trace_hash();
    let image_hash = ls.target.image_hash();
    let report = ls.target.report();
    let result = RunResult { spec: spec.clone(), steps: ran, stats: ls.stats, failure, trace_hash, image_hash, report, enabled_kinds, task_ops, errored_steps };
    Ok((result, ls.target))
}

/// Runs a spec with generated ops.
pub fn run_seed<F: TargetFactory>(factory: &F, spec: &RunSpec) -> Result<RunResult, String> {
    execute(factory, spec, None).map(|(r, _)| r)
}

/// Runs a spec and hands back the target too (to export its image).
pub fn run_seed_keeping_target<F: TargetFactory>(factory: &F, spec: &RunSpec) -> Result<(RunResult, F::Target), String> {
    execute(factory, spec, None)
}

/// Runs a fixed list of steps (a replayed trace).
pub fn run_steps<F: TargetFactory>(factory: &F, spec: &RunSpec, steps: &[Step]) -> Result<RunResult, String> {
    execute(factory, spec, Some(steps)).map(|(r, _)| r)
}

/// Runs a fixed op list with no crashes.
pub fn run_ops<F: TargetFactory>(factory: &F, spec: &RunSpec, ops: &[Op]) -> Result<RunResult, String> {
    let steps: Vec<Step> = ops.iter().cloned().map(Step::Op).collect();
    run_steps(factory, spec, &steps)
}

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
    let mut fails = |candidate: &[Step]| {
        run_steps(factory, &result.spec, candidate)
            .ok()
            .and_then(|r| r.failure)
            .is_some_and(|f| f.same_kind(failure))
    };
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
    let spec = &result.spec;
    let trace = Trace {
        seed: spec.seed,
        mount: spec.mount.to_string(),
        profile: spec.profile.clone(),
        crash_every: spec.crash_every,
        fsck_every: spec.fsck_every,
        faults: spec.faults.clone(),
        tasks: spec.tasks,
        disk_bytes: spec.disk_bytes,
        steps,
    };
    Some(ShrunkTrace { trace, runs, budget_spent, replays })
}
