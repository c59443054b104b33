//! What survives a crash, and the check that a recovered filesystem is a state
//! the model allows.
//!
//! The rules, for a filesystem with a journal:
//! - **Namespace** (names, kinds, link counts, symlink targets, flags) recovers
//!   to the state after some prefix of the ops: jbd2 commits whole handles in
//!   order. The prefix reaches at least the namespace floor: everything before
//!   a sync, a journal-flag switch, or the last metadata change of an inode
//!   that was fsync'd (for fdatasync, its last size or allocation change).
//! - **Sizes**: a file's size is one it had at or after its last durability
//!   point (fsync, fdatasync, sync, journal-flag switch, or its creation).
//! - **Data**: each 512-byte sector of a file reads as that sector in some
//!   version of the file at or after its last durability point, so fsync'd
//!   data survives unless overwritten later, torn writes mix only whole
//!   sectors, and data=ordered never shows stale blocks (the block holding
//!   the durable EOF may show its own old tail past it). Under data=writeback
//!   a block allocated since the durability point (or freed and allocated
//!   again), and any byte past the size at that point, may hold anything.
//!   A data=journal inode's blocks are logged and replayed whole: each block
//!   reads as one version, and the durable EOF block shows no old tail.
//!   A refused extending direct write's bytes past EOF reached the disk: a
//!   sector may show them (docs/direct-io.md, "After a crash").
//!
//! What this check cannot see: which prefix the journal really committed (any
//! consistent one passes), ordered mode's guarantee that an extending write's
//! data precedes its size (zeros from an older version pass), inode numbers,
//! and the contents of a file collapsed or shifted since its durability point
//! (an overwrite after the shift may land at the pre-shift offset; only its
//! size is checked). Without a journal nothing is checked; the state is only adopted.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use crate::config::{EffectiveMount, InodeJournalMode};
use crate::data::FileData;
use crate::fs::FileSystem;
use crate::crash_log::{Call, CrashLog};
use crate::model::{Limits, Model};
use crate::op::{fiemap_flags, FiemapRequest, FileKind, Op, MAX_IO_LEN};
use crate::state::{Ino, Node, State};
use crate::Errno;

/// Sector size at which torn writes are allowed to mix versions.
pub const SECTOR: u64 = 512;

/// Upper bound on ops a crash check replays; a workload syncs more often.
pub const MAX_LOGGED_CALLS: usize = 1 << 20;


/// One name as the crash check compares it: everything but the inode number
/// (physical) and file size and contents (checked per file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub kind: FileKind,
    pub mode: u32,
    pub nlink: u32,
    pub flags: u32,
    pub target: Option<String>,
}

/// A whole tree as seen through [`FileSystem`] calls.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TreeView {
    pub nodes: BTreeMap<String, NodeView>,
    /// Path -> (the filesystem's inode number, size) for regular files.
    pub files: BTreeMap<String, (u64, u64)>,
    /// Path -> the filesystem's inode number, for every name.
    pub inos: BTreeMap<String, u64>,
}

/// Why a recovered state is not one the model allows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CrashViolation {
    /// The recovered filesystem failed a call needed to look at it.
    Unreadable { call: String, errno: Errno },
    /// No prefix of the ops in `floor..=end` gives the recovered namespace.
    Namespace { floor: u64, end: u64, closest: u64, difference: String },
    Size { path: String, size: u64, allowed: Vec<u64> },
    Data { path: String, offset: u64, detail: String },
    /// The recovered filesystem contradicts itself (e.g. nlink vs names).
    Inconsistent { path: String, detail: String },
}

