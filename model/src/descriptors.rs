//! Descriptors held across ops, and the orphans they keep alive.
//!
//! A run holds up to [`FD_SLOTS`](crate::op::FD_SLOTS) descriptors, each
//! its own open file description (O_RDWR). Unlinking the last name of a
//! file one of them holds does not free it: ext4 puts the inode on its
//! orphan list (links 0) and the data stays readable and writable through
//! the descriptor. The last close frees it (ext4_evict_inode) and takes it
//! off the list; a crash in between leaves the list to mount, which frees
//! every inode on it (ext4_orphan_cleanup), so no orphan outlives a crash.
//!
//! A write through a descriptor takes its own reference to the file at its
//! start (fdget: the tasks share one descriptor table) and drops it when it
//! returns (fdput). A close of that descriptor by another task meanwhile
//! takes the slot away at once, but the file's release (ext4_release_file,
//! and the eviction of an orphan) waits for the write's fdput.

use crate::content::Source;
use crate::crash_log::Call;
use crate::model::{inode_blocks, Model};
use crate::state::{FdRef, Ino, Node};
use crate::vfs::LOFF_MAX;
use crate::Errno;

impl Model {
    /// open(O_RDWR), then dup2 onto `slot`: the old descriptor closes
    /// after the new one is open.
    pub(crate) fn do_open(&mut self, path: &str, slot: u8) -> Result<(), Errno> {
        let ino = self.open_for_write(path, false)?;
        if let Some(old) = self.st.slots.insert(slot, ino) {
            self.close_slot_file(slot, old);
        }
        Ok(())
    }

    pub(crate) fn do_close(&mut self, slot: u8) -> Result<(), Errno> {
        let ino = self.st.slots.remove(&slot).ok_or(Errno::EBADF)?;
        self.close_slot_file(slot, ino);
        Ok(())
    }

    /// The slot no longer holds `ino`: its release now, or at the fdput of
    /// a write in flight through it.
    fn close_slot_file(&mut self, slot: u8, ino: Ino) {
        let mut held = false;
        for r in self.st.fd_refs.values_mut().filter(|r| r.slot == Some(slot)) {
            r.slot = None;
            held = true;
        }
        if !held {
            self.release_slot(ino);
        }
    }

    /// fdget for a write through `slot`: the id of its reference to the
    /// slot's file. Logged, so a crash check's replay defers the same
    /// closes.
    pub(crate) fn fdget(&mut self, slot: u8) -> Result<(u64, Ino), Errno> {
        let ino = self.slot_file(slot)?;
        let id = self.st.next_fd_ref;
        self.take_fd_ref(slot, id);
        Ok((id, ino))
    }

    /// Takes reference `id` to the file of `slot`, logged (a replay takes
    /// it with the id it had).
    pub(crate) fn take_fd_ref(&mut self, slot: u8, id: u64) {
        self.record(|| Call::FdGet { slot, id });
        if let Some(&ino) = self.st.slots.get(&slot) {
            self.st.next_fd_ref = self.st.next_fd_ref.max(id + 1);
            let earlier = self.st.fd_refs.insert(id, FdRef { slot: Some(slot), ino, own_open: false });
            debug_assert!(earlier.is_none(), "descriptor reference {id} taken twice");
        }
    }

    /// fdput: a file whose slot closed meanwhile is released now.
    pub(crate) fn fdput(&mut self, id: u64) {
        self.record(|| Call::FdPut { id });
        if let Some(FdRef { slot: None, ino, own_open: false }) = self.st.fd_refs.remove(&id) {
            // The closed descriptor's file goes with its last reference (a
            // read's own open file is another file, released at its close).
            let more = self.st.fd_refs.values().any(|r| r.slot.is_none() && !r.own_open && r.ino == ino);
            if !more && self.st.inodes.contains_key(&ino) {
                self.release_slot(ino);
            }
        }
    }

    fn slot_file(&self, slot: u8) -> Result<Ino, Errno> {
        self.st.slots.get(&slot).copied().ok_or(Errno::EBADF)
    }

    /// pread: a negative offset is EINVAL (ksys_pread64, before the
    /// descriptor is looked up).
    pub(crate) fn do_pread(&mut self, slot: u8, offset: u64, len: u32) -> Result<Vec<u8>, Errno> {
        if offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.slot_file(slot)?;
        let file = self.file(ino).ok_or(Errno::EISDIR)?;
        Ok(file.read(offset, len as u64))
    }

