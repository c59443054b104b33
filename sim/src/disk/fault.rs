//! Seeded faults, each kind with its own switch, rate and random stream.
//!
//! - **Read EIO**: a read fails at a drawn sector with `probability` per read.
//! - **Write EIO**: a write fails at a drawn sector with `probability` per write;
//!   nothing of it is applied.
//! - **Latent sector errors**: with `probability` per read, a drawn sector of the
//!   range goes bad and that read fails; from then on every read of it fails
//!   until a write covers it (the drive remaps on rewrite). Sectors can also be
//!   planted with [`super::SimDisk::inject_latent_sector`]. A sector served from
//!   the write cache never fails.
//! - **Read-only**: after N accepted writes (fixed, or drawn from the seed) every
//!   write fails with `ReadOnly`, and so does a flush that has anything to write.
//! - **ENOSPC**: writes that would grow the backing store past a byte budget of
//!   touched storage (4 KiB chunks) fail with `NoSpace`; rewrites of touched
//!   storage still succeed, as on a full sparse file.
//!
//! The fault overlay (bad sectors, touched chunks, accepted-write count) lives
//! here, apart from the data, and is kept while a switch is off: switching a
//! fault off hides it without losing the truth, switching it on brings it back.
//! A switched-off kind draws nothing, so it cannot perturb the others.
//!
//! Drawn faults are also reported as [`FaultEvent`]s placed by device command
//! within one op. A replay runs *scripted*: nothing is drawn, and each event a
//! trace holds fails the same command of its op. A trace then reproduces its
//! faults exactly, and a shrunk trace keeps each fault with its op.

use std::collections::BTreeSet;

use ext4_engine::device::{DeviceError, SECTOR_SIZE};
use ext4_model::range_map::RangeMap;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

use super::rng::{stream_rng, Stream};
use super::store::CHUNK_BYTES;

/// A fault kind's switch and rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultSwitch {
    pub enabled: bool,
    /// Chance per command, in `[0, 1]`. Checked even while off, so a typo shows
    /// up when the config is set, not when the switch is flipped. Default: 0.
    pub probability: f64,
}

impl FaultSwitch {
    pub const OFF: FaultSwitch = FaultSwitch { enabled: false, probability: 0.0 };

    pub const fn on(probability: f64) -> FaultSwitch {
        FaultSwitch { enabled: true, probability }
    }

    /// Draws only when enabled, so an off switch leaves its stream untouched.
    fn fires(&self, rng: &mut ChaCha8Rng) -> bool {
        self.enabled && rng.random_bool(self.probability)
    }
}

/// When the device turns read-only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOnlyTrigger {
    /// After exactly this many accepted writes (0 = read-only from the start).
    AfterWrites(u64),
    /// After a number of accepted writes drawn uniformly from `0..=bound`.
    SeededWithin(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOnlyFault {
    pub enabled: bool,
    pub trigger: ReadOnlyTrigger,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoSpaceFault {
    pub enabled: bool,
    /// Bytes of backing store writes may touch in total, counted in 4 KiB chunks.
    pub budget_bytes: u64,
}

/// Every fault kind's settings. Default: everything off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    pub read_error: FaultSwitch,
    pub write_error: FaultSwitch,
    pub latent_sector: FaultSwitch,
    pub read_only: ReadOnlyFault,
    pub no_space: NoSpaceFault,
}

impl FaultConfig {
    pub const NONE: FaultConfig = FaultConfig {
        read_error: FaultSwitch::OFF,
        write_error: FaultSwitch::OFF,
        latent_sector: FaultSwitch::OFF,
        read_only: ReadOnlyFault { enabled: false, trigger: ReadOnlyTrigger::AfterWrites(0) },
        no_space: NoSpaceFault { enabled: false, budget_bytes: 0 },
    };

    pub fn validate(&self) -> Result<(), FaultConfigError> {
        let rates = [
            ("read_error", self.read_error),
            ("write_error", self.write_error),
            ("latent_sector", self.latent_sector),
        ];
        for (fault, switch) in rates {
            if !(0.0..=1.0).contains(&switch.probability) {
                return Err(FaultConfigError::Probability { fault, value: switch.probability });
            }
        }
        Ok(())
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig::NONE
    }
}

/// Why a fault config was refused.
#[derive(Clone, Copy, Debug, PartialEq, Error)]
pub enum FaultConfigError {
    #[error("{fault} probability must be in [0, 1], got {value}")]
    Probability { fault: &'static str, value: f64 },
}

/// Which fault refused a command, for the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    ReadError,
    /// A read hit a sector that was already bad.
    LatentSector,
    /// A read made a sector go bad.
    NewLatentSector,
    WriteError,
    ReadOnly,
    NoSpace,
}

/// A fault a trace records, by the kind names `--faults` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScriptedFault {
    /// Read EIO.
    Read,
    /// Write EIO.
    Write,
    /// A sector going bad on read (it stays bad until rewritten).
    Latent,
    /// The device turning read-only (it stays so).
    ReadOnly,
}

