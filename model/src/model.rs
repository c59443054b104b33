//! The reference model: a [`FileSystem`] that is small, slow and obviously right.
//! Its logical answers are the law the engine is held to.

use std::sync::Arc;

use crate::content::Source;
use crate::config::{ConfigError, EffectiveMount, InodeJournalMode, MountConfig};
use crate::data::{Alloc, FileData};
pub use crate::crash_log::Call;
use crate::crash_log::CrashLog;
use crate::fs::FileSystem;
use crate::op::{inode_flags, DirEntry, FallocFlags, FiemapExtent, FiemapRequest, FileKind, Op, Outcome, Reply, Stat};
use crate::path::SplitPath;
use crate::state::{Ino, Inode, Marks, Node, State, ROOT_INO};
use crate::vfs::VfsVersion;
use crate::Errno;

/// Space the model may use, so ENOSPC is deterministic. `None` is unbounded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Data blocks all files may hold together. Under bigalloc a file
    /// holds whole clusters: each counts as its blocks.
    pub data_blocks: Option<u64>,
    /// Inodes that may be created beyond root and lost+found.
    pub inodes: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub(crate) mount: EffectiveMount,
    pub(crate) limits: Limits,
    pub(crate) st: State,
    /// Everything since the last sync, for crash checks. None in replays.
    pub(crate) log: Option<CrashLog>,
    /// A harness is looking (see [`Model::looking`]): the closes of the
    /// opens its reads and stats stand for change nothing.
    pub(crate) harness_looking: bool,
    /// Whose VFS checks the model answers with (Linux 6 unless told).
    pub(crate) vfs: VfsVersion,
    /// Kept by a crash check's replay only (None elsewhere): files as a
    /// refused extending direct write left them on disk, its bytes past EOF
    /// still there before its cleanup truncated them from the file
    /// (`refuse_misaligned_write`). An older, larger durable size exposes them.
    pub(crate) past_eof_writes: Option<Vec<(Ino, FileData)>>,
}

impl Model {
    pub fn new(config: &MountConfig) -> Result<Model, ConfigError> {
        Self::with_limits(config, Limits::default())
    }

    pub fn with_limits(config: &MountConfig, limits: Limits) -> Result<Model, ConfigError> {
        let mount = config.validate()?;
        let st = State::new();
        let log = Some(CrashLog::new(st.clone()));
        Ok(Model { mount, limits, st, log, harness_looking: false, vfs: VfsVersion::default(), past_eof_writes: None })
    }

    pub(crate) fn from_state(mount: EffectiveMount, limits: Limits, st: State, logged: bool) -> Model {
        let log = logged.then(|| CrashLog::new(st.clone()));
        Model { mount, limits, st, log, harness_looking: false, vfs: VfsVersion::default(), past_eof_writes: None }
    }

    /// Runs `f` with the model as a harness's view of it: reads and stats
    /// answer as ever, but the closes they stand for do not start
    /// write-back (auto_da_alloc), so a check leaves the model as it was.
    pub fn looking<T>(&mut self, f: impl FnOnce(&mut Model) -> T) -> T {
        let was = self.set_looking(true);
        let out = f(self);
        self.set_looking(was);
        out
    }

    /// [`Model::looking`] for a caller that cannot pass a closure (a test
    /// double whose checks go through itself). Returns the previous setting.
    pub fn set_looking(&mut self, on: bool) -> bool {
        std::mem::replace(&mut self.harness_looking, on)
    }

    /// Answers as Linux `vfs` does where VFS versions differ.
    pub fn with_vfs(mut self, vfs: VfsVersion) -> Model {
        self.vfs = vfs;
        self
    }

