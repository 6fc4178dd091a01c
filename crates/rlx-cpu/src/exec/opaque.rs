//! Opaque kernels: ops without a specialized CPU kernel run on materialized operands —
//! natively for data movement (`concat`, `pad`, `gather`) and f32 convolution
//! (im2col + GEMM), else through the oracle's
//! `eval_op` (correct, slow) — writing the result once.

use super::bind::plan_load;
use super::loads::LoadPlan;
use super::par::unravel_into;
use rlx_compile::program::{Kernel, KernelKind, Program, ViewStep};
use rlx_ir::{DType, DimBinding, IrResult, Op, Shape, TensorData, interp};

/// A bound opaque kernel.
pub(crate) struct OpaquePlan {
    op: Op,
    inputs: Vec<(LoadPlan, Vec<usize>)>,
    out: Shape,
    out_buf: usize,
}

/// Dims of a load's view.
pub(crate) fn view_dims(buf: &[usize], steps: &[ViewStep], b: &DimBinding) -> Vec<usize> {
    let mut d = buf.to_vec();
    for s in steps {
        d = match s {
            ViewStep::Reshape(x) | ViewStep::Expand(x) => {
                x.iter().map(|v| v.resolve(b).unwrap()).collect()
            }
            ViewStep::Transpose(p) => p.iter().map(|&i| d[i]).collect(),
            ViewStep::Narrow { axis, len, .. } => {
                let mut n = d.clone();
                n[*axis] = *len;
                n
            }
        };
    }
    d
}

impl OpaquePlan {
    pub(crate) fn new(
        p: &Program,
        bd: &[Vec<usize>],
        k: &Kernel,
        b: &DimBinding,
    ) -> IrResult<OpaquePlan> {
        let (op, ins, out) = match &k.kind {
            KernelKind::Opaque { op, inputs, out } => (op.clone(), inputs.clone(), out.clone()),
            KernelKind::Attention {
                op,
                inputs,
                out_space,
                dtype,
                ..
            } => (
                op.clone(),
                inputs.clone(),
                Shape::from_dims(out_space, *dtype),
            ),
            _ => unreachable!(),
        };
        let inputs = ins
            .iter()
            .map(|&i| {
                let l = &k.loads[i];
                let dims = view_dims(&bd[l.buf], &l.steps, b);
                Ok((plan_load(p, bd, l, &dims, b)?, dims))
            })
            .collect::<IrResult<Vec<_>>>()?;
        let (out, out_buf) = (out.bind(b), k.stores[0].buf);
        // `run` copies the result's bytes into the store buffer: they must be its size.
        let buf_bytes =
            bd[out_buf].iter().product::<usize>() * p.buffers[out_buf].shape.dtype().size_bytes();
        if out.size_bytes() != Some(buf_bytes) {
            return Err(rlx_ir::IrError::new(
                "cpu",
                format!(
                    "internal: {} kernel result {out} does not match its buffer {out_buf} ({buf_bytes} bytes)",
                    op.name()
                ),
            ));
        }
        Ok(OpaquePlan {
            op,
            inputs,
            out,
            out_buf,
        })
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        if let Op::Gather { axis } = self.op
            && let Some(r) = self.gather_rows(axis, bases)
        {
            return r;
        }
        let datas: Vec<TensorData> = self
            .inputs
            .iter()
            .map(|(p, dims)| gather(p, dims, bases))
            .collect();
        let refs: Vec<&TensorData> = datas.iter().collect();
        let dims = self.out.static_dims().unwrap_or_default();
        let bytes = match super::movement::eval(&self.op, &refs, &dims) {
            Some(r) => r?,
            None => match super::conv::eval(&self.op, &refs, &dims)
                .or_else(|| super::scaled::eval(&self.op, &refs, &dims))
                .map(Ok)
                .or_else(|| super::nn_ops::eval(&self.op, &refs, &dims))
            {
                Some(Err(e)) => return Err(e),
                Some(Ok(b)) => b,
                None => {
                    interp::eval_op(&self.op, &refs, &self.out)
                        .map_err(|e| e.to_string())?
                        .bytes
                }
            },
        };
        let want = self.out.size_bytes().unwrap_or(0);
        let r = TensorData {
            dtype: self.out.dtype(),
            dims,
            bytes,
        };
        if r.bytes.len() != want {
            return Err(format!(
                "{} produced {} bytes, expected {want} for {}",
                self.op.name(),
                r.bytes.len(),
                self.out
            ));
        }
        // SAFETY: `r.bytes` has exactly `want` bytes (checked above) and OpaquePlan::new
        // checked that `want` is the store buffer's bound size, so the copy stays inside both;
        // the result is a fresh Vec, distinct from every executor buffer.
        unsafe { std::ptr::copy_nonoverlapping(r.bytes.as_ptr(), bases[self.out_buf], want) };
        Ok(())
    }
}

