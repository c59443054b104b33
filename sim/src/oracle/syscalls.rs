//! The model's [`FileSystem`] through real system calls under a mounted
//! directory: how the oracle asks a Linux kernel. Each data op is open +
//! call + close, as the op vocabulary defines it; errnos come back raw.
//!
//! Ops run in a child process chrooted into the mount ([`run_chrooted`]): an
//! op path `/` must be the filesystem's root (rename onto it is EBUSY, not
//! EXDEV), and an absolute symlink target must never reach the host's files.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use ext4_model::op::fiemap_flags;
use ext4_model::{DirEntry, Errno, FallocFlags, FiemapExtent, FiemapRequest, FileKind, FileSystem, Outcome, Reply, Stat};

/// `Stat::flags` when the kernel cannot say: a symlink cannot be opened for
/// FS_IOC_GETFLAGS.
pub const FLAGS_UNKNOWN: u32 = u32::MAX;

const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
const FS_JOURNAL_DATA_FL: libc::c_int = 0x4000;
/// Extents asked for per FIEMAP call.
const FIEMAP_BATCH: usize = 64;

/// struct fiemap (linux/fiemap.h): start u64, length u64, flags u32,
/// mapped_extents u32, extent_count u32, reserved u32; then the extents.
#[repr(C)]
struct FiemapHeader {
    start: u64,
    length: u64,
    flags: u32,
    mapped_extents: u32,
    extent_count: u32,
    reserved: u32,
}

/// struct fiemap_extent: logical, physical, length u64; reserved 2 x u64;
/// flags u32; reserved 3 x u32 (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct FiemapRecord {
    logical: u64,
    physical: u64,
    length: u64,
    reserved64: [u64; 2],
    flags: u32,
    reserved: [u32; 3],
}

#[repr(C)]
struct FiemapCall {
    header: FiemapHeader,
    extents: [FiemapRecord; FIEMAP_BATCH],
}

/// Runs `ops` on the filesystem mounted at `dir` in a child process that
/// chroots there (`EXT4SIM oracle-exec DIR`, `exe` being the ext4sim
/// binary), and returns each op's outcome.
pub fn run_chrooted(exe: &Path, dir: &Path, ops: &[ext4_model::Op]) -> Result<Vec<ext4_model::Outcome>, String> {
    use std::io::Write as _;
    let mut child = std::process::Command::new(exe)
        .arg("oracle-exec")
        .arg(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| format!("oracle-exec: {e}"))?;
    let mut text = String::new();
    for op in ops {
        text.push_str(&op.to_string());
        text.push('\n');
    }
    let mut stdin = child.stdin.take().ok_or("oracle-exec: no stdin")?;
    // The child reads everything before it answers, so this cannot deadlock.
    stdin.write_all(text.as_bytes()).map_err(|e| format!("oracle-exec stdin: {e}"))?;
    drop(stdin);
    let out = child.wait_with_output().map_err(|e| format!("oracle-exec: {e}"))?;
    if !out.status.success() {
        return Err(format!("oracle-exec {} exited {}", dir.display(), out.status));
    }
    let (_, mut results) = super::wire::Decoder::results(&out.stdout)?;
    let result = results.pop().ok_or("oracle-exec answered nothing")?;
    if result.outcomes.len() != ops.len() {
        return Err(format!("oracle-exec answered {} of {} ops", result.outcomes.len(), ops.len()));
    }
    Ok(result.outcomes)
}

