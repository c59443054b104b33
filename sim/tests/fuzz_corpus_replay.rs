//! Replays every fuzz corpus file through the same body the fuzzer runs.

use std::path::{Path, PathBuf};

/// Target `target`'s committed corpus, each file with its bytes; a corpus
/// worth the name has at least eight.
fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let files: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .expect("corpus directory exists")
        .map(|entry| {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            (path, data)
        })
        .collect();
    assert!(files.len() >= 8, "{target} corpus has {} files", files.len());
    files
}

/// Replays the model_ops corpus and its regressions (the body panics on a
/// broken invariant or a state the crash envelope forbids), and holds it
/// to reaching the model's data paths: at least half its ops succeed,
/// writes, reads, truncates and fallocates among them, under four or more
/// block sizes, one config refused.
#[test]
fn model_ops_corpus_replays() {
    let mut reach = ext4_sim::fuzz_body::Reach::default();
    let (mut block_sizes, mut refused) = (std::collections::BTreeSet::new(), 0);
    for (_, data) in corpus("model_ops").into_iter().chain(regressions("model_ops")) {
        let run = ext4_sim::fuzz_body::model_ops(&data);
        reach.merge(&run.reach);
        match run.config {
            Some(c) => block_sizes.insert(c.block_size),
            None => {
                refused += 1;
                false
            }
        };
    }
    eprintln!("model_ops corpus: {reach}; block sizes {block_sizes:?}; {refused} configs refused");
    assert!(reach.ok_percent() >= 50.0, "{reach}");
    assert!(reach.writes > 0 && reach.reads > 0 && reach.truncates > 0 && reach.fallocates > 0, "{reach}");
    assert!(block_sizes.len() >= 4 && refused >= 1, "block sizes {block_sizes:?}, {refused} refused");
}

/// `cargo test -p ext4-sim --release --test fuzz_corpus_replay -- --ignored write_model_ops`.
#[test]
#[ignore = "writes fuzz/corpus/model_ops; run by hand"]
fn write_model_ops_seed_corpus() {
    write_corpus("model_ops", &ext4_sim::fuzz_body::model_ops_seed_corpus(40));
}

/// Writes a generated seed corpus as fuzz/corpus/TARGET/seed-NN, in place
/// of whatever the directory held: it holds what the generator makes.
fn write_corpus(target: &str, inputs: &[Vec<u8>]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap();
    }
    std::fs::create_dir_all(&dir).unwrap();
    for (i, input) in inputs.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:02}")), input).unwrap();
    }
}

/// Files under fuzz/regressions/TARGET (crashes a campaign found, kept
/// after the fix), dot files left out.
fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions").join(target);
    std::fs::read_dir(&dir)
        .map(|d| d.map(|e| e.unwrap().path()).filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'))).map(|p| (p.clone(), std::fs::read(&p).unwrap())).collect())
        .unwrap_or_default()
}

/// Replays the lockstep corpus and its regressions: every input runs in
/// lockstep to a clean end (the body panics on a divergence, a crash state
/// the model forbids, a lock held past its op or an unclean fsck), and
/// together they reach what the target is for: more than half their ops
/// succeed, writes, reads, truncates and fallocates among them, under every
/// mount of the header's set, with tasks interleaved and crashes.
#[test]
fn lockstep_corpus_replays() {
    let mut reach = ext4_sim::fuzz_body::Reach::default();
    let (mut mounts, mut tasks, mut crashes) = (std::collections::BTreeSet::new(), 0, 0);
    for (path, data) in corpus("lockstep").into_iter().chain(regressions("lockstep")) {
        let run = ext4_sim::fuzz_body::lockstep(&data).unwrap_or_else(|| panic!("{} is shorter than a header", path.display()));
        reach.add(&run);
        mounts.insert(run.spec.mount.to_string());
        tasks += u64::from(run.spec.tasks > 1);
        crashes += run.stats.crashes;
    }
    let n = ext4_sim::fuzz_body::LOCKSTEP_MOUNTS.len();
    assert!(reach.ok_percent() >= 50.0, "{reach}");
    assert!(reach.writes > 0 && reach.reads > 0 && reach.truncates > 0 && reach.fallocates > 0, "{reach}");
    assert!(mounts.len() == n && tasks >= 8 && crashes >= 8, "{} of {n} mounts, {tasks} inputs with tasks, {crashes} crashes", mounts.len());
    eprintln!("lockstep corpus: {reach}; {} mounts, {tasks} inputs with tasks, {crashes} crashes", mounts.len());
}

