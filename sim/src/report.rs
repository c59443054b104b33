//! Human and machine-readable summaries of runs. JSON is written by hand to
//! keep the dependency list short: numbers stay numbers (bytes and times as
//! integers, `_ns` for simulated nanoseconds); hashes are hex strings, since
//! they are names, not quantities, and 64-bit integers lose precision in
//! many JSON readers.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use ext4_model::Errno;

use crate::failure::Failure;
use crate::figure::{json_object, json_str};
use crate::run::spec::DISK_BYTES;
use crate::run::RunResult;
use crate::sim_time::Percentiles;
use crate::trace::Step;

/// The readable summary of one run.
pub fn summary(r: &RunResult) -> String {
    let mut s = String::new();
    let mount = r.spec.mount.to_string();
    let _ = writeln!(s, "ext4sim: {}", r.spec.command());
    let _ = writeln!(
        s,
        "  mount       {} (block {} B, page {} B)",
        if mount.is_empty() { "defaults" } else { &mount },
        r.spec.mount.block_size,
        r.spec.mount.page_size
    );
    let _ = writeln!(s, "  profile     {}", r.spec.profile.name);
    let kinds: Vec<String> = r.enabled_kinds.iter().map(|k| format!("{k:?}")).collect();
    let _ = writeln!(s, "  op kinds    {} of {}{}: {}", kinds.len(), ext4_model::OpKind::ALL.len(), if r.spec.swarm { " (swarm)" } else { "" }, kinds.join(" "));
    let ok: u64 = r.stats.ok.values().sum();
    let errs: Vec<String> = r.stats.errors.iter().map(|(e, n)| format!("{e:?} {n}")).collect();
    let _ = writeln!(s, "  ops         {} run: {} ok, {} errors ({})", r.stats.ops, ok, r.stats.ops - ok, errs.join(", "));
    if r.task_ops.len() > 1 {
        let per: Vec<String> = r.task_ops.iter().enumerate().map(|(t, n)| format!("task {t}: {n}")).collect();
        let count = |f: fn(&Step) -> bool| r.steps.iter().filter(|st| f(st)).count();
        let switches = count(|st| matches!(st, Step::Task(_)));
        let _ = writeln!(s, "  tasks       {} interleaved by seed, {switches} switches ({})", r.task_ops.len(), per.join(", "));
        let splits = preemption_points(r);
        let _ = writeln!(
            s,
            "  split ops   {} (preemption points by op: {}); {} ops slept on a lock{}, {} of them holding the locks they took before it; {} gave back locks their op no longer takes",
            splits.values().sum::<u64>(),
            fmt_counts(&splits),
            r.stats.lock_sleeps,
            sleeps_by_lock(&r.stats.lock_sleeps_on),
            r.stats.lock_sleeps_holding,
            r.stats.stale_locks_let_go
        );
    }
    if r.stats.flusher_wakes > 0 {
        let _ = writeln!(
            s,
            "  flusher     {} wake-ups, {} inodes written back asleep holding their folio locks, {} times it slept on a held lock",
            r.stats.flusher_wakes, r.stats.flusher_flights, r.stats.flusher_sleeps
        );
    }
    let _ = writeln!(s, "  checks      {} full fscks, {} crashes recovered, {} ops met device faults", r.stats.fscks, r.stats.crashes, r.stats.faults);
    if r.spec.disk_bytes != DISK_BYTES || r.stats.space_resyncs > 0 {
        let enospc = r.stats.errors.get(&Errno::ENOSPC).copied().unwrap_or(0);
        let _ = writeln!(s, "  space       {} MiB disk: {enospc} ENOSPC agreed, {} refused by the nearly full target only (model resynced; {} ops in flight returned on the target alone)", r.spec.disk_bytes >> 20, r.stats.space_resyncs, r.stats.space_resync_flights);
    }
    if r.spec.fragment > 0 || r.stats.enomem + r.stats.short_by_memory > 0 {
        let _ = writeln!(s, "  memory      {}% held by others: {} ops answered ENOMEM and {} writes came back short for want of a folio (model cut them as ext4 does)", r.spec.fragment, r.stats.enomem, r.stats.short_by_memory);
    }
    let ns = |ns: u64| crate::disk::clock::DisplayNs(ns).to_string();
    let _ = writeln!(
        s,
        "  sim time    workload {} (crash recovery {}), pauses {}, harness {} (checks and resyncs, apart)",
        ns(r.time.workload_ns),
        ns(r.time.recovery_ns),
        ns(r.time.idle_ns),
        ns(r.time.harness_ns)
    );
    for (kind, p) in r.time.percentiles() {
        let _ = writeln!(s, "    {:<14} {:>7} ops  p50 {:>11}  p99 {:>11}  max {:>11}", format!("{kind:?}"), p.count, ns(p.p50_ns), ns(p.p99_ns), ns(p.max_ns));
    }
    for (k, v) in &r.report {
        let _ = writeln!(s, "  {k:<11} {}", v.human());
    }
    let _ = writeln!(s, "  trace hash  {:#018x}", r.trace_hash);
    let _ = writeln!(s, "  image hash  {:#018x}", r.image_hash);
    match &r.failure {
        None => {
            let _ = writeln!(s, "  result      PASS: 0 divergences");
        }
        Some(f) => {
            let _ = writeln!(s, "  result      FAIL at op {}", f.index());
            for line in f.to_string().lines() {
                let _ = writeln!(s, "    {line}");
            }
        }
    }
    s
}

