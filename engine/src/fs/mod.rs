//! The mounted, writable filesystem: [`Ext4`] implements the model's
//! [`ext4_model::FileSystem`] over a [`BlockDevice`].
//!
//! Contract:
//! - **Answers are the model's.** Every op checks its errors in the model's
//!   order (see `ext4_model`'s namespace and data modules) and gives the same
//!   bytes, stat, listings and FIEMAP coverage.
//! - **Everything is cached.** Inodes, extent mappings, directories (with a
//!   name index), bitmaps and descriptors live in memory once touched, and
//!   metadata waits in the buffer cache until fsync/fdatasync/sync/unmount
//!   writes it back in order: extent trees and inodes, then bitmaps and
//!   descriptors, then the superblock, then a flush.
//! - **File data goes through the page cache** (`crate::pagecache`): reads
//!   see it first (dirty data is visible before write-back), fill folios
//!   with readahead, and go to the device for the rest; writes dirty whole
//!   or partial blocks (read-modify-write). The cache has a bound in
//!   simulated bytes (`page_cache_mb=`); over it, clean folios are evicted
//!   oldest first and dirty ones written back (`writepages`).
//! - **Delayed allocation.** Under delalloc a write reserves its holes as
//!   delayed extents (`crate::extent_status`) and maps nothing: ENOSPC is
//!   decided then, against free space less what is reserved; stat counts
//!   delayed blocks and FIEMAP reports them DELALLOC|UNKNOWN. Write-back
//!   allocates one request per contiguous delayed run. nodelalloc allocates
//!   at write time (unwritten under dioread_nolock); writes into unwritten
//!   extents convert them at write-back.
//! - **Write-back** runs on fsync/fdatasync (that file), sync and unmount
//!   (all files), FIEMAP_FLAG_SYNC, collapse/insert range (from the page
//!   holding the offset), a journal-flag switch (which then drops the
//!   inode's cache so its folio orders follow the new mode), and reclaim.
//!   Truncate, punch and zero-range drop or zero the cached range.
//! - **Crashes lose the cache.** [`Ext4::into_device_dropping_caches`]
//!   drops dirty folios and reservations with the rest; [`Ext4::shadow`]
//!   clones them, so a shadow unmount writes them back onto its own device.
//! - **Deterministic.** Timestamps come from the superblock's last write time
//!   plus an op counter in the nanoseconds, never from the wall clock.
//! - **Bad disk data is EIO, never a panic.** Device errors map to EIO (EROFS
//!   for a read-only device, ENOSPC for a full backing store); a folio no
//!   memory can be had for is ENOMEM.
//! - **Journaled.** With has_journal, sync/fsync/fdatasync/unmount commit
//!   the dirty metadata as one jbd2 transaction (`journaling`), after the
//!   data it is ordered after (data=ordered; data=writeback and data=journal
//!   inodes are ordered the same for now); mount replays a log a crash left
//!   behind. Without a journal writeback is in place.
//! - **Orphans.** Descriptors held across ops (`orphan`) keep an unlinked
//!   file alive; it goes on the superblock's orphan chain with the unlink
//!   and off it at the last close, and mount frees what a crash left there.
//! - **Split where ext4 sleeps.** fsync and chattr +j/-j can run in two
//!   halves (`split`) so a simulator runs other ops in between; a lock held
//!   across the halves is real (`locks`): ops that would wait on it say so.
//! - htree directories are read through their leaves; the first edit drops
//!   the index (the directory turns linear, as ext4 does when it cannot use
//!   an index). Not yet: keeping an index, block-mapped files, logging file
//!   data of data=journal inodes (written like ordered), letting
//!   data=writeback commits overtake data, commit and write-back timers.

mod auto_da_alloc;
mod buffered;
mod clusters;
mod cpu_work;
mod data;
mod data_journal;
mod direct_io;
mod fallocate;
mod fiemap;
mod flusher;
mod inode_flags;
mod journal_switch;
mod journaling;
mod lifecycle;
mod lock_plan;
mod mapped_write;
pub mod locks;
mod memory;
mod namespace;
mod node;
mod orphan;
mod resolve;
mod seek;
mod split;
mod syscalls;
mod timers;
#[cfg(feature = "test-hooks")]
pub mod test_hooks;
mod writeback;
mod writepages;
mod truncate_parts;
mod direct_io_flight;
mod direct_read_parts;
mod direct_write_parts;
mod fallocate_parts;
mod punch_parts;
mod read_parts;
mod write_parts;
#[cfg(test)]
mod data_path_tests;
#[cfg(test)]
mod placement_tests;

