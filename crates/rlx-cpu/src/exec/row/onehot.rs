//! A softmax cross-entropy backward's epilogue evaluated natively on the softmax rows
//! of a [`super::RowPlan`].

use super::super::loads::LoadPlan;
use super::super::value::{Ty, read_bits};
use crate::math;
use rlx_compile::program::{Kernel, Program};
use rlx_ir::{DType, DimBinding, IrResult};

/// A softmax cross-entropy backward's epilogue, `y = (p − onehot)·s` with `onehot =
/// cast(iota == label)` (autodiff's rule for `softmax_cross_entropy_with_logits`): the
/// iota a baked constant `0..C` along the row, the label and the scale `s` (a literal or a
/// per-row load; absent when the cotangent is 1) the same for a whole row. Evaluated on
/// the softmax row in place, per row: the class the label hits found once, then one
/// vector pass — where the interpreter (the JIT takes no integer compare) ran five
/// passes per tile and read the 8-byte iota. The same f32 operations in the same order
/// (`p − 1` or `p − 0`, then the product), so the same bits.
pub(super) struct OneHot {
    /// The class indices compared with the label, bound over `dims`: `0..C` along the
    /// row, the same for every row.
    iota: LoadPlan,
    /// The iota is a baked constant already checked to hold `0..C`; otherwise (a
    /// constant the front end passes as an argument) it is checked on each run.
    iota_baked: bool,
    /// The label per row (constant along the row), bound over `dims`.
    label: LoadPlan,
    /// The scale: none (`y = p − onehot`), a literal, or a per-row f32 load.
    scale: Scale,
    /// The row space (uncollapsed), which the loads are bound over.
    dims: Vec<usize>,
}

enum Scale {
    One,
    Lit(f32),
    Row(LoadPlan),
}

impl OneHot {
    /// The pattern in `e`, stored by the kernel's single store, or `None`.
    pub(super) fn detect(
        p: &Program,
        bd: &[Vec<usize>],
        k: &Kernel,
        e: &rlx_compile::program::Expr,
        dims: &[usize],
        b: &DimBinding,
    ) -> IrResult<Option<OneHot>> {
        use rlx_compile::program::{EOp, Scalar};
        use rlx_ir::{BinaryOp, CmpOp};
        let c = *dims.last().unwrap_or(&0);
        let n = &e.nodes;
        let node = |i: u32| &n[i as usize];
        let f32_node = |i: u32| node(i).dtype == DType::F32;
        let top = k.stores[0].value;
        // `s · d`, `d · s` or `d` alone, with `d = core − cast(iota == label)`.
        let (d, scale) = match &node(top).op {
            EOp::Binary(BinaryOp::Mul) if f32_node(top) => {
                let [x, y] = node(top).args[..] else {
                    return Ok(None);
                };
                if matches!(node(x).op, EOp::Binary(BinaryOp::Sub)) {
                    (x, Some(y))
                } else {
                    (y, Some(x))
                }
            }
            _ => (top, None),
        };
        let (EOp::Binary(BinaryOp::Sub), [core, oh]) = (&node(d).op, &node(d).args[..]) else {
            return Ok(None);
        };
        let (core, oh) = (*core, *oh);
        if !f32_node(d) || !matches!(node(core).op, EOp::Core) || !f32_node(oh) {
            return Ok(None);
        }
        let (EOp::Cast, [cmp]) = (&node(oh).op, &node(oh).args[..]) else {
            return Ok(None);
        };
        let (EOp::Compare(CmpOp::Eq), [a, bb]) = (&node(*cmp).op, &node(*cmp).args[..]) else {
            return Ok(None);
        };
        if node(*cmp).dtype != DType::Bool {
            return Ok(None);
        }
        // A load's plan over the row space, if the node is a load.
        let plan = |i: u32| -> IrResult<Option<LoadPlan>> {
            match node(i).op {
                EOp::Load(l) => {
                    super::super::loads::plan_load(p, bd, &k.loads[l], dims, b).map(Some)
                }
                _ => Ok(None),
            }
        };
        let row_uniform = |l: &LoadPlan| {
            l.table.is_none() && (c <= 1 || l.strides.last().is_some_and(|&s| s == 0))
        };
        let (Some(pa), Some(pb)) = (plan(*a)?, plan(*bb)?) else {
            return Ok(None);
        };
        let (iota, label, iota_baked) = match (iota_like(p, &pa, dims), iota_like(p, &pb, dims)) {
            (Some(baked), None) => (pa, pb, baked),
            (None, Some(baked)) => (pb, pa, baked),
            _ => return Ok(None),
        };
        if !row_uniform(&label) || Ty::of(label.dtype).is_none() {
            return Ok(None);
        }
        let scale = match scale {
            None => Scale::One,
            Some(i) if !f32_node(i) => return Ok(None),
            Some(i) => match node(i).op {
                EOp::Const(Scalar::F(v)) => Scale::Lit(v as f32),
                EOp::Const(Scalar::I(v)) => Scale::Lit(v as f32),
                EOp::Load(_) => match plan(i)? {
                    Some(l) if l.dtype == DType::F32 && row_uniform(&l) => Scale::Row(l),
                    _ => return Ok(None),
                },
                _ => return Ok(None),
            },
        };
        Ok(Some(OneHot {
            iota,
            iota_baked,
            label,
            scale,
            dims: dims.to_vec(),
        }))
    }

