//! `scatter_add` (gather's adjoint: an embedding's backward adds cotangent rows into
//! `dW`) as a native kernel.
//!
//! The base view is copied into the output, the indices are bucketed by destination
//! (a counting sort that keeps each bucket in index order), and the destination rows are
//! spread over the pool: each row is owned by one task, which adds its updates in index
//! order. So the result is the oracle's — f32 rows accumulate in f64 from the base and
//! round once, exactly as `interp` does — and the same for every run and thread count.
//! Through the oracle the `[1024, 256]` → `[512, 256]` embedding backward cost 5 ms a
//! step (the operands materialized, every element converted to f64 and back).

use super::copy::Copies;
use super::operand::{Operand, gather, gather_into};
use super::par::{SendPtr, par_for};
use half::{bf16, f16};
use rlx_ir::DType;

/// Destination elements per parallel task.
const PER_TASK: usize = 1 << 14;

/// `scatter_add` along `axis` of the dense `dims` result (dtype `dt`) at `dst`: `base`
/// (the copy of the base operand into `dst`), then `upd`'s rows added at the rows `idx`
/// names. `None` when the indices are not valid whole numbers in range: the caller's
/// generic path then reports the oracle's own error.
///
/// # Safety
/// `base` must write exactly the dense `dims` elements of `dt` at `dst` reading only its
/// bound source; `idx` and `upd` must be bound operands over `bases`, `upd` of dims
/// `dims[..axis] ++ idx.dims ++ dims[axis + 1..]` and dtype `dt`; `dst` must hold the
/// result and overlap no operand.
pub(crate) unsafe fn run(
    (axis, dt, dims): (usize, DType, &[usize]),
    (base, idx, upd): (&Copies, &Operand, &Operand),
    bases: &[*mut u8],
    dst: *mut u8,
) -> Option<Result<(), String>> {
    let keys = super::movement::gather_indices(dims, &gather(idx, bases), axis).ok()?;
    let w = dt.size_bytes();
    let n = dims[axis];
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let m = keys.len();
    if upd.dims.iter().product::<usize>() != outer * m * inner {
        return None;
    }
    // The updates in place when they are a dense block, else materialized (8-aligned).
    let mut own: Vec<u64> = Vec::new();
    let up: *const u8 = match upd.dense_offset() {
        Some(off) => bases[upd.buf].wrapping_add(off * w),
        None => {
            own = vec![0u64; (outer * m * inner * w).div_ceil(8)];
            // SAFETY: `upd` is a bound operand (caller) of `outer·m·inner` elements (checked
            // above), which fit in `own`.
            unsafe { gather_into(upd, bases, own.as_mut_ptr() as *mut u8) };
            own.as_ptr() as *const u8
        }
    };
    // SAFETY: the caller's contract for `base` and `dst`.
    unsafe { base.run(bases, dst) };
    if m == 0 || inner == 0 || outer == 0 {
        return Some(Ok(()));
    }
    // Bucket the update positions by destination index, each bucket in index order.
    let mut start = vec![0usize; n + 1];
    for &k in &keys {
        start[k + 1] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut order = vec![0usize; m];
    let mut fill = start.clone();
    for (j, &k) in keys.iter().enumerate() {
        order[fill[k]] = j;
        fill[k] += 1;
    }
    let rows = outer * n;
    let per = (PER_TASK / inner).max(1);
    let (d, u) = (SendPtr(dst), SendPtr(up as *mut u8));
    let (start, order) = (&start, &order);
    let row_bytes = inner * w;
    let r = par_for(rows.div_ceil(per), |c| {
        let mut acc = Vec::new();
        for r in c * per..((c + 1) * per).min(rows) {
            let (o, k) = (r / n, r % n);
            let bucket = &order[start[k]..start[k + 1]];
            if bucket.is_empty() {
                continue;
            }
            let row = d.get().wrapping_add(r * row_bytes);
            let srcs = bucket
                .iter()
                .map(|&j| u.get().wrapping_add((o * m + j) * row_bytes) as *const u8);
            // SAFETY: destination row `r < outer·n` of the dense result, owned by this task
            // alone; update rows `(o, j)` with `j < m` inside the `outer·m·inner` updates;
            // both aligned for `dt` (executor buffers, or the 8-aligned `own`).
            unsafe { add_rows(dt, row, srcs, inner, &mut acc) };
        }
        Ok(())
    });
    drop(own);
    Some(r)
}

crate::math::wide_fn! {
    baseline = add_rows_base;
    /// `row += Σ srcs` (in order) over `inner` elements of `dt`, as the oracle adds:
    /// floats in f64 from the row's value, rounded once; integers wrapping; bool as or.
    ///
    /// # Safety
    /// `row` and every source hold `inner` elements of `dt`, aligned; `row` is written by
    /// no one else meanwhile and overlaps no source.
    unsafe fn add_rows(
        dt: DType,
        row: *mut u8,
        srcs: impl Iterator<Item = *const u8>,
        inner: usize,
        acc: &mut Vec<f64>,
    ) {
        let comps = if dt.is_complex() { 2 * inner } else { inner };
        // SAFETY: in every arm `row` and each source hold `comps` components of the arm's
        // type, aligned (caller).
        unsafe {
            match dt {
                DType::F32 | DType::C64 => {
                    let r = std::slice::from_raw_parts_mut(row as *mut f32, comps);
                    // Plain indexed loops (no `extend` through an iterator adapter that may
                    // stay out of line): they vectorize under `math::wide`.
                    acc.resize(comps, 0.0);
                    for (a, &x) in acc.iter_mut().zip(r.iter()) {
                        *a = x as f64;
                    }
                    for s in srcs {
                        let s = std::slice::from_raw_parts(s as *const f32, comps);
                        for (a, &x) in acc.iter_mut().zip(s) {
                            *a += x as f64;
                        }
                    }
                    for (x, &a) in r.iter_mut().zip(acc.iter()) {
                        *x = a as f32;
                    }
                }
                DType::F64 | DType::C128 => {
                    let r = std::slice::from_raw_parts_mut(row as *mut f64, comps);
                    for s in srcs {
                        let s = std::slice::from_raw_parts(s as *const f64, comps);
                        for (a, &x) in r.iter_mut().zip(s) {
                            *a += x;
                        }
                    }
                }
                DType::F16 => halves::<f16>(row, srcs, comps, acc),
                DType::BF16 => halves::<bf16>(row, srcs, comps, acc),
                DType::I8 | DType::U8 => wrapping::<u8>(row, srcs, comps, u8::wrapping_add),
                DType::I16 => wrapping::<u16>(row, srcs, comps, u16::wrapping_add),
                DType::I32 | DType::U32 => wrapping::<u32>(row, srcs, comps, u32::wrapping_add),
                DType::I64 => wrapping::<u64>(row, srcs, comps, u64::wrapping_add),
                DType::Bool => wrapping::<u8>(row, srcs, comps, |a, b| ((a | b) != 0) as u8),
            }
        }
    }
}

/// A 16-bit float type converted through f64 like the oracle.
trait Half: Copy {
    fn to64(self) -> f64;
    fn from64(v: f64) -> Self;
}
impl Half for f16 {
    fn to64(self) -> f64 {
        self.to_f64()
    }
    fn from64(v: f64) -> Self {
        rlx_ir::f16_from_f64(v)
    }
}
impl Half for bf16 {
    fn to64(self) -> f64 {
        self.to_f64()
    }
    fn from64(v: f64) -> Self {
        rlx_ir::bf16_from_f64(v)
    }
}

/// # Safety
/// As [`add_rows`] for a 16-bit float `H`.
unsafe fn halves<H: Half>(
    row: *mut u8,
    srcs: impl Iterator<Item = *const u8>,
    n: usize,
    acc: &mut Vec<f64>,
) {
    // SAFETY: `row` and the sources hold `n` aligned `H` (caller).
    unsafe {
        let r = std::slice::from_raw_parts_mut(row as *mut H, n);
        acc.clear();
        acc.extend(r.iter().map(|x| x.to64()));
        for s in srcs {
            let s = std::slice::from_raw_parts(s as *const H, n);
            for (a, x) in acc.iter_mut().zip(s) {
                *a += x.to64();
            }
        }
        for (x, &a) in r.iter_mut().zip(acc.iter()) {
            *x = H::from64(a);
        }
    }
}

/// # Safety
/// As [`add_rows`] for elements stored as `T`.
unsafe fn wrapping<T: Copy>(
    row: *mut u8,
    srcs: impl Iterator<Item = *const u8>,
    n: usize,
    add: impl Fn(T, T) -> T,
) {
    // SAFETY: `row` and the sources hold `n` aligned `T` (caller).
    unsafe {
        let r = std::slice::from_raw_parts_mut(row as *mut T, n);
        for s in srcs {
            let s = std::slice::from_raw_parts(s as *const T, n);
            for (a, &x) in r.iter_mut().zip(s) {
                *a = add(*a, x);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_rows_added_wide_have_the_baseline_bits() {
        for inner in [1, 5, 8, 16, 17, 256, 259] {
            let row0: Vec<f32> = (0..inner).map(|i| (i % 13) as f32 * 0.37 - 2.0).collect();
            let srcs: Vec<Vec<f32>> = (0..3)
                .map(|k| {
                    (0..inner)
                        .map(|i| ((i * 31 + k * 7) % 101) as f32 * 1e-3 * 10f32.powi(k as i32))
                        .collect()
                })
                .collect();
            let (mut a, mut b) = (row0.clone(), row0.clone());
            let ptrs = || srcs.iter().map(|s| s.as_ptr() as *const u8);
            let mut acc = Vec::new();
            // SAFETY: the row and every source hold `inner` aligned f32s; no overlap.
            unsafe {
                add_rows_base(
                    DType::F32,
                    a.as_mut_ptr() as *mut u8,
                    ptrs(),
                    inner,
                    &mut acc,
                );
                add_rows(
                    DType::F32,
                    b.as_mut_ptr() as *mut u8,
                    ptrs(),
                    inner,
                    &mut acc,
                );
            }
            let want: Vec<f32> = (0..inner)
                .map(|i| srcs.iter().fold(row0[i] as f64, |a, s| a + s[i] as f64) as f32)
                .collect();
            assert_eq!(a, want, "inner = {inner}");
            assert_eq!(b, want, "inner = {inner}");
        }
    }
}
