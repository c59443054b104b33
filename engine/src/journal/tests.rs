//! Commit, checkpoint and recovery together on a fresh mkfs image: what a
//! commit leaves on the device is exactly what recovery puts back, across
//! the ring's wrap, with escapes, torn commits and revokes.

use crate::device::{BlockDevice, IoClass, WriteFlags};
use crate::device_mem::MemDevice;
use crate::format::superblock::{feature, Superblock};
use crate::image::Image;
use crate::mkfs::{mkfs, MkfsOptions};

use super::recovery::{recover, scan};
use super::{read_jsb, Journal, Transaction};

const BS: u64 = 1024;
/// Blocks past every piece of mkfs metadata in a 16 MiB, 1 KiB-block image.
const FREE_AREA: u64 = 12_000;

fn fresh() -> (MemDevice, Superblock) {
    let mut dev = MemDevice::new(16 << 20);
    let mut o = MkfsOptions::new(16 << 20, *b"journal-test-uid", [4; 16], crate::fixtures::EPOCH_SECS);
    o.block_size = BS as u32;
    mkfs(&mut dev, &o).unwrap();
    let sb = Image::open(&mut dev).unwrap().superblock().clone();
    (dev, sb)
}

fn block(dev: &mut MemDevice, b: u64) -> Vec<u8> {
    let mut out = vec![0u8; BS as usize];
    dev.read(b * BS, &mut out, IoClass::Metadata).unwrap();
    out
}

fn pattern(b: u64, round: u8) -> Vec<u8> {
    (0..BS).map(|i| (i as u8).wrapping_mul(31) ^ (b as u8) ^ round).collect()
}

fn needs_recovery(dev: &mut MemDevice) -> bool {
    let mut raw = [0u8; 1024];
    dev.read(1024, &mut raw, IoClass::Metadata).unwrap();
    Superblock::parse(&raw).unwrap().feature_incompat & feature::INCOMPAT_RECOVER != 0
}

#[test]
fn committed_blocks_stay_out_of_place_until_recovery_puts_them_home() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut txn = Transaction::new();
    let mut magic = pattern(FREE_AREA, 1);
    magic[..4].copy_from_slice(&crate::format::journal_superblock::JBD2_MAGIC.to_be_bytes());
    txn.add(FREE_AREA, magic.clone());
    txn.add(FREE_AREA + 1, pattern(FREE_AREA + 1, 1));
    let tid = j.commit(&mut dev, txn, (5, 6)).unwrap().unwrap();
    assert_eq!(tid, 1, "mke2fs leaves s_sequence 1");
    assert_eq!(block(&mut dev, FREE_AREA), vec![0u8; 1024], "nothing goes home at commit");
    assert!(needs_recovery(&mut dev));
    let jsb = read_jsb(&mut dev, j.jsb_block, 1024).unwrap();
    assert_eq!((jsb.start, jsb.sequence), (1, 1));
    let log = scan(&mut dev, &j.map, &jsb, sb.blocks_count).unwrap();
    assert_eq!(log.transactions.len(), 1);
    assert_eq!(log.end_tid, 2);
    assert!(log.transactions[0].copies[0].0.escaped, "a copy starting with the magic is escaped");

    let report = recover(&mut dev, &sb).unwrap().unwrap();
    assert_eq!((report.transactions, report.replayed), (1, 2));
    assert_eq!(block(&mut dev, FREE_AREA), magic, "the escape is undone on replay");
    assert_eq!(block(&mut dev, FREE_AREA + 1), pattern(FREE_AREA + 1, 1));
    assert!(!needs_recovery(&mut dev));
    let jsb = read_jsb(&mut dev, j.jsb_block, 1024).unwrap();
    assert_eq!((jsb.start, jsb.sequence), (0, 3), "reset past the end of the log");
    assert!(recover(&mut dev, &sb).unwrap().is_none(), "an empty log replays nothing");
}

