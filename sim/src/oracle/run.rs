//! One oracle run over many seeds: generate each seed's ops against the
//! model, make and check images, let the kernel answer, compare op by op,
//! check the images the kernel wrote, and shrink what fails.

use std::path::{Path, PathBuf};

use ext4_engine::device_file::FileDevice;
use ext4_testkit::e2fsprogs::{e2fsck_clean_allowing, is_guest_clock_skew_line, tool};
use ext4_engine::fs::Ext4;
use ext4_model::agree::agrees;
use ext4_model::durability::{data_ranges, merge_ranges, read_range, view_tree};
use ext4_model::vfs::VfsVersion;
use ext4_model::{FileSystem, Model, MountConfig, Op, OpKind, Outcome, Reply};

use super::error::{warn, OracleError};
use super::image::{check_not_filled, check_room, make_image, probe, ImageFacts, Needs, Tools};
use crate::mke2fs::MkfsArgs;
use super::syscalls::FLAGS_UNKNOWN;
use super::{kernel_mount_data, Case, CaseRun, Kernel};
use crate::failure::brief;
use crate::shrink::shrink_in_rounds;
use crate::run::spec::RunSpec;
use crate::trace::{Step, Trace};
use crate::workload::{Workload, WorkloadConfig};

pub use super::image::IMAGE_BYTES;

/// Most rounds one shrink may spend (a round is one batch of candidates).
pub const MAX_SHRINK_ROUNDS: usize = 60;

/// A spec's index among the reports, and its ops.
type Member = (usize, Vec<Op>);

/// Everything that fixes one oracle case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OracleSpec {
    pub seed: u64,
    pub ops: u64,
    pub mount: MountConfig,
    /// Extra `mke2fs` arguments; `mount` already has their block size and journal.
    pub mkfs: MkfsArgs,
    pub swarm: bool,
    /// Fixed ops (a replayed trace) instead of generated ones.
    pub fixed: Option<Vec<Op>>,
}

impl OracleSpec {
    pub fn command(&self, kernel: &str) -> String {
        let mut cmd = format!("ext4sim oracle --kernel {kernel} --seed {} --ops {}", self.seed, self.ops);
        let mount = self.mount.to_string();
        if !mount.is_empty() {
            cmd.push_str(&format!(" --mount {mount}"));
        }
        if !self.mkfs.opts.is_empty() {
            cmd.push_str(&format!(" --mkfs={}", shell_quote(&self.mkfs.to_string())));
        }
        if !self.swarm {
            cmd.push_str(" --no-swarm");
        }
        cmd
    }
}

/// `text` as one shell word, in single quotes. (`--mkfs=WORD`: a value that
/// starts with `-` parses whatever the command-line parser thinks of it.)
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// What the kernel did that the model does not allow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finding {
    Divergence { index: usize, op: Op, model: Outcome, kernel: Outcome, why: String },
    /// The kernel refused to mount or unmount an e2fsck-clean image.
    Mount(String),
    /// The image the kernel left fails e2fsck, or the engine reads it back
    /// differently from the model.
    Image(String),
}

impl Finding {
    /// Same kind of failure, for shrinking: the same op kind diverging, or
    /// the same stage failing.
    fn same_kind(&self, other: &Finding) -> bool {
        match (self, other) {
            (Finding::Divergence { op: a, .. }, Finding::Divergence { op: b, .. }) => a.kind() == b.kind(),
            (Finding::Mount(_), Finding::Mount(_)) | (Finding::Image(_), Finding::Image(_)) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Divergence { index, op, model, kernel, why } => write!(
                f,
                "op {index} {}: {why}\n    model:  {}\n    kernel: {}",
                op,
                brief(model),
                brief(kernel)
            ),
            Finding::Mount(e) => write!(f, "kernel mount: {e}"),
            Finding::Image(e) => write!(f, "kernel-written image: {e}"),
        }
    }
}

// One verdict per seed: size does not matter, plain fields read better.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Skipped(String),
    /// `trace` is where the shrunk trace went, or why it could not be written.
    Failed { finding: Finding, shrunk: Vec<Op>, trace: Result<PathBuf, String>, rounds: usize },
    Error(String),
}

#[derive(Clone, Debug)]
pub struct OracleReport {
    pub spec: OracleSpec,
    pub kernel: &'static str,
    pub release: String,
    pub ops: usize,
    /// Op kinds left out, with why.
    pub left_out: Vec<(OpKind, String)>,
    pub verdict: Verdict,
    /// The page allocator warnings the engine recorded running the same
    /// ops (no-fail metadata requests of order > 1), when it ran them.
    pub engine_alloc_warnings: Option<u64>,
}