/// The child's side of [`run_chrooted`]: chroot into `dir`, read ops in
/// trace syntax from stdin, run them, write the encoded outcomes to stdout.
pub fn exec_main(dir: &Path) -> i32 {
    use std::io::{Read as _, Write as _};
    let run = || -> Result<Vec<u8>, String> {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| format!("stdin: {e}"))?;
        let ops: Vec<ext4_model::Op> = text.lines().map(|l| l.parse::<ext4_model::Op>().map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
        let c_dir = CString::new(dir.as_os_str().as_bytes()).map_err(|_| "NUL in directory")?;
        // SAFETY: valid C strings; this process exists only to run the ops.
        if unsafe { libc::chroot(c_dir.as_ptr()) } != 0 || unsafe { libc::chdir(c"/".as_ptr()) } != 0 {
            return Err(format!("chroot {}: {}", dir.display(), std::io::Error::last_os_error()));
        }
        super::mount::clear_umask();
        let mut fs = SyscallFs::new("");
        let outcomes = ops.iter().map(|op| fs.apply(op)).collect();
        let result = super::wire::GuestResult { error: None, outcomes, kernel_log: Vec::new() };
        Ok(super::wire::Encoder::results("", &[result]))
    };
    match run() {
        Ok(bytes) => match std::io::stdout().write_all(&bytes) {
            Ok(()) => 0,
            Err(e) => {
                super::error::warn(format!("oracle-exec: stdout: {e}"));
                1
            }
        },
        Err(e) => {
            super::error::warn(format!("oracle-exec: {e}"));
            1
        }
    }
}

/// A mounted filesystem seen at `root`; op paths are absolute within it.
pub struct SyscallFs {
    root: PathBuf,
    /// Descriptors held across ops (`open ... slot=N`); dropping the
    /// SyscallFs closes them, as the exit of the process would.
    slots: std::collections::BTreeMap<u8, Fd>,
}

fn errno() -> Errno {
    from_io(&std::io::Error::last_os_error())
}

/// An errno the op vocabulary has no name for shows up as EIO, and is said.
fn from_io(e: &std::io::Error) -> Errno {
    match e.raw_os_error().and_then(Errno::from_code) {
        Some(errno) => errno,
        None => {
            super::error::warn(format!("oracle: kernel errno {:?} ({e}) has no model name; counted as EIO", e.raw_os_error()));
            Errno::EIO
        }
    }
}

fn check(ret: libc::c_int) -> Result<libc::c_int, Errno> {
    if ret < 0 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// pread(2) of `len` bytes at `offset`: a regular file's pread is short
/// only at EOF; loop to be sure.
fn pread_all(fd: libc::c_int, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
    let mut buf = vec![0u8; len as usize];
    let mut done = 0usize;
    loop {
        let rest = &mut buf[done..];
        // SAFETY: rest is writable for its length.
        let n = unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), (offset + done as u64) as libc::off_t) };
        if n < 0 {
            return Err(errno());
        }
        done += n as usize;
        if n == 0 || done == buf.len() {
            break;
        }
    }
    buf.truncate(done);
    Ok(buf)
}

/// A buffer at a page boundary: O_DIRECT needs the memory aligned too,
/// and the op vocabulary leaves only offset and length to be misaligned.
struct AlignedBuf {
    bytes: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    const ALIGN: usize = 4096;

    fn zeroed(len: usize) -> AlignedBuf {
        let bytes = vec![0u8; len + Self::ALIGN];
        let start = bytes.as_ptr().align_offset(Self::ALIGN);
        AlignedBuf { bytes, start, len }
    }

    fn get(&self) -> &[u8] {
        &self.bytes[self.start..self.start + self.len]
    }

    fn get_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.start..self.start + self.len]
    }
}

/// An open file descriptor, closed on drop.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours and closed once.
        unsafe { libc::close(self.0) };
    }
}

