//! Bodies of the cargo-fuzz targets, kept in the library so that a plain
//! `cargo test` replays every corpus file the same way the fuzzer decodes it.

mod folio_nofail;
mod group_spread;
mod journal_switch;
mod lockstep;
mod model_ops;
mod mount_image;

pub use folio_nofail::{folio_nofail, seed_corpus as folio_nofail_seed_corpus, NoFailRun};
pub use group_spread::{group_spread, seed_corpus as group_spread_seed_corpus, SpreadRun};
pub use journal_switch::{journal_switch, journal_switch_on, journal_switch_trace, seed_corpus as journal_switch_seed_corpus, SwitchReach, FUZZ_DISK_BYTES};
pub use lockstep::{lockstep, lockstep_on, lockstep_spec, seed_corpus as lockstep_seed_corpus, Reach, HEADER_BYTES, LOCKSTEP_MOUNTS, MAX_LOCKSTEP_OPS};
pub use model_ops::{model_ops, seed_corpus as model_ops_seed_corpus, ModelOpsRun};
pub use mount_image::{mount_image, seed_corpus as mount_image_seed_corpus, ImageRun, Region, TEMPLATE_NAMES};

/// Cap on ops one input runs, so a single input stays fast.
pub const MAX_FUZZ_OPS: usize = 64;
