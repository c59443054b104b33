//! A truncate, punch or fallocate in flight going one extent further on
//! both sides: a truncate or punch frees its next extent, an allocating
//! fallocate maps its next piece (the model's `truncate_parts` and
//! `fallocate_parts`, and the engine's, say why ext4 allows it); a direct
//! write or read submits its bios (`direct_write_parts`,
//! `direct_read_parts`), with no block to report. The
//! target picks the extent (its layout, its allocator) and reports the
//! block where the part's blocks begin or end; the model does the same to
//! the same blocks and must give the same answer, and whatever runs next
//! sees the same part-done file.

use ext4_model::{Errno, Model, Outcome, Pending, Reply};

use super::Lockstep;
use crate::failure::Failure;
use crate::target::{InFlight, Target};

impl<T: Target> Lockstep<T> {
    /// Runs the next part of a truncate or fallocate in flight; false when
    /// it had none.
    pub(super) fn extent_part(&mut self, flight: &mut InFlight<T::SecondHalf>) -> Result<bool, Failure> {
        if !self.has_part(flight) {
            return Ok(false);
        }
        let (begun, what) = match &flight.model {
            Pending::Truncate(t) => (t.begun(), "a part of the truncate: "),
            Pending::Fallocate(f) => (f.begun(), "a part of the fallocate: "),
            Pending::DirectWrite(d) => (d.begun(), "the direct write's submission: "),
            Pending::DirectRead(d) => (d.begun(), "the direct read's submission: "),
            _ => return Ok(false),
        };
        self.start_op(&flight.op);
        let ran = match flight.model {
            Pending::Truncate(_) => self.target.truncate_part(&mut flight.target),
            Pending::DirectWrite(_) | Pending::DirectRead(_) => self.target.direct_io_part(&mut flight.target).map(|got| (None, got)),
            _ => self.target.fallocate_part(&mut flight.target),
        };
        let Some((at, got)) = ran else { return Ok(false) };
        let actual: Outcome = got.map(|()| Reply::Done);
        let out_of_memory = self.target.take_out_of_memory();
        let expected: Outcome = if out_of_memory.is_some() && actual == Err(Errno::ENOMEM) && !begun {
            // The target had no memory for the first part's edge folios:
            // the op changed nothing, and is refused for memory only if it
            // passed its checks.
            if let Err(e) = model_part(&mut self.model.clone(), &mut flight.model.clone(), at) {
                let why = format!("{what}the target ran out of memory where the op fails with {e:?}");
                return Err(self.diverged(flight.index, &flight.op, Err(e), actual, why));
            }
            self.stats.enomem += 1;
            match &mut flight.model {
                Pending::Truncate(t) => t.end_with(Errno::ENOMEM),
                Pending::Fallocate(f) => f.end_with(Errno::ENOMEM),
                Pending::DirectWrite(d) => d.end_with(Errno::ENOMEM),
                Pending::DirectRead(d) => d.end_with(Errno::ENOMEM),
                _ => {}
            }
            Err(Errno::ENOMEM)
        } else {
            model_part(&mut self.model, &mut flight.model, at).map(|()| Reply::Done)
        };
        let at = at.map(u64::to_le_bytes).unwrap_or_default();
        self.end_part(flight, &expected, actual, &at, what)
    }
}

/// The model's side of the part, at the block the target reported.
fn model_part(model: &mut Model, pending: &mut Pending, at: Option<u64>) -> Result<(), Errno> {
    match pending {
        Pending::Truncate(t) => model.truncate_part(t, at),
        Pending::Fallocate(f) => model.fallocate_part(f, at),
        Pending::DirectWrite(d) => model.direct_write_part(d),
        Pending::DirectRead(d) => model.direct_read_part(d),
        _ => Err(Errno::EINVAL),
    }
}
