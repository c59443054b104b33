//! The reference model of ext4 semantics and the op vocabulary shared by the
//! engine, the simulator, the kernel oracle and the fuzz targets.
//!
//! The model is small, slow and obviously right: plain `BTreeMap`s, no physical
//! blocks. Its logical answers (return values, errnos, bytes, stat, FIEMAP
//! coverage and flags, listings) are law; physical choices belong to the engine.
//! [`agree`] says how an implementation's answer is compared with the model's.

#![forbid(unsafe_code)]

pub mod adopt;
pub mod agree;
mod auto_da_alloc;
pub mod config;
pub mod content;
mod crash_log;
mod descriptors;
pub mod data;
mod direct_io;
pub mod durability;
mod errno;
mod fallocate;
mod mapped_write;
mod file_ops;
pub mod fs;
pub mod model;
mod namespace;
pub mod op;
pub mod path;
pub mod pattern;
pub mod range_map;
mod seek;
mod split;
mod truncate_parts;
mod direct_read_parts;
mod direct_write_parts;
mod fallocate_parts;
mod write_parts;
mod read_parts;
pub mod state;
pub mod text;
pub mod vfs;
pub mod whole_tree;

pub use text::TextError;
pub use config::{AllocPolicy, ConfigError, DataMode, EffectiveMount, InodeJournalMode, MountConfig};
pub use durability::{CrashEnvelope, CrashVerdict, CrashViolation};
pub use errno::Errno;
pub use mapped_write::BlockStates;
pub use fs::FileSystem;
pub use model::{Limits, Model};
pub use split::{Pending, PendingFsync, PendingSwitch};
pub use truncate_parts::{PendingTruncate, TruncateOf};
pub use direct_read_parts::PendingDirectRead;
pub use direct_write_parts::PendingDirectWrite;
pub use fallocate_parts::PendingFallocate;
pub use write_parts::PendingWrite;
pub use read_parts::PendingRead;
pub use op::{ChattrFlag, CutShort, DirEntry, FallocFlags, FiemapExtent, FiemapRequest, FileKind, Op, OpKind, Outcome, RenameFlags, Reply, SeekChoices, SeekWhence, Stat};