/// The inputs of the corpus directory EXT4SIM_FUZZ_CORPUS names (a
/// campaign's grown corpus), with its name.
fn campaign_corpus() -> (String, Vec<Vec<u8>>) {
    let dir = std::env::var("EXT4SIM_FUZZ_CORPUS").expect("EXT4SIM_FUZZ_CORPUS names a corpus directory");
    let inputs = std::fs::read_dir(&dir).expect("a corpus directory").map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    (dir, inputs)
}

/// What a campaign's grown lockstep corpus reaches, for its report (run
/// by hand): `EXT4SIM_FUZZ_CORPUS=DIR cargo test -p ext4-sim --release
/// --test fuzz_corpus_replay -- --ignored --nocapture lockstep_reach`.
#[test]
#[ignore = "reads a campaign's corpus named by EXT4SIM_FUZZ_CORPUS"]
fn lockstep_reach_of_a_campaign_corpus() {
    let (dir, inputs) = campaign_corpus();
    let mut reach = ext4_sim::fuzz_body::Reach::default();
    for run in inputs.iter().filter_map(|data| ext4_sim::fuzz_body::lockstep(data)) {
        reach.add(&run);
    }
    eprintln!("lockstep reach of {dir}: {reach}");
}

/// The same for a grown model_ops corpus (`... --ignored --nocapture model_ops_reach`).
#[test]
#[ignore = "reads a campaign's corpus named by EXT4SIM_FUZZ_CORPUS"]
fn model_ops_reach_of_a_campaign_corpus() {
    let (dir, inputs) = campaign_corpus();
    let mut reach = ext4_sim::fuzz_body::Reach::default();
    for data in &inputs {
        reach.merge(&ext4_sim::fuzz_body::model_ops(data).reach);
    }
    eprintln!("model_ops reach of {dir}: {reach}");
}

/// Writes lockstep's seed corpus (run by hand, then commit):
/// `cargo test -p ext4-sim --release --test fuzz_corpus_replay -- --ignored write_lockstep`.
#[test]
#[ignore = "writes fuzz/corpus/lockstep; run by hand"]
fn write_lockstep_seed_corpus() {
    write_corpus("lockstep", &ext4_sim::fuzz_body::lockstep_seed_corpus());
}

/// Replays the corpus and checks it reaches what the target is for:
/// switches that succeed, ops sleeping on a split switch's locks (the
/// barrier, and the switching inode's own), rivals split under their own
/// locks, crashes.
#[test]
fn journal_switch_corpus_replays() {
    let mut reach = ext4_sim::fuzz_body::SwitchReach::default();
    for (path, data) in corpus("journal_switch").into_iter().chain(regressions("journal_switch")) {
        let run = ext4_sim::fuzz_body::journal_switch(&data);
        reach.add(&run.unwrap_or_else(|| panic!("{} decodes to a trace the runner refuses", path.display())));
    }
    let r = &reach;
    assert!(r.switches >= 50 && r.sleeps >= 2 && r.crashes >= 10, "corpus reaches {} switches, {} lock sleeps, {} crashes", r.switches, r.sleeps, r.crashes);
    // Its rivals split where they sleep under their inode's locks, and
    // some meet a held lock after taking others, sleeping holding them.
    assert!(r.split_kinds.len() >= 9 && r.holding >= 3, "{} kinds split ({:?}), {} slept holding locks", r.split_kinds.len(), r.split_kinds, r.holding);
    assert!(r.flusher >= 5, "the flusher slept on {} write-backs", r.flusher);
    // Writes in flight go on folio by folio with other tasks' steps between.
    assert!(r.parts >= 5, "{} write parts", r.parts);
    // Reads and seeks of the switching file sleep on its own locks.
    for lock in ["invalidate_lock", "i_rwsem"] {
        assert!(r.sleeps_on.get(lock).is_some_and(|n| *n >= 2), "sleeps by lock: {:?}", r.sleeps_on);
    }
    eprintln!("journal_switch corpus: {r:?}");
}

/// Writes journal_switch's seed corpus (run by hand, then commit):
/// `cargo test -p ext4-sim --release --test fuzz_corpus_replay -- --ignored write_journal_switch`.
#[test]
#[ignore = "writes fuzz/corpus/journal_switch; run by hand"]
fn write_journal_switch_seed_corpus() {
    write_corpus("journal_switch", &ext4_sim::fuzz_body::journal_switch_seed_corpus(24));
}

