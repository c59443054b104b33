//! The errors a user of a filesystem sees, with Linux's numbers.

use std::fmt;

/// An error as a system call returns it. Values are Linux's (asm-generic/errno*.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, arbitrary::Arbitrary)]
#[repr(i32)]
pub enum Errno {
    EPERM = 1,
    ENOENT = 2,
    EIO = 5,
    ENXIO = 6,
    EBADF = 9,
    ENOMEM = 12,
    EBUSY = 16,
    EEXIST = 17,
    ENOTDIR = 20,
    EISDIR = 21,
    EINVAL = 22,
    EFBIG = 27,
    ENOSPC = 28,
    EROFS = 30,
    EMLINK = 31,
    EDEADLK = 35,
    ENAMETOOLONG = 36,
    ENOTEMPTY = 39,
    ELOOP = 40,
    EOPNOTSUPP = 95,
    EBADR = 53,
}

impl Errno {
    /// The positive errno value.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The inverse of [`Errno::code`], for values this vocabulary knows.
    pub fn from_code(code: i32) -> Option<Errno> {
        Self::ALL.iter().copied().find(|e| e.code() == code)
    }

    pub const ALL: [Errno; 21] = [
        Errno::EPERM,
        Errno::ENOENT,
        Errno::EIO,
        Errno::ENXIO,
        Errno::EBADF,
        Errno::ENOMEM,
        Errno::EBUSY,
        Errno::EEXIST,
        Errno::ENOTDIR,
        Errno::EISDIR,
        Errno::EINVAL,
        Errno::EFBIG,
        Errno::ENOSPC,
        Errno::EROFS,
        Errno::EMLINK,
        Errno::EDEADLK,
        Errno::ENAMETOOLONG,
        Errno::ENOTEMPTY,
        Errno::ELOOP,
        Errno::EOPNOTSUPP,
        Errno::EBADR,
    ];

    fn describe(self) -> &'static str {
        match self {
            Errno::EPERM => "operation not permitted",
            Errno::ENOENT => "no such file or directory",
            Errno::EIO => "input/output error",
            Errno::ENXIO => "no such device or address",
            Errno::EBADF => "bad file descriptor",
            Errno::ENOMEM => "cannot allocate memory",
            Errno::EBUSY => "device or resource busy",
            Errno::EEXIST => "file exists",
            Errno::ENOTDIR => "not a directory",
            Errno::EISDIR => "is a directory",
            Errno::EINVAL => "invalid argument",
            Errno::EFBIG => "file too large",
            Errno::ENOSPC => "no space left on device",
            Errno::EROFS => "read-only file system",
            Errno::EMLINK => "too many links",
            Errno::EDEADLK => "resource deadlock avoided",
            Errno::ENAMETOOLONG => "file name too long",
            Errno::ENOTEMPTY => "directory not empty",
            Errno::ELOOP => "too many levels of symbolic links",
            Errno::EOPNOTSUPP => "operation not supported",
            Errno::EBADR => "invalid request descriptor",
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} ({})", self, self.describe())
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_match_linux() {
        for e in Errno::ALL {
            assert_eq!(Errno::from_code(e.code()), Some(e));
        }
        assert_eq!(Errno::ENOENT.code(), 2);
        assert_eq!(Errno::ENOTEMPTY.code(), 39);
        assert_eq!(Errno::EDEADLK.code(), 35);
        assert_eq!(Errno::EOPNOTSUPP.code(), 95);
        assert_eq!(Errno::from_code(4), None);
    }
}
