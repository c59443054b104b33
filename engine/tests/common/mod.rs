//! Helpers shared by the e2fsprogs cross-check tests: finding the tools, scratch
//! directories that clean up after themselves, and strict readings of e2fsck
//! and dumpe2fs output.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Finds an e2fsprogs tool on PATH or in the sbin directories PATH often lacks.
pub fn tool(name: &str) -> Option<PathBuf> {
    if let Ok(out) = Command::new("which").arg(name).output() {
        if out.status.success() {
            let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if !p.is_empty() {
                return Some(PathBuf::from(p));
            }
        }
    }
    ["/usr/sbin", "/sbin", "/usr/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists())
}

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

pub fn combined(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout))
}

/// True if `line` is one of the three kinds of line a clean `e2fsck -fn` prints:
/// the version banner, a "Pass N:" line, or the final files/blocks summary.
pub fn is_clean_fsck_line(line: &str, img: &str) -> bool {
    if line.is_empty() || line.starts_with("e2fsck ") {
        return true;
    }
    if let Some(rest) = line.strip_prefix("Pass ") {
        return rest.chars().next().is_some_and(|c| c.is_ascii_digit()) && rest.contains(": ");
    }
    line.starts_with(&format!("{img}: ")) && line.contains(" files (") && line.ends_with(" blocks")
}

/// Runs `e2fsck -fn` and requires exit 0 and nothing but clean-run lines.
/// Returns the output so callers can read the summary.
pub fn assert_fsck_clean(e2fsck: &Path, img: &Path) -> String {
    let out = run(e2fsck, &["-fn", img.to_str().unwrap()]);
    let text = combined(&out);
    let name = img.to_str().unwrap();
    let stray: Vec<&str> = text.lines().filter(|l| !is_clean_fsck_line(l, name)).collect();
    assert!(out.status.success() && stray.is_empty(), "e2fsck -fn {name} (rc {:?}) was not clean:\n{text}", out.status.code());
    assert!(text.lines().any(|l| l.starts_with(&format!("{name}: ")) && l.ends_with(" blocks")), "no summary line:\n{text}");
    text
}

/// Copies `img` sparsely and requires `e2fsck -fy` on the copy to exit 0 (nothing to fix).
pub fn assert_fsck_fy_clean(e2fsck: &Path, img: &Path) {
    let copy = img.with_extension("fy");
    let cp = Command::new("cp").args(["--sparse=always"]).arg(img).arg(&copy).status().expect("cp");
    assert!(cp.success());
    let out = run(e2fsck, &["-fy", copy.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "e2fsck -fy changed something:\n{}", combined(&out));
    let _ = std::fs::remove_file(&copy);
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