impl fmt::Display for CrashViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CrashViolation::Unreadable { call, errno } => write!(f, "recovered fs failed {call}: {errno}"),
            CrashViolation::Namespace { floor, end, closest, difference } => write!(
                f,
                "recovered namespace matches no op prefix in {floor}..={end}; closest is {closest}: {difference}"
            ),
            CrashViolation::Size { path, size, allowed } => {
                write!(f, "{path}: recovered size {size} is none of the allowed {allowed:?}")
            }
            CrashViolation::Data { path, offset, detail } => write!(f, "{path}: sector at {offset}: {detail}"),
            CrashViolation::Inconsistent { path, detail } => write!(f, "{path}: {detail}"),
        }
    }
}

impl std::error::Error for CrashViolation {}

/// The result of an allowed crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CrashVerdict {
    /// Sequence number of the op prefix the namespace matched; None unchecked.
    pub prefix: Option<u64>,
    pub files_checked: usize,
}

/// Everything needed to judge a crash that happens now.
#[derive(Clone, Debug)]
pub struct CrashEnvelope {
    mount: EffectiveMount,
    limits: Limits,
    base: State,
    calls: Vec<Call>,
    floor: u64,
    end: u64,
    durable_at: BTreeMap<Ino, u64>,
    journal_mode: BTreeMap<Ino, InodeJournalMode>,
}

impl Model {
    /// Keeps (or stops keeping) the log of calls since the last sync that
    /// crash checks replay. It holds a copy of every write's data, so runs
    /// without crashes turn it off. On by default.
    pub fn set_crash_log(&mut self, on: bool) {
        self.log = on.then(|| CrashLog::new(self.st.clone()));
    }

    pub fn crash_log_enabled(&self) -> bool {
        self.log.is_some()
    }

    /// The set of states a crash right now may recover to.
    ///
    /// Panics if the crash log is off ([`Model::set_crash_log`]): asking what a
    /// crash allows without having kept the history is a bug in the caller.
    pub fn crash_envelope(&self) -> CrashEnvelope {
        let log = self.log.as_ref().expect("crash_envelope needs the crash log (Model::set_crash_log(true))");
        // A sync made every inode durable, whatever its own mark says.
        let durable_at = self.st.inodes.iter().map(|(i, n)| (*i, n.marks.durable_at.max(self.st.synced_at))).collect();
        let journal_mode = self.st.inodes.keys().map(|i| (*i, self.journal_mode(*i))).collect();
        CrashEnvelope {
            mount: self.mount,
            limits: self.limits,
            base: log.base.clone(),
            calls: log.calls.clone(),
            floor: self.st.namespace_floor,
            end: self.st.seq,
            durable_at,
            journal_mode,
        }
    }

    /// Ops logged since the last sync (what a crash check would replay).
    pub fn logged_calls(&self) -> usize {
        self.log.as_ref().map_or(0, |l| l.calls.len())
    }

    fn replay(&mut self, call: &Call) {
        let before = self.st.seq;
        self.replay_call(call);
        // One call of the log is one step of the replay (a folio choice,
        // learnt from the target, none), whatever the replayed op logs of
        // its own: a split fsync's call replays whole, so its close comes
        // where the fsync returned, not where it began, and a later read's
        // close no longer changes (nor logs) anything.
        self.st.seq = before + u64::from(!matches!(call, Call::FolioChoice { .. }));
    }

