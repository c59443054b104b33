//! The inode pass: streams each group's initialised inode table (skipping
//! INODE_UNINIT groups and the `bg_itable_unused` tail), verifies every
//! non-zero slot's checksum, and checks each inode in use.
//!
//! "In use" follows e2fsck, not the bitmap: reserved inodes (below
//! `s_first_ino`) always, others when `i_links_count > 0`. The inode bitmap
//! is then compared against that set, so a bitmap bit without an inode (or
//! the reverse) is reported as a bitmap difference, as e2fsck's pass 5 does.

use crate::device::BlockDevice;
use crate::error::{Corrupt, Error};
use crate::format::bitmap::bytes_all;
use crate::format::bytes::{le32, put_le16};
use crate::format::extent::Extent;
use crate::format::checksum::inode_seed;
use crate::format::inode::*;
use crate::format::superblock::feature;
use crate::format::{GroupIndex, InodeNumber};

use super::bitmaps;
use super::extents::{self, Mapping};
use super::problem::{Owner, Problem};
use super::reserved;
use super::state::{Checker, DirInfo, GroupInodes, LiveInode};

/// Offset of `i_extra_isize`, zeroed to re-read an inode whose value is invalid.
const I_EXTRA_ISIZE: usize = 0x80;
/// `i_block[13]`: the double-indirect block, the only block the resize inode owns itself.
const DIND_SLOT: usize = 13;
/// Largest regular file size without the large_file feature.
const MAX_SMALL_FILE: u64 = (1 << 31) - 1;

/// Scans every group's inodes.
pub fn scan<D: BlockDevice>(c: &mut Checker<D>) {
    for g in 0..c.geo.group_count {
        scan_group(c, g);
    }
}

fn scan_group<D: BlockDevice>(c: &mut Checker<D>, g: GroupIndex) {
    let init = c.initialised(g);
    let ipg = c.geo.inodes_per_group;
    let mut expected = bitmaps::expected_bitmap(ipg as usize);
    let mut counts = GroupInodes { scanned: true, ..GroupInodes::default() };
    if init > 0 && !c.layout[g as usize].inode_table {
        // The table is somewhere impossible (already reported): nothing to compare.
        return;
    }
    let isz = u64::from(c.geo.inode_size);
    let bs = u64::from(c.geo.block_size);
    let per_block = bs / isz;
    let table = c.descs[g as usize].inode_table;
    let table_blocks = (u64::from(init) * isz).div_ceil(bs);
    let mut done = 0u64;
    while done < table_blocks {
        let n = (table_blocks - done).min(c.disk.max_blocks_per_read());
        let buf = match c.disk.read(table + done, n) {
            Ok(b) => b,
            Err(p) => {
                // Unread inodes make the group's counts unknowable: leave it unscanned.
                c.report(p);
                return;
            }
        };
        for i in 0..n * per_block {
            let idx = (done * per_block + i) as u32;
            if idx >= init {
                break;
            }
            let at = (i * isz) as usize;
            let Some(slot) = buf.get(at..at + isz as usize) else { break };
            let ino = g * ipg + idx + 1;
            if let Some(ft) = check_slot(c, ino, slot) {
                expected.set(idx as usize);
                counts.used += 1;
                counts.dirs += u32::from(ft == S_IFDIR);
            }
        }
        done += n;
    }
    c.group_inodes[g as usize] = counts;
    c.stats.groups_scanned += 1;
    bitmaps::check_inode_bitmap(c, g, &expected, init);
}

/// Parses one slot, reporting checksum and field errors; returns the file type if in use.
fn check_slot<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, slot: &[u8]) -> Option<u16> {
    let reserved = ino < c.first_ino();
    if !reserved && bytes_all(slot, 0) {
        return None;
    }
    let inode = match Inode::parse(slot, ino, c.csum_seed) {
        Ok(i) => i,
        Err(Error::Corrupt(Corrupt::Checksum { stored, computed, .. })) => {
            c.report(Problem::InodeChecksum { ino, stored, computed });
            Inode::parse(slot, ino, None).ok()?
        }
        Err(e) => {
            c.report(Problem::InodeField { ino, what: e.to_string() });
            let mut copy = slot.to_vec();
            put_le16(&mut copy, I_EXTRA_ISIZE, 0);
            Inode::parse(&copy, ino, None).ok()?
        }
    };
    let live = reserved || inode.links_count > 0;
    if !live {
        if inode.mode != 0 && inode.dtime == 0 {
            c.report(Problem::InodeField { ino, what: "deleted inode (links_count 0) has dtime 0".to_string() });
        }
        return None;
    }
    check_live(c, ino, &inode, reserved);
    let ft = inode.file_type();
    c.live.push(LiveInode { ino, file_type: ft, links_count: inode.links_count });
    Some(ft)
}

