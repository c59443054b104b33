//! No-fail folio allocations (`__GFP_NOFAIL`): what ext4 and jbd2 ask for
//! when a failure would leave them nowhere to go. Metadata blocks come
//! through the block device's page cache (`sb_getblk`, whose `__getblk` adds
//! `__GFP_NOFAIL`), and a block a committing transaction logs gets a frozen
//! copy (`jbd2_alloc(b_size, GFP_NOFS | __GFP_NOFAIL)`). At block size >
//! page size both are folios of order log2(bs/ps) > 0.
//!
//! Such a request never returns failure: the caller reclaims and retries
//! (`fs::memory`), counting each retry. The page allocator warned once per
//! boot (`WARN_ON_ONCE`) on a no-fail request of order > 1 until linux-next
//! ee040cbd6e48 dropped the check; every request that would have warned is
//! counted here, the first one named. A request reclaim can make no
//! progress for is a livelock: the kernel would spin (or call the OOM
//! killer); the engine stops the op with [`Livelock`] so a run reports it
//! with its seed and trace instead of hanging.

use std::collections::BTreeMap;
use std::fmt;

/// Largest no-fail order the page allocator accepted without a warning.
pub const NOFAIL_WARN_ABOVE_ORDER: u8 = 1;

/// What a no-fail request was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoFailUse {
    /// A metadata block read or created through the buffer cache.
    BufferCache,
    /// jbd2's copy of a block the committing transaction logs.
    JournalCopy,
}

impl fmt::Display for NoFailUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoFailUse::BufferCache => "buffer cache",
            NoFailUse::JournalCopy => "jbd2 frozen copy",
        })
    }
}

/// A request the page allocator would have warned about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoFailWarning {
    pub order: u8,
    pub what: NoFailUse,
    /// Which no-fail request of the mount it was (1-based).
    pub request: u64,
}

/// No-fail requests over a mount, for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NoFailStats {
    /// Requests by order.
    pub by_order: BTreeMap<u8, u64>,
    /// Requests by use.
    pub by_use: BTreeMap<NoFailUse, u64>,
    /// Allocation attempts refused and retried after reclaim.
    pub retries: u64,
    /// The most retries one request needed.
    pub max_retries: u64,
    /// Requests of order > [`NOFAIL_WARN_ABOVE_ORDER`].
    pub warnings: u64,
    pub first_warning: Option<NoFailWarning>,
    /// Clean metadata folios reclaim dropped (read again on the next use).
    pub reclaimed_metadata_folios: u64,
    /// Data folios reclaim evicted for no-fail requests.
    pub reclaimed_data_folios: u64,
    /// Compactions that formed a block of a request's order.
    pub compactions: u64,
    /// Checkpoints reclaim ran to unpin logged metadata.
    pub reclaim_checkpoints: u64,
    /// Dirty data write-backs reclaim started for no-fail requests.
    pub reclaim_writebacks: u64,
    /// Most bytes metadata folios and journal copies held at once.
    pub peak_metadata_bytes: u64,
    /// Requests reclaim could not satisfy.
    pub livelocks: u64,
}

impl NoFailStats {
    pub fn requests(&self) -> u64 {
        self.by_order.values().sum()
    }

    /// Counts a new request; whether the page allocator would warn on it.
    pub fn note_request(&mut self, order: u8, what: NoFailUse) -> bool {
        *self.by_order.entry(order).or_insert(0) += 1;
        *self.by_use.entry(what).or_insert(0) += 1;
        let warns = order > NOFAIL_WARN_ABOVE_ORDER;
        if warns {
            self.warnings += 1;
            let request = self.requests();
            self.first_warning.get_or_insert(NoFailWarning { order, what, request });
        }
        warns
    }

    pub fn note_retries(&mut self, retries: u64) {
        self.retries += retries;
        self.max_retries = self.max_retries.max(retries);
    }
}

/// A no-fail request that reclaim could not satisfy: nothing clean was
/// left to drop and nothing dirty could be written back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Livelock {
    pub order: u8,
    pub what: NoFailUse,
    pub retries: u64,
    pub in_use_bytes: u64,
    pub bound_bytes: u64,
    /// Bytes of metadata folios and journal copies, which reclaim cannot drop.
    pub pinned_bytes: u64,
}

impl fmt::Display for Livelock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no-fail order-{} {} request made no progress after {} retries ({} of {} bytes in use, {} pinned by metadata and journal copies, nothing left to reclaim)",
            self.order, self.what, self.retries, self.in_use_bytes, self.bound_bytes, self.pinned_bytes
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_above_order_one_warn_and_the_first_is_named() {
        let mut s = NoFailStats::default();
        assert!(!s.note_request(0, NoFailUse::BufferCache));
        assert!(!s.note_request(1, NoFailUse::JournalCopy));
        assert!(s.note_request(4, NoFailUse::JournalCopy));
        assert!(s.note_request(2, NoFailUse::BufferCache));
        assert_eq!(s.warnings, 2);
        assert_eq!(s.first_warning, Some(NoFailWarning { order: 4, what: NoFailUse::JournalCopy, request: 3 }));
        assert_eq!(s.requests(), 4);
        assert_eq!(s.by_use[&NoFailUse::BufferCache], 2);
        s.note_retries(3);
        s.note_retries(1);
        assert_eq!((s.retries, s.max_retries), (4, 3));
    }
}
