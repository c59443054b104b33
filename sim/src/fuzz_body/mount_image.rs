//! The `mount_image` target: the engine fed hostile images. Each input
//! picks a valid image the engine made (a template) and mutates it where
//! ext4's structures are: the superblock, the group descriptor table, the
//! inode table, extent tree blocks, directory blocks, the journal (its
//! superblock, descriptors and logged blocks), or anywhere. Superblock and
//! descriptor checksums are resealed when the input asks, so a mutation
//! reaches past them; the templates without metadata_csum have no other
//! checksums, so there mutations reach every parser.
//!
//! The image is then mounted (journal recovery of a hostile log included),
//! every file and directory reachable from the root is listed, read,
//! mapped and sought, the filesystem is unmounted, and the engine's own
//! fsck reads what is left. Any error is fine; a panic is a crash, and
//! libFuzzer's own limits make a hang or a memory blow-up one too.

use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};
use ext4_engine::device_mem::MemDevice;
use ext4_engine::format::group_desc::{desc_checksum, DescChecksum, GroupDesc};
use ext4_engine::format::superblock::{superblock_checksum, Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ext4_engine::fs::Ext4;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::op::{FallocFlags, SeekWhence};
use ext4_model::{FiemapRequest, FileKind, FileSystem, MountConfig};

const MAX_MUTATIONS: usize = 8;
/// Bounds the walk of a hostile tree: entries listed, bytes read per file.
const MAX_ENTRIES: usize = 400;
const MAX_READ: u64 = 256 << 10;
const BG_CHECKSUM: usize = 0x1E;
/// Files a template's directory holds.
pub const TEMPLATE_NAMES: usize = 60;

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

/// A valid image and where its structures are.
struct Template {
    name: &'static str,
    dev: MemDevice,
    block_size: u64,
    /// Blocks of each region but the superblock (which is bytes, not a block).
    regions: Vec<(Region, Vec<u64>)>,
}

/// What one input did, for the corpus replay's checks.
#[derive(Debug, Default, Clone)]
pub struct ImageRun {
    pub template: &'static str,
    pub regions: Vec<Region>,
    pub mounted: bool,
    pub files_read: usize,
    pub refused: Option<String>,
}

/// Builds a template: files with deep extent trees, a directory large
/// enough to be an htree, a symlink; `crash` leaves committed transactions
/// in the log, unreplayed.
fn build(name: &'static str, block_size: u32, metadata_csum: bool, crash: bool) -> Template {
    let bytes: u64 = 8 << 20;
    let mut dev = MemDevice::new(bytes);
    let mut opts = MkfsOptions::new(bytes, *b"fuzz-mount-image", [9; 16], crate::run::spec::SIM_EPOCH_SECS);
    opts.block_size = block_size;
    opts.metadata_csum = metadata_csum;
    mkfs(&mut dev, &opts).expect("a template's mkfs");
    let mut fs = Ext4::mount(dev, &MountConfig { block_size, ..MountConfig::default() }).expect("a template mounts");
    let bs = u64::from(block_size);
    fs.mkdir("/d", 0o755).expect("mkdir");
    // Enough names for an htree at 1 KiB blocks, few enough to walk fast.
    for i in 0..TEMPLATE_NAMES {
        fs.create(&format!("/d/name-{i:04}"), 0o644).expect("create");
    }
    fs.create("/f", 0o644).expect("create");
    // Sixty extents: a tree with a leaf block below the inode.
    fs.fallocate("/f", FallocFlags(0), 0, 120 * bs).expect("fallocate");
    for b in (1..120).step_by(2) {
        fs.fallocate("/f", FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE), b * bs, bs).expect("punch");
    }
    fs.write("/d/name-0007", 0, &[0x5a; 5000]).expect("write");
    fs.symlink("/d/name-0007", "/l").expect("symlink");
    fs.sync().expect("sync");
    let mut dev = if crash {
        fs.write("/f", 3 * bs, &[0xa5; 3000]).expect("write");
        fs.create("/late", 0o600).expect("create");
        fs.fsync("/f").expect("fsync");
        fs.into_device_dropping_caches()
    } else {
        fs.unmount().expect("unmount")
    };
    let regions = regions_of(&mut dev, bs);
    Template { name, dev, block_size: bs, regions }
}

