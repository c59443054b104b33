//! Smaller numbers: the positions (offsets, the size a truncate leaves, a
//! FIEMAP's start) and lengths of data ops made small (a FIEMAP of the
//! whole file, length u64::MAX, is already as plain as it gets). First for the whole trace at once,
//! which keeps how numbers relate (a read reaching the end a write left):
//! write seeds renumbered 1, 2, ...; positions moved down together; every
//! number halved together. Then one number at a time: the least value, half
//! (aligned down first, since a failure may need alignment), the value
//! aligned down.

use std::collections::BTreeMap;

use ext4_model::Op;

use super::simplify::Trial;
use crate::trace::{Step, Trace};

/// Sweeps over every number at most: a number may shrink only once another
/// has (a read reaching the end of a file shrinks after the truncate that
/// set the end), but each sweep re-tries every number.
const MAX_SWEEPS: usize = 4;

/// Alignment candidates are tried to: the page, and the block when it is
/// another size. Coarsest first.
fn alignments(block_size: u32) -> Vec<u64> {
    let mut aligns = vec![4096, u64::from(block_size)];
    aligns.sort_unstable_by(|a, b| b.cmp(a));
    aligns.dedup();
    aligns
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Number {
    /// Where in the file: an offset, or the size a truncate leaves.
    Position,
    Length,
}

impl Number {
    /// A zero length asks for nothing, which no failure is about.
    fn least(self) -> u64 {
        match self {
            Number::Position => 0,
            Number::Length => 1,
        }
    }
}

fn get(op: &Op, number: Number) -> Option<u64> {
    match (op, number) {
        (Op::Write { offset, .. } | Op::Read { offset, .. } | Op::Fallocate { offset, .. } | Op::Lseek { offset, .. } | Op::ReadFd { offset, .. } | Op::WriteFd { offset, .. } | Op::DirectWrite { offset, .. } | Op::DirectRead { offset, .. } | Op::MapWrite { offset, .. }, Number::Position) => Some(*offset),
        (Op::Truncate { size, .. } | Op::FtruncateFd { size, .. }, Number::Position) => Some(*size),
        (Op::Fiemap { start, .. }, Number::Position) => Some(*start),
        (Op::Write { len, .. } | Op::Read { len, .. } | Op::Append { len, .. } | Op::Rewrite { len, .. } | Op::ReadFd { len, .. } | Op::WriteFd { len, .. } | Op::DirectWrite { len, .. } | Op::DirectRead { len, .. } | Op::MapWrite { len, .. }, Number::Length) => Some(u64::from(*len)),
        (Op::Fallocate { len, .. }, Number::Length) => Some(*len),
        (Op::Fiemap { len, .. }, Number::Length) => (*len != u64::MAX).then_some(*len),
        _ => None,
    }
}

/// Sets a number `get` found; a value that does not fit (never smaller
/// than what was there) leaves it.
fn set(op: &mut Op, number: Number, value: u64) {
    match (op, number) {
        (Op::Write { offset, .. } | Op::Read { offset, .. } | Op::Fallocate { offset, .. } | Op::Lseek { offset, .. } | Op::ReadFd { offset, .. } | Op::WriteFd { offset, .. } | Op::DirectWrite { offset, .. } | Op::DirectRead { offset, .. } | Op::MapWrite { offset, .. }, Number::Position) => *offset = value,
        (Op::Truncate { size, .. } | Op::Fiemap { start: size, .. } | Op::FtruncateFd { size, .. }, Number::Position) => *size = value,
        (Op::Write { len, .. } | Op::Read { len, .. } | Op::Append { len, .. } | Op::Rewrite { len, .. } | Op::ReadFd { len, .. } | Op::WriteFd { len, .. } | Op::DirectWrite { len, .. } | Op::DirectRead { len, .. } | Op::MapWrite { len, .. }, Number::Length) => *len = u32::try_from(value).unwrap_or(*len),
        (Op::Fallocate { len, .. } | Op::Fiemap { len, .. }, Number::Length) => *len = value,
        _ => {}
    }
}

fn op_mut(step: &mut Step) -> Option<&mut Op> {
    match step {
        Step::Op(op) | Step::Begin(op) => Some(op),
        _ => None,
    }
}

/// Smaller values to try instead of `value`, simplest first: the least,
/// half aligned down (coarsest first), half, `value` aligned down.
fn smaller_values(value: u64, least: u64, aligns: &[u64]) -> Vec<u64> {
    let half = value / 2;
    let mut out = vec![least];
    out.extend(aligns.iter().map(|a| half / a * a));
    out.push(half);
    out.extend(aligns.iter().map(|a| value / a * a));
    let mut seen = Vec::new();
    out.retain(|v| (least..value).contains(v) && !seen.contains(v) && {
        seen.push(*v);
        true
    });
    out
}

pub(super) fn smaller_numbers(current: &mut Trace, trial: &mut Trial) {
    renumber_seeds(current, trial);
    move_positions_down(current, trial);
    while !trial.exhausted() && trial.keep(current, halved(current)) {}
    for _ in 0..MAX_SWEEPS {
        let before = current.clone();
        for i in 0..current.steps.len() {
            for number in [Number::Position, Number::Length] {
                shrink_number(current, trial, i, number);
            }
        }
        if *current == before || trial.exhausted() {
            return;
        }
    }
}

/// Shrinks the number of step `i` as far as it still fails.
fn shrink_number(current: &mut Trace, trial: &mut Trial, i: usize, number: Number) {
    let aligns = alignments(current.spec.mount.block_size);
    'smaller: loop {
        let Some(value) = current.steps[i].op().and_then(|op| get(op, number)) else { return };
        for smaller in smaller_values(value, number.least(), &aligns) {
            if trial.exhausted() {
                return;
            }
            let mut candidate = current.clone();
            if let Some(op) = op_mut(&mut candidate.steps[i]) {
                set(op, number, smaller);
            }
            if trial.keep(current, candidate) {
                continue 'smaller;
            }
        }
        return;
    }
}