    pub fn mount(&self) -> &EffectiveMount {
        &self.mount
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Sequence number of the last state-changing call.
    pub fn seq(&self) -> u64 {
        self.st.seq
    }

    pub fn used_blocks(&self) -> u64 {
        self.st.used_blocks
    }

    pub fn inode_count(&self) -> usize {
        self.st.inodes.len()
    }

    pub(crate) fn bs(&self) -> u64 {
        self.mount.block_size as u64
    }

    /// Blocks per allocation cluster: 1 without bigalloc.
    pub(crate) fn ratio(&self) -> u64 {
        u64::from(self.mount.cluster_size / self.mount.block_size)
    }

    /// Counts a state-changing call and logs it for crash checks.
    pub(crate) fn record(&mut self, call: impl FnOnce() -> Call) {
        self.st.seq += 1;
        if let Some(log) = &mut self.log {
            log.calls.push(call());
        }
    }

    /// pwrite of a shared buffer: the model keeps it without a copy, and so
    /// does the crash log.
    pub(crate) fn write_literal(&mut self, path: &str, offset: u64, bytes: Arc<[u8]>) -> Result<u64, Errno> {
        let len = bytes.len();
        self.record(|| Call::Write { path: path.into(), offset, data: bytes.clone() });
        self.do_write(path, offset, len, Source::Literal { bytes, at: 0 })
    }

    /// A rewrite is logged as its two steps, each its own handle in ext4:
    /// a crash may fall between the truncate and the write. Replayed, the
    /// truncate refuses where the open would, and the write's close is the
    /// rewrite's.
    pub(crate) fn rewrite_literal(&mut self, path: &str, bytes: Arc<[u8]>) -> Result<u64, Errno> {
        let len = bytes.len();
        self.record(|| Call::Op(Op::Truncate { path: path.into(), size: 0 }));
        self.record(|| Call::Write { path: path.into(), offset: 0, data: bytes.clone() });
        self.do_rewrite(path, len, Source::Literal { bytes, at: 0 })
    }

    pub(crate) fn append_literal(&mut self, path: &str, bytes: Arc<[u8]>) -> Result<u64, Errno> {
        let len = bytes.len();
        self.record(|| Call::Append { path: path.into(), data: bytes.clone() });
        self.do_append(path, len, Source::Literal { bytes, at: 0 })
    }

    pub(crate) fn writable(&self) -> Result<(), Errno> {
        if self.mount.read_only {
            Err(Errno::EROFS)
        } else {
            Ok(())
        }
    }

    pub(crate) fn journal_mode(&self, ino: Ino) -> InodeJournalMode {
        let inode = self.st.inode(ino);
        self.mount.inode_journal_mode(inode.kind() == FileKind::Regular, inode.journal_data())
    }

    /// How a hole that a buffered write fills is backed until writeback.
    pub(crate) fn write_fill(&self, ino: Ino) -> Alloc {
        let journaled = self.journal_mode(ino) == InodeJournalMode::Journal;
        if self.mount.delalloc && !journaled {
            Alloc::Delayed
        } else if self.mount.dioread_nolock && !journaled {
            Alloc::UnwrittenDirty
        } else {
            Alloc::Written
        }
    }

    pub(crate) fn reserve_blocks(&self, blocks: u64) -> Result<(), Errno> {
        match self.limits.data_blocks {
            Some(cap) if self.st.used_blocks + blocks > cap => Err(Errno::ENOSPC),
            _ => Ok(()),
        }
    }

    pub(crate) fn reserve_inode(&self) -> Result<(), Errno> {
        match self.limits.inodes {
            Some(cap) if self.st.inodes.len() as u64 - 2 >= cap => Err(Errno::ENOSPC),
            _ => Ok(()),
        }
    }

    pub(crate) fn touch_meta(&mut self, ino: Ino) {
        let seq = self.st.seq;
        self.st.inode_mut(ino).marks.meta_op = seq;
    }

    pub(crate) fn touch_datasync(&mut self, ino: Ino) {
        let seq = self.st.seq;
        let marks = &mut self.st.inode_mut(ino).marks;
        marks.meta_op = seq;
        marks.datasync_op = seq;
    }

    /// Adds a new inode under `dir` with flags inherited from it.
    pub(crate) fn add_inode(&mut self, dir: Ino, name: &str, node: Node, perm: u16) -> Ino {
        let ino = self.st.next_ino;
        self.st.next_ino += 1;
        let inherited = self.st.inode(dir).flags & inode_flags::JOURNAL_DATA;
        let flags = match &node {
            Node::Symlink(t) if t.len() < FAST_SYMLINK_MAX => 0,
            Node::Symlink(_) => inode_flags::EXTENTS,
            _ => inode_flags::EXTENTS | inherited,
        };
        let seq = self.st.seq;
        let links = if matches!(node, Node::Dir { .. }) { 0 } else { 1 };
        let marks = Marks { meta_op: seq, datasync_op: 0, durable_at: seq };
        self.st.inodes.insert(ino, Inode { node, perm: perm & 0o7777, links, flags, marks });
        self.st.entries_mut(dir).insert(name.to_string(), ino);
        self.touch_meta(dir);
        ino
    }

    /// Drops a name's reference to `ino`, freeing the inode with its last name.
    pub(crate) fn drop_link(&mut self, ino: Ino) {
        let inode = self.st.inode_mut(ino);
        let gone = match inode.node {
            Node::Dir { .. } => true,
            _ => {
                inode.links -= 1;
                inode.links == 0
            }
        };
        if gone && self.st.is_open(ino) {
            // ext4_orphan_add: the descriptor keeps it until its last close.
            self.touch_meta(ino);
        } else if gone {
            let removed = self.st.inodes.remove(&ino).expect("dropping a live inode");
            self.st.used_blocks -= inode_blocks(&removed, self.ratio());
        } else {
            self.touch_meta(ino);
        }
    }

    pub(crate) fn file(&self, ino: Ino) -> Option<&FileData> {
        match &self.st.inode(ino).node {
            Node::File(f) => Some(f),
            _ => None,
        }
    }

    pub(crate) fn file_mut(&mut self, ino: Ino) -> &mut FileData {
        match &mut self.st.inode_mut(ino).node {
            Node::File(f) => f,
            _ => panic!("model invariant: file_mut on a non-file"),
        }
    }

    pub(crate) fn stat_of(&self, ino: Ino) -> Stat {
        let inode = self.st.inode(ino);
        let (bs, ratio) = (self.bs(), self.ratio());
        let kind = inode.kind();
        let size = match &inode.node {
            Node::File(f) => f.size,
            Node::Symlink(t) => t.len() as u64,
            Node::Dir { .. } => bs,
        };
        Stat {
            ino,
            kind,
            mode: kind.mode_bits() | inode.perm as u32,
            nlink: self.st.nlink(ino),
            size,
            blocks: if kind == FileKind::Directory { 1 } else { inode_blocks(inode, ratio) } * (bs / 512),
            flags: inode.flags,
            // Tree blocks, and holes a page fault may have allocated: under
            // bigalloc each tree block takes a cluster, and a maybe
            // allocated hole may add its cluster.
            blocks_slack: match &inode.node {
                Node::File(f) => {
                    let maybe: u64 = f.maybe_allocated_in(0..u64::MAX).iter().map(|r| r.end - r.start).sum();
                    let tree = extent_tree_blocks_bound(f.allocated_blocks() + maybe, bs);
                    (tree + f.maybe_allocated_clusters(ratio)) * ratio * (bs / 512)
                }
                _ => 0,
            },
        }
    }

    /// The cheap invariants for what one op touched: the inode each path names
    /// (its data structure; its link count against the names in its parent).
    /// O(size of those inodes), so it can run after every op.
    pub fn check_paths(&self, paths: &[&str]) -> Result<(), String> {
        let bs = self.bs();
        for path in paths {
            let Ok(sp) = split(path) else { continue };
            let Ok(ino) = self.st.resolve(&sp, false) else { continue };
            let inode = self.st.inode(ino);
            match &inode.node {
                Node::File(f) => f.check(bs).map_err(|e| format!("{path} (inode {ino}): {e}"))?,
                Node::Dir { parent, .. } => {
                    // The path's last name usually is the entry; scanning a
                    // large parent for it is the fallback, not the rule.
                    let named = |e: &std::collections::BTreeMap<String, Ino>| {
                        sp.components.last().is_some_and(|name| e.get(*name) == Some(&ino)) || e.values().any(|c| *c == ino)
                    };
                    if ino != ROOT_INO && !self.st.entries(*parent).is_some_and(named) {
                        return Err(format!("{path}: directory {ino} is not in its parent {parent}"));
                    }
                }
                Node::Symlink(t) if t.is_empty() => return Err(format!("{path}: empty symlink target")),
                Node::Symlink(_) => {}
            }
            if inode.links == 0 && !matches!(inode.node, Node::Dir { .. }) {
                return Err(format!("{path}: reachable inode {ino} has no links"));
            }
        }
        Ok(())
    }

    /// Everything the model promises about itself, checked from scratch.
    pub fn check_invariants(&self) -> Result<(), String> {
        let st = &self.st;
        let mut names: std::collections::BTreeMap<Ino, u32> = Default::default();
        let mut reachable = std::collections::BTreeSet::from([ROOT_INO]);
        st.visit(ROOT_INO, "", &mut |_, ino| {
            *names.entry(ino).or_default() += 1;
            reachable.insert(ino);
        });
        let (bs, ratio) = (self.bs(), self.ratio());
        let mut used = 0;
        for (slot, ino) in &st.slots {
            if !st.inodes.get(ino).is_some_and(|i| matches!(i.node, Node::File(_))) {
                return Err(format!("slot {slot} holds {ino}, not a live regular file"));
            }
        }
        for (id, r) in &st.fd_refs {
            if !st.inodes.get(&r.ino).is_some_and(|i| matches!(i.node, Node::File(_))) {
                return Err(format!("file reference {id} (a write's or a read's in flight) holds {}, not a live regular file", r.ino));
            }
            if r.slot.is_some_and(|s| st.slots.get(&s) != Some(&r.ino)) {
                return Err(format!("a write's descriptor reference {id} names slot {:?}, which no longer holds {}", r.slot, r.ino));
            }
        }
        for (ino, inode) in &st.inodes {
            let orphan = inode.links == 0 && matches!(inode.node, Node::File(_)) && st.is_open(*ino);
            if !reachable.contains(ino) && !orphan {
                return Err(format!("inode {ino} is unreachable"));
            }
            if reachable.contains(ino) && orphan {
                return Err(format!("orphan {ino} still has a name"));
            }
            match &inode.node {
                Node::Dir { entries, parent } => {
                    if names.get(ino).copied().unwrap_or(0) > 1 {
                        return Err(format!("directory {ino} has more than one name"));
                    }
                    for child in entries.values() {
                        if let Node::Dir { parent: p, .. } = &st.inode(*child).node {
                            if p != ino {
                                return Err(format!("directory {child} in {ino} names {p} as parent"));
                            }
                        }
                    }
                    if *ino != ROOT_INO && !st.entries(*parent).is_some_and(|e| e.values().any(|c| c == ino)) {
                        return Err(format!("directory {ino} is not in its parent {parent}"));
                    }
                }
                Node::File(f) => {
                    f.check(bs).map_err(|e| format!("inode {ino}: {e}"))?;
                    if !st.touched.contains(ino) && (f.writeback_pending || f.disksize.is_some()) {
                        return Err(format!("inode {ino} has write-back pending but is not marked touched: a sync would miss it"));
                    }
                }
                Node::Symlink(t) => {
                    if t.is_empty() {
                        return Err(format!("symlink {ino} has an empty target"));
                    }
                }
            }
            if !matches!(inode.node, Node::Dir { .. }) && names.get(ino).copied().unwrap_or(0) != inode.links {
                return Err(format!("inode {ino} has links {} but {:?} names", inode.links, names.get(ino)));
            }
            used += inode_blocks(inode, ratio);
        }
        if used != st.used_blocks {
            return Err(format!("used_blocks {} but files hold {used}", st.used_blocks));
        }
        Ok(())
    }
}

/// Symlink targets shorter than this live in the inode (i_block is 60 bytes).
pub const FAST_SYMLINK_MAX: usize = 60;

/// The most extent-tree blocks a file of `data_blocks` can have: one extent
/// per block at worst, four in the inode, (bs - 12) / 12 per tree block. At
/// least one, since ext4 keeps a tree block after the extents that needed it
/// are punched away.
fn extent_tree_blocks_bound(data_blocks: u64, bs: u64) -> u64 {
    let per_block = (bs.saturating_sub(12) / 12).max(2);
    let (mut level, mut total) = (data_blocks, 0u64);
    while level > 4 {
        level = level.div_ceil(per_block);
        total += level;
    }
    total.max(1)
}

/// Data blocks an inode holds, as counted against [`Limits::data_blocks`]:
/// whole clusters of `ratio` blocks (a cluster with any block allocated
/// counts all of its blocks). Directory blocks are layout, the engine's
/// business, and are not counted.
pub(crate) fn inode_blocks(inode: &Inode, ratio: u64) -> u64 {
    match &inode.node {
        Node::File(f) => f.allocated_clusters(ratio) * ratio,
        Node::Symlink(t) if t.len() >= FAST_SYMLINK_MAX => ratio,
        Node::Symlink(_) | Node::Dir { .. } => 0,
    }
}

pub(crate) fn split(path: &str) -> Result<SplitPath<'_>, Errno> {
    SplitPath::parse(path)
}

