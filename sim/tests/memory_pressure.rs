//! The engine under memory pressure: metadata's no-fail allocations share
//! the bound with data folios, the reclaimer task runs between tasks' ops,
//! and runs stay deterministic and replay exactly.

use ext4_model::MountConfig;
use ext4_sim::engine_target::EngineFactory;
use ext4_sim::figure::Figure;
use ext4_sim::run::{run_seed, run_steps, RunResult, RunSpec};
use ext4_sim::trace::{Step, Trace};

fn spec(seed: u64, mount: &str) -> RunSpec {
    RunSpec { tasks: 3, crash_every: 150, ..RunSpec::new(seed, 1200, mount.parse::<MountConfig>().unwrap()) }
}

/// A count from a group line of the run's report.
fn figure(r: &RunResult, line: &str, name: &str) -> u64 {
    let Some((_, Figure::Group(items))) = r.report.iter().find(|(l, _)| l == line) else { panic!("no `{line}` line in the report") };
    match items.iter().find(|(n, _)| n == name) {
        Some((_, Figure::Count(n))) => *n,
        other => panic!("`{line}` has no count `{name}`: {other:?}"),
    }
}

#[test]
fn runs_under_memory_pressure_reclaim_between_ops_and_replay_exactly() {
    for (seed, mount, warns) in [(21, "page_cache_mb=1", false), (36, "bs=64k,ps=4k,page_cache_mb=16", true)] {
        let s = spec(seed, mount);
        let a = run_seed(&EngineFactory, &s).unwrap();
        assert!(a.failure.is_none(), "{mount}: {}", a.failure.unwrap());
        let reclaims = a.steps.iter().filter(|st| matches!(st, Step::Reclaim)).count() as u64;
        assert!(reclaims > 0, "{mount}: the reclaimer task never ran");
        if !warns {
            assert!(figure(&a, "reclaimer task", "passes") > 0, "{mount}: passes since the last crash");
        }
        // Passes since the last crash's remount only: at most the steps.
        let passes = figure(&a, "reclaimer task", "passes");
        assert!(passes <= reclaims, "{mount}: {passes} passes, {reclaims} steps");
        let requests = figure(&a, "no-fail allocations", "requests");
        let warnings = figure(&a, "no-fail allocations", "order>1 warnings");
        assert!(requests > 0, "{mount}");
        assert_eq!(warnings > 0, warns, "{mount}: {warnings} warnings of {requests}");
        assert_eq!(warnings == requests, warns, "{mount}: at bs > ps every metadata folio is order 4");
        let replay = run_steps(&EngineFactory, &s, &a.steps).unwrap();
        assert!(replay.failure.is_none(), "{mount}: {}", replay.failure.unwrap());
        assert_eq!((replay.trace_hash, replay.image_hash, &replay.steps), (a.trace_hash, a.image_hash, &a.steps), "{mount}");
        // Without the reclaimer's steps the same ops still pass: it frees
        // memory and changes no file.
        let without: Vec<Step> = a.steps.iter().filter(|st| !matches!(st, Step::Reclaim)).cloned().collect();
        let bare = run_steps(&EngineFactory, &s, &without).unwrap();
        assert!(bare.failure.is_none(), "{mount}: {}", bare.failure.unwrap());
        assert_eq!(figure(&bare, "reclaimer task", "passes"), 0, "{mount}: a replay draws no reclaim");
    }
}

#[test]
fn a_bound_too_small_for_metadata_is_refused_with_the_reason() {
    let s = RunSpec::new(1, 10, "bs=64k,ps=4k,page_cache_mb=8".parse().unwrap());
    let Err(err) = run_seed(&EngineFactory, &s) else { panic!("a bound too small must be refused") };
    assert!(err.contains("page_cache_mb=8") && err.contains("16 MiB") && err.contains("metadata"), "{err}");
}

/// Swarm seed 87 (`--fragment 80`, page_cache_mb=2), shrunk (the
/// fragmentation went with shrinking: the bound alone does it): delalloc
/// writes fill memory with dirty data, a pause makes the next op's timer
/// commit, and the commit backed the metadata earlier ops read with
/// clean-only reclaim: nothing clean was left, a livelock. A closing
/// transaction now makes room (writing data back) before it locks.
#[test]
fn regression_a_commit_makes_room_before_it_can_only_drop_clean_folios() {
    let trace = Trace::parse(TRACE_SEED_87).unwrap();
    let r = run_steps(&EngineFactory, &trace.spec, &trace.steps).unwrap();
    assert!(r.failure.is_none(), "{}", r.failure.unwrap());
    assert!(figure(&r, "no-fail allocations", "requests") > 0);
}

