//! The simulator's seeded disk: a [`BlockDevice`] with a timing profile, a
//! volatile write cache over pristine durable storage, seeded faults and
//! crashes.
//!
//! - One `u64` seed fixes every random choice. Latency, crash and each fault
//!   kind draw from their own ChaCha8 stream ([`rng`]), so one component's
//!   draws never shift another's.
//! - Time is simulated ([`clock`]): each command advances it by its cost
//!   ([`latency`]); the device serves one command at a time.
//! - Storage is sparse ([`store`]): a 16 TiB disk with a few writes is cheap.
//! - The durability and crash contracts are in [`cache`] and [`crash`]; faults
//!   in [`fault`].
//! - Same seed and same operations give identical statistics and image hashes.
//!
//! What it cannot see: queue depth above one, drive-internal reordering before
//! a crash other than through the crash's subset choice, and time spent by the
//! host between commands (the caller's clock, not the disk's).

pub mod cache;
pub mod clock;
pub mod crash;
pub mod fault;
pub mod hash;
pub mod latency;
pub mod pending;
pub mod profile;
pub mod profile_text;
pub mod rng;
pub mod shadow;
pub mod stats;
pub mod store;

use std::fmt;

use ext4_engine::device::{check_range, BlockDevice, DeviceError, IoClass, WriteFlags, SECTOR_SIZE};
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

pub use cache::WriteRecord;
pub use clock::{SimClock, SimTime};
pub use crash::{CrashPolicy, CrashPolicyError, CrashReport, Fate};
pub use fault::{FaultConfig, FaultConfigError, FaultEvent, FaultSwitch, FaultTextError, NoSpaceFault, ReadOnlyFault, ReadOnlyTrigger, ScriptedFault};
pub use profile::{DiskProfile, ProfileError, BUILTIN_PROFILES};
pub use profile_text::{LineError, ProfileParseError};
pub use stats::{ClassStats, DiskStats, FaultCounts};

use cache::WriteCache;
use fault::{FaultHit, FaultState};
use latency::IoCost;
use rng::{stream_rng, Stream};

/// Why a disk could not be built or reconfigured.
#[derive(Clone, Debug, PartialEq, Error)]
#[non_exhaustive]
pub enum DiskConfigError {
    #[error("disk size {0} bytes is not a positive multiple of {SECTOR_SIZE}")]
    Size(u64),
    #[error("disk profile: {0}")]
    Profile(#[from] ProfileError),
    #[error("fault config: {0}")]
    Faults(#[from] FaultConfigError),
}

/// A seeded simulated disk.
pub struct SimDisk {
    size_bytes: u64,
    profile: DiskProfile,
    seed: u64,
    clock: SimClock,
    /// Byte offset just past the last medium access: where the head rests.
    head: u64,
    cache: WriteCache,
    faults: FaultState,
    /// The faults last asked for; in force unless held.
    configured: FaultConfig,
    /// The runner holds faults off while it checks and remounts.
    held: bool,
    latency_rng: ChaCha8Rng,
    crash_rng: ChaCha8Rng,
    stats: DiskStats,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDisk")
            .field("size_bytes", &self.size_bytes)
            .field("profile", &self.profile.name)
            .field("seed", &self.seed)
            .field("now", &self.clock.now())
            .field("pending_writes", &self.cache.pending_writes())
            .finish_non_exhaustive()
    }
}

impl SimDisk {
    /// A blank disk of `size_bytes` (a positive multiple of [`SECTOR_SIZE`]).
    pub fn new(
        size_bytes: u64,
        profile: DiskProfile,
        seed: u64,
        faults: FaultConfig,
    ) -> Result<SimDisk, DiskConfigError> {
        if size_bytes == 0 || size_bytes % SECTOR_SIZE != 0 {
            return Err(DiskConfigError::Size(size_bytes));
        }
        profile.validate()?;
        Ok(SimDisk {
            size_bytes,
            profile,
            seed,
            clock: SimClock::new(),
            head: 0,
            cache: WriteCache::new(),
            faults: FaultState::new(faults, seed)?,
            configured: faults,
            held: false,
            latency_rng: stream_rng(seed, Stream::Latency),
            crash_rng: stream_rng(seed, Stream::Crash),
            stats: DiskStats::default(),
        })
    }

