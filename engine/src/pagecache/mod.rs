//! The page cache: per inode a *mapping* of folios keyed by page index,
//! with per-block uptodate and dirty state, an LRU over every folio, and a
//! bound in simulated bytes that folio memory is counted against
//! ([`crate::memory::FolioAllocator`]).
//!
//! Contract:
//! - **Geometry.** A folio of order `o` covers pages `index..index + 2^o`,
//!   with `index` a multiple of `2^o`. Every folio of a mapping has an order
//!   within the mapping's `(min, max)` (ext4's `s_min_folio_order`, and the
//!   inode's maximum: `EffectiveMount::folio_orders`), further capped so a
//!   folio is at most a quarter of the bound. The minimum makes a folio at
//!   least one block, so a block never straddles folios.
//! - **Orders are chosen here.** Writes get the largest aligned folio that
//!   fits the uncached part of the write (fgf_set_order); readahead the
//!   order its window has reached ([`readahead`]). A refused allocation
//!   falls back to smaller orders, down to the minimum.
//! - **Memory.** All folio memory is taken in one place,
//!   [`PageCache::take_folio_memory`], and given back when a folio goes;
//!   metadata's no-fail frames come from the same allocator through
//!   [`PageCache::allocate_frame`] (`fs::memory`), so both share the bound.
//!   Reclaim evicts clean folios oldest first ([`PageCache::evict_clean`]);
//!   writing dirty ones back is the filesystem's ([`crate::fs`]), which
//!   asks [`PageCache::oldest_dirty_inode`].
//! - **Ordered data.** Inodes whose dirty data must reach the device before
//!   the next commit record (data=ordered: blocks the transaction allocated
//!   as written, zeroed tails of written blocks) are listed apart, as jbd2's
//!   transaction inode list.
//! - This module knows blocks and pages, not extents: what a block holds on
//!   disk is the filesystem's to say.

pub mod folio;
pub mod geometry;
pub mod locked;
pub mod lru;
pub mod readahead;
mod write_folio;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::format::InodeNumber;
use crate::memory::{FolioAllocator, FolioRefused};
use geometry::Geometry;

pub use folio::Folio;
use lru::Lru;
use readahead::Readahead;

/// What the page cache did over a mount, for reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PageCacheStats {
    /// Folios allocated, by order.
    pub folios_by_order: BTreeMap<u8, u64>,
    /// Folios readahead added beyond what reads asked for.
    pub readahead_folios: u64,
    /// Clean folios evicted to stay within the bound.
    pub evicted_folios: u64,
    /// Allocations the allocator refused (each fallback counts).
    pub refused_folios: u64,
    /// Blocks a read got around the cache, when no folio could be had.
    pub read_around_blocks: u64,
    /// Bytes copied into folios from writers (copy_from_user).
    pub copied_in_bytes: u64,
    /// Bytes copied out of folios to readers (copy_to_user).
    pub copied_out_bytes: u64,
    /// Bytes of cached blocks zeroed.
    pub zeroed_bytes: u64,
    /// Blocks buffered writes dirtied, one per block per write (the
    /// per-buffer work of block_write_begin/end).
    pub blocks_written: u64,
}

/// One inode's folios.
#[derive(Clone, Debug)]
pub struct Mapping {
    min_order: u8,
    max_order: u8,
    folios: BTreeMap<u64, Folio>,
    /// First page index of every folio with a dirty block.
    dirty: BTreeSet<u64>,
    ra: Readahead,
}

impl Mapping {
    fn new(orders: (u8, u8)) -> Self {
        debug_assert!(orders.0 <= orders.1);
        Mapping { min_order: orders.0, max_order: orders.1, folios: BTreeMap::new(), dirty: BTreeSet::new(), ra: Readahead::new(orders.0) }
    }

    /// `(min, max)` folio order.
    pub fn orders(&self) -> (u8, u8) {
        (self.min_order, self.max_order)
    }

