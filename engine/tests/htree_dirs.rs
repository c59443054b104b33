//! htree directories against e2fsprogs and the kernel:
//! - an index `e2fsck -fD` built is kept up to date by the engine's edits;
//! - the engine turns a directory that outgrows its block into an htree and
//!   grows it to a level of dx nodes; strict e2fsck accepts 100,000 names;
//! - the kernel finds every name in an engine-grown index (its lookups go
//!   through the hash), and the engine edits an index the kernel grew.
//!
//! The routing check reads the index with the engine's dx format only: every
//! index block's checksum verifies with the inode's seed, and every name's
//! hash (the root's hash version with the superblock's seed and signedness)
//! falls in the range of the leaf that holds it.

mod common;

use std::path::Path;

use common::*;
use ext4_engine::device_file::FileDevice;
use ext4_engine::format::inode::FL_INDEX;
use ext4_engine::image::Image;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_engine::Ext4;
use ext4_model::{FileSystem, MountConfig};
use ext4_testkit::loop_mount::{is_root, LoopMount};

const ENTRIES: usize = 700;

/// An image whose /big holds `entries` files, indexed by `e2fsck -fyD`.
fn indexed_image_of(mk: &Path, e2fsck: &Path, scratch: &Scratch, bs: u32, entries: usize) -> std::path::PathBuf {
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

/// An engine-made image of `bytes`.
fn engine_image(path: &Path, bs: u32, bytes: u64, inodes: Option<u64>) -> MountConfig {
    let config = MountConfig { block_size: bs, ..MountConfig::default() };
    let mut dev = FileDevice::create(path, bytes).unwrap();
    let mut o = MkfsOptions::for_mount(&config, bytes, *b"htree-directory!", [0x3c; 16], ext4_testkit::fresh::EPOCH_SECS);
    o.inode_count = inodes;
    mkfs(&mut dev, &o).unwrap();
    config
}

fn has_index(img: &Path, path: &str) -> bool {
    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    let ino = image.lookup(path).unwrap();
    image.read_inode(ino).unwrap().has_flag(FL_INDEX)
}

fn names(n: usize, prefix: &str) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:06}")).collect()
}

#[test]
fn an_htree_directory_keeps_its_index_across_edits() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("htree-dirs");
    for bs in [1024, 4096] {
        let img = indexed_image_of(&mk, &e2fsck, &scratch, bs, ENTRIES);
        assert!(has_index(&img, "/big"), "bs {bs}: e2fsck -D made an htree");
        let config = MountConfig { block_size: bs, ..MountConfig::default() };
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        assert_eq!(fs.readdir("/big").unwrap().len(), ENTRIES, "bs {bs}");
        assert_eq!(fs.read("/big/entry-with-a-name-0699", 0, 10).unwrap(), [(699 % 256) as u8]);
        // Edits: removals, renames, and enough new names to split leaves.
        fs.unlink("/big/entry-with-a-name-0007").unwrap();
        fs.rename("/big/entry-with-a-name-0100", "/big/renamed").unwrap();
        for n in names(600, "/big/added") {
            fs.create(&n, 0o644).unwrap();
        }
        drop(fs.unmount().unwrap());
        assert!(has_index(&img, "/big"), "bs {bs}: the index stays");
        assert_fsck_clean(&e2fsck, &img);
        assert_eq!(assert_index_routes(&img, "/big"), (ENTRIES - 1 + 600, 0), "bs {bs}");
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        let listed: Vec<String> = fs.readdir("/big").unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(listed.len(), ENTRIES - 1 + 600);
        assert!(listed.contains(&"added-000599".into()) && listed.contains(&"renamed".into()) && !listed.contains(&"entry-with-a-name-0007".into()));
        assert_eq!(fs.read("/big/renamed", 0, 10).unwrap(), [100]);
        drop(fs.unmount().unwrap());
    }
}

