//! Index conversions between file bytes, logical blocks, pages and folios
//! (ext4's `EXT4_LBLK_TO_PG` / `EXT4_PG_TO_LBLK` family), in one place.
//!
//! The LBS series (block size above page size) met arithmetic that divided
//! by zero or shifted by a negative amount once a block held several pages
//! (`PAGE_SHIFT - blkbits` < 0). Here both sizes are powers of two checked
//! once, every conversion is a shift by a difference taken the right way
//! round, and the results saturate instead of wrapping. The property tests
//! below hold them over all 21 (block size 1 KiB..64 KiB) x (page size 4,
//! 16, 64 KiB) pairs.

use std::ops::Range;

/// Block sizes ext4 supports: 1 KiB to 64 KiB.
pub const BLOCK_BITS: Range<u8> = 10..17;
/// Page sizes the test bed models: 4 KiB to 64 KiB.
pub const PAGE_BITS: Range<u8> = 12..17;

/// Block and page size of one mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    block_bits: u8,
    page_bits: u8,
}

/// `x << bits`, saturating where bits fall off the top.
fn shl_saturating(x: u64, bits: u8) -> u64 {
    if x == 0 {
        return 0;
    }
    if u32::from(bits) >= x.leading_zeros() {
        u64::MAX
    } else {
        x << bits
    }
}

impl Geometry {
    /// None unless both are powers of two in the supported ranges.
    pub fn new(block_size: u32, page_size: u32) -> Option<Geometry> {
        let bits = |size: u32, range: Range<u8>| {
            let b = u8::try_from(size.trailing_zeros()).ok()?;
            (size.is_power_of_two() && range.contains(&b)).then_some(b)
        };
        Some(Geometry { block_bits: bits(block_size, BLOCK_BITS)?, page_bits: bits(page_size, PAGE_BITS)? })
    }

    pub fn block_size(&self) -> u64 {
        1 << self.block_bits
    }

    pub fn page_size(&self) -> u64 {
        1 << self.page_bits
    }

    /// The smallest folio order of a mapping: a block never straddles
    /// folios, so at bs > ps a folio holds at least one whole block.
    pub fn min_folio_order(&self) -> u8 {
        self.block_bits.saturating_sub(self.page_bits)
    }

    /// The page holding the first byte of logical block `b`.
    pub fn lblk_to_pg(&self, b: u64) -> u64 {
        if self.block_bits >= self.page_bits {
            shl_saturating(b, self.block_bits - self.page_bits)
        } else {
            b >> (self.page_bits - self.block_bits)
        }
    }

    /// The logical block holding the first byte of page `p`.
    pub fn pg_to_lblk(&self, p: u64) -> u64 {
        if self.page_bits >= self.block_bits {
            shl_saturating(p, self.page_bits - self.block_bits)
        } else {
            p >> (self.block_bits - self.page_bits)
        }
    }

    /// The page holding file byte `pos`.
    pub fn byte_to_pg(&self, pos: u64) -> u64 {
        pos >> self.page_bits
    }

    /// The first byte of page `p`.
    pub fn pg_to_byte(&self, p: u64) -> u64 {
        shl_saturating(p, self.page_bits)
    }

    /// The page holding byte `pos`, or the next page when `pos` starts one
    /// (the first page at or past `pos`).
    pub fn byte_to_pg_up(&self, pos: u64) -> u64 {
        (pos >> self.page_bits) + u64::from(pos & (self.page_size() - 1) != 0)
    }

    /// The pages bytes `range` touch: from the page holding its start up
    /// to the first page at or past its end (so an empty range inside a
    /// page still names that page).
    pub fn pages_covering(&self, range: Range<u64>) -> Range<u64> {
        self.byte_to_pg(range.start)..self.byte_to_pg_up(range.end)
    }

    /// Whole blocks in a folio of `order`, None where it cannot hold one.
    pub fn blocks_per_folio(&self, order: u8) -> Option<u32> {
        let folio_bits = u32::from(self.page_bits) + u32::from(order);
        let bits = folio_bits.checked_sub(u32::from(self.block_bits))?;
        1u32.checked_shl(bits)
    }

