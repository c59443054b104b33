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
//! A write through a descriptor holds the descriptor's file from its start
//! (fdget: the tasks share one table) to its return (fdput). A close of the
//! descriptor by another task between the write's parts takes the slot away
//! at once; the file's release, and an orphan's eviction, wait for the fdput.
//!
//! Without a journal ext4 keeps no list (ext4_orphan_add returns early),
//! and a crash may leak the inode. With the orphan_file feature ext4 uses
//! the orphan file first and the list when that is full; the engine always
//! uses the list, which e2fsck and the kernel read on either image.

use std::collections::BTreeMap;

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
    /// Closes of a descriptor a write in flight held: the release waited
    /// for the write's fdput.
    pub closes_under_write: u64,
}

impl std::ops::AddAssign for OrphanStats {
    fn add_assign(&mut self, o: OrphanStats) {
        self.added += o.added;
        self.freed_at_close += o.freed_at_close;
        self.freed_at_mount += o.freed_at_mount;
        self.truncated_at_mount += o.truncated_at_mount;
        self.closes_under_write += o.closes_under_write;
    }
}

/// A descriptor's file held by a write in flight: `slot` while the slot
/// still holds it, None once the slot closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FdRef {
    slot: Option<u8>,
    ino: InodeNumber,
}

/// The references writes in flight hold, by the id each write keeps, and
/// the files buffered reads in flight opened by path (`read_parts`), which
/// hold no lock between their parts: an unlink meanwhile leaves an orphan.
#[derive(Clone, Debug, Default)]
pub(crate) struct FdRefs {
    refs: BTreeMap<u64, FdRef>,
    readers: BTreeMap<u64, InodeNumber>,
    next: u64,
}

impl<D: BlockDevice> Ext4<D> {
    /// Whether a descriptor holds `ino` open: a slot, or a closed slot's
    /// file that a write in flight still holds.
    pub(crate) fn is_open(&self, ino: InodeNumber) -> bool {
        self.held_for_write(ino) || self.fd_refs.readers.values().any(|i| *i == ino)
    }

    /// Whether a descriptor open for writing holds `ino` (every slot is
    /// O_RDWR): what ext4_release_file's i_writecount asks.
    pub(crate) fn held_for_write(&self, ino: InodeNumber) -> bool {
        self.slots.values().any(|i| *i == ino) || self.fd_refs.refs.values().any(|r| r.slot.is_none() && r.ino == ino)
    }

    /// A buffered read in flight opened `ino` (O_RDONLY): the id of its
    /// open, which [`Ext4::close_read`] closes.
    pub(crate) fn open_for_read(&mut self, ino: InodeNumber) -> u64 {
        let id = self.fd_refs.next;
        self.fd_refs.next += 1;
        self.fd_refs.readers.insert(id, ino);
        id
    }

    /// The read's close: its file's release, and the eviction of an orphan
    /// no one else holds.
    pub(crate) fn close_read(&mut self, id: u64) -> std::result::Result<(), Errno> {
        match self.fd_refs.readers.remove(&id) {
            Some(ino) => self.release_slot(ino),
            None => Ok(()),
        }
    }

    /// open(O_RDWR) into `slot`, then the slot's old descriptor closes.
    pub(crate) fn do_open(&mut self, path: &str, slot: u8) -> std::result::Result<(), Errno> {
        let ino = self.open_for_write(path, false)?;
        match self.slots.insert(slot, ino) {
            Some(old) => self.close_slot_file(slot, old),
            None => Ok(()),
        }
    }

    pub(crate) fn do_close(&mut self, slot: u8) -> std::result::Result<(), Errno> {
        let ino = self.slots.remove(&slot).ok_or(Errno::EBADF)?;
        self.close_slot_file(slot, ino)
    }

