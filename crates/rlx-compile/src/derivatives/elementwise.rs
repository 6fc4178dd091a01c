//! One derivative rule per element-wise op, for both modes.
//!
//! An element-wise op has a diagonal Jacobian: `∂yₖ/∂xᵢₖ` is a tensor `dᵢ` of the
//! output's dims (after broadcasting), and the derivative with respect to operand `i`
//! is the map `s ↦ dᵢ ⊙ s`. [`partials`] builds that map per operand as a [`Partial`]
//! (a few steps such as `· d`, `/ d`, `where(mask, ·, 0)`), and the two modes apply it
//! to their seed:
//!
//! - forward mode: `ty = Σᵢ Partialᵢ(txᵢ)` (each tangent first cast to the result dtype);
//! - reverse mode: `gxᵢ = Partialᵢ(g)`, summed down to `xᵢ`'s dims and cast to its dtype
//!   by `give` (the transpose of a diagonal map is itself; un-broadcasting is the
//!   transpose of the broadcast).
//!
//! A partial is a map rather than a value so that the cheaper form survives: `log`
//! divides the seed by `x` instead of multiplying it by `1/x`, `relu` selects instead
//! of multiplying by a 0/1 mask, and `maximum` routes the seed to the winner (a
//! product with a 0 would turn an infinite seed into NaN). [`Applier`] builds each
//! (seed, step) once, so the operands of a reverse rule share their common prefix
//! (`g/r` of `l/r`, `g/(l² + r²)` of `atan2`, `g/2` of a tie).

use crate::build::Build;
use crate::kinks;
use rlx_ir::{Activation, BinaryOp, IrResult, NodeId, Op, TensorData};
use std::f64::consts::PI;

/// One step of the linear map a [`Partial`] applies to a seed `s`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Step {
    /// `s · d`.
    Mul(NodeId),
    /// `s / d`.
    Div(NodeId),
    /// `s · v` for a constant `v` (no node for 1).
    Scale(f64),
    /// `−s`.
    Neg,
    /// `where(mask, s, 0)`.
    KeepWhere(NodeId),
    /// `where(mask, 0, s)`.
    ZeroWhere(NodeId),
    /// The seed of a `maximum`/`minimum` operand: all of it where this operand wins,
    /// none where the other one does, half on a tie (see [`kinks::winners`]):
    /// `where(wins, s, where(other_wins, 0, s/2))`.
    Winner { wins: NodeId, other_wins: NodeId },
}

/// The partial derivative of an element-wise op with respect to one operand, as the
/// linear map it applies to a seed (a tangent of that operand, or the cotangent of
/// the output): the steps in order, none for the identity.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Partial {
    steps: Vec<Step>,
}

impl Partial {
    /// The identity map (casts, `add`, straight-through rounding).
    pub(crate) fn identity() -> Partial {
        Partial::default()
    }

    /// The map of `steps`, applied in order.
    pub(crate) fn of(steps: impl Into<Vec<Step>>) -> Partial {
        Partial {
            steps: steps.into(),
        }
    }

    /// `s ↦ s · d`.
    pub(crate) fn times(d: NodeId) -> Partial {
        Partial::of([Step::Mul(d)])
    }
}

/// Applies partials to seeds, building each (seed, step) pair once.
#[derive(Default)]
pub(crate) struct Applier {
    built: Vec<(NodeId, Step, NodeId)>,
}

impl Applier {
    /// `p(seed)`.
    pub(crate) fn apply<B: Build>(
        &mut self,
        b: &mut B,
        p: &Partial,
        seed: NodeId,
    ) -> IrResult<NodeId> {
        let mut s = seed;
        for &step in &p.steps {
            s = self.step(b, s, step)?;
        }
        Ok(s)
    }

    fn step<B: Build>(&mut self, b: &mut B, s: NodeId, step: Step) -> IrResult<NodeId> {
        if let Some(&(_, _, out)) = self.built.iter().find(|e| e.0 == s && e.1 == step) {
            return Ok(out);
        }
        let out = match step {
            Step::Mul(d) => b.mul(s, d)?,
            Step::Div(d) => b.div(s, d)?,
            Step::Scale(v) => b.scale(s, v)?,
            Step::Neg => b.neg(s)?,
            Step::KeepWhere(m) => b.keep_where(m, s)?,
            Step::ZeroWhere(m) => b.zero_where(m, s)?,
            Step::Winner { wins, other_wins } => {
                let half = self.step(b, s, Step::Scale(0.5))?;
                let tie_or_lose = b.zero_where(other_wins, half)?;
                b.select(wins, s, tie_or_lose)?
            }
        };
        self.built.push((s, step, out));
        Ok(out)
    }
}

