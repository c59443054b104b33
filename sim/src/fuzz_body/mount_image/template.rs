//! The images `mount_image` mutates: four the engine makes, built once,
//! and a survey of where each one's structures are (which regions a
//! mutation aims at, and what resealing their checksums needs).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};
use ext4_engine::device_mem::MemDevice;
use ext4_engine::format::extent;
use ext4_engine::format::geometry::Geometry;
use ext4_engine::format::group_desc::GroupDesc;
use ext4_engine::format::journal_superblock::{JournalSuperblock, BLOCKTYPE_SUPERBLOCK_V1, BLOCKTYPE_SUPERBLOCK_V2, JOURNAL_SB_SIZE};
use ext4_engine::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ext4_engine::fs::Ext4;
use ext4_engine::journal::block::Header;
use ext4_engine::journal::map::LogMap;
use ext4_engine::journal::recovery;
use ext4_engine::mkfs::{mkfs, MkfsOptions};
use ext4_model::op::FallocFlags;
use ext4_model::{FileSystem, MountConfig};

use super::Region;

/// Files a template's directory holds: few, with long names (see
/// [`template_name`]), since the walk does the same work for each.
pub const TEMPLATE_NAMES: usize = 20;

/// The `i`th name in a template's directory: 53 bytes (a 64-byte entry),
/// so twenty fill more than a 1 KiB block and the directory is an htree
/// there.
pub(super) fn template_name(i: usize) -> String {
    format!("name-{i:04}-long-enough-that-twenty-overflow-a-1k-block")
}

/// A valid image and where its structures are.
pub(super) struct Template {
    pub(super) name: &'static str,
    pub(super) dev: MemDevice,
    pub(super) block_size: u64,
    pub(super) survey: Survey,
}

/// Where a template's structures are, and what resealing them needs.
pub(super) struct Survey {
    /// Blocks of each region but the superblock (which is bytes, not a block).
    pub(super) regions: Vec<(Region, Vec<u64>)>,
    /// Each group's inode table start.
    pub(super) itables: Vec<u64>,
    pub(super) inodes_per_group: u64,
    pub(super) inode_size: u64,
    /// The filesystem's checksum seed, with metadata_csum.
    pub(super) fs_seed: Option<u32>,
    /// Extent and directory blocks: the owner inode and its generation.
    pub(super) owners: BTreeMap<u64, (u32, u32)>,
    /// The journal superblock's block.
    pub(super) journal_sb: Option<u64>,
    /// Each copy in a crashed template's log, by its block.
    pub(super) logged: BTreeMap<u64, LoggedCopy>,
}

/// Where a logged copy's tag is, and the transaction it was logged in
/// (whose tid seeds the tag's checksum).
#[derive(Clone, Copy, Debug)]
pub(super) struct LoggedCopy {
    pub(super) descriptor: u64,
    pub(super) tag: usize,
    pub(super) tid: u32,
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
    // Sixteen extents, more than the inode's root holds (four): a tree
    // with a leaf block below the inode. Few, since the walk maps them
    // all, one lookup from the root each.
    fs.fallocate("/f", FallocFlags(0), 0, 32 * bs).expect("fallocate");
    for b in (1..32).step_by(2) {
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
pub(super) fn peek(dev: &mut MemDevice, at: u64, len: usize) -> Option<Vec<u8>> {
    let (_, buf, from) = sectors_around(dev, at, len)?;
    Some(buf[from..from + len].to_vec())
}

/// Writes `bytes` at `at`, a read-modify-write of the sectors holding them.
pub(super) fn patch(dev: &mut MemDevice, at: u64, bytes: &[u8]) -> Option<()> {
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
pub(super) fn desc_at(geo: &Geometry, g: u64) -> u64 {
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

pub(super) fn templates() -> &'static [Template] {
    static T: OnceLock<Vec<Template>> = OnceLock::new();
    T.get_or_init(|| vec![build("1k-csum", 1024, true, false), build("4k-uninit_bg", 4096, false, false), build("1k-uninit_bg-crashed", 1024, false, true), build("4k-csum-crashed", 4096, true, true)])
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
