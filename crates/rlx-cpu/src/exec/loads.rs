//! Loads bound to an iteration space: strides per dim, or an offset table for views
//! that strides cannot express; and fetching one tile of a load.

use super::value::{TileValue, Ty, read_bits};
use rlx_compile::program::{Load, Program, bind_load, view::gather_map};
use rlx_ir::DType;
use rlx_ir::{DimBinding, IrError, IrResult};
use std::sync::Arc;

/// Multi-index of flat offset `flat` in `dims` into `idx`.
pub(crate) fn unravel_into(mut flat: usize, dims: &[usize], idx: &mut [usize]) {
    for i in (0..dims.len()).rev() {
        if dims[i] > 0 {
            idx[i] = flat % dims[i];
            flat /= dims[i];
        }
    }
}

/// A load bound to an iteration space of concrete dims.
#[derive(Debug, Clone)]
pub(crate) struct LoadPlan {
    /// Buffer read.
    pub(crate) buf: usize,
    /// Its dtype.
    pub(crate) dtype: DType,
    /// Element offset of index 0.
    pub(crate) offset: usize,
    /// Element stride per iteration dim.
    pub(crate) strides: Vec<isize>,
    /// Offsets per flat iteration index, when strides cannot express the view.
    pub(crate) table: Option<Arc<Vec<usize>>>,
    /// Stride 1 over the whole space (flat index = element offset − `offset`).
    pub(crate) flat_dense: bool,
    /// Every stride is 0: one element for the whole space.
    pub(crate) uniform: bool,
}

impl LoadPlan {
    /// The buffer element this plan reads for flat index `f` of a space of `dims`: the
    /// table's entry, else `offset + Σ idx·stride` (`idx`: scratch of `dims.len()`).
    #[inline]
    pub(crate) fn element_offset(&self, f: usize, dims: &[usize], idx: &mut [usize]) -> usize {
        match &self.table {
            Some(t) => t[f],
            None => {
                unravel_into(f, dims, idx);
                let o: isize = idx
                    .iter()
                    .zip(&self.strides)
                    .map(|(&i, &s)| i as isize * s)
                    .sum();
                (self.offset as isize + o) as usize
            }
        }
    }

    /// A strided plan over `dims` (already collapsed by the caller if it wishes).
    pub(crate) fn strided(
        buf: usize,
        dtype: DType,
        dims: &[usize],
        strides: Vec<isize>,
        offset: usize,
    ) -> LoadPlan {
        let mut acc = 1isize;
        let mut dense = true;
        for i in (0..dims.len()).rev() {
            if dims[i] != 1 && strides[i] != acc {
                dense = false;
            }
            acc *= dims[i] as isize;
        }
        let uniform = strides.iter().zip(dims).all(|(&s, &d)| s == 0 || d == 1);
        LoadPlan {
            buf,
            dtype,
            offset,
            strides,
            table: None,
            flat_dense: dense,
            uniform,
        }
    }

    /// A plan reading offsets from `table` (indexed by flat iteration index).
    pub(crate) fn table(buf: usize, dtype: DType, rank: usize, table: Vec<usize>) -> LoadPlan {
        LoadPlan {
            buf,
            dtype,
            offset: 0,
            strides: vec![0; rank],
            table: Some(Arc::new(table)),
            flat_dense: false,
            uniform: false,
        }
    }
}

/// Where a tile lies in its iteration space.
pub(crate) struct TilePos<'a> {
    /// Flat row-major index of the first element.
    pub(crate) flat: usize,
    /// Multi-index of the first element.
    pub(crate) idx: &'a [usize],
    /// The space's dims.
    pub(crate) dims: &'a [usize],
    /// Elements in the tile.
    pub(crate) len: usize,
    /// The tile lies within one innermost row.
    pub(crate) in_row: bool,
}

/// Whether buffer elements of `dt` are compute elements of `ty` as they are (so a
/// contiguous run can be read in place).
fn native(dt: DType, ty: Ty) -> bool {
    matches!(
        (dt, ty),
        (DType::F32, Ty::F32) | (DType::F64, Ty::F64) | (DType::I64, Ty::I64)
    )
}