/// 100,000 names at 1 KiB blocks take a level of dx nodes; 5,000 at 4 KiB
/// stay under the root. Strict e2fsck, the engine's own check and debugfs
/// agree, and removals and re-adds keep the index whole.
#[test]
fn the_engine_grows_directories_into_htrees_e2fsck_accepts() {
    let Some((e2fsck, _, _)) = e2fsprogs() else { return };
    let debugfs = tool("debugfs").expect("debugfs next to e2fsck");
    let scratch = Scratch::new("htree-grow");
    for (bs, count, levels) in [(1024u32, 100_000usize, 1u8), (4096, 5000, 0)] {
        let img = scratch.path(&format!("grow{bs}.img"));
        let config = engine_image(&img, bs, 256 << 20, (bs == 1024).then_some(131_072));
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        fs.mkdir("/big", 0o755).unwrap();
        fs.mkdir("/small", 0o755).unwrap();
        fs.create("/small/only", 0o644).unwrap();
        let all = names(count, "/big/name");
        for n in &all {
            fs.create(n, 0o644).unwrap();
        }
        for n in all.iter().step_by(10) {
            fs.unlink(n).unwrap();
        }
        for n in names(count / 10, "/big/again") {
            fs.mkdir(&n, 0o755).unwrap();
        }
        drop(fs.unmount().unwrap());
        let (_, report) = ext4_engine::check::check(FileDevice::open(&img, false).unwrap());
        assert!(report.is_clean(), "bs {bs}: the engine's own check: {report}");
        let expected = count - count.div_ceil(10) + count / 10;
        assert!(has_index(&img, "/big") && !has_index(&img, "/small"), "bs {bs}: only the directory that outgrew its block is indexed");
        let fsck = assert_fsck_clean(&e2fsck, &img);
        println!("bs {bs}, {expected} names: {fsck}");
        assert_eq!(assert_index_routes(&img, "/big"), (expected, levels), "bs {bs}");
        let out = run(&debugfs, &["-R", "htree_dump /big", img.to_str().unwrap()]);
        assert!(out.status.success() && !combined(&out).contains("rror"), "debugfs htree_dump: {}", combined(&out));
        let out = run(&debugfs, &["-R", "stat /big/again-000009", img.to_str().unwrap()]);
        assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("Type: directory"), "debugfs finds a name: {}", combined(&out));
        if levels == 0 {
            misroute_and_expect_complaints(&e2fsck, &img);
        }
    }
}

/// Both checks must see an index that sends hashes to the wrong leaves:
/// the root's second and third entries swap leaves (checksum resealed).
fn misroute_and_expect_complaints(e2fsck: &Path, img: &Path) {
    use ext4_engine::format::checksum::inode_seed;
    use ext4_engine::format::dx;
    use std::os::unix::fs::FileExt;

    let (root_at, seed, bs) = {
        let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
        let sb = image.superblock().clone();
        let ino = image.lookup("/big").unwrap();
        let inode = image.read_inode(ino).unwrap();
        let first = image.extents(ino, &inode).unwrap()[0].physical;
        (first * u64::from(sb.block_size()), inode_seed(sb.csum_seed(), ino, inode.generation), sb.block_size() as usize)
    };
    let file = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let mut b = vec![0u8; bs];
    file.read_exact_at(&mut b, root_at).unwrap();
    let mut root = dx::parse_root(&b, true).unwrap();
    assert!(root.entries.len() > 2);
    let (one, two) = (root.entries[1].block, root.entries[2].block);
    root.entries[1].block = two;
    root.entries[2].block = one;
    file.write_all_at(&dx::write_root(&root, bs, Some(seed)).unwrap(), root_at).unwrap();
    drop(file);
    let (_, report) = ext4_engine::check::check(FileDevice::open(img, false).unwrap());
    assert!(report.has(|p| p.to_string().contains("outside its leaf")), "the engine's check misses a misrouted index: {report}");
    let out = run(e2fsck, &["-fn", img.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(0), "e2fsck accepts a misrouted index: {}", combined(&out));
    // Names the hash no longer leads to are names ext4 cannot find: the
    // engine refuses the directory rather than serve or duplicate them.
    let config = MountConfig { block_size: bs as u32, ..MountConfig::default() };
    let mut fs = Ext4::mount(FileDevice::open(img, false).unwrap(), &config).unwrap();
    assert!(fs.readdir("/big").is_err(), "a misrouted index loads");
}

/// `mke2fs -d` writes large directories linear; ext4 indexes a directory
/// only when it outgrows its first block, so new names keep such a one
/// linear, in the engine as in the kernel.
#[test]
fn a_linear_directory_of_many_blocks_stays_linear() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("htree-linear");
    let src = scratch.path("src");
    std::fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..ENTRIES {
        std::fs::write(src.join(format!("big/entry-with-a-name-{i:04}")), [i as u8]).unwrap();
    }
    let img = scratch.path("linear.img");
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let out = run(&mk, &["-t", "ext4", "-F", "-q", "-b", "1024", "-d", src.to_str().unwrap(), img.to_str().unwrap()]);
    assert!(out.status.success(), "mke2fs: {}", combined(&out));
    assert!(!has_index(&img, "/big"), "mke2fs -d leaves directories linear");
    let config = MountConfig { block_size: 1024, ..MountConfig::default() };
    let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
    for n in names(400, "/big/added") {
        fs.create(&n, 0o644).unwrap();
    }
    fs.unlink("/big/entry-with-a-name-0003").unwrap();
    drop(fs.unmount().unwrap());
    assert!(!has_index(&img, "/big"), "a linear directory of many blocks stays linear");
    assert_fsck_clean(&e2fsck, &img);
    let mut fs = Ext4::mount(FileDevice::open(&img, false).unwrap(), &config).unwrap();
    assert_eq!(fs.readdir("/big").unwrap().len(), ENTRIES + 400 - 1);
}

