//! Opaque kernels: ops without a fused CPU kernel, run whole.
//!
//! Native paths read their operands where they lie: `concat` and `pad` are strided
//! copies from each operand's view straight into the output (see [`super::copy`]),
//! `scatter_add` copies its base in and adds the update rows (see [`super::scatter`]),
//! `softmax_cross_entropy_with_logits` reads f32 logit rows in place, a gather from a
//! dense table copies only the selected rows, `rope` rotates dense rows in place
//! (see [`super::rope`]), and the scaled low-precision ops read dense operands in place
//! and write their result straight into the output (see [`super::scaled`]). Every other
//! op runs on materialized operands — natively for f32 convolution and its two
//! gradients (im2col + GEMM, [`super::conv`], [`super::conv_grad`]), f32 pooling and its
//! gradient ([`super::pool`]) and strided scaled operands, else through the oracle's
//! `eval_op` (correct, slow) — writing the result once.

use super::copy::{Copies, FineView, Job, Src, dense_strides, fine_view};
use super::loads::plan_load;
use super::operand::{Operand, Read, gather};
use rlx_compile::program::{Kernel, KernelKind, ViewStep};
use rlx_ir::{DType, DimBinding, IrResult, Op, Shape, TensorData, interp};

/// The native path an op takes, decided at bind time.
enum Native {
    /// Strided copies (and fills) straight into the output: concat, pad.
    Copy(Copies),
    /// The base copied into the output, then the update rows added.
    ScatterAdd { axis: usize, base: Copies },
    /// f32 cross-entropy rows.
    CrossEntropy,
    /// Rows of a dense table.
    GatherRows { axis: usize },
    /// Rotary embedding of dense operands.
    Rope(super::rope::RopePlan),
    /// The scaled low-precision ops on dense operands, read in place.
    Scaled,
    /// Materialize the operands and evaluate.
    None,
}

/// A bound opaque kernel.
pub(crate) struct OpaquePlan {
    op: Op,
    inputs: Vec<Operand>,
    out: Shape,
    out_buf: usize,
    native: Native,
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

/// The copy of a view into a dense destination of its dims, from element `dst_off` on,
/// where view dim `d` steps `dst[d]` elements.
fn job(op: &Operand, dst: &[isize], dst_off: usize) -> Option<Job> {
    match &op.read {
        Read::Fine(v, _) => Some(Job {
            src: Src::Buf {
                buf: op.buf,
                offset: v.offset,
            },
            dst_off,
            axes: v.axes(dst),
        }),
        Read::Table(_) => None,
    }
}

/// Copies writing the operands of a concat along `axis` into their slabs of `out`.
fn concat_copies(ins: &[Operand], axis: usize, out: &[usize], w: usize) -> Option<Copies> {
    let dst = dense_strides(out);
    let mut jobs = Vec::with_capacity(ins.len());
    let mut at = 0usize;
    for o in ins {
        jobs.push(job(o, &dst, at * dst[axis] as usize)?);
        at += o.dims[axis];
    }
    Some(Copies::new(jobs, w))
}

/// Copies writing a pad of `x` along `axis` (`before` fill elements first, the fill
/// `value` converted like the oracle's cast) into `out`.
fn pad_copies(
    x: &Operand,
    axis: usize,
    before: usize,
    value: f64,
    out: &[usize],
) -> Option<Copies> {
    let w = x.dtype.size_bytes();
    let fill = interp::eval_op(
        &Op::Cast { to: x.dtype },
        &[&TensorData::from_f64(&[], &[value])],
        &Shape::scalar(x.dtype),
    )
    .map(|d| d.bytes)
    .ok()
    .filter(|b| b.len() == w)?;
    let dst = dense_strides(out);
    let axis_stride = dst[axis] as usize;
    let mut jobs = vec![job(x, &dst, before * axis_stride)?];
    let after = out[axis] - before - x.dims[axis];
    // The fill: the `before` and `after` slabs of every outer row.
    for (start, len) in [(0, before), (before + x.dims[axis], after)] {
        if len == 0 {
            continue;
        }
        let mut dims = out.to_vec();
        dims[axis] = len;
        let fv = FineView::broadcast(&dims);
        jobs.push(Job {
            src: Src::Fill(fill.clone()),
            dst_off: start * axis_stride,
            axes: fv.axes(&dst),
        });
    }
    Some(Copies::new(jobs, w))
}

impl OpaquePlan {
    pub(crate) fn new(cx: super::loads::BindCtx<'_>, k: &Kernel) -> IrResult<OpaquePlan> {
        let super::loads::BindCtx {
            program: p,
            buffer_dims: bd,
            binding: b,
            ..
        } = cx;
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
                let dtype = p.buffers[l.buf].shape.dtype();
                let read = match fine_view(&bd[l.buf], &l.steps, b) {
                    Some(v) => {
                        let c = Copies::new(
                            vec![Job {
                                src: Src::Buf {
                                    buf: l.buf,
                                    offset: v.offset,
                                },
                                dst_off: 0,
                                axes: v.dense_axes(),
                            }],
                            dtype.size_bytes(),
                        );
                        Read::Fine(v, c)
                    }
                    None => Read::Table(plan_load(p, bd, l, &dims, b)?),
                };
                Ok(Operand {
                    buf: l.buf,
                    dtype,
                    dims,
                    read,
                })
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
        let dims = out.static_dims().unwrap_or_default();
        let same_dtype = inputs.iter().all(|i| i.dtype == out.dtype());
        let w = out.dtype().size_bytes();
        let native = match op {
            Op::Concat { axis } if same_dtype => concat_copies(&inputs, axis, &dims, w),
            Op::Pad {
                axis,
                before,
                value,
                ..
            } if same_dtype && before + inputs[0].dims[axis] <= dims[axis] => {
                pad_copies(&inputs[0], axis, before, value, &dims)
            }
            _ => None,
        }
        .map(Native::Copy)
        .unwrap_or_else(|| match op {
            Op::ScatterAdd { axis }
                if inputs[0].dtype == out.dtype()
                    && inputs[2].dtype == out.dtype()
                    && inputs[0].dims == dims =>
            {
                match job(&inputs[0], &dense_strides(&dims), 0) {
                    Some(j) => Native::ScatterAdd {
                        axis,
                        base: Copies::new(vec![j], w),
                    },
                    None => Native::None,
                }
            }
            Op::SoftmaxCrossEntropyWithLogits
                if inputs[0].dtype == DType::F32
                    && out.dtype() == DType::F32
                    && !inputs[0].dims.is_empty() =>
            {
                Native::CrossEntropy
            }
            Op::Gather { axis } => Native::GatherRows { axis },
            Op::Rope {
                head_dim,
                n_rot,
                style,
            } => super::rope::RopePlan::new(&inputs, head_dim, n_rot, style, out.dtype(), &dims)
                .map_or(Native::None, Native::Rope),
            Op::ScaledQuantScale { .. } | Op::ScaledQuantize { .. } | Op::ScaledMatMul { .. } => {
                Native::Scaled
            }
            _ => Native::None,
        });
        Ok(OpaquePlan {
            op,
            inputs,
            out,
            out_buf,
            native,
        })
    }