use std::collections::{BTreeMap, BTreeSet};

use ext4_model::{EffectiveMount, Errno, MountConfig};

use crate::alloc::Allocator;
use crate::cache::BufferCache;
use crate::device::{BlockDevice, DeviceError};
use crate::error::{Error, Result, Unsupported};
use crate::format::geometry::Geometry;
use crate::format::group_desc::DescChecksum;
use crate::format::inode::Timestamp;
use crate::format::superblock::{feature, Superblock};
use crate::format::InodeNumber;
use crate::image::Image;
use crate::journal::{recovery, Journal};
use crate::memory::{BoundedFolios, FolioAllocator};
use crate::pagecache::PageCache;

pub use journal_switch::SwitchTicket;
pub use orphan::OrphanStats;
pub use split::{SecondHalf, SyncTicket, WholeOp};
pub use truncate_parts::{TruncateInFlight, TruncatePartRan};
pub use direct_io_flight::DirectIoInFlight;
pub use direct_read_parts::DirectReadInFlight;
pub use direct_write_parts::DirectWriteInFlight;
pub use fallocate_parts::{FallocateInFlight, FallocatePartRan};
pub use write_parts::{PartRan, WriteInFlight};
pub use read_parts::{ReadInFlight, ReadPartRan};
pub use timers::TimerStats;
pub use flusher::{FlusherStats, FlusherStep};
pub use cpu_work::CpuWork;
pub use direct_io::DirectIoStats;
pub use mapped_write::MappedWriteStats;
pub use memory::KswapdPass;
pub use writepages::{DataPathStats, WritebackStats};
use node::Node;

/// What the engine's data structures share, apart from the inode table.
pub(crate) struct Ctx<D: BlockDevice> {
    pub dev: D,
    pub mount: EffectiveMount,
    pub sb: Superblock,
    pub geo: Geometry,
    pub alloc: Allocator,
    pub cache: BufferCache,
    /// Seed of metadata checksums (metadata_csum), else None.
    pub csum_seed: Option<u32>,
    /// The jbd2 journal of a writable mount with has_journal.
    pub journal: Option<Journal>,
    /// File data: folios per inode, dirty until write-back.
    pub pages: PageCache,
    /// Blocks delayed allocation has reserved and not yet allocated, over
    /// every inode (ext4's s_dirtyclusters_counter): free space that is
    /// promised, so ENOSPC comes at write time.
    pub reserved_blocks: u64,
    pub wb_stats: writepages::WritebackStats,
    pub dio_stats: direct_io::DirectIoStats,
    pub mapped_stats: mapped_write::MappedWriteStats,
    /// No-fail metadata allocations ([`memory`]).
    pub nofail: crate::memory::nofail::NoFailStats,
    pub kswapd: memory::KswapdPass,
    /// A livelock not yet reported ([`Ext4::take_livelock`]).
    pub livelock: Option<crate::memory::nofail::Livelock>,
    /// The ordinary folio allocation the current op was refused
    /// ([`Ext4::take_out_of_memory`]).
    pub out_of_memory: Option<crate::memory::refused::OutOfMemory>,
    /// Folio requests for file data refused over the mount.
    pub folios_refused: u64,
    /// Inodes where write-back lags what the model sees: a `Node::disksize`
    /// behind the size, or `Node::quietly_written` blocks (sync clears both).
    pub(crate) write_back_lag: std::collections::BTreeSet<InodeNumber>,
    /// Data blocks of journal-mode inodes the running transaction logs.
    pub(crate) journaled_data: data_journal::StagedData,
    /// Those of the committing transaction, until it is in the log.
    pub(crate) committing_data: data_journal::StagedData,
    /// Test hook: data=ordered lets commits go before the data.
    pub(crate) bug_unordered_data: bool,
    /// Test hook: bigalloc frees a cluster its file still maps blocks of.
    pub(crate) bug_frees_partly_used_cluster: bool,
    /// Test hook: journal-mode data is neither logged nor written home.
    pub(crate) bug_unlogged_data: bool,
    /// Inodes with cached extent status entries, least recently used first.
    pub(crate) es_lru: crate::extent_status::lru::EsLru,
    /// FIEMAP looks each extent up in the on-disk tree, with no extent
    /// status cache (the 2020 regression; a benchmark knob, not an option).
    pub(crate) uncached_fiemap: bool,
    /// Test hook: a collapse keeps the extent status cache's mapped entries.
    pub(crate) bug_keeps_stale_extents: bool,
    /// Test hook: write-back maps delayed blocks under cached hole entries.
    pub(crate) bug_keeps_cached_holes: bool,
    clock_secs: i64,
    clock_ticks: u32,
    next_generation: u32,
    /// Staging buffer for a data write that must be assembled (an edge block
    /// joined to the caller's bytes), kept between ops so a large write does
    /// not allocate and fault in fresh pages every time.
    scratch: Vec<u8>,
    /// Inodes open for writing (inode_is_open_for_write): by a descriptor
    /// slot or by the op running; mballoc gives them stream windows.
    pub(crate) writers: std::collections::BTreeSet<InodeNumber>,
    /// The running op asks mballoc not to widen (EXT4_GET_BLOCKS_NO_NORMALIZE).
    pub(crate) no_normalize: bool,
}

