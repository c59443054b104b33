//! A buffered pwrite in flight taking effect one folio further, on both
//! sides (the model's `write_parts` and the engine's say why ext4 allows it).
//! The target picks where the part ends (its folio); the model writes the
//! same bytes and must give the same answer.

use ext4_model::{Op, Outcome, Pending, Reply};

use super::{hash_outcome, Lockstep};
use crate::failure::Failure;
use crate::target::{InFlight, Target};

const PART_MARK: u8 = 0xA0;
/// What a part's divergence begins with.
const PART: &str = "a part of the write: ";

impl<T: Target> Lockstep<T> {
    /// Whether `flight` can take effect one more part now.
    pub fn has_part(&self, flight: &InFlight<T::SecondHalf>) -> bool {
        let model = match &flight.model {
            Pending::Write(w) => w.has_more(),
            Pending::Truncate(t) => t.has_more(),
            Pending::Fallocate(f) => f.has_more(),
            Pending::DirectWrite(d) => d.has_more(),
            Pending::DirectRead(d) => d.has_more(),
            Pending::Read(r) => r.has_more(),
            _ => false,
        };
        model && self.target.has_part(&flight.target)
    }

    /// A `part` step: the next part of a pwrite, truncate, fallocate, direct write or read, or buffered read in flight,
    /// other tasks' steps before and after it; false when it had none.
    pub fn part_step(&mut self, flight: &mut InFlight<T::SecondHalf>) -> Result<bool, Failure> {
        if matches!(flight.model, Pending::Truncate(_)) {
            let ran = self.extent_part(flight)?;
            self.stats.truncate_parts += u64::from(ran);
            return Ok(ran);
        }
        if matches!(flight.model, Pending::Fallocate(_)) {
            let ran = self.extent_part(flight)?;
            self.stats.fallocate_parts += u64::from(ran);
            return Ok(ran);
        }
        if matches!(flight.model, Pending::DirectWrite(_)) {
            let ran = self.extent_part(flight)?;
            self.stats.direct_write_parts += u64::from(ran);
            return Ok(ran);
        }
        if matches!(flight.model, Pending::DirectRead(_)) {
            let ran = self.extent_part(flight)?;
            self.stats.direct_read_parts += u64::from(ran);
            return Ok(ran);
        }
        if matches!(flight.model, Pending::Read(_)) {
            let ran = self.read_part(flight)?;
            self.stats.read_parts += u64::from(ran);
            return Ok(ran);
        }
        let ran = self.part(flight)?;
        self.stats.write_parts += u64::from(ran);
        Ok(ran)
    }

    /// Runs the next part of a pwrite in flight; false when it had none.
    pub(super) fn part(&mut self, flight: &mut InFlight<T::SecondHalf>) -> Result<bool, Failure> {
        if !self.has_part(flight) {
            return Ok(false);
        }
        let Pending::Write(w) = &mut flight.model else { return Ok(false) };
        self.start_op(&flight.op);
        let Some((range, got)) = self.target.write_part(&mut flight.target) else { return Ok(false) };
        let actual: Outcome = got.map(Reply::Written);
        let opened = self.model.open_write_part(w);
        let expected = match opened {
            Err(e) => Err(e),
            // The target failed before it reached the copy.
            Ok(()) if range.is_empty() => Ok(Reply::Written(0)),
            Ok(()) if range.start != w.next_at() => {
                let why = format!("the target's part starts at byte {} where the write stands at {}", range.start, w.next_at());
                return Err(self.diverged(flight.index, &flight.op, Ok(Reply::Written(0)), actual, format!("{PART}{why}")));
            }
            Ok(()) => {
                let len = range.end - range.start;
                let part = w.part_op(u32::try_from(len).unwrap_or(u32::MAX));
                let pending = w.clone();
                let answer = self.model_answer(&part, flight.index, &actual, |m, op| match op {
                    Op::Write { len, .. } | Op::WriteFd { len, .. } => m.write_part(&pending, u64::from(*len)).map(Reply::Written),
                    _ => Err(ext4_model::Errno::EINVAL),
                })?;
                w.note_part(len, answer.clone().map(|r| if let Reply::Written(n) = r { n } else { 0 }));
                answer
            }
        };
        self.end_part(flight, &expected, actual, &[], PART)
    }

    /// What every part ends with: its answer and `detail` in the trace,
    /// its time counted to the op, and the target's answer held to the
    /// model's (`what` begins a divergence) unless a fault came.
    pub(super) fn end_part(&mut self, flight: &mut InFlight<T::SecondHalf>, expected: &Outcome, actual: Outcome, detail: &[u8], what: &str) -> Result<bool, Failure> {
        self.trace.write(&[PART_MARK]);
        hash_outcome(&mut self.trace, expected);
        self.trace.write(detail);
        // The op's latency counts its parts; a finish counts from here.
        flight.begun_ns = flight.begun_ns.saturating_add(self.spent_ns());
        self.op_start_ns = self.target.now_ns();
        if self.fault_pending() {
            // Not compared: the resync after it drops the op.
            return Ok(true);
        }
        self.hold_to_model(&flight.op, flight.index, expected, actual, what)?;
        Ok(true)
    }
}
