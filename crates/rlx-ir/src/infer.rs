//! Shape inference: the result type of every op, or an error naming the op,
//! the shapes, and the fix.
//!
//! The rules live in one submodule per op family; this file dispatches and
//! holds the checks they share.

mod conv;
mod elementwise;
mod linalg;
mod movement;
mod nn;
mod reduce;
mod scaled;
mod scan;

use crate::{DType, Graph, IrError, IrResult, NodeId, Op, Shape};

/// The result type of applying `op` to operands of types `inputs`.
///
/// Leaf ops (`Input`, `Param`, `Constant`) carry their own shape and are
/// rejected here; build them with [`Graph::input`], [`Graph::param`] or
/// [`Graph::add_node`].
///
/// Every error names the op (in [`IrError::op`]), prints the offending shapes
/// and says how to fix the call.
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
    let shape = match same_shape_elementwise(op, inputs) {
        Some(s) => s,
        None => infer_unchecked(&op_name(op), op, inputs)?,
    };
    shape.check_size().map_err(|m| {
        let operands: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
        err(
            &op_name(op),
            format!(
                "{m} (operands {}); use smaller operands",
                operands.join(", ")
            ),
        )
    })?;
    Ok(shape)
}

/// The result type of the ops eager code applies most when the general rules could only
/// return an operand's type: an activation of a real float operand, or non-bitwise
/// arithmetic on two real float operands of one type (dims and dtype equal, so
/// broadcasting keeps them). `None` for everything else, errors included: the general
/// rules decide those. Eager code runs shape inference on every op it applies, and the
/// dispatch, the arity checks and the broadcast walk cost more than the op's node.
fn same_shape_elementwise(op: &Op, inputs: &[&Shape]) -> Option<Shape> {
    let float = |s: &Shape| s.dtype().is_float();
    match (op, inputs) {
        (Op::Activation(_), [x]) if float(x) => Some((*x).clone()),
        (Op::Binary(b), [l, r]) if !b.is_bitwise() && float(l) && l == r => Some((*l).clone()),
        _ => None,
    }
}

/// [`Op::name`] without an allocation for the ops eager code builds most (binary,
/// activation, comparison): shape inference runs on every op a user applies.
fn op_name(op: &Op) -> std::borrow::Cow<'static, str> {
    use std::borrow::Cow;
    match op {
        Op::Activation(a) => Cow::Borrowed(a.name()),
        Op::Binary(b) => Cow::Borrowed(b.name()),
        Op::Compare(c) => Cow::Borrowed(c.name()),
        _ => Cow::Owned(op.name()),
    }
}

fn infer_unchecked(name: &str, op: &Op, inputs: &[&Shape]) -> IrResult<Shape> {
    match op {
        Op::Input { .. } | Op::Param { .. } | Op::Constant { .. } => Err(err(
            name,
            "leaf ops carry their own shape; create them with Graph::input, Graph::param or Graph::add_node",
        )),
        Op::Activation(_)
        | Op::Cast { .. }
        | Op::StopGradient
        | Op::RoundToFormat { .. }
        | Op::Binary(_)
        | Op::Compare(_)
        | Op::Where => elementwise::infer(name, op, inputs),
        Op::MatMul | Op::FusedMatMulBiasAct { .. } | Op::DenseSolve | Op::SynthMatMul { .. } => {
            linalg::infer(name, op, inputs)
        }
        Op::LayerNorm { .. }
        | Op::RmsNorm { .. }
        | Op::Attention { .. }
        | Op::AttentionVjp { .. }
        | Op::Rope { .. }
        | Op::Softmax { .. }
        | Op::LogSoftmax { .. }
        | Op::SoftmaxCrossEntropy
        | Op::SoftmaxCrossEntropyWithLogits
        | Op::SplineActivation { .. } => nn::infer(name, op, inputs),
        Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Narrow { .. }
        | Op::Pad { .. }
        | Op::Concat { .. }
        | Op::Expand { .. }
        | Op::Gather { .. }
        | Op::ScatterAdd { .. }
        | Op::BroadcastLike => movement::infer(name, op, inputs),
        Op::Reduce { .. } | Op::ArgMax { .. } | Op::ArgMin { .. } | Op::Cumsum { .. } => {
            reduce::infer(name, op, inputs)
        }
        Op::Conv { .. }
        | Op::ConvGradInput { .. }
        | Op::ConvGradWeight { .. }
        | Op::Pool { .. }
        | Op::PoolGrad { .. } => conv::infer(name, op, inputs),
        Op::ScaledQuantScale { .. } | Op::ScaledQuantize { .. } | Op::ScaledMatMul { .. } => {
            scaled::infer(name, op, inputs)
        }
        Op::Scan { .. } | Op::Fft { .. } => scan::infer(name, op, inputs),
    }
}

