//! The namespace ops against the errors Linux gives, case by case.

use ext4_model::op::{inode_flags, LINK_MAX};
use ext4_model::{Errno::*, FileKind, FileSystem, Model, MountConfig, Op, RenameFlags, Reply};
use RenameFlags::{Exchange, NoReplace};

fn model() -> Model {
    Model::new(&MountConfig::default()).unwrap()
}

fn run(m: &mut Model, ops: &[Op]) {
    for op in ops {
        m.apply(op).unwrap_or_else(|e| panic!("setup {op:?}: {e}"));
    }
}

fn create(p: &str) -> Op {
    Op::Create { path: p.into(), perm: 0o644 }
}
fn mkdir(p: &str) -> Op {
    Op::Mkdir { path: p.into(), perm: 0o755 }
}

fn r2(from: &str, to: &str, flags: RenameFlags) -> Op {
    Op::Renameat2 { from: from.into(), to: to.into(), flags }
}

#[test]
fn an_exchange_swaps_names_and_moves_directories_between_parents() {
    let mut m = tree();
    run(&mut m, &[r2("/d/e", "/f2", Exchange)]);
    assert_eq!(m.stat("/f2").unwrap().kind, FileKind::Directory);
    assert_eq!(m.stat("/f2/g").unwrap().kind, FileKind::Regular);
    assert_eq!(m.stat("/d/e").unwrap().kind, FileKind::Regular);
    assert_eq!(m.stat("/f2/..").unwrap().ino, m.stat("/").unwrap().ino, "the moved directory's parent is /");
    // / gained a subdirectory and /d lost one.
    let (root_before, d_before) = (tree().stat("/").unwrap().nlink, tree().stat("/d").unwrap().nlink);
    assert_eq!((m.stat("/").unwrap().nlink, m.stat("/d").unwrap().nlink), (root_before + 1, d_before - 1));
    m.check_invariants().unwrap();
}

/// A tree: /d/f, /d/e (dir), /d/e/g, /s -> /d, /f2, /loop -> /loop
fn tree() -> Model {
    let mut m = model();
    run(
        &mut m,
        &[
            mkdir("/d"),
            create("/d/f"),
            mkdir("/d/e"),
            create("/d/e/g"),
            Op::Symlink { target: "/d".into(), path: "/s".into() },
            create("/f2"),
            Op::Symlink { target: "/loop".into(), path: "/loop".into() },
            mkdir("/empty"),
        ],
    );
    m
}

