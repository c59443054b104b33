//! What the VFS (and ext4's first line of checks) decides from a call's
//! arguments alone, before any inode is looked at. Written once and shared by
//! every implementation, so the model and the engine cannot drift on it.

use std::ops::Range;

use crate::op::{FallocFlags, FiemapRequest, PATH_MAX};
use crate::Errno;

/// The Linux VFS whose answers the model gives, where versions order their
/// checks differently (what ext4 does is the same in both).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VfsVersion {
    /// Linux 6.x (6.18 checked).
    #[default]
    Linux6,
    /// Linux 7.x (7.3 checked): rename's ancestor traps come before its
    /// trailing-slash ENOTDIR, RENAME_EXCHANGE's included.
    Linux7,
}

impl VfsVersion {
    /// The version a kernel release string names ("7.3.4+deb13-cloud-amd64").
    pub fn of_release(release: &str) -> VfsVersion {
        let major: u32 = release.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(6);
        if major >= 7 {
            VfsVersion::Linux7
        } else {
            VfsVersion::Linux6
        }
    }
}

/// Largest offset a signed loff_t holds; beyond it syscalls say EINVAL.
pub const LOFF_MAX: u64 = i64::MAX as u64;

/// The operation a fallocate mode selects, once its bits are accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallocateMode {
    Allocate { keep_size: bool },
    Punch,
    Zero { keep_size: bool },
    Collapse,
    Insert,
    /// UNSHARE, and WRITE_ZEROES without KEEP_SIZE: the VFS lets them
    /// through, ext4 refuses them (EOPNOTSUPP) once the range checks passed.
    RefusedByExt4,
}

/// vfs_fallocate's checks of the mode bits and range. UNSHARE and
/// WRITE_ZEROES pass them, for ext4 to refuse later (no shared extents; a
/// loop device does not unmap), after the EISDIR and EFBIG checks.
pub fn classify_fallocate(mode: FallocFlags, offset: u64, len: u64) -> Result<FallocateMode, Errno> {
    if offset > LOFF_MAX || len == 0 || len > LOFF_MAX {
        return Err(Errno::EINVAL);
    }
    let bits = mode.0;
    if bits & !(FallocFlags::MODE_MASK | FallocFlags::KEEP_SIZE) != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    let keep_size = mode.keep_size();
    match bits & FallocFlags::MODE_MASK {
        0 => Ok(FallocateMode::Allocate { keep_size }),
        FallocFlags::ZERO_RANGE => Ok(FallocateMode::Zero { keep_size }),
        FallocFlags::PUNCH_HOLE if keep_size => Ok(FallocateMode::Punch),
        FallocFlags::COLLAPSE_RANGE if !keep_size => Ok(FallocateMode::Collapse),
        FallocFlags::INSERT_RANGE if !keep_size => Ok(FallocateMode::Insert),
        FallocFlags::UNSHARE_RANGE => Ok(FallocateMode::RefusedByExt4),
        FallocFlags::WRITE_ZEROES if !keep_size => Ok(FallocateMode::RefusedByExt4),
        _ => Err(Errno::EOPNOTSUPP),
    }
}

/// The mode of fallocate(`mode`, `offset`, `len`) when ext4 does it piece
/// by piece, its range under `max_file_size`: an allocating one (the
/// default mode or KEEP_SIZE) maps its range one ext4_map_blocks call at a
/// time (ext4_alloc_file_blocks), a punch frees its blocks extent by
/// extent (ext4_ext_remove_space), each piece in a handle of its own, so a
/// journaled one goes in parts (`crate::fallocate_parts`).
pub fn piecewise_fallocate(mode: FallocFlags, offset: u64, len: u64, max_file_size: u64) -> Option<FallocateMode> {
    let end = fallocate_end(offset, len).ok()?;
    match classify_fallocate(mode, offset, len) {
        Ok(kind @ (FallocateMode::Allocate { .. } | FallocateMode::Punch)) if end <= max_file_size => Some(kind),
        _ => None,
    }
}

