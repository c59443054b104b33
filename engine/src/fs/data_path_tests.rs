//! The data path as a user sees it: the page cache, delayed allocation and
//! write-back, through the filesystem's calls and a device that records
//! what reaches it.

use std::cell::RefCell;
use std::rc::Rc;

use ext4_model::op::fiemap_flags;
use ext4_model::{FiemapRequest, FileSystem, MountConfig};

use crate::device::{BlockDevice, DeviceError, IoClass, WriteFlags};
use crate::device_mem::MemDevice;
use crate::fs::Ext4;
use crate::mkfs::{mkfs, MkfsOptions};

const BS: u64 = 4096;

/// Data commands a [`Recording`] device saw: (offset, length) of each.
#[derive(Debug, Default)]
struct Log {
    reads: Vec<(u64, usize)>,
    writes: Vec<(u64, usize)>,
}

/// A memory device that records its data commands.
#[derive(Clone)]
struct Recording {
    inner: MemDevice,
    log: Rc<RefCell<Log>>,
}

impl BlockDevice for Recording {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), DeviceError> {
        if class == IoClass::Data {
            self.log.borrow_mut().reads.push((offset, buf.len()));
        }
        self.inner.read(offset, buf, class)
    }
    fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DeviceError> {
        if flags.class == IoClass::Data {
            self.log.borrow_mut().writes.push((offset, buf.len()));
        }
        self.inner.write(offset, buf, flags)
    }
    fn flush(&mut self) -> Result<(), DeviceError> {
        self.inner.flush()
    }
}

/// A fresh filesystem of `bytes` made for and mounted with `options`,
/// over a recording device, and its log.
fn mounted(bytes: u64, options: &str) -> (Ext4<Recording>, Rc<RefCell<Log>>) {
    let config: MountConfig = options.parse().expect("mount options");
    let mut dev = MemDevice::new(bytes);
    let opts = MkfsOptions::for_mount(&config, bytes, *b"engine-unit-test", [3; 16], crate::fixtures::EPOCH_SECS);
    mkfs(&mut dev, &opts).expect("mkfs");
    let log = Rc::new(RefCell::new(Log::default()));
    let fs = Ext4::mount(Recording { inner: dev, log: log.clone() }, &config).expect("mount");
    (fs, log)
}

/// Unmounts and mounts again with `options`: a cold page cache.
fn remount(fs: Ext4<Recording>, options: &str) -> Ext4<Recording> {
    let dev = fs.unmount().expect("unmount");
    dev.log.borrow_mut().reads.clear();
    dev.log.borrow_mut().writes.clear();
    Ext4::mount(dev, &options.parse().expect("mount options")).expect("remount")
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i % 251) as u8)).collect()
}

#[test]
fn a_partial_block_write_reads_the_block_first_and_keeps_its_other_bytes() {
    let (mut fs, log) = mounted(64 << 20, "");
    fs.create("/f", 0o644).unwrap();
    fs.write("/f", 0, &pattern(1, 3 * BS as usize)).unwrap();
    let mut fs = remount(fs, "");
    let log_now = fs.device().log.clone();
    drop(log);
    // Ten bytes inside block 1: that block alone is read, then changed.
    fs.write("/f", BS + 100, &[0xEE; 10]).unwrap();
    assert_eq!(log_now.borrow().reads.len(), 1, "one read-modify-write read: {:?}", log_now.borrow().reads);
    assert_eq!(log_now.borrow().reads[0].1, BS as usize);
    assert!(log_now.borrow().writes.is_empty(), "nothing written before write-back");
    let mut want = pattern(1, 3 * BS as usize);
    want[BS as usize + 100..BS as usize + 110].fill(0xEE);
    // A whole-block overwrite reads nothing.
    fs.write("/f", 2 * BS, &[0xDD; BS as usize]).unwrap();
    assert_eq!(log_now.borrow().reads.len(), 1);
    want[2 * BS as usize..].fill(0xDD);
    assert_eq!(fs.read("/f", 0, 3 * BS as u32).unwrap(), want);
    let mut fs = remount(fs, "");
    assert_eq!(fs.read("/f", 0, 3 * BS as u32).unwrap(), want, "what write-back wrote reads back cold");
}

