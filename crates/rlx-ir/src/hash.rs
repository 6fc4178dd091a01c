//! A fast hasher for keys the library derives itself, shared by every crate that hashes
//! node ids or graph structure on a hot path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Odd 64-bit constants (digits of π and e) for the multiply-fold mixer.
const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0xb7e1_5162_8aed_2a6b;

/// `a × b` as 128 bits, folded to 64 by xor of the halves: every input bit reaches
/// every output bit in one multiply.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = (a as u128).wrapping_mul(b as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// A fast non-cryptographic hasher: one multiply-fold per 8 bytes (SipHash spends about
/// 4× that), with a final avalanche so that near-equal inputs land far apart.
///
/// For keys the library derives itself (node ids, graph structure, compile-cache keys):
/// it has no seed and no flooding resistance, so it must not key maps filled from
/// untrusted input.
///
/// ```
/// use rlx_ir::{FastHashMap, FastHasher};
/// use std::hash::Hasher;
/// let mut a = FastHasher::default();
/// a.write_u64(1);
/// let mut b = FastHasher::default();
/// b.write_u64(2);
/// assert_ne!(a.finish(), b.finish());
/// let mut m: FastHashMap<u32, &str> = FastHashMap::default();
/// m.insert(7, "seven");
/// assert_eq!(m[&7], "seven");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct FastHasher {
    state: u64,
}

impl Default for FastHasher {
    fn default() -> FastHasher {
        FastHasher { state: K1 }
    }
}

impl FastHasher {
    #[inline(always)]
    fn mix(&mut self, word: u64) {
        self.state = fold_mul(self.state ^ word, K0).rotate_left(23);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(last));
        }
        // The length keeps `[1, 0]` and `[1]` (zero padding) apart.
        self.mix(bytes.len() as u64);
    }

    fn write_u8(&mut self, i: u8) {
        self.mix(i as u64);
    }

    fn write_u16(&mut self, i: u16) {
        self.mix(i as u64);
    }

    fn write_u32(&mut self, i: u32) {
        self.mix(i as u64);
    }

    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }

    fn finish(&self) -> u64 {
        fold_mul(self.state ^ K1, K0 ^ 0x9e37_79b9_7f4a_7c15)
    }
}

/// Builds [`FastHasher`]s (for `HashMap::with_hasher` and friends).
pub type FastBuildHasher = BuildHasherDefault<FastHasher>;

/// A `HashMap` hashed by [`FastHasher`].
pub type FastHashMap<K, V> = HashMap<K, V, FastBuildHasher>;

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_bytes(b: &[u8]) -> u64 {
        let mut h = FastHasher::default();
        h.write(b);
        h.finish()
    }

    #[test]
    fn zero_padding_and_length_are_told_apart() {
        assert_ne!(hash_bytes(&[1, 0]), hash_bytes(&[1]));
        assert_ne!(hash_bytes(&[]), hash_bytes(&[0]));
    }

    #[test]
    fn nearby_words_spread_over_the_high_bits() {
        let tops: std::collections::HashSet<u64> = (0u64..256)
            .map(|i| {
                let mut h = FastHasher::default();
                h.write_u64(i);
                h.finish() >> 56
            })
            .collect();
        assert!(tops.len() > 128, "only {} distinct top bytes", tops.len());
    }
}
