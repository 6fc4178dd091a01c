//! Shape inference: the result type of every op, or an error naming the op,
//! the shapes, and the fix.

use crate::op::{MaskKind, ReduceOp, SynthKind};
use crate::{DType, Dim, Graph, IrError, IrResult, NodeId, Op, ScaleLayout, Shape};

/// The result type of applying `op` to operands of types `inputs`.
///
/// Leaf ops (`Input`, `Param`, `Constant`) carry their own shape and are
/// rejected here; build them with [`Graph::input`], [`Graph::param`] or
/// [`Graph::add_node`].
///
/// ```
/// use rlx_ir::{infer_shape, DType, Op, Shape};
/// let a = Shape::new(&[2, 3], DType::F32);
/// let b = Shape::new(&[3, 4], DType::F32);
/// assert_eq!(infer_shape(&Op::MatMul, &[&a, &b]).unwrap(), Shape::new(&[2, 4], DType::F32));
/// let err = infer_shape(&Op::MatMul, &[&a, &a]).unwrap_err();
/// assert!(err.to_string().contains("inner dimensions"));
/// ```
pub fn infer_shape(op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    let name = op.name();
    let e = |msg: String| IrError::new(name.clone(), msg);
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => Err(e(
            "leaf ops carry their own shape; create them with Graph::input, Graph::param or Graph::add_node".into(),
        )),
        Op::Activation(a) => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            let dt = x.dtype();
            if dt == DType::Bool || dt.is_complex() || (dt.is_int() && !a.integer_closed()) {
                return Err(e(format!(
                    "{} is not defined for dtype {dt} (input {x}); cast to f32 first with .cast(DType::F32)",
                    a.name()
                )));
            }
            Ok(x.clone())
        }
        Op::Cast { to } => {
            arity(&name, inputs, 1)?;
            Ok(inputs[0].with_dtype(*to))
        }
        Op::StopGradient => {
            arity(&name, inputs, 1)?;
            Ok(inputs[0].clone())
        }
        Op::RoundToFormat { exp_bits, man_bits, .. } => {
            arity(&name, inputs, 1)?;
            require_float(&name, inputs[0])?;
            if *exp_bits == 0 || *exp_bits > 8 || *man_bits > 23 {
                return Err(e(format!(
                    "format with {exp_bits} exponent and {man_bits} mantissa bits is outside f32's range (need 1..=8 and 0..=23)"
                )));
            }
            Ok(inputs[0].clone())
        }
        Op::Binary(b) => {
            arity(&name, inputs, 2)?;
            let (l, r) = (inputs[0], inputs[1]);
            let dt = l.dtype();
            if dt.is_complex() {
                return Err(e(format!("complex operands ({l}) are not supported by element-wise ops")));
            }
            if b.is_bitwise() && !(dt.is_int() || (dt == DType::Bool && !matches!(b, crate::BinaryOp::Shl | crate::BinaryOp::Shr))) {
                return Err(e(format!("bitwise op needs integer (or bool for and/or/xor) operands, got {l}")));
            }
            if dt == DType::Bool && !b.is_bitwise() && !matches!(b, crate::BinaryOp::Max | crate::BinaryOp::Min) {
                return Err(e(format!(
                    "arithmetic on bool operands ({l}); cast to f32 or an integer type first"
                )));
            }
            if matches!(b, crate::BinaryOp::Atan2) && !dt.is_float() {
                return Err(e(format!("atan2 needs float operands, got {l}; cast first")));
            }
            broadcast(&name, l, r)
        }
        Op::Compare(_) => {
            arity(&name, inputs, 2)?;
            Ok(broadcast(&name, inputs[0], inputs[1])?.with_dtype(DType::Bool))
        }
        Op::Where => {
            arity(&name, inputs, 3)?;
            let (m, t, f) = (inputs[0], inputs[1], inputs[2]);
            let tf = broadcast(&name, t, f)?;
            let all = m.with_dtype(t.dtype()).broadcast_with(&tf).map_err(|msg| {
                e(format!("mask {m} does not broadcast with the branches: {msg}"))
            })?;
            Ok(all.with_dtype(t.dtype()))
        }
        Op::MatMul => {
            arity(&name, inputs, 2)?;
            matmul_shape(&name, inputs[0], inputs[1])
        }
        Op::FusedMatMulBiasAct { .. } => {
            arity(&name, inputs, 3)?;
            let (x, w, b) = (inputs[0], inputs[1], inputs[2]);
            if w.rank() != 2 {
                return Err(e(format!("weight must be 2-D [in, out] after transposition, got {w}")));
            }
            let out = matmul_shape(&name, x, w)?;
            let n = w.dim(1);
            if !(b.rank() == 1 && b.dim(0) == n || b.rank() == 0) {
                return Err(e(format!(
                    "bias must have shape [{n}] to match the weight's out dim, got {b}"
                )));
            }
            Ok(out)
        }
        Op::DenseSolve => {
            arity(&name, inputs, 2)?;
            let (a, b) = (inputs[0], inputs[1]);
            require_float(&name, a)?;
            if a.rank() < 2 || a.dim(a.rank() - 1) != a.dim(a.rank() - 2) {
                return Err(e(format!("the system matrix must be square [.., n, n], got {a}")));
            }
            let n = a.dim(a.rank() - 1);
            let bn = if b.rank() == a.rank() - 1 {
                b.dim(b.rank() - 1)
            } else if b.rank() == a.rank() {
                b.dim(b.rank() - 2)
            } else {
                return Err(e(format!("right-hand side must be [.., n] or [.., n, k] for a = {a}, got {b}")));
            };
            if bn != n {
                return Err(e(format!("a is {a} but b has {bn} rows; they must match ({n})")));
            }
            Ok(b.clone())
        }
        Op::LayerNorm { axis, .. } | Op::RmsNorm { axis, .. } => {
            arity(&name, inputs, 3)?;
            let x = inputs[0];
            require_float(&name, x)?;
            let ax = norm_axis(&name, *axis as i64, x.rank())?;
            if ax + 1 != x.rank() {
                return Err(e(format!("only the last axis can be normalized (axis {axis} of {x}); transpose first")));
            }
            let c = x.dim(ax);
            for (what, p) in [("gamma", inputs[1]), ("beta", inputs[2])] {
                let ok = p.rank() == 0 || (p.rank() == 1 && (p.dim(0) == c || p.dim(0) == Dim::Static(1)));
                if !ok {
                    return Err(e(format!("{what} must have shape [{c}] (the normalized axis of {x}), got {p}")));
                }
            }
            Ok(x.clone())
        }
        Op::Attention {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            ..
        } => attention_shape(&name, inputs, *num_heads, *head_dim, *v_head_dim, *mask_kind),
        Op::Rope { head_dim, n_rot, .. } => {
            arity(&name, inputs, 3)?;
            let x = inputs[0];
            require_float(&name, x)?;
            if *n_rot > *head_dim || n_rot % 2 != 0 || *n_rot == 0 {
                return Err(e(format!("n_rot ({n_rot}) must be even, non-zero and ≤ head_dim ({head_dim})")));
            }
            match x.rank() {
                3 => {
                    if let Some(h) = x.dim(2).as_static() {
                        if h % head_dim != 0 {
                            return Err(e(format!("hidden size {h} of {x} is not a multiple of head_dim {head_dim}")));
                        }
                    }
                }
                4 => {
                    if x.dim(3) != Dim::Static(*head_dim) {
                        return Err(e(format!("last axis of {x} must equal head_dim {head_dim}")));
                    }
                }
                _ => return Err(e(format!("x must be [B, S, hidden] or [B, S, H, head_dim], got {x}"))),
            }
            let half = n_rot / 2;
            for (what, t) in [("cos", inputs[1]), ("sin", inputs[2])] {
                match t.rank() {
                    1 => {
                        if let (Some(len), Some(s)) = (t.dim(0).as_static(), x.dim(1).as_static()) {
                            if len < s * half {
                                return Err(e(format!(
                                    "{what} table {t} is too short: a rank-1 table needs seq_len·n_rot/2 = {} entries",
                                    s * half
                                )));
                            }
                        }
                    }
                    2 => {
                        if let Some(w) = t.dim(1).as_static() {
                            if w < half {
                                return Err(e(format!("{what} table {t} rows must have at least n_rot/2 = {half} columns")));
                            }
                        }
                        if let (Some(rows), Some(s)) = (t.dim(0).as_static(), x.dim(1).as_static()) {
                            if rows < s {
                                return Err(e(format!("{what} table {t} has fewer rows than the sequence length {s}")));
                            }
                        }
                    }
                    _ => return Err(e(format!("{what} table must be rank 1 or 2, got {t}"))),
                }
            }
            Ok(x.clone())
        }
        Op::Reshape { new_shape } => {
            arity(&name, inputs, 1)?;
            reshape_shape(&name, inputs[0], new_shape)
        }
        Op::Transpose { perm } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            let mut seen = vec![false; x.rank()];
            if perm.len() != x.rank() || perm.iter().any(|&p| p >= x.rank() || std::mem::replace(&mut seen[p], true)) {
                return Err(e(format!(
                    "perm {perm:?} is not a permutation of 0..{} for {x}",
                    x.rank()
                )));
            }
            Ok(x.with_dims(perm.iter().map(|&p| x.dim(p)).collect()))
        }
        Op::Narrow { axis, start, len } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            check_axis(&name, *axis, x)?;
            if let Some(n) = x.dim(*axis).as_static() {
                if start + len > n {
                    return Err(e(format!(
                        "range {start}..{} exceeds axis {axis} of size {n} in {x}",
                        start + len
                    )));
                }
            }
            Ok(x.with_dim(*axis, Dim::Static(*len)))
        }
        Op::Pad { axis, before, after, .. } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            check_axis(&name, *axis, x)?;
            match x.dim(*axis) {
                Dim::Static(n) => Ok(x.with_dim(*axis, Dim::Static(n + before + after))),
                d if before + after == 0 => Ok(x.with_dim(*axis, d)),
                d => Err(e(format!("cannot pad dynamic axis {axis} ({d}) of {x}: the padded size is not a symbol"))),
            }
        }
        Op::Concat { axis } => {
            if inputs.is_empty() {
                return Err(e("needs at least one tensor".into()));
            }
            let first = inputs[0];
            check_axis(&name, *axis, first)?;
            let mut total = Some(0usize);
            for (i, t) in inputs.iter().enumerate() {
                if t.rank() != first.rank() || t.dtype() != first.dtype() {
                    return Err(e(format!("tensor {i} is {t} but tensor 0 is {first}: ranks and dtypes must match")));
                }
                for a in 0..first.rank() {
                    if a != *axis && t.dim(a) != first.dim(a) {
                        return Err(e(format!(
                            "tensor {i} is {t} but tensor 0 is {first}: every axis except {axis} must match (axis {a} differs)"
                        )));
                    }
                }
                total = match (total, t.dim(*axis).as_static()) {
                    (Some(acc), Some(n)) => Some(acc + n),
                    _ => None,
                };
            }
            match total {
                Some(n) => Ok(first.with_dim(*axis, Dim::Static(n))),
                None if inputs.len() == 1 => Ok(first.clone()),
                None => Err(e(format!("cannot concatenate along dynamic axis {axis}: the total size is not a symbol"))),
            }
        }
        Op::Expand { target_shape } => {
            arity(&name, inputs, 1)?;
            expand_shape(&name, inputs[0], target_shape)
        }
        Op::Gather { axis } => {
            arity(&name, inputs, 2)?;
            let (table, idx) = (inputs[0], inputs[1]);
            check_axis(&name, *axis, table)?;
            require_index(&name, idx)?;
            let mut dims = table.dims()[..*axis].to_vec();
            dims.extend_from_slice(idx.dims());
            dims.extend_from_slice(&table.dims()[axis + 1..]);
            Ok(table.with_dims(dims))
        }
        Op::ScatterAdd { axis } => {
            arity(&name, inputs, 3)?;
            let (base, idx, upd) = (inputs[0], inputs[1], inputs[2]);
            check_axis(&name, *axis, base)?;
            require_index(&name, idx)?;
            let expected = infer_shape(&Op::Gather { axis: *axis }, &[base, idx])?;
            if expected.dims() != upd.dims() {
                return Err(e(format!(
                    "updates are {upd} but gathering {base} at {idx} along axis {axis} gives {expected}; they must match"
                )));
            }
            Ok(base.clone())
        }
        Op::Reduce { op, axes, keep_dim } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            if x.dtype() == DType::Bool && !matches!(op, ReduceOp::Max | ReduceOp::Min) {
                return Err(e(format!("{} of bool ({x}); cast to an integer or float type first", op.name())));
            }
            if x.dtype().is_complex() {
                return Err(e(format!("complex input {x} is not supported")));
            }
            reduce_shape(&name, x, axes, *keep_dim)
        }
        Op::ArgMax { axis, keep_dim } | Op::ArgMin { axis, keep_dim } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            if x.dtype() == DType::Bool || x.dtype().is_complex() {
                return Err(e(format!("needs a real numeric input, got {x}")));
            }
            if let Some(0) = x.dims().get(*axis).and_then(|d| d.as_static()) {
                return Err(e(format!("axis {axis} of {x} is empty: there is no extremum")));
            }
            reduce_shape(&name, x, &[*axis], *keep_dim)
        }
        Op::Cumsum { axis, .. } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            if x.dtype() == DType::Bool || x.dtype().is_complex() {
                return Err(e(format!("needs a real numeric input, got {x}")));
            }
            norm_axis(&name, *axis as i64, x.rank())?;
            Ok(x.clone())
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            arity(&name, inputs, 1)?;
            require_float(&name, inputs[0])?;
            norm_axis(&name, *axis as i64, inputs[0].rank())?;
            Ok(inputs[0].clone())
        }
        Op::SoftmaxCrossEntropy => {
            arity(&name, inputs, 2)?;
            let (l, t) = (inputs[0], inputs[1]);
            require_float(&name, l)?;
            if l.rank() < 1 || l.dims() != t.dims() {
                return Err(e(format!("logits {l} and dense targets {t} must have the same shape [N, C]")));
            }
            Ok(l.with_dims(l.dims()[..l.rank() - 1].to_vec()))
        }
        Op::SoftmaxCrossEntropyWithLogits => {
            arity(&name, inputs, 2)?;
            let (l, y) = (inputs[0], inputs[1]);
            require_float(&name, l)?;
            if l.rank() < 1 || y.dims() != &l.dims()[..l.rank() - 1] {
                return Err(e(format!(
                    "labels {y} must have the logits' shape {l} without the class axis (one class index per row)"
                )));
            }
            Ok(l.with_dims(l.dims()[..l.rank() - 1].to_vec()))
        }
        Op::Conv {
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
        } => {
            if inputs.len() != 2 && inputs.len() != 3 {
                return Err(e(format!("takes [x, w] or [x, w, bias], got {} inputs", inputs.len())));
            }
            let out = conv_shape(&name, inputs[0], inputs[1], kernel_size, stride, padding, dilation, *groups)?;
            if let Some(b) = inputs.get(2) {
                if b.rank() != 1 || b.dim(0) != inputs[1].dim(0) {
                    return Err(e(format!("bias must be [C_out] = [{}], got {b}", inputs[1].dim(0))));
                }
            }
            Ok(out)
        }
        Op::ConvGradInput {
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
        }
        | Op::ConvGradWeight {
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
        } => {
            arity(&name, inputs, 3)?;
            let out = conv_shape(&name, inputs[0], inputs[1], kernel_size, stride, padding, dilation, *groups)?;
            if out.dims() != inputs[2].dims() {
                return Err(e(format!("grad_out is {} but the convolution produces {out}", inputs[2])));
            }
            Ok(if matches!(op, Op::ConvGradInput { .. }) { inputs[0].clone() } else { inputs[1].clone() })
        }
        Op::Pool {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            arity(&name, inputs, 1)?;
            pool_shape(&name, inputs[0], *kind, kernel_size, stride, padding)
        }
        Op::PoolGrad {
            kind,
            kernel_size,
            stride,
            padding,
        } => {
            arity(&name, inputs, 2)?;
            let out = pool_shape(&name, inputs[0], *kind, kernel_size, stride, padding)?;
            if out.dims() != inputs[1].dims() {
                return Err(e(format!("grad_out is {} but the pool produces {out}", inputs[1])));
            }
            Ok(inputs[0].clone())
        }
        Op::SynthMatMul {
            kind: SynthKind::Codebook { entry_dim, num_entries },
        } => {
            arity(&name, inputs, 3)?;
            let (x, idx, cb) = (inputs[0], inputs[1], inputs[2]);
            require_float(&name, x)?;
            let (ed, ne) = (*entry_dim as usize, *num_entries as usize);
            if ed == 0 || ne == 0 || ne > 256 {
                return Err(e(format!("entry_dim ({ed}) must be ≥ 1 and num_entries ({ne}) in 1..=256 (u8 indices)")));
            }
            if x.rank() < 1 {
                return Err(e(format!("x must be [.., k], got {x}")));
            }
            let k = x.dim(x.rank() - 1);
            if cb.dims() != [Dim::Static(ne), Dim::Static(ed)] {
                return Err(e(format!("codebook must be [{ne}, {ed}], got {cb}")));
            }
            if idx.dtype() != DType::U8 || idx.rank() != 2 {
                return Err(e(format!("indices must be u8 [n, k/entry_dim], got {idx}")));
            }
            if let Some(k) = k.as_static() {
                if k % ed != 0 || idx.dim(1) != Dim::Static(k / ed) {
                    return Err(e(format!(
                        "x's last dim {k} must be a multiple of entry_dim {ed} and indices must have k/entry_dim = {} columns, got {idx}",
                        k / ed.max(1)
                    )));
                }
            }
            let mut dims = x.dims().to_vec();
            *dims.last_mut().unwrap() = idx.dim(0);
            Ok(x.with_dims(dims))
        }
        Op::SplineActivation { num_basis, grid_min, grid_max } => {
            arity(&name, inputs, 2)?;
            let (x, c) = (inputs[0], inputs[1]);
            require_float(&name, x)?;
            if *num_basis < 2 || grid_max <= grid_min {
                return Err(e(format!(
                    "needs num_basis ≥ 2 and grid_max > grid_min, got {num_basis} basis functions on [{grid_min}, {grid_max}]"
                )));
            }
            if x.rank() < 1 || c.dims() != [x.dim(x.rank() - 1), Dim::Static(*num_basis as usize)] {
                return Err(e(format!(
                    "coefficients must be [channels, num_basis] = [{}, {num_basis}] for x {x}, got {c}",
                    x.dims().last().map(|d| d.to_string()).unwrap_or_default()
                )));
            }
            Ok(x.clone())
        }
        Op::ScaledQuantScale { scale_layout, .. } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            require_float(&name, x)?;
            scale_shape(&name, x, *scale_layout)
        }
        Op::ScaledQuantize { format, scale_layout } => {
            arity(&name, inputs, 2)?;
            let (x, s) = (inputs[0], inputs[1]);
            require_float(&name, x)?;
            let expected = infer_shape(&Op::ScaledQuantScale { format: *format, scale_layout: *scale_layout }, &[x])?;
            if s != &expected {
                return Err(e(format!("scales must be {expected} for {x} with layout {scale_layout:?}, got {s}")));
            }
            Ok(x.with_dtype(DType::U8))
        }
        Op::ScaledMatMul { scale_layout, has_bias, .. } => {
            arity(&name, inputs, if *has_bias { 5 } else { 4 })?;
            let (lq, rq, ls, rs) = (inputs[0], inputs[1], inputs[2], inputs[3]);
            if lq.rank() != 2 || rq.rank() != 2 || lq.dtype() != DType::U8 || rq.dtype() != DType::U8 {
                return Err(e(format!("operands must be u8 codes [m, k] and [n, k] (K-last), got {lq} and {rq}")));
            }
            if lq.dim(1) != rq.dim(1) {
                return Err(e(format!("inner dimensions differ: lhs {lq} vs rhs {rq} (both are K-last)")));
            }
            for (what, q, s) in [("lhs", lq, ls), ("rhs", rq, rs)] {
                let expected = scale_shape(&name, &q.with_dtype(DType::F32), *scale_layout)?;
                if s != &expected {
                    return Err(e(format!("{what} scales must be {expected} for codes {q}, got {s}")));
                }
            }
            if *has_bias {
                let b = inputs[4];
                if b.rank() != 1 || b.dim(0) != rq.dim(0) {
                    return Err(e(format!("bias must be [n] = [{}], got {b}", rq.dim(0))));
                }
            }
            Ok(Shape::from_dims(&[lq.dim(0), rq.dim(0)], DType::F32))
        }
        Op::Scan {
            body,
            length,
            save_trajectory,
            num_bcast,
            num_xs,
            ..
        } => {
            let expected = 1 + *num_bcast as usize + *num_xs as usize;
            arity(&name, inputs, expected)?;
            let init = inputs[0];
            if body.outputs.len() != 1 {
                return Err(e(format!("the body must have exactly one output (the next carry), it has {}", body.outputs.len())));
            }
            let out = body.shape(body.outputs[0]);
            if out != init {
                return Err(e(format!("the body returns {out} but the carry is {init}; they must match")));
            }
            for i in 0..*num_xs as usize {
                let xs = inputs[1 + *num_bcast as usize + i];
                if xs.rank() == 0 || xs.dim(0) != Dim::Static(*length as usize) {
                    return Err(e(format!("xs {i} is {xs}; its leading axis must be the scan length {length}")));
                }
            }
            if *save_trajectory {
                let mut dims = vec![Dim::Static(*length as usize)];
                dims.extend_from_slice(init.dims());
                Ok(init.with_dims(dims))
            } else {
                Ok(init.clone())
            }
        }
        Op::Fft { .. } => {
            arity(&name, inputs, 1)?;
            let x = inputs[0];
            if x.rank() == 0 {
                return Err(e("needs at least one axis".into()));
            }
            if x.dtype().is_float() {
                if let Some(n) = x.dim(x.rank() - 1).as_static() {
                    if n % 2 != 0 {
                        return Err(e(format!(
                            "real input {x} uses the block layout [.., 2N] (N real parts then N imaginary parts): the last dim must be even"
                        )));
                    }
                }
            } else if !x.dtype().is_complex() {
                return Err(e(format!("needs a float (block layout) or complex input, got {x}")));
            }
            Ok(x.clone())
        }
    }
}

