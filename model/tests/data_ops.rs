//! Data ops case by case: sizes, errors, and how blocks are backed per mode.

use ext4_model::op::fiemap_flags::*;
use ext4_model::op::{pattern, MAX_IO_LEN};
use ext4_model::{DataMode, Errno::*, FallocFlags, FiemapRequest, FileSystem, Model, MountConfig, Op};

const KEEP: u32 = FallocFlags::KEEP_SIZE;
const PUNCH: u32 = FallocFlags::PUNCH_HOLE;
const ZERO: u32 = FallocFlags::ZERO_RANGE;
const COLLAPSE: u32 = FallocFlags::COLLAPSE_RANGE;
const INSERT: u32 = FallocFlags::INSERT_RANGE;

fn model_with(c: MountConfig) -> Model {
    let mut m = Model::new(&c).unwrap();
    m.mkdir("/d", 0o755).unwrap();
    m.create("/f", 0o644).unwrap();
    m
}

fn model() -> Model {
    model_with(MountConfig::default())
}

fn fa(m: &mut Model, mode: u32, off: u64, len: u64) -> Result<(), ext4_model::Errno> {
    m.fallocate("/f", FallocFlags(mode), off, len)
}

#[test]
fn fallocate_errors() {
    let mut m = model();
    m.write("/f", 0, &[1; 10000]).unwrap();
    assert_eq!(fa(&mut m, PUNCH, 0, 4096), Err(EOPNOTSUPP));
    assert_eq!(fa(&mut m, COLLAPSE | KEEP, 0, 4096), Err(EOPNOTSUPP));
    assert_eq!(fa(&mut m, PUNCH | ZERO | KEEP, 0, 4096), Err(EOPNOTSUPP));
    assert_eq!(fa(&mut m, FallocFlags::UNSHARE_RANGE, 0, 4096), Err(EOPNOTSUPP));
    assert_eq!(fa(&mut m, 0x400, 0, 4096), Err(EOPNOTSUPP));
    assert_eq!(fa(&mut m, 0, 0, 0), Err(EINVAL));
    assert_eq!(fa(&mut m, 0, 1 << 63, 1), Err(EINVAL));
    assert_eq!(fa(&mut m, COLLAPSE, 100, 4096), Err(EINVAL));
    assert_eq!(fa(&mut m, COLLAPSE, 8192, 4096), Err(EINVAL), "collapse must end before EOF (10000)");
    assert_eq!(fa(&mut m, COLLAPSE, 0, 8192), Ok(()));
    assert_eq!(m.stat("/f").unwrap().size, 10000 - 8192);
    assert_eq!(fa(&mut m, INSERT, 4096, 4096), Err(EINVAL), "insert must start before EOF");
    assert_eq!(fa(&mut m, INSERT, 0, 4096 * 3), Ok(()));
    let max = m.mount().max_file_size();
    assert_eq!(fa(&mut m, 0, max - 10, 20), Err(EFBIG));
    assert_eq!(fa(&mut m, INSERT, 0, max / 4096 * 4096), Err(EFBIG));
    assert_eq!(m.fallocate("/d", FallocFlags(0), 0, 10), Err(EISDIR));
    assert_eq!(m.fallocate("/nope", FallocFlags(0), 0, 10), Err(ENOENT));
    m.check_invariants().unwrap();
}

#[test]
fn write_read_truncate_errors_and_limits() {
    let mut m = model();
    let max = m.mount().max_file_size();
    assert_eq!(max, ((1u64 << 32) - 1) * 4096);
    assert_eq!(m.write("/f", max, b"x"), Err(EFBIG));
    assert_eq!(m.write("/f", max - 2, b"xyz"), Ok(2), "short write at s_maxbytes");
    assert_eq!(m.write("/f", max + 5, b""), Ok(0), "empty writes never fail");
    assert_eq!(m.write("/f", 1 << 63, b"x"), Err(EINVAL));
    assert_eq!(m.write("/d", 0, b"x"), Err(EISDIR));
    assert_eq!(m.read("/d", 0, 1), Err(EISDIR));
    assert_eq!(m.read("/f", 1 << 63, 1), Err(EINVAL));
    assert_eq!(m.truncate("/f", 1 << 63), Err(EINVAL));
    assert_eq!(m.truncate("/f", max + 1), Err(EFBIG));
    assert_eq!(m.truncate("/d", 0), Err(EISDIR));
    assert_eq!(m.apply(&Op::Write { path: "/f".into(), offset: 0, len: MAX_IO_LEN + 1, seed: 0 }), Err(EINVAL));
    assert_eq!(m.fiemap("/d", FiemapRequest::whole(0)), Ok(vec![ext4_model::FiemapExtent::directory_blocks(0..max)]), "the kernel maps directories too");
    assert_eq!(m.stat("/f").unwrap().blocks, 8, "one data block near the limit");
}

