//! Memory geometry and pressure: arbitrary block size, page size, folio
//! order cap, budget and fragmentation under writes, reads, write-backs and
//! metadata reads. A failed or livelocked no-fail allocation, an ENOMEM
//! the budget should never give, a panic or wrong data is a crash.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ext4_sim::fuzz_body::folio_nofail(data);
});
