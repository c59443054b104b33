//! `engine::check` reports real corruptions with the matching problem: each
//! case corrupts a copy of a populated `mke2fs -d` image (with `debugfs -w`
//! or by flipping bytes), requires `e2fsck -fn` to complain about it (so the
//! corruption is real), and then requires the engine's checker to report the
//! right kind of [`Problem`] about the right structure. A seeded sweep of
//! byte flips over metadata blocks proves the checker never panics.

mod common;

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use ext4_engine::check::{check, CheckReport, Owner, Problem};
use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};
use ext4_engine::device_file::FileDevice;
use ext4_engine::device_mem::MemDevice;
use ext4_engine::format::checksum::inode_seed;
use ext4_engine::format::dirent;
use ext4_engine::format::extent::{parse_node, ExtentNode};
use ext4_engine::image::Image;

const MIB: u64 = 1 << 20;

struct Fixture {
    scratch: Scratch,
    img: PathBuf,
    e2fsck: PathBuf,
    debugfs: PathBuf,
}

fn fixture(tag: &str) -> Option<Fixture> {
    let (e2fsck, _, mk) = e2fsprogs()?;
    let Some(debugfs) = tool("debugfs") else {
        println!("SKIPPED: debugfs not installed");
        return None;
    };
    let scratch = Scratch::new(&format!("check-detects-{tag}"));
    let src = scratch.path("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("small"), b"hello\n").unwrap();
    std::fs::write(src.join("three-blocks"), vec![7u8; 3 * 1024 + 5]).unwrap();
    std::fs::write(src.join("sub/inner"), b"inner file").unwrap();
    std::fs::write(src.join("sub/other"), b"other file").unwrap();
    std::fs::hard_link(src.join("small"), src.join("sub/small-link")).unwrap();
    std::os::unix::fs::symlink("small", src.join("fast-link")).unwrap();
    std::os::unix::fs::symlink("y".repeat(100), src.join("slow-link")).unwrap();
    let f = std::fs::File::create(src.join("sparse")).unwrap();
    for i in 0..12u64 {
        f.write_all_at(b"island", i * 64 * 1024).unwrap();
    }
    let img = scratch.path("base.img");
    std::fs::File::create(&img).unwrap().set_len(64 * MIB).unwrap();
    let out = Command::new(&mk)
        .args(["-t", "ext4", "-F", "-q", "-b", "1024", "-d", src.to_str().unwrap(), img.to_str().unwrap()])
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", combined(&out));
    assert_fsck_clean(&e2fsck, &img);
    let (_, r) = check(FileDevice::open(&img, false).unwrap());
    assert!(r.problems.is_empty(), "the base image must be clean:\n{r}");
    Some(Fixture { scratch, img, e2fsck, debugfs })
}

impl Fixture {
    fn copy(&self, name: &str) -> PathBuf {
        let p = self.scratch.path(name);
        let st = Command::new("cp").arg("--sparse=always").arg(&self.img).arg(&p).status().unwrap();
        assert!(st.success());
        p
    }

    fn image(&self) -> Image<FileDevice> {
        Image::open(FileDevice::open(&self.img, false).unwrap()).unwrap()
    }

    fn ino(&self, path: &str) -> u32 {
        self.image().lookup(path).unwrap()
    }

    /// Physical blocks of `path` as (data blocks, first extent-tree block below the root).
    fn blocks(&self, path: &str) -> (Vec<u64>, Option<u64>) {
        let mut im = self.image();
        let ino = im.lookup(path).unwrap();
        let inode = im.read_inode(ino).unwrap();
        let data = im.extents(ino, &inode).unwrap().iter().flat_map(|e| e.physical..e.physical + u64::from(e.len)).collect();
        let tree = match parse_node(&inode.block, ino).unwrap().1 {
            ExtentNode::Index { children, .. } => children.first().map(|c| c.child),
            ExtentNode::Leaf(_) => None,
        };
        (data, tree)
    }

    /// Byte offset of inode `ino` in the image.
    fn inode_offset(&self, ino: u32) -> u64 {
        let im = self.image();
        let geo = im.geometry();
        let (g, idx) = geo.inode_location(ino).unwrap();
        im.group_descs()[g as usize].inode_table * u64::from(geo.block_size) + u64::from(idx) * u64::from(geo.inode_size)
    }

    /// Overwrites name `from` with `to` (same length) in `dir`'s first block and fixes its checksum.
    fn rename_in_first_block(&self, img: &Path, dir: &str, from: &[u8], to: &[u8]) {
        let mut im = self.image();
        let ino = im.lookup(dir).unwrap();
        let generation = im.read_inode(ino).unwrap().generation;
        let seed = inode_seed(im.superblock().csum_seed(), ino, generation);
        let blk = self.blocks(dir).0[0];
        let f = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
        let mut b = vec![0u8; 1024];
        f.read_exact_at(&mut b, blk * 1024).unwrap();
        let at = b.windows(from.len()).position(|w| w == from).expect("name in the block");
        b[at..at + to.len()].copy_from_slice(to);
        let c = dirent::block_checksum(&b, seed);
        b[1020..].copy_from_slice(&c.to_le_bytes());
        f.write_all_at(&b, blk * 1024).unwrap();
    }

    fn debugfs(&self, img: &Path, cmd: &str) {
        let out = Command::new(&self.debugfs).args(["-w", "-R", cmd, img.to_str().unwrap()]).output().unwrap();
        assert!(out.status.success(), "debugfs {cmd}: {}", combined(&out));
    }

    /// e2fsck -fn must find something, and the checker must report `want`.
    fn expect(&self, img: &Path, what: &str, want: impl Fn(&Problem) -> bool) -> CheckReport {
        let out = run(&self.e2fsck, &["-fn", img.to_str().unwrap()]);
        let text = combined(&out);
        let name = img.to_str().unwrap();
        let complains = !out.status.success() || text.lines().any(|l| !is_clean_fsck_line(l, name));
        assert!(complains, "{what}: e2fsck -fn did not notice the corruption:\n{text}");
        let (_, r) = check(FileDevice::open(img, false).unwrap());
        assert!(!r.is_clean(), "{what}: checker says clean");
        assert!(r.has(&want), "{what}: expected problem missing; checker said:\n{r}\ne2fsck said:\n{text}");
        r
    }
}

fn flip(img: &Path, at: u64, mask: u8) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, at).unwrap();
}