/// Prefetch the run that follows a contiguous tile read of `bytes` bytes at `p` (the
/// next tile of the same stream): hardware prefetchers stop at 4 KiB page boundaries,
/// which a tile of 1024 f32 crosses on every tile.
#[inline(always)]
fn prefetch_next(p: *const u8, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: _mm_prefetch is SSE (every x86-64 CPU) and only a hint that never faults, so the
    // addresses (formed with wrapping_add, never dereferenced) may run past the buffer.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = p.wrapping_add(bytes);
        let mut off = 0;
        while off < bytes {
            // Prefetching never faults, so reading past the buffer's end is harmless.
            _mm_prefetch(start.wrapping_add(off) as *const i8, _MM_HINT_T0);
            off += 64;
        }
    }
}

/// Fill `reg` (compute elements of `ty`, 8-byte slots reinterpreted) with `n`
/// elements of `dt` at the element offsets produced by `off`.
///
/// # Safety
/// Every offset `off(i)` for `i < n` must be in bounds of the buffer at `base` (a buffer of
/// `dt`, aligned for it); `reg` must hold `n` elements of `ty` (8-byte slots) and not
/// overlap that buffer.
#[inline(always)]
unsafe fn gather(
    dt: DType,
    ty: Ty,
    base: *const u8,
    reg: *mut u8,
    n: usize,
    mut off: impl FnMut(usize) -> usize,
) {
    // SAFETY: the caller guarantees `reg` holds `n` elements of `ty` and every `off(i)` is an
    // in-bounds, aligned element index of the `dt` buffer at `base`.
    unsafe {
        match ty {
            Ty::F32 => {
                let r = reg as *mut u32;
                if dt == DType::F32 {
                    let b = base as *const u32;
                    for i in 0..n {
                        *r.add(i) = *b.add(off(i));
                    }
                } else {
                    for i in 0..n {
                        *r.add(i) = read_bits(dt, base, off(i)) as u32;
                    }
                }
            }
            Ty::F64 | Ty::I64 => {
                let r = reg as *mut u64;
                for i in 0..n {
                    *r.add(i) = read_bits(dt, base, off(i));
                }
            }
        }
    }
}

/// The tile of load `p` at `t` as a value of compute type `ty`, read in place when
/// possible, else gathered/converted into `reg`; `prefetch`: also prefetch the next
/// tile of a contiguous run.
///
/// # Safety
/// `base` must be the load's buffer, which must cover every element the plan reads;
/// `reg` must hold `t.len` elements of `ty`.
#[inline(always)]
pub(crate) unsafe fn fetch(
    p: &LoadPlan,
    base: *const u8,
    t: &TilePos<'_>,
    ty: Ty,
    reg: *mut u8,
    prefetch: bool,
) -> TileValue {
    let n = t.len;
    let dt = p.dtype;
    // SAFETY: the caller guarantees `base` is this load's buffer covering every element the
    // plan reads and `reg` holds `t.len` elements. The plan comes from the binder
    // (bind_load/gather_map over the buffer's bound dims), so every offset it produces for an
    // index inside `t.dims` (a table entry, `offset + Σ idx·stride`, or `offset + flat` for a
    // dense plan) is an element of the buffer; tiles never run past the space.
    unsafe {
        if let Some(tab) = &p.table {
            gather(dt, ty, base, reg, n, |i| tab[t.flat + i]);
            return TileValue::Vector(reg);
        }
        if p.uniform {
            return TileValue::Scalar(read_bits(dt, base, p.offset));
        }
        let contiguous = |off: usize| -> TileValue {
            if prefetch {
                prefetch_next(base.add(off * dt.size_bytes()), n * dt.size_bytes());
            }
            if native(dt, ty) {
                TileValue::Vector(base.add(off * dt.size_bytes()))
            } else if matches!(dt, DType::F16 | DType::BF16) {
                super::value::widen_halves(dt, base.add(off * 2), reg as *mut f32, n);
                TileValue::Vector(reg)
            } else {
                gather(dt, ty, base, reg, n, |i| off + i);
                TileValue::Vector(reg)
            }
        };
        if t.in_row || t.dims.len() <= 1 {
            let mut off = p.offset as isize;
            for (i, s) in t.idx.iter().zip(&p.strides) {
                off += *i as isize * s;
            }
            let s = p.strides.last().copied().unwrap_or(0);
            if s == 0 {
                return TileValue::Scalar(read_bits(dt, base, off as usize));
            }
            if s == 1 {
                return contiguous(off as usize);
            }
            gather(dt, ty, base, reg, n, |i| (off + i as isize * s) as usize);
            return TileValue::Vector(reg);
        }
        if p.flat_dense {
            return contiguous(p.offset + t.flat);
        }
        rows_into(p, base, t, ty, reg);
        TileValue::Vector(reg)
    }
}

