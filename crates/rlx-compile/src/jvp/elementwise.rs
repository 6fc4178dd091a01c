//! JVP rules of the element-wise ops: activations, casts, binary arithmetic, `where`.

use super::emit::Em;
use super::{Fwd, carries_tangent};
use crate::build::Build;
use crate::kinks;
use rlx_ir::{Activation, BinaryOp, IrResult, Node, NodeId, Op, TensorData};
use std::f64::consts::PI;

pub(super) fn rule(f: &mut Fwd, node: &Node) -> IrResult<Option<NodeId>> {
    match &node.op {
        Op::Activation(a) => {
            let Some(t) = f.t(node, 0) else {
                return Ok(None);
            };
            activation_tangent(&mut f.e, *a, node.inputs[0], node.id, t)
        }
        Op::Cast { to } => match f.t(node, 0) {
            Some(t) if carries_tangent(*to) => Ok(Some(f.e.cast(t, *to)?)),
            _ => Ok(None),
        },
        Op::StopGradient | Op::Compare(_) => Ok(None),
        // Straight-through: the rounding is treated as the identity.
        Op::RoundToFormat { .. } => Ok(f.t(node, 0)),
        Op::Binary(b) => binary(f, node, *b),
        Op::Where => {
            let (tt, tf) = (f.t(node, 1), f.t(node, 2));
            if tt.is_none() && tf.is_none() {
                return Ok(None);
            }
            let zero = f.e.scalar(0.0, node.shape.dtype());
            let tt = tt.unwrap_or(zero);
            let tf = tf.unwrap_or(zero);
            Ok(Some(f.e.select(node.inputs[0], tt, tf)?))
        }
        other => unreachable!("elementwise::rule got {}", other.name()),
    }
}

