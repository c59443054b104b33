//! chattr +j/-j racing writers, faults, direct I/O, truncate and fallocate
//! on a few files, several tasks, crashes and write faults, in lockstep.
//! With `--features switch-bug-twin` the engine carries the seed's switch
//! bug, to measure how soon the target finds it.
#![no_main]

#[cfg(not(feature = "switch-bug-twin"))]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ext4_sim::fuzz_body::journal_switch(data);
});

#[cfg(feature = "switch-bug-twin")]
struct SwitchBugTwin;

#[cfg(feature = "switch-bug-twin")]
impl ext4_sim::target::TargetFactory for SwitchBugTwin {
    type Target = ext4_sim::engine_target::EngineTarget;
    fn make(&self, spec: &ext4_sim::run::RunSpec) -> Result<Self::Target, String> {
        let mut t = ext4_sim::engine_target::make_engine(spec)?;
        t.after_mount(|fs| fs.inject_bug(ext4_engine::fs::test_hooks::InjectedBug::SwitchKeepsLockOnFailedFlush));
        Ok(t)
    }
}

#[cfg(feature = "switch-bug-twin")]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ext4_sim::fuzz_body::journal_switch_on(&SwitchBugTwin, data);
});
