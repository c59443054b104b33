//! Where simulated time went: the workload's ops, by kind and with latency
//! percentiles, apart from the harness's own work (resyncs, checks), so the
//! workload's figures do not depend on how often the harness looks.
//!
//! - An op's latency is the simulated time its device spent on it; for a
//!   split op, its two halves together (not the others' ops in between).
//! - Crash recovery (the mount after a crash, journal replay included) is
//!   the system's own work and counts as the workload's.
//! - The harness's time is what its resyncs cost on the run's disk plus
//!   what its checks cost on their own copy of it.

use std::collections::BTreeMap;

use ext4_model::OpKind;

/// Latency percentiles of one op kind, in simulated ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Percentiles {
    pub count: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// Simulated time of one run, split by who spent it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimTime {
    latencies: BTreeMap<OpKind, Vec<u64>>,
    /// Ops' device time plus crash recovery.
    pub workload_ns: u64,
    /// Of `workload_ns`, the mounts after crashes.
    pub recovery_ns: u64,
    /// Resyncs on the run's disk and checks on their copies.
    pub harness_ns: u64,
    /// Pauses between ops: time that passed with no I/O.
    pub idle_ns: u64,
}

impl SimTime {
    pub fn record_op(&mut self, kind: OpKind, ns: u64) {
        self.latencies.entry(kind).or_default().push(ns);
        self.workload_ns = self.workload_ns.saturating_add(ns);
    }

    pub fn record_recovery(&mut self, ns: u64) {
        self.recovery_ns = self.recovery_ns.saturating_add(ns);
        self.workload_ns = self.workload_ns.saturating_add(ns);
    }

    pub fn record_idle(&mut self, ns: u64) {
        self.idle_ns = self.idle_ns.saturating_add(ns);
    }

    pub fn record_harness(&mut self, ns: u64) {
        self.harness_ns = self.harness_ns.saturating_add(ns);
    }

    /// Percentiles (nearest rank) by op kind, kinds that ran only.
    pub fn percentiles(&self) -> Vec<(OpKind, Percentiles)> {
        self.latencies
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(kind, samples)| {
                let mut sorted = samples.clone();
                sorted.sort_unstable();
                let rank = |p: u64| {
                    let n = sorted.len() as u64;
                    let i = (p * n).div_ceil(100).clamp(1, n) - 1;
                    sorted[i as usize]
                };
                let max_ns = *sorted.last().expect("non-empty");
                (*kind, Percentiles { count: sorted.len() as u64, p50_ns: rank(50), p99_ns: rank(99), max_ns })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_and_time_is_split_by_who_spent_it() {
        let mut t = SimTime::default();
        for ns in 1..=100 {
            t.record_op(OpKind::Write, ns);
        }
        t.record_op(OpKind::Stat, 7);
        t.record_recovery(1000);
        t.record_harness(5);
        let p = t.percentiles();
        assert_eq!(p[0], (OpKind::Stat, Percentiles { count: 1, p50_ns: 7, p99_ns: 7, max_ns: 7 }));
        assert_eq!(p[1], (OpKind::Write, Percentiles { count: 100, p50_ns: 50, p99_ns: 99, max_ns: 100 }));
        assert_eq!((t.workload_ns, t.recovery_ns, t.harness_ns), (5050 + 7 + 1000, 1000, 5));
    }
}
