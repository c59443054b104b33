//! What fixes a run, and the one table of its defaults.
//!
//! A [`RunSpec`] is typed and validated when it is built (from the command
//! line or a trace header): a run never starts from a spec that cannot run.
//! Its text form is the trace header and the `ext4sim run` command line;
//! both name only what differs from the defaults below.

use std::fmt::Write as _;

use ext4_model::MountConfig;

use crate::disk::{DiskProfile, FaultConfig};
use crate::mke2fs::MkfsArgs;

/// Ops a run generates. Default of `--ops`.
pub const DEFAULT_OPS: u64 = 1000;
/// The disk profile of a run that names none: no latency at all.
pub const DEFAULT_PROFILE: &str = "ram";
/// Full checks (model from scratch, target fsck) every this many ops; 0 =
/// only at the end.
pub const DEFAULT_FSCK_EVERY: u64 = 500;
/// Mean ops between crashes; 0 = no crashes.
pub const DEFAULT_CRASH_EVERY: u64 = 0;
/// Simulated tasks.
pub const DEFAULT_TASKS: u32 = 1;
/// Most simulated tasks a run may interleave: more is a typo, not a test.
pub const MAX_TASKS: u32 = 64;
/// Simulated disk size. Sparse: only written chunks take memory.
pub const DISK_BYTES: u64 = 8 << 30;
/// Every timestamp mkfs and the engine write: a fixed instant, never the clock.
pub const SIM_EPOCH_SECS: i64 = 1_700_000_000;

/// A disk profile and how it was named: a built-in name or a profile file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileSpec {
    /// As given to `--profile` (and written in traces).
    pub name: String,
    pub profile: DiskProfile,
}

impl ProfileSpec {
    /// A built-in profile by name, else a profile file at that path.
    pub fn resolve(name: &str) -> Result<ProfileSpec, String> {
        let profile = match DiskProfile::builtin(name) {
            Some(p) => p,
            None => {
                let text = std::fs::read_to_string(name).map_err(|e| format!("profile `{name}`: not built in, and {e}"))?;
                DiskProfile::parse(&text).map_err(|e| format!("profile `{name}`: {e}"))?
            }
        };
        profile.validate().map_err(|e| format!("profile `{name}`: {e}"))?;
        Ok(ProfileSpec { name: name.to_string(), profile })
    }

    /// The default profile.
    pub fn default_profile() -> ProfileSpec {
        ProfileSpec::resolve(DEFAULT_PROFILE).expect("the default profile is built in")
    }
}

/// Everything that fixes a run. Same spec, same binary: same result.
#[derive(Clone, Debug, PartialEq)]
pub struct RunSpec {
    pub seed: u64,
    /// Ops to generate. Default: [`DEFAULT_OPS`].
    pub ops: u64,
    /// Validated: ext4 accepts it.
    pub mount: MountConfig,
    /// Default: [`DEFAULT_PROFILE`].
    pub profile: ProfileSpec,
    /// Default: [`DEFAULT_FSCK_EVERY`].
    pub fsck_every: u64,
    /// Default: [`DEFAULT_CRASH_EVERY`].
    pub crash_every: u64,
    /// Swarm testing in the workload. Default: true.
    pub swarm: bool,
    /// Device faults to inject. Default: none.
    pub faults: FaultConfig,
    /// Tasks interleaved by the seeded scheduler, 1..=[`MAX_TASKS`]. Default: 1.
    pub tasks: u32,
    /// Size of the simulated disk; small disks run into ENOSPC. Default: [`DISK_BYTES`].
    pub disk_bytes: u64,
    /// Start from an image the real mke2fs made with these arguments
    /// instead of the engine's own mkfs. Default: None. The mount then
    /// carries the image's block size and journal ([`MkfsArgs::model_mount`]).
    pub mkfs: Option<MkfsArgs>,
    /// Now and then, simulated time passes between ops (`pause` steps), so
    /// the commit interval and dirty expiry fire. Default: true.
    pub think: bool,
    /// Percent of memory seeded other users hold, scattered, so the page
    /// cache's folios come from fragmented memory (`memory::folios`;
    /// 0..=90). Default: 0, the plain bound.
    pub fragment: u8,
}

