//! A buffered read in flight copying one folio further on both sides (the
//! model's `read_parts` and the engine's say why ext4 allows it). The
//! target picks where the part ends (its folio); the model copies the same
//! range from its file as it is now and must give the same bytes, so a read
//! torn by a write or cut short by a truncate is held to what the kernel
//! may return.

use ext4_model::{Outcome, Pending, Reply};

use super::Lockstep;
use crate::failure::Failure;
use crate::target::{InFlight, Target};

/// What a read part's divergence begins with.
const PART: &str = "a part of the read: ";

impl<T: Target> Lockstep<T> {
    /// Runs the next part of a read in flight; false when it had none.
    pub(super) fn read_part(&mut self, flight: &mut InFlight<T::SecondHalf>) -> Result<bool, Failure> {
        if !self.has_part(flight) {
            return Ok(false);
        }
        let Pending::Read(r) = &mut flight.model else { return Ok(false) };
        self.start_op(&flight.op);
        let Some((range, got)) = self.target.read_part(&mut flight.target) else { return Ok(false) };
        let actual: Outcome = got.map(Reply::Data);
        if actual.is_ok() && !self.fault_pending() {
            let (at, bound) = (r.next_at(), self.model.read_bound(r));
            let why = if range.start != at {
                Some(format!("the target's part starts at byte {} where the read stands at {at}", range.start))
            } else if range.is_empty() && at < bound {
                Some(format!("the target's read ended at byte {at} where the file holds bytes to {bound}"))
            } else {
                None
            };
            if let Some(why) = why {
                return Err(self.diverged(flight.index, &flight.op, Ok(Reply::Data(Vec::new())), actual, format!("{PART}{why}")));
            }
        }
        let expected = self.model.read_part(r, range.end);
        self.end_part(flight, &expected, actual, &range.end.to_le_bytes(), PART)
    }
}
