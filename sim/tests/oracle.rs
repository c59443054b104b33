//! The oracle's whole pipeline (mke2fs, e2fsck before and after, op-by-op
//! comparison, engine read-back, shrinking, traces), run against a stand-in
//! kernel: the engine itself mounted on the mke2fs image. A planted wrong
//! answer must be caught and shrunk; with no plant, every seed passes. The
//! real host kernel runs too when this is root with loop devices.

mod common;

use std::path::Path;

use ext4_engine::device_file::FileDevice;
use ext4_testkit::e2fsprogs::tool;
use ext4_engine::fs::Ext4;
use ext4_model::{FileSystem, MountConfig, Op, OpKind, Outcome, Reply};
use ext4_sim::oracle::host::HostKernel;
use ext4_sim::oracle::{run_oracle, Case, CaseRun, Finding, Kernel, MkfsArgs, OracleError, OracleSpec, Verdict};

use common::Scratch;


/// The engine playing the kernel; optionally lying about the first byte of
/// every non-empty read.
struct EngineAsKernel {
    mount: MountConfig,
    lie_about_reads: bool,
}

impl Kernel for EngineAsKernel {
    fn name(&self) -> &'static str {
        "engine"
    }
    fn release(&self) -> String {
        "engine-stand-in".into()
    }
    fn cannot_run(&self, _config: &MountConfig) -> Option<String> {
        None
    }
    fn refused_kinds(&self) -> Vec<(OpKind, String)> {
        Vec::new()
    }
    fn run(&mut self, cases: &[Case]) -> Result<Vec<CaseRun>, OracleError> {
        cases.iter().map(|c| self.run_one(&c.image, &c.ops).map_err(OracleError::Kernel)).collect()
    }
}

impl EngineAsKernel {
    fn run_one(&self, image: &Path, ops: &[Op]) -> Result<CaseRun, String> {
        let dev = FileDevice::open(image, true).map_err(|e| e.to_string())?;
        let mut fs = Ext4::mount(dev, &self.mount).map_err(|e| e.to_string())?;
        let outcomes: Vec<Outcome> = ops
            .iter()
            .map(|op| match fs.apply(op) {
                Ok(Reply::Data(mut d)) if self.lie_about_reads && !d.is_empty() => {
                    d[0] ^= 0xff;
                    Ok(Reply::Data(d))
                }
                other => other,
            })
            .collect();
        fs.unmount().map_err(|e| e.to_string())?;
        Ok(CaseRun { outcomes, error: None })
    }
}

fn specs(seeds: std::ops::Range<u64>, mount: MountConfig) -> Vec<OracleSpec> {
    specs_with(seeds, mount, "")
}

/// Specs with mke2fs arguments, the model's config taken from them as the CLI does.
fn specs_with(seeds: std::ops::Range<u64>, mount: MountConfig, mkfs: &str) -> Vec<OracleSpec> {
    let mkfs = MkfsArgs::parse(mkfs).unwrap();
    let mount = mkfs.model_mount(mount).unwrap();
    seeds.map(|seed| OracleSpec { seed, ops: 120, mount, mkfs: mkfs.clone(), swarm: true, fixed: None }).collect()
}

fn have_e2fsprogs() -> bool {
    if tool("mke2fs").is_none() || tool("e2fsck").is_none() {
        println!("SKIPPED: e2fsprogs not installed");
        return false;
    }
    true
}

#[test]
fn the_pipeline_passes_an_honest_kernel_on_mke2fs_images() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = Scratch::new("oracle-honest");
    let mount = MountConfig::default();
    let mut kernel = EngineAsKernel { mount, lie_about_reads: false };
    let reports = run_oracle(&mut kernel, &specs(1..7, mount), &dir.0, &dir.0, true);
    assert_eq!(reports.len(), 6);
    for r in &reports {
        assert_eq!(r.verdict, Verdict::Pass, "seed {}", r.spec.seed);
        assert_eq!(r.release, "engine-stand-in");
        assert!(r.ops >= 100, "seed {}: {} ops", r.spec.seed, r.ops);
    }
}

