//! Shorter names: a directory that only holds the names below it is lifted
//! away ("/x/y/f" becomes "/x/f"), and every name left is renamed to a short
//! fresh one ("a", "b", ...). Both change the whole trace at once, every path
//! of every op and the target of every symlink (a path too), so the trace
//! means the same run with other names. Last, two names are merged into one
//! where the failure does not need both (a create, a rename onto a third
//! name and a truncate of that may be one file all along); the next round
//! of step dropping then removes what became redundant.

use std::collections::BTreeSet;

use ext4_model::Op;

use super::simplify::Trial;
use crate::trace::{Step, Trace};

pub(super) fn shorter_names(current: &mut Trace, trial: &mut Trial) {
    // Lifting first: it removes names, so fewer are left to rename.
    lift_directories(current, trial);
    rename_components(current, trial);
    merge_names(current, trial);
}

/// Every whole path the ops name, once each.
fn paths_in(trace: &Trace) -> Vec<String> {
    let set: BTreeSet<&str> = trace.steps.iter().filter_map(Step::op).flat_map(|op| op.paths()).collect();
    set.into_iter().map(str::to_string).collect()
}

fn merge_paths(current: &mut Trace, trial: &mut Trial) {
    let mut paths = paths_in(current);
    if paths.len() > MAX_MERGED_NAMES {
        return;
    }
    paths.sort_by(|a, b| (a.len(), a).cmp(&(b.len(), b)));
    for (i, keep) in paths.iter().enumerate() {
        for gone in &paths[i + 1..] {
            if trial.exhausted() {
                return;
            }
            let present = paths_in(current);
            if !present.contains(keep) || !present.contains(gone) {
                continue;
            }
            trial.keep(current, rewritten(current, |p| if p == gone { keep.clone() } else { p.to_string() }));
        }
    }
}

/// Most names a trace may hold for merging to try every pair (a shrunk
/// trace holds a handful; a long one is not worth n^2 re-runs).
const MAX_MERGED_NAMES: usize = 12;

/// Renames one name to another the trace already uses, plainer into
/// plainer: the two become the same file or directory. Whole paths first
/// ("/b/a" onto "/b/b"), then single names wherever they stand.
fn merge_names(current: &mut Trace, trial: &mut Trial) {
    merge_paths(current, trial);
    let mut names = names_in(current);
    if names.len() > MAX_MERGED_NAMES {
        return;
    }
    names.sort_by(|a, b| (a.len(), a).cmp(&(b.len(), b)));
    for (i, keep) in names.iter().enumerate() {
        for gone in &names[i + 1..] {
            if trial.exhausted() {
                return;
            }
            let present: BTreeSet<String> = names_in(current).into_iter().collect();
            if !present.contains(keep) || !present.contains(gone) {
                continue;
            }
            let candidate = rewritten(current, |p| p.split('/').map(|n| if n == gone { keep.as_str() } else { n }).collect::<Vec<_>>().join("/"));
            trial.keep(current, candidate);
        }
    }
}

/// The trace with every path-like string of every op (begun ones too)
/// rewritten.
fn rewritten(trace: &Trace, rewrite: impl Fn(&str) -> String) -> Trace {
    let with_paths = |op: &Op| {
        let mut op = op.clone();
        for s in op.path_strings_mut() {
            *s = rewrite(s);
        }
        op
    };
    let steps = trace
        .steps
        .iter()
        .map(|step| match step {
            Step::Op(op) => Step::Op(with_paths(op)),
            Step::Begin(op) => Step::Begin(with_paths(op)),
            other => other.clone(),
        })
        .collect();
    Trace { spec: trace.spec.clone(), steps }
}

fn every_path(trace: &Trace) -> impl Iterator<Item = &str> {
    trace.steps.iter().filter_map(Step::op).flat_map(Op::path_strings)
}

/// "." and ".." name a place by where they are: no rename keeps that.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".."
}

