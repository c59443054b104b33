//! `ext4sim oracle-guest`: what runs as the workload inside the qemu guest.
//! It reads the manifest from the control disk (`/dev/vda`), mounts each case's
//! disk, runs its ops through real system calls, unmounts, and writes every
//! outcome back to the control disk (layout in [`super::wire`]).

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::mount::{clear_umask, kernel_release, mount_ext4, unmount};
use super::syscalls::run_chrooted;
use super::wire::{decode_manifest, Encoder, GuestResult, MANIFEST_MAGIC, MANIFEST_OFFSET, RESULTS_OFFSET, RESULT_MAGIC};

pub const CONTROL_DISK: &str = "/dev/vda";

fn read_manifest(disk: &std::fs::File) -> Result<String, String> {
    let mut head = [0u8; 16];
    disk.read_exact_at(&mut head, 0).map_err(|e| format!("read control disk: {e}"))?;
    if &head[..8] != MANIFEST_MAGIC {
        return Err("control disk has no manifest".into());
    }
    let len = u64::from_le_bytes([head[8], head[9], head[10], head[11], head[12], head[13], head[14], head[15]]);
    if len > RESULTS_OFFSET - MANIFEST_OFFSET {
        return Err(format!("manifest length {len} runs into the results"));
    }
    let mut text = vec![0u8; len as usize];
    disk.read_exact_at(&mut text, MANIFEST_OFFSET).map_err(|e| format!("read manifest: {e}"))?;
    String::from_utf8(text).map_err(|_| "manifest is not UTF-8".into())
}

/// Runs every case; returns the process exit status.
pub fn guest_main() -> i32 {
    match run() {
        Ok(()) => 0,
        Err(e) => {
            println!("oracle-guest: {e}");
            1
        }
    }
}

fn run() -> Result<(), String> {
    clear_umask();
    let disk = OpenOptions::new().read(true).write(true).open(CONTROL_DISK).map_err(|e| format!("{CONTROL_DISK}: {e}"))?;
    let cases = decode_manifest(&read_manifest(&disk)?)?;
    let release = kernel_release();
    let exe = std::env::current_exe().map_err(|e| format!("own binary: {e}"))?;
    println!("oracle-guest: kernel {release}, {} cases", cases.len());
    let mut results = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let dir = format!("/mnt/case{i}");
        std::fs::create_dir_all(&dir).map_err(|e| format!("mkdir {dir}: {e}"))?;
        let dir = Path::new(&dir);
        let mut result = GuestResult { error: None, outcomes: Vec::new(), kernel_log: Vec::new() };
        let mut log = super::kmsg::KernelLog::from_now();
        match mount_ext4(Path::new(&case.disk), dir, &case.opts, case.read_only) {
            Err(e) => result.error = Some(e),
            Ok(()) => {
                match run_chrooted(&exe, dir, &case.ops) {
                    Ok(outcomes) => result.outcomes = outcomes,
                    Err(e) => result.error = Some(e),
                }
                if let Err(e) = unmount(dir) {
                    result.error = Some(e);
                }
            }
        }
        result.kernel_log = log.lines_about(case.disk.trim_start_matches("/dev/"));
        results.push(result);
    }
    let payload = Encoder::results(&release, &results);
    let mut out = RESULT_MAGIC.to_vec();
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&payload);
    disk.write_all_at(&out, RESULTS_OFFSET).map_err(|e| format!("write results: {e}"))?;
    disk.sync_all().map_err(|e| format!("sync control disk: {e}"))?;
    println!("oracle-guest: wrote {} bytes of results", out.len());
    Ok(())
}
