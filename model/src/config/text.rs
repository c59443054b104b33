//! The text form of a [`MountConfig`]: comma-separated options, as `mount
//! -o` takes them ("data=journal,nodelalloc,bs=16k,ps=4k"). Option names are
//! ext4's where ext4 has one; `bs=`, `ps=`, `cluster=` (bigalloc), `max_folio_order=`, `nojournal`,
//! `page_cache_mb=` and the allocator knobs are the test bed's. Parsing starts from the
//! defaults and does not validate the combination ([`MountConfig::validate`]
//! does); printing names only what differs from the defaults, so a replay
//! command names the exact configuration.

use std::fmt;
use std::str::FromStr;

use super::{DataMode, MountConfig};
use crate::text::TextError;

fn size(option: &str, value: &str) -> Result<u32, TextError> {
    let bad = || TextError::BadValue { key: option.into(), value: value.into(), expected: "a size like 4096, 4k or 64K" };
    let lower = value.to_ascii_lowercase();
    let (digits, mult) = match lower.strip_suffix('k') {
        Some(d) => (d, 1024),
        None => (lower.as_str(), 1),
    };
    digits.parse::<u32>().ok().and_then(|n| n.checked_mul(mult)).ok_or_else(bad)
}

fn number<T: FromStr>(option: &str, value: &str, expected: &'static str) -> Result<T, TextError> {
    value.parse().map_err(|_| TextError::BadValue { key: option.into(), value: value.into(), expected })
}

fn data_mode_name(mode: DataMode) -> &'static str {
    match mode {
        DataMode::Ordered => "ordered",
        DataMode::Writeback => "writeback",
        DataMode::Journal => "journal",
    }
}

impl FromStr for MountConfig {
    type Err = TextError;

    fn from_str(text: &str) -> Result<MountConfig, TextError> {
        let mut c = MountConfig::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            match (key, value) {
                ("data", Some(v)) => {
                    let mode = [DataMode::Ordered, DataMode::Writeback, DataMode::Journal].into_iter().find(|m| data_mode_name(*m) == v);
                    c.data = Some(mode.ok_or_else(|| TextError::BadValue { key: key.into(), value: v.into(), expected: "ordered, writeback or journal" })?);
                }
                ("delalloc", None) => c.delalloc = Some(true),
                ("nodelalloc", None) => c.delalloc = Some(false),
                ("dioread_nolock", None) => c.dioread_nolock = Some(true),
                ("dioread_lock", None) => c.dioread_nolock = Some(false),
                ("journal_async_commit", None) => c.journal_async_commit = true,
                ("commit", Some(v)) => c.commit_secs = Some(number(key, v, "seconds")?),
                ("auto_da_alloc", None | Some("1")) => c.auto_da_alloc = true,
                ("auto_da_alloc", Some("0")) | ("noauto_da_alloc", None) => c.auto_da_alloc = false,
                ("ro", None) => c.read_only = true,
                ("rw", None) => c.read_only = false,
                ("nojournal", None) => c.has_journal = false,
                ("bs" | "block_size", Some(v)) => c.block_size = size(key, v)?,
                ("ps" | "page_size", Some(v)) => c.page_size = size(key, v)?,
                ("cluster" | "cluster_size", Some(v)) => c.cluster_size = Some(size(key, v)?),
                ("max_folio_order", Some(v)) => c.max_folio_order = Some(number(key, v, "a folio order 0..=255")?),
                ("skip_block_uninit", None) => c.alloc.skip_block_uninit = true,
                ("use_block_uninit", None) => c.alloc.skip_block_uninit = false,
                ("orlov", None) => c.alloc.orlov = true,
                ("oldalloc", None) => c.alloc.orlov = false,
                ("mb_stream_req", Some(v)) => c.alloc.stream_request_blocks = number(key, v, "a block count")?,
                ("mb_group_prealloc", Some(v)) => c.alloc.group_prealloc_blocks = number(key, v, "a block count")?,
                ("page_cache_mb", Some(v)) => c.page_cache_mb = Some(number(key, v, "a size in MiB")?),
                _ => return Err(TextError::UnknownMountOption(item.into())),
            }
        }
        Ok(c)
    }
}