#[test]
fn checkpoint_writes_home_and_empties_the_log() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut txn = Transaction::new();
    txn.add(FREE_AREA, pattern(FREE_AREA, 2));
    j.commit(&mut dev, txn, (1, 0)).unwrap();
    assert!(!j.is_empty());
    j.checkpoint(&mut dev, true).unwrap();
    assert!(j.is_empty());
    assert_eq!(block(&mut dev, FREE_AREA), pattern(FREE_AREA, 2));
    assert_eq!(read_jsb(&mut dev, j.jsb_block, 1024).unwrap().start, 0);
    assert!(!needs_recovery(&mut dev), "an empty log after unmount needs nothing");
}

#[test]
fn transactions_wrap_around_the_ring() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let ring = j.capacity();
    let per_txn = 300u64;
    let mut wrapped = false;
    for round in 0..8u8 {
        let start = j.head;
        let mut txn = Transaction::new();
        for i in 0..per_txn {
            txn.add(FREE_AREA + i, pattern(FREE_AREA + i, round));
        }
        let need = j.log_blocks_for(&txn);
        j.commit(&mut dev, txn, (u64::from(round), 0)).unwrap();
        if u64::from(start) + need > u64::from(j.jsb.maxlen) {
            wrapped = true;
            assert!(j.head < start, "the head came round to s_first");
            let report = recover(&mut dev, &sb).unwrap().unwrap();
            assert_eq!(report.replayed, per_txn as usize);
            for i in (0..per_txn).step_by(37) {
                assert_eq!(block(&mut dev, FREE_AREA + i), pattern(FREE_AREA + i, round), "block {i} after the wrap");
            }
            break;
        }
        j.checkpoint(&mut dev, false).unwrap();
    }
    assert!(wrapped, "{per_txn}-block transactions must wrap a {ring}-block ring");
}

#[test]
fn a_torn_commit_block_drops_its_transaction_only() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut t1 = Transaction::new();
    t1.add(FREE_AREA, pattern(FREE_AREA, 1));
    j.commit(&mut dev, t1, (1, 0)).unwrap();
    let mut t2 = Transaction::new();
    t2.add(FREE_AREA, pattern(FREE_AREA, 2));
    t2.add(FREE_AREA + 1, pattern(FREE_AREA + 1, 2));
    j.commit(&mut dev, t2, (2, 0)).unwrap();
    // The commit block of t2 is the block before the head: tear its second sector.
    let commit_at = j.map.physical(j.head - 1).unwrap();
    dev.write(commit_at * BS + 512, &[0xEEu8; 512], WriteFlags::JOURNAL).unwrap();
    let report = recover(&mut dev, &sb).unwrap().unwrap();
    assert_eq!(report.transactions, 1, "{}", report.stop);
    assert!(report.stop.contains("checksum"), "{}", report.stop);
    assert_eq!(block(&mut dev, FREE_AREA), pattern(FREE_AREA, 1), "t1 replayed");
    assert_eq!(block(&mut dev, FREE_AREA + 1), vec![0u8; 1024], "nothing of t2");
}

#[test]
fn a_corrupt_copy_drops_its_transaction() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut t1 = Transaction::new();
    t1.add(FREE_AREA, pattern(FREE_AREA, 1));
    t1.add(FREE_AREA + 1, pattern(FREE_AREA + 1, 1));
    j.commit(&mut dev, t1, (1, 0)).unwrap();
    // Layout: descriptor at s_first, then the copies.
    let copy = j.map.physical(j.jsb.first + 2).unwrap();
    dev.write(copy * BS, &[1u8; 512], WriteFlags::JOURNAL).unwrap();
    let report = recover(&mut dev, &sb).unwrap().unwrap();
    assert_eq!((report.transactions, report.replayed), (0, 0), "{}", report.stop);
    assert_eq!(block(&mut dev, FREE_AREA), vec![0u8; 1024]);
}

