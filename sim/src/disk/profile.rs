//! Disk profiles: every timing and geometry knob of a simulated disk as plain
//! data, the five built-ins, and the consistency rules a profile must obey.
//!
//! Units are the last word of every field name (`_ns`, `_bytes`, `_bytes_per_s`,
//! `_rpm`). A zero rate means "instantaneous", a zero time means "free", so the
//! all-zero profile is a perfect, costless disk. A user profile is a `key = value`
//! text file (see [`super::profile_text`]).

use thiserror::Error;

/// Names accepted by [`DiskProfile::builtin`].
pub const BUILTIN_PROFILES: [&str; 5] = ["hdd-5400", "hdd-7200", "ssd", "nvme", "ram"];

/// Spindle speeds above this are not disks; the limit also keeps one revolution
/// at least 60 µs long, so a revolution never rounds down to zero nanoseconds.
pub const MAX_ROTATION_RPM: u64 = 1_000_000;

/// Largest all-or-nothing write unit a profile may claim, in bytes.
pub const MAX_ATOMIC_WRITE_BYTES: u64 = 65_536;

const MIB: u64 = 1 << 20;

/// Timing and geometry of a simulated disk. Defaults are those of
/// [`DiskProfile::default`]: a costless write-through disk with 512-byte atomicity.
///
/// Seek time for a distance `d` bytes on a device of `size` bytes is
/// `seek_track_to_track_ns + (seek_full_stroke_ns - seek_track_to_track_ns) * sqrt(d / size)`,
/// the usual square-root fit of arm acceleration over short and long strokes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskProfile {
    /// Shown in reports. Default: `"custom"`.
    pub name: String,
    /// Shortest seek (one track), ns. Default: 0 (no arm).
    pub seek_track_to_track_ns: u64,
    /// Seek across the whole device, ns; at least `seek_track_to_track_ns`. Default: 0.
    pub seek_full_stroke_ns: u64,
    /// Spindle speed, rpm; 0 = no platter. After each seek the head waits a
    /// rotational delay drawn uniformly from `[0, 60e9 / rpm)` ns, half a
    /// revolution on average. Default: 0.
    pub rotation_rpm: u64,
    /// Bytes per track. A forward skip shorter than this moves no arm: the head
    /// waits for the gap to pass beneath it. Default: 0 (every skip seeks).
    pub track_bytes: u64,
    /// Media rate at the outermost track (offset 0), bytes/s; 0 = instantaneous.
    /// Default: 0.
    pub transfer_bytes_per_s: u64,
    /// Media rate at the innermost track (end of device), bytes/s; 0 = same as
    /// `transfer_bytes_per_s`. Zoned recording: the rate falls linearly between.
    /// Default: 0.
    pub transfer_inner_bytes_per_s: u64,
    /// Host link rate for transfers the write cache absorbs, bytes/s;
    /// 0 = instantaneous. Default: 0.
    pub interface_bytes_per_s: u64,
    /// Fixed cost of every command (protocol, firmware), ns. Default: 0.
    pub command_overhead_ns: u64,
    /// Fixed cost of a cache flush on top of destaging what is pending, ns.
    /// Default: 0.
    pub flush_ns: u64,
    /// Largest aligned unit the medium writes all-or-nothing, bytes; a power of
    /// two in 512..=65536 (512 for legacy drives, 4096 for Advanced Format and
    /// flash). A crash tears writes only at multiples of it. Default: 512.
    pub atomic_write_bytes: u64,
    /// Volatile write cache capacity, bytes; 0 = write-through (nothing is ever
    /// pending). A write larger than the cache goes straight to the medium.
    /// Default: 0.
    pub write_cache_bytes: u64,
}

impl Default for DiskProfile {
    fn default() -> Self {
        DiskProfile {
            name: "custom".to_string(),
            seek_track_to_track_ns: 0,
            seek_full_stroke_ns: 0,
            rotation_rpm: 0,
            track_bytes: 0,
            transfer_bytes_per_s: 0,
            transfer_inner_bytes_per_s: 0,
            interface_bytes_per_s: 0,
            command_overhead_ns: 0,
            flush_ns: 0,
            atomic_write_bytes: 512,
            write_cache_bytes: 0,
        }
    }
}

/// Why a profile is inconsistent.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ProfileError {
    #[error("name is empty")]
    EmptyName,
    #[error("seek_full_stroke_ns ({full_stroke_ns}) is below seek_track_to_track_ns ({track_to_track_ns})")]
    FullStrokeBelowTrackToTrack { track_to_track_ns: u64, full_stroke_ns: u64 },
    #[error("rotation_rpm {0} exceeds {MAX_ROTATION_RPM}")]
    RotationRpm(u64),
    #[error("transfer_inner_bytes_per_s ({inner}) exceeds transfer_bytes_per_s ({outer}); inner tracks are never faster")]
    InnerFasterThanOuter { inner: u64, outer: u64 },
    #[error("atomic_write_bytes {0} is not a power of two in 512..={MAX_ATOMIC_WRITE_BYTES}")]
    AtomicWriteBytes(u64),
}