/// The seed's ops, generated against the model, without `refused` kinds.
fn generate(spec: &OracleSpec, refused: &[OpKind]) -> Result<Vec<Op>, String> {
    if let Some(ops) = &spec.fixed {
        return Ok(ops.iter().filter(|op| !refused.contains(&op.kind())).cloned().collect());
    }
    let mut model = Model::new(&spec.mount).map_err(|e| format!("mount config refused: {e}"))?;
    let mut workload = Workload::new(spec.seed, WorkloadConfig { swarm: spec.swarm, ..WorkloadConfig::new(spec.mount.block_size) });
    let mut ops = Vec::new();
    let mut draws = 0u64;
    while (ops.len() as u64) < spec.ops && draws < spec.ops.saturating_mul(50) + 100 {
        draws += 1;
        let op = workload.next_op();
        if refused.contains(&op.kind()) {
            continue;
        }
        let outcome = model.apply(&op);
        workload.observe(&op, &outcome);
        ops.push(op);
    }
    Ok(ops)
}

/// Holds the kernel's answers to the model's, op by op.
#[allow(clippy::result_large_err)] // once per case
fn compare(mount: &MountConfig, vfs: VfsVersion, ops: &[Op], run: &CaseRun) -> Result<Model, Finding> {
    let mut model = Model::new(mount).map_err(|e| Finding::Mount(format!("model refused the config: {e}")))?.with_vfs(vfs);
    if let Some(e) = &run.error {
        if run.outcomes.is_empty() {
            return Err(Finding::Mount(e.clone()));
        }
    }
    for (index, op) in ops.iter().enumerate() {
        let expected = model.apply(op);
        let Some(actual) = run.outcomes.get(index) else {
            return Err(Finding::Mount(format!("the kernel answered {} of {} ops: {}", run.outcomes.len(), ops.len(), run.error.clone().unwrap_or_default())));
        };
        let mut actual = actual.clone();
        // A symlink cannot be opened for FS_IOC_GETFLAGS: its flags are unknown.
        if let (Ok(Reply::Stat(want)), Ok(Reply::Stat(got))) = (&expected, &mut actual) {
            if got.flags == FLAGS_UNKNOWN {
                got.flags = want.flags;
            }
        }
        if let Err(d) = agrees(&expected, &actual) {
            return Err(Finding::Divergence { index, op: op.clone(), model: expected, kernel: actual, why: d.0 });
        }
    }
    if let Some(e) = &run.error {
        return Err(Finding::Mount(e.clone()));
    }
    // The kernel's ops ran in a process that exited after the last one,
    // closing every descriptor slot (the last close of an orphan frees it)
    // before the image was unmounted and checked: the model does the same.
    model.close_all().map_err(|e| Finding::Image(format!("the model cannot close its descriptor slots as the process exits: {e}")))?;
    Ok(model)
}

/// e2fsck offers to rebuild extent trees the kernel left deeper or wider than
/// needed (ext4 does not shrink them); that is an optimisation, not an error.
fn is_extent_tree_offer(line: &str) -> bool {
    line.contains(" extent tree (at level ") && (line.ends_with("could be shorter.  Optimize? no") || line.ends_with("could be narrower.  Optimize? no"))
}

