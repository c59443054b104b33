//! `--faults read,write,latent,readonly,nospace[=rate]`: which seeded device
//! faults a run injects. Each kind has a default rate; `kind=x` overrides it
//! (a probability per command, a write count, or a byte budget).

use crate::disk::{FaultConfig, FaultSwitch, NoSpaceFault, ReadOnlyFault, ReadOnlyTrigger};

/// Default chance per command of a transient read or write EIO.
pub const DEFAULT_IO_ERROR_RATE: f64 = 0.002;
/// Default chance per read that a sector goes bad until rewritten.
pub const DEFAULT_LATENT_RATE: f64 = 0.0005;
/// Default bound on writes before the device turns read-only (seeded within it).
pub const DEFAULT_READ_ONLY_WITHIN_WRITES: u64 = 20_000;
/// Default backing-store budget before writes get ENOSPC, bytes.
pub const DEFAULT_NO_SPACE_BUDGET_BYTES: u64 = 96 << 20;

pub fn parse_faults(text: &str) -> Result<FaultConfig, String> {
    let mut c = FaultConfig::NONE;
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kind, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        let prob = |d: f64| -> Result<f64, String> {
            let p = value.map_or(Ok(d), |v| v.parse::<f64>().map_err(|_| format!("fault `{kind}`: `{v}` is not a probability")))?;
            if (0.0..=1.0).contains(&p) { Ok(p) } else { Err(format!("fault `{kind}`: {p} is not in [0, 1]")) }
        };
        let count = |d: u64| -> Result<u64, String> {
            value.map_or(Ok(d), |v| v.parse::<u64>().map_err(|_| format!("fault `{kind}`: `{v}` is not a whole number")))
        };
        match kind {
            "read" => c.read_error = FaultSwitch::on(prob(DEFAULT_IO_ERROR_RATE)?),
            "write" => c.write_error = FaultSwitch::on(prob(DEFAULT_IO_ERROR_RATE)?),
            "latent" => c.latent_sector = FaultSwitch::on(prob(DEFAULT_LATENT_RATE)?),
            "readonly" => {
                c.read_only = ReadOnlyFault { enabled: true, trigger: ReadOnlyTrigger::SeededWithin(count(DEFAULT_READ_ONLY_WITHIN_WRITES)?.max(1)) }
            }
            "nospace" => c.no_space = NoSpaceFault { enabled: true, budget_bytes: count(DEFAULT_NO_SPACE_BUDGET_BYTES)? },
            other => return Err(format!("unknown fault kind `{other}`: use read, write, latent, readonly, nospace")),
        }
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_rates_and_errors() {
        let c = parse_faults("read,write=0.5,nospace=1000").unwrap();
        assert!(c.read_error.enabled && c.write_error.enabled && c.no_space.enabled);
        assert_eq!(c.write_error.probability, 0.5);
        assert_eq!(c.no_space.budget_bytes, 1000);
        assert!(!c.latent_sector.enabled && !c.read_only.enabled);
        assert_eq!(parse_faults("").unwrap(), FaultConfig::NONE);
        assert!(parse_faults("write=2").is_err());
        assert!(parse_faults("cosmic-rays").is_err());
        assert!(parse_faults("readonly=x").is_err());
    }
}
