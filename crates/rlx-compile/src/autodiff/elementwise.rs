//! VJP rules of the element-wise ops: the 29 activations, casts, binary arithmetic,
//! `where`, and the straight-through / blocking ops.

use super::builder::Bw;
use crate::build::Build;
use crate::kinks;
use rlx_ir::{Activation, BinaryOp, IrResult, Node, NodeId, Op, TensorData};
use std::f64::consts::PI;

pub(super) fn vjp(bw: &mut Bw, node: &Node, g: NodeId) -> IrResult<()> {
    let x = node.inputs[0];
    match &node.op {
        Op::Activation(a) => {
            if bw.wants(node, 0) {
                let d = activation_grad(bw, *a, Some(x), node.id, g)?;
                bw.give(x, d)?;
            }
            Ok(())
        }
        // Float ↔ float (and real ↔ complex) casts are linear: cast the cotangent back
        // (`give` does). Straight-through rounding passes the cotangent unchanged.
        Op::Cast { .. } | Op::RoundToFormat { .. } => {
            if bw.wants(node, 0) {
                bw.give(x, g)?;
            }
            Ok(())
        }
        Op::StopGradient | Op::Compare(_) => Ok(()),
        Op::Binary(b) => binary(bw, node, *b, g),
        Op::Where => {
            let mask = node.inputs[0];
            if bw.wants(node, 1) {
                let gt = bw.keep_where(mask, g)?;
                bw.give(node.inputs[1], gt)?;
            }
            if bw.wants(node, 2) {
                let gf = bw.zero_where(mask, g)?;
                bw.give(node.inputs[2], gf)?;
            }
            Ok(())
        }
        other => unreachable!("elementwise::vjp got {}", other.name()),
    }
}

/// Whether the derivative of `a` needs its input (otherwise the output suffices).
pub(super) fn needs_input(a: Activation) -> bool {
    !matches!(
        a,
        Activation::Relu
            | Activation::Sigmoid
            | Activation::Tanh
            | Activation::Exp
            | Activation::Sqrt
            | Activation::Rsqrt
            | Activation::Neg
            | Activation::Tan
            | Activation::Recip
            | Activation::Round
            | Activation::Elu
    )
}