/// The image the kernel left: e2fsck-clean, and the engine reads every name
/// and every byte as the model has them.
#[allow(clippy::result_large_err)] // once per case
fn check_image(tools: &Tools, mount: &MountConfig, image: &Path, model: &mut Model) -> Result<(), Finding> {
    let benign = |l: &str| is_extent_tree_offer(l) || is_guest_clock_skew_line(l);
    e2fsck_clean_allowing(&tools.e2fsck, image, benign).map_err(|e| Finding::Image(format!("e2fsck -fn: {e}")))?;
    let dev = FileDevice::open(image, false).map_err(|e| Finding::Image(format!("open {}: {e}", image.display())))?;
    let ro = MountConfig { read_only: true, ..*mount };
    let mut engine = Ext4::mount(dev, &ro).map_err(|e| Finding::Image(format!("the engine cannot mount it: {e}")))?;
    let want = model.looking(|m| view_tree(m)).map_err(|e| Finding::Image(format!("model view: {e}")))?;
    let got = view_tree(&mut engine).map_err(|e| Finding::Image(format!("engine view: {e}")))?;
    let shape = |v: &ext4_model::durability::TreeView| -> Vec<(String, ext4_model::FileKind, u32, u32, Option<String>)> {
        v.nodes.iter().map(|(p, n)| (p.clone(), n.kind, n.mode, n.nlink, n.target.clone())).collect()
    };
    if shape(&want) != shape(&got) {
        let (w, g) = (shape(&want), shape(&got));
        let first = w.iter().zip(g.iter()).find(|(a, b)| a != b).map(|(a, b)| format!("model {a:?}, engine {b:?}"));
        return Err(Finding::Image(format!("the engine sees another tree: {}", first.unwrap_or_else(|| format!("{} names vs {}", w.len(), g.len())))));
    }
    for (path, (_, size)) in &want.files {
        let engine_size = got.files.get(path).map(|f| f.1);
        if engine_size != Some(*size) {
            return Err(Finding::Image(format!("{path}: model size {size}, engine {engine_size:?}")));
        }
        // Sparse files reach tens of GiB: compare where either side maps
        // data; everywhere else both read zeros by definition.
        let mut ranges = data_ranges(model, path, *size).map_err(|e| Finding::Image(format!("model fiemap {path}: {e}")))?;
        ranges.extend(data_ranges(&mut engine, path, *size).map_err(|e| Finding::Image(format!("engine fiemap {path}: {e}")))?);
        for range in merge_ranges(ranges) {
            let a = read_range(model, path, range.clone()).map_err(|e| Finding::Image(format!("model read {path}: {e}")))?;
            let b = read_range(&mut engine, path, range.clone()).map_err(|e| Finding::Image(format!("engine read {path}: {e}")))?;
            if a != b {
                let at = range.start + a.iter().zip(b.iter()).position(|(x, y)| x != y).unwrap_or(0) as u64;
                return Err(Finding::Image(format!("{path}: the engine reads other bytes from byte {at}")));
            }
        }
    }
    Ok(())
}

/// One configuration's cases: what they share, and what its fresh image
/// looks like.
struct Group<'a> {
    tools: &'a Tools,
    spec: &'a OracleSpec,
    /// The kernel's mount data.
    opts: String,
    facts: ImageFacts,
    scratch: &'a Path,
}

/// Images of one batch, removed however the batch ends.
struct Images(Vec<PathBuf>);

impl Drop for Images {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Makes the configuration's image once and reads it back: the cases run,
/// or are skipped with the reason (`Ok(Err)`).
fn prepare<'a>(kernel: &dyn Kernel, tools: &'a Tools, spec: &'a OracleSpec, needs: Needs, scratch: &'a Path) -> Result<Result<Group<'a>, String>, OracleError> {
    let opts = kernel_mount_data(&spec.mount).map_err(OracleError::Usage)?;
    let image = Images(vec![scratch.join(format!("probe-{}.img", kernel.name()))]);
    make_image(tools, &spec.mkfs, &spec.mount, spec.seed, &image.0[0])?;
    let facts = match probe(&image.0[0])? {
        Ok(facts) => facts,
        Err(why) => return Ok(Err(why)),
    };
    if let Some(why) = facts.refusal(&spec.mount, needs)? {
        return Ok(Err(why));
    }
    Ok(Ok(Group { tools, spec, opts, facts, scratch }))
}

/// Runs op lists under one configuration (each list with its own seed, for
/// the image's UUID): one image per list, handed to the kernel in batches.
/// With `stop_early`, stops after the first batch holding a failure
/// (shrinking). Returns each evaluated list's finding, in order.
fn evaluate(kernel: &mut dyn Kernel, g: &Group, lists: &[(u64, Vec<Op>)], stop_early: bool) -> Result<Vec<Option<Finding>>, OracleError> {
    let mut findings = Vec::new();
    for (b, batch) in lists.chunks(kernel.batch().max(1)).enumerate() {
        let need = batch.iter().map(|(_, ops)| g.facts.host_bytes_for(Needs::of(&g.spec.mount, ops))).sum();
        check_room(g.scratch, need, batch.len())?;
        let mut images = Images(Vec::new());
        let mut cases = Vec::new();
        for (i, (seed, ops)) in batch.iter().enumerate() {
            let image = g.scratch.join(format!("seed{seed}-{b}-{i}.img"));
            images.0.push(image.clone());
            make_image(g.tools, &g.spec.mkfs, &g.spec.mount, *seed, &image)?;
            cases.push(Case { image, kernel_opts: g.opts.clone(), read_only: g.spec.mount.read_only, ops: ops.clone() });
        }
        let runs = kernel.run(&cases)?;
        // A host disk that filled up fails the kernel's writes: not ext4's answers.
        check_not_filled(g.scratch)?;
        if runs.len() != cases.len() {
            return Err(OracleError::Kernel(format!("the {} kernel answered {} of {} cases", kernel.name(), runs.len(), cases.len())));
        }
        let mut any = false;
        // The kernel's own release, known once it ran (a qemu guest says it).
        let vfs = VfsVersion::of_release(&kernel.release());
        for (case, run) in cases.iter().zip(&runs) {
            let finding = match compare(&g.spec.mount, vfs, &case.ops, run) {
                Err(f) => Some(f),
                Ok(mut model) => check_image(g.tools, &g.spec.mount, &case.image, &mut model).err(),
            };
            any |= finding.is_some();
            findings.push(finding);
        }
        if any && stop_early {
            break;
        }
    }
    Ok(findings)
}