#[test]
fn debugfs_inode_corruptions_are_reported() {
    let Some(fx) = fixture("inodes") else { return };
    let three = fx.ino("/three-blocks");
    let img = fx.copy("links.img");
    fx.debugfs(&img, "sif /three-blocks links_count 7");
    fx.expect(&img, "links_count 7", |p| matches!(p, Problem::LinkCount { ino, stored: 7, counted: 1 } if *ino == three));

    let img = fx.copy("size.img");
    fx.debugfs(&img, "sif /three-blocks size 1");
    fx.expect(&img, "size 1", |p| matches!(p, Problem::InodeSize { ino, size: 1, .. } if *ino == three));

    let inner = fx.ino("/sub/inner");
    let img = fx.copy("clri.img");
    fx.debugfs(&img, "clri /sub/inner");
    let r = fx.expect(&img, "clri of a linked file", |p| matches!(p, Problem::EntryToUnusedInode { ino, .. } if *ino == inner));
    assert!(r.has(|p| matches!(p, Problem::InodeBitmapDiffers { unclaimed, .. } if unclaimed.total == 1)), "{r}");

    let other = fx.ino("/sub/other");
    let img = fx.copy("unlink.img");
    fx.debugfs(&img, "unlink /sub/other");
    fx.expect(&img, "unlinked inode", |p| matches!(p, Problem::Unattached { ino } if *ino == other));
}

