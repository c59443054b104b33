//! Shrinking a failing op sequence to a small one that still fails the same
//! way: delta debugging (drop chunks, halving their size, down to single
//! steps), all within one deterministic budget of re-runs. Every re-run
//! starts from a fresh model and target. What is left after dropping is made
//! plain by [`simplify`]: a plainer spec, fewer tasks, shorter names,
//! smaller numbers.

use std::collections::BTreeSet;

use crate::trace::{Step, Trace};
use simplify::{simplify, Trial};

mod names;
mod numbers;
pub mod simplify;
mod spec;
mod tasks;

/// Upper bound on re-runs one shrink may spend.
pub const MAX_SHRINK_RUNS: usize = 4000;
/// Upper bound on steps all re-runs of one shrink replay together: about
/// three minutes for a long trace full of crashes, whose re-runs cost most.
pub const MAX_SHRINK_STEPS: usize = 3_000_000;

/// What one shrink has spent of its budget, counted in re-runs and steps
/// replayed, never in time, so the same failure shrinks to the same result
/// on any machine. One budget covers every stage of a shrink.
#[derive(Debug, Default)]
pub struct Budget {
    runs: usize,
    replayed: usize,
}

impl Budget {
    pub fn exhausted(&self) -> bool {
        self.runs >= MAX_SHRINK_RUNS || self.replayed >= MAX_SHRINK_STEPS
    }

    /// Re-runs spent so far.
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// Counts one re-run of `steps` steps.
    pub fn spend(&mut self, steps: usize) {
        self.runs += 1;
        self.replayed += steps;
    }

    /// Judges one candidate, counting it.
    fn try_one<T>(&mut self, candidate: &[T], fails: &mut impl FnMut(&[T]) -> bool) -> bool {
        self.spend(candidate.len());
        fails(candidate)
    }
}

/// The first cut, before delta debugging: a long random run is mostly ops
/// that failed or only looked, and ddmin's halves seldom drop those without
/// dropping one of the few that matter. Tries dropping them by class, all at
/// once (with the fault steps aimed at them; never the last step, where the
/// failure showed). `errored` indexes ops whose answer was an errno. Returns
/// the steps to go on from.
pub fn drop_by_class(steps: &[Step], errored: &[usize], budget: &mut Budget, mut fails: impl FnMut(&[Step]) -> bool) -> Vec<Step> {
    let errored: BTreeSet<usize> = errored.iter().copied().collect();
    let looks = |i: usize| matches!(&steps[i], Step::Op(op) if op.only_looks());
    let classes: [&dyn Fn(usize) -> bool; 3] = [&|i| errored.contains(&i) || looks(i), &|i| errored.contains(&i), &looks];
    for class in classes {
        let mut dropped = vec![false; steps.len()];
        for i in (0..steps.len().saturating_sub(1)).filter(|&i| class(i)) {
            dropped[i] = true;
            // A fault step fires in the op after it.
            for j in (0..i).rev().take_while(|&j| matches!(steps[j], Step::Fault(_))) {
                dropped[j] = true;
            }
        }
        let kept: Vec<Step> = steps.iter().zip(&dropped).filter(|(_, d)| !**d).map(|(s, _)| s.clone()).collect();
        if kept.len() == steps.len() || budget.exhausted() {
            continue;
        }
        if budget.try_one(&kept, &mut fails) {
            return kept;
        }
    }
    steps.to_vec()
}

/// The flusher writes expired inodes back one per pair of `flusher` steps,
/// in inode order: without an op that dirtied an earlier inode, every later
/// step of it shifts by one inode, and the failure goes with it. So ddmin
/// keeps such ops. This pass drops each step together with the last one or
/// two `flusher` steps after it (one inode's write-back, begun and
/// finished: the steps are alike, so the last ones stand for any).
pub fn drop_with_flusher_steps(steps: &[Step], budget: &mut Budget, mut fails: impl FnMut(&[Step]) -> bool) -> Vec<Step> {
    let mut current = steps.to_vec();
    let mut i = current.len().saturating_sub(1);
    while i > 0 {
        i -= 1;
        if current[i] == Step::Flusher {
            continue;
        }
        let after: Vec<usize> = (i + 1..current.len()).rev().filter(|&j| current[j] == Step::Flusher).take(2).collect();
        for take in [2, 1] {
            if after.len() < take || budget.exhausted() {
                continue;
            }
            let drop: Vec<usize> = std::iter::once(i).chain(after[..take].iter().copied()).collect();
            let candidate: Vec<Step> = current.iter().enumerate().filter(|(j, _)| !drop.contains(j)).map(|(_, s)| s.clone()).collect();
            if budget.try_one(&candidate, &mut fails) {
                current = candidate;
                break;
            }
        }
        i = i.min(current.len().saturating_sub(1));
    }
    current
}

