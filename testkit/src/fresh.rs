//! Fresh filesystems for tests: the engine's mkfs on a memory device, with
//! fixed identity and time so every test image is byte-identical run to run.

use ext4_engine::device::BlockDevice;
use ext4_engine::device_mem::MemDevice;
use ext4_engine::fs::Ext4;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::MountConfig;

/// The instant every test image is made at (seconds since the epoch).
pub const EPOCH_SECS: i64 = 1_700_000_000;
/// UUID of test images unless a test names its own.
pub const UUID: [u8; 16] = *b"ext4-testkit-img";
/// Directory hash seed of test images.
pub const HASH_SEED: [u8; 16] = [3; 16];

/// mkfs options for a test image of `bytes` that `mount` can mount.
pub fn options(mount: &MountConfig, bytes: u64) -> MkfsOptions {
    MkfsOptions::for_mount(mount, bytes, UUID, HASH_SEED, EPOCH_SECS)
}

/// A memory device holding a fresh image made with `opts`, flushed.
pub fn image(opts: &MkfsOptions) -> MemDevice {
    let mut dev = MemDevice::new(opts.size_bytes);
    mkfs(&mut dev, opts).unwrap_or_else(|e| panic!("mkfs of a test image ({opts:?}): {e}"));
    dev.flush().expect("a memory device flushes");
    dev
}

/// A fresh image of `bytes` for `mount`, mounted with it.
pub fn mounted(mount: &MountConfig, bytes: u64) -> Ext4<MemDevice> {
    let dev = image(&options(mount, bytes));
    Ext4::mount(dev, mount).unwrap_or_else(|e| panic!("mount of a fresh image with `{mount}`: {e}"))
}
