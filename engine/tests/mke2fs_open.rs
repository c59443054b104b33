//! Images made by the real `mke2fs -t ext4` must open through `image.rs` and
//! read back exactly: names, inode numbers, file contents, and the physical
//! blocks debugfs reports.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::format::inode::ROOT_INO;
use ext4_engine::image::Image;

const MIB: u64 = 1 << 20;

fn mke2fs(mke2fs: &Path, img: &Path, size: u64, args: &[&str]) {
    std::fs::File::create(img).unwrap().set_len(size).unwrap();
    let mut all = vec!["-t", "ext4", "-F", "-q"];
    all.extend_from_slice(args);
    all.push(img.to_str().unwrap());
    let out = run(mke2fs, &all);
    assert!(out.status.success(), "mke2fs {args:?} failed:\n{}", combined(&out));
}

fn open(img: &Path) -> Image<FileDevice> {
    Image::open(FileDevice::open(img, false).unwrap()).unwrap_or_else(|e| panic!("open {}: {e}", img.display()))
}

fn names(image: &mut Image<FileDevice>, ino: u32) -> BTreeSet<String> {
    image.read_dir(ino).unwrap().iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect()
}

/// Checks that every initialised bitmap verifies and agrees with its descriptor.
fn check_groups(image: &mut Image<FileDevice>, dumpe2fs_h: &str) {
    let groups = image.geometry().group_count;
    let want_free: u64 = dumpe2fs_field(dumpe2fs_h, "Free blocks").unwrap().parse().unwrap();
    assert_eq!(image.superblock().free_blocks_count, want_free);
    let want_inodes: u64 = dumpe2fs_field(dumpe2fs_h, "Inode count").unwrap().parse().unwrap();
    assert_eq!(image.geometry().inodes_count(), want_inodes);
    for g in 0..groups {
        let d = image.group_descs()[g as usize];
        let len = image.geometry().group_clusters(g) as usize;
        if let Some(bm) = image.read_block_bitmap(g).unwrap() {
            assert_eq!(bm.count_zeros(len) as u32, d.free_blocks, "group {g} free blocks");
        }
        if let Some(bm) = image.read_inode_bitmap(g).unwrap() {
            let ipg = image.geometry().inodes_per_group as usize;
            assert_eq!(bm.count_zeros(ipg) as u32, d.free_inodes, "group {g} free inodes");
        }
    }
    let j = image.journal_superblock().unwrap().expect("mke2fs -t ext4 makes a journal");
    assert_eq!(j.start, 0, "fresh journal is clean");
}

#[test]
fn empty_images_in_each_flavour_open_and_agree_with_dumpe2fs() {
    let Some((_, dumpe2fs, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("mke2fs-flavours");
    let flavours: [(&str, &[&str]); 8] = [
        ("b1024", &["-b", "1024"]),
        ("b4096", &["-b", "4096"]),
        ("noflex", &["-b", "4096", "-O", "^flex_bg"]),
        ("nocsum", &["-b", "1024", "-O", "^metadata_csum"]),
        ("uninit", &["-b", "2048", "-O", "^metadata_csum,uninit_bg,^64bit"]),
        ("64bit", &["-b", "4096", "-O", "64bit"]),
        ("bigalloc16k", &["-b", "4096", "-O", "bigalloc", "-C", "16384"]),
        ("bigalloc64k", &["-b", "4096", "-O", "bigalloc", "-C", "65536"]),
    ];
    for (name, args) in flavours {
        let img = scratch.path(&format!("{name}.img"));
        mke2fs(&mk, &img, 300 * MIB, args);
        let h = dumpe2fs_h(&dumpe2fs, &img);
        let mut image = open(&img);
        assert_eq!(names(&mut image, ROOT_INO), [".", "..", "lost+found"].map(String::from).into(), "{name}");
        assert_eq!(image.lookup("/lost+found").unwrap(), 11);
        let bs: u32 = dumpe2fs_field(&h, "Block size").unwrap().parse().unwrap();
        assert_eq!(image.geometry().block_size, bs, "{name}");
        check_groups(&mut image, &h);
    }
}

/// Physical blocks debugfs lists for `path`, in logical order.
fn debugfs_blocks(img: &Path, path: &str) -> Vec<u64> {
    let debugfs = tool("debugfs").expect("debugfs");
    let out = run(&debugfs, &["-R", &format!("blocks {path}"), img.to_str().unwrap()]);
    String::from_utf8_lossy(&out.stdout).split_whitespace().map(|w| w.parse().unwrap()).collect()
}

fn patterned(len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + i / 251) % 256) as u8).collect()
}

#[test]
fn populated_image_reads_back_exact_contents() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    if tool("debugfs").is_none() {
        println!("SKIPPED: debugfs not installed");
        return;
    }
    let scratch = Scratch::new("mke2fs-populated");
    let src = scratch.path("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let big = patterned(300_000);
    std::fs::write(src.join("big.bin"), &big).unwrap();
    std::fs::write(src.join("small.txt"), b"hello\n").unwrap();
    std::fs::write(src.join("sub/inner.txt"), b"inner\n").unwrap();
    std::os::unix::fs::symlink("small.txt", src.join("link")).unwrap();
    let long_target = "t".repeat(80);
    std::os::unix::fs::symlink(&long_target, src.join("longlink")).unwrap();

    for bs in ["1024", "4096"] {
        let img = scratch.path(&format!("populated-{bs}.img"));
        mke2fs(&mk, &img, 64 * MIB, &["-b", bs, "-d", src.to_str().unwrap()]);
        assert_fsck_clean(&e2fsck, &img);
        let mut image = open(&img);
        let want: BTreeSet<String> =
            [".", "..", "lost+found", "big.bin", "small.txt", "sub", "link", "longlink"].map(String::from).into();
        assert_eq!(names(&mut image, ROOT_INO), want, "bs {bs}");
        let sub = image.lookup("/sub").unwrap();
        assert_eq!(names(&mut image, sub), [".", "..", "inner.txt"].map(String::from).into());

        let big_ino = image.lookup("/big.bin").unwrap();
        assert_eq!(image.read_file(big_ino, 1 << 20).unwrap(), big, "bs {bs}");
        let inode = image.read_inode(big_ino).unwrap();
        let physical: Vec<u64> = image
            .extents(big_ino, &inode)
            .unwrap()
            .iter()
            .flat_map(|e| e.physical..e.physical + u64::from(e.len))
            .collect();
        assert_eq!(physical, debugfs_blocks(&img, "/big.bin"), "extents match debugfs, bs {bs}");

        let small = image.lookup("/small.txt").unwrap();
        assert_eq!(image.read_file(small, 100).unwrap(), b"hello\n");
        let inner = image.lookup("/sub/inner.txt").unwrap();
        assert_eq!(image.read_file(inner, 100).unwrap(), b"inner\n");
        let link = image.lookup("/link").unwrap();
        assert_eq!(image.read_file(link, 100).unwrap(), b"small.txt", "fast symlink in i_block");
        let longlink = image.lookup("/longlink").unwrap();
        assert_eq!(image.read_file(longlink, 100).unwrap(), long_target.as_bytes(), "symlink in a block");
        assert!(image.read_file(big_ino, 1000).is_err(), "the size limit is enforced");
    }
}
