//! Faults as the trace names them, and as the device reports them.

use ext4_engine::device::{DeviceError, SECTOR_SIZE};

/// Which fault refused a command, for the statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    ReadError,
    /// A read hit a sector that was already bad.
    LatentSector,
    /// A read made a sector go bad.
    NewLatentSector,
    WriteError,
    ReadOnly,
    NoSpace,
}

/// A fault a trace records, by the kind names `--faults` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScriptedFault {
    /// Read EIO.
    Read,
    /// Write EIO.
    Write,
    /// A sector going bad on read (it stays bad until rewritten).
    Latent,
    /// The device turning read-only (it stays so).
    ReadOnly,
}

impl ScriptedFault {
    pub fn name(self) -> &'static str {
        match self {
            ScriptedFault::Read => "read",
            ScriptedFault::Write => "write",
            ScriptedFault::Latent => "latent",
            ScriptedFault::ReadOnly => "readonly",
        }
    }

    pub fn from_name(name: &str) -> Option<ScriptedFault> {
        [ScriptedFault::Read, ScriptedFault::Write, ScriptedFault::Latent, ScriptedFault::ReadOnly].into_iter().find(|k| k.name() == name)
    }
}

/// One fault, placed by the device command (counted from 0 at the start of an
/// op: reads, writes and flushes alike) and the sector within that command.
/// ENOSPC is not an event: it follows from the byte budget alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultEvent {
    pub kind: ScriptedFault,
    pub command: u32,
    pub sector: u32,
}

/// A refused command: why, and what the device answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultHit {
    pub kind: FaultKind,
    pub error: DeviceError,
}

impl FaultHit {
    pub(super) fn io(kind: FaultKind, sector: u64) -> FaultHit {
        FaultHit { kind, error: DeviceError::Io { offset: sector * SECTOR_SIZE } }
    }
}

