//! What the lockstep pair promises, against the model-as-target double:
//! answers compared and counted, the trace hash over ops and answers in
//! order, locks held to the ops in flight, and full checks that fsck and
//! read the image back where the last check stopped.

use super::*;
use crate::run::test_target::{lockstep, Knobs, Plain};

fn mkdir(path: &str) -> Op {
    Op::Mkdir { path: path.into(), perm: 0o755 }
}

fn create(path: &str) -> Op {
    Op::Create { path: path.into(), perm: 0o644 }
}

fn stat(path: &str) -> Op {
    Op::Stat { path: path.into() }
}

fn write(path: &str, seed: u64) -> Op {
    Op::Write { path: path.into(), offset: 0, len: 100, seed }
}

fn hash_of(ops: &[Op]) -> u64 {
    let mut ls = lockstep(Knobs::default());
    for op in ops {
        ls.step(op).unwrap().unwrap();
    }
    ls.trace_hash()
}

fn eio_on_stat(op: &Op) -> Option<Outcome> {
    matches!(op, Op::Stat { .. }).then_some(Err(Errno::EIO))
}

#[test]
fn ops_both_sides_answer_alike_pass_and_count_in_the_stats() {
    let mut ls = lockstep(Knobs::default());
    assert_eq!(ls.step(&mkdir("/d")), Ok(Ok(Reply::Done)));
    assert!(matches!(ls.step(&stat("/d")), Ok(Ok(Reply::Stat(_)))));
    assert_eq!(ls.step(&Op::Rmdir { path: "/nope".into() }), Ok(Err(Errno::ENOENT)));
    assert_eq!(ls.step(&create("/d/f")), Ok(Ok(Reply::Done)));
    assert_eq!(ls.step(&write("/d/f", 1)), Ok(Ok(Reply::Written(100))));
    assert_eq!(ls.index(), 5);
    let stats = ls.stats();
    assert_eq!(stats.ops, 5);
    assert_eq!(stats.ok, BTreeMap::from([(OpKind::Mkdir, 1), (OpKind::Stat, 1), (OpKind::Create, 1), (OpKind::Write, 1)]));
    assert_eq!(stats.errors.get(&Errno::ENOENT), Some(&1));
    assert_eq!((stats.fscks, stats.faults, stats.crashes), (0, 0, 0));
    // The target really ran them: the written bytes are on its side too.
    let (mut model, mut target) = ls.into_parts();
    let written = target.fs.read("/d/f", 0, 100).unwrap();
    assert_eq!((written.len(), Ok(written)), (100, model.read("/d/f", 0, 100)));
    assert_eq!(target.ops, 5);
}

#[test]
fn a_differing_answer_is_a_divergence_naming_the_op_index_op_and_both_outcomes() {
    let mut ls = lockstep(Knobs { lie: Some(eio_on_stat), ..Knobs::default() });
    ls.step(&mkdir("/d")).unwrap().unwrap();
    match ls.step(&stat("/d")) {
        Err(Failure::Divergence(d)) => {
            assert_eq!((d.index, &d.op, &d.actual), (1, &stat("/d"), &Err(Errno::EIO)));
            assert!(matches!(d.model, Ok(Reply::Stat(ref s)) if s.nlink == 2), "{:?}", d.model);
            assert!(!d.why.is_empty());
        }
        other => panic!("expected a divergence, got {other:?}"),
    }
}

#[test]
fn the_trace_hash_follows_the_ops_in_order() {
    let ops = [mkdir("/d"), create("/d/f"), write("/d/f", 1), stat("/d/f")];
    assert_eq!(hash_of(&ops), hash_of(&ops), "same ops, same hash");
    let mut other_bytes = ops.clone();
    other_bytes[2] = write("/d/f", 2);
    assert_ne!(hash_of(&ops), hash_of(&other_bytes), "a different op, though answered alike");
    assert_ne!(hash_of(&[mkdir("/a"), mkdir("/b")]), hash_of(&[mkdir("/b"), mkdir("/a")]), "the same ops in another order");
    assert_ne!(hash_of(&[]), hash_of(&[Op::Sync]));
}

#[test]
fn the_trace_hash_follows_the_answers_too() {
    // The same op, answered ENOENT on a fresh pair and with a stat where
    // both sides already hold the directory.
    let mut fresh = lockstep(Knobs::default());
    assert_eq!(fresh.step(&stat("/d")), Ok(Err(Errno::ENOENT)));
    let config = MountConfig::default();
    let (mut model, mut target) = (Model::new(&config).unwrap(), Plain::new(&config, Knobs::default()));
    model.mkdir("/d", 0o755).unwrap();
    target.fs.mkdir("/d", 0o755).unwrap();
    let mut made = Lockstep::new(config, model, target);
    assert!(matches!(made.step(&stat("/d")), Ok(Ok(Reply::Stat(_)))));
    assert_ne!(fresh.trace_hash(), made.trace_hash());
}

