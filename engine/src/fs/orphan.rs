//! Descriptors held across ops, and ext4's orphan list.
//!
//! A file that loses its last name while a descriptor holds it keeps its
//! inode and blocks until the last close. So that a crash in between does
//! not leak them, ext4 chains such inodes from the superblock: the head is
//! `s_last_orphan`, each inode's `i_dtime` names the next (0 ends the
//! chain). The chain is metadata like any other, committed with the unlink
//! that started it and the close that ends it. Mount walks a chain a crash
//! left behind (ext4_orphan_cleanup) and frees every inode on it, or
//! truncates it to its size when it still has links (a truncate that a
//! crash cut short). A chain that names an inode out of range or not in
//! use is dropped there, as the kernel drops it, and the engine's fsck
//! reports what it leaked.
//!
//! Without a journal ext4 keeps no list (ext4_orphan_add returns early),
//! and a crash may leak the inode. With the orphan_file feature ext4 uses
//! the orphan file first and the list when that is full; the engine always
//! uses the list, which e2fsck and the kernel read on either image.

use ext4_model::Errno;

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::InodeNumber;

use super::Ext4;

/// What the orphan list saw over a mount, for reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrphanStats {
    /// Inodes that lost their last name while open (ext4_orphan_add).
    pub added: u64,
    /// Orphans freed at their last close.
    pub freed_at_close: u64,
    /// Orphans a crash left that mount freed.
    pub freed_at_mount: u64,
    /// Chain members with links that mount truncated to their size.
    pub truncated_at_mount: u64,
}

impl std::ops::AddAssign for OrphanStats {
    fn add_assign(&mut self, o: OrphanStats) {
        self.added += o.added;
        self.freed_at_close += o.freed_at_close;
        self.freed_at_mount += o.freed_at_mount;
        self.truncated_at_mount += o.truncated_at_mount;
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// Whether a descriptor slot holds `ino`.
    pub(crate) fn is_open(&self, ino: InodeNumber) -> bool {
        self.slots.values().any(|i| *i == ino)
    }

    /// open(O_RDWR) into `slot`, then the slot's old descriptor closes.
    pub(crate) fn do_open(&mut self, path: &str, slot: u8) -> std::result::Result<(), Errno> {
        let ino = self.open_for_write(path, false)?;
        match self.slots.insert(slot, ino) {
            Some(old) => self.release_slot(old),
            None => Ok(()),
        }
    }

    pub(crate) fn do_close(&mut self, slot: u8) -> std::result::Result<(), Errno> {
        let ino = self.slots.remove(&slot).ok_or(Errno::EBADF)?;
        self.release_slot(ino)
    }

    pub(crate) fn slot_file(&self, slot: u8) -> std::result::Result<InodeNumber, Errno> {
        self.slots.get(&slot).copied().ok_or(Errno::EBADF)
    }

    /// ext4_release_file, then, for the last descriptor of an inode with
    /// no links, ext4_evict_inode: off the orphan list and freed.
    fn release_slot(&mut self, ino: InodeNumber) -> std::result::Result<(), Errno> {
        let released = self.release_file(ino);
        let unlinked = self.node(ino)?.disk.links_count == 0;
        if unlinked && !self.is_open(ino) {
            self.orphan_del(ino)?;
            self.free_inode(ino)?;
            self.orphan_stats.freed_at_close += 1;
        }
        released
    }

    /// The process exits before an unmount: every slot closes.
    pub(crate) fn close_every_slot(&mut self) -> std::result::Result<(), Errno> {
        let mut first = Ok(());
        while let Some((_, ino)) = self.slots.pop_first() {
            first = first.and(self.release_slot(ino));
        }
        first
    }

    /// ext4_orphan_add: `ino`, just left without links, goes to the head.
    pub(crate) fn orphan_add(&mut self, ino: InodeNumber) -> std::result::Result<(), Errno> {
        if self.ctx.journal.is_none() {
            return Ok(());
        }
        debug_assert!(!self.orphans.contains(&ino), "inode {ino} is on the orphan list twice");
        let head = self.ctx.sb.last_orphan;
        self.node(ino)?.disk.dtime = head;
        self.ctx.sb.last_orphan = ino;
        self.orphans.insert(0, ino);
        self.mark_dirty(ino);
        self.orphan_stats.added += 1;
        Ok(())
    }

    /// ext4_orphan_del: `ino` leaves the chain; whoever named it names
    /// its successor.
    pub(crate) fn orphan_del(&mut self, ino: InodeNumber) -> std::result::Result<(), Errno> {
        let Some(at) = self.orphans.iter().position(|o| *o == ino) else { return Ok(()) };
        self.orphans.remove(at);
        let next = self.orphans.get(at).copied().unwrap_or(0);
        match at.checked_sub(1).map(|p| self.orphans[p]) {
            None => self.ctx.sb.last_orphan = next,
            Some(prev) => {
                self.node(prev)?.disk.dtime = next;
                self.mark_dirty(prev);
            }
        }
        self.node(ino)?.disk.dtime = 0;
        Ok(())
    }

    /// What the orphan list saw over this mount.
    pub fn orphan_stats(&self) -> OrphanStats {
        self.orphan_stats
    }

    /// ext4_orphan_cleanup at mount: the chain a crash left, processed
    /// from its head.
    pub(crate) fn orphan_cleanup(&mut self) -> Result<()> {
        let limit = self.ctx.sb.inodes_count;
        let mut walked = 0u32;
        while self.ctx.sb.last_orphan != 0 {
            let ino = self.ctx.sb.last_orphan;
            walked += 1;
            let Some(node) = self.orphan_get(ino, walked > limit)? else {
                self.ctx.sb.last_orphan = 0;
                break;
            };
            let (links, size, next) = (node.disk.links_count, node.disk.size, node.disk.dtime);
            self.nodes.insert(ino, node);
            self.ctx.sb.last_orphan = next;
            if links == 0 {
                self.free_inode(ino).map_err(errno_error)?;
                self.orphan_stats.freed_at_mount += 1;
            } else {
                self.truncate_inode(ino, size).map_err(errno_error)?;
                self.node(ino).map_err(errno_error)?.disk.dtime = 0;
                self.mark_dirty(ino);
                self.orphan_stats.truncated_at_mount += 1;
            }
        }
        Ok(())
    }

    /// ext4_orphan_get: the inode the chain names, or None where ext4
    /// would call it a bad orphan (out of range, free in its bitmap, not
    /// parseable, or a chain longer than the inodes there are). Device
    /// errors fail the mount.
    fn orphan_get(&mut self, ino: InodeNumber, looped: bool) -> Result<Option<super::node::Node>> {
        let sb = &self.ctx.sb;
        if looped || ino < sb.first_ino() || ino > sb.inodes_count || self.nodes.contains_key(&ino) {
            return Ok(None);
        }
        let ctx = &mut self.ctx;
        if !ctx.alloc.inode_in_use(&mut ctx.dev, ino)? {
            return Ok(None);
        }
        match ctx.read_node_linked(ino, false) {
            Ok(node) => Ok(Some(node)),
            Err(e @ Error::Device(_)) => Err(e),
            Err(_) => Ok(None),
        }
    }
}

/// An errno from an op used inside mount, as the error mount reports.
fn errno_error(e: Errno) -> Error {
    crate::fs::take_last_error().unwrap_or_else(|| Error::InvalidArgument(format!("orphan cleanup: {e}")))
}
