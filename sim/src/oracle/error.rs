//! What stops the oracle short of a verdict, typed so that the exit status
//! follows from the kind: a usage error exits 2, a broken harness or host
//! (I/O, a full scratch disk, a failing tool, a qemu setup or boot that
//! broke) exits 1, and only a machine that cannot run the kernel at all
//! exits 77, the status CI counts as a skip.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::cli::EXIT_SKIPPED;

#[derive(Debug, Error)]
pub enum OracleError {
    /// The arguments cannot mean a run.
    #[error("{0}")]
    Usage(String),
    /// A host file operation failed (ENOSPC included).
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The scratch directory's filesystem lacks room for the images.
    #[error("the scratch directory {} has {free_mib} MiB free; {need}", path.display())]
    ScratchFull { path: PathBuf, free_mib: u64, need: String },
    /// A host tool (mke2fs, e2fsck, losetup, a qemu script) failed; the text
    /// carries its output.
    #[error("{0}")]
    Tool(String),
    /// The kernel backend broke: a boot that failed, a guest that crashed,
    /// results that do not parse.
    #[error("{0}")]
    Kernel(String),
    /// This machine cannot run the kernel at all (nothing to fetch qemu or the
    /// kernel from, and nothing cached): the one skip.
    #[error("{0}")]
    Unavailable(String),
}

impl OracleError {
    pub fn io(what: &'static str, path: &Path, source: std::io::Error) -> OracleError {
        OracleError::Io { what, path: path.to_path_buf(), source }
    }

    /// The process exit status this error ends a run with.
    pub fn exit_code(&self) -> u8 {
        match self {
            OracleError::Usage(_) => 2,
            OracleError::Unavailable(_) => EXIT_SKIPPED,
            _ => 1,
        }
    }
}

/// Writes a line to stderr. `eprintln!` panics when stderr cannot take it
/// (a full disk under a redirect); then there is no one left to tell.
pub fn warn(text: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// Bytes available to an unprivileged writer on the filesystem holding `path`.
pub fn free_bytes(path: &Path) -> Result<u64, OracleError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| OracleError::Usage(format!("{}: a NUL in the path", path.display())))?;
    // SAFETY: statvfs is plain data; statvfs(3) fills it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st is writable.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(OracleError::io("statvfs", path, std::io::Error::last_os_error()));
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unavailable_kernel_is_a_skip() {
        let io = OracleError::io("write", Path::new("/x"), std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(io.exit_code(), 1);
        assert!(io.to_string().starts_with("write /x: No space left on device"));
        assert_eq!(OracleError::Kernel("guest failed".into()).exit_code(), 1);
        assert_eq!(OracleError::Tool("mke2fs".into()).exit_code(), 1);
        assert_eq!(OracleError::Usage("bad".into()).exit_code(), 2);
        assert_eq!(OracleError::Unavailable("no qemu".into()).exit_code(), EXIT_SKIPPED);
    }

    #[test]
    fn free_bytes_reads_the_filesystem_or_says_why_not() {
        assert!(free_bytes(&std::env::temp_dir()).unwrap() > 0);
        assert!(matches!(free_bytes(Path::new("/no/such/dir")), Err(OracleError::Io { .. })));
    }
}