impl ScriptedFault {
    pub fn name(self) -> &'static str {
        match self {
            ScriptedFault::Read => "read",
            ScriptedFault::Write => "write",
            ScriptedFault::Latent => "latent",
            ScriptedFault::ReadOnly => "readonly",
        }
    }

    pub fn from_name(name: &str) -> Option<ScriptedFault> {
        [ScriptedFault::Read, ScriptedFault::Write, ScriptedFault::Latent, ScriptedFault::ReadOnly].into_iter().find(|k| k.name() == name)
    }
}

/// One fault, placed by the device command (counted from 0 at the start of an
/// op: reads, writes and flushes alike) and the sector within that command.
/// ENOSPC is not an event: it follows from the byte budget alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    pub kind: ScriptedFault,
    pub command: u32,
    pub sector: u32,
}

/// A refused command: why, and what the device answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultHit {
    pub kind: FaultKind,
    pub error: DeviceError,
}

impl FaultHit {
    fn io(kind: FaultKind, sector: u64) -> FaultHit {
        FaultHit { kind, error: DeviceError::Io { offset: sector * SECTOR_SIZE } }
    }
}

/// Live fault state of one disk.
#[derive(Clone, Debug)]
pub struct FaultState {
    config: FaultConfig,
    read_rng: ChaCha8Rng,
    write_rng: ChaCha8Rng,
    latent_rng: ChaCha8Rng,
    read_only_rng: ChaCha8Rng,
    /// Sectors that fail on read until rewritten.
    latent: BTreeSet<u64>,
    /// Chunks any accepted write ever touched: the sparse file's allocation,
    /// as runs (writes are mostly sequential), and how many chunks they hold.
    touched: RangeMap<()>,
    touched_chunks: u64,
    writes_accepted: u64,
    /// The accepted-write count at which the device turns read-only.
    read_only_after: u64,
    /// The trigger `read_only_after` was drawn for: holding faults off and on
    /// again must not draw a new moment.
    drawn_trigger: Option<ReadOnlyTrigger>,
    /// Replaying: fire only `armed`, draw nothing.
    scripted: bool,
    /// Device commands since the op began.
    command: u32,
    /// Faults to fire in this op (scripted only).
    armed: Vec<FaultEvent>,
    /// Faults that fired in this op, as events.
    fired: Vec<FaultEvent>,
    read_only_reported: bool,
}

fn sectors(offset: u64, len: u64) -> std::ops::Range<u64> {
    offset / SECTOR_SIZE..(offset + len) / SECTOR_SIZE
}

fn chunks(offset: u64, len: u64) -> std::ops::Range<u64> {
    debug_assert!(len > 0, "zero-length commands never reach the fault layer");
    offset / CHUNK_BYTES..(offset + len - 1) / CHUNK_BYTES + 1
}

