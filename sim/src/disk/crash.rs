//! What survives a power loss: the durable image after a crash.
//!
//! The crash contract, on top of the cache's (see [`super::cache`]):
//!
//! - Everything durable before the crash (flushed, FUA, destaged) survives,
//!   byte for byte.
//! - Each pending write independently reached the medium with probability
//!   `keep_probability`, so any subset may survive: a later write can be kept
//!   while an earlier one is lost (reordering).
//! - Among the kept writes, overlapping sectors resolve by issue order: the newest
//!   kept write wins, exactly as if the kept ones had landed in order.
//! - A kept write is torn with probability `tear_probability`: only a prefix of
//!   it landed, ending on a boundary that is a multiple of the profile's
//!   `atomic_write_bytes` (absolute device offset). A write inside one atomic
//!   unit never tears.
//! - Every decision comes from the disk's crash stream, drawn in issue order, so
//!   the same seed and the same operations give the same post-crash image.
//!
//! What it cannot see: a torn unit with garbage inside it (units are all-or-
//! nothing here), and a write that landed as a non-prefix subset of its units.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

use super::cache::{WriteCache, WriteRecord};

/// How a crash treats pending writes. Probabilities are in `[0, 1]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrashPolicy {
    keep_probability: f64,
    tear_probability: f64,
}

/// Why a crash policy was refused.
#[derive(Clone, Copy, Debug, PartialEq, Error)]
pub enum CrashPolicyError {
    #[error("{what} must be a probability in [0, 1], got {value}")]
    Probability { what: &'static str, value: f64 },
}

fn check_probability(what: &'static str, value: f64) -> Result<f64, CrashPolicyError> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(CrashPolicyError::Probability { what, value })
    }
}

impl CrashPolicy {
    /// Nothing pending survives.
    pub const LOSE_ALL: CrashPolicy = CrashPolicy { keep_probability: 0.0, tear_probability: 0.0 };
    /// Everything pending survives whole, as if the cache had been flushed.
    pub const KEEP_ALL: CrashPolicy = CrashPolicy { keep_probability: 1.0, tear_probability: 0.0 };

    /// `keep_probability`: chance each pending write reached the medium.
    /// `tear_probability`: chance a kept write landed only in part.
    pub fn new(keep_probability: f64, tear_probability: f64) -> Result<CrashPolicy, CrashPolicyError> {
        Ok(CrashPolicy {
            keep_probability: check_probability("keep_probability", keep_probability)?,
            tear_probability: check_probability("tear_probability", tear_probability)?,
        })
    }

    pub fn keep_probability(&self) -> f64 {
        self.keep_probability
    }

    pub fn tear_probability(&self) -> f64 {
        self.tear_probability
    }
}

impl Default for CrashPolicy {
    /// Half the pending writes survive, one kept write in ten tears.
    fn default() -> Self {
        CrashPolicy { keep_probability: 0.5, tear_probability: 0.1 }
    }
}

/// What happened to one pending write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Dropped,
    Kept,
    /// The first `kept_bytes` landed; `0 < kept_bytes < len`.
    Torn { kept_bytes: u64 },
}

/// The crash's decisions, for traces and for tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CrashReport {
    /// One entry per pending write, in issue order.
    pub fates: Vec<(WriteRecord, Fate)>,
}

impl CrashReport {
    fn count(&self, wanted: fn(&Fate) -> bool) -> usize {
        self.fates.iter().filter(|(_, fate)| wanted(fate)).count()
    }

    pub fn kept(&self) -> usize {
        self.count(|fate| *fate == Fate::Kept)
    }

    pub fn torn(&self) -> usize {
        self.count(|fate| matches!(fate, Fate::Torn { .. }))
    }

    pub fn dropped(&self) -> usize {
        self.count(|fate| *fate == Fate::Dropped)
    }
}

/// The atomic-unit boundaries strictly inside `[offset, offset + len)`, as
/// (first boundary, count); `None` if the write sits inside one unit.
pub fn tear_points(offset: u64, len: u64, atomic_bytes: u64) -> Option<(u64, u64)> {
    assert!(atomic_bytes.is_power_of_two(), "atomic unit {atomic_bytes} is not a power of two");
    let end = offset.checked_add(len)?;
    let first = (offset / atomic_bytes + 1).checked_mul(atomic_bytes)?;
    if first >= end {
        return None;
    }
    let last = (end - 1) / atomic_bytes * atomic_bytes;
    debug_assert!(first <= last && last < end);
    Some((first, (last - first) / atomic_bytes + 1))
}

fn decide(record: &WriteRecord, atomic_bytes: u64, policy: &CrashPolicy, rng: &mut ChaCha8Rng) -> Fate {
    if !rng.random_bool(policy.keep_probability) {
        return Fate::Dropped;
    }
    if !rng.random_bool(policy.tear_probability) {
        return Fate::Kept;
    }
    match tear_points(record.offset, record.len, atomic_bytes) {
        None => Fate::Kept,
        Some((first, count)) => {
            let boundary = first + rng.random_range(0..count) * atomic_bytes;
            Fate::Torn { kept_bytes: boundary - record.offset }
        }
    }
}