#[test]
fn sequential_reads_grow_the_readahead_window_and_a_random_read_resets_it() {
    let (mut fs, _) = mounted(64 << 20, "");
    fs.create("/f", 0o644).unwrap();
    fs.write("/f", 0, &pattern(2, 4 << 20)).unwrap();
    let mut fs = remount(fs, "");
    let log = fs.device().log.clone();
    let mut at = 0;
    while at < 1 << 20 {
        assert_eq!(fs.read("/f", at, 4096).unwrap(), pattern(2, 4 << 20)[at as usize..at as usize + 4096].to_vec());
        at += 4096;
    }
    let sizes: Vec<usize> = log.borrow().reads.iter().map(|r| r.1).collect();
    assert!(sizes.len() >= 3, "{sizes:?}");
    assert!(sizes[0] < sizes[1], "the window grows: {sizes:?}");
    assert_eq!(*sizes.iter().max().unwrap(), 128 << 10, "up to the 128 KiB cap: {sizes:?}");
    let before = sizes.len();
    fs.read("/f", 3 << 20, 100).unwrap();
    let after: Vec<usize> = log.borrow().reads.iter().map(|r| r.1).collect();
    assert_eq!(&after[before..], &[4096], "a random read takes one minimum-order folio");
}

#[test]
fn the_page_size_and_folio_order_set_the_size_of_device_reads() {
    let read_size = |options: &str| {
        let (mut fs, _) = mounted(64 << 20, options);
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &pattern(3, 1 << 20)).unwrap();
        let mut fs = remount(fs, options);
        fs.read("/f", 300 << 10, 1).unwrap();
        let reads = fs.device().log.borrow().reads.clone();
        assert_eq!(reads.len(), 1, "{options}: {reads:?}");
        reads[0].1
    };
    assert_eq!(read_size(""), 4096);
    assert_eq!(read_size("ps=16k"), 16384);
    assert_eq!(read_size("ps=64k"), 65536);
    assert_eq!(read_size("bs=16k"), 16384, "a 16 KiB block needs an order-2 folio on 4 KiB pages");
    // Sequential reads: the window is in folios, so a cap on their order
    // caps the device reads too.
    let largest_read = |options: &str| {
        let (mut fs, _) = mounted(64 << 20, options);
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &pattern(3, 1 << 20)).unwrap();
        let mut fs = remount(fs, options);
        for at in (0..1 << 20).step_by(4096) {
            fs.read("/f", at, 4096).unwrap();
        }
        let reads = fs.device().log.borrow().reads.clone();
        reads.iter().map(|r| r.1).max().unwrap()
    };
    assert_eq!(largest_read(""), 128 << 10);
    assert_eq!(largest_read("max_folio_order=0"), 64 << 10, "sixteen order-0 folios");
    assert_eq!(largest_read("max_folio_order=1"), 128 << 10);
}

#[test]
fn the_cache_stays_within_its_bound_by_evicting_clean_folios_and_writing_back_dirty_ones() {
    let (mut fs, log) = mounted(256 << 20, "page_cache_mb=1");
    let bound = fs.data_path_stats().cache_bound_bytes;
    assert_eq!(bound, 1 << 20);
    for i in 0..6 {
        let path = format!("/f{i}");
        fs.create(&path, 0o644).unwrap();
        fs.write(&path, 0, &pattern(i, 700 << 10)).unwrap();
        let stats = fs.data_path_stats();
        assert!(stats.cache_bytes <= bound, "{} bytes cached over a bound of {bound}", stats.cache_bytes);
    }
    let stats = fs.data_path_stats();
    assert!(stats.writeback.commands > 0 && !log.borrow().writes.is_empty(), "dirty folios were written back to make room");
    assert!(stats.writeback.delalloc_requests > 0, "and their delayed blocks allocated");
    for i in 0..6 {
        assert_eq!(fs.read(&format!("/f{i}"), 0, 700 << 10).unwrap(), pattern(i, 700 << 10), "file {i}");
        assert!(fs.data_path_stats().cache_bytes <= bound);
    }
    assert!(fs.data_path_stats().cache.evicted_folios > 0, "clean folios made room for reads");
}