/// The part of a punch past its checks: nothing at or past EOF (None);
/// else the end clipped to the folio holding EOF (a page, or a larger
/// block), and the whole blocks it frees.
pub fn punch_span(offset: u64, end: u64, size: u64, block_size: u64, page_size: u64) -> Option<(u64, Range<u64>)> {
    if offset >= size {
        return None;
    }
    let unit = page_size.max(block_size);
    let end = if end > size { size.div_ceil(unit) * unit } else { end };
    let first = offset.div_ceil(block_size);
    Some((end, first..(end / block_size).max(first)))
}

/// pwrite's checks (generic_write_checks): how many of `len` bytes at
/// `offset` may be written under `max_file_size`. Zero bytes always succeed;
/// a write reaching the limit is cut short; one starting at it is EFBIG.
pub fn write_count(offset: u64, len: usize, max_file_size: u64) -> Result<usize, Errno> {
    if offset > LOFF_MAX {
        return Err(Errno::EINVAL);
    }
    if len == 0 {
        return Ok(0);
    }
    if offset >= max_file_size {
        return Err(Errno::EFBIG);
    }
    Ok((len as u64).min(max_file_size - offset) as usize)
}

/// The end of a fallocate range, or EFBIG where it wraps a signed offset.
pub fn fallocate_end(offset: u64, len: u64) -> Result<u64, Errno> {
    offset.checked_add(len).filter(|e| *e <= LOFF_MAX).ok_or(Errno::EFBIG)
}

