//! Helpers shared by the simulator's cross-crate tests.

use std::path::PathBuf;

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("ext4sim-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Hand-written traces whose every answer was checked on a real kernel when
/// they were written: the model must still give the kernel's answers
/// (tests/oracle.rs), and the engine the same (tests/engine_lockstep.rs).
pub const KERNEL_VERIFIED: [&str; 15] = [
    include_str!("../traces/chattr_append_kernel_verified.trace"),
    include_str!("../traces/renameat2_kernel_verified.trace"),
    include_str!("../traces/immutable_writes_back_kernel_verified.trace"),
    include_str!("../traces/symlink_slash_kernel_verified.trace"),
    include_str!("../traces/lseek_kernel_verified.trace"),
    include_str!("../traces/auto_da_alloc_kernel_verified.trace"),
    include_str!("../traces/fiemap_range_kernel_verified.trace"),
    include_str!("../traces/fallocate_refused_modes_kernel_verified.trace"),
    include_str!("../traces/rename_traps_kernel_verified.trace"),
    include_str!("../traces/orphan_kernel_verified.trace"),
    include_str!("../traces/subpage_truncate_kernel_verified.trace"),
    include_str!("../traces/orphan_sync_truncate_kernel_verified.trace"),
    include_str!("../traces/large_folio_truncate_kernel_verified.trace"),
    include_str!("../traces/direct_io_kernel_verified.trace"),
    include_str!("../traces/mapped_write_kernel_verified.trace"),
];
