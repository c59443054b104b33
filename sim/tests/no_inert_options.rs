//! Every mount option `ext4sim` accepts changes what the engine does: an
//! option taken and ignored would let a run claim to test what it never
//! exercised.
//!
//! Each option is run against the configuration it differs from by that
//! option alone, on a few seeds of a generated workload with a disk that
//! has latency, and must change at least one of: the trace hash (answers),
//! the image hash (what reached the disk), the workload's simulated time,
//! or the page cache's folio-order histogram.

use std::collections::BTreeMap;

use ext4_model::MountConfig;
use ext4_sim::engine_target::EngineFactory;
use ext4_sim::run::{run_seed, ProfileSpec, RunSpec};

const SEEDS: [u64; 3] = [1, 2, 3];
const OPS: u64 = 600;

/// What a run did, as far as an option could change it.
fn fingerprint(mount: &str, seed: u64) -> (u64, u64, u64, String) {
    let config: MountConfig = mount.parse().unwrap_or_else(|e| panic!("{mount}: {e}"));
    let spec = RunSpec { profile: ProfileSpec::resolve("hdd-7200").unwrap(), fsck_every: 0, ..RunSpec::new(seed, OPS, config) };
    let r = run_seed(&EngineFactory, &spec).unwrap_or_else(|e| panic!("{mount}: {e}"));
    assert!(r.failure.is_none(), "{mount} seed {seed}: {}", r.failure.unwrap());
    let folios = r.report.iter().find(|(name, _)| name == "folios by order").map(|(_, f)| format!("{f:?}")).unwrap_or_default();
    (r.trace_hash, r.image_hash, r.time.workload_ns, folios)
}

#[test]
fn every_accepted_option_changes_what_the_engine_does() {
    // (option's configuration, the one without it)
    let pairs = [
        ("data=writeback", ""),
        ("data=journal,nodelalloc", "nodelalloc"),
        ("nodelalloc", ""),
        ("data=writeback,nodelalloc", "data=writeback"),
        ("dioread_lock,nodelalloc", "dioread_nolock,nodelalloc"),
        ("data=writeback,journal_async_commit", "data=writeback"),
        ("noauto_da_alloc", "auto_da_alloc"),
        ("commit=1", ""),
        ("ps=16k", ""),
        ("bs=64k,ps=64k", "bs=64k"),
        ("max_folio_order=0", ""),
        ("max_folio_order=2", ""),
        ("page_cache_mb=1", ""),
        ("skip_block_uninit", "use_block_uninit"),
        ("oldalloc", "orlov"),
        ("mb_stream_req=64", ""),
        ("mb_group_prealloc=32", ""),
        ("bs=1k", ""),
        ("nojournal", ""),
        ("ro", ""),
    ];
    // Baselines recur across pairs: each configuration runs once per seed.
    let mut seen: BTreeMap<(&str, u64), (u64, u64, u64, String)> = BTreeMap::new();
    let mut print = |mount, seed| seen.entry((mount, seed)).or_insert_with(|| fingerprint(mount, seed)).clone();
    let mut inert = Vec::new();
    for (with, without) in pairs {
        if !SEEDS.iter().any(|&s| print(with, s) != print(without, s)) {
            inert.push(with);
        }
    }
    assert!(inert.is_empty(), "accepted and changing nothing: {inert:?}");
}