#[test]
fn a_wrong_answer_is_caught_shrunk_and_written_as_a_replayable_trace() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = Scratch::new("oracle-liar");
    let mount = MountConfig::default();
    let mut kernel = EngineAsKernel { mount, lie_about_reads: true };
    let reports = run_oracle(&mut kernel, &specs(1..5, mount), &dir.0, &dir.0, true);
    let failed: Vec<_> = reports.iter().filter(|r| matches!(r.verdict, Verdict::Failed { .. })).collect();
    assert!(!failed.is_empty(), "a lying kernel must be caught");
    for r in failed {
        let Verdict::Failed { finding, shrunk, trace, .. } = &r.verdict else { unreachable!() };
        let Finding::Divergence { op, .. } = finding else { panic!("seed {}: {finding}", r.spec.seed) };
        // Create, write, read (or create, write, open, pread: the liar
        // lies through a descriptor slot too), and at most three more: the
        // mkdirs of the file's directory chain (dropping ops cannot shorten
        // a path), or a create and a rename that carried the data to the
        // read's name (the oracle's shrinker does not merge names).
        let core = match op.kind() {
            OpKind::Read => 3,
            OpKind::ReadFd => 4,
            other => panic!("seed {}: {other:?} diverged, not a read", r.spec.seed),
        };
        assert!(shrunk.len() <= core + 3, "seed {}: shrunk to {} ops: {shrunk:?}", r.spec.seed, shrunk.len());
        assert_eq!(shrunk.last().map(|o| o.kind()), Some(op.kind()));
        // The trace replays to the same finding.
        let text = std::fs::read_to_string(trace.as_ref().expect("trace written")).unwrap();
        assert!(!text.contains("\nmkfs "), "no mke2fs arguments, no mkfs line");
        let t = ext4_sim::trace::Trace::parse(&text).unwrap();
        let ops: Vec<Op> = t.steps.iter().filter_map(|s| if let ext4_sim::trace::Step::Op(o) = s { Some(o.clone()) } else { None }).collect();
        assert_eq!(&ops, shrunk);
        let replay = OracleSpec { fixed: Some(ops), ..r.spec.clone() };
        let again = run_oracle(&mut kernel, &[replay], &dir.0, &dir.0, false);
        assert!(matches!(again[0].verdict, Verdict::Failed { .. }), "replay must fail again");
    }
}

/// The host kernel behind a scratch directory, or None (said why) when this
/// machine cannot loop-mount ext4.
fn host_kernel(name: &str) -> Option<(Scratch, HostKernel)> {
    if !have_e2fsprogs() {
        return None;
    }
    let dir = Scratch::new(name);
    let kernel = HostKernel::with_runner(&dir.0, Path::new(env!("CARGO_BIN_EXE_ext4sim")));
    if let Some(why) = kernel.cannot_run(&MountConfig::default()) {
        println!("SKIPPED: {why}");
        return None;
    }
    Some((dir, kernel))
}


#[test]
fn the_host_kernel_still_agrees_on_the_hand_written_traces() {
    let Some((dir, mut kernel)) = host_kernel("oracle-host-verified") else { return };
    for text in common::KERNEL_VERIFIED {
        let t = ext4_sim::trace::Trace::parse(text).unwrap();
        let ops: Vec<Op> = t.steps.iter().filter_map(|s| s.op().cloned()).collect();
        let spec = OracleSpec { fixed: Some(ops), ..specs(1..2, t.spec.mount).remove(0) };
        let r = run_oracle(&mut kernel, &[spec], &dir.0, &dir.0, false).remove(0);
        match &r.verdict {
            Verdict::Pass => {}
            Verdict::Error(e) if e.contains("losetup") => println!("SKIPPED: {e}"),
            other => panic!("{other:?}\n{text}"),
        }
    }
}

#[test]
fn the_host_kernel_agrees_with_the_model() {
    let Some((dir, mut kernel)) = host_kernel("oracle-host") else { return };
    let mount = MountConfig::default();
    let reports = run_oracle(&mut kernel, &specs(1..6, mount), &dir.0, &dir.0, true);
    for r in &reports {
        match &r.verdict {
            Verdict::Pass => {}
            Verdict::Error(e) if e.contains("losetup") => {
                println!("SKIPPED: {e}");
                return;
            }
            other => panic!("seed {} on {}: {other:?}", r.spec.seed, r.release),
        }
    }
}