#[test]
fn debugfs_namespace_and_sharing_corruptions_are_reported() {
    let Some(fx) = fixture("names") else { return };
    let (small, three, sub) = (fx.ino("/small"), fx.ino("/three-blocks"), fx.ino("/sub"));
    let img = fx.copy("ftype.img");
    fx.debugfs(&img, "sif /small mode 0120777");
    fx.expect(&img, "entry type vs mode", |p| matches!(p, Problem::FileType { ino, stored: 1, expected: 7, .. } if *ino == small));

    // i_block[5] is the first extent's start_lo: point /small at /three-blocks' data.
    let (data, _) = fx.blocks("/three-blocks");
    let img = fx.copy("shared.img");
    fx.debugfs(&img, &format!("sif /small block[5] {}", data[0]));
    fx.expect(&img, "block claimed by two inodes", |p| {
        matches!(p, Problem::MultiplyClaimed { a, b, .. } if (*a, *b) == (Owner::Inode(small), Owner::Inode(three)))
    });

    // debugfs refuses duplicate names: rename "other" to "inner" in place and re-seal the block.
    let img = fx.copy("dup.img");
    fx.rename_in_first_block(&img, "/sub", b"other", b"inner");
    fx.expect(&img, "duplicate name", |p| matches!(p, Problem::DuplicateName { dir, path } if *dir == sub && path == "/sub/inner"));

    let img = fx.copy("dirlink.img");
    fx.debugfs(&img, "ln /sub /sub-again");
    let r = fx.expect(&img, "hard link to a directory", |p| matches!(p, Problem::DirHardLink { ino, .. } if *ino == sub));
    assert!(r.has(|p| matches!(p, Problem::LinkCount { ino, .. } if *ino == sub)), "{r}");

    let img = fx.copy("unused.img");
    fx.debugfs(&img, &format!("set_bg 0 itable_unused {}", fx.image().geometry().inodes_per_group - 11));
    fx.expect(&img, "itable_unused hides inodes", |p| matches!(p, Problem::ItableUnused { group: 0, what, .. } if what.contains("names inode")));

    // A bit set in the inode bitmap's never-initialised tail, no inode behind it.
    let img = fx.copy("tail-bit.img");
    let tail_ino = fx.image().geometry().inodes_per_group - 3;
    fx.debugfs(&img, &format!("seti <{tail_ino}>"));
    let tail_what = format!("inode {tail_ino} is marked in use inside the unused tail");
    fx.expect(&img, "inode bitmap bit in the unused tail", |p| matches!(p, Problem::ItableUnused { group: 0, what, .. } if *what == tail_what));
}

#[test]
fn debugfs_bitmap_and_count_corruptions_are_reported() {
    let Some(fx) = fixture("bitmaps") else { return };
    let (data, _) = fx.blocks("/three-blocks");
    let used = data[1];
    let img = fx.copy("freeb.img");
    fx.debugfs(&img, &format!("freeb {used}"));
    fx.expect(&img, "freeb of a used block", |p| {
        matches!(p, Problem::BlockBitmapDiffers { unmarked, .. } if unmarked.runs.first().is_some_and(|r| r.start == used))
    });

    let mut im = fx.image();
    let last = im.geometry().group_count - 1;
    let start = im.geometry().group_first_block(last);
    let bm = im.read_block_bitmap(last).unwrap().unwrap();
    let free = start + (0..im.geometry().group_len(last) as usize).find(|&i| !bm.get(i)).unwrap() as u64;
    let img = fx.copy("setb.img");
    fx.debugfs(&img, &format!("setb {free}"));
    fx.expect(&img, "setb of a free block", |p| {
        matches!(p, Problem::BlockBitmapDiffers { unclaimed, .. } if unclaimed.runs.first().is_some_and(|r| r.start == free))
    });

    let img = fx.copy("ssv.img");
    fx.debugfs(&img, "ssv free_blocks_count 5");
    fx.expect(&img, "superblock free count", |p| matches!(p, Problem::SuperblockFreeBlocks { stored: 5, .. }));

    let img = fx.copy("setbg.img");
    fx.debugfs(&img, "set_bg 1 free_blocks_count 3");
    fx.expect(&img, "group free count", |p| matches!(p, Problem::GroupFreeBlocks { group: 1, stored: 3, .. }));

    let img = fx.copy("bgcsum.img");
    fx.debugfs(&img, "set_bg 0 checksum 0");
    fx.expect(&img, "descriptor checksum", |p| matches!(p, Problem::GroupDescChecksum { group: 0, stored: 0, .. }));
}

