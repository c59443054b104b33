//! The engine with a bug injected (its test-only hook), and the checks
//! every twin test makes: a random swarm finds it, the shrunk trace
//! replays, and the real engine passes the same steps.

use ext4_engine::fs::test_hooks::InjectedBug;
use ext4_model::MountConfig;
use ext4_sim::engine_target::{make_engine, EngineTarget};
use ext4_sim::run::{run_seed, run_steps, shrink_failure, RunSpec};
use ext4_sim::target::TargetFactory;
use ext4_sim::trace::Trace;

/// The engine with a bug injected, on every mount.
pub struct Buggy(pub InjectedBug);

impl TargetFactory for Buggy {
    type Target = EngineTarget;
    fn make(&self, spec: &RunSpec) -> Result<EngineTarget, String> {
        let mut t = make_engine(spec)?;
        t.after_mount(match self.0 {
            InjectedBug::ReadFlipsLastByteAfterTruncate => |fs| fs.inject_bug(InjectedBug::ReadFlipsLastByteAfterTruncate),
            InjectedBug::CommitReleasesEveryHold => |fs| fs.inject_bug(InjectedBug::CommitReleasesEveryHold),
            InjectedBug::SwitchKeepsLockOnFailedFlush => |fs| fs.inject_bug(InjectedBug::SwitchKeepsLockOnFailedFlush),
            InjectedBug::WriteBackDropsOtherRead => |fs| fs.inject_bug(InjectedBug::WriteBackDropsOtherRead),
            InjectedBug::SynthesisedBitmapSkipsReservedGdt => |fs| fs.inject_bug(InjectedBug::SynthesisedBitmapSkipsReservedGdt),
            InjectedBug::OrderedCommitsBeforeData => |fs| fs.inject_bug(InjectedBug::OrderedCommitsBeforeData),
            InjectedBug::SeekIgnoresPageCache => |fs| fs.inject_bug(InjectedBug::SeekIgnoresPageCache),
            InjectedBug::ReleaseForgetsTruncatedFile => |fs| fs.inject_bug(InjectedBug::ReleaseForgetsTruncatedFile),
            InjectedBug::OrphanListForgotten => |fs| fs.inject_bug(InjectedBug::OrphanListForgotten),
            InjectedBug::JournaledDataNeverLogged => |fs| fs.inject_bug(InjectedBug::JournaledDataNeverLogged),
            InjectedBug::CutWriteAnswersEnomem => |fs| fs.inject_bug(InjectedBug::CutWriteAnswersEnomem),
            InjectedBug::TruncateIgnoresFlusherFolios => |fs| fs.inject_bug(InjectedBug::TruncateIgnoresFlusherFolios),
            InjectedBug::FreesPartlyUsedCluster => |fs| fs.inject_bug(InjectedBug::FreesPartlyUsedCluster),
            InjectedBug::CollapseKeepsCachedExtents => |fs| fs.inject_bug(InjectedBug::CollapseKeepsCachedExtents),
            InjectedBug::WriteBackKeepsCachedHoles => |fs| fs.inject_bug(InjectedBug::WriteBackKeepsCachedHoles),
            InjectedBug::WritePartSizesWholeWrite => |fs| fs.inject_bug(InjectedBug::WritePartSizesWholeWrite),
            InjectedBug::CloseIgnoresWriteInFlight => |fs| fs.inject_bug(InjectedBug::CloseIgnoresWriteInFlight),
            InjectedBug::TruncateLeavesNoOrphan => |fs| fs.inject_bug(InjectedBug::TruncateLeavesNoOrphan),
            InjectedBug::FallocatePieceSizesPastRange => |fs| fs.inject_bug(InjectedBug::FallocatePieceSizesPastRange),
            InjectedBug::PunchDropsCacheLate => |fs| fs.inject_bug(InjectedBug::PunchDropsCacheLate),
            InjectedBug::DirectWriteMapsWritten => |fs| fs.inject_bug(InjectedBug::DirectWriteMapsWritten),
            InjectedBug::DirectWriteKeepsStaleCache => |fs| fs.inject_bug(InjectedBug::DirectWriteKeepsStaleCache),
            InjectedBug::DirectReadUnlocksEarly => |fs| fs.inject_bug(InjectedBug::DirectReadUnlocksEarly),
            InjectedBug::ReadPartKeepsFirstSize => |fs| fs.inject_bug(InjectedBug::ReadPartKeepsFirstSize),
        });
        Ok(t)
    }
}


/// The first of `seeds` random runs of four tasks with crashes that the
/// twin `bug` fails and the real engine passes, shrunk: the shrunk trace
/// replays the failure, and the real engine passes it.
pub fn found_by_four_tasks(bug: InjectedBug, seeds: u64) -> ext4_sim::run::ShrunkTrace {
    let buggy = Buggy(bug);
    let spec = |seed| RunSpec { tasks: 4, crash_every: 150, ..RunSpec::new(seed, 1000, MountConfig::default()) };
    let (seed, failing) = (0..seeds)
        .map(|s| (s, run_seed(&buggy, &spec(s)).unwrap()))
        .find(|(_, r)| r.failure.is_some())
        .unwrap_or_else(|| panic!("{seeds} seeds of four tasks catch {bug:?}"));
    let clean = run_seed(&ext4_sim::engine_target::EngineFactory, &spec(seed)).unwrap();
    assert!(clean.failure.is_none(), "seed {seed} fails without the bug: {:?}", clean.failure);
    let shrunk = shrink_failure(&buggy, &failing).unwrap();
    assert!(shrunk.replays, "the shrunk trace replays");
    eprintln!("{bug:?} found at seed {seed}: {:?}; shrunk to {} steps in {} runs:\n{}", failing.failure.as_ref().map(|f| f.to_string()), shrunk.trace.steps.len(), shrunk.runs, shrunk.trace.to_text());
    let again = run_steps(&ext4_sim::engine_target::EngineFactory, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(again.failure.is_none(), "the real engine fails the shrunk trace: {:?}", again.failure);
    shrunk
}

/// A scripted trace, and the real engine's run of it, which passes.
pub fn real_engine_passes(text: &str) -> (Trace, ext4_sim::run::RunResult) {
    let t = Trace::parse(text).unwrap();
    let r = run_steps(&ext4_sim::engine_target::EngineFactory, &t.spec, &t.steps).unwrap();
    assert!(r.failure.is_none(), "{:?}", r.failure);
    (t, r)
}

/// A count of the run report's orphans figure.
#[allow(dead_code)] // not every test file that shares this module asks
pub fn orphan_figure(r: &ext4_sim::run::RunResult, name: &str) -> u64 {
    let Some((_, ext4_sim::figure::Figure::Group(orphans))) = r.report.iter().find(|(k, _)| k == "orphans") else { panic!("the report has no orphans figure") };
    match orphans.iter().find(|(k, _)| k == name) {
        Some((_, ext4_sim::figure::Figure::Count(n))) => *n,
        other => panic!("{name}: {other:?}"),
    }
}
