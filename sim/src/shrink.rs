//! Shrinking a failing op sequence to a small one that still fails the same
//! way: delta debugging (drop chunks, halving their size), then single ops,
//! then simpler arguments. Every step re-runs from a fresh model and target.

use ext4_model::Op;

use crate::trace::Step;

/// Upper bound on re-runs one shrink may spend.
pub const MAX_SHRINK_RUNS: usize = 4000;

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

/// Returns a subsequence of `ops` for which `fails` still holds, and the
/// number of runs spent. `fails(ops)` must be true on entry.
pub fn shrink<T: Clone>(ops: &[T], simpler: impl Fn(&T) -> Option<T>, mut fails: impl FnMut(&[T]) -> bool) -> (Vec<T>, usize) {
    let mut current = ops.to_vec();
    let mut runs = 0;
    let mut chunk = current.len().div_ceil(2).max(1);
    while chunk >= 1 && runs < MAX_SHRINK_RUNS {
        let mut removed_any = false;
        let mut start = 0;
        while start < current.len() && runs < MAX_SHRINK_RUNS {
            let end = (start + chunk).min(current.len());
            let mut candidate = current[..start].to_vec();
            candidate.extend_from_slice(&current[end..]);
            runs += 1;
            if fails(&candidate) {
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
        if runs >= MAX_SHRINK_RUNS {
            break;
        }
        if let Some(op) = simpler(&current[i]) {
            let mut candidate = current.clone();
            candidate[i] = op;
            runs += 1;
            if fails(&candidate) {
                current = candidate;
            }
        }
    }
    (current, runs)
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
        let (small, runs) = shrink(&ops, |_| None, needs);
        assert_eq!(small, vec![ops[37].clone(), ops[150].clone()]);
        assert!(runs < 200, "{runs} runs");
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
    fn halves_write_lengths_while_failing() {
        let ops = vec![Step::Op(Op::Write { path: "/a".into(), offset: 0, len: 1000, seed: 1 })];
        let (small, _) = shrink(&ops, simpler_step, |o| matches!(o.first(), Some(Step::Op(Op::Write { len, .. })) if *len >= 100));
        assert_eq!(small, vec![Step::Op(Op::Write { path: "/a".into(), offset: 0, len: 500, seed: 1 })]);
    }
}