#[test]
fn flipped_bytes_are_reported() {
    let Some(fx) = fixture("flips") else { return };
    let small = fx.ino("/small");
    let img = fx.copy("inode-csum.img");
    flip(&img, fx.inode_offset(small) + 0x10, 0x01); // i_mtime
    fx.expect(&img, "inode checksum", |p| matches!(p, Problem::InodeChecksum { ino, .. } if *ino == small));

    let sub = fx.ino("/sub");
    let (dir_blocks, _) = fx.blocks("/sub");
    let img = fx.copy("dir-csum.img");
    flip(&img, dir_blocks[0] * 1024 + 24 + 8, 0x20); // a name byte of the third entry
    fx.expect(&img, "dir block checksum", |p| matches!(p, Problem::DirChecksum { dir, lblk: 0, .. } if *dir == sub));

    let img = fx.copy("dir-tail.img");
    flip(&img, dir_blocks[0] * 1024 + 1024 - 12 + 7, 0xFF); // the tail's file type 0xDE
    fx.expect(&img, "dir block tail", |p| matches!(p, Problem::DirBlock { dir, lblk: 0, .. } if *dir == sub));

    let sparse = fx.ino("/sparse");
    let (_, leaf) = fx.blocks("/sparse");
    let leaf = leaf.expect("the sparse file has an index node");
    let img = fx.copy("extent-magic.img");
    flip(&img, leaf * 1024, 0x0F); // eh_magic
    fx.expect(&img, "extent header", |p| matches!(p, Problem::ExtentTree { ino, block, .. } if *ino == sparse && *block == leaf));
}

use common::Rng;

#[test]
fn random_metadata_flips_never_panic() {
    let Some(fx) = fixture("random") else { return };
    let bytes = std::fs::read(&fx.img).unwrap();
    let mut base = MemDevice::new(bytes.len() as u64);
    for (i, chunk) in bytes.chunks(4096).enumerate() {
        if chunk.iter().any(|&b| b != 0) {
            base.write(i as u64 * 4096, chunk, WriteFlags::METADATA).unwrap();
        }
    }
    // Blocks the checker must read (superblock, GDT, group 0's bitmaps and
    // first table block, directory and tree blocks): every flip there is covered
    // by a checksum or a padding rule. Other groups' bitmaps and tables are
    // UNINIT, so flips there must merely not crash anything.
    let mut must: Vec<u64> = vec![1];
    let mut other: Vec<u64> = vec![2];
    {
        let im = fx.image();
        for (g, d) in im.group_descs().iter().enumerate() {
            let list = if g == 0 { &mut must } else { &mut other };
            list.extend([d.block_bitmap, d.inode_bitmap, d.inode_table]);
            other.push(d.inode_table + 1);
        }
    }
    for p in ["/", "/sub"] {
        must.extend(fx.blocks(p).0);
    }
    must.extend(fx.blocks("/sparse").1);
    let targets: Vec<u64> = must.iter().chain(&other).copied().collect();
    let mut rng = Rng(0x005E_ED0F_F115);
    let (mut must_hit, mut reported) = (0, 0);
    for round in 0..400 {
        let mut dev = base.clone();
        let mut spots: Vec<u64> = (0..=rng.below(3))
            .map(|_| targets[rng.below(targets.len() as u64) as usize] * 1024 + rng.below(1024))
            .collect();
        spots.sort_unstable();
        spots.dedup();
        for &at in &spots {
            let sector = at - at % 512;
            let mut s = [0u8; 512];
            dev.read(sector, &mut s, IoClass::Metadata).unwrap();
            s[(at - sector) as usize] ^= 1 << rng.below(8);
            dev.write(sector, &s, WriteFlags::METADATA).unwrap();
        }
        let (_, r) = check(dev);
        let _ = r.to_string();
        if spots.iter().any(|at| must.contains(&(at / 1024))) {
            must_hit += 1;
            assert!(!r.problems.is_empty(), "round {round}: flips at bytes {spots:?} went unnoticed");
        }
        reported += usize::from(!r.problems.is_empty());
    }
    println!("{reported} of 400 flip rounds reported, {must_hit} hit blocks that must be noticed");
    assert!(must_hit > 100, "the sweep must exercise the checked blocks");
}
