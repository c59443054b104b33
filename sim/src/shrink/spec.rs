//! A plainer spec: the mount options, fault config, crash and check
//! intervals and disk profile a failure does not need go back to their
//! defaults, so the trace header (and the `needs` line of a report) names
//! only what matters. The whole mount first, then one option at a time.

use ext4_model::MountConfig;

use super::simplify::Trial;
use crate::disk::FaultConfig;
use crate::run::spec::{ProfileSpec, RunSpec, DEFAULT_CRASH_EVERY, DEFAULT_FSCK_EVERY};
use crate::trace::{Step, Trace};

/// Each mount option, reset to its default (the second argument).
const MOUNT_RESETS: [fn(&mut MountConfig, &MountConfig); 17] = [
    |m, d| m.block_size = d.block_size,
    |m, d| m.page_size = d.page_size,
    |m, d| m.has_journal = d.has_journal,
    |m, d| m.data = d.data,
    |m, d| m.delalloc = d.delalloc,
    |m, d| m.dioread_nolock = d.dioread_nolock,
    |m, d| m.journal_async_commit = d.journal_async_commit,
    |m, d| m.auto_da_alloc = d.auto_da_alloc,
    |m, d| m.commit_secs = d.commit_secs,
    |m, d| m.max_folio_order = d.max_folio_order,
    |m, d| m.read_only = d.read_only,
    |m, d| m.alloc = d.alloc,
    |m, d| m.alloc.skip_block_uninit = d.alloc.skip_block_uninit,
    |m, d| m.alloc.orlov = d.alloc.orlov,
    |m, d| m.alloc.stream_request_blocks = d.alloc.stream_request_blocks,
    |m, d| m.alloc.group_prealloc_blocks = d.alloc.group_prealloc_blocks,
    |m, d| m.page_cache_mb = d.page_cache_mb,
];

pub(super) fn plainer_spec(current: &mut Trace, trial: &mut Trial) {
    let plain = MountConfig::default();
    // A candidate the same as the current trace costs nothing, so every
    // reset is offered; one ext4 would refuse fails validation unrun.
    let with = |trace: &Trace, change: &dyn Fn(&mut RunSpec)| {
        let mut spec = trace.spec.clone();
        change(&mut spec);
        Trace { spec, steps: trace.steps.clone() }
    };
    trial.keep(current, with(current, &|s| s.mount = plain));
    for reset in MOUNT_RESETS {
        trial.keep(current, with(current, &|s| reset(&mut s.mount, &plain)));
    }
    // A replay fires exactly its fault steps, and only those of kinds the
    // config enables: with no fault step left, the config is not needed.
    if !current.steps.iter().any(|s| matches!(s, Step::Fault(_))) {
        trial.keep(current, with(current, &|s| s.faults = FaultConfig::NONE));
    }
    // A replay's crashes are its steps: crash_every only keeps the model's
    // crash log, which those steps keep anyway.
    trial.keep(current, with(current, &|s| s.crash_every = DEFAULT_CRASH_EVERY));
    // These change what a replay does (when full checks run, how long
    // writes take): kept when the failure needs them.
    trial.keep(current, with(current, &|s| s.fsck_every = DEFAULT_FSCK_EVERY));
    trial.keep(current, with(current, &|s| s.profile = ProfileSpec::default_profile()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shrink::Budget;
    use ext4_model::{DataMode, Op};

    fn plainer(t: &Trace, mut fails: impl FnMut(&Trace) -> bool) -> Trace {
        let mut budget = Budget::default();
        let mut current = t.clone();
        plainer_spec(&mut current, &mut Trial::new(&mut budget, &mut fails));
        current
    }

    fn odd_spec() -> RunSpec {
        let mut spec = RunSpec::new(5, 100, "data=journal,nodelalloc,journal_async_commit".parse().unwrap());
        spec.mount.block_size = 1024;
        spec.mount.alloc.orlov = false;
        spec.faults = "read,write=0.1".parse().unwrap();
        spec.crash_every = 40;
        spec.fsck_every = 3;
        spec.profile = ProfileSpec::resolve("hdd-5400").unwrap();
        spec
    }

    fn trace(spec: RunSpec) -> Trace {
        Trace { spec, steps: vec![Step::Op(Op::Sync)] }
    }

    #[test]
    fn a_failure_that_needs_nothing_from_the_spec_gets_the_defaults() {
        let t = trace(odd_spec());
        let plain = plainer(&t, |_| true);
        let defaults = RunSpec { seed: 5, ops: 100, ..RunSpec::new(5, 100, MountConfig::default()) };
        assert_eq!(plain.spec, defaults);
        assert_eq!(plain.spec.command(), "ext4sim run --seed 5 --ops 100");
    }

    #[test]
    fn a_failure_that_needs_data_journal_keeps_it_and_loses_the_rest() {
        let t = trace(odd_spec());
        let needs_journal = |t: &Trace| t.spec.mount.data == Some(DataMode::Journal);
        let plain = plainer(&t, needs_journal);
        assert_eq!(plain.spec.mount, MountConfig { data: Some(DataMode::Journal), ..MountConfig::default() });
        assert_eq!(plain.spec.command(), "ext4sim run --seed 5 --ops 100 --mount data=journal");
    }

    #[test]
    fn faults_stay_while_a_fault_step_needs_them() {
        let mut t = trace(odd_spec());
        let fault = crate::disk::FaultEvent { kind: crate::disk::ScriptedFault::Read, command: 0, sector: 0 };
        t.steps.insert(0, Step::Fault(fault));
        let plain = plainer(&t, |_| true);
        assert_eq!(plain.spec.faults, t.spec.faults);
        assert_eq!((plain.spec.mount, plain.spec.crash_every), (MountConfig::default(), DEFAULT_CRASH_EVERY));
    }
}