    /// Whether the iota holds `0..C` in this run's buffers (always, for a baked one).
    ///
    /// # Safety
    /// `bases` must be the buffers the plan was bound to.
    pub(super) unsafe fn iota_holds(&self, bases: &[*mut u8]) -> bool {
        if self.iota_baked {
            return true;
        }
        let c = *self.dims.last().unwrap_or(&0);
        let l = &self.iota;
        (0..c).all(|j| {
            // SAFETY: the iota plan was bound over the row space with stride 1 along
            // the row (iota_like), so elements `offset..offset + C` lie in its buffer.
            let v = unsafe { read_bits(l.dtype, bases[l.buf], l.offset + j) } as i64;
            v == j as i64
        })
    }

    /// Rows `r0..` of the softmax result `y` (whole rows, in place): `y = (y − onehot)·s`.
    ///
    /// # Safety
    /// `bases` must be the buffers the plan was bound to, and rows `r0..r0 + y.len() / C`
    /// inside the space.
    pub(super) unsafe fn apply(&self, bases: &[*mut u8], r0: usize, y: &mut [f32]) {
        let c = *self.dims.last().unwrap_or(&1);
        for (j, row) in y.chunks_exact_mut(c).enumerate() {
            let flat = (r0 + j) * c;
            let l = &self.label;
            // SAFETY: the label plan was bound over the row space (detect), so the element
            // at its offset for `flat` (inside the space) lies inside its buffer.
            let bits =
                unsafe { read_bits(l.dtype, bases[l.buf], elem_offset(l, &self.dims, flat)) };
            // The interpreter compares in i64 (integer labels) or f64 (float labels): the
            // iota's `j` equals the label exactly when the label is the whole number `j`.
            let hit = match Ty::of(l.dtype) {
                Some(Ty::I64) => {
                    let v = bits as i64;
                    (0..c as i64).contains(&v).then_some(v as usize)
                }
                Some(t) => {
                    let v = if t == Ty::F32 {
                        f32::from_bits(bits as u32) as f64
                    } else {
                        f64::from_bits(bits)
                    };
                    (v >= 0.0 && v < c as f64 && v.fract() == 0.0).then_some(v as usize)
                }
                None => None,
            };
            let s = match &self.scale {
                Scale::One => None,
                Scale::Lit(v) => Some(*v),
                // SAFETY: as for the label: a bound f32 plan over the row space.
                Scale::Row(sl) => Some(f32::from_bits(unsafe {
                    read_bits(DType::F32, bases[sl.buf], elem_offset(sl, &self.dims, flat))
                } as u32)),
            };
            onehot_row(row, hit.unwrap_or(usize::MAX), s);
        }
    }
}