/// A tile that spans rows of a strided load, row segment by row segment: the row's
/// first offset once (an odometer over the outer dims), then the segment filled with
/// one value (innermost stride 0: a per-row operand such as a LayerNorm's mean),
/// converted or copied from a contiguous run (stride 1), or gathered at its stride.
/// Gives the elements a per-element walk of the multi-index gives, at the cost of a
/// copy: multi-row tiles of short rows (reductions over the last axis) take such loads.
///
/// # Safety
/// As [`fetch`]: `base` is the load's buffer covering every element the plan reads for
/// indices inside `t.dims`, `reg` holds `t.len` elements of `ty`, and `p` has no table.
#[inline(always)]
unsafe fn rows_into(p: &LoadPlan, base: *const u8, t: &TilePos<'_>, ty: Ty, reg: *mut u8) {
    let (r, dt) = (t.dims.len(), p.dtype);
    let last = r - 1;
    let (row_len, s) = (t.dims[last], p.strides[last]);
    let mut idx: Vec<usize> = t.idx.to_vec();
    let mut off = p.offset as isize;
    for (i, st) in idx.iter().zip(&p.strides) {
        off += *i as isize * st;
    }
    let esize = match ty {
        Ty::F32 => 4,
        Ty::F64 | Ty::I64 => 8,
    };
    let mut done = 0;
    while done < t.len {
        let seg = (row_len - idx[last]).min(t.len - done);
        // SAFETY: elements `done..done + seg` of `reg` (which holds `t.len` of `ty`) are
        // the segment's; the segment's offsets `off + i·s` (`i < seg`) are the plan's
        // offsets of indices inside `t.dims` (this row, columns `idx[last]..` up to the
        // row's or the tile's end), in bounds by the caller's contract.
        unsafe {
            let dst = reg.add(done * esize);
            if s == 0 {
                let bits = read_bits(dt, base, off as usize);
                if esize == 4 {
                    std::slice::from_raw_parts_mut(dst as *mut u32, seg).fill(bits as u32);
                } else {
                    std::slice::from_raw_parts_mut(dst as *mut u64, seg).fill(bits);
                }
            } else if s == 1 && native(dt, ty) {
                let b = dt.size_bytes();
                std::ptr::copy_nonoverlapping(base.add(off as usize * b), dst, seg * b);
            } else {
                gather(dt, ty, base, dst, seg, |i| (off + i as isize * s) as usize);
            }
        }
        done += seg;
        // The next row: its first column, the outer dims advanced like an odometer.
        off -= idx[last] as isize * s;
        idx[last] = 0;
        let mut d = last;
        while d > 0 {
            d -= 1;
            idx[d] += 1;
            off += p.strides[d];
            if idx[d] < t.dims[d] {
                break;
            }
            off -= p.strides[d] * t.dims[d] as isize;
            idx[d] = 0;
        }
    }
}