/// The partials of the element-wise op `op` (activation, cast, binary, compare,
/// `where`, `stop_gradient`, `round_to_format`) applied to `inputs` with result `y`,
/// for the operand slots `want` asks for. An entry is `None` where the derivative is
/// zero (a mask, a comparison, a piecewise-constant activation, a bitwise op) or was
/// not asked for. `floor`, `ceil` and `sign` give `None`; reverse mode reports them
/// as blocking (see `autodiff::flow`).
pub(crate) fn partials<B: Build>(
    b: &mut B,
    op: &Op,
    inputs: &[NodeId],
    y: NodeId,
    want: &[bool],
) -> IrResult<Vec<Option<Partial>>> {
    let mut out = vec![None; inputs.len()];
    match op {
        Op::Activation(a) if want[0] => out[0] = activation_partial(b, *a, Some(inputs[0]), y)?,
        // Float ↔ float (and real ↔ complex) casts are linear; the modes cast the seed
        // (forward: to the result dtype, reverse: back to the operand's). Rounding to a
        // format is straight-through (API: identity gradient).
        Op::Cast { .. } | Op::RoundToFormat { .. } if want[0] => out[0] = Some(Partial::identity()),
        Op::Binary(op) => {
            let [l, r] = binary(b, *op, inputs[0], inputs[1], y, [want[0], want[1]])?;
            (out[0], out[1]) = (l, r);
        }
        // The branch the mask picks gets the seed; the mask gets none (crate::kinks).
        Op::Where => {
            let mask = inputs[0];
            if want[1] {
                out[1] = Some(Partial::of([Step::KeepWhere(mask)]));
            }
            if want[2] {
                out[2] = Some(Partial::of([Step::ZeroWhere(mask)]));
            }
        }
        Op::Activation(_)
        | Op::Cast { .. }
        | Op::RoundToFormat { .. }
        | Op::StopGradient
        | Op::Compare(_) => {}
        other => unreachable!("elementwise partials of {}", other.name()),
    }
    Ok(out)
}

/// Whether the derivative of `a` needs its input (otherwise the output suffices, and
/// a fused op need not recompute its pre-activation).
pub(crate) fn needs_input(a: Activation) -> bool {
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
            | Activation::Floor
            | Activation::Ceil
            | Activation::Sign
    )
}