impl FileSystem for Model {
    fn create(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Create { path: path.into(), perm }));
        self.do_create(path, perm)
    }
    fn mkdir(&mut self, path: &str, perm: u16) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Mkdir { path: path.into(), perm }));
        self.do_mkdir(path, perm)
    }
    fn unlink(&mut self, path: &str) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Unlink { path: path.into() }));
        self.do_unlink(path)
    }
    fn rmdir(&mut self, path: &str) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Rmdir { path: path.into() }));
        self.do_rmdir(path)
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Rename { from: from.into(), to: to.into() }));
        self.do_rename(from, to, None)
    }
    fn renameat2(&mut self, from: &str, to: &str, flags: crate::op::RenameFlags) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Renameat2 { from: from.into(), to: to.into(), flags }));
        self.do_rename(from, to, Some(flags))
    }
    fn link(&mut self, from: &str, to: &str) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Link { from: from.into(), to: to.into() }));
        self.do_link(from, to)
    }
    fn symlink(&mut self, target: &str, path: &str) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Symlink { target: target.into(), path: path.into() }));
        self.do_symlink(target, path)
    }
    fn readlink(&mut self, path: &str) -> Result<String, Errno> {
        self.do_readlink(path)
    }
    fn readdir(&mut self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        self.do_readdir(path)
    }
    fn stat(&mut self, path: &str) -> Result<Stat, Errno> {
        let ino = self.st.resolve(&split(path)?, false)?;
        let stat = self.stat_of(ino);
        // The flags come through an O_RDONLY|O_NOFOLLOW descriptor: its
        // close is a release like any other.
        self.release_looking(ino, || Op::Stat { path: path.into() });
        Ok(stat)
    }
    fn write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        self.write_literal(path, offset, data.into())
    }
    fn write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.record(|| Call::Op(Op::Write { path: path.into(), offset, len, seed }));
        self.do_write(path, offset, len as usize, Source::Pattern { seed, at: 0 })
    }
    fn read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.do_read(path, offset, len)
    }
    fn truncate(&mut self, path: &str, size: u64) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Truncate { path: path.into(), size }));
        self.do_truncate(path, size)
    }
    fn fsync(&mut self, path: &str) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Fsync { path: path.into() }));
        self.do_fsync(path, false)
    }
    fn fdatasync(&mut self, path: &str) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Fdatasync { path: path.into() }));
        self.do_fsync(path, true)
    }
    fn sync(&mut self) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Sync));
        self.do_sync();
        Ok(())
    }
    fn fallocate(&mut self, path: &str, mode: FallocFlags, offset: u64, len: u64) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Fallocate { path: path.into(), mode, offset, len }));
        self.do_fallocate(path, mode, offset, len)
    }
    fn fiemap(&mut self, path: &str, req: FiemapRequest) -> Result<Vec<FiemapExtent>, Errno> {
        if req.syncs() {
            let FiemapRequest { start, len, flags } = req;
            self.record(|| Call::Op(Op::Fiemap { path: path.into(), start, len, flags, count_only: false }));
        }
        self.do_fiemap(path, req)
    }
    fn fiemap_count(&mut self, path: &str, req: FiemapRequest) -> Outcome {
        let extents = self.fiemap(path, req)?;
        Ok(Reply::ExtentsToCount { extents, block_size: self.mount.block_size })
    }
    fn set_journal_data(&mut self, path: &str, enable: bool) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::SetJournalData { path: path.into(), enable }));
        self.do_set_journal_data(path, enable)
    }
    fn chattr(&mut self, path: &str, flag: crate::op::ChattrFlag, enable: bool) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Chattr { path: path.into(), flag, enable }));
        self.do_chattr(path, flag, enable)
    }
    fn append(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        self.append_literal(path, data.into())
    }
    fn append_pattern(&mut self, path: &str, len: u32, seed: u64) -> Result<u64, Errno> {
        self.record(|| Call::Op(Op::Append { path: path.into(), len, seed }));
        self.do_append(path, len as usize, Source::Pattern { seed, at: 0 })
    }
    fn lseek(&mut self, path: &str, offset: u64, whence: crate::op::SeekWhence) -> Result<crate::op::SeekChoices, Errno> {
        self.do_lseek(path, offset, whence)
    }
    fn rewrite(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        self.rewrite_literal(path, data.into())
    }
    fn open(&mut self, path: &str, slot: u8) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Open { path: path.into(), slot }));
        self.do_open(path, slot)
    }
    fn close(&mut self, slot: u8) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::Close { slot }));
        self.do_close(slot)
    }
    fn pread(&mut self, slot: u8, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        self.do_pread(slot, offset, len)
    }
    fn fsync_fd(&mut self, slot: u8) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::FsyncFd { slot }));
        self.do_fsync_fd(slot)
    }
    fn ftruncate(&mut self, slot: u8, size: u64) -> Result<(), Errno> {
        self.record(|| Call::Op(Op::FtruncateFd { slot, size }));
        self.do_ftruncate(slot, size)
    }
    fn pwrite(&mut self, slot: u8, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let bytes: Arc<[u8]> = data.into();
        let len = bytes.len();
        self.record(|| Call::WriteFd { slot, offset, data: bytes.clone() });
        self.do_pwrite(slot, offset, len, Source::Literal { bytes, at: 0 })
    }
    fn pwrite_pattern(&mut self, slot: u8, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.record(|| Call::Op(Op::WriteFd { slot, offset, len, seed }));
        self.do_pwrite(slot, offset, len as usize, Source::Pattern { seed, at: 0 })
    }
    fn direct_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let bytes: Arc<[u8]> = data.into();
        let len = bytes.len();
        self.record(|| Call::DirectWrite { path: path.into(), offset, data: bytes.clone() });
        self.do_direct_write(path, offset, len, Source::Literal { bytes, at: 0 })
    }
    fn direct_write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.record(|| Call::Op(Op::DirectWrite { path: path.into(), offset, len, seed }));
        self.do_direct_write(path, offset, len as usize, Source::Pattern { seed, at: 0 })
    }
    fn map_write(&mut self, path: &str, offset: u64, data: &[u8]) -> Result<u64, Errno> {
        let bytes: Arc<[u8]> = data.into();
        let len = bytes.len();
        self.record(|| Call::MapWrite { path: path.into(), offset, data: bytes.clone() });
        self.do_map_write(path, offset, len, Source::Literal { bytes, at: 0 })
    }
    fn map_write_pattern(&mut self, path: &str, offset: u64, len: u32, seed: u64) -> Result<u64, Errno> {
        self.record(|| Call::Op(Op::MapWrite { path: path.into(), offset, len, seed }));
        self.do_map_write(path, offset, len as usize, Source::Pattern { seed, at: 0 })
    }
    fn direct_read(&mut self, path: &str, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        match self.do_direct_read(path, offset, len)? {
            Reply::Data(d) | Reply::DataOrEinval(d) => Ok(d),
            other => unreachable!("direct read answered {other:?}"),
        }
    }
    fn direct_read_outcome(&mut self, path: &str, offset: u64, len: u32) -> Outcome {
        self.do_direct_read(path, offset, len)
    }
    fn rewrite_pattern(&mut self, path: &str, len: u32, seed: u64) -> Result<u64, Errno> {
        // Logged as its two steps (see rewrite_literal).
        self.record(|| Call::Op(Op::Truncate { path: path.into(), size: 0 }));
        self.record(|| Call::Op(Op::Write { path: path.into(), offset: 0, len, seed }));
        self.do_rewrite(path, len as usize, Source::Pattern { seed, at: 0 })
    }
}

