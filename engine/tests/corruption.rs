//! Corrupt images give typed errors that name what is wrong, and never panic:
//! targeted corruptions check the error, byte-flip sweeps (with checksums
//! re-sealed so field validation is reached) check that nothing panics. One
//! test also proves the e2fsck cleanliness check is not vacuous.

mod common;

use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};
use ext4_engine::device_file::FileDevice;
use ext4_engine::device_mem::MemDevice;
use ext4_engine::error::{ChecksumObject, Corrupt, Error, Unsupported};
use ext4_engine::format::checksum::{fs_seed_from_uuid, inode_seed};
use ext4_engine::format::dirent;
use ext4_engine::format::group_desc::{desc_checksum, DescChecksum, GroupDesc, BG_CHECKSUM};
use ext4_engine::format::inode::inode_checksum;
use ext4_engine::format::superblock::{superblock_checksum, S_CHECKSUM};
use ext4_engine::image::Image;
use ext4_engine::mkfs::{mkfs, MkfsOptions};

const UUID: [u8; 16] = *b"corrupt-me-pls!!";

fn fresh(size: u64, block_size: u32) -> MemDevice {
    let mut dev = MemDevice::new(size);
    let opts = MkfsOptions { block_size, ..MkfsOptions::new(size, UUID, [2; 16], ext4_testkit::fresh::EPOCH_SECS) };
    mkfs(&mut dev, &opts).unwrap();
    dev
}

/// The sector-aligned window around `at..at + len`, as (start, length).
fn window(at: u64, len: usize) -> (u64, usize) {
    let start = at - at % 512;
    let end = (at + len as u64).div_ceil(512) * 512;
    (start, (end - start) as usize)
}

/// Reads any byte range (devices only move whole sectors).
fn read(dev: &mut MemDevice, at: u64, len: usize) -> Vec<u8> {
    let (start, wlen) = window(at, len);
    let mut b = vec![0u8; wlen];
    dev.read(start, &mut b, IoClass::Metadata).unwrap();
    let skip = (at - start) as usize;
    b[skip..skip + len].to_vec()
}

/// Writes any byte range by read-modify-write of the sectors around it.
fn write(dev: &mut MemDevice, at: u64, data: &[u8]) {
    let (start, wlen) = window(at, data.len());
    let mut b = vec![0u8; wlen];
    dev.read(start, &mut b, IoClass::Metadata).unwrap();
    let skip = (at - start) as usize;
    b[skip..skip + data.len()].copy_from_slice(data);
    dev.write(start, &b, WriteFlags::METADATA).unwrap();
}

/// Applies `f` to the superblock bytes and re-seals its checksum.
fn patch_sb(dev: &mut MemDevice, f: impl FnOnce(&mut [u8; 1024])) {
    let mut sb: [u8; 1024] = read(dev, 1024, 1024).try_into().unwrap();
    f(&mut sb);
    let c = superblock_checksum(&sb);
    sb[S_CHECKSUM..].copy_from_slice(&c.to_le_bytes());
    write(dev, 1024, &sb);
}

fn open_err(dev: MemDevice) -> Error {
    Image::open(dev).expect_err("corrupt image must not open")
}

#[test]
fn bad_superblock_fields_are_named() {
    let mut dev = fresh(64 << 20, 4096);
    patch_sb(&mut dev, |sb| sb[0x18..0x1C].copy_from_slice(&17u32.to_le_bytes()));
    assert_eq!(open_err(dev), Error::Corrupt(Corrupt::Superblock("s_log_block_size 17 > 6".into())));

    let mut dev = fresh(64 << 20, 4096);
    patch_sb(&mut dev, |sb| sb[0x00..0x04].copy_from_slice(&12345u32.to_le_bytes()));
    let Error::Corrupt(Corrupt::Superblock(what)) = open_err(dev) else { panic!("inode count mismatch") };
    assert!(what.starts_with("s_inodes_count 12345"), "{what}");

    let mut dev = fresh(64 << 20, 4096);
    patch_sb(&mut dev, |sb| sb[0x60] |= 0x10); // meta_bg
    assert!(matches!(open_err(dev), Error::Unsupported(Unsupported::Features { bits: 0x10, .. })));
}

#[test]
fn superblock_checksum_mismatch_reports_stored_and_computed() {
    let mut dev = fresh(64 << 20, 4096);
    let mut sb = read(&mut dev, 1024, 1024);
    let stored = u32::from_le_bytes(sb[S_CHECKSUM..].try_into().unwrap());
    sb[0x10] ^= 0x40; // free inodes count
    write(&mut dev, 1024, &sb);
    match open_err(dev) {
        Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::Superblock, stored: s, computed }) => {
            assert_eq!(s, stored);
            assert_ne!(computed, stored);
        }
        other => panic!("expected a superblock checksum error, got {other}"),
    }
}

#[test]
fn a_device_shorter_than_the_filesystem_is_refused() {
    let mut dev = fresh(64 << 20, 4096);
    let head = read(&mut dev, 0, 1 << 20);
    let mut short = MemDevice::new(32 << 20);
    write(&mut short, 0, &head);
    let Error::Corrupt(Corrupt::Superblock(what)) = open_err(short) else { panic!("short device") };
    assert!(what.contains("exceeds the device"), "{what}");
}

