//! The `ext4sim` command line: run, swarm, replay, shrink, export, bench.
//! Exit status is 0 only when every run passed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use clap::{Args, Parser, Subcommand};
use ext4_model::MountConfig;

use crate::driver::{run_seed, shrink_failure, RunResult, RunSpec, ShrunkTrace, TargetFactory};
use crate::lockstep::Target as _;
use crate::report::{json, summary};
use crate::trace::Trace;

#[derive(Parser, Debug)]
#[command(name = "ext4sim", about = "Seeded lockstep simulation of the ext4 reference model and engine")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Ops to generate per run.
    #[arg(long, default_value_t = 1000)]
    pub ops: u64,
    /// Disk profile: hdd-5400, hdd-7200, ssd, nvme, ram, or a profile file.
    #[arg(long, default_value = "ram")]
    pub profile: String,
    /// Mount options, e.g. "data=journal,nodelalloc,bs=16k,ps=4k".
    #[arg(long, default_value = "")]
    pub mount: String,
    /// Full checks (model + engine fsck) every N ops; 0 = only at the end.
    #[arg(long, default_value_t = 500)]
    pub fsck_every: u64,
    /// Mean ops between crashes; 0 = no crashes.
    #[arg(long, default_value_t = 0)]
    pub crash_every: u64,
    /// Run every op kind at base weights instead of swarm testing.
    #[arg(long)]
    pub no_swarm: bool,
    /// Device faults: read, write, latent, readonly, nospace (each `kind=rate` to override).
    #[arg(long, default_value = "")]
    pub faults: String,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// Where failing traces are written.
    #[arg(long, default_value = ".")]
    pub trace_dir: PathBuf,
    /// Simulated tasks whose ops a seeded scheduler interleaves.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub tasks: u32,
    /// Simulated disk size, e.g. 64M or 2G (default 8G); small disks fill up.
    #[arg(long, default_value = "8G")]
    pub disk_size: String,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// One seeded lockstep run with a readable summary.
    Run {
        #[arg(long)]
        seed: u64,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Many seeds; a summary table at the end.
    Swarm {
        /// Seed range A..B (B exclusive).
        #[arg(long)]
        seeds: String,
        /// Run only shard i of n (i in 0..n), for CI matrices.
        #[arg(long)]
        shard: Option<String>,
        /// Worker threads; each seed is still one deterministic run.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Re-run a trace file.
    Replay {
        trace: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Shrink a failing trace file further and write the result beside it.
    Shrink { trace: PathBuf },
    /// Run a seed and write the engine's image for e2fsprogs.
    Export {
        #[arg(long)]
        seed: u64,
        image: PathBuf,
        #[command(flatten)]
        args: RunArgs,
    },
    /// Hold the model to a real Linux kernel's ext4 (root for --kernel host).
    Oracle(crate::oracle::cli::OracleArgs),
    /// Inside the oracle's qemu guest: run the cases on the control disk.
    #[command(hide = true)]
    OracleGuest,
    /// The oracle's op runner: chroot into DIR, run the ops on stdin.
    #[command(hide = true)]
    OracleExec { dir: PathBuf },
    /// Benchmarks: engine vs e2fsprogs (mkfs, populate, fsck) and lockstep throughput.
    Bench {
        /// Which: e2fsprogs, lockstep, or all.
        #[arg(long, default_value = "all")]
        what: String,
        /// Runs per figure (median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Ops in the long lockstep run.
        #[arg(long, default_value_t = 200_000)]
        lockstep_ops: u64,
        /// 1,000-op seeds for the seeds-per-minute figure.
        #[arg(long, default_value_t = 60)]
        seeds: u64,
    },
}

/// `--mount` text as a config ext4 would accept, or why not.
pub(crate) fn mount_from_text(text: &str) -> Result<MountConfig, String> {
    let mount = text.parse::<MountConfig>().map_err(|e| e.to_string())?;
    mount.validate().map_err(|e| format!("mount options refused (EINVAL): {e}"))?;
    Ok(mount)
}

fn spec_from(seed: u64, args: &RunArgs) -> Result<RunSpec, String> {
    let mount = mount_from_text(&args.mount)?;
    Ok(RunSpec {
        seed,
        ops: args.ops,
        mount,
        profile: args.profile.clone(),
        fsck_every: args.fsck_every,
        crash_every: args.crash_every,
        swarm: !args.no_swarm,
        faults: args.faults.clone(),
        tasks: args.tasks,
        disk_bytes: parse_size(&args.disk_size)?,
    })
}

/// A byte count like 67108864, 64M or 2G.
fn parse_size(text: &str) -> Result<u64, String> {
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

pub fn parse_range(text: &str) -> Result<(u64, u64), String> {
    let (a, b) = text.split_once("..").ok_or(format!("`{text}` is not a range A..B"))?;
    let a: u64 = a.parse().map_err(|_| format!("bad range start `{a}`"))?;
    let b: u64 = b.parse().map_err(|_| format!("bad range end `{b}`"))?;
    if a >= b {
        return Err(format!("empty seed range {a}..{b}"));
    }
    Ok((a, b))
}

fn parse_shard(text: &str) -> Result<(u64, u64), String> {
    let (i, n) = text.split_once('/').ok_or(format!("`{text}` is not a shard i/n"))?;
    let i: u64 = i.parse().map_err(|_| format!("bad shard index `{i}`"))?;
    let n: u64 = n.parse().map_err(|_| format!("bad shard count `{n}`"))?;
    if n == 0 || i >= n {
        return Err(format!("shard {i}/{n} needs 0 <= i < n"));
    }
    Ok((i, n))
}

/// Shrinks a failure, writes its trace, and prints how to reproduce it.
fn report_failure<F: TargetFactory>(factory: &F, r: &RunResult, dir: &std::path::Path) -> String {
    let mut out = String::new();
    if let Some(ShrunkTrace { trace, runs, budget_spent, replays }) = shrink_failure(factory, r) {
        let path = dir.join(format!("ext4sim-seed{}.trace", r.spec.seed));
        match std::fs::write(&path, trace.to_text()) {
            Ok(()) if !replays => out.push_str(&format!(
                "  shrunk      not tried: the {} steps, replayed, do not fail (the failure fell outside every step: a runner bug); written to {} as they ran\n",
                trace.steps.len(),
                path.display()
            )),
            Ok(()) => {
                let spent = if budget_spent { " (budget spent: `ext4sim shrink` on the trace goes on)" } else { "" };
                out.push_str(&format!("  shrunk      {} steps -> {} steps in {runs} runs{spent}\n", r.steps.len(), trace.steps.len()));
                for step in &trace.steps {
                    out.push_str(&format!("    {}\n", crate::trace::format_step(step)));
                }
                out.push_str(&format!("  replay      ext4sim replay {}\n", path.display()));
            }
            Err(e) => out.push_str(&format!("  could not write trace {}: {e}\n", path.display())),
        }
    }
    out.push_str(&format!("  rerun       {}\n", r.spec.command()));
    out
}

pub fn main_with<F: TargetFactory + Sync>(factory: F) -> ExitCode {
    crate::heap::keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Command::Oracle(args) => return crate::oracle::cli::oracle_main(args),
        Command::OracleGuest => return ExitCode::from(crate::oracle::guest::guest_main().clamp(0, 255) as u8),
        Command::OracleExec { dir } => return ExitCode::from(crate::oracle::syscalls::exec_main(&dir).clamp(0, 255) as u8),
        _ => {}
    }
    match run_cli(&factory, cli) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ext4sim: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_cli<F: TargetFactory + Sync>(factory: &F, cli: Cli) -> Result<bool, String> {
    match cli.command {
        Command::Run { seed, args } => {
            let spec = spec_from(seed, &args)?;
            let r = run_seed(factory, &spec)?;
            if args.json {
                println!("{}", json(&r));
            } else {
                print!("{}", summary(&r));
            }
            if r.failure.is_some() {
                eprint!("{}", report_failure(factory, &r, &args.trace_dir));
            }
            Ok(r.failure.is_none())
        }
        Command::Swarm { seeds, shard, jobs, args } => {
            let (a, b) = parse_range(&seeds)?;
            let (si, sn) = shard.as_deref().map(parse_shard).transpose()?.unwrap_or((0, 1));
            let mine: Vec<u64> = (a..b).filter(|s| s % sn == si).collect();
            let next = AtomicU64::new(0);
            let results: Mutex<Vec<(u64, Result<RunResult, String>)>> = Mutex::new(Vec::new());
            let done = AtomicU64::new(0);
            std::thread::scope(|scope| {
                for _ in 0..jobs.max(1) {
                    scope.spawn(|| loop {
                        let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                        let Some(&seed) = mine.get(i) else { break };
                        let r = spec_from(seed, &args).and_then(|spec| run_seed(factory, &spec));
                        results.lock().expect("no panics hold the lock").push((seed, r));
                        let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                        if !args.json {
                            let width = 40;
                            let filled = (n as usize * width) / mine.len().max(1);
                            eprint!("\r[{}{}] {n}/{}", "#".repeat(filled), ".".repeat(width - filled), mine.len());
                        }
                    });
                }
            });
            if !args.json {
                eprintln!();
            }
            let mut results = results.into_inner().expect("no panics hold the lock");
            results.sort_by_key(|(s, _)| *s);
            let mut passed = 0;
            let mut failed = Vec::new();
            let mut total_ops = 0;
            for (seed, r) in &results {
                match r {
                    Ok(r) if r.failure.is_none() => {
                        passed += 1;
                        total_ops += r.stats.ops;
                        if args.json {
                            println!("{}", json(r));
                        }
                    }
                    Ok(r) => {
                        total_ops += r.stats.ops;
                        if args.json {
                            println!("{}", json(r));
                        }
                        failed.push((*seed, r.failure.as_ref().map(|f| f.to_string()).unwrap_or_default()));
                        eprint!("{}", report_failure(factory, r, &args.trace_dir));
                    }
                    Err(e) => failed.push((*seed, e.clone())),
                }
            }
            if !args.json {
                println!("ext4sim swarm: seeds {a}..{b} shard {si}/{sn}: {} runs, {} ops", results.len(), total_ops);
                println!("  {:<8} {:>6}", "result", "seeds");
                println!("  {:<8} {:>6}", "pass", passed);
                println!("  {:<8} {:>6}", "fail", failed.len());
                for (seed, why) in &failed {
                    println!("  seed {seed}: {}", why.lines().next().unwrap_or(""));
                }
            }
            Ok(failed.is_empty())
        }
        Command::Replay { trace, json: as_json } => {
            let text = std::fs::read_to_string(&trace).map_err(|e| format!("{}: {e}", trace.display()))?;
            let t = Trace::parse(&text).map_err(|e| format!("{}: {e}", trace.display()))?;
            let spec = RunSpec::from_trace(&t)?;
            let r = crate::driver::run_steps(factory, &spec, &t.steps)?;
            if as_json {
                println!("{}", json(&r));
            } else {
                print!("{}", summary(&r));
            }
            Ok(r.failure.is_none())
        }
        Command::Export { seed, image, args } => {
            let spec = spec_from(seed, &args)?;
            let (r, mut target) = crate::driver::run_seed_keeping_target(factory, &spec)?;
            print!("{}", summary(&r));
            target.export_image(&image)?;
            println!("  image       {}", image.display());
            Ok(r.failure.is_none())
        }
        Command::Bench { what, runs, lockstep_ops, seeds } => {
            let mut ok = true;
            if what == "all" || what == "e2fsprogs" {
                println!("engine vs e2fsprogs (host time, median of {runs})");
                match crate::bench::bench_e2fsprogs(runs.max(1), &crate::bench::default_work_dir()) {
                    Ok(rows) => rows.iter().for_each(|r| println!("{}", r.line())),
                    Err(e) => {
                        println!("  failed: {e}");
                        ok = false;
                    }
                }
            }
            if what == "all" || what == "lockstep" {
                println!("lockstep throughput (ram profile, host time)");
                match crate::bench::bench_lockstep(factory, runs, lockstep_ops, seeds) {
                    Ok(rows) => rows.iter().for_each(|r| println!("{}", r.line())),
                    Err(e) => {
                        println!("  failed: {e}");
                        ok = false;
                    }
                }
            }
            if !["all", "e2fsprogs", "lockstep"].contains(&what.as_str()) {
                return Err(format!("unknown benchmark `{what}`: use e2fsprogs, lockstep or all"));
            }
            Ok(ok)
        }
        Command::Oracle(_) | Command::OracleGuest | Command::OracleExec { .. } => unreachable!("handled in main_with"),
        Command::Shrink { trace } => {
            let text = std::fs::read_to_string(&trace).map_err(|e| format!("{}: {e}", trace.display()))?;
            let t = Trace::parse(&text).map_err(|e| format!("{}: {e}", trace.display()))?;
            let spec = RunSpec::from_trace(&t)?;
            let r = crate::driver::run_steps(factory, &spec, &t.steps)?;
            if r.failure.is_none() {
                println!("trace passes; nothing to shrink");
                return Ok(true);
            }
            let dir = trace.parent().map(|p| p.to_path_buf()).unwrap_or_else(|| ".".into());
            print!("{}", report_failure(factory, &r, &dir));
            Ok(false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_take_a_unit_and_refuse_what_no_disk_can_be() {
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("1536"), Ok(1536));
        assert!(parse_size("0").unwrap_err().contains("positive multiple of 512"));
        assert!(parse_size("1000").unwrap_err().contains("positive multiple of 512"));
        assert!(parse_size("99999999T").unwrap_err().contains("64 bits"));
        assert!(parse_size("lots").unwrap_err().contains("bad size"));
    }

    #[test]
    fn nonsense_arguments_are_refused_before_any_run() {
        assert!(Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--tasks", "0"]).is_err());
        assert!(Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--tasks", "2"]).is_ok());
        assert!(parse_range("5..2").unwrap_err().contains("empty"));
        assert_eq!(parse_range("2..5"), Ok((2, 5)));
    }
}