impl RunSpec {
    /// The defaults, for `seed`, `ops` and a mount config (validated here).
    pub fn new(seed: u64, ops: u64, mount: MountConfig) -> RunSpec {
        RunSpec {
            seed,
            ops,
            mount,
            profile: ProfileSpec::default_profile(),
            fsck_every: DEFAULT_FSCK_EVERY,
            crash_every: DEFAULT_CRASH_EVERY,
            swarm: true,
            faults: FaultConfig::NONE,
            tasks: DEFAULT_TASKS,
            disk_bytes: DISK_BYTES,
            mkfs: None,
            think: true,
            fragment: 0,
        }
    }

    /// Says why a spec cannot run, if it cannot.
    pub fn validate(&self) -> Result<(), String> {
        self.mount.validate().map_err(|e| format!("mount options refused (EINVAL): {e}"))?;
        self.faults.validate().map_err(|e| format!("faults: {e}"))?;
        check_tasks(self.tasks)?;
        check_disk_bytes(self.disk_bytes)?;
        check_fragment(self.fragment)?;
        if let Some(mkfs) = &self.mkfs {
            if let Some(why) = mkfs.refusal() {
                return Err(format!("--mkfs refused: {why}"));
            }
            let wanted = mkfs.model_mount(self.mount).map_err(|e| e.to_string())?;
            if wanted != self.mount {
                return Err(format!("--mkfs makes an image the mount `{}` does not describe: use `{wanted}`", self.mount));
            }
        }
        Ok(())
    }

    /// The command that repeats this run.
    pub fn command(&self) -> String {
        let mut cmd = format!("ext4sim run --seed {} --ops {}", self.seed, self.ops);
        for (flag, value) in self.differences() {
            let _ = write!(cmd, " --{}", flag.replace('_', "-"));
            match value {
                // mke2fs arguments start with '-': joined, they cannot pass for a flag.
                Some(v) if flag == "mkfs" => {
                    let _ = write!(cmd, "={}", shell_word(&v));
                }
                Some(v) => {
                    let _ = write!(cmd, " {}", shell_word(&v));
                }
                None => {}
            }
        }
        cmd
    }

    /// What differs from the defaults, as (option name, value) pairs; a
    /// flag with no value is a switch (`no_swarm`).
    fn differences(&self) -> Vec<(&'static str, Option<String>)> {
        let mut out = Vec::new();
        let mount = self.mount.to_string();
        if !mount.is_empty() {
            out.push(("mount", Some(mount)));
        }
        if self.profile.name != DEFAULT_PROFILE {
            out.push(("profile", Some(self.profile.name.clone())));
        }
        if self.crash_every != DEFAULT_CRASH_EVERY {
            out.push(("crash_every", Some(self.crash_every.to_string())));
        }
        if self.fsck_every != DEFAULT_FSCK_EVERY {
            out.push(("fsck_every", Some(self.fsck_every.to_string())));
        }
        if !self.swarm {
            out.push(("no_swarm", None));
        }
        if !self.think {
            out.push(("no_think", None));
        }
        if self.faults != FaultConfig::NONE {
            out.push(("faults", Some(self.faults.to_string())));
        }
        if self.tasks != DEFAULT_TASKS {
            out.push(("tasks", Some(self.tasks.to_string())));
        }
        if self.disk_bytes != DISK_BYTES {
            out.push(("disk_size", Some(self.disk_bytes.to_string())));
        }
        if let Some(mkfs) = &self.mkfs {
            out.push(("mkfs", Some(mkfs.to_string())));
        }
        if self.fragment != 0 {
            out.push(("fragment", Some(self.fragment.to_string())));
        }
        out
    }

