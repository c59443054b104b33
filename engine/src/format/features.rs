//! Feature bits of the superblock's three feature words (and the journal's
//! incompat word): their constants, which of them the engine reads, and their
//! names as dumpe2fs prints them, so an Unsupported error names what it refuses.
//!
//! - compat: an implementation that does not know the bit may still write.
//! - ro_compat: it may only read.
//! - incompat: it must not touch the filesystem at all.
//!
//! This module depends on nothing else in the crate, so `error` can name
//! feature words and bits without an import cycle.

/// Which feature word a set of bits came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureWord {
    Compat,
    Incompat,
    RoCompat,
    /// A jbd2 journal's incompat word.
    JournalIncompat,
}

/// Feature bit constants, by word.
pub mod feature {
    pub const COMPAT_DIR_PREALLOC: u32 = 0x1;
    pub const COMPAT_IMAGIC_INODES: u32 = 0x2;
    pub const COMPAT_HAS_JOURNAL: u32 = 0x4;
    pub const COMPAT_EXT_ATTR: u32 = 0x8;
    pub const COMPAT_RESIZE_INODE: u32 = 0x10;
    pub const COMPAT_DIR_INDEX: u32 = 0x20;
    pub const COMPAT_LAZY_BG: u32 = 0x40;
    pub const COMPAT_EXCLUDE_BITMAP: u32 = 0x100;
    pub const COMPAT_SPARSE_SUPER2: u32 = 0x200;
    pub const COMPAT_FAST_COMMIT: u32 = 0x400;
    pub const COMPAT_STABLE_INODES: u32 = 0x800;
    pub const COMPAT_ORPHAN_FILE: u32 = 0x1000;

    pub const INCOMPAT_COMPRESSION: u32 = 0x1;
    pub const INCOMPAT_FILETYPE: u32 = 0x2;
    pub const INCOMPAT_RECOVER: u32 = 0x4;
    pub const INCOMPAT_JOURNAL_DEV: u32 = 0x8;
    pub const INCOMPAT_META_BG: u32 = 0x10;
    pub const INCOMPAT_EXTENTS: u32 = 0x40;
    pub const INCOMPAT_64BIT: u32 = 0x80;
    pub const INCOMPAT_MMP: u32 = 0x100;
    pub const INCOMPAT_FLEX_BG: u32 = 0x200;
    pub const INCOMPAT_EA_INODE: u32 = 0x400;
    pub const INCOMPAT_DIRDATA: u32 = 0x1000;
    pub const INCOMPAT_CSUM_SEED: u32 = 0x2000;
    pub const INCOMPAT_LARGEDIR: u32 = 0x4000;
    pub const INCOMPAT_INLINE_DATA: u32 = 0x8000;
    pub const INCOMPAT_ENCRYPT: u32 = 0x10000;
    pub const INCOMPAT_CASEFOLD: u32 = 0x20000;

    pub const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
    pub const RO_COMPAT_LARGE_FILE: u32 = 0x2;
    pub const RO_COMPAT_BTREE_DIR: u32 = 0x4;
    pub const RO_COMPAT_HUGE_FILE: u32 = 0x8;
    pub const RO_COMPAT_GDT_CSUM: u32 = 0x10;
    pub const RO_COMPAT_DIR_NLINK: u32 = 0x20;
    pub const RO_COMPAT_EXTRA_ISIZE: u32 = 0x40;
    pub const RO_COMPAT_HAS_SNAPSHOT: u32 = 0x80;
    pub const RO_COMPAT_QUOTA: u32 = 0x100;
    pub const RO_COMPAT_BIGALLOC: u32 = 0x200;
    pub const RO_COMPAT_METADATA_CSUM: u32 = 0x400;
    pub const RO_COMPAT_REPLICA: u32 = 0x800;
    pub const RO_COMPAT_READONLY: u32 = 0x1000;
    pub const RO_COMPAT_PROJECT: u32 = 0x2000;
    pub const RO_COMPAT_SHARED_BLOCKS: u32 = 0x4000;
    pub const RO_COMPAT_VERITY: u32 = 0x8000;
    pub const RO_COMPAT_ORPHAN_PRESENT: u32 = 0x10000;

    /// Incompat bits the engine understands; anything else makes an image unreadable.
    pub const SUPPORTED_INCOMPAT: u32 = INCOMPAT_FILETYPE
        | INCOMPAT_RECOVER
        | INCOMPAT_EXTENTS
        | INCOMPAT_64BIT
        | INCOMPAT_MMP
        | INCOMPAT_FLEX_BG
        | INCOMPAT_EA_INODE
        | INCOMPAT_CSUM_SEED
        | INCOMPAT_LARGEDIR;
    /// Ro-compat bits the engine understands.
    pub const SUPPORTED_RO_COMPAT: u32 = RO_COMPAT_SPARSE_SUPER
        | RO_COMPAT_LARGE_FILE
        | RO_COMPAT_HUGE_FILE
        | RO_COMPAT_GDT_CSUM
        | RO_COMPAT_BIGALLOC
        | RO_COMPAT_DIR_NLINK
        | RO_COMPAT_EXTRA_ISIZE
        | RO_COMPAT_QUOTA
        | RO_COMPAT_METADATA_CSUM
        | RO_COMPAT_READONLY
        | RO_COMPAT_PROJECT
        | RO_COMPAT_VERITY
        | RO_COMPAT_ORPHAN_PRESENT;
}