    pub(crate) fn run(&self, bases: &[*mut u8]) -> Result<(), String> {
        let dst = bases[self.out_buf];
        match &self.native {
            Native::Copy(c) => {
                // SAFETY: the copies were built from the bound views of this kernel's loads
                // (in bounds of their buffers) and the dense output dims (whose size
                // OpaquePlan::new checked against the store buffer); the slabs of a concat
                // and the interior and fill of a pad are disjoint; the store buffer is never
                // a buffer an opaque kernel reads (memplan writes in place only for
                // elementwise kernels, donation only for elementwise and contractions).
                unsafe { c.run(bases, dst) };
                return Ok(());
            }
            Native::ScatterAdd { axis, base } => {
                let [_, idx, upd] = &self.inputs[..] else {
                    unreachable!("scatter_add has three operands")
                };
                let (dims, dt) = (self.out.static_dims().unwrap_or_default(), self.out.dtype());
                let r =
                    // SAFETY: as for Copy; `base` writes the dense output, `dst` holds the
                    // bound result (checked in new), `upd` reads its bound view.
                    unsafe { super::scatter::run((*axis, dt, &dims), (base, idx, upd), bases, dst) };
                if let Some(r) = r {
                    return r;
                }
            }
            Native::CrossEntropy => {
                // SAFETY: the output buffer holds one f32 per logits row (checked in new),
                // the operands are the bound views of this kernel's loads.
                return unsafe {
                    super::nn_ops::cross_entropy_native(
                        &self.op,
                        &self.inputs[0],
                        &self.inputs[1],
                        bases,
                        dst as *mut f32,
                    )
                };
            }
            Native::GatherRows { axis } => {
                if let Some(r) = self.gather_rows(*axis, bases) {
                    return r;
                }
            }
            Native::Rope(plan) => {
                let bufs = [self.inputs[0].buf, self.inputs[1].buf, self.inputs[2].buf];
                // SAFETY: the plan was built from this kernel's bound dense operands; the
                // store buffer holds the result (checked in new) and is never one an
                // opaque kernel reads.
                unsafe { plan.run(bufs, bases, dst) };
                return Ok(());
            }
            Native::Scaled => {
                if self.scaled_in_place(bases).is_some() {
                    return Ok(());
                }
            }
            Native::None => {}
        }
        self.run_materialized(bases)
    }

