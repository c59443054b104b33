//! The `--faults` text form of a [`FaultConfig`]:
//! `read,write,latent,readonly,nospace`, each kind optionally `kind=value`
//! (a probability per command, a write count, or a byte budget) to override
//! its default. Printing gives the form back, naming a value only where it
//! is not the default; `FaultConfig::NONE` prints as the empty string.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

use super::config::{FaultConfig, FaultSwitch, NoSpaceFault, ReadOnlyFault, ReadOnlyTrigger};

/// Default chance per command of a transient read or write EIO.
pub const DEFAULT_IO_ERROR_RATE: f64 = 0.002;
/// Default chance per read that a sector goes bad until rewritten.
pub const DEFAULT_LATENT_RATE: f64 = 0.0005;
/// Default bound on writes before the device turns read-only (seeded within it).
pub const DEFAULT_READ_ONLY_WITHIN_WRITES: u64 = 20_000;
/// Default backing-store budget before writes get ENOSPC, bytes.
pub const DEFAULT_NO_SPACE_BUDGET_BYTES: u64 = 96 << 20;

/// Why a `--faults` text was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum FaultTextError {
    #[error("unknown fault kind `{0}`: use read, write, latent, readonly, nospace")]
    UnknownKind(String),
    #[error("fault `{kind}`: `{value}` is not a probability in [0, 1]")]
    Probability { kind: String, value: String },
    #[error("fault `{kind}`: `{value}` is not a whole number")]
    Count { kind: String, value: String },
}

impl FromStr for FaultConfig {
    type Err = FaultTextError;

    fn from_str(text: &str) -> Result<FaultConfig, FaultTextError> {
        let mut c = FaultConfig::NONE;
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (kind, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            let prob = |d: f64| -> Result<f64, FaultTextError> {
                let bad = |v: &str| FaultTextError::Probability { kind: kind.into(), value: v.into() };
                match value {
                    None => Ok(d),
                    Some(v) => v.parse::<f64>().ok().filter(|p| (0.0..=1.0).contains(p)).ok_or_else(|| bad(v)),
                }
            };
            let count = |d: u64| -> Result<u64, FaultTextError> {
                value.map_or(Ok(d), |v| v.parse::<u64>().map_err(|_| FaultTextError::Count { kind: kind.into(), value: v.into() }))
            };
            match kind {
                "read" => c.read_error = FaultSwitch::on(prob(DEFAULT_IO_ERROR_RATE)?),
                "write" => c.write_error = FaultSwitch::on(prob(DEFAULT_IO_ERROR_RATE)?),
                "latent" => c.latent_sector = FaultSwitch::on(prob(DEFAULT_LATENT_RATE)?),
                "readonly" => {
                    c.read_only = ReadOnlyFault { enabled: true, trigger: ReadOnlyTrigger::SeededWithin(count(DEFAULT_READ_ONLY_WITHIN_WRITES)?.max(1)) }
                }
                // The exact moment, for tests; the command line's kind is `readonly`.
                "readonly_after" => c.read_only = ReadOnlyFault { enabled: true, trigger: ReadOnlyTrigger::AfterWrites(count(0)?) },
                "nospace" => c.no_space = NoSpaceFault { enabled: true, budget_bytes: count(DEFAULT_NO_SPACE_BUDGET_BYTES)? },
                other => return Err(FaultTextError::UnknownKind(other.into())),
            }
        }
        Ok(c)
    }
}

impl fmt::Display for FaultConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut items: Vec<String> = Vec::new();
        let mut rate = |name: &str, s: FaultSwitch, default: f64| {
            if s.enabled {
                items.push(if s.probability == default { name.to_string() } else { format!("{name}={}", s.probability) });
            }
        };
        rate("read", self.read_error, DEFAULT_IO_ERROR_RATE);
        rate("write", self.write_error, DEFAULT_IO_ERROR_RATE);
        rate("latent", self.latent_sector, DEFAULT_LATENT_RATE);
        if self.read_only.enabled {
            items.push(match self.read_only.trigger {
                ReadOnlyTrigger::SeededWithin(DEFAULT_READ_ONLY_WITHIN_WRITES) => "readonly".into(),
                ReadOnlyTrigger::SeededWithin(n) => format!("readonly={n}"),
                ReadOnlyTrigger::AfterWrites(n) => format!("readonly_after={n}"),
            });
        }
        if self.no_space.enabled {
            let b = self.no_space.budget_bytes;
            items.push(if b == DEFAULT_NO_SPACE_BUDGET_BYTES { "nospace".into() } else { format!("nospace={b}") });
        }
        f.write_str(&items.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_rates_and_errors() {
        let c: FaultConfig = "read,write=0.5,nospace=1000".parse().unwrap();
        assert!(c.read_error.enabled && c.write_error.enabled && c.no_space.enabled);
        assert_eq!(c.write_error.probability, 0.5);
        assert_eq!(c.no_space.budget_bytes, 1000);
        assert!(!c.latent_sector.enabled && !c.read_only.enabled);
        assert_eq!("".parse::<FaultConfig>().unwrap(), FaultConfig::NONE);
        assert!(matches!("write=2".parse::<FaultConfig>(), Err(FaultTextError::Probability { .. })));
        assert_eq!("cosmic-rays".parse::<FaultConfig>(), Err(FaultTextError::UnknownKind("cosmic-rays".into())));
        assert!(matches!("readonly=x".parse::<FaultConfig>(), Err(FaultTextError::Count { .. })));
        assert!("write=NaN".parse::<FaultConfig>().is_err());
    }

    #[test]
    fn the_text_form_round_trips_naming_only_what_is_not_default() {
        for text in ["", "read", "read,write=0.5", "latent=0.125,readonly", "readonly=300", "nospace=20000000", "read,write,latent,readonly,nospace", "readonly_after=7", "write=0.000001"] {
            let c: FaultConfig = text.parse().unwrap();
            assert_eq!(c.to_string(), text, "printed form of `{text}`");
            assert_eq!(c.to_string().parse::<FaultConfig>(), Ok(c));
        }
        assert_eq!("readonly=0".parse::<FaultConfig>().unwrap().to_string(), "readonly=1", "a bound of 0 is taken as 1");
        assert_eq!(FaultConfig::NONE.to_string(), "");
    }
}