    pub fn profile(&self) -> &DiskProfile {
        &self.profile
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    pub fn stats(&self) -> &DiskStats {
        &self.stats
    }

    pub fn now(&self) -> SimTime {
        self.clock.now()
    }

    /// The faults in force now (none while held).
    pub fn faults(&self) -> &FaultConfig {
        self.faults.config()
    }

    /// The faults last given to [`SimDisk::set_faults`], held or not.
    pub fn configured_faults(&self) -> &FaultConfig {
        &self.configured
    }

    /// Replaces the fault settings; bad sectors, touched storage and the write
    /// count are kept, so faults can be switched off and on without losing them.
    /// While faults are held the new settings wait for the release.
    pub fn set_faults(&mut self, faults: FaultConfig) -> Result<(), DiskConfigError> {
        faults.validate()?;
        self.configured = faults;
        if !self.held {
            self.faults.configure(faults)?;
        }
        Ok(())
    }

    /// Holds faults off (the disk acts as with none) or lets the configured
    /// ones fire again. The overlay is kept, and the read-only moment is not
    /// drawn again, so holding perturbs no random stream.
    pub fn hold_faults(&mut self, held: bool) {
        if held == self.held {
            return;
        }
        self.held = held;
        let faults = if held { FaultConfig::NONE } else { self.configured };
        self.faults.configure(faults).expect("both configs were validated when set");
    }

    pub fn faults_held(&self) -> bool {
        self.held
    }

    /// Replays faults from a trace: only armed events fire from now on.
    pub fn script_faults(&mut self) {
        self.faults.script();
    }

    /// Starts one op's fault window; `armed` are the trace's faults for it.
    pub fn begin_op(&mut self, armed: Vec<FaultEvent>) {
        self.faults.begin_op(armed);
    }

    /// Faults that fired since [`SimDisk::begin_op`], for the trace.
    pub fn take_fired_faults(&mut self) -> Vec<FaultEvent> {
        self.faults.take_fired()
    }

    /// Faults armed for this op that never fired (it issued no such command),
    /// and how many device commands it issued.
    pub fn take_unfired_faults(&mut self) -> (Vec<FaultEvent>, u32) {
        self.faults.take_unfired()
    }

    /// Plants a latent sector error at the sector holding byte `offset`.
    pub fn inject_latent_sector(&mut self, offset: u64) -> Result<(), DeviceError> {
        let sector_start = offset - offset % SECTOR_SIZE;
        check_range(sector_start, SECTOR_SIZE, self.size_bytes)?;
        self.faults.plant_latent(sector_start / SECTOR_SIZE);
        Ok(())
    }

    /// Byte offsets of the sectors that fail on read, whether or not the
    /// latent-sector switch is on.
    pub fn latent_sectors(&self) -> impl Iterator<Item = u64> + '_ {
        self.faults.latent_sectors().map(|sector| sector * SECTOR_SIZE)
    }

    /// Bytes of backing store accepted writes have touched (4 KiB chunks).
    pub fn touched_bytes(&self) -> u64 {
        self.faults.touched_bytes()
    }

    /// Whether the read-only fault has tripped (and is switched on).
    pub fn is_read_only(&self) -> bool {
        self.faults.is_read_only()
    }

    pub fn pending_writes(&self) -> usize {
        self.cache.pending_writes()
    }

    pub fn pending_bytes(&self) -> u64 {
        self.cache.pending_bytes()
    }

    /// The pending writes, in issue order.
    pub fn pending_records(&self) -> impl Iterator<Item = WriteRecord> + '_ {
        self.cache.pending_records()
    }

    /// Power loss: the durable image becomes what `policy` lets survive, the
    /// cache empties and the head parks at 0. Time and statistics carry on.
    pub fn crash(&mut self, policy: &CrashPolicy) -> CrashReport {
        let atomic = self.profile.atomic_write_bytes;
        let report = crash::crash(&mut self.cache, atomic, policy, &mut self.crash_rng);
        self.head = 0;
        self.stats.crashes += 1;
        report
    }

    /// A crash whose survivors are decided by `seed` alone, so a trace step
    /// `crash seed=N` gives the same image however the run got there.
    pub fn crash_seeded(&mut self, policy: &CrashPolicy, seed: u64) -> CrashReport {
        self.crash_rng = stream_rng(seed, Stream::Crash);
        self.crash(policy)
    }

    /// Hash of the durable image (see [`hash`]): what would survive losing
    /// every pending write.
    pub fn durable_image_hash(&self) -> u64 {
        self.cache.durable().content_hash()
    }

    /// Hash of the image reads see, pending writes included. Equal to
    /// [`SimDisk::durable_image_hash`] right after a flush.
    pub fn image_hash(&self) -> u64 {
        self.cache.visible_hash()
    }

    /// Reads durable bytes, with no faults, no time and no effect on the head.
    pub fn read_durable(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        self.cache.read_durable(offset, buf);
        Ok(())
    }

    /// Reads what the engine would see, with no faults, no time and no effect
    /// on the head: for invariant checks that must not disturb the run.
    pub fn peek(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check_range(offset, buf.len() as u64, self.size_bytes)?;
        self.cache.read(offset, buf);
        Ok(())
    }

