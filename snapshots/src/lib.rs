//! The snapshot matrix of allocation layouts: each canonical workload
//! (`ext4_sim::workloads`) under both BLOCK_UNINIT policies, Orlov on and
//! off, at 1 KiB, 4 KiB and 64 KiB blocks (4 KiB pages). Snapshotted with
//! insta so an allocator policy change shows up in review as a readable
//! diff of the layout report (`ext4_sim::layout_run`).

use ext4_model::MountConfig;
use ext4_sim::layout_run::{report, LayoutRun};
use ext4_sim::workloads::Workload;

/// Block sizes of the matrix.
pub const BLOCK_SIZES: [u32; 3] = [1024, 4096, 65536];

/// One cell: its snapshot name and its run.
pub fn cell(workload: Workload, block_size: u32, skip_block_uninit: bool, orlov: bool) -> (String, LayoutRun) {
    let mut mount = MountConfig { block_size, ..MountConfig::default() };
    mount.alloc.skip_block_uninit = skip_block_uninit;
    mount.alloc.orlov = orlov;
    // fill writes until ENOSPC: a small disk keeps it short.
    let disk_bytes = match workload {
        Workload::Fill => 256 << 20,
        _ => LayoutRun::default_disk_bytes(&mount),
    };
    let name = format!(
        "{}-{}k-{}-{}",
        workload.name(),
        block_size / 1024,
        if skip_block_uninit { "skip_uninit" } else { "use_uninit" },
        if orlov { "orlov" } else { "oldalloc" }
    );
    (name, LayoutRun { workload, seed: 1, scale: 1, mount, disk_bytes })
}

/// Every cell of `workload`'s row of the matrix.
pub fn row(workload: Workload) -> Vec<(String, LayoutRun)> {
    let mut out = Vec::new();
    for bs in BLOCK_SIZES {
        for skip in [false, true] {
            for orlov in [true, false] {
                out.push(cell(workload, bs, skip, orlov));
            }
        }
    }
    out
}

/// The layout report of one run.
pub fn layout(run: &LayoutRun) -> String {
    let (mut image, made) = run.run().unwrap_or_else(|e| panic!("{}: {e}", run.title()));
    report(&run.title(), &mut image, Some(&made)).unwrap_or_else(|e| panic!("{}: {e}", run.title())).0
}
