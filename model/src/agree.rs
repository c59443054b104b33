//! How an implementation's answer is held to the model's. The one place the
//! comparison rules live:
//! - errnos, bytes, write counts, symlink targets: equal;
//! - stat: everything but the inode number; directories' size and blocks are
//!   layout and are skipped, and so is their htree flag (INDEX, 0x1000: the
//!   kernel sets it once a directory outgrows a block, the engine keeps
//!   directories linear); a file's blocks may add extent-tree blocks up to
//!   the model's slack;
//! - readdir: the same set of (name, kind), in any order;
//! - FIEMAP: the same coverage and flags, in any extent boundaries; where the
//!   model marks writeback pending, the range may also be reported written.
//!   That includes unwritten blocks ext4 may have zeroed out when writeback
//!   converted their extent's dirty part (`Alloc::Zeroed`, within
//!   s_extent_max_zeroout_kb of it and inside EOF): whether it splits or
//!   zeroes depends on internals (extent merges, dioread_lock), not on any
//!   promise. Everywhere else unwritten is unwritten: ZERO_RANGE's whole
//!   blocks included. A directory's map is layout: written blocks with no
//!   holes from the start of the asked range, ending anywhere inside it
//!   (none at all only when the range starts past block 0, where every
//!   directory has one);
//!   Blocks a page fault may have allocated with the rest of its folio
//!   (`maybe_hole`) may be missing, or delayed, or written;
//! - count-only FIEMAP (fm_mapped_extents): where extents split is layout
//!   (on-disk extent boundaries, the extent-status cache's entries), so any
//!   count from the number of maximal hole-separated mapped runs in the
//!   range (a lower bound: each run is at least one extent) up to the number
//!   of mapped blocks in it (an upper bound: each extent is at least one
//!   block) agrees. For a directory that is from 1 (0 past block 0) up to
//!   the blocks of the range;
//! - a misaligned direct read over blocks ext4 may have zeroed out
//!   (`Reply::DataOrEinval`): the model's bytes, or EINVAL;
//! - lseek SEEK_DATA/SEEK_HOLE: one of the model's [`SeekChoices`]. A clean
//!   unwritten block is data to ext4 while its page cache holds it uptodate,
//!   which reads and readahead decide, not any promise; a directory's end is
//!   layout (its size, or the largest hash offset once it is indexed).

use std::fmt;

use crate::Errno;
use crate::op::{fiemap_flags, inode_flags, FiemapExtent, FileKind, Outcome, Reply, SeekChoices, Stat};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement(pub String);

impl fmt::Display for Disagreement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn differ(what: impl Into<String>) -> Result<(), Disagreement> {
    Err(Disagreement(what.into()))
}

/// Is `actual` an answer the model's `expected` allows?
pub fn agrees(expected: &Outcome, actual: &Outcome) -> Result<(), Disagreement> {
    match (expected, actual) {
        (Err(a), Err(b)) if a == b => Ok(()),
        (Ok(Reply::Stat(a)), Ok(Reply::Stat(b))) => stat_agrees(a, b),
        (Ok(Reply::Entries(a)), Ok(Reply::Entries(b))) => {
            let (mut a, mut b) = (a.clone(), b.clone());
            a.sort();
            b.sort();
            if a == b {
                Ok(())
            } else {
                differ(format!("listing: model {a:?}, got {b:?}"))
            }
        }
        (Ok(Reply::Extents(a)), Ok(Reply::Extents(b))) => fiemap_agrees(a, b),
        (Ok(Reply::SeekChoices(c)), b) => seek_agrees(c, b),
        (Ok(Reply::ExtentsToCount { extents, block_size }), Ok(Reply::MappedCount(n))) => count_agrees(extents, *block_size, *n),
        // A model against a model (test doubles): the maps themselves.
        (Ok(Reply::ExtentsToCount { extents: a, .. }), Ok(Reply::ExtentsToCount { extents: b, .. })) => fiemap_agrees(a, b),
        // A misaligned direct read over blocks ext4 may have zeroed out.
        (Ok(Reply::DataOrEinval(_)), Err(Errno::EINVAL)) => Ok(()),
        (Ok(Reply::DataOrEinval(a)), Ok(Reply::Data(b))) | (Ok(Reply::Data(a)), Ok(Reply::Data(b))) => {
            if a == b {
                return Ok(());
            }
            let first = a.iter().zip(b.iter()).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            differ(format!("read: model {} bytes, got {}; first difference at byte {first}", a.len(), b.len()))
        }
        (a, b) if a == b => Ok(()),
        (a, b) => differ(format!("model {}, got {}", brief(a), brief(b))),
    }
}

