//! Resealing what a mutation broke, on request: the checksums that would
//! otherwise stop a mutated image at the first check, so the mutation
//! reaches the parsers behind it.

use std::collections::BTreeMap;

use ext4_engine::device_mem::MemDevice;
use ext4_engine::format::checksum::inode_seed;
use ext4_engine::format::geometry::Geometry;
use ext4_engine::format::group_desc::{desc_checksum, DescChecksum, BG_CHECKSUM};
use ext4_engine::format::inode::seal_inode_checksum;
use ext4_engine::format::journal_superblock::{journal_sb_checksum, JournalSuperblock, JOURNAL_SB_SIZE, S_CHECKSUM};
use ext4_engine::format::superblock::{superblock_checksum, Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ext4_engine::format::{dirent, extent};
use ext4_engine::journal::block::{set_tail, Header, LogFormat, BLOCKTYPE_COMMIT, BLOCKTYPE_DESCRIPTOR, BLOCKTYPE_REVOKE};
use ext4_engine::journal::{commit, descriptor};

use super::template::{desc_at, patch, peek, LoggedCopy, Template};
use super::Region;

/// Recomputes the checksums of the mutated inodes, extent blocks and
/// directory leaf blocks (with metadata_csum), seeded as the template's
/// owners were.
pub(super) fn reseal_blocks(dev: &mut MemDevice, t: &Template, touched: &[(Region, u64)]) {
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
                let Some(h) = extent::stated_header(&block) else { continue };
                if extent::tail_offset(h.max) + 4 > block.len() {
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
pub(super) fn reseal_journal(dev: &mut MemDevice, t: &Template, touched: &[(Region, u64)]) -> usize {
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
pub(super) fn reseal(dev: &mut MemDevice) {
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

#[cfg(test)]
mod tests {
    use ext4_engine::device::{BlockDevice, IoClass};
    use ext4_engine::fs::Ext4;
    use ext4_engine::journal::block::HEADER_LEN;
    use ext4_model::MountConfig;

    use super::super::template::templates;
    use super::super::{mutate, run_input, Change, ImageRun, Input, Mutation, TEMPLATE_NAMES};
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
