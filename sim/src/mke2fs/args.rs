//! `--mkfs`: the mke2fs arguments the test bed understands (the kernel
//! oracle's images, and simulations that start from an mke2fs-made image),
//! parsed into a typed description, and what each means for a run. An
//! option either
//! - sets something the model and the engine take from the image: the block
//!   size (`-b`), the journal (`-j`, `-O [^]has_journal`) and bigalloc's
//!   cluster size (`-O bigalloc`, `-C`), which then become the model's config;
//! - changes only layout the model never sees and the engine reads either
//!   way (`^flex_bg`, `^metadata_csum`, inode counts and sizes, reserved
//!   blocks, group sizes, ...): passed on to mke2fs;
//! - or makes an image the model or the engine does not follow (bigalloc
//!   with 1 KiB blocks, inline_data, `^extent`, casefold, quota, ...): refused with the reason,
//!   and every seed is skipped (exit 77).
//!
//! Anything else (not mke2fs syntax, a malformed value, an option that
//! contradicts `--mount` or the oracle's own arguments) is a usage error. No
//! argument is handed to mke2fs that this file has not accounted for.
//!
//! Capacity knobs (`-N`, `-i`, `-m`) are checked against what each seed's
//! ops need once the image exists ([`super::image`]): the model does not
//! bound inodes or space, so an image too small for the ops is skipped.

use std::fmt;

use ext4_model::MountConfig;

