//! The CPU fallback for kernels the GPU does not run: every kernel kind evaluated op
//! by op with the oracle ([`rlx_ir::interp::eval_op`]) on materialized operands.
//!
//! Each expression node maps back to the IR op it was fused from (`Unary` →
//! `Activation`, `Cast` → `Cast`, …), so a fallback kernel computes exactly what the
//! oracle computes for the unfused graph: slow, never wrong.

use rlx_compile::program::{
    BufId, EOp, Expr, Kernel, KernelKind, Load, Program, RowOp, Scalar, ViewStep, view::gather_map,
};
use rlx_ir::{DType, Dim, DimBinding, Op, Shape, TensorData, interp};

/// Dims of the view `steps` over a buffer of `buf` dims.
pub(crate) fn view_dims(buf: &[usize], steps: &[ViewStep], b: &DimBinding) -> Option<Vec<usize>> {
    let mut d = buf.to_vec();
    for s in steps {
        d = match s {
            ViewStep::Reshape(x) | ViewStep::Expand(x) => {
                x.iter().map(|v| v.resolve(b)).collect::<Option<Vec<_>>>()?
            }
            ViewStep::Transpose(p) => p.iter().map(|&i| d[i]).collect(),
            ViewStep::Narrow { axis, len, .. } => {
                let mut n = d.clone();
                n[*axis] = *len;
                n
            }
        };
    }
    Some(d)
}

/// Symbolic dims of the view `steps` over a buffer of `buf` dims.
pub(crate) fn view_dims_sym(buf: &[Dim], steps: &[ViewStep]) -> Vec<Dim> {
    rlx_compile::program::chain_dims(buf, steps)
        .pop()
        .expect("the chain starts with the buffer's dims")
}

/// The elements load `l` reads from `buf`, as dense data.
fn view(l: &Load, buf: &TensorData, b: &DimBinding) -> Result<TensorData, String> {
    let dims = view_dims(&buf.dims, &l.steps, b).ok_or("unbound dynamic dim in a view")?;
    if l.steps.is_empty() {
        return Ok(buf.clone());
    }
    let map = gather_map(&buf.dims, &l.steps, b).ok_or("unbound dynamic dim in a view")?;
    let w = buf.dtype.size_bytes();
    let mut bytes = Vec::with_capacity(map.len() * w);
    for &o in &map {
        bytes.extend_from_slice(&buf.bytes[o * w..(o + 1) * w]);
    }
    TensorData::new(buf.dtype, &dims, bytes).map_err(|e| e.to_string())
}

/// A literal of dtype `dt` repeated over `dims`.
fn literal(s: Scalar, dt: DType, dims: &[usize]) -> TensorData {
    let n: usize = dims.iter().product();
    match s {
        Scalar::F(v) if dt.is_float() || dt.is_complex() => {
            TensorData::from_f64_as(dt, dims, &vec![v; n])
        }
        Scalar::F(v) => TensorData::from_i64_as(dt, dims, &vec![v as i64; n]),
        Scalar::I(v) if dt.is_float() => TensorData::from_f64_as(dt, dims, &vec![v as f64; n]),
        Scalar::I(v) => TensorData::from_i64_as(dt, dims, &vec![v; n]),
    }
}

/// Evaluate `e` over `space`; `loads[i]` is load `i` viewed in that space.
fn eval_expr(
    e: &Expr,
    space: &[usize],
    loads: &mut dyn FnMut(usize) -> Result<TensorData, String>,
    core: Option<&TensorData>,
) -> Result<Vec<TensorData>, String> {
    let mut vals: Vec<TensorData> = Vec::with_capacity(e.nodes.len());
    for n in &e.nodes {
        let out = Shape::new(space, n.dtype);
        let arg = |k: usize| &vals[n.args[k] as usize];
        let op = match &n.op {
            EOp::Load(l) => {
                let v = loads(*l)?;
                vals.push(v);
                continue;
            }
            EOp::Const(s) => {
                vals.push(literal(*s, n.dtype, space));
                continue;
            }
            EOp::Core => {
                vals.push(core.ok_or("epilogue without a core value")?.clone());
                continue;
            }
            EOp::Unary(a) => Op::Activation(*a),
            EOp::Binary(b) => Op::Binary(*b),
            EOp::Compare(c) => Op::Compare(*c),
            EOp::Where => Op::Where,
            EOp::Cast => Op::Cast { to: n.dtype },
            EOp::RoundToFormat {
                exp_bits,
                man_bits,
                max_normal,
            } => Op::RoundToFormat {
                exp_bits: *exp_bits,
                man_bits: *man_bits,
                max_normal: *max_normal,
            },
        };
        let ins: Vec<&TensorData> = (0..n.args.len()).map(arg).collect();
        let v = interp::eval_op(&op, &ins, &out).map_err(|e| e.to_string())?;
        vals.push(v);
    }
    Ok(vals)
}

/// Concrete dims of `d`.
fn bind(d: &[Dim], b: &DimBinding) -> Result<Vec<usize>, String> {
    d.iter()
        .map(|x| x.resolve(b))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| "a dynamic dim no argument binds".to_string())
}

