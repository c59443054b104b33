//! lseek's SEEK_DATA and SEEK_HOLE, and the set of answers the model allows.
//!
//! ext4 answers from its extents (holes, written, delayed) and, inside an
//! unwritten extent, from its page cache: a block there counts as data while
//! an uptodate folio covers it (`mapping_seek_hole_data`). Reads, readahead
//! and eviction decide which blocks are cached, and none of that is a
//! promise, so the model names every answer some cache state gives.

use std::fmt;
use std::ops::Range;

use super::{Outcome, Reply};
use crate::Errno;

/// The two `whence` values that look at the file's layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, arbitrary::Arbitrary)]
pub enum SeekWhence {
    /// SEEK_DATA: the first offset at or after the given one that holds data.
    Data,
    /// SEEK_HOLE: the first offset at or after it in a hole (EOF counts as one).
    Hole,
}

impl SeekWhence {
    /// The value lseek(2) takes (SEEK_DATA 3, SEEK_HOLE 4).
    pub fn raw(self) -> i32 {
        match self {
            SeekWhence::Data => 3,
            SeekWhence::Hole => 4,
        }
    }

    /// Its name in traces.
    pub fn text(self) -> &'static str {
        match self {
            SeekWhence::Data => "data",
            SeekWhence::Hole => "hole",
        }
    }
}

/// Offsets lseek may return, and whether it may say ENXIO instead.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SeekChoices {
    /// Offsets allowed as they are (the starting offset, the file size).
    pub exact: Vec<u64>,
    /// Byte ranges in which every multiple of `block_size` is allowed: the
    /// starts of blocks whose answer hangs on the page cache.
    pub block_starts: Vec<Range<u64>>,
    pub block_size: u64,
    /// SEEK_DATA may find no data before EOF.
    pub enxio: bool,
}

impl SeekChoices {
    /// Exactly one answer.
    pub fn exactly(offset: u64) -> SeekChoices {
        SeekChoices { exact: vec![offset], ..SeekChoices::default() }
    }

    /// Is `actual` one of the choices?
    pub fn allows(&self, actual: &Outcome) -> bool {
        match actual {
            Ok(Reply::Offset(x)) => {
                let x = *x;
                self.exact.contains(&x)
                    || (self.block_size > 0 && x % self.block_size == 0 && self.block_starts.iter().any(|r| r.contains(&x)))
            }
            Err(Errno::ENXIO) => self.enxio,
            _ => false,
        }
    }

    /// The one answer when there is no choice.
    pub fn only(&self) -> Option<Outcome> {
        match (self.exact.as_slice(), self.block_starts.is_empty(), self.enxio) {
            ([x], true, false) => Some(Ok(Reply::Offset(*x))),
            ([], true, true) => Some(Err(Errno::ENXIO)),
            _ => None,
        }
    }
}

impl fmt::Display for SeekChoices {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self.exact.iter().map(|x| x.to_string()).collect();
        for r in &self.block_starts {
            parts.push(format!("a multiple of {} in {}..{}", self.block_size, r.start, r.end));
        }
        if self.enxio {
            parts.push("ENXIO".into());
        }
        write!(f, "one of [{}]", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_allow_exact_offsets_block_starts_and_enxio_only_as_said() {
        let c = SeekChoices { exact: vec![100], block_starts: std::iter::once(4096..12288).collect(), block_size: 4096, enxio: false };
        assert!(c.allows(&Ok(Reply::Offset(100))));
        assert!(c.allows(&Ok(Reply::Offset(4096))));
        assert!(c.allows(&Ok(Reply::Offset(8192))));
        assert!(!c.allows(&Ok(Reply::Offset(12288))), "the range's end is not in it");
        assert!(!c.allows(&Ok(Reply::Offset(5000))), "not a block start");
        assert!(!c.allows(&Err(Errno::ENXIO)));
        assert!(!c.allows(&Err(Errno::EINVAL)));
        let none = SeekChoices { enxio: true, ..SeekChoices::default() };
        assert!(none.allows(&Err(Errno::ENXIO)));
        assert_eq!(none.only(), Some(Err(Errno::ENXIO)));
        assert_eq!(SeekChoices::exactly(7).only(), Some(Ok(Reply::Offset(7))));
        assert_eq!(c.only(), None);
    }
}
