//! lseek(SEEK_DATA / SEEK_HOLE) in the model: what each block is to a seek,
//! and the answers that follow ([`SeekChoices`]).

use std::ops::Range;

use crate::data::{Alloc, FileData};
use crate::model::Model;
use crate::op::{Op, SeekChoices, SeekWhence};
use crate::vfs::LOFF_MAX;
use crate::Errno;

/// What a block is to SEEK_DATA and SEEK_HOLE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Looks {
    Hole,
    Data,
    /// Unwritten and clean: data while the page cache holds it uptodate (a
    /// read or readahead put zeros there), a hole otherwise. A zeroed-out
    /// neighbour may also be written by now.
    Either,
}

fn looks(a: Option<Alloc>) -> Looks {
    match a {
        None => Looks::Hole,
        Some(Alloc::Written | Alloc::Delayed | Alloc::UnwrittenDirty) => Looks::Data,
        Some(Alloc::Unwritten | Alloc::Zeroed) => Looks::Either,
    }
}

impl FileData {
    /// Blocks `span` as runs of what they look like to a seek, holes included.
    fn seek_runs(&self, span: Range<u64>) -> Vec<(Range<u64>, Looks)> {
        let mut runs: Vec<(Range<u64>, Looks)> = Vec::new();
        let mut push = |r: Range<u64>, l: Looks| match runs.last_mut() {
            Some((last, kind)) if *kind == l && last.end == r.start => last.end = r.end,
            _ => runs.push((r, l)),
        };
        let mut at = span.start;
        // A hole a page fault may have allocated is data or a hole.
        let hole = |r: Range<u64>, push: &mut dyn FnMut(Range<u64>, Looks)| {
            let mut at = r.start;
            for m in self.maybe_allocated_in(r.clone()) {
                if m.start > at {
                    push(at..m.start, Looks::Hole);
                }
                push(m.clone(), Looks::Either);
                at = m.end;
            }
            if at < r.end {
                push(at..r.end, Looks::Hole);
            }
        };
        for (r, a) in self.blocks.overlapping(span.clone()) {
            let r = r.start.max(span.start)..r.end.min(span.end);
            if r.start > at {
                hole(at..r.start, &mut push);
            }
            push(r.clone(), looks(Some(a)));
            at = r.end;
        }
        if at < span.end {
            hole(at..span.end, &mut push);
        }
        runs
    }

    /// ext4_llseek for a regular file: iomap's walk over `[pos, size)`.
    pub fn seek(&self, pos: u64, whence: SeekWhence, bs: u64) -> Result<SeekChoices, Errno> {
        // A negative loff_t and anything at or past EOF: nothing to find.
        if pos > LOFF_MAX || pos >= self.size {
            return Err(Errno::ENXIO);
        }
        let first = pos / bs;
        let mut choices = SeekChoices { block_size: bs, ..SeekChoices::default() };
        for (r, kind) in self.seek_runs(first..self.size.div_ceil(bs)) {
            let at = if r.start == first { pos } else { r.start * bs };
            let wanted = match whence {
                SeekWhence::Data => Looks::Data,
                SeekWhence::Hole => Looks::Hole,
            };
            if kind == Looks::Either {
                choices.exact.push(at);
                if r.end > r.start + 1 {
                    choices.block_starts.push((r.start + 1) * bs..r.end * bs);
                }
            } else if kind == wanted {
                choices.exact.push(at);
                return Ok(choices);
            }
        }
        // Nothing settled it before EOF.
        match whence {
            SeekWhence::Data => {
                choices.enxio = true;
                // A clean unwritten block holding EOF mid-block, in a folio
                // of several blocks: folio_seek_hole_data steps a block at
                // a time and stops at the range's end, EOF, which Linux
                // 6.18 returns as found data (host oracle, bs 1k and 2k).
                let eof_block = self.size / bs;
                let quirk = self.size % bs != 0 && self.seek_runs(eof_block..eof_block + 1).first().is_some_and(|(_, l)| *l == Looks::Either);
                if quirk {
                    choices.exact.push(self.size);
                }
            }
            SeekWhence::Hole => choices.exact.push(self.size),
        }
        Ok(choices)
    }
}

impl Model {
    /// open(O_RDONLY) + lseek + close.
    pub(crate) fn do_lseek(&mut self, path: &str, offset: u64, whence: SeekWhence) -> Result<SeekChoices, Errno> {
        let ino = self.open_path(path)?;
        let bs = self.bs();
        let choices = match self.file(ino) {
            Some(f) => f.seek(offset, whence, bs),
            None => directory_seek(offset, whence, bs),
        };
        self.release_looking(ino, || Op::Lseek { path: path.into(), offset, whence });
        choices
    }
}

