//! Starting points of the engine's own unit tests (integration tests and
//! other crates use `ext4-testkit`, which cannot reach `pub(crate)` items).

use ext4_model::MountConfig;

use crate::device_mem::MemDevice;
use crate::fs::Ext4;
use crate::mkfs::{mkfs, MkfsOptions};

/// The instant every unit-test image is made at.
pub(crate) const EPOCH_SECS: i64 = 1_700_000_000;

/// A filesystem of `bytes` made by the engine's mkfs on a memory device and
/// mounted with default options.
pub(crate) fn fresh_mounted(bytes: u64) -> Ext4<MemDevice> {
    let mut dev = MemDevice::new(bytes);
    mkfs(&mut dev, &MkfsOptions::new(bytes, *b"engine-unit-test", [3; 16], EPOCH_SECS)).expect("mkfs of a unit-test image");
    Ext4::mount(dev, &MountConfig::default()).expect("mount of a fresh unit-test image")
}

/// A 64 MiB filesystem made for and mounted with `options`.
pub(crate) fn mounted_with(options: &str) -> Ext4<MemDevice> {
    let config: MountConfig = options.parse().expect("mount options");
    let bytes = 64 << 20;
    let mut dev = MemDevice::new(bytes);
    mkfs(&mut dev, &MkfsOptions::for_mount(&config, bytes, *b"engine-unit-test", [3; 16], EPOCH_SECS)).expect("mkfs of a unit-test image");
    Ext4::mount(dev, &config).expect("mount of a fresh unit-test image")
}
