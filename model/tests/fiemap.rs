//! FIEMAP request by request. The expected answers are what Linux 6.18 gave
//! for the same file on a loop-mounted 1 KiB-block ext4 (written 0..8K and
//! synced, unwritten 8K..16K, delayed 32K..48K), asked with the same
//! fm_start, fm_length and fm_flags.

use ext4_model::agree::agrees;
use ext4_model::op::fiemap_flags::*;
use ext4_model::{Errno, Errno::*, FallocFlags, FiemapRequest, FileSystem, Model, MountConfig, Op, Reply};

const SYNC: u32 = FiemapRequest::SYNC;
const XATTR: u32 = FiemapRequest::XATTR;
const CACHE: u32 = FiemapRequest::CACHE;

fn probed_file() -> Model {
    let mut m = Model::new(&MountConfig { block_size: 1024, ..MountConfig::default() }).unwrap();
    m.create("/f", 0o644).unwrap();
    m.write("/f", 0, &[b'a'; 8192]).unwrap();
    m.fsync("/f").unwrap();
    m.fallocate("/f", FallocFlags(0), 8192, 8192).unwrap();
    m.write("/f", 32768, &[b'b'; 16384]).unwrap();
    m
}

type Map = Result<Vec<(u64, u64, u32)>, Errno>;

fn map(m: &mut Model, start: u64, len: u64, flags: u32) -> Map {
    m.fiemap("/f", FiemapRequest { start, len, flags }).map(|v| v.iter().map(|e| (e.logical, e.length, e.flags)).collect())
}

#[test]
fn a_range_maps_its_blocks_clipped_with_its_own_last_extent() {
    let mut m = probed_file();
    let whole = vec![(0, 8192, 0), (8192, 8192, UNWRITTEN), (32768, 16384, DELALLOC | UNKNOWN | LAST)];
    assert_eq!(map(&mut m, 0, u64::MAX, 0), Ok(whole.clone()));
    assert_eq!(map(&mut m, 100, 5000, 0), Ok(vec![(0, 5120, LAST)]), "blocks 0..5: the bytes' first and last blocks");
    assert_eq!(map(&mut m, 5000, 1, 0), Ok(vec![(4096, 1024, LAST)]));
    assert_eq!(map(&mut m, 4096, 32769, 0), Ok(vec![(4096, 4096, 0), (8192, 8192, UNWRITTEN), (32768, 5120, DELALLOC | UNKNOWN | LAST)]));
    assert_eq!(map(&mut m, 34000, 100, 0), Ok(vec![(33792, 1024, DELALLOC | UNKNOWN | LAST)]), "delayed extents clip too");
    assert_eq!(map(&mut m, 20000, 4000, 0), Ok(vec![]), "holes never count");
    assert_eq!(map(&mut m, 0, u64::MAX, CACHE), Ok(whole), "CACHE changes no answer");
    assert_eq!(map(&mut m, 0, u64::MAX, XATTR), Ok(vec![]), "no extended attributes: nothing mapped, no error");
}

#[test]
fn bad_requests_get_the_kernels_errno_in_its_order() {
    let mut m = probed_file();
    let max = m.mount().max_file_size();
    assert_eq!(map(&mut m, 0, 0, 0), Err(EINVAL));
    assert_eq!(map(&mut m, 0, 0, 0x8), Err(EINVAL), "length before flags");
    assert_eq!(map(&mut m, max + 1, 0, 0x8), Err(EINVAL));
    assert_eq!(map(&mut m, max + 1, 1, 0), Err(EFBIG));
    assert_eq!(map(&mut m, max, 1, 0), Err(EINVAL), "at the limit nothing is left to map");
    assert_eq!(map(&mut m, max, 5, CACHE), Err(EINVAL));
    assert_eq!(map(&mut m, max - 1, u64::MAX, 0), Ok(vec![]));
    assert_eq!(map(&mut m, 0, u64::MAX, 0x8), Err(EBADR));
    assert_eq!(map(&mut m, 0, u64::MAX, 0x10 | XATTR), Err(EBADR));
    assert_eq!(map(&mut m, 0, u64::MAX, 0x8000_0000), Err(EBADR));
    assert_eq!(m.fiemap("/nope", FiemapRequest::whole(0)), Err(ENOENT));
}

