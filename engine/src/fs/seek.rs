//! lseek SEEK_DATA / SEEK_HOLE as ext4_llseek answers them: a walk over
//! the extents from the offset to EOF, each looked up through the extent
//! status cache as ext4's report ops do (so a file only looked up since it
//! was read keeps its tree on disk), where delayed extents are data and,
//! inside an unwritten extent, a block is data while an uptodate folio
//! covers it (iomap's `mapping_seek_hole_data`). Directories go through
//! ext4_dir_llseek.

use ext4_model::op::SeekWhence;
use ext4_model::vfs::LOFF_MAX;
use ext4_model::Errno;

use crate::device::BlockDevice;
use crate::extent_status::source::Found;
use crate::format::inode::FL_INDEX;
use crate::format::superblock::feature;
use crate::format::InodeNumber;
use crate::pagecache::PageCache;

use super::locks::Lock;
use super::node::Node;
use super::Ext4;

/// What one block is to a seek.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Looks {
    Hole,
    Data,
}

/// Block `b` of `node`, which the tree says is `found`, asked the way
/// iomap asks ext4's report ops.
fn looks(pages: Option<&PageCache>, ino: InodeNumber, node: &Node, b: u64, found: Found) -> Looks {
    if node.es.is_delayed(b) {
        return Looks::Data;
    }
    match found {
        Found::Hole { .. } => Looks::Hole,
        Found::Mapped(p) if !p.unwritten => Looks::Data,
        Found::Mapped(_) => {
            let cached = pages.and_then(|pages| pages.locate(ino, b).and_then(|(index, i)| pages.folio(ino, index).map(|f| f.is_uptodate(i))));
            if cached == Some(true) {
                Looks::Data
            } else {
                Looks::Hole
            }
        }
    }
}

/// The first block at or after `b` whose kind may differ from `b`'s, so a
/// long extent or hole is crossed in one step unless it is unwritten.
fn next_boundary(node: &Node, b: u64, end: u64, found: Found) -> u64 {
    let delayed_end = node.es.delayed_in(b..end).next().map(|d| if d.start <= b { d.end } else { d.start });
    let extent_end = match found {
        Found::Mapped(p) if p.unwritten => b + 1,
        Found::Mapped(p) => p.logical + p.len,
        Found::Hole { end: next, .. } => next.min(end),
    };
    delayed_end.map_or(extent_end, |d| d.min(extent_end)).clamp(b + 1, end)
}

impl<D: BlockDevice> Ext4<D> {
    pub(crate) fn do_lseek(&mut self, path: &str, offset: u64, whence: SeekWhence) -> Result<u64, Errno> {
        let ino = self.open_path(path)?;
        let found = match self.seek_takes_inode_lock(ino) {
            true => self.under_inode_lock(ino, Lock::InodeRwsem, true, "ext4_llseek", |fs| fs.seek_open(ino, offset, whence)),
            false => self.seek_open(ino, offset, whence),
        };
        self.closing(ino, found)
    }

    /// ext4_llseek takes i_rwsem shared for SEEK_DATA and SEEK_HOLE; of
    /// the inodes whose lock a split op may hold (regular files: the
    /// journal-flag switch) that is all of them.
    pub(crate) fn seek_takes_inode_lock(&mut self, ino: InodeNumber) -> bool {
        self.kind_of(ino).is_ok_and(|k| k == ext4_model::FileKind::Regular)
    }

    fn seek_open(&mut self, ino: InodeNumber, offset: u64, whence: SeekWhence) -> Result<u64, Errno> {
        #[cfg(feature = "test-hooks")]
        let ask_cache = !self.bug_seek_ignores_page_cache();
        #[cfg(not(feature = "test-hooks"))]
        let ask_cache = true;
        let bs = self.ctx.bs();
        let dir_index = self.ctx.sb.feature_compat & feature::COMPAT_DIR_INDEX != 0;
        let (ctx, node) = self.split_for_lookup(ino)?;
        // A negative loff_t: nothing before or after it.
        if offset > LOFF_MAX {
            return Err(Errno::ENXIO);
        }
        if node.disk.is_dir() {
            // is_dx_dir: indexed, or one block with dir_index, ends at the
            // largest 64-bit hash offset; a linear directory at its size.
            let dx = dir_index && (node.disk.has_flag(FL_INDEX) || node.disk.size == bs);
            let eof = if dx { LOFF_MAX } else { node.disk.size };
            if offset >= eof {
                return Err(Errno::ENXIO);
            }
            return Ok(match whence {
                SeekWhence::Data => offset,
                SeekWhence::Hole => eof,
            });
        }
        let size = node.disk.size;
        if offset >= size {
            return Err(Errno::ENXIO);
        }
        let wanted = match whence {
            SeekWhence::Data => Looks::Data,
            SeekWhence::Hole => Looks::Hole,
        };
        let (first, end) = (offset / bs, size.div_ceil(bs));
        let mut b = first;
        while b < end {
            let found = ctx.lookup_block(ino, node, b)?;
            if looks(ask_cache.then_some(&ctx.pages), ino, node, b, found) == wanted {
                return Ok(if b == first { offset } else { b * bs });
            }
            b = next_boundary(node, b, end, found);
        }
        match whence {
            SeekWhence::Data => Err(Errno::ENXIO),
            SeekWhence::Hole => Ok(size),
        }
    }
}