/// Replaces the cache's state with a post-crash durable image: pending writes
/// are resolved by `policy` and the cache is left empty.
pub fn crash(
    cache: &mut WriteCache,
    atomic_bytes: u64,
    policy: &CrashPolicy,
    rng: &mut ChaCha8Rng,
) -> CrashReport {
    let mut fates = Vec::with_capacity(cache.pending_writes());
    cache.drain(|record| {
        let fate = decide(record, atomic_bytes, policy, rng);
        fates.push((*record, fate));
        match fate {
            Fate::Dropped => 0,
            Fate::Kept => record.len,
            Fate::Torn { kept_bytes } => kept_bytes,
        }
    });
    debug_assert_eq!(cache.pending_writes(), 0);
    CrashReport { fates }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::rng::{stream_rng, Stream};
    use ext4_engine::device::{IoClass, SECTOR_SIZE};
    use proptest::prelude::*;

    const BACKGROUND: u8 = 0xAA;

    fn durable(cache: &WriteCache, offset: u64, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        cache.read_durable(offset, &mut buf);
        buf
    }

    #[test]
    fn policies_refuse_values_that_are_not_probabilities() {
        assert!(CrashPolicy::new(0.0, 1.0).is_ok());
        for (keep, tear) in [(-0.1, 0.0), (1.1, 0.0), (0.5, f64::NAN), (0.5, 2.0)] {
            assert!(CrashPolicy::new(keep, tear).is_err(), "{keep} {tear}");
        }
    }

    #[test]
    fn tear_points_are_the_unit_boundaries_strictly_inside_a_write() {
        assert_eq!(tear_points(0, 4096, 4096), None);
        assert_eq!(tear_points(512, 3584, 4096), None);
        assert_eq!(tear_points(0, 8192, 4096), Some((4096, 1)));
        assert_eq!(tear_points(512, 8192, 4096), Some((4096, 2)));
        assert_eq!(tear_points(0, 2048, 512), Some((512, 3)));
        assert_eq!(tear_points(u64::MAX - 511, 512, 512), None);
    }

    #[test]
    fn unflushed_writes_can_vanish_and_durable_ones_always_survive() {
        for seed in 0..32 {
            let mut cache = WriteCache::new();
            cache.write_pending(0, &[1; 4096], IoClass::Data);
            cache.flush_all();
            cache.write_through(8192, &[2; 4096], IoClass::Journal);
            cache.write_pending(16384, &[3; 4096], IoClass::Data);
            let policy = CrashPolicy::new(0.0, 1.0).expect("valid");
            let report = crash(&mut cache, 512, &policy, &mut stream_rng(seed, Stream::Crash));
            assert_eq!(report.dropped(), 1);
            assert_eq!(durable(&cache, 0, 4096), vec![1; 4096], "flushed write, seed {seed}");
            assert_eq!(durable(&cache, 8192, 4096), vec![2; 4096], "FUA write, seed {seed}");
            assert_eq!(durable(&cache, 16384, 4096), vec![0; 4096], "pending write, seed {seed}");
        }
    }

    #[test]
    fn some_seeds_keep_a_later_write_and_drop_an_earlier_one() {
        let mut reordered = 0;
        let mut in_order = 0;
        for seed in 0..64 {
            let mut cache = WriteCache::new();
            cache.write_pending(0, &[1; 512], IoClass::Journal);
            cache.write_pending(4096, &[2; 512], IoClass::Journal);
            crash(&mut cache, 512, &CrashPolicy::default(), &mut stream_rng(seed, Stream::Crash));
            let earlier = durable(&cache, 0, 512) == vec![1; 512];
            let later = durable(&cache, 4096, 512) == vec![2; 512];
            reordered += usize::from(later && !earlier);
            in_order += usize::from(earlier && !later);
        }
        assert!(reordered > 0, "no seed kept the later write alone");
        assert!(in_order > 0, "no seed kept the earlier write alone");
    }

    #[test]
    fn overlapping_kept_writes_resolve_by_issue_order() {
        let mut saw_older_alone = false;
        for seed in 0..64 {
            let mut cache = WriteCache::new();
            cache.write_pending(0, &[1; 1024], IoClass::Data);
            cache.write_pending(0, &[2; 512], IoClass::Data);
            // A 4 KiB unit holds both writes whole, so neither can tear.
            let report = crash(&mut cache, 4096, &CrashPolicy::default(), &mut stream_rng(seed, Stream::Crash));
            let expected_first = match (report.fates[0].1, report.fates[1].1) {
                (_, Fate::Kept) => 2,
                (Fate::Kept, Fate::Dropped) => {
                    saw_older_alone = true;
                    1
                }
                (Fate::Dropped, Fate::Dropped) => 0,
                other => panic!("nothing here can tear: {other:?}"),
            };
            assert_eq!(durable(&cache, 0, 512), vec![expected_first; 512], "seed {seed}");
        }
        assert!(saw_older_alone, "the older write alone must sometimes survive");
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 512], IoClass::Data);
        cache.write_pending(0, &[2; 512], IoClass::Data);
        crash(&mut cache, 512, &CrashPolicy::KEEP_ALL, &mut stream_rng(0, Stream::Crash));
        assert_eq!(durable(&cache, 0, 512), vec![2; 512]);
    }

    #[test]
    fn a_multi_unit_write_does_tear_when_tearing_is_certain() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[7; 65536], IoClass::Data);
        let policy = CrashPolicy::new(1.0, 1.0).expect("valid");
        let report = crash(&mut cache, 4096, &policy, &mut stream_rng(11, Stream::Crash));
        let Fate::Torn { kept_bytes } = report.fates[0].1 else {
            panic!("expected a tear, got {:?}", report.fates[0].1);
        };
        assert!(kept_bytes > 0 && kept_bytes < 65536 && kept_bytes % 4096 == 0);
        let image = durable(&cache, 0, 65536);
        let landed = image.iter().take_while(|&&b| b == 7).count() as u64;
        assert_eq!(landed, kept_bytes);
        assert!(image[landed as usize..].iter().all(|&b| b == 0));
    }

    #[test]
    fn without_tearing_every_kept_write_lands_whole() {
        let mut cache = WriteCache::new();
        for index in 0..16u64 {
            cache.write_pending(index * 65536, &[index as u8 + 1; 32768], IoClass::Data);
        }
        let report = crash(&mut cache, 512, &CrashPolicy::KEEP_ALL, &mut stream_rng(4, Stream::Crash));
        assert_eq!((report.kept(), report.torn(), report.dropped()), (16, 0, 0));
        for index in 0..16u64 {
            assert_eq!(durable(&cache, index * 65536, 32768), vec![index as u8 + 1; 32768]);
        }
    }

    /// Up to eight non-overlapping writes laid out left to right:
    /// (gap before it, length), both in sectors.
    fn layouts() -> impl Strategy<Value = Vec<(u64, u64)>> {
        prop::collection::vec((0u64..20, 1u64..40), 1..8)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        #[test]
        fn tears_happen_only_at_atomic_unit_boundaries(
            layout in layouts(),
            atomic_shift in 0u32..4,
            keep in 0.0f64..=1.0,
            tear in 0.0f64..=1.0,
            seed in any::<u64>(),
        ) {
            let atomic = 512u64 << atomic_shift;
            let mut cache = WriteCache::new();
            let mut writes = Vec::new();
            let mut cursor = 3 * SECTOR_SIZE;
            for (index, (gap, sectors)) in layout.iter().enumerate() {
                let offset = cursor + gap * SECTOR_SIZE;
                let len = sectors * SECTOR_SIZE;
                writes.push((offset, len, index as u8 + 1));
                cursor = offset + len;
            }
            cache.write_pending(0, &vec![BACKGROUND; cursor as usize], IoClass::Data);
            cache.flush_all();
            for &(offset, len, byte) in &writes {
                cache.write_pending(offset, &vec![byte; len as usize], IoClass::Data);
            }
            let policy = CrashPolicy::new(keep, tear).expect("valid");
            let report = crash(&mut cache, atomic, &policy, &mut stream_rng(seed, Stream::Crash));
            prop_assert_eq!(report.fates.len(), writes.len());

            for (&(offset, len, byte), (_, fate)) in writes.iter().zip(&report.fates) {
                let image = durable(&cache, offset, len as usize);
                let landed = image.iter().take_while(|&&b| b == byte).count() as u64;
                prop_assert!(image[landed as usize..].iter().all(|&b| b == BACKGROUND));
                let end_of_prefix = offset + landed;
                prop_assert!(
                    landed == 0 || landed == len || end_of_prefix % atomic == 0,
                    "prefix ends at {} inside a {}-byte unit", end_of_prefix, atomic
                );
                let expected = match fate {
                    Fate::Dropped => 0,
                    Fate::Kept => len,
                    Fate::Torn { kept_bytes } => *kept_bytes,
                };
                prop_assert_eq!(landed, expected);
            }
            // The gaps between writes were never written and keep the background.
            let whole = durable(&cache, 0, cursor as usize);
            for (index, &b) in whole.iter().enumerate() {
                let at = index as u64;
                let inside = writes.iter().any(|&(offset, len, _)| at >= offset && at < offset + len);
                prop_assert!(inside || b == BACKGROUND);
            }
        }
    }
}