impl Graph {
    /// Append `op` applied to `inputs`, inferring its result type.
    ///
    /// Errors (naming the op and the shapes) when the operands do not fit.
    pub fn add_op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId> {
        for &i in &inputs {
            if self.get(i).is_none() {
                return Err(IrError::new(
                    op.name(),
                    format!(
                        "operand {i} is not a node of graph `{}` ({} nodes)",
                        self.name,
                        self.len()
                    ),
                ));
            }
        }
        let shapes: Vec<&Shape> = inputs.iter().map(|&i| self.shape(i)).collect();
        let shape = infer_shape(&op, &shapes)?;
        Ok(self.add_node(op, inputs, shape))
    }
}

fn arity(name: &str, inputs: &[&Shape], n: usize) -> IrResult<()> {
    if inputs.len() != n {
        return Err(IrError::new(
            name,
            format!("takes {n} input(s), got {}", inputs.len()),
        ));
    }
    Ok(())
}

fn require_float(name: &str, s: &Shape) -> IrResult<()> {
    if !s.dtype().is_float() {
        return Err(IrError::new(
            name,
            format!("needs a floating-point input, got {s}; cast with .cast(DType::F32) first"),
        ));
    }
    Ok(())
}

fn require_index(name: &str, s: &Shape) -> IrResult<()> {
    if s.dtype() == DType::Bool || s.dtype().is_complex() {
        return Err(IrError::new(
            name,
            format!("indices must be integers (or integer-valued floats), got {s}"),
        ));
    }
    Ok(())
}