#[cfg(test)]
mod tests {
    use ext4_model::op::SeekWhence::{Data, Hole};
    use ext4_model::{Errno, FallocFlags, FileSystem};

    use crate::device_mem::MemDevice;
    use crate::fs::Ext4;

    use crate::fixtures::mounted_with as mounted;

    const BS: u64 = 4096;

    fn seek(fs: &mut Ext4<MemDevice>, offset: u64, whence: ext4_model::SeekWhence) -> Result<u64, Errno> {
        fs.do_lseek("/f", offset, whence)
    }

    #[test]
    fn holes_written_and_delayed_blocks_and_eof() {
        let mut fs = mounted("");
        fs.create("/f", 0o644).unwrap();
        fs.write("/f", 2 * BS, &[7; 10]).unwrap(); // delayed block 2; size 2 blocks + 10
        assert_eq!(seek(&mut fs, 0, Data), Ok(2 * BS));
        assert_eq!(seek(&mut fs, 5, Hole), Ok(5));
        assert_eq!(seek(&mut fs, 2 * BS + 3, Hole), Ok(2 * BS + 10), "no hole before EOF");
        fs.sync().unwrap(); // now written
        assert_eq!(seek(&mut fs, 100, Data), Ok(2 * BS));
        assert_eq!(seek(&mut fs, 2 * BS + 10, Data), Err(Errno::ENXIO), "at EOF");
        assert_eq!(seek(&mut fs, u64::MAX, Hole), Err(Errno::ENXIO), "negative offset");
    }

    #[test]
    fn an_unwritten_block_is_data_while_an_uptodate_folio_covers_it() {
        let mut fs = mounted("");
        fs.create("/f", 0o644).unwrap();
        fs.fallocate("/f", FallocFlags::ALLOCATE, 0, 4 * BS).unwrap();
        assert_eq!(seek(&mut fs, 0, Data), Err(Errno::ENXIO), "nothing cached: all hole");
        assert_eq!(seek(&mut fs, 0, Hole), Ok(0));
        fs.write("/f", BS + 1, &[1; 2]).unwrap(); // dirty over unwritten block 1
        assert_eq!(seek(&mut fs, 0, Data), Ok(BS));
        assert_eq!(seek(&mut fs, BS, Hole), Ok(2 * BS));
        fs.read("/f", 3 * BS, 1).unwrap(); // zeros read in: uptodate, clean
        assert_eq!(seek(&mut fs, 2 * BS, Data), Ok(3 * BS));
    }

    /// After a mount, seeking walks the extent status cache into the
    /// on-disk tree; the file's tree is not read whole for it.
    #[test]
    fn a_fresh_mount_seeks_through_the_extent_status_cache() {
        let mut fs = mounted("");
        fs.create("/f", 0o644).unwrap();
        for b in [0, 2, 3, 10, 11, 12, 30] {
            fs.write("/f", b * BS, &[5; 4096]).unwrap();
        }
        fs.sync().unwrap();
        let mut fs = Ext4::mount(fs.unmount().unwrap(), &"".parse().unwrap()).unwrap();
        let ino = fs.open_path("/f").unwrap();
        assert_eq!(seek(&mut fs, 0, Hole), Ok(BS));
        assert_eq!(seek(&mut fs, BS, Data), Ok(2 * BS));
        assert_eq!(seek(&mut fs, 2 * BS, Hole), Ok(4 * BS));
        assert_eq!(seek(&mut fs, 13 * BS, Data), Ok(30 * BS));
        assert_eq!(seek(&mut fs, 30 * BS + 7, Hole), Ok(31 * BS), "EOF");
        let node = &fs.nodes[&ino];
        assert!(!node.tree_loaded(), "seeking needs no whole tree");
        assert!(node.es.cached_extents() >= 3);
    }

    #[test]
    fn a_directory_ends_at_the_largest_hash_offset_with_dir_index() {
        let mut fs = mounted("");
        fs.mkdir("/d", 0o755).unwrap();
        assert_eq!(fs.do_lseek("/d", 7, Data), Ok(7));
        assert_eq!(fs.do_lseek("/d", 7, Hole), Ok(i64::MAX as u64));
    }
}
