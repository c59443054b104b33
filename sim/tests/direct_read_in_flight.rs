//! A direct read in flight (engine `direct_read_parts`): between its
//! bios' submission and their completion it holds its file's i_rwsem
//! shared and its DIO count, so truncates and writers of the file sleep
//! until it returns and the blocks its bios read keep their bytes.

use ext4_engine::fs::test_hooks::InjectedBug;
use ext4_sim::failure::Failure;
use ext4_sim::run::run_steps;

mod twins;
use twins::{found_by_four_tasks, real_engine_passes, Buggy};

/// Three blocks written (delayed), then a direct read of them submitted;
/// another task stats, reads and begins a truncate of the file, which
/// takes no lock until the read returns.
const TRUNCATE_BETWEEN: &str = "# ext4sim trace v1\nseed 1\nmount \ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\n\
    op write path=\"/a\" offset=0 len=12288 seed=1\n\
    begin direct_read path=\"/a\" offset=0 len=12288\npart\n\
    task 1\nop stat path=\"/a\"\nop read path=\"/a\" offset=0 len=100\n\
    begin truncate path=\"/a\" size=0\npart\n\
    task 0\nfinish\n\
    task 1\nfinish\nop stat path=\"/a\"\n";

#[test]
fn a_direct_read_in_flight_keeps_a_truncate_of_its_file_waiting() {
    let (_, r) = real_engine_passes(TRUNCATE_BETWEEN);
    assert_eq!(r.stats.direct_read_parts, 1, "the submission ran apart");
    assert_eq!(r.stats.truncate_parts, 0, "the truncate took no lock while the read held i_rwsem");
}

/// A direct read of three synced blocks submitted; another task begins a
/// buffered write at 0 (its first folio is a part) and a third fsyncs the
/// file. Holding i_rwsem, the read keeps the write from its folio: the
/// fsync has nothing to write, and the read returns the old bytes.
const WRITE_BETWEEN: &str = "# ext4sim trace v1\nseed 1\nmount \ntasks 3\nfsck_every 0\n\
    op create path=\"/a\" perm=644\n\
    op write path=\"/a\" offset=0 len=12288 seed=1\nop sync\n\
    begin direct_read path=\"/a\" offset=0 len=12288\npart\n\
    task 1\nbegin write path=\"/a\" offset=0 len=100 seed=9\npart\n\
    task 2\nop fsync path=\"/a\"\n\
    task 0\nfinish\n\
    task 1\nfinish\nop read path=\"/a\" offset=0 len=200\n";

#[test]
fn a_direct_read_in_flight_keeps_writers_off_the_blocks_its_bios_read() {
    let (t, r) = real_engine_passes(WRITE_BETWEEN);
    assert_eq!((r.stats.direct_read_parts, r.stats.write_parts), (1, 0));
    // Let go of i_rwsem at submission, the read is in flight holding no
    // lock: the lock-discipline check stops the run there, before the
    // writer's bytes reach the blocks the bios read.
    let bad = run_steps(&Buggy(InjectedBug::DirectReadUnlocksEarly), &t.spec, &t.steps).unwrap();
    match &bad.failure {
        Some(Failure::Lock { op: Some(ext4_model::OpKind::DirectRead), what, .. }) => assert!(what.contains("no longer holds it"), "{what}"),
        other => panic!("the twin's read in flight holds no lock: {other:?}"),
    }
}

#[test]
fn a_direct_read_that_unlocks_early_is_found_by_random_tasks() {
    let shrunk = found_by_four_tasks(InjectedBug::DirectReadUnlocksEarly, 600);
    assert!(shrunk.trace.steps.len() < 40, "{}", shrunk.trace.to_text());
}
