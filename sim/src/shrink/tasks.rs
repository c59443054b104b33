//! Fewer tasks: a trace whose failure does not need its interleaving runs as
//! one task, each begun op whole where it began; else tasks no step names
//! go, and a task the failure does not need apart is merged into task 0,
//! its ops running where they ran.

use super::simplify::Trial;
use crate::run::spec::RunSpec;
use crate::trace::{Step, Trace};

pub(super) fn fewer_tasks(current: &mut Trace, trial: &mut Trial) {
    let interleaved = current.steps.iter().any(|s| matches!(s, Step::Task(_) | Step::Begin(_) | Step::Part | Step::Finish));
    if (current.spec.tasks > 1 || interleaved) && trial.keep(current, one_task(current)) {
        return;
    }
    let named = current.steps.iter().filter_map(|s| if let Step::Task(t) = s { Some(t + 1) } else { None }).max().unwrap_or(1);
    if named < current.spec.tasks {
        let candidate = Trace { spec: RunSpec { tasks: named, ..current.spec.clone() }, steps: current.steps.clone() };
        trial.keep(current, candidate);
    }
    // Highest first: merging a task renumbers only those above it.
    for task in (1..current.spec.tasks).rev() {
        if trial.exhausted() {
            return;
        }
        trial.keep(current, merged(current, task));
    }
}

/// The trace as one task: no switches, each begun op run whole where it
/// began, no parts or finishes (nor the faults aimed at them).
fn one_task(trace: &Trace) -> Trace {
    let mut steps = Vec::new();
    for step in &trace.steps {
        match step {
            Step::Task(_) => {}
            Step::Begin(op) => steps.push(Step::Op(op.clone())),
            Step::Part | Step::Finish => {
                while matches!(steps.last(), Some(Step::Fault(_))) {
                    steps.pop();
                }
            }
            other => steps.push(other.clone()),
        }
    }
    Trace { spec: RunSpec { tasks: 1, ..trace.spec.clone() }, steps }
}

/// The trace with `task`'s steps run by task 0 and the tasks above it
/// renumbered down.
fn merged(trace: &Trace, task: u32) -> Trace {
    let steps = trace.steps.iter().map(|step| match step {
        Step::Task(t) if *t == task => Step::Task(0),
        Step::Task(t) if *t > task => Step::Task(t - 1),
        other => other.clone(),
    });
    Trace { spec: RunSpec { tasks: trace.spec.tasks - 1, ..trace.spec.clone() }, steps: without_idle_switches(steps) }
}

/// Steps without switches that change nothing: to the task already running,
/// or to one that runs no step before the next switch.
fn without_idle_switches(steps: impl Iterator<Item = Step>) -> Vec<Step> {
    let running = |steps: &[Step]| steps.iter().rev().find_map(|s| if let Step::Task(t) = s { Some(*t) } else { None }).unwrap_or(0);
    let mut out: Vec<Step> = Vec::new();
    for step in steps {
        if let Step::Task(t) = step {
            if matches!(out.last(), Some(Step::Task(_))) {
                out.pop();
            }
            if t == running(&out) {
                continue;
            }
        }
        out.push(step);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shrink::Budget;
    use ext4_model::{MountConfig, Op};

    fn create(name: &str) -> Step {
        Step::Op(Op::Create { path: format!("/{name}"), perm: 0o644 })
    }

    fn fsync(name: &str) -> Op {
        Op::Fsync { path: format!("/{name}") }
    }

    fn three_tasks(steps: Vec<Step>) -> Trace {
        let t = Trace { spec: RunSpec { tasks: 3, ..RunSpec::new(1, 1, MountConfig::default()) }, steps };
        assert!(t.validate().is_ok());
        t
    }

    fn fewer(t: &Trace, mut fails: impl FnMut(&Trace) -> bool) -> Trace {
        let mut budget = Budget::default();
        let mut current = t.clone();
        fewer_tasks(&mut current, &mut Trial::new(&mut budget, &mut fails));
        assert!(current.validate().is_ok(), "{current:?}");
        current
    }

    /// Task 0 makes /a and fsyncs it in two halves while tasks 1 and 2 run.
    fn interleaved() -> Trace {
        three_tasks(vec![
            create("a"),
            Step::Begin(fsync("a")),
            Step::Task(1),
            create("b"),
            Step::Task(2),
            create("c"),
            Step::Task(0),
            Step::Finish,
            Step::Task(2),
            create("d"),
        ])
    }

    #[test]
    fn a_failure_that_needs_only_the_ops_runs_as_one_task() {
        let needs_ops = |t: &Trace| ["a", "b", "c", "d"].iter().all(|n| t.steps.contains(&create(n))) && t.steps.iter().any(|s| s.op() == Some(&fsync("a")));
        let one = fewer(&interleaved(), needs_ops);
        assert_eq!(one.spec.tasks, 1);
        assert_eq!(one.steps, vec![create("a"), Step::Op(fsync("a")), create("b"), create("c"), create("d")]);
    }

    #[test]
    fn a_failure_that_needs_the_fsync_in_flight_keeps_two_tasks() {
        // Needs /c made while the fsync is in flight, by another task: task
        // 1 merges into 0, task 2 (which makes /c) becomes task 1.
        let needs_overtaking = |t: &Trace| {
            let (mut task, mut in_flight) = (0, false);
            for step in &t.steps {
                match step {
                    Step::Task(n) => task = *n,
                    Step::Begin(_) => in_flight = true,
                    Step::Finish => in_flight = false,
                    s if *s == create("c") && in_flight && task != 0 => return true,
                    _ => {}
                }
            }
            false
        };
        let two = fewer(&interleaved(), needs_overtaking);
        assert_eq!(two.spec.tasks, 2);
        assert_eq!(
            two.steps,
            vec![create("a"), Step::Begin(fsync("a")), create("b"), Step::Task(1), create("c"), Step::Task(0), Step::Finish, Step::Task(1), create("d")]
        );
    }

    #[test]
    fn tasks_no_step_names_go_and_idle_switches_with_them() {
        let t = three_tasks(vec![create("a"), Step::Task(1), create("b")]);
        // Needs task 1 to make /b: one task is refused, the unnamed task 2 goes.
        let needs_task_one = |t: &Trace| t.steps.windows(2).any(|w| w == [Step::Task(1), create("b")]);
        let two = fewer(&t, needs_task_one);
        assert_eq!((two.spec.tasks, two.steps), (2, vec![create("a"), Step::Task(1), create("b")]));
        let steps = [Step::Task(0), create("a"), Step::Task(2), Step::Task(1), create("b"), Step::Task(1), create("c")];
        assert_eq!(without_idle_switches(steps.into_iter()), vec![create("a"), Step::Task(1), create("b"), create("c")]);
    }
}