    /// The folio holding page `page`, by first page index.
    fn folio_at(&self, page: u64) -> Option<(u64, &Folio)> {
        let (&index, folio) = self.folios.range(..=page).next_back()?;
        (page < index + (1u64 << folio.order())).then_some((index, folio))
    }

    pub fn folios(&self) -> impl Iterator<Item = (u64, &Folio)> + '_ {
        self.folios.iter().map(|(i, f)| (*i, f))
    }
}

/// The page cache of one mount.
#[derive(Debug)]
pub struct PageCache {
    geo: Geometry,
    mappings: BTreeMap<InodeNumber, Mapping>,
    lru: Lru,
    memory: Box<dyn FolioAllocator>,
    /// Inodes whose dirty data goes to the device before the next commit.
    ordered: BTreeSet<InodeNumber>,
    /// Largest order the bound allows (a folio at most a quarter of it).
    order_cap: u8,
    stats: PageCacheStats,
    /// Buffers of dropped folios by order, for the next folios: host
    /// memory only (the simulated bound counts folios, not these).
    spare: BTreeMap<u8, Vec<Vec<u8>>>,
    spare_bytes: usize,
    /// Inodes with a dirty folio: a sync visits these, not every mapping.
    dirty_inodes: DirtyInodes,
    /// Folios locked across a sleep ([`locked`]), and who reached them.
    locked: Vec<locked::LockedFolios>,
    locked_touches: Vec<String>,
}

/// Host bytes of dropped folios kept for reuse.
const SPARE_BYTES_MAX: usize = 32 << 20;
/// Folios a refused minimum-order request may evict before it gives up
/// (SWAP_CLUSTER_MAX, one round of direct reclaim).
const DIRECT_RECLAIM_BATCH: usize = 32;

/// Inodes with a dirty folio, each with when it became dirty (a counter):
/// write-back walks them oldest first, as the kernel walks its dirty list
/// (mballoc's preallocations make the order show in where data lands).
#[derive(Clone, Debug, Default)]
struct DirtyInodes {
    since: BTreeMap<InodeNumber, u64>,
    next: u64,
}

impl DirtyInodes {
    /// `ino` has a dirty folio; it keeps its place if it had one already.
    fn note(&mut self, ino: InodeNumber) {
        if !self.since.contains_key(&ino) {
            self.next += 1;
            self.since.insert(ino, self.next);
        }
    }

    fn remove(&mut self, ino: InodeNumber) {
        self.since.remove(&ino);
    }

    fn contains(&self, ino: InodeNumber) -> bool {
        self.since.contains_key(&ino)
    }

    fn oldest_first(&self) -> Vec<InodeNumber> {
        let mut by_age: Vec<(u64, InodeNumber)> = self.since.iter().map(|(&i, &at)| (at, i)).collect();
        by_age.sort_unstable();
        by_age.into_iter().map(|(_, i)| i).collect()
    }
}

impl Clone for PageCache {
    /// A copy for a shadow mount: folio bytes are shared until written,
    /// the allocator is forked.
    fn clone(&self) -> Self {
        PageCache {
            geo: self.geo,
            mappings: self.mappings.clone(),
            lru: self.lru.clone(),
            memory: self.memory.fork(),
            ordered: self.ordered.clone(),
            order_cap: self.order_cap,
            stats: self.stats.clone(),
            spare: BTreeMap::new(),
            spare_bytes: 0,
            dirty_inodes: self.dirty_inodes.clone(),
            locked: self.locked.clone(),
            locked_touches: Vec::new(),
        }
    }
}

impl PageCache {
    pub fn new(geo: Geometry, memory: Box<dyn FolioAllocator>) -> Self {
        let quarter = memory.bound_bytes() / 4;
        let mut order_cap = 0u8;
        while (geo.page_size() << (order_cap + 1)) <= quarter && order_cap < 63 {
            order_cap += 1;
        }
        PageCache {
            geo,
            mappings: BTreeMap::new(),
            lru: Lru::default(),
            memory,
            ordered: BTreeSet::new(),
            order_cap,
            stats: PageCacheStats::default(),
            spare: BTreeMap::new(),
            spare_bytes: 0,
            dirty_inodes: DirtyInodes::default(),
            locked: Vec::new(),
            locked_touches: Vec::new(),
        }
    }