impl fmt::Display for MountConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = MountConfig::default();
        let mut out: Vec<String> = Vec::new();
        if self.block_size != d.block_size {
            out.push(format!("bs={}", self.block_size));
        }
        if self.page_size != d.page_size {
            out.push(format!("ps={}", self.page_size));
        }
        if let Some(c) = self.cluster_size {
            out.push(format!("cluster={c}"));
        }
        if !self.has_journal {
            out.push("nojournal".into());
        }
        if let Some(m) = self.data {
            out.push(format!("data={}", data_mode_name(m)));
        }
        match self.delalloc {
            Some(true) => out.push("delalloc".into()),
            Some(false) => out.push("nodelalloc".into()),
            None => {}
        }
        match self.dioread_nolock {
            Some(true) => out.push("dioread_nolock".into()),
            Some(false) => out.push("dioread_lock".into()),
            None => {}
        }
        if self.journal_async_commit {
            out.push("journal_async_commit".into());
        }
        if !self.auto_da_alloc {
            out.push("noauto_da_alloc".into());
        }
        if let Some(secs) = self.commit_secs {
            out.push(format!("commit={secs}"));
        }
        if self.read_only {
            out.push("ro".into());
        }
        if let Some(o) = self.max_folio_order {
            out.push(format!("max_folio_order={o}"));
        }
        if self.alloc.skip_block_uninit {
            out.push("skip_block_uninit".into());
        }
        if !self.alloc.orlov {
            out.push("oldalloc".into());
        }
        if self.alloc.stream_request_blocks != d.alloc.stream_request_blocks {
            out.push(format!("mb_stream_req={}", self.alloc.stream_request_blocks));
        }
        if self.alloc.group_prealloc_blocks != d.alloc.group_prealloc_blocks {
            out.push(format!("mb_group_prealloc={}", self.alloc.group_prealloc_blocks));
        }
        if let Some(mb) = self.page_cache_mb {
            out.push(format!("page_cache_mb={mb}"));
        }
        f.write_str(&out.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_round_trip_and_bad_ones_are_named() {
        let c: MountConfig = "data=journal,nodelalloc,bs=16k,ps=4K,skip_block_uninit,max_folio_order=3,mb_stream_req=32,noauto_da_alloc".parse().unwrap();
        assert!(!c.auto_da_alloc);
        let t: MountConfig = "commit=1".parse().unwrap();
        assert_eq!((t.commit_secs, t.validate().unwrap().commit_interval_secs), (Some(1), 1));
        assert_eq!(t.to_string(), "commit=1");
        assert_eq!("commit=0".parse::<MountConfig>().unwrap().validate().unwrap().commit_interval_secs, 5);
        assert!("commit=4000000".parse::<MountConfig>().unwrap().validate().is_err());
        assert_eq!("auto_da_alloc=0".parse::<MountConfig>().map(|c| c.auto_da_alloc), Ok(false));
        assert_eq!("noauto_da_alloc,auto_da_alloc".parse::<MountConfig>().map(|c| c.auto_da_alloc), Ok(true));
        assert_eq!((c.block_size, c.page_size, c.delalloc, c.data), (16384, 4096, Some(false), Some(DataMode::Journal)));
        assert_eq!(c.to_string().parse::<MountConfig>(), Ok(c));
        assert_eq!(MountConfig::default().to_string(), "");
        assert!(matches!("data=fast".parse::<MountConfig>(), Err(TextError::BadValue { .. })));
        assert!(matches!("bs=4q".parse::<MountConfig>(), Err(TextError::BadValue { .. })));
        assert_eq!("nobarrier".parse::<MountConfig>(), Err(TextError::UnknownMountOption("nobarrier".into())));
        assert!("bs=99999999999k".parse::<MountConfig>().is_err());
    }

    #[test]
    fn the_page_cache_bound_is_an_option_of_the_test_bed_with_a_fixed_default() {
        let c: MountConfig = "page_cache_mb=8".parse().unwrap();
        assert_eq!(c.page_cache_mb, Some(8));
        assert_eq!(c.to_string(), "page_cache_mb=8");
        assert_eq!(c.validate().unwrap().page_cache_bytes, 8 << 20);
        let default = MountConfig::default().validate().unwrap().page_cache_bytes;
        assert_eq!(default, u64::from(crate::config::DEFAULT_PAGE_CACHE_MB) << 20);
        assert_eq!("page_cache_mb=0".parse::<MountConfig>().unwrap().validate().map(|_| ()), Err(crate::config::ConfigError::PageCacheSize(0)));
        assert!("page_cache_mb=lots".parse::<MountConfig>().is_err());
    }
}
