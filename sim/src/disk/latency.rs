//! The cost of one command: where the head is, where the I/O goes, how long it
//! is, and a seeded stream for rotational latency.
//!
//! - A command that starts where the last one ended pays transfer only.
//! - On a mechanical disk, a forward skip shorter than a track waits for the gap
//!   to pass beneath the head; anything else seeks (`a + b·sqrt(distance)`) and
//!   then waits a uniformly drawn fraction of a revolution.
//! - A solid-state disk pays no positioning, but a skip still counts as a seek in
//!   the statistics: locality is a property of the workload, not of the medium.
//! - Writes the cache absorbs pay overhead plus the host link; their media cost
//!   is paid when they are destaged.
//!
//! What it cannot see: command queueing and reordering inside the drive, read
//! look-ahead, and retries after media errors.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use super::profile::DiskProfile;

const NS_PER_S: u128 = 1_000_000_000;
const NS_PER_MINUTE: u64 = 60_000_000_000;

/// The parts of one command's cost, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCost {
    /// Fixed per-command cost.
    pub overhead_ns: u64,
    /// Arm movement.
    pub seek_ns: u64,
    /// Waiting for the platter: a drawn rotational delay, or an in-track gap.
    pub rotation_ns: u64,
    /// Moving the bytes, on the medium or over the host link.
    pub transfer_ns: u64,
    /// Distance from the head to the start of the I/O; 0 for a sequential command.
    pub seek_distance_bytes: u64,
}

impl IoCost {
    pub fn total_ns(&self) -> u64 {
        self.overhead_ns
            .saturating_add(self.seek_ns)
            .saturating_add(self.rotation_ns)
            .saturating_add(self.transfer_ns)
    }

    /// Time spent getting the head into place.
    pub fn positioning_ns(&self) -> u64 {
        self.seek_ns.saturating_add(self.rotation_ns)
    }

    /// The command did not start where the previous one ended.
    pub fn is_seek(&self) -> bool {
        self.seek_distance_bytes > 0
    }
}

/// One full platter turn, ns; 0 without a platter.
pub fn revolution_ns(profile: &DiskProfile) -> u64 {
    match profile.rotation_rpm {
        0 => 0,
        rpm => NS_PER_MINUTE / rpm,
    }
}

/// Arm travel time over `distance_bytes` on a `size_bytes` device, ns.
pub fn seek_ns(profile: &DiskProfile, size_bytes: u64, distance_bytes: u64) -> u64 {
    if distance_bytes == 0 || size_bytes == 0 {
        return 0;
    }
    let short = profile.seek_track_to_track_ns as f64;
    let span = profile.seek_full_stroke_ns.saturating_sub(profile.seek_track_to_track_ns) as f64;
    // sqrt is correctly rounded in IEEE 754, so this is identical on every host.
    let fraction = (distance_bytes.min(size_bytes) as f64 / size_bytes as f64).sqrt();
    let ns = (short + span * fraction).round();
    debug_assert!(ns >= short && ns <= profile.seek_full_stroke_ns as f64 + 1.0);
    ns as u64
}

/// Media rate at `offset`, bytes/s: linear from the outer rate at 0 to the inner
/// rate at the end of the device; 0 means instantaneous.
pub fn media_rate_at(profile: &DiskProfile, size_bytes: u64, offset: u64) -> u64 {
    let outer = profile.transfer_bytes_per_s;
    let inner = match profile.transfer_inner_bytes_per_s {
        0 => outer,
        inner => inner.min(outer),
    };
    if inner == outer || size_bytes == 0 {
        return outer;
    }
    let fall = u128::from(outer - inner) * u128::from(offset.min(size_bytes)) / u128::from(size_bytes);
    // fall <= outer - inner, so this neither underflows nor truncates.
    outer - fall as u64
}