/// What a shrink found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shrunk<T> {
    /// The smallest list found that still fails.
    pub items: Vec<T>,
    /// Re-runs spent.
    pub runs: usize,
    /// True when the budget ran out first: shrinking the result again may
    /// find more.
    pub budget_spent: bool,
}

/// Returns a subsequence of `ops` for which `fails` still holds. `fails(ops)`
/// must be true on entry. The work is bounded by [`MAX_SHRINK_RUNS`] and by
/// [`MAX_SHRINK_STEPS`] items replayed in all, not by time.
pub fn shrink<T: Clone>(ops: &[T], fails: impl FnMut(&[T]) -> bool) -> Shrunk<T> {
    let mut budget = Budget::default();
    let items = shrink_within(ops, &mut budget, fails);
    Shrunk { items, runs: budget.runs, budget_spent: budget.exhausted() }
}

/// [`shrink`] on a budget shared with the other stages of one shrink.
pub fn shrink_within<T: Clone>(ops: &[T], budget: &mut Budget, mut fails: impl FnMut(&[T]) -> bool) -> Vec<T> {
    let mut current = ops.to_vec();
    let mut chunk = current.len().div_ceil(2).max(1);
    'ddmin: while chunk >= 1 {
        let mut removed_any = false;
        let mut start = 0;
        while start < current.len() {
            if budget.exhausted() {
                break 'ddmin;
            }
            let end = (start + chunk).min(current.len());
            let mut candidate = current[..start].to_vec();
            candidate.extend_from_slice(&current[end..]);
            if budget.try_one(&candidate, &mut fails) {
                current = candidate;
                removed_any = true;
            } else {
                start = end;
            }
        }
        if chunk == 1 && !removed_any {
            break;
        }
        if !removed_any {
            chunk /= 2;
        }
    }
    current
}

/// Rounds of drop-then-simplify one shrink goes through at most: the second
/// drops what simplifying made unneeded (the mkdir of a directory a lift
/// emptied); a third seldom finds more.
const MAX_ROUNDS: usize = 3;

/// Shrinks a failing trace: drops steps, makes what is left plain (spec,
/// tasks, names, numbers), and drops again what that made unneeded, all on
/// one budget. `fails(trace)` must be true on entry. Only traces a trace
/// file could hold are judged: a candidate breaking a rule of
/// [`Trace::parse`] counts as not failing, and finishes whose begin was
/// dropped go (a replay runs them as nothing).
pub fn shrink_trace(trace: &Trace, budget: &mut Budget, mut fails: impl FnMut(&Trace) -> bool) -> Trace {
    let mut judge = |t: &Trace| {
        let t = t.without_orphan_finishes();
        t.validate().is_ok() && fails(&t)
    };
    let mut current = trace.without_orphan_finishes();
    for _ in 0..MAX_ROUNDS {
        let spec = current.spec.clone();
        let steps = shrink_within(&current.steps, budget, |steps| judge(&Trace { spec: spec.clone(), steps: steps.to_vec() }));
        let steps = drop_with_flusher_steps(&steps, budget, |steps| judge(&Trace { spec: spec.clone(), steps: steps.to_vec() }));
        let dropped = Trace { spec, steps }.without_orphan_finishes();
        let plain = simplify(&dropped, &mut Trial::new(budget, &mut judge));
        let changed = plain != dropped;
        current = plain;
        if !changed || budget.exhausted() {
            break;
        }
    }
    current
}