const COMPAT_NAMES: &[(u32, &str)] = &[
    (feature::COMPAT_DIR_PREALLOC, "dir_prealloc"),
    (feature::COMPAT_IMAGIC_INODES, "imagic_inodes"),
    (feature::COMPAT_HAS_JOURNAL, "has_journal"),
    (feature::COMPAT_EXT_ATTR, "ext_attr"),
    (feature::COMPAT_RESIZE_INODE, "resize_inode"),
    (feature::COMPAT_DIR_INDEX, "dir_index"),
    (feature::COMPAT_LAZY_BG, "lazy_bg"),
    (feature::COMPAT_EXCLUDE_BITMAP, "exclude_bitmap"),
    (feature::COMPAT_SPARSE_SUPER2, "sparse_super2"),
    (feature::COMPAT_FAST_COMMIT, "fast_commit"),
    (feature::COMPAT_STABLE_INODES, "stable_inodes"),
    (feature::COMPAT_ORPHAN_FILE, "orphan_file"),
];
const INCOMPAT_NAMES: &[(u32, &str)] = &[
    (feature::INCOMPAT_COMPRESSION, "compression"),
    (feature::INCOMPAT_FILETYPE, "filetype"),
    (feature::INCOMPAT_RECOVER, "needs_recovery"),
    (feature::INCOMPAT_JOURNAL_DEV, "journal_dev"),
    (feature::INCOMPAT_META_BG, "meta_bg"),
    (feature::INCOMPAT_EXTENTS, "extent"),
    (feature::INCOMPAT_64BIT, "64bit"),
    (feature::INCOMPAT_MMP, "mmp"),
    (feature::INCOMPAT_FLEX_BG, "flex_bg"),
    (feature::INCOMPAT_EA_INODE, "ea_inode"),
    (feature::INCOMPAT_DIRDATA, "dirdata"),
    (feature::INCOMPAT_CSUM_SEED, "metadata_csum_seed"),
    (feature::INCOMPAT_LARGEDIR, "large_dir"),
    (feature::INCOMPAT_INLINE_DATA, "inline_data"),
    (feature::INCOMPAT_ENCRYPT, "encrypt"),
    (feature::INCOMPAT_CASEFOLD, "casefold"),
];
const RO_COMPAT_NAMES: &[(u32, &str)] = &[
    (feature::RO_COMPAT_SPARSE_SUPER, "sparse_super"),
    (feature::RO_COMPAT_LARGE_FILE, "large_file"),
    (feature::RO_COMPAT_BTREE_DIR, "btree_dir"),
    (feature::RO_COMPAT_HUGE_FILE, "huge_file"),
    (feature::RO_COMPAT_GDT_CSUM, "uninit_bg"),
    (feature::RO_COMPAT_DIR_NLINK, "dir_nlink"),
    (feature::RO_COMPAT_EXTRA_ISIZE, "extra_isize"),
    (feature::RO_COMPAT_HAS_SNAPSHOT, "snapshot"),
    (feature::RO_COMPAT_QUOTA, "quota"),
    (feature::RO_COMPAT_BIGALLOC, "bigalloc"),
    (feature::RO_COMPAT_METADATA_CSUM, "metadata_csum"),
    (feature::RO_COMPAT_REPLICA, "replica"),
    (feature::RO_COMPAT_READONLY, "read-only"),
    (feature::RO_COMPAT_PROJECT, "project"),
    (feature::RO_COMPAT_SHARED_BLOCKS, "shared_blocks"),
    (feature::RO_COMPAT_VERITY, "verity"),
    (feature::RO_COMPAT_ORPHAN_PRESENT, "orphan_present"),
];
const JOURNAL_INCOMPAT_NAMES: &[(u32, &str)] = &[
    (0x1, "journal_incompat_revoke"),
    (0x2, "journal_64bit"),
    (0x4, "journal_async_commit"),
    (0x8, "journal_checksum_v2"),
    (0x10, "journal_checksum_v3"),
    (0x20, "journal_fast_commit"),
];

/// Names the bits of a feature word the way dumpe2fs does; unnamed bits print in hex.
pub fn feature_names(word: FeatureWord, bits: u32) -> String {
    let table = match word {
        FeatureWord::Compat => COMPAT_NAMES,
        FeatureWord::Incompat => INCOMPAT_NAMES,
        FeatureWord::RoCompat => RO_COMPAT_NAMES,
        FeatureWord::JournalIncompat => JOURNAL_INCOMPAT_NAMES,
    };
    let mut names: Vec<String> = Vec::new();
    let mut rest = bits;
    for &(bit, name) in table {
        if bits & bit != 0 {
            names.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        names.push(format!("{rest:#x}"));
    }
    if names.is_empty() {
        "(none)".to_string()
    } else {
        names.join(" ")
    }
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_known_bits_and_shows_the_rest_in_hex() {
        assert_eq!(feature_names(FeatureWord::Compat, 0x4 | 0x20), "has_journal dir_index");
        assert_eq!(feature_names(FeatureWord::RoCompat, 0x400 | 0x8000_0000), "metadata_csum 0x80000000");
        assert_eq!(feature_names(FeatureWord::Incompat, 0), "(none)");
        assert_eq!(feature_names(FeatureWord::JournalIncompat, 0x12), "journal_64bit journal_checksum_v3");
    }

    #[test]
    fn supported_sets_exclude_layouts_the_engine_cannot_read() {
        for bit in [feature::INCOMPAT_META_BG, feature::INCOMPAT_INLINE_DATA, feature::INCOMPAT_JOURNAL_DEV] {
            assert_eq!(feature::SUPPORTED_INCOMPAT & bit, 0);
        }
    }
}
