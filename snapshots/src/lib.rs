//! Layout reports for canonical seeded workloads: where each directory's inode
//! and each file's blocks went, group by group. Snapshotted with insta so an
//! allocator policy change shows up in review as a readable diff.

use std::fmt::Write as _;

use ext4_engine::device::BlockDevice;
use ext4_engine::fs::Ext4;
use ext4_engine::image::Image;
use ext4_engine::layout::LayoutReport;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::op::pattern;
use ext4_model::{FileSystem, MountConfig};
use ext4_sim::disk::{DiskProfile, FaultConfig, SimDisk};

/// The canonical workload's disk: big enough for several flex groups.
pub const DISK_BYTES: u64 = 16 << 30;

/// Five top-level directories, each with small files, one 8 MiB file and a
/// subdirectory, written in an interleaved order as several tasks would.
fn canonical_workload(fs: &mut dyn FileSystem) -> Vec<String> {
    let mut files = Vec::new();
    let tops = ["alpha", "beta", "gamma", "delta", "epsilon"];
    for t in tops {
        fs.mkdir(&format!("/{t}"), 0o755).expect("mkdir");
        fs.mkdir(&format!("/{t}/sub"), 0o755).expect("mkdir");
    }
    for round in 0..8u64 {
        for (i, t) in tops.iter().enumerate() {
            let small = format!("/{t}/small{round}");
            fs.create(&small, 0o644).expect("create");
            fs.write(&small, 0, &pattern(round * 10 + i as u64, 6000)).expect("write");
            files.push(small);
            let big = format!("/{t}/big");
            if round == 0 {
                fs.create(&big, 0o644).expect("create");
                files.push(big.clone());
            }
            fs.write(&big, round << 20, &pattern(round, 1 << 20)).expect("write");
            if round % 2 == 0 {
                let deep = format!("/{t}/sub/f{round}");
                fs.create(&deep, 0o644).expect("create");
                fs.write(&deep, 0, &pattern(round + 99, 20000)).expect("write");
                files.push(deep);
            }
        }
    }
    fs.sync().expect("sync");
    files
}

/// Runs the canonical workload under `mount` and describes the layout.
pub fn canonical_layout(mount: &MountConfig) -> String {
    let mut disk = SimDisk::new(DISK_BYTES, DiskProfile::builtin("ram").expect("ram profile"), 1, FaultConfig::NONE).expect("disk");
    let opts = MkfsOptions::for_mount(mount, DISK_BYTES, [0x42; 16], [0x17; 16], ext4_sim::run::spec::SIM_EPOCH_SECS);
    mkfs(&mut disk, &opts).expect("mkfs");
    disk.flush().expect("flush");
    let mut fs = Ext4::mount(disk, mount).expect("mount");
    let files = canonical_workload(&mut fs);
    let disk = fs.unmount().expect("unmount");
    let mut image = Image::open(disk).expect("reopen");
    let layout = LayoutReport::read(&mut image).expect("layout");
    let mut out = String::new();
    let _ = writeln!(out, "block size {}, {} groups of {} blocks, flex {}", layout.block_size, layout.groups, layout.blocks_per_group, layout.flex_size);
    let mut dirs: Vec<String> = files.iter().filter_map(|f| f.rsplit_once('/').map(|(d, _)| d.to_string())).collect();
    dirs.sort();
    dirs.dedup();
    for path in dirs.iter().chain(files.iter()) {
        let p = layout.find(path).expect("the walk reaches every file the workload made");
        let gl: Vec<String> = p.data_groups.iter().map(|g| g.to_string()).collect();
        let _ = writeln!(out, "{path:<22} inode group {:>3}  extents {:>2}  data groups [{}]", p.inode_group, p.extents, gl.join(" "));
    }
    let groups: Vec<u32> = layout.data_blocks_per_group.keys().copied().collect();
    let _ = writeln!(out, "groups with data: {groups:?}");
    let _ = writeln!(out, "mean extents per file: {:.2}", layout.mean_extents());
    out
}
