//! The crate's one error type. Every failure the engine can report is a value
//! of [`Error`]; bad bytes on disk become [`Corrupt`], which names the
//! structure and field so a report can be acted on without a hex dump.
//!
//! Both enums are `#[non_exhaustive]` so detail can grow without breaking
//! callers that match on them.

use std::fmt;

use crate::device::DeviceError;
use crate::format::features::feature_names;
// Feature words live with the feature tables; `Unsupported::Features` names one.
pub use crate::format::features::FeatureWord;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the engine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The image contradicts the ext4 format.
    #[error("corrupt filesystem: {0}")]
    Corrupt(#[from] Corrupt),
    /// The image is valid ext4 but uses something this engine does not implement.
    #[error("unsupported: {0}")]
    Unsupported(Unsupported),
    /// The block device refused an I/O.
    #[error("device: {0}")]
    Device(#[from] DeviceError),
    /// `mkfs` options that cannot describe a filesystem.
    #[error("invalid mkfs options: {0}")]
    InvalidMkfs(String),
    /// A caller asked for something outside the image (inode 0, inode past the count...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The page cache could get no memory for a folio, even of the minimum order.
    #[error("out of memory: {0}")]
    NoMemory(String),
    /// A no-fail allocation reclaim could not satisfy (the kernel would spin).
    #[error("livelock: {0}")]
    Livelock(crate::memory::nofail::Livelock),
    /// Write-back could not allocate blocks its reservation promised.
    #[error("delayed allocation failed: {0}")]
    DelayedAllocation(String),
    /// A lock a split op holds, which this thread could never see released.
    #[error("{0}")]
    WouldWait(crate::locking::WouldWait),
}

/// Which on-disk object a checksum belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChecksumObject {
    Superblock,
    GroupDescriptor { group: u32 },
    BlockBitmap { group: u32 },
    InodeBitmap { group: u32 },
    Inode { ino: u32 },
    ExtentBlock { ino: u32, block: u64 },
    DirBlock { ino: u32, block: u64 },
    JournalSuperblock,
}

impl fmt::Display for ChecksumObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChecksumObject::Superblock => write!(f, "superblock"),
            ChecksumObject::GroupDescriptor { group } => write!(f, "group descriptor {group}"),
            ChecksumObject::BlockBitmap { group } => write!(f, "block bitmap of group {group}"),
            ChecksumObject::InodeBitmap { group } => write!(f, "inode bitmap of group {group}"),
            ChecksumObject::Inode { ino } => write!(f, "inode {ino}"),
            ChecksumObject::ExtentBlock { ino, block } => {
                write!(f, "extent block {block} of inode {ino}")
            }
            ChecksumObject::DirBlock { ino, block } => {
                write!(f, "directory block {block} of inode {ino}")
            }
            ChecksumObject::JournalSuperblock => write!(f, "journal superblock"),
        }
    }
}

/// What exactly is corrupt. Strings name the field and the offending value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Corrupt {
    #[error("superblock: {0}")]
    Superblock(String),
    #[error("group descriptor {group}: {what}")]
    GroupDescriptor { group: u32, what: String },
    #[error("bitmap of group {group}: {what}")]
    Bitmap { group: u32, what: String },
    #[error("inode {ino}: {what}")]
    Inode { ino: u32, what: String },
    #[error("extent tree of inode {ino}: {what}")]
    Extent { ino: u32, what: String },
    #[error("directory inode {ino}, block {block}: {what}")]
    Dirent { ino: u32, block: u64, what: String },
    #[error("journal: {0}")]
    Journal(String),
    #[error("{object} checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum { object: ChecksumObject, stored: u32, computed: u32 },
}

impl Corrupt {
    /// A directory entry names an inode that is not in use (zeroed, or in
    /// its group's unused inode-table tail): one wording for every reader.
    pub fn entry_names_free_inode(ino: u32) -> Error {
        Error::Corrupt(Corrupt::Inode { ino, what: "a directory entry names a free inode (zeroed, or past bg_itable_unused)".into() })
    }
}

/// Something valid that the engine cannot handle.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsupported {
    /// Feature bits the engine does not implement, with their names.
    Features { word: FeatureWord, bits: u32 },
    /// Any other construct (inline data, block-mapped files, htree listing...).
    Construct(String),
}

impl fmt::Display for Unsupported {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsupported::Features { word, bits } => {
                let word_name = match word {
                    FeatureWord::Compat => "compat",
                    FeatureWord::Incompat => "incompat",
                    FeatureWord::RoCompat => "ro_compat",
                    FeatureWord::JournalIncompat => "journal incompat",
                };
                write!(f, "{word_name} features {}", feature_names(*word, *bits))
            }
            Unsupported::Construct(what) => f.write_str(what),
        }
    }
}

impl From<Unsupported> for Error {
    fn from(u: Unsupported) -> Self {
        Error::Unsupported(u)
    }
}