#[cfg(test)]
mod tests {
    use crate::op::{FallocFlags, FileKind};
    use crate::{Errno, FileSystem, Limits, Model, MountConfig};

    const KIB: u64 = 1024;
    const PUNCH: FallocFlags = FallocFlags(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE);

    fn model(options: &str, data_blocks: Option<u64>) -> Model {
        let config = options.parse::<MountConfig>().unwrap();
        let mut m = Model::with_limits(&config, Limits { data_blocks, inodes: None }).unwrap();
        m.create("/f", 0o644).unwrap();
        m
    }

    fn blocks(m: &mut Model) -> u64 {
        m.stat("/f").unwrap().blocks
    }

    #[test]
    fn bigalloc_counts_each_cluster_with_an_allocated_block_once() {
        let mut m = model("bs=4k,cluster=16k", None);
        m.write("/f", 0, &[1]).unwrap();
        assert_eq!(blocks(&mut m), 32, "the delayed block reserves its cluster");
        assert_eq!(m.used_blocks(), 4);
        m.write("/f", 4 * KIB, &[2]).unwrap();
        assert_eq!(blocks(&mut m), 32, "block 1 shares the cluster");
        m.write("/f", 16 * KIB, &[3]).unwrap();
        assert_eq!(blocks(&mut m), 64, "block 4 starts the next one");
        m.sync().unwrap();
        assert_eq!(blocks(&mut m), 64, "write-back allocates the clusters reserved");
        m.fallocate("/f", FallocFlags(FallocFlags::KEEP_SIZE), 20 * KIB, 4 * KIB).unwrap();
        assert_eq!(blocks(&mut m), 64, "preallocation inside an allocated cluster");
        m.check_invariants().unwrap();
    }