fn seek_agrees(choices: &SeekChoices, actual: &Outcome) -> Result<(), Disagreement> {
    // A model on both sides (the runner's own tests) gives the same choices.
    let same = matches!(actual, Ok(Reply::SeekChoices(c)) if c == choices);
    if same || choices.allows(actual) {
        Ok(())
    } else {
        differ(format!("lseek: model {choices}, got {}", brief(actual)))
    }
}

fn brief(o: &Outcome) -> String {
    match o {
        Err(e) => format!("{e:?}"),
        Ok(Reply::Data(d)) => format!("{} bytes", d.len()),
        Ok(r) => format!("{r:?}"),
    }
}

fn stat_agrees(a: &Stat, b: &Stat) -> Result<(), Disagreement> {
    let layout_free = a.kind == FileKind::Directory;
    let layout_flags = if layout_free { inode_flags::INDEX } else { 0 };
    let same = a.kind == b.kind
        && a.mode == b.mode
        && a.nlink == b.nlink
        && (a.flags & !layout_flags) == (b.flags & !layout_flags)
        && (layout_free || (a.size == b.size && (a.blocks..=a.blocks + a.blocks_slack).contains(&b.blocks)));
    if same {
        Ok(())
    } else {
        differ(format!("stat: model {a:?}, got {b:?}"))
    }
}

/// Flags that describe state rather than how extents were reported.
const STATE_FLAGS: u32 = fiemap_flags::UNWRITTEN | fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN;

/// An extent as compared: start, end, state flags, writeback pending,
/// and whether it may be a hole instead (`FiemapExtent::maybe_hole`).
type Piece = (u64, u64, u32, bool, bool);

/// Splits extents into [`Piece`]s, checking shape.
fn pieces(list: &[FiemapExtent], who: &str) -> Result<Vec<Piece>, Disagreement> {
    let mut out: Vec<Piece> = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let is_last = i + 1 == list.len();
        if (e.flags & fiemap_flags::LAST != 0) != is_last {
            return Err(Disagreement(format!("{who} fiemap: LAST flag on extent {i} of {}", list.len())));
        }
        let end = e.logical.checked_add(e.length).ok_or_else(|| Disagreement(format!("{who} fiemap: extent {i} overflows")))?;
        if e.length == 0 || out.last().is_some_and(|p| p.1 > e.logical) {
            return Err(Disagreement(format!("{who} fiemap: extent {i} {e:?} is empty or overlaps")));
        }
        out.push((e.logical, end, e.flags & STATE_FLAGS, e.writeback_pending, e.maybe_hole));
    }
    Ok(out)
}

fn state_at(pieces: &[Piece], pos: u64) -> Option<(u32, bool, bool)> {
    pieces.iter().find(|p| p.0 <= pos && pos < p.1).map(|p| (p.2, p.3, p.4))
}

/// The model's answer for a directory, if that is what `model` is.
fn directory(model: &[FiemapExtent]) -> Option<&FiemapExtent> {
    match model {
        [d] if d.directory => Some(d),
        _ => None,
    }
}

