//! The simulator's memory: the page allocator that folios (data and, later,
//! metadata) will come from under seeded pressure (issue 17).
//!
//! Built so far: [`buddy`], the allocator itself (orders, splits, merges,
//! seeded fragmentation by other users). Still to come before a run can
//! use it: the engine's `FolioAllocator` handing back a folio's frame on
//! release (today it hands back only an order), fallback to smaller orders
//! in the page cache (never below the mapping's minimum), reclaim and
//! write-back under pressure, no-fail metadata allocations that retry and
//! count the page allocator's order > 1 warning, ENOMEM in the model, and
//! the reclaimer as a task of the seeded scheduler.

pub mod buddy;
