//! The `lockstep` fuzz target: model and engine in lockstep on runs the
//! swarm's own generator makes, with every choice it would draw from a
//! seed drawn from the fuzzer's input instead (`crate::draws`). So paths
//! come from the names made so far, op kinds carry the swarm's weights
//! (and its switched-off kinds), offsets and lengths lean on EOF and block
//! edges, and tasks, crash points, pauses (the commit timer, dirty expiry)
//! and the flusher come from the input too. A four-byte header picks the
//! mount (from the supported set, block larger than page included), the
//! tasks, crashes and write faults, and the seed of the disk's own streams.

use crate::engine_target::EngineFactory;
use crate::run::{run_input, RunResult, RunSpec};
use crate::target::TargetFactory;

/// Mounts the header picks from, each with a disk that has eight block
/// groups or more where that fits in memory (so Orlov's and mballoc's
/// spreading has groups to choose among): 8 MiB groups at 1 KiB blocks,
/// 128 MiB at 4 KiB, 2 GiB at 16 KiB; a 64 KiB-block group is 32 GiB, of
/// which the disk holds two.
pub const LOCKSTEP_MOUNTS: [(&str, u64); 14] = [
    ("", 1 << 30),
    ("data=journal", 1 << 30),
    ("data=writeback", 1 << 30),
    ("nodelalloc", 1 << 30),
    ("data=writeback,nodelalloc,dioread_lock", 1 << 30),
    ("data=writeback,journal_async_commit,commit=1", 1 << 30),
    ("noauto_da_alloc,max_folio_order=2", 1 << 30),
    ("page_cache_mb=1", 1 << 30),
    ("bs=1k", 64 << 20),
    ("bs=1k,data=journal,nodelalloc", 64 << 20),
    ("bs=16k,ps=4k", 16 << 30),
    ("bs=64k,ps=4k,data=journal", 64 << 30),
    ("bs=4k,ps=64k", 1 << 30),
    ("cluster=16k", 1 << 30),
];

/// Bytes of the header before the draws.
pub const HEADER_BYTES: usize = 4;
/// Ops one input may run: about what 8 KiB of draws reach.
pub const MAX_LOCKSTEP_OPS: u64 = 256;

/// The run an input's header asks for.
pub fn lockstep_spec(header: [u8; HEADER_BYTES]) -> RunSpec {
    let (mount, disk_bytes) = LOCKSTEP_MOUNTS[usize::from(header[0]) % LOCKSTEP_MOUNTS.len()];
    let mount = mount.parse().expect("a supported mount");
    // One task mostly; up to four, whose ops the input interleaves.
    let tasks = match header[1] {
        0..=175 => 1,
        176..=215 => 2,
        216..=239 => 3,
        _ => 4,
    };
    // A crash about every 24 ops in one input of four.
    let crash_every = if header[2] >= 192 { 24 } else { 0 };
    // Write errors in one of four; the disk draws where from its seed.
    let faults = if header[3] & 3 == 3 { "write".parse().expect("a fault switch") } else { crate::disk::FaultConfig::NONE };
    RunSpec { tasks, crash_every, faults, disk_bytes, fsck_every: 0, seed: u64::from(header[3] >> 2), ..RunSpec::new(0, MAX_LOCKSTEP_OPS, mount) }
}

/// Runs one input: any divergence, crash-state violation, lock-discipline
/// failure or unclean engine fsck at the end panics with the report and
/// the trace that replays it (`ext4sim replay`). None for an input too
/// short to hold a header.
pub fn lockstep(data: &[u8]) -> Option<RunResult> {
    lockstep_on(&EngineFactory, data)
}

/// [`lockstep`] against any target (a bug twin runs the same body).
pub fn lockstep_on<F: TargetFactory>(factory: &F, data: &[u8]) -> Option<RunResult> {
    let (header, draws) = data.split_first_chunk::<HEADER_BYTES>()?;
    let spec = lockstep_spec(*header);
    let result = match run_input(factory, &spec, draws) {
        Ok(r) => r,
        Err(e) => panic!("lockstep could not start a run the header allows ({}): {e}", spec.mount),
    };
    if let Some(failure) = &result.failure {
        // Faults are recorded as they fire here: every step replays.
        let trace = crate::trace::Trace { spec: spec.clone(), steps: result.steps.clone() }.to_text();
        panic!("lockstep input failed: {failure}\n{trace}");
    }
    Some(result)
}

