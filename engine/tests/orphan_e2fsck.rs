//! e2fsck and the engine agree on an orphan list a crash left: the engine
//! writes the chain e2fsck reads, e2fsck -fy frees exactly the inodes on it
//! ("Clearing orphaned inode"), and the engine's own mount-time cleanup of
//! the same image leaves a filesystem e2fsck -fn finds clean, with the same
//! free counts as e2fsck's repair.

mod common;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_engine::Ext4;
use ext4_model::{FileSystem, MountConfig};

#[test]
fn e2fsck_frees_the_orphans_the_engine_chained_and_so_does_the_engine() {
    let Some((e2fsck, dumpe2fs, _)) = e2fsprogs() else { return };
    let dir = Scratch::new("orphans");
    let img = dir.path("crash.img");
    let bytes = 64 << 20;
    let mut dev = FileDevice::create(&img, bytes).unwrap();
    mkfs(&mut dev, &MkfsOptions::new(bytes, *b"orphan-e2fsck-01", [7; 16], ext4_testkit::fresh::EPOCH_SECS)).unwrap();
    let mut fs = Ext4::mount(dev, &MountConfig::default()).unwrap();
    fs.create("/keep", 0o644).unwrap();
    fs.write("/keep", 0, &[1; 50_000]).unwrap();
    let mut orphans = Vec::new();
    for (slot, name) in ["/a", "/b", "/c"].into_iter().enumerate() {
        fs.create(name, 0o644).unwrap();
        fs.write(name, 0, &[slot as u8; 70_000]).unwrap();
        orphans.push(fs.stat(name).unwrap().ino);
        fs.open(name, slot as u8).unwrap();
        fs.unlink(name).unwrap();
    }
    fs.pwrite(0, 200_000, &[9; 9_000]).unwrap();
    fs.close(1).unwrap(); // /b is freed; /a and /c stay chained
    fs.sync().unwrap();
    drop(fs.into_device_dropping_caches());

    let repaired = dir.path("repaired.img");
    let cp = std::process::Command::new("cp").arg("--sparse=always").arg(&img).arg(&repaired).status().unwrap();
    assert!(cp.success());
    let out = run(&e2fsck, &["-fy", repaired.to_str().unwrap()]);
    let text = combined(&out);
    let cleared: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("Clearing orphaned inode "))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    let mut want = vec![orphans[2], orphans[0]];
    want.sort_unstable();
    let mut got = cleared.clone();
    got.sort_unstable();
    assert_eq!(got, want, "e2fsck -fy cleared {cleared:?}:\n{text}");
    assert_fsck_clean(&e2fsck, &repaired);

    let fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &MountConfig::default()).unwrap();
    assert_eq!(fs.orphan_stats().freed_at_mount, 2);
    drop(fs.unmount().unwrap());
    assert_fsck_clean(&e2fsck, &img);
    for field in ["Free blocks", "Free inodes"] {
        let (ours, theirs) = (dumpe2fs_field(&dumpe2fs_h(&dumpe2fs, &img), field), dumpe2fs_field(&dumpe2fs_h(&dumpe2fs, &repaired), field));
        assert_eq!(ours, theirs, "{field}: the engine's cleanup and e2fsck's repair differ");
    }
}
