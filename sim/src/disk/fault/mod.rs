//! Seeded faults, each kind with its own switch, rate and random stream.
//!
//! - **Read EIO**: a read fails at a drawn sector with `probability` per read.
//! - **Write EIO**: a write fails at a drawn sector with `probability` per write;
//!   nothing of it is applied.
//! - **Latent sector errors**: with `probability` per read, a drawn sector of the
//!   range goes bad and that read fails; from then on every read of it fails
//!   until a write covers it (the drive remaps on rewrite). Sectors can also be
//!   planted with [`super::SimDisk::inject_latent_sector`]. A sector served from
//!   the write cache never fails.
//! - **Read-only**: after N accepted writes (fixed, or drawn from the seed) every
//!   write fails with `ReadOnly`, and so does a flush that has anything to write.
//! - **ENOSPC**: writes that would grow the backing store past a byte budget of
//!   touched storage (4 KiB chunks) fail with `NoSpace`; rewrites of touched
//!   storage still succeed, as on a full sparse file.
//!
//! The fault overlay (bad sectors, touched chunks, accepted-write count) lives
//! here, apart from the data, and is kept while a switch is off: switching a
//! fault off hides it without losing the truth, switching it on brings it back.
//! A switched-off kind draws nothing, so it cannot perturb the others.
//!
//! Drawn faults are also reported as [`FaultEvent`]s placed by device command
//! within one op. A replay runs *scripted*: nothing is drawn, and each event a
//! trace holds fails the same command of its op. A trace then reproduces its
//! faults exactly, and a shrunk trace keeps each fault with its op.
//!
//! - [`config`]: the switches and rates; [`text`]: their `--faults` form.
//! - [`event`]: the trace's vocabulary of faults.
//! - [`state`]: the live state of one disk's faults.

pub mod config;
pub mod event;
pub mod state;
pub mod text;

pub use config::{FaultConfig, FaultConfigError, FaultSwitch, NoSpaceFault, ReadOnlyFault, ReadOnlyTrigger};
pub use event::{FaultEvent, FaultHit, FaultKind, ScriptedFault};
pub use state::FaultState;
pub use text::FaultTextError;

#[cfg(test)]
mod tests;
