//! The simulator's memory: the page allocator that folios (data and, later,
//! metadata) will come from under seeded pressure (issue 17).
//!
//! [`buddy`] is the allocator itself (orders, splits, merges, seeded
//! fragmentation by other users), [`folios`] the engine's
//! `FolioAllocator` over it (the page cache falls back to smaller orders,
//! never below its mapping's minimum, where a refused folio is ENOMEM;
//! metadata's no-fail requests reclaim until a block of their order
//! forms). `--fragment` mounts with it.
//! The reclaimer task is the engine's `kswapd`, run by the scheduler
//! (`run::source`).

pub mod buddy;
pub mod folios;