    fn replay_call(&mut self, call: &Call) {
        // Outcomes were checked when the op first ran; replay wants only state.
        let _ = match call {
            Call::Op(op) => self.apply(op).map(|_| ()),
            Call::Write { path, offset, data } => self.write_literal(path, *offset, data.clone()).map(|_| ()),
            Call::Append { path, data } => self.append_literal(path, data.clone()).map(|_| ()),
            Call::WriteFd { slot, offset, data } => self.pwrite(*slot, *offset, data).map(|_| ()),
            Call::DirectWrite { path, offset, data } => self.direct_write(path, *offset, data).map(|_| ()),
            Call::MapWrite { path, offset, data } => self.map_write(path, *offset, data).map(|_| ()),
            Call::FolioChoice { path, span, has } => {
                self.settle_folio_choice(path, span.clone(), has);
                Ok(())
            }
            Call::WritePart { ino, offset, len, seed, at } => {
                self.replay_write_part(*ino, *offset, *len, *seed, *at);
                Ok(())
            }
            Call::FallocatePart { ino, blocks, grow_to } => {
                self.replay_fallocate_part(*ino, blocks.clone(), *grow_to);
                Ok(())
            }
            Call::PunchPart { ino, offset, end, blocks, piece } => {
                self.replay_punch_part(*ino, *offset, *end, blocks.clone(), piece.clone());
                Ok(())
            }
            Call::DirectWriteSubmit { ino, offset, len } => {
                self.replay_direct_write_submit(*ino, *offset, *len);
                Ok(())
            }
            Call::DirectWriteDone { ino, offset, len, seed, submitted } => {
                self.replay_direct_write_done(*ino, *offset, *len, *seed, *submitted);
                Ok(())
            }
            Call::TruncateFile { ino, size } => {
                self.record(|| Call::TruncateFile { ino: *ino, size: *size });
                if self.st.inodes.contains_key(ino) {
                    let _ = self.truncate_checked(*ino, *size);
                }
                Ok(())
            }
            Call::FdGet { slot, id } => {
                self.take_fd_ref(*slot, *id);
                Ok(())
            }
            Call::FdPut { id } => {
                self.fdput(*id);
                Ok(())
            }
            Call::ReadClose { ino } => {
                self.replay_read_close(*ino);
                Ok(())
            }
        };
    }
}

/// The file whose data `call` changed, looked up after it ran.
fn call_file(replay: &Model, call: &Call) -> Option<Ino> {
    match call {
        Call::WriteFd { slot, .. } | Call::Op(Op::WriteFd { slot, .. } | Op::FtruncateFd { slot, .. }) => replay.st.slots.get(slot).copied(),
        Call::WritePart { ino, .. }
        | Call::FallocatePart { ino, .. }
        | Call::PunchPart { ino, .. }
        | Call::TruncateFile { ino, .. }
        | Call::DirectWriteSubmit { ino, .. }
        | Call::DirectWriteDone { ino, .. } => replay.st.inodes.contains_key(ino).then_some(*ino),
        _ => call_path(call).and_then(|p| replay.open_path(p).ok()),
    }
}

fn call_path(call: &Call) -> Option<&str> {
    match call {
        Call::Write { path, .. } | Call::Append { path, .. } | Call::DirectWrite { path, .. } | Call::MapWrite { path, .. } | Call::FolioChoice { path, .. } => Some(path),
        Call::Op(
            Op::Create { path, .. }
            | Op::Write { path, .. }
            | Op::DirectWrite { path, .. }
            | Op::MapWrite { path, .. }
            | Op::Append { path, .. }
            | Op::Truncate { path, .. }
            | Op::Fallocate { path, .. },
        ) => Some(path),
        _ => None,
    }
}

fn is_shift(call: &Call) -> bool {
    matches!(call, Call::Op(Op::Fallocate { mode, .. }) if mode.0 & (crate::op::FallocFlags::COLLAPSE_RANGE | crate::op::FallocFlags::INSERT_RANGE) != 0)
}

fn unreadable(call: String) -> impl FnOnce(Errno) -> CrashViolation {
    move |errno| CrashViolation::Unreadable { call, errno }
}

/// Looks at a whole tree through the filesystem interface.
pub fn view_tree(fs: &mut dyn FileSystem) -> Result<TreeView, CrashViolation> {
    let mut view = TreeView::default();
    let mut pending = vec!["/".to_string()];
    while let Some(path) = pending.pop() {
        let st = fs.stat(&path).map_err(unreadable(format!("stat {path}")))?;
        let target = match st.kind {
            FileKind::Symlink => Some(fs.readlink(&path).map_err(unreadable(format!("readlink {path}")))?),
            _ => None,
        };
        if st.kind == FileKind::Regular {
            view.files.insert(path.clone(), (st.ino, st.size));
        }
        view.inos.insert(path.clone(), st.ino);
        if st.kind == FileKind::Directory {
            for e in fs.readdir(&path).map_err(unreadable(format!("readdir {path}")))? {
                let child = if path == "/" { format!("/{}", e.name) } else { format!("{path}/{}", e.name) };
                pending.push(child);
            }
        }
        view.nodes.insert(path, NodeView { kind: st.kind, mode: st.mode, nlink: st.nlink, flags: st.flags, target });
    }
    Ok(view)
}

