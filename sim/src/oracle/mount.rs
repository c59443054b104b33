//! mount(2), umount(2) and uname(2) for the oracle, on the host and in the
//! qemu guest alike.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn c_string(bytes: &[u8]) -> Result<CString, String> {
    CString::new(bytes).map_err(|_| "a NUL inside a mount argument".to_string())
}

/// Mounts the ext4 filesystem on block device `dev` at `dir`.
pub fn mount_ext4(dev: &Path, dir: &Path, opts: &str, read_only: bool) -> Result<(), String> {
    let (src, target) = (c_string(dev.as_os_str().as_bytes())?, c_string(dir.as_os_str().as_bytes())?);
    let (fstype, data) = (c_string(b"ext4")?, c_string(opts.as_bytes())?);
    let flags = if read_only { libc::MS_RDONLY } else { 0 };
    // SAFETY: all pointers are valid NUL-terminated strings for the call.
    let rc = unsafe { libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("mount -t ext4 -o {opts} {} {}: {}", dev.display(), dir.display(), std::io::Error::last_os_error()))
    }
}

pub fn unmount(dir: &Path) -> Result<(), String> {
    let target = c_string(dir.as_os_str().as_bytes())?;
    // SAFETY: valid C string.
    if unsafe { libc::umount(target.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(format!("umount {}: {}", dir.display(), std::io::Error::last_os_error()))
    }
}

/// The running kernel's release, as `uname -r` prints it.
pub fn kernel_release() -> String {
    // SAFETY: utsname is plain bytes; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: u is writable.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let bytes: Vec<u8> = u.release.iter().take_while(|c| **c != 0).map(|c| *c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Clears the umask so created modes are exactly what ops ask for, as the
/// model has them. Process-wide: the oracle runs ops in this process only.
pub fn clear_umask() {
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(0) };
}
