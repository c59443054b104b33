//! The allocator held to the host kernel on a workload people run: the
//! tree-copy workload on two copies of one mke2fs image (16 GiB sparse,
//! 8 flex groups), once through a loop mount, once through the engine,
//! then both images read back unmounted and compared. The agreement
//! figures are the allocator's fidelity, printed (CI shows them) and held
//! to floors a regression would break. Needs root; skipped without it.
//! EXT4SIM_DEBUG_ALLOC=1 lists every path placed differently.
//!
//! The same figures against the Debian 7.x kernel booted under qemu
//! (`oracle --kernel qemu`): the engine's run is recorded as ops and
//! replayed by the guest. Ignored by default, since it boots a VM (and
//! fetches one if none is cached); .ci/run runs it.

use std::fmt;
use std::path::{Path, PathBuf};

use ext4_engine::device_file::FileDevice;
use ext4_engine::fs::Ext4;
use ext4_engine::image::Image;
use ext4_engine::layout::LayoutReport;
use ext4_model::{FileSystem, MountConfig};
use ext4_sim::oracle::cli::default_qemu_cache;
use ext4_sim::oracle::qemu::QemuKernel;
use ext4_sim::oracle::recorder::{Recorder, Recording};
use ext4_sim::oracle::syscalls::SyscallFs;
use ext4_sim::oracle::{Case, Kernel, OracleError};
use ext4_sim::workloads::{Made, Workload};
use ext4_testkit::e2fsprogs::{combined, e2fsck_clean, e2fsck_clean_allowing, is_guest_clock_skew_line, tool};
use ext4_testkit::loop_mount::{is_root, LoopMount};

const SEED: u64 = 1;
const SCALE: u32 = 2;
/// The qemu guest's memory. Background write-back starts at about a tenth
/// of it; well above the workload's ~95 MB of data, the guest (like the
/// host and the engine) allocates at the closing sync. Measured: 1 and
/// 2 GiB agreed fully, 512 MiB moved a directory and a file, 256 MiB two
/// files (and used a group more).
const GUEST_MIB: u32 = 2048;

fn layout(img: &Path) -> LayoutReport {
    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    LayoutReport::read(&mut image).unwrap()
}

/// A scratch directory for one test, removed (with its sparse images)
/// even when the test fails.
struct Cleanup(PathBuf);