#[test]
fn error_table() {
    let long = "n".repeat(256);
    let cases: Vec<(Op, Result<(), ext4_model::Errno>)> = vec![
        (create("/d/f"), Err(EEXIST)),
        (create("/d"), Err(EEXIST)),
        (create("/s"), Err(EEXIST)),
        (create("/d/."), Err(EEXIST)),
        (create("/"), Err(EEXIST)),
        (create("/nope/x"), Err(ENOENT)),
        (create("/f2/x"), Err(ENOTDIR)),
        (create("/new/"), Err(EISDIR)),
        // O_CREAT refuses a trailing slash before looking (the host kernel agrees).
        (create("/d/"), Err(EISDIR)),
        (create("/f2/"), Err(EISDIR)),
        (create(&format!("/{long}")), Err(ENAMETOOLONG)),
        (create("relative"), Err(EINVAL)),
        (create(""), Err(ENOENT)),
        (create("/s/new"), Ok(())),
        (create("/loop/x"), Err(ELOOP)),
        (mkdir("/d/e"), Err(EEXIST)),
        (mkdir("/d/.."), Err(EEXIST)),
        (mkdir("/x/"), Ok(())),
        (Op::Unlink { path: "/d".into() }, Err(EISDIR)),
        (Op::Unlink { path: "/d/.".into() }, Err(EISDIR)),
        (Op::Unlink { path: "/nope".into() }, Err(ENOENT)),
        (Op::Unlink { path: "/f2/".into() }, Err(ENOTDIR)),
        (Op::Unlink { path: "/s".into() }, Ok(())),
        (Op::Rmdir { path: "/d".into() }, Err(ENOTEMPTY)),
        (Op::Rmdir { path: "/f2".into() }, Err(ENOTDIR)),
        (Op::Rmdir { path: "/empty/.".into() }, Err(EINVAL)),
        (Op::Rmdir { path: "/empty/..".into() }, Err(ENOTEMPTY)),
        (Op::Rmdir { path: "/".into() }, Err(EBUSY)),
        (Op::Rmdir { path: "/s".into() }, Err(ENOTDIR)),
        (Op::Rmdir { path: "/empty".into() }, Ok(())),
        (Op::Rename { from: "/d".into(), to: "/d/e/x".into() }, Err(EINVAL)),
        (Op::Rename { from: "/d".into(), to: "/d/e".into() }, Err(EINVAL)),
        // The target is an ancestor of the source: the rename trap says ENOTEMPTY.
        (Op::Rename { from: "/d/e/g".into(), to: "/d".into() }, Err(ENOTEMPTY)),
        (Op::Rename { from: "/f2".into(), to: "/empty".into() }, Err(EISDIR)),
        (Op::Rename { from: "/d/e".into(), to: "/d/f".into() }, Err(ENOTDIR)),
        (Op::Rename { from: "/empty".into(), to: "/d".into() }, Err(ENOTEMPTY)),
        (Op::Rename { from: "/d/e".into(), to: "/empty".into() }, Ok(())),
        (Op::Rename { from: "/d/e/g".into(), to: "/d/e/g".into() }, Ok(())),
        (Op::Rename { from: "/nope".into(), to: "/x".into() }, Err(ENOENT)),
        (Op::Rename { from: "/f2/".into(), to: "/x".into() }, Err(ENOTDIR)),
        (Op::Rename { from: "/d/.".into(), to: "/x".into() }, Err(EBUSY)),
        (Op::Rename { from: "/".into(), to: "/x".into() }, Err(EBUSY)),
        (Op::Rename { from: "/f2".into(), to: "/d/f".into() }, Ok(())),
        (Op::Rename { from: "/f2".into(), to: "/nope/x".into() }, Err(ENOENT)),
        (Op::Link { from: "/d".into(), to: "/x".into() }, Err(EPERM)),
        (Op::Link { from: "/f2".into(), to: "/d/f".into() }, Err(EEXIST)),
        (Op::Link { from: "/nope".into(), to: "/x".into() }, Err(ENOENT)),
        (Op::Link { from: "/f2".into(), to: "/x/".into() }, Err(ENOENT)),
        (Op::Link { from: "/s".into(), to: "/s2".into() }, Ok(())),
        (Op::Symlink { target: "".into(), path: "/x".into() }, Err(ENOENT)),
        (Op::Symlink { target: "x".repeat(4096), path: "/x".into() }, Err(ENAMETOOLONG)),
        (Op::Symlink { target: "x".repeat(4095), path: "/x".into() }, Ok(())),
        (Op::Symlink { target: "/d".into(), path: "/d/f".into() }, Err(EEXIST)),
        (Op::Symlink { target: "/d".into(), path: "/x/".into() }, Err(ENOENT)),
        // renameat2, each answer held to Linux 6.18 on the host.
        (r2("/f2", "/d/f", NoReplace), Err(EEXIST)),
        (r2("/f2", "/d/.", NoReplace), Err(EEXIST)),
        (r2("/f2", "/d/.", Exchange), Err(EBUSY)),
        (r2("/f2", "/nope", Exchange), Err(ENOENT)),
        (r2("/nope", "/f2", Exchange), Err(ENOENT)),
        (r2("/d", "/d/e", Exchange), Err(EINVAL)),
        // Swapping with an ancestor is EINVAL, where rename says ENOTEMPTY.
        (r2("/d/e/g", "/d", Exchange), Err(EINVAL)),
        (r2("/d/e/g", "/d", NoReplace), Err(EEXIST)),
        (r2("/f2/", "/d/f", Exchange), Err(ENOTDIR)),
        (r2("/f2", "/d/f/", Exchange), Err(ENOTDIR)),
        (r2("/f2", "/empty/", Exchange), Ok(())),
        (r2("/f2", "/x/", NoReplace), Err(ENOTDIR)),
        (r2("/f2", "/f2", Exchange), Ok(())),
        (r2("/f2", "/x", NoReplace), Ok(())),
        (r2("/d/e", "/f2", Exchange), Ok(())),
    ];
    for (op, want) in cases {
        let mut m = tree();
        let got = m.apply(&op).map(|_| ());
        assert_eq!(got, want, "{op:?}");
        m.check_invariants().unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
}

#[test]
fn lookups_follow_symlinks_and_dotdot() {
    let mut m = tree();
    assert_eq!(m.stat("/s").unwrap().kind, FileKind::Symlink);
    assert_eq!(m.stat("/s/").unwrap().kind, FileKind::Directory);
    assert_eq!(m.stat("/s/e/../f").unwrap().kind, FileKind::Regular);
    assert_eq!(m.stat("/../../d/./f").unwrap().kind, FileKind::Regular);
    assert_eq!(m.readlink("/s").unwrap(), "/d");
    assert_eq!(m.readlink("/d"), Err(EINVAL));
    assert_eq!(m.readdir("/f2"), Err(ENOTDIR));
    run(&mut m, &[Op::Symlink { target: "e/g".into(), path: "/d/rel".into() }]);
    assert_eq!(m.stat("/s/rel/").err(), Some(ENOTDIR));
    assert_eq!(m.write("/d/rel", 0, b"hi"), Ok(2));
    assert_eq!(m.read("/d/e/g", 0, 10).unwrap(), b"hi");
    assert_eq!(m.stat("/loop/"), Err(ELOOP));
    // A body ending in a slash demands a directory where it ends the path
    // (checked on Linux 6.18: open and truncate ENOTDIR, lstat fine, a chain
    // of links followed to the slash).
    run(&mut m, &[
        Op::Symlink { target: "/f2/".into(), path: "/tf".into() },
        Op::Symlink { target: "/tf".into(), path: "/tf2".into() },
        Op::Symlink { target: "/s/".into(), path: "/ts".into() },
        Op::Symlink { target: "/nope/".into(), path: "/tn".into() },
    ]);
    assert_eq!(m.read("/tf", 0, 1).err(), Some(ENOTDIR));
    assert_eq!(m.read("/tf2", 0, 1).err(), Some(ENOTDIR));
    assert_eq!(m.truncate("/tf", 0).err(), Some(ENOTDIR));
    assert_eq!(m.stat("/tf").unwrap().kind, FileKind::Symlink, "stat is lstat");
    assert!(m.readdir("/ts").is_ok());
    assert_eq!(m.read("/tn", 0, 1).err(), Some(ENOENT));
    let names: Vec<String> = m.readdir("/").unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, ["d", "empty", "f2", "loop", "lost+found", "s", "tf", "tf2", "tn", "ts"]);
}

