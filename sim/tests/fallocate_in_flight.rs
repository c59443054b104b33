//! An allocating fallocate in flight maps its range piece by piece (engine
//! `fallocate_parts`): other tasks see it part done, with the size grown
//! over what is mapped so far, and a crash after a commit between pieces
//! keeps those pieces without the rest, as ext4 keeps them.

use ext4_engine::fs::test_hooks::InjectedBug;
use ext4_sim::failure::Failure;
use ext4_sim::run::run_steps;

mod twins;
use twins::{found_by_four_tasks, real_engine_passes, Buggy};

/// Blocks 10..14 and 30..34 written, then a fallocate of 0..40 blocks and
/// 100 bytes: its first piece is the hole 0..10. Another task stats,
/// FIEMAPs and syncs after it; the second piece (14..30) follows, and a
/// crash comes before the fallocate returns.
const CRASH_BETWEEN_PIECES: &str = "# ext4sim trace v1\nseed 1\nmount \ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\n\
    op write path=\"/a\" offset=40960 len=16384 seed=1\n\
    op write path=\"/a\" offset=122880 len=16384 seed=2\nop sync\n\
    begin fallocate path=\"/a\" mode=0x0 offset=0 len=163940\npart\n\
    task 1\nop stat path=\"/a\"\nop fiemap path=\"/a\" sync=false\nop sync\n\
    task 0\npart\n\
    task 1\nop stat path=\"/a\"\nop read path=\"/a\" offset=0 len=163940\n\
    crash seed=5\nop stat path=\"/a\"\nop fiemap path=\"/a\" sync=false\n";

#[test]
fn a_fallocate_in_flight_is_seen_part_done_and_a_crash_keeps_its_committed_pieces() {
    let (_, r) = real_engine_passes(CRASH_BETWEEN_PIECES);
    assert_eq!((r.stats.fallocate_parts, r.stats.crashes), (2, 1), "two pieces mapped before the crash");
}

/// A growing fallocate of 3 blocks and 100 bytes into an empty file: one
/// piece maps it all, and the size it sets must stop at the range's end.
#[test]
fn a_piece_that_sizes_past_the_range_is_seen_by_the_next_stat() {
    let text = "# ext4sim trace v1\nseed 1\nmount \ntasks 2\nfsck_every 0\n\
        op create path=\"/a\" perm=644\nop sync\n\
        begin fallocate path=\"/a\" mode=0x0 offset=0 len=12388\npart\n\
        task 1\nop stat path=\"/a\"\n\
        task 0\nfinish\n";
    let (t, r) = real_engine_passes(text);
    assert_eq!(r.stats.fallocate_parts, 1);
    let bad = run_steps(&Buggy(InjectedBug::FallocatePieceSizesPastRange), &t.spec, &t.steps).unwrap();
    match &bad.failure {
        Some(Failure::Divergence(d)) => assert!(matches!(d.op, ext4_model::Op::Stat { .. }), "{d:?}"),
        other => panic!("the twin's size shows at the stat between the halves: {other:?}"),
    }
}

#[test]
fn a_piece_that_sizes_past_the_range_is_found_by_random_tasks() {
    let shrunk = found_by_four_tasks(InjectedBug::FallocatePieceSizesPastRange, 400);
    let steps = &shrunk.trace.steps;
    assert!(steps.contains(&ext4_sim::trace::Step::Part), "a fallocate goes part by part: {steps:?}");
}

/// Three extents (blocks 0..4, 10..14 and 20..24) synced, then dirty
/// delayed data written over blocks 4..10 and 14..20: a punch of blocks
/// 2..22 and 100 bytes frees its last extent first. Another task stats,
/// FIEMAPs and syncs between its parts, then a crash comes before it
/// returns: the recovered file keeps the extents not yet freed.
const PUNCH_BETWEEN_EXTENTS: &str = "# ext4sim trace v1\nseed 1\nmount \ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\n\
    op write path=\"/a\" offset=0 len=16384 seed=1\n\
    op write path=\"/a\" offset=40960 len=16384 seed=2\n\
    op write path=\"/a\" offset=81920 len=16384 seed=3\nop sync\n\
    op write path=\"/a\" offset=16384 len=24576 seed=4\n\
    op write path=\"/a\" offset=57344 len=24576 seed=5\n\
    begin fallocate path=\"/a\" mode=0x3 offset=8292 len=81920\npart\n\
    task 1\nop stat path=\"/a\"\nop fiemap path=\"/a\" sync=false\nop sync\nop fiemap path=\"/a\" sync=false\n\
    task 0\npart\n\
    task 1\nop stat path=\"/a\"\n\
    crash seed=5\nop stat path=\"/a\"\nop fiemap path=\"/a\" sync=false\n";

#[test]
fn a_punch_in_flight_is_seen_part_done_and_a_crash_keeps_what_it_freed() {
    let (t, r) = real_engine_passes(PUNCH_BETWEEN_EXTENTS);
    assert_eq!((r.stats.fallocate_parts, r.stats.crashes), (2, 1), "two extents freed before the crash");
    // The twin leaves the hole's dirty data cached between the parts: the
    // other task's sync writes it into a block the punch has not freed yet,
    // and the file recovered after the crash holds it inside the hole.
    let bad = run_steps(&Buggy(InjectedBug::PunchDropsCacheLate), &t.spec, &t.steps).unwrap();
    match &bad.failure {
        Some(Failure::Crash { what, .. }) => assert!(what.contains("matches none of"), "{what}"),
        other => panic!("the twin's data shows in the hole after the crash: {other:?}"),
    }
}

#[test]
fn a_punch_that_drops_its_cache_late_is_found_by_random_tasks() {
    let shrunk = found_by_four_tasks(InjectedBug::PunchDropsCacheLate, 400);
    assert!(shrunk.trace.steps.contains(&ext4_sim::trace::Step::Part), "a punch goes part by part: {:?}", shrunk.trace.steps);
}
