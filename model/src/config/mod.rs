//! Mount configuration and its validation, following where ext4 refuses,
//! silently drops, or implies options (fs/ext4/super.c, 6.18 plus the
//! block-size > page-size series).
//!
//! - `data=journal` with an explicit `delalloc` is refused; a default delalloc is
//!   turned off, and `dioread_nolock` is dropped.
//! - `journal_async_commit` with `data=ordered` is refused.
//! - Without a journal, an explicit `data=` other than the default, or
//!   `journal_async_commit`, is refused.
//! - Block size 1 KiB..64 KiB (power of two), page size 4/16/64 KiB. Block size
//!   above page size is valid; every folio then has order >= log2(bs/ps).

use thiserror::Error;

use crate::Errno;

mod text;

pub const MIN_BLOCK_SIZE: u32 = 1024;
pub const MAX_BLOCK_SIZE: u32 = 65536;
pub const PAGE_SIZES: [u32; 3] = [4096, 16384, 65536];
/// Largest bigalloc cluster (ext4's EXT4_MAX_CLUSTER_LOG_SIZE, 2^29 bytes).
pub const MAX_CLUSTER_SIZE: u32 = 1 << 29;

/// How file data relates to the journal (the `data=` mount option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, arbitrary::Arbitrary)]
pub enum DataMode {
    /// Data is written before the metadata that points at it commits (the default).
    Ordered,
    /// No ordering: after a crash, newly allocated blocks may hold stale data.
    Writeback,
    /// Data goes through the journal with the metadata.
    Journal,
}

/// Knobs of the engine's allocator. ext4 has no mount options for most of them;
/// they are here so both sides of a policy can be simulated side by side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, arbitrary::Arbitrary)]
pub struct AllocPolicy {
    /// Skip never-initialised (BLOCK_UNINIT) groups at the cheap allocation
    /// criteria, as mballoc did before commit 75507efb1372. Default: false.
    pub skip_block_uninit: bool,
    /// Spread top-level directories over flex groups (Orlov). Default: true.
    pub orlov: bool,
    /// Requests up to this many blocks use the per-CPU locality-group
    /// preallocation; larger ones are streams (mb_stream_req). Default: 16.
    pub stream_request_blocks: u32,
    /// Size of a locality-group preallocation in blocks (mb_group_prealloc).
    /// Default: 512; 0 turns locality-group preallocation off, as in ext4.
    pub group_prealloc_blocks: u32,
}

impl Default for AllocPolicy {
    fn default() -> Self {
        AllocPolicy { skip_block_uninit: false, orlov: true, stream_request_blocks: 16, group_prealloc_blocks: 512 }
    }
}

/// What a user asks for at mount time. `None` means "not given": ext4
/// distinguishes a default from an explicit option (data=journal + explicit
/// delalloc fails, + default delalloc does not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, arbitrary::Arbitrary)]
pub struct MountConfig {
    /// Filesystem block size in bytes. Default: 4096.
    pub block_size: u32,
    /// Page size of the simulated machine in bytes. Default: 4096.
    pub page_size: u32,
    /// bigalloc: space is allocated in clusters of this many bytes (a power
    /// of two above the block size, at most [`MAX_CLUSTER_SIZE`]; mke2fs `-O
    /// bigalloc -C`, `cluster=` here). Default (None): one block per cluster.
    pub cluster_size: Option<u32>,
    /// The image has a journal (feature has_journal). Default: true.
    pub has_journal: bool,
    /// `data=`. Default (None): ordered.
    pub data: Option<DataMode>,
    /// `delalloc` / `nodelalloc`. Default (None): on, unless data=journal.
    pub delalloc: Option<bool>,
    /// `dioread_nolock` / `dioread_lock`. Default (None): on.
    pub dioread_nolock: Option<bool>,
    /// `journal_async_commit`. Default: false.
    pub journal_async_commit: bool,
    /// `auto_da_alloc` / `noauto_da_alloc`: a file truncated to 0 and
    /// rewritten, or renamed over another, has its delayed blocks written
    /// back (at its close, at the rename). Default: true.
    pub auto_da_alloc: bool,
    /// `commit=` seconds: how long a transaction may run before jbd2 commits
    /// it. Default (None, or 0 as ext4 reads it): 5.
    pub commit_secs: Option<u32>,
    /// Cap on page-cache folio order. Default (None): ext4's own maximum.
    pub max_folio_order: Option<u8>,
    /// `ro`. Default: false.
    pub read_only: bool,
    pub alloc: AllocPolicy,
    /// The engine's page-cache bound in MiB of simulated memory
    /// (`page_cache_mb=`, the test bed's). Default (None):
    /// [`DEFAULT_PAGE_CACHE_MB`]. The model's answers do not depend on it.
    pub page_cache_mb: Option<u32>,
}