/// The kernel's lookups go through the hash: it finds every name of an
/// engine-grown index, and adds names to it; the engine then edits a
/// directory the kernel indexed. Needs root; skipped without it.
#[test]
fn kernel_and_engine_edit_each_others_indexes() {
    let Some((e2fsck, _, _)) = e2fsprogs() else { return };
    if !is_root() {
        println!("SKIPPED: loop-mounting needs root");
        return;
    }
    let scratch = Scratch::new("htree-kernel");
    let mnt = scratch.path("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    for bs in [1024u32, 4096] {
        let img = scratch.path(&format!("k{bs}.img"));
        let config = engine_image(&img, bs, 128 << 20, None);
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        fs.mkdir("/engine", 0o755).unwrap();
        fs.mkdir("/kernel", 0o755).unwrap();
        let engine_names = names(6000, "/engine/e");
        for n in &engine_names {
            fs.create(n, 0o644).unwrap();
        }
        drop(fs.unmount().unwrap());
        assert_fsck_clean(&e2fsck, &img);
        {
            let guard = match LoopMount::mount(&img, &mnt, "") {
                Ok(g) => g,
                Err(why) => {
                    println!("SKIPPED: {why}");
                    return;
                }
            };
            for n in &engine_names {
                let p = mnt.join(n.trim_start_matches('/'));
                assert!(std::fs::symlink_metadata(&p).is_ok(), "bs {bs}: the kernel's hashed lookup misses {n}");
            }
            for n in names(3000, "engine/k") {
                std::fs::write(mnt.join(n), b"").unwrap();
            }
            for n in names(6000, "kernel/k") {
                std::fs::write(mnt.join(n), b"").unwrap();
            }
            assert_eq!(std::fs::read_dir(mnt.join("engine")).unwrap().count(), 9000);
            drop(guard);
        }
        assert_fsck_clean(&e2fsck, &img);
        assert!(has_index(&img, "/kernel"), "bs {bs}: the kernel indexed its directory");
        let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
        for n in names(6000, "/kernel/k").iter().step_by(3) {
            fs.unlink(n).unwrap();
        }
        for n in names(4000, "/kernel/e") {
            fs.create(&n, 0o644).unwrap();
        }
        assert_eq!(fs.readdir("/engine").unwrap().len(), 9000);
        drop(fs.unmount().unwrap());
        assert_fsck_clean(&e2fsck, &img);
        assert_eq!(assert_index_routes(&img, "/kernel").0, 8000, "bs {bs}");
        assert_eq!(assert_index_routes(&img, "/engine").0, 9000, "bs {bs}");
        let guard = LoopMount::mount(&img, &mnt, "").unwrap();
        for n in names(4000, "kernel/e").into_iter().chain(names(6000, "kernel/k").into_iter().skip(1).step_by(3)) {
            assert!(std::fs::symlink_metadata(mnt.join(&n)).is_ok(), "bs {bs}: the kernel misses {n} after the engine's edits");
        }
        assert!(std::fs::symlink_metadata(mnt.join("kernel/k-000000")).is_err(), "bs {bs}: an unlinked name is gone");
        drop(guard);
    }
}

#[test]
fn e2fsck_built_indexes_verify_and_route_every_name_to_its_leaf() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let scratch = Scratch::new("htree-format");
    // 5,000 names at 1 KiB blocks need a level of dx nodes.
    for (bs, entries, levels) in [(1024u32, ENTRIES, 0), (4096, ENTRIES, 0), (1024, 5000, 1)] {
        let img = indexed_image_of(&mk, &e2fsck, &scratch, bs, entries);
        assert_eq!(assert_index_routes(&img, "/big"), (entries, levels), "bs {bs}");
    }
}

