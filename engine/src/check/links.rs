//! The directory pass, part two: what the entries mean together. Every
//! entry must name an in-use inode of the type it claims; names are unique
//! per directory; each directory has exactly one name and a ".." pointing
//! back; every in-use inode is reachable from the root; and each inode's
//! links_count equals the names found for it ("." and ".." included, so a
//! directory counts 2 + its subdirectories; above 65000 dir_nlink stores 1).

use std::collections::{BTreeMap, VecDeque};

use crate::device::BlockDevice;
use crate::format::dirent::*;
use crate::format::inode::*;
use crate::format::superblock::feature;
use crate::format::InodeNumber;

use super::dirs::DirData;
use super::problem::Problem;
use super::state::Checker;

/// Links above this are stored as 1 by dir_nlink (EXT4_LINK_MAX).
const LINK_MAX: u64 = 65000;
/// Deepest path built for a report; deeper (or cyclic) chains are cut.
const MAX_PATH_DEPTH: usize = 256;

/// The file_type an entry for an inode of type `ft` must carry.
fn dirent_type(ft: u16) -> u8 {
    match ft {
        S_IFREG => FT_REG_FILE,
        S_IFDIR => FT_DIR,
        S_IFCHR => FT_CHRDEV,
        S_IFBLK => FT_BLKDEV,
        S_IFIFO => FT_FIFO,
        S_IFSOCK => FT_SOCK,
        S_IFLNK => FT_SYMLINK,
        _ => FT_UNKNOWN,
    }
}

/// The name each directory was first found under: child -> (parent, name).
type Names = BTreeMap<InodeNumber, (InodeNumber, Vec<u8>)>;

fn path_of(names: &Names, dir: InodeNumber, leaf: &[u8]) -> String {
    let mut parts: Vec<&[u8]> = vec![leaf];
    let mut at = dir;
    let mut rooted = at == ROOT_INO;
    for _ in 0..MAX_PATH_DEPTH {
        if at == ROOT_INO {
            rooted = true;
            break;
        }
        match names.get(&at) {
            Some((parent, name)) => {
                parts.push(name);
                at = *parent;
            }
            None => break,
        }
    }
    let mut s = String::from(if rooted { "" } else { "?" });
    for p in parts.iter().rev() {
        s.push('/');
        s.push_str(&String::from_utf8_lossy(p));
    }
    s
}

pub fn check<D: BlockDevice>(c: &mut Checker<D>, dirs: &[DirData]) {
    let is_dir = |c: &Checker<D>, ino| c.live_inode(ino).is_some_and(|l| l.file_type == S_IFDIR);
    let mut names: Names = BTreeMap::new();
    for d in dirs {
        for e in &d.entries {
            let special = e.name == b"." || e.name == b"..";
            if !special && e.inode != ROOT_INO && is_dir(c, e.inode) && !names.contains_key(&e.inode) {
                names.insert(e.inode, (d.ino, e.name.clone()));
            }
        }
    }
    let mut refs = vec![0u64; c.live.len()];
    let count = |c: &Checker<D>, refs: &mut Vec<u64>, ino: InodeNumber| {
        if let Ok(i) = c.live.binary_search_by_key(&ino, |l| l.ino) {
            refs[i] = refs[i].saturating_add(1);
        }
    };
    let filetype = c.sb.feature_incompat & feature::INCOMPAT_FILETYPE != 0;
    let inodes_count = c.geo.inodes_count();
    for d in dirs {
        if let Some(dot) = d.dot {
            count(c, &mut refs, dot);
        }
        if let Some(dd) = d.dotdot {
            if c.live_inode(dd).is_some() {
                count(c, &mut refs, dd);
            } else {
                c.report(Problem::DotEntry { dir: d.ino, what: format!("'..' names unused inode {dd}") });
            }
        }
        let mut seen: Vec<&[u8]> = Vec::with_capacity(d.entries.len());
        for e in &d.entries {
            let path = || path_of(&names, d.ino, &e.name);
            let t = e.inode;
            seen.push(&e.name);
            let bad = if e.name == b"." || e.name == b".." {
                Some("'.' or '..' out of place".to_string())
            } else if e.name.iter().any(|&b| b == b'/' || b == 0) {
                Some("name contains '/' or NUL".to_string())
            } else if (t != ROOT_INO && t < c.first_ino()) || u64::from(t) > inodes_count {
                Some("reserved or out-of-range inode".to_string())
            } else {
                None
            };
            if let Some(what) = bad {
                c.report(Problem::BadEntry { dir: d.ino, path: path(), ino: t, what });
                continue;
            }
            let Some(target) = c.live_inode(t).cloned() else {
                unused_target(c, d.ino, t, path());
                continue;
            };
            let expected = if filetype { dirent_type(target.file_type) } else { FT_UNKNOWN };
            if e.file_type != expected {
                c.report(Problem::FileType { dir: d.ino, path: path(), ino: t, stored: e.file_type, expected });
            }
            count(c, &mut refs, t);
            if target.file_type == S_IFDIR && names.get(&t).is_none_or(|(p, n)| *p != d.ino || *n != e.name) {
                c.report(Problem::DirHardLink { ino: t, path: path() });
            }
        }
        seen.sort_unstable();
        for w in seen.windows(2) {
            if w[0] == w[1] {
                c.report(Problem::DuplicateName { dir: d.ino, path: path_of(&names, d.ino, w[0]) });
            }
        }
    }
    check_dotdot(c, dirs, &names);
    reachable(c, dirs, &names);
    check_counts(c, &refs);
    check_lost_found(c, dirs);
}

