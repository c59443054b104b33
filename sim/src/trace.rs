//! Trace files: a run as plain data. A trace is the whole repro: the run's
//! spec as its header, then its steps, one per line.
//!
//! ```text
//! # ext4sim trace v1
//! seed 42
//! ops 3
//! mount data=journal,nodelalloc
//! profile ram
//! crash_every 0
//! fsck_every 500
//! faults write
//! tasks 2
//! disk_bytes 8589934592
//! swarm true
//! op write path="/a/b" offset=4096 len=100 seed=7
//! task 1
//! begin fsync path="/a/b"
//! task 0
//! fault kind=write command=3 sector=0
//! op rename from="/a" to="/c"
//! task 1
//! finish
//! crash seed=99
//! ```
//!
//! A trace may also carry `mkfs ARGS`: the image was made by the real mke2fs
//! with these arguments (`ext4sim run --mkfs`, `ext4sim oracle --mkfs`), so
//! the trace alone replays the case. Traces without it mean the engine's own
//! mkfs (the simulator) or mke2fs with no extra arguments (the oracle).
//!
//! A `fault` line arms a device fault for the op after it: the op's device
//! command `command` (counted from 0) fails at sector `sector` of its range.
//! `task N` switches to task N; `begin` runs an op's first half and `finish`
//! the current task's second.
//!
//! Traces are validated, not skimmed: the header line and its version, every
//! spec line, a task beyond `tasks`, a `finish` with no `begin` before it on
//! its task, a `fault` with no op after it. Each error names its line. A
//! fault naming a device command its op never issues shows when the trace
//! runs ([`crate::run::RunResult::unfired_faults`]).

use std::collections::BTreeSet;

use ext4_model::text::Fields;
use ext4_model::{MountConfig, Op};
use thiserror::Error;

use crate::disk::{FaultEvent, ScriptedFault};
use crate::run::spec::RunSpec;

/// The first line of every trace this version writes.
pub const TRACE_HEADER: &str = "# ext4sim trace v1";
/// The trace format version this binary reads and writes.
pub const TRACE_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TraceError {
    #[error("line {line}: {what}")]
    Parse { line: usize, what: String },
    #[error("trace has no `seed` line")]
    NoSeed,
    #[error("not a trace: the first line must be `{TRACE_HEADER}`")]
    NoHeader,
    #[error("trace format v{0} is newer than this ext4sim reads (v{TRACE_VERSION}): use the ext4sim that wrote it")]
    Version(u32),
}

/// One step of a run: an op, a crash of the disk under the target (with the
/// seed that decides which unflushed writes survive), or a device fault armed
/// for the next op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Op(Op),
    Crash { seed: u64 },
    Fault(FaultEvent),
    /// The scheduler switched to this task; the ops after it are its.
    Task(u32),
    /// The first half of an op with two halves (fsync, fdatasync, chattr
    /// -j) that other tasks' ops may overtake.
    Begin(Op),
    /// The current task's begun op takes effect one part further and
    /// sleeps again (a buffered pwrite copies its next folio).
    Part,
    /// The current task's begun op returns.
    Finish,
    /// Simulated time passes with no I/O asked for (a program thinking):
    /// the disk's clock moves on, so the filesystem's timers (the commit
    /// interval, dirty expiry) may fire at the next op.
    Pause { ns: u64 },
    /// The reclaimer task (kswapd) ran one pass: memory was low. It frees
    /// memory only, so the model has nothing to do.
    Reclaim,
    /// The flusher task ran to its next sleep: woke on its timer, began
    /// an expired inode's write-back (and sleeps on its I/O holding the
    /// dirty folios' locks), or finished one. Write-back is invisible to
    /// the model.
    Flusher,
}

impl Step {
    /// The op this step starts, if it starts one.
    pub fn op(&self) -> Option<&Op> {
        match self {
            Step::Op(op) | Step::Begin(op) => Some(op),
            _ => None,
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Op(op) => write!(f, "op {op}"),
            Step::Crash { seed } => write!(f, "crash seed={seed}"),
            Step::Pause { ns } => write!(f, "pause ns={ns}"),
            Step::Fault(e) => write!(f, "fault kind={} command={} sector={}", e.kind.name(), e.command, e.sector),
            Step::Task(t) => write!(f, "task {t}"),
            Step::Begin(op) => write!(f, "begin {op}"),
            Step::Part => write!(f, "part"),
            Step::Finish => write!(f, "finish"),
            Step::Reclaim => write!(f, "reclaim"),
            Step::Flusher => write!(f, "flusher"),
        }
    }
}

