//! Native data-movement ops that fusion leaves whole (`concat`, `pad`, `gather`): slab
//! copies of bytes, for every dtype, instead of the oracle's per-element index maps.
//! Results are byte-identical to the oracle's (and its errors are reproduced).

use rlx_ir::{DType, Op, TensorData};

/// `op` on dense operands, or `None` when it is not one of the native movement ops.
pub(crate) fn eval(
    op: &Op,
    ins: &[&TensorData],
    out_dims: &[usize],
) -> Option<Result<Vec<u8>, String>> {
    // An empty result has nothing to copy; without this the loops below would still
    // walk the outer axes (2^40 iterations for a [2^40, 0] result).
    if out_dims.contains(&0) && matches!(op, Op::Concat { .. } | Op::Pad { .. }) {
        return Some(Ok(Vec::new()));
    }
    Some(match op {
        Op::Concat { axis } => Ok(concat(ins, *axis, out_dims)),
        Op::Pad {
            axis,
            before,
            value,
            ..
        } => Ok(pad(ins[0], *axis, *before, *value, out_dims)),
        Op::Gather { axis } => gather(ins[0], ins[1], *axis, out_dims),
        _ => return None,
    })
}

fn concat(ins: &[&TensorData], axis: usize, dims: &[usize]) -> Vec<u8> {
    let w = ins[0].dtype.size_bytes();
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(dims.iter().product::<usize>() * w);
    for o in 0..outer {
        for t in ins {
            let slab = t.dims[axis] * inner * w;
            out.extend_from_slice(&t.bytes[o * slab..(o + 1) * slab]);
        }
    }
    out
}

fn pad(x: &TensorData, axis: usize, before: usize, value: f64, dims: &[usize]) -> Vec<u8> {
    let w = x.dtype.size_bytes();
    // The fill converted like a cast of the f64 value (oracle rule).
    let fill = rlx_ir::interp::eval_op(
        &Op::Cast { to: x.dtype },
        &[&TensorData::from_f64(&[], &[value])],
        &rlx_ir::Shape::scalar(x.dtype),
    )
    .map(|d| d.bytes)
    .unwrap_or_else(|_| vec![0; w]);
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product();
    let (n_in, n_out) = (x.dims[axis], dims[axis]);
    let mut out = Vec::with_capacity(outer * n_out * inner * w);
    for o in 0..outer {
        for k in 0..n_out {
            if k >= before && k < before + n_in {
                let src = ((o * n_in) + (k - before)) * inner * w;
                out.extend_from_slice(&x.bytes[src..src + inner * w]);
            } else {
                for _ in 0..inner {
                    out.extend_from_slice(&fill);
                }
            }
        }
    }
    out
}