#[test]
fn a_write_into_a_full_cache_spares_the_folios_it_is_about_to_fill() {
    // Clean folios of the very range a write covers are the oldest: making
    // room must not evict them, or the write needs more than it made room for.
    let (mut fs, _) = mounted(256 << 20, "page_cache_mb=1");
    fs.create("/a", 0o644).unwrap();
    fs.write("/a", 0, &pattern(1, 905216)).unwrap();
    let mut fs = remount(fs, "page_cache_mb=1");
    let mut at = 0;
    while at < 905216 {
        fs.read("/a", at, 65536).unwrap();
        at += 65536;
    }
    fs.create("/b", 0o644).unwrap();
    fs.write("/b", 0, &pattern(2, 24576)).unwrap();
    assert_eq!(fs.write("/a", 73728, &pattern(4, 1003808)), Ok(1003808));
    let mut want = pattern(1, 905216);
    want.resize(73728, 0);
    want.extend_from_slice(&pattern(4, 1003808));
    assert_eq!(fs.read("/a", 0, want.len() as u32).unwrap(), want);
}

#[test]
fn delalloc_reserves_at_write_time_and_allocates_at_write_back_one_request_per_run() {
    let (mut fs, log) = mounted(64 << 20, "");
    fs.create("/f", 0o644).unwrap();
    fs.sync().unwrap();
    let (free_before, _) = fs.free_space();
    // Three delayed runs, with holes between them.
    for (at, blocks) in [(0, 5), (20, 3), (100, 40)] {
        fs.write("/f", at * BS, &pattern(at as u8, (blocks * BS) as usize)).unwrap();
    }
    let (free_now, _) = fs.free_space();
    assert_eq!(free_before - free_now, 48, "the reservation counts against free space at once");
    assert_eq!(fs.stat("/f").unwrap().blocks, 48 * BS / 512, "stat counts delayed blocks");
    let map = fs.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    assert_eq!(map.len(), 3);
    assert!(map.iter().all(|e| e.flags & (fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN) == fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN), "{map:?}");
    assert!(log.borrow().writes.is_empty(), "nothing reached the device");
    assert_eq!(fs.data_path_stats().writeback.delalloc_requests, 0);

    fs.fsync("/f").unwrap();
    let stats = fs.data_path_stats();
    assert_eq!(stats.writeback.delalloc_requests, 3, "one allocator request per delayed run");
    assert_eq!(stats.writeback.delalloc_blocks, 48);
    assert_eq!(stats.reserved_blocks, 0);
    assert_eq!(log.borrow().writes.len(), 3, "each run written in one command: {:?}", log.borrow().writes);
    let map = fs.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    assert_eq!(map.iter().map(|e| (e.logical / BS, e.length / BS, e.flags & !fiemap_flags::LAST)).collect::<Vec<_>>(), vec![(0, 5, 0), (20, 3, 0), (100, 40, 0)]);
    assert_eq!(fs.free_space().0, free_now, "allocation turned the reservation into blocks");
}

#[test]
fn a_reservation_that_does_not_fit_is_enospc_at_write_time() {
    let (mut fs, _) = mounted(32 << 20, "");
    fs.create("/f", 0o644).unwrap();
    let (room, _) = fs.free_space();
    let first = (room / 2) * BS;
    fs.write("/f", 0, &vec![1; first as usize]).unwrap();
    assert_eq!(fs.free_space().0, room - room / 2);
    // The rest of the room plus one block: refused whole, nothing changes.
    let too_much = (room - room / 2 + 1) * BS;
    assert_eq!(fs.write("/f", first, &vec![2; too_much as usize]), Err(ext4_model::Errno::ENOSPC));
    assert_eq!(fs.stat("/f").unwrap().size, first);
    fs.write("/f", first, &vec![2; (too_much - BS) as usize]).unwrap();
    assert_eq!(fs.free_space().0, 0);
    fs.sync().unwrap();
    let (_, report) = crate::check::check(fs.unmount().unwrap().inner);
    assert!(report.is_clean(), "{:?}", report.problems);
}