impl Graph {
    /// Append `op` applied to `inputs`, inferring its result type.
    ///
    /// Errors (naming the op and the shapes) when the operands do not fit, or
    /// when an operand id is not a node of this graph.
    pub fn add_op(&mut self, op: Op, inputs: Vec<NodeId>) -> IrResult<NodeId> {
        for &i in &inputs {
            if self.get(i).is_none() {
                return Err(IrError::new(
                    op.name(),
                    format!(
                        "operand {i} is not a node of graph `{}` ({} nodes); was the id taken from another graph?",
                        self.name,
                        self.len()
                    ),
                ));
            }
        }
        // Operand types on the stack for the usual arities (no allocation per op).
        const INLINE: usize = 4;
        let shape = match inputs.first() {
            Some(&first) if inputs.len() <= INLINE => {
                let mut shapes = [self.shape(first); INLINE];
                for (s, &i) in shapes.iter_mut().zip(&inputs) {
                    *s = self.shape(i);
                }
                infer_shape(&op, &shapes[..inputs.len()])?
            }
            _ => {
                let shapes: Vec<&Shape> = inputs.iter().map(|&i| self.shape(i)).collect();
                infer_shape(&op, &shapes)?
            }
        };
        Ok(self.add_node(op, inputs, shape))
    }
}

/// Resolve a possibly negative axis against `rank` (`-1` is the last axis).
///
/// `name` is the op the axis belongs to; it is named in the error.
///
/// ```
/// use rlx_ir::norm_axis;
/// assert_eq!(norm_axis("softmax", -1, 3).unwrap(), 2);
/// assert!(norm_axis("softmax", 3, 3).unwrap_err().to_string().contains("-3..3"));
/// ```
pub fn norm_axis(name: &str, axis: i64, rank: usize) -> IrResult<usize> {
    if rank == 0 {
        return Err(err(
            name,
            format!(
                "axis {axis} does not exist: the input is rank-0 (a scalar) and has no axes; reshape it to [1] first"
            ),
        ));
    }
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..r).contains(&a) {
        return Err(err(
            name,
            format!(
                "axis {axis} is out of range for a rank-{rank} tensor; valid axes are {}..{r} (negative counts from the end)",
                -r
            ),
        ));
    }
    Ok(a as usize)
}

/// An error about op `name`.
fn err(name: &str, msg: impl Into<String>) -> IrError {
    IrError::new(name, msg)
}

fn arity(name: &str, inputs: &[&Shape], n: usize, what: &str) -> IrResult<()> {
    if inputs.len() != n {
        let got: Vec<String> = inputs.iter().map(|s| s.to_string()).collect();
        return Err(err(
            name,
            format!(
                "takes {n} input(s) [{what}], got {}: [{}]",
                inputs.len(),
                got.join("; ")
            ),
        ));
    }
    Ok(())
}

fn require_float(name: &str, what: &str, s: &Shape) -> IrResult<()> {
    if !s.dtype().is_float() {
        return Err(IrError::dtype(
            name,
            format!("{what} must be floating-point, got {s}; cast it with .cast(DType::F32) first"),
        ));
    }
    Ok(())
}

/// Real numbers: integers and floats, not `Bool` and not complex.
fn require_real(name: &str, what: &str, s: &Shape) -> IrResult<()> {
    if s.dtype() == DType::Bool || s.dtype().is_complex() {
        return Err(IrError::dtype(
            name,
            format!(
                "{what} must be a real number type (integer or float), got {s}; cast it with .cast(DType::F32) first"
            ),
        ));
    }
    Ok(())
}

fn require_same_dtype(name: &str, a: (&str, &Shape), b: (&str, &Shape)) -> IrResult<()> {
    if a.1.dtype() != b.1.dtype() {
        return Err(IrError::dtype(
            name,
            format!(
                "{} {} and {} {} have different dtypes; cast one with .cast(DType::{:?}) so both match",
                a.0,
                a.1,
                b.0,
                b.1,
                a.1.dtype()
            ),
        ));
    }
    Ok(())
}