    /// The written parts of the durable image as (byte offset, bytes), in
    /// offset order, clipped to the device: enough to export a sparse image.
    /// Holes read as zero.
    pub fn durable_extents(&self) -> impl Iterator<Item = (u64, &[u8])> + '_ {
        let size = self.size_bytes;
        self.cache.durable().chunks().map(move |(offset, data)| {
            let len = data.len().min((size - offset) as usize);
            (offset, &data[..len])
        })
    }

    fn spend(&mut self, class: IoClass, cost: &IoCost) {
        self.stats.elapsed_ns = self.clock.advance_ns(cost.total_ns()).as_ns();
        self.stats.charge(class, cost);
    }

    fn refuse(&mut self, class: IoClass, hit: FaultHit) -> DeviceError {
        let cost = latency::refused_cost(&self.profile);
        self.spend(class, &cost);
        self.stats.faults.record(hit.kind);
        hit.error
    }

    /// Costs a medium access from the current head and moves the head past it.
    fn media_access(&mut self, offset: u64, len: u64, with_overhead: bool) -> IoCost {
        let mut cost = latency::media_cost(&self.profile, self.size_bytes, self.head, offset, len, &mut self.latency_rng);
        if with_overhead {
            cost.overhead_ns = self.profile.command_overhead_ns;
        }
        self.head = offset + len;
        debug_assert!(self.head <= self.size_bytes);
        cost
    }

    /// Destages pending writes in one elevator sweep from the head (C-SCAN),
    /// charging each write's class for its media time. The data was already
    /// applied in issue order; only the cost follows the sweep.
    fn charge_destage(&mut self, mut records: Vec<WriteRecord>) {
        let head = self.head;
        records.sort_by_key(|record| (record.offset < head, record.offset, record.seq));
        for record in &records {
            let cost = self.media_access(record.offset, record.len, false);
            self.spend(record.class, &cost);
        }
        self.stats.destaged_writes += records.len() as u64;
    }
}

impl SimDisk {
    /// Time passes with no command in flight: the clock moves on, the
    /// device stays idle (the timers of the filesystem above read it).
    pub fn pass_time(&mut self, ns: u64) {
        self.stats.elapsed_ns = self.clock.advance_ns(ns).as_ns();
        self.stats.idle_ns = self.stats.idle_ns.saturating_add(ns);
    }
}

impl BlockDevice for SimDisk {
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    fn now_ns(&self) -> u64 {
        self.stats.elapsed_ns
    }

    fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), DeviceError> {
        let len = buf.len() as u64;
        check_range(offset, len, self.size_bytes)?;
        if len == 0 {
            return Ok(());
        }
        let cache = &self.cache;
        if let Err(hit) = self.faults.check_read(offset, len, |sector| cache.covers_pending(sector)) {
            return Err(self.refuse(class, hit));
        }
        let cost = if self.cache.fully_pending(offset, len) {
            latency::cached_cost(&self.profile, len)
        } else {
            self.media_access(offset, len, true)
        };
        self.cache.read(offset, buf);
        self.spend(class, &cost);
        let stats = self.stats.class_mut(class);
        stats.reads += 1;
        stats.read_bytes += len;
        Ok(())
    }

    fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), DeviceError> {
        self.write_vectored(offset, &[buf], flags)
    }

    fn write_vectored(&mut self, offset: u64, bufs: &[&[u8]], flags: WriteFlags) -> Result<(), DeviceError> {
        let len = bufs.iter().map(|b| b.len() as u64).sum();
        check_range(offset, len, self.size_bytes)?;
        if len == 0 {
            return Ok(());
        }
        if let Err(hit) = self.faults.check_write(offset, len) {
            return Err(self.refuse(flags.class, hit));
        }
        let capacity = self.profile.write_cache_bytes;
        if flags.fua || len > capacity {
            let cost = self.media_access(offset, len, true);
            self.cache.write_through_segments(offset, bufs, flags.class);
            self.spend(flags.class, &cost);
            self.stats.fua_writes += u64::from(flags.fua);
        } else {
            // A full cache makes the writer wait while the oldest writes go to
            // the medium; each pass removes one, so the loop is bounded by the
            // number pending.
            while self.cache.pending_bytes() + len > capacity {
                let Some(record) = self.cache.destage_oldest() else { break };
                self.charge_destage(vec![record]);
            }
            assert!(self.cache.pending_bytes() + len <= capacity, "destaging must make room");
            self.cache.write_pending_segments(offset, bufs, flags.class);
            let cost = latency::cached_cost(&self.profile, len);
            self.spend(flags.class, &cost);
            self.stats.cached_writes += 1;
        }
        self.faults.note_write(offset, len);
        let stats = self.stats.class_mut(flags.class);
        stats.writes += 1;
        stats.write_bytes += len;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), DeviceError> {
        if let Err(hit) = self.faults.check_flush(self.cache.pending_writes()) {
            // A flush carries no class; the journal is what waits on it.
            return Err(self.refuse(IoClass::Journal, hit));
        }
        let records = self.cache.flush_all();
        self.charge_destage(records);
        let fixed_ns = self.profile.flush_ns.saturating_add(self.profile.command_overhead_ns);
        self.stats.elapsed_ns = self.clock.advance_ns(fixed_ns).as_ns();
        self.stats.flush_busy_ns = self.stats.flush_busy_ns.saturating_add(fixed_ns);
        self.stats.flushes += 1;
        debug_assert_eq!(self.cache.pending_writes(), 0);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
