//! One transaction: the metadata blocks a sync made dirty (newest contents)
//! and the blocks it freed that still have copies in the log (revokes),
//! committed as a unit.
//!
//! Order on the device, which is what makes the commit atomic and keeps
//! data=ordered honest:
//! 1. flush: data written before the commit is durable before any metadata
//!    that points at it can be;
//! 2. into an empty log first: needs_recovery on the ext4 superblock, flush,
//!    then the jbd2 superblock's s_start/s_sequence (and features);
//! 3. revoke blocks, then descriptors each followed by its copies (escaped);
//! 4. flush, then the commit block with FUA.
//!
//! With journal_async_commit (jbd2's ASYNC_COMMIT feature) steps 1 and 4
//! lose their flushes: the commit block goes out with the log blocks and
//! one flush follows both. A crash can then keep a commit block whose log
//! blocks were lost; their tag checksums (csum v3) tell recovery, which
//! stops before that transaction. Nothing orders file data before the
//! commit, which is why ext4 refuses the option under data=ordered.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use crate::device::{BlockDevice, WriteFlags};
use crate::error::{Error, Result};
use crate::format::journal_superblock::{CSUM_TYPE_CRC32C, INCOMPAT_64BIT, INCOMPAT_ASYNC_COMMIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3, INCOMPAT_REVOKE};
use crate::format::BlockNumber;

use super::block::LogFormat;
use super::commit::{self, Commit};
use super::descriptor::{self, Tag};
use super::{revoke, set_needs_recovery, Journal};

/// Blocks to commit together.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transaction {
    blocks: BTreeMap<BlockNumber, Vec<u8>>,
    revokes: BTreeSet<BlockNumber>,
    /// Those of `blocks` that are file data (data=journal), for the
    /// checkpoint's I/O accounting.
    data: BTreeSet<BlockNumber>,
}

impl Transaction {
    pub fn new() -> Self {
        Self::default()
    }

    /// Logs `data` as the new contents of `block` (a later add replaces it).
    pub fn add(&mut self, block: BlockNumber, data: Vec<u8>) {
        self.revokes.remove(&block);
        self.data.remove(&block);
        self.blocks.insert(block, data);
    }

    /// Logs file data (a data=journal inode's block) as `block`'s contents.
    pub fn add_data(&mut self, block: BlockNumber, data: Vec<u8>) {
        self.add(block, data);
        self.data.insert(block);
    }

    /// Revokes earlier logged copies of `block`; a block logged in this same
    /// transaction is not revoked (the revoke would cancel its own copy).
    pub fn revoke(&mut self, block: BlockNumber) {
        if !self.blocks.contains_key(&block) {
            self.revokes.insert(block);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.revokes.is_empty()
    }

    pub fn block_count(&self) -> usize {
        self.blocks.len()
    }

    pub fn revoke_count(&self) -> usize {
        self.revokes.len()
    }

    pub fn contains(&self, block: BlockNumber) -> bool {
        self.blocks.contains_key(&block)
    }

    /// The logged blocks, ascending.
    pub fn blocks(&self) -> impl Iterator<Item = (BlockNumber, &[u8])> + '_ {
        self.blocks.iter().map(|(b, d)| (*b, &d[..]))
    }
}

impl Journal {
    /// The format every commit writes: csum v3, 64-bit tags.
    fn commit_format(&self) -> LogFormat {
        let mut jsb = self.jsb.clone();
        jsb.feature_incompat = (jsb.feature_incompat & !INCOMPAT_CSUM_V2) | INCOMPAT_CSUM_V3 | INCOMPAT_64BIT;
        LogFormat::from_jsb(&jsb)
    }

    /// Log blocks `txn` takes: revoke blocks, descriptors, copies, commit.
    pub fn log_blocks_for(&self, txn: &Transaction) -> u64 {
        let fmt = self.commit_format();
        let n = txn.blocks.len() as u64;
        let per_desc = descriptor::capacity(&fmt).max(1) as u64;
        let per_revoke = revoke::capacity(&fmt).max(1) as u64;
        (txn.revokes.len() as u64).div_ceil(per_revoke) + n.div_ceil(per_desc) + n + 1
    }