#[test]
fn buffered_writes_are_backed_as_the_mount_says() {
    // (mount, fiemap flags of a fresh write before writeback)
    let cases = [
        (MountConfig::default(), DELALLOC | UNKNOWN),
        (MountConfig { delalloc: Some(false), ..MountConfig::default() }, UNWRITTEN),
        (MountConfig { delalloc: Some(false), dioread_nolock: Some(false), ..MountConfig::default() }, 0),
        (MountConfig { data: Some(DataMode::Journal), ..MountConfig::default() }, 0),
    ];
    for (cfg, flags) in cases {
        let mut m = model_with(cfg);
        m.write("/f", 4096, &[9; 100]).unwrap();
        let ext = m.fiemap("/f", FiemapRequest::whole(0)).unwrap();
        assert_eq!(ext.len(), 1, "{cfg:?}");
        assert_eq!((ext[0].logical, ext[0].length, ext[0].flags), (4096, 4096, flags | LAST), "{cfg:?}");
        assert_eq!(ext[0].writeback_pending, flags != 0, "{cfg:?}");
        let synced = m.fiemap("/f", FiemapRequest::whole(FiemapRequest::SYNC)).unwrap();
        assert_eq!(synced[0].flags, LAST, "FIEMAP_FLAG_SYNC writes back");
        assert_eq!(m.stat("/f").unwrap().blocks, 8);
    }
}

#[test]
fn punch_hole_stops_at_the_page_holding_eof() {
    let mut m = model_with(MountConfig { block_size: 1024, page_size: 4096, ..MountConfig::default() });
    m.write("/f", 0, &pattern(1, 3000)).unwrap();
    fa(&mut m, KEEP, 0, 16384).unwrap();
    assert_eq!(m.stat("/f").unwrap().blocks, 32, "16 KiB preallocated");
    fa(&mut m, PUNCH | KEEP, 1024, 1 << 20).unwrap();
    // Freed: blocks 1..4 (up to the 4 KiB page holding EOF 3000); 4..16 stay.
    let ext = m.fiemap("/f", FiemapRequest::whole(FiemapRequest::SYNC)).unwrap();
    let cover: Vec<(u64, u64, u32)> = ext.iter().map(|e| (e.logical, e.length, e.flags)).collect();
    assert_eq!(cover, vec![(0, 1024, 0), (4096, 12288, UNWRITTEN | LAST)]);
    assert_eq!(m.read("/f", 0, 3000).unwrap()[..1024], pattern(1, 1024)[..]);
    assert!(m.read("/f", 1024, 3000).unwrap().iter().all(|&b| b == 0));
    assert_eq!(fa(&mut m, PUNCH | KEEP, 5000, 10), Ok(()), "at or past EOF punch does nothing");
    m.check_invariants().unwrap();
}

#[test]
fn zero_range_makes_whole_blocks_unwritten_and_zeroes_edges() {
    let mut m = model_with(MountConfig { delalloc: Some(false), dioread_nolock: Some(false), ..MountConfig::default() });
    m.write("/f", 0, &[7; 16384]).unwrap();
    fa(&mut m, ZERO, 1000, 10000).unwrap();
    let data = m.read("/f", 0, 16384).unwrap();
    assert!(data[..1000].iter().all(|&b| b == 7));
    assert!(data[1000..11000].iter().all(|&b| b == 0));
    assert!(data[11000..].iter().all(|&b| b == 7));
    let ext = m.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    let cover: Vec<(u64, u64, u32)> = ext.iter().map(|e| (e.logical, e.length, e.flags)).collect();
    assert_eq!(cover, vec![(0, 4096, 0), (4096, 4096, UNWRITTEN), (8192, 8192, LAST)]);
    // Strictly unwritten: the kernel converts the written block (both
    // kernels, 1 KiB..64 KiB blocks), so an engine leaving it written diverges.
    assert!(!ext[1].writeback_pending, "{ext:?}");
    let written = [ext[0].clone(), ext4_model::FiemapExtent { flags: 0, ..ext[1].clone() }, ext[2].clone()];
    assert!(ext4_model::agree::fiemap_agrees(&ext, &written).is_err());
    fa(&mut m, ZERO, 20000, 100).unwrap();
    assert_eq!(m.stat("/f").unwrap().size, 20100);
    fa(&mut m, ZERO | KEEP, 30000, 100).unwrap();
    assert_eq!(m.stat("/f").unwrap().size, 20100);
    m.check_invariants().unwrap();
}

