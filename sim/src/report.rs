//! Human and machine-readable summaries of runs. JSON is written by hand to
//! keep the dependency list short; every string goes through [`json_str`].

use std::fmt::Write as _;

use crate::driver::RunResult;

pub fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

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
    let _ = writeln!(s, "  profile     {}", r.spec.profile);
    let kinds: Vec<String> = r.enabled_kinds.iter().map(|k| format!("{k:?}")).collect();
    let _ = writeln!(s, "  op kinds    {} of 19{}: {}", kinds.len(), if r.spec.swarm { " (swarm)" } else { "" }, kinds.join(" "));
    let ok: u64 = r.stats.ok.values().sum();
    let errs: Vec<String> = r.stats.errors.iter().map(|(e, n)| format!("{e:?} {n}")).collect();
    let _ = writeln!(s, "  ops         {} run: {} ok, {} errors ({})", r.stats.ops, ok, r.stats.ops - ok, errs.join(", "));
    if r.task_ops.len() > 1 {
        let per: Vec<String> = r.task_ops.iter().enumerate().map(|(t, n)| format!("task {t}: {n}")).collect();
        let count = |f: fn(&crate::trace::Step) -> bool| r.steps.iter().filter(|st| f(st)).count();
        let switches = count(|st| matches!(st, crate::trace::Step::Task(_)));
        let split = count(|st| matches!(st, crate::trace::Step::Begin(ext4_model::Op::Fsync { .. } | ext4_model::Op::Fdatasync { .. })));
        let switched = count(|st| matches!(st, crate::trace::Step::Begin(ext4_model::Op::SetJournalData { .. })));
        let _ = writeln!(
            s,
            "  tasks       {} interleaved by seed, {switches} switches ({})",
            r.task_ops.len(),
            per.join(", ")
        );
        let _ = writeln!(
            s,
            "  split ops   {split} fsyncs split at their commit, {switched} journal-flag switches split (a -j that clears the flag holds the updates lock); {} ops slept on a lock",
            r.stats.lock_sleeps
        );
    }
    let _ = writeln!(s, "  checks      {} full fscks, {} crashes recovered, {} ops met device faults", r.stats.fscks, r.stats.crashes, r.stats.faults);
    if r.spec.disk_bytes != crate::engine_target::DISK_BYTES || r.stats.space_resyncs > 0 {
        let enospc = r.stats.errors.get(&ext4_model::Errno::ENOSPC).copied().unwrap_or(0);
        let _ = writeln!(s, "  space       {} MiB disk: {enospc} ENOSPC agreed, {} refused by the nearly full target only (model resynced)", r.spec.disk_bytes >> 20, r.stats.space_resyncs);
    }
    for (k, v) in &r.report {
        let _ = writeln!(s, "  {k:<11} {v}");
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

pub fn json(r: &RunResult) -> String {
    let ok: u64 = r.stats.ok.values().sum();
    let report: Vec<String> = r.report.iter().map(|(k, v)| format!("{}:{}", json_str(k), json_str(v))).collect();
    format!(
        "{{\"seed\":{},\"ops\":{},\"ok\":{},\"errors\":{},\"fscks\":{},\"crashes\":{},\"trace_hash\":\"{:#018x}\",\"image_hash\":\"{:#018x}\",\"mount\":{},\"profile\":{},\"report\":{{{}}},\"failure\":{}}}",
        r.spec.seed,
        r.stats.ops,
        ok,
        r.stats.ops - ok,
        r.stats.fscks,
        r.stats.crashes,
        r.trace_hash,
        r.image_hash,
        json_str(&r.spec.mount.to_string()),
        json_str(&r.spec.profile),
        report.join(","),
        r.failure.as_ref().map_or("null".to_string(), |f| json_str(&f.to_string())),
    )
}
