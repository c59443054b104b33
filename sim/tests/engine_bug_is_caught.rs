//! A deliberately wrong engine answer (injected through the engine's
//! test-only hook) is caught, shrunk to a few steps, and replays from its trace.

use ext4_engine::fs::test_hooks::InjectedBug;
use ext4_model::MountConfig;
use ext4_sim::run::{run_seed, run_steps, shrink_failure, RunSpec};
use ext4_sim::failure::Failure;
use ext4_sim::trace::Trace;

mod twins;
use twins::{found_by_four_tasks, real_engine_passes, Buggy};

#[test]
fn injected_engine_bug_is_caught_shrunk_and_replayed() {
    let failing = (0..30)
        .map(|s| run_seed(&Buggy(InjectedBug::ReadFlipsLastByteAfterTruncate), &RunSpec { swarm: false, ..RunSpec::new(s, 2000, MountConfig::default()) }).unwrap())
        .find(|r| r.failure.is_some())
        .expect("some seed reads to EOF after a truncate");
    assert!(matches!(&failing.failure, Some(Failure::Divergence(d)) if matches!(d.op, ext4_model::Op::Read { .. })));
    let ext4_sim::run::ShrunkTrace { trace, runs, budget_spent, replays } = shrink_failure(&Buggy(InjectedBug::ReadFlipsLastByteAfterTruncate), &failing).unwrap();
    assert!(replays && !budget_spent);
    assert!(trace.steps.len() <= 5, "shrunk to {} steps in {runs} runs: {:?}", trace.steps.len(), trace.steps);
    let back = Trace::parse(&trace.to_text()).unwrap();
    let spec = back.spec.clone();
    let again = run_steps(&Buggy(InjectedBug::ReadFlipsLastByteAfterTruncate), &spec, &back.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
    // The same steps on the real engine pass.
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &spec, &back.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}

/// Write-back that stores an inode wrong while the mount keeps it right is
/// invisible to every op and to the engine's fsck (a mode is a mode); only
/// the full check's cold read-back of the image sees it. Found in a
/// generated run, it shrinks and replays; the real engine passes.
#[test]
fn a_wrong_inode_written_back_is_caught_by_the_cold_read_back() {
    let bug = Buggy(InjectedBug::WriteBackDropsOtherRead);
    let trace = "# ext4sim trace v1\nseed 1\nmount \nfsck_every 0\n\
                 op mkdir path=\"/d\" perm=775\nop create path=\"/d/f\" perm=664\nop stat path=\"/d/f\"\n";
    let t = Trace::parse(trace).unwrap();
    let failed = run_steps(&bug, &t.spec, &t.steps).unwrap();
    match &failed.failure {
        Some(Failure::ReadBack { what, .. }) => assert!(what.starts_with("stat /"), "{what}"),
        other => panic!("expected a read-back failure, got {other:?}"),
    }
    assert!(run_steps(&ext4_sim::engine_target::EngineFactory, &t.spec, &t.steps).unwrap().failure.is_none());

    let failing = run_seed(&bug, &RunSpec::new(3, 600, MountConfig::default())).unwrap();
    assert!(matches!(failing.failure, Some(Failure::ReadBack { .. })), "{:?}", failing.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays && shrunk.trace.steps.len() <= 3, "{:?}", shrunk.trace.steps);
    let again = run_steps(&bug, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
}

/// A failure from a generated run with three tasks and data=journal, where
/// the bug needs neither: the shrunk trace is one task on the default mount,
/// with one-letter names and small numbers, and still fails the same way.
#[test]
fn a_shrunk_engine_failure_is_plain_and_still_replays() {
    let bug = Buggy(InjectedBug::ReadFlipsLastByteAfterTruncate);
    let spec = |s| RunSpec { swarm: false, tasks: 3, ..RunSpec::new(s, 2000, "data=journal".parse().unwrap()) };
    let failing = (0..30).map(|s| run_seed(&bug, &spec(s)).unwrap()).find(|r| r.failure.is_some()).expect("some seed reads to EOF after a truncate");
    assert!(failing.steps.iter().any(|s| matches!(s, ext4_sim::trace::Step::Task(_))), "the run interleaved its tasks");
    let ext4_sim::run::ShrunkTrace { trace, runs, budget_spent, replays } = shrink_failure(&bug, &failing).unwrap();
    assert!(replays && !budget_spent);
    let shown = trace.to_text();
    // Dropping and renaming cannot undo every rename the failing file went
    // through on its way: a step or two more than the bare minimum may stay.
    assert!(trace.steps.len() <= 7, "shrunk to {} steps in {runs} runs:\n{shown}", trace.steps.len());
    assert_eq!(trace.spec.tasks, 1, "{shown}");
    // The mount shrinks to the default unless the failure needs it.
    if trace.spec.mount != MountConfig::default() {
        let plain = RunSpec { mount: MountConfig::default(), ..trace.spec.clone() };
        let under_default = run_steps(&bug, &plain, &trace.steps).unwrap();
        assert!(under_default.failure.is_none(), "the shrinker kept a mount the failure does not need:\n{shown}");
    }
    let ops: Vec<&ext4_model::Op> = trace.steps.iter().filter_map(|s| s.op()).collect();
    let names = ops.iter().flat_map(|op| op.paths()).flat_map(|p| p.split('/'));
    assert!(names.clone().all(|n| n.len() <= 2), "{shown}");
    // Offsets, lengths and sizes shrink too: none is a megabyte away.
    for op in &ops {
        if let ext4_model::Op::Write { offset, len, .. } | ext4_model::Op::Read { offset, len, .. } = op {
            assert!(*offset < 1 << 20 && *len < 1 << 20, "{shown}");
        }
    }
    let back = Trace::parse(&shown).unwrap();
    assert_eq!(back, trace);
    let again = run_steps(&bug, &back.spec, &back.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &back.spec, &back.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}

/// A bug in geometry only mke2fs makes (reserved GDT blocks after each
/// backup superblock, in groups mke2fs leaves BLOCK_UNINIT) passes every
/// run that starts from the engine's own mkfs, and is caught as soon as runs
/// start from an mke2fs image (`--mkfs`).
#[test]
fn a_bug_only_mke2fs_geometry_shows_is_caught_from_an_mke2fs_image() {
    if ext4_testkit::e2fsprogs::tool("mke2fs").is_none() {
        println!("SKIPPED: e2fsprogs not installed");
        return;
    }
    let bug = Buggy(InjectedBug::SynthesisedBitmapSkipsReservedGdt);
    let spec = |seed, mkfs: Option<&str>| RunSpec { mkfs: mkfs.map(|m| ext4_sim::mke2fs::MkfsArgs::parse(m).unwrap()), ..RunSpec::new(seed, 1500, MountConfig::default()) };
    for seed in 1..4 {
        let own = run_seed(&bug, &spec(seed, None)).unwrap();
        assert!(own.failure.is_none(), "seed {seed}: the engine's mkfs reserves no GDT blocks: {:?}", own.failure);
    }
    let caught = (1..4).map(|seed| run_seed(&bug, &spec(seed, Some(""))).unwrap()).find_map(|r| r.failure);
    let Some(failure) = caught else { panic!("an mke2fs image must show the bug") };
    assert!(failure.to_string().contains("BLOCK_UNINIT"), "{failure}");
    let clean = run_seed(&ext4_sim::engine_target::EngineFactory, &spec(1, Some(""))).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}

/// A commit that frees the blocks the running transaction freed too lets
/// them be reused before that free commits. It shows only when another
/// task's op overtakes an fsync while its transaction commits: here task 1
/// unlinks /f meanwhile, /g's data lands in /f's blocks (no locality-group
/// preallocation: /g's request is /f's, and lands where it did), and the crash
/// undoes the unlink. /g's delayed data is written back (FIEMAP_FLAG_SYNC:
/// write-back without a commit) so its blocks are taken before the crash.
/// The real engine passes the same steps, and so does the buggy one when
/// the fsync is not split.
#[test]
fn a_commit_freeing_the_next_transactions_blocks_is_caught() {
    let bug = Buggy(InjectedBug::CommitReleasesEveryHold);
    // A whole fsync has no second half to finish.
    let steps = |fsync: &str| {
        let finish = if fsync.starts_with("begin") { "finish\n" } else { "" };
        format!(
            "# ext4sim trace v1\nseed 1\nmount mb_group_prealloc=0\ntasks 2\n\
op create path=\"/f\" perm=644\nop write path=\"/f\" offset=0 len=65536 seed=1\nop sync\nop create path=\"/x\" perm=644\n\
{fsync}\ntask 1\nop unlink path=\"/f\"\ntask 0\n{finish}task 1\nop create path=\"/g\" perm=644\n\
op write path=\"/g\" offset=0 len=65536 seed=2\nop fiemap path=\"/g\" sync=true\ncrash seed=2\n"
        )
    };
    let run = |factory: &dyn Fn(&RunSpec, &[ext4_sim::trace::Step]) -> ext4_sim::run::RunResult, text: &str| {
        let trace = Trace::parse(text).unwrap();
        factory(&trace.spec.clone(), &trace.steps)
    };
    let buggy = |s: &RunSpec, st: &[ext4_sim::trace::Step]| run_steps(&bug, s, st).unwrap();
    let clean = |s: &RunSpec, st: &[ext4_sim::trace::Step]| run_steps(&ext4_sim::engine_target::EngineFactory, s, st).unwrap();

    let split = steps("begin fsync path=\"/x\"");
    let failing = run(&buggy, &split);
    match &failing.failure {
        Some(Failure::Crash { what, .. }) => assert!(what.starts_with("/f: sector at 0"), "{what}"),
        other => panic!("the reused blocks went unseen: {other:?}"),
    }
    let passing = run(&clean, &split);
    assert!(passing.failure.is_none(), "{:?}", passing.failure);
    let whole = run(&buggy, &steps("op fsync path=\"/x\""));
    assert!(whole.failure.is_none(), "{:?}", whole.failure);
    // It shrinks, and what it shrinks to still fails the same way.
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.trace.steps.len() <= failing.steps.len());
    let again = run_steps(&bug, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
}

/// A chattr -j whose journal flush fails (a write fault in the commit or
/// the checkpoint) returns without dropping the updates lock: the lock imbalance
/// docs/ARCHITECTURE.md recalls. The runner holds the engine's locks to the ops in
/// flight after every op, before the fault's remount could hide it, so it is
/// caught at the switch itself, with one task, and shrinks to a few steps.
/// The real engine releases the lock on the same path.
#[test]
fn a_switch_keeping_invalidate_lock_on_a_failed_flush_is_caught() {
    let bug = Buggy(InjectedBug::SwitchKeepsLockOnFailedFlush);
    let trace = |command: u32| {
        Trace::parse(&format!(
            "# ext4sim trace v1\nseed 1\nmount \nfaults write\n\
op create path=\"/f\" perm=644\nop set_journal_data path=\"/f\" enable=true\nop write path=\"/f\" offset=0 len=16384 seed=1\n\
op mkdir path=\"/d\" perm=755\nfault kind=write command={command} sector=0\nop set_journal_data path=\"/f\" enable=false\nop stat path=\"/f\"\n\
op write path=\"/f\" offset=4096 len=4096 seed=2\nop sync\n"
        ))
        .unwrap()
    };
    let run = |factory: &dyn Fn(&RunSpec, &[ext4_sim::trace::Step]) -> ext4_sim::run::RunResult, t: &Trace| factory(&t.spec.clone(), &t.steps);
    let buggy = |s: &RunSpec, st: &[ext4_sim::trace::Step]| run_steps(&bug, s, st).unwrap();
    let clean = |s: &RunSpec, st: &[ext4_sim::trace::Step]| run_steps(&ext4_sim::engine_target::EngineFactory, s, st).unwrap();
    // Which of the switch's device commands is a journal write depends on
    // the layout: try each, as the fault step names commands by index.
    let mut caught = None;
    for command in 0..24 {
        let t = trace(command);
        let passing = run(&clean, &t);
        assert!(passing.failure.is_none(), "command {command}: {:?}", passing.failure);
        let failing = run(&buggy, &t);
        match &failing.failure {
            Some(Failure::Lock { what, .. }) => {
                assert!(what.contains("invalidate_lock") && what.contains("set_journal_data"), "{what}");
                caught.get_or_insert(failing);
            }
            None => {}
            Some(other) => panic!("command {command}: caught as something else: {other}"),
        }
    }
    let failing = caught.expect("some write of the switch's commit fails its flush");
    let ext4_sim::run::ShrunkTrace { trace, runs, budget_spent, replays } = shrink_failure(&bug, &failing).unwrap();
    assert!(replays && !budget_spent);
    assert!(trace.steps.len() <= 5, "shrunk to {} steps in {runs} runs: {:?}", trace.steps.len(), trace.steps);
    let back = Trace::parse(&trace.to_text()).unwrap();
    let again = run(&buggy, &back);
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
    assert!(run(&clean, &back).failure.is_none());
}

/// data=ordered writes the data of blocks a transaction allocated before
/// its commit record; data=writeback does not. An engine whose ordered mode
/// commits first (as writeback mode does, which the model allows there)
/// lets a crash show a reused block's old bytes: /b, truncated to nothing,
/// is written again into the blocks it freed (no locality-group
/// preallocation, so the same request lands in the same place), another file's fsync commits /b's allocation and size, and the
/// crash comes before /b's data was written back (dioread_lock: under
/// dioread_nolock the blocks would be allocated unwritten and need no
/// order). The real engine passes;
/// under data=writeback the same order is allowed; and the failure shrinks
/// and replays.
#[test]
fn ordered_mode_committing_before_its_data_is_caught() {
    let bug = Buggy(InjectedBug::OrderedCommitsBeforeData);
    let trace = |mount: &str| {
        Trace::parse(&format!(
            "# ext4sim trace v1\nseed 1\nmount {mount}\n\
op create path=\"/b\" perm=644\nop write path=\"/b\" offset=0 len=65536 seed=1\nop sync\n\
op truncate path=\"/b\" size=0\nop create path=\"/c\" perm=644\nop sync\n\
op write path=\"/b\" offset=0 len=65536 seed=2\n\
op write path=\"/c\" offset=0 len=100 seed=3\nop fsync path=\"/c\"\ncrash seed=1\n"
        ))
        .unwrap()
    };
    let t = trace("nodelalloc,dioread_lock,mb_group_prealloc=0");
    let failing = run_steps(&bug, &t.spec, &t.steps).unwrap();
    match &failing.failure {
        Some(Failure::Crash { what, .. }) => assert!(what.starts_with("/b: sector at"), "{what}"),
        other => panic!("stale data went unseen: {other:?}"),
    }
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &t.spec, &t.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
    let w = trace("data=writeback,nodelalloc,dioread_lock,mb_group_prealloc=0");
    let allowed = run_steps(&bug, &w.spec, &w.steps).unwrap();
    assert!(allowed.failure.is_none(), "{:?}", allowed.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays);
    let back = Trace::parse(&shrunk.trace.to_text()).unwrap();
    let again = run_steps(&bug, &back.spec, &back.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
}

/// A bug generated runs of the plain mount (no swarm) must catch: the first
/// failing seed of 60 diverges on an op `diverges_on` accepts, shrinks to at
/// most 6 steps that replay, and the real engine passes them.
fn caught_in_generated_runs(bug: InjectedBug, diverges_on: fn(&ext4_model::Op) -> bool, expect: &str) {
    let bug = Buggy(bug);
    let failing = (0..60)
        .map(|s| run_seed(&bug, &RunSpec { swarm: false, ..RunSpec::new(s, 1500, MountConfig::default()) }).unwrap())
        .find(|r| r.failure.is_some())
        .expect(expect);
    assert!(matches!(&failing.failure, Some(Failure::Divergence(d)) if diverges_on(&d.op)), "{:?}", failing.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays && shrunk.trace.steps.len() <= 6, "{:?}", shrunk.trace.steps);
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}

/// An extent status entry a collapse leaves behind shows in the next FIEMAP
/// that reads through the cache: written blocks the collapse moved down are
/// reported with the unwritten state cached there before.
/// Caught, shrunk (the unrelated file goes), replayed; the real engine
/// passes the same steps.
#[test]
fn a_stale_extent_status_entry_is_caught() {
    let bug = Buggy(InjectedBug::CollapseKeepsCachedExtents);
    // Blocks 0..4 written, 4..8 unwritten, 8..12 written; the collapse of
    // 0..4 moves 8..12 to 4..8, where the cache still says unwritten.
    let t = Trace::parse(
        "# ext4sim trace v1\nseed 1\nmount \n\
op create path=\"/f\" perm=644\nop fallocate path=\"/f\" mode=0x0 offset=0 len=49152\n\
op write path=\"/f\" offset=0 len=16384 seed=1\nop write path=\"/f\" offset=32768 len=16384 seed=2\nop fsync path=\"/f\"\n\
op create path=\"/noise\" perm=644\nop write path=\"/noise\" offset=0 len=100 seed=3\n\
op fiemap path=\"/f\" sync=false flags=0x4\nop fallocate path=\"/f\" mode=0x8 offset=0 len=16384\n\
op fiemap path=\"/f\" sync=false\n",
    )
    .unwrap();
    let failing = run_steps(&bug, &t.spec, &t.steps).unwrap();
    match &failing.failure {
        Some(Failure::Divergence(d)) => assert!(matches!(d.op, ext4_model::Op::Fiemap { .. }), "{d:?}"),
        other => panic!("the stale entry went unseen: {other:?}"),
    }
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &t.spec, &t.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays && shrunk.trace.steps.len() < t.steps.len(), "{:?}", shrunk.trace.steps);
    let back = Trace::parse(&shrunk.trace.to_text()).unwrap();
    let again = run_steps(&bug, &back.spec, &back.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
}

/// A hole cached by a lookup (FIEMAP, SEEK_DATA/SEEK_HOLE) and kept when
/// write-back maps blocks there hides them from the next lookup. Every
/// lookup fills the cache, so generated runs reach it: caught, shrunk,
/// replayed; the real engine passes the shrunk steps.
#[test]
fn a_hole_the_cache_keeps_over_written_back_blocks_is_caught() {
    caught_in_generated_runs(
        InjectedBug::WriteBackKeepsCachedHoles,
        |op| matches!(op, ext4_model::Op::Fiemap { .. } | ext4_model::Op::Lseek { .. }),
        "some seed looks a file up, writes it back and looks again",
    );
}

/// SEEK_DATA must see dirty pages over an unwritten extent (the kernel asks
/// the page cache there); an engine that takes unwritten for a hole passes
/// every other op.
#[test]
fn a_seek_that_ignores_dirty_pages_over_unwritten_blocks_is_caught() {
    caught_in_generated_runs(InjectedBug::SeekIgnoresPageCache, |op| matches!(op, ext4_model::Op::Lseek { .. }), "some seed seeks over dirty unwritten blocks");
}

/// auto_da_alloc at close: after a truncate to 0, the next close writes the
/// delayed blocks back, so FIEMAP can no longer show them delayed.
#[test]
fn a_close_that_forgets_auto_da_alloc_is_caught() {
    caught_in_generated_runs(InjectedBug::ReleaseForgetsTruncatedFile, |op| matches!(op, ext4_model::Op::Fiemap { .. }), "some seed rewrites a file and maps it");
}

/// An unlinked open file must be on the orphan list: a crash before its
/// last close otherwise leaks its inode and blocks, which no op can see
/// (the file has no name) but the fsck after recovery does.
#[test]
fn an_orphan_left_off_the_orphan_list_is_caught_after_a_crash() {
    let bug = Buggy(InjectedBug::OrphanListForgotten);
    let failing = (0..40)
        .map(|s| run_seed(&bug, &RunSpec { swarm: false, crash_every: 100, ..RunSpec::new(s, 1500, MountConfig::default()) }).unwrap())
        .find(|r| r.failure.is_some())
        .expect("some seed crashes while an unlinked file is open");
    assert!(matches!(&failing.failure, Some(Failure::Crash { what, .. }) if what.contains("fsck after recovery")), "{:?}", failing.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays && shrunk.trace.steps.len() <= 8, "{:?}", shrunk.trace.steps);
    assert!(shrunk.trace.steps.iter().any(|s| matches!(s.op(), Some(ext4_model::Op::Open { .. }))), "{}", shrunk.trace.to_text());
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}

/// data=journal write-back hands the data to the journal; an engine that
/// drops it there loses data a cold read-back (or a crash after fsync)
/// must see.
#[test]
fn data_journal_write_back_that_logs_nothing_is_caught() {
    let bug = Buggy(InjectedBug::JournaledDataNeverLogged);
    let mount: MountConfig = "data=journal".parse().unwrap();
    let failing = (0..20)
        .map(|s| run_seed(&bug, &RunSpec { swarm: false, crash_every: 100, ..RunSpec::new(s, 1500, mount) }).unwrap())
        .find(|r| r.failure.is_some())
        .expect("some seed writes, syncs and reads back under data=journal");
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays && shrunk.trace.steps.len() <= 8, "{}", shrunk.trace.to_text());
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}

/// The seed series' bug, re-injected in the engine (the -j flush error path
/// returning with invalidate_lock held), found by random runs with four
/// tasks and write faults, as a swarm would find it: the first failing
/// seed fails on the lock, and the shrunk trace replays.
#[test]
fn a_random_tasks_swarm_finds_the_switch_leaking_invalidate_lock() {
    let bug = Buggy(InjectedBug::SwitchKeepsLockOnFailedFlush);
    let spec = |seed| RunSpec { tasks: 4, faults: "write".parse().unwrap(), ..RunSpec::new(seed, 1500, MountConfig::default()) };
    let (seed, failing) = (0..200)
        .map(|s| (s, run_seed(&bug, &spec(s)).unwrap()))
        .find(|(_, r)| r.failure.is_some())
        .expect("200 seeds of four tasks with write faults meet a -j whose flush fails");
    let Some(Failure::Lock { what, .. }) = &failing.failure else { panic!("seed {seed}: {:?}", failing.failure) };
    assert!(what.contains("invalidate_lock"), "{what}");
    let clean = run_seed(&ext4_sim::engine_target::EngineFactory, &spec(seed)).unwrap();
    assert!(clean.failure.is_none(), "seed {seed} fails without the bug: {:?}", clean.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays, "the shrunk trace replays");
    eprintln!("found at seed {seed} (the {}th run); shrunk to {} steps in {} runs", seed + 1, shrunk.trace.steps.len(), shrunk.runs);
}

/// Inputs the `journal_switch` fuzz target found against this bug twin
/// (`--features switch-bug-twin`, docs/concurrency.md) still fail on it,
/// on the lock, and pass on the real engine.
#[test]
fn the_journal_switch_fuzz_target_finds_still_catch_the_switch_bug() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/twin_finds/journal_switch");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("twin finds directory exists") {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let caught = std::panic::catch_unwind(|| ext4_sim::fuzz_body::journal_switch_on(&Buggy(InjectedBug::SwitchKeepsLockOnFailedFlush), &data));
        let message = caught.err().and_then(|p| p.downcast::<String>().ok()).unwrap_or_else(|| panic!("{} no longer fails on the bug twin", path.display()));
        assert!(message.contains("invalidate_lock is still held"), "{}: {message}", path.display());
        // The printed trace is what `ext4sim replay` takes: every fault in
        // it fires, and it fails as the input did.
        let at = message.find("# ext4sim trace").unwrap_or_else(|| panic!("{}: no trace in {message}", path.display()));
        let trace = Trace::parse(&message[at..]).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let again = run_steps(&Buggy(InjectedBug::SwitchKeepsLockOnFailedFlush), &trace.spec, &trace.steps).unwrap();
        assert_eq!(again.unfired_faults, vec![], "{}: the printed trace names faults that never fire", path.display());
        assert!(matches!(&again.failure, Some(Failure::Lock { what, .. }) if what.contains("invalidate_lock")), "{}: {:?}", path.display(), again.failure);
        let clean = ext4_sim::fuzz_body::journal_switch(&data).expect("a trace the runner accepts");
        assert!(clean.failure.is_none());
        n += 1;
    }
    assert!(n >= 2, "{n} twin finds");
}

/// A buffered write cut short for want of a folio that answers ENOMEM
/// instead of its count (the bytes it copied stay): the model cuts the
/// write where the engine says it stopped, so the answer disagrees at
/// once. Shrinks and replays; the real engine passes the same steps.
#[test]
fn a_cut_write_that_answers_enomem_is_caught() {
    use ext4_model::Op;
    let bug = Buggy(InjectedBug::CutWriteAnswersEnomem);
    let spec = RunSpec { fragment: 85, tasks: 1, crash_every: 0, ..RunSpec::new(1, 0, "bs=16k,ps=4k,page_cache_mb=4".parse().unwrap()) };
    let mut steps = vec![ext4_sim::trace::Step::Op(Op::Create { path: "/f".into(), perm: 0o644 })];
    for i in 0..6u64 {
        steps.push(ext4_sim::trace::Step::Op(Op::Write { path: "/f".into(), offset: i * 5_000_000 + 1000, len: 3 << 20, seed: 40 + i }));
    }
    let failing = run_steps(&bug, &spec, &steps).unwrap();
    let Some(Failure::Divergence(d)) = &failing.failure else { panic!("not caught: {:?}", failing.failure) };
    assert!(matches!(d.op, Op::Write { .. }) && d.actual == Err(ext4_model::Errno::ENOMEM), "{d:?}");
    assert!(matches!(d.model, Ok(ext4_model::Reply::Written(n)) if n > 0 && n < 3 << 20), "{d:?}");
    let ext4_sim::run::ShrunkTrace { trace, replays, .. } = shrink_failure(&bug, &failing).unwrap();
    assert!(replays);
    let back = Trace::parse(&trace.to_text()).unwrap();
    let again = run_steps(&bug, &back.spec, &back.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &back.spec, &back.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}

/// A truncate the scheduler lets run while the flusher sleeps holding the
/// file's dirty folios reaches their locks: a random four-task swarm finds
/// it as a lock-discipline failure naming the flusher, the trace shrinks
/// and replays, and the real engine passes the same seed.
#[test]
fn a_truncate_running_into_the_flushers_folio_locks_is_caught() {
    let bug = Buggy(InjectedBug::TruncateIgnoresFlusherFolios);
    let spec = |seed| RunSpec { tasks: 4, ..RunSpec::new(seed, 2000, MountConfig::default()) };
    let (seed, failing) = (0..200)
        .map(|s| (s, run_seed(&bug, &spec(s)).unwrap()))
        .find(|(_, r)| r.failure.is_some())
        .expect("200 seeds of four tasks meet a truncate during the flusher's write-back");
    let Some(Failure::Lock { what, .. }) = &failing.failure else { panic!("seed {seed}: {:?}", failing.failure) };
    assert!(what.contains("reached folio pages") && what.contains("between its halves"), "{what}");
    let clean = run_seed(&ext4_sim::engine_target::EngineFactory, &spec(seed)).unwrap();
    assert!(clean.failure.is_none(), "seed {seed} fails without the bug: {:?}", clean.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    // Its ops, the pauses that make the file expire, and the flusher's
    // wake-ups and first half (twelve steps when written).
    assert!(shrunk.replays && shrunk.trace.steps.len() <= 16 && shrunk.trace.steps.contains(&ext4_sim::trace::Step::Flusher), "{:?}", shrunk.trace.steps);
    eprintln!("found at seed {seed}; shrunk to {} steps in {} runs", shrunk.trace.steps.len(), shrunk.runs);
}

/// bigalloc: freeing a cluster while its file still maps other blocks of
/// it hands those blocks to the next allocation. Generated runs at 64 KiB
/// clusters catch it (the engine's allocator checks, its fsck or a
/// divergence), it shrinks and replays, and the real engine passes.
#[test]
fn a_cluster_freed_while_its_file_still_maps_blocks_of_it_is_caught() {
    let bug = Buggy(InjectedBug::FreesPartlyUsedCluster);
    let mount: MountConfig = "cluster=64k".parse().unwrap();
    let spec = |seed| RunSpec { swarm: false, ..RunSpec::new(seed, 1500, mount) };
    let (seed, failing) = (0..40)
        .map(|s| (s, run_seed(&bug, &spec(s)).unwrap()))
        .find(|(_, r)| r.failure.is_some())
        .expect("some seed punches or truncates part of a cluster");
    let clean = run_seed(&ext4_sim::engine_target::EngineFactory, &spec(seed)).unwrap();
    assert!(clean.failure.is_none(), "seed {seed} fails without the bug: {:?}", clean.failure);
    let shrunk = shrink_failure(&bug, &failing).unwrap();
    assert!(shrunk.replays && shrunk.trace.steps.len() <= 8, "{:?}", shrunk.trace.steps);
    let again = run_steps(&bug, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &shrunk.trace.spec, &shrunk.trace.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
    eprintln!("found at seed {seed} as {:?}; shrunk to {} steps: {:?}", failing.failure, shrunk.trace.steps.len(), shrunk.trace.steps);
}

/// A write whose first folio publishes the whole write's size is right
/// once it returns; only a step between its parts can tell (a stat, a
/// read, a crash). Random runs with four tasks find it, it shrinks to a
/// trace with a part in it, and the real engine passes that trace.
#[test]
fn a_write_publishing_its_whole_size_at_its_first_folio_is_caught_between_its_parts() {
    let shrunk = found_by_four_tasks(InjectedBug::WritePartSizesWholeWrite, 100);
    assert!(shrunk.trace.steps.contains(&ext4_sim::trace::Step::Part), "only a part shows it: {:?}", shrunk.trace.steps);
}

/// A pwrite of three order-0 folios in flight: another task reads, stats
/// and maps the file after each part and sees it part done, then a crash
/// between parts recovers to an allowed state. The real engine passes; the
/// twin that publishes the whole size at the first folio diverges at the
/// first stat between parts.
#[test]
fn a_write_in_flight_is_seen_part_done_between_its_folios() {
    let text = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 2\nfsck_every 0\n\
                op create path=\"/a\" perm=644\nop sync\n\
                begin write path=\"/a\" offset=1000 len=9000 seed=7\npart\n\
                task 1\nop read path=\"/a\" offset=0 len=16384\nop stat path=\"/a\"\nop fiemap path=\"/a\" sync=false\n\
                task 0\npart\n\
                task 1\nop read path=\"/a\" offset=0 len=16384\nop stat path=\"/a\"\nop fsync path=\"/a\"\n\
                crash seed=5\nop stat path=\"/a\"\n";
    let (t, r) = real_engine_passes(text);
    assert_eq!(r.stats.write_parts, 2, "both parts ran before the crash");
    let bad = run_steps(&Buggy(InjectedBug::WritePartSizesWholeWrite), &t.spec, &t.steps).unwrap();
    match &bad.failure {
        Some(Failure::Divergence(d)) => assert!(matches!(d.op, ext4_model::Op::Read { .. } | ext4_model::Op::Stat { .. }), "{d:?}"),
        other => panic!("the twin shows a size ahead of its folios: {other:?}"),
    }
}

/// A rewrite (open with O_TRUNC, write at 0, close) in flight: its first
/// part truncates and copies the first folio, so another task sees the old
/// bytes gone and the new ones part written; a crash between parts
/// recovers to an allowed state (the truncate and each part are calls of
/// their own in the crash log). The twin that publishes the whole size at
/// the first folio diverges at the stat.
#[test]
fn a_rewrite_in_flight_is_seen_truncated_and_part_written() {
    let text = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 2\nfsck_every 0\n\
                op create path=\"/a\" perm=644\nop write path=\"/a\" offset=0 len=20000 seed=3\nop sync\n\
                begin rewrite path=\"/a\" len=9000 seed=7\npart\n\
                task 1\nop stat path=\"/a\"\nop read path=\"/a\" offset=0 len=20000\nop fsync path=\"/a\"\n\
                task 0\npart\n\
                task 1\ncrash seed=5\nop stat path=\"/a\"\n";
    let (t, r) = real_engine_passes(text);
    assert_eq!((r.stats.write_parts, r.stats.crashes), (2, 1));
    let bad = run_steps(&Buggy(InjectedBug::WritePartSizesWholeWrite), &t.spec, &t.steps).unwrap();
    match &bad.failure {
        Some(Failure::Divergence(d)) => assert!(matches!(d.op, ext4_model::Op::Stat { .. }), "{d:?}"),
        other => panic!("the twin shows a size ahead of its folios: {other:?}"),
    }
}

/// A pwrite through a descriptor whose file has no name left: another task
/// closes the descriptor between the write's parts. The slot goes at once,
/// but the file (an orphan) must live until the write returns, its rest
/// written to it and freed then (fdget's reference). The real engine
/// passes, with the crash after it; the twin whose close frees the file
/// at once hands its inode to the next create, and the write's second part
/// lands in that new file.
#[test]
fn a_descriptor_closed_under_a_write_in_flight_keeps_its_file_until_the_write_returns() {
    let text = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 2\nfsck_every 0\n\
                op create path=\"/a\" perm=644\nop open path=\"/a\" slot=1\nop unlink path=\"/a\"\nop sync\n\
                begin pwrite slot=1 offset=0 len=9000 seed=7\npart\n\
                task 1\nop close slot=1\nop create path=\"/b\" perm=644\n\
                task 0\npart\n\
                task 1\nop stat path=\"/b\"\nop read path=\"/b\" offset=0 len=16384\n\
                task 0\nfinish\n\
                task 1\nop sync\ncrash seed=3\nop stat path=\"/b\"\n";
    let (t, r) = real_engine_passes(text);
    assert_eq!(r.stats.write_parts, 2, "two parts ran before the finish");
    let bad = run_steps(&Buggy(InjectedBug::CloseIgnoresWriteInFlight), &t.spec, &t.steps).unwrap();
    match &bad.failure {
        Some(Failure::Divergence(d)) => assert!(matches!(&d.op, ext4_model::Op::Stat { path } if path == "/b"), "{d:?}"),
        other => panic!("the twin's new file shows the write's rest: {other:?}"),
    }
    // A crash between the parts, after the close and an fsync of another
    // file: the crash check replays the write's reference and the deferred
    // close, and mount frees the orphan.
    let crashed = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 2\nfsck_every 0\n\
                   op create path=\"/a\" perm=644\nop create path=\"/c\" perm=644\nop open path=\"/a\" slot=1\nop unlink path=\"/a\"\n\
                   begin pwrite slot=1 offset=0 len=9000 seed=7\npart\n\
                   task 1\nop close slot=1\nop write path=\"/c\" offset=0 len=100 seed=2\nop fsync path=\"/c\"\n\
                   task 0\npart\n\
                   task 1\ncrash seed=3\nop stat path=\"/c\"\n";
    let (_, r) = real_engine_passes(crashed);
    assert_eq!((r.stats.write_parts, r.stats.crashes), (2, 1));
}

/// The same twin in random runs of four tasks: a close of a descriptor (or
/// an open into its slot) while a write or ftruncate through it is in
/// flight is rare, so it takes some seeds. Since the first half pins the
/// descriptor's file, the close may come before any part.
#[test]
fn a_close_freeing_the_file_under_a_write_in_flight_is_found_by_random_tasks() {
    let shrunk = found_by_four_tasks(InjectedBug::CloseIgnoresWriteInFlight, 400);
    let steps = &shrunk.trace.steps;
    let through_slot = |s: &ext4_sim::trace::Step| matches!(s, ext4_sim::trace::Step::Begin(ext4_model::Op::WriteFd { .. } | ext4_model::Op::FtruncateFd { .. }));
    let begun = steps.iter().position(through_slot).unwrap_or_else(|| panic!("an op through a descriptor begins: {steps:?}"));
    // A close, or an open into the slot (whose dup2 closes what it held).
    let closes = |s: &ext4_sim::trace::Step| matches!(s, ext4_sim::trace::Step::Op(ext4_model::Op::Close { .. } | ext4_model::Op::Open { .. }));
    assert!(steps[begun..].iter().any(closes), "the descriptor closes while the op is in flight: {steps:?}");
}
