//! The `ext4sim` command line: run, swarm, replay, shrink, export, bench.
//! Exit status: 0 only when every run passed, 1 when one failed, 2 for a
//! usage error (a bad option, a trace that does not parse).

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

use crate::figure::{json_object, json_str};
use crate::mke2fs::MkfsArgs;
use crate::report::{json, summary};
use crate::run::spec::{parse_mount, parse_seed_range, parse_size, parse_tasks, ProfileSpec, RunSpec, DEFAULT_CRASH_EVERY, DEFAULT_FSCK_EVERY, DEFAULT_OPS, DEFAULT_PROFILE, DISK_BYTES};
use crate::run::{run_seed_keeping_target, run_seed_with_progress, run_steps, shrink_failure, RunResult, ShrunkTrace};
use crate::swarm::run_swarm;
use crate::target::{Target as _, TargetFactory};
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
    #[arg(long, default_value_t = DEFAULT_OPS)]
    pub ops: u64,
    /// Disk profile: hdd-5400, hdd-7200, ssd, nvme, ram, or a profile file.
    #[arg(long, default_value = DEFAULT_PROFILE)]
    pub profile: String,
    /// Mount options, e.g. "data=journal,nodelalloc,bs=16k,ps=4k".
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub mount: String,
    /// Full checks (model + engine fsck) every N ops; 0 = only at the end.
    #[arg(long, default_value_t = DEFAULT_FSCK_EVERY)]
    pub fsck_every: u64,
    /// Mean ops between crashes; 0 = no crashes.
    #[arg(long, default_value_t = DEFAULT_CRASH_EVERY)]
    pub crash_every: u64,
    /// Run every op kind at base weights instead of swarm testing.
    #[arg(long)]
    pub no_swarm: bool,
    /// No pauses between ops: simulated time passes only with I/O, so the
    /// commit interval and dirty expiry seldom fire.
    #[arg(long)]
    pub no_think: bool,
    /// Device faults: read, write, latent, readonly, nospace (each `kind=rate` to override).
    #[arg(long, default_value = "")]
    pub faults: String,
    /// Machine-readable output (one JSON document).
    #[arg(long)]
    pub json: bool,
    /// Where failing traces are written.
    #[arg(long, default_value = ".")]
    pub trace_dir: PathBuf,
    /// Start from an image the real mke2fs makes with these arguments, e.g.
    /// "-O ^flex_bg -b 1024", instead of the engine's own mkfs (needs e2fsprogs).
    #[arg(long, allow_hyphen_values = true)]
    pub mkfs: Option<String>,
    /// Simulated tasks whose ops a seeded scheduler interleaves (1..=64).
    #[arg(long, default_value = "1", value_parser = parse_tasks)]
    pub tasks: u32,
    /// Simulated disk size, e.g. 64M or 2G (default 8G); small disks fill up.
    #[arg(long, value_parser = parse_size)]
    pub disk_size: Option<u64>,
    /// Percent of memory seeded other users hold, scattered (0..=90): the
    /// page cache's folios come from fragmented buddy memory.
    #[arg(long, default_value_t = 0)]
    pub fragment: u8,
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
        /// Shrink only the first N failing seeds; the rest are listed with
        /// the command that reruns them.
        #[arg(long, default_value_t = 1)]
        shrink: usize,
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
    /// The allocation layout of any ext4 image (the engine's, mke2fs's or
    /// a kernel's), or of a canonical workload the engine runs from a fresh
    /// mkfs (--seed and --workload): where directories and files went,
    /// non-contiguous counts as e2fsck counts them, and a row per group.
    Layout {
        /// An image to read (opened read-only).
        #[arg(required_unless_present = "workload")]
        image: Option<PathBuf>,
        /// Run this workload instead: tree-copy, stream, small-files, fill, ageing.
        #[arg(long, conflicts_with = "image", requires = "seed")]
        workload: Option<String>,
        #[arg(long)]
        seed: Option<u64>,
        /// The workload's size (1 = a few seconds).
        #[arg(long, default_value_t = 1)]
        scale: u32,
        /// Mount options for the workload's filesystem.
        #[arg(long, default_value = "")]
        mount: String,
        /// Disk size for the workload (default: several flex groups at its block size).
        #[arg(long, value_parser = parse_size)]
        disk_size: Option<u64>,
        /// Also draw the groups as a map (SVG) into this file.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
    /// Hold the model to a real Linux kernel's ext4 (root for --kernel host).
    Oracle(crate::oracle::cli::OracleArgs),
    /// Inside the oracle's qemu guest: run the cases on the control disk.
    #[command(hide = true)]
    OracleGuest,
    /// The oracle's op runner: chroot into DIR, run the ops on stdin.
    #[command(hide = true)]
    OracleExec { dir: PathBuf },
    /// Benchmarks: engine vs e2fsprogs (mkfs, populate, fsck), lockstep throughput, and the LBS dd table.
    Bench {
        /// Which: e2fsprogs, lockstep, bitmap-checksum, dd, fsck (the 2009
        /// BLOCK_UNINIT experiment), or all.
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
        /// MiB each dd cell writes.
        #[arg(long, default_value_t = 32)]
        dd_mib: u64,
    },
}

