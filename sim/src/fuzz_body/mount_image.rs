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
//! metadata_csum have only descriptor checksums. An input may instead be a raw image.
//!
//! The image is then mounted (journal recovery of a hostile log included),
//! every file and directory reachable from the root is listed, read,
//! mapped and sought, the filesystem is unmounted, and the engine's own
//! fsck reads what is left. Any error is fine; a panic is a crash, and
//! libFuzzer's own limits make a hang or a memory blow-up one too.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};
use ext4_engine::device_mem::MemDevice;
use ext4_engine::format::checksum::inode_seed;
use ext4_engine::format::geometry::Geometry;
use ext4_engine::format::group_desc::{desc_checksum, DescChecksum, GroupDesc, BG_CHECKSUM};
use ext4_engine::format::inode::seal_inode_checksum;
use ext4_engine::format::journal_superblock::{journal_sb_checksum, JournalSuperblock, BLOCKTYPE_SUPERBLOCK_V1, BLOCKTYPE_SUPERBLOCK_V2, JOURNAL_SB_SIZE, S_CHECKSUM};
use ext4_engine::journal::block::{set_tail, Header, LogFormat, BLOCKTYPE_COMMIT, BLOCKTYPE_DESCRIPTOR, BLOCKTYPE_REVOKE};
use ext4_engine::journal::map::LogMap;
use ext4_engine::journal::{commit, descriptor, recovery};
use ext4_engine::format::{dirent, extent};
use ext4_engine::format::superblock::{superblock_checksum, Superblock, MAX_LOG_BLOCK_SIZE, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ext4_engine::fs::Ext4;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::op::{FallocFlags, SeekWhence};
use ext4_model::{FiemapRequest, FileKind, FileSystem, MountConfig};

const MAX_MUTATIONS: usize = 8;
/// Bounds the walk of a hostile tree: entries listed, bytes read per file.
const MAX_ENTRIES: usize = 400;
const MAX_READ: u64 = 256 << 10;
/// Files a template's directory holds: few, with long names (see
/// [`template_name`]), since the walk does the same work for each.
pub const TEMPLATE_NAMES: usize = 20;

/// The `i`th name in a template's directory: 53 bytes (a 64-byte entry), so twenty fill
/// more than a 1 KiB block and the directory is an htree there.
pub fn template_name(i: usize) -> String {
    format!("name-{i:04}-long-enough-that-twenty-overflow-a-1k-block")
}

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
    survey: Survey,
}

/// Where a template's structures are, and what resealing them needs.
struct Survey {
    /// Blocks of each region but the superblock (which is bytes, not a block).
    regions: Vec<(Region, Vec<u64>)>,
    /// Each group's inode table start.
    itables: Vec<u64>,
    inodes_per_group: u64,
    inode_size: u64,
    /// The filesystem's checksum seed, with metadata_csum.
    fs_seed: Option<u32>,
    /// Extent and directory blocks: the owner inode and its generation.
    owners: BTreeMap<u64, (u32, u32)>,
    /// The journal superblock's block.
    journal_sb: Option<u64>,
    /// Each copy in a crashed template's log, by its block.
    logged: BTreeMap<u64, LoggedCopy>,
}

/// Where a logged copy's tag is, and the transaction it was logged in
/// (whose tid seeds the tag's checksum).
#[derive(Clone, Copy, Debug)]
struct LoggedCopy {
    descriptor: u64,
    tag: usize,
    tid: u32,
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
    for i in 0..TEMPLATE_NAMES {
        fs.create(&format!("/d/{}", template_name(i)), 0o644).expect("create");
    }
    fs.create("/f", 0o644).expect("create");
    // Sixty extents: a tree with a leaf block below the inode.
    fs.fallocate("/f", FallocFlags(0), 0, 120 * bs).expect("fallocate");
    for b in (1..120).step_by(2) {
        fs.fallocate("/f", FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE), b * bs, bs).expect("punch");
    }
    let written = format!("/d/{}", template_name(7));
    fs.write(&written, 0, &[0x5a; 5000]).expect("write");
    fs.symlink(&written, "/l").expect("symlink");
    fs.sync().expect("sync");
    let mut dev = if crash {
        fs.write("/f", 3 * bs, &[0xa5; 3000]).expect("write");
        fs.create("/late", 0o600).expect("create");
        fs.fsync("/f").expect("fsync");
        fs.into_device_dropping_caches()
    } else {
        fs.unmount().expect("unmount")
    };
    let survey = survey(&mut dev, bs);
    Template { name, dev, block_size: bs, survey }
}