fn check_axis(name: &str, axis: usize, s: &Shape) -> IrResult<()> {
    if axis >= s.rank() {
        return Err(IrError::new(
            name,
            format!("axis {axis} is out of range for {s} (rank {})", s.rank()),
        ));
    }
    Ok(())
}

/// Resolve a possibly negative axis against `rank`.
pub fn norm_axis(name: &str, axis: i64, rank: usize) -> IrResult<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) || (rank == 0) {
        return Err(IrError::new(
            name,
            format!(
                "axis {axis} is out of range for a rank-{rank} tensor (valid: {}..{})",
                -r, r
            ),
        ));
    }
    Ok(a as usize)
}

fn broadcast(name: &str, l: &Shape, r: &Shape) -> IrResult<Shape> {
    l.broadcast_with(r).map_err(|msg| IrError::new(name, msg))
}

fn matmul_shape(name: &str, a: &Shape, b: &Shape) -> IrResult<Shape> {
    if a.rank() < 2 || b.rank() < 2 {
        return Err(IrError::new(
            name,
            format!("operands must have rank ≥ 2, got {a} and {b}; use .unsqueeze(0) on a vector"),
        ));
    }
    if a.dtype() != b.dtype() {
        return Err(IrError::new(
            name,
            format!("dtypes differ ({a} vs {b}); cast one side so both match"),
        ));
    }
    if a.dtype() == DType::Bool || a.dtype().is_complex() {
        return Err(IrError::new(
            name,
            format!("needs real numeric operands, got {a}"),
        ));
    }
    let (m, k1) = (a.dim(a.rank() - 2), a.dim(a.rank() - 1));
    let (k2, n) = (b.dim(b.rank() - 2), b.dim(b.rank() - 1));
    if k1 != k2 {
        return Err(IrError::new(
            name,
            format!(
                "inner dimensions differ ({k1} ≠ {k2}): left is {a}, right is {b}; the left's last dim must equal the right's second-to-last"
            ),
        ));
    }
    let ba = a.with_dims(a.dims()[..a.rank() - 2].to_vec());
    let bb = b.with_dims(b.dims()[..b.rank() - 2].to_vec());
    let batch = ba.broadcast_with(&bb).map_err(|msg| {
        IrError::new(
            name,
            format!("batch axes of {a} and {b} do not broadcast: {msg}"),
        )
    })?;
    let mut dims = batch.dims().to_vec();
    dims.push(m);
    dims.push(n);
    Ok(a.with_dims(dims))
}

