//! A deliberately wrong engine answer (injected through the engine's
//! test-only hook) is caught, shrunk to a few steps, and replays from its trace.

use ext4_engine::fs::test_hooks::InjectedBug;
use ext4_model::MountConfig;
use ext4_sim::driver::{run_seed, run_steps, shrink_failure, RunSpec, TargetFactory};
use ext4_sim::engine_target::{make_engine, EngineTarget};
use ext4_sim::lockstep::Failure;
use ext4_sim::trace::Trace;

struct Buggy;

impl TargetFactory for Buggy {
    type Target = EngineTarget;
    fn make(&self, spec: &RunSpec) -> Result<EngineTarget, String> {
        let mut t = make_engine(spec)?;
        t.engine_mut().ok_or("not mounted")?.inject_bug(InjectedBug::ReadFlipsLastByteAfterTruncate);
        Ok(t)
    }
}

#[test]
fn injected_engine_bug_is_caught_shrunk_and_replayed() {
    let failing = (0..30)
        .map(|s| run_seed(&Buggy, &RunSpec { swarm: false, ..RunSpec::new(s, 2000, MountConfig::default()) }).unwrap())
        .find(|r| r.failure.is_some())
        .expect("some seed reads to EOF after a truncate");
    assert!(matches!(&failing.failure, Some(Failure::Divergence(d)) if matches!(d.op, ext4_model::Op::Read { .. })));
    let ext4_sim::driver::ShrunkTrace { trace, runs, budget_spent } = shrink_failure(&Buggy, &failing).unwrap();
    assert!(!budget_spent);
    assert!(trace.steps.len() <= 5, "shrunk to {} steps in {runs} runs: {:?}", trace.steps.len(), trace.steps);
    let back = Trace::parse(&trace.to_text()).unwrap();
    let spec = RunSpec::from_trace(&back).unwrap();
    let again = run_steps(&Buggy, &spec, &back.steps).unwrap();
    assert!(again.failure.as_ref().is_some_and(|f| f.same_kind(failing.failure.as_ref().unwrap())));
    // The same steps on the real engine pass.
    let clean = run_steps(&ext4_sim::engine_target::EngineFactory, &spec, &back.steps).unwrap();
    assert!(clean.failure.is_none(), "{:?}", clean.failure);
}