impl ProfileError {
    /// The profile key most responsible, so a parser can point at its line.
    pub fn key(&self) -> &'static str {
        match self {
            ProfileError::EmptyName => "name",
            ProfileError::FullStrokeBelowTrackToTrack { .. } => "seek_full_stroke_ns",
            ProfileError::RotationRpm(_) => "rotation_rpm",
            ProfileError::InnerFasterThanOuter { .. } => "transfer_inner_bytes_per_s",
            ProfileError::AtomicWriteBytes(_) => "atomic_write_bytes",
        }
    }
}

impl DiskProfile {
    /// A built-in profile by name (see [`BUILTIN_PROFILES`]).
    ///
    /// The numbers are typical datasheet figures, rounded: they should make a
    /// layout change show its shape (seeks, rotations, flush stalls), not predict
    /// one drive model to the microsecond.
    pub fn builtin(name: &str) -> Option<DiskProfile> {
        let profile = match name {
            // A laptop drive: slow spindle, long seeks, 4 KiB physical sectors.
            "hdd-5400" => DiskProfile {
                name: name.to_string(),
                seek_track_to_track_ns: 2_000_000,
                seek_full_stroke_ns: 24_000_000,
                rotation_rpm: 5_400,
                track_bytes: 768 * 1024,
                transfer_bytes_per_s: 120_000_000,
                transfer_inner_bytes_per_s: 60_000_000,
                interface_bytes_per_s: 300_000_000,
                command_overhead_ns: 100_000,
                flush_ns: 500_000,
                atomic_write_bytes: 4096,
                write_cache_bytes: 8 * MIB,
            },
            // A desktop/enterprise drive with legacy 512-byte sectors.
            "hdd-7200" => DiskProfile {
                name: name.to_string(),
                seek_track_to_track_ns: 1_000_000,
                seek_full_stroke_ns: 18_000_000,
                rotation_rpm: 7_200,
                track_bytes: MIB,
                transfer_bytes_per_s: 200_000_000,
                transfer_inner_bytes_per_s: 100_000_000,
                interface_bytes_per_s: 600_000_000,
                command_overhead_ns: 50_000,
                flush_ns: 300_000,
                atomic_write_bytes: 512,
                write_cache_bytes: 64 * MIB,
            },
            // A SATA SSD: no arm, link-bound, slow flush (no power-loss protection).
            "ssd" => DiskProfile {
                name: name.to_string(),
                transfer_bytes_per_s: 520_000_000,
                interface_bytes_per_s: 600_000_000,
                command_overhead_ns: 60_000,
                flush_ns: 500_000,
                atomic_write_bytes: 4096,
                write_cache_bytes: 32 * MIB,
                ..DiskProfile::default()
            },
            "nvme" => DiskProfile {
                name: name.to_string(),
                transfer_bytes_per_s: 3_200_000_000,
                interface_bytes_per_s: 3_500_000_000,
                command_overhead_ns: 15_000,
                flush_ns: 100_000,
                atomic_write_bytes: 4096,
                write_cache_bytes: 64 * MIB,
                ..DiskProfile::default()
            },
            // Costs nothing, but keeps a large volatile cache so crash testing
            // still has pending writes to lose.
            "ram" => DiskProfile {
                name: name.to_string(),
                atomic_write_bytes: 512,
                write_cache_bytes: 1024 * MIB,
                ..DiskProfile::default()
            },
            _ => return None,
        };
        debug_assert_eq!(profile.validate(), Ok(()), "built-in {name} must be consistent");
        Some(profile)
    }

    /// Checks the rules every profile obeys; see [`ProfileError`].
    pub fn validate(&self) -> Result<(), ProfileError> {
        if self.name.trim().is_empty() {
            return Err(ProfileError::EmptyName);
        }
        if self.seek_full_stroke_ns < self.seek_track_to_track_ns {
            return Err(ProfileError::FullStrokeBelowTrackToTrack {
                track_to_track_ns: self.seek_track_to_track_ns,
                full_stroke_ns: self.seek_full_stroke_ns,
            });
        }
        if self.rotation_rpm > MAX_ROTATION_RPM {
            return Err(ProfileError::RotationRpm(self.rotation_rpm));
        }
        if self.transfer_inner_bytes_per_s > self.transfer_bytes_per_s {
            return Err(ProfileError::InnerFasterThanOuter {
                inner: self.transfer_inner_bytes_per_s,
                outer: self.transfer_bytes_per_s,
            });
        }
        let atomic = self.atomic_write_bytes;
        if !atomic.is_power_of_two() || !(512..=MAX_ATOMIC_WRITE_BYTES).contains(&atomic) {
            return Err(ProfileError::AtomicWriteBytes(atomic));
        }
        Ok(())
    }

    /// Whether the disk has an arm or a platter, i.e. whether position costs time.
    pub fn is_mechanical(&self) -> bool {
        self.rotation_rpm > 0 || self.seek_full_stroke_ns > 0
    }

