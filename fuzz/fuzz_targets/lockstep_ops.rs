//! Arbitrary ops against the model and the engine in lockstep.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ext4_sim::fuzz_body::lockstep_ops(data));