fn read_block(dev: &mut MemDevice, bs: u64, b: u64) -> Vec<u8> {
    peek(dev, b * bs, bs as usize).unwrap_or_default()
}

const SECTOR: u64 = 512;

/// The whole sectors holding `len` bytes at `at` (the device reads and
/// writes whole sectors): their first byte, their bytes, and where `at`
/// sits in them.
fn sectors_around(dev: &mut MemDevice, at: u64, len: usize) -> Option<(u64, Vec<u8>, usize)> {
    let start = at / SECTOR * SECTOR;
    let end = (at + len as u64).div_ceil(SECTOR) * SECTOR;
    let mut buf = vec![0u8; (end - start) as usize];
    dev.read(start, &mut buf, IoClass::Metadata).ok()?;
    Some((start, buf, (at - start) as usize))
}

/// `len` bytes at `at`.
fn peek(dev: &mut MemDevice, at: u64, len: usize) -> Option<Vec<u8>> {
    let (_, buf, from) = sectors_around(dev, at, len)?;
    Some(buf[from..from + len].to_vec())
}

/// Writes `bytes` at `at`, a read-modify-write of the sectors holding them.
fn patch(dev: &mut MemDevice, at: u64, bytes: &[u8]) -> Option<()> {
    let (start, mut buf, from) = sectors_around(dev, at, bytes.len())?;
    buf[from..from + bytes.len()].copy_from_slice(bytes);
    dev.write(start, &buf, WriteFlags::METADATA).ok()
}

/// A template's superblock and the geometry it gives.
fn geometry_of(dev: &mut MemDevice) -> Option<(Superblock, Geometry)> {
    let raw: [u8; SUPERBLOCK_SIZE] = peek(dev, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE)?.try_into().ok()?;
    let sb = Superblock::parse(&raw).ok()?;
    let geo = Geometry::from_superblock(&sb).ok()?;
    Some((sb, geo))
}

/// Where group `g`'s descriptor sits, in bytes.
fn desc_at(geo: &Geometry, g: u64) -> u64 {
    (u64::from(geo.first_data_block) + 1) * u64::from(geo.block_size) + g * u64::from(geo.desc_size)
}

/// Finds each region's blocks: the descriptor table and inode tables from
/// the superblock and descriptors, the rest by their magic numbers; and
/// who owns each extent and directory block (an index in an inode's root,
/// a directory's "." entry).
fn survey(dev: &mut MemDevice, bs: u64) -> Survey {
    let (sb, geo) = geometry_of(dev).expect("a template's superblock");
    let blocks = geo.blocks_count;
    let gdt_start = u64::from(geo.first_data_block) + 1;
    let gdt: Vec<u64> = (gdt_start..gdt_start + u64::from(geo.gdt_blocks)).collect();
    let mut itable = Vec::new();
    let mut itables = Vec::new();
    for g in 0..u64::from(geo.group_count) {
        let d = peek(dev, desc_at(&geo, g), usize::from(geo.desc_size)).unwrap_or_default();
        let desc = GroupDesc::parse(&d);
        // The slots in use sit at the table's start.
        itable.extend(desc.inode_table..desc.inode_table + u64::from(geo.inode_table_blocks).min(24));
        itables.push(desc.inode_table);
    }
    let (ipg, isz) = (u64::from(geo.inodes_per_group), u64::from(geo.inode_size));
    let mut owners = BTreeMap::new();
    let mut generations = BTreeMap::new();
    for (g, &table) in itables.iter().enumerate() {
        for slot in 0..(24 * bs / isz).min(ipg) {
            let ino = (g as u64 * ipg + slot + 1) as u32;
            let b = peek(dev, table * bs + slot * isz, isz as usize).unwrap_or_default();
            if b.len() < 0x68 || b[..2] == [0, 0] {
                continue;
            }
            let generation = u32::from_le_bytes([b[0x64], b[0x65], b[0x66], b[0x67]]);
            generations.insert(ino, generation);
            let root = &b[0x28..0x28 + 60];
            let Ok(h) = extent::parse_header(root, ino) else { continue };
            for i in 0..usize::from(h.entries) {
                if let Ok(e) = extent::index_entry(root, &h, i, ino) {
                    owners.insert(e.child, (ino, generation));
                }
            }
        }
    }
    let (mut extent, mut dir, mut journal, mut journal_sb) = (Vec::new(), Vec::new(), Vec::new(), None);
    for b in 1..blocks {
        let block = read_block(dev, bs, b);
        if itable.contains(&b) || gdt.contains(&b) {
            continue;
        }
        if block[..2] == [0x0a, 0xf3] {
            extent.push(b);
        } else if block[..4] == [0xc0, 0x3b, 0x39, 0x98] {
            if matches!(Header::parse(&block).map(|h| h.blocktype), Some(BLOCKTYPE_SUPERBLOCK_V1 | BLOCKTYPE_SUPERBLOCK_V2)) && journal_sb.is_none() {
                journal_sb = Some(b);
            }
            journal.push(b);
        } else if block[4..6] == [12, 0] && block[6] == 1 && block[8] == b'.' {
            let ino = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
            if let Some(&generation) = generations.get(&ino) {
                owners.insert(b, (ino, generation));
            }
            dir.push(b);
        }
    }
    let logged = logged_copies(dev, &sb);
    journal.extend(logged.keys());
    journal.sort_unstable();
    journal.dedup();
    let anywhere: Vec<u64> = (0..blocks).collect();
    let regions = vec![(Region::GroupDescs, gdt), (Region::InodeTable, itable), (Region::ExtentBlock, extent), (Region::DirBlock, dir), (Region::Journal, journal), (Region::Anywhere, anywhere)];
    let fs_seed = sb.has_metadata_csum().then(|| sb.csum_seed());
    Survey { regions, itables, inodes_per_group: ipg, inode_size: isz, fs_seed, owners, journal_sb, logged }
}

