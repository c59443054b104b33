//! Parsing `--mount` strings ("data=journal,nodelalloc,bs=16k,ps=4k") into a
//! [`MountConfig`]. Option names are ext4's where ext4 has one.

use ext4_model::{DataMode, MountConfig};
use thiserror::Error;

#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum MountOptsError {
    #[error("unknown mount option `{0}`")]
    Unknown(String),
    #[error("option `{option}`: `{value}` is not {expected}")]
    BadValue { option: String, value: String, expected: &'static str },
}

fn size(option: &str, value: &str) -> Result<u32, MountOptsError> {
    let bad = || MountOptsError::BadValue { option: option.into(), value: value.into(), expected: "a size like 4096, 4k or 64K" };
    let lower = value.to_ascii_lowercase();
    let (digits, mult) = match lower.strip_suffix('k') {
        Some(d) => (d, 1024),
        None => (lower.as_str(), 1),
    };
    digits.parse::<u32>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(bad)
}

fn number<T: std::str::FromStr>(option: &str, value: &str, expected: &'static str) -> Result<T, MountOptsError> {
    value.parse().map_err(|_| MountOptsError::BadValue { option: option.into(), value: value.into(), expected })
}

/// Applies comma-separated options on top of `base`. Validation of the
/// combination is the model's job ([`MountConfig::validate`]).
pub fn parse_mount_opts(text: &str, base: MountConfig) -> Result<MountConfig, MountOptsError> {
    let mut c = base;
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        match (key, value) {
            ("data", Some(v)) => {
                c.data = Some(match v {
                    "ordered" => DataMode::Ordered,
                    "writeback" => DataMode::Writeback,
                    "journal" => DataMode::Journal,
                    _ => return Err(MountOptsError::BadValue { option: key.into(), value: v.into(), expected: "ordered, writeback or journal" }),
                })
            }
            ("delalloc", None) => c.delalloc = Some(true),
            ("nodelalloc", None) => c.delalloc = Some(false),
            ("dioread_nolock", None) => c.dioread_nolock = Some(true),
            ("dioread_lock", None) => c.dioread_nolock = Some(false),
            ("journal_async_commit", None) => c.journal_async_commit = true,
            ("ro", None) => c.read_only = true,
            ("rw", None) => c.read_only = false,
            ("nojournal", None) => c.has_journal = false,
            ("bs" | "block_size", Some(v)) => c.block_size = size(key, v)?,
            ("ps" | "page_size", Some(v)) => c.page_size = size(key, v)?,
            ("max_folio_order", Some(v)) => c.max_folio_order = Some(number(key, v, "a folio order 0..=255")?),
            ("skip_block_uninit", None) => c.alloc.skip_block_uninit = true,
            ("use_block_uninit", None) => c.alloc.skip_block_uninit = false,
            ("orlov", None) => c.alloc.orlov = true,
            ("oldalloc", None) => c.alloc.orlov = false,
            ("mb_stream_req", Some(v)) => c.alloc.stream_request_blocks = number(key, v, "a block count")?,
            ("mb_group_prealloc", Some(v)) => c.alloc.group_prealloc_blocks = number(key, v, "a block count")?,
            _ => return Err(MountOptsError::Unknown(item.into())),
        }
    }
    Ok(c)
}

/// The inverse of [`parse_mount_opts`] for what differs from the default,
/// so a replay command names the exact configuration.
pub fn format_mount_opts(c: &MountConfig) -> String {
    let d = MountConfig::default();
    let mut out = Vec::new();
    if c.block_size != d.block_size {
        out.push(format!("bs={}", c.block_size));
    }
    if c.page_size != d.page_size {
        out.push(format!("ps={}", c.page_size));
    }
    if !c.has_journal {
        out.push("nojournal".into());
    }
    if let Some(m) = c.data {
        out.push(format!("data={}", match m { DataMode::Ordered => "ordered", DataMode::Writeback => "writeback", DataMode::Journal => "journal" }));
    }
    match c.delalloc {
        Some(true) => out.push("delalloc".into()),
        Some(false) => out.push("nodelalloc".into()),
        None => {}
    }
    match c.dioread_nolock {
        Some(true) => out.push("dioread_nolock".into()),
        Some(false) => out.push("dioread_lock".into()),
        None => {}
    }
    if c.journal_async_commit {
        out.push("journal_async_commit".into());
    }
    if c.read_only {
        out.push("ro".into());
    }
    if let Some(o) = c.max_folio_order {
        out.push(format!("max_folio_order={o}"));
    }
    if c.alloc.skip_block_uninit {
        out.push("skip_block_uninit".into());
    }
    if !c.alloc.orlov {
        out.push("oldalloc".into());
    }
    if c.alloc.stream_request_blocks != d.alloc.stream_request_blocks {
        out.push(format!("mb_stream_req={}", c.alloc.stream_request_blocks));
    }
    if c.alloc.group_prealloc_blocks != d.alloc.group_prealloc_blocks {
        out.push(format!("mb_group_prealloc={}", c.alloc.group_prealloc_blocks));
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let c = parse_mount_opts("data=journal,nodelalloc,bs=16k,ps=4K,skip_block_uninit,max_folio_order=3", MountConfig::default()).unwrap();
        assert_eq!((c.block_size, c.page_size, c.delalloc, c.data), (16384, 4096, Some(false), Some(DataMode::Journal)));
        assert_eq!(parse_mount_opts(&format_mount_opts(&c), MountConfig::default()).unwrap(), c);
        assert_eq!(format_mount_opts(&MountConfig::default()), "");
        assert!(matches!(parse_mount_opts("data=fast", MountConfig::default()), Err(MountOptsError::BadValue { .. })));
        assert!(matches!(parse_mount_opts("bs=4q", MountConfig::default()), Err(MountOptsError::BadValue { .. })));
        assert_eq!(parse_mount_opts("nobarrier", MountConfig::default()), Err(MountOptsError::Unknown("nobarrier".into())));
        assert!(parse_mount_opts("bs=99999999999k", MountConfig::default()).is_err());
    }
}