impl Cleanup {
    fn new(tag: &str) -> Cleanup {
        let dir = std::env::temp_dir().join(format!("ext4sim-alloc-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("mnt")).unwrap();
        Cleanup(dir)
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two copies of one mke2fs image (16 GiB sparse, 8 flex groups), both
/// e2fsck-clean: the kernel's and the engine's.
fn two_images(mk: &Path, e2fsck: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let (kimg, eimg) = (dir.join("kernel.img"), dir.join("engine.img"));
    for img in [&kimg, &eimg] {
        std::fs::File::create(img).unwrap().set_len(16 << 30).unwrap();
        let out = std::process::Command::new(mk)
            .args(["-q", "-t", "ext4", "-F", "-b", "4096", "-E", "hash_seed=11111111-2222-3333-4444-555555555555", "-U", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"])
            .arg(img)
            .output()
            .unwrap();
        assert!(out.status.success(), "mke2fs: {}", combined(&out));
    }
    e2fsck_clean(e2fsck, &kimg).unwrap();
    (kimg, eimg)
}

/// `run` on the engine mounted from `img`, then unmounted.
fn on_engine<T>(img: &Path, run: impl FnOnce(&mut dyn FileSystem) -> T) -> T {
    // Neither kernel writes back during the workload (the host has
    // gigabytes of memory, the guest GUEST_MIB); a 64 MiB page cache would,
    // and allocation would then change the free counts Orlov reads.
    let mut fs = Ext4::mount(FileDevice::open(img, true).unwrap(), &"page_cache_mb=4096".parse::<MountConfig>().unwrap()).unwrap();
    let out = run(&mut fs);
    drop(fs.unmount().unwrap());
    out
}

/// How much of the engine's layout lands where the kernel's does, after
/// the same workload on copies of one image.
struct Agreement {
    /// Directories whose inode is in the kernel's flex group: (agreeing, compared).
    dirs: (usize, usize),
    /// Files whose first data block is in the kernel's group.
    files: (usize, usize),
    /// Non-contiguous (files, directories): the kernel's, the engine's.
    noncontiguous: [(usize, usize); 2],
    /// Groups in use: the kernel's, the engine's.
    groups_in_use: [usize; 2],
}

/// Share of `paths` on which `same` holds, as (agreeing, compared).
fn share(paths: &[String], mut same: impl FnMut(&str) -> Option<bool>) -> (usize, usize) {
    let answers: Vec<bool> = paths.iter().filter_map(|p| same(p)).collect();
    (answers.iter().filter(|&&s| s).count(), answers.len())
}

fn pct((a, n): (usize, usize)) -> f64 {
    if n == 0 { 100.0 } else { 100.0 * a as f64 / n as f64 }
}

impl Agreement {
    /// Between the kernel's image `kimg` and the engine's `eimg`.
    fn of(kimg: &Path, eimg: &Path, made: &Made) -> Agreement {
        let (k, e) = (layout(kimg), layout(eimg));
        let flex = k.flex_size.max(1);
        let dirs = share(&made.dirs, |p| Some(k.find(p)?.inode_group / flex == e.find(p)?.inode_group / flex));
        let first_group = |l: &LayoutReport, p: &str| l.find(p).and_then(|x| x.data_groups.first().copied());
        let files = share(&made.files, |p| Some(first_group(&k, p)? == first_group(&e, p)?));
        if std::env::var_os("EXT4SIM_DEBUG_ALLOC").is_some() {
            for p in made.files.iter().chain(&made.dirs) {
                let (kp, ep) = (k.find(p).unwrap(), e.find(p).unwrap());
                if kp.data_groups != ep.data_groups || kp.inode_group != ep.inode_group {
                    println!("{p}: blocks {} kernel inode g{} data {:?}, engine inode g{} data {:?}", kp.blocks, kp.inode_group, kp.data_groups, ep.inode_group, ep.data_groups);
                }
            }
        }
        Agreement { dirs, files, noncontiguous: [k.noncontiguous(), e.noncontiguous()], groups_in_use: [k.groups_in_use(), e.groups_in_use()] }
    }
}

impl fmt::Display for Agreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ([kn, en], [kg, eg]) = (self.noncontiguous, self.groups_in_use);
        write!(
            f,
            "directories in its flex group {}/{} ({:.0}%), files starting in its group {}/{} ({:.0}%); non-contiguous files kernel {} engine {}, directories kernel {} engine {}; groups in use kernel {kg} engine {eg}",
            self.dirs.0,
            self.dirs.1,
            pct(self.dirs),
            self.files.0,
            self.files.1,
            pct(self.files),
            kn.0,
            en.0,
            kn.1,
            en.1,
        )
    }
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
    let scratch = Cleanup::new("host");
    let dir = &scratch.0;
    let (kimg, eimg) = two_images(&mk, &e2fsck, dir);
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
    let engine_made = on_engine(&eimg, |fs| Workload::TreeCopy.run(fs, SEED, SCALE).unwrap());
    assert_eq!(kernel_made, engine_made, "the same seed makes the same calls");
    e2fsck_clean(&e2fsck, &kimg).unwrap();
    e2fsck_clean(&e2fsck, &eimg).unwrap();

    let agreement = Agreement::of(&kimg, &eimg, &engine_made);
    println!("tree-copy (seed {SEED}, scale {SCALE}) held to the host kernel: {agreement}");
    // Measured on 6.18 (2 CPUs): directories 100%, files 100% in half the
    // runs, 60..93% in the others: the kernel has a locality group per CPU
    // and its write-back runs on whichever CPU a worker gets, so small
    // files sometimes pack into another preallocation. The floors sit
    // under that, so a policy regression fails here (before mballoc, 12%
    // of small files started in the kernel's group) rather than only
    // moving a figure.
    assert!(pct(agreement.dirs) >= 95.0, "directories left the kernel's flex groups");
    assert!(pct(agreement.files) >= 40.0, "file data left the kernel's groups");
}

#[test]
#[ignore = "boots a qemu guest, and fetches its kernel when none is cached: .ci/run runs it"]
fn tree_copy_lands_where_the_qemu_kernel_puts_it() {
    let (Some(mk), Some(e2fsck)) = (tool("mke2fs"), tool("e2fsck")) else {
        println!("SKIPPED: e2fsprogs not installed");
        return;
    };
    let scratch = Cleanup::new("qemu");
    let dir = &scratch.0;
    // The guest runs the ops with this binary: the test's own is a harness.
    let mut kernel = match QemuKernel::with_guest(&default_qemu_cache(), dir, Path::new(env!("CARGO_BIN_EXE_ext4sim"))) {
        Ok(k) => k,
        Err(e @ OracleError::Unavailable(_)) => {
            println!("SKIPPED: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    kernel.set_guest_mib(GUEST_MIB);
    let (kimg, eimg) = two_images(&mk, &e2fsck, dir);
    let (made, recording): (Made, Recording) = on_engine(&eimg, |fs| {
        let mut recorder = Recorder::new(fs);
        let made = Workload::TreeCopy.run(&mut recorder, SEED, SCALE);
        (made.unwrap(), recorder.finish().unwrap())
    });
    let case = Case { image: kimg.clone(), kernel_opts: String::new(), read_only: false, ops: recording.ops.clone() };
    let run = kernel.run(&[case]).unwrap().remove(0);
    assert_eq!(run.error, None, "the guest's mount or unmount");
    assert_eq!(run.outcomes.len(), recording.ops.len());
    if let Some(i) = run.outcomes.iter().zip(&recording.outcomes).position(|(k, e)| k != e) {
        panic!("op {i} ({}): kernel {:?}, engine {:?}", recording.ops[i], run.outcomes[i], recording.outcomes[i]);
    }
    assert_eq!(kernel.take_kernel_log(), Vec::<String>::new(), "ext4's warnings in the guest");
    // The guest's clock may run a little ahead of the host's.
    e2fsck_clean_allowing(&e2fsck, &kimg, is_guest_clock_skew_line).unwrap();
    e2fsck_clean(&e2fsck, &eimg).unwrap();

    let agreement = Agreement::of(&kimg, &eimg, &made);
    println!("tree-copy (seed {SEED}, scale {SCALE}) held to the qemu kernel {} ({GUEST_MIB} MiB guest, {} ops): {agreement}", kernel.release(), recording.ops.len());
    // Measured on 7.3.4 (2 GiB guest: eight runs; 1 GiB: three runs):
    // directories 51/51, files 245/245, 13 groups in use on both sides,
    // every time. The guest has one CPU, so one locality group and none of
    // the host run's per-CPU scatter. The floors leave room for write-back
    // timing under TCG (a guest writing back mid-run moved one or two
    // paths, see GUEST_MIB), not for a policy regression (before mballoc
    // the host test saw 12% of small files in the kernel's group).
    assert!(pct(agreement.dirs) >= 95.0, "directories left the kernel's flex groups");
    assert!(pct(agreement.files) >= 90.0, "file data left the kernel's groups");
    let [kernel_groups, engine_groups] = agreement.groups_in_use;
    assert!(engine_groups.abs_diff(kernel_groups) <= 2, "the engine spreads over {engine_groups} groups, the kernel {kernel_groups}");
}
