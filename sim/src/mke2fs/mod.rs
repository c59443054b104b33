//! mke2fs as the test bed uses it: the arguments it understands ([`args`])
//! and images made with them for a simulation ([`image`]); the kernel
//! oracle makes its own from the same arguments (`oracle::image`).

pub mod args;
pub mod image;

pub use args::{MkfsArgs, MkfsOpt, MkfsUsage};
