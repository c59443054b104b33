//! The crash-state allowance: which recovered filesystems the model accepts.
//! A "recovered filesystem" here is a second model put in the state to test.

use ext4_model::op::pattern;
use ext4_testkit::strategy;
use ext4_model::{CrashViolation, DataMode, FiemapRequest, FileSystem, Model, MountConfig, Op};
use proptest::prelude::*;

fn ordered() -> MountConfig {
    MountConfig::default()
}

fn run(m: &mut Model, ops: &[Op]) {
    for op in ops {
        let _ = m.apply(op);
    }
}

fn write(path: &str, offset: u64, len: u32, seed: u64) -> Op {
    Op::Write { path: path.into(), offset, len, seed }
}

#[test]
fn current_and_synced_states_are_allowed() {
    let mut m = Model::new(&ordered()).unwrap();
    run(&mut m, &[Op::Mkdir { path: "/d".into(), perm: 0o755 }, Op::Create { path: "/d/f".into(), perm: 0o644 }, write("/d/f", 0, 9000, 1)]);
    let mut synced = m.clone();
    run(&mut synced, &[Op::Sync]);
    run(&mut m, &[Op::Sync, write("/d/f", 100, 50, 2), Op::Create { path: "/g".into(), perm: 0o600 }]);
    let env = m.crash_envelope();
    assert_eq!(env.check(&mut m.clone()).unwrap().prefix, Some(m.seq()));
    let verdict = env.check(&mut synced).unwrap();
    // The namespace after the sync and after the overwrite are the same.
    let prefix = verdict.prefix.unwrap();
    assert!(prefix >= synced.seq() && prefix < m.seq(), "prefix {prefix}");
    assert_eq!(verdict.files_checked, 1);
}

#[test]
fn losing_synced_state_is_refused() {
    let mut m = Model::new(&ordered()).unwrap();
    let empty = m.clone();
    run(&mut m, &[Op::Create { path: "/f".into(), perm: 0o644 }, Op::Sync]);
    let err = m.crash_envelope().check(&mut empty.clone()).unwrap_err();
    assert!(matches!(err, CrashViolation::Namespace { .. }), "{err}");
}

#[test]
fn fsynced_data_survives() {
    let mut m = Model::new(&ordered()).unwrap();
    run(&mut m, &[Op::Create { path: "/f".into(), perm: 0o644 }, write("/f", 0, 3000, 7), Op::Fsync { path: "/f".into() }]);
    let mut before_fsync = Model::new(&ordered()).unwrap();
    run(&mut before_fsync, &[Op::Create { path: "/f".into(), perm: 0o644 }]);
    let env = m.crash_envelope();
    // An empty /f: the namespace is fine but the size is not.
    assert!(matches!(env.check(&mut before_fsync).unwrap_err(), CrashViolation::Size { .. }));
    // Right size, one sector wrong.
    let mut corrupt = m.clone();
    corrupt.write("/f", 1024, &[0xAB; 3]).unwrap();
    assert!(matches!(env.check(&mut corrupt).unwrap_err(), CrashViolation::Data { offset: 1024, .. }));
    assert!(env.check(&mut m.clone()).is_ok());
}

#[test]
fn unsynced_data_may_be_old_new_or_torn_by_sector() {
    let mut m = Model::new(&ordered()).unwrap();
    run(&mut m, &[Op::Create { path: "/f".into(), perm: 0o644 }, write("/f", 0, 4096, 1), Op::Sync, write("/f", 0, 4096, 2)]);
    let env = m.crash_envelope();
    let (old, new) = (pattern(1, 4096), pattern(2, 4096));
    let mut torn = old.clone();
    torn[512..1024].copy_from_slice(&new[512..1024]);
    let mut r = m.clone();
    r.write("/f", 0, &torn).unwrap();
    assert!(env.check(&mut r).is_ok(), "sector-torn mix of old and new is allowed");
    torn[100] = new[100];
    let mut r = m.clone();
    r.write("/f", 0, &torn).unwrap();
    assert!(env.check(&mut r).is_err(), "a mix inside one sector is not");
}