    /// Commits `txn` at the head of the log, stamped `time` (secs, nsec).
    /// Returns its tid. The log must have room ([`Journal::free`]); an empty
    /// transaction writes nothing and returns None.
    pub fn commit<D: BlockDevice>(&mut self, dev: &mut D, txn: Transaction, time: (u64, u32)) -> Result<Option<u32>> {
        if txn.is_empty() {
            return Ok(None);
        }
        let need = self.log_blocks_for(&txn);
        if need > u64::from(self.free()) {
            return Err(Error::InvalidArgument(format!(
                "transaction of {need} log blocks, {} free of {}: checkpoint first",
                self.free(),
                self.capacity()
            )));
        }
        if !self.async_commit {
            dev.flush()?;
        }
        let needs_revoke_feature = !txn.revokes.is_empty() && self.jsb.feature_incompat & INCOMPAT_REVOKE == 0;
        let into_empty = self.tail == 0;
        if into_empty {
            set_needs_recovery(dev, true)?;
            dev.flush()?;
            self.jsb.feature_incompat = (self.jsb.feature_incompat & !(INCOMPAT_CSUM_V2 | INCOMPAT_ASYNC_COMMIT)) | INCOMPAT_CSUM_V3 | INCOMPAT_64BIT;
            if self.async_commit {
                self.jsb.feature_incompat |= INCOMPAT_ASYNC_COMMIT;
            }
            self.jsb.checksum_type = CSUM_TYPE_CRC32C;
            self.jsb.start = self.head;
            self.jsb.sequence = self.next_tid;
            self.tail = self.head;
        }
        if needs_revoke_feature || into_empty {
            if needs_revoke_feature {
                self.jsb.feature_incompat |= INCOMPAT_REVOKE;
            }
            // Durable with the log blocks, by the flush before the commit block.
            self.write_jsb(dev, false)?;
        }
        let fmt = self.format();
        debug_assert_eq!(fmt, self.commit_format());
        let tid = self.next_tid;
        // Log blocks in order; a copy is made only for a block that must be
        // escaped (its first word is the jbd2 magic), the rest are logged
        // straight from the transaction.
        let mut out: Vec<Cow<'_, [u8]>> = Vec::new();
        let revokes: Vec<BlockNumber> = txn.revokes.iter().copied().collect();
        for chunk in revokes.chunks(revoke::capacity(&fmt).max(1)) {
            out.push(Cow::Owned(revoke::write(&fmt, tid, chunk)));
        }
        let blocks: Vec<(&BlockNumber, &Vec<u8>)> = txn.blocks.iter().collect();
        for chunk in blocks.chunks(descriptor::capacity(&fmt).max(1)) {
            let mut tags = Vec::with_capacity(chunk.len());
            let mut copies = Vec::with_capacity(chunk.len());
            for (&b, data) in chunk {
                if b >= self.fs_blocks || data.len() as u64 != self.bs() {
                    return Err(Error::InvalidArgument(format!("logging {} bytes for block {b}", data.len())));
                }
                let mut copy = Cow::Borrowed(&data[..]);
                let escaped = descriptor::needs_escape(&copy) && descriptor::escape(copy.to_mut());
                tags.push(Tag { fs_block: b, escaped, checksum: descriptor::tag_checksum(&fmt, tid, &copy) });
                copies.push(copy);
            }
            out.push(Cow::Owned(descriptor::write(&fmt, tid, &tags)));
            out.extend(copies);
        }
        debug_assert_eq!(out.len() as u64 + 1, need);
        let commit_at = self.write_log(dev, self.head, &out)?;
        if !self.async_commit {
            dev.flush()?;
        }
        let c = commit::write(&fmt, &Commit { tid, sec: time.0, nsec: time.1 });
        let phys = self.map.physical(commit_at)?;
        dev.write(phys * self.bs(), &c, WriteFlags { fua: !self.async_commit, ..WriteFlags::JOURNAL })?;
        if self.async_commit {
            dev.flush()?;
        }
        self.stats.log_blocks_written += 1;
        self.head = self.advance(commit_at, 1);
        self.used += need as u32;
        self.next_tid = tid.wrapping_add(1);
        self.stats.commits += 1;
        self.stats.revokes += txn.revokes.len() as u64;
        for b in &txn.revokes {
            self.unhomed.remove(b);
            self.unhomed_data.remove(b);
        }
        for (b, data) in txn.blocks {
            self.unhomed.insert(b, data.into_boxed_slice());
            if txn.data.contains(&b) {
                self.unhomed_data.insert(b);
            } else {
                self.unhomed_data.remove(&b);
            }
        }
        Ok(Some(tid))
    }
}