/// Delayed data that gets an unwritten block (fallocate over it, or a
/// ZERO_RANGE edge) is converted at writeback, and under dioread_lock ext4
/// zeroes the short rest of the new unwritten extent out: the kernel reports
/// those blocks written, a split leaves them unwritten. Both are allowed;
/// blocks out of zeroout's reach stay strictly unwritten.
#[test]
fn writeback_into_a_new_unwritten_extent_may_zero_its_short_rest_out() {
    let dioread_lock = MountConfig { dioread_nolock: Some(false), ..MountConfig::default() };
    let all_written = |len: u64| vec![ext4_model::FiemapExtent::new(0, len, LAST)];
    // The oracle's trace (host 6.18 and qemu 7.3): 8 KiB delayed, 20 KiB fallocate.
    let mut m = model_with(dioread_lock);
    m.write("/f", 0, &[1; 8192]).unwrap();
    fa(&mut m, 0, 0, 20480).unwrap();
    let synced = m.fiemap("/f", FiemapRequest::whole(FiemapRequest::SYNC)).unwrap();
    let kernel = all_written(20480);
    assert!(ext4_model::agree::fiemap_agrees(&synced, &kernel).is_ok(), "{synced:?}");
    let split = vec![
        ext4_model::FiemapExtent::new(0, 8192, 0),
        ext4_model::FiemapExtent::new(8192, 12288, UNWRITTEN | LAST),
    ];
    assert!(ext4_model::agree::fiemap_agrees(&synced, &split).is_ok());
    // Beyond 32 KiB of the converted block, unwritten is a promise.
    let mut far = model_with(dioread_lock);
    far.write("/f", 0, &[1; 4096]).unwrap();
    fa(&mut far, 0, 0, 1 << 20).unwrap();
    let synced = far.fiemap("/f", FiemapRequest::whole(FiemapRequest::SYNC)).unwrap();
    assert!(ext4_model::agree::fiemap_agrees(&synced, &all_written(1 << 20)).is_err(), "{synced:?}");
    // A delayed ZERO_RANGE edge (seed 3037 on the host): the whole blocks after it may be zeroed out.
    let mut z = model_with(dioread_lock);
    z.write("/f", 0, &[2; 40458]).unwrap();
    fa(&mut z, ZERO, 38695, 20480).unwrap();
    let synced = z.fiemap("/f", FiemapRequest::whole(FiemapRequest::SYNC)).unwrap();
    let kernel = vec![
        ext4_model::FiemapExtent::new(0, 36864, 0),
        ext4_model::FiemapExtent::new(36864, 24576, LAST),
    ];
    assert!(ext4_model::agree::fiemap_agrees(&synced, &kernel).is_ok(), "{synced:?}");
    z.check_invariants().unwrap();
}

#[test]
fn enospc_is_all_or_nothing_against_the_limit() {
    let limits = ext4_model::Limits { data_blocks: Some(4), inodes: Some(3) };
    let mut m = Model::with_limits(&MountConfig::default(), limits).unwrap();
    m.create("/f", 0o644).unwrap();
    assert_eq!(m.write("/f", 0, &[1; 4096 * 5]), Err(ENOSPC));
    assert_eq!(m.stat("/f").unwrap().size, 0);
    assert_eq!(m.write("/f", 0, &[1; 4096 * 4]), Ok(16384));
    assert_eq!(m.write("/f", 0, &[2; 10]), Ok(10), "overwrites need no space");
    assert_eq!(m.fallocate("/f", FallocFlags(0), 16384, 1), Err(ENOSPC));
    m.create("/g", 0o644).unwrap();
    m.mkdir("/h", 0o755).unwrap();
    assert_eq!(m.create("/i", 0o644), Err(ENOSPC));
    m.unlink("/g").unwrap();
    assert_eq!(m.create("/i", 0o644), Ok(()));
}

#[test]
fn journal_flag_switch() {
    let mut m = model_with(MountConfig { delalloc: Some(false), ..MountConfig::default() });
    m.write("/f", 0, &[5; 5000]).unwrap();
    let before = m.read("/f", 0, 5000).unwrap();
    m.set_journal_data("/f", true).unwrap();
    assert_eq!(m.read("/f", 0, 5000).unwrap(), before, "contents never change across a switch");
    assert_eq!(m.fiemap("/f", FiemapRequest::whole(0)).unwrap()[0].flags & UNWRITTEN, 0, "the switch wrote back");
    m.write("/f", 8192, &[1; 10]).unwrap();
    let ext = m.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    assert_eq!((ext.len(), ext[0].length, ext[0].flags), (1, 12288, LAST), "journaled data is written, not unwritten");
    let mut ro = Model::new(&MountConfig { read_only: true, ..MountConfig::default() }).unwrap();
    assert_eq!(ro.set_journal_data("/lost+found", true), Err(EROFS));
    let mut nj = Model::new(&MountConfig { has_journal: false, ..MountConfig::default() }).unwrap();
    nj.create("/f", 0o644).unwrap();
    assert_eq!(nj.set_journal_data("/f", true), Ok(()));
    assert_eq!(nj.stat("/f").unwrap().flags & ext4_model::op::inode_flags::JOURNAL_DATA, 0, "no journal: flag stays clear");
}