fn reduce_shape(name: &str, x: &Shape, axes: &[usize], keep_dim: bool) -> IrResult<Shape> {
    let mut seen = vec![false; x.rank()];
    for &a in axes {
        if a >= x.rank() {
            return Err(IrError::new(
                name,
                format!("axis {a} is out of range for {x}"),
            ));
        }
        if std::mem::replace(&mut seen[a], true) {
            return Err(IrError::new(
                name,
                format!("axis {a} is listed twice in {axes:?}"),
            ));
        }
    }
    let mut dims = Vec::new();
    for (i, d) in x.dims().iter().enumerate() {
        if seen[i] {
            if keep_dim {
                dims.push(Dim::Static(1));
            }
        } else {
            dims.push(*d);
        }
    }
    Ok(x.with_dims(dims))
}

fn reshape_shape(name: &str, x: &Shape, new_shape: &[i64]) -> IrResult<Shape> {
    let wild = new_shape.iter().filter(|&&d| d == -1).count();
    if wild > 1 || new_shape.iter().any(|&d| d < -1) {
        return Err(IrError::new(
            name,
            format!("target {new_shape:?} is invalid: sizes must be ≥ 0 with at most one -1"),
        ));
    }
    let known: usize = new_shape
        .iter()
        .filter(|&&d| d >= 0)
        .map(|&d| d as usize)
        .product();
    match x.num_elements() {
        Some(total) => {
            let dims: Vec<Dim> = if wild == 1 {
                if known == 0 || total % known != 0 {
                    return Err(IrError::new(
                        name,
                        format!(
                            "cannot reshape {x} ({total} elements) to {new_shape:?}: {total} is not divisible by {known}"
                        ),
                    ));
                }
                new_shape
                    .iter()
                    .map(|&d| Dim::Static(if d == -1 { total / known } else { d as usize }))
                    .collect()
            } else {
                if known != total {
                    return Err(IrError::new(
                        name,
                        format!(
                            "cannot reshape {x} ({total} elements) to {new_shape:?} ({known} elements); the counts must match"
                        ),
                    ));
                }
                new_shape.iter().map(|&d| Dim::Static(d as usize)).collect()
            };
            Ok(x.with_dims(dims))
        }
        None => {
            // A dynamic input: the -1 takes the one dynamic symbol when the static parts match.
            let syms = x.dynamic_symbols();
            let dyn_count = x.dims().iter().filter(|d| !d.is_static()).count();
            let static_prod: usize = x.dims().iter().filter_map(|d| d.as_static()).product();
            if wild == 1 && syms.len() == 1 && dyn_count == 1 && static_prod == known {
                Ok(x.with_dims(
                    new_shape
                        .iter()
                        .map(|&d| {
                            if d == -1 {
                                Dim::Dynamic(syms[0])
                            } else {
                                Dim::Static(d as usize)
                            }
                        })
                        .collect(),
                ))
            } else {
                Err(IrError::new(
                    name,
                    format!(
                        "cannot reshape dynamic {x} to {new_shape:?}: use -1 for the dynamic axis and keep the product of the static axes ({static_prod}) unchanged"
                    ),
                ))
            }
        }
    }
}