pub fn fiemap_agrees(model: &[FiemapExtent], actual: &[FiemapExtent]) -> Result<(), Disagreement> {
    let a = pieces(actual, "reported")?;
    if let Some(d) = directory(model) {
        let (from, to) = (d.logical, d.logical.saturating_add(d.length));
        let gapless = a.first().is_none_or(|p| p.0 == from) && a.windows(2).all(|w| w[0].1 == w[1].0);
        let fits = a.last().is_none_or(|p| p.1 <= to) && (from > 0 || !a.is_empty());
        return if gapless && fits && a.iter().all(|p| p.2 == 0) {
            Ok(())
        } else {
            differ(format!("directory fiemap: written blocks without holes from {from}, ending by {to}, expected; got {actual:?}"))
        };
    }
    let m = pieces(model, "model")?;
    let mut cuts: Vec<u64> = m.iter().chain(a.iter()).flat_map(|p| [p.0, p.1]).collect();
    cuts.sort_unstable();
    cuts.dedup();
    for w in cuts.windows(2) {
        let expect = state_at(&m, w[0]);
        let got = state_at(&a, w[0]).map(|s| s.0);
        let ok = match (expect, got) {
            (None, None) | (Some((_, _, true)), None) => true,
            // Pending writeback may have happened (written) or be in flight:
            // ext4 allocates unwritten extents and converts them at I/O end.
            (Some((flags, pending, _)), Some(g)) => g == flags || (pending && (g == 0 || g == fiemap_flags::UNWRITTEN)),
            _ => false,
        };
        if !ok {
            return differ(format!("fiemap bytes {}..{}: model {expect:?}, got {got:?}", w[0], w[1]));
        }
    }
    Ok(())
}

/// Counts of extents the model's map allows (see the module doc).
pub fn count_bounds(model: &[FiemapExtent], block_size: u32) -> (u64, u64) {
    let bs = u64::from(block_size.max(1));
    if let Some(d) = directory(model) {
        return (u64::from(d.logical == 0), d.length / bs);
    }
    // Blocks that may be holes count toward the most, not the least; where
    // they are allocated they may join the runs on either side into one.
    let mut runs = 0;
    let mut chain_has_sure = false;
    for (i, e) in model.iter().enumerate() {
        let joins = i > 0 && model[i - 1].logical.saturating_add(model[i - 1].length) == e.logical;
        if !joins {
            runs += u64::from(chain_has_sure);
            chain_has_sure = false;
        }
        chain_has_sure |= !e.maybe_hole;
    }
    let runs = runs + u64::from(chain_has_sure);
    let blocks = model.iter().map(|e| e.length / bs).sum();
    (runs, blocks)
}