fn valid_type(ft: u16) -> bool {
    matches!(ft, S_IFREG | S_IFDIR | S_IFLNK | S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK)
}

fn check_live<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode, reserved: bool) {
    let ft = inode.file_type();
    if reserved {
        reserved::check(c, ino, inode);
    } else {
        c.stats.inodes += 1;
        match ft {
            S_IFREG => c.stats.files += 1,
            S_IFDIR => c.stats.dirs += 1,
            S_IFLNK => c.stats.symlinks += 1,
            _ => c.stats.other += 1,
        }
        if !valid_type(ft) {
            c.report(Problem::InodeMode { ino, mode: inode.mode });
        }
        if inode.dtime != 0 {
            c.report(Problem::InodeField { ino, what: format!("in use but dtime is {}", inode.dtime) });
        }
    }
    if inode.has_flag(FL_INLINE_DATA) {
        c.report(Problem::Unsupported { ino, what: "inline data".to_string() });
        return;
    }
    let seed = c.csum_seed.map(|s| inode_seed(s, ino, inode.generation));
    let fast_symlink = ft == S_IFLNK && inode.size > 0 && inode.size < I_BLOCK_LEN as u64;
    let mut mapping = Mapping::default();
    let mut count_blocks = true;
    if matches!(ft, S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK) {
        if inode.has_flag(FL_EXTENTS | FL_INDEX) {
            c.report(Problem::InodeField { ino, what: format!("special file with flags {:#x}", inode.flags) });
        }
    } else if fast_symlink {
        check_fast_symlink(c, ino, inode);
    } else if inode.has_flag(FL_EXTENTS) {
        mapping = extents::walk(c, ino, inode, seed);
        c.stats.extents += mapping.extents.len() as u64;
        c.stats.tree_blocks += mapping.tree_blocks;
        c.stats.max_depth = c.stats.max_depth.max(mapping.depth);
    } else if ino == RESIZE_INO && c.sb.feature_compat & feature::COMPAT_RESIZE_INODE != 0 {
        // The reserved GDT blocks it maps are claimed as group metadata already.
        count_blocks = false;
        let dind = u64::from(le32(&inode.block, DIND_SLOT * 4));
        if dind != 0 {
            if dind >= u64::from(c.geo.first_data_block) && dind < c.geo.blocks_count {
                c.claims.add(dind, 1, Owner::Inode(ino));
            } else {
                c.report(Problem::ReservedInode { ino, what: format!("resize inode's DIND block {dind} outside the filesystem") });
            }
        }
    } else if inode.block.iter().any(|&b| b != 0) {
        c.report(Problem::Unsupported { ino, what: "block-mapped (no extents flag)".to_string() });
        return;
    }
    // Whole clusters: the data's logical clusters, a cluster per tree block.
    let bits = c.geo.cluster_bits;
    let mut counted = (mapping.tree_blocks + data_clusters(&mapping.extents, bits)) << bits;
    if inode.file_acl != 0 {
        if inode.file_acl >= u64::from(c.geo.first_data_block) && inode.file_acl < c.geo.blocks_count {
            c.xattr_refs.entry(inode.file_acl).or_default().push(ino);
            counted += 1 << bits;
        } else {
            c.report(Problem::Xattr { ino, block: inode.file_acl, what: "outside the filesystem".to_string() });
        }
    }
    if count_blocks {
        check_i_blocks(c, ino, inode, counted);
    }
    if ft == S_IFDIR {
        check_dir_size(c, ino, inode, &mapping);
        let extents = mapping.extents;
        c.dirs.push(DirInfo { ino, size: inode.size, generation: inode.generation, htree: inode.has_flag(FL_INDEX), extents });
    } else {
        check_file_size(c, ino, inode, &mapping);
        if ft == S_IFLNK && !fast_symlink {
            check_slow_symlink(c, ino, inode, &mapping);
        }
        if c.sb.has_journal() && ino == c.sb.journal_inum {
            c.journal_map = Some((inode.size, mapping.extents));
        }
    }
}

/// Distinct logical clusters the extents (in logical order) touch.
fn data_clusters(extents: &[Extent], bits: u32) -> u64 {
    let mut last: Option<u64> = None;
    let mut n = 0;
    for e in extents.iter().filter(|e| e.len > 0) {
        let (first, end) = (u64::from(e.logical) >> bits, (e.logical_end() - 1) >> bits);
        n += end + 1 - first - u64::from(last == Some(first));
        last = Some(end);
    }
    n
}

