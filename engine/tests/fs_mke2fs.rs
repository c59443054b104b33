//! The engine mounts images the real `mke2fs -t ext4 -d DIR` populated (lazy
//! inode tables, resize inode, reserved GDT blocks, its own allocation
//! layout), reads what mke2fs put there, changes it (creates, writes,
//! appends, unlinks, renames, mkdir/rmdir, fallocate), and leaves an image
//! `e2fsck -fn` finds clean; bigalloc images (`-O bigalloc -C`) too.

mod common;

use std::path::Path;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::Ext4;
use ext4_model::op::{FallocFlags, FileKind};
use ext4_model::{FileSystem, MountConfig};

fn populate(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    let mut put = |rel: &str, bytes: Vec<u8>| {
        std::fs::write(dir.join(rel), &bytes).unwrap();
        files.push((format!("/{rel}"), bytes));
    };
    put("small.txt", b"hello from mke2fs\n".to_vec());
    put("big.bin", (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect());
    put("sub/inner.txt", b"inner".repeat(1000));
    put("sub/deeper/leaf", vec![0xAB; 5000]);
    std::os::unix::fs::symlink("sub/inner.txt", dir.join("link")).unwrap();
    files
}

fn mke2fs_image(mk: &Path, img: &Path, src: &Path, bs: u32, cluster: Option<u32>) {
    std::fs::File::create(img).unwrap().set_len(32 << 20).unwrap();
    let b = bs.to_string();
    let mut args = vec!["-t", "ext4", "-F", "-q", "-b", &b];
    let c = cluster.map(|c| c.to_string());
    if let Some(c) = &c {
        args.extend(["-O", "bigalloc", "-C", c]);
    }
    args.extend(["-d", src.to_str().unwrap(), img.to_str().unwrap()]);
    let out = run(mk, &args);
    assert!(out.status.success(), "mke2fs failed:\n{}", combined(&out));
}

fn read_all(fs: &mut Ext4<FileDevice>, path: &str) -> Vec<u8> {
    let size = fs.stat(path).unwrap().size;
    fs.read(path, 0, size as u32).unwrap()
}

fn exercise(e2fsck: &Path, mk: &Path, scratch: &Scratch, bs: u32, cluster: Option<u32>) {
    let src = scratch.path(&format!("src{bs}-{cluster:?}"));
    let files = populate(&src);
    let img = scratch.path(&format!("mke2fs{bs}-{cluster:?}.img"));
    mke2fs_image(mk, &img, &src, bs, cluster);
    let config = MountConfig { block_size: bs, cluster_size: cluster, ..MountConfig::default() };
    let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
    for (path, bytes) in &files {
        assert_eq!(&read_all(&mut fs, path), bytes, "bs {bs}: {path} as mke2fs wrote it");
    }
    assert_eq!(fs.readlink("/link").unwrap(), "sub/inner.txt");
    let names: Vec<String> = fs.readdir("/").unwrap().into_iter().map(|e| e.name).collect();
    assert!(names.contains(&"lost+found".to_string()) && names.contains(&"sub".to_string()), "{names:?}");

    fs.unlink("/small.txt").unwrap();
    fs.write("/big.bin", 300_000, &[1u8; 70_000]).unwrap();
    fs.fallocate("/big.bin", FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE), 8192, 16384).unwrap();
    fs.rename("/sub/inner.txt", "/sub/deeper/renamed").unwrap();
    fs.mkdir("/made", 0o755).unwrap();
    for i in 0..60 {
        let p = format!("/made/file{i}");
        fs.create(&p, 0o644).unwrap();
        fs.write(&p, 0, &vec![i as u8 + 1; 100 + i * 333]).unwrap();
    }
    fs.link("/made/file4", "/sub/hard").unwrap();
    fs.symlink(&"/made/".repeat(20), "/made/slow").unwrap();
    fs.mkdir("/gone", 0o700).unwrap();
    fs.rmdir("/gone").unwrap();
    for i in (0..60).step_by(3) {
        fs.unlink(&format!("/made/file{i}")).unwrap();
    }
    fs.check_allocator().unwrap();
    drop(fs.unmount().unwrap());

    assert_fsck_clean(e2fsck, &img);
    assert_fsck_fy_clean(e2fsck, &img);

    let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
    let big = read_all(&mut fs, "/big.bin");
    assert_eq!(big.len(), 370_000);
    assert!(big[8192..8192 + 16384].iter().all(|&b| b == 0), "punched range reads zero");
    assert_eq!(big[300_000..], vec![1u8; 70_000][..]);
    assert_eq!(read_all(&mut fs, "/sub/deeper/renamed"), b"inner".repeat(1000));
    assert_eq!(read_all(&mut fs, "/sub/hard"), vec![5u8; 100 + 4 * 333]);
    assert_eq!(fs.stat("/sub/hard").unwrap().nlink, 2);
    assert_eq!(fs.stat("/made/slow").unwrap().kind, FileKind::Symlink);
    assert!(fs.stat("/small.txt").is_err());
    drop(fs.unmount().unwrap());
    assert_fsck_clean(e2fsck, &img);
}

#[test]
fn mke2fs_populated_images_stay_clean_after_engine_writes() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("fs-mke2fs");
    for bs in [4096, 1024] {
        exercise(&e2fsck, &mk, &scratch, bs, None);
    }
}

/// bigalloc as mke2fs lays it out: clusters of 4 and 16 blocks, files that
/// mke2fs packed, then the engine's writes, punches and unlinks on top.
#[test]
fn mke2fs_bigalloc_images_stay_clean_after_engine_writes() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("fs-mke2fs-bigalloc");
    for cluster in [16384, 65536] {
        exercise(&e2fsck, &mk, &scratch, 4096, Some(cluster));
    }
}
