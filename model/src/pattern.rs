//! The bytes a write carries: a seeded pattern, so a trace stays small and any
//! byte of a write can be computed from (seed, offset) alone. The model keeps
//! written data as references into patterns instead of copies
//! ([`crate::content`]), and regenerates bytes when they are read.
//!
//! The pattern of a seed is cut in 4 KiB pieces. Word `j` of the first piece
//! is the (j+1)-th splitmix64 output of `seed`; piece `p > 0` is the first
//! piece XOR one word, the p-th splitmix64 output of `!seed`. Words are
//! little-endian. So a shorter write is a prefix of a longer one, and no two
//! pieces (of one write or of two) are alike, which makes misplaced or
//! shifted data show.

/// Bytes per piece of a pattern.
pub const PATTERN_PIECE: usize = 4096;
const WORDS: usize = PATTERN_PIECE / 8;
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's output function.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The n-th output (from 1) of splitmix64 started at `state`: its state
/// advances by a constant, so any output is one step away.
fn splitmix64_nth(state: u64, n: u64) -> u64 {
    mix(state.wrapping_add(n.wrapping_mul(GAMMA)))
}

/// The word piece `p` is XORed with (none for the first piece).
fn piece_salt(seed: u64, p: u64) -> u64 {
    if p == 0 {
        0
    } else {
        splitmix64_nth(!seed, p)
    }
}

/// `pattern(seed, len)`: the bytes of a write of `len` bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    pattern_into(seed, &mut out);
    out
}

/// Fills `out` with `pattern(seed, out.len())`, so a caller can reuse one
/// buffer for every write.
pub fn pattern_into(seed: u64, out: &mut [u8]) {
    pattern_at(seed, 0, out);
}

/// Fills `out` with bytes `at..at + out.len()` of the pattern of `seed`.
/// Runs at copy speed: writes average tens of KiB and this runs for each.
pub fn pattern_at(seed: u64, at: u64, out: &mut [u8]) {
    let piece_bytes = PATTERN_PIECE as u64;
    let first_within = (at % piece_bytes) as usize;
    // Only the head words the range uses: a small read inside one piece
    // should not pay for the whole piece.
    let (lo, hi) = if first_within + out.len() <= PATTERN_PIECE {
        (first_within / 8, (first_within + out.len()).div_ceil(8))
    } else {
        (0, WORDS)
    };
    let mut head = [0u64; WORDS];
    for (j, word) in head.iter_mut().enumerate().take(hi).skip(lo) {
        *word = splitmix64_nth(seed, j as u64 + 1);
    }
    let mut pos = at;
    let mut rest = out;
    while !rest.is_empty() {
        let within = (pos % piece_bytes) as usize;
        let take = (PATTERN_PIECE - within).min(rest.len());
        let (dst, tail) = rest.split_at_mut(take);
        fill_piece(&head, piece_salt(seed, pos / piece_bytes), within, dst);
        rest = tail;
        pos += take as u64;
    }
}