    /// The slot no longer holds `ino`: its release now, or at the fdput of
    /// a write in flight through it.
    fn close_slot_file(&mut self, slot: u8, ino: InodeNumber) -> std::result::Result<(), Errno> {
        #[cfg(feature = "test-hooks")]
        if self.bug_close_ignores_writes() {
            return self.release_slot(ino);
        }
        let mut held = false;
        for r in self.fd_refs.refs.values_mut().filter(|r| r.slot == Some(slot)) {
            r.slot = None;
            held = true;
        }
        if held {
            self.orphan_stats.closes_under_write += 1;
            return Ok(());
        }
        self.release_slot(ino)
    }

    /// fdget for a write through `slot`: the id of its reference to the
    /// slot's file, and the file.
    pub(crate) fn fdget(&mut self, slot: u8) -> std::result::Result<(u64, InodeNumber), Errno> {
        let ino = self.slot_file(slot)?;
        let id = self.fd_refs.next;
        self.fd_refs.next += 1;
        self.fd_refs.refs.insert(id, FdRef { slot: Some(slot), ino });
        Ok((id, ino))
    }

    /// fdput: a file whose slot closed meanwhile is released now.
    pub(crate) fn fdput(&mut self, id: u64) -> std::result::Result<(), Errno> {
        match self.fd_refs.refs.remove(&id) {
            // The closed descriptor's file goes with its last reference.
            Some(FdRef { slot: None, ino }) if !self.fd_refs.refs.values().any(|r| r.slot.is_none() && r.ino == ino) => self.release_slot(ino),
            _ => Ok(()),
        }
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

    /// The process exits before an unmount: every slot closes, and the
    /// files of slots closed under writes that never returned are released.
    pub(crate) fn close_every_slot(&mut self) -> std::result::Result<(), Errno> {
        let mut first = Ok(());
        let mut detached: Vec<InodeNumber> = std::mem::take(&mut self.fd_refs.refs).into_values().filter(|r| r.slot.is_none()).map(|r| r.ino).collect();
        detached.extend(std::mem::take(&mut self.fd_refs.readers).into_values());
        for ino in detached {
            first = first.and(self.release_slot(ino));
        }
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
        #[cfg(feature = "test-hooks")]
        if self.bug_forgets_orphans() {
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

#[cfg(test)]
mod tests {
    use ext4_model::{Errno, FileSystem, MountConfig};

    use crate::check::check;
    use crate::device::{BlockDevice, IoClass, WriteFlags};
    use crate::device_mem::MemDevice;
    use crate::fixtures::fresh_mounted;
    use crate::format::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
    use crate::fs::Ext4;

    /// Three unlinked files held open, chained c -> b -> a, then b closed.
    fn three_orphans_one_closed() -> (Ext4<MemDevice>, [u32; 3]) {
        let mut fs = fresh_mounted(64 << 20);
        let mut inos = [0; 3];
        for (slot, name) in ["/a", "/b", "/c"].into_iter().enumerate() {
            fs.create(name, 0o644).unwrap();
            fs.write(name, 0, &[slot as u8 + 1; 20_000]).unwrap();
            inos[slot] = fs.stat(name).unwrap().ino as u32;
            fs.open(name, slot as u8).unwrap();
            fs.unlink(name).unwrap();
        }
        let [a, b, c] = inos;
        assert_eq!(fs.ctx.sb.last_orphan, c, "the newest orphan heads the chain");
        assert_eq!((fs.node(c).unwrap().disk.dtime, fs.node(b).unwrap().disk.dtime, fs.node(a).unwrap().disk.dtime), (b, a, 0));
        fs.close(1).unwrap();
        assert_eq!(fs.node(c).unwrap().disk.dtime, a, "b's predecessor names b's successor");
        assert_eq!(fs.orphans, vec![c, a]);
        (fs, inos)
    }

    fn crashed(fs: Ext4<MemDevice>) -> MemDevice {
        fs.into_device_dropping_caches()
    }

    #[test]
    fn orphans_stay_readable_and_the_last_close_frees_them() {
        let (mut fs, _) = three_orphans_one_closed();
        assert_eq!(fs.pread(0, 19_990, 100).unwrap(), vec![1; 10]);
        assert_eq!(fs.pwrite(2, 40_000, &[9; 10]), Ok(10));
        assert_eq!(fs.pread(2, 40_000, 10).unwrap(), vec![9; 10]);
        assert_eq!(fs.close(1), Err(Errno::EBADF));
        let free_before = fs.free_space();
        fs.close(0).unwrap();
        fs.close(2).unwrap();
        assert!(fs.free_space().0 > free_before.0 && fs.free_space().1 == free_before.1 + 2);
        assert_eq!(fs.ctx.sb.last_orphan, 0);
        let stats = fs.orphan_stats();
        assert_eq!((stats.added, stats.freed_at_close), (3, 3));
        let (_, report) = check(fs.unmount().unwrap());
        assert!(report.is_clean(), "{:?}", report.problems);
    }

    #[test]
    fn a_crash_leaves_the_chain_and_mount_frees_every_inode_on_it() {
        let (mut fs, _) = three_orphans_one_closed();
        fs.sync().unwrap();
        let dev = crashed(fs);
        let fs = Ext4::mount(dev, &MountConfig::default()).unwrap();
        assert_eq!(fs.orphan_stats().freed_at_mount, 2);
        assert_eq!(fs.ctx.sb.last_orphan, 0);
        let (_, report) = check(fs.unmount().unwrap());
        assert!(report.is_clean(), "{:?}", report.problems);
    }

    #[test]
    fn unmount_closes_what_is_still_open() {
        let (fs, _) = three_orphans_one_closed();
        let (_, report) = check(fs.unmount().unwrap());
        assert!(report.is_clean(), "{:?}", report.problems);
    }

    /// A crash image with its journal replayed but its orphans not yet
    /// processed, with the superblock's chain head set to `head`.
    fn recovered_with_head(head: impl FnOnce([u32; 3]) -> u32) -> MemDevice {
        let (mut fs, inos) = three_orphans_one_closed();
        fs.sync().unwrap();
        let mut dev = crashed(fs);
        Ext4::recover(&mut dev).unwrap();
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        dev.read(SUPERBLOCK_OFFSET, &mut raw, IoClass::Metadata).unwrap();
        let mut sb = Superblock::parse(&raw).unwrap();
        sb.last_orphan = head(inos);
        dev.write(SUPERBLOCK_OFFSET, &sb.to_bytes(), WriteFlags::METADATA).unwrap();
        dev
    }

    #[test]
    fn a_chain_naming_a_reserved_or_free_inode_is_dropped_as_the_kernel_drops_it() {
        for (what, head) in [("reserved", 5u32), ("past the table", u32::MAX), ("free", 40)] {
            let dev = recovered_with_head(|_| head);
            let fs = Ext4::mount(dev, &MountConfig::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(fs.ctx.sb.last_orphan, 0, "{what}");
            assert_eq!(fs.orphan_stats().freed_at_mount, 0, "{what}");
            // The two orphans it no longer names are leaked, and fsck says so.
            let (_, report) = check(fs.unmount().unwrap());
            assert!(!report.is_clean(), "{what}: the leak went unreported");
        }
    }

    #[test]
    fn a_chain_that_loops_back_ends_where_it_names_a_freed_inode() {
        // a's next is itself once the tail is rewritten to point back at the head.
        let (mut fs, [a, _, c]) = three_orphans_one_closed();
        fs.node(a).unwrap().disk.dtime = c;
        fs.mark_dirty(a);
        fs.sync().unwrap();
        let fs = Ext4::mount(crashed(fs), &MountConfig::default()).unwrap();
        assert_eq!(fs.orphan_stats().freed_at_mount, 2);
        let (_, report) = check(fs.unmount().unwrap());
        assert!(report.is_clean(), "{:?}", report.problems);
    }
}