/// getname() of a symlink target: empty is ENOENT, PATH_MAX or more is
/// ENAMETOOLONG; a NUL cannot be passed at all.
pub fn check_symlink_target(target: &str) -> Result<(), Errno> {
    if target.is_empty() {
        return Err(Errno::ENOENT);
    }
    if target.len() >= PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    if target.contains('\0') {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// A FIEMAP request once ext4_fiemap and fiemap_prep have accepted it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FiemapPlan {
    /// FIEMAP_FLAG_SYNC: the inode's dirty data is written back first.
    pub sync: bool,
    /// FIEMAP_FLAG_XATTR: the map is of the extended attributes, not the data.
    pub xattr: bool,
    /// Bytes asked for, `len` cut at `max_file_size`.
    pub bytes: Range<u64>,
    /// The logical blocks reported: from the one holding the first byte to
    /// the one holding the last (ext4's report ops map whole blocks).
    pub blocks: Range<u64>,
}

/// ext4_fiemap's checks, then fiemap_prep's, in the kernel's order. CACHE
/// is the caller's to act on (ext4 precaches before anything is checked,
/// then clears the bit); XATTR is cleared before the generic flag check.
pub fn check_fiemap(req: FiemapRequest, max_file_size: u64, bs: u64) -> Result<FiemapPlan, Errno> {
    let flags = req.flags & !FiemapRequest::CACHE;
    if req.len == 0 {
        return Err(Errno::EINVAL);
    }
    if req.start > max_file_size {
        return Err(Errno::EFBIG);
    }
    let len = req.len.min(max_file_size - req.start);
    // fiemap_prep checks the clamped length again: starting at the limit
    // leaves nothing, which is EINVAL before its own EFBIG (start >= limit).
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    let xattr = flags & FiemapRequest::XATTR != 0;
    let rest = flags & !FiemapRequest::XATTR;
    if rest & !FiemapRequest::SYNC != 0 {
        return Err(Errno::EBADR);
    }
    let bytes = req.start..req.start + len;
    Ok(FiemapPlan { sync: rest & FiemapRequest::SYNC != 0, xattr, blocks: block_span(bytes.start, len, bs), bytes })
}

/// Logical blocks touched by the byte range `[offset, offset + len)`.
pub fn block_span(offset: u64, len: u64, bs: u64) -> Range<u64> {
    if len == 0 {
        return offset / bs..offset / bs;
    }
    offset / bs..(offset + len).div_ceil(bs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallocate_mode_rules() {
        let f = |bits| classify_fallocate(FallocFlags(bits), 0, 4096);
        assert_eq!(f(0), Ok(FallocateMode::Allocate { keep_size: false }));
        assert_eq!(f(FallocFlags::PUNCH_HOLE), Err(Errno::EOPNOTSUPP));
        assert_eq!(f(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE), Ok(FallocateMode::Punch));
        assert_eq!(f(FallocFlags::COLLAPSE_RANGE | FallocFlags::KEEP_SIZE), Err(Errno::EOPNOTSUPP));
        assert_eq!(f(FallocFlags::PUNCH_HOLE | FallocFlags::ZERO_RANGE | 1), Err(Errno::EOPNOTSUPP));
        // The VFS lets these through; ext4 refuses them after EISDIR and EFBIG.
        assert_eq!(f(FallocFlags::UNSHARE_RANGE), Ok(FallocateMode::RefusedByExt4));
        assert_eq!(f(FallocFlags::UNSHARE_RANGE | FallocFlags::KEEP_SIZE), Ok(FallocateMode::RefusedByExt4));
        assert_eq!(f(FallocFlags::WRITE_ZEROES), Ok(FallocateMode::RefusedByExt4));
        assert_eq!(f(FallocFlags::WRITE_ZEROES | FallocFlags::KEEP_SIZE), Err(Errno::EOPNOTSUPP));
        assert_eq!(f(0x100), Err(Errno::EOPNOTSUPP));
        assert_eq!(classify_fallocate(FallocFlags(0), 0, 0), Err(Errno::EINVAL));
        assert_eq!(classify_fallocate(FallocFlags(0), u64::MAX, 1), Err(Errno::EINVAL));
        assert_eq!(fallocate_end(LOFF_MAX, 1), Err(Errno::EFBIG));
        assert_eq!(write_count(10, 0, 5), Ok(0));
        assert_eq!(write_count(3, 10, 5), Ok(2));
        assert_eq!(write_count(5, 1, 5), Err(Errno::EFBIG));
        assert_eq!(write_count(LOFF_MAX + 1, 1, u64::MAX), Err(Errno::EINVAL));
    }

    #[test]
    fn fiemap_requests_are_checked_in_the_kernels_order() {
        let max = ((1u64 << 32) - 1) * 4096;
        let check = |start, len, flags| check_fiemap(FiemapRequest { start, len, flags }, max, 4096);
        let plan = |start, len| check(start, len, 0).map(|p| (p.bytes, p.blocks));
        assert_eq!(plan(0, u64::MAX), Ok((0..max, 0..max / 4096)));
        assert_eq!(plan(100, 5000), Ok((100..5100, 0..2)));
        assert_eq!(plan(max - 1, u64::MAX), Ok((max - 1..max, max / 4096 - 1..max / 4096)));
        // Length first, then the start, then (with nothing left) length again.
        assert_eq!(check(0, 0, 0x80), Err(Errno::EINVAL));
        assert_eq!(check(max + 1, 0, 0), Err(Errno::EINVAL));
        assert_eq!(check(max + 1, 1, 0x80), Err(Errno::EFBIG));
        assert_eq!(check(max, 5, 0x80), Err(Errno::EINVAL), "the limit itself is EINVAL, flags unread");
        assert_eq!(check(u64::MAX, 1, 0), Err(Errno::EFBIG));
        // CACHE and XATTR are cleared before unknown bits are looked for.
        assert_eq!(check(0, 1, 0x8 | FiemapRequest::SYNC), Err(Errno::EBADR));
        assert_eq!(check(0, 1, 0x8000_0000), Err(Errno::EBADR));
        let all = check(0, 1, FiemapRequest::SYNC | FiemapRequest::XATTR | FiemapRequest::CACHE).unwrap();
        assert!(all.sync && all.xattr);
        assert!(!check(0, 1, FiemapRequest::CACHE).unwrap().sync);
    }

    #[test]
    fn symlink_targets_and_spans() {
        assert_eq!(check_symlink_target(""), Err(Errno::ENOENT));
        assert_eq!(check_symlink_target(&"x".repeat(PATH_MAX)), Err(Errno::ENAMETOOLONG));
        assert_eq!(check_symlink_target("a\0b"), Err(Errno::EINVAL));
        assert_eq!(check_symlink_target("/x"), Ok(()));
        assert_eq!(block_span(4095, 2, 4096), 0..2);
        assert_eq!(block_span(8192, 0, 4096), 2..2);
    }
}
