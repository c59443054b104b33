//! ext4's auto_da_alloc: two ways programs replace a file without fsync
//! (truncate it to 0 and write it again; write a new file and rename it over
//! the old) get the new data's delayed blocks written back early, so a crash
//! soon after is less likely to leave an empty file.
//!
//! - ext4_truncate flags a file it leaves at size 0 (DA_ALLOC_CLOSE, kept in
//!   memory only); the next close of any descriptor of it (ext4_release_file)
//!   clears the flag and, if delayed blocks are reserved, starts write-back.
//! - ext4_rename starts write-back of the source's delayed blocks when the
//!   rename replaces an existing name.
//!
//! Starting is not finishing (filemap_flush): the blocks are allocated at
//! once, and i_disksize moves as their I/O is submitted, but under
//! dioread_nolock they stay unwritten until it ends, so FIEMAP may show
//! them either way. `noauto_da_alloc` turns both off.

use crate::content::Source;
use crate::crash_log::Call;
use crate::data::{Alloc, FileData};
use crate::model::Model;
use crate::op::Op;
use crate::state::{Ino, Node};
use crate::Errno;

impl FileData {
    /// Blocks reserved by delayed allocation (i_reserved_data_blocks > 0).
    pub fn has_delayed(&self) -> bool {
        self.blocks.iter().any(|(_, a)| *a == Alloc::Delayed)
    }

    /// filemap_flush: every dirty block is on its way to disk. Delayed
    /// blocks get their blocks (unwritten until the I/O ends), and dirty
    /// unwritten blocks start converting, which may zero out their short
    /// unwritten neighbours as [`FileData::settle_from`] says.
    pub fn start_writeback(&mut self, bs: u64) {
        // mpage_map_and_submit_extent moves i_disksize as it submits, not
        // when the I/O ends: to the size, every dirty block being on its way.
        self.disksize = None;
        let converting: Vec<_> = self.blocks.iter().filter(|(_, a)| **a == Alloc::UnwrittenDirty).map(|(r, _)| r).collect();
        let dirty: Vec<_> = self.blocks.iter().filter(|(_, a)| matches!(**a, Alloc::Delayed | Alloc::UnwrittenDirty)).map(|(r, _)| r).collect();
        self.blocks.update(0..u64::MAX, |a| Some(if *a == Alloc::Delayed { Alloc::UnwrittenDirty } else { *a }));
        for r in dirty {
            self.submitted.insert(r, ());
        }
        for r in converting {
            self.zeroout_around(r, bs);
        }
    }
}

impl Model {
    /// ext4_alloc_da_blocks: write-back starts if delayed blocks are reserved.
    pub(crate) fn alloc_da_blocks(&mut self, ino: Ino) {
        let bs = self.bs();
        if let Node::File(f) = &mut self.st.inode_mut(ino).node {
            if f.has_delayed() {
                f.start_writeback(bs);
            }
        }
    }

    /// ext4_truncate leaving the file at size 0.
    pub(crate) fn truncated_to_zero(&mut self, ino: Ino) {
        let auto = self.mount.auto_da_alloc;
        if let Node::File(f) = &mut self.st.inode_mut(ino).node {
            f.da_alloc_close |= auto && f.size == 0;
        }
    }

    /// ext4_release_file: the close at the end of an op that opened `ino`.
    pub(crate) fn release(&mut self, ino: Ino) {
        if self.harness_looking {
            return;
        }
        let flagged = match &mut self.st.inode_mut(ino).node {
            Node::File(f) => std::mem::take(&mut f.da_alloc_close),
            _ => false,
        };
        if flagged {
            self.alloc_da_blocks(ino);
        }
    }

    /// Whether closing `ino` would change the file: the close of an op
    /// that only looks is then logged for the crash check like a change.
    pub(crate) fn close_changes(&self, ino: Ino) -> bool {
        !self.harness_looking && self.file(ino).is_some_and(|f| f.da_alloc_close)
    }

    /// The close of an op that only looks: logged as `op` when it changes
    /// the file, then a release like any other.
    pub(crate) fn release_looking(&mut self, ino: Ino, op: impl FnOnce() -> Op) {
        if self.close_changes(ino) {
            self.record(|| Call::Op(op()));
        }
        self.release(ino);
    }

    /// open(O_WRONLY|O_TRUNC) + write at 0 + close. The open refuses as any
    /// open for writing does; the truncate is ext4_setattr's, which runs
    /// ext4_truncate even on an empty file.
    pub(crate) fn do_rewrite(&mut self, path: &str, len: usize, source: Source) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        self.truncate_inode(ino, 0);
        let written = self.write_at(ino, 0, len, source);
        self.release(ino);
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::FileSystem;
    use crate::op::{fiemap_flags, Reply};
    use crate::MountConfig;

