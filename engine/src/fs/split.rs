//! Ops in two halves, so that the scheduler can run other tasks' ops between
//! them as the kernel would while the first task sleeps on I/O:
//! - fsync and fdatasync split where jbd2 commits: the running transaction
//!   closes in the first half, and new handles go into the next one while
//!   it is written;
//! - chattr -j splits while it flushes the journal, holding the updates
//!   lock (`journal_switch`), so only ops that look run meanwhile; +j has
//!   no such sleep and is done in its first half;
//! - ops that sleep on I/O holding their inode's locks (`lock_plan`): the
//!   first half takes the locks, the second gives them back and runs the
//!   op whole, so it takes effect after whatever ran in between. A
//!   buffered pwrite (by path or through a held descriptor) may go on
//!   folio by folio in between (`write_parts`), and a shrinking truncate
//!   or ftruncate extent by extent (`truncate_parts`), an allocating
//!   fallocate piece by piece (`fallocate_parts`), and a direct write
//!   or read submits its bios (`direct_write_parts`, `direct_read_parts`).

use ext4_model::{Errno, FileSystem, Op, Outcome, Reply};

use crate::device::BlockDevice;

use super::direct_read_parts::DirectReadInFlight;
use super::direct_write_parts::DirectWriteInFlight;
use super::fallocate_parts::FallocateInFlight;
use super::read_parts::ReadInFlight;
use super::journal_switch::SwitchTicket;
use super::lock_plan::LockPlan;
use super::locks::{Lock, LockHolder};
use super::truncate_parts::TruncateInFlight;
use super::write_parts::WriteInFlight;
use super::Ext4;

/// What a split op's second half has left to do.
#[derive(Debug, PartialEq, Eq)]
pub enum SecondHalf {
    Sync(SyncTicket),
    JournalSwitch(SwitchTicket),
    /// An op holding its inode's locks (none if it fails before them).
    Whole(WholeOp),
    /// A buffered pwrite holding its file's i_rwsem, which may take effect
    /// part by part ([`Ext4::write_part`]) before its second half.
    Write(WriteInFlight),
    /// A truncate or ftruncate holding its file's i_rwsem and invalidate_lock,
    /// which may free the file's blocks extent by extent
    /// ([`Ext4::truncate_part`]) before its second half.
    Truncate(TruncateInFlight),
    /// A fallocate holding its file's i_rwsem, which may map its range
    /// piece by piece ([`Ext4::fallocate_part`]) before its second half.
    Fallocate(FallocateInFlight),
    /// A direct write holding its file's i_rwsem and DIO count, which may
    /// submit its bios ([`Ext4::direct_write_part`]) before its second
    /// half writes them and completes.
    DirectWrite(DirectWriteInFlight),
    /// A direct read holding its file's i_rwsem (shared) and DIO count,
    /// which may submit its bios ([`Ext4::direct_read_part`]) before its
    /// second half reads them.
    DirectRead(DirectReadInFlight),
    /// A buffered read by path, which may copy folio by folio
    /// ([`Ext4::read_part`]) holding no lock between parts.
    Read(ReadInFlight),
}

/// An op that sleeps holding its locks, between its halves.
#[derive(Debug, PartialEq, Eq)]
pub struct WholeOp {
    pub(super) op: Op,
    /// The locks it took (a prefix of its plan), and for whom.
    pub(super) held: Option<(LockPlan, LockHolder)>,
    /// Its whole plan when it began: what a descriptor op whose file its
    /// first half pinned still has to take (the slot may lead elsewhere now).
    pub(super) planned: Option<LockPlan>,
}

impl WholeOp {
    /// The inode whose i_rwsem its first half took.
    pub(super) fn locked_inode(&self) -> Option<crate::format::InodeNumber> {
        let (plan, _) = self.held.as_ref()?;
        plan.steps.iter().find_map(|s| match s {
            super::lock_plan::PlannedLock::Sem { ino, class: Lock::InodeRwsem, .. } => Some(*ino),
            _ => None,
        })
    }
}

impl SecondHalf {
    /// The lock held until the second half runs, if any.
    pub fn holder(&self) -> Option<LockHolder> {
        match self {
            SecondHalf::JournalSwitch(t) => t.holder(),
            _ => self.whole()?.held.as_ref().map(|(_, h)| *h),
        }
    }