fn percentiles_json(p: &Percentiles) -> String {
    json_object([("count", p.count.to_string()), ("p50_ns", p.p50_ns.to_string()), ("p99_ns", p.p99_ns.to_string()), ("max_ns", p.max_ns.to_string())])
}

fn failure_json(f: &Failure) -> String {
    let kind = match f {
        Failure::Divergence(_) => "divergence",
        Failure::ModelInvariant { .. } => "model_invariant",
        Failure::TargetFsck { .. } => "target_fsck",
        Failure::ReadBack { .. } => "read_back",
        Failure::Crash { .. } => "crash",
        Failure::Lock { .. } => "lock",
        Failure::Livelock { .. } => "livelock",
        Failure::Reclaim { .. } => "reclaim",
        Failure::Flusher { .. } => "flusher",
        Failure::Panic { .. } => "panic",
    };
    let op = f.op_kind().map_or("null".to_string(), |k| json_str(&format!("{k:?}")));
    json_object([("kind", json_str(kind)), ("index", f.index().to_string()), ("op", op), ("text", json_str(&f.to_string()))])
}

/// " (on the journal's updates barrier 3, on invalidate_lock 1)", or nothing.
/// Ops begun in two halves, by kind: the points where a task slept holding
/// what it took and others ran (a split fsync's commit, a -j's flush, an
/// op's I/O under its inode's locks).
pub fn splits_by_kind(steps: &[Step]) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for step in steps {
        if let Step::Begin(op) = step {
            *by.entry(format!("{:?}", op.kind())).or_default() += 1;
        }
    }
    by
}

/// Where the run's tasks were preempted: split ops by kind, and the
/// flusher's write-backs asleep on their I/O.
pub fn preemption_points(r: &RunResult) -> BTreeMap<String, u64> {
    let mut by = splits_by_kind(&r.steps);
    if r.stats.flusher_flights > 0 {
        by.insert("flusher write-back".into(), r.stats.flusher_flights);
    }
    // Each part of a write in flight is one more point: the folio before it.
    if r.stats.write_parts > 0 {
        by.insert("Write part".into(), r.stats.write_parts);
    }
    // And each extent a truncate in flight frees: a handle restart.
    if r.stats.truncate_parts > 0 {
        by.insert("Truncate part".into(), r.stats.truncate_parts);
    }
    if r.stats.fallocate_parts > 0 {
        by.insert("Fallocate part".into(), r.stats.fallocate_parts);
    }
    if r.stats.direct_write_parts > 0 {
        by.insert("Direct write submission".into(), r.stats.direct_write_parts);
    }
    if r.stats.direct_read_parts > 0 {
        by.insert("Direct read submission".into(), r.stats.direct_read_parts);
    }
    if r.stats.read_parts > 0 {
        by.insert("Read part".into(), r.stats.read_parts);
    }
    by
}

