//! Shrinking a failing op sequence to a small one that still fails the same
//! way: delta debugging (drop chunks, halving their size), then single ops,
//! then simpler arguments. Every step re-runs from a fresh model and target.

use std::collections::BTreeSet;

use ext4_model::Op;

use crate::trace::Step;

/// Upper bound on re-runs one shrink may spend.
pub const MAX_SHRINK_RUNS: usize = 4000;
/// Upper bound on steps all re-runs of one shrink replay together: about
/// three minutes for a long trace full of crashes, whose re-runs cost most.
pub const MAX_SHRINK_STEPS: usize = 3_000_000;

/// A smaller version of one step, if it has one: writes and reads halve.
pub fn simpler_step(step: &Step) -> Option<Step> {
    match step {
        Step::Op(Op::Write { path, offset, len, seed }) if *len > 1 => {
            Some(Step::Op(Op::Write { path: path.clone(), offset: *offset, len: len / 2, seed: *seed }))
        }
        Step::Op(Op::Read { path, offset, len }) if *len > 1 => Some(Step::Op(Op::Read { path: path.clone(), offset: *offset, len: len / 2 })),
        _ => None,
    }
}

/// The first cut, before delta debugging: a long random run is mostly ops
/// that failed or only looked, and ddmin's halves seldom drop those without
/// dropping one of the few that matter. Tries dropping them by class, all at
/// once (with the fault steps aimed at them; never the last step, where the
/// failure showed). `errored` indexes ops whose answer was an errno. Returns
/// the steps to go on from and the runs spent.
pub fn drop_by_class(steps: &[Step], errored: &[usize], mut fails: impl FnMut(&[Step]) -> bool) -> (Vec<Step>, usize) {
    let errored: BTreeSet<usize> = errored.iter().copied().collect();
    let looks = |i: usize| matches!(&steps[i], Step::Op(op) if op.only_looks());
    let classes: [&dyn Fn(usize) -> bool; 3] = [&|i| errored.contains(&i) || looks(i), &|i| errored.contains(&i), &looks];
    let mut runs = 0;
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
        if kept.len() == steps.len() {
            continue;
        }
        runs += 1;
        if fails(&kept) {
            return (kept, runs);
        }
    }
    (steps.to_vec(), runs)
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
/// [`MAX_SHRINK_STEPS`] items replayed in all, not by time, so the same
/// failure shrinks to the same result on any machine.
pub fn shrink<T: Clone>(ops: &[T], simpler: impl Fn(&T) -> Option<T>, mut fails: impl FnMut(&[T]) -> bool) -> Shrunk<T> {
    let mut current = ops.to_vec();
    let mut spent = Spent::default();
    let mut chunk = current.len().div_ceil(2).max(1);
    'ddmin: while chunk >= 1 {
        let mut removed_any = false;
        let mut start = 0;
        while start < current.len() {
            if spent.exhausted() {
                break 'ddmin;
            }
            let end = (start + chunk).min(current.len());
            let mut candidate = current[..start].to_vec();
            candidate.extend_from_slice(&current[end..]);
            if spent.try_one(&candidate, &mut fails) {
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
    // Smaller writes and reads make a trace easier to read.
    for i in 0..current.len() {
        if spent.exhausted() {
            break;
        }
        if let Some(op) = simpler(&current[i]) {
            let mut candidate = current.clone();
            candidate[i] = op;
            if spent.try_one(&candidate, &mut fails) {
                current = candidate;
            }
        }
    }
    Shrunk { items: current, runs: spent.runs, budget_spent: spent.exhausted() }
}

/// What a shrink has spent of its budget.
#[derive(Default)]
struct Spent {
    runs: usize,
    replayed: usize,
}

impl Spent {
    fn exhausted(&self) -> bool {
        self.runs >= MAX_SHRINK_RUNS || self.replayed >= MAX_SHRINK_STEPS
    }

    fn try_one<T>(&mut self, candidate: &[T], fails: &mut impl FnMut(&[T]) -> bool) -> bool {
        self.runs += 1;
        self.replayed += candidate.len();
        fails(candidate)
    }
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

    #[test]
    fn finds_the_two_ops_that_matter() {
        let ops: Vec<Op> = (0..200).map(|i| Op::Stat { path: format!("/{i}") }).collect();
        let needs = |o: &[Op]| o.contains(&ops[37]) && o.contains(&ops[150]);
        let found = shrink(&ops, |_| None, needs);
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
        let (kept, runs) = drop_by_class(&steps, &errored, needs);
        assert_eq!(runs, 1);
        let mut want: Vec<Step> = [0, 1, 2, 3, 4, 6, 8].into_iter().map(create).collect();
        // The last step stays, whatever its class.
        want.push(stat(9));
        assert_eq!(kept, want);
        // When dropping a class loses the failure, the next one is tried.
        let needs_stat = |s: &[Step]| s.contains(&stat(2)) && s.contains(&create(1));
        let (kept, runs) = drop_by_class(&steps, &errored, needs_stat);
        assert_eq!(runs, 2);
        assert!(kept.contains(&stat(2)) && !kept.contains(&create(5)) && !kept.contains(&fault));
    }

    #[test]
    fn the_budget_counts_items_replayed() {
        // Each candidate costs its length: a long list stops on the step
        // budget, long before the run budget, with what it found so far.
        let ops: Vec<u32> = (0..1_000_000).collect();
        let ends = |o: &[u32], last: u32| o.first() == Some(&0) && o.last() == Some(&last);
        let found = shrink(&ops, |_| None, |o| ends(o, 999_999));
        assert!(found.budget_spent);
        assert!(found.runs < 40, "{} runs", found.runs);
        assert!(found.items.len() > 2 && found.items.len() < ops.len() && ends(&found.items, 999_999));
        // The same judge on a short list finishes within budget.
        let found = shrink(&ops[..1000], |_| None, |o| ends(o, 999));
        assert_eq!((found.items, found.budget_spent), (vec![0, 999], false));
    }

    #[test]
    fn halves_write_lengths_while_failing() {
        let ops = vec![Step::Op(Op::Write { path: "/a".into(), offset: 0, len: 1000, seed: 1 })];
        let found = shrink(&ops, simpler_step, |o| matches!(o.first(), Some(Step::Op(Op::Write { len, .. })) if *len >= 100));
        assert_eq!(found.items, vec![Step::Op(Op::Write { path: "/a".into(), offset: 0, len: 500, seed: 1 })]);
    }
}