    pub fn stats(&self) -> &PageCacheStats {
        &self.stats
    }

    pub fn in_use_bytes(&self) -> u64 {
        self.memory.in_use_bytes()
    }

    pub fn bound_bytes(&self) -> u64 {
        self.memory.bound_bytes()
    }

    /// Whether `bytes` more fit within the bound.
    pub fn has_room(&self, bytes: u64) -> bool {
        self.memory.in_use_bytes().saturating_add(bytes) <= self.memory.bound_bytes()
    }

    /// Resident folios by order (what the cache holds now).
    pub fn resident_by_order(&self) -> BTreeMap<u8, u64> {
        let mut out = BTreeMap::new();
        for m in self.mappings.values() {
            for f in m.folios.values() {
                *out.entry(f.order()).or_insert(0) += 1;
            }
        }
        out
    }

    pub fn mapping(&self, ino: InodeNumber) -> Option<&Mapping> {
        self.mappings.get(&ino)
    }

    /// Inode `ino`'s mapping, made with `orders` if it has none. A mapping
    /// keeps the orders it was made with until it is dropped.
    fn mapping_mut(&mut self, ino: InodeNumber, orders: (u8, u8)) -> &mut Mapping {
        self.mappings.entry(ino).or_insert_with(|| Mapping::new(orders))
    }

    /// The largest order a write or readahead may ask for in a mapping
    /// with `orders`, given the bound.
    fn order_ceiling(&self, orders: (u8, u8)) -> u8 {
        orders.1.min(self.order_cap).max(orders.0)
    }

    /// The mount's block and page size, and the conversions between them.
    pub fn geometry(&self) -> Geometry {
        self.geo
    }

    /// Page holding logical block `b`.
    pub fn page_of_block(&self, b: u64) -> u64 {
        self.geo.lblk_to_pg(b)
    }

    /// Logical block at the start of page `page` (the block holding it).
    pub fn block_of_page(&self, page: u64) -> u64 {
        self.geo.pg_to_lblk(page)
    }

    /// The folio holding logical block `b`: its first page and the block's
    /// index within it.
    pub fn locate(&self, ino: InodeNumber, b: u64) -> Option<(u64, u32)> {
        let m = self.mappings.get(&ino)?;
        let (index, f) = m.folio_at(self.page_of_block(b))?;
        Some((index, self.geo.block_in_folio(b, index, f.order())?))
    }

    /// Pages of the folio holding page `page` of `ino`, if one does.
    pub fn folio_span(&self, ino: InodeNumber, page: u64) -> Option<Range<u64>> {
        let (index, f) = self.mappings.get(&ino)?.folio_at(page)?;
        Some(index..index + (1u64 << f.order()))
    }

    pub fn folio(&self, ino: InodeNumber, index: u64) -> Option<&Folio> {
        self.mappings.get(&ino)?.folios.get(&index)
    }

    pub fn folio_mut(&mut self, ino: InodeNumber, index: u64) -> Option<&mut Folio> {
        self.mappings.get_mut(&ino)?.folios.get_mut(&index)
    }

    /// Moves a folio to the young end of the LRU.
    pub fn touch(&mut self, ino: InodeNumber, index: u64) {
        let Some(f) = self.mappings.get_mut(&ino).and_then(|m| m.folios.get_mut(&index)) else { return };
        f.stamp = self.lru.touch(f.stamp, (ino, index));
    }