/// The page cache's bound when `page_cache_mb=` is not given: fixed, never
/// derived from the host, so a run is the same everywhere.
pub const DEFAULT_PAGE_CACHE_MB: u32 = 64;
/// Bounds of `page_cache_mb=`: one MiB holds the largest minimum-order folio
/// (a 64 KiB block) many times over; the top keeps byte counts far from overflow.
pub const PAGE_CACHE_MB_RANGE: std::ops::RangeInclusive<u32> = 1..=1 << 20;
/// The bound holds at least this many of the smallest folios (a block or
/// a page, the larger): metadata blocks take memory from it too.
pub const MIN_FOLIOS_IN_MEMORY: u32 = 256;

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            block_size: 4096,
            page_size: 4096,
            cluster_size: None,
            has_journal: true,
            data: None,
            delalloc: None,
            dioread_nolock: None,
            journal_async_commit: false,
            auto_da_alloc: true,
            commit_secs: None,
            max_folio_order: None,
            read_only: false,
            alloc: AllocPolicy::default(),
            page_cache_mb: None,
        }
    }
}

/// Why a mount configuration is refused. Every variant is EINVAL to a user.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("block size {0} is not a power of two in 1024..=65536")]
    BlockSize(u32),
    #[error("page size {0} is not one of 4096, 16384, 65536")]
    PageSize(u32),
    #[error("cluster size {cluster_size} is not a power of two above the block size {block_size} and at most 2^29")]
    ClusterSize { cluster_size: u32, block_size: u32 },
    #[error("bigalloc with 1024-byte blocks is not modelled (the superblock sits in block 1 of a group starting at block 0)")]
    BigallocSmallBlocks,
    #[error("max folio order {requested} is below {minimum}, the order of one {block_size}-byte block")]
    FolioOrderBelowBlock { requested: u8, minimum: u8, block_size: u32 },
    #[error("max folio order {requested} exceeds the page cache's limit {limit} for {page_size}-byte pages")]
    FolioOrderTooLarge { requested: u8, limit: u8, page_size: u32 },
    #[error("can't mount with both data=journal and delalloc")]
    JournalDataWithDelalloc,
    #[error("can't mount with journal_async_commit in data=ordered mode")]
    AsyncCommitWithOrdered,
    #[error("can't mount with journal_async_commit, fs mounted w/o journal")]
    AsyncCommitWithoutJournal,
    #[error("can't mount with data={0:?}, fs mounted w/o journal")]
    DataModeWithoutJournal(DataMode),
    #[error("allocator knob {0} must be at least 1")]
    AllocKnobZero(&'static str),
    #[error("page_cache_mb={0} is outside 1..=1048576")]
    PageCacheSize(u32),
    #[error("page_cache_mb={mb} holds fewer than {MIN_FOLIOS_IN_MEMORY} folios of {folio_bytes} bytes (at least {need_mb} MiB): metadata shares it and a transaction pins its blocks until it commits")]
    PageCacheTooSmall { mb: u32, folio_bytes: u32, need_mb: u32 },
    #[error("invalid commit interval {0}, must be smaller than {COMMIT_SECS_LIMIT}")]
    CommitInterval(u32),
}