    /// The op and the locks its first half took (None for an fsync's or a
    /// switch's second half).
    fn whole(&self) -> Option<&WholeOp> {
        match self {
            SecondHalf::Sync(_) | SecondHalf::JournalSwitch(_) => None,
            SecondHalf::Whole(w) => Some(w),
            SecondHalf::Write(w) => Some(&w.whole),
            SecondHalf::Truncate(t) => Some(&t.whole),
            SecondHalf::Fallocate(f) => Some(&f.whole),
            SecondHalf::DirectWrite(d) => Some(&d.whole),
            SecondHalf::DirectRead(d) => Some(&d.whole),
            SecondHalf::Read(r) => Some(&r.whole),
        }
    }

    fn whole_mut(&mut self) -> Option<&mut WholeOp> {
        match self {
            SecondHalf::Sync(_) | SecondHalf::JournalSwitch(_) => None,
            SecondHalf::Whole(w) => Some(w),
            SecondHalf::Write(w) => Some(&mut w.whole),
            SecondHalf::Truncate(t) => Some(&mut t.whole),
            SecondHalf::Fallocate(f) => Some(&mut f.whole),
            SecondHalf::DirectWrite(d) => Some(&mut d.whole),
            SecondHalf::DirectRead(d) => Some(&mut d.whole),
            SecondHalf::Read(r) => Some(&mut r.whole),
        }
    }

    /// Whether the op goes on with a file its first half or a part fixed
    /// (a part ran, or a descriptor op pinned its slot's file). One that
    /// does not runs whole at its return, on what its name leads to then.
    fn file_fixed(&self) -> bool {
        match self {
            SecondHalf::Write(w) => w.file_fixed(),
            SecondHalf::Truncate(t) => t.file_fixed(),
            SecondHalf::Fallocate(f) => f.begun(),
            SecondHalf::DirectWrite(d) => d.begun(),
            SecondHalf::DirectRead(d) => d.begun(),
            SecondHalf::Read(r) => r.file_fixed(),
            SecondHalf::Sync(_) | SecondHalf::JournalSwitch(_) | SecondHalf::Whole(_) => false,
        }
    }
}