impl<D: BlockDevice> Ctx<D> {
    /// The time stamped on this op's changes: fixed seconds, a counter in the
    /// nanoseconds, so later changes sort later and runs stay byte-identical.
    pub fn now(&mut self) -> Timestamp {
        self.clock_ticks = (self.clock_ticks + 1) % 1_000_000_000;
        Timestamp { secs: self.clock_secs, nsec: self.clock_ticks }
    }

    pub fn generation(&mut self) -> u32 {
        self.next_generation = self.next_generation.wrapping_add(1);
        self.next_generation
    }

    pub fn bs(&self) -> u64 {
        u64::from(self.geo.block_size)
    }

    pub fn writable(&self) -> std::result::Result<(), Errno> {
        if self.mount.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }
}

/// A mounted ext4 filesystem.
pub struct Ext4<D: BlockDevice> {
    ctx: Ctx<D>,
    /// Inodes read so far, by number.
    nodes: BTreeMap<InodeNumber, Node>,
    /// Inodes whose on-disk copy (or extent tree) is stale.
    dirty: BTreeSet<InodeNumber>,
    /// The transaction closed and not yet written ([`journaling`]).
    committing: Option<journaling::Committing>,
    /// Locks held between the halves of split ops.
    locks: locks::Locks,
    /// Descriptor slots held across ops: slot -> inode ([`orphan`]).
    slots: BTreeMap<u8, InodeNumber>,
    /// Descriptors that writes in flight hold ([`orphan::FdRefs`]).
    fd_refs: orphan::FdRefs,
    /// The on-disk orphan chain in order, head (`s_last_orphan`) first.
    orphans: Vec<InodeNumber>,
    orphan_stats: OrphanStats,
    /// The commit timer and the flusher's dirty expiry.
    timers: timers::Timers,
    /// The flusher thread, when the caller's scheduler runs it.
    flusher: flusher::Flusher,
    #[cfg(feature = "test-hooks")]
    bug: test_hooks::BugState,
}

thread_local! {
    /// The engine error behind the errno an op last answered on this thread.
    /// Ops answer what a user would see; the detail is kept aside for the
    /// harness's reports, and nothing the engine decides ever reads it.
    static LAST_ERROR: std::cell::RefCell<Option<Error>> = const { std::cell::RefCell::new(None) };
}

/// Takes the engine error behind the last errno made from one on this
/// thread (which structure, which check), if any since the last take.
pub fn take_last_error() -> Option<Error> {
    LAST_ERROR.with(|last| last.borrow_mut().take())
}

