use ext4_model::{FileSystem, Op, RenameFlags};

use super::*;
use crate::device_mem::MemDevice;

/// A file `/f` (open in slot 3), and a tree for the directory ops:
/// `/d/x` and `/d/y` files, `/d/sub` and `/e` directories.
fn with_file() -> Ext4<MemDevice> {
    let mut fs = crate::fixtures::fresh_mounted(64 << 20);
    fs.create("/f", 0o644).unwrap();
    fs.write("/f", 0, &[7u8; 10_000]).unwrap();
    fs.open("/f", 3).unwrap();
    for dir in ["/d", "/d/sub", "/e"] {
        fs.mkdir(dir, 0o755).unwrap();
    }
    for file in ["/d/x", "/d/y"] {
        fs.create(file, 0o644).unwrap();
    }
    fs
}

fn file_ops() -> Vec<Op> {
    let p = || "/f".to_string();
    vec![
        Op::Write { path: p(), offset: 0, len: 100, seed: 1 },
        Op::Append { path: p(), len: 100, seed: 2 },
        Op::WriteFd { slot: 3, offset: 50, len: 100, seed: 3 },
        Op::Truncate { path: p(), size: 5000 },
        Op::FtruncateFd { slot: 3, size: 6000 },
        Op::Rewrite { path: p(), len: 300, seed: 6 },
        Op::DirectWrite { path: p(), offset: 4096, len: 4096, seed: 4 },
        Op::MapWrite { path: p(), offset: 10, len: 20, seed: 5 },
        Op::Read { path: p(), offset: 0, len: 100 },
        Op::DirectRead { path: p(), offset: 0, len: 4096 },
        Op::Fallocate { path: p(), mode: ext4_model::FallocFlags(0), offset: 0, len: 40_000 },
        Op::Fallocate { path: p(), mode: ext4_model::FallocFlags(ext4_model::FallocFlags::PUNCH_HOLE | ext4_model::FallocFlags::KEEP_SIZE), offset: 4096, len: 4096 },
        Op::Chattr { path: p(), flag: ext4_model::ChattrFlag::Append, enable: false },
        Op::ReadFd { slot: 3, offset: 0, len: 100 },
        Op::Sync,
        Op::Lseek { path: p(), offset: 0, whence: ext4_model::SeekWhence::Data },
        Op::SetJournalData { path: p(), enable: true },
    ]
}

fn dir_ops() -> Vec<Op> {
    let s = |p: &str| p.to_string();
    vec![
        Op::Create { path: s("/d/new"), perm: 0o644 },
        Op::Mkdir { path: s("/d/newdir"), perm: 0o755 },
        Op::Symlink { target: s("x"), path: s("/d/link") },
        Op::Link { from: s("/d/x"), to: s("/e/x2") },
        Op::Unlink { path: s("/d/x") },
        Op::Rmdir { path: s("/d/sub") },
        Op::Readdir { path: s("/d") },
        // In one directory, over a name, and between two directories
        // (moving a directory, over a file, and exchanging).
        Op::Rename { from: s("/d/x"), to: s("/d/z") },
        Op::Rename { from: s("/d/x"), to: s("/d/y") },
        Op::Rename { from: s("/d/sub"), to: s("/e/sub") },
        Op::Rename { from: s("/f"), to: s("/d/y") },
        Op::Renameat2 { from: s("/d/sub"), to: s("/f"), flags: RenameFlags::Exchange },
    ]
}