#[test]
fn group_descriptor_checksum_and_fields() {
    // 1 KiB blocks: the GDT is block 2, 32-byte descriptors.
    let mut dev = fresh(64 << 20, 1024);
    let gdt = 2048u64;
    let mut d1 = read(&mut dev, gdt, 1024);
    d1[32 + 0x0C] ^= 1; // group 1 free blocks
    write(&mut dev, gdt, &d1);
    assert!(matches!(
        open_err(dev),
        Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::GroupDescriptor { group: 1 }, .. })
    ));

    let mut dev = fresh(64 << 20, 1024);
    let mut block = read(&mut dev, gdt, 1024);
    let mut d = GroupDesc::parse(&block[..32]);
    d.inode_table = 1 << 30;
    d.write(&mut block[..32], 0, DescChecksum::Crc32c { fs_seed: fs_seed_from_uuid(&UUID) });
    write(&mut dev, gdt, &block);
    match open_err(dev) {
        Error::Corrupt(Corrupt::GroupDescriptor { group: 0, what }) => assert!(what.starts_with("inode table at block 1073741824"), "{what}"),
        other => panic!("expected a descriptor error, got {other}"),
    }
}

#[test]
fn inode_dir_and_bitmap_checksums_are_checked_on_read() {
    let dev = fresh(64 << 20, 4096);
    let mut image = Image::open(dev).unwrap();
    let itable = image.group_descs()[0].inode_table;
    let root_dir_block = {
        let root = image.read_inode(2).unwrap();
        image.extents(2, &root).unwrap()[0].physical
    };
    let bb = image.group_descs()[0].block_bitmap;
    let mut dev = image.into_device();
    let mut slot = read(&mut dev, itable * 4096 + 256, 256);
    slot[0x1A] ^= 1; // links count of inode 2
    write(&mut dev, itable * 4096 + 256, &slot);
    let mut dirblk = read(&mut dev, root_dir_block * 4096, 4096);
    dirblk[8] ^= 1; // the name "."
    write(&mut dev, root_dir_block * 4096, &dirblk);
    let mut bitmap = read(&mut dev, bb * 4096, 4096);
    bitmap[100] ^= 0x80;
    write(&mut dev, bb * 4096, &bitmap);

    let mut image = Image::open(dev).unwrap();
    assert!(matches!(image.read_inode(2), Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::Inode { ino: 2 }, .. }))));
    assert!(image.read_dir(11).is_ok(), "other inodes are unaffected");
    assert!(matches!(
        image.read_block_bitmap(0),
        Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::BlockBitmap { group: 0 }, .. }))
    ));
    // Heal the inode, leave the directory block corrupt.
    let mut dev = image.into_device();
    slot[0x1A] ^= 1;
    write(&mut dev, itable * 4096 + 256, &slot);
    let mut image = Image::open(dev).unwrap();
    assert!(matches!(
        image.read_dir(2),
        Err(Error::Corrupt(Corrupt::Checksum { object: ChecksumObject::DirBlock { ino: 2, block: 0 }, .. }))
    ));
    assert!(matches!(image.read_inode(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(image.read_inode(u32::MAX), Err(Error::InvalidArgument(_))));
}

/// Exercises every read path an image offers; errors are fine, panics are not.
fn poke(dev: MemDevice) {
    let Ok(mut image) = Image::open(dev) else { return };
    for ino in [2, 8, 11] {
        if let Ok(inode) = image.read_inode(ino) {
            let _ = image.extents(ino, &inode);
        }
    }
    let _ = image.read_dir(2);
    let _ = image.read_dir(11);
    let _ = image.read_file(8, 1 << 30);
    let _ = image.journal_superblock();
    let _ = image.lookup("/lost+found/x");
    for g in 0..image.geometry().group_count.min(4) {
        let _ = image.read_block_bitmap(g);
        let _ = image.read_inode_bitmap(g);
    }
}

#[test]
fn byte_flips_with_resealed_checksums_never_panic() {
    let base = fresh(8 << 20, 1024);
    let fs_seed = fs_seed_from_uuid(&UUID);
    let bs = 1024u64;
    let (itable, root_blk) = {
        let mut image = Image::open(base.clone()).unwrap();
        let root = image.read_inode(2).unwrap();
        (image.group_descs()[0].inode_table, image.extents(2, &root).unwrap()[0].physical)
    };
    // Superblock fields (checksum re-sealed so validation, not the crc, decides).
    for off in (0..0x3FC).step_by(3) {
        for bit in [0x01u8, 0x80] {
            let mut dev = base.clone();
            patch_sb(&mut dev, |sb| sb[off] ^= bit);
            poke(dev);
        }
    }
    // Group descriptor 0 fields.
    for off in (0..32).filter(|&o| o != BG_CHECKSUM && o != BG_CHECKSUM + 1) {
        for bit in [0x01u8, 0x10, 0x80] {
            let mut dev = base.clone();
            let mut gdt = read(&mut dev, 2 * bs, 1024);
            gdt[off] ^= bit;
            let c = desc_checksum(&gdt[..32], 0, DescChecksum::Crc32c { fs_seed });
            gdt[BG_CHECKSUM..BG_CHECKSUM + 2].copy_from_slice(&c.to_le_bytes());
            write(&mut dev, 2 * bs, &gdt);
            poke(dev);
        }
    }
    // Root and journal inode fields, extent headers included.
    for (ino, at) in [(2u32, itable * bs + 256), (8, itable * bs + 7 * 256)] {
        for off in (0..160).filter(|o| !(0x7C..0x7E).contains(o) && !(0x82..0x84).contains(o)) {
            for bit in [0x01u8, 0x40] {
                let mut dev = base.clone();
                let mut slot = read(&mut dev, at, 256);
                slot[off] ^= bit;
                let c = inode_checksum(&slot, ino, fs_seed);
                slot[0x7C..0x7E].copy_from_slice(&(c as u16).to_le_bytes());
                slot[0x82..0x84].copy_from_slice(&((c >> 16) as u16).to_le_bytes());
                write(&mut dev, at, &slot);
                poke(dev);
            }
        }
    }
    // Root directory block entries.
    for off in 0..48 {
        let mut dev = base.clone();
        let mut blk = read(&mut dev, root_blk * bs, 1024);
        blk[off] ^= 0x04;
        let c = dirent::block_checksum(&blk, inode_seed(fs_seed, 2, 0));
        blk[1020..].copy_from_slice(&c.to_le_bytes());
        write(&mut dev, root_blk * bs, &blk);
        poke(dev);
    }
}

#[test]
fn the_e2fsck_cleanliness_check_catches_a_bad_descriptor() {
    let Some((e2fsck, _, _)) = common::e2fsprogs() else { return };
    let scratch = common::Scratch::new("corrupt-fsck");
    let img = scratch.path("bad.img");
    let size = 64u64 << 20;
    let mut dev = FileDevice::create(&img, size).unwrap();
    mkfs(&mut dev, &MkfsOptions::new(size, UUID, [2; 16], ext4_testkit::fresh::EPOCH_SECS)).unwrap();
    // Group 0's free-inode count, checksum left stale.
    let mut gdt = vec![0u8; 4096];
    dev.read(4096, &mut gdt, IoClass::Metadata).unwrap();
    gdt[0x0E] ^= 1;
    dev.write(4096, &gdt, WriteFlags::METADATA).unwrap();
    drop(dev);
    let out = common::run(&e2fsck, &["-fn", img.to_str().unwrap()]);
    let text = common::combined(&out);
    let stray = text.lines().filter(|l| !common::is_clean_fsck_line(l, img.to_str().unwrap())).count();
    assert!(stray > 0, "e2fsck should have complained:\n{text}");
}

/// A directory entry naming an inode in its group's unused inode-table tail
/// (bg_itable_unused made too large): the image reader and the mounted
/// engine report the same corruption, and neither drops the name silently.
#[test]
fn an_entry_naming_an_inode_past_itable_unused_is_the_same_error_everywhere() {
    use ext4_engine::format::group_desc::BG_ITABLE_UNUSED_LO;
    use ext4_model::FileSystem;
    let config = ext4_model::MountConfig { block_size: 1024, ..Default::default() };
    let mut fs = ext4_engine::Ext4::mount(fresh(8 << 20, 1024), &config).unwrap();
    fs.create("/f", 0o644).unwrap();
    let mut dev = fs.unmount().unwrap();
    let (ino, ipg) = {
        let mut image = Image::open(dev.clone()).unwrap();
        (image.lookup("/f").unwrap(), image.geometry().inodes_per_group)
    };
    // Only the inodes before /f's count as initialised.
    let unused = u16::try_from(ipg - (ino - 1)).unwrap();
    let mut gdt = read(&mut dev, 2 * 1024, 1024);
    gdt[BG_ITABLE_UNUSED_LO..BG_ITABLE_UNUSED_LO + 2].copy_from_slice(&unused.to_le_bytes());
    let c = desc_checksum(&gdt[..32], 0, DescChecksum::Crc32c { fs_seed: fs_seed_from_uuid(&UUID) });
    gdt[BG_CHECKSUM..BG_CHECKSUM + 2].copy_from_slice(&c.to_le_bytes());
    write(&mut dev, 2 * 1024, &gdt);

    let want = Corrupt::entry_names_free_inode(ino);
    let mut image = Image::open(dev.clone()).unwrap();
    assert_eq!(image.lookup("/f").unwrap_err(), want);
    let layout = ext4_engine::layout::LayoutReport::read(&mut image);
    assert_eq!(layout.unwrap_err(), want, "the layout walk does not skip the name");
    let mut fs = ext4_engine::Ext4::mount(dev, &config).unwrap();
    assert_eq!(fs.stat("/f"), Err(ext4_model::Errno::EIO));
    assert_eq!(ext4_engine::fs::take_last_error(), Some(want));
}
