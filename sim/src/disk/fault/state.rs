//! The live fault state of one disk: the random streams, the fault overlay
//! (bad sectors, touched storage, accepted writes), and the current op's
//! window (its command count, the faults armed for it and those fired).

use std::collections::BTreeSet;

use ext4_engine::device::{DeviceError, SECTOR_SIZE};
use ext4_engine::range_set::RangeSet;
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::config::{FaultConfig, FaultConfigError, ReadOnlyTrigger};
use super::event::{FaultEvent, FaultHit, FaultKind, ScriptedFault};
use crate::disk::rng::{stream_rng, Stream};
use crate::disk::store::CHUNK_BYTES;

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
    touched: RangeSet,
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
            touched: RangeSet::new(),
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

    /// The armed faults no command of the op reached, and its command count.
    pub fn take_unfired(&mut self) -> (Vec<FaultEvent>, u32) {
        (std::mem::take(&mut self.armed), self.command)
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
        range.end - range.start - self.touched.count_in(range)
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
        let gaps: Vec<_> = self.touched.gaps(range.start, range.end).collect();
        for gap in gaps {
            let added = self.touched.insert(gap);
            debug_assert!(added, "a gap of the set does not overlap it");
        }
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

