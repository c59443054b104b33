//! Cross-checks the engine's mkfs against real e2fsprogs: every image must pass
//! `e2fsck -fn` with nothing but the banner, pass lines and summary, survive
//! `e2fsck -fy` with exit 0, and read back through `image.rs` as mkfs built it.

mod common;

use std::path::Path;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::image::Image;
use ext4_engine::mkfs::{mkfs, MkfsOptions, MkfsSummary};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
const TIB: u64 = 1 << 40;
const UUID: [u8; 16] = *b"\x5e\xed\x00\x01engine-mkfs!";
const HASH_SEED: [u8; 16] = *b"hash-seed-engine";
/// 2023-11-14: in the past, so e2fsck does not flag future timestamps.
const TIMESTAMP: i64 = ext4_testkit::fresh::EPOCH_SECS;

fn options(size: u64, block_size: u32) -> MkfsOptions {
    MkfsOptions { block_size, ..MkfsOptions::new(size, UUID, HASH_SEED, TIMESTAMP) }
}

fn make(img: &Path, opts: &MkfsOptions) -> MkfsSummary {
    let mut dev = FileDevice::create(img, opts.size_bytes).expect("create image");
    mkfs(&mut dev, opts).unwrap_or_else(|e| panic!("mkfs {opts:?}: {e}"))
}

/// Everything the engine's image must satisfy, from both sides.
fn check_image(tools: &(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf), img: &Path, summary: &MkfsSummary, csum: bool) {
    let (e2fsck, dumpe2fs, _) = tools;
    let fsck = assert_fsck_clean(e2fsck, img);
    let geo = &summary.geometry;
    let want = format!("11/{} files", geo.inodes_count());
    assert!(fsck.contains(&want), "summary should count {want}:\n{fsck}");
    let used = geo.blocks_count - summary.free_blocks;
    assert!(fsck.contains(&format!(", {used}/{} blocks", geo.blocks_count)), "block counts differ:\n{fsck}");
    assert_fsck_fy_clean(e2fsck, img);
    let h = dumpe2fs_h(dumpe2fs, img);
    assert_eq!(dumpe2fs_field(&h, "Filesystem state").as_deref(), Some("clean"), "{h}");
    if csum {
        assert_eq!(dumpe2fs_field(&h, "Checksum type").as_deref(), Some("crc32c"), "{h}");
    }
    assert_eq!(dumpe2fs_field(&h, "Block size").as_deref(), Some(geo.block_size.to_string().as_str()));

    let dev = FileDevice::open(img, false).unwrap();
    let mut image = Image::open(dev).expect("image.rs opens what mkfs wrote");
    assert_eq!(image.geometry(), geo);
    let names: Vec<String> = image.read_dir(2).unwrap().iter().map(|e| String::from_utf8_lossy(&e.name).into_owned()).collect();
    assert_eq!(names, [".", "..", "lost+found"]);
    let lpf = image.read_dir(11).unwrap();
    assert_eq!(lpf.len(), 2, "lost+found holds only . and ..");
    let free: u64 = image.group_descs().iter().map(|d| u64::from(d.free_blocks)).sum();
    assert_eq!(free, summary.free_blocks);
    assert_eq!(image.superblock().free_blocks_count, summary.free_blocks);
}

fn block_size_case(block_size: u32) {
    let Some(tools) = e2fsprogs() else { return };
    let scratch = Scratch::new(&format!("mkfs-{block_size}"));
    for size in [8 * MIB, 256 * MIB, 16 * GIB] {
        let img = scratch.path(&format!("bs{block_size}-{}m.img", size / MIB));
        let summary = make(&img, &options(size, block_size));
        check_image(&tools, &img, &summary, true);
        std::fs::remove_file(&img).unwrap();
    }
}

#[test]
fn block_size_1k() {
    block_size_case(1024);
}
#[test]
fn block_size_2k() {
    block_size_case(2048);
}
#[test]
fn block_size_4k() {
    block_size_case(4096);
}
#[test]
fn block_size_8k() {
    block_size_case(8192);
}
#[test]
fn block_size_16k() {
    block_size_case(16384);
}
#[test]
fn block_size_32k() {
    block_size_case(32768);
}
#[test]
fn block_size_64k() {
    block_size_case(65536);
}

#[test]
fn variants_without_flex_bg_without_csum_with_64bit_and_zeroed_tables() {
    let Some(tools) = e2fsprogs() else { return };
    let scratch = Scratch::new("mkfs-variants");
    let cases: Vec<(&str, MkfsOptions, bool)> = vec![
        ("noflex", MkfsOptions { flex_bg_log: None, ..options(256 * MIB, 1024) }, true),
        ("nocsum", MkfsOptions { metadata_csum: false, ..options(256 * MIB, 4096) }, false),
        ("64bit", MkfsOptions { sixty_four_bit: true, ..options(256 * MIB, 2048) }, true),
        ("zeroed", MkfsOptions { zero_inode_tables: true, zero_journal: true, ..options(64 * MIB, 4096) }, true),
        ("inodes", MkfsOptions { inode_count: Some(100_000), flex_bg_log: Some(2), ..options(512 * MIB, 1024) }, true),
        ("bigjournal", MkfsOptions { journal: ext4_engine::mkfs::JournalSize::Blocks(200_000), ..options(2 * GIB, 4096) }, true),
    ];
    for (name, opts, csum) in cases {
        let img = scratch.path(&format!("{name}.img"));
        let summary = make(&img, &opts);
        check_image(&tools, &img, &summary, csum);
    }
}

/// A 16 TiB sparse file needs a host filesystem that allows one; ext4 hosts cap
/// files just below 16 TiB, so fall back to /dev/shm (tmpfs).
fn scratch_for_huge_file(size: u64) -> Option<Scratch> {
    for base in [std::env::temp_dir(), "/dev/shm".into()] {
        if !base.is_dir() {
            continue;
        }
        let s = Scratch::in_dir(&base, "mkfs-16t");
        let probe = s.path("probe");
        let ok = std::fs::File::create(&probe).and_then(|f| f.set_len(size)).is_ok();
        let _ = std::fs::remove_file(&probe);
        if ok {
            return Some(s);
        }
    }
    None
}

#[test]
fn sixteen_tib_with_4k_blocks_is_fast_and_sparse() {
    let Some(tools) = e2fsprogs() else { return };
    let size = 16 * TIB;
    let Some(scratch) = scratch_for_huge_file(size) else {
        println!("SKIPPED: no scratch filesystem allows a 16 TiB sparse file");
        return;
    };
    let img = scratch.path("16t.img");
    let started = std::time::Instant::now();
    let summary = make(&img, &options(size, 4096));
    println!("mkfs of 16 TiB wrote {} MiB in {:?}", summary.bytes_written / MIB, started.elapsed());
    assert!(summary.geometry.desc_size == 64, "2^32 blocks need 64bit");
    assert!(summary.bytes_written < 512 * MIB, "only metadata is written");
    check_image(&tools, &img, &summary, true);
}