/// `a′` at `x` as a [`Partial`], with `y = a(x)` available; `x` may be `None` when
/// [`needs_input`] is false. `None` for the piecewise-constant `floor`, `ceil`,
/// `sign`. At kinks the piecewise activations follow [`crate::kinks`].
pub(crate) fn activation_partial<B: Build>(
    b: &mut B,
    a: Activation,
    x: Option<NodeId>,
    y: NodeId,
) -> IrResult<Option<Partial>> {
    let x = || x.expect("the derivative of this activation needs its input");
    use Activation as A;
    let d = match a {
        A::Floor | A::Ceil | A::Sign => return Ok(None),
        // Straight-through (API: round has an identity gradient).
        A::Round => return Ok(Some(Partial::identity())),
        A::Neg => return Ok(Some(Partial::of([Step::Neg]))),
        // y > 0 exactly where x > 0.
        A::Relu => {
            let m = kinks::positive(b, y)?;
            return Ok(Some(Partial::of([Step::KeepWhere(m)])));
        }
        A::Log => return Ok(Some(Partial::of([Step::Div(x())]))),
        A::Sqrt => return Ok(Some(Partial::of([Step::Div(y), Step::Scale(0.5)]))),
        A::Atan => {
            let x = x();
            let xx = b.mul(x, x)?;
            let den = b.add_scalar(xx, 1.0)?;
            return Ok(Some(Partial::of([Step::Div(den)])));
        }
        A::Softsign => {
            let ax = b.act(A::Abs, x())?;
            let den = b.add_scalar(ax, 1.0)?;
            let den2 = b.mul(den, den)?;
            return Ok(Some(Partial::of([Step::Div(den2)])));
        }
        A::Gelu => {
            // Φ(x) + x·φ(x), Φ(x) = (1 + erf(x/√2))/2, φ(x) = e^{−x²/2}/√(2π).
            // The x86 JIT finds this chain by its spelling (rlx-cpu jit/lower/erf.rs
            // `dgelu_chains`: these ops and constants, operands in either order) and
            // computes it from one table; respelt, it runs the erf and exp again.
            let x = x();
            let u = b.scale(x, std::f64::consts::FRAC_1_SQRT_2)?;
            let e = b.act(A::Erf, u)?;
            let e1 = b.add_scalar(e, 1.0)?;
            let cdf = b.scale(e1, 0.5)?;
            let xx = b.mul(x, x)?;
            let h = b.scale(xx, -0.5)?;
            let ex = b.act(A::Exp, h)?;
            let pdf = b.scale(ex, 1.0 / (2.0 * PI).sqrt())?;
            let xp = b.mul(x, pdf)?;
            b.add(cdf, xp)?
        }
        A::GeluApprox => {
            // y = ½x(1 + tanh u) = x·s with u = c(x + k x³), s = σ(2u) (as
            // ½(1 + tanh u) = σ(2u) and 1 − tanh²u = 4s(1 − s)):
            // y′ = s + x·s(1 − s)·2c(1 + 3k x²) — 12 ops where the tanh form takes 16.
            let x = x();
            let (c, k) = ((2.0 / PI).sqrt(), 0.044715);
            let xx = b.mul(x, x)?;
            let a0 = b.scale(xx, 2.0 * c * k)?;
            let a = b.add_scalar(a0, 2.0 * c)?;
            let two_u = b.mul(x, a)?;
            let s = b.act(A::Sigmoid, two_u)?;
            let one_minus = b.rsub_scalar(1.0, s)?;
            let ss = b.mul(s, one_minus)?;
            let d0 = b.scale(xx, 6.0 * c * k)?;
            let d = b.add_scalar(d0, 2.0 * c)?;
            let xs = b.mul(x, ss)?;
            let right = b.mul(xs, d)?;
            b.add(s, right)?
        }
        A::Silu => {
            // s + y(1 − s) with s = σ(x), y = x·s.
            let s = b.act(A::Sigmoid, x())?;
            let ys = b.mul(y, s)?;
            let y1 = b.sub(y, ys)?;
            b.add(s, y1)?
        }
        A::Sigmoid => {
            let one_minus = b.rsub_scalar(1.0, y)?;
            b.mul(y, one_minus)?
        }
        A::Tanh => {
            let yy = b.mul(y, y)?;
            b.rsub_scalar(1.0, yy)?
        }
        A::Exp => y,
        A::Rsqrt => {
            let yy = b.mul(y, y)?;
            let yyy = b.mul(yy, y)?;
            b.scale(yyy, -0.5)?
        }
        A::Abs => kinks::abs_slope(b, x())?,
        A::Sin => b.act(A::Cos, x())?,
        A::Cos => {
            let s = b.act(A::Sin, x())?;
            b.neg(s)?
        }
        A::Tan => {
            let yy = b.mul(y, y)?;
            b.add_scalar(yy, 1.0)?
        }
        A::Recip => {
            let yy = b.mul(y, y)?;
            b.neg(yy)?
        }
        A::Softplus => b.act(A::Sigmoid, x())?,
        // y > 0 exactly where x > 0.
        A::Elu => kinks::elu_slope(b, y, y)?,
        A::Erf => {
            let x = x();
            let xx = b.mul(x, x)?;
            let n = b.neg(xx)?;
            let e = b.act(A::Exp, n)?;
            b.scale(e, 2.0 / PI.sqrt())?
        }
        A::HardSwish => kinks::hard_swish_slope(b, x())?,
        A::HardSigmoid => kinks::hard_sigmoid_slope(b, x())?,
        A::Mish => {
            // tanh(sp) + x·(1 − tanh²(sp))·σ(x), sp = softplus(x).
            let x = x();
            let sp = b.act(A::Softplus, x)?;
            let t = b.act(A::Tanh, sp)?;
            let tt = b.mul(t, t)?;
            let sech2 = b.rsub_scalar(1.0, tt)?;
            let s = b.act(A::Sigmoid, x)?;
            let xs = b.mul(x, sech2)?;
            let r = b.mul(xs, s)?;
            b.add(t, r)?
        }
        // d/dx ln σ(x) = 1 − σ(x) = σ(−x).
        A::LogSigmoid => {
            let n = b.neg(x())?;
            b.act(A::Sigmoid, n)?
        }
    };
    Ok(Some(Partial::times(d)))
}

/// The values of `id` when it is a constant (for skipping guards that cannot fire).
fn constant_values<B: Build>(b: &B, id: NodeId) -> Option<Vec<f64>> {
    let n = b.graph().node(id);
    match &n.op {
        Op::Constant { data } => {
            let dims = n.shape.static_dims()?;
            let td = TensorData::new(n.shape.dtype(), &dims, data.clone()).ok()?;
            Some(td.to_f64_vec())
        }
        _ => None,
    }
}

