//! The volatile write cache in front of pristine durable storage.
//!
//! Durable data (what the medium holds) is kept apart from the pending overlay
//! (accepted writes not yet on the medium), as TigerBeetle's simulated storage
//! keeps pristine data apart from its faults. The durability contract:
//!
//! - A read sees the newest accepted write of every sector, pending or durable.
//! - A pending write becomes durable when it is destaged (the cache overflowed,
//!   oldest first) or when a flush destages everything.
//! - A write-through (FUA, or a cache of size 0, or a write larger than the
//!   cache) is durable before it completes. Older pending writes to the same
//!   sectors can then never reach the medium over it: a drive replaces its cached
//!   copy of a sector, it does not write stale data over newer data.
//! - Until then, a crash may apply any subset of the pending writes, in issue
//!   order, each possibly torn (see [`super::crash`]).
//!
//! What it cannot see: a drive that destages in its own order *before* a crash is
//! modelled only through the crash's subset choice, and cache coalescing (a
//! rewritten sector destaged once) is not credited in time.

use std::collections::{BTreeMap, BTreeSet};

use ext4_engine::device::{IoClass, SECTOR_SIZE};

use super::hash::ImageHasher;
use super::store::{SparseStore, CHUNK_BYTES};

const SECTOR: usize = SECTOR_SIZE as usize;

/// One accepted write, without its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    /// Issue order: every accepted write, cached or through, takes the next number.
    pub seq: u64,
    pub offset: u64,
    pub len: u64,
    pub class: IoClass,
}

impl WriteRecord {
    fn first_sector(&self) -> u64 {
        self.offset / SECTOR_SIZE
    }

    fn end_sector(&self) -> u64 {
        (self.offset + self.len) / SECTOR_SIZE
    }
}

#[derive(Clone, Debug)]
struct Pending {
    record: WriteRecord,
    data: Vec<u8>,
}

/// Durable storage plus the overlay of pending writes.
#[derive(Clone, Debug, Default)]
pub struct WriteCache {
    durable: SparseStore,
    /// Pending writes by issue sequence, so iteration is issue order.
    pending: BTreeMap<u64, Pending>,
    /// Sector -> seq of the newest pending write covering it: what reads see.
    newest: BTreeMap<u64, u64>,
    /// Sector -> seq of the newest write-through that made it durable while older
    /// writes to it were pending. Those older writes must skip the sector when
    /// applied. Emptied whenever nothing is pending.
    through: BTreeMap<u64, u64>,
    /// Sum of pending write lengths: the cache occupancy.
    pending_bytes: u64,
    next_seq: u64,
}

fn sector_range(offset: u64, len: usize) -> std::ops::Range<u64> {
    debug_assert!(offset % SECTOR_SIZE == 0 && len % SECTOR == 0, "unaligned I/O reached the cache");
    let first = offset / SECTOR_SIZE;
    first..first + (len / SECTOR) as u64
}

impl WriteCache {
    pub fn new() -> WriteCache {
        WriteCache::default()
    }

    /// The visible contents at `offset`: durable bytes under the pending overlay.
    pub fn read(&self, offset: u64, buf: &mut [u8]) {
        self.durable.read(offset, buf);
        let sectors = sector_range(offset, buf.len());
        let first = sectors.start;
        for (&sector, &seq) in self.newest.range(sectors) {
            let pending = self.pending.get(&seq).expect("newest points at a pending write");
            let src = ((sector - pending.record.first_sector()) as usize) * SECTOR;
            let dst = ((sector - first) as usize) * SECTOR;
            buf[dst..dst + SECTOR].copy_from_slice(&pending.data[src..src + SECTOR]);
        }
    }

    /// What the medium holds at `offset`, ignoring everything pending.
    pub fn read_durable(&self, offset: u64, buf: &mut [u8]) {
        self.durable.read(offset, buf);
    }

    pub fn durable(&self) -> &SparseStore {
        &self.durable
    }

    fn next_record(&mut self, offset: u64, len: usize, class: IoClass) -> WriteRecord {
        let seq = self.next_seq;
        self.next_seq += 1;
        WriteRecord { seq, offset, len: len as u64, class }
    }

    /// Accepts a write into the cache; it is not durable.
    pub fn write_pending(&mut self, offset: u64, data: &[u8], class: IoClass) -> WriteRecord {
        let record = self.next_record(offset, data.len(), class);
        for sector in sector_range(offset, data.len()) {
            self.newest.insert(sector, record.seq);
        }
        self.pending.insert(record.seq, Pending { record, data: data.to_vec() });
        self.pending_bytes += record.len;
        record
    }