/// Every name the trace's paths hold, once each, in the order met.
fn names_in(trace: &Trace) -> Vec<String> {
    let mut seen = BTreeSet::new();
    every_path(trace).flat_map(|p| p.split('/')).filter(|n| is_plain_name(n) && seen.insert(*n)).map(str::to_string).collect()
}

/// The `n`th short name: "a" to "z", then "aa", "ab", ...
fn short_name(mut n: usize) -> String {
    const LETTERS: &[u8; 26] = b"abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(LETTERS[n % 26]);
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    out.reverse();
    String::from_utf8(out).expect("letters are UTF-8")
}

/// Shorter, or as long and sooner in the alphabet: the order names shrink
/// in, so renames cannot go round in circles.
fn plainer(a: &str, b: &str) -> bool {
    (a.len(), a) < (b.len(), b)
}

fn rename_components(current: &mut Trace, trial: &mut Trial) {
    let mut names = names_in(current);
    // Longest first, where renaming gains most; a stable sort keeps the
    // order met among names of one length.
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        if trial.exhausted() {
            return;
        }
        let used: BTreeSet<String> = names_in(current).into_iter().collect();
        let Some(fresh) = (0..).map(short_name).find(|n| !used.contains(n)) else { return };
        if !plainer(&fresh, &name) {
            continue;
        }
        let candidate = rewritten(current, |p| p.split('/').map(|n| if n == name { fresh.as_str() } else { n }).collect::<Vec<_>>().join("/"));
        trial.keep(current, candidate);
    }
}

/// The names of an absolute path; None for a relative one (a symlink target
/// may be one).
fn names_of(path: &str) -> Option<Vec<&str>> {
    path.strip_prefix('/').map(|rest| rest.split('/').filter(|n| !n.is_empty()).collect())
}

fn join(names: &[&str], trailing_slash: bool) -> String {
    let mut path = format!("/{}", names.join("/"));
    if trailing_slash && !names.is_empty() {
        path.push('/');
    }
    path
}

/// Every directory the trace's absolute paths go through, shallowest first
/// (so "/x/y/f" loses "x", then "y"), in the order met.
fn directories(trace: &Trace) -> Vec<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for names in every_path(trace).filter_map(names_of) {
        for depth in 1..names.len() {
            let dir = &names[..depth];
            if dir.iter().all(|n| is_plain_name(n)) && seen.insert(dir.to_vec()) {
                out.push(dir.iter().map(|n| n.to_string()).collect::<Vec<String>>());
            }
        }
    }
    out.sort_by_key(Vec::len);
    out
}

/// The trace with directory `dir` lifted away: what was below it is in its
/// parent, and the ops naming `dir` itself (its mkdir) are gone with the
/// faults aimed at them. None when a name below `dir` is also one beside it,
/// or when a path below it climbs back with "..".
fn lifted(trace: &Trace, dir: &[String]) -> Option<Trace> {
    let depth = dir.len();
    let (parent, own) = dir.split_at(depth - 1);
    let (mut below, mut beside) = (BTreeSet::new(), BTreeSet::new());
    for names in every_path(trace).filter_map(names_of) {
        if names.len() > depth && names[..depth] == *dir {
            if !names[depth..].iter().all(|n| is_plain_name(n)) {
                return None;
            }
            below.insert(names[depth]);
        }
        if names.len() >= depth && names[..depth - 1] == *parent && names[depth - 1] != own[0] {
            beside.insert(names[depth - 1]);
        }
    }
    // A name below that one beside already has moves up under a fresh name
    // (the rest of the trace uses neither), so the lift still happens.
    let used: BTreeSet<String> = names_in(trace).into_iter().collect();
    let mut fresh = (0..).map(short_name).filter(|n| !used.contains(n));
    let renamed: std::collections::BTreeMap<String, String> =
        below.intersection(&beside).map(|n| (n.to_string(), fresh.next().expect("short names never run out"))).collect();
    let names_dir = |op: &Op| op.paths().into_iter().any(|p| names_of(p).is_some_and(|n| n == dir));
    let mut steps: Vec<Step> = Vec::new();
    for step in &trace.steps {
        if step.op().is_some_and(names_dir) {
            while matches!(steps.last(), Some(Step::Fault(_))) {
                steps.pop();
            }
        } else {
            steps.push(step.clone());
        }
    }
    let rewrite = |p: &str| match names_of(p) {
        Some(mut names) if names.len() > depth && names[..depth] == *dir => {
            if let Some(new) = renamed.get(names[depth]) {
                names[depth] = new;
            }
            names.remove(depth - 1);
            join(&names, p.ends_with('/'))
        }
        _ => p.to_string(),
    };
    Some(rewritten(&Trace { spec: trace.spec.clone(), steps }, rewrite))
}

