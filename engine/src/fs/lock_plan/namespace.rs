//! Directory ops' locks, as the VFS takes them around ext4's namespace
//! calls (fs/namei.c): the parent directory's i_rwsem exclusive from
//! filename_create, do_unlinkat or do_rmdir on; for a rename, lock_rename
//! (s_vfs_rename_mutex when the directories differ, then both, an
//! ancestor before its descendant); then the i_rwsem of the inodes the op
//! unlinks, links or moves (vfs_unlink, vfs_rmdir, vfs_link, vfs_rename;
//! a directory before a non-directory, else by inode number where the
//! kernel goes by address); then, ops that change names, the handle
//! they sleep in. readdir holds the directory's i_rwsem shared.
//!
//! A path walk takes none of these: the dcache answers it under RCU, and
//! the engine keeps no dcache whose misses would take a parent's lock
//! shared (lookup_slow).
//!
//! The engine's own ops take their locks through the same step lists
//! ([`Ext4::rename_parents`], [`rename_children`]), so the plan and the
//! code cannot order them differently.

use ext4_model::path::{Last, SplitPath};
use ext4_model::{Errno, FileKind, Op};

use crate::device::BlockDevice;
use crate::dir::Slot;
use crate::format::dirent::FT_DIR;
use crate::format::InodeNumber;

use super::super::locks::Lock;
use super::super::Ext4;
use super::{LockPlan, PlannedLock};

/// Inode `ino`'s i_rwsem exclusive, taken in `by`.
pub(crate) fn inode_lock(ino: InodeNumber, by: &'static str) -> PlannedLock {
    PlannedLock::Sem { ino, class: Lock::InodeRwsem, shared: false, by }
}

/// vfs_rename's locks on the inodes it moves, out of `odir` into `ndir`:
/// the source unless it is a directory staying in its parent, and the
/// target it replaces or exchanges with; a directory first, else the
/// lower inode number. A child that is also a parent is left out (the
/// rename fails its checks before this).
pub(crate) fn rename_children(old: Slot, new: Option<Slot>, odir: InodeNumber, ndir: InodeNumber) -> LockPlan {
    const BY: &str = "vfs_rename";
    let mut children: Vec<Slot> = Vec::new();
    if old.file_type != FT_DIR || odir != ndir {
        children.push(old);
    }
    children.extend(new.filter(|n| n.ino != old.ino));
    children.retain(|s| s.ino != odir && s.ino != ndir);
    children.sort_by_key(|s| (s.file_type != FT_DIR, s.ino));
    LockPlan { steps: children.iter().map(|s| inode_lock(s.ino, BY)).collect() }
}

impl<D: BlockDevice> Ext4<D> {
    /// lock_rename's locks: one directory's i_rwsem, or for two
    /// s_vfs_rename_mutex and then both, an ancestor first (else the
    /// source's parent first).
    pub(crate) fn rename_parents(&mut self, odir: InodeNumber, ndir: InodeNumber) -> Result<LockPlan, Errno> {
        const BY: &str = "lock_rename";
        if odir == ndir {
            return Ok(LockPlan { steps: vec![inode_lock(odir, BY)] });
        }
        let (first, second) = if self.is_ancestor(ndir, odir)? { (ndir, odir) } else { (odir, ndir) };
        let mutex = PlannedLock::Sem { ino: 0, class: Lock::RenameMutex, shared: false, by: BY };
        Ok(LockPlan { steps: vec![mutex, inode_lock(first, BY), inode_lock(second, BY)] })
    }

    /// The plan of a directory op (see the module's words), if it gets as
    /// far as its parent's lock.
    pub(crate) fn namespace_plan(&mut self, op: &Op) -> Option<LockPlan> {
        match op {
            Op::Create { path, .. } => self.create_plan(path, true, None),
            Op::Mkdir { path, .. } | Op::Symlink { path, .. } => self.create_plan(path, false, None),
            Op::Link { from, to } => {
                let source = self.resolve(&SplitPath::parse(from).ok()?, false).ok()?;
                self.create_plan(to, false, Some(source))
            }
            Op::Unlink { path } => self.remove_plan(path, false),
            Op::Rmdir { path } => self.remove_plan(path, true),
            Op::Rename { from, to } | Op::Renameat2 { from, to, .. } => self.rename_plan(from, to),
            Op::Readdir { path } => {
                let ino = self.resolve(&SplitPath::parse(path).ok()?, true).ok()?;
                (self.kind_of(ino).ok()? == FileKind::Directory).then(|| LockPlan { steps: vec![PlannedLock::Sem { ino, class: Lock::InodeRwsem, shared: true, by: "iterate_dir" }] })
            }
            _ => None,
        }
    }

    /// filename_create's parent lock, then for link(2) the source's.
    fn create_plan(&mut self, path: &str, open_create: bool, source: Option<InodeNumber>) -> Option<LockPlan> {
        let sp = SplitPath::parse(path).ok()?;
        let (dir, last) = self.resolve_parent(&sp).ok()?;
        if !matches!(last, Last::Normal(_)) || (open_create && sp.trailing_slash) {
            return None;
        }
        let mut steps = vec![inode_lock(dir, "filename_create")];
        if let Some(source) = source.filter(|s| *s != dir && self.kind_of(*s).is_ok_and(|k| k != FileKind::Directory)) {
            steps.push(inode_lock(source, "vfs_link"));
        }
        steps.push(PlannedLock::Handle);
        Some(LockPlan { steps })
    }

    /// unlink(2) or rmdir(2): the parent, then the victim if it is of the
    /// kind the op removes.
    fn remove_plan(&mut self, path: &str, rmdir: bool) -> Option<LockPlan> {
        let sp = SplitPath::parse(path).ok()?;
        let (dir, last) = self.resolve_parent(&sp).ok()?;
        let Last::Normal(name) = last else { return None };
        let (parent_by, victim_by) = if rmdir { ("do_rmdir", "vfs_rmdir") } else { ("do_unlinkat", "vfs_unlink") };
        let mut steps = vec![inode_lock(dir, parent_by)];
        if let Some(victim) = self.lookup_in(dir, name).ok().flatten() {
            if (victim.file_type == FT_DIR) == rmdir && victim.ino != dir {
                steps.push(inode_lock(victim.ino, victim_by));
            }
        }
        steps.push(PlannedLock::Handle);
        Some(LockPlan { steps })
    }

    /// rename(2) and renameat2(2): lock_rename's, then vfs_rename's.
    fn rename_plan(&mut self, from: &str, to: &str) -> Option<LockPlan> {
        let (osp, nsp) = (SplitPath::parse(from).ok()?, SplitPath::parse(to).ok()?);
        let (odir, olast) = self.resolve_parent(&osp).ok()?;
        let (ndir, nlast) = self.resolve_parent(&nsp).ok()?;
        let (Last::Normal(oname), Last::Normal(nname)) = (olast, nlast) else { return None };
        let mut plan = self.rename_parents(odir, ndir).ok()?;
        // The inodes it moves only past the trap: naming a parent's
        // ancestor after the parents would lock against the tree's order,
        // a deadlock the kernel's check rules out.
        if let Some(old) = self.lookup_in(odir, oname).ok().flatten() {
            let new = self.lookup_in(ndir, nname).ok().flatten();
            if self.rename_trap(odir, ndir, old, new, false).is_ok() {
                plan.steps.extend(rename_children(old, new, odir, ndir).steps);
            }
        }
        plan.steps.push(PlannedLock::Handle);
        Some(plan)
    }
}
