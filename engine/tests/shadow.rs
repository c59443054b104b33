//! A shadow of a mount: the whole state over a copy of its device, so a
//! check can unmount it without touching the mount it copies.

use ext4_engine::check::check;
use ext4_engine::fs::Ext4;
use ext4_model::{FileSystem, MountConfig};

#[test]
fn a_shadow_unmounts_cleanly_and_leaves_the_mount_it_copies_untouched() {
    let config = MountConfig::default();
    let mut fs = ext4_testkit::fresh::mounted(&config, 64 << 20);
    fs.mkdir("/d", 0o755).unwrap();
    fs.create("/d/f", 0o644).unwrap();
    fs.write("/d/f", 0, &vec![7; 50_000]).unwrap();
    fs.sync().unwrap();
    // Dirty state the shadow must carry: never written back by the mount.
    fs.create("/g", 0o644).unwrap();
    fs.write("/g", 4096, &[9; 100]).unwrap();
    let before = fs.device().clone();

    let shadow = fs.shadow(before.clone());
    let written = shadow.unmount().unwrap();
    assert_ne!(written, before, "the shadow wrote back what the mount keeps in memory");
    assert_eq!(*fs.device(), before, "the mount's own device is untouched");
    let (written, report) = check(written);
    assert!(report.is_clean(), "{report}");
    let mut remounted = Ext4::mount(written, &config).unwrap();
    assert_eq!(remounted.stat("/g").unwrap().size, 4196);
    assert_eq!(remounted.read("/d/f", 0, 10).unwrap(), vec![7; 10]);

    // The mount goes on as if nothing had looked.
    fs.write("/g", 0, &[1; 10]).unwrap();
    let (dev, report) = check(fs.unmount().unwrap());
    assert!(report.is_clean(), "{report}");
    let mut again = Ext4::mount(dev, &config).unwrap();
    assert_eq!(again.read("/g", 0, 10).unwrap(), vec![1; 10]);
}
