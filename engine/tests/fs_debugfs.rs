//! Images that mke2fs made and `debugfs -w` populated (write, mkdir, symlink,
//! fallocate, punch) open in the engine and read back exactly, with the
//! unwritten and punched ranges that debugfs left.

mod common;

use common::{e2fsprogs, run, Scratch};
use ext4_engine::device_file::FileDevice;
use ext4_engine::fs::Ext4;
use ext4_model::op::{fiemap_flags, pattern};
use ext4_model::{FiemapRequest, FileKind, FileSystem, MountConfig};

#[test]
fn debugfs_populated_images_read_back() {
    let Some((e2fsck, _, mke2fs)) = e2fsprogs() else { return };
    let Some(debugfs) = common::tool("debugfs") else { return };
    for (bs, flags) in [(4096u32, vec![]), (1024, vec!["-O", "^flex_bg"]), (4096, vec!["-O", "64bit,^metadata_csum"])] {
        let dir = Scratch::new(&format!("debugfs-{bs}-{}", flags.len()));
        let img = dir.path("d.img");
        let host = dir.path("payload");
        let data = pattern(bs as u64, 10 * bs as usize + 123);
        std::fs::write(&host, &data).unwrap();
        let img_s = img.to_str().unwrap();
        let bs_s = bs.to_string();
        let mut args = vec!["-t", "ext4", "-F", "-q", "-b", &bs_s];
        args.extend(flags.iter().copied());
        args.extend([img_s, "64M"]);
        assert!(run(&mke2fs, &args).status.success());
        let script = dir.path("cmds");
        let cmds = format!(
            "write {} a\nmkdir d\nsymlink d/l /a\nwrite {} d/b\nfallocate /d/b 20 29\npunch /a 2 4\nmkdir d/e\n",
            host.display(),
            host.display()
        );
        std::fs::write(&script, cmds).unwrap();
        let out = run(&debugfs, &["-w", "-f", script.to_str().unwrap(), img_s]);
        assert!(out.status.success(), "{}", common::combined(&out));
        common::assert_fsck_clean(&e2fsck, &img);

        let dev = FileDevice::open(&img, true).unwrap();
        let mut fs = Ext4::mount(dev, &MountConfig { block_size: bs, ..MountConfig::default() }).unwrap();
        let mut want = data.clone();
        want[2 * bs as usize..5 * bs as usize].fill(0);
        assert_eq!(fs.read("/a", 0, data.len() as u32 + 10).unwrap(), want, "bs {bs}: punched file");
        assert_eq!(fs.read("/d/b", 0, data.len() as u32).unwrap(), data, "bs {bs}: written file");
        assert_eq!(fs.readlink("/d/l").unwrap(), "/a");
        assert_eq!(fs.stat("/d/e").unwrap().kind, FileKind::Directory);
        assert_eq!(fs.stat("/d").unwrap().nlink, 3);
        // The punched hole is a hole; the preallocation past EOF is unwritten.
        let a = fs.fiemap("/a", FiemapRequest::whole(0)).unwrap();
        assert!(a.iter().all(|e| e.logical + e.length <= 2 * bs as u64 || e.logical >= 5 * bs as u64), "{a:?}");
        let b = fs.fiemap("/d/b", FiemapRequest::whole(0)).unwrap();
        let unwritten: u64 = b.iter().filter(|e| e.flags & fiemap_flags::UNWRITTEN != 0).map(|e| e.length).sum();
        assert_eq!(unwritten, 10 * bs as u64, "bs {bs}: {b:?}");
        // And the engine can change it and leave it clean.
        fs.write("/a", 2 * bs as u64, &[7; 100]).unwrap();
        fs.unlink("/d/b").unwrap();
        fs.unmount().unwrap();
        common::assert_fsck_clean(&e2fsck, &img);
    }
}
