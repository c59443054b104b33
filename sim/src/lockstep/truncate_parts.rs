//! A truncate in flight freeing one more extent, on both sides (the
//! model's `truncate_parts` and the engine's say why ext4 allows it). The
//! target picks the extent; the model frees the same blocks and must give
//! the same answer, and whatever runs next sees the same part-done file.

use ext4_model::{Errno, Outcome, Pending, Reply};

use super::write_parts::PART_MARK;
use super::{hash_outcome, Lockstep};
use crate::failure::Failure;
use crate::target::{InFlight, Target};

/// What a part's divergence begins with.
const PART: &str = "a part of the truncate: ";

impl<T: Target> Lockstep<T> {
    /// Runs the next part of a truncate in flight; false when it had none.
    pub(super) fn truncate_part(&mut self, flight: &mut InFlight<T::SecondHalf>) -> Result<bool, Failure> {
        if !self.has_part(flight) {
            return Ok(false);
        }
        let Pending::Truncate(t) = &mut flight.model else { return Ok(false) };
        self.start_op(&flight.op);
        let Some((freed_from, got)) = self.target.truncate_part(&mut flight.target) else { return Ok(false) };
        let actual: Outcome = got.map(|()| Reply::Done);
        let out_of_memory = self.target.take_out_of_memory();
        let expected: Outcome = if out_of_memory.is_some() && actual == Err(Errno::ENOMEM) && !t.begun() {
            // ext4_block_truncate_page had no folio: the truncate changed
            // nothing, and is refused for memory only if it passed its checks.
            let checked = self.model.clone().truncate_part(&mut t.clone(), freed_from);
            if let Err(e) = checked {
                let why = format!("{PART}the target ran out of memory where the truncate fails with {e:?}");
                return Err(self.diverged(flight.index, &flight.op, Err(e), actual, why));
            }
            self.stats.enomem += 1;
            t.end_with(Errno::ENOMEM);
            Err(Errno::ENOMEM)
        } else {
            self.model.truncate_part(t, freed_from).map(|()| Reply::Done)
        };
        self.trace.write(&[PART_MARK]);
        hash_outcome(&mut self.trace, &expected);
        if let Some(from) = freed_from {
            self.trace.write(&from.to_le_bytes());
        }
        flight.begun_ns = flight.begun_ns.saturating_add(self.spent_ns());
        self.op_start_ns = self.target.now_ns();
        if self.fault_pending() {
            // Not compared: the resync after it drops the truncate.
            return Ok(true);
        }
        self.hold_to_model(&flight.op, flight.index, &expected, actual, PART)?;
        Ok(true)
    }
}