/// `g · a′(x)`, with `y = a(x)` available; `x` may be `None` when
/// [`needs_input`] is false. At kinks the piecewise activations follow the
/// conventions of [`crate::kinks`], built by the same helpers as forward mode.
pub(super) fn activation_grad(
    bw: &mut Bw,
    a: Activation,
    x: Option<NodeId>,
    y: NodeId,
    g: NodeId,
) -> IrResult<NodeId> {
    let x = || x.expect("activation_grad: this activation needs its input");
    use Activation as A;
    let d = match a {
        A::Gelu => {
            // Φ(x) + x·φ(x), Φ(x) = (1 + erf(x/√2))/2, φ(x) = e^{−x²/2}/√(2π).
            let x = x();
            let u = bw.scale(x, std::f64::consts::FRAC_1_SQRT_2)?;
            let e = bw.act(A::Erf, u)?;
            let e1 = bw.add_scalar(e, 1.0)?;
            let cdf = bw.scale(e1, 0.5)?;
            let xx = bw.mul(x, x)?;
            let h = bw.scale(xx, -0.5)?;
            let ex = bw.act(A::Exp, h)?;
            let pdf = bw.scale(ex, 1.0 / (2.0 * PI).sqrt())?;
            let xp = bw.mul(x, pdf)?;
            bw.add(cdf, xp)?
        }
        A::GeluApprox => {
            // y = ½x(1 + tanh u) = x·s with u = c(x + k x³), s = σ(2u) (as
            // ½(1 + tanh u) = σ(2u) and 1 − tanh²u = 4s(1 − s)):
            // y′ = s + x·s(1 − s)·2c(1 + 3k x²) — 12 ops where the tanh form takes 16.
            let x = x();
            let (c, k) = ((2.0 / PI).sqrt(), 0.044715);
            let xx = bw.mul(x, x)?;
            let a0 = bw.scale(xx, 2.0 * c * k)?;
            let a = bw.add_scalar(a0, 2.0 * c)?;
            let two_u = bw.mul(x, a)?;
            let s = bw.act(A::Sigmoid, two_u)?;
            let one_minus = bw.rsub_scalar(1.0, s)?;
            let ss = bw.mul(s, one_minus)?;
            let d0 = bw.scale(xx, 6.0 * c * k)?;
            let d = bw.add_scalar(d0, 2.0 * c)?;
            let xs = bw.mul(x, ss)?;
            let right = bw.mul(xs, d)?;
            bw.add(s, right)?
        }
        A::Silu => {
            // s + y(1 − s) with s = σ(x), y = x·s.
            let s = bw.act(A::Sigmoid, x())?;
            let ys = bw.mul(y, s)?;
            let y1 = bw.sub(y, ys)?;
            bw.add(s, y1)?
        }
        // y > 0 exactly where x > 0.
        A::Relu => {
            let m = kinks::positive(bw, y)?;
            return bw.keep_where(m, g);
        }
        A::Sigmoid => {
            let one_minus = bw.rsub_scalar(1.0, y)?;
            bw.mul(y, one_minus)?
        }
        A::Tanh => {
            let yy = bw.mul(y, y)?;
            bw.rsub_scalar(1.0, yy)?
        }
        A::Exp => y,
        A::Log => return bw.div(g, x()),
        A::Sqrt => {
            let q = bw.div(g, y)?;
            return bw.scale(q, 0.5);
        }
        A::Rsqrt => {
            let yy = bw.mul(y, y)?;
            let yyy = bw.mul(yy, y)?;
            bw.scale(yyy, -0.5)?
        }
        A::Neg => return bw.neg(g),
        A::Abs => kinks::abs_slope(bw, x())?,
        A::Sin => bw.act(A::Cos, x())?,
        A::Cos => {
            let s = bw.act(A::Sin, x())?;
            bw.neg(s)?
        }
        A::Tan => {
            let yy = bw.mul(y, y)?;
            bw.add_scalar(yy, 1.0)?
        }
        A::Atan => {
            let x = x();
            let xx = bw.mul(x, x)?;
            let den = bw.add_scalar(xx, 1.0)?;
            return bw.div(g, den);
        }
        A::Recip => {
            let yy = bw.mul(y, y)?;
            bw.neg(yy)?
        }
        // Straight-through (API: round has an identity gradient).
        A::Round => return Ok(g),
        A::Floor | A::Ceil | A::Sign => {
            unreachable!("flow::blocked stops gradients at {}", a.name())
        }
        A::Softplus => bw.act(A::Sigmoid, x())?,
        // y > 0 exactly where x > 0.
        A::Elu => kinks::elu_slope(bw, y, y)?,
        A::Erf => {
            let x = x();
            let xx = bw.mul(x, x)?;
            let n = bw.neg(xx)?;
            let e = bw.act(A::Exp, n)?;
            bw.scale(e, 2.0 / PI.sqrt())?
        }
        A::HardSwish => kinks::hard_swish_slope(bw, x())?,
        A::HardSigmoid => kinks::hard_sigmoid_slope(bw, x())?,
        A::Mish => {
            // tanh(sp) + x·(1 − tanh²(sp))·σ(x), sp = softplus(x).
            let x = x();
            let sp = bw.act(A::Softplus, x)?;
            let t = bw.act(A::Tanh, sp)?;
            let tt = bw.mul(t, t)?;
            let sech2 = bw.rsub_scalar(1.0, tt)?;
            let s = bw.act(A::Sigmoid, x)?;
            let xs = bw.mul(x, sech2)?;
            let r = bw.mul(xs, s)?;
            bw.add(t, r)?
        }
        A::Softsign => {
            let ax = bw.act(A::Abs, x())?;
            let den = bw.add_scalar(ax, 1.0)?;
            let den2 = bw.mul(den, den)?;
            return bw.div(g, den2);
        }
        // d/dx ln σ(x) = 1 − σ(x) = σ(−x).
        A::LogSigmoid => {
            let n = bw.neg(x())?;
            bw.act(A::Sigmoid, n)?
        }
    };
    bw.mul(g, d)
}

/// The value of a rank-0 constant node, if `id` is one.
fn scalar_constant(bw: &Bw, id: NodeId) -> Option<f64> {
    let n = bw.g.node(id);
    match &n.op {
        Op::Constant { data } if n.shape.rank() == 0 => {
            TensorData::new(n.shape.dtype(), &[], data.clone())
                .ok()
                .and_then(|d| d.to_f64_vec().first().copied())
        }
        _ => None,
    }
}