    /// The spec as trace header lines (`key value`), every field written so
    /// a trace reads whole without knowing today's defaults.
    pub fn header_lines(&self) -> Vec<String> {
        vec![
            format!("seed {}", self.seed),
            format!("ops {}", self.ops),
            format!("mount {}", self.mount),
            format!("profile {}", self.profile.name),
            format!("crash_every {}", self.crash_every),
            format!("fsck_every {}", self.fsck_every),
            format!("faults {}", self.faults),
            format!("tasks {}", self.tasks),
            format!("disk_bytes {}", self.disk_bytes),
            format!("swarm {}", self.swarm),
            format!("think {}", self.think),
        ]
        .into_iter()
        // Written only when given, so traces of the engine's mkfs read as before.
        .chain(self.mkfs.as_ref().map(|m| format!("mkfs {m}")))
        .chain((self.fragment != 0).then(|| format!("fragment {}", self.fragment)))
        .collect()
    }

    /// Applies one header line (`word` and the rest of the line); false when
    /// `word` is not a header word.
    pub fn apply_header(&mut self, word: &str, value: &str) -> Result<bool, String> {
        let number = |what: &str| value.parse::<u64>().map_err(|_| format!("bad {what} `{value}`"));
        match word {
            "seed" => self.seed = number("seed")?,
            "ops" => self.ops = number("ops")?,
            "mount" => self.mount = parse_mount(value)?,
            "profile" => self.profile = ProfileSpec::resolve(value)?,
            "crash_every" => self.crash_every = number("crash_every")?,
            "fsck_every" => self.fsck_every = number("fsck_every")?,
            "faults" => self.faults = value.parse().map_err(|e| format!("faults: {e}"))?,
            "tasks" => self.tasks = parse_tasks(value)?,
            "disk_bytes" => {
                self.disk_bytes = number("disk_bytes")?;
                check_disk_bytes(self.disk_bytes)?;
            }
            "mkfs" => self.mkfs = Some(MkfsArgs::parse(value).map_err(|e| e.to_string())?),
            "fragment" => self.fragment = value.parse().map_err(|_| format!("bad fragment `{value}` (a percent, 0..=90)"))?,
            "swarm" => {
                self.swarm = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("bad swarm `{value}` (true or false)")),
                }
            }
            "think" => {
                self.think = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(format!("bad think `{value}` (true or false)")),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// `--mount` text as a config ext4 would accept, or why not.
pub fn parse_mount(text: &str) -> Result<MountConfig, String> {
    let mount: MountConfig = text.parse().map_err(|e| format!("mount options: {e}"))?;
    mount.validate().map_err(|e| format!("mount options refused (EINVAL): {e}"))?;
    Ok(mount)
}

/// A seed range `A..B` (B exclusive, not empty).
pub fn parse_seed_range(text: &str) -> Result<(u64, u64), String> {
    let (a, b) = text.split_once("..").ok_or(format!("`{text}` is not a range A..B"))?;
    let a: u64 = a.parse().map_err(|_| format!("bad range start `{a}`"))?;
    let b: u64 = b.parse().map_err(|_| format!("bad range end `{b}`"))?;
    if a >= b {
        return Err(format!("empty seed range {a}..{b}"));
    }
    Ok((a, b))
}

/// A task count from text, within 1..=[`MAX_TASKS`].
pub fn parse_tasks(text: &str) -> Result<u32, String> {
    let tasks: u32 = text.parse().map_err(|_| format!("bad tasks `{text}` (a whole number 1..={MAX_TASKS})"))?;
    check_tasks(tasks)?;
    Ok(tasks)
}

fn check_tasks(tasks: u32) -> Result<(), String> {
    if (1..=MAX_TASKS).contains(&tasks) {
        Ok(())
    } else {
        Err(format!("tasks {tasks} is outside 1..={MAX_TASKS}"))
    }
}

/// The share of memory others may hold (the cache keeps at least a tenth
/// of it). At bs > ps a block needs a folio of several pages, which
/// fragmented memory may not have: the op answers ENOMEM (or a short
/// count), which the lockstep runner holds to ext4's rules.
fn check_fragment(percent: u8) -> Result<(), String> {
    if percent > 90 {
        return Err(format!("fragment {percent}: at most 90 (percent of memory other users hold)"));
    }
    Ok(())
}

fn check_disk_bytes(bytes: u64) -> Result<(), String> {
    if bytes == 0 || bytes % 512 != 0 {
        return Err(format!("disk size {bytes} must be a positive multiple of 512 bytes"));
    }
    Ok(())
}

/// A byte count like 67108864, 64M or 2G.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, shift) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 10),
        Some('M') => (&t[..t.len() - 1], 20),
        Some('G') => (&t[..t.len() - 1], 30),
        Some('T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| format!("bad size `{text}` (e.g. 64M, 2G)"))?;
    let bytes = n.checked_mul(1 << shift).ok_or(format!("size `{text}` does not fit in 64 bits"))?;
    if bytes == 0 || bytes % 512 != 0 {
        return Err(format!("size `{text}` must be a positive multiple of 512 bytes"));
    }
    Ok(bytes)
}

/// A value as one shell word: quoted when it is empty or holds a space.
fn shell_word(v: &str) -> String {
    if v.is_empty() || v.contains([' ', '\'', '"', '\\', '$']) {
        format!("'{}'", v.replace('\'', "'\\''"))
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_names_only_what_differs_and_headers_round_trip() {
        let plain = RunSpec::new(3, 100, MountConfig::default());
        assert_eq!(plain.command(), "ext4sim run --seed 3 --ops 100");
        let mut odd = plain.clone();
        odd.mount = "data=journal,nodelalloc".parse().unwrap();
        odd.profile = ProfileSpec::resolve("hdd-5400").unwrap();
        odd.fsck_every = 7;
        odd.crash_every = 50;
        odd.swarm = false;
        odd.faults = "read,write=0.5".parse().unwrap();
        odd.tasks = 3;
        odd.disk_bytes = 64 << 20;
        odd.fragment = 40;
        assert_eq!(
            odd.command(),
            "ext4sim run --seed 3 --ops 100 --mount data=journal,nodelalloc --profile hdd-5400 --crash-every 50 --fsck-every 7 --no-swarm --faults read,write=0.5 --tasks 3 --disk-size 67108864 --fragment 40"
        );
        let mut back = RunSpec::new(0, 0, MountConfig::default());
        for line in odd.header_lines() {
            let (word, value) = line.split_once(' ').unwrap();
            assert_eq!(back.apply_header(word, value), Ok(true), "{line}");
        }
        assert_eq!(back, odd);
        assert_eq!(back.apply_header("bogus", "1"), Ok(false));
    }

    /// Fragmented memory runs at any block and page size, up to 90%.
    #[test]
    fn fragmented_memory_is_refused_only_past_ninety() {
        let mut s = RunSpec { fragment: 50, ..RunSpec::new(1, 10, "bs=16k,ps=4k".parse().unwrap()) };
        assert_eq!(s.validate(), Ok(()));
        s.fragment = 91;
        assert!(s.validate().unwrap_err().contains("at most 90"));
    }

    #[test]
    fn impossible_values_are_refused_with_the_reason() {
        let mut s = RunSpec::new(1, 1, MountConfig::default());
        assert!(s.apply_header("tasks", "0").unwrap_err().contains("outside 1..=64"));
        assert!(s.apply_header("tasks", "100000").unwrap_err().contains("outside"));
        assert!(s.apply_header("mount", "data=journal,delalloc").unwrap_err().contains("EINVAL"));
        assert!(s.apply_header("faults", "write=2").is_err());
        assert!(s.apply_header("disk_bytes", "1000").unwrap_err().contains("multiple of 512"));
        assert!(s.apply_header("profile", "/no/such/profile").unwrap_err().contains("not built in"));
        assert!(s.apply_header("swarm", "maybe").is_err());
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert!(parse_size("99999999T").unwrap_err().contains("64 bits"));
        assert!(parse_size("lots").unwrap_err().contains("bad size"));
        assert!(parse_seed_range("5..2").unwrap_err().contains("empty"));
        assert_eq!(parse_seed_range("2..5"), Ok((2, 5)));
        assert!(parse_mount("nobarrier").unwrap_err().contains("unknown mount option"));
    }
}