impl OpaquePlan {
    /// A gather from a table stored densely in row-major order, read in place: only the
    /// indices are materialized and only the selected rows copied. Materializing the
    /// whole table cost an embedding lookup a copy of the table per call (98 MB per
    /// decoded token for a 32000 × 768 f32 embedding). `None`: the generic path.
    fn gather_rows(&self, axis: usize, bases: &[*mut u8]) -> Option<Result<(), String>> {
        let (tp, tdims) = &self.inputs[0];
        let dense = rlx_compile::program::Strided::dense(tdims).strides;
        if tp.table.is_some() || tp.strides != dense || tp.dtype != self.out.dtype() {
            return None;
        }
        let (ip, idims) = &self.inputs[1];
        let idx = match super::movement::gather_indices(tdims, &gather(ip, idims, bases), axis) {
            Ok(i) => i,
            Err(e) => return Some(Err(e)),
        };
        let w = tp.dtype.size_bytes();
        let n = tdims[axis];
        let outer: usize = tdims[..axis].iter().product();
        let row = tdims[axis + 1..].iter().product::<usize>() * w;
        let want = self.out.size_bytes().unwrap_or(0);
        if outer * idx.len() * row != want {
            return None;
        }
        let src = bases[tp.buf] as *const u8;
        let dst = bases[self.out_buf];
        for o in 0..outer {
            for (j, &k) in idx.iter().enumerate() {
                // SAFETY: the table buffer holds `outer·n` rows of `row` bytes from element
                // `offset` on (a dense view of its dims), `k < n` (checked by
                // gather_indices), and the output buffer holds `outer·len(idx)` rows
                // (checked against its bound size above); the buffers are distinct.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add(tp.offset * w + (o * n + k) * row),
                        dst.add((o * idx.len() + j) * row),
                        row,
                    );
                }
            }
        }
        Some(Ok(()))
    }
}

/// The elements a load reads, as owned dense data.
pub(crate) fn gather(p: &LoadPlan, dims: &[usize], bases: &[*mut u8]) -> TensorData {
    let dt: DType = p.dtype;
    let w = dt.size_bytes();
    let n: usize = dims.iter().product();
    let src = bases[p.buf] as *const u8;
    let mut bytes = vec![0u8; n * w];
    if p.table.is_none() && p.flat_dense {
        // SAFETY: a dense plan reads elements `offset..offset + n` of its buffer (n = the
        // view's element count, inside the buffer by the binder's construction); `bytes` is a
        // fresh Vec of `n·w` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.add(p.offset * w), bytes.as_mut_ptr(), n * w) };
    } else {
        let mut idx = vec![0usize; dims.len()];
        for f in 0..n {
            let off = match &p.table {
                Some(t) => t[f],
                None => {
                    unravel_into(f, dims, &mut idx);
                    (p.offset as isize
                        + idx
                            .iter()
                            .zip(&p.strides)
                            .map(|(&i, &s)| i as isize * s)
                            .sum::<isize>()) as usize
                }
            };
            // SAFETY: `off` is a table entry or `offset + Σ idx·stride` of the bound plan for
            // an index inside `dims`: an element of the source buffer; `f < n` is an element of
            // the fresh `bytes` (`n·w` bytes).
            unsafe {
                std::ptr::copy_nonoverlapping(src.add(off * w), bytes.as_mut_ptr().add(f * w), w)
            };
        }
    }
    TensorData {
        dtype: dt,
        dims: dims.to_vec(),
        bytes,
    }
}