/// The partials of `y = l <op> r` for the slots `want` asks for.
fn binary<B: Build>(
    b: &mut B,
    op: BinaryOp,
    l: NodeId,
    r: NodeId,
    y: NodeId,
    [wl, wr]: [bool; 2],
) -> IrResult<[Option<Partial>; 2]> {
    if !wl && !wr {
        return Ok([None, None]);
    }
    let keep = |w: bool, p: Partial| w.then_some(p);
    // The oracle converts the rhs to the result (lhs) dtype before computing. Add/Sub
    // never read the rhs; Mul reads it only for the lhs partial, Mod only for the rhs one.
    let dt = b.dtype(y);
    let uses_rhs = match op {
        BinaryOp::Add | BinaryOp::Sub => false,
        BinaryOp::Mul => wl,
        BinaryOp::Mod => wr,
        _ => true,
    };
    let rv = if uses_rhs { b.cast(r, dt)? } else { r };
    Ok(match op {
        BinaryOp::Add => [keep(wl, Partial::identity()), keep(wr, Partial::identity())],
        BinaryOp::Sub => [
            keep(wl, Partial::identity()),
            keep(wr, Partial::of([Step::Neg])),
        ],
        // x·x: one partial 2x on the first slot instead of two equal ones (the seeds
        // of both slots are the same).
        BinaryOp::Mul if l == r => [Some(Partial::of([Step::Mul(l), Step::Scale(2.0)])), None],
        BinaryOp::Mul => [keep(wl, Partial::times(rv)), keep(wr, Partial::times(l))],
        // ∂/∂l = 1/r; ∂/∂r = −l/r² = −y/r, applied as −(s/r)·y to share s/r.
        BinaryOp::Div => [
            keep(wl, Partial::of([Step::Div(rv)])),
            keep(wr, Partial::of([Step::Div(rv), Step::Mul(y), Step::Neg])),
        ],
        BinaryOp::Max | BinaryOp::Min => {
            // The winner takes the seed; ties split it evenly (crate::kinks).
            let (l_wins, r_wins) = kinks::winners(b, op, l, rv)?;
            [
                keep(
                    wl,
                    Partial::of([Step::Winner {
                        wins: l_wins,
                        other_wins: r_wins,
                    }]),
                ),
                keep(
                    wr,
                    Partial::of([Step::Winner {
                        wins: r_wins,
                        other_wins: l_wins,
                    }]),
                ),
            ]
        }
        BinaryOp::Pow => {
            let pl = if wl {
                // r·l^(r−1); a rank-0 constant exponent folds r − 1 at build time, and
                // the guard for r = 0 (crate::kinks) is skipped for a constant without zeros.
                let values = constant_values(b, r);
                let rm1 = match values.as_deref() {
                    Some(&[e]) if b.rank(r) == 0 => b.scalar(e - 1.0, dt),
                    _ => b.add_scalar(rv, -1.0)?,
                };
                let nonzero = values.is_some_and(|v| v.iter().all(|&v| v != 0.0));
                Some(Partial::times(kinks::pow_base_slope(
                    b, l, rv, rm1, nonzero,
                )?))
            } else {
                None
            };
            // y·ln l, taken as 0 at l = 0 (crate::kinks).
            let pr = if wr {
                Some(Partial::times(kinks::pow_exponent_slope(b, l, y)?))
            } else {
                None
            };
            [pl, pr]
        }
        BinaryOp::Mod => {
            // fmod(l, r) = l − trunc(l/r)·r: ∂/∂l = 1, ∂/∂r = −trunc(l/r) (crate::kinks).
            let pr = if wr {
                let q = kinks::mod_quotient(b, l, y, rv)?;
                Some(Partial::of([Step::Mul(q), Step::Neg]))
            } else {
                None
            };
            [keep(wl, Partial::identity()), pr]
        }
        BinaryOp::Atan2 => {
            // atan2(l, r): ∂/∂l = r/(l² + r²), ∂/∂r = −l/(l² + r²).
            let ll = b.mul(l, l)?;
            let rr = b.mul(rv, rv)?;
            let den = b.add(ll, rr)?;
            [
                keep(wl, Partial::of([Step::Div(den), Step::Mul(rv)])),
                keep(wr, Partial::of([Step::Div(den), Step::Mul(l), Step::Neg])),
            ]
        }
        // Bitwise ops only take integers, which carry no derivative.
        BinaryOp::BitAnd | BinaryOp::BitOr | BinaryOp::BitXor | BinaryOp::Shl | BinaryOp::Shr => {
            [None, None]
        }
    })
}
