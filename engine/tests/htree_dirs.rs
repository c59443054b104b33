//! Directories ext4 indexed (htree): the engine lists and looks names up
//! through the leaves, and its first edit drops the index, leaving a linear
//! directory e2fsck finds clean. The htree comes from `e2fsck -fD`, which
//! indexes every directory of more than one block, as the kernel does.

mod common;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::format::inode::FL_INDEX;
use ext4_engine::image::Image;
use ext4_engine::Ext4;
use ext4_model::{FileSystem, MountConfig};

const ENTRIES: usize = 700;

fn indexed_image(mk: &std::path::Path, e2fsck: &std::path::Path, scratch: &Scratch, bs: u32) -> std::path::PathBuf {
    let src = scratch.path(&format!("src{bs}"));
    std::fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..ENTRIES {
        std::fs::write(src.join(format!("big/entry-with-a-name-{i:04}")), [i as u8]).unwrap();
    }
    let img = scratch.path(&format!("htree{bs}.img"));
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let b = bs.to_string();
    let out = run(mk, &["-t", "ext4", "-F", "-q", "-b", &b, "-d", src.to_str().unwrap(), img.to_str().unwrap()]);
    assert!(out.status.success(), "mke2fs: {}", combined(&out));
    // -D rebuilds directories as htrees; exit 1 means "changed", not failure.
    let out = run(e2fsck, &["-fyD", img.to_str().unwrap()]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "e2fsck -fyD: {}", combined(&out));
    img
}

fn has_index(img: &std::path::Path, path: &str) -> bool {
    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    let ino = image.lookup(path).unwrap();
    image.read_inode(ino).unwrap().has_flag(FL_INDEX)
}

#[test]
fn an_htree_directory_is_read_through_its_leaves_and_linear_after_an_edit() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("htree-dirs");
    for bs in [1024, 4096] {
        let img = indexed_image(&mk, &e2fsck, &scratch, bs);
        assert!(has_index(&img, "/big"), "bs {bs}: e2fsck -D made an htree");
        let config = MountConfig { block_size: bs, ..MountConfig::default() };
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        let names = fs.readdir("/big").unwrap();
        assert_eq!(names.len(), ENTRIES, "bs {bs}");
        assert_eq!(fs.read("/big/entry-with-a-name-0699", 0, 10).unwrap(), [(699 % 256) as u8]);
        // Reading leaves the index in place.
        drop(fs.unmount().unwrap());
        assert!(has_index(&img, "/big"));
        assert_fsck_clean(&e2fsck, &img);

        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        fs.unlink("/big/entry-with-a-name-0007").unwrap();
        fs.create("/big/new", 0o644).unwrap();
        fs.rename("/big/entry-with-a-name-0100", "/big/renamed").unwrap();
        drop(fs.unmount().unwrap());
        assert!(!has_index(&img, "/big"), "bs {bs}: the first edit dropped the index");
        assert_fsck_clean(&e2fsck, &img);
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        let names: Vec<String> = fs.readdir("/big").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names.len(), ENTRIES);
        assert!(names.contains(&"new".into()) && names.contains(&"renamed".into()) && !names.contains(&"entry-with-a-name-0007".into()));
        assert_eq!(fs.read("/big/renamed", 0, 10).unwrap(), [100]);
        drop(fs.unmount().unwrap());
    }
}