    /// A scaled op whose operands are all dense, read where they lie, its result written
    /// straight into the store buffer (copying the f32 operands in and the result out
    /// cost a 1024² quantize-and-matmul about a third of its time). `None`, having
    /// written nothing: the generic path.
    fn scaled_in_place(&self, bases: &[*mut u8]) -> Option<()> {
        let views = self
            .inputs
            .iter()
            .map(|o| {
                let (off, w) = (o.dense_offset()?, o.dtype.size_bytes());
                let n: usize = o.dims.iter().product();
                // SAFETY: a dense operand is `n` consecutive elements of its bound buffer
                // from element `off` on; the buffer is not written while this kernel runs
                // (the store buffer is never one an opaque kernel reads).
                let bytes = unsafe { std::slice::from_raw_parts(bases[o.buf].add(off * w), n * w) };
                Some(rlx_ir::TensorView {
                    dtype: o.dtype,
                    dims: &o.dims,
                    bytes,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        let dims = self.out.static_dims()?;
        let want = self.out.size_bytes()?;
        // SAFETY: OpaquePlan::new checked that the store buffer holds exactly `want`
        // bytes, and it is distinct from every buffer an opaque kernel reads.
        let dst = unsafe { std::slice::from_raw_parts_mut(bases[self.out_buf], want) };
        super::scaled::eval_into(&self.op, &views, &dims, dst)
    }

    /// The generic path: every operand materialized, the op evaluated, the result copied.
    fn run_materialized(&self, bases: &[*mut u8]) -> Result<(), String> {
        let datas: Vec<TensorData> = self.inputs.iter().map(|o| gather(o, bases)).collect();
        let refs: Vec<&TensorData> = datas.iter().collect();
        let dims = self.out.static_dims().unwrap_or_default();
        let bytes = match super::movement::eval(&self.op, &refs, &dims) {
            Some(r) => r?,
            None => match super::conv::eval(&self.op, &refs, &dims)
                .or_else(|| super::conv_grad::eval(&self.op, &refs, &dims))
                .or_else(|| super::pool::eval(&self.op, &refs, &dims))
                .or_else(|| super::cumsum::eval(&self.op, &refs, &dims))
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
        if bytes.len() != want {
            return Err(format!(
                "{} produced {} bytes, expected {want} for {}",
                self.op.name(),
                bytes.len(),
                self.out
            ));
        }
        // SAFETY: `bytes` has exactly `want` bytes (checked above) and OpaquePlan::new
        // checked that `want` is the store buffer's bound size, so the copy stays inside both;
        // the result is a fresh Vec, distinct from every executor buffer.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), bases[self.out_buf], want) };
        Ok(())
    }

    /// A gather from a table stored densely in row-major order, read in place: only the
    /// indices are materialized and only the selected rows copied. Materializing the
    /// whole table cost an embedding lookup a copy of the table per call (98 MB per
    /// decoded token for a 32000 × 768 f32 embedding). `None`: the generic path.
    fn gather_rows(&self, axis: usize, bases: &[*mut u8]) -> Option<Result<(), String>> {
        let t = &self.inputs[0];
        let offset = t.dense_offset()?;
        if t.dtype != self.out.dtype() {
            return None;
        }
        let tdims = &t.dims;
        let idx =
            match super::movement::gather_indices(tdims, &gather(&self.inputs[1], bases), axis) {
                Ok(i) => i,
                Err(e) => return Some(Err(e)),
            };
        let w = t.dtype.size_bytes();
        let n = tdims[axis];
        let outer: usize = tdims[..axis].iter().product();
        let row = tdims[axis + 1..].iter().product::<usize>() * w;
        let want = self.out.size_bytes().unwrap_or(0);
        if outer * idx.len() * row != want {
            return None;
        }
        let src = bases[t.buf] as *const u8;
        let dst = bases[self.out_buf];
        // SAFETY: the table buffer holds `outer·n` rows of `row` bytes from element
        // `offset` on (a dense view of its dims), every index is below `n` (checked by
        // gather_indices), and the output buffer holds `outer·len(idx)` rows (checked
        // against its bound size above); the buffers are distinct.
        unsafe { super::movement::copy_rows(src.add(offset * w), dst, (outer, n), &idx, row) };
        Some(Ok(()))
    }
}
