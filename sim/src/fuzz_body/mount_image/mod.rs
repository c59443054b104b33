//! The `mount_image` target: the engine fed hostile images. Each input
//! picks a valid image the engine made (a template) and mutates it where
//! ext4's structures are: the superblock, the group descriptor table, the
//! inode table, extent tree blocks, directory blocks, the journal (its
//! superblock, descriptors and logged blocks), or anywhere. When the input
//! asks, checksums are resealed so a mutation reaches past them: the
//! superblock's, every descriptor's, and (with metadata_csum) those of the
//! mutated inodes, extent blocks and directory leaf blocks, each seeded
//! with its owner inode, and of the log's superblock, descriptor, revoke
//! and commit blocks, and the tag checksum of each mutated logged copy
//! (which recovery then replays home). The templates without
//! metadata_csum have only descriptor checksums. An input may instead be
//! a raw image.
//!
//! The image is then mounted (journal recovery of a hostile log included),
//! every file and directory reachable from the root is listed, read,
//! mapped and sought, the filesystem is unmounted, and the engine's own
//! fsck reads what is left. Any error is fine; a panic is a crash, and
//! libFuzzer's own limits make a hang or a memory blow-up one too.

mod reseal;
mod template;

use arbitrary::{Arbitrary, Unstructured};
use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};
use ext4_engine::device_mem::MemDevice;
use ext4_engine::format::extent;
use ext4_engine::format::superblock::{Superblock, MAX_LOG_BLOCK_SIZE, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ext4_engine::fs::Ext4;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::op::SeekWhence;
use ext4_model::{FiemapRequest, FileKind, FileSystem, MountConfig};

use reseal::{reseal, reseal_blocks, reseal_journal};
use template::{peek, patch, templates, Template};
pub use template::TEMPLATE_NAMES;

const MAX_MUTATIONS: usize = 8;
/// Bounds the walk of a hostile tree: entries listed, bytes read per file.
const MAX_ENTRIES: usize = 400;
const MAX_READ: u64 = 256 << 10;

/// Where a mutation lands.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Region {
    Superblock,
    GroupDescs,
    InodeTable,
    ExtentBlock,
    DirBlock,
    Journal,
    Anywhere,
}

/// What a mutation does at its offset.
#[derive(Arbitrary, Clone, Copy, Debug)]
enum Change {
    Set(u8),
    Xor(u8),
    /// A 16- or 32-bit field set to a boundary value.
    Word16(Boundary),
    Word32(Boundary),
}

#[derive(Arbitrary, Clone, Copy, Debug)]
enum Boundary {
    Zero,
    One,
    Max,
    Half,
    Small(u8),
}

impl Boundary {
    fn value(self, max: u32) -> u32 {
        match self {
            Boundary::Zero => 0,
            Boundary::One => 1,
            Boundary::Max => max,
            Boundary::Half => max / 2 + 1,
            Boundary::Small(v) => u32::from(v),
        }
    }
}

#[derive(Arbitrary, Clone, Copy, Debug)]
struct Mutation {
    region: Region,
    /// Which block of the region.
    pick: u16,
    offset: u16,
    change: Change,
}

/// An input: a template, whether to reseal, whether to mount read-only,
/// then mutations until the bytes run out (at most [`MAX_MUTATIONS`]).
#[derive(Debug)]
struct Input {
    template: u8,
    reseal: bool,
    read_only: bool,
    mutations: Vec<Mutation>,
}

impl Input {
    fn decode(data: &[u8]) -> arbitrary::Result<Input> {
        let mut u = Unstructured::new(data);
        let (template, reseal, read_only) = (u8::arbitrary(&mut u)?, bool::arbitrary(&mut u)?, bool::arbitrary(&mut u)?);
        let mut mutations = Vec::new();
        while !u.is_empty() && mutations.len() < MAX_MUTATIONS {
            mutations.push(Mutation::arbitrary(&mut u)?);
        }
        Ok(Input { template, reseal, read_only, mutations })
    }
}

/// What one input did, for the corpus replay's checks.
#[derive(Debug, Default, Clone)]
pub struct ImageRun {
    pub template: &'static str,
    pub regions: Vec<Region>,
    pub mounted: bool,
    pub files_read: usize,
    pub refused: Option<String>,
    /// Logged copies mutated whose tag checksums were resealed.
    pub copies_resealed: usize,
}

