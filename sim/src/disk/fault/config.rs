//! Which faults a disk injects: a switch and a rate per kind. Every kind is
//! off by default; a rate is checked even while its switch is off.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

/// A fault kind's switch and rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultSwitch {
    pub enabled: bool,
    /// Chance per command, in `[0, 1]`. Checked even while off, so a typo shows
    /// up when the config is set, not when the switch is flipped. Default: 0.
    pub probability: f64,
}

impl FaultSwitch {
    pub const OFF: FaultSwitch = FaultSwitch { enabled: false, probability: 0.0 };

    pub const fn on(probability: f64) -> FaultSwitch {
        FaultSwitch { enabled: true, probability }
    }

    /// Draws only when enabled, so an off switch leaves its stream untouched.
    pub(super) fn fires(&self, rng: &mut ChaCha8Rng) -> bool {
        self.enabled && rng.random_bool(self.probability)
    }
}

/// When the device turns read-only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOnlyTrigger {
    /// After exactly this many accepted writes (0 = read-only from the start).
    AfterWrites(u64),
    /// After a number of accepted writes drawn uniformly from `0..=bound`.
    SeededWithin(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOnlyFault {
    pub enabled: bool,
    pub trigger: ReadOnlyTrigger,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoSpaceFault {
    pub enabled: bool,
    /// Bytes of backing store writes may touch in total, counted in 4 KiB chunks.
    pub budget_bytes: u64,
}

/// Every fault kind's settings. Default: everything off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FaultConfig {
    pub read_error: FaultSwitch,
    pub write_error: FaultSwitch,
    pub latent_sector: FaultSwitch,
    pub read_only: ReadOnlyFault,
    pub no_space: NoSpaceFault,
}

impl FaultConfig {
    pub const NONE: FaultConfig = FaultConfig {
        read_error: FaultSwitch::OFF,
        write_error: FaultSwitch::OFF,
        latent_sector: FaultSwitch::OFF,
        read_only: ReadOnlyFault { enabled: false, trigger: ReadOnlyTrigger::AfterWrites(0) },
        no_space: NoSpaceFault { enabled: false, budget_bytes: 0 },
    };

    pub fn validate(&self) -> Result<(), FaultConfigError> {
        let rates = [
            ("read_error", self.read_error),
            ("write_error", self.write_error),
            ("latent_sector", self.latent_sector),
        ];
        for (fault, switch) in rates {
            if !(0.0..=1.0).contains(&switch.probability) {
                return Err(FaultConfigError::Probability { fault, value: switch.probability });
            }
        }
        Ok(())
    }
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig::NONE
    }
}

/// Why a fault config was refused.
#[derive(Clone, Copy, Debug, PartialEq, Error)]
pub enum FaultConfigError {
    #[error("{fault} probability must be in [0, 1], got {value}")]
    Probability { fault: &'static str, value: f64 },
}