/// The tangent of `y = a(x)` for the tangent `t` of `x`: `a'(x)·t`, built from `x`
/// and `y` (whichever is cheaper). `None` for the piecewise-constant activations.
pub(crate) fn activation_tangent(
    e: &mut Em,
    a: Activation,
    x: NodeId,
    y: NodeId,
    t: NodeId,
) -> IrResult<Option<NodeId>> {
    use Activation as A;
    let d = match a {
        A::Floor | A::Ceil | A::Sign => return Ok(None),
        // Straight-through, like the reverse mode.
        A::Round => return Ok(Some(t)),
        A::Neg => return Ok(Some(e.neg(t)?)),
        A::Relu => {
            let pos = kinks::positive(e, x)?;
            return Ok(Some(e.keep_where(pos, t)?));
        }
        // The kink conventions are shared with reverse mode (crate::kinks).
        A::Elu => kinks::elu_slope(e, x, y)?,
        A::HardSwish => kinks::hard_swish_slope(e, x)?,
        A::HardSigmoid => kinks::hard_sigmoid_slope(e, x)?,
        A::Gelu => {
            // Φ(x) + x·φ(x) with Φ(x) = ½(1 + erf(x/√2)), φ(x) = e^(−x²/2)/√(2π).
            let xs = e.scale(x, std::f64::consts::FRAC_1_SQRT_2)?;
            let erf = e.act(A::Erf, xs)?;
            let cdf = e.add_scalar(erf, 1.0)?;
            let cdf = e.scale(cdf, 0.5)?;
            let x2 = e.square(x)?;
            let ex = e.scale(x2, -0.5)?;
            let ex = e.act(A::Exp, ex)?;
            let pdf = e.scale(ex, 1.0 / (2.0 * PI).sqrt())?;
            let xpdf = e.mul(x, pdf)?;
            e.add(cdf, xpdf)?
        }
        A::GeluApprox => {
            // ½(1 + th) + ½x(1 − th²)·c(1 + 3k x²), th = tanh(c(x + k x³)).
            let (c, k) = ((2.0 / PI).sqrt(), 0.044715);
            let x2 = e.square(x)?;
            let x3 = e.mul(x2, x)?;
            let kx3 = e.scale(x3, k)?;
            let inner = e.add(x, kx3)?;
            let u = e.scale(inner, c)?;
            let th = e.act(A::Tanh, u)?;
            let left = e.add_scalar(th, 1.0)?;
            let left = e.scale(left, 0.5)?;
            let th2 = e.square(th)?;
            let sech2 = e.rsub_scalar(1.0, th2)?;
            let du = e.scale(x2, 3.0 * k)?;
            let du = e.add_scalar(du, 1.0)?;
            let du = e.scale(du, 0.5 * c)?;
            let r = e.mul(x, sech2)?;
            let r = e.mul(r, du)?;
            e.add(left, r)?
        }
        A::Silu => {
            // σ(1 + x(1 − σ)).
            let s = e.act(A::Sigmoid, x)?;
            let oms = e.rsub_scalar(1.0, s)?;
            let xo = e.mul(x, oms)?;
            let inner = e.add_scalar(xo, 1.0)?;
            e.mul(s, inner)?
        }
        A::Sigmoid => {
            let omy = e.rsub_scalar(1.0, y)?;
            e.mul(y, omy)?
        }
        A::Tanh => {
            let y2 = e.square(y)?;
            e.rsub_scalar(1.0, y2)?
        }
        A::Exp => y,
        A::Log => return Ok(Some(e.div(t, x)?)),
        A::Sqrt => {
            let q = e.div(t, y)?;
            return Ok(Some(e.scale(q, 0.5)?));
        }
        A::Rsqrt => {
            let y2 = e.square(y)?;
            let y3 = e.mul(y2, y)?;
            e.scale(y3, -0.5)?
        }
        A::Abs => kinks::abs_slope(e, x)?,
        A::Sin => e.act(A::Cos, x)?,
        A::Cos => {
            let s = e.act(A::Sin, x)?;
            e.neg(s)?
        }
        A::Tan => {
            let y2 = e.square(y)?;
            e.add_scalar(y2, 1.0)?
        }
        A::Atan => {
            let x2 = e.square(x)?;
            let den = e.add_scalar(x2, 1.0)?;
            return Ok(Some(e.div(t, den)?));
        }
        A::Recip => {
            let y2 = e.square(y)?;
            e.neg(y2)?
        }
        A::Softplus => e.act(A::Sigmoid, x)?,
        A::Erf => {
            let x2 = e.square(x)?;
            let nx2 = e.neg(x2)?;
            let ex = e.act(A::Exp, nx2)?;
            e.scale(ex, 2.0 / PI.sqrt())?
        }
        A::Mish => {
            // tanh(sp) + x(1 − tanh²(sp))σ(x), sp = softplus(x).
            let sp = e.act(A::Softplus, x)?;
            let th = e.act(A::Tanh, sp)?;
            let th2 = e.square(th)?;
            let sech2 = e.rsub_scalar(1.0, th2)?;
            let s = e.act(A::Sigmoid, x)?;
            let r = e.mul(x, sech2)?;
            let r = e.mul(r, s)?;
            e.add(th, r)?
        }
        A::Softsign => {
            let abs = e.act(A::Abs, x)?;
            let den = e.add_scalar(abs, 1.0)?;
            let den2 = e.square(den)?;
            return Ok(Some(e.div(t, den2)?));
        }
        A::LogSigmoid => {
            let nx = e.neg(x)?;
            e.act(A::Sigmoid, nx)?
        }
    };
    Ok(Some(e.mul(t, d)?))
}

/// The values of `id` when it is a constant (for skipping guards that cannot fire).
fn constant_values(e: &Em, id: NodeId) -> Option<Vec<f64>> {
    let n = e.g.node(id);
    match &n.op {
        Op::Constant { data } => {
            let dims = n.shape.static_dims()?;
            let td = TensorData::new(n.shape.dtype(), &dims, data.clone()).ok()?;
            Some(td.to_f64_vec())
        }
        _ => None,
    }
}

