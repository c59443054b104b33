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
use std::ops::Range;

use ext4_engine::device::{IoClass, SECTOR_SIZE};

use super::hash::ImageHasher;
use super::pending::{PendingBytes, Spares};
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
    data: PendingBytes,
}

/// Which pending write each sector shows, as non-overlapping runs: start
/// sector -> (end sector, seq). A write claims its range with one entry, not
/// one per sector: per-sector entries made large data writes cost more in map
/// inserts than in copying their bytes.
#[derive(Clone, Debug, Default)]
struct Runs {
    map: BTreeMap<u64, (u64, u64)>,
}

impl Runs {
    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    fn clear(&mut self) {
        self.map.clear();
    }

    /// Drops every claim on `range`, trimming runs that straddle its edges.
    fn clear_range(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        if let Some((&start, &(end, seq))) = self.map.range(..range.start).next_back() {
            if end > range.start {
                self.map.insert(start, (range.start, seq));
                if end > range.end {
                    // The run covered the whole range, so no other run is in it.
                    self.map.insert(range.end, (end, seq));
                    return;
                }
            }
        }
        // Each pass removes one run starting inside the range.
        while let Some((&start, &(end, seq))) = self.map.range(range.clone()).next() {
            self.map.remove(&start);
            if end > range.end {
                self.map.insert(range.end, (end, seq));
            }
        }
    }

    /// Makes write `seq` what every sector of `range` shows.
    fn claim(&mut self, range: Range<u64>, seq: u64) {
        if range.is_empty() {
            return;
        }
        self.clear_range(range.clone());
        self.map.insert(range.start, (range.end, seq));
    }

    /// Drops the runs of write `seq`, all of which lie inside its `range`.
    fn forget(&mut self, range: Range<u64>, seq: u64) {
        let mine: Vec<u64> = self.map.range(range).filter(|(_, &(_, s))| s == seq).map(|(&start, _)| start).collect();
        for start in mine {
            self.map.remove(&start);
        }
    }

    /// The runs meeting `range`, clipped to it, ascending: (start, end, seq).
    fn within(&self, range: Range<u64>) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        let before = self.map.range(..range.start).next_back();
        before
            .into_iter()
            .chain(self.map.range(range.clone()))
            .map(move |(&start, &(end, seq))| (start.max(range.start), end.min(range.end), seq))
            .filter(|&(start, end, _)| start < end)
    }

    fn covers(&self, sector: u64) -> bool {
        self.map.range(..=sector).next_back().is_some_and(|(_, &(end, _))| end > sector)
    }

    /// Every run as (start, end), ascending.
    fn spans(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.map.iter().map(|(&start, &(end, _))| (start, end))
    }
}

/// Durable storage plus the overlay of pending writes.
#[derive(Clone, Debug, Default)]
pub struct WriteCache {
    durable: SparseStore,
    /// Pending writes by issue sequence, so iteration is issue order.
    pending: BTreeMap<u64, Pending>,
    /// Sector -> seq of the newest pending write covering it: what reads see.
    newest: Runs,
    /// Sector -> seq of the newest write-through that made it durable while older
    /// writes to it were pending. Those older writes must skip the sector when
    /// applied. Emptied whenever nothing is pending.
    through: BTreeMap<u64, u64>,
    /// Sum of pending write lengths: the cache occupancy.
    pending_bytes: u64,
    next_seq: u64,
    /// Buffers of destaged writes and chunks the medium gave back, for reuse.
    spares: Spares,
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
        for (start, end, seq) in self.newest.within(sectors) {
            let pending = self.pending.get(&seq).expect("newest points at a pending write");
            let src = ((start - pending.record.first_sector()) as usize) * SECTOR;
            let dst = ((start - first) as usize) * SECTOR;
            let len = ((end - start) as usize) * SECTOR;
            pending.data.copy_out(src, &mut buf[dst..dst + len]);
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
        self.write_pending_segments(offset, &[data], class)
    }

    /// [`WriteCache::write_pending`] of one command of several buffers.
    pub fn write_pending_segments(&mut self, offset: u64, segments: &[&[u8]], class: IoClass) -> WriteRecord {
        let len = segments.iter().map(|s| s.len()).sum();
        let record = self.next_record(offset, len, class);
        self.newest.claim(sector_range(offset, len), record.seq);
        let data = self.spares.copy_of_segments(offset, segments);
        self.pending.insert(record.seq, Pending { record, data });
        self.pending_bytes += record.len;
        record
    }