/// Bytes at the start of block `b` a mutation aims at: an extent block's
/// header and entries (most of a leaf is unused slots, which nothing reads
/// unless the header says otherwise), the whole block elsewhere.
fn in_use(dev: &mut MemDevice, t: &Template, region: Region, b: u64) -> u64 {
    let bs = t.block_size;
    if region != Region::ExtentBlock {
        return bs;
    }
    let entries = peek(dev, b * bs, extent::HEADER_LEN).and_then(|h| extent::stated_header(&h)).map_or(0, |h| usize::from(h.entries));
    ((extent::HEADER_LEN + entries * extent::ENTRY_LEN) as u64).min(bs)
}

/// Applies `m` to `dev`; returns the region it landed in and its block.
fn mutate(dev: &mut MemDevice, t: &Template, m: Mutation) -> Option<(Region, u64)> {
    let (base, len) = if m.region == Region::Superblock {
        (SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE as u64)
    } else {
        let blocks = &t.survey.regions.iter().find(|(r, _)| *r == m.region)?.1;
        let b = *blocks.get(usize::from(m.pick) % blocks.len().max(1))?;
        (b * t.block_size, in_use(dev, t, m.region, b))
    };
    let width = match m.change {
        Change::Set(_) | Change::Xor(_) => 1,
        Change::Word16(_) => 2,
        Change::Word32(_) => 4,
    };
    let at = base + (u64::from(m.offset) % len) / width * width;
    let mut field = peek(dev, at, width as usize)?;
    match m.change {
        Change::Set(v) => field[0] = v,
        Change::Xor(v) => field[0] ^= v.max(1),
        Change::Word16(v) => field.copy_from_slice(&(v.value(u32::from(u16::MAX)) as u16).to_le_bytes()),
        Change::Word32(v) => field.copy_from_slice(&v.value(u32::MAX).to_le_bytes()),
    }
    patch(dev, at, &field)?;
    Some((m.region, base / t.block_size))
}

/// Lists, reads, maps and seeks everything reachable from the root.
fn walk(fs: &mut Ext4<MemDevice>) -> usize {
    let mut todo = vec!["/".to_string()];
    let (mut seen, mut read) = (0, 0);
    while let Some(dir) = todo.pop() {
        let Ok(names) = fs.readdir(&dir) else { continue };
        for entry in names {
            seen += 1;
            if seen > MAX_ENTRIES {
                return read;
            }
            if entry.name == "." || entry.name == ".." {
                continue;
            }
            let path = if dir == "/" { format!("/{}", entry.name) } else { format!("{dir}/{}", entry.name) };
            match entry.kind {
                FileKind::Directory => todo.push(path),
                FileKind::Regular => {
                    let _ = fs.fiemap(&path, FiemapRequest::whole(0));
                    let _ = fs.lseek(&path, 0, SeekWhence::Data);
                    let _ = fs.lseek(&path, 0, SeekWhence::Hole);
                    // Past EOF on purpose when stat failed: the read must say why.
                    let size = fs.stat(&path).map_or(MAX_READ, |st| st.size);
                    if fs.read(&path, 0, size.min(MAX_READ) as u32).is_ok() {
                        read += 1;
                    }
                }
                FileKind::Symlink => {
                    let _ = fs.readlink(&path);
                }
            }
        }
    }
    read
}

/// Runs one input; `None` when the bytes decode to nothing.
pub fn mount_image(data: &[u8]) -> Option<ImageRun> {
    if let Some((&RAW_IMAGE, image)) = data.split_first() {
        return Some(run_raw(image));
    }
    Some(run_input(Input::decode(data).ok()?))
}

/// First byte of an input whose rest is a raw image, not mutations.
pub const RAW_IMAGE: u8 = 0xFF;
/// Largest raw image: room for the superblock, descriptors, bitmaps and
/// a few inode-table and data blocks at 1 KiB blocks.
const MAX_RAW_BYTES: usize = 256 << 10;
/// Largest device a raw image's superblock may ask for (sparse: only what
/// is written costs memory).
const MAX_RAW_DEVICE: u64 = 64 << 20;