    /// Memory for one folio: `order`, or a smaller one down to `min` when
    /// the allocator refuses; the order got and the frame it starts at.
    /// The one place folio memory is asked for.
    fn take_folio_memory(&mut self, order: u8, min: u8, spare: &(InodeNumber, Range<u64>)) -> Result<(u8, u64), FolioRefused> {
        let mut o = order;
        loop {
            match self.memory.allocate(o) {
                Ok(frame) => return Ok((o, frame)),
                Err(refused) if o <= min => {
                    self.stats.refused_folios += 1;
                    return self.direct_reclaim(o, spare).ok_or(refused);
                }
                Err(_) => {
                    self.stats.refused_folios += 1;
                    o -= 1;
                }
            }
        }
    }

    /// A block's folio has no smaller fallback: compact (direct
    /// compaction), then evict clean folios oldest first, one reclaim
    /// batch at most, trying again after each (an evicted folio of the
    /// minimum order frees a block that fits); None when none formed.
    fn direct_reclaim(&mut self, order: u8, spare: &(InodeNumber, Range<u64>)) -> Option<(u8, u64)> {
        if self.compact_memory(order) {
            if let Ok(frame) = self.memory.allocate(order) {
                return Some((order, frame));
            }
        }
        for _ in 0..DIRECT_RECLAIM_BATCH {
            if self.evict_oldest_clean(1, 1, Some(spare)) == 0 {
                return None;
            }
            if let Ok(frame) = self.memory.allocate(order) {
                return Some((order, frame));
            }
        }
        None
    }

    /// Fills the uncached pages of `pages` (widened to the minimum order)
    /// with new folios of at most `order`, each the largest that is aligned
    /// and fits the gap. Returns the first page of each new folio, in
    /// order; stops early (with what it made) when memory is refused.
    pub fn add_folios(&mut self, ino: InodeNumber, orders: (u8, u8), pages: Range<u64>, order: u8) -> (Vec<u64>, Option<FolioRefused>) {
        let ceiling = self.order_ceiling(orders).min(order.max(orders.0));
        let min = orders.0;
        let align = 1u64 << min;
        let start = pages.start / align * align;
        let end = pages.end.div_ceil(align).saturating_mul(align);
        let gaps = {
            let m = self.mapping_mut(ino, orders);
            uncached_gaps(m, start..end)
        };
        let mut made = Vec::new();
        for gap in gaps {
            let mut at = gap.start;
            while at < gap.end {
                let o = write_folio::fitting_order(at, gap.end, ceiling, min);
                let (got, frame) = match self.take_folio_memory(o, min, &(ino, start..end)) {
                    Ok(got) => got,
                    Err(refused) => return (made, Some(refused)),
                };
                let buf = self.spare.get_mut(&got).and_then(Vec::pop).unwrap_or_default();
                self.spare_bytes -= buf.capacity();
                let mut folio = Folio::from_buffer(got, self.geo, buf);
                folio.frame = frame;
                folio.stamp = self.lru.touch(0, (ino, at));
                *self.stats.folios_by_order.entry(got).or_insert(0) += 1;
                let m = self.mapping_mut(ino, orders);
                m.folios.insert(at, folio);
                made.push(at);
                at += 1u64 << got;
            }
        }
        (made, None)
    }

    /// Marks block `i` of folio `index` dirty (it must be uptodate).
    pub fn mark_dirty(&mut self, ino: InodeNumber, index: u64, i: u32) {
        let Some(m) = self.mappings.get_mut(&ino) else { return };
        if let Some(f) = m.folios.get_mut(&index) {
            f.set_dirty(i);
            m.dirty.insert(index);
            self.dirty_inodes.note(ino);
        }
    }

    /// Marks block `i` of folio `index` clean (written back).
    pub fn mark_clean(&mut self, ino: InodeNumber, index: u64, i: u32) {
        let Some(m) = self.mappings.get_mut(&ino) else { return };
        if let Some(f) = m.folios.get_mut(&index) {
            f.clear_dirty(i);
            if !f.is_dirty_any() {
                m.dirty.remove(&index);
                if m.dirty.is_empty() {
                    self.dirty_inodes.remove(ino);
                }
            }
        }
    }