#[test]
fn link_counts() {
    let mut m = model();
    assert_eq!(m.stat("/").unwrap().nlink, 3, "root counts lost+found");
    run(&mut m, &[mkdir("/a"), mkdir("/a/b"), create("/a/f"), Op::Link { from: "/a/f".into(), to: "/g".into() }]);
    assert_eq!(m.stat("/").unwrap().nlink, 4);
    assert_eq!(m.stat("/a").unwrap().nlink, 3);
    assert_eq!(m.stat("/g").unwrap().nlink, 2);
    run(&mut m, &[Op::Rename { from: "/a/b".into(), to: "/b".into() }]);
    assert_eq!((m.stat("/").unwrap().nlink, m.stat("/a").unwrap().nlink), (5, 2));
    run(&mut m, &[Op::Write { path: "/g".into(), offset: 0, len: 5000, seed: 1 }]);
    let used = m.used_blocks();
    run(&mut m, &[Op::Unlink { path: "/a/f".into() }]);
    assert_eq!(m.stat("/g").unwrap().nlink, 1);
    assert_eq!(m.used_blocks(), used, "the data lives on under the other name");
    run(&mut m, &[Op::Rename { from: "/b".into(), to: "/g2".into() }, Op::Unlink { path: "/g".into() }]);
    assert_eq!(m.used_blocks(), 0);
    m.check_invariants().unwrap();
}

