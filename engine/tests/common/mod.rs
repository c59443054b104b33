//! Helpers shared by the e2fsprogs cross-check tests: finding the tools, scratch
//! directories that clean up after themselves, and strict readings of e2fsck
//! and dumpe2fs output.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[allow(unused_imports)]
pub use ext4_testkit::e2fsprogs::{combined, is_clean_fsck_line, tool};

/// All of e2fsck, dumpe2fs and mke2fs, or a printed reason to skip.
pub fn e2fsprogs() -> Option<(PathBuf, PathBuf, PathBuf)> {
    match (tool("e2fsck"), tool("dumpe2fs"), tool("mke2fs")) {
        (Some(a), Some(b), Some(c)) => Some((a, b, c)),
        _ => {
            println!("SKIPPED: e2fsprogs (e2fsck, dumpe2fs, mke2fs) not installed");
            None
        }
    }
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Self {
        Self::in_dir(&std::env::temp_dir(), tag)
    }

    pub fn in_dir(base: &Path, tag: &str) -> Self {
        let dir = base.join(format!("ext4-engine-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn run(cmd: &Path, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("run {}: {e}", cmd.display()))
}

/// Runs `e2fsck -fn` and requires exit 0 and nothing but clean-run lines.
/// Returns the output so callers can read the summary.
pub fn assert_fsck_clean(e2fsck: &Path, img: &Path) -> String {
    ext4_testkit::e2fsprogs::e2fsck_clean(e2fsck, img).unwrap_or_else(|e| panic!("{e}"))
}

/// Copies `img` sparsely and requires `e2fsck -fy` on the copy to exit 0 (nothing to fix).
pub fn assert_fsck_fy_clean(e2fsck: &Path, img: &Path) {
    ext4_testkit::e2fsprogs::e2fsck_fy_clean(e2fsck, img).unwrap_or_else(|e| panic!("{e}"))
}

/// The value of a `dumpe2fs -h` field ("Filesystem state:" -> "clean").
pub fn dumpe2fs_field(text: &str, field: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(field).map(|v| v.trim_start_matches(':').trim().to_string()))
}

pub fn dumpe2fs_h(dumpe2fs: &Path, img: &Path) -> String {
    let out = run(dumpe2fs, &["-h", img.to_str().unwrap()]);
    assert!(out.status.success(), "dumpe2fs -h failed:\n{}", combined(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// splitmix64: a fixed, dependency-free seeded stream for test workloads.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
