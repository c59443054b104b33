//! The simulator's memory: the page allocator that folios (data and, later,
//! metadata) will come from under seeded pressure (issue 17).
//!
//! Built so far: [`buddy`], the allocator itself (orders, splits, merges,
//! seeded fragmentation by other users), and [`folios`], the engine's
//! `FolioAllocator` over it (the page cache falls back to smaller orders,
//! never below its mapping's minimum). Still to come before a run can use
//! it: a run option that mounts with it (refused at bs > ps until the
//! model knows which ops may answer ENOMEM), reclaim and write-back under
//! pressure, no-fail metadata allocations that retry and count the page
//! allocator's order > 1 warning, and the reclaimer as a task of the
//! seeded scheduler.

pub mod buddy;
pub mod folios;