/// Every op with a plan takes each lock of it itself: with any one of
/// them held by someone else, the op run whole meets it (the engine
/// refuses a wait in one thread: EDEADLK), and with none held it runs.
#[test]
fn a_plan_names_locks_the_op_itself_takes() {
    for op in file_ops().into_iter().chain(dir_ops()) {
        let mut fs = with_file();
        let plan = fs.lock_plan(&op).unwrap_or_else(|| panic!("{op}: no plan"));
        let truncates = matches!(op, Op::Truncate { .. } | Op::FtruncateFd { .. });
        assert_eq!(plan.steps.iter().any(|s| matches!(s, PlannedLock::EofFolio { .. })), truncates, "{op}: its EOF folio, inside a cached block");
        assert!(!op.only_looks() || plan.steps.iter().all(|s| matches!(s, PlannedLock::Sem { shared: true, .. })), "{op}");
        for (i, step) in plan.steps.iter().enumerate() {
            let one = LockPlan { steps: vec![*step] };
            let other = fs.locks.new_holder();
            let blocking = match *step {
                // Held exclusive by another, which a shared taker meets too.
                PlannedLock::Sem { ino, class, by, .. } => PlannedLock::Sem { ino, class, shared: false, by },
                // Direct I/O in flight is what a waiter meets.
                PlannedLock::DioWait(ino) => PlannedLock::DioBegin(ino),
                PlannedLock::DioBegin(_) => continue,
                // A handle meets a -j's barrier.
                PlannedLock::Handle => {
                    fs.locks.set.fs.updates.lock_updates().unwrap();
                    assert!(fs.plan_would_wait(&one).is_some(), "{op}: step {i}");
                    assert_eq!(fs.apply(&op), Err(Errno::EDEADLK), "{op} started a handle past the barrier");
                    fs.locks.set.fs.updates.unlock_updates();
                    continue;
                }
                // Another holder has the EOF folio locked: the truncate
                // zeroing its tail reaches it (the page cache records it).
                PlannedLock::EofFolio { ino, size } => {
                    assert!(fs.ctx.pages.lock_folio_at(ino, size, other.number()).is_some(), "{op}: a folio is cached at {size}");
                    assert_eq!(fs.plan_would_wait(&one), Some(Lock::FolioLock), "{op}: step {i}");
                    let _ = fs.apply(&op);
                    assert!(!fs.ctx.pages.take_locked_touches().is_empty(), "{op} ran past the locked EOF folio");
                    fs.ctx.pages.unlock_folios(other.number());
                    // Undo the truncate for the next steps: the file as it was.
                    fs.write("/f", 0, &[7u8; 10_000]).unwrap();
                    continue;
                }
            };
            let blocking = LockPlan { steps: vec![blocking] };
            fs.take_plan(&blocking.steps, other).unwrap();
            assert!(fs.plan_would_wait(&one).is_some(), "{op}: step {i}");
            assert_eq!(fs.apply(&op), Err(Errno::EDEADLK), "{op} ran past {step:?} held by another");
            fs.give_back(&blocking.steps, other);
            assert!(!fs.locks.any_held(), "{op}: a lock left held");
        }
        assert!(fs.plan_would_wait(&plan).is_none());
        assert!(fs.apply(&op).is_ok(), "{op} alone");
        assert!(fs.lock_violations().is_empty(), "{op}: {:?}", fs.lock_violations());
    }
}