/// Write seeds as 1, 2, ... in the order met: short, and still one seed per
/// seed, so data written twice with one seed is still alike.
fn renumber_seeds(current: &mut Trace, trial: &mut Trial) {
    let mut renumbered: BTreeMap<u64, u64> = BTreeMap::new();
    let mut candidate = current.clone();
    for op in candidate.steps.iter_mut().filter_map(op_mut) {
        if let Op::Write { seed, .. } | Op::Append { seed, .. } | Op::Rewrite { seed, .. } | Op::WriteFd { seed, .. } | Op::DirectWrite { seed, .. } | Op::MapWrite { seed, .. } = op {
            let next = renumbered.len() as u64 + 1;
            *seed = *renumbered.entry(*seed).or_insert(next);
        }
    }
    trial.keep(current, candidate);
}

/// Moves positions down by one aligned amount, the least nonzero position
/// aligned down: an offset just below a size stays just below it, aligned
/// positions stay aligned, and a zero (a truncate to nothing) stays zero.
/// The whole trace at once, then the ops of one path at a time (in the
/// order met).
fn move_positions_down(current: &mut Trace, trial: &mut Trial) {
    let align = alignments(current.spec.mount.block_size)[0];
    let mut paths: Vec<Option<String>> = vec![None];
    for op in current.steps.iter().filter_map(Step::op).filter(|op| get(op, Number::Position).is_some()) {
        let path = Some(position_key(op));
        if !paths.contains(&path) {
            paths.push(path);
        }
    }
    for path in paths {
        if trial.exhausted() {
            return;
        }
        let on_path = |op: &Op| path.as_deref().is_none_or(|p| position_key(op) == p);
        let positions = current.steps.iter().filter_map(Step::op).filter(|op| on_path(op)).filter_map(|op| get(op, Number::Position));
        let Some(least) = positions.filter(|p| *p > 0).min() else { continue };
        let by = least / align * align;
        if by == 0 {
            continue;
        }
        let mut candidate = current.clone();
        for op in candidate.steps.iter_mut().filter_map(op_mut).filter(|op| on_path(op)) {
            if let Some(position) = get(op, Number::Position).filter(|p| *p > 0) {
                set(op, Number::Position, position - by);
            }
        }
        trial.keep(current, candidate);
    }
}