/// How an engine error looks to a user.
impl From<Error> for Errno {
    fn from(e: Error) -> Errno {
        let errno = match e {
            Error::Device(DeviceError::ReadOnly) => Errno::EROFS,
            Error::Device(DeviceError::NoSpace) => Errno::ENOSPC,
            Error::NoMemory(_) => Errno::ENOMEM,
            Error::WouldWait(_) => Errno::EDEADLK,
            _ => Errno::EIO,
        };
        LAST_ERROR.with(|last| *last.borrow_mut() = Some(e));
        errno
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// Validates `config`, replays the journal if a crash left it non-empty,
    /// reads and checks the superblock and descriptors, and takes over the device.
    pub fn mount(dev: D, config: &MountConfig) -> Result<Self> {
        let mount = config.validate().map_err(|e| Error::InvalidArgument(format!("mount options: {e}")))?;
        let memory = BoundedFolios::new(mount.page_size, mount.page_cache_bytes);
        Self::mount_with_memory(dev, config, Box::new(memory))
    }

    /// [`Ext4::mount`] with page-cache folios from `memory` instead of the
    /// default bounded allocator (the simulator's pressure model, tests).
    pub fn mount_with_memory(mut dev: D, config: &MountConfig, memory: Box<dyn FolioAllocator>) -> Result<Self> {
        let mount = config.validate().map_err(|e| Error::InvalidArgument(format!("mount options: {e}")))?;
        let replayed = Self::recover(&mut dev)?.is_some();
        let img = Image::open(dev)?;
        let sb = img.superblock().clone();
        let geo = img.geometry().clone();
        let descs = img.group_descs().to_vec();
        let dev = img.into_device();
        if sb.block_size() != mount.block_size {
            return Err(Error::InvalidArgument(format!(
                "mount options: block size {} but the image has {}-byte blocks",
                mount.block_size,
                sb.block_size()
            )));
        }
        // The model answers st_blocks and ENOSPC in the image's clusters.
        let cluster = sb.block_size() << geo.cluster_bits;
        if mount.cluster_size != cluster {
            return Err(Error::InvalidArgument(format!(
                "mount options: {}-byte clusters but the image allocates in {cluster}-byte clusters",
                mount.cluster_size
            )));
        }
        for (bit, name) in [(feature::INCOMPAT_EXTENTS, "extent"), (feature::INCOMPAT_FILETYPE, "filetype")] {
            if sb.feature_incompat & bit == 0 {
                return Err(Unsupported::Construct(format!("images without {name}")).into());
            }
        }
        if sb.feature_ro_compat & feature::RO_COMPAT_ORPHAN_PRESENT != 0 {
            return Err(Unsupported::Construct("inodes in the orphan file (orphan_present)".into()).into());
        }
        if sb.feature_incompat & feature::INCOMPAT_RECOVER != 0 {
            return Err(Unsupported::Construct("needs_recovery without an internal journal".into()).into());
        }
        let csum_seed = sb.has_metadata_csum().then(|| sb.csum_seed());
        let desc_csum = DescChecksum::of(&sb);
        let mut alloc = Allocator::new(geo.clone(), descs, desc_csum, csum_seed, sb.first_ino(), sb.hash_seed, mount.alloc);
        let mut dev = dev;
        let journal = if Self::internal_journal(&sb) && !mount.read_only {
            let mut j = Journal::open(&mut dev, &sb)?;
            j.set_async_commit(mount.journal_async_commit);
            Some(j)
        } else {
            None
        };
        alloc.set_hold_freed(journal.is_some());
        let page_geometry = crate::pagecache::geometry::Geometry::new(mount.block_size, mount.page_size)
            .ok_or_else(|| Error::InvalidArgument(format!("{}-byte blocks on {}-byte pages", mount.block_size, mount.page_size)))?;
        let cache = BufferCache::new(page_geometry, geo.blocks_count);
        let clock_secs = i64::try_from(sb.wtime.max(sb.mkfs_time)).unwrap_or(0);
        let pages = PageCache::new(page_geometry, memory);
        let ctx = Ctx {
            dev,
            mount,
            sb,
            geo,
            alloc,
            cache,
            csum_seed,
            journal,
            pages,
            reserved_blocks: 0,
            wb_stats: writepages::WritebackStats::default(),
            dio_stats: direct_io::DirectIoStats::default(),
            mapped_stats: mapped_write::MappedWriteStats::default(),
            nofail: Default::default(),
            kswapd: Default::default(),
            livelock: None,
            out_of_memory: None,
            folios_refused: 0,
            write_back_lag: Default::default(),
            journaled_data: Default::default(),
            committing_data: Default::default(),
            bug_unordered_data: false,
            bug_frees_partly_used_cluster: false,
            bug_unlogged_data: false,
            es_lru: Default::default(),
            uncached_fiemap: false,
            bug_keeps_stale_extents: false,
            bug_keeps_cached_holes: false,
            clock_secs,
            clock_ticks: 0,
            next_generation: 0,
            scratch: Vec::new(),
            writers: Default::default(),
            no_normalize: false,
        };
        let timers = timers::Timers::new(ctx.dev.now_ns());
        let mut fs = Ext4 {
            ctx,
            nodes: BTreeMap::new(),
            dirty: BTreeSet::new(),
            committing: None,
            locks: locks::Locks::default(),
            slots: BTreeMap::new(),
            fd_refs: orphan::FdRefs::default(),
            orphans: Vec::new(),
            orphan_stats: OrphanStats::default(),
            timers,
            flusher: flusher::Flusher::default(),
            #[cfg(feature = "test-hooks")]
            bug: test_hooks::BugState::default(),
        };
        // A read-only mount leaves the chain for the next writable one.
        if !fs.ctx.mount.read_only {
            let orphans = fs.ctx.sb.last_orphan != 0;
            fs.orphan_cleanup()?;
            // ext4_mark_recovery_complete: after a replay or an orphan
            // cleanup, mount returns only once the journal is flushed, so
            // what the cleanup freed is durable before the first op.
            if replayed || orphans {
                fs.write_back_all()?;
                // The log is empty again; the next commit sets the flag.
                fs.checkpoint_log(true)?;
            }
        }
        Ok(fs)
    }

    /// Whether `sb` describes an internal jbd2 journal this engine runs.
    fn internal_journal(sb: &Superblock) -> bool {
        sb.has_journal() && sb.journal_inum != 0 && sb.journal_dev == 0
    }

    /// Replays the journal when a crash left transactions in it (and clears
    /// a stale needs_recovery flag). Images whose superblock does not parse
    /// are left to [`Image::open`] to name the problem.
    fn recover(dev: &mut D) -> Result<Option<recovery::RecoveryReport>> {
        let mut raw = [0u8; crate::format::superblock::SUPERBLOCK_SIZE];
        if dev.size_bytes() < crate::format::superblock::SUPERBLOCK_OFFSET + raw.len() as u64 {
            return Ok(None);
        }
        dev.read(crate::format::superblock::SUPERBLOCK_OFFSET, &mut raw, crate::device::IoClass::Metadata)?;
        let Ok(sb) = Superblock::parse(&raw) else { return Ok(None) };
        if !Self::internal_journal(&sb) {
            return Ok(None);
        }
        recovery::recover(dev, &sb)
    }

    /// Writes back every dirty folio, commits everything dirty, checkpoints
    /// the log (clearing needs_recovery), flushes, and returns the device.
    pub fn unmount(mut self) -> Result<D> {
        if !self.ctx.mount.read_only {
            self.settle_flusher()?;
            // Whoever held descriptors has exited: unmount waits for that.
            self.close_every_slot().map_err(|e| take_last_error().unwrap_or_else(|| Error::InvalidArgument(format!("closing descriptors: {e}"))))?;
            self.write_back_all_data()?;
            self.write_back_all()?;
            self.checkpoint_log(true)?;
        }
        Ok(self.ctx.dev)
    }

    /// Drops every cache without writing anything (a crash): dirty
    /// folios, delayed extents and dirty metadata are lost.
    pub fn into_device_dropping_caches(mut self) -> D {
        self.ctx.cache.drop_all();
        drop(self.ctx.pages);
        self.ctx.dev
    }

    pub fn device(&self) -> &D {
        &self.ctx.dev
    }

    pub fn device_mut(&mut self) -> &mut D {
        &mut self.ctx.dev
    }

    /// From now on FIEMAP looks every extent up in the on-disk tree, from
    /// the root through the buffer cache, with no extent status cache in
    /// front: the uncached behaviour of the 2020 fiemap regression, for
    /// `ext4sim bench --what fiemap`. Extents are then reported as the tree
    /// stores them (at most 32,768 blocks each), not merged.
    pub fn set_uncached_fiemap(&mut self, on: bool) {
        self.ctx.uncached_fiemap = on;
    }

    /// The mount options in force.
    pub fn mount_options(&self) -> &EffectiveMount {
        &self.ctx.mount
    }

    /// Data blocks a new allocation or reservation may take now (free, less
    /// those held until the running transaction commits, the metadata
    /// reserve and what delayed allocation has reserved), and free inodes:
    /// what ENOSPC is decided on.
    pub fn free_space(&self) -> (u64, u64) {
        let data = self.ctx.alloc.available_blocks().saturating_sub(self.ctx.alloc.metadata_reserve()).saturating_sub(self.ctx.reserved_blocks);
        (data, self.ctx.alloc.totals().free_inodes)
    }

    /// This mount's whole state (caches, the page cache and delayed
    /// extents, dirty inodes, the journal, locks) over another device that holds the same image: a check can unmount
    /// the copy, writing everything back to that device, and leave this
    /// mount and its device exactly as they were.
    pub fn shadow<E: BlockDevice>(&self, dev: E) -> Ext4<E> {
        let c = &self.ctx;
        let ctx = Ctx {
            dev,
            mount: c.mount,
            sb: c.sb.clone(),
            geo: c.geo.clone(),
            alloc: c.alloc.clone(),
            cache: c.cache.clone(),
            csum_seed: c.csum_seed,
            journal: c.journal.clone(),
            pages: c.pages.clone(),
            reserved_blocks: c.reserved_blocks,
            wb_stats: c.wb_stats,
            dio_stats: c.dio_stats,
            mapped_stats: c.mapped_stats,
            nofail: c.nofail.clone(),
            kswapd: c.kswapd,
            livelock: None,
            out_of_memory: None,
            folios_refused: c.folios_refused,
            write_back_lag: c.write_back_lag.clone(),
            journaled_data: c.journaled_data.clone(),
            committing_data: c.committing_data.clone(),
            bug_unordered_data: c.bug_unordered_data,
            bug_frees_partly_used_cluster: c.bug_frees_partly_used_cluster,
            bug_unlogged_data: c.bug_unlogged_data,
            es_lru: c.es_lru.clone(),
            uncached_fiemap: c.uncached_fiemap,
            bug_keeps_stale_extents: c.bug_keeps_stale_extents,
            bug_keeps_cached_holes: c.bug_keeps_cached_holes,
            clock_secs: c.clock_secs,
            clock_ticks: c.clock_ticks,
            next_generation: c.next_generation,
            scratch: Vec::new(),
            writers: c.writers.clone(),
            no_normalize: false,
        };
        Ext4 {
            ctx,
            nodes: self.nodes.clone(),
            dirty: self.dirty.clone(),
            committing: self.committing.clone(),
            locks: self.locks.clone(),
            slots: self.slots.clone(),
            fd_refs: self.fd_refs.clone(),
            orphans: self.orphans.clone(),
            orphan_stats: self.orphan_stats,
            timers: self.timers.clone(),
            flusher: self.flusher.clone(),
            #[cfg(feature = "test-hooks")]
            bug: self.bug,
        }
    }

    /// The filesystem's geometry.
    pub fn geometry(&self) -> &crate::format::geometry::Geometry {
        &self.ctx.geo
    }

    /// The group descriptors as the allocator keeps them, for a harness
    /// checking the allocation policy.
    pub fn group_descs(&self) -> &[crate::format::group_desc::GroupDesc] {
        self.ctx.alloc.descs()
    }

    /// Checks the allocator's running counts against descriptors and bitmaps.
    pub fn check_allocator(&self) -> std::result::Result<(), String> {
        self.ctx.alloc.check_counts()
    }
}