/// Bytes `within..within + dst.len()` of one piece: `head` words XOR `salt`.
fn fill_piece(head: &[u64; WORDS], salt: u64, within: usize, dst: &mut [u8]) {
    let byte_of = |b: usize| ((head[b / 8] ^ salt) >> (8 * (b % 8))) as u8;
    let end = within + dst.len();
    let lead = ((8 - within % 8) % 8).min(dst.len());
    let (edge, body) = dst.split_at_mut(lead);
    for (i, byte) in edge.iter_mut().enumerate() {
        *byte = byte_of(within + i);
    }
    // Whole words by fixed-size stores, eight to a pass: a per-byte loop
    // would be the cost, and under a fuzzer's comparison tracing so would
    // a loop test per word (the eight are unrolled).
    let mut next = (within + lead) / 8;
    let mut runs = body.chunks_exact_mut(64);
    for run in &mut runs {
        let run: &mut [u8; 64] = run.try_into().expect("chunks_exact_mut(64) yields 64 bytes");
        // In bounds: the range lies inside one piece, and head is one piece.
        let src = &head[next..next + 8];
        for k in 0..8 {
            run[k * 8..k * 8 + 8].copy_from_slice(&(src[k] ^ salt).to_le_bytes());
        }
        next += 8;
    }
    let mut words = runs.into_remainder().chunks_exact_mut(8);
    for (w, word) in (&mut words).zip(&head[next..]) {
        w.copy_from_slice(&(word ^ salt).to_le_bytes());
    }
    let tail = words.into_remainder();
    let tail_start = end - tail.len();
    for (i, byte) in tail.iter_mut().enumerate() {
        *byte = byte_of(tail_start + i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The pattern as its definition reads: one sequential splitmix64 stream
    /// for the first piece, another for the piece words.
    fn reference(seed: u64, len: usize) -> Vec<u8> {
        let next = |state: &mut u64| {
            *state = state.wrapping_add(GAMMA);
            mix(*state)
        };
        let mut state = seed;
        let head: Vec<u8> = (0..WORDS).flat_map(|_| next(&mut state).to_le_bytes()).collect();
        let mut salt_state = !seed;
        let mut out = Vec::with_capacity(len);
        let mut salt = 0u64;
        for i in 0..len {
            if i > 0 && i % PATTERN_PIECE == 0 {
                salt = next(&mut salt_state);
            }
            out.push(head[i % PATTERN_PIECE] ^ salt.to_le_bytes()[i % 8]);
        }
        out
    }

    #[test]
    fn pattern_is_deterministic_and_seed_dependent() {
        assert_eq!(pattern(7, 100), pattern(7, 100));
        assert_ne!(pattern(7, 100), pattern(8, 100));
        assert_eq!(&pattern(7, 100)[..13], &pattern(7, 13)[..]);
        assert_eq!(pattern(1, 0), Vec::<u8>::new());
        // Across piece boundaries too, and with a ragged last piece.
        assert_eq!(&pattern(7, 20_000)[..9_003], &pattern(7, 9_003)[..]);
        assert_eq!(pattern(7, 20_003), reference(7, 20_003));
    }

    #[test]
    fn no_two_pieces_of_a_pattern_are_alike() {
        let p = pattern(3, 16 * PATTERN_PIECE);
        let q = pattern(4, 16 * PATTERN_PIECE);
        let mut pieces: Vec<&[u8]> = p.chunks(PATTERN_PIECE).chain(q.chunks(PATTERN_PIECE)).collect();
        // Also a piece shifted by one word within itself.
        pieces.push(&p[8..8 + PATTERN_PIECE]);
        let n = pieces.len();
        pieces.sort();
        pieces.dedup();
        assert_eq!(pieces.len(), n);
    }

    proptest! {
        /// Any window of a pattern is the same bytes as that window of the
        /// whole: reads regenerate exactly what was written.
        #[test]
        fn any_window_matches_the_whole(seed: u64, at in 0usize..3 * PATTERN_PIECE, len in 0usize..2 * PATTERN_PIECE + 20) {
            let whole = reference(seed, at + len);
            let mut window = vec![0xA5; len];
            pattern_at(seed, at as u64, &mut window);
            prop_assert_eq!(&window[..], &whole[at..]);
        }
    }

    #[test]
    fn far_offsets_need_no_prefix() {
        // A byte a terabyte in costs what the first one does.
        let at = 1u64 << 40;
        let mut far = [0u8; 24];
        pattern_at(9, at + 4090, &mut far);
        let piece = at / PATTERN_PIECE as u64;
        let salt = piece_salt(9, piece);
        let mut near = [0u8; 6];
        pattern_at(9, 4090, &mut near);
        let salt_bytes = salt.to_le_bytes();
        for (i, (f, n)) in far.iter().zip(near).enumerate() {
            assert_eq!(*f, n ^ salt_bytes[(4090 + i) % 8]);
        }
    }
}