/// The copies a template's log holds (none unless it crashed), found by
/// the engine's own recovery scan: a descriptor's copies follow it, so
/// each run of consecutive copies starts right after its descriptor.
fn logged_copies(dev: &mut MemDevice, sb: &Superblock) -> BTreeMap<u64, LoggedCopy> {
    let mut out = BTreeMap::new();
    if !sb.has_journal() {
        return out;
    }
    let bs = u64::from(sb.block_size());
    let Ok(map) = LogMap::load(dev, sb) else { return out };
    let raw = map.physical(0).ok().and_then(|b| peek(dev, b * bs, JOURNAL_SB_SIZE)).and_then(|r| <[u8; JOURNAL_SB_SIZE]>::try_from(r).ok());
    let Some(jsb) = raw.and_then(|r| JournalSuperblock::parse(&r, bs as u32).ok()).filter(|j| j.start != 0) else { return out };
    let Ok(log) = recovery::scan(dev, &map, &jsb, sb.blocks_count) else { return out };
    let before = |pos: u32| if pos <= jsb.first { jsb.maxlen - 1 } else { pos - 1 };
    for t in &log.transactions {
        let mut run: Option<(u32, u64, usize)> = None;
        for &(_, at) in &t.copies {
            let (descriptor, tag) = match run {
                Some((last, descriptor, tag)) if before(at) == last => (descriptor, tag + 1),
                _ => match map.physical(before(at)) {
                    Ok(d) => (d, 0),
                    Err(_) => continue,
                },
            };
            run = Some((at, descriptor, tag));
            if let Ok(copy) = map.physical(at) {
                out.insert(copy, LoggedCopy { descriptor, tag, tid: t.tid });
            }
        }
    }
    out
}

fn templates() -> &'static [Template] {
    static T: OnceLock<Vec<Template>> = OnceLock::new();
    T.get_or_init(|| vec![build("1k-csum", 1024, true, false), build("4k-uninit_bg", 4096, false, false), build("1k-uninit_bg-crashed", 1024, false, true), build("4k-csum-crashed", 4096, true, true)])
}

