//! The engine in lockstep with the model: random op sequences under several
//! mount configurations must get answers `ext4_model::agree::agrees` accepts,
//! and after unmount + mount the whole tree (listings, stat, contents,
//! FIEMAP, symlink targets) must still agree with the model.

use ext4_engine::device_mem::MemDevice;
use ext4_engine::Ext4;
use ext4_model::agree::agrees;
use ext4_model::op::{FileKind, Op, Reply};
use ext4_testkit::strategy;
use ext4_model::{AllocPolicy, DataMode, FileSystem, Model, MountConfig};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const DEVICE_BYTES: u64 = 512 << 20;
/// Whole files up to this size are compared byte for byte after remount.
const FULL_READ_MAX: u64 = 1 << 20;
/// Bytes compared at each end (and per extent) of bigger files.
const WINDOW: u64 = 64 << 10;

fn fresh(config: &MountConfig) -> Ext4<MemDevice> {
    ext4_testkit::fresh::mounted(config, DEVICE_BYTES)
}

fn check(what: &str, model: &ext4_model::Outcome, engine: &ext4_model::Outcome) -> Result<(), TestCaseError> {
    agrees(model, engine).map_err(|d| TestCaseError::fail(format!("{what}: {d}")))
}

/// Compares file contents over the ranges that matter.
fn compare_file(model: &mut Model, fs: &mut Ext4<MemDevice>, path: &str, size: u64) -> Result<(), TestCaseError> {
    let mut ranges = Vec::new();
    if size <= FULL_READ_MAX {
        ranges.push((0, size));
    } else {
        ranges.push((0, WINDOW));
        ranges.push((size - WINDOW, WINDOW));
        if let Ok(exts) = model.fiemap(path, ext4_model::FiemapRequest::whole(0)) {
            ranges.extend(exts.iter().map(|e| (e.logical, e.length.min(WINDOW))));
        }
    }
    for (off, len) in ranges {
        let op = Op::Read { path: path.to_string(), offset: off, len: len as u32 };
        check(&format!("remount read {path} @{off}+{len}"), &model.apply(&op), &fs.apply(&op))?;
    }
    Ok(())
}

/// Walks the model's tree and holds the engine to every name in it.
fn compare_tree(model: &mut Model, fs: &mut Ext4<MemDevice>, dir: &str) -> Result<(), TestCaseError> {
    let list = Op::Readdir { path: dir.to_string() };
    let expected = model.apply(&list);
    check(&format!("remount readdir {dir}"), &expected, &fs.apply(&list))?;
    let Ok(Reply::Entries(entries)) = expected else { return Ok(()) };
    for e in entries {
        let path = if dir == "/" { format!("/{}", e.name) } else { format!("{dir}/{}", e.name) };
        let stat = Op::Stat { path: path.clone() };
        let st = model.apply(&stat);
        check(&format!("remount stat {path}"), &st, &fs.apply(&stat))?;
        match e.kind {
            FileKind::Directory => compare_tree(model, fs, &path)?,
            FileKind::Symlink => {
                let op = Op::Readlink { path: path.clone() };
                check(&format!("remount readlink {path}"), &model.apply(&op), &fs.apply(&op))?;
            }
            FileKind::Regular => {
                let size = match st {
                    Ok(Reply::Stat(s)) => s.size,
                    _ => 0,
                };
                compare_file(model, fs, &path, size)?;
                let op = Op::Fiemap { path: path.clone(), start: 0, len: u64::MAX, flags: 0, count_only: false };
                check(&format!("remount fiemap {path}"), &model.apply(&op), &fs.apply(&op))?;
                let op = Op::Fiemap { path: path.clone(), start: 0, len: u64::MAX, flags: 0, count_only: true };
                check(&format!("remount fiemap count {path}"), &model.apply(&op), &fs.apply(&op))?;
            }
        }
    }
    Ok(())
}

fn run(config: MountConfig, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model = Model::new(&config).expect("valid config");
    let mut fs = fresh(&config);
    for (i, op) in ops.iter().enumerate() {
        let m = model.apply(op);
        let e = fs.apply(op);
        check(&format!("op {i} {op:?}"), &m, &e)?;
    }
    fs.check_allocator().map_err(TestCaseError::fail)?;
    let dev = fs.unmount().map_err(|e| TestCaseError::fail(format!("unmount: {e}")))?;
    let mut fs = Ext4::mount(dev, &config).map_err(|e| TestCaseError::fail(format!("remount: {e}")))?;
    compare_tree(&mut model, &mut fs, "/")?;
    fs.check_allocator().map_err(TestCaseError::fail)?;
    Ok(())
}