#[test]
fn nodelalloc_allocates_at_write_time_but_writes_back_later() {
    let (mut fs, log) = mounted(64 << 20, "nodelalloc");
    fs.create("/f", 0o644).unwrap();
    fs.write("/f", 0, &pattern(5, 8 * BS as usize)).unwrap();
    let map = fs.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    assert_eq!(map.len(), 1);
    assert_eq!(map[0].flags & fiemap_flags::DELALLOC, 0, "allocated: {map:?}");
    assert_eq!(map[0].flags & fiemap_flags::UNWRITTEN, fiemap_flags::UNWRITTEN, "unwritten until write-back (dioread_nolock)");
    assert!(log.borrow().writes.is_empty(), "the data waits in the cache");
    fs.fsync("/f").unwrap();
    assert_eq!(fs.fiemap("/f", FiemapRequest::whole(0)).unwrap()[0].flags & fiemap_flags::UNWRITTEN, 0, "converted at write-back");
    assert_eq!(log.borrow().writes.len(), 1);
}

#[test]
fn a_crash_drops_dirty_data_and_its_reservation() {
    let (mut fs, _) = mounted(64 << 20, "");
    fs.create("/f", 0o644).unwrap();
    fs.write("/f", 0, &pattern(6, 4 * BS as usize)).unwrap();
    fs.sync().unwrap();
    let (free_synced, _) = fs.free_space();
    fs.write("/f", 0, &[0xAB; 2 * BS as usize]).unwrap();
    fs.write("/f", 10 * BS, &[0xCD; BS as usize]).unwrap();
    assert_eq!(fs.read("/f", 0, 1).unwrap(), vec![0xAB], "dirty data is visible before write-back");
    let dev = fs.into_device_dropping_caches();
    let mut fs = Ext4::mount(dev, &MountConfig::default()).unwrap();
    assert_eq!(fs.read("/f", 0, 4 * BS as u32).unwrap(), pattern(6, 4 * BS as usize), "the overwrite was only in the cache");
    assert_eq!(fs.stat("/f").unwrap().size, 4 * BS);
    assert_eq!(fs.free_space().0, free_synced, "the delayed block's reservation went with it");
}

#[test]
fn a_shadow_unmount_writes_back_the_cache_without_touching_the_real_mount() {
    let (mut fs, log) = mounted(64 << 20, "");
    fs.create("/f", 0o644).unwrap();
    fs.sync().unwrap();
    fs.write("/f", 0, &pattern(7, 6 * BS as usize)).unwrap();
    let image_before = fs.device().inner.clone();
    let stats_before = fs.data_path_stats();
    let writes_before = log.borrow().writes.len();

    let shadow_dev = Recording { inner: fs.device().inner.clone(), log: Rc::new(RefCell::new(Log::default())) };
    let shadow = fs.shadow(shadow_dev);
    let written = shadow.unmount().unwrap();
    assert!(!written.log.borrow().writes.is_empty(), "the shadow wrote the dirty folios back");
    let mut cold = Ext4::mount(written, &MountConfig::default()).unwrap();
    assert_eq!(cold.read("/f", 0, 6 * BS as u32).unwrap(), pattern(7, 6 * BS as usize));
    assert_eq!(cold.fiemap("/f", FiemapRequest::whole(0)).unwrap()[0].flags & fiemap_flags::DELALLOC, 0);

    assert_eq!(fs.device().inner, image_before, "the real device is untouched");
    assert_eq!(log.borrow().writes.len(), writes_before);
    assert_eq!(fs.data_path_stats(), stats_before, "the real cache and reservations are as they were");
    let map = fs.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    assert_ne!(map[0].flags & fiemap_flags::DELALLOC, 0, "still delayed on the real mount");
    assert_eq!(fs.read("/f", 0, 6 * BS as u32).unwrap(), pattern(7, 6 * BS as usize));
}

