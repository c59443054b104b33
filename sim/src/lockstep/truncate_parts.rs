//! A truncate in flight freeing one more extent, on both sides (the
//! model's `truncate_parts` and the engine's say why ext4 allows it). The
//! target picks the extent; the model frees the same blocks and must give
//! the same answer, and whatever runs next sees the same part-done file.

use ext4_model::{Errno, Outcome, Pending, Reply};

use super::Lockstep;
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
        let freed = freed_from.map(u64::to_le_bytes).unwrap_or_default();
        self.end_part(flight, &expected, actual, &freed, PART)
    }
}
