//! Trace files: a failing run as plain data. A trace is the whole repro: seed,
//! mount options, and the ops, one per line.
//!
//! ```text
//! # ext4sim trace v1
//! seed 42
//! mount data=journal,nodelalloc
//! profile ram
//! crash_every 0
//! fsck_every 500
//! op write path="/a/b" offset=4096 len=100 seed=7
//! op rename from="/a" to="/c"
//! fault kind=write command=3 sector=0
//! op fsync path="/a/b"
//! crash seed=99
//! ```
//!
//! A `fault` line arms a device fault for the op after it: the op's device
//! command `command` (counted from 0) fails at sector `sector` of its range.

use ext4_model::text::Fields;
use ext4_model::Op;

use crate::disk::{FaultEvent, ScriptedFault};
use thiserror::Error;

pub const TRACE_HEADER: &str = "# ext4sim trace v1";

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TraceError {
    #[error("line {line}: {what}")]
    Parse { line: usize, what: String },
    #[error("trace has no `seed` line")]
    NoSeed,
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
    /// The current task's begun op returns.
    Finish,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    pub seed: u64,
    /// As given to `--mount`.
    pub mount: String,
    /// Disk profile name. Default: "ram".
    pub profile: String,
    /// Mean ops between crashes; 0 = none. Default: 0.
    pub crash_every: u64,
    /// Full checks every N ops. Default: 500.
    pub fsck_every: u64,
    /// Device faults, as given to `--faults`. Default: none.
    pub faults: String,
    /// Simulated tasks. Default: 1.
    pub tasks: u32,
    /// Simulated disk size in bytes. Default: the simulator's 8 GiB.
    pub disk_bytes: u64,
    pub steps: Vec<Step>,
}

/// One step as a trace line.
pub fn format_step(step: &Step) -> String {
    match step {
        Step::Op(op) => format!("op {}", op.to_string()),
        Step::Crash { seed } => format!("crash seed={seed}"),
        Step::Fault(e) => format!("fault kind={} command={} sector={}", e.kind.name(), e.command, e.sector),
        Step::Task(t) => format!("task {t}"),
        Step::Begin(op) => format!("begin {}", op.to_string()),
        Step::Finish => "finish".to_string(),
    }
}

impl Trace {
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "{TRACE_HEADER}\nseed {}\nmount {}\nprofile {}\ncrash_every {}\nfsck_every {}\nfaults {}\ntasks {}\ndisk_bytes {}\n",
            self.seed, self.mount, self.profile, self.crash_every, self.fsck_every, self.faults, self.tasks, self.disk_bytes
        );
        for step in &self.steps {
            out.push_str(&format_step(step));
            out.push('\n');
        }
        out
    }

    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut seed = None;
        let mut mount = String::new();
        let mut profile = "ram".to_string();
        let mut crash_every = 0;
        let mut fsck_every = 500;
        let mut faults = String::new();
        let mut tasks = 1;
        let mut disk_bytes = crate::engine_target::DISK_BYTES;
        let mut steps = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            let err = |what: String| TraceError::Parse { line: i + 1, what };
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "seed" => seed = Some(rest.trim().parse().map_err(|_| err(format!("bad seed `{rest}`")))?),
                "mount" => mount = rest.trim().to_string(),
                "profile" => profile = rest.trim().to_string(),
                "faults" => faults = rest.trim().to_string(),
                "crash_every" => crash_every = rest.trim().parse().map_err(|_| err(format!("bad crash_every `{rest}`")))?,
                "fsck_every" => fsck_every = rest.trim().parse().map_err(|_| err(format!("bad fsck_every `{rest}`")))?,
                "disk_bytes" => disk_bytes = rest.trim().parse().map_err(|_| err(format!("bad disk_bytes `{rest}`")))?,
                "tasks" => tasks = rest.trim().parse().ok().filter(|&t: &u32| t >= 1).ok_or_else(|| err(format!("bad tasks `{rest}` (at least 1)")))?,
                "task" => steps.push(Step::Task(rest.trim().parse().map_err(|_| err(format!("bad task `{rest}`")))?)),
                "op" => steps.push(Step::Op(rest.parse::<Op>().map_err(|e| err(e.to_string()))?)),
                "begin" => steps.push(Step::Begin(rest.parse::<Op>().map_err(|e| err(e.to_string()))?)),
                "finish" => steps.push(Step::Finish),
                "crash" => {
                    let f = Fields::parse(rest).map_err(|e| err(e.to_string()))?;
                    steps.push(Step::Crash { seed: f.num("seed").map_err(|e| err(e.to_string()))? });
                }
                "fault" => {
                    let f = Fields::parse(rest).map_err(|e| err(e.to_string()))?;
                    let name = f.text("kind").map_err(|e| err(e.to_string()))?;
                    let kind = ScriptedFault::from_name(&name).ok_or_else(|| err(format!("unknown fault kind `{name}` (read, write, latent, readonly)")))?;
                    steps.push(Step::Fault(FaultEvent { kind, command: f.num("command").map_err(|e| err(e.to_string()))?, sector: f.num("sector").map_err(|e| err(e.to_string()))? }));
                }
                other => return Err(err(format!("unknown line kind `{other}`"))),
            }
        }
        Ok(Trace { seed: seed.ok_or(TraceError::NoSeed)?, mount, profile, crash_every, fsck_every, faults, tasks, disk_bytes, steps })
    }
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

    #[test]
    fn traces_round_trip_and_report_bad_lines() {
        let t = Trace {
            seed: 9,
            mount: "data=journal".into(),
            profile: "hdd-5400".into(),
            crash_every: 50,
            fsck_every: 7,
            faults: "read,write=0.1".into(),
            tasks: 3,
            disk_bytes: 64 << 20,
            steps: vec![
                Step::Task(2),
                Step::Op(Op::Sync),
                Step::Crash { seed: 77 },
                Step::Fault(FaultEvent { kind: ScriptedFault::ReadOnly, command: 4, sector: 0 }),
                Step::Fault(FaultEvent { kind: ScriptedFault::Latent, command: 0, sector: 7 }),
                Step::Op(Op::Stat { path: "/a".into() }),
                Step::Begin(Op::Fdatasync { path: "/a".into() }),
                Step::Task(0),
                Step::Finish,
            ],
        };
        assert_eq!(Trace::parse(&t.to_text()).unwrap(), t);
        assert_eq!(Trace::parse("op sync\n"), Err(TraceError::NoSeed));
        assert!(matches!(Trace::parse("seed 1\nop frobnicate\n"), Err(TraceError::Parse { line: 2, .. })));
        assert!(matches!(Trace::parse("seed 1\nop write path=\"/a\" offset=x len=1 seed=1\n"), Err(TraceError::Parse { line: 2, .. })));
        assert!(matches!(Trace::parse("seed 1\nop stat path=\"/a\n"), Err(TraceError::Parse { .. })));
        assert!(matches!(Trace::parse("seed 1\nfault kind=smoke command=1 sector=0\n"), Err(TraceError::Parse { line: 2, .. })));
        assert!(matches!(Trace::parse("seed 1\nfault kind=read command=-1 sector=0\n"), Err(TraceError::Parse { line: 2, .. })));
        assert!(matches!(Trace::parse("seed 1\ntasks 0\n"), Err(TraceError::Parse { line: 2, .. })));
    }
}