/// A run as data: the spec it ran under and its steps. A trace and a spec
/// cannot disagree, since the trace holds the spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Trace {
    pub spec: RunSpec,
    pub steps: Vec<Step>,
}

impl Trace {
    pub fn to_text(&self) -> String {
        let mut out = format!("{TRACE_HEADER}\n");
        for line in self.spec.header_lines() {
            out.push_str(&line);
            out.push('\n');
        }
        for step in &self.steps {
            out.push_str(&step.to_string());
            out.push('\n');
        }
        out
    }

    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        Trace::parse_with_lines(text).map(|(t, _)| t)
    }

    /// Parses and validates a trace; also returns each step's line number.
    pub fn parse_with_lines(text: &str) -> Result<(Trace, Vec<usize>), TraceError> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l.trim())).filter(|(_, l)| !l.is_empty());
        match lines.next() {
            Some((_, first)) => check_header(first)?,
            None => return Err(TraceError::NoHeader),
        }
        let mut spec = RunSpec::new(0, 0, MountConfig::default());
        let (mut seed, mut ops) = (false, false);
        let mut steps = Vec::new();
        let mut step_lines = Vec::new();
        for (line, text) in lines {
            let err = |what: String| TraceError::Parse { line, what };
            if text.starts_with('#') {
                continue;
            }
            let (word, rest) = text.split_once(' ').unwrap_or((text, ""));
            if word == "mkfs" && spec.mkfs.is_some() {
                return Err(err("a second `mkfs` line".into()));
            }
            if spec.apply_header(word, rest.trim()).map_err(err)? {
                seed |= word == "seed";
                ops |= word == "ops";
                continue;
            }
            steps.push(parse_step(word, rest).map_err(err)?);
            step_lines.push(line);
        }
        if !seed {
            return Err(TraceError::NoSeed);
        }
        if !ops {
            spec.ops = steps.iter().filter(|s| matches!(s, Step::Op(_) | Step::Begin(_))).count() as u64;
        }
        validate(&spec, &steps, &step_lines)?;
        Ok((Trace { spec, steps }, step_lines))
    }

    /// Says why this trace could not be read back from its text, if it
    /// could not: the spec refused, or the steps break a rule of
    /// [`Trace::parse`] (errors name steps, counted from 1, as lines).
    pub fn validate(&self) -> Result<(), TraceError> {
        self.spec.validate().map_err(|what| TraceError::Parse { line: 0, what })?;
        let lines: Vec<usize> = (1..=self.steps.len()).collect();
        validate(&self.spec, &self.steps, &lines)
    }

    /// The trace without `finish` and `part` steps whose task began nothing
    /// (their begin was shrunk away). A replay runs such a finish as nothing, so
    /// dropping it changes no run, and it is a trace [`Trace::parse`] refuses.
    pub fn without_orphan_finishes(&self) -> Trace {
        let mut task = 0;
        let mut begun = BTreeSet::new();
        let mut steps = Vec::with_capacity(self.steps.len());
        for step in &self.steps {
            match step {
                Step::Task(t) => task = *t,
                Step::Begin(_) => {
                    begun.insert(task);
                }
                Step::Finish if !begun.remove(&task) => continue,
                Step::Part if !begun.contains(&task) => continue,
                Step::Crash { .. } => begun.clear(),
                _ => {}
            }
            steps.push(step.clone());
        }
        Trace { spec: self.spec.clone(), steps }
    }
}

fn check_header(first: &str) -> Result<(), TraceError> {
    let Some(version) = first.strip_prefix("# ext4sim trace v") else { return Err(TraceError::NoHeader) };
    match version.trim().parse::<u32>() {
        Ok(TRACE_VERSION) => Ok(()),
        Ok(v) if v > TRACE_VERSION => Err(TraceError::Version(v)),
        _ => Err(TraceError::NoHeader),
    }
}