fn expand_shape(name: &str, x: &Shape, target: &[i64]) -> IrResult<Shape> {
    if target.len() < x.rank() {
        return Err(IrError::new(
            name,
            format!("target {target:?} has fewer axes than {x}"),
        ));
    }
    let offset = target.len() - x.rank();
    let mut dims = Vec::with_capacity(target.len());
    for (i, &t) in target.iter().enumerate() {
        let src = if i >= offset {
            Some(x.dim(i - offset))
        } else {
            None
        };
        let d = match (t, src) {
            (-1, Some(s)) => s,
            (-1, None) => {
                return Err(IrError::new(
                    name,
                    format!(
                        "-1 in target {target:?} at new leading axis {i} has no input dim to keep"
                    ),
                ));
            }
            (t, _) if t < 0 => {
                return Err(IrError::new(
                    name,
                    format!("target {target:?} has a negative size"),
                ));
            }
            (t, None) => Dim::Static(t as usize),
            (t, Some(s)) => {
                let t = t as usize;
                if s == Dim::Static(t) || s == Dim::Static(1) {
                    Dim::Static(t)
                } else {
                    return Err(IrError::new(
                        name,
                        format!(
                            "cannot broadcast {x} to {target:?}: axis {i} has size {s}, which is neither {t} nor 1"
                        ),
                    ));
                }
            }
        };
        dims.push(d);
    }
    Ok(x.with_dims(dims))
}