fn read_block(dev: &mut MemDevice, bs: u64, b: u64) -> Vec<u8> {
    peek(dev, b * bs, bs as usize).unwrap_or_default()
}

const SECTOR: u64 = 512;

/// `len` bytes at `at`, read through the sectors holding them.
fn peek(dev: &mut MemDevice, at: u64, len: usize) -> Option<Vec<u8>> {
    let start = at / SECTOR * SECTOR;
    let end = (at + len as u64).div_ceil(SECTOR) * SECTOR;
    let mut buf = vec![0u8; (end - start) as usize];
    dev.read(start, &mut buf, IoClass::Metadata).ok()?;
    let from = (at - start) as usize;
    Some(buf[from..from + len].to_vec())
}

/// Writes `bytes` at `at`, a read-modify-write of the sectors holding them.
fn patch(dev: &mut MemDevice, at: u64, bytes: &[u8]) -> Option<()> {
    let start = at / SECTOR * SECTOR;
    let end = (at + bytes.len() as u64).div_ceil(SECTOR) * SECTOR;
    let mut buf = vec![0u8; (end - start) as usize];
    dev.read(start, &mut buf, IoClass::Metadata).ok()?;
    let from = (at - start) as usize;
    buf[from..from + bytes.len()].copy_from_slice(bytes);
    dev.write(start, &buf, WriteFlags::METADATA).ok()
}

/// Finds each region's blocks: the descriptor table and inode tables from
/// the superblock and descriptors, the rest by their magic numbers.
fn regions_of(dev: &mut MemDevice, bs: u64) -> Vec<(Region, Vec<u64>)> {
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    let _ = dev.read(SUPERBLOCK_OFFSET, &mut raw, IoClass::Metadata);
    let sb = Superblock::parse(&raw).expect("a template's superblock");
    let blocks = sb.blocks_count;
    let groups = (blocks - u64::from(sb.first_data_block)).div_ceil(u64::from(sb.blocks_per_group));
    let desc_size = u64::from(sb.desc_size());
    let gdt_start = u64::from(sb.first_data_block) + 1;
    let gdt: Vec<u64> = (gdt_start..gdt_start + (groups * desc_size).div_ceil(bs)).collect();
    let mut itable = Vec::new();
    for g in 0..groups {
        let at = gdt_start * bs + g * desc_size;
        let d = peek(dev, at, desc_size as usize).unwrap_or_default();
        let desc = GroupDesc::parse(&d);
        let per_group = (u64::from(sb.inodes_per_group) * u64::from(sb.inode_size())).div_ceil(bs);
        // The slots in use sit at the table's start.
        itable.extend(desc.inode_table..desc.inode_table + per_group.min(4));
    }
    let (mut extent, mut dir, mut journal) = (Vec::new(), Vec::new(), Vec::new());
    for b in 1..blocks {
        let block = read_block(dev, bs, b);
        if itable.contains(&b) || gdt.contains(&b) {
            continue;
        }
        if block[..2] == [0x0a, 0xf3] {
            extent.push(b);
        } else if block[..4] == [0xc0, 0x3b, 0x39, 0x98] {
            journal.push(b);
        } else if block[4..6] == [12, 0] && block[6] == 1 && block[8] == b'.' {
            dir.push(b);
        }
    }
    let anywhere: Vec<u64> = (0..blocks).collect();
    vec![(Region::GroupDescs, gdt), (Region::InodeTable, itable), (Region::ExtentBlock, extent), (Region::DirBlock, dir), (Region::Journal, journal), (Region::Anywhere, anywhere)]
}

fn templates() -> &'static [Template] {
    static T: OnceLock<Vec<Template>> = OnceLock::new();
    T.get_or_init(|| vec![build("1k-csum-crashed", 1024, true, true), build("4k-uninit_bg", 4096, false, false), build("1k-uninit_bg-crashed", 1024, false, true)])
}