    /// The numeric knobs as (key, value), in the order a profile file lists them.
    pub fn numeric_fields(&self) -> [(&'static str, u64); 11] {
        [
            ("seek_track_to_track_ns", self.seek_track_to_track_ns),
            ("seek_full_stroke_ns", self.seek_full_stroke_ns),
            ("rotation_rpm", self.rotation_rpm),
            ("track_bytes", self.track_bytes),
            ("transfer_bytes_per_s", self.transfer_bytes_per_s),
            ("transfer_inner_bytes_per_s", self.transfer_inner_bytes_per_s),
            ("interface_bytes_per_s", self.interface_bytes_per_s),
            ("command_overhead_ns", self.command_overhead_ns),
            ("flush_ns", self.flush_ns),
            ("atomic_write_bytes", self.atomic_write_bytes),
            ("write_cache_bytes", self.write_cache_bytes),
        ]
    }

    /// The numeric knob called `key`, for the parser to set.
    pub fn numeric_field_mut(&mut self, key: &str) -> Option<&mut u64> {
        let field = match key {
            "seek_track_to_track_ns" => &mut self.seek_track_to_track_ns,
            "seek_full_stroke_ns" => &mut self.seek_full_stroke_ns,
            "rotation_rpm" => &mut self.rotation_rpm,
            "track_bytes" => &mut self.track_bytes,
            "transfer_bytes_per_s" => &mut self.transfer_bytes_per_s,
            "transfer_inner_bytes_per_s" => &mut self.transfer_inner_bytes_per_s,
            "interface_bytes_per_s" => &mut self.interface_bytes_per_s,
            "command_overhead_ns" => &mut self.command_overhead_ns,
            "flush_ns" => &mut self.flush_ns,
            "atomic_write_bytes" => &mut self.atomic_write_bytes,
            "write_cache_bytes" => &mut self.write_cache_bytes,
            _ => return None,
        };
        Some(field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_exists_is_consistent_and_carries_its_name() {
        for name in BUILTIN_PROFILES {
            let profile = DiskProfile::builtin(name).expect("listed built-in exists");
            assert_eq!(profile.validate(), Ok(()), "{name}");
            assert_eq!(profile.name, name);
        }
        assert_eq!(DiskProfile::builtin("floppy"), None);
        assert_eq!(DiskProfile::default().validate(), Ok(()));
    }

    #[test]
    fn builtins_have_the_shape_their_names_promise() {
        let by_name = |name| DiskProfile::builtin(name).expect("built-in");
        let (slow, fast) = (by_name("hdd-5400"), by_name("hdd-7200"));
        assert!(slow.is_mechanical() && fast.is_mechanical());
        assert!(slow.seek_full_stroke_ns > fast.seek_full_stroke_ns);
        assert!(!by_name("ssd").is_mechanical() && !by_name("nvme").is_mechanical());
        assert!(by_name("nvme").command_overhead_ns < by_name("ssd").command_overhead_ns);
        let ram = by_name("ram");
        let costs: u64 = ram
            .numeric_fields()
            .iter()
            .filter(|(key, _)| key.ends_with("_ns") || key.ends_with("_rpm") || key.ends_with("_per_s"))
            .map(|&(_, value)| value)
            .sum();
        assert_eq!(costs, 0, "ram must cost nothing");
        assert!(ram.write_cache_bytes > 0, "ram keeps a cache so crashes can lose writes");
    }

    #[test]
    fn validation_rejects_each_inconsistency_and_names_its_key() {
        let base = DiskProfile::default();
        let cases = [
            (DiskProfile { name: " ".into(), ..base.clone() }, "name"),
            (
                DiskProfile { seek_track_to_track_ns: 5, seek_full_stroke_ns: 4, ..base.clone() },
                "seek_full_stroke_ns",
            ),
            (DiskProfile { rotation_rpm: MAX_ROTATION_RPM + 1, ..base.clone() }, "rotation_rpm"),
            (
                DiskProfile { transfer_bytes_per_s: 10, transfer_inner_bytes_per_s: 11, ..base.clone() },
                "transfer_inner_bytes_per_s",
            ),
            (DiskProfile { atomic_write_bytes: 1000, ..base.clone() }, "atomic_write_bytes"),
            (DiskProfile { atomic_write_bytes: 256, ..base.clone() }, "atomic_write_bytes"),
            (DiskProfile { atomic_write_bytes: 1 << 17, ..base.clone() }, "atomic_write_bytes"),
        ];
        for (profile, key) in cases {
            let err = profile.validate().expect_err(key);
            assert_eq!(err.key(), key, "{err}");
        }
    }

    #[test]
    fn every_listed_field_can_be_set_by_its_key() {
        let mut profile = DiskProfile::default();
        for (key, _) in DiskProfile::default().numeric_fields() {
            let slot = profile.numeric_field_mut(key).expect("listed key is settable");
            *slot = 4096;
        }
        assert!(profile.numeric_fields().iter().all(|&(_, value)| value == 4096));
        assert!(profile.numeric_field_mut("name").is_none());
    }
}
