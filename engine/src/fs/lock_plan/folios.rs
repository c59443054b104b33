//! Which ops sleep on folio locks held across a sleep (the flusher's
//! dirty folios, a truncate's EOF folio: `crate::pagecache::locked`).
//! Unlike the locks of a plan these are not taken by the op up front: an
//! op meets them wherever it locks a folio, so the prediction is made
//! from what the op will touch.

use ext4_model::Op;

use crate::device::BlockDevice;

use super::super::locks::Lock;
use super::super::Ext4;
use super::PlannedLock;

impl<D: BlockDevice> Ext4<D> {
    /// The folio lock `op` would sleep on: one held between another op's
    /// halves, on a folio the op would lock (reading into it while not
    /// wholly uptodate, writing into it, zeroing the
    /// tail of an EOF block inside it, truncating or punching the cache,
    /// writing the file back first: fsync, direct I/O, msync,
    /// FIEMAP_FLAG_SYNC, a close's auto_da_alloc flush, the switch, chattr
    /// +i; evicting the inode: a name op on it, a close). Ranges reach to
    /// EOF where ext4 writes back or drops from an offset on.
    pub(crate) fn folio_wait(&mut self, op: &Op) -> Option<Lock> {
        self.folio_wait_except(op, None)
    }

    /// [`Ext4::folio_wait`] for a second half: its own folio locks
    /// (`except`, its holder's) left out.
    pub(crate) fn folio_wait_except(&mut self, op: &Op, except: Option<u64>) -> Option<Lock> {
        let locked = self.ctx.pages.locked_inodes_except(except);
        if locked.is_empty() {
            return None;
        }
        #[cfg(feature = "test-hooks")]
        if self.bug_truncate_ignores_flusher() && matches!(op, Op::Truncate { .. } | Op::FtruncateFd { .. }) {
            return None;
        }
        // A file truncated to 0 is written back when the next op that opens
        // it closes it (auto_da_alloc, ext4_release_file).
        let flagged: Vec<_> = locked.iter().copied().filter(|i| self.nodes.get(i).is_some_and(|n| n.da_alloc_close)).collect();
        if !flagged.is_empty() {
            let paths: Vec<String> = op.paths().into_iter().map(str::to_string).collect();
            if paths.iter().any(|p| self.open_path(p).is_ok_and(|i| flagged.contains(&i))) {
                return Some(Lock::FolioLock);
            }
        }
        // A read fills the folios it finds not uptodate, locking them.
        let read = match op {
            Op::Read { path, offset, len } => Some((self.open_path(path).ok()?, *offset, *len)),
            Op::ReadFd { slot, offset, len } => Some((self.slot_file(*slot).ok()?, *offset, *len)),
            _ => None,
        };
        if let Some((ino, offset, len)) = read {
            let size = self.nodes.get(&ino).map_or(0, |n| n.disk.size);
            let bytes = offset.min(size)..offset.saturating_add(u64::from(len)).min(size);
            return self.ctx.pages.read_meets_locked_folio(ino, bytes, except).then_some(Lock::FolioLock);
        }
        let (ino, bytes) = match op {
            Op::Sync => return Some(Lock::FolioLock),
            Op::Write { path, offset, len, .. } => (self.open_path(path).ok()?, *offset..offset.saturating_add(u64::from(*len))),
            Op::WriteFd { slot, offset, len, .. } => (self.slot_file(*slot).ok()?, *offset..offset.saturating_add(u64::from(*len))),
            Op::Append { path, .. } | Op::Rewrite { path, .. } | Op::Fsync { path } | Op::Fdatasync { path } | Op::SetJournalData { path, .. } => (self.open_path(path).ok()?, 0..u64::MAX),
            // chattr +i writes a regular file back first (ext4_ioctl_setflags).
            Op::MapWrite { path, .. } | Op::Chattr { path, flag: ext4_model::ChattrFlag::Immutable, enable: true } => (self.open_path(path).ok()?, 0..u64::MAX),
            // Closing a file (a reopened slot closes what it held) may evict it.
            Op::FsyncFd { slot } | Op::Close { slot } | Op::Open { slot, .. } => (self.slot_file(*slot).ok()?, 0..u64::MAX),
            Op::Truncate { path, size } => (self.open_path(path).ok()?, *size..u64::MAX),
            Op::FtruncateFd { slot, size } => (self.slot_file(*slot).ok()?, *size..u64::MAX),
            // An extending direct write that fails truncates back to the old
            // size (ext4_inode_extension_cleanup), which may reach a folio
            // straddling the old EOF below the write.
            Op::DirectWrite { path, offset, len, .. } => {
                let ino = self.open_path(path).ok()?;
                let size = self.nodes.get(&ino).map_or(0, |n| n.disk.size);
                let from = if offset.saturating_add(u64::from(*len)) > size { (*offset).min(size) } else { *offset };
                (ino, from..u64::MAX)
            }
            Op::DirectRead { path, offset, .. } => (self.open_path(path).ok()?, *offset..u64::MAX),
            Op::Fallocate { path, mode, offset, len } => {
                let kind = super::super::fallocate::fallocate_checks(*mode, *offset, *len, self.ctx.mount.max_file_size()).ok()?;
                (self.open_path(path).ok()?, if super::super::fallocate::fallocate_invalidates(kind) { *offset..u64::MAX } else { 0..0 })
            }
            Op::Fiemap { path, flags, .. } if flags & ext4_model::FiemapRequest::SYNC != 0 => (self.open_path(path).ok()?, 0..u64::MAX),
            _ => {
                let plan = self.namespace_plan(op)?;
                let names = plan.steps.iter().any(|s| matches!(s, PlannedLock::Sem { ino, .. } if locked.contains(ino)));
                return names.then_some(Lock::FolioLock);
            }
        };
        if self.ctx.pages.folios_locked_except(ino, bytes, except) {
            return Some(Lock::FolioLock);
        }
        // Growing the file zeroes the old EOF block's tail in its folio
        // (pagecache_isize_extended locks it).
        let grows = matches!(op, Op::Write { .. } | Op::WriteFd { .. } | Op::DirectWrite { .. } | Op::Truncate { .. } | Op::FtruncateFd { .. } | Op::Fallocate { .. });
        let size = self.nodes.get(&ino).map_or(0, |n| n.disk.size);
        let tail = size % u64::from(self.ctx.geo.block_size) != 0;
        (grows && tail && self.ctx.pages.folios_locked_except(ino, size - 1..size, except)).then_some(Lock::FolioLock)
    }
}