    /// Runs of dirty logical blocks of `ino` at or after block `from`, in order.
    pub fn dirty_runs(&self, ino: InodeNumber, from: u64) -> Vec<Range<u64>> {
        let mut out: Vec<Range<u64>> = Vec::new();
        let Some(m) = self.mappings.get(&ino) else { return out };
        let first = m.folio_at(self.page_of_block(from)).map_or(self.page_of_block(from), |(i, _)| i);
        for &index in m.dirty.range(first..) {
            let Some(f) = m.folios.get(&index) else { continue };
            let base = self.block_of_page(index);
            for i in 0..f.blocks() {
                let b = base + u64::from(i);
                if b < from || !f.is_dirty(i) {
                    continue;
                }
                match out.last_mut() {
                    Some(run) if run.end == b => run.end = b + 1,
                    _ => out.push(b..b + 1),
                }
            }
        }
        out
    }

    /// Whether any block of `ino` is dirty.
    pub fn has_dirty(&self, ino: InodeNumber) -> bool {
        self.mappings.get(&ino).is_some_and(|m| !m.dirty.is_empty())
    }

    /// Inodes with dirty blocks, the longest dirty first.
    pub fn dirty_inodes(&self) -> Vec<InodeNumber> {
        debug_assert!(self.mappings.iter().all(|(i, m)| m.dirty.is_empty() != self.dirty_inodes.contains(*i)), "the dirty-inode set drifted from the mappings");
        self.dirty_inodes.oldest_first()
    }

    /// Dirty blocks of every mapping (for checks and tests).
    pub fn dirty_block_count(&self) -> u64 {
        self.mappings.values().flat_map(|m| m.dirty.iter().filter_map(|i| m.folios.get(i))).map(|f| u64::from(f.dirty_blocks())).sum()
    }

    /// Forgets blocks `blocks` of `ino` (truncate, punch, a range ext4
    /// drops with truncate_pagecache_range): folios wholly inside go, the
    /// blocks of folios that straddle an end are invalidated.
    pub fn invalidate(&mut self, ino: InodeNumber, blocks: Range<u64>) {
        if blocks.start >= blocks.end {
            return;
        }
        let (first_page, last_page) = (self.page_of_block(blocks.start), self.page_of_block(blocks.end - 1));
        self.note_touch(ino, first_page..last_page.saturating_add(1), "truncation of the page cache");
        let bs_per_page = |s: &Self, index: u64| s.block_of_page(index);
        let Some(m) = self.mappings.get(&ino) else { return };
        let start = m.folio_at(first_page).map_or(first_page, |(i, _)| i);
        let hit: Vec<(u64, u32)> = m.folios.range(start..=last_page).map(|(i, f)| (*i, f.blocks())).collect();
        for (index, n) in hit {
            let base = bs_per_page(self, index);
            let whole = base >= blocks.start && base + u64::from(n) <= blocks.end;
            if whole {
                self.remove_folio(ino, index);
                continue;
            }
            let Some(m) = self.mappings.get_mut(&ino) else { return };
            let Some(f) = m.folios.get_mut(&index) else { continue };
            for i in 0..n {
                let b = base + u64::from(i);
                if blocks.contains(&b) {
                    f.invalidate(i);
                }
            }
            if !f.is_dirty_any() {
                m.dirty.remove(&index);
                if m.dirty.is_empty() {
                    self.dirty_inodes.remove(ino);
                }
            }
        }
    }

    fn remove_folio(&mut self, ino: InodeNumber, index: u64) {
        let Some(m) = self.mappings.get_mut(&ino) else { return };
        let Some(f) = m.folios.remove(&index) else { return };
        m.dirty.remove(&index);
        if m.dirty.is_empty() {
            self.dirty_inodes.remove(ino);
        }
        self.lru.remove(f.stamp);
        self.memory.release(f.order(), f.frame);
        self.keep_buffer(f);
    }