    /// Writes straight to the medium; durable when this returns.
    pub fn write_through(&mut self, offset: u64, data: &[u8], class: IoClass) -> WriteRecord {
        let record = self.next_record(offset, data.len(), class);
        self.durable.write(offset, data);
        if !self.pending.is_empty() {
            // Every pending write is older than this one, so none of them may
            // show through or later land on these sectors.
            for sector in sector_range(offset, data.len()) {
                self.newest.remove(&sector);
                self.through.insert(sector, record.seq);
            }
        }
        record
    }

    /// Copies the first `keep_bytes` of a pending write to the medium, skipping
    /// sectors a newer write-through already owns.
    fn apply(&mut self, pending: &Pending, keep_bytes: u64) {
        let record = &pending.record;
        assert!(keep_bytes <= record.len && keep_bytes % SECTOR_SIZE == 0, "bad prefix {keep_bytes}");
        let first = record.first_sector();
        let kept = first..first + keep_bytes / SECTOR_SIZE;
        let owned: BTreeSet<u64> = self
            .through
            .range(kept.clone())
            .filter(|&(_, &through_seq)| through_seq > record.seq)
            .map(|(&sector, _)| sector)
            .collect();
        if owned.is_empty() {
            self.durable.write(record.offset, &pending.data[..keep_bytes as usize]);
            return;
        }
        for sector in kept.filter(|sector| !owned.contains(sector)) {
            let at = ((sector - first) as usize) * SECTOR;
            self.durable.write(sector * SECTOR_SIZE, &pending.data[at..at + SECTOR]);
        }
    }

    /// Drops `record`'s claim on the sectors it is still newest for.
    fn forget(&mut self, record: &WriteRecord) {
        for sector in record.first_sector()..record.end_sector() {
            if self.newest.get(&sector) == Some(&record.seq) {
                self.newest.remove(&sector);
            }
        }
    }

    fn settle_if_empty(&mut self) {
        if self.pending.is_empty() {
            debug_assert!(self.newest.is_empty(), "no pending write, yet sectors point at one");
            debug_assert_eq!(self.pending_bytes, 0);
            self.through.clear();
        }
    }

    /// Makes the oldest pending write durable, returning it, or `None` if the
    /// cache is empty. Oldest first keeps the issue-order rule without masking.
    pub fn destage_oldest(&mut self) -> Option<WriteRecord> {
        let (_, pending) = self.pending.pop_first()?;
        self.apply(&pending, pending.record.len);
        self.forget(&pending.record);
        self.pending_bytes -= pending.record.len;
        self.settle_if_empty();
        Some(pending.record)
    }

    /// Empties the cache in issue order, applying to the medium the prefix of
    /// each pending write that `keep_bytes` chooses (0 = lost, `len` = whole).
    /// Returns the records in issue order. Flush keeps everything; a crash keeps
    /// what its policy draws.
    pub fn drain(&mut self, mut keep_bytes: impl FnMut(&WriteRecord) -> u64) -> Vec<WriteRecord> {
        let pending = std::mem::take(&mut self.pending);
        let mut records = Vec::with_capacity(pending.len());
        for (_, write) in pending {
            let keep = keep_bytes(&write.record);
            self.apply(&write, keep);
            records.push(write.record);
        }
        self.newest.clear();
        self.pending_bytes = 0;
        self.settle_if_empty();
        records
    }

    /// Makes everything durable; records in issue order.
    pub fn flush_all(&mut self) -> Vec<WriteRecord> {
        self.drain(|record| record.len)
    }