impl SyscallFs {
    pub fn new(root: impl Into<PathBuf>) -> SyscallFs {
        SyscallFs { root: root.into(), slots: std::collections::BTreeMap::new() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A slot's descriptor number for a call, -1 for an empty slot: the
    /// kernel then checks the call's other arguments first, as it does
    /// for any descriptor the process does not hold.
    fn raw_fd(&self, slot: u8) -> libc::c_int {
        self.slots.get(&slot).map_or(-1, |fd| fd.0)
    }

    /// The host path of an op path, as a C string. An interior NUL is
    /// refused the way the kernel refuses it at the user boundary.
    fn c_path(&self, path: &str) -> Result<CString, Errno> {
        if !path.starts_with('/') {
            return Err(Errno::ENOENT);
        }
        let mut bytes = self.root.as_os_str().as_bytes().to_vec();
        bytes.extend_from_slice(path.as_bytes());
        CString::new(bytes).map_err(|_| Errno::EINVAL)
    }

    /// open(flags) + write(2) at the descriptor's own position + close.
    fn open_and_write(&self, path: &str, flags: libc::c_int, data: &[u8]) -> Result<u64, Errno> {
        let fd = self.open_fd(path, flags, 0)?;
        // SAFETY: data is readable for its length.
        let n = unsafe { libc::write(fd.0, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            return Err(errno());
        }
        Ok(n as u64)
    }

    fn open_fd(&self, path: &str, flags: libc::c_int, mode: libc::mode_t) -> Result<Fd, Errno> {
        let p = self.c_path(path)?;
        // SAFETY: p is a valid NUL-terminated string.
        let fd = check(unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })?;
        Ok(Fd(fd))
    }

    fn inode_flags(&self, path: &str) -> Result<u32, Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW, 0)?;
        let mut flags: libc::c_int = 0;
        // SAFETY: FS_IOC_GETFLAGS writes one int through the pointer.
        check(unsafe { libc::ioctl(fd.0, FS_IOC_GETFLAGS, &mut flags) })?;
        Ok(flags as u32)
    }
}

impl FileSystem for SyscallFs {
    fn create(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        self.open_fd(path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, libc::mode_t::from(perm)).map(drop)
    }

    fn mkdir(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        let p = self.c_path(path)?;
        // SAFETY: valid C string.
        check(unsafe { libc::mkdir(p.as_ptr(), libc::mode_t::from(perm)) }).map(drop)
    }

    fn unlink(&mut self, path: &str) -> Result<(), Errno> {
        let p = self.c_path(path)?;
        // SAFETY: valid C string.
        check(unsafe { libc::unlink(p.as_ptr()) }).map(drop)
    }

    fn rmdir(&mut self, path: &str) -> Result<(), Errno> {
        let p = self.c_path(path)?;
        // SAFETY: valid C string.
        check(unsafe { libc::rmdir(p.as_ptr()) }).map(drop)
    }

    fn rename(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        let (a, b) = (self.c_path(from)?, self.c_path(to)?);
        // SAFETY: valid C strings.
        check(unsafe { libc::rename(a.as_ptr(), b.as_ptr()) }).map(drop)
    }

    fn renameat2(&mut self, from: &str, to: &str, flags: ext4_model::RenameFlags) -> Result<(), Errno> {
        let (a, b) = (self.c_path(from)?, self.c_path(to)?);
        // SAFETY: valid C strings; AT_FDCWD resolves them as rename(2) does.
        check(unsafe { libc::renameat2(libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags.bits()) }).map(drop)
    }

    fn link(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        let (a, b) = (self.c_path(from)?, self.c_path(to)?);
        // SAFETY: valid C strings.
        check(unsafe { libc::link(a.as_ptr(), b.as_ptr()) }).map(drop)
    }

    fn symlink(&mut self, target: &str, path: &str) -> Result<(), Errno> {
        // The target is stored as given, not under the root.
        let t = CString::new(target).map_err(|_| Errno::EINVAL)?;
        let p = self.c_path(path)?;
        // SAFETY: valid C strings.
        check(unsafe { libc::symlink(t.as_ptr(), p.as_ptr()) }).map(drop)
    }

    fn readlink(&mut self, path: &str) -> Result<String, Errno> {
        let p = self.c_path(path)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::readlink(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(errno());
        }
        buf.truncate(n as usize);
        String::from_utf8(buf).map_err(|_| Errno::EINVAL)
    }