/// The spec the arguments describe, validated once here.
fn spec_from(seed: u64, args: &RunArgs) -> Result<RunSpec, String> {
    let spec = RunSpec {
        seed,
        ops: args.ops,
        mount: parse_mount(&args.mount)?,
        profile: ProfileSpec::resolve(&args.profile)?,
        fsck_every: args.fsck_every,
        crash_every: args.crash_every,
        swarm: !args.no_swarm,
        think: !args.no_think,
        faults: args.faults.parse().map_err(|e| format!("faults: {e}"))?,
        tasks: args.tasks,
        disk_bytes: args.disk_size.unwrap_or(DISK_BYTES),
        mkfs: None,
        fragment: args.fragment,
    };
    let spec = match &args.mkfs {
        // The image's block size and journal become the model's.
        Some(text) => {
            let mkfs = MkfsArgs::parse(text).map_err(|e| e.to_string())?;
            RunSpec { mount: mkfs.model_mount(spec.mount).map_err(|e| e.to_string())?, mkfs: Some(mkfs), ..spec }
        }
        None => spec,
    };
    spec.validate()?;
    Ok(spec)
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

fn read_trace(path: &Path) -> Result<(Trace, Vec<usize>), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (t, lines) = Trace::parse_with_lines(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((t, lines))
}

/// A bar on a terminal, nothing elsewhere or under `--json`.
fn progress_bar(len: u64, what: &str, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    let style = ProgressStyle::with_template(&format!("{{bar:40}} {{pos}}/{{len}} {what} {{elapsed}} (eta {{eta}})")).unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

/// Shrinks a failure, writes its trace, and says how to reproduce it.
fn report_failure<F: TargetFactory>(factory: &F, r: &RunResult, dir: &Path) -> String {
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
                if trace.spec != r.spec {
                    out.push_str(&format!("  needs       {}\n", trace.spec.command()));
                }
                for step in &trace.steps {
                    out.push_str(&format!("    {step}\n"));
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
            let bar = progress_bar(spec.ops, "ops", args.json);
            let r = run_seed_with_progress(factory, &spec, &|n| bar.set_position(n))?;
            bar.finish_and_clear();
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
        Command::Swarm { seeds, shard, jobs, shrink, args } => swarm(factory, &seeds, shard.as_deref(), jobs, shrink, &args),
        Command::Replay { trace, json: as_json } => {
            let (t, lines) = read_trace(&trace)?;
            let r = run_steps(factory, &t.spec, &t.steps)?;
            if let Some(&(step, commands)) = r.unfired_faults.first() {
                let line = lines.get(step).copied().unwrap_or(0);
                return Err(format!("{}: line {line}: `{}` names a device command its op never issues (it issued {commands})", trace.display(), t.steps[step]));
            }
            if as_json {
                println!("{}", json(&r));
            } else {
                print!("{}", summary(&r));
            }
            Ok(r.failure.is_none())
        }
        Command::Export { seed, image, args } => {
            let spec = spec_from(seed, &args)?;
            let (r, mut target) = run_seed_keeping_target(factory, &spec)?;
            target.export_image(&image)?;
            if args.json {
                println!("{}", json_object([("run", json(&r)), ("image", json_str(&image.display().to_string()))]));
            } else {
                print!("{}", summary(&r));
                println!("  image       {}", image.display());
            }
            Ok(r.failure.is_none())
        }
        Command::Bench { what, runs, lockstep_ops, seeds, dd_mib } => bench(factory, &what, runs, lockstep_ops, seeds, dd_mib),
        Command::Layout { image, workload, seed, scale, mount, disk_size, svg } => {
            let (title, text, table) = match (image, workload, seed) {
                (Some(image), _, _) => {
                    let (text, table) = layout_text(&image)?;
                    (image.display().to_string(), text, table)
                }
                (None, Some(w), Some(seed)) => {
                    let mount: ext4_model::MountConfig = mount.parse().map_err(|e| format!("--mount: {e}"))?;
                    let disk_bytes = disk_size.unwrap_or_else(|| crate::layout_run::LayoutRun::default_disk_bytes(&mount));
                    let run = crate::layout_run::LayoutRun { workload: crate::workloads::Workload::parse(&w)?, seed, scale, mount, disk_bytes };
                    let (mut image, made) = run.run()?;
                    let (text, table) = crate::layout_run::report(&run.title(), &mut image, Some(&made))?;
                    (run.title(), text, table)
                }
                _ => return Err("layout needs an IMAGE, or --workload with --seed".into()),
            };
            print!("{text}");
            if let Some(path) = svg {
                let map = crate::layout_svg::render(&title, &table);
                std::fs::write(&path, map).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("map         {}", path.display());
            }
            Ok(true)
        }
        Command::Oracle(_) | Command::OracleGuest | Command::OracleExec { .. } => unreachable!("handled in main_with"),
        Command::Shrink { trace } => {
            let (t, _) = read_trace(&trace)?;
            let r = run_steps(factory, &t.spec, &t.steps)?;
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

fn swarm<F: TargetFactory + Sync>(factory: &F, seeds: &str, shard: Option<&str>, jobs: usize, shrink: usize, args: &RunArgs) -> Result<bool, String> {
    let (a, b) = parse_seed_range(seeds)?;
    let (si, sn) = shard.map(parse_shard).transpose()?.unwrap_or((0, 1));
    let specs: Vec<RunSpec> = (a..b).filter(|s| s % sn == si).map(|s| spec_from(s, args)).collect::<Result<_, _>>()?;
    let bar = progress_bar(specs.len() as u64, "seeds", args.json);
    let results = run_swarm(factory, &specs, jobs, &|n, _| bar.set_position(n as u64));
    bar.finish_and_clear();
    let (mut passed, mut ops, mut shrunk, mut crashes, mut holding, mut let_go) = (0, 0, 0, 0, 0, 0);
    let (mut enomem, mut short) = (0, 0);
    let (mut splits, mut sleeps) = (BTreeMap::<String, u64>::new(), BTreeMap::<String, u64>::new());
    let mut failed = Vec::new();
    let mut runs_json = Vec::new();
    for (seed, r) in &results {
        match r {
            Ok(r) => {
                ops += r.stats.ops;
                crashes += r.stats.crashes;
                holding += r.stats.lock_sleeps_holding;
                let_go += r.stats.stale_locks_let_go;
                enomem += r.stats.enomem;
                short += r.stats.short_by_memory;
                for (k, n) in crate::report::preemption_points(r) {
                    *splits.entry(k).or_default() += n;
                }
                for (k, n) in &r.stats.lock_sleeps_on {
                    *sleeps.entry(k.clone()).or_default() += n;
                }
                runs_json.push(json(r));
                match &r.failure {
                    None => passed += 1,
                    Some(f) => {
                        failed.push((*seed, f.to_string()));
                        if shrunk < shrink {
                            shrunk += 1;
                            eprint!("seed {seed}:\n{}", report_failure(factory, r, &args.trace_dir));
                        } else {
                            eprintln!("seed {seed}: not shrunk (--shrink {shrink}): {}", r.spec.command());
                        }
                    }
                }
            }
            Err(e) => failed.push((*seed, e.clone())),
        }
    }
    if args.json {
        let failed_json: Vec<String> = failed.iter().map(|(s, why)| json_object([("seed", s.to_string()), ("why", json_str(why))])).collect();
        let summary = json_object([
            ("seeds", json_str(&format!("{a}..{b}"))),
            ("shard", json_str(&format!("{si}/{sn}"))),
            ("runs", results.len().to_string()),
            ("passed", passed.to_string()),
            ("failed", failed.len().to_string()),
            ("ops", ops.to_string()),
            ("failures", format!("[{}]", failed_json.join(","))),
        ]);
        println!("{}", json_object([("runs", format!("[{}]", runs_json.join(","))), ("summary", summary)]));
    } else {
        println!("ext4sim swarm: seeds {a}..{b} shard {si}/{sn}: {} runs, {ops} ops", results.len());
        println!("  {:<8} {:>6}", "result", "seeds");
        println!("  {:<8} {:>6}", "pass", passed);
        println!("  {:<8} {:>6}", "fail", failed.len());
        let counts = crate::report::fmt_counts;
        println!("  crashes recovered {crashes}");
        if enomem + short > 0 {
            println!("  out of memory {enomem} ops answered ENOMEM, {short} writes came back short (no folio of the mapping's minimum order)");
        }
        println!("  split ops (preemption points) {} kinds: {}", splits.len(), counts(&splits));
        println!("  lock sleeps {}: {}; {holding} holding the locks taken before; {let_go} first halves gave back locks their op no longer takes", sleeps.values().sum::<u64>(), counts(&sleeps));
        for (seed, why) in &failed {
            println!("  seed {seed}: {}", why.lines().next().unwrap_or(""));
        }
    }
    Ok(failed.is_empty())
}

fn bench<F: TargetFactory>(factory: &F, what: &str, runs: usize, lockstep_ops: u64, seeds: u64, dd_mib: u64) -> Result<bool, String> {
    if !["all", "e2fsprogs", "lockstep", "bitmap-checksum", "dd", "fsck", "fiemap"].contains(&what) {
        return Err(format!("unknown benchmark `{what}`: use e2fsprogs, lockstep, bitmap-checksum, dd, fsck, fiemap or all"));
    }
    if what == "dd" && dd_mib == 0 {
        return Err("--dd-mib 0: each cell must write something".into());
    }
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
    if what == "all" || what == "bitmap-checksum" {
        println!("block bitmap checksum per allocation (host time; block size sets the bitmap's length)");
        crate::bench::bench_bitmap_checksum(200_000).iter().for_each(|r| println!("{}", r.line()));
    }
    if what == "all" || what == "dd" {
        ok &= bench_dd(dd_mib.max(1) << 20);
    }
    if what == "all" || what == "fsck" {
        ok &= bench_fsck();
    }
    if what == "all" || what == "fiemap" {
        ok &= bench_fiemap();
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
    Ok(ok)
}

/// `ext4sim layout IMAGE`: opened read-only, never replayed or changed.
fn layout_text(path: &std::path::Path) -> Result<(String, ext4_engine::layout::groups::GroupTable), String> {
    let dev = ext4_engine::device_file::FileDevice::open(path, false).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut image = ext4_engine::image::Image::open(dev).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::layout_run::report(&path.display().to_string(), &mut image, None)
}

/// The 2020 fiemap study (`sim/src/bench/fiemap.rs`).
fn bench_fiemap() -> bool {
    use crate::bench::fiemap::{engine, kernel, render, SIZES};
    println!("FIEMAP of a file with every other 4 KiB block punched out, cold and warm (host time; warm: median of 3); engine on a simulated hdd-7200 disk, kernel on a loop mount");
    println!("  (2020, 1.3 M extents, kernel 5.x: cold 31.7 s, warm 3.4 s with the extent status cache, over 15 minutes warm without it)");
    let scratch = crate::bench::default_work_dir().join("fiemap");
    let mut rows = Vec::new();
    for n in SIZES {
        match engine(n) {
            Ok(e) => {
                let k = kernel(n, &scratch);
                print!("{}", render(std::slice::from_ref(&(e.clone(), k.clone()))));
                rows.push((e, k));
            }
            Err(why) => {
                println!("  {n} extents: the engine's run failed: {why}");
                return false;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    if let [(small, _), .., (large, _)] = rows.as_slice() {
        let per = |s: &crate::bench::fiemap::Side| s.warm.as_secs_f64() / s.extents as f64 * 1e9;
        println!("  engine warm cost per extent: {:.0} ns at {} extents, {:.0} ns at {}", per(small), small.extents, per(large), large.extents);
    }
    true
}

/// The 2009 experiment (`sim/src/bench/fsck.rs`).
fn bench_fsck() -> bool {
    const SCALE: u32 = 40;
    const DISK: u64 = 80 << 30;
    println!("fsck after tree-copy (scale {SCALE}) on a {} GiB hdd-5400 disk, simulated time per e2fsck pass's reads", DISK >> 30);
    match crate::bench::fsck::bench_fsck(SCALE, DISK) {
        Ok(rows) => {
            rows.iter().for_each(|r| println!("{}", r.line()));
            let (skip, used) = (&rows[0], &rows[1]);
            let ratio = skip.pass2.ns as f64 / used.pass2.ns.max(1) as f64;
            println!(
                "  pass 2, skipping BLOCK_UNINIT groups / using them: {ratio:.2}x (2009, 80 GB: 21.16 s / 6.54 s = 3.24x); groups in use {} vs {} (2009: 14 more when using them)",
                skip.groups_in_use, used.groups_in_use
            );
            true
        }
        Err(e) => {
            println!("  failed: {e}");
            false
        }
    }
}

fn bench_dd(total: u64) -> bool {
    use crate::bench::dd::{render, table, Stream};
    use ext4_engine::format::bitmap::BitmapChecksum;
    let cost = crate::cpu_cost::CpuCost::default();
    println!("dd: one stream writes {} MiB per cell on nvme, page 4K; MB/s of simulated time (device + CPU cost model)", total >> 20);
    println!("  rows: LBS block sizes, then bigalloc (\"4K/NK c\": 4K blocks in N KiB clusters)");
    let mut ok = true;
    for (stream, what) in [(Stream::Buffered, "buffered write + fsync"), (Stream::Direct, "O_DIRECT write + fsync")] {
        for (how, whose) in [(BitmapChecksum::Recompute, "bitmap crc32c recomputed per change (the kernel's)"), (BitmapChecksum::Running, "bitmap crc32c kept running (the engine's)")] {
            match table(stream, how, total, &cost) {
                Ok(rows) => print!("{}", render(&format!("{what}, {whose}"), &rows)),
                Err(e) => {
                    println!("  {what}, {whose}: failed: {e}");
                    ok = false;
                }
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_prints_a_row_per_group_and_refuses_what_is_not_an_image() {
        let dir = std::env::temp_dir().join(format!("ext4sim-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("x.img");
        let size = 256 << 20;
        let mut dev = ext4_engine::device_file::FileDevice::create(&img, size).unwrap();
        let opts = ext4_engine::mkfs::MkfsOptions::new(size, *b"layout-cli-test!", [1; 16], crate::run::spec::SIM_EPOCH_SECS);
        ext4_engine::mkfs::mkfs(&mut dev, &opts).unwrap();
        drop(dev);
        let (text, table) = layout_text(&img).unwrap();
        assert_eq!(table.rows.len(), 2);
        let rows = text.lines().filter(|l| l.split_whitespace().next().is_some_and(|w| w.parse::<u32>().is_ok())).count();
        assert_eq!(rows, 2, "256 MiB of 4 KiB blocks is two groups:\n{text}");
        assert!(text.contains("non-contiguous (as e2fsck counts): 0 files, 0 directories"), "{text}");
        std::fs::write(&img, b"not an image").unwrap();
        assert!(layout_text(&img).is_err());
        assert!(layout_text(&dir.join("missing.img")).unwrap_err().contains("missing.img"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn nonsense_arguments_are_refused_before_any_run() {
        assert!(Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--tasks", "0"]).is_err());
        assert!(Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--tasks", "65"]).is_err());
        assert!(Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--tasks", "2"]).is_ok());
        assert!(Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--disk-size", "1000"]).is_err());
        let Command::Run { args, .. } = Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--faults", "cosmic-rays"]).unwrap().command else { unreachable!() };
        assert!(spec_from(1, &args).unwrap_err().contains("cosmic-rays"));
        let Command::Run { args, .. } = Cli::try_parse_from(["ext4sim", "run", "--seed", "1", "--mount", "data=journal,delalloc"]).unwrap().command else { unreachable!() };
        assert!(spec_from(1, &args).unwrap_err().contains("EINVAL"));
        assert!(parse_shard("3/3").is_err());
    }
}