/// What the second half of a split fsync has left to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncTicket {
    /// Nothing (no journal: the first half wrote everything back; or read-only).
    Done,
    /// Nothing was logged; the file's data still owes its flush.
    Flush,
    /// Wait for transaction `tid`: commit it if it is still committing.
    Commit(u32),
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of an op with two halves ([`Op::has_two_halves`];
    /// None for any other op).
    pub fn begin_split(&mut self, op: &Op) -> Option<Result<SecondHalf, Errno>> {
        Some(match op {
            Op::Fsync { path } | Op::Fdatasync { path } => self.begin_fsync(path).map(SecondHalf::Sync),
            Op::SetJournalData { path, enable } => self.begin_journal_switch(path, *enable).map(SecondHalf::JournalSwitch),
            Op::Write { .. } | Op::Append { .. } | Op::Rewrite { .. } | Op::WriteFd { .. } => self.begin_write(op).map(SecondHalf::Write),
            Op::Truncate { .. } | Op::FtruncateFd { .. } => self.begin_truncate(op).map(SecondHalf::Truncate),
            Op::Fallocate { .. } => self.begin_fallocate(op).map(SecondHalf::Fallocate),
            Op::DirectWrite { .. } => self.begin_direct_write(op).map(SecondHalf::DirectWrite),
            Op::DirectRead { .. } => self.begin_direct_read(op).map(SecondHalf::DirectRead),
            Op::Read { .. } | Op::ReadFd { .. } => self.begin_read(op).map(SecondHalf::Read),
            op if op.sleeps_holding_locks() => self.begin_whole(op).map(SecondHalf::Whole),
            _ => return None,
        })
    }

    /// The second half: the op returns.
    pub fn finish_split(&mut self, half: SecondHalf) -> Outcome {
        match half {
            SecondHalf::Sync(ticket) => self.finish_sync(ticket).map(|()| Reply::Done),
            SecondHalf::JournalSwitch(ticket) => self.finish_journal_switch(ticket).map(|()| Reply::Done),
            SecondHalf::Whole(w) => self.finish_whole(w),
            SecondHalf::Write(w) => self.finish_write(w),
            SecondHalf::Truncate(t) => self.finish_truncate(t),
            SecondHalf::Fallocate(f) => self.finish_fallocate(f),
            SecondHalf::DirectWrite(d) => self.finish_direct_write(d),
            SecondHalf::DirectRead(d) => self.finish_direct_read(d),
            SecondHalf::Read(r) => self.finish_read(r),
        }
    }

    /// The lock the second half would sleep on now, if any. It hands back
    /// what it took and runs the op whole, which takes the op's plan as it
    /// stands now: it sleeps on any lock of that plan it did not take
    /// itself (the rest of its plan, or another inode's if its name or
    /// descriptor now leads there: renamed over meanwhile, a slot
    /// reopened), and where a new handle waits (a -j holds the updates
    /// barrier). One that took none (its file was missing, or its first
    /// lock held) waits where [`Ext4::waits_for`] says.
    pub fn finish_waits_for(&mut self, half: &SecondHalf) -> Option<Lock> {
        // A read whose parts began holds nothing and needs only its fill's;
        // a pread that pinned its file gives back what it holds, then fills.
        if let SecondHalf::Read(r) = half {
            if r.file_fixed() {
                return self.read_rest_waits_for(r);
            }
        }
        let WholeOp { op, held, planned } = half.whole()?;
        let Some((plan, _)) = held else { return self.waits_for(op) };
        let own = held.as_ref().map(|(_, holder)| holder.number());
        // A write, truncate or fallocate whose parts began goes on with the
        // file it opened (every lock its parts need is held), not with what
        // its name leads to now; a descriptor op whose first half pinned
        // its file still takes the rest of the plan it began with.
        let fixed = half.file_fixed();
        let begun = match half {
            SecondHalf::Write(w) => w.begun(),
            SecondHalf::Truncate(t) => t.begun(),
            _ => fixed,
        };
        let rest = match (begun, fixed) {
            (true, _) => None,
            (false, true) => planned.as_ref().map(|p| p.beyond(plan)),
            (false, false) => self.lock_plan(op).map(|now| now.beyond(plan)),
        };
        // A wait holds nothing: a page fault's inode_dio_wait is met again
        // (a direct write may have begun since its first half).
        let waits = LockPlan { steps: plan.steps.iter().filter(|s| matches!(s, super::lock_plan::PlannedLock::DioWait(_))).copied().collect() };
        let beyond = rest.and_then(|rest| self.plan_would_wait(&rest)).or_else(|| self.plan_would_wait(&waits));
        // A write or truncate on a fixed file closes it or puts its
        // descriptor's reference at its return, whatever its name or slot
        // leads to now.
        let file = match half {
            SecondHalf::Write(w) if fixed => w.file(),
            SecondHalf::Truncate(t) if fixed => t.file(),
            _ => None,
        };
        let at_return = file.filter(|&ino| self.return_meets_locked_folios(ino, own)).map(|_| Lock::FolioLock);
        if let Some(lock) = beyond.or(at_return).or_else(|| self.folio_wait_except(op, own)) {
            return Some(lock);
        }
        // Handed back first, its own handle is not among those it waits for.
        let own = u32::from(plan.steps.contains(&super::lock_plan::PlannedLock::Handle));
        if super::locks::commits(op) && self.locks.split_handles > own {
            return Some(Lock::JournalHandle);
        }
        (!op.only_looks() && self.locks.set.fs.updates.handle_would_wait()).then_some(Lock::JournalUpdates)
    }

    /// Whether `op`, which would sleep on a lock now, takes locks of its
    /// plan before that one (and so sleeps holding them, as the kernel's
    /// task would).
    pub fn sleeps_holding_first_locks(&mut self, op: &Op) -> bool {
        // A commit's wait comes after the op's locks are given back.
        op.sleeps_holding_locks() && !self.waits_for_commit(op) && self.lock_plan(op).is_some_and(|plan| self.plan_free_prefix(&plan) > 0)
    }

    /// Up to the op's sleep: its locks, taken for a holder of its own, as
    /// far as they can be had now.
    pub(super) fn begin_whole(&mut self, op: &Op) -> Result<WholeOp, Errno> {
        let Some(plan) = self.lock_plan(op) else { return Ok(WholeOp { op: op.clone(), held: None, planned: None }) };
        let free = self.plan_free_prefix(&plan);
        if free == 0 {
            return Ok(WholeOp { op: op.clone(), held: None, planned: Some(plan) });
        }
        let taken = plan.prefix(free);
        let holder = self.locks.new_holder();
        self.take_plan(&taken.steps, holder)?;
        Ok(WholeOp { op: op.clone(), held: Some((taken, holder)), planned: Some(plan) })
    }

    /// [`Ext4::begin_whole`] for an op that goes on in parts, and whether
    /// it took its whole plan (a part needs every lock of it).
    pub(super) fn begin_whole_for_parts(&mut self, op: &Op) -> Result<(WholeOp, bool), Errno> {
        let planned = self.lock_plan(op).map(|p| p.steps.len());
        let whole = self.begin_whole(op)?;
        let took = whole.held.as_ref().map(|(p, _)| p.steps.len());
        Ok((whole, planned.is_some() && took == planned))
    }

    /// Before a part of a split op in flight: the locks its first half took
    /// (and still holds on this mount), handed back for the part to take
    /// again itself. None when it holds none, or when `found` (its file,
    /// looked up again before its first part) is not the inode it locked:
    /// its second half then does it whole, as any op's.
    pub(super) fn hand_back_for_part(&mut self, whole: &WholeOp, found: Option<Option<crate::format::InodeNumber>>) -> Option<(LockPlan, LockHolder)> {
        let (plan, holder) = whole.held.clone()?;
        if !self.locks.holds(holder) {
            // From an earlier mount: the op died with it.
            return None;
        }
        if found.is_some_and(|now| now != whole.locked_inode()) {
            return None;
        }
        self.give_back(&plan.steps, holder);
        Some((plan, holder))
    }

    /// After the part: the steps of `plan` that `keep` picks taken again
    /// (nothing ran in between, so it is as if they had been kept); what
    /// the op holds now.
    pub(super) fn take_back_after_part(&mut self, plan: LockPlan, holder: LockHolder, keep: fn(&super::lock_plan::PlannedLock) -> bool) -> (LockPlan, LockHolder) {
        let kept = LockPlan { steps: plan.steps.into_iter().filter(keep).collect() };
        if let Err(e) = self.take_plan(&kept.steps, holder) {
            debug_assert!(false, "locks given back could not be taken again: {e}");
        }
        (kept, holder)
    }

    /// A second half that ran no part gives back what its first half took
    /// when that is no longer the start of what its op takes now (a parent
    /// renamed or exchanged meanwhile: its name leads to another inode).
    /// It runs whole at its return on what its name leads to then, so
    /// sleeping on that while holding these could only make a wait the
    /// kernel never has (its open fixed the file at entry): two writes
    /// whose parents a RENAME_EXCHANGE swapped would each wait for the
    /// other's file. True when it let go.
    pub fn let_go_of_stale_locks(&mut self, half: &mut SecondHalf) -> bool {
        if half.file_fixed() {
            return false;
        }
        let Some(whole) = half.whole_mut() else { return false };
        let Some((plan, holder)) = &whole.held else { return false };
        if !self.locks.holds(*holder) || self.lock_plan(&whole.op).is_some_and(|now| now.steps.starts_with(&plan.steps)) {
            return false;
        }
        self.give_back(&plan.steps, *holder);
        whole.held = None;
        true
    }

    /// The locks handed back and taken again by the op, run whole: nothing
    /// runs between, so it is as if it had kept them.
    pub(super) fn finish_whole(&mut self, w: WholeOp) -> Outcome {
        self.hand_back_at_finish(&w)?;
        self.apply(&w.op)
    }

    /// A second half hands back what its first half took, for the rest of
    /// the op to take as it goes. EINVAL when the locks are from an earlier
    /// mount: the op died with it.
    pub(super) fn hand_back_at_finish(&mut self, whole: &WholeOp) -> Result<(), Errno> {
        if let Some((plan, holder)) = &whole.held {
            if !self.locks.holds(*holder) {
                return Err(Errno::EINVAL);
            }
            self.give_back(&plan.steps, *holder);
        }
        Ok(())
    }

    /// fsync or fdatasync in two halves, so other ops can run while its
    /// transaction commits, as jbd2 lets new handles into the next
    /// transaction then. This half finds the file and closes the running
    /// transaction: what the fsync makes durable is fixed here.
    pub fn begin_fsync(&mut self, path: &str) -> Result<SyncTicket, Errno> {
        self.start_handle()?;
        let ino = self.open_path(path)?;
        // Its close, early: the write-back below leaves it nothing to do
        // but clear the truncate's flag (auto_da_alloc).
        self.release_file(ino)?;
        if self.ctx.mount.read_only {
            return Ok(SyncTicket::Done);
        }
        if self.ctx.journal.is_none() {
            self.sync_file(ino)?;
            return Ok(SyncTicket::Done);
        }
        // The file's data first (filemap_write_and_wait_range), then the commit.
        self.write_back_data(ino, 0).map_err(Errno::from)?;
        match self.close_transaction().map_err(Errno::from)? {
            Some(tid) => Ok(SyncTicket::Commit(tid)),
            None => Ok(SyncTicket::Flush),
        }
    }

    /// The second half: returns once the transaction the first half closed
    /// is durable (committing it now unless another sync already did).
    pub fn finish_sync(&mut self, ticket: SyncTicket) -> Result<(), Errno> {
        let done = match ticket {
            SyncTicket::Done => Ok(()),
            SyncTicket::Flush => self.ctx.dev.flush().map_err(Into::into),
            SyncTicket::Commit(tid) => self.wait_for_commit(tid),
        };
        done.map_err(Errno::from)
    }
}
