//! Model and engine in lockstep on runs the swarm's generator makes, every
//! choice drawn from the input (sim/src/fuzz_body/lockstep.rs). With
//! `--features lockstep-bug-twin` the engine carries the test hook named by
//! `EXT4SIM_TWIN` (default `WriteBackKeepsCachedHoles`), to measure how soon
//! the target finds a data-path bug.
#![no_main]

#[cfg(not(feature = "lockstep-bug-twin"))]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ext4_sim::fuzz_body::lockstep(data);
});

#[cfg(feature = "lockstep-bug-twin")]
mod twin {
    use ext4_engine::fs::test_hooks::InjectedBug;

    /// Hooks this target can arm: bugs in the data path, the journal's
    /// ordering and the caches, each caught by some generated run.
    const BUGS: [InjectedBug; 15] = [
        InjectedBug::WriteBackKeepsCachedHoles,
        InjectedBug::ReadFlipsLastByteAfterTruncate,
        InjectedBug::OrderedCommitsBeforeData,
        InjectedBug::SeekIgnoresPageCache,
        InjectedBug::JournaledDataNeverLogged,
        InjectedBug::CommitReleasesEveryHold,
        InjectedBug::OrphanListForgotten,
        InjectedBug::ReleaseForgetsTruncatedFile,
        InjectedBug::TruncateLeavesNoOrphan,
        InjectedBug::FallocatePieceSizesPastRange,
        InjectedBug::PunchDropsCacheLate,
        InjectedBug::DirectWriteMapsWritten,
        InjectedBug::DirectWriteKeepsStaleCache,
        InjectedBug::DirectReadUnlocksEarly,
        InjectedBug::ReadPartKeepsFirstSize,
    ];

    /// The armed hook, chosen once per process (`after_mount` takes a plain
    /// function, which reads it here).
    static BUG: std::sync::OnceLock<InjectedBug> = std::sync::OnceLock::new();

    fn arm(fs: &mut ext4_engine::fs::Ext4<ext4_sim::disk::SimDisk>) {
        fs.inject_bug(*BUG.get_or_init(from_env));
    }

    fn from_env() -> InjectedBug {
        let name = std::env::var("EXT4SIM_TWIN").unwrap_or_else(|_| "WriteBackKeepsCachedHoles".into());
        BUGS.into_iter().find(|b| format!("{b:?}") == name).unwrap_or_else(|| panic!("EXT4SIM_TWIN={name}: one of {BUGS:?}"))
    }

    pub struct LockstepBugTwin;

    impl ext4_sim::target::TargetFactory for LockstepBugTwin {
        type Target = ext4_sim::engine_target::EngineTarget;
        fn make(&self, spec: &ext4_sim::run::RunSpec) -> Result<Self::Target, String> {
            let mut t = ext4_sim::engine_target::make_engine(spec)?;
            t.after_mount(arm);
            Ok(t)
        }
    }
}

#[cfg(feature = "lockstep-bug-twin")]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ext4_sim::fuzz_body::lockstep_on(&twin::LockstepBugTwin, data);
});