/// `key n, key n, ...` ("none" when empty).
pub fn fmt_counts(by: &BTreeMap<String, u64>) -> String {
    let parts: Vec<String> = by.iter().map(|(k, n)| format!("{k} {n}")).collect();
    if parts.is_empty() { "none".into() } else { parts.join(", ") }
}

fn sleeps_by_lock(by: &BTreeMap<String, u64>) -> String {
    if by.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = by.iter().map(|(lock, n)| format!("on {lock} {n}")).collect();
    format!(" ({})", parts.join(", "))
}

/// One run as one JSON object.
pub fn json(r: &RunResult) -> String {
    let ok: u64 = r.stats.ok.values().sum();
    let errors = json_object(r.stats.errors.iter().map(|(e, n)| (format!("{e:?}"), n.to_string())));
    let latency = json_object(r.time.percentiles().iter().map(|(k, p)| (format!("{k:?}"), percentiles_json(p))));
    let workload = json_object([
        ("sim_ns", r.time.workload_ns.to_string()),
        ("recovery_ns", r.time.recovery_ns.to_string()),
        ("pause_ns", r.time.idle_ns.to_string()),
        ("latency", latency),
    ]);
    let harness = json_object([("sim_ns", r.time.harness_ns.to_string()), ("fscks", r.stats.fscks.to_string())]);
    let sleeps_on = json_object(r.stats.lock_sleeps_on.iter().map(|(l, n)| (l.as_str(), n.to_string())));
    let report = json_object(r.report.iter().map(|(k, v)| (k.as_str(), v.json())));
    json_object([
        ("seed", r.spec.seed.to_string()),
        ("ops", r.stats.ops.to_string()),
        ("ok", ok.to_string()),
        ("errors", (r.stats.ops - ok).to_string()),
        ("errnos", errors),
        ("fscks", r.stats.fscks.to_string()),
        ("crashes", r.stats.crashes.to_string()),
        ("faults", r.stats.faults.to_string()),
        ("lock_sleeps", r.stats.lock_sleeps.to_string()),
        ("lock_sleeps_on", sleeps_on),
        ("lock_sleeps_holding", r.stats.lock_sleeps_holding.to_string()),
        ("stale_locks_let_go", r.stats.stale_locks_let_go.to_string()),
        ("write_parts", r.stats.write_parts.to_string()),
        ("truncate_parts", r.stats.truncate_parts.to_string()),
        ("fallocate_parts", r.stats.fallocate_parts.to_string()),
        ("direct_write_parts", r.stats.direct_write_parts.to_string()),
        ("direct_read_parts", r.stats.direct_read_parts.to_string()),
        ("read_parts", r.stats.read_parts.to_string()),
        ("space_resyncs", r.stats.space_resyncs.to_string()),
        ("space_resync_flights", r.stats.space_resync_flights.to_string()),
        ("enomem", r.stats.enomem.to_string()),
        ("short_by_memory", r.stats.short_by_memory.to_string()),
        ("flusher_wakes", r.stats.flusher_wakes.to_string()),
        ("flusher_flights", r.stats.flusher_flights.to_string()),
        ("flusher_sleeps", r.stats.flusher_sleeps.to_string()),
        ("tasks", r.spec.tasks.to_string()),
        ("trace_hash", json_str(&format!("{:#018x}", r.trace_hash))),
        ("image_hash", json_str(&format!("{:#018x}", r.image_hash))),
        ("mount", json_str(&r.spec.mount.to_string())),
        ("profile", json_str(&r.spec.profile.name)),
        ("command", json_str(&r.spec.command())),
        ("workload", workload),
        ("harness", harness),
        ("report", report),
        ("failure", r.failure.as_ref().map_or("null".to_string(), failure_json)),
    ])
}