/// Raw bytes at the start of a sparse device as large as the superblock
/// says (at most [`MAX_RAW_DEVICE`]; zeros after the bytes), mounted at the
/// block size it claims if it claims one ext4 has.
fn run_raw(image: &[u8]) -> ImageRun {
    let image = &image[..image.len().min(MAX_RAW_BYTES)];
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    let stored = image.get(SUPERBLOCK_OFFSET as usize..).unwrap_or(&[]);
    let n = stored.len().min(SUPERBLOCK_SIZE);
    raw[..n].copy_from_slice(&stored[..n]);
    let sb = Superblock::read_fields(&raw);
    let block_size = if sb.log_block_size <= MAX_LOG_BLOCK_SIZE { u64::from(sb.block_size()) } else { 1024 };
    let size = sb.blocks_count.saturating_mul(block_size).clamp(image.len().div_ceil(4096) as u64 * 4096, MAX_RAW_DEVICE).max(64 << 10);
    let mut dev = MemDevice::new(size);
    let mut padded = image.to_vec();
    padded.resize(padded.len().div_ceil(512) * 512, 0);
    if !padded.is_empty() && dev.write(0, &padded, WriteFlags::METADATA).is_err() {
        return ImageRun { template: "raw", refused: Some("raw image does not fit".into()), ..ImageRun::default() };
    }
    let run = ImageRun { template: "raw", ..ImageRun::default() };
    mount_walk_check(dev, MountConfig { block_size: block_size as u32, ..MountConfig::default() }, run)
}

fn run_input(input: Input) -> ImageRun {
    let all = templates();
    let t = &all[usize::from(input.template) % all.len()];
    let mut dev = t.dev.clone();
    let mut run = ImageRun { template: t.name, ..ImageRun::default() };
    let touched: Vec<(Region, u64)> = input.mutations.into_iter().filter_map(|m| mutate(&mut dev, t, m)).collect();
    run.regions = touched.iter().map(|(r, _)| *r).collect();
    if input.reseal {
        reseal_blocks(&mut dev, t, &touched);
        run.copies_resealed = reseal_journal(&mut dev, t, &touched);
        reseal(&mut dev);
    }
    let config = MountConfig { block_size: t.block_size as u32, read_only: input.read_only, ..MountConfig::default() };
    mount_walk_check(dev, config, run)
}

/// Mounts, walks every file and directory, unmounts, and runs the
/// engine's fsck on what is left; errors end the run, recorded.
fn mount_walk_check(dev: MemDevice, config: MountConfig, mut run: ImageRun) -> ImageRun {
    let dev = match Ext4::mount(dev, &config) {
        Ok(mut fs) => {
            run.mounted = true;
            run.files_read = walk(&mut fs);
            match fs.unmount() {
                Ok(dev) => dev,
                Err(e) => {
                    run.refused = Some(format!("unmount: {e}"));
                    return run;
                }
            }
        }
        Err(e) => {
            run.refused = Some(e.to_string());
            return run;
        }
    };
    let _ = ext4_engine::check::check(dev);
    run
}

/// An input holding a whole small image (256 KiB, 1 KiB blocks, no
/// journal) with a directory, a written file and a symlink, raw.
fn raw_seed(metadata_csum: bool) -> Vec<u8> {
    let bytes = MAX_RAW_BYTES as u64;
    let mut dev = MemDevice::new(bytes);
    let mut opts = MkfsOptions::new(bytes, *b"fuzz-raw-image-1", [7; 16], crate::run::spec::SIM_EPOCH_SECS);
    opts.block_size = 1024;
    opts.metadata_csum = metadata_csum;
    opts.journal = ext4_engine::mkfs::JournalSize::None;
    mkfs(&mut dev, &opts).expect("a raw seed's mkfs");
    let config = MountConfig { block_size: 1024, has_journal: false, ..MountConfig::default() };
    let mut fs = Ext4::mount(dev, &config).expect("a raw seed mounts");
    fs.mkdir("/d", 0o755).expect("mkdir");
    for i in 0..12 {
        fs.create(&format!("/d/n{i}"), 0o644).expect("create");
    }
    fs.write("/d/n3", 0, &[0x3c; 5000]).expect("write");
    fs.symlink("/d/n3", "/l").expect("symlink");
    let mut dev = fs.unmount().expect("unmount");
    let mut input = vec![RAW_IMAGE; 1 + MAX_RAW_BYTES];
    dev.read(0, &mut input[1..], IoClass::Metadata).expect("read back");
    input
}