#[test]
fn an_op_run_in_two_halves_hashes_apart_from_the_same_op_run_whole() {
    let fsync = Op::Fsync { path: "/f".into() };
    let mut whole = lockstep(Knobs::default());
    whole.step(&create("/f")).unwrap().unwrap();
    // A target that cannot split runs the op whole from `begin`.
    assert!(matches!(whole.begin(&fsync), Ok(Begun::Completed(Ok(Reply::Done)))));
    let mut split = lockstep(Knobs { splits_fsync: true, ..Knobs::default() });
    split.step(&create("/f")).unwrap().unwrap();
    let Ok(Begun::InFlight(flight)) = split.begin(&fsync) else { panic!("a splitting target leaves the fsync in flight") };
    assert_eq!((flight.index, split.index()), (1, 2));
    assert_eq!(split.finish(flight), Ok(Ok(Reply::Done)));
    assert_eq!(split.stats().ops, whole.stats().ops, "two halves are one op");
    assert_ne!(split.trace_hash(), whole.trace_hash());
}

#[test]
fn a_lock_held_after_its_op_returned_is_a_lock_failure_unless_an_op_in_flight_owes_it() {
    let mut ls = lockstep(Knobs::default());
    ls.step(&mkdir("/d")).unwrap().unwrap();
    assert_eq!(ls.check_locks(Vec::new()), Ok(()));
    ls.target_mut().locks.push(("i_rwsem of /d".into(), 3));
    match ls.check_locks(Vec::new()) {
        Err(Failure::Lock { index, op, what }) => {
            assert_eq!((index, op), (1, Some(OpKind::Mkdir)));
            assert!(what.contains("i_rwsem of /d is still held by 3") && what.contains("mkdir"), "{what}");
        }
        other => panic!("expected a lock failure, got {other:?}"),
    }
    assert_eq!(ls.check_locks(vec![3]), Ok(()), "the holder is an op in flight");
    ls.target_mut().locks.clear();
    match ls.check_locks(vec![3]) {
        Err(Failure::Lock { what, .. }) => assert!(what.contains("no longer holds it"), "{what}"),
        other => panic!("expected a lock failure, got {other:?}"),
    }
}

#[test]
fn a_full_check_fscks_the_target_and_reads_every_name_back() {
    let mut ls = lockstep(Knobs::default());
    for op in [mkdir("/d"), create("/d/f"), write("/d/f", 3)] {
        ls.step(&op).unwrap().unwrap();
    }
    assert_eq!(ls.full_check(), Ok(()));
    assert_eq!(ls.stats().fscks, 1);
    let target = ls.target_mut();
    assert_eq!(target.fscks_at, [3]);
    assert_eq!(target.read_back, [["/", "/d", "/d/f", "/lost+found"]]);
}

#[test]
fn an_image_that_reads_back_other_than_the_model_is_a_read_back_failure() {
    let mut ls = lockstep(Knobs { forgets_on_disk: true, ..Knobs::default() });
    assert_eq!(ls.full_check(), Ok(()), "nothing written yet: nothing lost");
    ls.step(&mkdir("/d")).unwrap().unwrap();
    match ls.full_check() {
        Err(Failure::ReadBack { index, what }) => {
            assert_eq!(index, 1);
            assert!(what.contains("stat /"), "{what}");
        }
        other => panic!("expected a read-back failure, got {other:?}"),
    }
}

#[test]
fn a_target_fsck_error_is_a_target_fsck_failure() {
    let mut ls = lockstep(Knobs { fsck_fails_from: Some(2), ..Knobs::default() });
    ls.step(&mkdir("/d")).unwrap().unwrap();
    assert_eq!(ls.full_check(), Ok(()));
    ls.step(&mkdir("/e")).unwrap().unwrap();
    assert_eq!(ls.full_check(), Err(Failure::TargetFsck { index: 2, what: "the double's fsck fails after 2 ops".into() }));
}

#[test]
fn successive_full_checks_read_back_on_from_where_the_last_stopped_and_the_final_one_reads_every_name() {
    let config = MountConfig::default();
    let (mut model, mut target) = (Model::new(&config).unwrap(), Plain::new(&config, Knobs::default()));
    let mut names = vec!["/".to_string(), "/lost+found".to_string()];
    for i in 0..600 {
        let path = format!("/f{i:03}");
        model.create(&path, 0o644).unwrap();
        target.fs.create(&path, 0o644).unwrap();
        names.push(path);
    }
    names.sort();
    let mut ls = Lockstep::new(config, model, target);
    ls.full_check().unwrap();
    ls.full_check().unwrap();
    ls.final_check().unwrap();
    let per = usize::try_from(READ_BACK_PER_CHECK.names).unwrap();
    assert!(names.len() < 2 * per, "the second check wraps around");
    let from = |start: usize, count: usize| names.iter().cycle().skip(start).take(count).cloned().collect::<Vec<_>>();
    let seen = &ls.target_mut().read_back;
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0], from(0, per));
    assert_eq!(seen[1], from(per, per));
    assert_eq!(seen[2], from(2 * per % names.len(), names.len()));
}
