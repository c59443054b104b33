//! The page cache's behaviour through its own API: folio geometry for every
//! block and page size, dirty runs, invalidation, LRU eviction.

use ext4_model::{InodeJournalMode, MountConfig};

use super::*;
use crate::memory::BoundedFolios;

const BLOCK_SIZES: [u32; 7] = [1024, 2048, 4096, 8192, 16384, 32768, 65536];
const PAGE_SIZES: [u32; 3] = [4096, 16384, 65536];

fn cache(ps: u32, bs: u32, bound: u64) -> PageCache {
    PageCache::new(super::geometry::Geometry::new(bs, ps).expect("a supported pair"), Box::new(BoundedFolios::new(ps, bound)))
}

/// Every folio of `ino`: orders within `lo..=hi`, aligned to its size,
/// whole blocks only.
fn check_geometry(pc: &PageCache, ino: InodeNumber, lo: u8, hi: u8, what: &str) {
    let (ps, bs) = (pc.geo.page_size(), pc.geo.block_size());
    for (index, f) in pc.mapping(ino).expect("a mapping").folios() {
        let o = f.order();
        assert!((lo..=hi).contains(&o), "{what}: order {o} outside {lo}..={hi}");
        assert_eq!(index % (1 << o), 0, "{what}: folio at page {index} not aligned to its order {o}");
        let bytes = f.len_bytes() as u64;
        assert!(bytes >= bs && bytes % bs == 0, "{what}: a {bytes}-byte folio holds no whole {bs}-byte blocks");
        assert_eq!((index * ps) % bs, 0, "{what}: a block straddles the folio at page {index}");
        assert_eq!(u64::from(f.blocks()), bytes / bs);
    }
}

#[test]
fn folio_orders_stay_within_the_mounts_bounds_for_every_block_and_page_size() {
    const BOUND: u64 = 4 << 20;
    for bs in BLOCK_SIZES {
        for ps in PAGE_SIZES {
            let what = format!("bs={bs} ps={ps}");
            let mount = MountConfig { block_size: bs, page_size: ps, ..MountConfig::default() }.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
            let (min, max) = mount.folio_orders(InodeJournalMode::Ordered);
            assert_eq!(u64::from(ps) << min, u64::from(bs.max(ps)), "{what}: the minimum order is one block or one page");
            let mut pc = cache(ps, bs, BOUND);
            let cap = pc.order_ceiling((min, max));
            assert!(cap >= min && cap <= max, "{what}: ceiling {cap}");
            assert!(u64::from(ps) << cap <= BOUND / 4 || cap == min, "{what}: a folio over a quarter of the bound");
            // An aligned stretch the size of the largest folio, and a ragged one.
            let big = 1u64 << cap;
            let (made, refused) = pc.add_folios(1, (min, max), big..2 * big, max);
            assert_eq!(refused, None, "{what}");
            assert_eq!(made.len(), 1, "{what}: one folio of the largest order fills an aligned stretch");
            pc.add_folios(1, (min, max), 3 * big + 1..3 * big + 1 + (5 << min), max);
            check_geometry(&pc, 1, min, cap, &what);
            // data=journal: the maximum is the minimum.
            let (jmin, jmax) = mount.folio_orders(InodeJournalMode::Journal);
            assert_eq!(jmin, jmax, "{what}");
            pc.add_folios(2, (jmin, jmax), 0..big, jmax);
            check_geometry(&pc, 2, jmin, jmin, &format!("{what} data=journal"));
        }
    }
}

#[test]
fn max_folio_order_caps_every_folio() {
    let mount: MountConfig = "max_folio_order=1".parse().unwrap();
    let (min, max) = mount.validate().unwrap().folio_orders(InodeJournalMode::Ordered);
    assert_eq!((min, max), (0, 1));
    let mut pc = cache(4096, 4096, 64 << 20);
    pc.add_folios(7, (min, max), 0..64, 9);
    check_geometry(&pc, 7, 0, 1, "max_folio_order=1");
    assert_eq!(pc.stats().folios_by_order, BTreeMap::from([(1, 32)]));
}

#[test]
fn a_refused_folio_falls_back_to_smaller_orders_down_to_the_minimum() {
    let mut pc = cache(4096, 4096, 64 << 10);
    // The bound's quarter caps folios at 16 KiB; fill 48 KiB of it, dirty.
    write(&mut pc, 1, 0, 48 << 10);
    assert_eq!(pc.in_use_bytes(), 48 << 10);
    // 16 KiB left: an order-2 folio fits, the next asks fall back and then
    // fail: direct reclaim finds nothing clean to drop.
    let (made, refused) = pc.add_folios(1, (0, 9), 16..32, 9);
    assert_eq!(made, vec![16]);
    assert!(refused.is_some());
    assert!(pc.stats().refused_folios >= 3, "order 2, 1 and 0 were each refused once");
    assert_eq!(pc.in_use_bytes(), 64 << 10);
}