/// Cases per configuration: 64, or `LOCKSTEP_CASES` for a longer hunt.
fn cases() -> u32 {
    std::env::var("LOCKSTEP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
}

fn config(block_size: u32, page_size: u32) -> MountConfig {
    MountConfig { block_size, page_size, ..MountConfig::default() }
}

macro_rules! lockstep {
    ($name:ident, $config:expr) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]
            #[test]
            fn $name(ops in prop::collection::vec(strategy::op(), 0..80)) {
                run($config, &ops)?;
            }
        }
    };
}

lockstep!(bs4096_ps4096, config(4096, 4096));
lockstep!(bs1024_ps4096, config(1024, 4096));
lockstep!(bs65536_ps4096, config(65536, 4096));
lockstep!(bs4096_ps65536, config(4096, 65536));
lockstep!(bs1024_ps65536_nodelalloc, MountConfig { delalloc: Some(false), ..config(1024, 65536) });
lockstep!(bs4096_data_journal, MountConfig { data: Some(DataMode::Journal), ..config(4096, 4096) });
lockstep!(bs2048_no_journal, MountConfig { has_journal: false, ..config(2048, 4096) });
lockstep!(
    bs4096_skip_uninit_no_orlov,
    MountConfig { alloc: AllocPolicy { skip_block_uninit: true, orlov: false, ..AllocPolicy::default() }, ..config(4096, 16384) }
);

/// Same ops on the same image give byte-identical images.
#[test]
fn same_ops_same_image() {
    let ops = vec![
        Op::Mkdir { path: "/d".into(), perm: 0o755 },
        Op::Create { path: "/d/f".into(), perm: 0o644 },
        Op::Write { path: "/d/f".into(), offset: 5000, len: 70000, seed: 3 },
        Op::Symlink { target: "/d/f".into(), path: "/s".into() },
        Op::Fallocate { path: "/d/f".into(), mode: ext4_model::FallocFlags(0x3), offset: 8192, len: 8192 },
        Op::Sync,
    ];
    let image = || {
        let mut fs = fresh(&config(4096, 4096));
        for op in &ops {
            assert!(fs.apply(op).is_ok(), "{op:?}");
        }
        fs.unmount().unwrap()
    };
    let (a, b) = (image(), image());
    assert!(a == b, "two runs wrote different images");
}

/// A mount configuration ext4 refuses is a typed error, not a mount.
#[test]
fn refused_configs_do_not_mount() {
    let dev = fresh(&config(4096, 4096)).unmount().unwrap();
    let bad = MountConfig { data: Some(DataMode::Journal), delalloc: Some(true), ..config(4096, 4096) };
    let err = Ext4::mount(dev.clone(), &bad).err().expect("data=journal + delalloc is refused");
    assert!(err.to_string().contains("data=journal"), "{err}");
    let err = Ext4::mount(dev, &config(1024, 4096)).err().expect("block size mismatch");
    assert!(err.to_string().contains("block size"), "{err}");
}

/// Throughput on a RAM device: `cargo test --release --test fs_lockstep --
/// --ignored --nocapture throughput` prints engine-only and lockstep ops/s.
/// Every answer must still agree with the model.
#[test]
#[ignore]
fn throughput() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let config = config(4096, 4096);
    let mut runner = TestRunner::deterministic();
    let strat = strategy::op();
    let ops: Vec<Op> = (0..200_000).map(|_| strat.new_tree(&mut runner).unwrap().current()).collect();
    let mut model = Model::new(&config).unwrap();
    let mut fs = fresh(&config);
    let t = std::time::Instant::now();
    let engine_out: Vec<_> = ops.iter().map(|op| fs.apply(op)).collect();
    let engine_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let model_out: Vec<_> = ops.iter().map(|op| model.apply(op)).collect();
    let model_s = t.elapsed().as_secs_f64();
    for (i, (m, e)) in model_out.iter().zip(&engine_out).enumerate() {
        assert!(agrees(m, e).is_ok(), "op {i} {:?}: {:?}", ops[i], agrees(m, e));
    }
    let n = ops.len() as f64;
    println!("engine {:.0} ops/s, model {:.0} ops/s, lockstep {:.0} ops/s", n / engine_s, n / model_s, n / (engine_s + model_s));
}
