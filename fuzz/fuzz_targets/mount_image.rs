//! Hostile images: a valid engine-made image mutated in its superblock,
//! descriptors, inode table, extent and directory blocks or journal
//! (checksums resealed on request), then mounted (journal recovery
//! included), walked, read, unmounted and fsck'd by the engine. An error
//! is fine; a panic is a crash.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = ext4_sim::fuzz_body::mount_image(data);
});