/// Delta debugging for an expensive judge that prefers many candidates at
/// once (a VM boot runs a whole batch): each round offers every "drop chunk k"
/// candidate of the current size, and `first_failing` names the first that
/// still fails. Returns the smaller list and the rounds spent.
pub fn shrink_in_rounds<T: Clone>(items: &[T], max_rounds: usize, mut first_failing: impl FnMut(&[Vec<T>]) -> Option<usize>) -> (Vec<T>, usize) {
    let mut current = items.to_vec();
    let mut chunk = current.len().div_ceil(2).max(1);
    let mut rounds = 0;
    while !current.is_empty() && rounds < max_rounds {
        chunk = chunk.min(current.len());
        let candidates: Vec<Vec<T>> = (0..current.len())
            .step_by(chunk)
            .map(|start| {
                let mut c = current[..start].to_vec();
                c.extend_from_slice(&current[(start + chunk).min(current.len())..]);
                c
            })
            .collect();
        rounds += 1;
        match first_failing(&candidates) {
            Some(i) if i < candidates.len() => current = candidates[i].clone(),
            _ if chunk == 1 => break,
            _ => chunk /= 2,
        }
    }
    (current, rounds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4_model::Op;

    #[test]
    fn finds_the_two_ops_that_matter() {
        let ops: Vec<Op> = (0..200).map(|i| Op::Stat { path: format!("/{i}") }).collect();
        let needs = |o: &[Op]| o.contains(&ops[37]) && o.contains(&ops[150]);
        let found = shrink(&ops, needs);
        assert_eq!(found.items, vec![ops[37].clone(), ops[150].clone()]);
        assert!(found.runs < 200 && !found.budget_spent, "{} runs", found.runs);
    }

    #[test]
    fn rounds_find_the_two_ops_that_matter() {
        let ops: Vec<u32> = (0..200).collect();
        let needs = |o: &[u32]| o.contains(&37) && o.contains(&150);
        let (small, rounds) = shrink_in_rounds(&ops, 100, |cands| cands.iter().position(|c| needs(c)));
        assert_eq!(small, vec![37, 150]);
        assert!(rounds < 60, "{rounds} rounds");
        let (capped, spent) = shrink_in_rounds(&ops, 2, |cands| cands.iter().position(|c| needs(c)));
        assert_eq!(spent, 2);
        assert!(needs(&capped));
    }

    #[test]
    fn failed_and_looking_ops_go_first_in_one_run() {
        let stat = |i: u32| Step::Op(Op::Stat { path: format!("/s{i}") });
        let create = |i: u32| Step::Op(Op::Create { path: format!("/c{i}"), perm: 0o644 });
        let fault = Step::Fault(crate::disk::FaultEvent { kind: crate::disk::ScriptedFault::Read, command: 0, sector: 0 });
        // Creates 1..=4 matter; odd ones "failed"; stats only look; the
        // fault aims at create 5, which failed, so it goes with it.
        let mut steps = Vec::new();
        for i in 0..10 {
            if i == 5 {
                steps.push(fault.clone());
            }
            steps.push(create(i));
            steps.push(stat(i));
        }
        let errored: Vec<usize> = steps.iter().enumerate().filter(|(_, s)| matches!(s, Step::Op(Op::Create { path, .. }) if path.ends_with(['5', '7', '9']))).map(|(i, _)| i).collect();
        let needs = |s: &[Step]| (1..=4).all(|i| s.contains(&create(i)));
        let mut budget = Budget::default();
        let kept = drop_by_class(&steps, &errored, &mut budget, needs);
        assert_eq!(budget.runs(), 1);
        let mut want: Vec<Step> = [0, 1, 2, 3, 4, 6, 8].into_iter().map(create).collect();
        // The last step stays, whatever its class.
        want.push(stat(9));
        assert_eq!(kept, want);
        // When dropping a class loses the failure, the next one is tried.
        let needs_stat = |s: &[Step]| s.contains(&stat(2)) && s.contains(&create(1));
        let mut budget = Budget::default();
        let kept = drop_by_class(&steps, &errored, &mut budget, needs_stat);
        assert_eq!(budget.runs(), 2);
        assert!(kept.contains(&stat(2)) && !kept.contains(&create(5)) && !kept.contains(&fault));
    }

    #[test]
    fn the_budget_counts_items_replayed() {
        // Each candidate costs its length: a long list stops on the step
        // budget, long before the run budget, with what it found so far.
        let ops: Vec<u32> = (0..1_000_000).collect();
        let ends = |o: &[u32], last: u32| o.first() == Some(&0) && o.last() == Some(&last);
        let found = shrink(&ops, |o| ends(o, 999_999));
        assert!(found.budget_spent);
        assert!(found.runs < 40, "{} runs", found.runs);
        assert!(found.items.len() > 2 && found.items.len() < ops.len() && ends(&found.items, 999_999));
        // The same judge on a short list finishes within budget.
        let found = shrink(&ops[..1000], |o| ends(o, 999));
        assert_eq!((found.items, found.budget_spent), (vec![0, 999], false));
    }

    /// A judge that reads a trace as a tiny namespace: every op needs its
    /// parent directory made before it, and the failure needs a write past
    /// 8192 to a file a create made. Every trace it is shown must be one a
    /// trace file could hold.
    fn needs_a_far_write(t: &Trace) -> bool {
        assert!(t.validate().is_ok(), "judged an invalid trace: {t:?}");
        let mut dirs = BTreeSet::from(["/".to_string()]);
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

    #[test]
    fn a_far_write_under_long_names_in_three_tasks_shrinks_to_two_ops_on_a() {
        let (x, y) = (format!("/{}", "x".repeat(255)), format!("/{}", "y".repeat(255)));
        let log = format!("{x}{y}/log");
        let mut spec = crate::run::spec::RunSpec::new(3, 500, "data=journal,nodelalloc".parse().unwrap());
        spec.tasks = 3;
        spec.faults = "write".parse().unwrap();
        let fault = Step::Fault(crate::disk::FaultEvent { kind: crate::disk::ScriptedFault::Write, command: 0, sector: 0 });
        let steps = vec![
            Step::Op(Op::Mkdir { path: x.clone(), perm: 0o755 }),
            Step::Op(Op::Mkdir { path: format!("{x}{y}"), perm: 0o755 }),
            Step::Task(1),
            Step::Op(Op::Create { path: "/data".into(), perm: 0o644 }),
            Step::Begin(Op::Fsync { path: "/data".into() }),
            Step::Task(2),
            Step::Op(Op::Create { path: log.clone(), perm: 0o644 }),
            fault,
            Step::Op(Op::Write { path: log.clone(), offset: 1_000_000, len: 70_000, seed: 77 }),
            Step::Task(0),
            Step::Op(Op::Stat { path: x.clone() }),
            Step::Task(1),
            Step::Finish,
            Step::Task(2),
            Step::Op(Op::Read { path: log, offset: 0, len: 10 }),
        ];
        let messy = Trace { spec: spec.clone(), steps };
        assert!(messy.validate().is_ok() && needs_a_far_write(&messy));
        let mut budget = Budget::default();
        let plain = shrink_trace(&messy, &mut budget, needs_a_far_write);
        assert_eq!(plain.spec, crate::run::spec::RunSpec::new(3, 500, ext4_model::MountConfig::default()));
        let [Step::Op(Op::Create { path: created, .. }), Step::Op(Op::Write { path: written, offset, len, seed })] = &plain.steps[..] else {
            panic!("{:?}", plain.steps)
        };
        assert_eq!((created.as_str(), written.as_str(), *seed), ("/a", "/a", 1));
        assert!(offset + u64::from(*len) > 8192 && offset + u64::from(*len) <= 16384, "offset {offset} len {len}");
        assert!(!budget.exhausted() && budget.runs() < 300, "{} runs", budget.runs());
    }

    #[test]
    fn a_finish_never_reaches_the_judge_without_its_begin() {
        // The failure needs some finish. A candidate without the begin holds
        // a finish no trace file could: it goes unjudged or loses the finish.
        let begin = Step::Begin(Op::Fsync { path: "/".into() });
        let steps = vec![Step::Op(Op::Sync), begin.clone(), Step::Op(Op::Sync), Step::Finish];
        let trace = Trace { spec: crate::run::spec::RunSpec::new(1, 1, ext4_model::MountConfig::default()), steps };
        let needs_finish = |t: &Trace| {
            assert!(t.validate().is_ok(), "{t:?}");
            t.steps.contains(&Step::Finish)
        };
        let plain = shrink_trace(&trace, &mut Budget::default(), needs_finish);
        assert_eq!(plain.steps, vec![begin, Step::Finish]);
    }
}