fn check_axis(name: &str, axis: usize, s: &Shape) -> IrResult<()> {
    if axis >= s.rank() {
        return Err(err(
            name,
            format!(
                "axis {axis} is out of range for {s} (rank {}); valid axes are 0..{}",
                s.rank(),
                s.rank()
            ),
        ));
    }
    Ok(())
}

/// The dims of `s` as a bracketed list without the dtype (`[2, ?0]`), for messages.
fn dims_str(dims: &[crate::Dim]) -> String {
    let v: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", v.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Activation, BinaryOp, Dim};

    /// The shortcut for same-shape elementwise ops returns exactly what the general
    /// rules return, and stands aside (`None`) wherever they could say anything else:
    /// other dtypes (errors or other result types), broadcasting, other ops.
    #[test]
    fn the_same_shape_shortcut_agrees_with_the_general_rules_and_stands_aside_elsewhere() {
        let dims: [Vec<Dim>; 5] = [
            vec![],
            vec![Dim::Static(3)],
            vec![Dim::Static(2), Dim::Dynamic(0)],
            vec![Dim::Static(1), Dim::Static(3)],
            (1..=6).map(Dim::Static).collect(), // more axes than a shape holds in place
        ];
        let shapes: Vec<Shape> = dims
            .iter()
            .flat_map(|d| DType::ALL.map(|dt| Shape::from_dims(d, dt)))
            .collect();
        let general = |op: &Op, inputs: &[&Shape]| infer_unchecked(&op_name(op), op, inputs);
        let mut taken = 0;
        for x in &shapes {
            for a in Activation::ALL {
                let op = Op::Activation(a);
                match same_shape_elementwise(&op, &[x]) {
                    Some(s) => {
                        assert_eq!(Ok(s), general(&op, &[x]).map_err(|e| e.to_string()));
                        taken += 1;
                    }
                    None => assert!(!x.dtype().is_float(), "{a:?} on {x}"),
                }
            }
            for y in &shapes {
                let ops = BinaryOp::FLOAT_ARITHMETIC
                    .into_iter()
                    .chain([BinaryOp::BitAnd, BinaryOp::Shl]);
                for b in ops {
                    let op = Op::Binary(b);
                    match same_shape_elementwise(&op, &[x, y]) {
                        Some(s) => {
                            assert_eq!(Ok(s), general(&op, &[x, y]).map_err(|e| e.to_string()));
                            taken += 1;
                        }
                        None => assert!(
                            x != y || !x.dtype().is_float() || b.is_bitwise(),
                            "{b:?} on {x}, {y}"
                        ),
                    }
                }
            }
        }
        assert!(taken > 300, "the shortcut was taken only {taken} times");
        // Other ops and arities always go through the general rules.
        let x = &shapes[DType::ALL.len()];
        assert_eq!(same_shape_elementwise(&Op::StopGradient, &[x]), None);
        assert_eq!(
            same_shape_elementwise(&Op::Binary(BinaryOp::Add), &[x]),
            None
        );
        // Broadcasting ([1, 3] with [3]) is not a same-shape case.
        let row = Shape::new(&[1, 3], DType::F32);
        let flat = Shape::new(&[3], DType::F32);
        assert_eq!(
            same_shape_elementwise(&Op::Binary(BinaryOp::Add), &[&row, &flat]),
            None
        );
        assert_eq!(
            infer_shape(&Op::Binary(BinaryOp::Add), &[&row, &flat]).unwrap(),
            row
        );
    }

    /// A same-shape op on a shape too large to allocate is still refused (the size check
    /// runs after the shortcut too), with the op named.
    #[test]
    fn the_same_shape_shortcut_keeps_the_size_check() {
        let huge = Shape::new(&[1 << 40, 1 << 40], DType::F32);
        let e = infer_shape(&Op::Binary(BinaryOp::Mul), &[&huge, &huge]).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        assert!(e.to_string().contains("mul"), "{e}");
        let e = infer_shape(&Op::Activation(Activation::Relu), &[&huge]).unwrap_err();
        assert!(e.to_string().contains("relu"), "{e}");
    }
}