#[test]
fn a_journal_flag_switch_writes_back_and_resets_the_mapping_orders() {
    let (mut fs, _) = mounted(64 << 20, "nodelalloc,bs=1k");
    fs.create("/f", 0o644).unwrap();
    let ino = fs.stat("/f").unwrap().ino as crate::format::InodeNumber;
    fs.write("/f", 0, &pattern(8, 64 << 10)).unwrap();
    let max = fs.ctx.mount.max_folio_order;
    assert!(max > 0);
    assert!(fs.ctx.pages.mapping(ino).is_some_and(|m| m.orders() == (0, max)), "an ordered inode's mapping takes large folios");
    assert!(fs.ctx.pages.mapping(ino).is_some_and(|m| m.folios().any(|(_, f)| f.order() > 0)));
    fs.set_journal_data("/f", true).unwrap();
    assert_eq!(fs.ctx.pages.dirty_block_count(), 0, "written back first");
    assert!(fs.ctx.pages.mapping(ino).is_none(), "the cache was dropped");
    fs.write("/f", 0, &pattern(9, 64 << 10)).unwrap();
    let m = fs.ctx.pages.mapping(ino).unwrap();
    assert_eq!(m.orders(), (0, 0), "a data=journal inode's maximum order is its minimum");
    assert!(m.folios().all(|(_, f)| f.order() == 0));
    assert_eq!(fs.read("/f", 0, 64 << 10).unwrap(), pattern(9, 64 << 10));
}

#[test]
fn direct_io_goes_around_the_page_cache() {
    let (mut fs, log) = mounted(64 << 20, "");
    fs.create("/f", 0o644).unwrap();
    fs.write("/f", 0, &pattern(4, BS as usize)).unwrap();
    // The dirty block is written back first; then only the asked sectors
    // of the written block go to the device, and the cache forgets them.
    assert_eq!(fs.direct_write("/f", 1024, &[0xAB; 1024]).unwrap(), 1024);
    let writes = log.borrow().writes.clone();
    assert_eq!(writes.len(), 2, "write-back, then the direct write: {writes:?}");
    assert_eq!((writes[0].1, writes[1].1), (BS as usize, 1024));
    assert_eq!(writes[1].0 % BS, 1024);
    assert_eq!(fs.data_path_stats().cache_bytes, 0, "the written range is dropped from the cache");
    let mut want = pattern(4, BS as usize);
    want[1024..2048].fill(0xAB);
    assert_eq!(fs.read("/f", 0, BS as u32).unwrap(), want);
    // Into a hole past EOF: the new block is written whole, zero padded.
    log.borrow_mut().writes.clear();
    assert_eq!(fs.direct_write("/f", 2 * BS + 512, &[0xCD; 512]).unwrap(), 512);
    assert_eq!(log.borrow().writes.iter().map(|w| w.1).collect::<Vec<_>>(), vec![BS as usize]);
    log.borrow_mut().reads.clear();
    let cold = fs.direct_read("/f", 2 * BS, BS as u32).unwrap();
    assert_eq!(cold.len(), 1024, "up to EOF");
    assert!(cold[..512].iter().all(|b| *b == 0) && cold[512..].iter().all(|b| *b == 0xCD));
    assert_eq!(log.borrow().reads.iter().map(|r| r.1).collect::<Vec<_>>(), vec![BS as usize], "one direct command, no readahead");
    let stats = fs.data_path_stats().direct;
    assert_eq!((stats.writes, stats.reads, stats.misaligned), (2, 1, 0));
}

#[test]
fn a_misaligned_direct_write_leaves_its_first_hole_unwritten_and_nothing_else() {
    let (mut fs, log) = mounted(64 << 20, "");
    fs.create("/f", 0o644).unwrap();
    fs.truncate("/f", 16 * BS).unwrap();
    log.borrow_mut().writes.clear();
    assert_eq!(fs.direct_write("/f", BS + 1, &[1; 3 * BS as usize]), Err(ext4_model::Errno::EINVAL));
    assert!(log.borrow().writes.is_empty(), "no data moved");
    let map = fs.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    assert_eq!(map.iter().map(|e| (e.logical, e.length, e.flags)).collect::<Vec<_>>(), vec![(BS, 4 * BS, fiemap_flags::UNWRITTEN | fiemap_flags::LAST)]);
    assert_eq!(fs.read("/f", 0, 16 * BS as u32).unwrap(), vec![0; 16 * BS as usize]);
    assert_eq!(fs.data_path_stats().direct.misaligned, 1);
}