/// Replays the corpus and checks it reaches what the target is for:
/// block sizes above the page size, fragmented memory, no-fail requests
/// that warn, retry and compact, kswapd passes. (Metadata is small next to
/// a bound of 256 folios, so reclaiming it is left to the engine's tests
/// with smaller allocators: `metadata` is reported, not required.)
#[test]
fn folio_nofail_corpus_replays() {
    let (mut pairs, mut fragmented) = (std::collections::BTreeSet::new(), 0);
    let (mut warnings, mut retries, mut compactions, mut metadata, mut kswapd) = (0, 0, 0, 0, 0);
    for (path, data) in corpus("folio_nofail").into_iter().chain(regressions("folio_nofail")) {
        let run = ext4_sim::fuzz_body::folio_nofail(&data).unwrap_or_else(|| panic!("{} decodes to nothing runnable", path.display()));
        pairs.insert(run.mount.split(',').take(2).collect::<Vec<_>>().join(","));
        fragmented += u64::from(run.fragment > 0);
        let s = run.stats;
        (warnings, retries, compactions) = (warnings + s.warnings, retries + s.retries, compactions + s.compactions);
        metadata += run.metadata_reclaimed;
        kswapd += run.kswapd_passes;
    }
    let above = pairs.iter().filter(|p| {
        let size = |k: &str| p.split(',').find_map(|kv| kv.strip_prefix(k)).and_then(|v| v.parse::<u32>().ok()).unwrap_or(0);
        size("bs=") > size("ps=")
    });
    assert!(pairs.len() >= 10 && above.count() >= 3 && fragmented >= 8, "{} pairs ({pairs:?}), {fragmented} fragmented", pairs.len());
    assert!(warnings > 0 && retries > 0 && compactions > 0 && kswapd > 0, "warnings {warnings}, retries {retries}, compactions {compactions}, metadata reclaim {metadata}, kswapd {kswapd}");
}

/// Writes the seed corpus the generator makes (run by hand, then commit):
/// `cargo test -p ext4-sim --release --test fuzz_corpus_replay -- --ignored`.
#[test]
#[ignore = "writes fuzz/corpus/folio_nofail; run by hand"]
fn write_folio_nofail_seed_corpus() {
    write_corpus("folio_nofail", &ext4_sim::fuzz_body::folio_nofail_seed_corpus(40));
}

/// Replays the group_spread corpus: every input runs (its rules and the
/// final fsck hold, or the body panics), and together they reach what the
/// target is for: many geometries, flex and no flex, Orlov's rule and the
/// parent-flex rule both decided often, and a disk filled now and then.
#[test]
fn group_spread_corpus_replays() {
    let (mut geometries, mut flexes) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    let (mut orlov, mut home, mut enospc) = (0, 0, 0);
    for (path, data) in corpus("group_spread").into_iter().chain(regressions("group_spread")) {
        let run = ext4_sim::fuzz_body::group_spread(&data).unwrap_or_else(|| panic!("{} decodes to nothing runnable", path.display()));
        geometries.insert((run.mount.clone(), run.groups));
        flexes.insert(run.flex_size);
        (orlov, home, enospc) = (orlov + run.orlov_checked, home + run.home_checked, enospc + run.enospc);
    }
    assert!(geometries.len() >= 20 && flexes.len() >= 3, "{} geometries, flex sizes {flexes:?}", geometries.len());
    assert!(orlov >= 20 && home >= 20, "Orlov's rule decided {orlov} directories, the parent's flex {home} files");
    let with = |knob: &str| geometries.iter().filter(|(m, _)| m.contains(knob)).count();
    assert!(with("mb_stream_req=") >= 5 && with("mb_group_prealloc=0") >= 3, "mballoc's knobs: {} runs set mb_stream_req, {} turn locality groups off", with("mb_stream_req="), with("mb_group_prealloc=0"));
    eprintln!("group_spread corpus: {} geometries, flex sizes {flexes:?}, {orlov} Orlov checks, {home} parent-flex checks, {enospc} ENOSPC", geometries.len());
}

/// Writes group_spread's seed corpus (run by hand, then commit):
/// `cargo test -p ext4-sim --release --test fuzz_corpus_replay -- --ignored`.
#[test]
#[ignore = "writes fuzz/corpus/group_spread; run by hand"]
fn write_group_spread_seed_corpus() {
    write_corpus("group_spread", &ext4_sim::fuzz_body::group_spread_seed_corpus(40));
}