const TRACE_SEED_87: &str = r#"# ext4sim trace v1
seed 87
ops 1500
mount page_cache_mb=2
profile ram
crash_every 0
fsck_every 500
faults 
tasks 1
disk_bytes 8589934592
swarm true
think true
fragment 80
op mkdir path="/s" perm=755
op mkdir path="/g" perm=755
op create path="/g/e" perm=644
op create path="/h" perm=644
op mkdir path="/i" perm=755
op create path="/j" perm=644
op mkdir path="/o" perm=755
op create path="/i/r" perm=644
op create path="/b" perm=644
op mkdir path="/i/c" perm=755
op rename from="/g/e" to="/p"
op create path="/g/c" perm=644
op mkdir path="/k" perm=755
op mkdir path="/i/c/t" perm=755
op link from="/p" to="/l"
op create path="/i/c/c" perm=644
op create path="/g/s" perm=644
op mkdir path="/m" perm=755
op mkdir path="/k/d" perm=755
op create path="/o/a" perm=644
op mkdir path="/g/u" perm=755
op create path="/k/d/d" perm=644
op mkdir path="/g/f" perm=755
op create path="/s/b" perm=644
op create path="/a" perm=644
op create path="/q" perm=644
op write path="/h" offset=1393 len=43763 seed=1
op write path="/g/s" offset=0 len=1 seed=2
op create path="/n" perm=644
op create path="/g/e" perm=644
op write path="/n" offset=0 len=35230 seed=3
op write path="/g/c" offset=0 len=595007 seed=4
op write path="/a" offset=1540 len=27171 seed=5
op direct_write path="/s/b" offset=0 len=512 seed=6
op write path="/g/e" offset=1 len=16384 seed=7
op write path="/j" offset=3814 len=307 seed=8
op write path="/o/a" offset=4025 len=25074 seed=9
op direct_write path="/i/c/c" offset=0 len=512 seed=10
op write path="/q" offset=0 len=1 seed=11
op write path="/k/d/d" offset=0 len=1 seed=12
op write path="/g/e" offset=24576 len=83037 seed=13
op mkdir path="/i/c/a" perm=755
op write path="/i/r" offset=1 len=16384 seed=14
op write path="/s/b" offset=0 len=1036909 seed=15
op write path="/l" offset=1505 len=43718 seed=16
pause ns=5113501992
op mkdir path="/s/d" perm=755
"#;

/// Fragmented memory whose unmovable pages sit in pageblocks of their own,
/// at 16 KiB blocks on 4 KiB pages: a block's folio (order 2) may find no
/// block, so writes, truncates and fallocates answer ENOMEM. The model
/// follows (`Op::cut_short`), and runs with tasks, crashes and write
/// faults pass and replay exactly.
#[test]
fn fragmented_memory_at_large_blocks_answers_enomem_and_the_model_follows() {
    let mut enomem = 0;
    for seed in 1..3 {
        let s = RunSpec { fragment: 85, ..spec(seed, "bs=16k,ps=4k,page_cache_mb=4") };
        let a = run_seed(&EngineFactory, &s).unwrap();
        assert!(a.failure.is_none(), "seed {seed}: {}", a.failure.unwrap());
        if a.stats.enomem > 0 && enomem == 0 {
            let replay = run_steps(&EngineFactory, &s, &a.steps).unwrap();
            assert!(replay.failure.is_none(), "seed {seed}: {}", replay.failure.unwrap());
            assert_eq!((replay.trace_hash, replay.image_hash, replay.stats.enomem), (a.trace_hash, a.image_hash, a.stats.enomem), "seed {seed}");
        }
        enomem += a.stats.enomem;
    }
    assert!(enomem > 0, "no op ran out of memory");
}

/// Ops of a file under fragmented memory at 16 KiB blocks: a big write
/// (three of the page cache's write chunks) fills what memory has blocks
/// for with dirty folios, so a later chunk gets none and the write comes
/// back short; the bytes before it read back, the rest of the file is
/// as it was, FIEMAP shows no reservation past them, and the model agreed
/// at every op.
fn big_writes(len: u32) -> Vec<Step> {
    use ext4_model::Op;
    let mut steps = vec![Step::Op(Op::Create { path: "/f".into(), perm: 0o644 })];
    for i in 0..6u64 {
        steps.push(Step::Op(Op::Write { path: "/f".into(), offset: i * 5_000_000 + 1000, len, seed: 40 + i }));
        steps.push(Step::Op(Op::Read { path: "/f".into(), offset: i * 5_000_000, len: 1 << 20 }));
        steps.push(Step::Op(Op::Fiemap { path: "/f".into(), start: 0, len: u64::MAX, flags: 0, count_only: false }));
    }
    steps.push(Step::Op(Op::Fsync { path: "/f".into() }));
    steps
}

#[test]
fn a_big_write_into_fragmented_memory_comes_back_short_and_the_model_cuts_it() {
    let s = RunSpec { fragment: 85, tasks: 1, crash_every: 0, ..RunSpec::new(1, 0, "bs=16k,ps=4k,page_cache_mb=4".parse().unwrap()) };
    let r = run_steps(&EngineFactory, &s, &big_writes(3 << 20)).unwrap();
    assert!(r.failure.is_none(), "{}", r.failure.unwrap());
    assert!(r.stats.short_by_memory > 0, "no write came back short: {:?}", r.stats);
    // The same writes with memory whole: nothing cut.
    let whole = RunSpec { fragment: 0, ..s };
    let w = run_steps(&EngineFactory, &whole, &big_writes(3 << 20)).unwrap();
    assert!(w.failure.is_none(), "{}", w.failure.unwrap());
    assert_eq!(w.stats.short_by_memory + w.stats.enomem, 0);
}
