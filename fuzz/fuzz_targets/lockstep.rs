//! Model and engine in lockstep on runs the swarm's generator makes, every
//! choice drawn from the input (sim/src/fuzz_body/lockstep.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ext4_sim::fuzz_body::lockstep(data);
});
