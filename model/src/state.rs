//! The model's state: inodes in plain `BTreeMap`s, no physical blocks.

use std::collections::{BTreeMap, BTreeSet};

use crate::data::FileData;
use crate::op::{inode_flags, FileKind};
use crate::path::{target_components, target_demands_dir, Last, SplitPath};
use crate::Errno;

/// The model's inode number; same numbers as ext4 for root and lost+found.
pub type Ino = u64;
pub const ROOT_INO: Ino = 2;
pub const LOST_FOUND_INO: Ino = 11;
pub const FIRST_FREE_INO: Ino = 12;

/// Linux follows at most this many symlinks in one lookup (MAXSYMLINKS).
pub const MAX_SYMLINKS: u32 = 40;

/// dir_nlink: a directory whose link count would pass this reports 1.
pub const DIR_NLINK_MAX: u32 = 65000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    Dir { entries: BTreeMap<String, Ino>, parent: Ino },
    File(FileData),
    Symlink(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub node: Node,
    pub perm: u16,
    /// Names pointing at a non-directory. Directories derive nlink from subdirs.
    pub links: u32,
    pub flags: u32,
    /// Durability bookkeeping, in op sequence numbers (see `durability`).
    pub marks: Marks,
}

/// When an inode last changed in ways that matter after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Marks {
    /// Last op that changed its metadata (names, links, size, allocation, flags).
    pub meta_op: u64,
    /// Last op that changed what fdatasync must persist (size, allocation).
    pub datasync_op: u64,
    /// Last op after which its data and size were durable (fsync, fdatasync,
    /// sync, a journal-flag switch), or its creation.
    pub durable_at: u64,
}

impl Inode {
    pub fn kind(&self) -> FileKind {
        match self.node {
            Node::Dir { .. } => FileKind::Directory,
            Node::File(_) => FileKind::Regular,
            Node::Symlink(_) => FileKind::Symlink,
        }
    }

    pub fn journal_data(&self) -> bool {
        self.flags & inode_flags::JOURNAL_DATA != 0
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub inodes: BTreeMap<Ino, Inode>,
    pub next_ino: Ino,
    /// Sequence number of the last op that could change state.
    pub seq: u64,
    /// Every op with a sequence number <= this has committed.
    pub namespace_floor: u64,
    /// The last sync(2): every inode's data and size were durable after
    /// it, whatever its own `marks.durable_at` says.
    pub synced_at: u64,
    /// Inodes handed out mutably since the last sync: the only ones a sync
    /// can find with write-back pending or i_disksize behind, so it need
    /// not visit thousands of untouched inodes.
    pub touched: BTreeSet<Ino>,
    /// Data blocks in use by all files (allocated, unwritten or delayed).
    pub used_blocks: u64,
    /// Descriptor slots held across ops: slot -> the regular file it has
    /// open. An inode here with no links is an orphan.
    pub slots: BTreeMap<u8, Ino>,
    /// Files that ops in flight hold (fdget's reference, a read's own
    /// open), by the id each op keeps (`crate::descriptors`).
    pub fd_refs: BTreeMap<u64, FdRef>,
    pub next_fd_ref: u64,
}

/// A file an op in flight holds: a descriptor's (fdget's reference; `slot`
/// while the slot still holds it, None once the slot closed, the file's
/// release then waiting for the op's fdput), or a buffered read's own open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FdRef {
    pub slot: Option<u8>,
    pub ino: Ino,
    /// A buffered read's own open file, not a descriptor's: its close is
    /// its own, apart from a closed descriptor's last fdput.
    pub own_open: bool,
}

impl State {
    /// A freshly made filesystem: root and lost+found, as mke2fs leaves them.
    pub fn new() -> State {
        let mut inodes = BTreeMap::new();
        let dir = |entries: BTreeMap<String, Ino>, parent, perm| Inode {
            node: Node::Dir { entries, parent },
            perm,
            links: 0,
            flags: inode_flags::EXTENTS,
            marks: Marks::default(),
        };
        inodes.insert(ROOT_INO, dir(BTreeMap::from([("lost+found".to_string(), LOST_FOUND_INO)]), ROOT_INO, 0o755));
        inodes.insert(LOST_FOUND_INO, dir(BTreeMap::new(), ROOT_INO, 0o700));
        State { inodes, next_ino: FIRST_FREE_INO, seq: 0, namespace_floor: 0, synced_at: 0, touched: BTreeSet::new(), used_blocks: 0, slots: BTreeMap::new(), fd_refs: BTreeMap::new(), next_fd_ref: 0 }
    }

    pub fn inode(&self, ino: Ino) -> &Inode {
        self.inodes.get(&ino).expect("model invariant: every entry names a live inode")
    }

    pub fn inode_mut(&mut self, ino: Ino) -> &mut Inode {
        self.touched.insert(ino);
        self.inodes.get_mut(&ino).expect("model invariant: every entry names a live inode")
    }

    pub fn entries(&self, dir: Ino) -> Option<&BTreeMap<String, Ino>> {
        match &self.inode(dir).node {
            Node::Dir { entries, .. } => Some(entries),
            _ => None,
        }
    }

    pub fn entries_mut(&mut self, dir: Ino) -> &mut BTreeMap<String, Ino> {
        match &mut self.inode_mut(dir).node {
            Node::Dir { entries, .. } => entries,
            _ => panic!("model invariant: entries_mut on a non-directory"),
        }
    }