    fn keep_buffer(&mut self, f: Folio) {
        let order = f.order();
        if let Some(buf) = f.into_buffer().filter(|b| self.spare_bytes + b.capacity() <= SPARE_BYTES_MAX) {
            self.spare_bytes += buf.capacity();
            self.spare.entry(order).or_default().push(buf);
        }
    }

    /// Drops `ino`'s whole mapping, dirty data included (an unlinked inode,
    /// or a mapping written back whose orders must be reset).
    pub fn drop_mapping(&mut self, ino: InodeNumber) {
        self.note_touch(ino, 0..u64::MAX, "dropping the mapping");
        let Some(m) = self.mappings.remove(&ino) else { return };
        self.dirty_inodes.remove(ino);
        for f in m.folios.into_values() {
            self.lru.remove(f.stamp);
            self.memory.release(f.order(), f.frame);
            self.keep_buffer(f);
        }
        self.ordered.remove(&ino);
    }

    /// Evicts clean folios, least recently used first, until `need` more
    /// bytes fit within the bound. Folios of `spare` (an inode and a page
    /// range an op is about to use) stay: evicting them would only grow
    /// what the op needs. Returns whether `need` fits.
    pub fn evict_clean(&mut self, need: u64, spare: Option<(InodeNumber, Range<u64>)>) -> bool {
        if self.has_room(need) {
            return true;
        }
        let over = self.memory.in_use_bytes().saturating_add(need).saturating_sub(self.memory.bound_bytes());
        self.evict_oldest_clean(over, usize::MAX, spare.as_ref());
        self.has_room(need)
    }

    /// Evicts clean folios oldest first until `bytes` are freed or `count`
    /// folios went, sparing pages `spare` of an inode (what the op at hand
    /// is filling). Returns the folios evicted.
    pub fn evict_oldest_clean(&mut self, bytes: u64, count: usize, spare: Option<&(InodeNumber, Range<u64>)>) -> usize {
        let mut victims = Vec::new();
        let mut freed = 0u64;
        for (_, (ino, index)) in self.lru.oldest_first() {
            if freed >= bytes || victims.len() >= count {
                break;
            }
            let Some(f) = self.folio(ino, index) else { continue };
            let spared = spare.is_some_and(|(i, pages)| *i == ino && index < pages.end && index + (1u64 << f.order()) > pages.start);
            if f.is_dirty_any() || spared {
                continue;
            }
            freed += f.len_bytes() as u64;
            victims.push((ino, index));
        }
        let evicted = victims.len();
        for (ino, index) in victims {
            self.remove_folio(ino, index);
            self.stats.evicted_folios += 1;
        }
        evicted
    }

    /// Memory for a folio outside any mapping (metadata): the frame, or a
    /// refusal. No fallback: the caller's order is the only one it can use.
    pub fn allocate_frame(&mut self, order: u8) -> Result<u64, FolioRefused> {
        self.memory.allocate(order)
    }

    /// Compacts memory for a block of `order` when the bound has room for
    /// it, so only fragmentation stands in the way; whether one formed.
    pub fn compact_memory(&mut self, order: u8) -> bool {
        self.has_room(self.geo.page_size() << order) && self.memory.compact(order)
    }

    /// Gives back what [`PageCache::allocate_frame`] granted.
    pub fn release_frame(&mut self, order: u8, frame: u64) {
        self.memory.release(order, frame);
    }

    /// Evicts every clean folio and forgets the readahead state of mappings
    /// left empty (drop_caches): what is dirty stays.
    pub fn drop_clean(&mut self) {
        let clean: Vec<(InodeNumber, u64)> = self.lru.oldest_first().map(|(_, k)| k).filter(|(ino, index)| self.folio(*ino, *index).is_some_and(|f| !f.is_dirty_any())).collect();
        for (ino, index) in clean {
            self.remove_folio(ino, index);
        }
        self.mappings.retain(|_, m| !m.folios.is_empty());
    }

