//! A direct write or read between its halves: the state both keep while
//! their bios are in flight (`direct_write_parts`, `direct_read_parts`),
//! and the second half they share.

use ext4_model::{Errno, Op, Outcome, Reply};

use crate::device::BlockDevice;
use crate::format::InodeNumber;

use super::split::WholeOp;
use super::Ext4;

/// A direct I/O between its halves: `S` is what its submission leaves for
/// the completion, `A` what the call answers.
#[derive(Debug, PartialEq, Eq)]
pub struct DirectIoInFlight<S, A> {
    pub(super) whole: WholeOp,
    /// Its part may run: its first half took every lock of its plan (and,
    /// for a read, the plan is the direct path's).
    may_submit: bool,
    /// The file, once the part opened it.
    pub(super) ino: Option<InodeNumber>,
    /// What the bios it submitted leave to complete.
    pub(super) submitted: Option<S>,
    /// The answer, once the part failed or did the call whole.
    pub(super) ended: Option<Result<A, Errno>>,
}

impl<S, A> DirectIoInFlight<S, A> {
    pub(super) fn begun(&self) -> bool {
        self.ino.is_some() || self.ended.is_some()
    }

    /// Whether the part could run now: not yet run, with every lock of
    /// its plan held.
    pub fn has_more(&self) -> bool {
        self.whole.held.is_some() && self.may_submit && !self.begun()
    }
}

impl<D: BlockDevice> Ext4<D> {
    /// The first half of a direct I/O: its locks (i_rwsem, the DIO count),
    /// as far as they can be had now. `submits` says whether a part may
    /// run with the plan it took.
    pub(super) fn begin_direct_io<S, A>(&mut self, op: &Op, submits: impl FnOnce(&WholeOp) -> bool) -> Result<DirectIoInFlight<S, A>, Errno> {
        let (whole, planned_all) = self.begin_whole_for_parts(op)?;
        let may_submit = planned_all && submits(&whole);
        Ok(DirectIoInFlight { whole, may_submit, ino: None, submitted: None, ended: None })
    }

    /// The second half: whole if the part did not run, else `complete`
    /// (the bios and their completion) and the close.
    pub(super) fn finish_direct_io<S, A>(&mut self, d: DirectIoInFlight<S, A>, complete: impl FnOnce(&mut Self, InodeNumber, S) -> Result<A, Errno>, reply: fn(A) -> Reply) -> Outcome {
        if !d.begun() {
            return self.finish_whole(d.whole);
        }
        self.hand_back_at_finish(&d.whole)?;
        let Some(ino) = d.ino else { return d.ended.unwrap_or(Err(Errno::EINVAL)).map(reply) };
        let answer = match (d.ended, d.submitted) {
            (Some(answer), _) => answer,
            (None, Some(sub)) => complete(self, ino, sub),
            (None, None) => Err(Errno::EINVAL),
        };
        self.closing(ino, answer).map(reply)
    }
}
