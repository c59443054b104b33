//! A buffered read in flight (engine and model `read_parts`): it copies
//! folio by folio holding no lock between parts, so what runs between them
//! shows in what it returns, torn by a write, cut short by a truncate, and
//! an unlink leaves its file an orphan until it returns.

use ext4_engine::fs::test_hooks::InjectedBug;
use ext4_sim::failure::Failure;
use ext4_sim::run::run_steps;

mod twins;
use twins::{found_by_four_tasks, orphan_figure, real_engine_passes, Buggy};

/// Three synced pages of one pattern; a read of them copies its first
/// page, another task writes the second page anew and truncates into the
/// third, and the read goes on: the second page new, the third cut.
const TORN: &str = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\n\
    op write path=\"/a\" offset=0 len=12288 seed=1\nop sync\n\
    begin read path=\"/a\" offset=0 len=12288\npart\n\
    task 1\nop write path=\"/a\" offset=4096 len=4096 seed=2\n\
    task 0\npart\n\
    task 1\nop truncate path=\"/a\" size=8200\n\
    task 0\nfinish\n";

#[test]
fn a_read_in_flight_is_torn_by_a_write_and_cut_by_a_truncate_between_its_parts() {
    let (t, r) = real_engine_passes(TORN);
    assert_eq!(r.stats.read_parts, 2, "two folios copied apart");
    // Keeping the size its first part saw, the read copies past the
    // truncate: the model's read ends at 8200, the twin's goes on.
    let bad = run_steps(&Buggy(InjectedBug::ReadPartKeepsFirstSize), &t.spec, &t.steps).unwrap();
    match &bad.failure {
        Some(Failure::Divergence(d)) => assert_eq!(d.op.kind(), ext4_model::OpKind::Read, "{d:?}"),
        other => panic!("the twin reads past the new size: {other:?}"),
    }
}

/// A read copies its first page; another task unlinks the file and
/// creates one by the same name: the read goes on with its own file, an
/// orphan, which its return frees.
const UNLINK_BETWEEN: &str = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\n\
    op write path=\"/a\" offset=0 len=8192 seed=1\n\
    begin read path=\"/a\" offset=0 len=8192\npart\n\
    task 1\nop unlink path=\"/a\"\nop create path=\"/a\" perm=644\nop write path=\"/a\" offset=0 len=8192 seed=3\n\
    task 0\nfinish\nop read path=\"/a\" offset=0 len=100\n";

#[test]
fn an_unlink_between_a_reads_parts_leaves_an_orphan_until_it_returns() {
    let (_, r) = real_engine_passes(UNLINK_BETWEEN);
    assert_eq!(r.stats.read_parts, 1);
    assert_eq!(orphan_figure(&r, "added"), 1, "unlinked while the read held it");
    assert_eq!(orphan_figure(&r, "freed at close"), 1, "freed when the read returned");
}

/// A data=journal file read part way; another task begins clearing its
/// journal flag, which holds invalidate_lock and drops the file's cache:
/// the rest of the read waits for the switch, then reads the blocks back.
const SWITCH_BETWEEN: &str = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\nop set_journal_data path=\"/a\" enable=true\n\
    op write path=\"/a\" offset=0 len=12288 seed=1\nop fsync path=\"/a\"\n\
    begin read path=\"/a\" offset=0 len=12288\npart\n\
    task 1\nbegin set_journal_data path=\"/a\" enable=false\n\
    task 0\nfinish\n\
    task 1\nfinish\nop stat path=\"/a\"\n";

#[test]
fn the_rest_of_a_read_waits_for_a_journal_switch_holding_invalidate_lock() {
    let (_, r) = real_engine_passes(SWITCH_BETWEEN);
    assert_eq!(r.stats.read_parts, 1);
    assert!(r.stats.lock_sleeps >= 1, "the read's finish slept on the switch");
}

/// A pread through slot 0 copies its first page; another task closes the
/// slot, opens another file into it and unlinks the first: the pread goes
/// on with the file its descriptor held when it began, an orphan, which
/// its fdput frees. A second pread began before the close but ran no part:
/// it reads all of the pinned file at its return.
const SLOT_CLOSED_BETWEEN: &str = "# ext4sim trace v1\nseed 1\nmount max_folio_order=0\ntasks 3\nfsck_every 0\n\
    op create path=\"/a\" perm=644\nop create path=\"/b\" perm=644\n\
    op write path=\"/a\" offset=0 len=8192 seed=1\nop write path=\"/b\" offset=0 len=8192 seed=2\n\
    op open path=\"/a\" slot=0\n\
    begin pread slot=0 offset=0 len=8192\npart\n\
    task 2\nbegin pread slot=0 offset=100 len=8192\n\
    task 1\nop close slot=0\nop open path=\"/b\" slot=0\nop unlink path=\"/a\"\n\
    task 0\nfinish\n\
    task 2\nfinish\nop pread slot=0 offset=0 len=100\n";

#[test]
fn a_pread_keeps_the_file_its_slot_held_when_it_began() {
    // Every part and return is held to the model's: bytes of /b (the
    // slot's file now) would diverge.
    let (_, r) = real_engine_passes(SLOT_CLOSED_BETWEEN);
    assert_eq!(r.stats.read_parts, 1);
    assert_eq!(orphan_figure(&r, "added"), 1, "unlinked while the preads held it");
    assert_eq!(orphan_figure(&r, "freed at close"), 1, "freed at the last fdput");
}

/// Shrunk from four-task seed 6579: a read copies its first folio; the
/// file's dirty byte expires and the flusher begins writing it back,
/// holding its folio locked across the I/O; another task unlinks the file,
/// which the read still holds. The read's return would evict the orphan
/// (truncate_inode_pages_final locks every folio), so it sleeps on the
/// flusher's folio lock until the write-back is done.
const EVICT_AT_RETURN: &str = "# ext4sim trace v1\nseed 6579\nmount \ntasks 2\nfsck_every 0\n\
    op create path=\"/a\" perm=644\nop write path=\"/a\" offset=0 len=1 seed=1\n\
    begin read path=\"/a\" offset=0 len=1\npart\n\
    task 1\npause ns=25467994668\nflusher\npause ns=50318041469\nflusher\nop unlink path=\"/a\"\nflusher\n\
    task 0\nfinish\n";

#[test]
fn a_reads_return_that_evicts_an_orphan_waits_for_the_flushers_folio_locks() {
    let (_, r) = real_engine_passes(EVICT_AT_RETURN);
    assert_eq!(r.stats.lock_sleeps_on.get("folio lock"), Some(&1), "{:?}", r.stats.lock_sleeps_on);
    assert_eq!(orphan_figure(&r, "freed at close"), 1, "evicted at the read's return");
}

#[test]
fn a_read_that_keeps_its_first_size_is_found_by_random_tasks() {
    let shrunk = found_by_four_tasks(InjectedBug::ReadPartKeepsFirstSize, 600);
    assert!(shrunk.trace.steps.len() < 40, "{}", shrunk.trace.to_text());
}