    /// The inode of the least recently used dirty folio: what reclaim
    /// writes back first. Inodes with a folio locked between an op's halves
    /// are passed over (reclaim only tries folio locks).
    pub fn oldest_dirty_inode(&self) -> Option<InodeNumber> {
        self.lru.oldest_first().find(|(_, (ino, index))| !self.holds_any_folio_lock(*ino) && self.folio(*ino, *index).is_some_and(Folio::is_dirty_any)).map(|(_, (ino, _))| ino)
    }

    /// A read of pages `request` of `ino`: the pages to fill, from the
    /// readahead state (the request alone when it is all cached).
    pub fn readahead_window(&mut self, ino: InodeNumber, orders: (u8, u8), request: Range<u64>, eof_page: u64) -> (Range<u64>, u8) {
        let ps = self.geo.page_size();
        let ceiling = self.order_ceiling(orders);
        let m = self.mapping_mut(ino, orders);
        let cached = uncached_gaps(m, request.clone()).is_empty();
        if cached {
            m.ra.on_hit(request.clone());
            return (request, m.ra.order());
        }
        // Folios start at multiples of the minimum order: so does the window.
        let align = 1u64 << orders.0;
        let request = request.start / align * align..request.end;
        let window = m.ra.on_miss(request, eof_page, (orders.0, ceiling), ps);
        (window, m.ra.order())
    }

    pub fn count_readahead(&mut self, folios: u64) {
        self.stats.readahead_folios += folios;
    }

    pub fn count_read_around(&mut self, blocks: u64) {
        self.stats.read_around_blocks += blocks;
    }

    /// Bytes of new folios that filling `pages` of `ino` would take: its
    /// uncached pages, widened to the minimum order.
    pub fn uncached_bytes(&self, ino: InodeNumber, orders: (u8, u8), pages: Range<u64>) -> u64 {
        let align = 1u64 << orders.0;
        let widened = pages.start / align * align..pages.end.div_ceil(align).saturating_mul(align);
        let gaps = match self.mappings.get(&ino) {
            Some(m) => uncached_gaps(m, widened),
            None => vec![widened],
        };
        gaps.iter().map(|g| g.end - g.start).sum::<u64>().saturating_mul(self.geo.page_size())
    }

    /// Copies `data` into the cached folios of `ino` at byte `offset`,
    /// making every block it touches uptodate and dirty. The folios exist,
    /// and blocks the data covers only partly are uptodate already.
    /// Returns false (having copied nothing past it) at a page no folio holds.
    pub fn write_bytes(&mut self, ino: InodeNumber, offset: u64, data: &[u8]) -> bool {
        let bs = self.geo.block_size();
        let end = offset + data.len() as u64;
        self.note_touch(ino, self.geo.pages_covering(offset..end), "a write into the page cache");
        let mut at = offset;
        while at < end {
            let Some(m) = self.mappings.get_mut(&ino) else { return false };
            let Some((index, _)) = m.folio_at(self.geo.byte_to_pg(at)) else { return false };
            let Some(f) = m.folios.get_mut(&index) else { return false };
            let folio_start = self.geo.pg_to_byte(index);
            let folio_end = folio_start + f.len_bytes() as u64;
            let to = end.min(folio_end);
            let (lo, hi) = ((at - folio_start) as usize, (to - folio_start) as usize);
            f.bytes_mut()[lo..hi].copy_from_slice(&data[(at - offset) as usize..(to - offset) as usize]);
            let (first, last) = ((lo as u64 / bs) as u32, ((hi as u64 - 1) / bs) as u32);
            self.stats.copied_in_bytes += (hi - lo) as u64;
            self.stats.blocks_written += u64::from(last - first + 1);
            for i in first..=last {
                let covered = f.block_range(i);
                debug_assert!(f.is_uptodate(i) || (lo <= covered.start && covered.end <= hi), "a partly written block {i} was not read first");
                f.set_uptodate(i);
                f.set_dirty(i);
            }
            m.dirty.insert(index);
            self.dirty_inodes.note(ino);
            f.stamp = self.lru.touch(f.stamp, (ino, index));
            at = to;
        }
        true
    }