/// Time to move `len` bytes at `bytes_per_s`, rounded up so no transfer is free
/// on a disk that has a rate; 0 when the rate is 0 (instantaneous).
pub fn transfer_ns(len: u64, bytes_per_s: u64) -> u64 {
    if bytes_per_s == 0 {
        return 0;
    }
    let ns = (u128::from(len) * NS_PER_S).div_ceil(u128::from(bytes_per_s));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// Positioning plus media transfer for `len` bytes at `offset` with the head at
/// `head`; no command overhead (destaging pays none per write).
pub fn media_cost(
    profile: &DiskProfile,
    size_bytes: u64,
    head: u64,
    offset: u64,
    len: u64,
    rng: &mut ChaCha8Rng,
) -> IoCost {
    let rate = media_rate_at(profile, size_bytes, offset);
    let mut cost = IoCost { transfer_ns: transfer_ns(len, rate), ..IoCost::default() };
    if offset == head {
        return cost;
    }
    let distance = offset.abs_diff(head);
    cost.seek_distance_bytes = distance;
    if !profile.is_mechanical() {
        return cost;
    }
    if offset > head && distance < profile.track_bytes {
        // Same track, just ahead: the platter carries the gap past the head.
        cost.rotation_ns = transfer_ns(distance, rate);
    } else {
        cost.seek_ns = seek_ns(profile, size_bytes, distance);
        let revolution = revolution_ns(profile);
        if revolution > 0 {
            cost.rotation_ns = rng.random_range(0..revolution);
        }
    }
    cost
}

/// A full command that touches the medium: overhead plus [`media_cost`].
pub fn command_cost(
    profile: &DiskProfile,
    size_bytes: u64,
    head: u64,
    offset: u64,
    len: u64,
    rng: &mut ChaCha8Rng,
) -> IoCost {
    IoCost {
        overhead_ns: profile.command_overhead_ns,
        ..media_cost(profile, size_bytes, head, offset, len, rng)
    }
}

/// A command served by the write cache: overhead plus the host link.
pub fn cached_cost(profile: &DiskProfile, len: u64) -> IoCost {
    IoCost {
        overhead_ns: profile.command_overhead_ns,
        transfer_ns: transfer_ns(len, profile.interface_bytes_per_s),
        ..IoCost::default()
    }
}

/// A command refused before any transfer (a fault): overhead only.
pub fn refused_cost(profile: &DiskProfile) -> IoCost {
    IoCost { overhead_ns: profile.command_overhead_ns, ..IoCost::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::rng::{stream_rng, Stream};

    const TIB: u64 = 1 << 40;

    fn hdd() -> DiskProfile {
        DiskProfile::builtin("hdd-7200").expect("built-in")
    }

    #[test]
    fn hdd_seek_cost_grows_with_distance_from_track_to_track_to_full_stroke() {
        let profile = hdd();
        let distances = [1, 4096, 1 << 20, 1 << 30, TIB / 100, TIB / 10, TIB / 2, TIB];
        let costs: Vec<u64> = distances.iter().map(|&d| seek_ns(&profile, TIB, d)).collect();
        assert!(costs.windows(2).all(|pair| pair[0] < pair[1]), "{costs:?}");
        assert!(costs[0] >= profile.seek_track_to_track_ns);
        assert_eq!(seek_ns(&profile, TIB, TIB), profile.seek_full_stroke_ns);
        assert_eq!(seek_ns(&profile, TIB, 2 * TIB), profile.seek_full_stroke_ns);
        assert_eq!(seek_ns(&profile, TIB, 0), 0);
    }

    #[test]
    fn media_cost_on_hdd_grows_with_distance_even_with_rotation_drawn() {
        let profile = hdd();
        let mut rng = stream_rng(1, Stream::Latency);
        let mut mean = |distance: u64| -> u64 {
            let total: u64 = (0..200)
                .map(|_| media_cost(&profile, TIB, 0, distance, 4096, &mut rng).total_ns())
                .sum();
            total / 200
        };
        let (near, far) = (mean(10 << 20), mean(TIB - 4096));
        assert!(near + 5_000_000 < far, "near {near} far {far}");
    }

    #[test]
    fn rotational_latency_is_uniform_over_one_revolution_averaging_half() {
        let profile = hdd();
        let revolution = revolution_ns(&profile);
        assert_eq!(revolution, 8_333_333);
        let mut rng = stream_rng(3, Stream::Latency);
        let draws: Vec<u64> = (0..20_000)
            .map(|_| media_cost(&profile, TIB, TIB / 2, 0, 512, &mut rng).rotation_ns)
            .collect();
        assert!(draws.iter().all(|&d| d < revolution));
        let mean = draws.iter().sum::<u64>() / draws.len() as u64;
        let half = revolution / 2;
        assert!(mean.abs_diff(half) < half / 20, "mean {mean} vs half {half}");
    }

    #[test]
    fn sequential_and_short_forward_skips_do_not_seek_on_hdd() {
        let profile = hdd();
        let mut rng = stream_rng(5, Stream::Latency);
        let sequential = media_cost(&profile, TIB, 8192, 8192, 4096, &mut rng);
        assert_eq!((sequential.positioning_ns(), sequential.is_seek()), (0, false));
        assert_eq!(sequential.transfer_ns, transfer_ns(4096, media_rate_at(&profile, TIB, 8192)));

        let skip = media_cost(&profile, TIB, 0, 64 * 1024, 4096, &mut rng);
        assert_eq!(skip.seek_ns, 0);
        // The gap passes at the zoned rate where the I/O lands.
        assert_eq!(skip.rotation_ns, transfer_ns(64 * 1024, media_rate_at(&profile, TIB, 64 * 1024)));
        assert!(skip.is_seek());

        let backwards = media_cost(&profile, TIB, 64 * 1024, 0, 4096, &mut rng);
        assert!(backwards.seek_ns >= profile.seek_track_to_track_ns);
    }

    #[test]
    fn inner_tracks_transfer_slower_than_outer_ones() {
        let profile = hdd();
        let outer = media_rate_at(&profile, TIB, 0);
        let middle = media_rate_at(&profile, TIB, TIB / 2);
        let inner = media_rate_at(&profile, TIB, TIB);
        assert_eq!((outer, middle, inner), (200_000_000, 150_000_000, 100_000_000));
        assert!(transfer_ns(1 << 20, inner) > transfer_ns(1 << 20, outer));
        let flat = DiskProfile { transfer_bytes_per_s: 7, ..DiskProfile::default() };
        assert_eq!(media_rate_at(&flat, TIB, TIB), 7);
    }

    #[test]
    fn ram_costs_nothing_anywhere() {
        let ram = DiskProfile::builtin("ram").expect("built-in");
        let mut rng = stream_rng(9, Stream::Latency);
        for (head, offset) in [(0, TIB - 512), (TIB / 3, 0), (4096, 4096)] {
            assert_eq!(command_cost(&ram, TIB, head, offset, 1 << 20, &mut rng).total_ns(), 0);
        }
        assert_eq!(cached_cost(&ram, 1 << 20).total_ns(), 0);
        assert_eq!(refused_cost(&ram).total_ns(), 0);
    }

    #[test]
    fn ssd_pays_overhead_and_transfer_but_no_positioning() {
        let ssd = DiskProfile::builtin("ssd").expect("built-in");
        let mut rng = stream_rng(2, Stream::Latency);
        let cost = command_cost(&ssd, TIB, 0, TIB / 2, 4096, &mut rng);
        assert_eq!(cost.positioning_ns(), 0);
        assert_eq!(cost.overhead_ns, ssd.command_overhead_ns);
        assert_eq!(cost.transfer_ns, transfer_ns(4096, ssd.transfer_bytes_per_s));
        assert!(cost.is_seek(), "the skip is still counted");
    }

    #[test]
    fn transfer_rounds_up_and_saturates() {
        assert_eq!(transfer_ns(1, 3), 333_333_334);
        assert_eq!(transfer_ns(1 << 20, 0), 0);
        assert_eq!(transfer_ns(u64::MAX, 1), u64::MAX);
    }
}