/// Checks `dir`'s index (see the module): returns its names and levels.
fn assert_index_routes(img: &Path, dir: &str) -> (usize, u8) {
    use ext4_engine::dir::hash::{name_hash, DxHash};
    use ext4_engine::format::checksum::inode_seed;
    use ext4_engine::format::dirent::parse_block;
    use ext4_engine::format::dx::{self, DxEntry};

    let mut image = Image::open(FileDevice::open(img, false).unwrap()).unwrap();
    let sb = image.superblock().clone();
    let csum = sb.has_metadata_csum();
    let ino = image.lookup(dir).unwrap();
    let inode = image.read_inode(ino).unwrap();
    assert!(inode.has_flag(FL_INDEX), "{dir} is indexed");
    let seed = inode_seed(sb.csum_seed(), ino, inode.generation);
    let extents = image.extents(ino, &inode).unwrap();
    let mut block = |l: u32| {
        let x = extents.iter().find(|x| x.logical <= l && l < x.logical + x.len).expect("a mapped directory block");
        image.read_blocks(x.physical + u64::from(l - x.logical), 1).unwrap()
    };
    let b = block(0);
    let root = dx::parse_root(&b, csum).unwrap();
    if csum {
        assert_eq!(dx::stored_checksum(&b, dx::ROOT_COUNT_AT), dx::checksum(&b, dx::ROOT_COUNT_AT, seed), "{dir}: root checksum");
    }
    assert_eq!(root.dot, ino);
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
        assert_eq!(root.indirect_levels, 1, "{dir}: no large_dir here");
        for (i, e) in root.entries.iter().enumerate() {
            let n = block(e.block);
            if csum {
                assert_eq!(dx::stored_checksum(&n, dx::NODE_COUNT_AT), dx::checksum(&n, dx::NODE_COUNT_AT, seed), "{dir}: node checksum");
            }
            let upper = root.entries.get(i + 1).map(|n| n.hash);
            add(&dx::parse_node(&n, csum).unwrap(), upper, &mut leaves);
        }
    }
    let mut names = 0;
    for (lo, hi, leaf) in leaves {
        for e in parse_block(&block(leaf), csum).unwrap().entries {
            let h = name_hash(how, &e.name, &sb.hash_seed).major;
            // A hash equal to the next range's start sits here only if that range continues it.
            let below_next = hi.is_none_or(|hi| h < hi & !dx::HASH_CONTINUED || (h == hi & !dx::HASH_CONTINUED && hi & dx::HASH_CONTINUED != 0));
            assert!(h >= lo && below_next, "{dir}: {:?} hashes to {h:#x}, outside its leaf's {lo:#x}..{hi:?}", String::from_utf8_lossy(&e.name));
            names += 1;
        }
    }
    (names, root.indirect_levels)
}

/// The index follows the superblock: its default hash (legacy, half MD4 or
/// TEA, `tune2fs -E hash_alg=`) and its signedness flag, which decides how
/// name bytes above 0x7f hash. e2fsck recomputes every name's hash.
#[test]
fn indexes_use_the_superblocks_hash_and_signedness() {
    let Some((e2fsck, _, mk)) = e2fsprogs() else { return };
    let debugfs = tool("debugfs").expect("debugfs next to e2fsck");
    let tune2fs = tool("tune2fs").expect("tune2fs next to e2fsck");
    let scratch = Scratch::new("htree-hashes");
    for (alg, version) in [("legacy", 0u8), ("half_md4", 1), ("tea", 2)] {
        for unsigned in [false, true] {
            let img = scratch.path(&format!("{alg}-{unsigned}.img"));
            std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
            let out = run(&mk, &["-t", "ext4", "-F", "-q", "-b", "1024", img.to_str().unwrap()]);
            assert!(out.status.success(), "mke2fs: {}", combined(&out));
            let out = run(&tune2fs, &["-E", &format!("hash_alg={alg}"), img.to_str().unwrap()]);
            assert!(out.status.success(), "tune2fs: {}", combined(&out));
            if unsigned {
                let out = run(&debugfs, &["-w", "-R", "set_super_value flags 2", img.to_str().unwrap()]);
                assert!(out.status.success(), "debugfs ssv: {}", combined(&out));
            }
            let config = MountConfig { block_size: 1024, ..MountConfig::default() };
            let mut fs = Ext4::mount(FileDevice::open(&img, true).unwrap(), &config).unwrap();
            fs.mkdir("/d", 0o755).unwrap();
            // Names with bytes above 0x7f hash differently signed and unsigned.
            let all: Vec<String> = (0..1500).map(|i| if i % 2 == 0 { format!("/d/caf\u{e9}-{i}") } else { format!("/d/\u{fc}ber-{i}") }).collect();
            for n in &all {
                fs.create(n, 0o644).unwrap();
            }
            drop(fs.unmount().unwrap());
            assert_fsck_clean(&e2fsck, &img);
            let image = Image::open(FileDevice::open(&img, false).unwrap()).unwrap();
            assert_eq!(image.superblock().def_hash_version, version);
            drop(image);
            assert_eq!(assert_index_routes(&img, "/d").0, all.len(), "{alg}, unsigned {unsigned}");
        }
    }
}
