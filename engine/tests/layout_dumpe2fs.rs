//! The layout report's figures are the real tools' figures: every group's
//! free blocks (clusters), free inodes, directories, unused inode-table
//! tail and UNINIT/ZEROED flags as `dumpe2fs` prints them, and the
//! non-contiguous file and directory counts as `e2fsck -fnv` prints them,
//! on an image mke2fs populated and on one the engine wrote (many files,
//! holes punched, files grown in turns so their extents interleave).

mod common;

use std::path::Path;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::image::Image;
use ext4_engine::layout::groups::GroupTable;
use ext4_engine::layout::LayoutReport;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_engine::Ext4;
use ext4_model::op::FallocFlags;
use ext4_model::{FileSystem, MountConfig};

/// dumpe2fs's per-group figures: (free, free inodes, dirs, unused, flags text).
fn dumpe2fs_groups(dumpe2fs: &Path, img: &Path) -> Vec<(u32, u32, u32, Option<u32>, String)> {
    let out = run(dumpe2fs, &[img.to_str().unwrap()]);
    assert!(out.status.success(), "dumpe2fs: {}", combined(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut rows = Vec::new();
    let mut flags = String::new();
    for line in text.lines() {
        if line.starts_with("Group ") {
            flags = line.split_once('[').map_or(String::new(), |(_, f)| f.trim_end_matches(']').to_string());
        } else if let Some(rest) = line.trim_start().split_once(" free blocks, ").or_else(|| line.trim_start().split_once(" free clusters, ")) {
            let num = |s: &str| s.split_whitespace().next().unwrap().parse::<u32>().unwrap();
            let parts: Vec<&str> = rest.1.split(", ").collect();
            let unused = parts.iter().find(|p| p.ends_with("unused inodes")).map(|p| num(p));
            rows.push((num(rest.0), num(parts[0]), num(parts[1]), unused, flags.clone()));
        }
    }
    rows
}

fn e2fsck_noncontiguous(e2fsck: &Path, img: &Path) -> (usize, usize) {
    let out = run(e2fsck, &["-fnv", img.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let count = |what: &str| text.lines().find(|l| l.contains(what)).and_then(|l| l.split_whitespace().next()?.parse().ok()).unwrap_or_else(|| panic!("no {what} in:\n{text}"));
    (count("non-contiguous file"), count("non-contiguous director"))
}

fn compare(img: &Path) {
    let Some((e2fsck, dumpe2fs, _)) = e2fsprogs() else { return };
    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    let layout = LayoutReport::read(&mut image).unwrap();
    let table = GroupTable::read(&mut image, &layout).unwrap();
    let tools = dumpe2fs_groups(&dumpe2fs, img);
    assert_eq!(tools.len(), table.rows.len(), "group count");
    for (r, (free, inodes, dirs, unused, flags)) in table.rows.iter().zip(&tools) {
        assert_eq!((r.free_clusters, r.free_inodes, r.used_dirs), (*free, *inodes, *dirs), "group {}", r.group);
        if let Some(u) = unused {
            assert_eq!(r.itable_unused, *u, "group {} unused inodes", r.group);
        }
        for (set, name) in [(r.block_uninit, "BLOCK_UNINIT"), (r.inode_uninit, "INODE_UNINIT"), (r.itable_zeroed, "ITABLE_ZEROED")] {
            assert_eq!(set, flags.contains(name), "group {} flag {name} in [{flags}]", r.group);
        }
    }
    let (files, dirs) = e2fsck_noncontiguous(&e2fsck, img);
    assert_eq!(layout.noncontiguous(), (files, dirs), "non-contiguous files, directories");
    println!("{}: {} groups agree; non-contiguous {files} files, {dirs} directories", img.display(), tools.len());
}

#[test]
fn an_mke2fs_populated_image_reads_as_dumpe2fs_and_e2fsck_say() {
    let Some((_, _, mk)) = e2fsprogs() else { return };
    let dir = Scratch::new("layout-mke2fs");
    let src = dir.path("src");
    for d in 0..6 {
        std::fs::create_dir_all(src.join(format!("d{d}/sub"))).unwrap();
        for f in 0..20 {
            std::fs::write(src.join(format!("d{d}/f{f}")), vec![d as u8; 1000 * (f + 1)]).unwrap();
        }
    }
    let img = dir.path("m.img");
    std::fs::File::create(&img).unwrap().set_len(256 << 20).unwrap();
    let out = run(&mk, &["-q", "-t", "ext4", "-F", "-b", "1024", "-d", src.to_str().unwrap(), img.to_str().unwrap()]);
    assert!(out.status.success(), "mke2fs: {}", combined(&out));
    compare(&img);
}

#[test]
fn an_engine_written_image_reads_as_dumpe2fs_and_e2fsck_say() {
    if e2fsprogs().is_none() {
        return;
    }
    let dir = Scratch::new("layout-engine");
    let img = dir.path("e.img");
    let size = 512 << 20;
    let mut dev = FileDevice::create(&img, size).unwrap();
    mkfs(&mut dev, &MkfsOptions::new(size, *b"layout-vs-tools!", [9; 16], ext4_testkit::fresh::EPOCH_SECS)).unwrap();
    let mut fs = Ext4::mount(dev, &MountConfig::default()).unwrap();
    for d in 0..5 {
        fs.mkdir(&format!("/d{d}"), 0o755).unwrap();
        for f in 0..40 {
            fs.create(&format!("/d{d}/f{f}"), 0o644).unwrap();
        }
    }
    // Files grown in turns with syncs between: their extents interleave.
    for round in 0..6u64 {
        for f in 0..10 {
            fs.write(&format!("/d{}/f{f}", f % 5), round * 40960, &vec![round as u8; 40960]).unwrap();
        }
        fs.sync().unwrap();
    }
    for f in 0..10 {
        fs.fallocate(&format!("/d{}/f{}", f % 5, f + 10), FallocFlags::ALLOCATE, 0, 1 << 20).unwrap();
        fs.fallocate(&format!("/d{}/f{}", f % 5, f + 10), FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE), 8192, 4096).unwrap();
    }
    drop(fs.unmount().unwrap());
    compare(&img);
}
