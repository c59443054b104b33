//! A shrinking truncate in flight frees its file's blocks extent by extent
//! (engine `truncate_parts`): other tasks see it part done, a commit
//! between its extents makes that durable, and a crash then leaves the
//! file on the orphan list for mount to finish.

use ext4_engine::fs::test_hooks::InjectedBug;
use ext4_sim::failure::Failure;
use ext4_sim::run::run_steps;

mod twins;
use twins::{found_by_four_tasks, orphan_figure, real_engine_passes, Buggy};

/// Three extents (blocks 0..4, 10..14, 20..24), truncated to 6000 bytes:
/// another task stats the file and commits after the first extent is
/// freed, then a crash comes before the truncate returns.
const CRASH_BETWEEN_EXTENTS: &str = "# ext4sim trace v1\nseed 1\nmount \ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\n\
    op write path=\"/a\" offset=0 len=16384 seed=1\n\
    op write path=\"/a\" offset=40960 len=16384 seed=2\n\
    op write path=\"/a\" offset=81920 len=16384 seed=3\nop sync\n\
    begin truncate path=\"/a\" size=6000\npart\n\
    task 1\nop stat path=\"/a\"\nop fiemap path=\"/a\" sync=false\nop sync\n\
    crash seed=5\nop stat path=\"/a\"\nop fiemap path=\"/a\" sync=false\n";

#[test]
fn a_truncate_in_flight_is_seen_part_done_and_a_crash_between_extents_is_finished_at_mount() {
    let (t, r) = real_engine_passes(CRASH_BETWEEN_EXTENTS);
    assert_eq!((r.stats.truncate_parts, r.stats.crashes), (1, 1), "one extent freed before the crash");
    assert_eq!(orphan_figure(&r, "truncated at mount"), 1, "mount finished the truncate");
    let bad = run_steps(&Buggy(InjectedBug::TruncateLeavesNoOrphan), &t.spec, &t.steps).unwrap();
    // The recovered image's fsck finds what e2fsck would: written blocks
    // past EOF that no orphan entry finishes.
    match &bad.failure {
        Some(Failure::Crash { what, .. }) => assert!(what.contains("past EOF"), "{what}"),
        other => panic!("the twin leaves blocks past EOF after the crash: {other:?}"),
    }
}

#[test]
fn a_truncate_that_leaves_no_orphan_is_found_by_random_tasks() {
    let shrunk = found_by_four_tasks(InjectedBug::TruncateLeavesNoOrphan, 400);
    let steps = &shrunk.trace.steps;
    let part = steps.iter().position(|s| *s == ext4_sim::trace::Step::Part).unwrap_or_else(|| panic!("a truncate goes part by part: {steps:?}"));
    assert!(steps[part..].iter().any(|s| matches!(s, ext4_sim::trace::Step::Crash { .. })), "a crash after the part: {steps:?}");
}

/// An unlinked file held by a descriptor, ftruncated to 0: another task
/// closes the descriptor after the first extent is freed, then creates,
/// writes and fsyncs another file; a crash after the ftruncate returns.
/// The file lives until the ftruncate's fdput, which frees it.
///
/// The twin whose close releases the file at once is invisible here: the
/// new file gets the freed inode's number, whose i_rwsem and
/// invalidate_lock the ftruncate still holds, so nothing can give it
/// blocks for the ftruncate's later parts to free (its write waits until
/// the ftruncate returns).
#[test]
fn an_ftruncate_in_flight_keeps_its_file_past_a_close_of_its_descriptor() {
    let text = "# ext4sim trace v1\nseed 1\nmount \ntasks 2\nfsck_every 0\n\
        op create path=\"/a\" perm=644\n\
        op write path=\"/a\" offset=0 len=16384 seed=1\n\
        op write path=\"/a\" offset=40960 len=16384 seed=2\nop sync\n\
        op open path=\"/a\" slot=3\nop unlink path=\"/a\"\n\
        begin ftruncate slot=3 size=0\npart\n\
        task 1\nop close slot=3\nop create path=\"/b\" perm=644\nop write path=\"/b\" offset=0 len=8192 seed=3\nop fsync path=\"/b\"\n\
        task 0\npart\nfinish\n\
        task 1\nop stat path=\"/b\"\nop read path=\"/b\" offset=0 len=8192\nop sync\ncrash seed=2\nop stat path=\"/b\"\n";
    let (_, r) = real_engine_passes(text);
    assert_eq!((r.stats.truncate_parts, r.stats.crashes), (2, 1));
    assert_eq!(orphan_figure(&r, "closes under a write"), 1, "the close left the file to the ftruncate");
    assert_eq!(orphan_figure(&r, "freed at close"), 1, "freed at the ftruncate's fdput");
}