    #[test]
    fn bigalloc_slack_is_in_whole_clusters() {
        let mut m = model("bs=4k,cluster=16k", None);
        m.write("/f", 0, &[1]).unwrap();
        assert_eq!(m.stat("/f").unwrap().blocks_slack, 32, "one tree block, a cluster of its own");
        m.truncate("/f", 64 * KIB).unwrap();
        // A page fault backs block 8; a folio up to the whole file may back
        // the rest: blocks 1..4 share cluster 0, blocks 4..8 and 9..16 make
        // two more clusters, and block 8's cluster is allocated already.
        m.map_write("/f", 32 * KIB, &[2]).unwrap();
        let stat = m.stat("/f").unwrap();
        assert_eq!(stat.blocks, 64);
        assert_eq!(stat.blocks_slack, 32 + 2 * 32);
        m.symlink(&"t".repeat(60), "/slow").unwrap();
        assert_eq!(m.stat("/slow").unwrap().blocks, 32, "a slow symlink's block is a cluster");
        assert_eq!(m.stat("/slow").unwrap().kind, FileKind::Symlink);
        assert_eq!(m.used_blocks(), 12);
        m.check_invariants().unwrap();
    }

    #[test]
    fn bigalloc_frees_a_cluster_with_its_last_block() {
        let mut m = model("bs=4k,cluster=16k", None);
        m.write("/f", 0, &[1; 24 << 10]).unwrap();
        m.sync().unwrap();
        assert_eq!(blocks(&mut m), 64);
        m.fallocate("/f", PUNCH, 0, 4 * KIB).unwrap();
        assert_eq!(blocks(&mut m), 64, "block 1 still holds cluster 0");
        m.fallocate("/f", PUNCH, 4 * KIB, 12 * KIB).unwrap();
        assert_eq!(blocks(&mut m), 32, "cluster 0 is empty now");
        assert_eq!(m.used_blocks(), 4);
        m.truncate("/f", 17 * KIB).unwrap();
        assert_eq!(blocks(&mut m), 32, "the partial cluster stays with its block 4");
        m.truncate("/f", 16 * KIB).unwrap();
        assert_eq!(blocks(&mut m), 0);
        assert_eq!(m.used_blocks(), 0);
        m.check_invariants().unwrap();
    }