#[test]
fn a_mapped_write_backs_its_whole_folio_and_msync_writes_it_back() {
    let (mut fs, log) = mounted(64 << 20, "bs=1k");
    fs.create("/f", 0o644).unwrap();
    fs.truncate("/f", 64 << 10).unwrap();
    log.borrow_mut().writes.clear();
    // Ten bytes near the end: the page's four 1 KiB blocks are backed,
    // and whatever folio the cache made for it; stores stop at EOF.
    assert_eq!(fs.map_write("/f", (64 << 10) - 10, &[7; 100]).unwrap(), 10);
    let stats = fs.data_path_stats();
    assert_eq!((stats.mapped.writes, stats.dirty_blocks), (1, 0), "msync wrote everything back");
    assert!(stats.mapped.faulted_blocks >= 4, "{:?}", stats.mapped);
    let data_written: usize = log.borrow().writes.iter().map(|w| w.1).sum();
    assert!(data_written >= 4096, "the whole page went to the device: {:?}", log.borrow().writes);
    let map = fs.fiemap("/f", FiemapRequest::whole(0)).unwrap();
    let last = map.last().unwrap();
    assert_eq!((last.logical + last.length, last.flags & fiemap_flags::DELALLOC), (64 << 10, 0), "written up to EOF: {map:?}");
    let mut want = vec![0u8; 64 << 10];
    want[(64 << 10) - 10..].fill(7);
    assert_eq!(fs.read("/f", 0, 1 << 20).unwrap(), want);
    assert_eq!(fs.map_write("/f", 64 << 10, &[1; 10]).unwrap(), 0, "nothing to store at EOF");
}

#[test]
fn a_reused_folio_shows_none_of_its_old_bytes() {
    // Folio buffers are reused without zeroing, as pages from the kernel's
    // allocator hold garbage: every path that makes a block uptodate must
    // fill it whole. Before each step, the cache's spare buffers are
    // soiled: a file's dirty folios dropped by truncation.
    let (mut fs, _log) = mounted(64 << 20, "");
    let soil = |fs: &mut Ext4<Recording>| {
        fs.create("/junk", 0o644).unwrap();
        // One block at a time: order-0 folios, as small writes get.
        for k in 0..32 {
            fs.write("/junk", 2 * k * BS, &pattern(0x5A, BS as usize)).unwrap();
        }
        fs.truncate("/junk", 0).unwrap();
        fs.unlink("/junk").unwrap();
    };
    fs.create("/f", 0o644).unwrap();
    soil(&mut fs);
    fs.truncate("/f", 16 * BS).unwrap();
    assert!(fs.read("/f", 0, 16 * BS as u32).unwrap().iter().all(|&b| b == 0), "a hole read through reused folios");
    fs.truncate("/f", 0).unwrap();
    // Partial writes into new blocks: the rest of each block is zeros,
    // and so is the hole between them.
    soil(&mut fs);
    fs.write("/f", 100, &[0xEE; 10]).unwrap();
    fs.write("/f", 2 * BS + 5, &[0xEE; 10]).unwrap();
    let mut want = vec![0; 2 * BS as usize + 15];
    want[100..110].fill(0xEE);
    want[2 * BS as usize + 5..].fill(0xEE);
    assert_eq!(fs.read("/f", 0, 3 * BS as u32).unwrap(), want);
    fs.truncate("/f", 110).unwrap();
    // Unwritten extents read as zeros too, cached and cold.
    soil(&mut fs);
    fs.fallocate("/f", ext4_model::FallocFlags::ALLOCATE, BS, 8 * BS).unwrap();
    let mut want = vec![0; 9 * BS as usize];
    want[100..110].fill(0xEE);
    assert_eq!(fs.read("/f", 0, 9 * BS as u32).unwrap(), want);
    let mut fs = remount(fs, "");
    assert_eq!(fs.read("/f", 0, 9 * BS as u32).unwrap(), want, "cold");
}
