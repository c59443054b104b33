//! The kernel oracle: the same seeded op sequences the simulator generates,
//! run on a real Linux ext4 through system calls and held to the model op by
//! op. Each case's image is made by `mke2fs` and passes `e2fsck -fn` before a
//! kernel mounts it; afterwards it must pass `e2fsck -fn` again and read back
//! through the engine exactly as the model has it.
//!
//! Two backends sit behind [`Kernel`]: [`host::HostKernel`] (loop mounts on
//! the running kernel) and [`qemu::QemuKernel`] (a newer kernel in a VM).

pub mod cli;
pub mod error;
pub mod guest;
pub mod host;
pub mod image;
mod kmsg;
pub mod mount;
pub mod qemu;
pub mod recorder;
pub mod run;
pub mod syscalls;
pub mod wire;

use std::path::PathBuf;

use ext4_model::{MountConfig, Op, OpKind, Outcome};

pub use error::OracleError;
pub use crate::mke2fs::MkfsArgs;
pub use run::{run_oracle, Finding, OracleReport, OracleSpec, Verdict};

/// One case as a backend runs it: an e2fsck-clean image and the ops.
#[derive(Clone, Debug)]
pub struct Case {
    pub image: PathBuf,
    /// The kernel's mount data string.
    pub kernel_opts: String,
    pub read_only: bool,
    pub ops: Vec<Op>,
}

/// What the kernel answered for one case.
#[derive(Clone, Debug)]
pub struct CaseRun {
    pub outcomes: Vec<Outcome>,
    /// A mount or unmount failure.
    pub error: Option<String>,
}

/// A real kernel that runs cases.
pub trait Kernel {
    fn name(&self) -> &'static str;
    /// The kernel release, recorded in every report.
    fn release(&self) -> String;
    /// Why this kernel cannot run a configuration at all, if it cannot.
    fn cannot_run(&self, config: &MountConfig) -> Option<String>;
    /// Op kinds this kernel refuses for reasons outside ext4, with the reason;
    /// the workload leaves them out.
    fn refused_kinds(&self) -> Vec<(OpKind, String)>;
    /// Runs cases; the answer has one entry per case, in order. An error is
    /// the harness's (no loop device, a boot that failed), never the kernel's
    /// answer to an op.
    fn run(&mut self, cases: &[Case]) -> Result<Vec<CaseRun>, OracleError>;
    /// Cases worth handing over at once (a VM boot is dear, a loop mount cheap).
    fn batch(&self) -> usize {
        1
    }
    /// ext4's warnings and errors the kernel logged while it ran cases
    /// (each with the case's image), taken. A backend that cannot read its
    /// kernel's log gives none.
    fn take_kernel_log(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// The kernel's mount data for a config, or why the kernel has no such knob
/// (the engine's allocator and folio knobs are not kernel mount options).
pub fn kernel_mount_data(c: &MountConfig) -> Result<String, String> {
    let d = MountConfig::default();
    if c.page_size != 4096 {
        return Err(format!("page size {} (the kernels here run 4 KiB pages)", c.page_size));
    }
    let engine_only = [
        (c.max_folio_order.is_some(), "max_folio_order"),
        (c.alloc.skip_block_uninit != d.alloc.skip_block_uninit, "skip_block_uninit"),
        (c.alloc.orlov != d.alloc.orlov, "oldalloc"),
        (c.alloc.stream_request_blocks != d.alloc.stream_request_blocks, "mb_stream_req"),
        (c.alloc.group_prealloc_blocks != d.alloc.group_prealloc_blocks, "mb_group_prealloc"),
    ];
    if let Some((_, name)) = engine_only.iter().find(|(set, _)| *set) {
        return Err(format!("`{name}` is an engine option, not a kernel mount option"));
    }
    let mut c = *c;
    // The engine's page-cache bound changes no answer; a kernel sizes its own.
    c.page_cache_mb = None;
    // Block and cluster sizes and the journal are mkfs choices, not mount options.
    c.block_size = d.block_size;
    c.cluster_size = None;
    c.has_journal = true;
    c.read_only = false;
    Ok(c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_mount_data_keeps_kernel_options_and_refuses_engine_ones() {
        let c = |s: &str| s.parse::<MountConfig>().unwrap();
        assert_eq!(kernel_mount_data(&c("data=journal,nodelalloc,bs=1k,ro")).unwrap(), "data=journal,nodelalloc");
        assert_eq!(kernel_mount_data(&c("nojournal")).unwrap(), "");
        assert_eq!(kernel_mount_data(&c("cluster=64k,nodelalloc")).unwrap(), "nodelalloc");
        assert!(kernel_mount_data(&c("skip_block_uninit")).unwrap_err().contains("engine option"));
        assert!(kernel_mount_data(&c("ps=64k")).is_err());
        assert_eq!(kernel_mount_data(&c("nodelalloc,page_cache_mb=4")).unwrap(), "nodelalloc");
    }
}
