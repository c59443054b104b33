//! `--kernel qemu`: a newer Debian kernel (7.x from backports) booted under
//! qemu (TCG) with a small busybox initramfs whose workload is this binary
//! (`ext4sim oracle-guest`). It mounts block sizes above the page size and
//! allows `chattr +j`. Many cases share one boot, one virtio disk each; the
//! first disk carries the manifest and the results (see [`super::wire`]).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4_model::{MountConfig, OpKind};

use super::wire::{encode_manifest, Decoder, GuestCase, CONTROL_DISK_BYTES, MANIFEST_MAGIC, MANIFEST_OFFSET, RESULTS_OFFSET, RESULT_MAGIC};
use super::{Case, CaseRun, Kernel, OracleError};

const FETCH_KERNEL: &str = include_str!("../../qemu/fetch-kernel.sh");
const BUILD_INITRAMFS: &str = include_str!("../../qemu/build-initramfs.sh");
const BOOT: &str = include_str!("../../qemu/boot.sh");
/// Case disks per boot: PCI slots on q35 bound the virtio disks.
pub const CASES_PER_BOOT: usize = 24;
/// fetch-kernel.sh's status when this machine cannot run the qemu kernel at
/// all (no qemu to install, no archive to fetch from, nothing cached). Any
/// other failure is a broken setup.
pub const FETCH_UNAVAILABLE: i32 = 77;
/// Lines of a failing script's output a report carries.
const OUTPUT_TAIL: usize = 20;

pub struct QemuKernel {
    kernel_dir: PathBuf,
    scripts: PathBuf,
    initramfs: PathBuf,
    work: PathBuf,
    release: String,
    boots: u64,
    /// ext4's warnings and errors the guest logged about the cases' disks.
    kernel_log: Vec<String>,
    /// The guest's memory: little of it puts the guest's page cache (and
    /// its allocator) under pressure.
    guest_mib: u32,
}

fn run_script(script: &Path, args: &[&Path]) -> Result<Output, OracleError> {
    run_script_with(script, args, &[])
}

fn run_script_with(script: &Path, args: &[&Path], env: &[(&str, String)]) -> Result<Output, OracleError> {
    Command::new("bash").arg(script).args(args).envs(env.iter().map(|(k, v)| (k, v))).output().map_err(|e| OracleError::io("run", script, e))
}

/// The guest's memory unless asked otherwise (boot.sh's default).
pub const GUEST_MIB: u32 = 1024;
/// Less does not hold the initramfs (this binary, the kernel's modules)
/// and the runner: at 160 MiB the guest's OOM killer took the runner
/// (70 MiB resident) 1,000 ops into a 16K-block case.
pub const GUEST_MIB_MIN: u32 = 256;

/// What a script printed, stdout then stderr, cut to its last lines.
fn said(out: &Output) -> String {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(OUTPUT_TAIL)..];
    if tail.is_empty() { "(it printed nothing)".to_string() } else { tail.join("\n") }
}

impl QemuKernel {
    /// Fetches the kernel into `cache` (once) and builds the initramfs around
    /// this very binary. Only a machine that cannot get qemu or the kernel at
    /// all is [`OracleError::Unavailable`]; a fetch that broke after it
    /// started, or an initramfs that could not be built (a full disk), is a
    /// broken setup.
    pub fn new(cache: &Path, work: &Path) -> Result<QemuKernel, OracleError> {
        let exe = std::env::current_exe().map_err(|e| OracleError::io("find", Path::new("this ext4sim binary"), e))?;
        QemuKernel::with_guest(cache, work, &exe)
    }

    /// [`QemuKernel::new`] with `guest` (an ext4sim binary) as the guest's
    /// workload: tests pass the binary cargo built, since their own
    /// executable is a test harness.
    pub fn with_guest(cache: &Path, work: &Path, guest: &Path) -> Result<QemuKernel, OracleError> {
        let scripts = work.join("scripts");
        std::fs::create_dir_all(&scripts).map_err(|e| OracleError::io("create", &scripts, e))?;
        for (name, text) in [("fetch-kernel.sh", FETCH_KERNEL), ("build-initramfs.sh", BUILD_INITRAMFS), ("boot.sh", BOOT)] {
            let path = scripts.join(name);
            std::fs::write(&path, text).map_err(|e| OracleError::io("write", &path, e))?;
        }
        let kernel_dir = cache.join("kernel");
        let out = run_script(&scripts.join("fetch-kernel.sh"), &[&kernel_dir])?;
        match out.status.code() {
            Some(0) => {}
            Some(FETCH_UNAVAILABLE) => return Err(OracleError::Unavailable(format!("the qemu kernel cannot run on this machine: {}", said(&out)))),
            _ => return Err(OracleError::Kernel(format!("fetching the qemu kernel into {} failed ({}):\n{}", kernel_dir.display(), out.status, said(&out)))),
        }
        let kver = kernel_dir.join("KVER");
        let release = std::fs::read_to_string(&kver).map_err(|e| OracleError::io("read", &kver, e))?.trim().to_string();
        let initramfs = work.join("initramfs.cpio");
        let out = run_script(&scripts.join("build-initramfs.sh"), &[&kernel_dir, guest, &initramfs])?;
        if !out.status.success() {
            return Err(OracleError::Tool(format!("building the qemu initramfs {} failed ({}):\n{}", initramfs.display(), out.status, said(&out))));
        }
        Ok(QemuKernel { kernel_dir, scripts, initramfs, work: work.to_path_buf(), release, boots: 0, kernel_log: Vec::new(), guest_mib: GUEST_MIB })
    }

