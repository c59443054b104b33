//! A regular file's bytes: disjoint runs over a sparse byte space, each taking
//! its bytes from a source, zeros everywhere else.
//!
//! A write's bytes are a seeded pattern ([`crate::pattern`]), so a run that
//! came from one is a reference (seed, offset into the pattern) and costs a
//! few words however long it is. The model then keeps a long run's data in
//! kilobytes and a write copies nothing; reads regenerate the bytes. Bytes
//! from anywhere else (a caller's buffer, a recovered image) are kept as
//! shared literal buffers.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use crate::pattern::pattern_at;
use crate::range_map::shift_entries;

/// Where a run's bytes come from: its first byte is the source's first.
#[derive(Clone)]
pub enum Source {
    /// Bytes from offset `at` of the pattern of `seed`.
    Pattern { seed: u64, at: u64 },
    /// Bytes from offset `at` of a shared buffer.
    Literal { bytes: Arc<[u8]>, at: usize },
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Pattern { seed, at } => write!(f, "pattern(seed {seed:#x})[{at}..]"),
            Source::Literal { bytes, at } => write!(f, "literal({} bytes)[{at}..]", bytes.len()),
        }
    }
}

impl Source {
    /// The same source, `by` bytes further on.
    pub(crate) fn advanced(&self, by: u64) -> Source {
        match self {
            Source::Pattern { seed, at } => Source::Pattern { seed: *seed, at: at + by },
            Source::Literal { bytes, at } => Source::Literal { bytes: bytes.clone(), at: at + by as usize },
        }
    }

    /// Fills `out` with the source's bytes from `skip` on.
    fn fill(&self, skip: u64, out: &mut [u8]) {
        match self {
            Source::Pattern { seed, at } => pattern_at(*seed, at + skip, out),
            Source::Literal { bytes, at } => {
                let from = at + skip as usize;
                out.copy_from_slice(&bytes[from..from + out.len()]);
            }
        }
    }

    /// Whether `next` carries on exactly where `len` bytes of this one end,
    /// so the two runs can be one.
    fn continues_into(&self, len: u64, next: &Source) -> bool {
        match (self, next) {
            (Source::Pattern { seed, at }, Source::Pattern { seed: s, at: a }) => seed == s && at + len == *a,
            (Source::Literal { bytes, at }, Source::Literal { bytes: b, at: a }) => {
                Arc::ptr_eq(bytes, b) && *at as u64 + len == *a as u64
            }
            _ => false,
        }
    }
}

/// A file's bytes; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Content {
    /// start -> (end, source); runs are disjoint and non-empty.
    runs: BTreeMap<u64, (u64, Source)>,
}

impl Content {
    /// Sets bytes `offset..offset + len` to the source's first `len` bytes.
    pub fn put(&mut self, offset: u64, len: u64, source: Source) {
        if len == 0 {
            return;
        }
        let end = offset + len;
        if let Source::Literal { bytes, at } = &source {
            debug_assert!(*at as u64 + len <= bytes.len() as u64, "literal run longer than its buffer");
        }
        self.clear(offset..end);
        // A write that carries on a run (a pattern written in pieces, a
        // buffer adopted in blocks) extends it rather than adding one.
        if let Some((&start, (prev_end, prev))) = self.runs.range_mut(..offset).next_back() {
            if *prev_end == offset && prev.continues_into(offset - start, &source) {
                *prev_end = end;
                return;
            }
        }
        self.runs.insert(offset, (end, source));
    }

    /// Makes `range` read as zeros.
    pub fn clear(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        self.split_at(range.start);
        self.split_at(range.end);
        let inside: Vec<u64> = self.runs.range(range).map(|(s, _)| *s).collect();
        for s in inside {
            self.runs.remove(&s);
        }
    }

    /// Fills `out` with bytes `offset..offset + out.len()`.
    pub fn read_into(&self, offset: u64, out: &mut [u8]) {
        let end = offset.saturating_add(out.len() as u64);
        let first = self.runs.range(..=offset).next_back().map_or(offset, |(s, _)| *s);
        let mut pos = offset;
        for (&start, (run_end, source)) in self.runs.range(first..end) {
            let lo = start.max(offset);
            let hi = (*run_end).min(end);
            if lo >= hi {
                continue;
            }
            out[(pos - offset) as usize..(lo - offset) as usize].fill(0);
            source.fill(lo - start, &mut out[(lo - offset) as usize..(hi - offset) as usize]);
            pos = hi;
        }
        out[(pos - offset) as usize..].fill(0);
    }

    /// Moves every byte at or after `from` by `delta` (down when negative).
    /// The caller clears what a downward move lands on.
    pub fn shift_from(&mut self, from: u64, delta: i64) {
        self.split_at(from);
        shift_entries(&mut self.runs, from, delta);
    }

    /// The byte ranges runs cover, in order.
    pub fn ranges(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.runs.iter().map(|(s, (e, _))| *s..*e)
    }

    /// One past the last byte any run covers (0 when there is none).
    pub fn end(&self) -> u64 {
        self.runs.last_key_value().map_or(0, |(_, (e, _))| *e)
    }

    fn split_at(&mut self, pos: u64) {
        let Some((&s, (e, source))) = self.runs.range(..pos).next_back() else { return };
        if *e > pos {
            let (e, right) = (*e, source.advanced(pos - s));
            if let Some((end, _)) = self.runs.get_mut(&s) {
                *end = pos;
            }
            self.runs.insert(pos, (e, right));
        }
    }

