//! proptest strategies for ops and mount configurations. Paths come from a
//! small pool of names so that ops collide: renames over existing files,
//! links to directories, writes through symlinks.

use proptest::prelude::*;

use ext4_model::{AllocPolicy, DataMode, MountConfig};
use ext4_model::{FallocFlags, FiemapRequest, Op};

/// Names ops draw from; short, so trees stay small and collisions common.
pub const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// An absolute path of depth 1..=3 over [`NAMES`].
pub fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(&NAMES[..]), 1..=3).prop_map(|c| format!("/{}", c.join("/")))
}

/// A file offset that hits block boundaries, their neighbours and far ranges.
pub fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..20_000,
        2 => (0u64..8).prop_map(|b| b * 4096),
        1 => (0u64..64).prop_map(|b| b * 65536),
        1 => Just(1u64 << 40),
    ]
}

pub fn falloc_mode() -> impl Strategy<Value = FallocFlags> {
    prop_oneof![
        Just(FallocFlags::ALLOCATE),
        Just(FallocFlags(FallocFlags::KEEP_SIZE)),
        Just(FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE)),
        Just(FallocFlags(FallocFlags::PUNCH_HOLE)),
        Just(FallocFlags(FallocFlags::ZERO_RANGE)),
        Just(FallocFlags(FallocFlags::ZERO_RANGE | FallocFlags::KEEP_SIZE)),
        Just(FallocFlags(FallocFlags::COLLAPSE_RANGE)),
        Just(FallocFlags(FallocFlags::INSERT_RANGE)),
        any::<u32>().prop_map(FallocFlags),
    ]
}

/// FIEMAP's (start, len): mostly the whole file, else a range over the
/// offsets writes use, sometimes the edges (len 0, past the largest file).
pub fn fiemap_range() -> impl Strategy<Value = (u64, u64)> {
    prop_oneof![
        4 => Just((0u64, u64::MAX)),
        4 => (offset(), 1u64..70_000),
        1 => (offset(), Just(u64::MAX)),
        1 => (offset(), Just(0u64)),
        1 => (prop_oneof![Just(1u64 << 44), Just(u64::MAX)], 1u64..10),
    ]
}

/// fm_flags: mostly none or SYNC, sometimes XATTR or CACHE, rarely unknown bits.
pub fn fiemap_flags() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => prop_oneof![Just(0u32), Just(FiemapRequest::SYNC)],
        2 => 0u32..8,
        1 => any::<u32>(),
    ]
}

