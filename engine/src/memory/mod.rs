//! Memory for folios. Page-cache folios come through one small trait,
//! [`FolioAllocator`], and through one place in the page cache
//! (`pagecache::PageCache::take_folio_memory`); metadata folios through
//! the same allocator by way of `fs::memory`, so the simulator backs both
//! with its seeded pressure model.
//!
//! Contract:
//! - `allocate` grants or refuses memory for one folio of an order, and says
//!   which page frame the folio starts at; a refusal is an ordinary answer
//!   (the page cache reclaims, falls back to a smaller order, or reads
//!   around the cache), never a panic.
//! - `release` gives back exactly what one granted `allocate` took, frame
//!   and order (a buddy allocator merges by frame).
//! - Memory is *simulated* bytes: page size << order, whatever the host's
//!   page size; nothing here asks the host how much memory it has.
//! - `fork` makes an independent copy for a shadow mount (a check), whose
//!   allocations never reach the original.
//!
//! Metadata (buffer cache folios, jbd2's copies) takes its memory from the
//! same allocator with no-fail semantics ([`nofail`]).

pub mod nofail;
pub mod reclaim;
pub mod refused;

use std::fmt;

/// Why a folio could not be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FolioRefused {
    pub order: u8,
    /// Bytes asked for (page size << order).
    pub bytes: u64,
}

impl fmt::Display for FolioRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no memory for an order-{} folio ({} bytes)", self.order, self.bytes)
    }
}

/// Where page-cache folios get their memory.
pub trait FolioAllocator: fmt::Debug {
    /// Takes memory for one folio of `order` pages: the first page frame
    /// it got; refused when there is none.
    fn allocate(&mut self, order: u8) -> Result<u64, FolioRefused>;
    /// Gives back the folio of `order` at `frame` that `allocate` granted.
    fn release(&mut self, order: u8, frame: u64);
    /// Bytes granted and not yet released.
    fn in_use_bytes(&self) -> u64;
    /// Bytes the page cache should stay within; it reclaims before asking past it.
    fn bound_bytes(&self) -> u64;
    /// An independent copy with the same state, for a shadow mount.
    fn fork(&self) -> Box<dyn FolioAllocator>;
    /// Compaction: moves what can be moved so that a block of `order`
    /// forms; whether one did. An allocator that places nothing cannot.
    fn compact(&mut self, _order: u8) -> bool {
        false
    }
}

/// The default allocator: counts folio bytes against a fixed bound and
/// refuses what would pass it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundedFolios {
    page_size: u64,
    bound_bytes: u64,
    in_use_bytes: u64,
}

impl BoundedFolios {
    pub fn new(page_size: u32, bound_bytes: u64) -> Self {
        debug_assert!(page_size.is_power_of_two());
        BoundedFolios { page_size: u64::from(page_size), bound_bytes, in_use_bytes: 0 }
    }

    fn bytes(&self, order: u8) -> u64 {
        self.page_size.checked_shl(u32::from(order)).unwrap_or(u64::MAX)
    }
}

impl FolioAllocator for BoundedFolios {
    /// A bound counts bytes and places nothing: every frame is 0.
    fn allocate(&mut self, order: u8) -> Result<u64, FolioRefused> {
        let bytes = self.bytes(order);
        match self.in_use_bytes.checked_add(bytes) {
            Some(total) if total <= self.bound_bytes => {
                self.in_use_bytes = total;
                Ok(0)
            }
            _ => Err(FolioRefused { order, bytes }),
        }
    }

    fn release(&mut self, order: u8, _frame: u64) {
        let bytes = self.bytes(order);
        debug_assert!(bytes <= self.in_use_bytes, "releasing {bytes} bytes of {}", self.in_use_bytes);
        self.in_use_bytes = self.in_use_bytes.saturating_sub(bytes);
    }

    fn in_use_bytes(&self) -> u64 {
        self.in_use_bytes
    }

    fn bound_bytes(&self) -> u64 {
        self.bound_bytes
    }

    fn fork(&self) -> Box<dyn FolioAllocator> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounded_allocator_refuses_what_would_pass_its_bound_and_takes_back_what_it_gave() {
        let mut a = BoundedFolios::new(4096, 64 << 10);
        a.allocate(3).unwrap();
        a.allocate(3).unwrap();
        assert_eq!(a.in_use_bytes(), 64 << 10);
        assert_eq!(a.allocate(0), Err(FolioRefused { order: 0, bytes: 4096 }));
        a.release(3, 0);
        a.allocate(2).unwrap();
        assert_eq!(a.in_use_bytes(), 48 << 10);
        // An absurd order is a refusal, not an overflow.
        assert!(a.allocate(200).is_err());
    }

    #[test]
    fn a_fork_counts_apart_from_its_original() {
        let mut a = BoundedFolios::new(16384, 1 << 20);
        a.allocate(1).unwrap();
        let mut b = a.fork();
        b.allocate(4).unwrap();
        assert_eq!(a.in_use_bytes(), 32 << 10);
        assert_eq!(b.in_use_bytes(), (32 << 10) + (256 << 10));
    }
}
