//! Images the mounted engine wrote must satisfy real e2fsprogs: seeded
//! workloads (many files and directories, a file whose extent tree is deep
//! after many small punched holes, fallocate/punch/collapse/insert, renames,
//! hard links, fast and slow symlinks, unlinks) at every block size from 1K
//! to 64K, then `e2fsck -fn` must print nothing but its banner, pass lines
//! and summary, `e2fsck -fy` on a copy must change nothing, and `debugfs`
//! must read back the model's bytes and show the deep tree.

mod common;

use std::path::Path;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_engine::Ext4;
use ext4_model::agree::agrees;
use ext4_model::op::{FallocFlags, Op, Reply};
use ext4_model::{DataMode, FileSystem, Model, MountConfig, RenameFlags};

/// Sparse image sizes: big blocks need room for 120 files of up to 18 blocks.
fn image_bytes(bs: u32) -> u64 {
    if bs >= 16384 {
        1 << 30
    } else {
        128 << 20
    }
}

use common::Rng;

const DIRS: u64 = 8;
const FILES: u64 = 120;

fn file(i: u64) -> String {
    format!("/d{}/f{i}", i % DIRS)
}

/// Holes punched into /deep: enough for depth 2 at small block sizes
/// (4 root slots x (bs-12)/12 entries per leaf is the depth-1 limit).
fn deep_holes(bs: u64) -> u64 {
    if bs <= 2048 {
        800
    } else if bs <= 4096 {
        400
    } else {
        60
    }
}

fn workload(bs: u64, seed: u64) -> Vec<Op> {
    let mut r = Rng(seed);
    let mut ops = Vec::new();
    for d in 0..DIRS {
        ops.push(Op::Mkdir { path: format!("/d{d}"), perm: 0o755 });
        for s in 0..3 {
            ops.push(Op::Mkdir { path: format!("/d{d}/sub{s}"), perm: 0o750 });
        }
    }
    for i in 0..FILES {
        ops.push(Op::Create { path: file(i), perm: 0o644 });
        let len = 1 + r.below(bs * 12) as u32;
        ops.push(Op::Write { path: file(i), offset: r.below(bs * 6), len, seed: i });
        if i % 5 == 0 {
            ops.push(Op::Write { path: file(i), offset: r.below(bs * 40), len: 1 + r.below(3000) as u32, seed: i + 1000 });
        }
    }
    // Direct I/O: aligned writes over data and into holes (one a sector
    // short of whole blocks), a misaligned one that leaves its first hole
    // unwritten, and one whose end fails after the extents before it.
    for k in 0..8u64 {
        let len = bs * (1 + r.below(4)) - 512 * (k % 2);
        ops.push(Op::DirectWrite { path: file(k * 5 + 3), offset: bs * r.below(30), len: len as u32, seed: 500 + k });
    }
    ops.push(Op::Truncate { path: file(4), size: bs * 64 });
    ops.push(Op::DirectWrite { path: file(4), offset: bs * 40 + 1, len: 3000, seed: 600 });
    ops.push(Op::DirectWrite { path: file(4), offset: bs * 50, len: (bs * 3 + 100) as u32, seed: 601 });
    // Writes through a shared mapping: into holes, over data, cut at EOF.
    for k in 0..6u64 {
        ops.push(Op::MapWrite { path: file(k * 5 + 2), offset: r.below(bs * 12), len: 1 + r.below(bs * 3) as u32, seed: 700 + k });
    }
    // A file with many extents: contiguous data, then every other block punched.
    let holes = deep_holes(bs);
    ops.push(Op::Create { path: "/deep".into(), perm: 0o600 });
    ops.push(Op::Write { path: "/deep".into(), offset: 0, len: (holes * 2 * bs) as u32, seed: 77 });
    let punch = FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE);
    for h in 0..holes {
        ops.push(Op::Fallocate { path: "/deep".into(), mode: punch, offset: (2 * h + 1) * bs, len: bs });
    }
    // fallocate in every mode on a few files.
    for i in 0..10 {
        let p = file(i * 7);
        let mode = match i % 6 {
            0 => FallocFlags(FallocFlags::KEEP_SIZE),
            1 => FallocFlags::ALLOCATE,
            2 => punch,
            3 => FallocFlags(FallocFlags::ZERO_RANGE),
            4 => FallocFlags(FallocFlags::COLLAPSE_RANGE),
            _ => FallocFlags(FallocFlags::INSERT_RANGE),
        };
        let (offset, len) = if i % 6 >= 4 { (bs * r.below(3), bs * (1 + r.below(2))) } else { (r.below(bs * 20), 1 + r.below(bs * 8)) };
        ops.push(Op::Fallocate { path: p, mode, offset, len });
    }
    // Hard links, symlinks (fast and slow), renames.
    for k in 0..20 {
        ops.push(Op::Link { from: file(k * 3), to: format!("/d{}/link{k}", (k + 1) % DIRS) });
    }
    for k in 0..6 {
        ops.push(Op::Symlink { target: file(k), path: format!("/fast{k}") });
        let long = format!("/d{}/{}", k % DIRS, "x".repeat(70 + k as usize * 20));
        ops.push(Op::Symlink { target: long, path: format!("/d{}/slow{k}", k % DIRS) });
    }
    for k in 0..20 {
        let from = file(FILES - 1 - k);
        ops.push(Op::Rename { from, to: format!("/d{}/sub{}/moved{k}", r.below(DIRS), r.below(3)) });
    }
    ops.push(Op::Rename { from: "/d7/sub0".into(), to: "/d6/moved-dir".into() });
    ops.push(Op::Rename { from: "/d1/f1".into(), to: "/d2/f2".into() });
    // renameat2: a directory and a file swap parents (both "..", both
    // parents' link counts), two directories swap, and a refused replace.
    ops.push(Op::Renameat2 { from: "/d3/sub2".into(), to: "/d4/f4".into(), flags: RenameFlags::Exchange });
    ops.push(Op::Renameat2 { from: "/d5/sub0".into(), to: "/d0/sub1".into(), flags: RenameFlags::Exchange });
    ops.push(Op::Renameat2 { from: "/d2/f2".into(), to: "/d4/sub2".into(), flags: RenameFlags::NoReplace });
    ops.push(Op::Renameat2 { from: "/d2/f2".into(), to: "/d4/kept".into(), flags: RenameFlags::NoReplace });
    // Unlinks (some of them hard-linked), rmdir, truncates.
    for k in 0..30 {
        ops.push(Op::Unlink { path: file(k * 2 + 1) });
    }
    ops.push(Op::Rmdir { path: "/d7/sub1".into() });
    for k in 0..10 {
        ops.push(Op::Truncate { path: file(k * 4 + 2), size: r.below(bs * 30) });
    }
    ops.push(Op::Sync);
    ops
}