    /// Writes straight to the medium; durable when this returns.
    pub fn write_through(&mut self, offset: u64, data: &[u8], class: IoClass) -> WriteRecord {
        self.write_through_segments(offset, &[data], class)
    }

    /// [`WriteCache::write_through`] of one command of several buffers.
    pub fn write_through_segments(&mut self, offset: u64, segments: &[&[u8]], class: IoClass) -> WriteRecord {
        let len = segments.iter().map(|s| s.len()).sum();
        let record = self.next_record(offset, len, class);
        let mut at = offset;
        for segment in segments {
            self.durable.write(at, segment);
            at += segment.len() as u64;
        }
        if !self.pending.is_empty() {
            // Every pending write is older than this one, so none of them may
            // show through or later land on these sectors.
            let sectors = sector_range(offset, len);
            self.newest.clear_range(sectors.clone());
            for sector in sectors {
                self.through.insert(sector, record.seq);
            }
        }
        record
    }

    /// Puts the first `keep_bytes` of a pending write on the medium, skipping
    /// sectors a newer write-through already owns; its buffers are kept for reuse.
    fn apply(&mut self, pending: Pending, keep_bytes: u64) {
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
        let keep = keep_bytes as usize;
        match pending.data {
            PendingBytes::Chunks(mut chunks) if owned.is_empty() => {
                // Whole chunks change hands; only a torn tail is copied.
                let (first_chunk, whole) = (record.offset / CHUNK_BYTES, keep / CHUNK_BYTES as usize);
                let rest = chunks.split_off(whole.min(chunks.len()));
                let spares = &mut self.spares;
                self.durable.adopt(first_chunk, chunks, |old| spares.recycle_chunk(old));
                let tail = keep % CHUNK_BYTES as usize;
                if let Some(torn) = rest.first().filter(|_| tail > 0) {
                    self.durable.write((first_chunk + whole as u64) * CHUNK_BYTES, &torn[..tail]);
                }
                self.spares.recycle(PendingBytes::Chunks(rest));
            }
            PendingBytes::Flat(bytes) if owned.is_empty() => {
                self.durable.write(record.offset, &bytes[..keep]);
                self.spares.recycle(PendingBytes::Flat(bytes));
            }
            data => {
                let mut sector_bytes = [0u8; SECTOR];
                for sector in kept.filter(|sector| !owned.contains(sector)) {
                    data.copy_out(((sector - first) as usize) * SECTOR, &mut sector_bytes);
                    self.durable.write(sector * SECTOR_SIZE, &sector_bytes);
                }
                self.spares.recycle(data);
            }
        }
    }

    /// Drops `record`'s claim on the sectors it is still newest for.
    fn forget(&mut self, record: &WriteRecord) {
        self.newest.forget(record.first_sector()..record.end_sector(), record.seq);
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
        let record = pending.record;
        self.apply(pending, record.len);
        self.forget(&record);
        self.pending_bytes -= record.len;
        self.settle_if_empty();
        Some(record)
    }

