//! Which preallocation a request uses, and how far it is widened
//! (ext4_mb_group_or_file, ext4_mb_normalize_request).
//!
//! - Metadata (extent-tree and directory blocks) is never widened.
//! - A file whose end (or i_size) is past `mb_stream_req` blocks streams:
//!   its request grows to a size class (16 KiB .. 1 MiB in powers of two,
//!   then 2, 4 or 8 MiB windows aligned to their size) and the part not
//!   asked for becomes the inode's preallocation. A file that is closed
//!   and not growing gets no preallocation at all.
//! - Smaller files share the locality group's preallocation of
//!   `mb_group_prealloc` clusters, which packs them together.

use crate::format::BlockNumber;

use super::AllocRequest;

/// ext4's EXT_MAX_BLOCKS: logical blocks are 32 bits.
const MAX_LOGICAL: u64 = 1 << 32;

/// What the request is served from besides free space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaKind {
    /// Not file data: no preallocation, no widening.
    Metadata,
    /// File data that must not preallocate (EXT4_MB_HINT_NOPREALLOC).
    NoPrealloc,
    /// A stream: widened, the rest kept as the inode's preallocation.
    Inode,
    /// A small file: the locality group's preallocation.
    Group,
}

/// ext4_mb_group_or_file. Sizes in blocks.
pub fn group_or_file(req: &AllocRequest, stream_req: u64, group_prealloc: u32) -> PaKind {
    if !req.data {
        return PaKind::Metadata;
    }
    let end = req.logical + req.len;
    // No point preallocating for a file nobody is writing and that this
    // request does not grow.
    let inode_pa = end != req.isize_blocks || req.open_for_write;
    let size = end.max(req.isize_blocks);
    let group_pa = group_prealloc > 0 && size <= stream_req;
    match (group_pa, inode_pa) {
        (true, _) => PaKind::Group,
        (false, true) => PaKind::Inode,
        (false, false) => PaKind::NoPrealloc,
    }
}

/// The widened request: logical start and length in blocks, the goal
/// block, and whether that goal is worth an exact try (it continues a
/// neighbour).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Widened {
    pub logical: u64,
    pub len: u64,
    pub goal: BlockNumber,
    pub try_goal: bool,
}

/// The size class a stream's request grows to: (logical start, length), in blocks.
fn size_class(req: &AllocRequest, bs_bits: u32) -> (u64, u64) {
    let size = ((req.logical + req.len) << bs_bits).max(req.isize_blocks << bs_bits);
    const K: u64 = 1024;
    let window = |bits: u32| ((req.logical << bs_bits) >> bits << bits, 1u64 << bits);
    let (start, bytes) = match size {
        s if s <= 1024 * K => (0, s.next_power_of_two().max(16 * K)),
        s if s <= 4096 * K => window(21),
        s if s <= 8192 * K => window(22),
        _ if req.len << bs_bits <= 8192 * K => window(23),
        _ => (req.logical << bs_bits, req.len << bs_bits),
    };
    (start >> bs_bits, (bytes >> bs_bits).max(1))
}