fn gather(
    table: &TensorData,
    indices: &TensorData,
    axis: usize,
    dims: &[usize],
) -> Result<Vec<u8>, String> {
    let idx = gather_indices(&table.dims, indices, axis)?;
    let w = table.dtype.size_bytes();
    let n = table.dims[axis];
    let outer: usize = table.dims[..axis].iter().product();
    let inner: usize = table.dims[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(dims.iter().product::<usize>() * w);
    for o in 0..outer {
        for &k in &idx {
            let src = (o * n + k) * inner * w;
            out.extend_from_slice(&table.bytes[src..src + inner * w]);
        }
    }
    Ok(out)
}

/// The indices of a gather along `axis` of a table of `table_dims`, checked to be whole
/// numbers in range (negative ones counting from the end) and made non-negative.
pub(crate) fn gather_indices(
    table_dims: &[usize],
    indices: &TensorData,
    axis: usize,
) -> Result<Vec<usize>, String> {
    let n = table_dims[axis];
    let raw: Vec<i64> = if indices.dtype.is_float() {
        let mut v = Vec::with_capacity(indices.numel());
        for (i, x) in indices.to_f64_vec().into_iter().enumerate() {
            if x.fract() == 0.0 && x.abs() < 2f64.powi(63) {
                v.push(x as i64);
            } else {
                return Err(format!(
                    "gather: index {x} (element {i} of the {} indices) is not an integer; float indices must hold whole numbers",
                    indices.dtype
                ));
            }
        }
        v
    } else if indices.dtype == DType::Bool || indices.dtype.is_complex() {
        return Err(format!(
            "gather: indices must be integers, got {}",
            indices.dtype
        ));
    } else if indices.dtype == DType::I32 {
        // The usual embedding ids: read straight from the bytes (the generic decode goes
        // through f64 per element).
        indices
            .bytes
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
            .collect()
    } else {
        indices.to_i64_vec()
    };
    let mut idx = Vec::with_capacity(raw.len());
    for i in raw {
        let r = if i < 0 { i + n as i64 } else { i };
        if r < 0 || r >= n as i64 {
            return Err(format!(
                "gather: index {i} is out of range for axis {axis} of size {n} (table dims {:?}); valid indices are {}..{n}",
                table_dims,
                -(n as i64)
            ));
        }
        idx.push(r as usize);
    }
    Ok(idx)
}

/// Bytes of a gather's output per parallel chunk: a gather of up to this much runs on
/// one thread. Splitting W11's 1 MiB embedding lookup over the two vCPUs of the Xeon of
/// 2026-12-03 cost more than it saved (27-31 µs alone, 35-52 µs split, same binary,
/// `RLX_GATHER_SPLIT=0/1` alternated): the task hand-off outweighs half a 1 MiB copy.
const ROWS_CHUNK_BYTES: usize = 1 << 20;

/// A gather's row copies: output row `(o, j)` (of `outer × idx.len()`) is table row
/// `(o, idx[j])` (of `outer × n`), `row` bytes each, spread over the threads in chunks of
/// about [`ROWS_CHUNK_BYTES`]. Each row is one `memcpy`, with no per-element index work;
/// the output is written once (never cleared first).
///
/// # Safety
/// `src` holds `outer · n` rows of `row` bytes, every `idx[j] < n`, `dst` holds
/// `outer · idx.len()` rows, and the two do not overlap.
pub(crate) unsafe fn copy_rows(
    src: *const u8,
    dst: *mut u8,
    (outer, n): (usize, usize),
    idx: &[usize],
    row: usize,
) {
    use super::par::{SendPtr, chunks, par_for};
    let total = outer * idx.len();
    if total == 0 || row == 0 {
        return;
    }
    // `RLX_GATHER_SPLIT=0`: one chunk (for A/B measurements in one process).
    static SPLIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let split =
        *SPLIT.get_or_init(|| std::env::var_os("RLX_GATHER_SPLIT").is_none_or(|v| v != "0"));
    let per = if split {
        (ROWS_CHUNK_BYTES / row).max(1)
    } else {
        total
    };
    let (s, d) = (SendPtr(src as *mut u8), SendPtr(dst));
    let m = idx.len();
    let run = |c: usize| -> Result<(), String> {
        let (s, d) = (s.get() as *const u8, d.get());
        let (r0, r1) = (c * per, ((c + 1) * per).min(total));
        // Output row `r` is `(o, j)`: divided once per chunk, then stepped.
        let (mut o, mut j) = (r0 / m, r0 % m);
        for r in r0..r1 {
            // SAFETY: `o < outer` and `idx[j] < n` (caller), so the source row lies in the
            // table; `r < outer·m` rows of the output (caller); the buffers are distinct.
            unsafe {
                std::ptr::copy_nonoverlapping(s.add((o * n + idx[j]) * row), d.add(r * row), row)
            };
            j += 1;
            if j == m {
                (o, j) = (o + 1, 0);
            }
        }
        Ok(())
    };
    // The copies cannot fail.
    let _ = par_for(chunks(total, per), run);
}