    /// Boots from now on give the guest `mib` of memory.
    pub fn set_guest_mib(&mut self, mib: u32) {
        self.guest_mib = mib;
    }

    pub fn boots(&self) -> u64 {
        self.boots
    }

    /// One boot over up to [`CASES_PER_BOOT`] cases.
    fn boot(&mut self, cases: &[Case]) -> Result<Vec<CaseRun>, OracleError> {
        let control = self.work.join(format!("control{}.img", self.boots));
        let guest: Vec<GuestCase> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| GuestCase { disk: format!("/dev/vd{}", (b'b' + i as u8) as char), read_only: c.read_only, opts: c.kernel_opts.clone(), ops: c.ops.clone() })
            .collect();
        let manifest = encode_manifest(&guest);
        if manifest.len() as u64 > RESULTS_OFFSET - MANIFEST_OFFSET {
            return Err(OracleError::Kernel(format!("manifest of {} bytes does not fit the control disk", manifest.len())));
        }
        let file = std::fs::File::create(&control).map_err(|e| OracleError::io("create", &control, e))?;
        file.set_len(CONTROL_DISK_BYTES).map_err(|e| OracleError::io("size", &control, e))?;
        let mut head = MANIFEST_MAGIC.to_vec();
        head.extend_from_slice(&(manifest.len() as u64).to_le_bytes());
        file.write_all_at(&head, 0).and_then(|()| file.write_all_at(manifest.as_bytes(), MANIFEST_OFFSET)).map_err(|e| OracleError::io("write the manifest to", &control, e))?;
        drop(file);

        let console = self.work.join(format!("console{}.log", self.boots));
        self.boots += 1;
        let mut args: Vec<&Path> = vec![&self.kernel_dir, &self.initramfs, &console, &control];
        args.extend(cases.iter().map(|c| c.image.as_path()));
        let out = run_script_with(&self.scripts.join("boot.sh"), &args, &[("GUEST_MIB", self.guest_mib.to_string())])?;
        let log = std::fs::read_to_string(&console).map_err(|e| OracleError::io("read the console log", &console, e))?;
        if !out.status.success() || !log.contains("ORACLE-GUEST-EXIT 0") {
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            return Err(OracleError::Kernel(format!(
                "the qemu boot failed ({}): {}\nconsole {} ends:\n{}",
                out.status,
                said(&out),
                console.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )));
        }

        let file = std::fs::File::open(&control).map_err(|e| OracleError::io("open", &control, e))?;
        let mut head = [0u8; 16];
        file.read_exact_at(&mut head, RESULTS_OFFSET).map_err(|e| OracleError::io("read the results from", &control, e))?;
        if &head[..8] != RESULT_MAGIC {
            return Err(OracleError::Kernel("the guest wrote no results".into()));
        }
        let len = u64::from_le_bytes([head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15]]);
        if len > CONTROL_DISK_BYTES - RESULTS_OFFSET - 16 {
            return Err(OracleError::Kernel(format!("results length {len} runs past the control disk")));
        }
        let mut payload = vec![0u8; len as usize];
        file.read_exact_at(&mut payload, RESULTS_OFFSET + 16).map_err(|e| OracleError::io("read the results from", &control, e))?;
        let _ = std::fs::remove_file(&control);
        let (release, results) = Decoder::results(&payload).map_err(|e| OracleError::Kernel(format!("the guest's results: {e}")))?;
        if results.len() != cases.len() {
            return Err(OracleError::Kernel(format!("the guest answered {} of {} cases", results.len(), cases.len())));
        }
        self.release = release;
        for (case, r) in cases.iter().zip(&results) {
            let image = case.image.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            self.kernel_log.extend(r.kernel_log.iter().map(|l| format!("{image}: {l}")));
        }
        Ok(results.into_iter().map(|r| CaseRun { outcomes: r.outcomes, error: r.error }).collect())
    }
}

impl Kernel for QemuKernel {
    fn name(&self) -> &'static str {
        "qemu"
    }
    fn take_kernel_log(&mut self) -> Vec<String> {
        std::mem::take(&mut self.kernel_log)
    }

    fn release(&self) -> String {
        self.release.clone()
    }

    fn cannot_run(&self, _config: &MountConfig) -> Option<String> {
        None
    }

    fn refused_kinds(&self) -> Vec<(OpKind, String)> {
        Vec::new()
    }

    fn batch(&self) -> usize {
        CASES_PER_BOOT
    }

    fn run(&mut self, cases: &[Case]) -> Result<Vec<CaseRun>, OracleError> {
        let mut out = Vec::new();
        for chunk in cases.chunks(CASES_PER_BOOT) {
            out.extend(self.boot(chunk)?);
        }
        Ok(out)
    }
}
