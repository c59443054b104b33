//! `engine::check` finds nothing wrong with good images: the engine's own
//! mkfs at several block sizes and sizes, real `mke2fs -t ext4` in several
//! flavours, and a `mke2fs -d` image populated with every kind of file. Each
//! image also passes `e2fsck -fn`, so "clean" is not merely lenient.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::*;
use ext4_engine::check::{check, CheckReport};
use ext4_engine::device_file::FileDevice;
use ext4_engine::device_mem::MemDevice;
use ext4_engine::mkfs::{mkfs, MkfsOptions};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const UUID: [u8; 16] = *b"check-clean-uuid";

fn check_file(img: &Path) -> CheckReport {
    let dev = FileDevice::open(img, false).expect("open image");
    let start = Instant::now();
    let (_, report) = check(dev);
    println!("check {}: {:?} ({} bytes in {} reads)", img.display(), start.elapsed(), report.stats.bytes_read, report.stats.reads);
    report
}

fn assert_clean(what: &str, r: &CheckReport) {
    assert!(r.is_clean() && r.problems.is_empty(), "{what} should be clean:\n{r}");
}

fn mke2fs(mk: &Path, img: &Path, size: u64, args: &[&str]) {
    std::fs::File::create(img).unwrap().set_len(size).unwrap();
    let mut all = vec!["-t", "ext4", "-F", "-q"];
    all.extend_from_slice(args);
    all.push(img.to_str().unwrap());
    let out = Command::new(mk).args(&all).env("E2FSPROGS_FAKE_TIME", "1700000000").output().expect("run mke2fs");
    assert!(out.status.success(), "mke2fs {args:?} failed:\n{}", combined(&out));
}

#[test]
fn engine_mkfs_images_are_clean_in_memory() {
    for (bs, size) in [(1024, 8 * MIB), (1024, 300 * MIB), (4096, 8 * MIB), (4096, GIB), (65536, 256 * MIB), (65536, 16 * GIB)] {
        let mut dev = MemDevice::new(size);
        let opts = MkfsOptions { block_size: bs, ..MkfsOptions::new(size, UUID, [3; 16], ext4_testkit::fresh::EPOCH_SECS) };
        let summary = mkfs(&mut dev, &opts).unwrap();
        let (_, r) = check(dev);
        assert_clean(&format!("engine mkfs bs {bs} size {size}"), &r);
        assert_eq!(r.stats.blocks_used, summary.geometry.blocks_count - summary.free_blocks);
        assert_eq!(r.stats.dirs, 1, "lost+found (the root is reserved)");
    }
}

#[test]
fn engine_mkfs_variants_are_clean_and_pass_e2fsck() {
    let Some((e2fsck, _, _)) = e2fsprogs() else { return };
    let scratch = Scratch::new("check-clean-engine");
    let base = |size, bs| MkfsOptions { block_size: bs, ..MkfsOptions::new(size, UUID, [3; 16], ext4_testkit::fresh::EPOCH_SECS) };
    let cases = [
        ("1k", base(64 * MIB, 1024)),
        ("4k-16g", base(16 * GIB, 4096)),
        ("64k", base(512 * MIB, 65536)),
        ("no-csum", MkfsOptions { metadata_csum: false, ..base(64 * MIB, 4096) }),
        ("64bit-noflex", MkfsOptions { sixty_four_bit: true, flex_bg_log: None, ..base(128 * MIB, 1024) }),
    ];
    for (name, opts) in cases {
        let img = scratch.path(&format!("{name}.img"));
        let mut dev = FileDevice::create(&img, opts.size_bytes).unwrap();
        mkfs(&mut dev, &opts).unwrap();
        drop(dev);
        assert_fsck_clean(&e2fsck, &img);
        assert_clean(name, &check_file(&img));
        std::fs::remove_file(&img).unwrap();
    }
}

