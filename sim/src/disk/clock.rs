//! Simulated time: nanoseconds since the disk was created, advanced by the
//! cost of the I/O the disk serves and by a run's pauses between ops. The
//! wall clock is never read, so two runs with the same seed and the same
//! steps agree to the nanosecond.

use std::fmt;

/// An instant on the simulated clock, in nanoseconds since the simulation began.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SimTime(u64);

impl SimTime {
    /// The moment the disk was created.
    pub const ZERO: SimTime = SimTime(0);

    pub const fn from_ns(ns: u64) -> SimTime {
        SimTime(ns)
    }

    pub const fn as_ns(self) -> u64 {
        self.0
    }

    /// Saturates at `u64::MAX` (about 584 simulated years) instead of wrapping:
    /// a clock that jumped backwards would corrupt every statistic derived from it.
    pub const fn saturating_add_ns(self, ns: u64) -> SimTime {
        SimTime(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self`; zero if `earlier` is later.
    pub const fn saturating_since_ns(self, earlier: SimTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for SimTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&DisplayNs(self.0), f)
    }
}

/// The clock a [`super::SimDisk`] owns. Only the disk advances it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimClock {
    now: SimTime,
}

impl SimClock {
    pub const fn new() -> SimClock {
        SimClock { now: SimTime::ZERO }
    }

    pub const fn now(&self) -> SimTime {
        self.now
    }

    /// Moves time forward by `ns` and returns the new instant.
    pub fn advance_ns(&mut self, ns: u64) -> SimTime {
        let before = self.now;
        self.now = self.now.saturating_add_ns(ns);
        debug_assert!(self.now >= before, "simulated time must never run backwards");
        self.now
    }
}

/// Formats a nanosecond count with a unit a human reads at a glance
/// (`950 ns`, `12.500 us`, `3.000 ms`, `1.250 s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DisplayNs(pub u64);

impl fmt::Display for DisplayNs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        // Integer arithmetic keeps the text identical on every platform; a float
        // formatter would be too, but this needs no argument about rounding modes.
        let (scale, unit) = match ns {
            0..1_000 => return write!(f, "{ns} ns"),
            1_000..1_000_000 => (1_000, "us"),
            1_000_000..1_000_000_000 => (1_000_000, "ms"),
            _ => (1_000_000_000, "s"),
        };
        let whole = ns / scale;
        let thousandths = (ns % scale) / (scale / 1_000);
        write!(f, "{whole}.{thousandths:03} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_advances_and_saturates_instead_of_wrapping() {
        let mut clock = SimClock::new();
        assert_eq!(clock.now(), SimTime::ZERO);
        assert_eq!(clock.advance_ns(1_500).as_ns(), 1_500);
        assert_eq!(clock.advance_ns(u64::MAX).as_ns(), u64::MAX);
        assert_eq!(clock.advance_ns(1).as_ns(), u64::MAX);
        assert_eq!(SimTime::from_ns(10).saturating_since_ns(SimTime::from_ns(25)), 0);
        assert_eq!(SimTime::from_ns(25).saturating_since_ns(SimTime::from_ns(10)), 15);
    }

    #[test]
    fn durations_print_with_a_readable_unit() {
        assert_eq!(DisplayNs(0).to_string(), "0 ns");
        assert_eq!(DisplayNs(999).to_string(), "999 ns");
        assert_eq!(DisplayNs(12_500).to_string(), "12.500 us");
        assert_eq!(DisplayNs(3_000_000).to_string(), "3.000 ms");
        assert_eq!(DisplayNs(1_250_000_000).to_string(), "1.250 s");
        assert_eq!(SimTime::from_ns(4_000_001).to_string(), "4.000 ms");
    }
}