#[test]
fn sync_writes_back_only_once_the_request_is_accepted() {
    let mut m = probed_file();
    let delayed = Ok(vec![(32768, 1024, DELALLOC | UNKNOWN | LAST)]);
    assert_eq!(map(&mut m, 0, 0, SYNC), Err(EINVAL));
    assert_eq!(map(&mut m, 0, u64::MAX, SYNC | 0x8), Err(EBADR));
    assert_eq!(map(&mut m, 32768, 1, 0), delayed, "refused requests wrote nothing back");
    assert_eq!(map(&mut m, 0, 1, SYNC | XATTR), Ok(vec![]));
    assert_eq!(map(&mut m, 32768, 1, 0), Ok(vec![(32768, 1024, LAST)]), "SYNC|XATTR wrote the whole file back");
}

#[test]
fn a_count_only_request_is_held_between_runs_and_blocks() {
    let mut m = probed_file();
    let count = |m: &mut Model, start, len| m.apply(&Op::Fiemap { path: "/f".into(), start, len, flags: 0, count_only: true });
    // The kernel counted 3 for both (written, unwritten, delayed).
    for (start, len) in [(0, u64::MAX), (100, 40000)] {
        let model = count(&mut m, start, len);
        assert!(matches!(model, Ok(Reply::ExtentsToCount { block_size: 1024, .. })), "{model:?}");
        assert!(agrees(&model, &Ok(Reply::MappedCount(3))).is_ok());
        assert!(agrees(&model, &Ok(Reply::MappedCount(1))).is_err(), "two runs a hole apart");
    }
    assert!(agrees(&count(&mut m, 4096, 1024), &Ok(Reply::MappedCount(1))).is_ok());
    assert!(agrees(&count(&mut m, 4096, 1024), &Ok(Reply::MappedCount(2))).is_err(), "one block, one extent");
    assert!(agrees(&count(&mut m, 20000, 4000), &Ok(Reply::MappedCount(0))).is_ok());
    assert!(agrees(&count(&mut m, 0, 0), &Err(EINVAL)).is_ok());
}

#[test]
fn directories_map_their_blocks_in_any_number_of_extents() {
    let mut m = probed_file();
    m.mkdir("/d", 0o755).unwrap();
    let dir = |m: &mut Model, start, len, count_only| m.apply(&Op::Fiemap { path: "/d".into(), start, len, flags: 0, count_only });
    // How many blocks a directory has is layout: say 24, in one extent.
    assert!(agrees(&dir(&mut m, 0, u64::MAX, false), &Ok(Reply::Extents(vec![ext4_model::FiemapExtent::new(0, 24576, LAST)]))).is_ok());
    assert!(agrees(&dir(&mut m, 0, u64::MAX, true), &Ok(Reply::MappedCount(1))).is_ok());
    assert!(agrees(&dir(&mut m, 0, u64::MAX, true), &Ok(Reply::MappedCount(0))).is_err(), "block 0 is always there");
    // Bytes 5000..9096 are blocks 4..9 on 1 KiB blocks.
    assert!(agrees(&dir(&mut m, 5000, 4096, false), &Ok(Reply::Extents(vec![ext4_model::FiemapExtent::new(4096, 5120, LAST)]))).is_ok());
    assert!(agrees(&dir(&mut m, 5000, 4096, false), &Ok(Reply::Extents(vec![ext4_model::FiemapExtent::new(4096, 6144, LAST)]))).is_err());
    assert!(agrees(&dir(&mut m, 10_000_000, 1, true), &Ok(Reply::MappedCount(0))).is_ok(), "past its end");
}
