//! What the test bed's tests share, and what its runs against the real
//! tools need: fresh images ([`fresh`]), the strict e2fsprogs runner
//! ([`e2fsprogs`]), host loop mounts that clean up ([`loop_mount`]), and, with the `strategy` feature, proptest strategies
//! for ops and mount configurations ([`strategy`]).
//!
//! Every crate takes it as a dev-dependency, so the crate that holds the
//! law (`ext4-model`) builds without proptest. The simulator also takes it
//! as a normal dependency, without `strategy`: its kernel oracle and
//! benchmarks run e2fsprogs through the same runner the tests trust.

#![forbid(unsafe_code)]

pub mod e2fsprogs;
pub mod fresh;
pub mod loop_mount;
#[cfg(feature = "strategy")]
pub mod strategy;