fn binary(f: &mut Fwd, node: &Node, b: BinaryOp) -> IrResult<Option<NodeId>> {
    let (a, r, y) = (node.inputs[0], node.inputs[1], node.id);
    let (ta, tr) = (f.t(node, 0), f.t(node, 1));
    let dt = node.shape.dtype();
    let e = &mut f.e;
    let t = match b {
        BinaryOp::Add => match (ta, tr) {
            (Some(x), Some(z)) => Some(e.add(x, z)?),
            (x, z) => x.or(z),
        },
        BinaryOp::Sub => match (ta, tr) {
            (Some(x), Some(z)) => Some(e.sub(x, z)?),
            (Some(x), None) => Some(x),
            (None, Some(z)) => Some(e.neg(z)?),
            (None, None) => None,
        },
        BinaryOp::Mul => {
            let mut terms = Vec::new();
            if let Some(x) = ta {
                terms.push(e.mul(x, r)?);
            }
            if let Some(z) = tr {
                let z = e.cast(z, dt)?;
                terms.push(e.mul(a, z)?);
            }
            e.sum_terms(terms)?
        }
        BinaryOp::Div => {
            // (ta − y·tr)/r.
            let num = match (ta, tr) {
                (x, Some(z)) => {
                    let z = e.cast(z, dt)?;
                    let yz = e.mul(y, z)?;
                    match x {
                        Some(x) => e.sub(x, yz)?,
                        None => e.neg(yz)?,
                    }
                }
                (Some(x), None) => x,
                (None, None) => return Ok(None),
            };
            Some(e.div(num, r)?)
        }
        BinaryOp::Max | BinaryOp::Min => {
            // The larger (smaller) operand's tangent; ties split evenly.
            let zero = e.scalar(0.0, dt);
            let tx = ta.unwrap_or(zero);
            let tz = match tr {
                Some(z) => e.cast(z, dt)?,
                None => zero,
            };
            let rr = e.cast(r, dt)?;
            let (a_wins, r_wins) = kinks::winners(e, b, a, rr)?;
            let both = e.add(tx, tz)?;
            let half = e.scale(both, 0.5)?;
            let inner = e.select(r_wins, tz, half)?;
            Some(e.select(a_wins, tx, inner)?)
        }
        BinaryOp::Pow => {
            let mut terms = Vec::new();
            if let Some(x) = ta {
                // r·a^(r−1)·ta; where r = 0 the term is 0 (a^(−1)·0 would be NaN at a = 0).
                let rr = e.cast(r, dt)?;
                let rm1 = e.add_scalar(rr, -1.0)?;
                let nonzero = constant_values(e, r).is_some_and(|v| v.iter().all(|&v| v != 0.0));
                let p = kinks::pow_base_slope(e, a, rr, rm1, nonzero)?;
                terms.push(e.mul(x, p)?);
            }
            if let Some(z) = tr {
                // y·ln(a)·tr, 0 at a = 0 (crate::kinks).
                let z = e.cast(z, dt)?;
                let yl = kinks::pow_exponent_slope(e, a, y)?;
                terms.push(e.mul(yl, z)?);
            }
            e.sum_terms(terms)?
        }
        BinaryOp::Mod => {
            // fmod(a, r) = a − trunc(a/r)·r → ta − trunc(a/r)·tr (crate::kinks).
            let mut terms = Vec::new();
            if let Some(x) = ta {
                terms.push(x);
            }
            if let Some(z) = tr {
                let z = e.cast(z, dt)?;
                let rr = e.cast(r, dt)?;
                let q = kinks::mod_quotient(e, a, y, rr)?;
                let qz = e.mul(q, z)?;
                terms.push(e.neg(qz)?);
            }
            e.sum_terms(terms)?
        }
        BinaryOp::Atan2 => {
            // (r·ta − a·tr)/(a² + r²).
            let rr = e.cast(r, dt)?;
            let mut terms = Vec::new();
            if let Some(x) = ta {
                terms.push(e.mul(rr, x)?);
            }
            if let Some(z) = tr {
                let z = e.cast(z, dt)?;
                let az = e.mul(a, z)?;
                terms.push(e.neg(az)?);
            }
            let Some(num) = e.sum_terms(terms)? else {
                return Ok(None);
            };
            let a2 = e.square(a)?;
            let r2 = e.square(rr)?;
            let den = e.add(a2, r2)?;
            Some(e.div(num, den)?)
        }
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => {
            None
        }
    };
    Ok(t)
}