fn count_agrees(model: &[FiemapExtent], block_size: u32, count: u32) -> Result<(), Disagreement> {
    let (least, most) = count_bounds(model, block_size);
    if (least..=most).contains(&u64::from(count)) {
        Ok(())
    } else {
        differ(format!("fiemap count: model allows {least}..={most} (map {model:?}), got {count}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Errno;

    fn ext(logical: u64, length: u64, flags: u32, pending: bool) -> FiemapExtent {
        FiemapExtent { writeback_pending: pending, ..FiemapExtent::new(logical, length, flags) }
    }

    #[test]
    fn fiemap_compares_coverage_not_boundaries() {
        let model = vec![ext(0, 8192, fiemap_flags::UNWRITTEN | fiemap_flags::LAST, false)];
        let split = vec![ext(0, 4096, fiemap_flags::UNWRITTEN, false), ext(4096, 4096, fiemap_flags::UNWRITTEN | fiemap_flags::LAST, false)];
        assert!(fiemap_agrees(&model, &split).is_ok());
        let written = vec![ext(0, 8192, fiemap_flags::LAST, false)];
        assert!(fiemap_agrees(&model, &written).is_err());
        let short = vec![ext(0, 4096, fiemap_flags::UNWRITTEN | fiemap_flags::LAST, false)];
        assert!(fiemap_agrees(&model, &short).is_err());
        let no_last = vec![ext(0, 8192, fiemap_flags::UNWRITTEN, false)];
        assert!(fiemap_agrees(&model, &no_last).is_err());
    }

    #[test]
    fn blocks_that_may_be_holes_may_join_runs_or_vanish() {
        let maybe = |logical, length| FiemapExtent { maybe_hole: true, ..ext(logical, length, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN, true) };
        let model = vec![ext(0, 4096, 0, false), maybe(4096, 8192), ext(12288, 4096, 0, false), maybe(16384, 4096), ext(40960, 4096, fiemap_flags::LAST, false)];
        assert_eq!(count_bounds(&model, 4096), (2, 6), "the first three may be one extent");
        assert!(fiemap_agrees(&model, &[ext(0, 16384, 0, false), ext(40960, 4096, fiemap_flags::LAST, false)]).is_ok(), "allocated and written back");
        assert!(fiemap_agrees(&model, &[ext(0, 4096, 0, false), ext(12288, 4096, 0, false), ext(40960, 4096, fiemap_flags::LAST, false)]).is_ok(), "holes");
        assert!(fiemap_agrees(&model, &[ext(0, 4096, 0, false), ext(40960, 4096, fiemap_flags::LAST, false)]).is_err(), "a sure extent is missing");
    }

    #[test]
    fn a_directory_map_is_written_from_the_range_start_without_holes() {
        let dir = [FiemapExtent::directory_blocks(0..1 << 40)];
        assert!(fiemap_agrees(&dir, &[ext(0, 4096, fiemap_flags::LAST, false)]).is_ok());
        assert!(fiemap_agrees(&dir, &[ext(0, 4096, 0, false), ext(4096, 8192, fiemap_flags::LAST, false)]).is_ok());
        assert!(fiemap_agrees(&dir, &[]).is_err(), "every directory has block 0");
        assert!(fiemap_agrees(&dir, &[ext(4096, 4096, fiemap_flags::LAST, false)]).is_err());
        assert!(fiemap_agrees(&dir, &[ext(0, 4096, 0, false), ext(8192, 4096, fiemap_flags::LAST, false)]).is_err());
        assert!(fiemap_agrees(&dir, &[ext(0, 4096, fiemap_flags::UNWRITTEN | fiemap_flags::LAST, false)]).is_err());
        // A range past block 0 may find the directory ended; it never runs past the range.
        let tail = [FiemapExtent::directory_blocks(8192..16384)];
        assert!(fiemap_agrees(&tail, &[]).is_ok());
        assert!(fiemap_agrees(&tail, &[ext(8192, 4096, fiemap_flags::LAST, false)]).is_ok());
        assert!(fiemap_agrees(&tail, &[ext(8192, 12288, fiemap_flags::LAST, false)]).is_err());
        assert!(fiemap_agrees(&tail, &[ext(0, 12288, fiemap_flags::LAST, false)]).is_err());
    }

    #[test]
    fn a_count_lies_between_the_hole_separated_runs_and_the_mapped_blocks() {
        // Blocks 0..2 written and 2..4 unwritten (one run), a hole, 6..7 delayed.
        let model = vec![ext(0, 8192, 0, false), ext(8192, 8192, fiemap_flags::UNWRITTEN, false), ext(24576, 4096, fiemap_flags::DELALLOC | fiemap_flags::LAST, true)];
        assert_eq!(count_bounds(&model, 4096), (2, 5));
        let count = |n| agrees(&Ok(Reply::ExtentsToCount { extents: model.clone(), block_size: 4096 }), &Ok(Reply::MappedCount(n)));
        assert!(count(1).is_err(), "the hole separates two runs");
        assert!(count(2).is_ok() && count(3).is_ok() && count(5).is_ok());
        assert!(count(6).is_err(), "no extent is smaller than a block");
        assert_eq!(count_bounds(&[], 4096), (0, 0));
        // A directory: at least its first block, at most the range's blocks.
        assert_eq!(count_bounds(&[FiemapExtent::directory_blocks(0..40960)], 4096), (1, 10));
        assert_eq!(count_bounds(&[FiemapExtent::directory_blocks(8192..16384)], 4096), (0, 2));
        // A list is no answer to a count, nor the other way round.
        assert!(agrees(&Ok(Reply::ExtentsToCount { extents: model.clone(), block_size: 4096 }), &Ok(Reply::Extents(model.clone()))).is_err());
        assert!(agrees(&Ok(Reply::Extents(model)), &Ok(Reply::MappedCount(2))).is_err());
    }

    #[test]
    fn pending_writeback_may_show_as_written() {
        let model = vec![ext(0, 4096, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN | fiemap_flags::LAST, true)];
        assert!(fiemap_agrees(&model, &[ext(0, 4096, fiemap_flags::LAST, false)]).is_ok());
        assert!(fiemap_agrees(&model, &[ext(0, 4096, fiemap_flags::DELALLOC | fiemap_flags::UNKNOWN | fiemap_flags::LAST, false)]).is_ok());
        assert!(fiemap_agrees(&model, &[ext(0, 4096, fiemap_flags::UNWRITTEN | fiemap_flags::LAST, false)]).is_ok(), "writeback in flight");
        let clean = vec![ext(0, 4096, fiemap_flags::UNWRITTEN | fiemap_flags::LAST, false)];
        assert!(fiemap_agrees(&clean, &[ext(0, 4096, fiemap_flags::LAST, false)]).is_err(), "clean unwritten never reads as written");
    }

    #[test]
    fn file_blocks_may_add_tree_blocks_up_to_the_slack() {
        let f = |blocks, slack| Stat { ino: 1, kind: FileKind::Regular, mode: 0o100644, nlink: 1, size: 1 << 20, blocks, flags: 0, blocks_slack: slack };
        assert!(stat_agrees(&f(72, 8), &f(80, 0)).is_ok());
        assert!(stat_agrees(&f(72, 8), &f(72, 0)).is_ok());
        assert!(stat_agrees(&f(72, 8), &f(88, 0)).is_err());
        assert!(stat_agrees(&f(72, 8), &f(64, 0)).is_err());
    }

    #[test]
    fn stat_skips_inode_numbers_and_directory_layout() {
        let s = |ino, kind, size| Stat { ino, kind, mode: 0o40755, nlink: 2, size, blocks: 8, flags: 0, blocks_slack: 0 };
        assert!(agrees(&Ok(Reply::Stat(s(2, FileKind::Directory, 4096))), &Ok(Reply::Stat(s(9, FileKind::Directory, 8192)))).is_ok());
        // The kernel's htree flag on a grown directory (0x81000 against 0x80000).
        let flagged = |kind, flags| Stat { flags, ..s(2, kind, 4096) };
        let (linear, htree) = (inode_flags::EXTENTS, inode_flags::EXTENTS | inode_flags::INDEX);
        assert!(agrees(&Ok(Reply::Stat(flagged(FileKind::Directory, linear))), &Ok(Reply::Stat(flagged(FileKind::Directory, htree)))).is_ok());
        assert!(agrees(&Ok(Reply::Stat(flagged(FileKind::Regular, linear))), &Ok(Reply::Stat(flagged(FileKind::Regular, htree)))).is_err());
        assert!(agrees(&Ok(Reply::Stat(s(2, FileKind::Regular, 4096))), &Ok(Reply::Stat(s(9, FileKind::Regular, 8192)))).is_err());
        assert!(agrees(&Err(Errno::ENOENT), &Err(Errno::EEXIST)).is_err());
        assert!(agrees(&Err(Errno::ENOENT), &Ok(Reply::Done)).is_err());
    }
}
