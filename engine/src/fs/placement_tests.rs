//! Where mballoc puts file data, through the filesystem's calls: small
//! files packed by the locality group, streams kept contiguous by their
//! inode's window, windows given back at close, and preallocations never
//! the cause of ENOSPC.

use ext4_model::{FileSystem, MountConfig};

use crate::device_mem::MemDevice;
use crate::fs::Ext4;
use crate::mkfs::{mkfs, MkfsOptions};

/// 1 GiB at 4 KiB blocks: 8 groups in one flex of 16.
fn mounted(options: &str, bytes: u64) -> Ext4<MemDevice> {
    let config: MountConfig = options.parse().expect("mount options");
    let mut dev = MemDevice::new(bytes);
    mkfs(&mut dev, &MkfsOptions::for_mount(&config, bytes, *b"mballoc-placemnt", [5; 16], crate::fixtures::EPOCH_SECS)).unwrap();
    Ext4::mount(dev, &config).unwrap()
}

/// (logical, physical, length) of each run of `path`.
fn runs(fs: &mut Ext4<MemDevice>, path: &str) -> Vec<(u64, u64, u64)> {
    let ino = fs.open_path(path).unwrap();
    fs.nodes[&ino].map().iter().map(|p| (p.logical, p.physical, p.len)).collect()
}

#[test]
fn small_files_in_different_directories_are_packed_together() {
    let mut fs = mounted("", 1 << 30);
    for d in 0..6 {
        fs.mkdir(&format!("/d{d}"), 0o755).unwrap();
        for f in 0..3 {
            let p = format!("/d{d}/f{f}");
            fs.create(&p, 0o644).unwrap();
            fs.write(&p, 0, &[d as u8; 8192]).unwrap();
        }
    }
    fs.sync().unwrap();
    let mut starts: Vec<u64> = Vec::new();
    for d in 0..6 {
        for f in 0..3 {
            let r = runs(&mut fs, &format!("/d{d}/f{f}"));
            assert_eq!(r.len(), 1, "{r:?}");
            starts.push(r[0].1);
        }
    }
    starts.sort_unstable();
    // 18 files of 2 blocks from one 512-block preallocation: back to back.
    assert!(starts.windows(2).all(|w| w[1] == w[0] + 2), "{starts:?}");
    assert!(fs.ctx.alloc.mb_stats().group_pa_hits >= 17, "{:?}", fs.ctx.alloc.mb_stats());
    fs.check_allocator().unwrap();
}

#[test]
fn a_stream_written_in_pieces_stays_contiguous_through_its_windows() {
    // Two files written in turn, one open all along: past mb_stream_req
    // the open one streams through windows; treated as a small file it
    // interleaves with the other in the locality group's preallocation.
    let write = |options: &str| {
        let mut fs = mounted(&format!("nodelalloc{options}"), 1 << 30);
        fs.create("/big", 0o644).unwrap();
        fs.create("/other", 0o644).unwrap();
        fs.open("/big", 0).unwrap();
        // 60 x 16 KiB: the last window (blocks 128..256) is not used up.
        for i in 0..60u64 {
            fs.pwrite(0, i * 16384, &[1; 16384]).unwrap();
            fs.write("/other", i * 4096, &[2; 4096]).unwrap();
        }
        let big = runs(&mut fs, "/big");
        let ino = fs.open_path("/big").unwrap();
        let window_while_open = !fs.ctx.alloc.inode_preallocations(ino).is_empty();
        fs.close(0).unwrap();
        let window_after_close = !fs.ctx.alloc.inode_preallocations(ino).is_empty();
        fs.check_allocator().unwrap();
        (big.len(), window_while_open, window_after_close, fs.ctx.alloc.mb_stats().inode_pa_hits)
    };
    let (extents, open, closed, hits) = write("");
    assert!(extents <= 8, "{extents} extents");
    assert!(open && !closed, "the window lives while the file is open, not past its last close");
    assert!(hits > 40, "{hits} of 60 writes served from windows");
    let (small_extents, _, _, _) = write(",mb_stream_req=100000");
    assert!(small_extents >= 32, "as a small file it interleaves: {small_extents} extents");
}

#[test]
fn the_stream_request_knob_decides_which_preallocation_serves() {
    // A 128 KiB file: a stream by default, a small file under mb_stream_req=64.
    let place = |options: &str| {
        let mut fs = mounted(options, 1 << 30);
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 0, &[3; 128 << 10]).unwrap();
        fs.sync().unwrap();
        let s = fs.ctx.alloc.mb_stats();
        (s.criterion_hits, s.goal_hits, s.pas_made)
    };
    assert_ne!(place(""), place("mb_stream_req=64"));
}

#[test]
fn preallocations_never_make_a_filesystem_full() {
    // 32 MiB, one group: small files leave a locality-group window behind;
    // a file that needs every free block still gets them.
    let mut fs = mounted("", 32 << 20);
    fs.create("/small", 0o644).unwrap();
    fs.write("/small", 0, &[1; 4096]).unwrap();
    fs.sync().unwrap();
    assert!(fs.ctx.alloc.preallocated_clusters() > 0);
    let (free, _) = fs.free_space();
    fs.create("/fill", 0o644).unwrap();
    fs.fallocate("/fill", ext4_model::FallocFlags::ALLOCATE, 0, free * 4096).unwrap();
    fs.sync().unwrap();
    assert!(fs.ctx.alloc.mb_stats().enospc_discards > 0, "{:?}", fs.ctx.alloc.mb_stats());
    assert_eq!(fs.ctx.alloc.preallocated_clusters(), 0);
    fs.check_allocator().unwrap();
    let dev = fs.unmount().unwrap();
    let (_, report) = crate::check::check(dev);
    assert!(report.is_clean(), "{report:?}");
}
