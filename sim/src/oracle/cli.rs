//! `ext4sim oracle`: arguments, the per-seed lines and the exit status
//! (0 all passed, 1 a failure, 2 a usage error, 77 everything skipped).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use ext4_model::MountConfig;

use super::host::HostKernel;
use super::qemu::QemuKernel;
use super::{run_oracle, Kernel, OracleReport, OracleSpec, Verdict};
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
    /// Extra mke2fs arguments, e.g. "-O ^metadata_csum -I 256".
    #[arg(long, default_value = "")]
    pub mkfs: String,
    /// Replay this trace's ops instead of generating them.
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
    /// Where failing traces are written.
    #[arg(long, default_value = ".")]
    pub trace_dir: PathBuf,
    #[arg(long)]
    pub json: bool,
}

fn specs(args: &OracleArgs) -> Result<Vec<OracleSpec>, String> {
    let base = |seed: u64, mount: MountConfig, fixed| OracleSpec {
        seed,
        ops: args.ops,
        mount,
        mkfs: args.mkfs.split_whitespace().map(String::from).collect(),
        swarm: !args.no_swarm,
        fixed,
    };
    if let Some(path) = &args.trace {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let t = Trace::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let ops: Vec<_> = t.steps.iter().filter_map(|s| if let Step::Op(op) = s { Some(op.clone()) } else { None }).collect();
        let mut spec = base(t.spec.seed, t.spec.mount, Some(ops.clone()));
        spec.ops = ops.len() as u64;
        return Ok(vec![spec]);
    }
    let mount = parse_mount(&args.mount)?;
    match (&args.seed, &args.seeds) {
        (Some(seed), None) => Ok(vec![base(*seed, mount, None)]),
        (None, Some(range)) => {
            let (a, b) = parse_seed_range(range)?;
            Ok((a..b).map(|s| base(s, mount, None)).collect())
        }
        _ => Err("give --seed N, --seeds A..B or --trace FILE".into()),
    }
}

fn scratch_dir() -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("ext4sim-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

fn default_qemu_cache() -> PathBuf {
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
            if let Some(t) = trace {
                out.push_str(&format!("  replay      ext4sim oracle --kernel {} --trace {}", r.kernel, t.display()));
                if !r.spec.mkfs.is_empty() {
                    out.push_str(&format!(" --mkfs '{}'", r.spec.mkfs.join(" ")));
                }
                out.push('\n');
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
        "{{\"seed\":{},\"kernel\":{},\"release\":{},\"ops\":{},\"result\":{},\"why\":{},\"command\":{}}}",
        r.spec.seed,
        json_str(r.kernel),
        json_str(&r.release),
        r.ops,
        json_str(result),
        json_str(&why),
        json_str(&r.spec.command(r.kernel))
    )
}

pub fn oracle_main(args: OracleArgs) -> ExitCode {
    match run(&args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("ext4sim oracle: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &OracleArgs) -> Result<u8, String> {
    let specs = specs(args)?;
    let scratch = scratch_dir()?;
    let mut kernel: Box<dyn Kernel> = match args.kernel.as_str() {
        "host" => Box::new(HostKernel::new(&scratch)?),
        "qemu" => {
            let cache = args.qemu_cache.clone().unwrap_or_else(default_qemu_cache);
            match QemuKernel::new(&cache, &scratch) {
                Ok(k) => Box::new(k),
                Err(e) => {
                    println!("ext4sim oracle: SKIPPED: the qemu kernel is not available: {e}");
                    let _ = std::fs::remove_dir_all(&scratch);
                    return Ok(EXIT_SKIPPED);
                }
            }
        }
        other => return Err(format!("unknown kernel backend `{other}`: use host or qemu")),
    };
    if !args.json {
        let ops = specs.first().map_or(args.ops, |s| s.ops);
        let mount = specs.first().map(|s| s.mount.to_string()).unwrap_or_default();
        println!("ext4sim oracle: kernel {} {}, {} seed(s) x {ops} ops, mount \"{mount}\", mkfs \"{}\"", kernel.name(), kernel.release(), specs.len(), args.mkfs);
        for (kind, why) in kernel.refused_kinds() {
            println!("  left out   {kind:?}: {why}");
        }
    }
    let reports = run_oracle(kernel.as_mut(), &specs, &scratch, &args.trace_dir, !args.no_shrink);
    let _ = std::fs::remove_dir_all(&scratch);
    let count = |f: fn(&Verdict) -> bool| reports.iter().filter(|r| f(&r.verdict)).count();
    let (passed, skipped) = (count(|v| matches!(v, Verdict::Pass)), count(|v| matches!(v, Verdict::Skipped(_))));
    let failed = reports.len() - passed - skipped;
    for r in &reports {
        if args.json {
            println!("{}", json_line(r));
        } else if !matches!(r.verdict, Verdict::Pass) || reports.len() == 1 {
            println!("{}", line(r));
        }
    }
    if !args.json {
        let release = reports.first().map(|r| r.release.clone()).unwrap_or_default();
        println!("  kernel {} {release}: {passed} passed, {failed} failed, {skipped} skipped", kernel.name());
    }
    Ok(if failed > 0 {
        1
    } else if passed == 0 && skipped > 0 {
        EXIT_SKIPPED
    } else {
        0
    })
}
