//! Ops the target's page cache cut short. A folio that is not no-fail may
//! be refused (fragmented memory at block size > page size); the op then
//! answers ENOMEM, or a short count for the bytes it finished first. The
//! model cannot know when memory runs out, so it learns it from the
//! target and holds the target to what ext4 leaves then
//! ([`ext4_model::CutShort`]): the whole op must have been one that
//! succeeds, and the state is the model's after the op cut where the
//! target says. Everything after is compared as usual.

use ext4_model::{CutShort, Errno, Model, Op, Outcome, Reply};

use super::Lockstep;
use crate::failure::{Divergence, Failure};
use crate::target::Target;

impl<T: Target> Lockstep<T> {
    /// The model's answer to `op` given the target's `actual`: `apply`
    /// runs an op on the model (the whole op, or the op cut short).
    pub(super) fn model_answer(&mut self, op: &Op, index: u64, actual: &Outcome, apply: impl Fn(&mut Model, &Op) -> Outcome) -> Result<Outcome, Failure> {
        let Some((done, what)) = self.target.take_out_of_memory() else {
            return Ok(apply(&mut self.model, op));
        };
        let short = matches!(actual, Ok(Reply::Written(n)) if *n == done && done > 0);
        if !short && *actual != Err(Errno::ENOMEM) {
            // A refusal the op got past (a smaller folio served).
            return Ok(apply(&mut self.model, op));
        }
        let diverged = |model: Outcome, why: String| Failure::Divergence(Box::new(Divergence { index, op: op.clone(), model, actual: actual.clone(), why, detail: Some(what.clone()) }));
        let cut = op.cut_short(done).map_err(|why| diverged(Err(Errno::ENOMEM), format!("the target ran out of memory where ext4 cannot: {why}")))?;
        // Refused for memory only once every other check passed.
        let whole = apply(&mut self.model.clone(), op);
        if whole.is_err() {
            return Err(diverged(whole, "the target ran out of memory in an op ext4 refuses for another reason".into()));
        }
        if short {
            self.stats.short_by_memory += 1;
        } else {
            self.stats.enomem += 1;
        }
        Ok(match cut {
            CutShort::Nothing => Err(Errno::ENOMEM),
            CutShort::Short(o) => apply(&mut self.model, &o),
            CutShort::Enomem(o) => apply(&mut self.model, &o).and(Err(Errno::ENOMEM)),
        })
    }
}