    pub fn parent_of(&self, dir: Ino) -> Ino {
        match &self.inode(dir).node {
            Node::Dir { parent, .. } => *parent,
            _ => panic!("model invariant: parent_of a non-directory"),
        }
    }

    /// Whether a descriptor holds `ino` open: a slot, or a closed slot's
    /// file that a write in flight still holds.
    pub fn is_open(&self, ino: Ino) -> bool {
        self.slots.values().any(|i| *i == ino) || self.fd_refs.values().any(|r| r.slot.is_none() && r.ino == ino)
    }

    pub fn is_dir(&self, ino: Ino) -> bool {
        matches!(self.inode(ino).node, Node::Dir { .. })
    }

    /// Link count as stat reports it.
    pub fn nlink(&self, ino: Ino) -> u32 {
        let inode = self.inode(ino);
        match &inode.node {
            Node::Dir { entries, .. } => {
                let subdirs = entries.values().filter(|c| self.is_dir(**c)).count() as u64;
                let n = 2 + subdirs;
                if n > DIR_NLINK_MAX as u64 { 1 } else { n as u32 }
            }
            _ => inode.links,
        }
    }

    /// True when `ancestor` is `ino` or one of its parents.
    pub fn is_ancestor(&self, ancestor: Ino, mut ino: Ino) -> bool {
        loop {
            if ino == ancestor {
                return true;
            }
            if ino == ROOT_INO {
                return false;
            }
            ino = self.parent_of(ino);
        }
    }

    /// Resolves a whole path. `follow_last` follows a symlink in the last
    /// component; a trailing slash always does and demands a directory.
    pub fn resolve(&self, path: &SplitPath, follow_last: bool) -> Result<Ino, Errno> {
        let mut followed = 0;
        let ino = self.walk(ROOT_INO, &path.components, follow_last || path.trailing_slash, &mut followed)?;
        if path.trailing_slash && !self.is_dir(ino) {
            return Err(Errno::ENOTDIR);
        }
        Ok(ino)
    }

    /// Resolves all but the last component, which must be a directory.
    pub fn resolve_parent<'a>(&self, path: &SplitPath<'a>) -> Result<(Ino, Last<'a>), Errno> {
        let (parent, last) = path.split_last();
        let mut followed = 0;
        let dir = self.walk(ROOT_INO, parent, true, &mut followed)?;
        if !self.is_dir(dir) {
            return Err(Errno::ENOTDIR);
        }
        Ok((dir, last))
    }

    /// Components come from the path in order, or, once a symlink is followed,
    /// from a stack with the next one on top, so a target goes in front of the
    /// rest by pushing it. Every component stays a borrow of the path or of a
    /// target: a walk through no symlink allocates nothing. The current inode
    /// is carried along so each component costs one inode lookup, not two.
    fn walk(&self, start: Ino, comps: &[&str], mut follow_last: bool, followed: &mut u32) -> Result<Ino, Errno> {
        let mut rest = comps.iter().copied();
        let mut want_dir = false;
        let mut pushed: Vec<&str> = Vec::new();
        let mut cur = start;
        let mut cur_inode = self.inode(cur);
        while let Some(name) = pushed.pop().or_else(|| rest.next()) {
            let Node::Dir { entries, parent } = &cur_inode.node else { return Err(Errno::ENOTDIR) };
            if name.len() > crate::op::NAME_MAX {
                return Err(Errno::ENAMETOOLONG);
            }
            let next = match name {
                "." => cur,
                ".." => *parent,
                _ => *entries.get(name).ok_or(Errno::ENOENT)?,
            };
            let next_inode = self.inode(next);
            let is_last = pushed.is_empty() && rest.len() == 0;
            if let Node::Symlink(target) = &next_inode.node {
                if !is_last || follow_last {
                    *followed += 1;
                    if *followed > MAX_SYMLINKS {
                        return Err(Errno::ELOOP);
                    }
                    if is_last && target_demands_dir(target) {
                        // The body's trailing slash is the last name's now
                        // (LOOKUP_FOLLOW | LOOKUP_DIRECTORY in lookup_last).
                        follow_last = true;
                        want_dir = true;
                    }
                    let (absolute, tcomps) = target_components(target);
                    if absolute {
                        cur = ROOT_INO;
                        cur_inode = self.inode(cur);
                    }
                    // Reversed, so the target's first component is on top.
                    pushed.extend(tcomps.rev());
                    continue;
                }
            }
            cur = next;
            cur_inode = next_inode;
        }
        if want_dir && !self.is_dir(cur) {
            return Err(Errno::ENOTDIR);
        }
        Ok(cur)
    }

    /// Every path naming `ino`, for reports.
    pub fn paths_of(&self, ino: Ino) -> Vec<String> {
        let mut out = Vec::new();
        self.visit(ROOT_INO, "", &mut |path, child| {
            if child == ino {
                out.push(path.to_string());
            }
        });
        out
    }

    /// Calls `f(path, ino)` for every name in the tree under `dir`, depth first, sorted.
    pub fn visit(&self, dir: Ino, prefix: &str, f: &mut dyn FnMut(&str, Ino)) {
        let Some(entries) = self.entries(dir) else { return };
        for (name, child) in entries {
            let path = format!("{prefix}/{name}");
            f(&path, *child);
            if self.is_dir(*child) {
                self.visit(*child, &path, f);
            }
        }
    }
}

impl Default for State {
    fn default() -> Self {
        State::new()
    }
}
