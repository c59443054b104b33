//! A host loop mount for tests that hand an image to the running kernel:
//! attached and mounted in one call, unmounted and detached when dropped,
//! also when the test fails. Root only; a refusal is a reason to skip.

use std::path::{Path, PathBuf};
use std::process::Command;

/// An image attached to a loop device and mounted on a directory.
pub struct LoopMount {
    dev: String,
    dir: PathBuf,
    mounted: bool,
}

/// Whether this process runs as root (loop devices and mount need it).
pub fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl LoopMount {
    /// Attaches `img` (read-only if `options` starts with `ro`) and mounts
    /// it as ext4 on `dir` with `options`; `Err` says why the host refused.
    pub fn mount(img: &Path, dir: &Path, options: &str) -> Result<LoopMount, String> {
        let mut losetup = Command::new("losetup");
        losetup.args(["--find", "--show"]);
        if options.split(',').any(|o| o == "ro") {
            losetup.arg("--read-only");
        }
        let out = losetup.arg(img).output().map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!("losetup refused: {}", String::from_utf8_lossy(&out.stderr)));
        }
        let mut guard = LoopMount { dev: String::from_utf8_lossy(&out.stdout).trim().to_string(), dir: dir.to_path_buf(), mounted: false };
        let mut mount = Command::new("mount");
        mount.args(["-t", "ext4"]);
        if !options.is_empty() {
            mount.args(["-o", options]);
        }
        let m = mount.arg(&guard.dev).arg(dir).output().map_err(|e| format!("mount: {e}"))?;
        if !m.status.success() {
            return Err(format!("mount refused: {}", String::from_utf8_lossy(&m.stderr)));
        }
        guard.mounted = true;
        Ok(guard)
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}