    /// Block `b`'s index within the folio whose first page is `first_page`
    /// (None when the block is not in a folio of `order` there).
    pub fn block_in_folio(&self, b: u64, first_page: u64, order: u8) -> Option<u32> {
        let within = b.checked_sub(self.pg_to_lblk(first_page))?;
        let i = u32::try_from(within).ok()?;
        (i < self.blocks_per_folio(order)?).then_some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every (block size, page size) pair: 7 x 3 = 21.
    fn pairs() -> Vec<Geometry> {
        let pages = [12u8, 14, 16];
        BLOCK_BITS.flat_map(|b| pages.iter().map(move |p| Geometry::new(1 << b, 1 << p).unwrap())).collect()
    }

    fn any_pair() -> impl Strategy<Value = Geometry> {
        proptest::sample::select(pairs())
    }

    #[test]
    fn only_powers_of_two_in_range_make_a_geometry() {
        assert_eq!(pairs().len(), 21);
        for (bs, ps) in [(0, 4096), (4096, 0), (512, 4096), (3000, 4096), (131072, 4096), (4096, 2048), (4096, 131072), (4096, 12288)] {
            assert_eq!(Geometry::new(bs, ps), None, "bs {bs} ps {ps}");
        }
    }

    #[test]
    fn a_folio_of_the_minimum_order_holds_whole_blocks_and_none_smaller_does() {
        for g in pairs() {
            let min = g.min_folio_order();
            let n = g.blocks_per_folio(min).unwrap();
            assert!(n >= 1);
            assert_eq!(u64::from(n) * g.block_size(), g.page_size() << min, "{g:?}");
            if min > 0 {
                assert_eq!(g.blocks_per_folio(min - 1), None, "{g:?}: an order-{} folio splits a block", min - 1);
            }
            assert!(g.blocks_per_folio(min + 9).is_some(), "{g:?}");
        }
    }

    proptest! {
        /// Block -> page -> block lands on the block holding the page's
        /// first byte: the same block when a page is no larger than a
        /// block, else the first block of that page.
        #[test]
        fn block_and_page_indices_round_trip(g in any_pair(), b in 0u64..(1 << 32)) {
            let p = g.lblk_to_pg(b);
            let back = g.pg_to_lblk(p);
            let per_page = (g.page_size() / g.block_size()).max(1);
            prop_assert_eq!(back, b - b % per_page);
            // The byte arithmetic says the same.
            prop_assert_eq!(p, b * g.block_size() / g.page_size());
            prop_assert_eq!(back, p * g.page_size() / g.block_size());
        }

        #[test]
        fn page_and_block_indices_round_trip(g in any_pair(), p in 0u64..(1 << 40)) {
            let b = g.pg_to_lblk(p);
            let per_block = (g.block_size() / g.page_size()).max(1);
            prop_assert_eq!(g.lblk_to_pg(b), p - p % per_block);
            prop_assert_eq!(g.byte_to_pg(g.pg_to_byte(p)), p);
        }

        /// The pages a byte range covers hold every byte of it, and no
        /// page more.
        #[test]
        fn pages_covering_a_range_are_exactly_those_it_touches(g in any_pair(), start in 0u64..(1 << 45), len in 0u64..(1 << 24)) {
            let pages = g.pages_covering(start..start + len);
            // The byte arithmetic it replaces.
            prop_assert_eq!(pages.clone(), start / g.page_size()..(start + len).div_ceil(g.page_size()));
            if len == 0 {
                prop_assert!(pages.end - pages.start <= 1);
            } else {
                prop_assert!(g.pg_to_byte(pages.start) <= start && start < g.pg_to_byte(pages.start + 1));
                prop_assert!(g.pg_to_byte(pages.end - 1) < start + len && start + len <= g.pg_to_byte(pages.end));
            }
        }

        /// A block's index in the folio holding it is below the folio's
        /// block count, and folios of an order tile the blocks.
        #[test]
        fn a_block_sits_inside_exactly_one_aligned_folio(g in any_pair(), b in 0u64..(1 << 32), extra in 0u8..6) {
            let order = g.min_folio_order() + extra;
            let first_page = g.lblk_to_pg(b) >> order << order;
            let i = g.block_in_folio(b, first_page, order);
            prop_assert!(i.is_some(), "{:?} block {} order {}", g, b, order);
            prop_assert_eq!(g.pg_to_lblk(first_page) + u64::from(i.unwrap()), b);
            let next = first_page + (1 << order);
            prop_assert_eq!(g.block_in_folio(b, next, order), None);
        }

        /// Past the top they saturate: never wrap to a small index, so
        /// the order of indices is kept.
        #[test]
        fn huge_indices_saturate_instead_of_wrapping(g in any_pair(), x in (u64::MAX >> 8)..u64::MAX) {
            prop_assert!(g.lblk_to_pg(x) <= g.lblk_to_pg(x + 1));
            prop_assert!(g.pg_to_lblk(x) <= g.pg_to_lblk(x + 1));
            prop_assert_eq!(g.pg_to_byte(x), u64::MAX);
            // Exact where the shift keeps every bit, else the top.
            let exact_or_top = |r: u64, up: u64| r == u64::MAX || r / up == x;
            if g.block_size() > g.page_size() {
                prop_assert!(exact_or_top(g.lblk_to_pg(x), g.block_size() / g.page_size()));
                prop_assert_eq!(g.lblk_to_pg(u64::MAX), u64::MAX);
            }
            if g.page_size() > g.block_size() {
                prop_assert!(exact_or_top(g.pg_to_lblk(x), g.page_size() / g.block_size()));
                prop_assert_eq!(g.pg_to_lblk(u64::MAX), u64::MAX);
            }
        }
    }
}