    #[test]
    fn bigalloc_collapse_and_insert_need_cluster_alignment() {
        let mut m = model("bs=4k,cluster=16k", None);
        m.write("/f", 0, &[1; 64 << 10]).unwrap();
        let collapse = FallocFlags(FallocFlags::COLLAPSE_RANGE);
        let insert = FallocFlags(FallocFlags::INSERT_RANGE);
        assert_eq!(m.fallocate("/f", collapse, 0, 4 * KIB), Err(Errno::EINVAL));
        assert_eq!(m.fallocate("/f", collapse, 4 * KIB, 16 * KIB), Err(Errno::EINVAL));
        assert_eq!(m.fallocate("/f", insert, 16 * KIB, 4 * KIB), Err(Errno::EINVAL));
        m.fallocate("/f", collapse, 16 * KIB, 16 * KIB).unwrap();
        assert_eq!(m.stat("/f").unwrap().size, 48 << 10);
        assert_eq!(blocks(&mut m), 96);
        m.fallocate("/f", insert, 16 * KIB, 16 * KIB).unwrap();
        assert_eq!(m.stat("/f").unwrap().size, 64 << 10);
        assert_eq!(blocks(&mut m), 96, "the inserted clusters are a hole");
        m.check_invariants().unwrap();
        let mut plain = model("bs=4k", None);
        plain.write("/f", 0, &[1; 64 << 10]).unwrap();
        assert_eq!(plain.fallocate("/f", collapse, 0, 4 * KIB), Ok(()), "a block is enough without bigalloc");
    }

