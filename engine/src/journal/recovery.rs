//! Recovery at mount, in e2fsck/recovery.c's three passes:
//! - **SCAN** from s_start expecting tid s_sequence: descriptors (tail
//!   checksum, then each copy's tag checksum), revoke blocks (tail
//!   checksum), commit blocks (checksum). The first block that is not the
//!   expected tid's, or fails a check, ends the log; the transaction it was
//!   in is dropped whole.
//! - **REVOKE**: each revoked block with the newest tid that revoked it.
//! - **REPLAY**: the newest copy of each block from a committed transaction
//!   not revoked at or after it goes home (ascending); flush; the log is
//!   reset (s_start 0, s_sequence past the end) and needs_recovery cleared.
//!
//! Being stricter than jbd2 on a bad tag checksum (it skips only that block)
//! keeps the replayed state a whole transaction; our writer never commits a
//! copy that is not durable, so only real corruption differs.

use std::collections::BTreeMap;

use crate::device::{BlockDevice, IoClass, WriteFlags};
use crate::error::Result;
use crate::format::journal_superblock::JournalSuperblock;
use crate::format::superblock::Superblock;
use crate::format::BlockNumber;

use super::block::{Header, LogFormat, BLOCKTYPE_COMMIT, BLOCKTYPE_DESCRIPTOR, BLOCKTYPE_REVOKE};
use super::descriptor::{self, Tag};
use super::map::LogMap;
use super::{commit, read_jsb, revoke, set_needs_recovery};

/// A committed transaction found by the scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScannedTxn {
    pub tid: u32,
    /// Journal block of its first block.
    pub start: u32,
    /// Each copy's tag and journal block.
    pub copies: Vec<(Tag, u32)>,
    pub revokes: Vec<BlockNumber>,
}

/// What the log holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogScan {
    pub transactions: Vec<ScannedTxn>,
    /// The first tid not committed.
    pub end_tid: u32,
    /// Why the scan stopped (the end of any log says something).
    pub stop: String,
}

/// What a recovery did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryReport {
    pub transactions: usize,
    pub replayed: usize,
    pub revoked: usize,
    pub end_tid: u32,
    pub stop: String,
}

