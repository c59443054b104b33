//! A whole filesystem held to the model, name by name: what a full check
//! asks of an image mounted afresh, with cold caches, so that what the
//! implementation wrote back is read back and compared, not what it kept in
//! memory. The rules are [`crate::agree`]'s: stat, listings and symlink
//! targets agree, and file bytes are equal wherever either side maps data.
//!
//! What it cannot see: names and file data beyond its budget. The caller
//! passes where the last comparison stopped, so successive checks walk the
//! whole tree in turn; a check with an unbounded budget sees everything.

use crate::agree::{agrees, Disagreement};
use crate::durability::{data_ranges, merge_ranges};
use crate::op::{FileKind, Reply, MAX_IO_LEN};
use crate::{Errno, FileSystem};

/// How much one comparison may look at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadBackBudget {
    /// Names whose stat (and listing, or target) are compared.
    pub names: u64,
    /// File bytes compared, over all files.
    pub bytes: u64,
}

impl ReadBackBudget {
    pub const UNBOUNDED: ReadBackBudget = ReadBackBudget { names: u64::MAX, bytes: u64::MAX };
}

/// What one comparison looked at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeCompared {
    pub names: u64,
    /// Regular files whose data was compared, whole or in part.
    pub files_read: u64,
    pub bytes_compared: u64,
    /// Where the next comparison should start: an index into the model's
    /// names in path order (wrapping around).
    pub next: u64,
}