/// Applies `m` to `dev`; returns the region it landed in, if any.
fn mutate(dev: &mut MemDevice, t: &Template, m: Mutation) -> Option<Region> {
    let (base, len) = if m.region == Region::Superblock {
        (SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE as u64)
    } else {
        let blocks = &t.regions.iter().find(|(r, _)| *r == m.region)?.1;
        let b = *blocks.get(usize::from(m.pick) % blocks.len().max(1))?;
        (b * t.block_size, t.block_size)
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
    Some(m.region)
}

/// Recomputes the superblock's and every descriptor's checksum, so a
/// mutation behind them reaches the parsers.
fn reseal(dev: &mut MemDevice, bs: u64) {
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    if dev.read(SUPERBLOCK_OFFSET, &mut raw, IoClass::Metadata).is_err() {
        return;
    }
    let Ok(sb) = Superblock::parse(&raw) else { return };
    let kind = if sb.has_metadata_csum() {
        DescChecksum::Crc32c { fs_seed: sb.csum_seed() }
    } else if sb.has_gdt_csum() {
        DescChecksum::Crc16 { uuid: sb.uuid }
    } else {
        DescChecksum::None
    };
    let groups = sb.blocks_count.saturating_sub(u64::from(sb.first_data_block)).div_ceil(u64::from(sb.blocks_per_group.max(1))).min(1 << 12);
    let desc_size = u64::from(sb.desc_size());
    let gdt = (u64::from(sb.first_data_block) + 1) * bs;
    for g in 0..groups {
        let at = gdt + g * desc_size;
        let Some(d) = peek(dev, at, desc_size as usize).filter(|d| d.len() >= BG_CHECKSUM + 2) else { break };
        let c = desc_checksum(&d, g as u32, kind);
        let _ = patch(dev, at + BG_CHECKSUM as u64, &c.to_le_bytes());
    }
    if sb.has_metadata_csum() {
        let c = superblock_checksum(&raw);
        let _ = patch(dev, SUPERBLOCK_OFFSET + 0x3FC, &c.to_le_bytes());
    }
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
                    let size = fs.stat(&path).map_or(0, |st| st.size);
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
    let input = Input::decode(data).ok()?;
    let all = templates();
    let t = &all[usize::from(input.template) % all.len()];
    let mut dev = t.dev.clone();
    let mut run = ImageRun { template: t.name, ..ImageRun::default() };
    for m in input.mutations {
        run.regions.extend(mutate(&mut dev, t, m));
    }
    if input.reseal {
        reseal(&mut dev, t.block_size);
    }
    let config = MountConfig { block_size: t.block_size as u32, read_only: input.read_only, ..MountConfig::default() };
    let dev = match Ext4::mount(dev, &config) {
        Ok(mut fs) => {
            run.mounted = true;
            run.files_read = walk(&mut fs);
            match fs.unmount() {
                Ok(dev) => dev,
                Err(e) => {
                    run.refused = Some(format!("unmount: {e}"));
                    return Some(run);
                }
            }
        }
        Err(e) => {
            run.refused = Some(e.to_string());
            return Some(run);
        }
    };
    let _ = ext4_engine::check::check(dev);
    Some(run)
}

/// Seed inputs: each template unchanged, then mutations from a fixed
/// ChaCha stream, kept so a quarter of them are images the engine refuses
/// and the rest images it mounts and walks.
pub fn seed_corpus(n: usize) -> Vec<Vec<u8>> {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x1a6e_5eed);
    let mut kept: Vec<Vec<u8>> = (0..3u8).map(|t| vec![t, 1, 0]).collect();
    let (mut refused, mut mounted) = (0, 0);
    for i in 0..n * 40 {
        if kept.len() >= n {
            break;
        }
        let mut input: Vec<u8> = vec![(i % 3) as u8, u8::from(i % 4 != 0), u8::from(i % 7 == 0)];
        input.extend((0..(1 + i % 3) * 14).map(|_| rng.random::<u8>()));
        let Some(run) = mount_image(&input) else { continue };
        let keep = if run.refused.is_some() { refused < n / 4 } else { mounted < n - n / 4 - 3 };
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