    /// Bytes `range` as a vector.
    fn bytes(&self, range: Range<u64>) -> Vec<u8> {
        let mut out = vec![0; (range.end - range.start) as usize];
        self.read_into(range.start, &mut out);
        out
    }
}

/// Two contents are equal when they read the same, however they were built.
impl PartialEq for Content {
    fn eq(&self, other: &Content) -> bool {
        const STEP: u64 = 1 << 20;
        let end = self.end().max(other.end());
        let mut pos = 0;
        while pos < end {
            let next = end.min(pos + STEP);
            if self.bytes(pos..next) != other.bytes(pos..next) {
                return false;
            }
            pos = next;
        }
        true
    }
}

impl Eq for Content {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::pattern;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Edit {
        Pattern { offset: u64, len: u64, seed: u64, at: u64 },
        Literal { offset: u64, len: u64, fill: u8 },
        Clear(u64, u64),
        Shift(u64, i64),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            (0u64..9000, 0u64..5000, 0u64..4, 0u64..5000).prop_map(|(offset, len, seed, at)| Edit::Pattern { offset, len, seed, at }),
            (0u64..9000, 0u64..3000, 1u8..255).prop_map(|(offset, len, fill)| Edit::Literal { offset, len, fill }),
            (0u64..12000, 0u64..4000).prop_map(|(s, l)| Edit::Clear(s, s + l)),
            (0u64..12000, -3000i64..3000).prop_map(|(f, d)| Edit::Shift(f, d)),
        ]
    }

    proptest! {
        /// Content reads exactly like a flat byte array given the same edits.
        #[test]
        fn matches_a_flat_array(edits in proptest::collection::vec(edit(), 0..30)) {
            const SPAN: usize = 20_000;
            let mut content = Content::default();
            let mut flat = vec![0u8; SPAN];
            for e in edits {
                match e {
                    Edit::Pattern { offset, len, seed, at } => {
                        content.put(offset, len, Source::Pattern { seed, at });
                        let p = pattern(seed, (at + len) as usize);
                        flat[offset as usize..(offset + len) as usize].copy_from_slice(&p[at as usize..]);
                    }
                    Edit::Literal { offset, len, fill } => {
                        // Literal runs start inside their buffer, as adopted blocks do.
                        let bytes: Arc<[u8]> = (0..len + 7).map(|i| fill.wrapping_add(i as u8)).collect();
                        content.put(offset, len, Source::Literal { bytes: bytes.clone(), at: 7 });
                        flat[offset as usize..(offset + len) as usize].copy_from_slice(&bytes[7..]);
                    }
                    Edit::Clear(s, t) => {
                        content.clear(s..t);
                        flat[s as usize..(t as usize).min(SPAN)].fill(0);
                    }
                    Edit::Shift(from, d) => {
                        // The flat array ends at SPAN; keep content inside it.
                        if content.end() as i64 + d > SPAN as i64 {
                            continue;
                        }
                        if d < 0 {
                            let Some(lo) = from.checked_sub(d.unsigned_abs()) else { continue };
                            content.clear(lo..from);
                            flat[lo as usize..(from as usize).min(SPAN)].fill(0);
                        }
                        content.shift_from(from, d);
                        let from = (from as usize).min(SPAN);
                        let tail = flat[from..].to_vec();
                        flat[from..].fill(0);
                        let dest = (from as i64 + d) as usize;
                        let n = tail.len().min(SPAN.saturating_sub(dest));
                        flat[dest..dest + n].copy_from_slice(&tail[..n]);
                    }
                }
                prop_assert!(content.end() as usize <= SPAN);
                let mut got = vec![0xEE; SPAN];
                content.read_into(0, &mut got);
                prop_assert_eq!(&got, &flat);
                // A window that starts and ends inside runs reads the same.
                let mut window = vec![0xEE; 777];
                content.read_into(4321, &mut window);
                prop_assert_eq!(&window[..], &flat[4321..4321 + 777]);
                for w in content.ranges().collect::<Vec<_>>().windows(2) {
                    prop_assert!(w[0].end <= w[1].start);
                }
            }
        }
    }

    #[test]
    fn a_pattern_written_in_pieces_is_one_run() {
        let mut c = Content::default();
        c.put(100, 50, Source::Pattern { seed: 3, at: 0 });
        c.put(150, 50, Source::Pattern { seed: 3, at: 50 });
        assert_eq!(c.ranges().collect::<Vec<_>>(), vec![100..200]);
        // A different seed, or a gap in the pattern, is a run of its own.
        c.put(200, 10, Source::Pattern { seed: 4, at: 100 });
        c.put(210, 10, Source::Pattern { seed: 4, at: 111 });
        assert_eq!(c.ranges().count(), 3);
    }

    #[test]
    fn equality_is_by_bytes() {
        let mut a = Content::default();
        a.put(10, 300, Source::Pattern { seed: 5, at: 20 });
        let mut b = Content::default();
        let bytes: Arc<[u8]> = pattern(5, 320).into();
        b.put(10, 300, Source::Literal { bytes, at: 20 });
        assert_eq!(a, b);
        b.put(11, 1, Source::Literal { bytes: Arc::from(&[0u8][..]), at: 0 });
        assert_ne!(a, b);
        // Zeros written read like zeros never written.
        let mut z = Content::default();
        z.put(0, 64, Source::Literal { bytes: Arc::from(&[0u8; 64][..]), at: 0 });
        assert_eq!(z, Content::default());
    }
}