/// What a set of inputs reached: the ops they ran, those that succeeded,
/// and the successful data ops (writes of any kind, reads, truncates,
/// fallocates) among them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    pub inputs: u64,
    pub ops: u64,
    pub ok: u64,
    pub writes: u64,
    pub reads: u64,
    pub truncates: u64,
    pub fallocates: u64,
}

impl Reach {
    pub fn add(&mut self, r: &RunResult) {
        self.inputs += 1;
        self.ops += r.stats.ops;
        for (&kind, &n) in &r.stats.ok {
            self.succeeded(kind, n);
        }
    }

    /// Adds another count to this one.
    pub fn merge(&mut self, other: &Reach) {
        self.inputs += other.inputs;
        self.ops += other.ops;
        self.ok += other.ok;
        self.writes += other.writes;
        self.reads += other.reads;
        self.truncates += other.truncates;
        self.fallocates += other.fallocates;
    }

    /// Counts `n` ops of `kind` that succeeded (not the ops run: those
    /// the caller adds to `ops`).
    pub fn succeeded(&mut self, kind: ext4_model::OpKind, n: u64) {
        use ext4_model::OpKind as K;
        self.ok += n;
        match kind {
            K::Write | K::Append | K::Rewrite | K::WriteFd | K::DirectWrite | K::MapWrite => self.writes += n,
            K::Read | K::ReadFd | K::DirectRead => self.reads += n,
            K::Truncate | K::FtruncateFd => self.truncates += n,
            K::Fallocate => self.fallocates += n,
            _ => {}
        }
    }

    /// Share of ops that succeeded, in percent.
    pub fn ok_percent(&self) -> f64 {
        if self.ops == 0 { 0.0 } else { 100.0 * self.ok as f64 / self.ops as f64 }
    }
}

impl std::fmt::Display for Reach {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} inputs, {} ops, {} succeeded ({:.1}%): {} writes, {} reads, {} truncates, {} fallocates",
            self.inputs,
            self.ops,
            self.ok,
            self.ok_percent(),
            self.writes,
            self.reads,
            self.truncates,
            self.fallocates
        )
    }
}

/// A seed corpus: inputs of random draws (a ChaCha stream per input, so the
/// same files every time), one per mount and several task and crash
/// settings, kept when they reach a successful write and another data op.
pub fn seed_corpus() -> Vec<Vec<u8>> {
    use rand::{RngExt, SeedableRng};
    let mut corpus = Vec::new();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x6c6f_636b);
    for mount in 0..LOCKSTEP_MOUNTS.len() as u8 {
        let mut kept = 0;
        for attempt in 0..80u32 {
            if kept == 5 {
                break;
            }
            let tasks = [0u8, 0, 200, 250][(attempt % 4) as usize];
            let crash = if attempt % 3 == 2 { 255 } else { 0 };
            let faults_and_seed = ((attempt as u8) << 2) | if attempt % 5 == 4 { 3 } else { 0 };
            let mut input = vec![mount, tasks, crash, faults_and_seed];
            // Short inputs (a few to a few dozen ops): each runs fast, and
            // libFuzzer grows its length limit from the corpus's longest.
            let len = rng.random_range(60..1200);
            input.extend((0..len).map(|_| rng.random::<u8>()));
            let Some(result) = lockstep(&input) else { continue };
            let mut reach = Reach::default();
            reach.add(&result);
            if reach.writes > 0 && reach.reads + reach.truncates + reach.fallocates > 0 {
                corpus.push(input);
                kept += 1;
            }
        }
    }
    corpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_names_a_spec_that_validates() {
        for mount in 0..LOCKSTEP_MOUNTS.len() as u8 {
            for other in [0u8, 100, 200, 255] {
                let spec = lockstep_spec([mount, other, other, other]);
                spec.validate().unwrap_or_else(|e| panic!("{}: {e}", LOCKSTEP_MOUNTS[usize::from(mount)].0));
            }
        }
    }

    #[test]
    fn the_same_input_runs_the_same_steps_and_replays_as_a_trace() {
        let input: Vec<u8> = [0u8, 220, 255, 3].into_iter().chain((0..3000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)).collect();
        let a = lockstep(&input).expect("a header");
        let b = lockstep(&input).expect("a header");
        assert_eq!(a.steps, b.steps);
        assert_eq!(a.trace_hash, b.trace_hash);
        assert!(a.stats.ops > 20, "{} ops", a.stats.ops);
        let replay = crate::run::run_steps(&EngineFactory, &a.spec, &a.steps).expect("replay");
        assert!(replay.failure.is_none(), "{:?}", replay.failure);
        assert_eq!(replay.trace_hash, a.trace_hash);
    }
}