fn parse_step(word: &str, rest: &str) -> Result<Step, String> {
    let fields = || Fields::parse(rest).map_err(|e| e.to_string());
    Ok(match word {
        "task" => Step::Task(rest.trim().parse().map_err(|_| format!("bad task `{rest}`"))?),
        "op" => Step::Op(rest.parse().map_err(|e: ext4_model::TextError| e.to_string())?),
        "begin" => {
            let op: Op = rest.parse().map_err(|e: ext4_model::TextError| e.to_string())?;
            if !op.has_two_halves() {
                return Err(format!("`begin {op}`: only fsync, fdatasync and set_journal_data run in two halves"));
            }
            Step::Begin(op)
        }
        "part" => Step::Part,
        "finish" => Step::Finish,
        "reclaim" => Step::Reclaim,
        "flusher" => Step::Flusher,
        "crash" => Step::Crash { seed: fields()?.num("seed").map_err(|e| e.to_string())? },
        "pause" => Step::Pause { ns: fields()?.num("ns").map_err(|e| e.to_string())? },
        "fault" => {
            let f = fields()?;
            let name = f.text("kind").map_err(|e| e.to_string())?;
            let kind = ScriptedFault::from_name(&name).ok_or_else(|| format!("unknown fault kind `{name}` (read, write, latent, readonly)"))?;
            let command = f.num("command").map_err(|e| e.to_string())?;
            let sector = f.num("sector").map_err(|e| e.to_string())?;
            Step::Fault(FaultEvent { kind, command, sector })
        }
        other => return Err(format!("unknown line kind `{other}`")),
    })
}