fn binary(bw: &mut Bw, node: &Node, b: BinaryOp, g: NodeId) -> IrResult<()> {
    let (l, r, y) = (node.inputs[0], node.inputs[1], node.id);
    let (wl, wr) = (bw.wants(node, 0), bw.wants(node, 1));
    if !wl && !wr {
        return Ok(());
    }
    // The oracle converts the rhs to the result (lhs) dtype before computing.
    let dt = bw.dtype(y);
    // Add/Sub never read the rhs; Mul reads it only for the lhs gradient, Mod only
    // for the rhs gradient.
    let uses_rhs = match b {
        BinaryOp::Add | BinaryOp::Sub => false,
        BinaryOp::Mul => wl,
        BinaryOp::Mod => wr,
        _ => true,
    };
    let rv = if uses_rhs { bw.cast(r, dt)? } else { r };
    let (gl, gr) = match b {
        BinaryOp::Add => (Some(g), Some(g)),
        BinaryOp::Sub => (Some(g), if wr { Some(bw.neg(g)?) } else { None }),
        // x·x: one term 2·g·x instead of two equal ones.
        BinaryOp::Mul if l == r => {
            let gx = bw.mul(g, l)?;
            (Some(bw.scale(gx, 2.0)?), None)
        }
        BinaryOp::Mul => (
            if wl { Some(bw.mul(g, rv)?) } else { None },
            if wr { Some(bw.mul(g, l)?) } else { None },
        ),
        BinaryOp::Div => {
            // ∂/∂l = 1/r; ∂/∂r = −l/r² = −y/r, so gr = −(g/r)·y reuses g/r.
            let q = bw.div(g, rv)?;
            let gr = if wr {
                let qy = bw.mul(q, y)?;
                Some(bw.neg(qy)?)
            } else {
                None
            };
            (Some(q), gr)
        }
        BinaryOp::Max | BinaryOp::Min => {
            // The winner takes the gradient; ties split it evenly (crate::kinks).
            let (l_wins, r_wins) = kinks::winners(bw, b, l, rv)?;
            let half = bw.scale(g, 0.5)?;
            let side = |bw: &mut Bw, other_wins: NodeId, me_wins: NodeId| -> IrResult<NodeId> {
                let tie_or_lose = bw.zero_where(other_wins, half)?;
                bw.select(me_wins, g, tie_or_lose)
            };
            (
                if wl {
                    Some(side(bw, r_wins, l_wins)?)
                } else {
                    None
                },
                if wr {
                    Some(side(bw, l_wins, r_wins)?)
                } else {
                    None
                },
            )
        }
        BinaryOp::Pow => {
            let gl = if wl {
                // r·l^(r−1); a constant exponent folds r − 1 at build time.
                // 0 where r = 0 (crate::kinks), unless r is a nonzero constant.
                let c = scalar_constant(bw, r);
                let rm1 = match c {
                    Some(e) => bw.scalar(e - 1.0, dt),
                    None => bw.add_scalar(rv, -1.0)?,
                };
                let rp = kinks::pow_base_slope(bw, l, rv, rm1, c.is_some_and(|e| e != 0.0))?;
                Some(bw.mul(g, rp)?)
            } else {
                None
            };
            let gr = if wr {
                // y·ln l, taken as 0 at l = 0 (crate::kinks).
                let d = kinks::pow_exponent_slope(bw, l, y)?;
                Some(bw.mul(g, d)?)
            } else {
                None
            };
            (gl, gr)
        }
        BinaryOp::Mod => {
            // fmod(l, r) = l − trunc(l/r)·r: ∂/∂l = 1, ∂/∂r = −trunc(l/r) (crate::kinks).
            let gr = if wr {
                let t = kinks::mod_quotient(bw, l, y, rv)?;
                let gt = bw.mul(g, t)?;
                Some(bw.neg(gt)?)
            } else {
                None
            };
            (Some(g), gr)
        }
        BinaryOp::Atan2 => {
            // atan2(l, r): ∂/∂l = r/(l² + r²), ∂/∂r = −l/(l² + r²).
            let ll = bw.mul(l, l)?;
            let rr = bw.mul(rv, rv)?;
            let den = bw.add(ll, rr)?;
            let q = bw.div(g, den)?;
            let gl = if wl { Some(bw.mul(q, rv)?) } else { None };
            let gr = if wr {
                let ql = bw.mul(q, l)?;
                Some(bw.neg(ql)?)
            } else {
                None
            };
            (gl, gr)
        }
        // Bitwise ops only take integers, which carry no gradient.
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => {
            (None, None)
        }
    };
    if let (true, Some(gl)) = (wl, gl) {
        bw.give(l, gl)?;
    }
    if let (true, Some(gr)) = (wr, gr) {
        bw.give(r, gr)?;
    }
    Ok(())
}