/// Merge adjacent dims of an iteration space that belong to the same group where
/// every plan's strides allow it (`s[i] = s[i+1]·d[i+1]`), and drop size-1 dims.
/// Returns the new dims and their groups. Table plans allow every merge: merging
/// leaves the flat order unchanged.
pub(crate) fn collapse(
    dims: &[usize],
    groups: &[u8],
    plans: &mut [LoadPlan],
) -> (Vec<usize>, Vec<u8>) {
    let keep: Vec<usize> = (0..dims.len()).filter(|&i| dims[i] != 1).collect();
    let mut nd: Vec<usize> = keep.iter().map(|&i| dims[i]).collect();
    let mut ng: Vec<u8> = keep.iter().map(|&i| groups[i]).collect();
    let mut ns: Vec<Vec<isize>> = plans
        .iter()
        .map(|p| keep.iter().map(|&i| p.strides[i]).collect())
        .collect();
    let mut i = 0;
    while i + 1 < nd.len() {
        let ok = ng[i] == ng[i + 1]
            && plans
                .iter()
                .zip(&ns)
                .all(|(p, s)| p.table.is_some() || s[i] == s[i + 1] * nd[i + 1] as isize);
        if ok {
            nd[i] *= nd[i + 1];
            nd.remove(i + 1);
            ng.remove(i + 1);
            for s in ns.iter_mut() {
                let inner = s.remove(i + 1);
                s[i] = inner;
            }
        } else {
            i += 1;
        }
    }
    for (p, s) in plans.iter_mut().zip(ns) {
        let rank = nd.len();
        *p = match p.table.take() {
            Some(t) => LoadPlan {
                table: Some(t),
                strides: vec![0; rank],
                ..p.clone()
            },
            None => LoadPlan::strided(p.buf, p.dtype, &nd, s, p.offset),
        };
    }
    (nd, ng)
}

/// Reorder the dims of a plan over `dims` by `perm` (new dim `j` is old dim `perm[j]`).
pub(crate) fn permute(p: &LoadPlan, dims: &[usize], perm: &[usize]) -> LoadPlan {
    let pdims: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
    match &p.table {
        None => LoadPlan::strided(
            p.buf,
            p.dtype,
            &pdims,
            perm.iter().map(|&a| p.strides[a]).collect(),
            p.offset,
        ),
        Some(t) => {
            let n: usize = dims.iter().product();
            let mut out = Vec::with_capacity(n);
            let mut pidx = vec![0usize; dims.len()];
            let mut idx = vec![0usize; dims.len()];
            for f in 0..n {
                unravel_into(f, &pdims, &mut pidx);
                for (j, &a) in perm.iter().enumerate() {
                    idx[a] = pidx[j];
                }
                let orig = idx.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i);
                out.push(t[orig]);
            }
            LoadPlan::table(p.buf, p.dtype, dims.len(), out)
        }
    }
}

/// A plan for load `l` evaluated over exactly `dims` (uncollapsed).
pub(crate) fn plan_load(
    p: &Program,
    bound_dims: &[Vec<usize>],
    l: &Load,
    dims: &[usize],
    b: &DimBinding,
) -> IrResult<LoadPlan> {
    let bd = &bound_dims[l.buf];
    let dt = p.buffers[l.buf].shape.dtype();
    match bind_load(bd, &l.steps, b) {
        Some(s) => {
            if s.dims != dims {
                return Err(IrError::new(
                    "cpu",
                    format!(
                        "internal: load of buffer {} has dims {:?}, expected {dims:?}",
                        l.buf, s.dims
                    ),
                ));
            }
            Ok(LoadPlan::strided(l.buf, dt, &s.dims, s.strides, s.offset))
        }
        None => {
            let t = gather_map(bd, &l.steps, b)
                .ok_or_else(|| {
                    IrError::new(
                        "cpu",
                        format!(
                            "cannot build the index table of a view of {dims:?}: a dynamic dim is unbound, or the table ({} entries) does not fit in memory",
                            dims.iter().fold(1usize, |a, &d| a.saturating_mul(d))
                        ),
                    )
                })?;
            Ok(LoadPlan::table(l.buf, dt, dims.len(), t))
        }
    }
}

/// What every kernel plan is bound against (built by `bind.rs`, read by the kernels' plans): the program, its buffers' concrete dims under
/// the binding, the binding of its dynamic dims, and the program's machine-code cache.
#[derive(Clone, Copy)]
pub(crate) struct BindCtx<'a> {
    pub(crate) program: &'a Program,
    pub(crate) buffer_dims: &'a [Vec<usize>],
    pub(crate) binding: &'a DimBinding,
    pub(crate) jit: &'a std::sync::Arc<crate::jit::JitCache>,
}
