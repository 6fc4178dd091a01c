//! Running sums (`Op::Cumsum`, inclusive or exclusive, any axis) with the oracle's
//! semantics and bits, instead of the interpreter's element-by-element f64 walk:
//!
//! - floats (f32, f64, f16, bf16): the running sum is kept in f64 in index order along
//!   the axis and each output is that prefix rounded once to the dtype (f16/bf16
//!   through `rlx_ir::{f16_from_f64, bf16_from_f64}`, as the oracle's encoder does);
//! - integers: the oracle adds in wrapping i64 and keeps the low bits of the dtype's
//!   width. Addition modulo 2⁶⁴ followed by a cut to `w` bits equals addition modulo
//!   2^w, so each integer dtype adds in its own width with wrapping arithmetic (same
//!   bytes, signed or not);
//! - bool and complex inputs return `None`: the oracle runs (and judges) them.
//!
//! Lines along the axis are independent. The tensor is `outer` blocks of `n × inner`
//! contiguous elements; a block is scanned row by row with one accumulator per column
//! (so the inner loop runs over contiguous memory). Blocks are split into fixed,
//! size-determined groups spread over rayon, so the bits never depend on the thread
//! count.

use rayon::prelude::*;
use rlx_ir::{DType, Op, TensorData, bf16_from_f64, f16_from_f64, norm_axis};

/// Fewest elements one parallel task gets (smaller tensors run on the calling thread).
const TASK_MIN: usize = 1 << 15;

/// The running sums of `Op::Cumsum` over `ins[0]`, or `None` when this kernel does not
/// handle the op, dtype or shapes (the oracle then runs it and reports any error).
pub(crate) fn eval(op: &Op, ins: &[&TensorData], out_dims: &[usize]) -> Option<Vec<u8>> {
    let Op::Cumsum { axis, exclusive } = op else {
        return None;
    };
    let [x] = ins else {
        return None;
    };
    if x.dims.is_empty() || x.dims != out_dims {
        return None;
    }
    let ax = norm_axis("cumsum", *axis as i64, x.dims.len()).ok()?;
    let w = x.dtype.size_bytes();
    let total: usize = x.dims.iter().product();
    if x.bytes.len() != total * w {
        return None;
    }
    let s = Scan {
        n: x.dims[ax],
        inner: x.dims[ax + 1..].iter().product(),
        exclusive: *exclusive,
    };
    let src = &x.bytes;
    let mut dst = vec![0u8; src.len()];
    match x.dtype {
        DType::F32 => s.run::<4, f64>(
            src,
            &mut dst,
            0.0,
            |b| f32::from_le_bytes(b) as f64,
            add_f64,
            |a| (a as f32).to_le_bytes(),
        ),
        DType::F64 => s.run::<8, f64>(
            src,
            &mut dst,
            0.0,
            f64::from_le_bytes,
            add_f64,
            f64::to_le_bytes,
        ),
        DType::F16 => s.run::<2, f64>(
            src,
            &mut dst,
            0.0,
            |b| half::f16::from_le_bytes(b).to_f64(),
            add_f64,
            |a| f16_from_f64(a).to_le_bytes(),
        ),
        DType::BF16 => s.run::<2, f64>(
            src,
            &mut dst,
            0.0,
            |b| half::bf16::from_le_bytes(b).to_f64(),
            add_f64,
            |a| bf16_from_f64(a).to_le_bytes(),
        ),
        DType::I8 | DType::U8 => {
            s.run::<1, u8>(src, &mut dst, 0, |b| b[0], u8::wrapping_add, |a| [a])
        }
        DType::I16 => s.run::<2, u16>(
            src,
            &mut dst,
            0,
            u16::from_le_bytes,
            u16::wrapping_add,
            u16::to_le_bytes,
        ),
        DType::I32 | DType::U32 => s.run::<4, u32>(
            src,
            &mut dst,
            0,
            u32::from_le_bytes,
            u32::wrapping_add,
            u32::to_le_bytes,
        ),
        DType::I64 => s.run::<8, u64>(
            src,
            &mut dst,
            0,
            u64::from_le_bytes,
            u64::wrapping_add,
            u64::to_le_bytes,
        ),
        DType::Bool | DType::C64 | DType::C128 => return None,
    }
    Some(dst)
}

/// `a + v` as the oracle's `acc += v` gives it, NaN payload included: once the running
/// sum is a NaN it stays that NaN. (Rust leaves the payload of a sum of two NaNs open;
/// the oracle's compiled `acc += v` keeps the accumulator's, and this kernel's generic
/// code was seen to keep `v`'s, so the rule is written out.)
#[inline(always)]
fn add_f64(a: f64, v: f64) -> f64 {
    if a.is_nan() { a } else { a + v }
}

/// The geometry of one scan: `n` elements along the axis, `inner` elements after it.
struct Scan {
    n: usize,
    inner: usize,
    exclusive: bool,
}

impl Scan {
    /// Scans `src` into `dst` (both `outer · n · inner` elements of `W` bytes):
    /// `load` decodes an element, `add` accumulates, `store` encodes a prefix.
    fn run<const W: usize, A: Copy + Send + Sync>(
        &self,
        src: &[u8],
        dst: &mut [u8],
        zero: A,
        load: impl Fn([u8; W]) -> A + Sync,
        add: impl Fn(A, A) -> A + Sync,
        store: impl Fn(A) -> [u8; W] + Sync,
    ) {
        let block = self.n * self.inner * W;
        if block == 0 {
            return;
        }
        let block_elems = self.n * self.inner;
        // Whole blocks per task: a fixed function of the shape, never of the pool.
        let per_task = TASK_MIN.div_ceil(block_elems).max(1) * block;
        let scan_block = |s: &[u8], d: &mut [u8], acc: &mut Vec<A>| {
            for (sb, db) in s.chunks_exact(block).zip(d.chunks_exact_mut(block)) {
                self.block::<W, A>(sb, db, acc, zero, &load, &add, &store);
            }
        };
        if src.len() > per_task {
            src.par_chunks(per_task)
                .zip(dst.par_chunks_mut(per_task))
                .for_each_init(Vec::new, |acc, (s, d)| scan_block(s, d, acc));
        } else {
            scan_block(src, dst, &mut Vec::new());
        }
    }

    /// One `n × inner` block: row `k` of the output is the prefix of rows `0..k`
    /// (exclusive) or `0..=k` (inclusive), one accumulator per column.
    #[allow(clippy::too_many_arguments)]
    fn block<const W: usize, A: Copy>(
        &self,
        src: &[u8],
        dst: &mut [u8],
        acc: &mut Vec<A>,
        zero: A,
        load: &impl Fn([u8; W]) -> A,
        add: &impl Fn(A, A) -> A,
        store: &impl Fn(A) -> [u8; W],
    ) {
        acc.clear();
        acc.resize(self.inner, zero);
        let row = self.inner * W;
        for (s, d) in src.chunks_exact(row).zip(dst.chunks_exact_mut(row)) {
            let elems = s.chunks_exact(W).zip(d.chunks_exact_mut(W));
            for (a, (sv, dv)) in acc.iter_mut().zip(elems) {
                let v = load(sv.try_into().expect("W-byte chunk"));
                if self.exclusive {
                    dv.copy_from_slice(&store(*a));
                    *a = add(*a, v);
                } else {
                    *a = add(*a, v);
                    dv.copy_from_slice(&store(*a));
                }
            }
        }
    }
}