/// ext4_mb_normalize_request for a stream. `others` are the inode's
/// preallocations as logical ranges, none holding `req.logical`.
pub fn widen_stream(req: &AllocRequest, bs_bits: u32, blocks_per_group: u64, first_data_block: u64, blocks_count: u64, others: &[(u64, u64)]) -> Widened {
    let (mut start, mut size) = size_class(req, bs_bits);
    // Tiny groups: an alignment past the group would move the request out of it.
    start = start.max(req.logical / blocks_per_group * blocks_per_group);
    size = size.min(MAX_LOGICAL.saturating_sub(start)).max(1);
    if let Some((lleft, _)) = req.left {
        if start <= lleft {
            size = size.saturating_sub(lleft + 1 - start);
            start = lleft + 1;
        }
    }
    if let Some((lright, _)) = req.right {
        if start + size > lright {
            size -= start + size - lright;
        }
    }
    size = size.min(blocks_per_group);
    let mut end = start + size;
    // ext4_mb_pa_adjust_overlap: stop short of the inode's other preallocations.
    for &(ls, le) in others {
        if le <= start || ls >= end {
            continue;
        }
        if le <= req.logical {
            start = start.max(le);
        } else if ls > req.logical {
            end = end.min(ls);
        }
    }
    // The original request always lies inside (ext4 BUG()s otherwise).
    start = start.min(req.logical);
    end = end.max(start + 1).max(req.logical + 1);
    let size = end - start;
    let mut out = Widened { logical: start, len: size, goal: req.goal, try_goal: false };
    if let Some((lright, pright)) = req.right {
        if lright == start + size && pright >= size && pright - size >= first_data_block {
            out.goal = pright - size;
            out.try_goal = true;
        }
    }
    if let Some((lleft, pleft)) = req.left {
        if lleft + 1 == start && pleft + 1 < blocks_count {
            out.goal = pleft + 1;
            out.try_goal = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(logical: u64, len: u64, isize: u64, open: bool) -> AllocRequest {
        AllocRequest { ino: 12, logical, len, goal: 5000, data: true, open_for_write: open, no_normalize: false, isize_blocks: isize, left: None, right: None }
    }

    #[test]
    fn small_files_use_the_group_and_streams_their_inode() {
        assert_eq!(group_or_file(&req(0, 4, 4, false), 16, 512), PaKind::Group);
        assert_eq!(group_or_file(&req(0, 16, 0, true), 16, 512), PaKind::Group, "16 blocks is still small");
        assert_eq!(group_or_file(&req(0, 17, 0, true), 16, 512), PaKind::Inode);
        assert_eq!(group_or_file(&req(0, 40, 40, false), 16, 512), PaKind::NoPrealloc, "closed, not growing");
        assert_eq!(group_or_file(&req(0, 4, 100, false), 16, 512), PaKind::Inode, "i_size makes it a stream");
        assert_eq!(group_or_file(&req(0, 4, 4, false), 16, 0), PaKind::NoPrealloc, "mb_group_prealloc=0 turns groups off");
        let mut meta = req(0, 1, 0, true);
        meta.data = false;
        assert_eq!(group_or_file(&meta, 16, 512), PaKind::Metadata);
    }

    #[test]
    fn streams_grow_to_size_classes_and_windows() {
        // 4 KiB blocks: 20 blocks = 80 KiB -> 128 KiB from 0.
        let w = widen_stream(&req(0, 20, 0, true), 12, 32768, 0, 1 << 20, &[]);
        assert_eq!((w.logical, w.len), (0, 32));
        // 3 MiB into a file: the 2 MiB window holding it.
        let w = widen_stream(&req(768, 8, 768, true), 12, 32768, 0, 1 << 20, &[]);
        assert_eq!((w.logical, w.len), (512, 512));
        // 100 MiB file, 8 MiB window.
        let w = widen_stream(&req(25_600, 8, 25_600, true), 12, 32768, 0, 1 << 20, &[]);
        assert_eq!((w.logical, w.len), (24_576, 2048));
    }

    #[test]
    fn neighbours_trim_the_window_and_set_the_goal() {
        let mut r = req(10, 4, 10, true);
        r.left = Some((9, 7000));
        r.right = Some((20, 9000));
        let w = widen_stream(&r, 12, 32768, 0, 1 << 20, &[]);
        assert_eq!((w.logical, w.len), (10, 6), "the 64 KiB class, less what the left neighbour holds");
        assert_eq!((w.goal, w.try_goal), (7001, true), "continues the left neighbour");
        let w = widen_stream(&req(40, 4, 40, true), 12, 32768, 0, 1 << 20, &[(0, 30), (60, 70)]);
        assert_eq!((w.logical, w.len), (30, 30), "stops at the inode's other preallocations");
    }
}