/// Runs every spec on `kernel`; failures are shrunk (if `shrink`) and
/// written as traces into `trace_dir`.
pub fn run_oracle(kernel: &mut dyn Kernel, specs: &[OracleSpec], scratch: &Path, trace_dir: &Path, shrink: bool) -> Vec<OracleReport> {
    let tools = match (tool("mke2fs"), tool("e2fsck")) {
        (Some(mke2fs), Some(e2fsck)) => Tools { mke2fs, e2fsck },
        _ => {
            let why = "e2fsprogs (mke2fs, e2fsck) is not installed".to_string();
            return specs.iter().map(|s| report(kernel, s, 0, Vec::new(), Verdict::Skipped(why.clone()))).collect();
        }
    };
    let left_out = kernel.refused_kinds();
    let refused: Vec<OpKind> = left_out.iter().map(|(k, _)| *k).collect();
    // Everything runnable is generated first, so a VM backend can batch all seeds.
    let mut reports = Vec::new();
    let mut runnable: Vec<(usize, Vec<Op>)> = Vec::new();
    for spec in specs {
        let skip = spec.mkfs.refusal().or_else(|| kernel.cannot_run(&spec.mount)).or_else(|| kernel_mount_data(&spec.mount).err());
        let (verdict, n, warnings) = if let Some(why) = skip {
            (Verdict::Skipped(why), 0, None)
        } else {
            match generate(spec, &refused) {
                Err(e) => (Verdict::Error(e), 0, None),
                Ok(ops) => {
                    let (n, warnings) = (ops.len(), engine_alloc_warnings(spec, &ops));
                    runnable.push((reports.len(), ops));
                    // Pass until the kernel says otherwise, below.
                    (Verdict::Pass, n, warnings)
                }
            }
        };
        reports.push(OracleReport { engine_alloc_warnings: warnings, ..report(kernel, spec, n, left_out.clone(), verdict) });
    }
    // Specs differ in mount options and mkfs, so each is its own evaluation;
    // a VM backend still batches same-config seeds below.
    let mut groups: Vec<(OracleSpec, Vec<Member>)> = Vec::new();
    for (i, ops) in runnable {
        let key = OracleSpec { seed: 0, ops: 0, fixed: None, ..reports[i].spec.clone() };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push((i, ops)),
            None => groups.push((key, vec![(i, ops)])),
        }
    }
    for (_, members) in groups {
        let first = reports[members[0].0].spec.clone();
        let needs = members.iter().fold(Needs::default(), |n, (_, ops)| n.max(Needs::of(&first.mount, ops)));
        let group = match prepare(kernel, &tools, &first, needs, scratch) {
            Ok(Ok(group)) => group,
            Ok(Err(why)) => {
                members.iter().for_each(|(i, _)| reports[*i].verdict = Verdict::Skipped(why.clone()));
                continue;
            }
            Err(e) => {
                members.iter().for_each(|(i, _)| reports[*i].verdict = Verdict::Error(e.to_string()));
                continue;
            }
        };
        let lists: Vec<(u64, Vec<Op>)> = members.iter().map(|(i, ops)| (reports[*i].spec.seed, ops.clone())).collect();
        let results = evaluate(kernel, &group, &lists, false);
        for (k, (i, ops)) in members.into_iter().enumerate() {
            reports[i].release = kernel.release();
            reports[i].verdict = match &results {
                Err(e) => Verdict::Error(e.to_string()),
                Ok(found) => match found.get(k).cloned().flatten() {
                    None => Verdict::Pass,
                    Some(finding) => shrink_finding(kernel, &group, reports[i].spec.seed, ops, finding, trace_dir, shrink),
                },
            };
        }
    }
    reports
}