impl ConfigError {
    pub fn errno(&self) -> Errno {
        Errno::EINVAL
    }
}

/// ext4 refuses a commit interval of INT_MAX / HZ seconds or more; HZ is
/// the kernel's build choice, 1000 here (the strictest common one).
pub const COMMIT_SECS_LIMIT: u32 = i32::MAX as u32 / 1000;
/// jbd2's JBD2_DEFAULT_MAX_COMMIT_AGE.
pub const DEFAULT_COMMIT_SECS: u32 = 5;

/// `commit=` as ext4 reads it: 0 is the default.
fn commit_interval_secs(given: Option<u32>) -> Result<u32, ConfigError> {
    match given.unwrap_or(0) {
        0 => Ok(DEFAULT_COMMIT_SECS),
        n if n > COMMIT_SECS_LIMIT => Err(ConfigError::CommitInterval(n)),
        n => Ok(n),
    }
}

/// The page cache's largest folio order for a page size: the PMD order capped
/// by the xarray's limit (MAX_PAGECACHE_ORDER).
pub fn max_pagecache_order(page_size: u32) -> u8 {
    const MAX_XAS_ORDER: u8 = 11;
    let page_shift = page_size.trailing_zeros();
    // A PMD maps page_size / 8 entries of page_size each.
    let pmd_order = (page_shift - 3) as u8;
    pmd_order.min(MAX_XAS_ORDER)
}

/// A configuration ext4 accepts, with every default and implication resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveMount {
    pub block_size: u32,
    pub page_size: u32,
    /// Bytes per allocation cluster: the block size without bigalloc.
    pub cluster_size: u32,
    /// None when the image has no journal.
    pub data: Option<DataMode>,
    pub delalloc: bool,
    pub dioread_nolock: bool,
    pub journal_async_commit: bool,
    pub auto_da_alloc: bool,
    /// Seconds a transaction may run before the commit timer commits it.
    pub commit_interval_secs: u32,
    /// Every page-cache folio has at least this order: log2(bs/ps) when bs > ps.
    pub min_folio_order: u8,
    /// Largest folio order for inodes not in data journaling.
    pub max_folio_order: u8,
    pub read_only: bool,
    pub alloc: AllocPolicy,
    /// The page cache's bound in bytes (the engine's; the model ignores it).
    pub page_cache_bytes: u64,
}

impl MountConfig {
    /// Resolves defaults the way ext4 does, or says why ext4 refuses the mount.
    pub fn validate(&self) -> Result<EffectiveMount, ConfigError> {
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
            return Err(ConfigError::BlockSize(bs));
        }
        let ps = self.page_size;
        if !PAGE_SIZES.contains(&ps) {
            return Err(ConfigError::PageSize(ps));
        }
        let cluster_size = self.cluster_size.unwrap_or(bs);
        if self.cluster_size.is_some() && (!cluster_size.is_power_of_two() || cluster_size <= bs || cluster_size > MAX_CLUSTER_SIZE) {
            return Err(ConfigError::ClusterSize { cluster_size, block_size: bs });
        }
        if self.cluster_size.is_some() && bs == MIN_BLOCK_SIZE {
            return Err(ConfigError::BigallocSmallBlocks);
        }
        if self.alloc.stream_request_blocks == 0 {
            return Err(ConfigError::AllocKnobZero("stream_request_blocks"));
        }
        let page_cache_mb = self.page_cache_mb.unwrap_or(DEFAULT_PAGE_CACHE_MB);
        if !PAGE_CACHE_MB_RANGE.contains(&page_cache_mb) {
            return Err(ConfigError::PageCacheSize(page_cache_mb));
        }
        let folio_bytes = bs.max(ps);
        let need_mb = (u64::from(folio_bytes) * u64::from(MIN_FOLIOS_IN_MEMORY)).div_ceil(1 << 20);
        if u64::from(page_cache_mb) < need_mb {
            let need_mb = u32::try_from(need_mb).unwrap_or(u32::MAX);
            return Err(ConfigError::PageCacheTooSmall { mb: page_cache_mb, folio_bytes, need_mb });
        }