fn run_workload(e2fsck: &Path, dir: &Scratch, bs: u32, data: Option<DataMode>, cluster_size: Option<u32>) {
    let img = dir.path(&format!("bs{bs}-{data:?}-{cluster_size:?}.img"));
    let mut dev = FileDevice::create(&img, image_bytes(bs)).unwrap();
    let config = MountConfig { block_size: bs, data, cluster_size, ..MountConfig::default() };
    let o = MkfsOptions::for_mount(&config, image_bytes(bs), *b"e2fsck-workload!", [5; 16], ext4_testkit::fresh::EPOCH_SECS);
    mkfs(&mut dev, &o).unwrap();
    let mut fs = Ext4::mount(dev, &config).unwrap();
    let mut model = Model::new(&config).unwrap();
    let ops = workload(u64::from(bs), u64::from(bs));
    for (i, op) in ops.iter().enumerate() {
        let (m, e) = (model.apply(op), fs.apply(op));
        if let Err(d) = agrees(&m, &e) {
            panic!("bs {bs} op {i} {op:?}: {d}");
        }
        if let Op::Renameat2 { to, .. } = op {
            let want = if to == "/d4/sub2" { Err(ext4_model::Errno::EEXIST) } else { Ok(Reply::Done) };
            assert_eq!(m, want, "bs {bs} op {i} {op:?}: the swaps and moves are meant to happen");
        }
    }
    fs.check_allocator().unwrap();
    drop(fs.unmount().unwrap());

    let fsck_text = assert_fsck_clean(e2fsck, &img);
    println!("bs {bs}: {fsck_text}");
    assert_fsck_fy_clean(e2fsck, &img);

    let debugfs = tool("debugfs").expect("debugfs next to e2fsck");
    let name = img.to_str().unwrap();
    for path in ["/deep", "/d0/f0", "/d2/f2", "/d3/f3", "/d4/f12", "/d5/f21", "/d6/f70", "/d0/f56"] {
        let want = match model.apply(&Op::Stat { path: path.into() }) {
            Ok(Reply::Stat(s)) => match model.apply(&Op::Read { path: path.into(), offset: 0, len: s.size as u32 }) {
                Ok(Reply::Data(d)) => d,
                other => panic!("model read {path}: {other:?}"),
            },
            _ => continue,
        };
        let out = run(&debugfs, &["-R", &format!("cat {path}"), name]);
        assert!(out.status.success(), "debugfs cat {path}: {}", combined(&out));
        assert!(out.stdout == want, "bs {bs}: debugfs cat {path} gave {} bytes, the model {}", out.stdout.len(), want.len());
    }
    let out = run(&debugfs, &["-R", "ex /deep", name]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let max_depth = text
        .lines()
        .filter_map(|l| l.trim_start().split_once('/').and_then(|(_, rest)| rest.split_whitespace().next()?.parse::<u32>().ok()))
        .max()
        .unwrap_or(0);
    let holes = deep_holes(u64::from(bs));
    let expect_depth = if holes > 4 * (u64::from(bs) - 12) / 12 { 2 } else { 1 };
    assert_eq!(max_depth, expect_depth, "bs {bs}: debugfs ex /deep:\n{text}");
    println!("bs {bs}: deep tree depth {max_depth}, {} lines of ex", text.lines().count());
    let _ = std::fs::remove_file(&img);
}

#[test]
fn engine_images_pass_e2fsck_at_every_block_size() {
    let Some((e2fsck, _, _)) = e2fsprogs() else { return };
    let dir = Scratch::new("fs-e2fsck");
    for bs in [1024, 2048, 4096, 8192, 16384, 65536] {
        run_workload(&e2fsck, &dir, bs, None, None);
    }
}

/// data=journal images hold file data that went through the log and the
/// checkpoint; data=writeback's commits never waited for it.
#[test]
fn engine_images_pass_e2fsck_in_every_data_mode() {
    let Some((e2fsck, _, _)) = e2fsprogs() else { return };
    let dir = Scratch::new("fs-e2fsck-modes");
    for bs in [1024, 4096, 65536] {
        for data in [DataMode::Writeback, DataMode::Journal] {
            run_workload(&e2fsck, &dir, bs, Some(data), None);
        }
    }
}

/// bigalloc: 4 KiB blocks in clusters of 16 KiB and 64 KiB, 64 KiB blocks
/// in 256 KiB clusters, in lockstep with the model (st_blocks and ENOSPC in
/// clusters, collapse/insert refused off cluster boundaries).
#[test]
fn engine_bigalloc_images_pass_e2fsck() {
    let Some((e2fsck, _, _)) = e2fsprogs() else { return };
    let dir = Scratch::new("fs-e2fsck-bigalloc");
    for (bs, cluster) in [(4096, 16384), (4096, 65536), (65536, 262144)] {
        run_workload(&e2fsck, &dir, bs, None, Some(cluster));
    }
    run_workload(&e2fsck, &dir, 4096, Some(DataMode::Journal), Some(65536));
}

/// Random op sequences (the model's strategy) also leave images e2fsck
/// accepts: odd corners of collapse/insert/zero-range and renames included.
mod random_sequences {
    use super::*;
    use ext4_testkit::strategy;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: std::env::var("E2FSCK_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24), failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn random_workloads_stay_fsck_clean(
            bs in prop::sample::select(vec![1024u32, 2048, 4096, 8192, 16384, 65536]),
            page_size in prop::sample::select(vec![4096u32, 65536]),
            ops in prop::collection::vec(strategy::op(), 1..120),
        ) {
            let Some(e2fsck) = tool("e2fsck") else { return Ok(()) };
            // One per case: a static's would never be dropped, leaving its directory behind.
            let scratch = Scratch::new("fs-e2fsck-random");
            let img = scratch.path(&format!("random-{bs}-{page_size}-{}.img", ops.len()));
            let size = 128 << 20;
            let mut dev = FileDevice::create(&img, size).unwrap();
            let mut o = MkfsOptions::new(size, *b"random-workload!", [6; 16], ext4_testkit::fresh::EPOCH_SECS);
            o.block_size = bs;
            mkfs(&mut dev, &o).unwrap();
            let config = MountConfig { block_size: bs, page_size, ..MountConfig::default() };
            let mut fs = Ext4::mount(dev, &config).unwrap();
            let mut model = Model::new(&config).unwrap();
            for op in &ops {
                let (m, e) = (model.apply(op), fs.apply(op));
                prop_assert!(agrees(&m, &e).is_ok(), "{op:?}: {:?}", agrees(&m, &e));
            }
            drop(fs.unmount().unwrap());
            assert_fsck_clean(&e2fsck, &img);
        }
    }
}
