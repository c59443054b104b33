//! A fallocate in flight mapping one more piece, or a punch freeing one
//! more extent, on both sides (the model's `fallocate_parts` and the
//! engine's say why ext4 allows it). The target picks where the piece
//! ends (its allocator) or where the extent begins (its layout); the model
//! does the same to the same blocks and must give the same answer, and
//! whatever runs next sees the same part-done file.

use ext4_model::{Errno, Outcome, Pending, Reply};

use super::Lockstep;
use crate::failure::Failure;
use crate::target::{InFlight, Target};

/// What a part's divergence begins with.
const PART: &str = "a part of the fallocate: ";

impl<T: Target> Lockstep<T> {
    /// Runs the next part of a fallocate in flight; false when it had none.
    pub(super) fn fallocate_part(&mut self, flight: &mut InFlight<T::SecondHalf>) -> Result<bool, Failure> {
        if !self.has_part(flight) {
            return Ok(false);
        }
        let Pending::Fallocate(f) = &mut flight.model else { return Ok(false) };
        self.start_op(&flight.op);
        let Some((at, got)) = self.target.fallocate_part(&mut flight.target) else { return Ok(false) };
        let actual: Outcome = got.map(|()| Reply::Done);
        let out_of_memory = self.target.take_out_of_memory();
        let expected: Outcome = if out_of_memory.is_some() && actual == Err(Errno::ENOMEM) && !f.begun() {
            // The target had no memory for the first part's edge folios:
            // the fallocate changed nothing, and is refused for memory only
            // if it passed its checks.
            let checked = self.model.clone().fallocate_part(&mut f.clone(), at);
            if let Err(e) = checked {
                let why = format!("{PART}the target ran out of memory where the fallocate fails with {e:?}");
                return Err(self.diverged(flight.index, &flight.op, Err(e), actual, why));
            }
            self.stats.enomem += 1;
            f.end_with(Errno::ENOMEM);
            Err(Errno::ENOMEM)
        } else {
            self.model.fallocate_part(f, at).map(|()| Reply::Done)
        };
        let at = at.map(u64::to_le_bytes).unwrap_or_default();
        self.end_part(flight, &expected, actual, &at, PART)
    }
}