/// What a feature switch means for the oracle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// Layout only: the model never sees it and the engine reads it either way.
    Layout,
    /// `has_journal`: the model's config follows it.
    Journal,
    /// `bigalloc`: the model's cluster size follows it (and `-C`).
    Bigalloc,
    /// Set, it makes an image the oracle cannot follow, for this reason.
    RefuseOn(&'static str),
    /// Cleared, likewise.
    RefuseOff(&'static str),
}

/// Every feature name mke2fs sets or clears, as e2p spells it, with its rule.
const FEATURES: &[(&str, Rule)] = &[
    ("has_journal", Rule::Journal),
    ("ext_attr", Rule::Layout),
    ("resize_inode", Rule::Layout),
    ("dir_index", Rule::Layout),
    ("sparse_super", Rule::Layout),
    ("large_file", Rule::Layout),
    // Without it ext4's largest file shrinks (i_blocks counts 512-byte
    // units in 32 bits): the model's is the 32-bit logical block space, and
    // the workload aims offsets at it.
    ("huge_file", Rule::RefuseOff("without huge_file ext4's largest file is smaller than the model's (the 32-bit logical block space)")),
    ("uninit_bg", Rule::Layout),
    ("dir_nlink", Rule::Layout),
    ("extra_isize", Rule::Layout),
    ("64bit", Rule::Layout),
    ("flex_bg", Rule::Layout),
    ("metadata_csum", Rule::Layout),
    ("metadata_csum_seed", Rule::Layout),
    ("large_dir", Rule::Layout),
    ("orphan_file", Rule::Layout),
    ("stable_inodes", Rule::Layout),
    ("mmp", Rule::Layout),
    ("ea_inode", Rule::Layout),
    ("verity", Rule::Layout),
    ("sparse_super2", Rule::Layout),
    ("fast_commit", Rule::Layout),
    ("extent", Rule::RefuseOff("block-mapped files (no extents): the model maps files with extents only (EXTENTS_FL, FIEMAP, fallocate and size limits differ)")),
    ("filetype", Rule::RefuseOff("directory entries without a file type: the engine does not read such images")),
    ("bigalloc", Rule::Bigalloc),
    ("inline_data", Rule::RefuseOn("inline_data keeps small files and directories in the inode: the model's st_blocks and FIEMAP assume data blocks, and the engine does not read inline data")),
    ("casefold", Rule::RefuseOn("casefold makes names case-insensitive: the model's names are byte strings, and the engine does not read casefold images")),
    ("encrypt", Rule::RefuseOn("encryption needs keys the oracle does not set up, and the engine does not read encrypted images")),
    ("quota", Rule::RefuseOn("quota adds hidden quota inodes and usage accounting the model does not keep, and a kernel built without CONFIG_QUOTA (the 6.18 host here) refuses the image")),
    ("project", Rule::RefuseOn("project IDs belong to quota: the model keeps none, and a kernel built without CONFIG_QUOTA (the 6.18 host here) refuses the image")),
    ("meta_bg", Rule::RefuseOn("the engine does not read meta_bg group descriptors")),
    ("journal_dev", Rule::RefuseOn("an external journal device: the oracle makes one image per case")),
];

/// Names e2p also accepts for a feature.
const ALIASES: &[(&str, &str)] = &[("extents", "extent"), ("uninit_groups", "uninit_bg"), ("journal", "has_journal")];

/// `-E` (and the old `-R`) settings that change layout only. `hash_seed` is
/// the oracle's own (from the seed); the rest are refused or unknown.
const EXTENDED_LAYOUT: &[&str] = &[
    "lazy_itable_init",
    "lazy_journal_init",
    "nodiscard",
    "discard",
    "stride",
    "stripe_width",
    "stripe-width",
    "num_backup_sb",
    "packed_meta_blocks",
    "orphan_file_size",
    "assume_storage_prezeroed",
    "resize",
    "mmp_update_interval",
    "test_fs",
    "no_copy_xattrs",
];

/// `-E` settings mke2fs knows that the oracle refuses, with why.
const EXTENDED_REFUSED: &[(&str, &str)] = &[
    ("encoding", "a filename encoding means casefold: the model's names are byte strings"),
    ("encoding_flags", "a filename encoding means casefold: the model's names are byte strings"),
    ("quotatype", "quota adds hidden quota inodes and usage accounting the model does not keep"),
    ("offset", "the engine reads an image from byte 0"),
    ("root_owner", "the model's root directory is owned by root"),
    ("android_sparse", "the engine reads raw images, not Android sparse files"),
];

/// Why `--mkfs` cannot be used as given.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--mkfs: {0}")]
pub struct MkfsUsage(pub String);

/// One mke2fs option, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MkfsOpt {
    /// `-b`: the block size, which the model then uses.
    BlockSize(u32),
    /// `-C`: bigalloc's cluster size in bytes, which the model then uses.
    ClusterSize(u32),
    /// `-O`, in order (a later switch of the same feature wins); `-j` is
    /// `has_journal` on.
    Features(Vec<(&'static str, bool)>),
    /// `-E` / `-R` settings, each `key` or `key=value`.
    Extended(Vec<String>),
    /// A layout option passed on as written: flag and value (`-N 5000`,
    /// `-I 128`, `-i`, `-m`, `-g`, `-G`, `-L`, `-M`, `-J`, `-e`, `-r 1`,
    /// `-o linux`) or a flag alone (`-D`, `-K`).
    Layout(char, Option<String>),
    /// An option the oracle passes itself (`-q`, `-F`, `-t ext4`): nothing
    /// to do, kept so the arguments print as given.
    Own(String),
    /// An option mke2fs knows whose image the oracle cannot follow.
    Refused { option: String, why: &'static str },
}

/// The `--mkfs` text as the oracle understands it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MkfsArgs {
    pub opts: Vec<MkfsOpt>,
}

fn usage(what: impl Into<String>) -> MkfsUsage {
    MkfsUsage(what.into())
}

fn number<T: std::str::FromStr>(flag: char, value: &str) -> Result<T, MkfsUsage> {
    value.parse().map_err(|_| usage(format!("-{flag} `{value}` is not a number")))
}

fn feature_list(text: &str) -> Result<Vec<(&'static str, bool)>, MkfsUsage> {
    let mut out = Vec::new();
    for word in text.split(',').filter(|w| !w.is_empty()) {
        let (on, name) = match word.strip_prefix(['^', '-']) {
            Some(name) => (false, name),
            None => (true, word.strip_prefix('+').unwrap_or(word)),
        };
        let name = ALIASES.iter().find(|(alias, _)| *alias == name).map_or(name, |(_, canonical)| canonical);
        let Some((canonical, _)) = FEATURES.iter().find(|(n, _)| *n == name) else {
            return Err(usage(format!("-O: `{name}` is not a feature mke2fs sets")));
        };
        out.push((*canonical, on));
    }
    if out.is_empty() {
        return Err(usage("-O needs a feature list"));
    }
    Ok(out)
}

fn extended_list(flag: char, text: &str) -> Result<MkfsOpt, MkfsUsage> {
    let mut out = Vec::new();
    for item in text.split(',').filter(|w| !w.is_empty()) {
        let key = item.split_once('=').map_or(item, |(k, _)| k);
        if key == "hash_seed" {
            return Err(usage(format!("-{flag} hash_seed: the oracle seeds the directory hash from the seed")));
        }
        if let Some((_, why)) = EXTENDED_REFUSED.iter().find(|(k, _)| *k == key) {
            return Ok(MkfsOpt::Refused { option: format!("-{flag} {text}"), why });
        }
        if !EXTENDED_LAYOUT.contains(&key) {
            return Err(usage(format!("-{flag}: `{key}` is not an extended option the oracle knows")));
        }
        out.push(item.to_string());
    }
    if out.is_empty() {
        return Err(usage(format!("-{flag} needs a setting")));
    }
    Ok(MkfsOpt::Extended(out))
}

/// mke2fs flags that take a value (its getopt string), for `-b2048` and `-b 2048` alike.
const TAKES_VALUE: &str = "bdegilmorstzCEGIJLMNORTU";

impl MkfsArgs {
    /// Parses whitespace-separated mke2fs arguments.
    pub fn parse(text: &str) -> Result<MkfsArgs, MkfsUsage> {
        let mut words = text.split_whitespace();
        let mut opts = Vec::new();
        while let Some(word) = words.next() {
            let Some(body) = word.strip_prefix('-').filter(|b| !b.is_empty() && !b.starts_with('-')) else {
                return Err(usage(format!("`{word}`: the oracle names the image and its size itself; give only options")));
            };
            let mut chars = body.chars();
            let flag = chars.next().unwrap_or('-');
            let attached = chars.as_str();
            let value = if TAKES_VALUE.contains(flag) {
                let v = if attached.is_empty() { words.next() } else { Some(attached) };
                Some(v.ok_or_else(|| usage(format!("-{flag} needs a value")))?.to_string())
            } else if !attached.is_empty() {
                return Err(usage(format!("`{word}`: give one option per dash")));
            } else {
                None
            };
            opts.push(Self::option(flag, value)?);
        }
        Ok(MkfsArgs { opts })
    }

    fn option(flag: char, value: Option<String>) -> Result<MkfsOpt, MkfsUsage> {
        let v = value.clone().unwrap_or_default();
        let refused = |why: &'static str| Ok(MkfsOpt::Refused { option: format!("-{flag}{}", value.as_ref().map(|v| format!(" {v}")).unwrap_or_default()), why });
        let layout = || Ok(MkfsOpt::Layout(flag, value.clone()));
        match flag {
            'b' => {
                let bs: u32 = number(flag, &v)?;
                if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) {
                    return Err(usage(format!("-b {bs}: a block size is a power of two in 1024..=65536")));
                }
                Ok(MkfsOpt::BlockSize(bs))
            }
            'O' => Ok(MkfsOpt::Features(feature_list(&v)?)),
            'j' => Ok(MkfsOpt::Features(vec![("has_journal", true)])),
            'E' | 'R' => extended_list(flag, &v),
            'N' | 'i' | 'g' | 'G' => number::<u64>(flag, &v).and_then(|_| layout()),
            'I' => {
                let size: u32 = number(flag, &v)?;
                if !size.is_power_of_two() || size < 128 {
                    return Err(usage(format!("-I {size}: an inode size is a power of two, at least 128")));
                }
                layout()
            }
            'm' => {
                let pct: f64 = number(flag, &v)?;
                if !(0.0..=50.0).contains(&pct) {
                    return Err(usage(format!("-m {v}: the reserved percentage is 0..=50")));
                }
                layout()
            }
            'L' | 'M' | 'D' | 'K' => layout(),
            'J' => {
                for item in v.split(',') {
                    match item.split_once('=').map_or(item, |(k, _)| k) {
                        "size" | "fast_commit_size" | "location" => {}
                        "device" => return refused("an external journal device: the oracle makes one image per case"),
                        other => return Err(usage(format!("-J: `{other}` is not a journal option mke2fs knows"))),
                    }
                }
                layout()
            }
            'e' => match v.as_str() {
                "continue" | "remount-ro" => layout(),
                "panic" => refused("errors=panic would panic the host kernel at the first ext4 error"),
                _ => Err(usage(format!("-e `{v}`: continue, remount-ro or panic"))),
            },
            'r' => match v.as_str() {
                "1" => layout(),
                "0" => refused("revision 0 has no extents, large inodes or feature flags"),
                _ => Err(usage(format!("-r `{v}`: revision 0 or 1"))),
            },
            'o' => match v.as_str() {
                "linux" | "Linux" => layout(),
                _ => refused("images for other creator systems lay out inodes differently"),
            },
            't' => match v.as_str() {
                "ext4" => Ok(MkfsOpt::Own("-t ext4".into())),
                _ => refused("the oracle models ext4 (-t ext4)"),
            },
            'C' => {
                let c: u32 = number(flag, &v)?;
                if !c.is_power_of_two() || c < 2048 {
                    return Err(usage(format!("-C {c}: a cluster size is a power of two above the block size")));
                }
                Ok(MkfsOpt::ClusterSize(c))
            }
            'T' => refused("usage types take sizes and features from mke2fs.conf, which the oracle does not read: give them with -O, -I, -i"),
            'c' | 'l' => refused("bad-block lists change the image outside the model"),
            'd' => refused("populating from a directory: the model starts from an empty filesystem"),
            'S' => refused("writing only superblocks and descriptors leaves an old image's contents"),
            'z' => refused("undo files are not images"),
            'q' | 'F' => Ok(MkfsOpt::Own(format!("-{flag}"))),
            'U' => Err(usage("-U: the oracle sets the UUID from the seed")),
            'n' => Err(usage("-n makes no filesystem")),
            'V' | 'v' | 's' => Err(usage(format!("-{flag} is not an option the oracle passes to mke2fs"))),
            other => Err(usage(format!("-{other} is not a mke2fs option"))),
        }
    }

    /// Why the oracle cannot run images made with these arguments, if so.
    pub fn refusal(&self) -> Option<String> {
        if self.feature("bigalloc") == Some(true) && self.block_size() == Some(1024) {
            return Some("mke2fs -O bigalloc -b 1024: bigalloc with 1 KiB blocks puts the superblock in block 1 of a group starting at 0, a layout the engine does not model".to_string());
        }
        for opt in &self.opts {
            match opt {
                MkfsOpt::Refused { option, why } => return Some(format!("mke2fs {option}: {why}")),
                MkfsOpt::Features(list) => {
                    for (name, on) in self.final_features(list) {
                        let rule = FEATURES.iter().find(|(n, _)| *n == name).map(|(_, r)| *r);
                        match rule {
                            Some(Rule::RefuseOn(why)) if on => return Some(format!("mke2fs -O {name}: {why}")),
                            Some(Rule::RefuseOff(why)) if !on => return Some(format!("mke2fs -O ^{name}: {why}")),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        None
    }

    /// The switches in `list` that survive later ones of the same feature.
    fn final_features<'a>(&'a self, list: &'a [(&'static str, bool)]) -> impl Iterator<Item = (&'static str, bool)> + 'a {
        list.iter().copied().filter(move |(name, on)| self.feature(name) == Some(*on))
    }

    /// The last switch of a feature, if any.
    pub fn feature(&self, name: &str) -> Option<bool> {
        self.opts.iter().rev().find_map(|o| match o {
            MkfsOpt::Features(list) => list.iter().rev().find(|(n, _)| *n == name).map(|(_, on)| *on),
            _ => None,
        })
    }

    pub fn block_size(&self) -> Option<u32> {
        self.opts.iter().rev().find_map(|o| if let MkfsOpt::BlockSize(bs) = o { Some(*bs) } else { None })
    }

    pub fn cluster_size(&self) -> Option<u32> {
        self.opts.iter().rev().find_map(|o| if let MkfsOpt::ClusterSize(c) = o { Some(*c) } else { None })
    }

    /// The model's config for images made with these arguments: the block
    /// size and the journal come from mkfs. A `--mount` that says otherwise
    /// (bs= or nojournal) is a usage error.
    pub fn model_mount(&self, mount: MountConfig) -> Result<MountConfig, MkfsUsage> {
        let mut m = mount;
        let default_bs = MountConfig::default().block_size;
        if let Some(bs) = self.block_size() {
            if mount.block_size != default_bs && mount.block_size != bs {
                return Err(usage(format!("-b {bs} contradicts --mount bs={}", mount.block_size)));
            }
            m.block_size = bs;
        }
        if let Some(journal) = self.feature("has_journal") {
            if !mount.has_journal && journal {
                return Err(usage("a journal (-j or -O has_journal) contradicts --mount nojournal"));
            }
            m.has_journal = journal;
        }
        let bigalloc = self.feature("bigalloc");
        if let Some(c) = self.cluster_size() {
            if bigalloc != Some(true) {
                return Err(usage(format!("-C {c}: a cluster size needs -O bigalloc (mke2fs refuses it alone)")));
            }
        }
        match bigalloc {
            Some(true) => {
                // mke2fs's default cluster is 16 blocks.
                let c = self.cluster_size().unwrap_or(m.block_size * 16);
                if mount.cluster_size.is_some_and(|given| given != c) {
                    return Err(usage(format!("-O bigalloc with {c}-byte clusters contradicts --mount cluster={}", mount.cluster_size.unwrap_or(0))));
                }
                m.cluster_size = Some(c);
            }
            Some(false) if mount.cluster_size.is_some() => return Err(usage("-O ^bigalloc contradicts --mount cluster=")),
            _ => {}
        }
        Ok(m)
    }

    /// The arguments for mke2fs after the oracle's own (`-b`, `-U`, the
    /// journal): every feature in one `-O` and every setting in one `-E`
    /// after `extended`, since mke2fs keeps only its last `-E`.
    pub fn mke2fs_args(&self, extended: &str) -> Vec<String> {
        let mut args = Vec::new();
        let features: Vec<String> = self
            .opts
            .iter()
            .flat_map(|o| match o {
                MkfsOpt::Features(list) => list.iter().filter(|(n, _)| *n != "has_journal").map(|(n, on)| format!("{}{n}", if *on { "" } else { "^" })).collect(),
                _ => Vec::new(),
            })
            .collect();
        if !features.is_empty() {
            args.push("-O".to_string());
            args.push(features.join(","));
        }
        let mut ext = vec![extended.to_string()];
        for o in &self.opts {
            match o {
                MkfsOpt::Extended(items) => ext.extend(items.iter().cloned()),
                MkfsOpt::ClusterSize(c) => args.extend(["-C".to_string(), c.to_string()]),
                MkfsOpt::Layout(flag, value) => {
                    args.push(format!("-{flag}"));
                    args.extend(value.iter().cloned());
                }
                _ => {}
            }
        }
        args.push("-E".to_string());
        args.push(ext.join(","));
        args
    }
}

impl fmt::Display for MkfsArgs {
    /// The arguments in a form [`MkfsArgs::parse`] reads back to the same value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<String> = Vec::new();
        for o in &self.opts {
            match o {
                MkfsOpt::BlockSize(bs) => words.extend(["-b".to_string(), bs.to_string()]),
                MkfsOpt::ClusterSize(c) => words.extend(["-C".to_string(), c.to_string()]),
                MkfsOpt::Features(list) => {
                    let text: Vec<String> = list.iter().map(|(n, on)| format!("{}{n}", if *on { "" } else { "^" })).collect();
                    words.extend(["-O".to_string(), text.join(",")]);
                }
                MkfsOpt::Extended(items) => words.extend(["-E".to_string(), items.join(",")]),
                MkfsOpt::Layout(flag, value) => {
                    words.push(format!("-{flag}"));
                    words.extend(value.iter().cloned());
                }
                MkfsOpt::Refused { option, .. } => words.push(option.clone()),
                MkfsOpt::Own(text) => words.push(text.clone()),
            }
        }
        f.write_str(&words.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> MkfsArgs {
        MkfsArgs::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn usage_error(text: &str) -> String {
        MkfsArgs::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_separate_and_attached_values_and_feature_lists() {
        assert_eq!(parse(""), MkfsArgs::default());
        let a = parse("-O ^flex_bg,^metadata_csum -b2048 -N 5000 -I 128 -E lazy_itable_init=1 -j");
        assert_eq!(
            a.opts,
            vec![
                MkfsOpt::Features(vec![("flex_bg", false), ("metadata_csum", false)]),
                MkfsOpt::BlockSize(2048),
                MkfsOpt::Layout('N', Some("5000".into())),
                MkfsOpt::Layout('I', Some("128".into())),
                MkfsOpt::Extended(vec!["lazy_itable_init=1".into()]),
                MkfsOpt::Features(vec![("has_journal", true)]),
            ]
        );
        assert_eq!(parse("-O^flex_bg"), parse("-O ^flex_bg"));
        assert_eq!(parse("-O extents,uninit_groups").opts, vec![MkfsOpt::Features(vec![("extent", true), ("uninit_bg", true)])]);
    }

    #[test]
    fn display_reads_back_to_the_same_arguments() {
        for text in ["", "-O ^flex_bg", "-b 1024 -O ^has_journal,^resize_inode -m 0 -i 8192", "-C 16384", "-E nodiscard,stride=4 -L lbl -J size=16 -t ext4", "-T news"] {
            let a = parse(text);
            assert_eq!(parse(&a.to_string()), a, "{text} -> {a}");
        }
    }

    #[test]
    fn malformed_or_foreign_arguments_are_usage_errors() {
        assert!(usage_error("-b").contains("-b needs a value"));
        assert!(usage_error("-b 3000").contains("power of two"));
        assert!(usage_error("-N many").contains("not a number"));
        assert!(usage_error("-O frobnicate").contains("`frobnicate` is not a feature"));
        assert!(usage_error("-Z").contains("-Z is not a mke2fs option"));
        assert!(usage_error("-U 1234").contains("UUID"));
        assert!(usage_error("-E hash_seed=x").contains("seeds the directory hash"));
        assert!(usage_error("-E stride=1,warp=9").contains("`warp`"));
        assert!(usage_error("/dev/sda").contains("give only options"));
        assert!(usage_error("-jq").contains("one option per dash"));
        assert!(usage_error("-m 60").contains("0..=50"));
        assert!(usage_error("-I 100").contains("power of two"));
        assert!(usage_error("--mkfs").contains("give only options"));
    }

    #[test]
    fn unsupported_images_are_refused_with_the_reason() {
        let why = |text: &str| parse(text).refusal().unwrap_or_else(|| panic!("{text} accepted"));
        assert!(why("-O bigalloc -b 1024").contains("1 KiB blocks"));
        assert!(why("-O inline_data").contains("inline"));
        assert!(why("-O ^extent").starts_with("mke2fs -O ^extent: block-mapped"));
        assert!(why("-O ^extents").contains("^extent"));
        assert!(why("-O ^filetype").contains("engine does not read"));
        assert!(why("-O project").contains("quota"));
        assert!(why("-O casefold").contains("case-insensitive"));
        assert!(why("-E encoding=utf8").contains("casefold"));
        assert!(why("-O quota").contains("quota"));
        assert!(why("-E quotatype=prjquota").contains("quota"));
        assert!(why("-O encrypt").contains("keys"));
        assert!(why("-O meta_bg").contains("meta_bg"));
        assert!(why("-r 0").contains("revision 0"));
        assert!(why("-t ext3").contains("ext4"));
        assert!(why("-e panic").contains("panic the host"));
        assert!(why("-J device=/dev/sdb").contains("external journal"));
        assert!(why("-T small").contains("mke2fs.conf"));
        assert!(why("-O ^huge_file").contains("largest file"));
        // The last switch of a feature decides.
        assert_eq!(parse("-O bigalloc -O ^bigalloc").refusal(), None);
        assert!(parse("-O ^extent,extent,^extent").refusal().is_some());
        for ok in ["-O ^flex_bg", "-O ^metadata_csum,uninit_bg", "-O ^has_journal", "-N 4096 -I 128 -i 16384 -m 0", "-O ^resize_inode,^dir_index,^64bit", "-O orphan_file,large_dir,metadata_csum_seed", "-e remount-ro -r 1 -o linux -D -L x -M /mnt -g 8192 -G 4"] {
            assert_eq!(parse(ok).refusal(), None, "{ok}");
        }
    }

    #[test]
    fn block_size_and_journal_become_the_model_config() {
        let m = |s: &str| s.parse::<MountConfig>().unwrap();
        let d = MountConfig::default();
        let got = parse("-b 2048").model_mount(d).unwrap();
        assert_eq!((got.block_size, got.has_journal), (2048, true));
        let got = parse("-O ^has_journal").model_mount(m("data=ordered")).unwrap();
        assert!(!got.has_journal);
        assert_eq!(parse("-b 1024").model_mount(m("bs=1k")).unwrap().block_size, 1024);
        assert!(parse("-b 2048").model_mount(m("bs=1k")).unwrap_err().to_string().contains("contradicts --mount bs=1024"));
        assert!(parse("-j").model_mount(m("nojournal")).unwrap_err().to_string().contains("nojournal"));
        assert_eq!(parse("-O ^flex_bg").model_mount(d).unwrap(), d);
    }

    #[test]
    fn bigalloc_and_its_cluster_size_become_the_model_config() {
        let m = |s: &str| s.parse::<MountConfig>().unwrap();
        let d = MountConfig::default();
        assert_eq!(parse("-O bigalloc -C 32768").refusal(), None);
        assert_eq!(parse("-O bigalloc -C 32768").model_mount(d).unwrap().cluster_size, Some(32768));
        assert_eq!(parse("-O bigalloc").model_mount(d).unwrap().cluster_size, Some(65536), "mke2fs's default: 16 blocks");
        assert_eq!(parse("-O bigalloc -b 16384").model_mount(d).unwrap().cluster_size, Some(262_144));
        assert!(parse("-C 65536").model_mount(d).unwrap_err().to_string().contains("needs -O bigalloc"));
        assert!(parse("-O bigalloc -C 16384").model_mount(m("cluster=64k")).unwrap_err().to_string().contains("contradicts --mount cluster=65536"));
        assert!(parse("-O ^bigalloc").model_mount(m("cluster=64k")).is_err());
        assert_eq!(parse("-O bigalloc -C 16384").mke2fs_args("hash_seed=u"), ["-O", "bigalloc", "-C", "16384", "-E", "hash_seed=u"]);
    }

    #[test]
    fn mke2fs_gets_one_feature_list_and_one_extended_list() {
        let a = parse("-O ^flex_bg -j -E nodiscard -N 5000 -O ^metadata_csum -E stride=2");
        assert_eq!(a.mke2fs_args("hash_seed=u"), ["-O", "^flex_bg,^metadata_csum", "-N", "5000", "-E", "hash_seed=u,nodiscard,stride=2"]);
        assert_eq!(parse("").mke2fs_args("hash_seed=u"), ["-E", "hash_seed=u"]);
    }
}
