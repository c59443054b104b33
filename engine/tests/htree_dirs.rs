//! Directories ext4 indexed (htree): the engine lists and looks names up
//! through the leaves, and its first edit drops the index, leaving a linear
//! directory e2fsck finds clean. The htree comes from `e2fsck -fD`, which
//! indexes every directory of more than one block, as the kernel does.

mod common;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::format::inode::FL_INDEX;
use ext4_engine::image::Image;
use ext4_engine::Ext4;
use ext4_model::{FileSystem, MountConfig};

const ENTRIES: usize = 700;

fn indexed_image(mk: &std::path::Path, e2fsck: &std::path::Path, scratch: &Scratch, bs: u32) -> std::path::PathBuf {
    indexed_image_of(mk, e2fsck, scratch, bs, ENTRIES)
}

/// An image whose /big holds `entries` files, indexed by `e2fsck -fyD`.
fn indexed_image_of(mk: &std::path::Path, e2fsck: &std::path::Path, scratch: &Scratch, bs: u32, entries: usize) -> std::path::PathBuf {
    let src = scratch.path(&format!("src{bs}-{entries}"));
    std::fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..entries {
        std::fs::write(src.join(format!("big/entry-with-a-name-{i:04}")), [i as u8]).unwrap();
    }
    let img = scratch.path(&format!("htree{bs}-{entries}.img"));
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let b = bs.to_string();
    let out = run(mk, &["-t", "ext4", "-F", "-q", "-b", &b, "-d", src.to_str().unwrap(), img.to_str().unwrap()]);
    assert!(out.status.success(), "mke2fs: {}", combined(&out));
    // -D rebuilds directories as htrees; exit 1 means "changed", not failure.
    let out = run(e2fsck, &["-fyD", img.to_str().unwrap()]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "e2fsck -fyD: {}", combined(&out));
    img
}

fn has_index(img: &std::path::Path, path: &str) -> bool {
    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    let ino = image.lookup(path).unwrap();
    image.read_inode(ino).unwrap().has_flag(FL_INDEX)
}

#[test]
fn an_htree_directory_is_read_through_its_leaves_and_linear_after_an_edit() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("htree-dirs");
    for bs in [1024, 4096] {
        let img = indexed_image(&mk, &e2fsck, &scratch, bs);
        assert!(has_index(&img, "/big"), "bs {bs}: e2fsck -D made an htree");
        let config = MountConfig { block_size: bs, ..MountConfig::default() };
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        let names = fs.readdir("/big").unwrap();
        assert_eq!(names.len(), ENTRIES, "bs {bs}");
        assert_eq!(fs.read("/big/entry-with-a-name-0699", 0, 10).unwrap(), [(699 % 256) as u8]);
        // Reading leaves the index in place.
        drop(fs.unmount().unwrap());
        assert!(has_index(&img, "/big"));
        assert_fsck_clean(&e2fsck, &img);

        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        fs.unlink("/big/entry-with-a-name-0007").unwrap();
        fs.create("/big/new", 0o644).unwrap();
        fs.rename("/big/entry-with-a-name-0100", "/big/renamed").unwrap();
        drop(fs.unmount().unwrap());
        assert!(!has_index(&img, "/big"), "bs {bs}: the first edit dropped the index");
        assert_fsck_clean(&e2fsck, &img);
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        let names: Vec<String> = fs.readdir("/big").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names.len(), ENTRIES);
        assert!(names.contains(&"new".into()) && names.contains(&"renamed".into()) && !names.contains(&"entry-with-a-name-0007".into()));
        assert_eq!(fs.read("/big/renamed", 0, 10).unwrap(), [100]);
        drop(fs.unmount().unwrap());
    }
}

/// e2fsck's index read by the engine's dx format: every index block's
/// checksum verifies with the inode's seed, and every name's hash (the
/// root's hash version with the superblock's seed and signedness) routes
/// to the leaf that holds it.
#[test]
fn e2fsck_built_indexes_verify_and_route_every_name_to_its_leaf() {
    use ext4_engine::dir::hash::{name_hash, DxHash};
    use ext4_engine::format::checksum::inode_seed;
    use ext4_engine::format::dirent::parse_block;
    use ext4_engine::format::dx::{self, DxEntry};

    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("htree-format");
    // 5,000 names at 1 KiB blocks need a level of dx nodes.
    for (bs, entries, levels) in [(1024u32, ENTRIES, 0), (4096, ENTRIES, 0), (1024, 5000, 1)] {
        let img = indexed_image_of(&mk, &e2fsck, &scratch, bs, entries);
        let mut image = Image::open(FileDevice::open(&img, false).unwrap()).unwrap();
        let sb = image.superblock().clone();
        let ino = image.lookup("/big").unwrap();
        let inode = image.read_inode(ino).unwrap();
        let seed = inode_seed(sb.csum_seed(), ino, inode.generation);
        let extents = image.extents(ino, &inode).unwrap();
        let mut block = |l: u32| {
            let x = extents.iter().find(|x| x.logical <= l && l < x.logical + x.len).expect("a mapped directory block");
            image.read_blocks(x.physical + u64::from(l - x.logical), 1).unwrap()
        };
        let b = block(0);
        let root = dx::parse_root(&b, true).unwrap();
        assert_eq!(dx::stored_checksum(&b, dx::ROOT_COUNT_AT), dx::checksum(&b, dx::ROOT_COUNT_AT, seed), "bs {bs}: root checksum");
        assert_eq!(root.dot, ino);
        assert_eq!(root.indirect_levels, levels, "bs {bs}, {entries} names");
        let unsigned = sb.flags & 2 != 0;
        let how = DxHash::from_version(root.hash_version + if unsigned { 3 } else { 0 }).unwrap();
        // (range of hashes, leaf) for every leaf, through one level of nodes if there is one.
        let mut leaves: Vec<(u32, Option<u32>, u32)> = Vec::new();
        let add = |entries: &[DxEntry], upper: Option<u32>, out: &mut Vec<(u32, Option<u32>, u32)>| {
            for (i, e) in entries.iter().enumerate() {
                out.push((e.hash & !dx::HASH_CONTINUED, entries.get(i + 1).map(|n| n.hash).or(upper), e.block));
            }
        };
        if root.indirect_levels == 0 {
            add(&root.entries, None, &mut leaves);
        } else {
            for (i, e) in root.entries.iter().enumerate() {
                let n = block(e.block);
                assert_eq!(dx::stored_checksum(&n, dx::NODE_COUNT_AT), dx::checksum(&n, dx::NODE_COUNT_AT, seed), "bs {bs}: node checksum");
                let upper = root.entries.get(i + 1).map(|n| n.hash);
                add(&dx::parse_node(&n, true).unwrap(), upper, &mut leaves);
            }
        }
        let mut names = 0;
        for (lo, hi, leaf) in leaves {
            for e in parse_block(&block(leaf), true).unwrap().entries {
                let h = name_hash(how, &e.name, &sb.hash_seed).major;
                // A hash equal to the next range's start sits here only if that range continues it.
                let below_next = hi.is_none_or(|hi| h < hi & !dx::HASH_CONTINUED || (h == hi & !dx::HASH_CONTINUED && hi & dx::HASH_CONTINUED != 0));
                assert!(h >= lo && below_next, "bs {bs}: {:?} hashes to {h:#x}, outside its leaf's {lo:#x}..{hi:?}", String::from_utf8_lossy(&e.name));
                names += 1;
            }
        }
        assert_eq!(names, entries, "bs {bs}: every name is in a leaf the index reaches");
    }
}