/// A directory's answer is layout. ext4_dir_llseek treats an indexed
/// directory (or a one-block one, with dir_index) as a file that ends at
/// the largest hash offset, and any other as a file of written blocks that
/// ends at its size; the model knows neither, only that a directory has at
/// least one block.
fn directory_seek(pos: u64, whence: SeekWhence, bs: u64) -> Result<SeekChoices, Errno> {
    if pos > LOFF_MAX {
        return Err(Errno::ENXIO);
    }
    let past_first_block = pos >= bs;
    Ok(match whence {
        SeekWhence::Data => SeekChoices { exact: vec![pos], enxio: past_first_block, ..SeekChoices::default() },
        SeekWhence::Hole => {
            let size_from = (pos / bs + 1) * bs;
            SeekChoices { exact: vec![LOFF_MAX], block_starts: std::iter::once(size_from..LOFF_MAX).collect(), block_size: bs, enxio: past_first_block }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::Source;
    use crate::op::Reply;

    const BS: u64 = 4096;

    /// Blocks: 0 written, 1-2 hole, 3-5 unwritten, 6 delayed, 7 hole; size 7.5 blocks.
    fn file() -> FileData {
        let mut f = FileData::default();
        f.write(0, BS, Source::Pattern { seed: 1, at: 0 }, BS, Alloc::Written);
        f.blocks.insert(3..6, Alloc::Unwritten);
        f.write(6 * BS, 10, Source::Pattern { seed: 2, at: 0 }, BS, Alloc::Delayed);
        f.size = 7 * BS + 2048;
        f
    }

    fn offset(x: u64) -> crate::op::Outcome {
        Ok(Reply::Offset(x))
    }

    #[test]
    fn data_and_holes_are_exact_where_the_page_cache_cannot_matter() {
        let f = file();
        assert_eq!(f.seek(100, SeekWhence::Data, BS).unwrap().only(), Some(offset(100)));
        assert_eq!(f.seek(100, SeekWhence::Hole, BS).unwrap().only(), Some(offset(BS)));
        assert_eq!(f.seek(BS + 5, SeekWhence::Hole, BS).unwrap().only(), Some(offset(BS + 5)));
        assert_eq!(f.seek(6 * BS + 1, SeekWhence::Data, BS).unwrap().only(), Some(offset(6 * BS + 1)), "delayed is data");
        assert_eq!(f.seek(6 * BS, SeekWhence::Hole, BS).unwrap().only(), Some(offset(7 * BS)));
        assert_eq!(f.seek(7 * BS + 100, SeekWhence::Data, BS), Ok(SeekChoices { block_size: BS, enxio: true, ..SeekChoices::default() }));
        assert_eq!(f.seek(7 * BS + 2048, SeekWhence::Hole, BS), Err(Errno::ENXIO), "at EOF");
        assert_eq!(f.seek(u64::MAX, SeekWhence::Data, BS), Err(Errno::ENXIO), "negative loff_t");
    }

    #[test]
    fn unwritten_blocks_may_answer_either_way() {
        let f = file();
        let data = f.seek(BS, SeekWhence::Data, BS).unwrap();
        for x in [3 * BS, 4 * BS, 5 * BS, 6 * BS] {
            assert!(data.allows(&offset(x)), "{x}: {data}");
        }
        assert!(!data.allows(&offset(BS)) && !data.allows(&offset(7 * BS)) && !data.allows(&Err(Errno::ENXIO)));
        let hole = f.seek(3 * BS + 7, SeekWhence::Hole, BS).unwrap();
        for x in [3 * BS + 7, 4 * BS, 5 * BS, 7 * BS] {
            assert!(hole.allows(&offset(x)), "{x}: {hole}");
        }
        assert!(!hole.allows(&offset(6 * BS)), "delayed data is never a hole");
        assert!(!hole.allows(&offset(3 * BS)), "before the start");
        // Past the last data only unwritten blocks remain: ENXIO or one of them.
        let mut tail = FileData::default();
        tail.blocks.insert(0..2, Alloc::Unwritten);
        tail.size = 2 * BS;
        let c = tail.seek(0, SeekWhence::Data, BS).unwrap();
        assert!(c.allows(&Err(Errno::ENXIO)) && c.allows(&offset(0)) && c.allows(&offset(BS)));
        let c = tail.seek(0, SeekWhence::Hole, BS).unwrap();
        assert!(c.allows(&offset(0)) && c.allows(&offset(BS)) && c.allows(&offset(2 * BS)));
    }

    #[test]
    fn a_directory_is_data_from_the_offset_and_its_end_is_layout() {
        let d = directory_seek(10, SeekWhence::Data, BS).unwrap();
        assert!(d.allows(&offset(10)) && !d.allows(&Err(Errno::ENXIO)) && !d.allows(&offset(BS)));
        let h = directory_seek(10, SeekWhence::Hole, BS).unwrap();
        assert!(h.allows(&offset(BS)) && h.allows(&offset(LOFF_MAX)) && !h.allows(&offset(10)) && !h.allows(&Err(Errno::ENXIO)));
        assert!(directory_seek(2 * BS, SeekWhence::Hole, BS).unwrap().allows(&Err(Errno::ENXIO)));
        assert_eq!(directory_seek(u64::MAX, SeekWhence::Data, BS), Err(Errno::ENXIO));
    }
}
