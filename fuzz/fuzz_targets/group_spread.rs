//! The allocator's group spreading: arbitrary geometry (block size, group
//! count, flex size, descriptor checksums) and policy (Orlov or oldalloc,
//! BLOCK_UNINIT used or skipped) under mkdir/create/write/truncate/unlink/
//! rmdir/sync. Counts that drift, a top-level directory or a file against
//! ext4's group rules, an image the engine's fsck rejects, or a panic is a
//! crash.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ext4_sim::fuzz_body::group_spread(data);
});