fn lift_directories(current: &mut Trace, trial: &mut Trial) {
    // Lifting only removes names, so the directories that can ever appear
    // are finite and each is tried once.
    let mut tried = BTreeSet::new();
    while !trial.exhausted() {
        let Some(dir) = directories(current).into_iter().find(|d| !tried.contains(d)) else { return };
        tried.insert(dir.clone());
        if let Some(candidate) = lifted(current, &dir) {
            trial.keep(current, candidate);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shrink::Budget;
    use crate::run::spec::RunSpec;
    use ext4_model::MountConfig;

    fn trace(ops: Vec<Op>) -> Trace {
        Trace { spec: RunSpec::new(1, 1, MountConfig::default()), steps: ops.into_iter().map(Step::Op).collect() }
    }

    fn ops(t: &Trace) -> Vec<Op> {
        t.steps.iter().filter_map(Step::op).cloned().collect()
    }

    /// A judge that reads the trace as a tiny namespace: every op needs its
    /// parent directory made before it, and the failure needs a write past
    /// 8192 to a file made by a create.
    fn needs_a_far_write(t: &Trace) -> bool {
        let mut dirs: BTreeSet<String> = BTreeSet::from(["/".to_string()]);
        let mut files = BTreeSet::new();
        let parent = |p: &str| match p.rsplit_once('/') {
            Some(("", _)) => "/".to_string(),
            Some((dir, _)) => dir.to_string(),
            None => String::new(),
        };
        for op in t.steps.iter().filter_map(Step::op) {
            if op.paths().iter().any(|p| !dirs.contains(&parent(p))) {
                return false;
            }
            match op {
                Op::Mkdir { path, .. } => {
                    dirs.insert(path.clone());
                }
                Op::Create { path, .. } => {
                    files.insert(path.clone());
                }
                Op::Write { path, offset, len, .. } if files.contains(path) && offset + u64::from(*len) > 8192 => return true,
                _ => {}
            }
        }
        false
    }

    fn shorten(t: &Trace, mut fails: impl FnMut(&Trace) -> bool) -> Trace {
        let mut budget = Budget::default();
        let mut current = t.clone();
        shorter_names(&mut current, &mut Trial::new(&mut budget, &mut fails));
        current
    }

    #[test]
    fn nested_long_names_collapse_to_one_short_name_at_the_top() {
        let (x, y) = ("x".repeat(255), "y".repeat(255));
        let f = format!("/{x}/{y}/data");
        let t = trace(vec![
            Op::Mkdir { path: format!("/{x}"), perm: 0o755 },
            Op::Mkdir { path: format!("/{x}/{y}"), perm: 0o755 },
            Op::Create { path: f.clone(), perm: 0o644 },
            Op::Write { path: f.clone(), offset: 9000, len: 10, seed: 1 },
        ]);
        assert!(needs_a_far_write(&t));
        let short = shorten(&t, needs_a_far_write);
        assert_eq!(ops(&short), vec![Op::Create { path: "/a".into(), perm: 0o644 }, Op::Write { path: "/a".into(), offset: 9000, len: 10, seed: 1 }]);
        assert!(short.validate().is_ok());
    }

    #[test]
    fn a_rename_reaches_every_path_of_every_op_and_symlink_targets() {
        let t = trace(vec![
            Op::Mkdir { path: "/data".into(), perm: 0o755 },
            Op::Rename { from: "/data".into(), to: "/log".into() },
            Op::Link { from: "/log/x.1".into(), to: "/log/tmp".into() },
            Op::Symlink { target: "../data/x.1".into(), path: "/log/data".into() },
        ]);
        // Any judge: every rename is taken (merging is its own pass).
        let mut budget = Budget::default();
        let mut short = t.clone();
        let mut any = |_: &Trace| true;
        rename_components(&mut short, &mut Trial::new(&mut budget, &mut any));
        assert_eq!(
            ops(&short),
            vec![
                Op::Mkdir { path: "/a".into(), perm: 0o755 },
                Op::Rename { from: "/a".into(), to: "/b".into() },
                Op::Link { from: "/b/c".into(), to: "/b/d".into() },
                Op::Symlink { target: "../a/c".into(), path: "/b/a".into() },
            ]
        );
    }

    #[test]
    fn a_name_the_failure_needs_keeps_its_length_and_dot_names_stay() {
        let long = "n".repeat(255);
        let t = trace(vec![Op::Create { path: format!("/{long}"), perm: 0o644 }, Op::Stat { path: "/data/..".into() }]);
        let needs_long = |t: &Trace| every_path(t).any(|p| p.len() > 200);
        let short = shorten(&t, needs_long);
        assert_eq!(ops(&short), vec![Op::Create { path: format!("/{long}"), perm: 0o644 }, Op::Stat { path: "/a/..".into() }]);
    }

    #[test]
    fn a_directory_is_lifted_beside_a_name_under_a_fresh_name() {
        let t = trace(vec![
            Op::Mkdir { path: "/d".into(), perm: 0o755 },
            Op::Create { path: "/d/f".into(), perm: 0o644 },
            Op::Create { path: "/f".into(), perm: 0o644 },
        ]);
        let up = lifted(&t, &["d".to_string()]).expect("lifted");
        assert_eq!(
            ops(&up),
            vec![Op::Create { path: "/a".into(), perm: 0o644 }, Op::Create { path: "/f".into(), perm: 0o644 }],
            "/d/f must not become /f, which is another file"
        );
        let lifted_g = lifted(&trace(vec![Op::Create { path: "/d/g/".into(), perm: 0o644 }]), &["d".to_string()]).unwrap();
        assert_eq!(ops(&lifted_g), vec![Op::Create { path: "/g/".into(), perm: 0o644 }], "a trailing slash stays");
    }

    #[test]
    fn two_names_the_failure_does_not_need_apart_become_one() {
        // The failure needs a truncate and a read of the same name; the
        // rename in between only carried the file there.
        let t = trace(vec![
            Op::Create { path: "/b".into(), perm: 0o644 },
            Op::Rename { from: "/b".into(), to: "/c".into() },
            Op::Truncate { path: "/c".into(), size: 0 },
            Op::Read { path: "/c".into(), offset: 0, len: 1 },
        ]);
        let truncated_then_read = |t: &Trace| {
            let o = ops(t);
            o.iter().any(|op| matches!(op, Op::Truncate { path, .. } if path == "/b")) && o.iter().any(|op| matches!(op, Op::Read { path, .. } if path == "/b"))
        };
        let mut budget = Budget::default();
        let mut fails = |t: &Trace| truncated_then_read(t) || ops(t).iter().any(|op| matches!(op, Op::Truncate { path, .. } if path == "/c"));
        let mut trial = Trial::new(&mut budget, &mut fails);
        let mut current = t.clone();
        merge_names(&mut current, &mut trial);
        assert!(truncated_then_read(&current), "{:?}", ops(&current));
        assert!(names_in(&current) == ["b"], "{:?}", names_in(&current));
    }

    #[test]
    fn short_names_count_like_spreadsheet_columns() {
        assert_eq!([0, 1, 25, 26, 27, 701, 702].map(short_name), ["a", "b", "z", "aa", "ab", "zz", "aaa"]);
    }
}
