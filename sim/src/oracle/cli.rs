//! `ext4sim oracle`: arguments, the per-seed lines and the exit status
//! (0 all passed, 1 a divergence or a harness error, 2 a usage error, 77
//! everything skipped or the kernel unobtainable here; see [`OracleError`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use ext4_model::MountConfig;

use super::error::warn;
use super::kmsg::PAGE_ALLOCATOR;
use super::host::HostKernel;
use super::qemu::QemuKernel;
use super::{run_oracle, Kernel, MkfsArgs, OracleError, OracleReport, OracleSpec, Verdict};
use crate::figure::json_str;
use crate::run::spec::{parse_mount, parse_seed_range};
use crate::trace::{Step, Trace};

/// The exit status that says "skipped" (the automake convention).
pub const EXIT_SKIPPED: u8 = 77;

#[derive(Args, Debug, Clone)]
pub struct OracleArgs {
    /// host (loop mount on this kernel) or qemu (a 7.x kernel in a VM).
    #[arg(long, default_value = "host")]
    pub kernel: String,
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// Seed range A..B (B exclusive).
    #[arg(long)]
    pub seeds: Option<String>,
    #[arg(long, default_value_t = 200)]
    pub ops: u64,
    /// Mount options in the simulator's syntax, e.g. "data=journal,bs=16k".
    #[arg(long, default_value = "")]
    pub mount: String,
    /// Extra mke2fs arguments, e.g. "-O ^metadata_csum -I 256" (both
    /// `--mkfs "-O ..."` and `--mkfs="-O ..."` work). Options the oracle
    /// cannot account for are refused with the reason.
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub mkfs: String,
    /// Replay this trace's ops (and its mke2fs arguments) instead of generating them.
    #[arg(long, conflicts_with_all = ["seed", "seeds"])]
    pub trace: Option<PathBuf>,
    #[arg(long)]
    pub no_swarm: bool,
    /// Report divergences as found, without shrinking them (a qemu shrink
    /// costs boots).
    #[arg(long)]
    pub no_shrink: bool,
    /// Where the qemu kernel is kept between runs. Default:
    /// $EXT4SIM_QEMU_CACHE, else ~/.cache/ext4sim/qemu.
    #[arg(long)]
    pub qemu_cache: Option<PathBuf>,
    /// The qemu guest's memory in MiB (little of it: the page cache under
    /// pressure, where the page allocator may warn).
    #[arg(long, default_value_t = super::qemu::GUEST_MIB)]
    pub guest_mib: u32,
    /// Where failing traces are written.
    #[arg(long, default_value = ".")]
    pub trace_dir: PathBuf,
    #[arg(long)]
    pub json: bool,
}

fn usage(e: impl std::fmt::Display) -> OracleError {
    OracleError::Usage(e.to_string())
}

/// The mke2fs arguments of a replay: the trace's own `mkfs` line, or
/// `--mkfs` for older traces, which lack the line.
fn replay_mkfs(path: &Path, recorded: Option<&str>, given: MkfsArgs) -> Result<MkfsArgs, OracleError> {
    let Some(text) = recorded else { return Ok(given) };
    let recorded = MkfsArgs::parse(text).map_err(|e| usage(format!("{}: mkfs line: {e}", path.display())))?;
    if !given.opts.is_empty() && given != recorded {
        return Err(usage(format!("{} records mkfs `{recorded}`, and --mkfs `{given}` differs: drop --mkfs", path.display())));
    }
    Ok(recorded)
}

/// The model's config: `--mount` (or the trace's) with mkfs's block size and
/// journal, which ext4 must still accept together.
fn model_mount(mkfs: &MkfsArgs, mount: MountConfig) -> Result<MountConfig, OracleError> {
    let mount = mkfs.model_mount(mount).map_err(usage)?;
    parse_mount(&mount.to_string()).map_err(|e| usage(format!("--mount with --mkfs: {e}")))?;
    Ok(mount)
}