    #[test]
    fn bigalloc_enospc_comes_when_a_cluster_does_not_fit() {
        let mut m = model("bs=4k,cluster=16k", Some(6));
        m.write("/f", 0, &[1]).unwrap();
        m.write("/f", 12 * KIB, &[1]).unwrap();
        assert_eq!(m.used_blocks(), 4);
        assert_eq!(m.write("/f", 16 * KIB, &[1]), Err(Errno::ENOSPC), "two blocks are free, a cluster is not");
        let allocate = FallocFlags(FallocFlags::KEEP_SIZE);
        assert_eq!(m.fallocate("/f", allocate, 16 * KIB, 4 * KIB), Err(Errno::ENOSPC));
        assert_eq!(m.direct_write("/f", 16 * KIB, &[1; 4096]), Err(Errno::ENOSPC));
        assert_eq!(m.symlink(&"t".repeat(60), "/slow"), Err(Errno::ENOSPC));
        m.fallocate("/f", allocate, 4 * KIB, 8 * KIB).unwrap();
        m.direct_write("/f", 4 * KIB, &[1; 4096]).unwrap();
        assert_eq!(m.used_blocks(), 4, "holes inside an allocated cluster take no space");
        m.check_invariants().unwrap();
        let mut m = model("bs=4k,cluster=16k", Some(8));
        m.write("/f", 0, &[1]).unwrap();
        m.write("/f", 16 * KIB, &[1]).unwrap();
        assert_eq!(m.used_blocks(), 8);
    }