/// Seed inputs: each template unchanged, then mutations from a fixed
/// ChaCha stream, kept so a quarter of them are images the engine refuses
/// and the rest images it mounts and walks.
pub fn seed_corpus(n: usize) -> Vec<Vec<u8>> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x1a6e_5eed);
    let mut kept: Vec<Vec<u8>> = (0..templates().len() as u8).map(|t| vec![t, 1, 0]).collect();
    // Raw images, whole, for libFuzzer's byte-level mutations to start from.
    kept.extend([true, false].map(raw_seed));
    let fixed = kept.len();
    let (mut refused, mut mounted) = (0, 0);
    for i in 0..n * 40 {
        if kept.len() >= n {
            break;
        }
        // Every template in turn, three in four resealed.
        let mut input: Vec<u8> = vec![(i % templates().len()) as u8, u8::from((i / 4) % 4 != 0), u8::from(i % 7 == 0)];
        input.extend((0..(1 + i % 3) * 14).map(|_| rng.random::<u8>()));
        let Some(run) = mount_image(&input) else { continue };
        let keep = if run.refused.is_some() { refused < n / 4 } else { mounted < n - n / 4 - fixed };
        if keep && !run.regions.is_empty() {
            if run.refused.is_some() {
                refused += 1;
            } else {
                mounted += 1;
            }
            kept.push(input);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::template::template_name;
    use super::*;

    #[test]
    fn raw_images_mount_when_whole_and_are_refused_when_not() {
        let prefix = raw_seed(true);
        let whole = mount_image(&prefix).expect("a raw input");
        assert!(whole.mounted && whole.files_read >= 1, "{whole:?}");
        let mut broken = prefix.clone();
        broken[1 + SUPERBLOCK_OFFSET as usize + 56] ^= 0xFF; // s_magic
        let refused = mount_image(&broken).expect("a raw input");
        assert!(!refused.mounted && refused.refused.is_some());
        for junk in [&[RAW_IMAGE][..], &[RAW_IMAGE, 1, 2, 3], &[RAW_IMAGE; 5000]] {
            assert!(!mount_image(junk).expect("a raw input").mounted);
        }
    }

    /// A file whose extent tree is damaged reads as EIO, not as empty
    /// (the read path once took a failed tree load for "nothing to read").
    #[test]
    fn a_damaged_tree_reads_as_eio() {
        let t = &templates()[0];
        let s = &t.survey;
        let leaves = &s.regions.iter().find(|(r, _)| *r == Region::ExtentBlock).unwrap().1;
        let pick = leaves.iter().position(|b| s.owners.get(b).is_some_and(|&(ino, _)| ino > 11)).unwrap() as u16;
        let mut dev = t.dev.clone();
        mutate(&mut dev, t, Mutation { region: Region::ExtentBlock, pick, offset: 8, change: Change::Xor(0x40) }).unwrap();
        let mut fs = Ext4::mount(dev, &MountConfig { block_size: 1024, ..MountConfig::default() }).unwrap();
        assert_eq!(fs.read("/f", 0, 4096), Err(ext4_model::Errno::EIO));
        assert_eq!(fs.read(&format!("/d/{}", template_name(7)), 0, 10).map(|v| v.len()), Ok(10), "other files still read");
    }

    #[test]
    fn extent_block_mutations_land_in_the_header_or_the_entries() {
        let t = &templates()[0];
        let s = &t.survey;
        let leaves = &s.regions.iter().find(|(r, _)| *r == Region::ExtentBlock).unwrap().1;
        let pick = leaves.iter().position(|b| s.owners.get(b).is_some_and(|&(ino, _)| ino > 11)).unwrap();
        let leaf = leaves[pick] * t.block_size;
        let mut seen = std::collections::BTreeSet::new();
        for offset in (0..=u16::MAX).step_by(97) {
            let mut dev = t.dev.clone();
            let before = peek(&mut dev, leaf, t.block_size as usize).unwrap();
            mutate(&mut dev, t, Mutation { region: Region::ExtentBlock, pick: pick as u16, offset, change: Change::Xor(0x01) }).unwrap();
            let after = peek(&mut dev, leaf, t.block_size as usize).unwrap();
            seen.extend(before.iter().zip(&after).position(|(a, b)| a != b));
        }
        // Sixteen entries after the 12-byte header.
        assert_eq!(seen.last(), Some(&(12 + 12 * 16 - 1)), "{seen:?}");
        assert_eq!(seen.first(), Some(&0));
    }
}