/// The directory ops' plans in the kernel's order: the parent, then the
/// inodes moved; a rename between directories takes s_vfs_rename_mutex
/// first and an ancestor before its descendant.
#[test]
fn directory_ops_lock_parents_before_the_inodes_they_move() {
    let mut fs = with_file();
    let ino = |fs: &mut Ext4<MemDevice>, p: &str| fs.open_path(p).unwrap();
    let (root, d, sub, e, x, y, f) = (2, ino(&mut fs, "/d"), ino(&mut fs, "/d/sub"), ino(&mut fs, "/e"), ino(&mut fs, "/d/x"), ino(&mut fs, "/d/y"), ino(&mut fs, "/f"));
    let inodes = |plan: LockPlan| -> Vec<(Lock, InodeNumber)> {
        plan.steps
            .iter()
            .filter_map(|s| match *s {
                PlannedLock::Sem { ino, class, .. } => Some((class, ino)),
                PlannedLock::Handle => None,
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let plan = |fs: &mut Ext4<MemDevice>, op: Op| {
        let plan = fs.lock_plan(&op).unwrap();
        let changes = !matches!(op, Op::Readdir { .. });
        assert_eq!(plan.steps.last() == Some(&PlannedLock::Handle), changes, "{op}: its handle last");
        inodes(plan)
    };
    let r = Lock::InodeRwsem;
    assert_eq!(plan(&mut fs, Op::Unlink { path: "/d/x".into() }), vec![(r, d), (r, x)]);
    assert_eq!(plan(&mut fs, Op::Unlink { path: "/d/sub".into() }), vec![(r, d)], "unlink takes no directory victim's lock");
    assert_eq!(plan(&mut fs, Op::Rmdir { path: "/d/sub".into() }), vec![(r, d), (r, sub)]);
    assert_eq!(plan(&mut fs, Op::Link { from: "/d/x".into(), to: "/e/l".into() }), vec![(r, e), (r, x)]);
    assert_eq!(plan(&mut fs, Op::Rename { from: "/d/x".into(), to: "/d/y".into() }), vec![(r, d), (r, x.min(y)), (r, x.max(y))]);
    assert_eq!(plan(&mut fs, Op::Rename { from: "/d/sub".into(), to: "/d/s2".into() }), vec![(r, d)], "a directory staying in its parent");
    let m = Lock::RenameMutex;
    assert_eq!(plan(&mut fs, Op::Rename { from: "/d/sub".into(), to: "/e/s".into() }), vec![(m, 0), (r, d), (r, e), (r, sub)]);
    // The new parent is an ancestor of the old: it goes first.
    assert_eq!(plan(&mut fs, Op::Rename { from: "/d/x".into(), to: "/f".into() }), vec![(m, 0), (r, root), (r, d), (r, x.min(f)), (r, x.max(f))]);
    // A directory before a file.
    assert_eq!(plan(&mut fs, Op::Renameat2 { from: "/f".into(), to: "/d/sub".into(), flags: RenameFlags::Exchange }), vec![(m, 0), (r, root), (r, d), (r, sub), (r, f)]);
    // Past lock_rename's trap only: moving a directory under itself, or
    // over an ancestor of the source's directory, locks no child (the
    // child would come after its descendant: a deadlock with an rmdir
    // holding the child and waiting for the descendant, found by a swarm).
    assert_eq!(plan(&mut fs, Op::Rename { from: "/d".into(), to: "/d/sub/in".into() }), vec![(m, 0), (r, root), (r, sub)]);
    assert_eq!(fs.rename("/d", "/d/sub/in"), Err(Errno::EINVAL));
    fs.create("/d/sub/q", 0o644).unwrap();
    let q = ino(&mut fs, "/d/sub/q");
    assert_eq!(plan(&mut fs, Op::Rename { from: "/d/sub/q".into(), to: "/d".into() }), vec![(m, 0), (r, root), (r, sub)]);
    assert_eq!(fs.rename("/d/sub/q", "/d"), Err(Errno::ENOTEMPTY));
    assert_eq!(plan(&mut fs, Op::Rename { from: "/d/sub/q".into(), to: "/e".into() }), vec![(m, 0), (r, root), (r, sub), (r, e), (r, q)]);
    assert!(fs.lock_plan(&Op::Create { path: "/nowhere/a".into(), perm: 0o644 }).is_none(), "no parent, no lock");
    assert!(fs.lock_plan(&Op::Rmdir { path: "/d/..".into() }).is_none());
}

/// A create sleeping on I/O holds its directory: a rival create in it
/// and a readdir of it wait, one in another directory does not; an
/// unlink whose victim a writer holds sleeps holding the directory.
#[test]
fn a_directory_op_in_flight_holds_its_directory() {
    let mut fs = with_file();
    let create = fs.begin_split(&Op::Create { path: "/d/a".into(), perm: 0o644 }).unwrap().unwrap();
    assert_eq!(fs.waits_for(&Op::Create { path: "/d/b".into(), perm: 0o644 }), Some(Lock::InodeRwsem));
    assert_eq!(fs.waits_for(&Op::Readdir { path: "/d".into() }), Some(Lock::InodeRwsem));
    assert_eq!(fs.waits_for(&Op::Create { path: "/e/b".into(), perm: 0o644 }), None);
    assert_eq!(fs.waits_for(&Op::Stat { path: "/d/x".into() }), None, "a path walk takes no directory lock");
    assert_eq!(fs.finish_split(create), Ok(ext4_model::Reply::Done));
    assert!(fs.stat("/d/a").is_ok());

    let write = fs.begin_split(&Op::Write { path: "/d/x".into(), offset: 0, len: 10, seed: 1 }).unwrap().unwrap();
    let unlink = Op::Unlink { path: "/d/x".into() };
    assert_eq!(fs.waits_for(&unlink), Some(Lock::InodeRwsem));
    assert!(fs.sleeps_holding_first_locks(&unlink), "it takes /d before it meets x's lock");
    let unlink = fs.begin_split(&unlink).unwrap().unwrap();
    assert_eq!(fs.finish_waits_for(&unlink), Some(Lock::InodeRwsem));
    assert_eq!(fs.waits_for(&Op::Mkdir { path: "/d/m".into(), perm: 0o755 }), Some(Lock::InodeRwsem), "the sleeping unlink holds /d");
    assert_eq!(fs.finish_waits_for(&write), None);
    assert_eq!(fs.finish_split(write), Ok(ext4_model::Reply::Written(10)));
    assert_eq!(fs.finish_waits_for(&unlink), None);
    assert_eq!(fs.finish_split(unlink), Ok(ext4_model::Reply::Done));
    assert!(!fs.locks.any_held());
    assert_eq!(fs.stat("/d/x"), Err(Errno::ENOENT));
    assert!(fs.lock_violations().is_empty());
}

/// Two renames between the same two directories in opposite directions
/// both go through s_vfs_rename_mutex: the second waits for the first
/// instead of locking the directories in the other order.
#[test]
fn renames_between_directories_serialise_on_the_rename_mutex() {
    let mut fs = with_file();
    let there = fs.begin_split(&Op::Rename { from: "/d/x".into(), to: "/e/x".into() }).unwrap().unwrap();
    assert_eq!(fs.waits_for(&Op::Rename { from: "/e/q".into(), to: "/f".into() }), Some(Lock::RenameMutex));
    assert_eq!(fs.finish_split(there), Ok(ext4_model::Reply::Done));
    assert_eq!(fs.waits_for(&Op::Rename { from: "/e/x".into(), to: "/d/x".into() }), None);
    assert!(fs.lock_violations().is_empty());
}

/// A truncate meeting a page fault's invalidate_lock takes i_rwsem
/// first and sleeps holding it: writers wait on it meanwhile; once the
/// fault returns, the truncate's second half runs.
#[test]
fn an_op_sleeps_holding_the_locks_before_the_one_it_waits_on() {
    let mut fs = with_file();
    let fault = Op::MapWrite { path: "/f".into(), offset: 0, len: 10, seed: 1 };
    let fault = fs.begin_split(&fault).unwrap().unwrap();
    let truncate = Op::Truncate { path: "/f".into(), size: 100 };
    assert_eq!(fs.waits_for(&truncate), Some(Lock::InvalidateLock));
    assert!(fs.sleeps_holding_first_locks(&truncate));
    let truncate = fs.begin_split(&truncate).unwrap().unwrap();
    assert_eq!(fs.finish_waits_for(&truncate), Some(Lock::InvalidateLock));
    let write = Op::Write { path: "/f".into(), offset: 0, len: 1, seed: 0 };
    assert_eq!(fs.waits_for(&write), Some(Lock::InodeRwsem), "the sleeping truncate holds i_rwsem");
    assert!(!fs.sleeps_holding_first_locks(&write), "its first lock is the one it waits on");
    assert_eq!(fs.finish_waits_for(&fault), None);
    assert_eq!(fs.finish_split(fault), Ok(ext4_model::Reply::Written(10)));
    assert_eq!(fs.finish_waits_for(&truncate), None);
    assert_eq!(fs.finish_split(truncate), Ok(ext4_model::Reply::Done));
    assert!(!fs.locks.any_held());
    assert_eq!(fs.stat("/f").unwrap().size, 100);
    assert!(fs.lock_violations().is_empty());
}

#[test]
fn a_taken_plan_holds_off_rivals_until_given_back() {
    let mut fs = with_file();
    let plan = fs.lock_plan(&Op::Truncate { path: "/f".into(), size: 0 }).unwrap();
    let holder = fs.locks.new_holder();
    fs.take_plan(&plan.steps, holder).unwrap();
    assert!(fs.locks.holds(holder));
    let write = fs.lock_plan(&Op::Write { path: "/f".into(), offset: 0, len: 1, seed: 0 }).unwrap();
    assert_eq!(fs.plan_would_wait(&write), Some(Lock::InodeRwsem));
    let read = fs.lock_plan(&Op::Read { path: "/f".into(), offset: 0, len: 1 }).unwrap();
    assert_eq!(fs.plan_would_wait(&read), Some(Lock::InvalidateLock));
    // A second taker is refused whole: it keeps nothing it took.
    let other = fs.locks.new_holder();
    assert_eq!(fs.take_plan(&write.steps, other), Err(Errno::EDEADLK));
    assert!(!fs.locks.holds(other));
    fs.give_back(&plan.steps, holder);
    assert!(!fs.locks.any_held());
    assert_eq!(fs.plan_would_wait(&write), None);
    // Ops on a directory or a missing name fail before any lock.
    assert_eq!(fs.lock_plan(&Op::Write { path: "/".into(), offset: 0, len: 1, seed: 0 }), None);
    assert_eq!(fs.lock_plan(&Op::Truncate { path: "/nothing".into(), size: 0 }), None);
}

/// An op sleeping inside its handle keeps the running transaction from
/// committing: fsync, sync and the journal-flag switch wait for it, a
/// stat does not, and a commit started anyway is refused (EDEADLK, as a
/// wait nothing in this thread could end). Once it returns, they run.
#[test]
fn a_handle_held_across_a_sleep_holds_off_commits_until_it_stops() {
    let mut fs = with_file();
    let create = fs.begin_split(&Op::Create { path: "/d/a".into(), perm: 0o644 }).unwrap().unwrap();
    assert_eq!(fs.locks.split_handles, 1);
    for op in [Op::Fsync { path: "/f".into() }, Op::Sync, Op::SetJournalData { path: "/f".into(), enable: true }, Op::FsyncFd { slot: 3 }] {
        assert_eq!(fs.waits_for(&op), Some(Lock::JournalHandle), "{op}");
        assert_eq!(fs.apply(&op), Err(Errno::EDEADLK), "{op} committed past a running handle");
    }
    assert_eq!(fs.waits_for(&Op::Stat { path: "/f".into() }), None);
    assert_eq!(fs.waits_for(&Op::Write { path: "/f".into(), offset: 0, len: 1, seed: 1 }), None, "handles share a transaction");
    assert_eq!(fs.finish_waits_for(&create), None);
    assert_eq!(fs.finish_split(create), Ok(ext4_model::Reply::Done));
    assert_eq!(fs.locks.split_handles, 0);
    assert_eq!(fs.waits_for(&Op::Fsync { path: "/f".into() }), None);
    assert_eq!(fs.apply(&Op::Fsync { path: "/d/a".into() }), Ok(ext4_model::Reply::Done));
    assert!(!fs.locks.any_held());
    assert!(fs.lock_violations().is_empty(), "{:?}", fs.lock_violations());
}