fn report(kernel: &dyn Kernel, spec: &OracleSpec, ops: usize, left_out: Vec<(OpKind, String)>, verdict: Verdict) -> OracleReport {
    OracleReport { spec: spec.clone(), kernel: kernel.name(), release: kernel.release(), ops, left_out, verdict, engine_alloc_warnings: None }
}

/// The page allocator warnings the engine records running `ops` on a
/// fresh filesystem of the spec's mount (its own mkfs; None for mke2fs
/// layouts, which the engine does not make): the figure the kernel's log
/// is put beside. The answers are the kernel run's to judge, not this one's.
fn engine_alloc_warnings(spec: &OracleSpec, ops: &[Op]) -> Option<u64> {
    if !spec.mkfs.opts.is_empty() {
        return None;
    }
    let mut target = crate::engine_target::make_engine(&RunSpec::new(spec.seed, 0, spec.mount)).ok()?;
    let fs = target.engine_mut()?;
    for op in ops {
        let _ = fs.apply(op);
    }
    Some(fs.nofail_stats().warnings)
}

fn shrink_finding(kernel: &mut dyn Kernel, g: &Group, seed: u64, ops: Vec<Op>, finding: Finding, trace_dir: &Path, shrink: bool) -> Verdict {
    let (shrunk, rounds) = if shrink {
        let mut rounds_error = None;
        let shrunk = shrink_in_rounds(&ops, MAX_SHRINK_ROUNDS, |candidates| {
            let lists: Vec<(u64, Vec<Op>)> = candidates.iter().map(|c| (seed, c.clone())).collect();
            match evaluate(kernel, g, &lists, true) {
                Ok(found) => found.iter().position(|f| f.as_ref().is_some_and(|f| f.same_kind(&finding))),
                Err(e) => {
                    rounds_error = Some(e);
                    None
                }
            }
        });
        if let Some(e) = rounds_error {
            warn(format!("oracle: shrinking seed {seed} stopped early: {e}"));
        }
        shrunk
    } else {
        (ops, 0)
    };
    // Report the shrunk sequence's own finding: its index is the one to read.
    let finding = if rounds == 0 {
        finding
    } else {
        match evaluate(kernel, g, &[(seed, shrunk.clone())], true) {
            Ok(mut f) => f.pop().flatten().unwrap_or(finding),
            Err(_) => finding,
        }
    };
    let run_spec = RunSpec { fsck_every: 0, disk_bytes: IMAGE_BYTES, ..RunSpec::new(seed, shrunk.len() as u64, g.spec.mount) };
    let run_spec = RunSpec { mkfs: (!g.spec.mkfs.opts.is_empty()).then(|| g.spec.mkfs.clone()), ..run_spec };
    let trace = Trace { spec: run_spec, steps: shrunk.iter().cloned().map(Step::Op).collect() };
    let path = trace_dir.join(format!("ext4sim-oracle-{}-seed{seed}.trace", kernel.name()));
    let trace = std::fs::write(&path, trace.to_text()).map(|()| path.clone()).map_err(|e| format!("{}: {e}", path.display()));
    Verdict::Failed { finding, shrunk, trace, rounds }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_extent_tree_offers_pass_as_clean() {
        assert!(is_extent_tree_offer("Inode 12 extent tree (at level 1) could be shorter.  Optimize? no"));
        assert!(is_extent_tree_offer("Inode 7 extent tree (at level 2) could be narrower.  Optimize? no"));
        assert!(!is_extent_tree_offer("Inode 12 extent tree (at level 1) could be shorter.  Optimize? yes"));
        assert!(!is_extent_tree_offer("Inode 12, i_blocks is 16, should be 8.  Fix? no"));
    }

    #[test]
    fn rerun_commands_quote_mkfs_so_it_parses_back() {
        assert_eq!(shell_quote("-O ^flex_bg"), "'-O ^flex_bg'");
        assert_eq!(shell_quote("-L it's"), "'-L it'\\''s'");
        let spec = OracleSpec {
            seed: 3,
            ops: 20,
            mount: "bs=2k".parse().unwrap(),
            mkfs: MkfsArgs::parse("-b 2048 -O ^flex_bg").unwrap(),
            swarm: true,
            fixed: None,
        };
        assert_eq!(spec.command("host"), "ext4sim oracle --kernel host --seed 3 --ops 20 --mount bs=2048 --mkfs='-b 2048 -O ^flex_bg'");
    }
}
