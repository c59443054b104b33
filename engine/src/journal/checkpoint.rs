//! Checkpoint: every block with a committed copy newer than its home copy is
//! written home (ascending, neighbours coalesced), the device is flushed, and
//! only then is the log marked empty (s_start 0, FUA) — a crash in between
//! replays the same copies again, which is harmless.
//!
//! Revoked (freed) blocks left the list when their revoke committed, so a
//! checkpoint never writes old metadata over a block that now holds data.

use crate::device::{BlockDevice, WriteFlags};
use crate::error::Result;

use super::{set_needs_recovery, Journal};

/// Largest single home write: bounds the staging buffer.
const MAX_WRITE_BYTES: usize = 1 << 20;

impl Journal {
    /// Writes every unhomed block home and empties the log. With
    /// `clear_recovery` (unmount), needs_recovery is cleared afterwards;
    /// otherwise it stays set for the commit that is about to follow.
    pub fn checkpoint<D: BlockDevice>(&mut self, dev: &mut D, clear_recovery: bool) -> Result<()> {
        if self.tail != 0 {
            let bs = self.bs();
            // Runs of one class: journaled file data counts as data I/O.
            let mut run: Option<(u64, Vec<u8>, WriteFlags)> = None;
            for (&b, data) in &self.unhomed {
                let flags = if self.unhomed_data.contains(&b) { WriteFlags::DATA } else { WriteFlags::METADATA };
                let joins = run.as_ref().is_some_and(|(s, buf, f)| s + (buf.len() as u64) / bs == b && buf.len() < MAX_WRITE_BYTES && *f == flags);
                if !joins {
                    if let Some((s, buf, f)) = run.take() {
                        dev.write(s * bs, &buf, f)?;
                    }
                    run = Some((b, Vec::new(), flags));
                }
                if let Some((_, buf, _)) = run.as_mut() {
                    buf.extend_from_slice(data);
                }
            }
            if let Some((s, buf, f)) = run.take() {
                dev.write(s * bs, &buf, f)?;
            }
            dev.flush()?;
            self.jsb.start = 0;
            self.jsb.sequence = self.next_tid;
            self.write_jsb(dev, true)?;
            self.tail = 0;
            self.used = 0;
            self.unhomed.clear();
            self.unhomed_data.clear();
            self.stats.checkpoints += 1;
        }
        if clear_recovery {
            set_needs_recovery(dev, false)?;
            dev.flush()?;
        }
        Ok(())
    }
}