#[test]
fn revoked_blocks_are_not_replayed() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut t1 = Transaction::new();
    t1.add(FREE_AREA, pattern(FREE_AREA, 1));
    t1.add(FREE_AREA + 1, pattern(FREE_AREA + 1, 1));
    j.commit(&mut dev, t1, (1, 0)).unwrap();
    assert_eq!(j.unhomed_in(FREE_AREA, FREE_AREA + 2).count(), 2);
    // The block is freed and now holds data written in place.
    dev.write(FREE_AREA * BS, &pattern(FREE_AREA, 9), WriteFlags::DATA).unwrap();
    let mut t2 = Transaction::new();
    t2.revoke(FREE_AREA);
    t2.add(FREE_AREA + 2, pattern(FREE_AREA + 2, 2));
    j.commit(&mut dev, t2, (2, 0)).unwrap();
    assert_eq!(j.unhomed_in(FREE_AREA, FREE_AREA + 1).count(), 0, "a revoked block never goes home");
    let jsb = read_jsb(&mut dev, j.jsb_block, 1024).unwrap();
    assert!(jsb.feature_incompat & crate::format::journal_superblock::INCOMPAT_REVOKE != 0);
    let report = recover(&mut dev, &sb).unwrap().unwrap();
    assert_eq!((report.transactions, report.replayed, report.revoked), (2, 2, 1));
    assert_eq!(block(&mut dev, FREE_AREA), pattern(FREE_AREA, 9), "the data survives");
    assert_eq!(block(&mut dev, FREE_AREA + 1), pattern(FREE_AREA + 1, 1));
    assert_eq!(block(&mut dev, FREE_AREA + 2), pattern(FREE_AREA + 2, 2));
}

#[test]
fn a_revoke_does_not_cancel_a_later_copy() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut t1 = Transaction::new();
    t1.revoke(FREE_AREA);
    t1.add(FREE_AREA + 5, pattern(FREE_AREA + 5, 1));
    j.commit(&mut dev, t1, (1, 0)).unwrap();
    let mut t2 = Transaction::new();
    t2.add(FREE_AREA, pattern(FREE_AREA, 2));
    j.commit(&mut dev, t2, (2, 0)).unwrap();
    recover(&mut dev, &sb).unwrap().unwrap();
    assert_eq!(block(&mut dev, FREE_AREA), pattern(FREE_AREA, 2), "revoked at tid 1, logged again at tid 2");
}

#[test]
fn a_transaction_bigger_than_the_free_log_is_refused() {
    let (mut dev, sb) = fresh();
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut big = Transaction::new();
    for i in 0..u64::from(j.capacity()) {
        big.add(i + 1, vec![0u8; 1024]);
    }
    assert!(j.log_blocks_for(&big) > u64::from(j.free()));
    assert!(j.commit(&mut dev, big, (0, 0)).is_err());
    assert!(j.is_empty(), "a refused commit writes nothing");
}

/// What a commit asks of the device, in order.
#[derive(Debug, PartialEq, Eq)]
enum Io {
    Write { fua: bool },
    Flush,
}

struct Recording<'a> {
    dev: &'a mut MemDevice,
    ios: Vec<Io>,
}

impl BlockDevice for Recording<'_> {
    fn size_bytes(&self) -> u64 {
        self.dev.size_bytes()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), crate::device::DeviceError> {
        self.dev.read(offset, buf, class)
    }
    fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), crate::device::DeviceError> {
        self.ios.push(Io::Write { fua: flags.fua });
        self.dev.write(offset, buf, flags)
    }
    fn flush(&mut self) -> Result<(), crate::device::DeviceError> {
        self.ios.push(Io::Flush);
        self.dev.flush()
    }
}