#[test]
fn mke2fs_flavours_are_clean_and_pass_e2fsck() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("check-clean-mke2fs");
    let flavours: [(&str, &[&str]); 8] = [
        ("1k", &["-b", "1024"]),
        ("4k", &["-b", "4096"]),
        ("noflex", &["-b", "4096", "-O", "^flex_bg"]),
        ("64bit", &["-b", "1024", "-O", "64bit"]),
        ("nocsum", &["-b", "4096", "-O", "^metadata_csum"]),
        ("nocsum-1k-noflex", &["-b", "1024", "-O", "^metadata_csum,^flex_bg"]),
        ("quota", &["-b", "4096", "-O", "quota,project"]),
        ("orphan-file", &["-b", "1024", "-O", "orphan_file"]),
    ];
    for (name, args) in flavours {
        let img = scratch.path(&format!("{name}.img"));
        mke2fs(&mk, &img, 96 * MIB, args);
        assert_fsck_clean(&e2fsck, &img);
        assert_clean(name, &check_file(&img));
        std::fs::remove_file(&img).unwrap();
    }
}

/// Fills `dir` with every kind of file the checker must understand.
pub fn populate(dir: &Path) {
    let w = |name: &str, data: &[u8]| std::fs::write(dir.join(name), data).unwrap();
    w("small", b"hello\n");
    w("empty", b"");
    w("three-blocks", &vec![7u8; 3 * 4096 + 5]);
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    std::fs::write(dir.join("sub/inner"), b"inner file").unwrap();
    std::fs::write(dir.join("sub/deeper/leaf"), vec![1u8; 10_000]).unwrap();
    std::fs::hard_link(dir.join("small"), dir.join("small-link")).unwrap();
    std::fs::hard_link(dir.join("small"), dir.join("sub/small-link2")).unwrap();
    std::os::unix::fs::symlink("small", dir.join("fast-link")).unwrap();
    std::os::unix::fs::symlink("x".repeat(200), dir.join("slow-link")).unwrap();
    // 40 MiB: more than one 32768-block extent at 1 KiB blocks, and across groups.
    let big: Vec<u8> = (0..40 * MIB).map(|i| (i / 4096) as u8).collect();
    w("large", &big);
    // Data every 512 KiB: enough extents to need an index block.
    let f = std::fs::File::create(dir.join("sparse")).unwrap();
    for i in 0..24u64 {
        use std::os::unix::fs::FileExt;
        f.write_all_at(b"island", i * 512 * 1024).unwrap();
    }
    f.set_len(24 * 512 * 1024 + 4096).unwrap();
    for i in 0..40 {
        w(&format!("many-{i:03}"), format!("file {i}").as_bytes());
    }
}

#[test]
fn populated_mke2fs_images_are_clean_and_pass_e2fsck() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("check-clean-populated");
    let src = scratch.path("src");
    std::fs::create_dir_all(&src).unwrap();
    populate(&src);
    for (name, args) in [("1k", ["-b", "1024"]), ("4k", ["-b", "4096"])] {
        let img = scratch.path(&format!("{name}.img"));
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-d", src.to_str().unwrap()]);
        mke2fs(&mk, &img, 128 * MIB, &all);
        assert_fsck_clean(&e2fsck, &img);
        let r = check_file(&img);
        assert_clean(name, &r);
        assert_eq!(r.stats.dirs, 3, "lost+found, sub, sub/deeper: {r}");
        assert!(r.stats.max_depth >= 1, "the sparse file needs an index: {r}");
        assert_eq!(r.stats.symlinks, 2);
    }
}

#[test]
fn populated_16g_image_checks_fast() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("check-clean-16g");
    let src = scratch.path("src");
    for d in 0..20 {
        let dir = src.join(format!("d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..150 {
            std::fs::write(dir.join(format!("f{f:03}")), vec![b'a'; (f % 7) * 1000 + 1]).unwrap();
        }
    }
    let img = scratch.path("16g.img");
    mke2fs(&mk, &img, 16 * GIB, &["-b", "4096", "-d", src.to_str().unwrap()]);
    let start = Instant::now();
    let r = check_file(&img);
    let took = start.elapsed();
    assert_clean("16g populated", &r);
    assert_eq!(r.stats.files, 3000);
    println!("16 GiB image, {} inodes: check took {took:?}", r.stats.inodes);
    assert_fsck_clean(&e2fsck, &img);
}