    /// pwrite: a negative offset's EINVAL (before the descriptor), then
    /// ext4_write_checks' EPERM for
    /// an inode made immutable since the open (append-only is checked at
    /// open only), then the write as through a path.
    pub(crate) fn do_pwrite(&mut self, slot: u8, offset: u64, len: usize, source: Source) -> Result<u64, Errno> {
        let ino = self.pwrite_checks(slot, offset)?;
        self.write_at(ino, offset, len, source)
    }

    /// pwrite's checks in its order: the offset, the descriptor, immutable
    /// since the open.
    pub(crate) fn pwrite_checks(&self, slot: u8, offset: u64) -> Result<Ino, Errno> {
        if offset > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        let ino = self.slot_file(slot)?;
        if self.immutable(ino) {
            return Err(Errno::EPERM);
        }
        Ok(ino)
    }

    /// fsync through a slot: as fsync of a path, on an orphan too.
    pub(crate) fn do_fsync_fd(&mut self, slot: u8) -> Result<(), Errno> {
        let ino = self.slot_file(slot)?;
        self.writeback(ino);
        self.mark_synced(ino, false);
        Ok(())
    }

    /// ftruncate: a negative length is EINVAL (do_sys_ftruncate, before the
    /// descriptor), then IS_APPEND, then ext4_setattr's immutable (both
    /// EPERM), then EFBIG.
    pub(crate) fn do_ftruncate(&mut self, slot: u8, size: u64) -> Result<(), Errno> {
        let ino = self.ftruncate_checks(slot, size)?;
        self.truncate_checked(ino, size)
    }

    /// ftruncate's checks up to the inode: the size, the descriptor.
    pub(crate) fn ftruncate_checks(&self, slot: u8, size: u64) -> Result<Ino, Errno> {
        if size > LOFF_MAX {
            return Err(Errno::EINVAL);
        }
        self.slot_file(slot)
    }

    /// ext4_release_file for a slot's descriptor, then the last close of
    /// an orphan frees it.
    pub(crate) fn release_slot(&mut self, ino: Ino) {
        self.release(ino);
        let inode = self.st.inode(ino);
        let orphan = inode.links == 0 && !matches!(inode.node, Node::Dir { .. });
        if orphan && !self.st.is_open(ino) {
            self.free_orphan(ino);
        }
    }

    pub(crate) fn free_orphan(&mut self, ino: Ino) {
        let removed = self.st.inodes.remove(&ino).expect("an orphan is a live inode");
        self.st.used_blocks -= inode_blocks(&removed, self.ratio());
    }
}

#[cfg(test)]
mod tests {
    use crate::fs::FileSystem;
    use crate::op::{ChattrFlag, Op, Reply};
    use crate::{Errno, Model, MountConfig};

    fn model() -> Model {
        Model::new(&MountConfig::default()).unwrap()
    }

    impl Model {
        /// chattr +a on the file a slot holds (no name reaches an orphan).
        fn chattr_of_slot_for_test(&mut self, slot: u8) {
            let ino = self.st.slots[&slot];
            self.st.inode_mut(ino).flags |= ChattrFlag::Append.bit();
        }
    }

    #[test]
    fn an_unlinked_open_file_keeps_its_data_and_space_until_the_last_close() {
        let mut m = model();
        m.create("/f", 0o644).unwrap();
        m.write("/f", 0, &[7; 10_000]).unwrap();
        let used = m.used_blocks();
        m.open("/f", 0).unwrap();
        m.open("/f", 1).unwrap();
        m.unlink("/f").unwrap();
        assert_eq!(m.stat("/f"), Err(Errno::ENOENT));
        assert_eq!(m.used_blocks(), used, "an orphan holds its blocks");
        assert_eq!(m.pread(0, 9_990, 100).unwrap(), vec![7; 10]);
        assert_eq!(m.pwrite(1, 20_000, &[1; 5]), Ok(5));
        assert_eq!(m.pread(0, 20_000, 5).unwrap(), vec![1; 5], "both descriptors see one inode");
        m.check_invariants().unwrap();
        m.close(0).unwrap();
        assert!(m.used_blocks() > used, "still open in slot 1");
        m.close(1).unwrap();
        assert_eq!(m.used_blocks(), 0);
        assert_eq!(m.inode_count(), 2);
        assert_eq!(m.close(1), Err(Errno::EBADF));
        m.check_invariants().unwrap();
    }

