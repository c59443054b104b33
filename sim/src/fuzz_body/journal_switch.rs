//! The `journal_switch` target: chattr +j/-j against the rivals the
//! switch locks out, in lockstep under the seeded scheduler, and the seed
//! corpus its generator keeps.

use arbitrary::Unstructured;
use ext4_model::{MountConfig, Op, OpKind};

use super::MAX_FUZZ_OPS;
use crate::run::RunResult;

/// Disk size for the `journal_switch` target: small, so mkfs per input stays cheap.
pub const FUZZ_DISK_BYTES: u64 = 64 << 20;

/// Mounts the `journal_switch` target draws from: the three data modes,
/// nodelalloc (where +j journals data), and a block larger than the page.
const SWITCH_MOUNTS: [&str; 6] = ["", "data=writeback", "data=journal", "nodelalloc", "data=writeback,nodelalloc", "bs=16k,ps=4k,nodelalloc"];
/// The few files the target's ops aim at, so switches meet writers.
const SWITCH_FILES: [&str; 3] = ["/a", "/b", "/c"];

/// An offset or length near a block or folio edge, mostly.
fn switch_offset(u: &mut Unstructured) -> arbitrary::Result<u64> {
    let block = 4096 * u64::from(u.int_in_range(0u32..=40)?);
    Ok(match u.int_in_range(0u8..=3)? {
        0 => block,
        1 => block.saturating_sub(u64::from(u.int_in_range(1u32..=511)?)),
        2 => block + u64::from(u.int_in_range(1u32..=4095)?),
        _ => u64::from(u.int_in_range(0u32..=(256 << 10))?),
    })
}

fn switch_len(u: &mut Unstructured) -> arbitrary::Result<u32> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => 4096 * u.int_in_range(1u32..=16)?,
        1 => 512 * u.int_in_range(1u32..=16)?,
        _ => u.int_in_range(1u32..=(128 << 10))?,
    })
}

/// One step of a `journal_switch` input: ops dense in chattr +j/-j on a
/// few files, the rivals the switch locks out (writes, faults, direct I/O,
/// truncate, fallocate, fsync, reads, SEEK_DATA/SEEK_HOLE), task switches
/// and split halves for the seeded scheduler's interleavings, crashes and
/// write faults.
fn switch_step(u: &mut Unstructured, tasks: u32) -> arbitrary::Result<crate::trace::Step> {
    use crate::trace::Step;
    let path = u.choose(&SWITCH_FILES)?.to_string();
    let seed = u64::from(u.int_in_range(1u32..=1000)?);
    // With tasks to overtake it, an odd seed splits an op that sleeps
    // holding its inode's locks: no byte of its own, so inputs decode into
    // the same ops as before those could split.
    let maybe_split = |op: Op| if tasks > 1 && seed % 2 == 1 { Step::Begin(op) } else { Step::Op(op) };
    Ok(match u.int_in_range(0u8..=15)? {
        0..=1 => Step::Op(Op::SetJournalData { path, enable: u.arbitrary()? }),
        2 => Step::Op(Op::Lseek { path, offset: switch_offset(u)?, whence: *u.choose(&[ext4_model::SeekWhence::Data, ext4_model::SeekWhence::Hole])? }),
        3 => Step::Begin(Op::SetJournalData { path, enable: false }),
        4 => Step::Begin(Op::Fsync { path }),
        5 => Step::Finish,
        6 => maybe_split(Op::Write { path, offset: switch_offset(u)?, len: switch_len(u)?, seed }),
        7 => maybe_split(Op::MapWrite { path, offset: switch_offset(u)?, len: switch_len(u)?, seed }),
        8 => maybe_split(Op::DirectWrite { path, offset: switch_offset(u)?, len: switch_len(u)?, seed }),
        9 => maybe_split(Op::DirectRead { path, offset: switch_offset(u)?, len: switch_len(u)? }),
        10 => maybe_split(Op::Truncate { path, size: switch_offset(u)? }),
        11 => {
            let mode = ext4_model::FallocFlags(*u.choose(&[0, ext4_model::FallocFlags::KEEP_SIZE, ext4_model::FallocFlags::PUNCH_HOLE | ext4_model::FallocFlags::KEEP_SIZE, ext4_model::FallocFlags::ZERO_RANGE])?);
            maybe_split(Op::Fallocate { path, mode, offset: switch_offset(u)?, len: u64::from(switch_len(u)?) })
        }
        12 => maybe_split(Op::Read { path, offset: switch_offset(u)?, len: switch_len(u)? }),
        13 => Step::Task(u.int_in_range(0..=tasks - 1)?),
        14 => Step::Crash { seed },
        _ => Step::Fault(crate::disk::fault::FaultEvent { kind: crate::disk::fault::ScriptedFault::Write, command: u.int_in_range(0u32..=30)?, sector: 0 }),
    })
}

/// Decoded steps between the flusher's turns in a `journal_switch` input.
const FLUSHER_EVERY: usize = 8;
/// Past the dirty expiry (30 s): what was dirty at the last turn has expired.
const FLUSHER_PAUSE_NS: u64 = 36_000_000_000;