        let block_bits = bs.trailing_zeros();
        let page_shift = ps.trailing_zeros();
        let min_folio_order = block_bits.saturating_sub(page_shift) as u8;
        let limit = max_pagecache_order(ps);
        // ext4 bounds large folios to 2048 blocks to bound journal credits.
        let ext4_max = ((11 + block_bits - page_shift) as u8).min(limit);
        debug_assert!(ext4_max >= min_folio_order);
        let mut max_folio_order = ext4_max;
        if let Some(requested) = self.max_folio_order {
            if requested < min_folio_order {
                return Err(ConfigError::FolioOrderBelowBlock { requested, minimum: min_folio_order, block_size: bs });
            }
            if requested > limit {
                return Err(ConfigError::FolioOrderTooLarge { requested, limit, page_size: ps });
            }
            max_folio_order = requested.min(ext4_max);
        }

        let mut delalloc = self.delalloc.unwrap_or(true);
        let mut dioread_nolock = self.dioread_nolock.unwrap_or(true);
        let data = if self.has_journal {
            let mode = self.data.unwrap_or(DataMode::Ordered);
            if mode == DataMode::Journal {
                if self.delalloc == Some(true) {
                    return Err(ConfigError::JournalDataWithDelalloc);
                }
                delalloc = false;
                dioread_nolock = false;
                max_folio_order = min_folio_order;
            }
            if self.journal_async_commit && mode == DataMode::Ordered {
                return Err(ConfigError::AsyncCommitWithOrdered);
            }
            Some(mode)
        } else {
            if self.journal_async_commit {
                return Err(ConfigError::AsyncCommitWithoutJournal);
            }
            if let Some(mode) = self.data.filter(|m| *m != DataMode::Ordered) {
                return Err(ConfigError::DataModeWithoutJournal(mode));
            }
            None
        };

        Ok(EffectiveMount {
            block_size: bs,
            page_size: ps,
            cluster_size,
            data,
            delalloc,
            dioread_nolock,
            journal_async_commit: self.journal_async_commit,
            auto_da_alloc: self.auto_da_alloc,
            commit_interval_secs: commit_interval_secs(self.commit_secs)?,
            min_folio_order,
            max_folio_order,
            read_only: self.read_only,
            alloc: self.alloc,
            page_cache_bytes: u64::from(page_cache_mb) << 20,
        })
    }
}

/// How one inode's data is journaled (ext4_inode_journal_mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InodeJournalMode {
    Ordered,
    Writeback,
    Journal,
}

impl EffectiveMount {
    /// No journal means writeback; directories and symlinks are always journaled;
    /// the per-inode flag (chattr +j) takes effect only without delalloc.
    pub fn inode_journal_mode(&self, is_regular: bool, journal_data_flag: bool) -> InodeJournalMode {
        let Some(mode) = self.data else {
            return InodeJournalMode::Writeback;
        };
        if !is_regular || mode == DataMode::Journal || (journal_data_flag && !self.delalloc) {
            return InodeJournalMode::Journal;
        }
        match mode {
            DataMode::Ordered => InodeJournalMode::Ordered,
            DataMode::Writeback => InodeJournalMode::Writeback,
            DataMode::Journal => InodeJournalMode::Journal,
        }
    }

    /// Folio order range for an inode in the given mode: journaled data uses
    /// only minimum-order folios.
    pub fn folio_orders(&self, mode: InodeJournalMode) -> (u8, u8) {
        match mode {
            InodeJournalMode::Journal => (self.min_folio_order, self.min_folio_order),
            _ => (self.min_folio_order, self.max_folio_order),
        }
    }

    /// Largest file size (s_maxbytes for extent files with huge_file):
    /// the 32-bit logical block space.
    pub fn max_file_size(&self) -> u64 {
        ((1u64 << 32) - 1) << self.block_size.trailing_zeros()
    }
}