fn attention_shape(
    name: &str,
    inputs: &[&Shape],
    num_heads: usize,
    head_dim: usize,
    v_head_dim: Option<usize>,
    mask_kind: MaskKind,
) -> IrResult<Shape> {
    let e = |m: String| IrError::new(name, m);
    let needed = match mask_kind {
        MaskKind::Custom | MaskKind::Bias => 4,
        _ => 3,
    };
    if inputs.len() != needed {
        return Err(e(format!(
            "with mask {mask_kind:?} takes {needed} inputs (q, k, v{}), got {}",
            if needed == 4 { ", mask" } else { "" },
            inputs.len()
        )));
    }
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    require_float(name, q)?;
    if num_heads == 0 || head_dim == 0 {
        return Err(e("num_heads and head_dim must be ≥ 1".into()));
    }
    let dv = v_head_dim.unwrap_or(head_dim);
    if q.rank() != k.rank() || q.rank() != v.rank() || !(q.rank() == 3 || q.rank() == 4) {
        return Err(e(format!(
            "q, k, v must all be [B, S, H, D] or all [B, S, H·D]; got {q}, {k}, {v}"
        )));
    }
    if q.dtype() != k.dtype() || q.dtype() != v.dtype() {
        return Err(e(format!("q, k, v dtypes differ: {q}, {k}, {v}")));
    }
    // heads of k/v (grouped-query attention allows fewer kv heads than q heads)
    let heads_of = |s: &Shape, d: usize, what: &str| -> IrResult<Option<usize>> {
        if s.rank() == 4 {
            if s.dim(3) != Dim::Static(d) {
                return Err(e(format!("{what} {s}: last axis must be the head dim {d}")));
            }
            Ok(s.dim(2).as_static())
        } else {
            match s.dim(2).as_static() {
                Some(h) if h % d == 0 => Ok(Some(h / d)),
                Some(h) => Err(e(format!(
                    "{what} {s}: hidden size {h} is not a multiple of the head dim {d}"
                ))),
                None => Ok(None),
            }
        }
    };
    let qh = heads_of(q, head_dim, "q")?;
    let kh = heads_of(k, head_dim, "k")?;
    let vh = heads_of(v, dv, "v")?;
    if qh.is_some_and(|h| h != num_heads) {
        return Err(e(format!(
            "q {q} has {} heads but num_heads is {num_heads}",
            qh.unwrap()
        )));
    }
    if let (Some(kh), Some(vh)) = (kh, vh) {
        if kh != vh || kh == 0 || num_heads % kh != 0 {
            return Err(e(format!(
                "k has {kh} heads and v has {vh}: they must be equal and divide num_heads ({num_heads})"
            )));
        }
    }
    if q.dim(0) != k.dim(0) || k.dim(0) != v.dim(0) {
        return Err(e(format!("batch sizes differ: q {q}, k {k}, v {v}")));
    }
    if k.dim(1) != v.dim(1) {
        return Err(e(format!(
            "k {k} and v {v} must have the same sequence length"
        )));
    }
    match mask_kind {
        MaskKind::Custom => {
            let m = inputs[3];
            if m.dims() != [q.dim(0), k.dim(1)] {
                return Err(e(format!(
                    "custom mask must be [batch, key_len] = [{}, {}], got {m}",
                    q.dim(0),
                    k.dim(1)
                )));
            }
        }
        MaskKind::Bias => {
            let b = inputs[3];
            let full = Shape::from_dims(
                &[q.dim(0), Dim::Static(num_heads), q.dim(1), k.dim(1)],
                q.dtype(),
            );
            let ok = b.rank() == 4
                && full
                    .broadcast_with(b)
                    .map(|s| s.dims() == full.dims())
                    .unwrap_or(false);
            if !ok {
                return Err(e(format!(
                    "bias must broadcast to [B, H, Sq, Sk] = {full}, got {b}"
                )));
            }
        }
        _ => {}
    }
    let mut dims = q.dims().to_vec();
    if q.rank() == 4 {
        dims[3] = Dim::Static(dv);
    } else {
        dims[2] = Dim::Static(num_heads * dv);
    }
    Ok(q.with_dims(dims))
}

