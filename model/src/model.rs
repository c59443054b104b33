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
    /// Data blocks all files may hold together.
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
}

impl Model {
    pub fn new(config: &MountConfig) -> Result<Model, ConfigError> {
        Self::with_limits(config, Limits::default())
    }

    pub fn with_limits(config: &MountConfig, limits: Limits) -> Result<Model, ConfigError> {
        let mount = config.validate()?;
        let st = State::new();
        let log = Some(CrashLog::new(st.clone()));
        Ok(Model { mount, limits, st, log, harness_looking: false, vfs: VfsVersion::default() })
    }

    pub(crate) fn from_state(mount: EffectiveMount, limits: Limits, st: State, logged: bool) -> Model {
        let log = logged.then(|| CrashLog::new(st.clone()));
        Model { mount, limits, st, log, harness_looking: false, vfs: VfsVersion::default() }
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
            self.st.used_blocks -= inode_blocks(&removed);
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
        let bs = self.bs();
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
            blocks: if kind == FileKind::Directory { 1 } else { inode_blocks(inode) } * (bs / 512),
            flags: inode.flags,
            // Tree blocks, and holes a page fault may have allocated.
            blocks_slack: match &inode.node {
                Node::File(f) => {
                    let maybe: u64 = f.maybe_allocated_in(0..u64::MAX).iter().map(|r| r.end - r.start).sum();
                    (extent_tree_blocks_bound(inode_blocks(inode) + maybe, bs) + maybe) * (bs / 512)
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
        let bs = self.bs();
        let mut used = 0;
        for (slot, ino) in &st.slots {
            if !st.inodes.get(ino).is_some_and(|i| matches!(i.node, Node::File(_))) {
                return Err(format!("slot {slot} holds {ino}, not a live regular file"));
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
            used += inode_blocks(inode);
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

/// Data blocks an inode holds, as counted against [`Limits::data_blocks`].
/// Directory blocks are layout, the engine's business, and are not counted.
pub(crate) fn inode_blocks(inode: &Inode) -> u64 {
    match &inode.node {
        Node::File(f) => f.allocated_blocks(),
        Node::Symlink(t) if t.len() >= FAST_SYMLINK_MAX => 1,
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