    /// Copies what the cache holds of bytes `offset..offset + out.len()` of
    /// `ino` into `out`; returns the logical blocks it does not hold
    /// uptodate (their part of `out` is left as it was), in order.
    pub fn read_bytes(&mut self, ino: InodeNumber, offset: u64, out: &mut [u8]) -> Vec<u64> {
        let bs = self.geo.block_size();
        let end = offset + out.len() as u64;
        let mut missing = Vec::new();
        let mut b = offset / bs;
        while b * bs < end {
            let lo = (b * bs).max(offset);
            let Some((index, i)) = self.locate(ino, b) else {
                missing.push(b);
                b += 1;
                continue;
            };
            let Some(m) = self.mappings.get_mut(&ino) else { break };
            let Some(f) = m.folios.get_mut(&index) else { break };
            let folio_start = self.geo.pg_to_byte(index);
            // Every block of this folio the read covers, in one pass.
            let mut j = i;
            while j < f.blocks() && (b * bs) < end {
                let block_end = ((b + 1) * bs).min(end);
                let from = (b * bs).max(lo);
                if f.is_uptodate(j) {
                    let src = (from - folio_start) as usize..(block_end - folio_start) as usize;
                    out[(from - offset) as usize..(block_end - offset) as usize].copy_from_slice(&f.bytes()[src]);
                    self.stats.copied_out_bytes += block_end - from;
                } else {
                    missing.push(b);
                }
                b += 1;
                j += 1;
            }
            f.stamp = self.lru.touch(f.stamp, (ino, index));
        }
        missing
    }

    /// Zeroes bytes `from..to` of block `b` of `ino` in the cache, if the
    /// block is cached uptodate; returns whether it was.
    pub fn zero_cached(&mut self, ino: InodeNumber, b: u64, from: usize, to: usize) -> bool {
        let Some((index, i)) = self.locate(ino, b) else { return false };
        let page = self.page_of_block(b);
        self.note_touch(ino, page..page + 1, "zeroing a cached block");
        let Some(f) = self.folio_mut(ino, index) else { return false };
        if !f.is_uptodate(i) {
            return false;
        }
        f.block_mut(i)[from..to].fill(0);
        self.stats.zeroed_bytes += (to - from) as u64;
        true
    }

    /// Zeroes cached block `b` of `ino` whole and marks it uptodate (its
    /// bytes on disk need not be read); false when no folio holds it.
    pub fn zero_block(&mut self, ino: InodeNumber, b: u64) -> bool {
        let Some((index, i)) = self.locate(ino, b) else { return false };
        let Some(f) = self.folio_mut(ino, index) else { return false };
        f.block_mut(i).fill(0);
        f.set_uptodate(i);
        self.stats.zeroed_bytes += self.geo.block_size();
        true
    }

    /// Counts zeroing done on a folio taken with [`PageCache::folio_mut`].
    pub fn note_zeroed(&mut self, bytes: u64) {
        self.stats.zeroed_bytes += bytes;
    }

    /// Lists `ino` among the inodes whose dirty data must reach the device
    /// before the next commit.
    pub fn order_data(&mut self, ino: InodeNumber) {
        self.ordered.insert(ino);
    }

    /// The ordered inodes, emptying the list.
    pub fn take_ordered(&mut self) -> BTreeSet<InodeNumber> {
        std::mem::take(&mut self.ordered)
    }
}

/// Page ranges of `pages` that no folio of `m` covers.
fn uncached_gaps(m: &Mapping, pages: Range<u64>) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = pages.start;
    if let Some((index, f)) = m.folio_at(at) {
        at = index + (1u64 << f.order());
    }
    if at >= pages.end {
        return out;
    }
    for (&index, f) in m.folios.range(at..pages.end) {
        if index > at {
            out.push(at..index);
        }
        at = index + (1u64 << f.order());
    }
    if at < pages.end {
        out.push(at..pages.end);
    }
    out
}

#[cfg(test)]
mod tests;