impl FaultState {
    pub fn new(config: FaultConfig, seed: u64) -> Result<FaultState, FaultConfigError> {
        let mut state = FaultState {
            config: FaultConfig::NONE,
            read_rng: stream_rng(seed, Stream::ReadError),
            write_rng: stream_rng(seed, Stream::WriteError),
            latent_rng: stream_rng(seed, Stream::LatentSector),
            read_only_rng: stream_rng(seed, Stream::ReadOnly),
            latent: BTreeSet::new(),
            touched: RangeMap::new(),
            touched_chunks: 0,
            writes_accepted: 0,
            read_only_after: u64::MAX,
            drawn_trigger: None,
            scripted: false,
            command: 0,
            armed: Vec::new(),
            fired: Vec::new(),
            read_only_reported: false,
        };
        state.configure(config)?;
        Ok(state)
    }

    /// Replaces the settings; the overlay and counts are kept.
    pub fn configure(&mut self, config: FaultConfig) -> Result<(), FaultConfigError> {
        config.validate()?;
        let trigger = config.read_only.trigger;
        if config.read_only.enabled && !self.scripted && self.drawn_trigger != Some(trigger) {
            self.read_only_after = match trigger {
                ReadOnlyTrigger::AfterWrites(count) => count,
                ReadOnlyTrigger::SeededWithin(bound) => self.read_only_rng.random_range(0..=bound),
            };
            self.drawn_trigger = Some(trigger);
        }
        self.config = config;
        Ok(())
    }

    /// Switches to replaying: from now on only armed events fire. The
    /// read-only moment, too, comes only from an event.
    pub fn script(&mut self) {
        self.scripted = true;
        if !self.read_only_reported {
            self.read_only_after = u64::MAX;
        }
    }

    /// Starts an op: commands count from 0, and `armed` may fire (scripted).
    pub fn begin_op(&mut self, armed: Vec<FaultEvent>) {
        self.command = 0;
        self.armed = armed;
        self.fired.clear();
    }

    /// The faults that fired since the op began.
    pub fn take_fired(&mut self) -> Vec<FaultEvent> {
        std::mem::take(&mut self.fired)
    }

    fn next_command(&mut self) -> u32 {
        let command = self.command;
        self.command = self.command.saturating_add(1);
        command
    }

    /// The armed event of `kind` for `command`, if any (and its switch is on).
    fn take_armed(&mut self, command: u32, kind: ScriptedFault, enabled: bool) -> Option<FaultEvent> {
        let i = self.armed.iter().position(|e| e.command == command && e.kind == kind)?;
        let event = self.armed.remove(i);
        enabled.then_some(event)
    }

    /// Which sector of `range` a new fault hits: drawn, or the event's.
    fn fault_sector(&mut self, command: u32, kind: ScriptedFault, range: &std::ops::Range<u64>) -> Option<u64> {
        let (switch, rng) = match kind {
            ScriptedFault::Read => (self.config.read_error, &mut self.read_rng),
            ScriptedFault::Latent => (self.config.latent_sector, &mut self.latent_rng),
            ScriptedFault::Write => (self.config.write_error, &mut self.write_rng),
            ScriptedFault::ReadOnly => return None,
        };
        if self.scripted {
            let event = self.take_armed(command, kind, switch.enabled)?;
            let last = range.end.saturating_sub(range.start).saturating_sub(1);
            Some(range.start + u64::from(event.sector).min(last))
        } else if switch.fires(rng) {
            Some(rng.random_range(range.clone()))
        } else {
            None
        }
    }

    fn record(&mut self, kind: ScriptedFault, command: u32, sector_in_command: u64) {
        let sector = u32::try_from(sector_in_command).unwrap_or(u32::MAX);
        self.fired.push(FaultEvent { kind, command, sector });
    }

    /// Whether the device refuses writes now; in a replay an armed event
    /// turns it read-only at its command.
    fn read_only_now(&mut self, command: u32) -> bool {
        if self.scripted && self.take_armed(command, ScriptedFault::ReadOnly, self.config.read_only.enabled).is_some() {
            self.read_only_after = self.read_only_after.min(self.writes_accepted);
        }
        let read_only = self.is_read_only();
        if read_only && !self.read_only_reported {
            self.read_only_reported = true;
            self.record(ScriptedFault::ReadOnly, command, 0);
        }
        read_only
    }

    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    pub fn is_read_only(&self) -> bool {
        self.config.read_only.enabled && self.writes_accepted >= self.read_only_after
    }