fn specs(args: &OracleArgs) -> Result<Vec<OracleSpec>, OracleError> {
    let mut mkfs = MkfsArgs::parse(&args.mkfs).map_err(usage)?;
    let base = |seed: u64, mount: MountConfig, mkfs: &MkfsArgs, fixed| OracleSpec { seed, ops: args.ops, mount, mkfs: mkfs.clone(), swarm: !args.no_swarm, fixed };
    if let Some(path) = &args.trace {
        let text = std::fs::read_to_string(path).map_err(|e| OracleError::io("read the trace", path, e))?;
        let t = Trace::parse(&text).map_err(|e| usage(format!("{}: {e}", path.display())))?;
        let recorded = t.spec.mkfs.as_ref().map(ToString::to_string);
        mkfs = replay_mkfs(path, recorded.as_deref(), mkfs)?;
        let mount = model_mount(&mkfs, t.spec.mount)?;
        let ops: Vec<_> = t.steps.iter().filter_map(|s| if let Step::Op(op) = s { Some(op.clone()) } else { None }).collect();
        let mut spec = base(t.spec.seed, mount, &mkfs, Some(ops.clone()));
        spec.ops = ops.len() as u64;
        return Ok(vec![spec]);
    }
    let mount = model_mount(&mkfs, parse_mount(&args.mount).map_err(usage)?)?;
    match (&args.seed, &args.seeds) {
        (Some(seed), None) => Ok(vec![base(*seed, mount, &mkfs, None)]),
        (None, Some(range)) => {
            let (a, b) = parse_seed_range(range).map_err(usage)?;
            Ok((a..b).map(|s| base(s, mount, &mkfs, None)).collect())
        }
        _ => Err(usage("give --seed N, --seeds A..B or --trace FILE")),
    }
}

/// The oracle's scratch directory, removed however the run ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, OracleError> {
        let dir = std::env::temp_dir().join(format!("ext4sim-oracle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| OracleError::io("create the scratch directory", &dir, e))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn default_qemu_cache() -> PathBuf {
    if let Some(dir) = std::env::var_os("EXT4SIM_QEMU_CACHE") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    home.join(".cache/ext4sim/qemu")
}

fn line(r: &OracleReport) -> String {
    match &r.verdict {
        Verdict::Pass => format!("seed {}: pass ({} ops)", r.spec.seed, r.ops),
        Verdict::Skipped(why) => format!("seed {}: SKIPPED: {why}", r.spec.seed),
        Verdict::Error(e) => format!("seed {}: ERROR: {e}", r.spec.seed),
        Verdict::Failed { finding, shrunk, trace, rounds } => {
            let mut out = format!("seed {}: DIVERGED from the model\n  {finding}\n  shrunk      {} ops -> {} ops in {rounds} rounds\n", r.spec.seed, r.ops, shrunk.len());
            for op in shrunk {
                out.push_str(&format!("    {}\n", op));
            }
            match trace {
                // The trace holds the mke2fs arguments too.
                Ok(t) => out.push_str(&format!("  replay      ext4sim oracle --kernel {} --trace {}\n", r.kernel, t.display())),
                Err(e) => out.push_str(&format!("  could not write the trace: {e}\n")),
            }
            out.push_str(&format!("  rerun       {}", r.spec.command(r.kernel)));
            out
        }
    }
}

fn json_line(r: &OracleReport) -> String {
    let (result, why) = match &r.verdict {
        Verdict::Pass => ("pass", String::new()),
        Verdict::Skipped(w) => ("skipped", w.clone()),
        Verdict::Error(e) => ("error", e.clone()),
        Verdict::Failed { finding, .. } => ("diverged", finding.to_string()),
    };
    format!(
        "{{\"seed\":{},\"kernel\":{},\"release\":{},\"ops\":{},\"result\":{},\"why\":{},\"engine_alloc_warnings\":{},\"command\":{}}}",
        r.spec.seed,
        json_str(r.kernel),
        json_str(&r.release),
        r.ops,
        json_str(result),
        json_str(&why),
        r.engine_alloc_warnings.map_or("null".to_string(), |w| w.to_string()),
        json_str(&r.spec.command(r.kernel))
    )
}

pub fn oracle_main(args: OracleArgs) -> ExitCode {
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            warn(format!("ext4sim oracle: {}{e}", if matches!(e, OracleError::Usage(_)) { "" } else { "ERROR: " }));
            ExitCode::from(e.exit_code())
        }
    }
}

/// Writes report text; a stdout that cannot take it (a full disk under a
/// redirect) is an error, not a panic.
fn say(text: &str) -> Result<(), OracleError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}").and_then(|()| out.flush()).map_err(|e| OracleError::io("write the report to", Path::new("stdout"), e))
}