    #[derive(Clone, Debug)]
    enum Step {
        Write(u64, u64),
        MapWrite(u64, u64),
        DirectWrite(u64, u64),
        Fallocate(u32, u64, u64),
        Truncate(u64),
        Sync,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let modes = prop_oneof![
            Just(0),
            Just(FallocFlags::KEEP_SIZE),
            Just(FallocFlags::PUNCH_HOLE | FallocFlags::KEEP_SIZE),
            Just(FallocFlags::ZERO_RANGE),
            Just(FallocFlags::COLLAPSE_RANGE),
            Just(FallocFlags::INSERT_RANGE),
        ];
        prop_oneof![
            (0u64..96, 1u64..24).prop_map(|(b, n)| Step::Write(b * 4096 + b % 3, n * 2800)),
            (0u64..96, 1u64..24).prop_map(|(b, n)| Step::MapWrite(b * 4096, n * 2800)),
            (0u64..96, 1u64..8).prop_map(|(b, n)| Step::DirectWrite(b * 4096 + b % 2 * 512, n * 4096)),
            (modes, 0u64..96, 1u64..24).prop_map(|(m, b, n)| Step::Fallocate(m, b * 4096, n * 4096)),
            (0u64..96).prop_map(|b| Step::Truncate(b * 4000)),
            Just(Step::Sync),
        ]
    }

    proptest::proptest! {
        /// Under bigalloc st_blocks is the clusters holding an allocated
        /// block, space never passes the cap, and used_blocks stays the sum
        /// over files whatever the ops.
        #[test]
        fn bigalloc_space_is_whole_clusters(steps in proptest::collection::vec(step(), 1..40), cap in 8u64..64) {
            let mut m = model("bs=4k,cluster=16k", Some(cap));
            for s in steps {
                let _ = match s {
                    Step::Write(o, n) => m.write("/f", o, &vec![1; n as usize]).map(drop),
                    Step::MapWrite(o, n) => m.map_write("/f", o, &vec![2; n as usize]).map(drop),
                    Step::DirectWrite(o, n) => m.direct_write("/f", o, &vec![3; n as usize]).map(drop),
                    Step::Fallocate(mode, o, n) => m.fallocate("/f", FallocFlags(mode), o, n),
                    Step::Truncate(size) => m.truncate("/f", size),
                    Step::Sync => m.sync(),
                };
                proptest::prop_assert_eq!(m.check_invariants(), Ok(()));
                proptest::prop_assert!(m.used_blocks() <= cap);
                let ino = m.st.resolve(&super::split("/f").unwrap(), false).unwrap();
                let f = m.file(ino).unwrap();
                let clusters: std::collections::BTreeSet<u64> = f.blocks.iter().flat_map(|(r, _)| r).map(|b| b / 4).collect();
                proptest::prop_assert_eq!(m.used_blocks(), clusters.len() as u64 * 4);
                proptest::prop_assert_eq!(blocks(&mut m), clusters.len() as u64 * 32);
            }
        }
    }

    /// Without bigalloc the numbers are the ones the model gave before it
    /// knew clusters.
    #[test]
    fn one_block_clusters_count_as_before() {
        let mut m = model("bs=1k", Some(64));
        let mut seen = Vec::new();
        let mut look = |m: &mut Model| {
            let s = m.stat("/f").unwrap();
            seen.push((s.blocks, s.blocks_slack, m.used_blocks()));
        };
        m.write("/f", 0, &[1]).unwrap();
        look(&mut m);
        m.write("/f", 5000, &[2; 3000]).unwrap();
        look(&mut m);
        m.fallocate("/f", FallocFlags(FallocFlags::KEEP_SIZE), 9000, 10_000).unwrap();
        look(&mut m);
        m.fallocate("/f", PUNCH, 1024, 5000).unwrap();
        look(&mut m);
        m.truncate("/f", 60_000).unwrap();
        m.map_write("/f", 30_000, &[3; 10]).unwrap();
        look(&mut m);
        m.fallocate("/f", FallocFlags(FallocFlags::COLLAPSE_RANGE), 2048, 3072).unwrap();
        look(&mut m);
        m.truncate("/f", 6000).unwrap();
        look(&mut m);
        m.symlink(&"t".repeat(60), "/slow").unwrap();
        assert_eq!(m.write("/f", 100_000, &[4; 60 << 10]), Err(Errno::ENOSPC));
        look(&mut m);
        m.check_invariants().unwrap();
        let before = [(2, 2, 1), (10, 2, 5), (32, 2, 16), (30, 2, 15), (38, 82, 19), (38, 76, 19), (10, 4, 5), (10, 4, 6)];
        assert_eq!(seen, before, "(st_blocks, blocks_slack, used_blocks) after each step");
    }
}