fn check_i_blocks<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode, counted: u64) {
    let huge = c.sb.has_huge_file();
    let fs_units = huge && inode.has_flag(FL_HUGE_FILE);
    let per_block = if fs_units { 1 } else { u64::from(c.geo.block_size / 512) };
    let want = counted.saturating_mul(per_block);
    let stored = if huge { inode.blocks } else { inode.blocks & 0xFFFF_FFFF };
    if stored != want {
        c.report(Problem::BlockCount { ino, stored, counted: want });
    }
}

fn check_dir_size<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode, m: &Mapping) {
    let bs = u64::from(c.geo.block_size);
    let bad = |what: String| Problem::InodeSize { ino, size: inode.size, what };
    if m.extents.iter().any(|e| e.unwritten) {
        c.report(Problem::InodeField { ino, what: "directory has unwritten extents".to_string() });
    }
    let end = m.extents.last().map_or(0, |e| e.logical_end());
    let nblocks = inode.size / bs;
    // s_prealloc_dir_blocks: blocks a directory may have past i_size.
    let prealloc = u64::from(c.sb_raw[0xCD]);
    let p = if inode.size % bs != 0 {
        Some(bad(format!("directory size is not a multiple of {bs}")))
    } else if m.extents.is_empty() && m.tree_blocks == 0 && nblocks == 0 {
        Some(bad("zero-length directory".to_string()))
    } else if nblocks > end {
        Some(bad(format!("covers {nblocks} blocks, only {end} mapped")))
    } else if end > nblocks.saturating_add(prealloc) {
        Some(bad(format!("blocks mapped up to {end}, past the {nblocks} of i_size")))
    } else {
        None
    };
    if let Some(p) = p {
        c.report(p);
    }
}

fn check_file_size<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode, m: &Mapping) {
    let bs = u64::from(c.geo.block_size);
    // e2fsck allows initialised blocks up to the one starting at i_size, and unwritten ones anywhere.
    let last_init = m.extents.iter().filter(|e| !e.unwritten).map(|e| e.logical_end() - 1).max();
    if let Some(last) = last_init {
        if inode.size < last.saturating_mul(bs) {
            c.report(Problem::InodeSize { ino, size: inode.size, what: format!("initialised block {last} lies past EOF") });
        }
    }
    let max = (1u64 << (32 + c.geo.block_size.trailing_zeros())) - 1;
    if inode.size > max {
        c.report(Problem::InodeSize { ino, size: inode.size, what: format!("larger than the {max} an extent file can hold") });
    }
    if inode.is_reg() && inode.size > MAX_SMALL_FILE && c.sb.feature_ro_compat & feature::RO_COMPAT_LARGE_FILE == 0 {
        c.report(Problem::Superblock { what: format!("inode {ino} is a large file but large_file is not set") });
    }
}

fn strnlen(b: &[u8]) -> usize {
    b.iter().position(|&x| x == 0).unwrap_or(b.len())
}

fn check_fast_symlink<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode) {
    let what = if inode.has_flag(FL_EXTENTS) {
        Some("fast symlink has the extents flag".to_string())
    } else if inode.has_flag(FL_INDEX) {
        Some("symlink has the index flag".to_string())
    } else if strnlen(&inode.block) as u64 != inode.size {
        Some(format!("target is {} bytes, i_size says {}", strnlen(&inode.block), inode.size))
    } else {
        None
    };
    if let Some(what) = what {
        c.report(Problem::Symlink { ino, what });
    }
}

fn check_slow_symlink<D: BlockDevice>(c: &mut Checker<D>, ino: InodeNumber, inode: &Inode, m: &Mapping) {
    let bs = u64::from(c.geo.block_size);
    let one = match m.extents.as_slice() {
        [e] if e.logical == 0 && e.len == 1 && m.depth == 0 && !e.unwritten => Some(e.physical),
        _ => None,
    };
    let what = if inode.size == 0 {
        Some("i_size is 0".to_string())
    } else if inode.size >= bs {
        Some(format!("target of {} bytes does not fit one block", inode.size))
    } else if let Some(blk) = one {
        match c.disk.block(blk) {
            Ok(b) if strnlen(&b) as u64 == inode.size => None,
            Ok(b) => Some(format!("target is {} bytes, i_size says {}", strnlen(&b), inode.size)),
            Err(p) => {
                c.report(p);
                None
            }
        }
    } else {
        Some(format!("maps {} extents, not one block at 0", m.extents.len()))
    };
    if let Some(what) = what {
        c.report(Problem::Symlink { ino, what });
    }
}