/// chattr +j/-j against its rivals, in lockstep under the seeded scheduler:
/// any divergence, lock-discipline failure (a lock held after its op, an
/// order inversion) or crash-state violation panics with the report.
/// Returns the run, or None for an input the runner refuses as a trace.
pub fn journal_switch(data: &[u8]) -> Option<crate::run::RunResult> {
    journal_switch_on(&crate::engine_target::EngineFactory, data)
}

/// [`journal_switch`] against any target: a bug twin (an engine with a
/// test hook armed) runs the very same body.
pub fn journal_switch_on<F: crate::target::TargetFactory>(factory: &F, data: &[u8]) -> Option<crate::run::RunResult> {
    let trace = journal_switch_trace(data)?;
    let result = crate::run::run_steps(factory, &trace.spec, &trace.steps).ok()?;
    if let Some(failure) = &result.failure {
        let trace = result.replayed_trace(&trace.steps).to_text();
        panic!("journal_switch input failed: {failure}\n{trace}");
    }
    Some(result)
}

/// The run an input decodes to, before it runs. None for an input too
/// short to pick a mount and tasks.
pub fn journal_switch_trace(data: &[u8]) -> Option<crate::trace::Trace> {
    use crate::run::RunSpec;
    use crate::trace::Step;
    let mut u = Unstructured::new(data);
    let mount = u.choose(&SWITCH_MOUNTS).ok()?.parse::<MountConfig>().ok()?;
    let tasks = u.int_in_range(1u32..=4).ok()?;
    let faults = "write=0".parse().expect("a fault switch");
    let spec = RunSpec { tasks, faults, disk_bytes: FUZZ_DISK_BYTES, ..RunSpec::new(0, MAX_FUZZ_OPS as u64, mount) };
    // Made durable first, so a crash step does not leave the rest of the
    // input aiming at files that are gone.
    let mut steps: Vec<Step> = SWITCH_FILES.iter().map(|p| Step::Op(Op::Create { path: p.to_string(), perm: 0o644 })).collect();
    steps.push(Step::Op(Op::Sync));
    // A valid schedule: a task with an op in flight only finishes it (or
    // the scheduler moves on); no crash while an op is in flight.
    let (mut task, mut in_flight) = (0usize, vec![false; tasks as usize]);
    // Tasks whose op in flight is a buffered write: each time one gets the
    // CPU back it copies one more folio (a `part`, from no byte of the input).
    let mut writing = vec![false; tasks as usize];
    // An exhausted `Unstructured` answers defaults forever, which could
    // be a step that never fits: stop at the end of the input.
    let mut decoded = 0usize;
    while steps.len() < MAX_FUZZ_OPS && !u.is_empty() {
        let Ok(step) = switch_step(&mut u, tasks) else { break };
        decoded += 1;
        // Every so many steps, time passes and the flusher runs: it
        // finishes what it had in flight, wakes to see what is dirty, wakes
        // again once that has expired, and begins writing back the first
        // such file, sleeping on it across the next steps (which meet its
        // folio locks, its handle and s_writepages_rwsem). Taken from no
        // byte of the input: inputs decode to the steps they did, with
        // these between.
        if decoded % FLUSHER_EVERY == 0 && !in_flight[task] {
            let pause = Step::Pause { ns: FLUSHER_PAUSE_NS };
            steps.extend([Step::Flusher, pause.clone(), Step::Flusher, pause, Step::Flusher, Step::Flusher]);
        }
        let busy = in_flight[task];
        let mut part = false;
        let fits = match &step {
            Step::Task(t) => {
                part = *t as usize != task && writing[*t as usize];
                task = *t as usize;
                true
            }
            Step::Finish => {
                writing[task] = false;
                std::mem::take(&mut in_flight[task])
            }
            Step::Begin(op) if !busy => {
                in_flight[task] = true;
                writing[task] = matches!(op, Op::Write { .. });
                true
            }
            Step::Crash { .. } => !in_flight.contains(&true),
            Step::Begin(_) | Step::Op(_) | Step::Fault(_) | Step::Pause { .. } | Step::Reclaim | Step::Part => !busy,
            // Not a task's: the flusher runs between any two steps.
            Step::Flusher => true,
        };
        if fits {
            push_before_armed_faults(&mut steps, step);
            if part {
                steps.push(Step::Part);
            }
        }
    }
    for (t, busy) in in_flight.iter().enumerate() {
        if *busy {
            push_before_armed_faults(&mut steps, Step::Task(t as u32));
            steps.push(Step::Finish);
        }
    }
    // Armed for nothing: a trace may not end on them.
    while matches!(steps.last(), Some(Step::Fault(_))) {
        steps.pop();
    }
    Some(crate::trace::Trace { spec, steps })
}

/// Pushes `step`; a task switch, pause or crash goes before the faults
/// just armed, so that each fault stands right before a step that may do
/// the I/O it fails, as a trace must have it. Armed faults wait for the
/// next op to start (`Lockstep::start_op`), which none of these is, so
/// they fail what they failed before.
fn push_before_armed_faults(steps: &mut Vec<crate::trace::Step>, step: crate::trace::Step) {
    use crate::trace::Step;
    let at = match step {
        Step::Task(_) | Step::Pause { .. } | Step::Crash { .. } => steps.len() - steps.iter().rev().take_while(|s| matches!(s, Step::Fault(_))).count(),
        _ => steps.len(),
    };
    steps.insert(at, step);
}

