//! Where a case's random choices come from: a seeded stream (the CI test) or the
//! fuzzer's bytes (the `cargo fuzz` target). Both feed the same [`Draw`], so one
//! generator serves both, and a byte string the fuzzer finds replays as a case.

/// A stream of random bytes.
pub trait Source {
    /// The next byte (an exhausted source keeps answering 0).
    fn byte(&mut self) -> u8;
}

/// SplitMix64 bytes from a seed: a case replays from its seed alone.
pub struct Seeded {
    state: u64,
    buf: u64,
    left: u32,
}

impl Seeded {
    /// A stream for `seed`.
    pub fn new(seed: u64) -> Seeded {
        Seeded {
            state: seed,
            buf: 0,
            left: 0,
        }
    }
}

/// One SplitMix64 step (also used to derive per-case seeds from the run seed).
pub fn mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Source for Seeded {
    fn byte(&mut self) -> u8 {
        if self.left == 0 {
            self.buf = mix(&mut self.state);
            self.left = 8;
        }
        let b = self.buf as u8;
        self.buf >>= 8;
        self.left -= 1;
        b
    }
}

/// The fuzzer's input, read front to back; zeros once it runs out (so every input,
/// the empty one included, decodes to some finite case).
pub struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    /// A stream over `data`.
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data, pos: 0 }
    }
}

impl Source for Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
}

/// Typed choices drawn from a [`Source`].
pub struct Draw<'s> {
    src: &'s mut dyn Source,
}

impl<'s> Draw<'s> {
    /// Choices from `src`.
    pub fn new(src: &'s mut dyn Source) -> Draw<'s> {
        Draw { src }
    }

    /// A value in `0..n` (0 when `n` is 0). One byte when `n ≤ 256`, so fuzzer inputs
    /// stay short and a byte maps to one decision.
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        if n <= 256 {
            return self.src.byte() as usize % n;
        }
        let mut v = 0u64;
        for _ in 0..8 {
            v = (v << 8) | self.src.byte() as u64;
        }
        (v % n as u64) as usize
    }

    /// True with probability `percent`/100 (a zero byte means false, so an exhausted
    /// fuzzer input stops taking optional branches).
    pub fn percent(&mut self, percent: usize) -> bool {
        let b = self.src.byte() as usize;
        b != 0 && b % 100 < percent
    }

    /// One of `xs` (which must not be empty).
    pub fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }

    /// A value in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below((hi - lo + 1) as usize) as i64
    }

    /// A float in `[lo, hi)` with 16 bits of resolution.
    pub fn float(&mut self, lo: f64, hi: f64) -> f64 {
        let v = (self.src.byte() as u32) << 8 | self.src.byte() as u32;
        lo + (hi - lo) * v as f64 / 65536.0
    }
}
