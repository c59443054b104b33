//! Running the real tools against images: the strict reading of `e2fsck -fn`
//! (exit 0 is not enough: some complaints print "Fix? no" and still exit 0),
//! `e2fsck -fy` on a copy, and `debugfs` reads. Shared by every test and
//! benchmark that holds the engine to e2fsprogs.

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

fn run(cmd: &Path, args: &[&str]) -> Result<Output, String> {
    Command::new(cmd).args(args).output().map_err(|e| format!("run {}: {e}", cmd.display()))
}

/// stderr then stdout, as a person at a terminal would read them.
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

fn path_str(img: &Path) -> Result<&str, String> {
    img.to_str().ok_or_else(|| format!("{} is not UTF-8", img.display()))
}

/// Runs `e2fsck -fn` and requires exit 0 and nothing but clean-run lines.
/// Returns the output, whose summary line callers may read.
pub fn e2fsck_clean(e2fsck: &Path, img: &Path) -> Result<String, String> {
    e2fsck_clean_allowing(e2fsck, img, |_| false)
}

/// Like [`e2fsck_clean`], also letting through lines `allowed` accepts: a
/// kernel-written image may draw optimisation offers that are no errors.
pub fn e2fsck_clean_allowing(e2fsck: &Path, img: &Path, allowed: impl Fn(&str) -> bool) -> Result<String, String> {
    let name = path_str(img)?;
    let out = run(e2fsck, &["-fn", name])?;
    let text = combined(&out);
    let stray: Vec<&str> = text.lines().filter(|l| !is_clean_fsck_line(l, name) && !allowed(l)).collect();
    let summary = text.lines().any(|l| l.starts_with(&format!("{name}: ")) && l.ends_with(" blocks"));
    if out.status.success() && stray.is_empty() && summary {
        Ok(text)
    } else {
        Err(format!("e2fsck -fn {name} (rc {:?}) was not clean:\n{text}", out.status.code()))
    }
}

/// e2fsck's note that a superblock time is ahead of this host's clock by
/// less than a day (its `accept_time_fudge`: exit 0, nothing to fix). An
/// image a qemu guest wrote draws it when the guest's clock runs a little
/// ahead; nothing else may.
pub fn is_guest_clock_skew_line(line: &str) -> bool {
    matches!(line, "Superblock last write time is in the future." | "Superblock last mount time is in the future.")
        || line.trim() == "(by less than a day, probably due to the hardware clock being incorrectly set)"
}

/// Copies `img` sparsely and requires `e2fsck -fy` on the copy to exit 0 (nothing to fix).
pub fn e2fsck_fy_clean(e2fsck: &Path, img: &Path) -> Result<(), String> {
    let copy = img.with_extension("fy");
    let cp = Command::new("cp").arg("--sparse=always").arg(img).arg(&copy).status().map_err(|e| format!("cp: {e}"))?;
    if !cp.success() {
        return Err(format!("cp {} failed", img.display()));
    }
    let out = run(e2fsck, &["-fy", path_str(&copy)?]);
    let _ = std::fs::remove_file(&copy);
    let out = out?;
    if out.status.code() == Some(0) {
        Ok(())
    } else {
        Err(format!("e2fsck -fy changed something (rc {:?}):\n{}", out.status.code(), combined(&out)))
    }
}

/// A file's contents as `debugfs -R "cat PATH"` reads them.
pub fn debugfs_cat(debugfs: &Path, img: &Path, path: &str) -> Result<Vec<u8>, String> {
    let req = format!("cat \"{path}\"");
    let out = run(debugfs, &["-R", &req, path_str(img)?])?;
    if !out.status.success() {
        return Err(format!("debugfs cat {path}: {}", combined(&out)));
    }
    Ok(out.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The two lines e2fsck prints for a clock skew under a day pass; the
    /// same note beyond a day (a real problem, with the times) does not.
    #[test]
    fn only_a_skew_under_a_day_is_let_through() {
        assert!(is_guest_clock_skew_line("Superblock last write time is in the future."));
        assert!(is_guest_clock_skew_line("\t(by less than a day, probably due to the hardware clock being incorrectly set)"));
        assert!(!is_guest_clock_skew_line("Superblock last write time (Mon Dec  7 10:00:00 2026,"));
        assert!(!is_guest_clock_skew_line("Inode 12 has an invalid extent"));
    }
}