    #[test]
    fn reopening_a_slot_closes_its_old_descriptor_after_the_new_open() {
        let mut m = model();
        m.create("/a", 0o644).unwrap();
        m.create("/b", 0o644).unwrap();
        m.open("/a", 2).unwrap();
        m.unlink("/a").unwrap();
        assert_eq!(m.open("/nope", 2), Err(Errno::ENOENT));
        assert_eq!(m.inode_count(), 4, "a failed open leaves the slot as it was");
        m.open("/b", 2).unwrap();
        assert_eq!(m.inode_count(), 3, "the orphan went with the slot's old descriptor");
        // The same file again: one description closes, the other holds it.
        m.unlink("/b").unwrap();
        m.create("/b", 0o644).unwrap();
        assert_eq!(m.apply(&Op::Open { path: "/b".into(), slot: 9 }), Err(Errno::EBADF));
        m.check_invariants().unwrap();
    }

    #[test]
    fn opens_refuse_as_opens_for_writing_do_and_writes_refuse_once_immutable() {
        let mut m = model();
        m.mkdir("/d", 0o755).unwrap();
        assert_eq!(m.open("/d", 0), Err(Errno::EISDIR));
        m.create("/f", 0o644).unwrap();
        m.chattr("/f", ChattrFlag::Append, true).unwrap();
        assert_eq!(m.open("/f", 0), Err(Errno::EPERM));
        m.chattr("/f", ChattrFlag::Append, false).unwrap();
        m.open("/f", 0).unwrap();
        m.chattr("/f", ChattrFlag::Append, true).unwrap();
        assert_eq!(m.pwrite(0, 0, &[1]), Ok(1), "append-only is an open-time rule");
        m.chattr("/f", ChattrFlag::Immutable, true).unwrap();
        assert_eq!(m.pwrite(0, 0, &[]), Err(Errno::EPERM));
        assert_eq!(m.pwrite(0, u64::MAX, &[1]), Err(Errno::EINVAL), "the offset is checked first");
        assert_eq!(m.pwrite(3, u64::MAX, &[1]), Err(Errno::EINVAL), "even before the descriptor");
        assert_eq!(m.apply(&Op::FtruncateFd { slot: 9, size: u64::MAX }), Err(Errno::EINVAL));
        assert_eq!(m.apply(&Op::FtruncateFd { slot: 9, size: 1 }), Err(Errno::EBADF));
        assert_eq!(m.apply(&Op::ReadFd { slot: 0, offset: 0, len: 4 }), Ok(Reply::Data(vec![1])));
        assert_eq!(m.apply(&Op::ReadFd { slot: 3, offset: 0, len: 4 }), Err(Errno::EBADF));
    }

    #[test]
    fn an_orphan_can_be_synced_and_truncated_through_its_descriptor() {
        let mut m = model();
        m.create("/f", 0o644).unwrap();
        m.open("/f", 1).unwrap();
        m.pwrite(1, 0, &[5; 9000]).unwrap();
        m.unlink("/f").unwrap();
        m.fsync_fd(1).unwrap();
        m.ftruncate(1, 100).unwrap();
        assert_eq!(m.pread(1, 0, 200).unwrap(), vec![5; 100]);
        assert_eq!(m.used_blocks(), 1);
        assert_eq!(m.ftruncate(1, u64::MAX), Err(Errno::EINVAL));
        m.chattr_of_slot_for_test(1);
        assert_eq!(m.ftruncate(1, 0), Err(Errno::EPERM), "append-only");
        assert_eq!(m.fsync_fd(0), Err(Errno::EBADF));
        m.close(1).unwrap();
        assert_eq!(m.used_blocks(), 0);
    }

    #[test]
    fn a_crash_frees_orphans_and_closes_every_descriptor() {
        let mut m = model();
        m.create("/f", 0o644).unwrap();
        m.sync().unwrap();
        m.open("/f", 0).unwrap();
        m.pwrite(0, 0, &[3; 4096]).unwrap();
        m.unlink("/f").unwrap();
        // A crash now recovers to a tree without /f and without the orphan
        // (ext4_orphan_cleanup), or to one where the unlink had not committed.
        let envelope = m.crash_envelope();
        let mut recovered = model();
        recovered.create("/g", 0o644).unwrap();
        assert!(envelope.check(&mut recovered).is_err(), "a name the model never had");
        assert!(envelope.check(&mut model()).is_ok(), "the unlink committed, the orphan freed");
    }
}