/// Each mount_image template unchanged mounts (the crashed ones through
/// journal recovery) and reads back every file: the target starts from
/// images that are right, so what breaks is the mutation's doing.
#[test]
fn mount_image_templates_mount_and_read_whole() {
    for t in 0..4u8 {
        let run = ext4_sim::fuzz_body::mount_image(&[t, 1, 0]).expect("a template with no mutation");
        assert!(run.mounted && run.refused.is_none(), "{run:?}");
        assert!(run.files_read > ext4_sim::fuzz_body::TEMPLATE_NAMES, "{} read {} files", run.template, run.files_read);
    }
}

/// Replays the mount_image corpus and its regressions: no input panics,
/// and together they mutate every region, some images still mount and
/// some are refused with a typed error, raw images mount and read, a
/// logged copy is mutated with its tag checksum resealed, and every
/// template is among them.
#[test]
fn mount_image_corpus_replays() {
    let mut regions = std::collections::BTreeSet::new();
    let (mut mounted, mut refused, mut raw, mut copies) = (0, 0, 0, 0);
    let mut templates = std::collections::BTreeSet::new();
    for (path, data) in corpus("mount_image").into_iter().chain(regressions("mount_image")) {
        let run = ext4_sim::fuzz_body::mount_image(&data).unwrap_or_else(|| panic!("{} decodes to nothing", path.display()));
        copies += run.copies_resealed;
        templates.insert(run.template);
        raw += usize::from(run.template == "raw" && run.mounted && run.files_read > 0);
        regions.extend(run.regions.iter().map(|r| format!("{r:?}")));
        if run.mounted && !run.regions.is_empty() {
            mounted += 1;
        }
        if run.refused.is_some() {
            refused += 1;
        }
    }
    assert!(regions.len() >= 6, "regions mutated: {regions:?}");
    assert!(mounted >= 20 && refused >= 8 && raw >= 2, "{mounted} mutated images mounted, {refused} refused, {raw} raw images mounted and read");
    assert!(copies >= 1, "no input mutates a logged copy and reseals its tag");
    assert_eq!(templates.len(), 5, "every template and raw images: {templates:?}");
    eprintln!("mount_image corpus: regions {regions:?}, {mounted} mutated images mounted, {refused} refused, {raw} raw images read, {copies} logged copies resealed");
}

/// Writes mount_image's seed corpus (run by hand, then commit):
/// `cargo test -p ext4-sim --release --test fuzz_corpus_replay -- --ignored write_mount_image`.
#[test]
#[ignore = "writes fuzz/corpus/mount_image; run by hand"]
fn write_mount_image_seed_corpus() {
    write_corpus("mount_image", &ext4_sim::fuzz_body::mount_image_seed_corpus(48));
}

/// A failing input's printed trace is `RunResult::replayed_trace`: it
/// must replay as the input ran. Inputs whose faults aim at commands their
/// op never issues (a dozen in the corpus) are the case: the trace leaves
/// those out, since `ext4sim replay` refuses them, and answers alike.
#[test]
fn journal_switch_traces_replay_without_their_unfired_faults() {
    use ext4_sim::run::run_steps;
    let engine = ext4_sim::engine_target::EngineFactory;
    let mut had_unfired = 0;
    for (path, data) in corpus("journal_switch").into_iter().chain(regressions("journal_switch")) {
        let input = ext4_sim::fuzz_body::journal_switch_trace(&data).expect("an input long enough");
        let run = run_steps(&engine, &input.spec, &input.steps).unwrap();
        had_unfired += usize::from(!run.unfired_faults.is_empty());
        let text = run.replayed_trace(&input.steps).to_text();
        let trace = ext4_sim::trace::Trace::parse(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()));
        let dropped = input.steps.len() - trace.steps.len();
        assert_eq!(dropped, run.unfired_faults.len(), "{}: only unfired faults go", path.display());
        let again = run_steps(&engine, &trace.spec, &trace.steps).unwrap();
        assert_eq!(again.unfired_faults, vec![], "{}", path.display());
        assert_eq!((again.trace_hash, again.stats.ops), (run.trace_hash, run.stats.ops), "{}: the trace answers differently", path.display());
    }
    assert!(had_unfired >= 4, "{had_unfired} inputs with unfired faults: the test needs some");
}
