//! `--kernel host`: loop-mount each case's image on the running kernel.
//! Fast, but it needs root, its block size is capped at the 4 KiB page, and
//! `chattr +j` needs CAP_SYS_RESOURCE.

use std::path::{Path, PathBuf};
use std::process::Command;

use ext4_model::{MountConfig, OpKind};

use super::kmsg::KernelLog;
use super::mount::{kernel_release, mount_ext4, unmount};
use super::syscalls::run_chrooted;
use super::{Case, CaseRun, Kernel, OracleError};

const CAP_SYS_RESOURCE: u32 = 24;

pub struct HostKernel {
    release: String,
    scratch: PathBuf,
    /// The ext4sim binary that runs the ops chrooted (`oracle-exec`).
    runner: PathBuf,
    /// ext4's warnings and errors about the cases' loop devices.
    kernel_log: Vec<String>,
}

impl HostKernel {
    /// With this very binary as the op runner.
    pub fn new(scratch: &Path) -> Result<HostKernel, OracleError> {
        let exe = std::env::current_exe().map_err(|e| OracleError::io("find", Path::new("this ext4sim binary"), e))?;
        Ok(HostKernel::with_runner(scratch, &exe))
    }

    /// With `runner` (an ext4sim binary) running the ops: tests pass the
    /// binary cargo built, since their own executable is a test harness.
    pub fn with_runner(scratch: &Path, runner: &Path) -> HostKernel {
        HostKernel { release: kernel_release(), scratch: scratch.to_path_buf(), runner: runner.to_path_buf(), kernel_log: Vec::new() }
    }
}

/// Whether this process holds a capability (from /proc/self/status CapEff).
fn has_capability(bit: u32) -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << bit) != 0)
}

/// A loop device over an image, mounted at `dir`; unmounted and detached on
/// drop, whatever happened in between.
struct LoopMount {
    dev: String,
    dir: PathBuf,
    mounted: bool,
}

impl LoopMount {
    fn attach(image: &Path, dir: &Path) -> Result<LoopMount, OracleError> {
        let out = Command::new("losetup").args(["--find", "--show"]).arg(image).output().map_err(|e| OracleError::io("run", Path::new("losetup"), e))?;
        if !out.status.success() {
            return Err(OracleError::Tool(format!("losetup refused {}: {}", image.display(), String::from_utf8_lossy(&out.stderr).trim())));
        }
        Ok(LoopMount { dev: String::from_utf8_lossy(&out.stdout).trim().to_string(), dir: dir.to_path_buf(), mounted: false })
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted && unmount(&self.dir).is_err() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

impl Kernel for HostKernel {
    fn name(&self) -> &'static str {
        "host"
    }

    fn release(&self) -> String {
        self.release.clone()
    }

    fn cannot_run(&self, config: &MountConfig) -> Option<String> {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Some("loop-mounting needs root".into());
        }
        if config.block_size > 4096 {
            return Some(format!("the host kernel ({}) refuses block size {} above its 4 KiB page; use --kernel qemu", self.release, config.block_size));
        }
        None
    }

    fn refused_kinds(&self) -> Vec<(OpKind, String)> {
        if has_capability(CAP_SYS_RESOURCE) {
            Vec::new()
        } else {
            vec![(OpKind::SetJournalData, "chattr +j/-j needs CAP_SYS_RESOURCE, which this host lacks".into())]
        }
    }

    fn take_kernel_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.kernel_log)
    }

    fn run(&mut self, cases: &[Case]) -> Result<Vec<CaseRun>, OracleError> {
        let mut runs = Vec::new();
        for (i, case) in cases.iter().enumerate() {
            let dir = self.scratch.join(format!("mnt{i}"));
            std::fs::create_dir_all(&dir).map_err(|e| OracleError::io("create mount point", &dir, e))?;
            let mut run = CaseRun { outcomes: Vec::new(), error: None };
            let mut log = KernelLog::from_now();
            let mut lo = LoopMount::attach(&case.image, &dir)?;
            match mount_ext4(Path::new(&lo.dev), &dir, &case.kernel_opts, case.read_only) {
                Err(e) => run.error = Some(e),
                Ok(()) => {
                    lo.mounted = true;
                    match run_chrooted(&self.runner, &dir, &case.ops) {
                        Ok(outcomes) => run.outcomes = outcomes,
                        Err(e) => run.error = Some(e),
                    }
                    match unmount(&dir) {
                        Ok(()) => lo.mounted = false,
                        Err(e) => run.error = Some(e),
                    }
                }
            }
            let device = lo.dev.trim_start_matches("/dev/").to_string();
            drop(lo);
            let image = case.image.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            self.kernel_log.extend(log.lines_about(&device).into_iter().map(|l| format!("{image}: {l}")));
            runs.push(run);
        }
        Ok(runs)
    }
}
