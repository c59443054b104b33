//! Which folio a buffered write copies into next, before it copies: the
//! span of one part of a write that takes effect folio by folio
//! (generic_perform_write copies a folio at a time and may sleep between).

use std::ops::Range;

use super::PageCache;
use crate::format::InodeNumber;

/// The largest order at most `ceiling` (and at least `min`) of a folio
/// starting at page `at` that is aligned there and ends by `gap_end`.
pub(super) fn fitting_order(at: u64, gap_end: u64, ceiling: u8, min: u8) -> u8 {
    let mut o = ceiling;
    while o > min && (at % (1u64 << o) != 0 || at + (1u64 << o) > gap_end) {
        o -= 1;
    }
    o
}

impl PageCache {
    /// Pages of the folio a write over `pages` of `ino` copies into first:
    /// the cached one there, else the one [`PageCache::add_folios`] would
    /// make (memory may yet give it a smaller one).
    pub fn first_write_folio(&self, ino: InodeNumber, orders: (u8, u8), pages: Range<u64>) -> Range<u64> {
        let min = orders.0;
        let align = 1u64 << min;
        let start = pages.start / align * align;
        let end = pages.end.div_ceil(align).saturating_mul(align);
        let mapping = self.mappings.get(&ino);
        if let Some((index, f)) = mapping.and_then(|m| m.folio_at(start)) {
            return index..index + (1u64 << f.order());
        }
        let gap_end = mapping.and_then(|m| m.folios.range(start..end).next().map(|(&i, _)| i)).unwrap_or(end);
        let o = fitting_order(start, gap_end, self.order_ceiling(orders), min);
        start..start + (1u64 << o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_is_the_largest_aligned_one_that_fits() {
        assert_eq!(fitting_order(0, 16, 4, 0), 4);
        assert_eq!(fitting_order(4, 16, 4, 0), 2, "page 4 is aligned to 4 pages only");
        assert_eq!(fitting_order(8, 11, 4, 0), 1, "three pages left: two fit");
        assert_eq!(fitting_order(3, 16, 4, 2), 2, "never below the minimum");
    }
}
