//! Which ops may run out of memory, and what they leave when they do.
//!
//! An ordinary folio allocation may fail (issue 17): at block size > page
//! size a block needs a folio of several pages, which fragmented memory
//! may not have, and the page cache never falls below its mapping's
//! minimum order. Reads never fail for it (they read around the cache);
//! metadata never does (no-fail). What is left is the page cache a change
//! to file data goes through, and ext4's answers there:
//!
//! - buffered writes (`generic_perform_write`): the bytes copied before the
//!   folio that could not be had stay written and the call returns their
//!   count; with none copied it is ENOMEM and the file is as it was. The
//!   engine copies a chunk at a time, so the count is where a chunk ended.
//!   Rewrite's O_TRUNC comes before its write, so it stays.
//! - stores through a mapping: a fault that gets no folio is the user's
//!   ENOMEM; the stores before it landed, and the op's msync writes them.
//! - truncate and fallocate need a folio only to zero a partial edge block
//!   that is written on disk. The engine takes those folios before it
//!   changes anything, so ENOMEM leaves the file as it was. (ext4 itself
//!   sets i_size before ext4_block_truncate_page may fail; the engine is
//!   stricter, which the kernel oracle cannot tell apart.)

use super::Op;

/// What an op the page cache cut short leaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CutShort {
    /// ENOMEM, and nothing changed.
    Nothing,
    /// This shorter op took effect and its answer (a short count) is the
    /// caller's.
    Short(Op),
    /// This shorter op took effect, and the caller sees ENOMEM.
    Enomem(Op),
}

impl Op {
    /// What this op leaves when the page cache refused it a folio after
    /// `done` of its bytes; an error says why that cannot be (an op that
    /// takes no folios, a count past the op's, progress where ext4 makes
    /// none).
    pub fn cut_short(&self, done: u64) -> Result<CutShort, String> {
        let shortened = |len: u32| -> Result<u32, String> {
            match u32::try_from(done) {
                Ok(d) if d < len => Ok(d),
                _ => Err(format!("{done} bytes done of a {len}-byte op cut short")),
            }
        };
        // A write that copied nothing changed nothing.
        let written = |d: u32, op: Op| if d == 0 { CutShort::Nothing } else { CutShort::Short(op) };
        Ok(match self {
            Op::Write { path, offset, len, seed } => {
                let d = shortened(*len)?;
                written(d, Op::Write { path: path.clone(), offset: *offset, len: d, seed: *seed })
            }
            Op::WriteFd { slot, offset, len, seed } => {
                let d = shortened(*len)?;
                written(d, Op::WriteFd { slot: *slot, offset: *offset, len: d, seed: *seed })
            }
            Op::Append { path, len, seed } => {
                let d = shortened(*len)?;
                written(d, Op::Append { path: path.clone(), len: d, seed: *seed })
            }
            Op::DirectWrite { path, offset, len, seed } => {
                let d = shortened(*len)?;
                written(d, Op::DirectWrite { path: path.clone(), offset: *offset, len: d, seed: *seed })
            }
            Op::Rewrite { path, len, seed } => {
                let d = shortened(*len)?;
                let cut = Op::Rewrite { path: path.clone(), len: d, seed: *seed };
                if d == 0 {
                    CutShort::Enomem(cut)
                } else {
                    CutShort::Short(cut)
                }
            }
            Op::MapWrite { path, offset, len, seed } => match shortened(*len)? {
                0 => CutShort::Nothing,
                d => CutShort::Enomem(Op::MapWrite { path: path.clone(), offset: *offset, len: d, seed: *seed }),
            },
            Op::Truncate { .. } | Op::FtruncateFd { .. } | Op::Fallocate { .. } if done == 0 => CutShort::Nothing,
            Op::Truncate { .. } | Op::FtruncateFd { .. } | Op::Fallocate { .. } => {
                return Err(format!("{:?} cut short after {done} bytes: it changes nothing before its folios are had", self.kind()));
            }
            _ => return Err(format!("{:?} takes no page-cache folio that may fail", self.kind())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(len: u32) -> Op {
        Op::Write { path: "/f".into(), offset: 4096, len, seed: 7 }
    }

    #[test]
    fn a_write_cut_after_some_bytes_is_a_shorter_write() {
        let cut = write(65536).cut_short(16384).unwrap();
        assert_eq!(cut, CutShort::Short(write(16384)));
    }

    #[test]
    fn a_write_cut_before_any_byte_is_enomem_with_nothing_applied() {
        assert_eq!(write(65536).cut_short(0).unwrap(), CutShort::Nothing);
    }

    #[test]
    fn rewrite_keeps_its_truncation_and_a_mapped_store_answers_enomem() {
        let rewrite = Op::Rewrite { path: "/f".into(), len: 100, seed: 1 };
        assert_eq!(rewrite.cut_short(0).unwrap(), CutShort::Enomem(Op::Rewrite { path: "/f".into(), len: 0, seed: 1 }));
        let map = Op::MapWrite { path: "/f".into(), offset: 0, len: 100, seed: 1 };
        assert_eq!(map.cut_short(40).unwrap(), CutShort::Enomem(Op::MapWrite { path: "/f".into(), offset: 0, len: 40, seed: 1 }));
    }

    #[test]
    fn impossible_cuts_are_refused() {
        assert!(write(100).cut_short(100).is_err(), "a whole write was not cut short");
        assert!(write(100).cut_short(200).is_err());
        assert!(Op::Truncate { path: "/f".into(), size: 5 }.cut_short(1).is_err());
        assert!(Op::Read { path: "/f".into(), offset: 0, len: 5 }.cut_short(0).is_err(), "reads read around the cache");
        assert!(Op::Truncate { path: "/f".into(), size: 5 }.cut_short(0).is_ok());
    }
}