/// A second commit (the log is not empty, so no superblock writes): with
/// journal_async_commit the commit block follows the log blocks with no
/// flush or FUA, and one flush ends it; without, a flush goes before the
/// log blocks and before the commit block, which is FUA. The jbd2
/// superblock names the feature from the log start on, and recovery
/// replays both transactions either way.
#[test]
fn async_commit_sends_the_commit_block_with_the_log_and_flushes_once() {
    for async_commit in [false, true] {
        let (mut dev, sb) = fresh();
        let mut j = Journal::open(&mut dev, &sb).unwrap();
        j.set_async_commit(async_commit);
        let mut first = Transaction::new();
        first.add(FREE_AREA, pattern(FREE_AREA, 7));
        j.commit(&mut dev, first, (1, 0)).unwrap();
        let jsb = read_jsb(&mut dev, j.jsb_block, 1024).unwrap();
        let flagged = jsb.feature_incompat & crate::format::journal_superblock::INCOMPAT_ASYNC_COMMIT != 0;
        assert_eq!(flagged, async_commit);

        let mut rec = Recording { dev: &mut dev, ios: Vec::new() };
        let mut second = Transaction::new();
        second.add(FREE_AREA + 1, pattern(FREE_AREA + 1, 7));
        j.commit(&mut rec, second, (2, 0)).unwrap();
        // The descriptor and its copy go out as one write.
        let log = Io::Write { fua: false };
        let want = if async_commit {
            vec![log, Io::Write { fua: false }, Io::Flush]
        } else {
            vec![Io::Flush, log, Io::Flush, Io::Write { fua: true }]
        };
        assert_eq!(rec.ios, want, "async_commit {async_commit}");

        let report = recover(&mut dev, &sb).unwrap().unwrap();
        assert_eq!((report.transactions, report.replayed), (2, 2), "async_commit {async_commit}");
        assert_eq!(block(&mut dev, FREE_AREA + 1), pattern(FREE_AREA + 1, 7));
    }
}

/// Records the class of every write it passes on.
struct Classes {
    inner: MemDevice,
    writes: Vec<(u64, usize, IoClass)>,
}

impl BlockDevice for Classes {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read(&mut self, offset: u64, buf: &mut [u8], class: IoClass) -> Result<(), crate::device::DeviceError> {
        self.inner.read(offset, buf, class)
    }
    fn write(&mut self, offset: u64, buf: &[u8], flags: WriteFlags) -> Result<(), crate::device::DeviceError> {
        self.writes.push((offset / BS, buf.len(), flags.class));
        self.inner.write(offset, buf, flags)
    }
    fn flush(&mut self) -> Result<(), crate::device::DeviceError> {
        self.inner.flush()
    }
}

#[test]
fn checkpointed_file_data_counts_as_data_io_and_metadata_over_it_does_not() {
    let (dev, sb) = fresh();
    let mut dev = Classes { inner: dev, writes: Vec::new() };
    let mut j = Journal::open(&mut dev, &sb).unwrap();
    let mut txn = Transaction::new();
    txn.add_data(FREE_AREA, pattern(FREE_AREA, 1));
    txn.add_data(FREE_AREA + 1, pattern(FREE_AREA + 1, 1));
    txn.add(FREE_AREA + 2, pattern(FREE_AREA + 2, 1));
    j.commit(&mut dev, txn, (1, 0)).unwrap();
    // The next transaction logs block 1 again, as metadata (freed, reused).
    let mut txn = Transaction::new();
    txn.add(FREE_AREA + 1, pattern(FREE_AREA + 1, 2));
    j.commit(&mut dev, txn, (2, 0)).unwrap();
    dev.writes.clear();
    j.checkpoint(&mut dev, true).unwrap();
    let home: Vec<(u64, usize, IoClass)> = dev.writes.iter().copied().filter(|w| (FREE_AREA..FREE_AREA + 3).contains(&w.0)).collect();
    assert_eq!(home, vec![(FREE_AREA, BS as usize, IoClass::Data), (FREE_AREA + 1, 2 * BS as usize, IoClass::Metadata)]);
}