/// An fsync that other ops overtake while its transaction commits: once it
/// returns, what it fixed when its transaction closed is durable and what ran
/// in between is not; before it returns nothing new is promised.
#[test]
fn an_overtaken_fsync_promises_what_its_transaction_closed_on() {
    let mut m = Model::new(&ordered()).unwrap();
    run(&mut m, &[Op::Create { path: "/f".into(), perm: 0o644 }, Op::Sync, write("/f", 0, 3000, 1)]);
    let fixed = m.clone();
    let pending = m.begin_fsync("/f", false).unwrap();
    run(&mut m, &[write("/f", 0, 5000, 2), Op::Create { path: "/g".into(), perm: 0o644 }]);
    let empty = {
        let mut e = Model::new(&ordered()).unwrap();
        run(&mut e, &[Op::Create { path: "/f".into(), perm: 0o644 }]);
        e
    };
    // In flight: losing the write is still allowed.
    assert!(m.crash_envelope().check(&mut empty.clone()).is_ok());
    m.finish_fsync(pending);
    let env = m.crash_envelope();
    assert!(matches!(env.check(&mut empty.clone()).unwrap_err(), CrashViolation::Size { .. }), "the closed-on write is durable");
    assert!(env.check(&mut fixed.clone()).is_ok(), "the ops that overtook it may be lost");
    assert!(env.check(&mut m.clone()).is_ok());
    // A missing file fails the first half, as fsync would.
    assert_eq!(m.begin_fsync("/nope", true).unwrap_err(), ext4_model::Errno::ENOENT);
}

/// Stale data in a newly allocated block: refused under data=ordered,
/// allowed under data=writeback.
#[test]
fn stale_blocks_only_under_writeback() {
    for (mode, allowed) in [(DataMode::Ordered, false), (DataMode::Writeback, true), (DataMode::Journal, false)] {
        let cfg = MountConfig { data: Some(mode), ..MountConfig::default() };
        let mut m = Model::new(&cfg).unwrap();
        run(&mut m, &[Op::Create { path: "/f".into(), perm: 0o644 }, Op::Sync, write("/f", 0, 2000, 3)]);
        let mut stale = m.clone();
        stale.write("/f", 0, &pattern(99, 2000)).unwrap();
        assert_eq!(m.crash_envelope().check(&mut stale).is_ok(), allowed, "{mode:?}");
    }
}

#[test]
fn rename_recovers_to_exactly_one_name() {
    let mut m = Model::new(&ordered()).unwrap();
    run(&mut m, &[Op::Create { path: "/a".into(), perm: 0o644 }, write("/a", 0, 100, 1), Op::Sync]);
    let mut both = m.clone();
    let mut neither = m.clone();
    run(&mut m, &[Op::Rename { from: "/a".into(), to: "/b".into() }]);
    let env = m.crash_envelope();
    both.link("/a", "/b").unwrap();
    assert!(matches!(env.check(&mut both).unwrap_err(), CrashViolation::Namespace { .. }));
    neither.unlink("/a").unwrap();
    assert!(env.check(&mut neither).is_err());
}

#[test]
fn fsync_sets_the_namespace_floor() {
    let mut m = Model::new(&ordered()).unwrap();
    run(&mut m, &[Op::Create { path: "/a".into(), perm: 0o644 }, Op::Create { path: "/b".into(), perm: 0o644 }]);
    let only_a = {
        let mut x = Model::new(&ordered()).unwrap();
        run(&mut x, &[Op::Create { path: "/a".into(), perm: 0o644 }]);
        x
    };
    assert!(m.crash_envelope().check(&mut only_a.clone()).is_ok(), "before fsync any prefix goes");
    run(&mut m, &[Op::Fsync { path: "/b".into() }]);
    assert!(m.crash_envelope().check(&mut only_a.clone()).is_err(), "fsync(/b) commits its creation and what came before");
}

#[test]
fn no_journal_is_unchecked() {
    let cfg = MountConfig { has_journal: false, ..MountConfig::default() };
    let mut m = Model::new(&cfg).unwrap();
    run(&mut m, &[Op::Create { path: "/a".into(), perm: 0o644 }, Op::Sync]);
    let v = m.crash_envelope().check(&mut Model::new(&cfg).unwrap()).unwrap();
    assert_eq!(v.prefix, None);
}