/// `a >= b` in tid order (tids wrap).
fn tid_geq(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

fn read_log<D: BlockDevice>(dev: &mut D, map: &LogMap, pos: u32, bs: usize) -> Result<Vec<u8>> {
    let mut b = vec![0u8; bs];
    dev.read(map.physical(pos)? * bs as u64, &mut b, IoClass::Journal)?;
    Ok(b)
}

/// PASS_SCAN over a log whose jbd2 superblock is `jsb` (s_start != 0).
/// Device errors are errors; anything wrong in the log's contents ends it.
pub fn scan<D: BlockDevice>(dev: &mut D, map: &LogMap, jsb: &JournalSuperblock, fs_blocks: u64) -> Result<LogScan> {
    let fmt = LogFormat::from_jsb(jsb);
    let bs = fmt.block_size;
    let ring = jsb.maxlen - jsb.first;
    let advance = |pos: u32| if pos + 1 >= jsb.maxlen { jsb.first } else { pos + 1 };
    let mut pos = jsb.start;
    let mut tid = jsb.sequence;
    let mut seen = 0u32;
    let mut out = Vec::new();
    let stop = 'txns: loop {
        let mut cur = ScannedTxn { tid, start: pos, copies: Vec::new(), revokes: Vec::new() };
        loop {
            if seen >= ring {
                break 'txns format!("transaction {tid} runs past the whole log");
            }
            let at = pos;
            let b = read_log(dev, map, at, bs)?;
            seen += 1;
            pos = advance(pos);
            let Some(h) = Header::parse(&b) else { break 'txns format!("journal block {at} is not a log block") };
            if h.sequence != tid {
                break 'txns format!("journal block {at} has tid {} where {tid} was expected", h.sequence);
            }
            match h.blocktype {
                BLOCKTYPE_DESCRIPTOR => {
                    let tags = match descriptor::parse(&fmt, &b) {
                        Ok(t) => t,
                        Err(e) => break 'txns format!("transaction {tid}, journal block {at}: {e}"),
                    };
                    for tag in tags {
                        if seen >= ring {
                            break 'txns format!("transaction {tid} runs past the whole log");
                        }
                        let data_at = pos;
                        let data = read_log(dev, map, data_at, bs)?;
                        seen += 1;
                        pos = advance(pos);
                        if tag.fs_block >= fs_blocks {
                            break 'txns format!("transaction {tid} logs block {} outside the filesystem", tag.fs_block);
                        }
                        if !descriptor::tag_checksum_ok(&fmt, tid, &tag, &data) {
                            break 'txns format!("transaction {tid}: copy of block {} at journal block {data_at} fails its checksum", tag.fs_block);
                        }
                        cur.copies.push((tag, data_at));
                    }
                }
                BLOCKTYPE_REVOKE => match revoke::parse(&fmt, &b) {
                    Ok(r) => cur.revokes.extend(r),
                    Err(e) => break 'txns format!("transaction {tid}, journal block {at}: {e}"),
                },
                BLOCKTYPE_COMMIT => {
                    if let Err(e) = commit::parse(&fmt, &b) {
                        break 'txns format!("transaction {tid}, journal block {at}: {e}");
                    }
                    out.push(cur);
                    tid = tid.wrapping_add(1);
                    continue 'txns;
                }
                other => break 'txns format!("journal block {at} has block type {other}"),
            }
        }
    };
    Ok(LogScan { transactions: out, end_tid: tid, stop })
}

/// The copy each block gets back: (journal block, escaped) of its newest
/// committed, unrevoked copy (PASS_REVOKE and the choice PASS_REPLAY makes).
pub fn replay_plan(log: &LogScan) -> (BTreeMap<BlockNumber, (u32, bool)>, usize) {
    let mut revoked: BTreeMap<BlockNumber, u32> = BTreeMap::new();
    for t in &log.transactions {
        for &b in &t.revokes {
            let e = revoked.entry(b).or_insert(t.tid);
            if tid_geq(t.tid, *e) {
                *e = t.tid;
            }
        }
    }
    let mut plan = BTreeMap::new();
    let mut skipped = 0usize;
    for t in &log.transactions {
        for (tag, at) in &t.copies {
            if revoked.get(&tag.fs_block).is_some_and(|&r| tid_geq(r, t.tid)) {
                skipped += 1;
                continue;
            }
            plan.insert(tag.fs_block, (*at, tag.escaped));
        }
    }
    (plan, skipped)
}

/// Replays the journal of the filesystem whose superblock is `sb` if its log
/// is not empty. Returns None when there was nothing to replay (after
/// clearing a stale needs_recovery flag).
pub fn recover<D: BlockDevice>(dev: &mut D, sb: &Superblock) -> Result<Option<RecoveryReport>> {
    let map = LogMap::load(dev, sb)?;
    let jsb_block = map.physical(0)?;
    let bs = sb.block_size();
    let mut jsb = read_jsb(dev, jsb_block, bs)?;
    if jsb.start == 0 {
        if sb.feature_incompat & crate::format::superblock::feature::INCOMPAT_RECOVER != 0 {
            set_needs_recovery(dev, false)?;
            dev.flush()?;
        }
        return Ok(None);
    }
    if jsb.maxlen > map.blocks() {
        return Err(crate::error::Error::Corrupt(crate::error::Corrupt::Journal(format!(
            "s_maxlen {} > the journal inode's {} blocks",
            jsb.maxlen,
            map.blocks()
        ))));
    }
    let log = scan(dev, &map, &jsb, sb.blocks_count)?;
    let (plan, revoked) = replay_plan(&log);
    let fmt = LogFormat::from_jsb(&jsb);
    for (&block, &(at, escaped)) in &plan {
        let mut data = read_log(dev, &map, at, fmt.block_size)?;
        if escaped {
            descriptor::unescape(&mut data);
        }
        dev.write(block * u64::from(bs), &data, WriteFlags::METADATA)?;
    }
    dev.flush()?;
    jsb.start = 0;
    jsb.sequence = log.end_tid.wrapping_add(1);
    dev.write(jsb_block * u64::from(bs), &jsb.to_bytes(), WriteFlags { fua: true, ..WriteFlags::JOURNAL })?;
    set_needs_recovery(dev, false)?;
    dev.flush()?;
    Ok(Some(RecoveryReport {
        transactions: log.transactions.len(),
        replayed: plan.len(),
        revoked,
        end_tid: log.end_tid,
        stop: log.stop,
    }))
}