    /// Empties the cache in issue order, applying to the medium the prefix of
    /// each pending write that `keep_bytes` chooses (0 = lost, `len` = whole).
    /// Returns the records in issue order. Flush keeps everything; a crash keeps
    /// what its policy draws.
    pub fn drain(&mut self, mut keep_bytes: impl FnMut(&WriteRecord) -> u64) -> Vec<WriteRecord> {
        let pending = std::mem::take(&mut self.pending);
        let mut records = Vec::with_capacity(pending.len());
        for (_, write) in pending {
            let record = write.record;
            self.apply(write, keep_bytes(&record));
            records.push(record);
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
        self.newest.covers(sector)
    }

    /// Every sector of the range is served from the cache.
    pub fn fully_pending(&self, offset: u64, len: u64) -> bool {
        let sectors = sector_range(offset, len as usize);
        let wanted = sectors.end - sectors.start;
        let covered: u64 = self.newest.within(sectors).map(|(start, end, _)| end - start).sum();
        wanted > 0 && covered == wanted
    }

    /// Hash of what reads see, in the scheme of [`super::hash`]; equal to the
    /// durable hash whenever nothing pending differs from the medium.
    pub fn visible_hash(&self) -> u64 {
        let mut pending_chunks = BTreeSet::new();
        for (start, end) in self.newest.spans() {
            pending_chunks.extend(start * SECTOR_SIZE / CHUNK_BYTES..=(end * SECTOR_SIZE - 1) / CHUNK_BYTES);
        }
        // Both sequences ascend; merge them so chunks no pending write meets are
        // hashed where they lie instead of being copied out first.
        let mut durable = self.durable.chunks().peekable();
        let mut pending = pending_chunks.into_iter().peekable();
        let mut hasher = ImageHasher::new();
        let mut buf = vec![0u8; CHUNK_BYTES as usize];
        loop {
            let next_durable = durable.peek().map(|&(offset, _)| offset / CHUNK_BYTES);
            let next_pending = pending.peek().copied();
            let chunk = match (next_durable, next_pending) {
                (None, None) => break,
                (Some(d), Some(p)) => d.min(p),
                (Some(d), None) => d,
                (None, Some(p)) => p,
            };
            let offset = chunk * CHUNK_BYTES;
            if next_pending == Some(chunk) {
                pending.next();
                if next_durable == Some(chunk) {
                    durable.next();
                }
                self.read(offset, &mut buf);
                hasher.add_chunk(offset, &buf);
            } else if let Some((_, data)) = durable.next() {
                hasher.add_chunk(offset, data);
            }
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

    #[test]
    fn runs_trim_at_both_edges_and_forget_only_their_own_write() {
        let mut runs = Runs::default();
        runs.claim(0..10, 1);
        runs.claim(3..5, 2);
        runs.claim(8..12, 3);
        let all: Vec<_> = runs.within(0..20).collect();
        assert_eq!(all, vec![(0, 3, 1), (3, 5, 2), (5, 8, 1), (8, 12, 3)]);
        assert_eq!(runs.within(4..9).collect::<Vec<_>>(), vec![(4, 5, 2), (5, 8, 1), (8, 9, 3)]);
        runs.clear_range(2..9);
        assert_eq!(runs.within(0..20).collect::<Vec<_>>(), vec![(0, 2, 1), (9, 12, 3)]);
        assert!(runs.covers(1) && !runs.covers(2) && runs.covers(11) && !runs.covers(12));
        runs.forget(0..10, 1);
        assert_eq!(runs.spans().collect::<Vec<_>>(), vec![(9, 12)]);
    }

    #[test]
    fn reads_stitch_runs_of_several_writes() {
        let mut cache = WriteCache::new();
        cache.write_pending(0, &[1; 4096], IoClass::Data);
        cache.write_pending(1024, &[2; 1024], IoClass::Data);
        cache.write_through(3072, &[3; 512], IoClass::Metadata);
        let mut buf = vec![0u8; 4096];
        cache.read(0, &mut buf);
        let mut want = vec![1u8; 4096];
        want[1024..2048].fill(2);
        want[3072..3584].fill(3);
        assert_eq!(buf, want);
        assert!(!cache.fully_pending(0, 4096) && cache.fully_pending(0, 3072));
        cache.destage_oldest();
        cache.read(0, &mut buf);
        assert_eq!(buf, want);
    }

    #[test]
    fn chunk_aligned_writes_land_whole_torn_or_around_a_newer_write_through() {
        const C: usize = CHUNK_BYTES as usize;
        let mut cache = WriteCache::new();
        cache.write_pending(0, &vec![1; 3 * C], IoClass::Data);
        cache.flush_all();
        // A rewrite of chunks 0..2 kept only to 1.5 chunks, by a crash's choice.
        cache.write_pending(0, &vec![2; 2 * C], IoClass::Data);
        cache.drain(|_| (C + C / 2) as u64);
        let mut back = vec![0; 3 * C];
        cache.read_durable(0, &mut back);
        assert!(back[..C + C / 2].iter().all(|&b| b == 2));
        assert!(back[C + C / 2..].iter().all(|&b| b == 1), "the torn chunk keeps its old tail");
        // A write-through newer than a pending chunk write keeps its sector.
        cache.write_pending(0, &vec![3; C], IoClass::Data);
        cache.write_through(1024, &[4; SECTOR], IoClass::Metadata);
        cache.flush_all();
        cache.read_durable(0, &mut back[..C]);
        assert!(back[..1024].iter().chain(&back[1024 + SECTOR..C]).all(|&b| b == 3));
        assert_eq!(&back[1024..1024 + SECTOR], &[4; SECTOR]);
        assert_eq!(cache.durable().allocated_bytes(), 3 * CHUNK_BYTES);
        assert_eq!(cache.visible_hash(), cache.durable().content_hash());
    }
}