/// What a trace must hold to mean one run: tasks within its count, a finish
/// or a part only after a begin on its task, a fault only before an op or a step
/// that writes back (the flusher, reclaim). The walk over
/// tasks and begins is the one [`Trace::without_orphan_finishes`] makes.
fn validate(spec: &RunSpec, steps: &[Step], lines: &[usize]) -> Result<(), TraceError> {
    let mut task = 0;
    let mut begun = BTreeSet::new();
    for (i, step) in steps.iter().enumerate() {
        let err = |what: String| TraceError::Parse { line: lines[i], what };
        match step {
            Step::Task(t) if *t >= spec.tasks => return Err(err(format!("task {t} is beyond the trace's {} task(s)", spec.tasks))),
            Step::Task(t) => task = *t,
            Step::Begin(_) => {
                begun.insert(task);
            }
            Step::Finish if !begun.remove(&task) => return Err(err(format!("finish with nothing in flight: task {task} began no op"))),
            Step::Part if !begun.contains(&task) => return Err(err(format!("part with nothing in flight: task {task} began no op"))),
            Step::Crash { .. } => begun.clear(),
            // The flusher's and reclaim's write-back do I/O a fault can fail.
            Step::Fault(_) if !matches!(steps.get(i + 1), Some(Step::Fault(_) | Step::Op(_) | Step::Begin(_) | Step::Part | Step::Finish | Step::Flusher | Step::Reclaim)) => {
                return Err(err("fault with no op after it to fail".into()));
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_op_round_trips(op in ext4_testkit::strategy::op()) {
            prop_assert_eq!(op.to_string().parse::<Op>().unwrap(), op);
        }
    }

    fn parse_err(body: &str) -> TraceError {
        Trace::parse(&format!("{TRACE_HEADER}\nseed 1\ntasks 2\n{body}")).unwrap_err()
    }

    #[test]
    fn traces_round_trip_and_report_bad_lines() {
        let mut spec = RunSpec::new(9, 4, "data=journal".parse().unwrap());
        spec.profile = crate::run::ProfileSpec::resolve("hdd-5400").unwrap();
        spec.crash_every = 50;
        spec.fsck_every = 7;
        spec.faults = "read,write=0.1".parse().unwrap();
        spec.tasks = 3;
        spec.disk_bytes = 64 << 20;
        spec.think = false;
        let t = Trace {
            spec,
            steps: vec![
                Step::Task(2),
                Step::Op(Op::Sync),
                Step::Crash { seed: 77 },
                Step::Pause { ns: 12_345_678_901 },
                Step::Reclaim,
                Step::Flusher,
                Step::Fault(FaultEvent { kind: ScriptedFault::ReadOnly, command: 4, sector: 0 }),
                Step::Fault(FaultEvent { kind: ScriptedFault::Latent, command: 0, sector: 7 }),
                Step::Op(Op::Stat { path: "/a".into() }),
                Step::Begin(Op::Fdatasync { path: "/a".into() }),
                Step::Task(0),
                Step::Task(2),
                Step::Finish,
            ],
        };
        assert_eq!(Trace::parse(&t.to_text()).unwrap(), t);
        assert!(!t.to_text().contains("mkfs"), "traces without mke2fs arguments keep their old text");
        let mut t = t;
        t.spec.mkfs = Some(crate::mke2fs::MkfsArgs::parse("-O ^flex_bg -b 2048").unwrap());
        assert!(t.to_text().contains("\nmkfs -O ^flex_bg -b 2048\n"), "{}", t.to_text());
        assert_eq!(Trace::parse(&t.to_text()).unwrap(), t);
        let line = |e: TraceError| match e {
            TraceError::Parse { line, .. } => line,
            other => panic!("{other}"),
        };
        assert_eq!(Trace::parse(&format!("{TRACE_HEADER}\nop sync\n")), Err(TraceError::NoSeed));
        assert_eq!(line(parse_err("op frobnicate\n")), 4);
        assert_eq!(line(parse_err("op write path=\"/a\" offset=x len=1 seed=1\n")), 4);
        assert!(matches!(parse_err("op stat path=\"/a\n"), TraceError::Parse { .. }));
        assert_eq!(line(parse_err("fault kind=smoke command=1 sector=0\nop sync\n")), 4);
        assert_eq!(line(parse_err("fault kind=read command=-1 sector=0\nop sync\n")), 4);
        assert_eq!(line(parse_err("tasks 0\n")), 4);
        assert_eq!(line(parse_err("mkfs -j\nmkfs -j\n")), 5);
    }

    #[test]
    fn traces_that_cannot_mean_a_run_are_refused_with_their_line() {
        let why = |e: TraceError| e.to_string();
        assert!(why(parse_err("op sync\ntask 2\n")).contains("line 5: task 2 is beyond the trace's 2 task(s)"));
        assert!(why(parse_err("op sync\nfinish\n")).contains("line 5: finish with nothing in flight"));
        assert!(why(parse_err("begin fsync path=\"/a\"\ntask 1\nfinish\n")).contains("line 6: finish with nothing in flight: task 1"));
        assert!(why(parse_err("begin fsync path=\"/a\"\ncrash seed=1\nfinish\n")).contains("line 6"), "a crash ends what was in flight");
        assert!(Trace::parse(&format!("{TRACE_HEADER}\nseed 1\nbegin fsync path=\"/a\"\nop sync\nfinish\n")).is_ok());
        assert!(why(parse_err("begin stat path=\"/a\"\n")).contains("two halves"));
        assert!(why(parse_err("fault kind=read command=0 sector=0\ncrash seed=1\n")).contains("line 4: fault with no op after it"));
        // journal_switch inputs aim faults at the flusher's write-back.
        Trace::parse(&format!("{TRACE_HEADER}\nseed 1\nfault kind=write command=0 sector=0\nflusher\n")).expect("a fault before the flusher");
        assert!(why(parse_err("tasks 100000\n")).contains("outside 1..=64"));
        assert_eq!(Trace::parse("seed 1\nop sync\n"), Err(TraceError::NoHeader));
        assert_eq!(Trace::parse("# ext4sim trace v2\nseed 1\n"), Err(TraceError::Version(2)));
        assert!(TraceError::Version(2).to_string().contains("newer than this ext4sim reads (v1)"));
        let (_, lines) = Trace::parse_with_lines(&format!("{TRACE_HEADER}\nseed 1\n\n# note\nop sync\ncrash seed=3\n")).unwrap();
        assert_eq!(lines, vec![5, 6]);
    }

    #[test]
    fn a_built_trace_is_checked_by_the_rules_of_parsing_and_orphan_finishes_go() {
        let fsync = Step::Begin(Op::Fsync { path: "/a".into() });
        let spec = RunSpec { tasks: 2, ..RunSpec::new(1, 1, MountConfig::default()) };
        let trace = |steps: Vec<Step>| Trace { spec: spec.clone(), steps };
        assert!(trace(vec![Step::Task(1), fsync.clone(), Step::Task(0), Step::Task(1), Step::Finish]).validate().is_ok());
        assert!(trace(vec![Step::Task(2)]).validate().unwrap_err().to_string().contains("task 2 is beyond"));
        let odd = Trace { spec: RunSpec { tasks: 0, ..spec.clone() }, steps: vec![] };
        assert!(odd.validate().unwrap_err().to_string().contains("outside 1..=64"));
        // Task 0's finish lost its begin; task 1's did not.
        let orphaned = trace(vec![Step::Finish, Step::Task(1), fsync.clone(), Step::Task(0), Step::Finish, Step::Task(1), Step::Finish, Step::Finish]);
        assert!(orphaned.validate().is_err());
        let tidy = orphaned.without_orphan_finishes();
        assert_eq!(tidy.steps, vec![Step::Task(1), fsync, Step::Task(0), Step::Task(1), Step::Finish]);
        assert!(tidy.validate().is_ok());
    }
}