/// An entry names an inode not in use: say whether it hides in an uninitialised tail.
fn unused_target<D: BlockDevice>(c: &mut Checker<D>, dir: InodeNumber, t: InodeNumber, path: String) {
    if let Some((g, idx)) = c.geo.inode_location(t) {
        if idx >= c.initialised(g) {
            let itable_unused = c.descs.get(g as usize).map_or(0, |d| d.itable_unused);
            let what = format!("{path} names inode {t} in the uninitialised part of the table");
            return c.report(Problem::ItableUnused { group: g, itable_unused, what });
        }
    }
    c.report(Problem::EntryToUnusedInode { dir, path, ino: t });
}

fn check_dotdot<D: BlockDevice>(c: &mut Checker<D>, dirs: &[DirData], names: &Names) {
    for d in dirs {
        let Some(stored) = d.dotdot else { continue };
        let expected = if d.ino == ROOT_INO { Some(ROOT_INO) } else { names.get(&d.ino).map(|(p, _)| *p) };
        if let Some(expected) = expected {
            if stored != expected {
                c.report(Problem::DotDot { dir: d.ino, stored, expected });
            }
        }
    }
}

/// Reports directories not reachable from the root through their names.
/// (Files named only inside those are covered by their directory's report.)
fn reachable<D: BlockDevice>(c: &mut Checker<D>, dirs: &[DirData], names: &Names) {
    let mut children: BTreeMap<InodeNumber, Vec<InodeNumber>> = BTreeMap::new();
    for (child, (parent, _)) in names {
        children.entry(*parent).or_default().push(*child);
    }
    let mut reached_dirs = std::collections::BTreeSet::new();
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(d) = queue.pop_front() {
        if !reached_dirs.insert(d) {
            continue;
        }
        queue.extend(children.get(&d).into_iter().flatten().copied());
    }
    for d in dirs {
        if !reached_dirs.contains(&d.ino) && d.ino != ROOT_INO {
            c.report(Problem::UnconnectedDir { ino: d.ino });
        }
    }
}

fn check_counts<D: BlockDevice>(c: &mut Checker<D>, refs: &[u64]) {
    let first = c.first_ino();
    let hidden = c.hidden_inodes();
    let mut found = Vec::new();
    for (i, l) in c.live.iter().enumerate() {
        if (l.ino < first && l.ino != ROOT_INO) || hidden.contains(&l.ino) {
            continue;
        }
        let counted = refs.get(i).copied().unwrap_or(0);
        let dir = l.file_type == S_IFDIR;
        if counted == 0 {
            // Directories without a name are reported as unconnected already.
            if !dir {
                found.push(Problem::Unattached { ino: l.ino });
            }
            continue;
        }
        let want = if dir && counted > LINK_MAX { 1 } else { counted };
        if u64::from(l.links_count) != want {
            found.push(Problem::LinkCount { ino: l.ino, stored: l.links_count, counted: want });
        }
    }
    for p in found {
        c.report(p);
    }
}

fn check_lost_found<D: BlockDevice>(c: &mut Checker<D>, dirs: &[DirData]) {
    let Some(root) = dirs.iter().find(|d| d.ino == ROOT_INO) else { return };
    let lpf = root.entries.iter().find(|e| e.name == b"lost+found").map(|e| e.inode);
    if lpf.is_none_or(|ino| c.live_inode(ino).is_none_or(|l| l.file_type != S_IFDIR)) {
        c.report(Problem::NoLostFound);
    }
}
