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

use std::fmt::Write as _;

use ext4_model::{FallocFlags, Op};

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

fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One op in trace syntax.
pub fn format_op(op: &Op) -> String {
    let q = |s: &String| quote(s);
    match op {
        Op::Create { path, perm } => format!("create path={} perm={perm:o}", q(path)),
        Op::Mkdir { path, perm } => format!("mkdir path={} perm={perm:o}", q(path)),
        Op::Unlink { path } => format!("unlink path={}", q(path)),
        Op::Rmdir { path } => format!("rmdir path={}", q(path)),
        Op::Rename { from, to } => format!("rename from={} to={}", q(from), q(to)),
        Op::Link { from, to } => format!("link from={} to={}", q(from), q(to)),
        Op::Symlink { target, path } => format!("symlink target={} path={}", q(target), q(path)),
        Op::Readlink { path } => format!("readlink path={}", q(path)),
        Op::Readdir { path } => format!("readdir path={}", q(path)),
        Op::Stat { path } => format!("stat path={}", q(path)),
        Op::Write { path, offset, len, seed } => format!("write path={} offset={offset} len={len} seed={seed}", q(path)),
        Op::Read { path, offset, len } => format!("read path={} offset={offset} len={len}", q(path)),
        Op::Truncate { path, size } => format!("truncate path={} size={size}", q(path)),
        Op::Fsync { path } => format!("fsync path={}", q(path)),
        Op::Fdatasync { path } => format!("fdatasync path={}", q(path)),
        Op::Sync => "sync".to_string(),
        Op::Fallocate { path, mode, offset, len } => format!("fallocate path={} mode={:#x} offset={offset} len={len}", q(path), mode.0),
        Op::Fiemap { path, sync } => format!("fiemap path={} sync={sync}", q(path)),
        Op::SetJournalData { path, enable } => format!("set_journal_data path={} enable={enable}", q(path)),
    }
}

/// One step as a trace line.
pub fn format_step(step: &Step) -> String {
    match step {
        Step::Op(op) => format!("op {}", format_op(op)),
        Step::Crash { seed } => format!("crash seed={seed}"),
        Step::Fault(e) => format!("fault kind={} command={} sector={}", e.kind.name(), e.command, e.sector),
        Step::Task(t) => format!("task {t}"),
        Step::Begin(op) => format!("begin {}", format_op(op)),
        Step::Finish => "finish".to_string(),
    }
}

/// Splits `key=value` fields; values may be quoted with escapes.
fn fields(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if chars.next() != Some('=') {
            return Err(format!("field `{key}` has no `=`"));
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    None => return Err(format!("unterminated string in `{key}`")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('"') => value.push('"'),
                        Some('\\') => value.push('\\'),
                        Some('n') => value.push('\n'),
                        Some('u') => {
                            let hex: String = chars.by_ref().skip(1).take_while(|c| *c != '}').collect();
                            let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32).ok_or(format!("bad escape \\u{{{hex}}}"))?;
                            value.push(c);
                        }
                        other => return Err(format!("bad escape {other:?}")),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((key, value));
    }
}

struct Fields(Vec<(String, String)>);

impl Fields {
    fn text(&self, key: &str) -> Result<String, String> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).ok_or(format!("missing field `{key}`"))
    }
    fn num<T: TryFrom<u64>>(&self, key: &str) -> Result<T, String> {
        let v = self.text(key)?;
        let n = match v.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => v.parse::<u64>(),
        }
        .map_err(|_| format!("`{key}={v}` is not a number"))?;
        T::try_from(n).map_err(|_| format!("`{key}={v}` is out of range"))
    }
    fn octal(&self, key: &str) -> Result<u16, String> {
        let v = self.text(key)?;
        u16::from_str_radix(&v, 8).map_err(|_| format!("`{key}={v}` is not an octal mode"))
    }
    fn flag(&self, key: &str) -> Result<bool, String> {
        match self.text(key)?.as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            v => Err(format!("`{key}={v}` is not true/false")),
        }
    }
}

/// Parses one op in trace syntax.
pub fn parse_op(text: &str) -> Result<Op, String> {
    let (kind, rest) = text.split_once(' ').unwrap_or((text, ""));
    let f = Fields(fields(rest)?);
    let path = || f.text("path");
    Ok(match kind {
        "create" => Op::Create { path: path()?, perm: f.octal("perm")? },
        "mkdir" => Op::Mkdir { path: path()?, perm: f.octal("perm")? },
        "unlink" => Op::Unlink { path: path()? },
        "rmdir" => Op::Rmdir { path: path()? },
        "rename" => Op::Rename { from: f.text("from")?, to: f.text("to")? },
        "link" => Op::Link { from: f.text("from")?, to: f.text("to")? },
        "symlink" => Op::Symlink { target: f.text("target")?, path: path()? },
        "readlink" => Op::Readlink { path: path()? },
        "readdir" => Op::Readdir { path: path()? },
        "stat" => Op::Stat { path: path()? },
        "write" => Op::Write { path: path()?, offset: f.num("offset")?, len: f.num("len")?, seed: f.num("seed")? },
        "read" => Op::Read { path: path()?, offset: f.num("offset")?, len: f.num("len")? },
        "truncate" => Op::Truncate { path: path()?, size: f.num("size")? },
        "fsync" => Op::Fsync { path: path()? },
        "fdatasync" => Op::Fdatasync { path: path()? },
        "sync" => Op::Sync,
        "fallocate" => Op::Fallocate { path: path()?, mode: FallocFlags(f.num("mode")?), offset: f.num("offset")?, len: f.num("len")? },
        "fiemap" => Op::Fiemap { path: path()?, sync: f.flag("sync")? },
        "set_journal_data" => Op::SetJournalData { path: path()?, enable: f.flag("enable")? },
        other => return Err(format!("unknown op `{other}`")),
    })
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
                "op" => steps.push(Step::Op(parse_op(rest).map_err(err)?)),
                "begin" => steps.push(Step::Begin(parse_op(rest).map_err(err)?)),
                "finish" => steps.push(Step::Finish),
                "crash" => {
                    let f = Fields(fields(rest).map_err(err)?);
                    steps.push(Step::Crash { seed: f.num("seed").map_err(err)? });
                }
                "fault" => {
                    let f = Fields(fields(rest).map_err(err)?);
                    let name = f.text("kind").map_err(err)?;
                    let kind = ScriptedFault::from_name(&name).ok_or_else(|| err(format!("unknown fault kind `{name}` (read, write, latent, readonly)")))?;
                    steps.push(Step::Fault(FaultEvent { kind, command: f.num("command").map_err(err)?, sector: f.num("sector").map_err(err)? }));
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
        fn every_op_round_trips(op in ext4_model::strategy::op(), odd in "\\PC{0,20}") {
            prop_assert_eq!(parse_op(&format_op(&op)).unwrap(), op);
            let weird = Op::Rename { from: format!("/{odd}\"\\\n\u{1}"), to: "/x y".into() };
            prop_assert_eq!(parse_op(&format_op(&weird)).unwrap(), weird);
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