/// What a position is a position in: the op's path, or its descriptor slot.
fn position_key(op: &Op) -> String {
    match op {
        Op::ReadFd { slot, .. } | Op::WriteFd { slot, .. } | Op::FtruncateFd { slot, .. } => format!("slot {slot}"),
        _ => op.paths().first().map_or_else(String::new, |p| p.to_string()),
    }
}

/// Every number of the trace halved (lengths not below one).
fn halved(trace: &Trace) -> Trace {
    let mut candidate = trace.clone();
    for op in candidate.steps.iter_mut().filter_map(op_mut) {
        for number in [Number::Position, Number::Length] {
            if let Some(value) = get(op, number) {
                set(op, number, (value / 2).max(number.least()));
            }
        }
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::spec::RunSpec;
    use crate::shrink::Budget;
    use ext4_model::{FallocFlags, MountConfig};

    fn trace(mount: &str, ops: Vec<Op>) -> Trace {
        Trace { spec: RunSpec::new(1, 1, mount.parse().unwrap()), steps: ops.into_iter().map(Step::Op).collect() }
    }

    fn smaller(t: &Trace, mut fails: impl FnMut(&Trace) -> bool) -> (Vec<Op>, usize) {
        let mut budget = Budget::default();
        let mut current = t.clone();
        smaller_numbers(&mut current, &mut Trial::new(&mut budget, &mut fails));
        (current.steps.iter().filter_map(Step::op).cloned().collect(), budget.runs())
    }

    fn write(t: &Trace, i: usize) -> (u64, u32, u64) {
        match t.steps[i].op() {
            Some(Op::Write { offset, len, seed, .. }) => (*offset, *len, *seed),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_write_that_must_reach_past_8192_keeps_that_and_nothing_more() {
        let t = trace("", vec![Op::Create { path: "/a".into(), perm: 0o644 }, Op::Write { path: "/a".into(), offset: 1_234_567, len: 70_000, seed: 987_654_321 }]);
        let (ops, runs) = smaller(&t, |t| {
            let (offset, len, _) = write(t, 1);
            offset + u64::from(len) > 8192
        });
        let Op::Write { offset, len, seed, .. } = ops[1] else { panic!("{:?}", ops[1]) };
        // Halving stops within a factor of two of the least that fails.
        assert!(offset + u64::from(len) > 8192 && offset + u64::from(len) <= 16384, "{:?}", ops[1]);
        assert_eq!(seed, 1);
        assert!(runs < 100, "{runs} runs");
    }

    #[test]
    fn a_failure_that_needs_alignment_keeps_it_and_gets_small_aligned_values() {
        let collapse = |offset, len| Op::Fallocate { path: "/f".into(), mode: FallocFlags(FallocFlags::COLLAPSE_RANGE), offset, len };
        let t = trace("", vec![collapse(5 * 4096 * 1000, 3 * 4096 * 7)]);
        let (ops, _) = smaller(&t, |t| match t.steps[0].op() {
            Some(Op::Fallocate { offset, len, .. }) => offset % 4096 == 0 && len % 4096 == 0 && *len > 0,
            _ => false,
        });
        assert_eq!(ops, vec![collapse(0, 4096)]);
        // On 1 KiB blocks, page-aligned values come first and the block is
        // the next step down.
        let t = trace("", vec![collapse(10 * 1024 + 4096 * 9, 3 * 1024)]);
        let t = Trace { spec: RunSpec { mount: MountConfig { block_size: 1024, ..MountConfig::default() }, ..t.spec }, ..t };
        let (ops, _) = smaller(&t, |t| match t.steps[0].op() {
            Some(Op::Fallocate { offset, len, .. }) => offset % 1024 == 0 && len % 1024 == 0 && *offset >= 1024 && *len > 0,
            _ => false,
        });
        assert_eq!(ops, vec![collapse(1024, 1024)]);
    }

    #[test]
    fn a_read_reaching_the_end_a_truncate_set_shrinks_with_it() {
        // The shape of the injected engine bug: a read that reaches EOF.
        let t = trace(
            "",
            vec![
                Op::Create { path: "/tmp".into(), perm: 0o644 },
                Op::Truncate { path: "/tmp".into(), size: 1_231_433 },
                Op::Read { path: "/tmp".into(), offset: 1_228_904, len: 16384 },
            ],
        );
        let reaches_eof = |t: &Trace| match (t.steps[1].op(), t.steps[2].op()) {
            (Some(Op::Truncate { size, .. }), Some(Op::Read { offset, len, .. })) => offset < size && offset + u64::from(*len) >= *size,
            _ => false,
        };
        let (ops, runs) = smaller(&t, reaches_eof);
        assert_eq!(&ops[1..], [Op::Truncate { path: "/tmp".into(), size: 1 }, Op::Read { path: "/tmp".into(), offset: 0, len: 1 }]);
        assert!(runs < 200, "{runs} runs");
    }

    #[test]
    fn a_read_reaching_the_end_a_write_left_shrinks_with_it_and_a_zero_size_stays() {
        let t = trace(
            "",
            vec![
                Op::Truncate { path: "/a".into(), size: 0 },
                Op::Write { path: "/a".into(), offset: 1_114_112, len: 502_586, seed: 5 },
                Op::Read { path: "/a".into(), offset: 1_600_000, len: 40_000 },
            ],
        );
        let reaches_eof = |t: &Trace| match (t.steps[0].op(), t.steps[1].op(), t.steps[2].op()) {
            (Some(Op::Truncate { size: 0, .. }), Some(Op::Write { offset: w, len: l, .. }), Some(Op::Read { offset, len, .. })) => {
                let size = w + u64::from(*l);
                offset < &size && offset + u64::from(*len) >= size
            }
            _ => false,
        };
        let (ops, runs) = smaller(&t, reaches_eof);
        let numbers: Vec<u64> = ops[1..].iter().flat_map(|op| [get(op, Number::Position), get(op, Number::Length)]).flatten().collect();
        assert!(numbers.iter().all(|n| *n < 4096), "{ops:?}");
        assert!(runs < 200, "{runs} runs");
    }

    #[test]
    fn a_fiemap_range_shrinks_and_a_whole_file_one_stays_whole() {
        let fiemap = |start, len| Op::Fiemap { path: "/f".into(), start, len, flags: 0, count_only: true };
        let t = trace("", vec![fiemap(1_234_567, 70_000), fiemap(0, u64::MAX)]);
        let (ops, _) = smaller(&t, |t| matches!(t.steps[0].op(), Some(Op::Fiemap { start, len, .. }) if start + len > 8192));
        let Op::Fiemap { start, len, .. } = ops[0] else { panic!("{:?}", ops[0]) };
        assert!(start + len > 8192 && start + len <= 16384, "{:?}", ops[0]);
        assert_eq!(ops[1], fiemap(0, u64::MAX));
    }

    #[test]
    fn smaller_values_come_simplest_first_and_stay_above_the_least() {
        assert_eq!(smaller_values(10_000, 0, &[4096]), vec![0, 4096, 5000, 8192]);
        assert_eq!(smaller_values(10_000, 1, &[4096, 1024]), vec![1, 4096, 5000, 8192, 9216]);
        assert_eq!(smaller_values(1, 1, &[4096]), Vec::<u64>::new());
        assert_eq!(alignments(1024), vec![4096, 1024]);
        assert_eq!(alignments(65536), vec![65536, 4096]);
    }
}