fn run(args: &OracleArgs) -> Result<u8, OracleError> {
    if args.guest_mib != super::qemu::GUEST_MIB && args.kernel != "qemu" {
        return Err(usage("--guest-mib sizes the qemu guest; the host kernel's memory is the machine's"));
    }
    if args.guest_mib < super::qemu::GUEST_MIB_MIN {
        return Err(usage(format!("--guest-mib {}: the guest needs at least {} MiB to boot and run", args.guest_mib, super::qemu::GUEST_MIB_MIN)));
    }
    let specs = specs(args)?;
    let scratch = Scratch::new()?;
    let mut kernel: Box<dyn Kernel> = match args.kernel.as_str() {
        "host" => Box::new(HostKernel::new(&scratch.0)?),
        "qemu" => {
            let cache = args.qemu_cache.clone().unwrap_or_else(default_qemu_cache);
            match QemuKernel::new(&cache, &scratch.0) {
                Ok(mut k) => {
                    k.set_guest_mib(args.guest_mib);
                    Box::new(k)
                }
                Err(e @ OracleError::Unavailable(_)) => {
                    say(&format!("ext4sim oracle: SKIPPED: {e}"))?;
                    return Ok(EXIT_SKIPPED);
                }
                Err(e) => return Err(e),
            }
        }
        other => return Err(usage(format!("unknown kernel backend `{other}`: use host or qemu"))),
    };
    if !args.json {
        let ops = specs.first().map_or(args.ops, |s| s.ops);
        let mount = specs.first().map(|s| s.mount.to_string()).unwrap_or_default();
        let mkfs = specs.first().map(|s| s.mkfs.to_string()).unwrap_or_default();
        say(&format!("ext4sim oracle: kernel {} {}, {} seed(s) x {ops} ops, mount \"{mount}\", mkfs \"{mkfs}\"", kernel.name(), kernel.release(), specs.len()))?;
        for (kind, why) in kernel.refused_kinds() {
            say(&format!("  left out   {kind:?}: {why}"))?;
        }
    }
    let reports = run_oracle(kernel.as_mut(), &specs, &scratch.0, &args.trace_dir, !args.no_shrink);
    let kernel_log = kernel.take_kernel_log();
    drop(scratch);
    let count = |f: fn(&Verdict) -> bool| reports.iter().filter(|r| f(&r.verdict)).count();
    let passed = count(|v| matches!(v, Verdict::Pass));
    let skipped = count(|v| matches!(v, Verdict::Skipped(_)));
    let errors = count(|v| matches!(v, Verdict::Error(_)));
    let failed = reports.len() - passed - skipped - errors;
    for r in &reports {
        if args.json {
            say(&json_line(r))?;
        } else if !matches!(r.verdict, Verdict::Pass) || reports.len() == 1 {
            say(&line(r))?;
        }
    }
    if !args.json {
        let release = reports.first().map(|r| r.release.clone()).unwrap_or_default();
        let errors = if errors > 0 { format!(", {errors} harness error(s)") } else { String::new() };
        say(&format!("  kernel {} {release}: {passed} passed, {failed} failed, {skipped} skipped{errors}", kernel.name()))?;
        // Not divergences: the kernel's own word that something went wrong,
        // and the page allocator's warnings beside the engine's count.
        let kernel_warned = kernel_log.iter().filter(|l| l.contains(PAGE_ALLOCATOR)).count();
        let ran: Vec<u64> = reports.iter().filter_map(|r| r.engine_alloc_warnings).collect();
        if !ran.is_empty() {
            say(&format!(
                "  page allocator warnings: kernel {kernel_warned} in its log; engine {} (no-fail requests of order > 1) running the same ops of {} seed(s)",
                ran.iter().sum::<u64>(),
                ran.len()
            ))?;
        }
        if !kernel_log.is_empty() {
            say(&format!("  kernel log: {} line(s): ext4's warnings and errors about the cases' devices, the page allocator's warnings", kernel_log.len()))?;
            for line in kernel_log.iter().take(20) {
                say(&format!("    {line}"))?;
            }
        }
    } else if !kernel_log.is_empty() {
        let lines: Vec<String> = kernel_log.iter().map(|l| crate::figure::json_str(l)).collect();
        say(&format!("{{\"kernel_log\":[{}]}}", lines.join(",")))?;
    }
    Ok(if failed + errors > 0 {
        1
    } else if passed == 0 && skipped > 0 {
        EXIT_SKIPPED
    } else {
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: OracleArgs,
    }

    fn parse(argv: &[&str]) -> Result<OracleArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("oracle").chain(argv.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn mkfs_values_starting_with_a_dash_parse_in_both_forms() {
        for argv in [&["--seed", "1", "--mkfs", "-O ^flex_bg"][..], &["--seed", "1", "--mkfs=-O ^flex_bg"], &["--mkfs", "-O ^flex_bg", "--seed", "1"]] {
            let args = parse(argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            assert_eq!(args.mkfs, "-O ^flex_bg", "{argv:?}");
            assert_eq!(args.seed, Some(1));
        }
        assert_eq!(parse(&["--mkfs", "-b 2048", "--ops", "9"]).unwrap().ops, 9);
    }

    #[test]
    fn guest_memory_is_refused_where_it_would_change_nothing_or_cannot_boot() {
        let refused = |argv: &[&str]| match run(&parse(argv).expect("parses")) {
            Err(OracleError::Usage(why)) => why,
            other => panic!("{argv:?}: {other:?}"),
        };
        assert!(refused(&["--seed", "1", "--guest-mib", "512"]).contains("qemu guest"), "the host kernel has no guest");
        assert!(refused(&["--seed", "1", "--kernel", "qemu", "--guest-mib", "128"]).contains("at least 256"));
        assert_eq!(parse(&["--seed", "1"]).expect("parses").guest_mib, super::super::qemu::GUEST_MIB);
    }

    /// Words as a POSIX shell splits them (single quotes and backslashes).
    fn shell_words(line: &str) -> Vec<String> {
        let (mut words, mut word, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\'' => (quoted, any) = (!quoted, true),
                '\\' if !quoted => word.extend(chars.next()),
                ' ' if !quoted => {
                    if any || !word.is_empty() {
                        words.push(std::mem::take(&mut word));
                    }
                    any = false;
                }
                c => word.push(c),
            }
        }
        if any || !word.is_empty() {
            words.push(word);
        }
        words
    }

    #[test]
    fn printed_rerun_lines_parse_back_to_the_same_case() {
        for mkfs in ["-b 2048 -O ^flex_bg", "-L it's -N 5000"] {
            let args = parse(&["--seeds", "5..6", "--mkfs", mkfs, "--no-swarm"]).unwrap();
            let spec = specs(&args).unwrap().remove(0);
            let words = shell_words(&spec.command("host"));
            assert_eq!(&words[..2], ["ext4sim", "oracle"]);
            let again = parse(&words[2..].iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
            assert_eq!(specs(&again).unwrap(), vec![spec]);
        }
        let spec = specs(&parse(&["--seed", "1", "--mkfs", "-b 2048"]).unwrap()).unwrap().remove(0);
        assert_eq!(spec.mount.block_size, 2048, "the model takes the block size from -b");
    }

    #[test]
    fn bad_mkfs_and_contradictions_are_usage_errors() {
        let err = |argv: &[&str]| specs(&parse(argv).unwrap()).unwrap_err();
        assert!(matches!(err(&["--seed", "1", "--mkfs", "-Z"]), OracleError::Usage(_)));
        assert_eq!(err(&["--seed", "1", "--mkfs", "-b 2048", "--mount", "bs=1k"]).exit_code(), 2);
        assert!(err(&["--seed", "1", "--mkfs", "-O ^has_journal", "--mount", "data=journal"]).to_string().contains("w/o journal"));
    }

    #[test]
    fn a_replay_takes_mkfs_from_its_trace_and_refuses_another() {
        let path = Path::new("t.trace");
        let given = MkfsArgs::parse("-O ^flex_bg").unwrap();
        assert_eq!(replay_mkfs(path, None, given.clone()).unwrap(), given, "older traces: --mkfs as the old replay line gave it");
        assert_eq!(replay_mkfs(path, Some("-O ^flex_bg"), MkfsArgs::default()).unwrap(), given);
        assert_eq!(replay_mkfs(path, Some("-O ^flex_bg"), given.clone()).unwrap(), given);
        assert!(replay_mkfs(path, Some("-N 5000"), given).unwrap_err().to_string().contains("drop --mkfs"));
    }
}