/// Run kernel `k` of `p` on the host. `data(b)` is the current value of buffer `b`.
/// Returns the value of every buffer the kernel writes.
pub(crate) fn run_kernel(
    p: &Program,
    k: &Kernel,
    binding: &DimBinding,
    data: &dyn Fn(BufId) -> TensorData,
) -> Result<Vec<(BufId, TensorData)>, String> {
    let mut load = |i: usize| -> Result<TensorData, String> {
        let l = &k.loads[i];
        view(l, &data(l.buf), binding)
    };
    let store_all = |vals: &[TensorData]| -> Vec<(BufId, TensorData)> {
        k.stores
            .iter()
            .map(|s| (s.buf, vals[s.value as usize].clone()))
            .collect()
    };
    let out = match &k.kind {
        KernelKind::Elementwise { space, expr } => {
            let dims = bind(space, binding)?;
            store_all(&eval_expr(expr, &dims, &mut load, None)?)
        }
        KernelKind::Reduce {
            op,
            in_space,
            axes,
            keep_dim,
            prologue,
            input,
            out_space,
            dtype,
            epilogue,
        } => {
            let ind = bind(in_space, binding)?;
            let outd = bind(out_space, binding)?;
            let pv = eval_expr(prologue, &ind, &mut load, None)?;
            let x = &pv[*input as usize];
            let rop = Op::Reduce {
                op: *op,
                axes: axes.clone(),
                keep_dim: *keep_dim,
            };
            let r = interp::eval_op(&rop, &[x], &Shape::new(&outd, x.dtype))
                .map_err(|e| e.to_string())?;
            let r = to_dtype(r, *dtype, &outd)?;
            store_all(&eval_expr(epilogue, &outd, &mut load, Some(&r))?)
        }
        KernelKind::Row {
            op,
            space,
            prologue,
            input,
            params,
            dtype,
            epilogue,
        } => {
            let dims = bind(space, binding)?;
            let pv = eval_expr(prologue, &dims, &mut load, None)?;
            let x = &pv[*input as usize];
            let op = match op {
                RowOp::Softmax => Op::Softmax { axis: -1 },
                RowOp::LogSoftmax => Op::LogSoftmax { axis: -1 },
                RowOp::LayerNorm { eps } => Op::LayerNorm {
                    axis: -1,
                    eps: *eps,
                },
                RowOp::RmsNorm { eps } => Op::RmsNorm {
                    axis: -1,
                    eps: *eps,
                },
            };
            let mut ins = vec![x.clone()];
            if let Some((g, b)) = params {
                ins.push(load(*g)?);
                ins.push(load(*b)?);
            }
            let refs: Vec<&TensorData> = ins.iter().collect();
            let r = interp::eval_op(&op, &refs, &Shape::new(&dims, *dtype))
                .map_err(|e| e.to_string())?;
            let r = to_dtype(r, *dtype, &dims)?;
            store_all(&eval_expr(epilogue, &dims, &mut load, Some(&r))?)
        }
        KernelKind::Contraction {
            a,
            b,
            out_space,
            dtype,
            epilogue,
        } => {
            let dims = bind(out_space, binding)?;
            let (av, bv) = (load(*a)?, load(*b)?);
            let r = interp::eval_op(&Op::MatMul, &[&av, &bv], &Shape::new(&dims, *dtype))
                .map_err(|e| e.to_string())?;
            let r = to_dtype(r, *dtype, &dims)?;
            store_all(&eval_expr(epilogue, &dims, &mut load, Some(&r))?)
        }
        KernelKind::Attention {
            op,
            inputs,
            out_space,
            dtype,
            epilogue,
        } => {
            let dims = bind(out_space, binding)?;
            let ins = inputs
                .iter()
                .map(|&i| load(i))
                .collect::<Result<Vec<_>, _>>()?;
            let refs: Vec<&TensorData> = ins.iter().collect();
            let r = interp::eval_op(op, &refs, &Shape::new(&dims, *dtype))
                .map_err(|e| e.to_string())?;
            let r = to_dtype(r, *dtype, &dims)?;
            store_all(&eval_expr(epilogue, &dims, &mut load, Some(&r))?)
        }
        KernelKind::RowGroup { .. } => {
            return Err(
                "row_group kernels are not run on the host (compile with row_groups off, as \
                 rlx_wgpu::compile_options does)"
                    .to_string(),
            );
        }
        KernelKind::Opaque { op, inputs, out } => {
            let ins = inputs
                .iter()
                .map(|&i| load(i))
                .collect::<Result<Vec<_>, _>>()?;
            let refs: Vec<&TensorData> = ins.iter().collect();
            let r = interp::eval_op(op, &refs, &out.bind(binding)).map_err(|e| e.to_string())?;
            vec![(k.stores[0].buf, r)]
        }
    };
    // Every stored value must match its buffer exactly (dims and dtype).
    out.into_iter()
        .map(|(b, v)| {
            let want = bind(p.buffers[b].shape.dims(), binding)?;
            let dt = p.buffers[b].shape.dtype();
            let v = if v.dims != want && v.numel() == 1 {
                broadcast1(&v, &want)
            } else {
                v
            };
            if v.dims != want || v.dtype != dt {
                return Err(format!(
                    "host kernel produced {:?} {} for buffer {b} of type {}",
                    v.dims, v.dtype, p.buffers[b].shape
                ));
            }
            Ok((b, v))
        })
        .collect()
}

/// A one-element value repeated over `dims`.
fn broadcast1(v: &TensorData, dims: &[usize]) -> TensorData {
    let n: usize = dims.iter().product();
    TensorData {
        dtype: v.dtype,
        dims: dims.to_vec(),
        bytes: v.bytes.repeat(n),
    }
}

/// `r` converted to `dt` (the oracle's cast) when a core op's natural dtype differs.
fn to_dtype(r: TensorData, dt: DType, dims: &[usize]) -> Result<TensorData, String> {
    if r.dtype == dt {
        return Ok(r);
    }
    interp::eval_op(&Op::Cast { to: dt }, &[&r], &Shape::new(dims, dt)).map_err(|e| e.to_string())
}