    fn readdir(&mut self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        let p = self.c_path(path)?;
        let host = PathBuf::from(std::ffi::OsStr::from_bytes(p.as_bytes()));
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&host).map_err(|e| from_io(&e))? {
            let entry = entry.map_err(|e| from_io(&e))?;
            let kind = entry.file_type().map_err(|e| from_io(&e))?;
            let kind = if kind.is_dir() {
                FileKind::Directory
            } else if kind.is_symlink() {
                FileKind::Symlink
            } else {
                FileKind::Regular
            };
            let name = entry.file_name().to_str().ok_or(Errno::EINVAL)?.to_string();
            out.push(DirEntry { name, kind });
        }
        out.sort();
        Ok(out)
    }

    fn stat(&mut self, path: &str) -> Result<Stat, Errno> {
        let p = self.c_path(path)?;
        // SAFETY: an all-zero stat is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: valid C string and a writable stat.
        check(unsafe { libc::lstat(p.as_ptr(), &mut st) })?;
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => FileKind::Directory,
            libc::S_IFLNK => FileKind::Symlink,
            _ => FileKind::Regular,
        };
        let flags = match kind {
            FileKind::Symlink => FLAGS_UNKNOWN,
            _ => self.inode_flags(path)?,
        };
        Ok(Stat { ino: st.st_ino, kind, mode: st.st_mode, nlink: st.st_nlink as u32, size: st.st_size as u64, blocks: st.st_blocks as u64, flags, blocks_slack: 0 })
    }

    fn write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let fd = self.open_fd(path, libc::O_WRONLY, 0)?;
        // SAFETY: data is readable for its length.
        let n = unsafe { libc::pwrite(fd.0, data.as_ptr().cast(), data.len(), offset as libc::off_t) };
        if n < 0 {
            return Err(errno());
        }
        Ok(n as u64)
    }

    fn read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY, 0)?;
        pread_all(fd.0, offset, len)
    }

    fn direct_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let fd = self.open_fd(path, libc::O_WRONLY | libc::O_DIRECT, 0)?;
        let mut buf = AlignedBuf::zeroed(data.len());
        buf.get_mut().copy_from_slice(data);
        // SAFETY: the buffer is readable for its length.
        let n = unsafe { libc::pwrite(fd.0, buf.get().as_ptr().cast(), data.len(), offset as libc::off_t) };
        if n < 0 {
            return Err(errno());
        }
        Ok(n as u64)
    }

    fn map_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let fd = self.open_fd(path, libc::O_RDWR, 0)?;
        // SAFETY: an all-zero stat is a valid value of the plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat(2) fills the struct it is given; fd is open.
        check(unsafe { libc::fstat(fd.0, &mut st) })?;
        let size = st.st_size as u64;
        if data.is_empty() || offset >= size {
            return Ok(0);
        }
        // Stores past EOF would be SIGBUS: stop there. The mapping covers
        // the pages stored to (a sparse file can outgrow the address space).
        let n = (size - offset).min(data.len() as u64) as usize;
        let page = 4096u64;
        let start = offset / page * page;
        let len = usize::try_from((offset + n as u64).div_ceil(page) * page - start).map_err(|_| Errno::EFBIG)?;
        // SAFETY: a fresh shared mapping of the pages stored to; it is
        // written only below the file's size and unmapped before the
        // descriptor closes.
        unsafe {
            let map = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.0, start as libc::off_t);
            if map == libc::MAP_FAILED {
                return Err(errno());
            }
            std::ptr::copy_nonoverlapping(data.as_ptr(), map.cast::<u8>().add((offset - start) as usize), n);
            let synced = (libc::msync(map, len, libc::MS_SYNC) == 0).then_some(()).ok_or_else(errno);
            libc::munmap(map, len);
            synced?;
        }
        // The rest of the file's dirty data too: the op's durability is the file's.
        // SAFETY: fd is open.
        check(unsafe { libc::fdatasync(fd.0) })?;
        Ok(n as u64)
    }

    fn direct_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY | libc::O_DIRECT, 0)?;
        let mut buf = AlignedBuf::zeroed(len as usize);
        let mut done = 0usize;
        // Short only at EOF, where the next call answers 0 before any alignment check.
        loop {
            let rest = &mut buf.get_mut()[done..];
            // SAFETY: rest is writable for its length.
            let n = unsafe { libc::pread(fd.0, rest.as_mut_ptr().cast(), rest.len(), (offset + done as u64) as libc::off_t) };
            if n < 0 {
                return Err(errno());
            }
            done += n as usize;
            if n == 0 || done == len as usize {
                break;
            }
        }
        Ok(buf.get()[..done].to_vec())
    }

    fn truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        let p = self.c_path(path)?;
        // SAFETY: valid C string; sizes past off_t come out negative, which truncate(2) refuses.
        check(unsafe { libc::truncate(p.as_ptr(), size as libc::off_t) }).map(drop)
    }

    fn fsync(&mut self, path: &str) -> Result<(), Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY, 0)?;
        // SAFETY: fd is open.
        check(unsafe { libc::fsync(fd.0) }).map(drop)
    }

    fn fdatasync(&mut self, path: &str) -> Result<(), Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY, 0)?;
        // SAFETY: fd is open.
        check(unsafe { libc::fdatasync(fd.0) }).map(drop)
    }

    fn sync(&mut self) -> Result<(), Errno> {
        // syncfs on the root: sync(2) for this filesystem only.
        let fd = self.open_fd("/", libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        // SAFETY: fd is open.
        check(unsafe { libc::syncfs(fd.0) }).map(drop)
    }

    fn fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        let fd = self.open_fd(path, libc::O_WRONLY, 0)?;
        // SAFETY: fd is open; out-of-range values are the kernel's to refuse.
        check(unsafe { libc::fallocate(fd.0, mode.0 as libc::c_int, offset as libc::off_t, len as libc::off_t) }).map(drop)
    }

    fn fiemap(&mut self, path: &str, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY, 0)?;
        let mut out: Vec<FiemapExtent> = Vec::new();
        // Where the asked range ends; a long map is fetched in batches, each
        // from where the last one stopped (the kernel cuts the end itself).
        let end = req.start.saturating_add(req.len);
        let (mut start, mut length, mut flags) = (req.start, req.len, req.flags);
        loop {
            let mut call = FiemapCall {
                header: FiemapHeader { start, length, flags, mapped_extents: 0, extent_count: FIEMAP_BATCH as u32, reserved: 0 },
                extents: [FiemapRecord::default(); FIEMAP_BATCH],
            };
            // SAFETY: call is a struct fiemap with room for extent_count extents.
            check(unsafe { libc::ioctl(fd.0, FS_IOC_FIEMAP, &mut call) })?;
            let mapped = (call.header.mapped_extents as usize).min(FIEMAP_BATCH);
            for e in &call.extents[..mapped] {
                out.push(FiemapExtent::new(e.logical, e.length, e.flags & !fiemap_flags::MERGED));
            }
            match call.extents[..mapped].last() {
                Some(e) if e.flags & fiemap_flags::LAST == 0 && mapped == FIEMAP_BATCH && e.logical + e.length < end => {
                    start = e.logical + e.length;
                    length = end - start;
                    // Written back once is enough.
                    flags &= !FiemapRequest::SYNC;
                }
                _ => break,
            }
        }
        Ok(out)
    }

    fn fiemap_count(&mut self, path: &str, req: FiemapRequest) -> Outcome {
        let fd = self.open_fd(path, libc::O_RDONLY, 0)?;
        let mut header = FiemapHeader { start: req.start, length: req.len, flags: req.flags, mapped_extents: 0, extent_count: 0, reserved: 0 };
        // SAFETY: with extent_count 0 the kernel reads and writes the header only.
        check(unsafe { libc::ioctl(fd.0, FS_IOC_FIEMAP, &mut header) })?;
        Ok(Reply::MappedCount(header.mapped_extents))
    }

    fn set_journal_data(&mut self, path: &str, enable: bool) -> Result<(), Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let mut flags: libc::c_int = 0;
        // SAFETY: FS_IOC_GETFLAGS/SETFLAGS read and write one int.
        check(unsafe { libc::ioctl(fd.0, FS_IOC_GETFLAGS, &mut flags) })?;
        let wanted = if enable { flags | FS_JOURNAL_DATA_FL } else { flags & !FS_JOURNAL_DATA_FL };
        // SAFETY: as above.
        check(unsafe { libc::ioctl(fd.0, FS_IOC_SETFLAGS, &wanted) }).map(drop)
    }

    fn chattr(&mut self, path: &str, flag: ext4_model::ChattrFlag, enable: bool) -> Result<(), Errno> {
        // As chattr(1) does: read the flags, change one bit, write them back.
        let fd = self.open_fd(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)?;
        let mut flags: libc::c_int = 0;
        // SAFETY: FS_IOC_GETFLAGS/SETFLAGS read and write one int.
        check(unsafe { libc::ioctl(fd.0, FS_IOC_GETFLAGS, &mut flags) })?;
        let bit = libc::c_int::try_from(flag.bit()).map_err(|_| Errno::EINVAL)?;
        let wanted = if enable { flags | bit } else { flags & !bit };
        // SAFETY: as above.
        check(unsafe { libc::ioctl(fd.0, FS_IOC_SETFLAGS, &wanted) }).map(drop)
    }

    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        self.open_and_write(path, libc::O_WRONLY | libc::O_APPEND, data)
    }

    fn rewrite(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        self.open_and_write(path, libc::O_WRONLY | libc::O_TRUNC, data)
    }

    fn lseek(&mut self, path: &str, offset: u64, whence: ext4_model::SeekWhence) -> Result<ext4_model::SeekChoices, Errno> {
        let fd = self.open_fd(path, libc::O_RDONLY, 0)?;
        // SAFETY: fd is open; offsets past off_t come out negative, as the
        // model's are meant to.
        let at = unsafe { libc::lseek(fd.0, offset as libc::off_t, whence.raw()) };
        if at < 0 {
            return Err(errno());
        }
        Ok(ext4_model::SeekChoices::exactly(at as u64))
    }
    fn open(&mut self, path: &str, slot: u8) -> Result<(), Errno> {
        let fd = self.open_fd(path, libc::O_RDWR, 0)?;
        // Replacing the old Fd closes it, after the open: dup2's order.
        self.slots.insert(slot, fd);
        Ok(())
    }
    fn close(&mut self, slot: u8) -> Result<(), Errno> {
        let fd = self.slots.remove(&slot).ok_or(Errno::EBADF)?;
        let raw = fd.0;
        std::mem::forget(fd);
        // SAFETY: the descriptor was ours and is closed once, here.
        check(unsafe { libc::close(raw) }).map(drop)
    }
    fn pread(&mut self, slot: u8, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        pread_all(self.raw_fd(slot), offset, len)
    }
    fn fsync_fd(&mut self, slot: u8) -> Result<(), Errno> {
        // SAFETY: fsync(2) on a number, ours or -1 (EBADF).
        check(unsafe { libc::fsync(self.raw_fd(slot)) }).map(drop)
    }
    fn ftruncate(&mut self, slot: u8, size: u64) -> Result<(), Errno> {
        // SAFETY: as above; sizes past off_t come out negative, which ftruncate(2) refuses.
        check(unsafe { libc::ftruncate(self.raw_fd(slot), size as libc::off_t) }).map(drop)
    }
    fn pwrite(&mut self, slot: u8, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        // SAFETY: data is readable for its length; the number is ours or -1.
        let n = unsafe { libc::pwrite(self.raw_fd(slot), data.as_ptr().cast(), data.len(), offset as libc::off_t) };
        if n < 0 {
            return Err(errno());
        }
        Ok(n as u64)
    }
}
