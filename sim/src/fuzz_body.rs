//! Bodies of the cargo-fuzz targets, kept in the library so that a plain
//! `cargo test` replays every corpus file the same way the fuzzer decodes it.

use arbitrary::{Arbitrary, Unstructured};
use ext4_model::{DataMode, FileSystem, Model, MountConfig, Op};

/// Cap on ops one input runs, so a single input stays fast.
pub const MAX_FUZZ_OPS: usize = 64;
/// Cap on one write's length, so an input cannot ask for gigabytes.
pub const MAX_FUZZ_WRITE: u32 = 1 << 20;

/// Bounds what arbitrary bytes make of an op. Uniform u64s and u32s would
/// make nearly every FIEMAP EFBIG or EBADR, so most are brought near the
/// data (start and length within 16 MiB, flags the known three); a bit of
/// each value keeps a few raw.
fn tame(op: &mut Op) {
    match op {
        Op::Write { len, .. } | Op::DirectWrite { len, .. } | Op::MapWrite { len, .. } => *len %= MAX_FUZZ_WRITE,
        Op::Fiemap { start, len, flags, .. } => {
            if *start >> 63 == 0 {
                *start %= 16 << 20;
            }
            if *len >> 63 == 0 {
                *len %= 16 << 20;
            }
            if *flags >> 31 == 0 {
                *flags &= 0x7;
            }
        }
        _ => {}
    }
}

/// The model under arbitrary mount configs and ops: a refused config is a
/// typed error, no op panics, invariants hold after every op, and a crash
/// right now may recover to the current state.
/// Mostly configurations ext4 accepts (so ops get exercised), sometimes raw
/// arbitrary ones (so refusal is exercised).
fn mount_config(u: &mut Unstructured) -> arbitrary::Result<MountConfig> {
    if u.ratio(1, 16)? {
        return MountConfig::arbitrary(u);
    }
    let mut c = MountConfig {
        block_size: *u.choose(&[1024, 2048, 4096, 8192, 16384, 32768, 65536])?,
        page_size: *u.choose(&[4096, 16384, 65536])?,
        has_journal: !u.ratio(1, 8)?,
        data: *u.choose(&[None, Some(DataMode::Ordered), Some(DataMode::Writeback), Some(DataMode::Journal)])?,
        delalloc: *u.choose(&[None, Some(false), Some(true)])?,
        dioread_nolock: *u.choose(&[None, Some(false), Some(true)])?,
        ..MountConfig::default()
    };
    c.read_only = u.ratio(1, 16)?;
    c.auto_da_alloc = !u.ratio(1, 4)?;
    Ok(c)
}

pub fn model_ops(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(config) = mount_config(&mut u) else { return };
    let mut model = match Model::new(&config) {
        Ok(m) => m,
        Err(e) => {
            assert!(config.validate().is_err(), "Model::new refused a config validate accepts: {e}");
            return;
        }
    };
    for _ in 0..MAX_FUZZ_OPS {
        let Ok(mut op) = Op::arbitrary(&mut u) else { break };
        tame(&mut op);
        let _ = model.apply(&op);
        if let Err(e) = model.check_invariants() {
            panic!("model invariant broken after {op:?}: {e}");
        }
    }
    let envelope = model.crash_envelope();
    if let Err(v) = envelope.check(&mut model.clone()) {
        panic!("the current state must be an allowed crash state: {v}");
    }
}

/// Disk size for the lockstep target: small, so mkfs per input stays cheap.
pub const FUZZ_DISK_BYTES: u64 = 64 << 20;

/// Model and engine in lockstep on arbitrary ops: every answer agrees, the
/// engine's fsck is clean after unmount, and a remount shows the same tree.
pub fn lockstep_ops(data: &[u8]) {
    use ext4_engine::device::BlockDevice;
    let mut u = Unstructured::new(data);
    let Ok(mut config) = mount_config(&mut u) else { return };
    if config.validate().is_err() || ext4_engine::fs::not_modelled::unmodelled_option(&config).is_some() {
        return;
    }
    config.read_only = false;
    let mut dev = ext4_engine::device_mem::MemDevice::new(FUZZ_DISK_BYTES);
    let opts = ext4_engine::mkfs::MkfsOptions::for_mount(&config, FUZZ_DISK_BYTES, [0x5a; 16], [0x3c; 16], crate::run::spec::SIM_EPOCH_SECS);
    ext4_engine::mkfs::mkfs(&mut dev, &opts).expect("mkfs of a valid config");
    dev.flush().expect("memory device flush");
    let mut engine = ext4_engine::fs::Ext4::mount(dev, &config).expect("mount of a fresh image");
    let mut model = Model::new(&config).expect("validated config");
    for _ in 0..MAX_FUZZ_OPS {
        let Ok(mut op) = Op::arbitrary(&mut u) else { break };
        tame(&mut op);
        let expected = model.apply(&op);
        let actual = engine.apply(&op);
        if let Err(d) = ext4_model::agree::agrees(&expected, &actual) {
            panic!("engine disagrees with the model on {op:?}: {d}");
        }
    }
    let dev = engine.unmount().expect("unmount");
    let (dev, report) = ext4_engine::check::check(dev);
    assert!(report.is_clean(), "engine fsck after unmount: {report}");
    let mut engine = ext4_engine::fs::Ext4::mount(dev, &config).expect("remount");
    let a = model.looking(|m| ext4_model::durability::view_tree(m)).expect("model tree");
    let b = ext4_model::durability::view_tree(&mut engine).expect("engine tree after remount");
    assert_eq!(a.nodes, b.nodes, "tree changed across unmount and mount");
}
