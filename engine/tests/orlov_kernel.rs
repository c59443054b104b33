//! Orlov held to the kernel: on two copies of one mke2fs image (64 GiB
//! sparse, 32 flex groups of 16), the host kernel and the engine make the
//! same directories, and every one gets the same inode number: top-level
//! directories spread from the name's half MD4 hash (with the image's hash
//! seed) over flex groups, nested ones and files near their parent.
//! Each file then gets 64 KiB of data, which both pack into the locality
//! group's preallocation: the share of files starting in the kernel's
//! group is asserted (half at least), the share starting at its very
//! block printed.
//! Needs root for the loop mount; skipped without it.

mod common;

use std::path::Path;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::image::Image;
use ext4_engine::Ext4;
use ext4_model::{FileSystem, MountConfig};
use ext4_testkit::loop_mount::{is_root, LoopMount};

/// Top-level directories, two nested in each of the first eight, a file in each nested one.
fn tree() -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for i in 0..24 {
        out.push((format!("/top{i}"), true));
    }
    for i in 0..8 {
        for j in 0..2 {
            out.push((format!("/top{i}/sub{j}"), true));
            out.push((format!("/top{i}/sub{j}/file"), false));
        }
    }
    out
}

fn kernel_inodes(img: &Path, mnt: &Path) -> Option<Vec<u64>> {
    let guard = match LoopMount::mount(img, mnt, "") {
        Ok(g) => g,
        Err(why) => {
            println!("SKIPPED: {why}");
            return None;
        }
    };
    let mut inos = Vec::new();
    for (path, dir) in tree() {
        let p = mnt.join(path.trim_start_matches('/'));
        if dir {
            std::fs::create_dir(&p).unwrap();
        } else {
            std::fs::write(&p, vec![7u8; DATA]).unwrap();
        }
        inos.push(std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&p).unwrap()));
    }
    drop(guard);
    Some(inos)
}

#[test]
fn directories_and_files_get_the_kernels_inode_numbers() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    if !is_root() {
        println!("SKIPPED: loop-mounting needs root");
        return;
    }
    let dir = Scratch::new("orlov-kernel");
    let (kimg, eimg) = (dir.path("kernel.img"), dir.path("engine.img"));
    for img in [&kimg, &eimg] {
        std::fs::File::create(img).unwrap().set_len(64 << 30).unwrap();
        let out = run(&mk, &["-q", "-t", "ext4", "-F", "-b", "4096", "-E", "hash_seed=11111111-2222-3333-4444-555555555555", img.to_str().unwrap()]);
        assert!(out.status.success(), "mke2fs: {}", combined(&out));
        assert_fsck_clean(&e2fsck, img);
    }
    let mnt = dir.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let Some(kernel) = kernel_inodes(&kimg, &mnt) else { return };

    let mut fs = Ext4::mount(FileDevice::open(&eimg, true).unwrap(), &MountConfig::default()).unwrap();
    let mut engine = Vec::new();
    for (path, is_dir) in tree() {
        if is_dir {
            fs.mkdir(&path, 0o755).unwrap();
        } else {
            fs.create(&path, 0o644).unwrap();
            fs.write(&path, 0, &[7u8; DATA]).unwrap();
        }
        engine.push(fs.stat(&path).unwrap().ino);
    }
    drop(fs.unmount().unwrap());
    assert_fsck_clean(&e2fsck, &eimg);
    let differ: Vec<String> = tree()
        .iter()
        .zip(kernel.iter().zip(&engine))
        .filter(|(_, (k, e))| k != e)
        .map(|((p, _), (k, e))| format!("{p}: kernel {k}, engine {e}"))
        .collect();
    assert!(differ.is_empty(), "{} of {} differ:\n{}", differ.len(), engine.len(), differ.join("\n"));

    // Where each file's data starts, read back from both unmounted images.
    let files: Vec<String> = tree().into_iter().filter(|(_, d)| !d).map(|(p, _)| p).collect();
    let (k, e) = (first_data_blocks(&kimg, &files), first_data_blocks(&eimg, &files));
    let group = |b: &Option<(u32, u64)>| b.map(|(g, _)| g);
    let same_group = k.iter().zip(&e).filter(|(a, b)| group(a) == group(b)).count();
    let same_block = k.iter().zip(&e).filter(|(a, b)| a == b).count();
    println!(
        "allocator held to the kernel: {}/{} inode numbers equal; file data starting in the kernel's group {same_group}/{n}, at its block {same_block}/{n} (kernel {:?}, engine {:?})",
        engine.len(),
        engine.len(),
        k.iter().map(group).collect::<Vec<_>>(),
        e.iter().map(group).collect::<Vec<_>>(),
        n = files.len()
    );
    // The kernel packs these small files into its locality group's
    // preallocation, one per CPU: write-back that moves to another CPU
    // part way starts a second one, so half is the floor (before mballoc
    // the engine had 2 of 16).
    assert!(same_group * 2 >= files.len(), "file data left the kernel's groups: {same_group}/{}", files.len());
}

const DATA: usize = 64 << 10;

/// The group and block of each file's first data block.
fn first_data_blocks(img: &Path, files: &[String]) -> Vec<Option<(u32, u64)>> {
    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    let geo = image.geometry().clone();
    files
        .iter()
        .map(|p| {
            let ino = image.lookup(p).unwrap();
            let inode = image.read_named_inode(ino).unwrap();
            let first = image.extents(ino, &inode).unwrap().first().map(|x| x.physical)?;
            Some((geo.group_of_block(first)?, first))
        })
        .collect()
}