/// Any op, weighted toward the ones that change state.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (path(), 0u16..0o1000).prop_map(|(path, perm)| Op::Create { path, perm }),
        3 => (path(), 0u16..0o1000).prop_map(|(path, perm)| Op::Mkdir { path, perm }),
        2 => path().prop_map(|path| Op::Unlink { path }),
        2 => path().prop_map(|path| Op::Rmdir { path }),
        3 => (path(), path()).prop_map(|(from, to)| Op::Rename { from, to }),
        1 => (path(), prop_oneof![Just(ext4_model::ChattrFlag::Immutable), Just(ext4_model::ChattrFlag::Append)], any::<bool>()).prop_map(|(path, flag, enable)| Op::Chattr { path, flag, enable }),
        2 => (path(), 0u32..20_000, any::<u64>()).prop_map(|(path, len, seed)| Op::Append { path, len, seed }),
        2 => (path(), 0u32..20_000, any::<u64>()).prop_map(|(path, len, seed)| Op::Rewrite { path, len, seed }),
        2 => (path(), offset(), any::<bool>()).prop_map(|(path, offset, data)| Op::Lseek { path, offset, whence: if data { ext4_model::SeekWhence::Data } else { ext4_model::SeekWhence::Hole } }),
        2 => (path(), path(), prop_oneof![Just(ext4_model::RenameFlags::NoReplace), Just(ext4_model::RenameFlags::Exchange)]).prop_map(|(from, to, flags)| Op::Renameat2 { from, to, flags }),
        2 => (path(), path()).prop_map(|(from, to)| Op::Link { from, to }),
        1 => (prop_oneof![path(), "[a-d./]{1,70}"], path()).prop_map(|(target, path)| Op::Symlink { target, path }),
        1 => path().prop_map(|path| Op::Readlink { path }),
        1 => path().prop_map(|path| Op::Readdir { path }),
        2 => path().prop_map(|path| Op::Stat { path }),
        6 => (path(), offset(), 0u32..20_000, any::<u64>()).prop_map(|(path, offset, len, seed)| Op::Write { path, offset, len, seed }),
        3 => (path(), offset(), 0u32..20_000).prop_map(|(path, offset, len)| Op::Read { path, offset, len }),
        2 => (path(), offset()).prop_map(|(path, size)| Op::Truncate { path, size }),
        1 => path().prop_map(|path| Op::Fsync { path }),
        1 => path().prop_map(|path| Op::Fdatasync { path }),
        1 => Just(Op::Sync),
        3 => (path(), falloc_mode(), offset(), 1u64..40_000).prop_map(|(path, mode, offset, len)| Op::Fallocate { path, mode, offset, len }),
        2 => (path(), fiemap_range(), fiemap_flags(), prop::bool::weighted(0.25)).prop_map(|(path, (start, len), flags, count_only)| Op::Fiemap { path, start, len, flags, count_only }),
        1 => (path(), any::<bool>()).prop_map(|(path, enable)| Op::SetJournalData { path, enable }),
        3 => (path(), slot()).prop_map(|(path, slot)| Op::Open { path, slot }),
        2 => slot().prop_map(|slot| Op::Close { slot }),
        2 => (slot(), offset(), 0u32..20_000).prop_map(|(slot, offset, len)| Op::ReadFd { slot, offset, len }),
        3 => (slot(), offset(), 0u32..20_000, any::<u64>()).prop_map(|(slot, offset, len, seed)| Op::WriteFd { slot, offset, len, seed }),
        1 => slot().prop_map(|slot| Op::FsyncFd { slot }),
        1 => (slot(), offset()).prop_map(|(slot, size)| Op::FtruncateFd { slot, size }),
        2 => (path(), direct_range(), any::<u64>()).prop_map(|(path, (offset, len), seed)| Op::DirectWrite { path, offset, len, seed }),
        1 => (path(), direct_range()).prop_map(|(path, (offset, len))| Op::DirectRead { path, offset, len }),
        2 => (path(), offset(), 0u32..20_000, any::<u64>()).prop_map(|(path, offset, len, seed)| Op::MapWrite { path, offset, len, seed }),
    ]
}

/// A direct I/O range: sector aligned mostly, as O_DIRECT users ask.
pub fn direct_range() -> impl Strategy<Value = (u64, u32)> {
    (offset(), 0u32..20_000, prop::bool::weighted(0.8)).prop_map(|(offset, len, aligned)| {
        let a = ext4_model::op::DIO_ALIGN;
        if aligned {
            (offset / a * a, (u64::from(len).div_ceil(a) * a) as u32)
        } else {
            (offset, len)
        }
    })
}

/// A descriptor slot, now and then one past the table (EBADF).
pub fn slot() -> impl Strategy<Value = u8> {
    prop_oneof![9 => 0..ext4_model::op::FD_SLOTS, 1 => ext4_model::op::FD_SLOTS..=u8::MAX]
}

pub fn data_mode() -> impl Strategy<Value = Option<DataMode>> {
    prop_oneof![Just(None), Just(Some(DataMode::Ordered)), Just(Some(DataMode::Writeback)), Just(Some(DataMode::Journal))]
}

/// Mount configurations that ext4 accepts (with a journal).
pub fn valid_mount_config() -> impl Strategy<Value = MountConfig> {
    (
        prop::sample::select(vec![1024u32, 2048, 4096, 8192, 16384, 65536]),
        prop::sample::select(vec![4096u32, 16384, 65536]),
        data_mode(),
        prop_oneof![Just(None), Just(Some(false))],
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(block_size, page_size, data, delalloc, dioread, auto_da_alloc)| MountConfig {
            block_size,
            page_size,
            data,
            delalloc: if data == Some(DataMode::Journal) { delalloc } else { delalloc.or(Some(true)) },
            dioread_nolock: Some(dioread),
            auto_da_alloc,
            alloc: AllocPolicy::default(),
            ..MountConfig::default()
        })
}