#[test]
fn hard_link_limit_is_emlink() {
    let mut m = model();
    run(&mut m, &[mkdir("/d"), create("/d/f")]);
    for i in 1..LINK_MAX {
        m.link("/d/f", &format!("/d/l{i}")).unwrap();
    }
    assert_eq!(m.stat("/d/f").unwrap().nlink, LINK_MAX);
    assert_eq!(m.link("/d/f", "/d/over"), Err(EMLINK));
}

#[test]
fn read_only_mount_refuses_changes_after_lookup_errors() {
    let mut m = Model::new(&MountConfig { read_only: true, ..MountConfig::default() }).unwrap();
    assert_eq!(m.create("/x", 0o644), Err(EROFS));
    assert_eq!(m.create("/lost+found", 0o644), Err(EEXIST));
    assert_eq!(m.mkdir("/x", 0o755), Err(EROFS));
    assert_eq!(m.unlink("/nope"), Err(EROFS));
    assert_eq!(m.rmdir("/lost+found"), Err(EROFS));
    assert_eq!(m.write("/nope", 0, b"x"), Err(ENOENT));
    assert_eq!(m.write("/lost+found", 0, b"x"), Err(EISDIR));
    assert_eq!(m.sync(), Ok(()));
    assert_eq!(m.readdir("/").unwrap().len(), 1);
}

#[test]
fn flags_inherit_journal_data_and_fast_symlinks_have_no_extents() {
    let mut m = Model::new(&MountConfig { delalloc: Some(false), ..MountConfig::default() }).unwrap();
    run(&mut m, &[mkdir("/j"), Op::SetJournalData { path: "/j".into(), enable: true }, create("/j/f"), mkdir("/j/sub")]);
    assert_ne!(m.stat("/j/f").unwrap().flags & inode_flags::JOURNAL_DATA, 0);
    assert_ne!(m.stat("/j/sub").unwrap().flags & inode_flags::JOURNAL_DATA, 0);
    run(&mut m, &[Op::Symlink { target: "/j/f".into(), path: "/j/l".into() }, Op::Symlink { target: "x".repeat(60), path: "/j/slow".into() }]);
    let fast = m.stat("/j/l").unwrap();
    assert_eq!((fast.flags, fast.blocks, fast.size), (0, 0, 4));
    let slow = m.stat("/j/slow").unwrap();
    assert_eq!((slow.flags, slow.blocks), (inode_flags::EXTENTS, 8));
    assert!(matches!(m.apply(&Op::Stat { path: "/j/f".into() }), Ok(Reply::Stat(s)) if s.mode == 0o100644));
}

#[test]
fn symlink_target_and_nul_fit_in_one_block() {
    let mut m = Model::new(&MountConfig { block_size: 1024, ..MountConfig::default() }).unwrap();
    assert_eq!(m.symlink(&"t".repeat(1024), "/x"), Err(ENAMETOOLONG));
    assert_eq!(m.symlink(&"t".repeat(1023), "/x"), Ok(()));
    assert_eq!(m.stat("/x").unwrap().size, 1023);
}