#[allow(clippy::too_many_arguments)]
fn conv_shape(
    name: &str,
    x: &Shape,
    w: &Shape,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
    dilation: &[usize],
    groups: usize,
) -> IrResult<Shape> {
    let e = |m: String| IrError::new(name, m);
    let sr = kernel_size.len();
    if sr == 0 || stride.len() != sr || padding.len() != sr || dilation.len() != sr {
        return Err(e(format!(
            "kernel_size {kernel_size:?}, stride {stride:?}, padding {padding:?}, dilation {dilation:?} must all have one entry per spatial axis"
        )));
    }
    if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
        return Err(e("stride, dilation and groups must be ≥ 1".into()));
    }
    require_float(name, x)?;
    if x.rank() != sr + 2 || w.rank() != sr + 2 {
        return Err(e(format!(
            "x must be [N, C, spatial×{sr}] and w [C_out, C_in/groups, kernel×{sr}]; got x {x}, w {w}"
        )));
    }
    for i in 0..sr {
        if w.dim(2 + i) != Dim::Static(kernel_size[i]) {
            return Err(e(format!(
                "weight {w} does not match kernel_size {kernel_size:?}"
            )));
        }
    }
    let c = x
        .dim(1)
        .as_static()
        .ok_or_else(|| e(format!("channel axis of {x} must be static")))?;
    let cout = w.dim(0).unwrap_static();
    if c % groups != 0 || cout % groups != 0 || w.dim(1) != Dim::Static(c / groups) {
        return Err(e(format!(
            "with groups = {groups}, x's {c} channels and w's {cout} output channels must be divisible by groups and w must be [C_out, {}, ..]; got w {w}",
            c / groups.max(1)
        )));
    }
    let mut dims = vec![x.dim(0), Dim::Static(cout)];
    for i in 0..sr {
        dims.push(match x.dim(2 + i) {
            Dim::Static(n) => {
                let span = dilation[i] * (kernel_size[i] - 1) + 1;
                if n + 2 * padding[i] < span {
                    return Err(e(format!(
                        "spatial axis {i} of {x} (size {n}, padding {}) is smaller than the dilated kernel ({span})",
                        padding[i]
                    )));
                }
                Dim::Static((n + 2 * padding[i] - span) / stride[i] + 1)
            }
            d => return Err(e(format!("spatial axis {i} of {x} is dynamic ({d}); spatial sizes must be static"))),
        });
    }
    Ok(x.with_dims(dims))
}

