//! The superblock and the group descriptor table: read leniently (a bad
//! checksum is a problem to report, not a reason to stop), then every
//! descriptor is checked for its checksum, where its bitmaps and table lie,
//! and flags that contradict each other. Each group's metadata is claimed so
//! overlaps with other metadata or with file blocks are found later.

use crate::device::{BlockDevice, IoClass};
use crate::format::bytes::{le16, le32};
use crate::format::geometry::Geometry;
use crate::format::group_desc::{desc_checksum, DescChecksum, GroupDesc, BG_BLOCK_UNINIT, BG_CHECKSUM, BG_INODE_UNINIT};
use crate::format::superblock::{feature, superblock_checksum, Superblock, S_CHECKSUM, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use crate::format::GroupIndex;

use super::claims::Claims;
use super::disk::Disk;
use super::problem::{MetaKind, Owner, Problem};
use super::state::{Checker, GroupLayout};
use super::CheckStats;

const S_FEATURE_RO_COMPAT: usize = 0x64;

/// Reads the superblock and descriptors. `Err` means nothing more can be checked.
pub fn open<D: BlockDevice>(mut dev: D) -> Result<Checker<D>, (D, Problem)> {
    let unreadable = |what: String| Problem::Unreadable { what };
    let dev_size = dev.size_bytes();
    if dev_size < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE as u64 {
        return Err((dev, unreadable(format!("device of {dev_size} bytes has no superblock"))));
    }
    let mut raw = [0u8; SUPERBLOCK_SIZE];
    if let Err(e) = dev.read(SUPERBLOCK_OFFSET, &mut raw, IoClass::Metadata) {
        return Err((dev, unreadable(format!("superblock read: {e}"))));
    }
    let mut early = Vec::new();
    // A wrong checksum is reported, then the fields are still validated: seal a copy.
    let mut sealed = raw;
    if le32(&raw, S_FEATURE_RO_COMPAT) & feature::RO_COMPAT_METADATA_CSUM != 0 {
        let stored = le32(&raw, S_CHECKSUM);
        let computed = superblock_checksum(&raw);
        if stored != computed {
            early.push(Problem::SuperblockChecksum { stored, computed });
            sealed[S_CHECKSUM..].copy_from_slice(&computed.to_le_bytes());
        }
    }
    let sb = match Superblock::parse(&sealed) {
        Ok(sb) => sb,
        Err(e) => return Err((dev, unreadable(e.to_string()))),
    };
    let geo = match Geometry::from_superblock(&sb) {
        Ok(g) => g,
        Err(e) => return Err((dev, unreadable(e.to_string()))),
    };
    let bs = u64::from(geo.block_size);
    let dev_blocks = dev_size / bs;
    if geo.blocks_count > dev_blocks {
        return Err((dev, unreadable(format!("s_blocks_count {} > the device's {dev_blocks} blocks", geo.blocks_count))));
    }
    let mut disk = Disk::new(dev, geo.block_size, geo.blocks_count);
    let gdt_start = u64::from(geo.first_data_block) + 1;
    let mut gdt = Vec::new();
    let mut at = 0u64;
    while at < u64::from(geo.gdt_blocks) {
        let n = (u64::from(geo.gdt_blocks) - at).min(disk.max_blocks_per_read());
        match disk.read(gdt_start + at, n) {
            Ok(b) => gdt.extend_from_slice(&b),
            Err(p) => return Err((disk.dev, unreadable(format!("group descriptor table: {p}")))),
        }
        at += n;
    }
    let csum_seed = sb.has_metadata_csum().then(|| sb.csum_seed());
    let lazy = csum_seed.is_some() || sb.has_gdt_csum();
    let ds = usize::from(geo.desc_size);
    let descs: Vec<GroupDesc> =
        (0..geo.group_count as usize).map(|g| GroupDesc::parse(gdt.get(g * ds..(g + 1) * ds).unwrap_or(&[0u8; 32]))).collect();
    let groups = geo.group_count as usize;
    let mut c = Checker {
        disk,
        sb_raw: raw,
        sb,
        geo,
        layout: vec![GroupLayout::default(); groups],
        descs,
        csum_seed,
        lazy,
        problems: early,
        dropped: 0,
        stats: CheckStats::default(),
        claims: Claims::default(),
        live: Vec::new(),
        dirs: Vec::new(),
        journal_map: None,
        xattr_refs: Default::default(),
        group_inodes: vec![Default::default(); groups],
    };
    check_superblock(&mut c);
    let kind = DescChecksum::of(&c.sb);
    for g in 0..c.geo.group_count {
        let bytes = gdt.get(g as usize * ds..(g as usize + 1) * ds).unwrap_or(&[]);
        check_desc_checksum(&mut c, g, bytes, kind);
        check_desc(&mut c, g);
    }
    Ok(c)
}

/// Superblock fields that need more than the parser's per-field checks.
fn check_superblock<D: BlockDevice>(c: &mut Checker<D>) {
    let sb = &c.sb;
    let mut found = Vec::new();
    if sb.r_blocks_count > sb.blocks_count / 2 {
        found.push(format!("s_r_blocks_count {} > half of {} blocks", sb.r_blocks_count, sb.blocks_count));
    }
    if sb.last_orphan != 0 {
        found.push(format!("orphan list not processed (s_last_orphan {})", sb.last_orphan));
    }
    if sb.feature_incompat & feature::INCOMPAT_RECOVER != 0 && !sb.has_journal() {
        found.push("needs_recovery is set on a filesystem without a journal".to_string());
    }
    if sb.has_journal() && sb.journal_inum == 0 {
        found.push("has_journal with s_journal_inum 0".to_string());
    }
    for what in found {
        c.report(Problem::Superblock { what });
    }
}

fn check_desc_checksum<D: BlockDevice>(c: &mut Checker<D>, g: GroupIndex, bytes: &[u8], kind: DescChecksum) {
    if kind == DescChecksum::None || bytes.len() < BG_CHECKSUM + 2 {
        return;
    }
    let stored = le16(bytes, BG_CHECKSUM);
    let computed = desc_checksum(bytes, g, kind);
    if stored != computed {
        c.report(Problem::GroupDescChecksum { group: g, stored: u32::from(stored), computed: u32::from(computed) });
    }
}

/// Locations, flags and counters of one descriptor; claims its metadata.
fn check_desc<D: BlockDevice>(c: &mut Checker<D>, g: GroupIndex) {
    let geo = &c.geo;
    let d = c.descs[g as usize];
    let group_start = geo.group_first_block(g);
    let group_end = group_start + u64::from(geo.group_len(g));
    let (lo, hi) = if geo.log_groups_per_flex.is_some() {
        (u64::from(geo.first_data_block), geo.blocks_count)
    } else {
        (group_start, group_end)
    };
    let itb = u64::from(geo.inode_table_blocks);
    let base = u64::from(geo.base_meta_blocks(g));
    let mut layout = GroupLayout::default();
    let mut found = Vec::new();
    for (kind, start, len) in
        [(MetaKind::BlockBitmap, d.block_bitmap, 1), (MetaKind::InodeBitmap, d.inode_bitmap, 1), (MetaKind::InodeTable, d.inode_table, itb)]
    {
        let inside = start >= lo && start.checked_add(len).is_some_and(|e| e <= hi);
        if !inside {
            found.push(Problem::GroupLayout {
                group: g,
                what: format!("{} at block {start} (+{len}) outside blocks {lo}..{hi}", Owner::metadata(g, kind)),
            });
            continue;
        }
        c.claims.add(start, len, Owner::metadata(g, kind));
        match kind {
            MetaKind::BlockBitmap => layout.block_bitmap = true,
            MetaKind::InodeBitmap => layout.inode_bitmap = true,
            _ => layout.inode_table = true,
        }
    }
    c.claims.add(group_start, base, Owner::metadata(g, MetaKind::SuperAndGdt));
    let ipg = geo.inodes_per_group;
    let last = g + 1 == geo.group_count;
    if c.lazy {
        if last && d.has_flag(BG_BLOCK_UNINIT) {
            found.push(Problem::GroupFlags { group: g, what: "BLOCK_UNINIT on the last group".to_string() });
        }
        if d.has_flag(BG_INODE_UNINIT) && (d.free_inodes != ipg || d.used_dirs != 0) {
            found.push(Problem::GroupFlags {
                group: g,
                what: format!("INODE_UNINIT but {} free inodes of {ipg} and {} directories", d.free_inodes, d.used_dirs),
            });
        }
        if d.itable_unused > ipg || d.itable_unused > d.free_inodes {
            found.push(Problem::ItableUnused {
                group: g,
                itable_unused: d.itable_unused,
                what: format!("more than the {} free inodes (of {ipg})", d.free_inodes),
            });
        }
    } else if d.has_flag(BG_BLOCK_UNINIT | BG_INODE_UNINIT) || d.itable_unused != 0 {
        found.push(Problem::GroupFlags {
            group: g,
            what: format!("flags {:#x} / itable_unused {} without uninit_bg or metadata_csum", d.flags, d.itable_unused),
        });
    }
    c.layout[g as usize] = layout;
    for p in found {
        c.report(p);
    }
}