/// Whether `l` can read class indices `0..C` along the last axis of `dims`, the same
/// for every row: an i64/i32 load with stride 1 along the row and 0 across rows.
/// `Some(true)`: a baked constant that holds them; `Some(false)`: another buffer (a
/// constant passed as an argument), to be checked when run; `None`: not an iota.
fn iota_like(p: &Program, l: &LoadPlan, dims: &[usize]) -> Option<bool> {
    use rlx_compile::program::BufKind;
    let c = *dims.last().unwrap_or(&0);
    let w = match l.dtype {
        DType::I64 => 8,
        DType::I32 => 4,
        _ => return None,
    };
    let rank = dims.len();
    let strides_ok = rank >= 1
        && c > 1
        && l.table.is_none()
        && l.strides[rank - 1] == 1
        && (0..rank - 1).all(|i| dims[i] <= 1 || l.strides[i] == 0);
    if !strides_ok {
        return None;
    }
    let BufKind::Const(bytes) = &p.buffers[l.buf].kind else {
        return Some(false);
    };
    (0..c)
        .all(|j| {
            let at = (l.offset + j) * w;
            match bytes.get(at..at + w) {
                Some(b) if w == 8 => i64::from_le_bytes(b.try_into().unwrap()) == j as i64,
                Some(b) => i32::from_le_bytes(b.try_into().unwrap()) as i64 == j as i64,
                None => false,
            }
        })
        .then_some(true)
}

/// The element of strided or table plan `l` (bound over `dims`) at flat index `flat`.
fn elem_offset(l: &LoadPlan, dims: &[usize], flat: usize) -> usize {
    if let Some(t) = &l.table {
        return t[flat];
    }
    let mut rem = flat;
    let mut off = l.offset as isize;
    for i in (0..dims.len()).rev() {
        let d = dims[i].max(1);
        off += (rem % d) as isize * l.strides[i];
        rem /= d;
    }
    off as usize
}

math::wide_fn! {
    baseline = onehot_row_base;
    /// `y = (y − [j == hit])·s` (`y − [j == hit]` without `s`) over one row, compiled for
    /// the CPU's widest vectors.
    fn onehot_row(y: &mut [f32], hit: usize, s: Option<f32>) {
        match s {
            Some(s) => {
                for (j, v) in y.iter_mut().enumerate() {
                    let oh = if j == hit { 1.0f32 } else { 0.0 };
                    *v = s * (*v - oh);
                }
            }
            None => {
                for (j, v) in y.iter_mut().enumerate() {
                    let oh = if j == hit { 1.0f32 } else { 0.0 };
                    *v -= oh;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onehot_rows_compiled_wide_have_the_baseline_bits() {
        for c in [1, 5, 16, 17, 512, 1030] {
            let p: Vec<f32> = (0..c).map(|i| (i % 11) as f32 / 11.0).collect();
            for hit in [0, c / 2, c - 1, usize::MAX] {
                for s in [None, Some(1.0 / 1024.0), Some(-3.0)] {
                    let (mut a, mut b) = (p.clone(), p.clone());
                    onehot_row_base(&mut a, hit, s);
                    onehot_row(&mut b, hit, s);
                    let want: Vec<f32> = p
                        .iter()
                        .enumerate()
                        .map(|(j, &v)| {
                            let d = v - if j == hit { 1.0 } else { 0.0 };
                            s.map_or(d, |s| d * s)
                        })
                        .collect();
                    assert_eq!(a, want, "c = {c}, hit = {hit}, s = {s:?}");
                    assert_eq!(b, want, "c = {c}, hit = {hit}, s = {s:?}");
                }
            }
        }
    }
}