#[test]
fn mkfs_arguments_shape_the_image_and_the_model_and_reach_the_trace() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = Scratch::new("oracle-mkfs");
    // The model and the stand-in kernel both take 2 KiB blocks from -b.
    let specs = specs_with(1..4, MountConfig::default(), "-b 2048 -O ^flex_bg,^metadata_csum,^has_journal -N 8192 -I 128 -m 0");
    assert_eq!((specs[0].mount.block_size, specs[0].mount.has_journal), (2048, false));
    let mut kernel = EngineAsKernel { mount: specs[0].mount, lie_about_reads: false };
    for r in run_oracle(&mut kernel, &specs, &dir.0, &dir.0, false) {
        assert_eq!(r.verdict, Verdict::Pass, "seed {}", r.spec.seed);
    }
    let mut liar = EngineAsKernel { mount: specs[0].mount, lie_about_reads: true };
    let reports = run_oracle(&mut liar, &specs, &dir.0, &dir.0, false);
    let Some(Verdict::Failed { trace: Ok(path), .. }) = reports.iter().map(|r| &r.verdict).find(|v| matches!(v, Verdict::Failed { .. })) else { panic!("a lying kernel must be caught") };
    let trace = ext4_sim::trace::Trace::parse(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(trace.spec.mkfs.map(|m| m.to_string()).as_deref(), Some("-b 2048 -O ^flex_bg,^metadata_csum,^has_journal -N 8192 -I 128 -m 0"));
    assert_eq!(trace.spec.mount, specs[0].mount);
}

#[test]
fn images_the_model_cannot_follow_are_skipped_with_the_reason() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = Scratch::new("oracle-mkfs-refused");
    let mount = MountConfig::default();
    let mut kernel = EngineAsKernel { mount, lie_about_reads: false };
    for (mkfs, why) in [("-O bigalloc -b 1024", "1 KiB blocks"), ("-O ^extent", "block-mapped"), ("-O inline_data", "inline"), ("-O quota", "quota"), ("-E encoding=utf8", "casefold")] {
        let reports = run_oracle(&mut kernel, &specs_with(1..3, mount, mkfs), &dir.0, &dir.0, false);
        for r in reports {
            let Verdict::Skipped(reason) = &r.verdict else { panic!("{mkfs}: {:?}", r.verdict) };
            assert!(reason.contains(why), "{mkfs}: {reason}");
        }
    }
}

#[test]
fn a_failing_mke2fs_and_an_unwritable_scratch_dir_are_errors_that_say_why() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = Scratch::new("oracle-mke2fs-fails");
    let mount = MountConfig::default();
    let mut kernel = EngineAsKernel { mount, lie_about_reads: false };
    // mke2fs refuses inodes larger than blocks, and says so on stdout.
    let reports = run_oracle(&mut kernel, &specs_with(1..2, mount, "-I 8192"), &dir.0, &dir.0, false);
    let Verdict::Error(e) = &reports[0].verdict else { panic!("{:?}", reports[0].verdict) };
    assert!(e.contains("mke2fs") && e.contains("inode size"), "{e}");
    // /proc takes no image files: an error naming the cause, never a panic.
    let reports = run_oracle(&mut kernel, &specs(1..2, mount), Path::new("/proc/ext4sim-oracle-no-such-dir"), &dir.0, false);
    let Verdict::Error(e) = &reports[0].verdict else { panic!("{:?}", reports[0].verdict) };
    assert!(e.contains("/proc/ext4sim-oracle-no-such-dir"), "{e}");
}

#[test]
fn the_cli_reads_mkfs_as_the_readme_writes_it_and_exits_with_the_reason() {
    let exe = env!("CARGO_BIN_EXE_ext4sim");
    let run = |args: &[&str], tmp: &str| std::process::Command::new(exe).arg("oracle").args(args).env("TMPDIR", tmp).output().unwrap();
    // `--mkfs "-O ^flex_bg"`: the value is not taken for a flag.
    let out = run(&["--kernel", "none", "--seed", "1", "--mkfs", "-O ^flex_bg"], "/tmp");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown kernel backend `none`"));
    let out = run(&["--seed", "1", "--mkfs", "-O frobnicate"], "/tmp");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("`frobnicate` is not a feature"));
    // A scratch directory that cannot be made: exit 1 with the reason, not a panic (101) or a skip (77).
    let out = run(&["--seed", "1"], "/proc/no-such-dir");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ERROR: create the scratch directory /proc/no-such-dir/ext4sim-oracle-"));
}