/// The most file data one crash check or adoption reads per file.
pub const MAX_CHECKED_BYTES: u64 = 1 << 30;

/// Byte ranges FIEMAP reports as holding data (written or delayed), clipped to
/// `size`. Holes and unwritten extents read as zeros and are taken on trust.
pub fn data_ranges(fs: &mut dyn FileSystem, path: &str, size: u64) -> Result<Vec<Range<u64>>, CrashViolation> {
    let extents = fs.fiemap(path, FiemapRequest::whole(0)).map_err(unreadable(format!("fiemap {path}")))?;
    Ok(extents
        .iter()
        // Unwritten reads as zeros, unless dirty pages sit over it: only a
        // model, never a remounted filesystem, reports those.
        .filter(|e| e.flags & fiemap_flags::UNWRITTEN == 0 || e.writeback_pending)
        .map(|e| e.logical.min(size)..e.logical.saturating_add(e.length).min(size))
        .filter(|r| !r.is_empty())
        .collect())
}

/// Sorts and merges ranges.
pub fn merge_ranges(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Reads `range` of a file in bounded chunks.
pub fn read_range(fs: &mut dyn FileSystem, path: &str, range: Range<u64>) -> Result<Vec<u8>, CrashViolation> {
    let mut out = Vec::with_capacity((range.end - range.start) as usize);
    while (out.len() as u64) < range.end - range.start {
        let at = range.start + out.len() as u64;
        let chunk = (range.end - at).min(MAX_IO_LEN as u64) as u32;
        let got = fs.read(path, at, chunk).map_err(unreadable(format!("read {path} at {at}")))?;
        if got.is_empty() {
            return Err(CrashViolation::Inconsistent { path: path.into(), detail: format!("read at {at} hit EOF inside the file") });
        }
        out.extend_from_slice(&got);
    }
    Ok(out)
}

fn describe_difference(a: &TreeView, b: &TreeView) -> (usize, String) {
    let mut diffs = Vec::new();
    for (p, n) in &a.nodes {
        match b.nodes.get(p) {
            None => diffs.push(format!("{p} only in recovered")),
            Some(m) if m != n => diffs.push(format!("{p}: recovered {n:?}, model {m:?}")),
            _ => {}
        }
    }
    for p in b.nodes.keys().filter(|p| !a.nodes.contains_key(*p)) {
        diffs.push(format!("{p} missing from recovered"));
    }
    let n = diffs.len();
    diffs.truncate(3);
    (n, diffs.join("; "))
}

/// Bytes `[off, off+len)` of a version, zeros past its size.
fn version_bytes(v: &FileData, off: u64, len: u64) -> Vec<u8> {
    let mut out = v.read(off, len);
    out.resize(len as usize, 0);
    out
}

impl CrashEnvelope {
    /// Judges a recovered filesystem. On success the caller adopts the
    /// recovered state ([`Model::adopt`]) and carries on.
    pub fn check(&self, recovered: &mut dyn FileSystem) -> Result<CrashVerdict, CrashViolation> {
        if self.mount.data.is_none() {
            return Ok(CrashVerdict { prefix: None, files_checked: 0 });
        }
        let seen = view_tree(recovered)?;
        let mut replay = Model::from_state(self.mount, self.limits, self.base.clone(), false);
        replay.past_eof_writes = Some(Vec::new());
        let mut versions: BTreeMap<Ino, Vec<FileData>> = BTreeMap::new();
        // Bytes a refused direct write left on disk past EOF: not a version
        // (no size of theirs can recover), but a sector may show them.
        let mut past_eof: BTreeMap<Ino, Vec<FileData>> = BTreeMap::new();
        // Files collapsed or shifted since their durability point: an in-place
        // overwrite after the shift may reach disk before the shift commits
        // (ext4 forces a commit only under data=journal), so after a crash its
        // bytes can sit at the pre-shift offset. Only their sizes are checked.
        let mut shifted: std::collections::BTreeSet<Ino> = std::collections::BTreeSet::new();
        for (ino, inode) in &replay.st.inodes {
            if let Node::File(f) = &inode.node {
                versions.insert(*ino, vec![f.clone()]);
            }
        }
        let mut candidates: Vec<(u64, TreeView)> = Vec::new();
        let mut closest = (usize::MAX, 0, String::new());
        let mut consider = |replay: &mut Model, candidates: &mut Vec<(u64, TreeView)>| -> Result<(), CrashViolation> {
            if replay.seq() < self.floor {
                return Ok(());
            }
            let view = replay.looking(|m| view_tree(m))?;
            let (n, diff) = describe_difference(&seen, &view);
            if n == 0 {
                candidates.push((replay.seq(), view));
            } else if n <= closest.0 {
                closest = (n, replay.seq(), diff);
            }
            Ok(())
        };
        consider(&mut replay, &mut candidates)?;
        let durable_of = |ino: Ino| self.durable_at.get(&ino).copied().unwrap_or(0);
        for call in &self.calls {
            replay.replay(call);
            let seq = replay.seq();
            if let Some(ino) = call_file(&replay, call) {
                if let Some(f) = replay.file(ino) {
                    let durable = durable_of(ino);
                    if seq > durable && is_shift(call) {
                        shifted.insert(ino);
                    }
                    let list = versions.entry(ino).or_default();
                    if seq <= durable {
                        *list = vec![f.clone()];
                        past_eof.remove(&ino);
                    } else {
                        list.push(f.clone());
                    }
                }
            }
            for (ino, on_disk) in replay.past_eof_writes.iter_mut().flat_map(std::mem::take) {
                if seq > durable_of(ino) {
                    past_eof.entry(ino).or_default().push(on_disk);
                }
            }
            consider(&mut replay, &mut candidates)?;
        }
        debug_assert_eq!(replay.seq(), self.end, "replay must land where the model is");
        if candidates.is_empty() {
            return Err(CrashViolation::Namespace {
                floor: self.floor,
                end: self.end,
                closest: closest.1,
                difference: closest.2,
            });
        }
        let mut first_error = None;
        for (prefix, view) in candidates.iter().rev() {
            match self.check_files(recovered, &seen, view, &versions, &past_eof, &shifted) {
                Ok(n) => return Ok(CrashVerdict { prefix: Some(*prefix), files_checked: n }),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        Err(first_error.expect("at least one candidate was tried"))
    }

    fn check_files(
        &self,
        recovered: &mut dyn FileSystem,
        seen: &TreeView,
        model_view: &TreeView,
        versions: &BTreeMap<Ino, Vec<FileData>>,
        past_eof: &BTreeMap<Ino, Vec<FileData>>,
        shifted: &std::collections::BTreeSet<Ino>,
    ) -> Result<usize, CrashViolation> {
        let bs = self.mount.block_size as u64;
        // A file gone from the model since (unlinked after the prefix the
        // disk shows) had the mount's mode unless it was flagged.
        let mount_mode = self.mount.inode_journal_mode(true, false);
        for (path, (_, size)) in &seen.files {
            let (ino, _) = model_view.files[path];
            let empty = Vec::new();
            let list = versions.get(&ino).unwrap_or(&empty);
            let sector_sources = || list.iter().chain(past_eof.get(&ino).into_iter().flatten());
            if !list.iter().any(|v| v.size == *size) {
                let mut allowed: Vec<u64> = list.iter().map(|v| v.size).collect();
                allowed.dedup();
                return Err(CrashViolation::Size { path: path.clone(), size: *size, allowed });
            }
            if shifted.contains(&ino) {
                continue;
            }
            // Outside these ranges both sides read zeros.
            let mut ranges = data_ranges(recovered, path, *size)?;
            for v in sector_sources() {
                // Whole blocks: the recovered side may hold anything in them.
                ranges.extend(v.content.ranges().map(|r| (r.start / bs * bs).min(*size)..r.end.div_ceil(bs).saturating_mul(bs).min(*size)));
            }
            let ranges = merge_ranges(ranges);
            let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
            if total > MAX_CHECKED_BYTES {
                return Err(CrashViolation::Inconsistent { path: path.clone(), detail: format!("{total} bytes of data is more than a crash check reads") });
            }
            let mode = self.journal_mode.get(&ino).copied().unwrap_or(mount_mode);
            let stale_ok = mode == InodeJournalMode::Writeback;
            // data=journal logs the EOF block's bytes with the size.
            let tail_loose = mode != InodeJournalMode::Journal;
            for range in ranges {
                let bytes = read_range(recovered, path, range.clone())?;
                let mut off = range.start;
                while off < range.end {
                    // Sectors are aligned to the file, so a range start mid-sector
                    // is split. A journaled block is logged and replayed whole:
                    // its sectors come from one version.
                    let unit = if tail_loose { SECTOR } else { bs };
                    let len = (unit - off % unit).min(range.end - off);
                    let at = (off - range.start) as usize;
                    let got = &bytes[at..at + len as usize];
                    let block = off / bs;
                    // data=writeback orders no data before the commit: a
                    // block allocated (or freed and allocated again) since,
                    // and bytes past the durable size (a tail whose zeroing
                    // or new data was still cached), may show what the disk
                    // held before.
                    //
                    // In every mode the block holding the durable EOF may
                    // show its own on-disk tail past that size: ext4 orders
                    // data only for blocks a transaction allocates, so a size
                    // grown inside that block can commit before the bytes
                    // (and the tail may hold a write an earlier crash lost).
                    // data=journal logs those bytes with the size.
                    let durable = list.first();
                    let eof_tail = tail_loose && durable.is_some_and(|v| v.size % bs != 0 && block == v.size / bs);
                    let stale_allowed = (stale_ok || eof_tail) && durable.is_some_and(|v| off >= v.size)
                        || stale_ok && (durable.is_none() || list.iter().any(|v| v.blocks.get(block).is_none()));
                    // The sector holding the durable size is the file's for
                    // sure only up to it.
                    let sure = match durable {
                        Some(v) if (stale_ok || eof_tail) && v.size > off && v.size < off + len => (v.size - off) as usize,
                        _ => len as usize,
                    };
                    if !stale_allowed && !sector_sources().any(|v| version_bytes(v, off, len)[..sure] == got[..sure]) {
                        let head = |b: &[u8]| b.iter().take(8).map(|x| format!("{x:02x}")).collect::<String>();
                        let seen: Vec<String> = sector_sources()
                            .map(|v| {
                                let vb = version_bytes(v, off, len);
                                let at = vb.iter().zip(got).position(|(a, b)| a != b).unwrap_or(0);
                                let around = |b: &[u8]| head(&b[at..]);
                                format!("size {}: differs from byte {at}: {} vs recovered {}", v.size, around(&vb), around(got))
                            })
                            .collect();
                        return Err(CrashViolation::Data {
                            path: path.clone(),
                            offset: off,
                            detail: format!(
                                "recovered {} (size {size}) matches none of {} allowed versions [{}]",
                                head(got),
                                seen.len(),
                                seen.join(", ")
                            ),
                        });
                    }
                    off += len;
                }
            }
        }
        Ok(seen.files.len())
    }
}