/// A folio of the minimum order that memory refuses reclaims clean folios
/// (oldest first, never those of the range being filled) and is served.
#[test]
fn a_refused_minimum_order_folio_reclaims_clean_folios_directly() {
    let mut pc = cache(4096, 4096, 64 << 10);
    let (made, _) = pc.add_folios(1, (0, 9), 0..12, 9);
    assert_eq!(made.len(), 3, "clean, nothing dirtied");
    pc.add_folios(1, (0, 9), 16..20, 9);
    let (made, refused) = pc.add_folios(1, (0, 9), 20..32, 9);
    assert_eq!(refused, None);
    assert!(!made.is_empty() && (20..32).all(|b| pc.locate(1, b).is_some()), "every page of the range is cached");
    assert!(pc.stats().evicted_folios >= 3, "{:?}", pc.stats());
    assert!(pc.locate(1, 16).is_some() && pc.locate(1, 0).is_none(), "the oldest went, the newest stayed");
    assert_eq!(pc.in_use_bytes(), 64 << 10);
}

/// Writes `len` bytes at byte `at` of `ino`, making the folios first.
fn write(pc: &mut PageCache, ino: InodeNumber, at: u64, len: usize) {
    write_with(pc, ino, at, len, (0, 9));
}

fn write_with(pc: &mut PageCache, ino: InodeNumber, at: u64, len: usize, orders: (u8, u8)) {
    let ps = pc.geo.page_size();
    pc.add_folios(ino, orders, at / ps..(at + len as u64).div_ceil(ps), orders.1);
    for b in at / pc.geo.block_size()..(at + len as u64).div_ceil(pc.geo.block_size()) {
        let (index, i) = pc.locate(ino, b).unwrap();
        pc.folio_mut(ino, index).unwrap().set_uptodate(i);
    }
    assert!(pc.write_bytes(ino, at, &vec![7; len]));
}

#[test]
fn dirty_blocks_come_back_as_runs_across_folios() {
    let mut pc = cache(4096, 1024, 64 << 20);
    write(&mut pc, 5, 0, 3 * 1024);
    write(&mut pc, 5, 3 * 1024, 6 * 1024);
    write(&mut pc, 5, 20 * 1024, 1024);
    assert_eq!(pc.dirty_runs(5, 0), vec![0..9, 20..21]);
    assert_eq!(pc.dirty_runs(5, 4), vec![4..9, 20..21]);
    let (index, i) = pc.locate(5, 4).unwrap();
    pc.mark_clean(5, index, i);
    assert_eq!(pc.dirty_runs(5, 0), vec![0..4, 5..9, 20..21]);
    assert_eq!(pc.dirty_inodes(), vec![5]);
    let mut out = vec![0u8; 9 * 1024];
    assert!(pc.read_bytes(5, 0, &mut out).is_empty(), "everything written is uptodate");
    assert!(out.iter().all(|b| *b == 7));
}

#[test]
fn invalidating_drops_whole_folios_and_forgets_blocks_of_straddling_ones() {
    let mut pc = cache(4096, 1024, 64 << 20);
    // Four folios of four pages, sixteen blocks each.
    write_with(&mut pc, 3, 0, 64 << 10, (0, 2));
    let before = pc.in_use_bytes();
    // Blocks 6..64: the first folio (blocks 0..16) straddles the cut.
    pc.invalidate(3, 6..64);
    assert_eq!(pc.dirty_runs(3, 0), vec![0..6]);
    assert_eq!(pc.in_use_bytes(), before / 4, "folios wholly past the cut went");
    let (index, i) = pc.locate(3, 6).expect("the straddling folio stays");
    let f = pc.folio(3, index).unwrap();
    assert!(!f.is_uptodate(i) && !f.is_dirty(i));
    pc.drop_mapping(3);
    assert_eq!(pc.in_use_bytes(), 0, "dropping a mapping gives back all its memory");
}

#[test]
fn eviction_takes_clean_folios_oldest_first_and_spares_dirty_and_named_ones() {
    let mut pc = cache(4096, 4096, 64 << 10);
    // Four clean folios of 16 KiB fill the bound.
    for ino in 1..=4 {
        let (made, _) = pc.add_folios(ino, (0, 2), 0..4, 2);
        assert_eq!(made.len(), 1);
    }
    write(&mut pc, 2, 0, 4096);
    pc.touch(1, 0);
    // Oldest is 1, but it was touched again: 3 goes first, 2 is dirty.
    assert!(pc.evict_clean(16 << 10, None));
    assert!(pc.mapping(3).is_some_and(|m| m.folios().count() == 0));
    assert!(pc.folio(1, 0).is_some() && pc.folio(2, 0).is_some() && pc.folio(4, 0).is_some());
    // Spared: ino 4's pages; 1 goes instead.
    pc.add_folios(3, (0, 2), 0..4, 2);
    assert!(pc.evict_clean(16 << 10, Some((4, 0..4))));
    assert!(pc.folio(1, 0).is_none() && pc.folio(4, 0).is_some());
    assert_eq!(pc.oldest_dirty_inode(), Some(2));
    assert_eq!(pc.stats().evicted_folios, 2);
    // Nothing clean left but what is spared: no room.
    assert!(!pc.evict_clean(48 << 10, Some((4, 0..4))));
}
