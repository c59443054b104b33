//! Where a generated run's choices come from: a seeded ChaCha stream (every
//! run the CLI makes), or a fuzzer's input read front to back (the
//! `lockstep` fuzz target), so the workload generator, the scheduler and
//! the crash points are the same code either way and a mutated byte moves
//! one choice, not the whole run.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand::TryRng;

/// Input bytes each draw consumes. Two bytes give a choice among up to
/// 65,536 values (every weight, kind and small range the generator draws
/// from); the lower bits come from a hash of them and the position, so
/// large ranges still reach odd values.
const BYTES_PER_DRAW: usize = 2;

/// A stream of choices.
// Not boxed: the seeded stream is what every CLI run draws from, a handful
// per run, and boxing it would put a pointer chase in each draw.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum Draws {
    Seeded(ChaCha8Rng),
    Input(InputDraws),
}

impl Draws {
    /// Stream `stream` of `seed`: each consumer of a run's randomness has
    /// its own, so drawing more in one moves no choice of another.
    pub fn seeded(seed: u64, stream: u64) -> Draws {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(stream);
        Draws::Seeded(rng)
    }
}

/// A fuzzer's input, shared by every stream of one run: the streams take
/// their draws from it in the order the run makes them.
#[derive(Clone, Debug)]
pub struct InputDraws {
    cursor: Arc<Mutex<Cursor>>,
}

#[derive(Debug)]
struct Cursor {
    bytes: Vec<u8>,
    at: usize,
}

impl InputDraws {
    pub fn new(bytes: &[u8]) -> InputDraws {
        InputDraws { cursor: Arc::new(Mutex::new(Cursor { bytes: bytes.to_vec(), at: 0 })) }
    }

    /// Whether every byte has been drawn: the run ends at its next op.
    pub fn exhausted(&self) -> bool {
        let c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        c.at >= c.bytes.len()
    }

    /// The next draw as a u64 with its top 16 bits from the input (zeros
    /// past its end).
    fn next(&self) -> u64 {
        let mut c = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let at = c.at;
        let mut top = [0u8; BYTES_PER_DRAW];
        for (i, b) in top.iter_mut().enumerate() {
            *b = c.bytes.get(at + i).copied().unwrap_or(0);
        }
        c.at = at.saturating_add(BYTES_PER_DRAW);
        let high = u64::from(u16::from_be_bytes(top));
        (high << 48) | (mix(high ^ ((at as u64) << 16)) >> 16)
    }
}

/// splitmix64's finaliser: spreads two input bytes and a position over the
/// low bits of a draw.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl TryRng for Draws {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        match self {
            Draws::Seeded(rng) => rng.try_next_u32(),
            Draws::Input(input) => Ok((input.next() >> 32) as u32),
        }
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        match self {
            Draws::Seeded(rng) => rng.try_next_u64(),
            Draws::Input(input) => Ok(input.next()),
        }
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        match self {
            Draws::Seeded(rng) => rng.try_fill_bytes(dst),
            Draws::Input(input) => {
                for chunk in dst.chunks_mut(8) {
                    let word = input.next().to_le_bytes();
                    chunk.copy_from_slice(&word[..chunk.len()]);
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::RngExt;

    use super::*;

    #[test]
    fn a_seeded_stream_draws_what_chacha_draws() {
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        rng.set_stream(4);
        let mut draws = Draws::seeded(9, 4);
        for _ in 0..100 {
            assert_eq!(draws.random_range(0..1000u32), rng.random_range(0..1000u32));
            assert_eq!(draws.random::<u64>(), rng.random::<u64>());
        }
    }

    #[test]
    fn input_draws_follow_their_bytes_and_end() {
        let input = InputDraws::new(&[0x00, 0x00, 0xff, 0xff, 0x80, 0x00]);
        let mut a = Draws::Input(input.clone());
        let mut b = Draws::Input(input.clone());
        assert_eq!(a.random_range(0..10u32), 0, "zero bytes pick the bottom");
        assert_eq!(b.random_range(0..10u32), 9, "0xffff picks the top, from the shared cursor");
        assert_eq!(a.random_range(0..10u32), 5, "0x8000 picks the middle");
        assert!(input.exhausted());
        assert_eq!(a.random_range(0..10u32), 0, "past the end: zeros");
        // The low bits still vary, so a large range reaches odd values.
        let odd = InputDraws::new(&(0..200u8).collect::<Vec<_>>());
        let mut d = Draws::Input(odd);
        assert!((0..100).any(|_| d.random_range(0..1u32 << 20) % 2 == 1));
    }

    #[test]
    fn one_changed_byte_moves_one_draw() {
        let bytes: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        let mut changed = bytes.clone();
        changed[10] ^= 0x80;
        let draw = |b: &[u8]| {
            let mut d = Draws::Input(InputDraws::new(b));
            (0..32).map(|_| d.random_range(0..1000u32)).collect::<Vec<_>>()
        };
        let (x, y) = (draw(&bytes), draw(&changed));
        let moved: Vec<usize> = (0..32).filter(|&i| x[i] != y[i]).collect();
        assert_eq!(moved, vec![5]);
    }
}