#[test]
fn adopt_rebuilds_the_same_tree() {
    let mut m = Model::new(&MountConfig { delalloc: Some(false), ..MountConfig::default() }).unwrap();
    run(
        &mut m,
        &[
            Op::Mkdir { path: "/d".into(), perm: 0o750 },
            Op::Create { path: "/d/f".into(), perm: 0o640 },
            write("/d/f", 5000, 7000, 4),
            Op::Fallocate { path: "/d/f".into(), mode: ext4_model::FallocFlags(1), offset: 20000, len: 9000 },
            Op::Link { from: "/d/f".into(), to: "/h".into() },
            Op::Symlink { target: "d/f".into(), path: "/s".into() },
            Op::Sync,
        ],
    );
    let cfg = MountConfig { delalloc: Some(false), ..MountConfig::default() };
    let mut adopted = Model::adopt(&cfg, m.limits(), &mut m.clone()).unwrap();
    let a = ext4_model::durability::view_tree(&mut adopted).unwrap();
    let b = ext4_model::durability::view_tree(&mut m).unwrap();
    assert_eq!(a.nodes, b.nodes);
    assert_eq!(adopted.read("/h", 0, 30000).unwrap(), m.read("/h", 0, 30000).unwrap());
    assert_eq!(adopted.fiemap("/h", FiemapRequest::whole(0)).unwrap(), m.fiemap("/h", FiemapRequest::whole(0)).unwrap());
    assert_eq!(adopted.used_blocks(), m.used_blocks());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Without fsyncs after the last sync, every state from the sync on is a
    /// state a crash may leave, and the final one always is. A mapped
    /// write's msync is an fdatasync, so it is left out with the fsyncs.
    #[test]
    fn every_prefix_after_the_floor_is_allowed(cfg in strategy::valid_mount_config(),
                                               before in prop::collection::vec(strategy::op(), 0..30),
                                               after in prop::collection::vec(strategy::op(), 0..30)) {
        let mut m = Model::new(&cfg).unwrap();
        run(&mut m, &before);
        run(&mut m, &[Op::Sync]);
        let mut prefixes = vec![m.clone()];
        let syncs = |o: &Op| matches!(o, Op::Fsync { .. } | Op::Fdatasync { .. } | Op::FsyncFd { .. } | Op::MapWrite { .. } | Op::SetJournalData { .. } | Op::Sync);
        for op in after.iter().filter(|o| !syncs(o)) {
            let _ = m.apply(op);
            prefixes.push(m.clone());
        }
        let env = m.crash_envelope();
        for (i, mut p) in prefixes.into_iter().enumerate() {
            let v = env.check(&mut p);
            prop_assert!(v.is_ok(), "prefix {} refused: {}", i, v.unwrap_err());
        }
    }
}

/// After a collapse or insert, an overwrite may reach disk before the shift
/// commits, so its bytes can show at the pre-shift offset: only the size of
/// such a file is held to the envelope.
#[test]
fn shifted_files_are_checked_by_size_only() {
    let mut m = Model::new(&ordered()).unwrap();
    run(&mut m, &[Op::Create { path: "/f".into(), perm: 0o644 }, write("/f", 0, 16384, 1), Op::Sync]);
    let mut recovered = m.clone();
    run(&mut m, &[Op::Fallocate { path: "/f".into(), mode: ext4_model::FallocFlags(ext4_model::FallocFlags::COLLAPSE_RANGE), offset: 0, len: 4096 }, write("/f", 0, 4096, 9)]);
    // Old mapping (size 16384), with the overwrite's bytes where block 1 was.
    recovered.write("/f", 4096, &pattern(9, 4096)).unwrap();
    assert!(m.crash_envelope().check(&mut recovered.clone()).is_ok());
    // The size is still checked.
    recovered.truncate("/f", 100).unwrap();
    assert!(matches!(m.crash_envelope().check(&mut recovered).unwrap_err(), CrashViolation::Size { .. }));
}

/// chattr -j in two halves: nothing changes and nothing is promised until
/// the second half, which is the whole switch (a durability point); +j, or
/// a switch that changes nothing, is over in the first half.
#[test]
fn a_split_journal_switch_takes_effect_in_its_second_half() {
    use ext4_model::{op::inode_flags::JOURNAL_DATA, FileSystem};
    let mut m = Model::new(&ordered()).unwrap();
    let on = Op::SetJournalData { path: "/f".into(), enable: true };
    let off = Op::SetJournalData { path: "/f".into(), enable: false };
    run(&mut m, &[Op::Create { path: "/f".into(), perm: 0o644 }, on.clone(), write("/f", 0, 3000, 1)]);
    let empty = {
        let mut e = Model::new(&ordered()).unwrap();
        run(&mut e, &[Op::Create { path: "/f".into(), perm: 0o644 }, on.clone()]);
        e
    };
    let pending = m.begin_split(&off).unwrap().unwrap();
    assert_ne!(m.stat("/f").unwrap().flags & JOURNAL_DATA, 0);
    assert!(m.crash_envelope().check(&mut empty.clone()).is_ok(), "nothing promised yet");
    m.finish_split(pending).unwrap();
    assert_eq!(m.stat("/f").unwrap().flags & JOURNAL_DATA, 0);
    assert!(m.crash_envelope().check(&mut empty.clone()).is_err(), "the write before the switch is durable");
    // +j is done in the first half, and so is a switch that changes nothing.
    for op in [&on, &on] {
        let p = m.begin_split(op).unwrap().unwrap();
        assert_ne!(m.stat("/f").unwrap().flags & JOURNAL_DATA, 0);
        m.finish_split(p).unwrap();
    }
    assert!(matches!(m.begin_split(&Op::SetJournalData { path: "/nope".into(), enable: false }), Some(Err(ext4_model::Errno::ENOENT))));
    assert!(m.begin_split(&Op::Stat { path: "/f".into() }).is_none());
}