/// What `journal_switch` runs reach, summed over inputs: what its corpus
/// must show it still reaches (the replay test) and what the seed
/// generator keeps inputs for.
#[derive(Clone, Debug, Default)]
pub struct SwitchReach {
    /// chattr +j/-j that succeeded.
    pub switches: u64,
    /// Tasks put to sleep on a held lock, in all and by lock.
    pub sleeps: u64,
    pub sleeps_on: std::collections::BTreeMap<String, u64>,
    /// Sleeps of a task that already held locks of its op.
    pub holding: u64,
    pub crashes: u64,
    /// Write-backs the flusher slept on, holding their folio locks.
    pub flusher: u64,
    /// Folios buffered writes in flight copied with other steps between.
    pub parts: u64,
    /// Kinds of op begun as split halves.
    pub split_kinds: std::collections::BTreeSet<OpKind>,
}

impl SwitchReach {
    pub fn add(&mut self, run: &RunResult) {
        let s = &run.stats;
        self.switches += s.ok.get(&OpKind::SetJournalData).copied().unwrap_or(0);
        self.sleeps += s.lock_sleeps;
        for (lock, n) in &s.lock_sleeps_on {
            *self.sleeps_on.entry(lock.clone()).or_insert(0) += n;
        }
        self.holding += s.lock_sleeps_holding;
        self.crashes += s.crashes;
        self.flusher += s.flusher_flights;
        self.parts += s.write_parts + s.truncate_parts + s.fallocate_parts + s.direct_write_parts + s.direct_read_parts + s.read_parts;
        self.split_kinds.extend(run.steps.iter().filter_map(|st| if let crate::trace::Step::Begin(op) = st { Some(op.kind()) } else { None }));
    }

    fn sleeps_on(&self, lock: &str) -> u64 {
        self.sleeps_on.get(lock).copied().unwrap_or(0)
    }

    /// How far `self` is from `goal`, counted in what it lacks: zero when
    /// every figure has reached the goal's.
    fn shortfall(&self, goal: &SwitchReach) -> u64 {
        let short = |have: u64, want: u64| want.saturating_sub(have);
        let locks: u64 = goal.sleeps_on.iter().map(|(lock, &n)| short(self.sleeps_on(lock), n)).sum();
        let kinds = goal.split_kinds.difference(&self.split_kinds).count() as u64;
        short(self.switches, goal.switches) + short(self.sleeps, goal.sleeps) + short(self.holding, goal.holding) + short(self.crashes, goal.crashes) + short(self.flusher, goal.flusher) + short(self.parts, goal.parts) + locks + kinds
    }
}

/// What the seed generator keeps inputs until it reaches: what the replay
/// test asks of the corpus with a margin (half again, three times its two
/// lock sleeps), and every op the decoder can split.
fn seed_goal() -> SwitchReach {
    let kinds = [OpKind::SetJournalData, OpKind::Fsync, OpKind::Write, OpKind::MapWrite, OpKind::DirectWrite, OpKind::DirectRead, OpKind::Truncate, OpKind::Fallocate, OpKind::Read];
    SwitchReach {
        switches: 75,
        sleeps: 6,
        sleeps_on: [("i_rwsem".to_string(), 3), ("invalidate_lock".to_string(), 3)].into_iter().collect(),
        holding: 5,
        crashes: 15,
        flusher: 8,
        parts: 8,
        split_kinds: kinds.into_iter().collect(),
    }
}

/// A seed corpus of `want` inputs: random bytes from a ChaCha stream (the
/// same files every time) behind a mount and a task count taken in turn,
/// kept while each brings the corpus closer to [`seed_goal`]; once it is
/// reached, inputs that crash or sleep on a lock fill the rest.
pub fn seed_corpus(want: usize) -> Vec<Vec<u8>> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6a5f_5357);
    let goal = seed_goal();
    let (mut kept, mut reach) = (Vec::new(), SwitchReach::default());
    for attempt in 0..4000usize {
        if kept.len() >= want && reach.shortfall(&goal) == 0 {
            break;
        }
        // The mount, then one to four tasks (mostly several: splits and
        // sleeps need a task to overtake), then the steps.
        let mut input = vec![(attempt % SWITCH_MOUNTS.len()) as u8, [0u8, 1, 2, 3, 3, 2][attempt % 6]];
        let len = rng.random_range(40..400);
        input.extend((0..len).map(|_| rng.random::<u8>()));
        let Some(run) = journal_switch(&input) else { continue };
        let mut with = reach.clone();
        with.add(&run);
        let closer = with.shortfall(&goal) < reach.shortfall(&goal);
        let filler = reach.shortfall(&goal) == 0 && kept.len() < want && run.stats.crashes + run.stats.lock_sleeps > 0;
        if closer || filler {
            kept.push(input);
            reach = with;
        }
    }
    kept
}
