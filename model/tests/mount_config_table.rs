//! Mount-config validation over every (block size, page size, data mode,
//! delalloc, journal) combination, against ext4's rules written as a table.

use ext4_model::{ConfigError, DataMode, MountConfig};

const BLOCK_SIZES: [u32; 11] = [0, 512, 1000, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072];
const PAGE_SIZES: [u32; 4] = [4096, 8192, 16384, 65536];
const MODES: [Option<DataMode>; 4] = [None, Some(DataMode::Ordered), Some(DataMode::Writeback), Some(DataMode::Journal)];
const DELALLOC: [Option<bool>; 3] = [None, Some(true), Some(false)];

fn config(bs: u32, ps: u32, data: Option<DataMode>, delalloc: Option<bool>, journal: bool) -> MountConfig {
    MountConfig { block_size: bs, page_size: ps, data, delalloc, has_journal: journal, ..MountConfig::default() }
}

/// The rules, one per line, in the order ext4 applies them.
fn expected(bs: u32, ps: u32, data: Option<DataMode>, delalloc: Option<bool>, journal: bool) -> Result<(bool, bool), ConfigError> {
    let valid_bs = [1024, 2048, 4096, 8192, 16384, 32768, 65536].contains(&bs);
    if !valid_bs {
        return Err(ConfigError::BlockSize(bs));
    }
    if ![4096, 16384, 65536].contains(&ps) {
        return Err(ConfigError::PageSize(ps));
    }
    match (journal, data) {
        (false, Some(DataMode::Writeback)) => Err(ConfigError::DataModeWithoutJournal(DataMode::Writeback)),
        (false, Some(DataMode::Journal)) => Err(ConfigError::DataModeWithoutJournal(DataMode::Journal)),
        (true, Some(DataMode::Journal)) if delalloc == Some(true) => Err(ConfigError::JournalDataWithDelalloc),
        // data=journal turns a default delalloc off and drops dioread_nolock.
        (true, Some(DataMode::Journal)) => Ok((false, false)),
        _ => Ok((delalloc.unwrap_or(true), true)),
    }
}

#[test]
fn every_combination_follows_the_table() {
    let mut checked = 0;
    let mut refused = 0;
    for bs in BLOCK_SIZES {
        for ps in PAGE_SIZES {
            for data in MODES {
                for delalloc in DELALLOC {
                    for journal in [true, false] {
                        let got = config(bs, ps, data, delalloc, journal).validate();
                        let want = expected(bs, ps, data, delalloc, journal);
                        match (&got, &want) {
                            (Ok(m), Ok((d, dio))) => {
                                assert_eq!((m.delalloc, m.dioread_nolock), (*d, *dio), "bs {bs} ps {ps} {data:?} {delalloc:?} j {journal}");
                                assert_eq!(m.data.is_some(), journal);
                                // Every folio holds at least one block.
                                assert!((ps as u64) << m.min_folio_order >= bs as u64);
                                assert!(m.max_folio_order >= m.min_folio_order);
                                if data == Some(DataMode::Journal) {
                                    assert_eq!(m.max_folio_order, m.min_folio_order);
                                }
                            }
                            (Err(g), Err(w)) => {
                                assert_eq!(g, w, "bs {bs} ps {ps} {data:?} {delalloc:?} j {journal}");
                                assert_eq!(g.errno(), ext4_model::Errno::EINVAL);
                                refused += 1;
                            }
                            _ => panic!("bs {bs} ps {ps} {data:?} {delalloc:?} journal {journal}: got {got:?}, want {want:?}"),
                        }
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 11 * 4 * 4 * 3 * 2);
    assert!(refused > 0 && refused < checked);
}

#[test]
fn folio_orders_for_each_block_and_page_size() {
    // (bs, ps, min order, max order)
    let rows = [
        (1024, 4096, 0, 9),
        (4096, 4096, 0, 9),
        (16384, 4096, 2, 9),
        (65536, 4096, 4, 9),
        (1024, 16384, 0, 7),
        (4096, 16384, 0, 9),
        (65536, 16384, 2, 11),
        (1024, 65536, 0, 5),
        (4096, 65536, 0, 7),
        (65536, 65536, 0, 11),
    ];
    for (bs, ps, min, max) in rows {
        let m = config(bs, ps, None, None, true).validate().unwrap();
        assert_eq!((m.min_folio_order, m.max_folio_order), (min, max), "bs {bs} ps {ps}");
    }
}

#[test]
fn folio_order_cap_is_checked() {
    let mut c = config(65536, 4096, None, None, true);
    c.max_folio_order = Some(3);
    assert_eq!(c.validate(), Err(ConfigError::FolioOrderBelowBlock { requested: 3, minimum: 4, block_size: 65536 }));
    c.max_folio_order = Some(4);
    assert_eq!(c.validate().unwrap().max_folio_order, 4);
    c.max_folio_order = Some(200);
    assert_eq!(c.validate(), Err(ConfigError::FolioOrderTooLarge { requested: 200, limit: 9, page_size: 4096 }));
}

#[test]
fn journal_async_commit_rules() {
    let mut c = config(4096, 4096, None, None, true);
    c.journal_async_commit = true;
    assert_eq!(c.validate(), Err(ConfigError::AsyncCommitWithOrdered));
    c.data = Some(DataMode::Writeback);
    assert!(c.validate().is_ok());
    c.data = Some(DataMode::Journal);
    assert!(c.validate().is_ok());
    c.has_journal = false;
    c.data = None;
    assert_eq!(c.validate(), Err(ConfigError::AsyncCommitWithoutJournal));
}

#[test]
fn stream_request_must_be_positive_and_group_prealloc_may_be_off() {
    let mut c = MountConfig::default();
    c.alloc.stream_request_blocks = 0;
    assert_eq!(c.validate(), Err(ConfigError::AllocKnobZero("stream_request_blocks")));
    let mut c = MountConfig::default();
    c.alloc.group_prealloc_blocks = 0;
    assert!(c.validate().is_ok(), "mb_group_prealloc=0 turns locality groups off, as in ext4");
}

#[test]
fn inode_journal_mode_follows_ext4() {
    use ext4_model::InodeJournalMode::*;
    let ordered = MountConfig::default().validate().unwrap();
    assert_eq!(ordered.inode_journal_mode(true, false), Ordered);
    // Under delalloc, +j only stores the flag.
    assert_eq!(ordered.inode_journal_mode(true, true), Ordered);
    assert_eq!(ordered.inode_journal_mode(false, false), Journal);
    let nodelalloc = MountConfig { delalloc: Some(false), ..MountConfig::default() }.validate().unwrap();
    assert_eq!(nodelalloc.inode_journal_mode(true, true), Journal);
    let wb = MountConfig { data: Some(DataMode::Writeback), ..MountConfig::default() }.validate().unwrap();
    assert_eq!(wb.inode_journal_mode(true, false), Writeback);
    let none = MountConfig { has_journal: false, ..MountConfig::default() }.validate().unwrap();
    assert_eq!(none.inode_journal_mode(false, true), Writeback);
    let (min, max) = nodelalloc.folio_orders(Journal);
    assert_eq!(min, max);
}