fn child(dir: &str, name: &str) -> String {
    if dir == "/" {
        format!("/{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn on_model<T>(what: &str, path: &str, r: Result<T, Errno>) -> Result<T, Disagreement> {
    r.map_err(|e| Disagreement(format!("{what} {path} on the model: {e:?}")))
}

/// Every name of the model, in path order: listings only, which the model
/// answers from memory.
fn model_names(model: &mut dyn FileSystem) -> Result<Vec<String>, Disagreement> {
    let mut names = vec!["/".to_string()];
    let mut pending = vec!["/".to_string()];
    while let Some(dir) = pending.pop() {
        for e in on_model("readdir", &dir, model.readdir(&dir))? {
            let path = child(&dir, &e.name);
            if e.kind == FileKind::Directory {
                pending.push(path.clone());
            }
            names.push(path);
        }
    }
    names.sort();
    Ok(names)
}

/// Compares names of `fs` with `model` from the `from`-th (in path order,
/// wrapping around) within `budget`.
pub fn tree_agrees(model: &mut dyn FileSystem, fs: &mut dyn FileSystem, budget: ReadBackBudget, from: u64) -> Result<TreeCompared, Disagreement> {
    let names = model_names(model)?;
    let count = names.len() as u64;
    let mut out = TreeCompared::default();
    let mut bytes_left = budget.bytes;
    let start = from % count.max(1);
    for i in 0..count.min(budget.names) {
        let at = (start + i) % count;
        let path = &names[at as usize];
        out.next = (at + 1) % count;
        let want = on_model("stat", path, model.stat(path))?;
        agrees(&Ok(Reply::Stat(want.clone())), &fs.stat(path).map(Reply::Stat)).map_err(|d| Disagreement(format!("stat {path}: {d}")))?;
        out.names += 1;
        match want.kind {
            FileKind::Symlink => {
                let (a, b) = (model.readlink(path).map(Reply::Target), fs.readlink(path).map(Reply::Target));
                agrees(&a, &b).map_err(|d| Disagreement(format!("readlink {path}: {d}")))?;
            }
            FileKind::Directory => {
                let want = on_model("readdir", path, model.readdir(path))?;
                agrees(&Ok(Reply::Entries(want)), &fs.readdir(path).map(Reply::Entries)).map_err(|d| Disagreement(format!("readdir {path}: {d}")))?;
            }
            FileKind::Regular if bytes_left > 0 => {
                let compared = file_agrees(model, fs, path, want.size, bytes_left)?;
                bytes_left -= compared;
                out.files_read += 1;
                out.bytes_compared += compared;
            }
            FileKind::Regular => {}
        }
    }
    Ok(out)
}

/// Compares a file's bytes wherever either side maps data, up to `budget`
/// bytes; returns the bytes compared.
fn file_agrees(model: &mut dyn FileSystem, fs: &mut dyn FileSystem, path: &str, size: u64, budget: u64) -> Result<u64, Disagreement> {
    let unreadable = |side: &'static str| move |v: crate::CrashViolation| Disagreement(format!("{path} on the {side}: {v}"));
    let mut ranges = data_ranges(model, path, size).map_err(unreadable("model"))?;
    ranges.extend(data_ranges(fs, path, size).map_err(unreadable("filesystem"))?);
    let mut compared = 0u64;
    for range in merge_ranges(ranges) {
        let mut at = range.start;
        while at < range.end && compared < budget {
            let len = (range.end - at).min(u64::from(MAX_IO_LEN)).min(budget - compared);
            let len32 = u32::try_from(len).map_err(|_| Disagreement(format!("{path}: a read of {len} bytes")))?;
            let want = on_model("read", path, model.read(path, at, len32))?;
            agrees(&Ok(Reply::Data(want)), &fs.read(path, at, len32).map(Reply::Data)).map_err(|d| Disagreement(format!("{path} at {at}: {d}")))?;
            compared += len;
            at += len;
        }
    }
    Ok(compared)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Model, MountConfig};

    fn model_with(files: &[(&str, &[u8])]) -> Model {
        let mut m = Model::new(&MountConfig::default()).unwrap();
        m.mkdir("/d", 0o755).unwrap();
        m.symlink("/d/f", "/l").unwrap();
        for (path, data) in files {
            m.create(path, 0o644).unwrap();
            m.write(path, 4096, data).unwrap();
        }
        m
    }

    const FILES: [(&str, &[u8]); 3] = [("/d/a", b"one"), ("/d/b", b"two"), ("/c", b"three")];

    #[test]
    fn equal_trees_agree_and_budgets_rotate_over_the_names() {
        let (mut a, mut b) = (model_with(&FILES), model_with(&FILES));
        // "/", "/c", "/d", "/d/a", "/d/b", "/l", "/lost+found"
        let all = tree_agrees(&mut a, &mut b, ReadBackBudget::UNBOUNDED, 0).unwrap();
        assert_eq!((all.names, all.files_read, all.bytes_compared, all.next), (7, 3, 11, 0));
        let two = ReadBackBudget { names: 2, bytes: 4 };
        let first = tree_agrees(&mut a, &mut b, two, 0).unwrap();
        assert_eq!((first.names, first.files_read, first.bytes_compared, first.next), (2, 1, 4, 2));
        let then = tree_agrees(&mut a, &mut b, two, first.next).unwrap();
        assert_eq!((then.files_read, then.bytes_compared, then.next), (1, 3, 4));
        let wrap = tree_agrees(&mut a, &mut b, two, 6).unwrap();
        assert_eq!(wrap.next, 1);
    }

    #[test]
    fn a_differing_byte_a_missing_name_or_a_wrong_target_is_found() {
        let mut want = model_with(&[("/d/a", b"one")]);
        let mut bytes = model_with(&[("/d/a", b"onE")]);
        let d = tree_agrees(&mut want, &mut bytes, ReadBackBudget::UNBOUNDED, 0).unwrap_err();
        assert!(d.0.contains("/d/a at 4096"), "{d}");
        // Out of budget, the same difference goes unseen: the budget is real.
        assert!(tree_agrees(&mut want, &mut bytes, ReadBackBudget { names: u64::MAX, bytes: 0 }, 0).is_ok());

        let names_only = ReadBackBudget { names: u64::MAX, bytes: 0 };
        let mut missing = model_with(&[]);
        assert!(tree_agrees(&mut want, &mut missing, names_only, 0).is_err());
        let mut extra = model_with(&[("/d/a", b"one"), ("/x", b"")]);
        let d = tree_agrees(&mut want, &mut extra, names_only, 0).unwrap_err();
        assert!(d.0.contains("readdir /:"), "{d}");

        let mut target = model_with(&[("/d/a", b"one")]);
        target.unlink("/l").unwrap();
        target.symlink("/d/g", "/l").unwrap();
        let d = tree_agrees(&mut want, &mut target, names_only, 0).unwrap_err();
        assert!(d.0.contains("readlink /l"), "{d}");
    }
}