    /// Bad sectors, ascending, whether or not the switch is on.
    pub fn latent_sectors(&self) -> impl Iterator<Item = u64> + '_ {
        self.latent.iter().copied()
    }

    pub fn plant_latent(&mut self, sector: u64) {
        self.latent.insert(sector);
    }

    /// Bytes of backing store accepted writes have touched.
    pub fn touched_bytes(&self) -> u64 {
        self.touched_chunks.saturating_mul(CHUNK_BYTES)
    }

    /// Chunks of `range` no accepted write has touched yet.
    fn fresh_chunks(&self, range: std::ops::Range<u64>) -> u64 {
        let seen: u64 = self.touched.overlapping(range.clone()).iter().map(|(r, _)| r.end - r.start).sum();
        range.end - range.start - seen
    }

    pub fn writes_accepted(&self) -> u64 {
        self.writes_accepted
    }

    /// Decides whether a read of `[offset, offset + len)` fails. `cached` says
    /// whether a sector is served from the write cache (and so cannot fail).
    pub fn check_read(&mut self, offset: u64, len: u64, cached: impl Fn(u64) -> bool) -> Result<(), FaultHit> {
        let command = self.next_command();
        let range = sectors(offset, len);
        if self.config.latent_sector.enabled {
            if let Some(&bad) = self.latent.range(range.clone()).find(|&&sector| !cached(sector)) {
                return Err(FaultHit::io(FaultKind::LatentSector, bad));
            }
        }
        if let Some(sector) = self.fault_sector(command, ScriptedFault::Latent, &range) {
            if !cached(sector) {
                self.latent.insert(sector);
                self.record(ScriptedFault::Latent, command, sector - range.start);
                return Err(FaultHit::io(FaultKind::NewLatentSector, sector));
            }
        }
        if let Some(sector) = self.fault_sector(command, ScriptedFault::Read, &range) {
            self.record(ScriptedFault::Read, command, sector - range.start);
            return Err(FaultHit::io(FaultKind::ReadError, sector));
        }
        Ok(())
    }

    /// Decides whether a write fails; nothing is recorded until
    /// [`FaultState::note_write`] confirms it was accepted.
    pub fn check_write(&mut self, offset: u64, len: u64) -> Result<(), FaultHit> {
        let command = self.next_command();
        if self.read_only_now(command) {
            return Err(FaultHit { kind: FaultKind::ReadOnly, error: DeviceError::ReadOnly });
        }
        if self.config.no_space.enabled {
            let fresh = self.fresh_chunks(chunks(offset, len));
            let after = self.touched_bytes().saturating_add(fresh.saturating_mul(CHUNK_BYTES));
            if fresh > 0 && after > self.config.no_space.budget_bytes {
                return Err(FaultHit { kind: FaultKind::NoSpace, error: DeviceError::NoSpace });
            }
        }
        let range = sectors(offset, len);
        if let Some(sector) = self.fault_sector(command, ScriptedFault::Write, &range) {
            self.record(ScriptedFault::Write, command, sector - range.start);
            return Err(FaultHit::io(FaultKind::WriteError, sector));
        }
        Ok(())
    }

    /// Records an accepted write: it counts toward read-only, grows the backing
    /// store and remaps the bad sectors it covers.
    pub fn note_write(&mut self, offset: u64, len: u64) {
        self.writes_accepted = self.writes_accepted.saturating_add(1);
        let range = chunks(offset, len);
        self.touched_chunks += self.fresh_chunks(range.clone());
        self.touched.insert(range, ());
        let remapped: Vec<u64> = self.latent.range(sectors(offset, len)).copied().collect();
        for sector in remapped {
            self.latent.remove(&sector);
        }
    }

    /// A flush with pending writes is a write to the medium, so a read-only
    /// device refuses it; flushing an empty cache has nothing to refuse.
    pub fn check_flush(&mut self, pending_writes: usize) -> Result<(), FaultHit> {
        let command = self.next_command();
        if pending_writes > 0 && self.read_only_now(command) {
            return Err(FaultHit { kind: FaultKind::ReadOnly, error: DeviceError::ReadOnly });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::profile::DiskProfile;
    use crate::disk::SimDisk;
    use ext4_engine::device::{BlockDevice, IoClass, WriteFlags};

    const SIZE: u64 = 1 << 30;

    fn disk(faults: FaultConfig) -> SimDisk {
        let ram = DiskProfile::builtin("ram").expect("built-in");
        SimDisk::new(SIZE, ram, 42, faults).expect("valid disk")
    }

    fn read_ok(disk: &mut SimDisk, offset: u64) -> bool {
        disk.read(offset, &mut [0; 4096], IoClass::Data).is_ok()
    }

    #[test]
    fn configs_with_impossible_rates_are_refused() {
        let mut config = FaultConfig::NONE;
        config.write_error = FaultSwitch { enabled: false, probability: 1.5 };
        assert!(matches!(config.validate(), Err(FaultConfigError::Probability { fault: "write_error", .. })));
        config.write_error = FaultSwitch::on(f64::NAN);
        assert!(config.validate().is_err());
        assert_eq!(FaultConfig::default().validate(), Ok(()));
    }

    #[test]
    fn read_errors_fire_when_on_and_never_when_off() {
        let mut faulty = disk(FaultConfig { read_error: FaultSwitch::on(1.0), ..FaultConfig::NONE });
        let err = faulty.read(8192, &mut [0; 4096], IoClass::Data).expect_err("read EIO");
        assert!(matches!(err, DeviceError::Io { offset } if (8192..12288).contains(&offset)));
        assert_eq!(faulty.stats().faults.read_errors, 1);

        let mut sometimes = disk(FaultConfig { read_error: FaultSwitch::on(0.3), ..FaultConfig::NONE });
        let failed = (0..200).filter(|i| !read_ok(&mut sometimes, i * 4096)).count();
        assert!((20..100).contains(&failed), "{failed} of 200 at p=0.3");

        let off = FaultSwitch { enabled: false, probability: 1.0 };
        let mut healthy = disk(FaultConfig { read_error: off, ..FaultConfig::NONE });
        assert!((0..200).all(|i| read_ok(&mut healthy, i * 4096)));
    }

    #[test]
    fn write_errors_fire_when_on_apply_nothing_and_never_fire_when_off() {
        let mut faulty = disk(FaultConfig { write_error: FaultSwitch::on(1.0), ..FaultConfig::NONE });
        let err = faulty.write(0, &[5; 4096], WriteFlags::DATA).expect_err("write EIO");
        assert!(matches!(err, DeviceError::Io { offset } if offset < 4096));
        let mut back = [9; 4096];
        faulty.read(0, &mut back, IoClass::Data).expect("reads are healthy");
        assert_eq!(back, [0; 4096], "a failed write must not be applied");
        assert_eq!(faulty.stats().faults.write_errors, 1);

        let off = FaultSwitch { enabled: false, probability: 1.0 };
        let mut healthy = disk(FaultConfig { write_error: off, ..FaultConfig::NONE });
        assert!((0..200).all(|i| healthy.write(i * 4096, &[1; 4096], WriteFlags::DATA).is_ok()));
    }

    #[test]
    fn latent_sectors_fail_until_rewritten_and_hide_while_switched_off() {
        let latent_on = FaultConfig { latent_sector: FaultSwitch::on(0.0), ..FaultConfig::NONE };
        let mut disk = disk(latent_on);
        disk.write(0, &[3; 8192], WriteFlags::DATA).expect("write");
        disk.flush().expect("flush");
        disk.inject_latent_sector(4608).expect("in range");
        let err = disk.read(4096, &mut [0; 4096], IoClass::Data).expect_err("bad sector");
        assert_eq!(err, DeviceError::Io { offset: 4608 });
        assert!(read_ok(&mut disk, 0), "the neighbouring block is fine");

        disk.set_faults(FaultConfig::NONE).expect("valid");
        assert!(read_ok(&mut disk, 4096), "switched off, the bad sector is hidden");
        disk.set_faults(latent_on).expect("valid");
        assert!(!read_ok(&mut disk, 4096), "switched back on, the truth is still there");

        disk.write(4608, &[4; 512], WriteFlags::DATA).expect("rewrite");
        disk.flush().expect("flush");
        assert!(read_ok(&mut disk, 4096), "rewriting remaps the sector");
        assert_eq!(disk.latent_sectors().count(), 0);
    }

    #[test]
    fn latent_sectors_develop_when_on_and_never_when_off() {
        let developing = FaultConfig { latent_sector: FaultSwitch::on(1.0), ..FaultConfig::NONE };
        let mut disk = disk(developing);
        let err = disk.read(1 << 20, &mut [0; 4096], IoClass::Metadata).expect_err("develops");
        let DeviceError::Io { offset } = err else { panic!("expected EIO, got {err:?}") };
        assert_eq!(disk.latent_sectors().collect::<Vec<_>>(), vec![offset]);
        assert_eq!(disk.stats().faults.new_latent_sectors, 1);
        // The same range now fails on the planted sector even with no new draws.
        disk.set_faults(FaultConfig { latent_sector: FaultSwitch::on(0.0), ..FaultConfig::NONE }).expect("valid");
        assert_eq!(disk.read(1 << 20, &mut [0; 4096], IoClass::Data), Err(DeviceError::Io { offset }));
        assert_eq!(disk.stats().faults.latent_sector_errors, 1);

        let off = FaultSwitch { enabled: false, probability: 1.0 };
        let mut healthy = self::disk(FaultConfig { latent_sector: off, ..FaultConfig::NONE });
        assert!((0..200).all(|i| read_ok(&mut healthy, i * 4096)));
        assert_eq!(healthy.latent_sectors().count(), 0);
    }

    #[test]
    fn cached_sectors_never_report_latent_errors() {
        let mut disk = disk(FaultConfig { latent_sector: FaultSwitch::on(0.0), ..FaultConfig::NONE });
        disk.inject_latent_sector(0).expect("in range");
        assert!(!read_ok(&mut disk, 0));
        disk.write(0, &[1; 4096], WriteFlags::DATA).expect("write");
        disk.inject_latent_sector(0).expect("in range");
        assert!(read_ok(&mut disk, 0), "served from the write cache");
    }

    #[test]
    fn device_turns_read_only_after_n_writes_when_on_and_never_when_off() {
        let trigger = ReadOnlyTrigger::AfterWrites(3);
        let mut disk = disk(FaultConfig { read_only: ReadOnlyFault { enabled: true, trigger }, ..FaultConfig::NONE });
        for i in 0..3 {
            disk.write(i * 4096, &[1; 4096], WriteFlags::DATA).expect("before the trigger");
        }
        assert_eq!(disk.write(1 << 20, &[1; 4096], WriteFlags::DATA), Err(DeviceError::ReadOnly));
        assert_eq!(disk.flush(), Err(DeviceError::ReadOnly), "pending writes cannot be flushed");
        assert!(read_ok(&mut disk, 0), "reads still work");
        assert_eq!(disk.stats().faults.read_only_rejections, 2);

        let mut healthy = self::disk(FaultConfig {
            read_only: ReadOnlyFault { enabled: false, trigger },
            ..FaultConfig::NONE
        });
        assert!((0..50).all(|i| healthy.write(i * 4096, &[1; 4096], WriteFlags::DATA).is_ok()));
        assert!(healthy.flush().is_ok());
    }

    #[test]
    fn seeded_read_only_moment_falls_within_its_bound_and_varies_by_seed() {
        let config = FaultConfig {
            read_only: ReadOnlyFault { enabled: true, trigger: ReadOnlyTrigger::SeededWithin(20) },
            ..FaultConfig::NONE
        };
        let mut moments = BTreeSet::new();
        for seed in 0..16 {
            let ram = DiskProfile::builtin("ram").expect("built-in");
            let mut disk = SimDisk::new(SIZE, ram, seed, config).expect("valid");
            let accepted = (0..30u64)
                .take_while(|i| disk.write(i * 4096, &[1; 512], WriteFlags::JOURNAL).is_ok())
                .count();
            assert!(accepted <= 20, "seed {seed} accepted {accepted}");
            assert_eq!(disk.write(0, &[1; 512], WriteFlags::JOURNAL), Err(DeviceError::ReadOnly));
            moments.insert(accepted);
        }
        assert!(moments.len() > 3, "the moment should depend on the seed: {moments:?}");
    }

    #[test]
    fn no_space_refuses_new_storage_past_the_budget_but_allows_rewrites() {
        let budget = NoSpaceFault { enabled: true, budget_bytes: 2 * CHUNK_BYTES };
        let mut disk = disk(FaultConfig { no_space: budget, ..FaultConfig::NONE });
        disk.write(0, &[1; 8192], WriteFlags::DATA).expect("within budget");
        assert_eq!(disk.write(1 << 20, &[1; 512], WriteFlags::DATA), Err(DeviceError::NoSpace));
        disk.write(4096, &[2; 4096], WriteFlags::DATA).expect("rewrite of touched storage");
        assert_eq!(disk.stats().faults.no_space_rejections, 1);

        let off = NoSpaceFault { enabled: false, budget_bytes: 0 };
        let mut healthy = self::disk(FaultConfig { no_space: off, ..FaultConfig::NONE });
        assert!((0..50).all(|i| healthy.write(i << 20, &[1; 4096], WriteFlags::DATA).is_ok()));
        assert_eq!(healthy.touched_bytes(), 50 * CHUNK_BYTES, "the truth is counted while off");
    }

    #[test]
    fn scripted_faults_fire_only_at_their_command_and_drawn_ones_are_reported() {
        let on = FaultConfig {
            read_error: FaultSwitch::on(1.0),
            write_error: FaultSwitch::on(1.0),
            read_only: ReadOnlyFault { enabled: true, trigger: ReadOnlyTrigger::AfterWrites(u64::MAX) },
            ..FaultConfig::NONE
        };
        let mut drawn = disk(on);
        drawn.begin_op(Vec::new());
        assert!(drawn.write(0, &[1; 4096], WriteFlags::DATA).is_err());
        assert!(!read_ok(&mut drawn, 0));
        let fired = drawn.take_fired_faults();
        assert_eq!(fired.iter().map(|e| (e.kind, e.command)).collect::<Vec<_>>(), vec![(ScriptedFault::Write, 0), (ScriptedFault::Read, 1)]);
        assert!(fired.iter().all(|e| e.sector < 8), "sectors are relative to the command");

        let mut replay = disk(on);
        replay.script_faults();
        let armed = vec![
            FaultEvent { kind: ScriptedFault::Write, command: 1, sector: 3 },
            FaultEvent { kind: ScriptedFault::ReadOnly, command: 3, sector: 0 },
        ];
        replay.begin_op(armed);
        assert!(replay.write(0, &[1; 4096], WriteFlags::DATA).is_ok(), "probabilities are ignored in a replay");
        assert_eq!(replay.write(8192, &[1; 4096], WriteFlags::DATA), Err(DeviceError::Io { offset: 8192 + 3 * 512 }));
        assert!(read_ok(&mut replay, 0));
        assert_eq!(replay.write(0, &[2; 512], WriteFlags::DATA), Err(DeviceError::ReadOnly));
        replay.begin_op(Vec::new());
        assert_eq!(replay.write(0, &[2; 512], WriteFlags::DATA), Err(DeviceError::ReadOnly), "read-only stays");
    }
}