fn pool_shape(
    name: &str,
    x: &Shape,
    kind: ReduceOp,
    kernel_size: &[usize],
    stride: &[usize],
    padding: &[usize],
) -> IrResult<Shape> {
    let e = |m: String| IrError::new(name, m);
    if !matches!(kind, ReduceOp::Max | ReduceOp::Mean | ReduceOp::Sum) {
        return Err(e(format!(
            "pool kind {kind:?} is not supported; use Max, Mean or Sum"
        )));
    }
    let sr = kernel_size.len();
    if sr == 0 || stride.len() != sr || padding.len() != sr {
        return Err(e(format!(
            "kernel_size {kernel_size:?}, stride {stride:?}, padding {padding:?} must have one entry per spatial axis"
        )));
    }
    if stride.contains(&0) || kernel_size.contains(&0) {
        return Err(e("kernel_size and stride must be ≥ 1".into()));
    }
    if x.rank() != sr + 2 {
        return Err(e(format!("x must be [N, C, spatial×{sr}], got {x}")));
    }
    if x.dtype() == DType::Bool || x.dtype().is_complex() {
        return Err(e(format!("needs a real numeric input, got {x}")));
    }
    let mut dims = vec![x.dim(0), x.dim(1)];
    for i in 0..sr {
        if padding[i] * 2 > kernel_size[i] {
            return Err(e(format!(
                "padding {} on axis {i} exceeds half the kernel ({}); every window must touch the input",
                padding[i], kernel_size[i]
            )));
        }
        dims.push(match x.dim(2 + i) {
            Dim::Static(n) if n + 2 * padding[i] >= kernel_size[i] => {
                Dim::Static((n + 2 * padding[i] - kernel_size[i]) / stride[i] + 1)
            }
            Dim::Static(n) => {
                return Err(e(format!(
                    "spatial axis {i} (size {n}) is smaller than the window {}",
                    kernel_size[i]
                )));
            }
            d => {
                return Err(e(format!(
                    "spatial axis {i} of {x} is dynamic ({d}); spatial sizes must be static"
                )));
            }
        });
    }
    Ok(x.with_dims(dims))
}

fn scale_shape(name: &str, x: &Shape, layout: ScaleLayout) -> IrResult<Shape> {
    if x.rank() == 0 {
        return Err(IrError::new(name, "needs at least one axis".to_string()));
    }
    let block = match layout {
        ScaleLayout::PerTensor => return Ok(Shape::new(&[1], DType::F32)),
        ScaleLayout::BlockMxE8M0 { block } => block as usize,
        ScaleLayout::Nvfp4 { group } => group as usize,
    };
    let k = x.dim(x.rank() - 1);
    match k.as_static() {
        Some(k) if block > 0 && k % block == 0 => {
            let mut dims = x.dims().to_vec();
            *dims.last_mut().unwrap() = Dim::Static(k / block);
            Ok(Shape::from_dims(&dims, DType::U8))
        }
        _ => Err(IrError::new(
            name,
            format!(
                "the last (K) axis of {x} must be static and a multiple of the scale block {block}"
            ),
        )),
    }
}