/// Applies `m` to `dev`; returns the region it landed in and its block.
fn mutate(dev: &mut MemDevice, t: &Template, m: Mutation) -> Option<(Region, u64)> {
    let (base, len) = if m.region == Region::Superblock {
        (SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE as u64)
    } else {
        let blocks = &t.survey.regions.iter().find(|(r, _)| *r == m.region)?.1;
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
    Some((m.region, base / t.block_size))
}

/// Recomputes the checksums of the mutated inodes, extent blocks and
/// directory leaf blocks (with metadata_csum), seeded as the template's
/// owners were.
fn reseal_blocks(dev: &mut MemDevice, t: &Template, touched: &[(Region, u64)]) {
    let (s, bs) = (&t.survey, t.block_size);
    let Some(fs_seed) = s.fs_seed else { return };
    for &(region, b) in touched {
        let Some(mut block) = peek(dev, b * bs, bs as usize) else { continue };
        match region {
            Region::InodeTable => {
                let Some((g, &table)) = s.itables.iter().enumerate().rev().find(|(_, &table)| table <= b) else { continue };
                for (i, slot) in block.chunks_mut(s.inode_size as usize).enumerate() {
                    let ino = g as u64 * s.inodes_per_group + ((b - table) * bs) / s.inode_size + i as u64 + 1;
                    seal_inode_checksum(slot, ino as u32, fs_seed);
                }
            }
            Region::ExtentBlock => {
                let Some(&(ino, generation)) = s.owners.get(&b) else { continue };
                let max = u16::from_le_bytes([block[4], block[5]]);
                if extent::tail_offset(max) + 4 > block.len() {
                    continue;
                }
                extent::set_block_checksum(&mut block, inode_seed(fs_seed, ino, generation));
            }
            Region::DirBlock => {
                let Some(&(ino, generation)) = s.owners.get(&b) else { continue };
                // Only a leaf with a checksum tail (a dx root has its own).
                if dirent::read_tail(&block).is_none() {
                    continue;
                }
                dirent::set_tail_checksum(&mut block, inode_seed(fs_seed, ino, generation));
            }
            _ => continue,
        }
        let _ = patch(dev, b * bs, &block);
    }
}

/// Reseals the touched blocks of a log with checksums (csum v2/v3): the
/// journal superblock first, whose UUID seeds the rest, then the tag
/// checksum of each touched logged copy (in its descriptor, whatever
/// region the mutation aimed at), then the tails of descriptor and revoke
/// blocks and the checksums of commit blocks, so a mutation of the log
/// reaches recovery's parsers and a mutated copy is replayed.
fn reseal_journal(dev: &mut MemDevice, t: &Template, touched: &[(Region, u64)]) -> usize {
    let bs = t.block_size;
    let copies: BTreeMap<u64, LoggedCopy> = touched.iter().filter_map(|&(_, b)| t.survey.logged.get(&b).map(|&c| (b, c))).collect();
    let mut blocks: Vec<u64> = touched.iter().filter(|(r, _)| *r == Region::Journal).map(|(_, b)| *b).filter(|b| !t.survey.logged.contains_key(b)).collect();
    let Some(jsb_block) = t.survey.journal_sb.filter(|_| !blocks.is_empty() || !copies.is_empty()) else { return 0 };
    let Some(mut raw) = peek(dev, jsb_block * bs, JOURNAL_SB_SIZE).and_then(|r| <[u8; JOURNAL_SB_SIZE]>::try_from(r).ok()) else { return 0 };
    // Sealed before it is parsed (the parse checks it); a superblock that
    // then says it has no checksums keeps the bytes it had.
    let before = raw;
    if blocks.contains(&jsb_block) {
        let sum = journal_sb_checksum(&raw);
        raw[S_CHECKSUM..S_CHECKSUM + 4].copy_from_slice(&sum.to_be_bytes());
    }
    let Ok(jsb) = JournalSuperblock::parse(&raw, bs as u32) else { return 0 };
    if !jsb.has_csum() {
        return 0;
    }
    if raw != before {
        let _ = patch(dev, jsb_block * bs, &raw);
    }
    let fmt = LogFormat::from_jsb(&jsb);
    let mut resealed = 0;
    for (b, copy) in copies {
        let (Some(logged), Some(mut desc)) = (peek(dev, b * bs, bs as usize), peek(dev, copy.descriptor * bs, bs as usize)) else { continue };
        if descriptor::set_tag_checksum(&fmt, &mut desc, copy.tag, descriptor::tag_checksum(&fmt, copy.tid, &logged)) {
            let _ = patch(dev, copy.descriptor * bs, &desc);
            blocks.push(copy.descriptor);
            resealed += 1;
        }
    }
    blocks.sort_unstable();
    blocks.dedup();
    for b in blocks.into_iter().filter(|&b| b != jsb_block) {
        let Some(mut block) = peek(dev, b * bs, bs as usize) else { continue };
        match Header::parse(&block).map(|h| h.blocktype) {
            Some(BLOCKTYPE_DESCRIPTOR | BLOCKTYPE_REVOKE) => set_tail(&fmt, &mut block),
            Some(BLOCKTYPE_COMMIT) => commit::seal(&fmt, &mut block),
            _ => continue,
        }
        let _ = patch(dev, b * bs, &block);
    }
    resealed
}

/// Recomputes the superblock's and every descriptor's checksum, so a
/// mutation behind them reaches the parsers.
fn reseal(dev: &mut MemDevice) {
    let Some(raw) = peek(dev, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE).and_then(|r| <[u8; SUPERBLOCK_SIZE]>::try_from(r).ok()) else { return };
    let Ok(sb) = Superblock::parse(&raw) else { return };
    // Descriptors where the superblock still gives a geometry; its own
    // checksum whatever it says.
    if let Ok(geo) = Geometry::from_superblock(&sb) {
        let kind = DescChecksum::of(&sb);
        for g in 0..u64::from(geo.group_count) {
            let at = desc_at(&geo, g);
            let Some(d) = peek(dev, at, usize::from(geo.desc_size)).filter(|d| d.len() >= BG_CHECKSUM + 2) else { break };
            let c = desc_checksum(&d, g as u32, kind);
            let _ = patch(dev, at + BG_CHECKSUM as u64, &c.to_le_bytes());
        }
    }
    if sb.has_metadata_csum() {
        let _ = patch(dev, SUPERBLOCK_OFFSET + 0x3FC, &superblock_checksum(&raw).to_le_bytes());
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
    let mut kept: Vec<Vec<u8>> = (0..3u8).map(|t| vec![t, 1, 0]).collect();
    // Raw images, whole, for libFuzzer's byte-level mutations to start from.
    kept.extend([true, false].map(raw_seed));
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

#[cfg(test)]
mod tests {
    use ext4_engine::journal::block::HEADER_LEN;

    use super::*;

    /// Template 0 (1 KiB, metadata_csum, clean) with a mutation of a field
    /// nothing but the checksum reads, in the `pick`th block of `region`:
    /// past the checksum only when resealed.
    fn touch(region: Region, pick: u16, offset: u16, reseal: bool) -> ImageRun {
        let m = Mutation { region, pick, offset, change: Change::Xor(0x40) };
        run_input(Input { template: 0, reseal, read_only: false, mutations: vec![m] })
    }

    #[test]
    fn a_resealed_commit_block_mutation_reaches_recovery() {
        // Template 3 (4 KiB, metadata_csum, csum v3 log) crashed with its
        // last transaction committed but not checkpointed. A commit
        // block's h_commit_sec (0x30) changed: sealed, recovery replays
        // the transaction; unsealed, its checksum stops recovery there.
        let t = &templates()[3];
        let journal = &t.survey.regions.iter().find(|(r, _)| *r == Region::Journal).unwrap().1;
        let mut dev = t.dev.clone();
        let commits: Vec<u16> = (0..journal.len() as u16)
            .filter(|&i| peek(&mut dev, journal[usize::from(i)] * t.block_size, HEADER_LEN).and_then(|h| Header::parse(&h)).is_some_and(|h| h.blocktype == BLOCKTYPE_COMMIT))
            .collect();
        let last = *commits.last().expect("a commit block in the crashed log");
        let run = |reseal: bool| {
            let m = Mutation { region: Region::Journal, pick: last, offset: 0x30, change: Change::Xor(0x01) };
            run_input(Input { template: 3, reseal, read_only: false, mutations: vec![m] })
        };
        let (sealed, broken) = (run(true), run(false));
        let whole = run_input(Input { template: 3, reseal: false, read_only: false, mutations: Vec::new() });
        assert!(sealed.mounted && sealed.files_read == whole.files_read, "sealed {sealed:?}, untouched {whole:?}");
        assert!(!broken.mounted || broken.files_read < whole.files_read, "broken {broken:?}, untouched {whole:?}");
    }

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

    #[test]
    fn a_resealed_inode_mutation_reaches_past_its_checksum() {
        // The root's (inode 2, slot 1 of 256 bytes) i_mtime.
        let sealed = touch(Region::InodeTable, 0, 256 + 0x10, true);
        assert!(sealed.mounted && sealed.files_read > TEMPLATE_NAMES, "{sealed:?}");
        let broken = touch(Region::InodeTable, 0, 256 + 0x10, false);
        assert!(broken.refused.is_some() || broken.files_read == 0, "a bad inode checksum went unseen: {broken:?}");
    }

    #[test]
    fn a_resealed_extent_block_mutation_reaches_past_its_checksum() {
        // eh_generation of a file's leaf, which nothing but the checksum reads.
        let s = &templates()[0].survey;
        let leaves = &s.regions.iter().find(|(r, _)| *r == Region::ExtentBlock).unwrap().1;
        let pick = leaves.iter().position(|b| s.owners.get(b).is_some_and(|&(ino, _)| ino > 11)).expect("a file's extent leaf") as u16;
        let sealed = touch(Region::ExtentBlock, pick, 8, true);
        let broken = touch(Region::ExtentBlock, pick, 8, false);
        assert!(sealed.mounted && sealed.files_read > TEMPLATE_NAMES, "{sealed:?}");
        assert_eq!(broken.files_read + 1, sealed.files_read, "the leaf's bad checksum fails /f's read: {broken:?}");
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
    fn the_1k_templates_directory_is_an_htree_and_the_4k_ones_is_not() {
        for t in templates() {
            let mut fs = Ext4::mount(t.dev.clone(), &MountConfig { block_size: t.block_size as u32, ..MountConfig::default() }).unwrap();
            let ino = fs.stat("/d").unwrap().ino;
            // A crashed template's inode is in its log until the mount replays it.
            let mut dev = fs.unmount().unwrap();
            let s = &t.survey;
            let (g, slot) = ((ino - 1) / s.inodes_per_group, (ino - 1) % s.inodes_per_group);
            let raw = peek(&mut dev, s.itables[g as usize] * t.block_size + slot * s.inode_size, 0x24).unwrap();
            let flags = u32::from_le_bytes([raw[0x20], raw[0x21], raw[0x22], raw[0x23]]);
            let indexed = flags & ext4_engine::format::inode::FL_INDEX != 0;
            assert_eq!(indexed, t.block_size == 1024, "{}: /d flags {flags:#x}", t.name);
        }
    }

    /// Template 3 (4 KiB, metadata_csum, csum v3 log) with byte `offset`
    /// of its last logged copy set to `value`, mounted (recovery replays
    /// the log) and unmounted: the bytes that then differ from the
    /// untouched template's, mounted and unmounted alike, outside the log
    /// (where the copy, its tag and its descriptor's tail differ too).
    fn replayed_with_last_copy_set(offset: u16, value: u8, reseal: bool) -> Vec<(usize, u8)> {
        let t = &templates()[3];
        let journal = &t.survey.regions.iter().find(|(r, _)| *r == Region::Journal).unwrap().1;
        let (&last, _) = t.survey.logged.iter().max_by_key(|(_, c)| (c.tid, c.tag)).expect("the crashed log holds copies");
        let pick = journal.iter().position(|&b| b == last).expect("logged copies are in the journal region") as u16;
        let settled = |dev: MemDevice| {
            let config = MountConfig { block_size: 4096, ..MountConfig::default() };
            let dev = match Ext4::mount(dev.clone(), &config) {
                Ok(fs) => fs.unmount().unwrap(),
                Err(_) => dev.clone(),
            };
            let mut bytes = vec![0u8; dev.size_bytes() as usize];
            let mut dev = dev;
            dev.read(0, &mut bytes, IoClass::Metadata).unwrap();
            bytes
        };
        let mut dev = t.dev.clone();
        let touched = vec![mutate(&mut dev, t, Mutation { region: Region::Journal, pick, offset, change: Change::Set(value) }).unwrap()];
        if reseal {
            reseal_journal(&mut dev, t, &touched);
        }
        let (untouched, mutated) = (settled(t.dev.clone()), settled(dev));
        let in_log = |i: usize| journal.contains(&(i as u64 / t.block_size));
        untouched.iter().zip(&mutated).enumerate().filter(|&(i, (a, b))| a != b && !in_log(i)).map(|(i, (_, &b))| (i, b)).collect()
    }

    #[test]
    fn a_resealed_logged_copy_is_replayed_home_and_an_unsealed_one_is_not() {
        // The last byte of the block, whatever it holds, is set to 0x5c.
        let sealed = replayed_with_last_copy_set(4095, 0x5c, true);
        assert_eq!(sealed.len(), 1, "only the changed byte differs once replayed: {sealed:?}");
        assert_eq!(sealed[0].1, 0x5c);
        // Unsealed, the copy fails its tag checksum: its transaction is
        // not replayed, the changed byte goes nowhere.
        let broken = replayed_with_last_copy_set(4095, 0x5c, false);
        assert!(!broken.is_empty() && !broken.contains(&sealed[0]), "{broken:?}");
    }
}
