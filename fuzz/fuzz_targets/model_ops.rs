//! Arbitrary mount configs and op sequences, aimed at the names made so
//! far, against the reference model.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ext4_sim::fuzz_body::model_ops(data);
});
