//! Readahead (mm/readahead.c, simplified): how far past a read the page
//! cache fills folios, and with which folio order.
//!
//! - The window is counted in folios. A read that starts where the last
//!   one ended (or at page 0 of a file) is sequential: the window doubles,
//!   up to [`RA_MAX_FOLIOS`], and the order grows by two (as
//!   page_cache_ra_order does), up to the mapping's maximum; both are cut
//!   back so the window stays within [`RA_MAX_BYTES`].
//! - Any other read is random: one folio of the minimum order, past the
//!   request itself.
//! - The window never reaches past the folio holding EOF.

use std::ops::Range;

/// Most folios one readahead window holds.
pub const RA_MAX_FOLIOS: u32 = 16;
/// Most bytes one readahead window covers (read_ahead_kb's default, 128 KiB).
pub const RA_MAX_BYTES: u64 = 128 << 10;

/// One mapping's readahead state (struct file_ra_state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readahead {
    /// The page after the last read's end: where a sequential read starts.
    next_page: u64,
    folios: u32,
    order: u8,
}

impl Readahead {
    pub fn new(min_order: u8) -> Self {
        Readahead { next_page: 0, folios: 1, order: min_order }
    }

    /// Pages in the current window.
    pub fn window_pages(&self) -> u64 {
        u64::from(self.folios) << self.order
    }

    pub fn order(&self) -> u8 {
        self.order
    }

    pub fn folios(&self) -> u32 {
        self.folios
    }

    /// A read found all of pages `request` cached: only remembers where it
    /// ended, so the next miss can tell whether reading goes on in order.
    pub fn on_hit(&mut self, request: Range<u64>) {
        self.next_page = request.end;
    }

    /// A read of pages `request` (of a file whose data ends before page
    /// `eof_page`) missed the cache: updates the window and returns the
    /// pages to fill, the request and what readahead adds after it.
    pub fn on_miss(&mut self, request: Range<u64>, eof_page: u64, orders: (u8, u8), page_size: u64) -> Range<u64> {
        let (min, max) = orders;
        // In order: from where the last read ended, or from within its last page.
        let sequential = request.start <= self.next_page && request.start.saturating_add(1) >= self.next_page;
        if sequential {
            self.folios = (self.folios.saturating_mul(2)).min(RA_MAX_FOLIOS);
            self.order = self.order.saturating_add(2).clamp(min, max);
        } else {
            self.folios = 1;
            self.order = min;
        }
        let max_pages = (RA_MAX_BYTES / page_size).max(1);
        while self.window_pages() > max_pages && self.folios > 1 {
            self.folios /= 2;
        }
        while self.window_pages() > max_pages && self.order > min {
            self.order -= 1;
        }
        self.next_page = request.end;
        let end = request.end.max(request.start.saturating_add(self.window_pages())).min(eof_page.max(request.end));
        request.start..end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_grows_on_sequential_reads_and_resets_on_a_random_one() {
        let mut ra = Readahead::new(0);
        let eof = 1 << 20;
        let mut windows = Vec::new();
        for at in 0..6 {
            let w = ra.on_miss(at..at + 1, eof, (0, 9), 4096);
            windows.push((w.end - w.start, ra.folios(), ra.order()));
        }
        // Folios double, the order climbs by two, and 128 KiB (32 pages) caps the window.
        assert_eq!(windows[0], (8, 2, 2));
        assert_eq!(windows[1], (32, 2, 4));
        assert!(windows.iter().all(|w| w.0 <= 32));
        assert!(windows.windows(2).all(|p| p[1].0 >= p[0].0), "never shrinks while sequential: {windows:?}");
        assert_eq!(windows[5].0, 32);
        let random = ra.on_miss(5000..5001, eof, (0, 9), 4096);
        assert_eq!(random, 5000..5001, "a random read takes one minimum-order folio");
        assert_eq!((ra.folios(), ra.order()), (1, 0));
        // Hits move the read position, so the next miss is still in order.
        ra.on_hit(5001..5008);
        let w = ra.on_miss(5008..5009, eof, (0, 9), 4096);
        assert_eq!(w.end - w.start, 8);
    }

    #[test]
    fn the_window_stops_at_eof_and_keeps_the_minimum_order() {
        let mut ra = Readahead::new(4);
        let w = ra.on_miss(0..16, 20, (4, 4), 4096);
        assert_eq!(w, 0..20, "window of 32 pages cut at the EOF page");
        assert_eq!(ra.order(), 4);
        let w = ra.on_miss(0..16, 10, (4, 4), 4096);
        assert_eq!(w.end, 16, "never shorter than the request");
        // 64 KiB pages: 128 KiB is two pages.
        let mut ra = Readahead::new(0);
        let w = ra.on_miss(0..1, 100, (0, 5), 65536);
        assert!(w.end - w.start <= 2, "{w:?}");
    }
}
