//! The engine under memory pressure: metadata's no-fail allocations share
//! the bound with data folios, the reclaimer task runs between tasks' ops,
//! and runs stay deterministic and replay exactly.

use ext4_model::MountConfig;
use ext4_sim::engine_target::EngineFactory;
use ext4_sim::figure::Figure;
use ext4_sim::run::{run_seed, run_steps, RunResult, RunSpec};
use ext4_sim::trace::Step;

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
    for (seed, mount, warns) in [(21, "page_cache_mb=1", false), (22, "bs=64k,ps=4k,page_cache_mb=16", true)] {
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