    fn model(options: &str) -> Model {
        Model::new(&options.parse::<MountConfig>().unwrap()).unwrap()
    }

    fn delayed(m: &mut Model, path: &str) -> bool {
        m.fiemap(path, crate::op::FiemapRequest::whole(0)).unwrap().iter().any(|e| e.flags & fiemap_flags::DELALLOC != 0)
    }

    #[test]
    fn truncate_to_zero_then_rewrite_starts_write_back_at_the_close() {
        let mut m = model("");
        m.create("/f", 0o644).unwrap();
        m.write("/f", 0, &[1; 5000]).unwrap();
        assert!(delayed(&mut m, "/f"));
        assert_eq!(m.apply(&Op::Rewrite { path: "/f".into(), len: 3000, seed: 1 }), Ok(Reply::Written(3000)));
        assert!(!delayed(&mut m, "/f"), "the rewrite's close flushed");
        let pending = m.fiemap("/f", crate::op::FiemapRequest::whole(0)).unwrap();
        assert!(pending[0].writeback_pending && pending[0].flags & fiemap_flags::UNWRITTEN != 0, "in flight: {pending:?}");
        // A plain write afterwards is delayed again: the flag went with the close.
        m.write("/f", 8192, &[2; 10]).unwrap();
        assert!(delayed(&mut m, "/f"));
    }

    #[test]
    fn the_flag_waits_for_the_next_close_even_one_that_only_reads() {
        let mut m = model("");
        m.create("/f", 0o644).unwrap();
        m.truncate("/f", 0).unwrap(); // truncate(2) opens nothing
        m.write("/f", 0, &[1; 100]).unwrap(); // its close flushes
        assert!(!delayed(&mut m, "/f"));
        m.truncate("/f", 0).unwrap();
        m.readlink("/f").unwrap_err(); // opens nothing
        let seq = m.seq();
        m.read("/f", 0, 1).unwrap(); // clears the flag: nothing is delayed
        assert_eq!(m.seq(), seq + 1, "a close that changes the file is logged");
        m.write("/f", 0, &[1; 100]).unwrap();
        assert!(delayed(&mut m, "/f"));
        // stat reads the flags through a descriptor of its own.
        m.truncate("/f", 0).unwrap();
        m.stat("/f").unwrap();
        m.write("/f", 0, &[1; 100]).unwrap();
        assert!(delayed(&mut m, "/f"), "stat's close took the flag");
        // A harness looking closes nothing.
        m.truncate("/f", 0).unwrap();
        let seq = m.seq();
        m.looking(|m| m.stat("/f").and(m.read("/f", 0, 1).map(drop))).unwrap();
        assert_eq!(m.seq(), seq);
        m.write("/f", 0, &[1; 100]).unwrap();
        assert!(!delayed(&mut m, "/f"), "the write's close still had the flag");
    }

    #[test]
    fn rename_over_an_existing_name_flushes_the_source_and_noauto_turns_it_off() {
        for (options, flushed) in [("", true), ("noauto_da_alloc", false)] {
            let mut m = model(options);
            for p in ["/new", "/old"] {
                m.create(p, 0o644).unwrap();
            }
            m.write("/new", 0, &[3; 4096]).unwrap();
            m.rename("/new", "/old").unwrap();
            assert_eq!(!delayed(&mut m, "/old"), flushed, "{options}");
            m.write("/old", 8192, &[3; 10]).unwrap();
            m.rename("/old", "/other").unwrap(); // no name replaced
            assert!(delayed(&mut m, "/other"), "{options}: a rename onto a new name flushes nothing");
        }
    }

    #[test]
    fn a_rewrite_is_refused_as_an_open_for_writing_is() {
        let mut m = model("");
        m.mkdir("/d", 0o755).unwrap();
        assert_eq!(m.apply(&Op::Rewrite { path: "/d".into(), len: 1, seed: 1 }), Err(Errno::EISDIR));
        assert_eq!(m.apply(&Op::Rewrite { path: "/nope".into(), len: 1, seed: 1 }), Err(Errno::ENOENT));
        m.create("/f", 0o644).unwrap();
        m.write("/f", 0, &[1; 10]).unwrap();
        m.chattr("/f", crate::op::ChattrFlag::Append, true).unwrap();
        assert_eq!(m.apply(&Op::Rewrite { path: "/f".into(), len: 1, seed: 1 }), Err(Errno::EPERM));
        assert_eq!(m.stat("/f").unwrap().size, 10, "nothing truncated");
    }
}
