//! The allocator held to the host kernel on a workload people run: the
//! tree-copy workload on two copies of one mke2fs image (16 GiB sparse,
//! 8 flex groups), once through a loop mount, once through the engine,
//! then both images read back unmounted and compared. The agreement
//! figures are the allocator's fidelity, printed (CI shows them) and held
//! to floors a regression would break. Needs root; skipped without it.
//! EXT4SIM_DEBUG_ALLOC=1 lists every path placed differently.

use std::path::Path;

use ext4_engine::device_file::FileDevice;
use ext4_engine::fs::Ext4;
use ext4_engine::image::Image;
use ext4_engine::layout::LayoutReport;
use ext4_model::MountConfig;
use ext4_sim::oracle::syscalls::SyscallFs;
use ext4_sim::workloads::{Made, Workload};
use ext4_testkit::e2fsprogs::{combined, e2fsck_clean, tool};
use ext4_testkit::loop_mount::{is_root, LoopMount};

const SEED: u64 = 1;
const SCALE: u32 = 2;

fn layout(img: &Path) -> LayoutReport {
    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    LayoutReport::read(&mut image).unwrap()
}

/// Share of `paths` on which `same` holds, as (agreeing, compared).
fn share(paths: &[String], mut same: impl FnMut(&str) -> Option<bool>) -> (usize, usize) {
    let answers: Vec<bool> = paths.iter().filter_map(|p| same(p)).collect();
    (answers.iter().filter(|&&s| s).count(), answers.len())
}

#[test]
fn tree_copy_lands_where_the_kernel_puts_it() {
    let (Some(mk), Some(e2fsck)) = (tool("mke2fs"), tool("e2fsck")) else {
        println!("SKIPPED: e2fsprogs not installed");
        return;
    };
    if !is_root() {
        println!("SKIPPED: loop-mounting needs root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("ext4sim-alloc-kernel-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("mnt")).unwrap();
    let cleanup = Cleanup(dir.clone());
    let (kimg, eimg) = (dir.join("kernel.img"), dir.join("engine.img"));
    for img in [&kimg, &eimg] {
        std::fs::File::create(img).unwrap().set_len(16 << 30).unwrap();
        let out = std::process::Command::new(&mk)
            .args(["-q", "-t", "ext4", "-F", "-b", "4096", "-E", "hash_seed=11111111-2222-3333-4444-555555555555", "-U", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"])
            .arg(img)
            .output()
            .unwrap();
        assert!(out.status.success(), "mke2fs: {}", combined(&out));
    }
    e2fsck_clean(&e2fsck, &kimg).unwrap();
    let kernel_made: Made = {
        let guard = match LoopMount::mount(&kimg, &dir.join("mnt"), "") {
            Ok(g) => g,
            Err(why) => {
                println!("SKIPPED: {why}");
                return;
            }
        };
        let mut fs = SyscallFs::new(dir.join("mnt"));
        let made = Workload::TreeCopy.run(&mut fs, SEED, SCALE).unwrap();
        drop(fs);
        drop(guard);
        made
    };
    // The host writes nothing back during the workload (gigabytes of
    // memory); a 64 MiB page cache would, and allocation would then change
    // the free counts Orlov reads.
    let engine_made = {
        let mut fs = Ext4::mount(FileDevice::open(&eimg, true).unwrap(), &"page_cache_mb=4096".parse::<MountConfig>().unwrap()).unwrap();
        let made = Workload::TreeCopy.run(&mut fs, SEED, SCALE).unwrap();
        drop(fs.unmount().unwrap());
        made
    };
    assert_eq!(kernel_made, engine_made, "the same seed makes the same calls");
    e2fsck_clean(&e2fsck, &kimg).unwrap();
    e2fsck_clean(&e2fsck, &eimg).unwrap();

    let (k, e) = (layout(&kimg), layout(&eimg));
    let flex = k.flex_size.max(1);
    let dirs = share(&engine_made.dirs, |p| Some(k.find(p)?.inode_group / flex == e.find(p)?.inode_group / flex));
    let first_group = |l: &LayoutReport, p: &str| l.find(p).and_then(|x| x.data_groups.first().copied());
    let files = share(&engine_made.files, |p| Some(first_group(&k, p)? == first_group(&e, p)?));
    if std::env::var_os("EXT4SIM_DEBUG_ALLOC").is_some() {
        for p in engine_made.files.iter().chain(&engine_made.dirs) {
            let (kp, ep) = (k.find(p).unwrap(), e.find(p).unwrap());
            if kp.data_groups != ep.data_groups || kp.inode_group != ep.inode_group {
                println!("{p}: blocks {} kernel inode g{} data {:?}, engine inode g{} data {:?}", kp.blocks, kp.inode_group, kp.data_groups, ep.inode_group, ep.data_groups);
            }
        }
    }
    let (kn, en) = (k.noncontiguous(), e.noncontiguous());
    let pct = |(a, n): (usize, usize)| if n == 0 { 100.0 } else { 100.0 * a as f64 / n as f64 };
    println!(
        "tree-copy (seed {SEED}, scale {SCALE}) held to the host kernel: directories in its flex group {}/{} ({:.0}%), files starting in its group {}/{} ({:.0}%); non-contiguous files kernel {} engine {}, directories kernel {} engine {}; groups in use kernel {} engine {}",
        dirs.0,
        dirs.1,
        pct(dirs),
        files.0,
        files.1,
        pct(files),
        kn.0,
        en.0,
        kn.1,
        en.1,
        k.groups_in_use(),
        e.groups_in_use()
    );
    // Measured on 6.18 (2 CPUs): directories 100%, files 100% in half the
    // runs, 60..93% in the others: the kernel has a locality group per CPU
    // and its write-back runs on whichever CPU a worker gets, so small
    // files sometimes pack into another preallocation. The floors sit
    // under that, so a policy regression fails here (before mballoc, 12%
    // of small files started in the kernel's group) rather than only
    // moving a figure.
    assert!(pct(dirs) >= 95.0, "directories left the kernel's flex groups");
    assert!(pct(files) >= 40.0, "file data left the kernel's groups");
    drop(cleanup);
}

/// Removes the scratch directory (and the sparse images) even when the test fails.
struct Cleanup(std::path::PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