    pub fn pending_writes(&self) -> usize {
        self.pending.len()
    }

    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes
    }

    /// Records of the pending writes, in issue order.
    pub fn pending_records(&self) -> impl Iterator<Item = WriteRecord> + '_ {
        self.pending.values().map(|pending| pending.record)
    }

    /// A read of this sector is served from the cache, not the medium.
    pub fn covers_pending(&self, sector: u64) -> bool {
        self.newest.contains_key(&sector)
    }

    /// Every sector of the range is served from the cache.
    pub fn fully_pending(&self, offset: u64, len: u64) -> bool {
        let sectors = sector_range(offset, len as usize);
        let wanted = sectors.end - sectors.start;
        wanted > 0 && self.newest.range(sectors).count() as u64 == wanted
    }

    /// Hash of what reads see, in the scheme of [`super::hash`]; equal to the
    /// durable hash whenever nothing pending differs from the medium.
    pub fn visible_hash(&self) -> u64 {
        let mut chunks: BTreeSet<u64> = self.durable.chunk_indices().collect();
        chunks.extend(self.newest.keys().map(|&sector| sector * SECTOR_SIZE / CHUNK_BYTES));
        let mut hasher = ImageHasher::new();
        let mut buf = vec![0u8; CHUNK_BYTES as usize];
        for chunk in chunks {
            self.read(chunk * CHUNK_BYTES, &mut buf);
            hasher.add_chunk(chunk * CHUNK_BYTES, &buf);
        }
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sector_of(cache: &WriteCache, offset: u64, durable: bool) -> Vec<u8> {
        let mut buf = vec![0u8; SECTOR];
        if durable {
            cache.read_durable(offset, &mut buf);
        } else {
            cache.read(offset, &mut buf);
        }
        buf
    }

    #[test]
    fn reads_see_pending_writes_that_are_not_yet_durable() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 1024], IoClass::Data);
        cache.write_pending(512, &[2; 512], IoClass::Data);
        assert_eq!(sector_of(&cache, 0, false), vec![1; SECTOR]);
        assert_eq!(sector_of(&cache, 512, false), vec![2; SECTOR]);
        assert_eq!(sector_of(&cache, 0, true), vec![0; SECTOR]);
        assert!(cache.fully_pending(0, 1024) && !cache.fully_pending(0, 1536));
        assert_eq!((cache.pending_writes(), cache.pending_bytes()), (2, 1536));
    }

    #[test]
    fn flush_makes_everything_durable_with_the_newest_data_winning() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 1024], IoClass::Journal);
        cache.write_pending(512, &[2; 512], IoClass::Data);
        let records = cache.flush_all();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(sector_of(&cache, 0, true), vec![1; SECTOR]);
        assert_eq!(sector_of(&cache, 512, true), vec![2; SECTOR]);
        assert_eq!((cache.pending_writes(), cache.pending_bytes()), (0, 0));
        assert_eq!(cache.visible_hash(), cache.durable().content_hash());
    }

    #[test]
    fn write_through_is_durable_at_once_and_never_overwritten_by_older_pending_data() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 2048], IoClass::Data);
        cache.write_through(512, &[9; 512], IoClass::Metadata);
        assert_eq!(sector_of(&cache, 512, true), vec![9; SECTOR]);
        assert_eq!(sector_of(&cache, 512, false), vec![9; SECTOR]);
        // Even if the older write reaches the medium whole, it must skip the sector.
        cache.flush_all();
        assert_eq!(sector_of(&cache, 512, true), vec![9; SECTOR]);
        assert_eq!(sector_of(&cache, 0, true), vec![1; SECTOR]);
        assert_eq!(sector_of(&cache, 1024, true), vec![1; SECTOR]);
    }

    #[test]
    fn a_pending_write_newer_than_a_write_through_still_lands() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 512], IoClass::Data);
        cache.write_through(0, &[2; 512], IoClass::Data);
        cache.write_pending(0, &[3; 512], IoClass::Data);
        assert_eq!(sector_of(&cache, 0, false), vec![3; SECTOR]);
        cache.flush_all();
        assert_eq!(sector_of(&cache, 0, true), vec![3; SECTOR]);
    }

    #[test]
    fn destaging_goes_oldest_first_and_keeps_newer_data_visible() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 512], IoClass::Data);
        cache.write_pending(0, &[2; 512], IoClass::Data);
        let first = cache.destage_oldest().expect("two pending");
        assert_eq!(first.seq, 0);
        assert_eq!(sector_of(&cache, 0, true), vec![1; SECTOR]);
        assert_eq!(sector_of(&cache, 0, false), vec![2; SECTOR]);
        assert_eq!(cache.destage_oldest().map(|r| r.seq), Some(1));
        assert_eq!(sector_of(&cache, 0, true), vec![2; SECTOR]);
        assert_eq!(cache.destage_oldest(), None);
    }

    #[test]
    fn drain_applies_only_the_chosen_prefixes() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 2048], IoClass::Data);
        cache.write_pending(4096, &[2; 512], IoClass::Data);
        cache.drain(|record| if record.seq == 0 { 1024 } else { 0 });
        assert_eq!(sector_of(&cache, 512, true), vec![1; SECTOR]);
        assert_eq!(sector_of(&cache, 1024, true), vec![0; SECTOR]);
        assert_eq!(sector_of(&cache, 4096, true), vec![0; SECTOR]);
        assert_eq!(cache.pending_writes(), 0);
    }

    #[test]
    fn visible_hash_tracks_pending_data_and_durable_hash_does_not() {
        let mut cache = WriteCache::new();
        let empty = cache.visible_hash();
        cache.write_pending(1 << 30, &[5; 512], IoClass::Data);
        assert_ne!(cache.visible_hash(), empty);
        assert_eq!(cache.durable().content_hash(), empty);
        let before_flush = cache.visible_hash();
        cache.flush_all();
        assert_eq!(cache.durable().content_hash(), before_flush);
    }
}
