//! ext4's auto_da_alloc: a file truncated to 0 has its delayed blocks
//! written back at its next close (ext4_release_file), and a rename that
//! replaces a name writes back the source's (ext4_rename), so the two ways
//! programs replace files without fsync rarely leave them empty after a
//! crash. `noauto_da_alloc` turns both off. ext4 only starts that
//! write-back; this engine finishes it, which the model allows.

use ext4_model::Errno;

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::Ext4;

impl<D: BlockDevice> Ext4<D> {
    /// ext4_alloc_da_blocks: write-back if delayed blocks are reserved.
    pub(crate) fn alloc_da_blocks(&mut self, ino: InodeNumber) -> Result<(), Errno> {
        let delayed = self.nodes.get(&ino).map_or(0, |n| n.es.delayed_blocks());
        if delayed > 0 {
            self.write_back_data(ino, 0).map_err(Errno::from)?;
        }
        Ok(())
    }

    /// ext4_release_file, for the descriptor an op opened on `ino`.
    pub(crate) fn release_file(&mut self, ino: InodeNumber) -> Result<(), Errno> {
        // The last writer gone and nothing reserved: mballoc's windows go.
        if !self.held_for_write(ino) && self.ctx.writers.remove(&ino) && self.nodes.get(&ino).is_some_and(|n| n.es.delayed_blocks() == 0) {
            self.ctx.alloc.discard_inode_preallocations(ino);
        }
        let flagged = self.nodes.get_mut(&ino).is_some_and(|n| std::mem::take(&mut n.da_alloc_close));
        #[cfg(feature = "test-hooks")]
        let flagged = flagged && !self.bug_release_forgets();
        if flagged {
            self.alloc_da_blocks(ino)?;
        }
        Ok(())
    }

    /// Closes `ino` after an op that opened it returned `result`; the op's
    /// own error is the one reported.
    pub(crate) fn closing<T>(&mut self, ino: InodeNumber, result: Result<T, Errno>) -> Result<T, Errno> {
        let closed = self.release_file(ino);
        let value = result?;
        closed.map(|()| value)
    }

    /// open(O_WRONLY|O_TRUNC) + write at 0 + close.
    pub(crate) fn do_rewrite(&mut self, path: &str, data: &[u8]) -> Result<u64, Errno> {
        let ino = self.open_for_write(path, false)?;
        // The open's truncation (do_truncate under the inode lock), then the write.
        let rwsem = super::locks::Lock::InodeRwsem;
        let written = self
            .under_inode_lock(ino, rwsem, false, "do_truncate", |fs| fs.truncate_inode(ino, 0))
            .and_then(|()| self.under_inode_lock(ino, rwsem, false, "ext4_buffered_write_iter", |fs| fs.write_at(ino, 0, data)));
        self.closing(ino, written)
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::op::fiemap_flags;
    use ext4_model::FileSystem;

    use crate::device_mem::MemDevice;
    use crate::fs::Ext4;

    use crate::fixtures::mounted_with as mounted;

    fn delayed(fs: &mut Ext4<MemDevice>, path: &str) -> bool {
        fs.fiemap(path, ext4_model::FiemapRequest::whole(0)).unwrap().iter().any(|e| e.flags & fiemap_flags::DELALLOC != 0)
    }

    #[test]
    fn a_rewrite_and_a_close_after_truncate_to_zero_write_back_and_noauto_does_not() {
        for (options, auto) in [("", true), ("noauto_da_alloc", false)] {
            let mut fs = mounted(options);
            fs.create("/f", 0o644).unwrap();
            fs.write("/f", 0, &[1; 5000]).unwrap();
            assert!(delayed(&mut fs, "/f"));
            assert_eq!(fs.rewrite("/f", &[2; 3000]), Ok(3000));
            assert_eq!(delayed(&mut fs, "/f"), !auto, "{options}");
            assert_eq!(fs.read("/f", 0, 4000).unwrap(), vec![2; 3000]);
            fs.truncate("/f", 0).unwrap();
            fs.write("/f", 0, &[3; 100]).unwrap();
            assert_eq!(delayed(&mut fs, "/f"), !auto, "{options}: truncate(2) flags, the write's close flushes");
            fs.write("/f", 8192, &[3; 100]).unwrap();
            assert!(delayed(&mut fs, "/f"), "the flag went with the close");
        }
    }

    #[test]
    fn renaming_over_a_name_writes_the_source_back() {
        let mut fs = mounted("");
        fs.create("/old", 0o644).unwrap();
        fs.create("/new", 0o644).unwrap();
        fs.write("/new", 0, &[4; 4096]).unwrap();
        fs.rename("/new", "/other").unwrap();
        assert!(delayed(&mut fs, "/other"), "no name replaced");
        fs.rename("/other", "/old").unwrap();
        assert!(!delayed(&mut fs, "/old"));
    }
}
