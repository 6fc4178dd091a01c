//! The derivative conventions at non-differentiable points ("kinks"), written down
//! once and built by the same code in both modes.
//!
//! Reverse mode (`autodiff`) and forward mode (`jvp`) build their derivatives from the
//! same rules (`derivatives`), and every region test
//! and piecewise slope below is the one those rules call, so the two modes cannot
//! pick different branches at a boundary (before the rules were shared, HardSigmoid
//! took slope 1/6 at ±3 in reverse mode and 0 in forward mode). The tests in
//! `tests/kinks.rs` evaluate both modes at each kink and beside it, for every
//! element-wise op.

//! The conventions follow PyTorch's autograd where it has one:
//!
//! | op | kink | derivative there | PyTorch |
//! |---|---|---|---|
//! | `relu` | `x = 0` | 0 (active region `x > 0`) | same (`threshold_backward`: `x <= 0` → 0) |
//! | `elu` (α = 1) | `x = 0` | 1 (both branches give 1: `e⁰ = 1`) | same |
//! | `abs` | `x = 0` | 0 (`sign(0)`) | same (`sgn`) |
//! | `hard_sigmoid` | `x = ±3` | 0 (slope 1/6 on the open interval `(−3, 3)`) | same (`hardsigmoid_backward`: `−3 < x < 3`) |
//! | `hard_swish` | `x = ±3` | middle branch `x/3 + 1/2` on the closed `[−3, 3]`: −1/2 at −3, 3/2 at 3; 0 below, 1 above | same (`hardswish_backward`: `x < −3` → 0, `x ≤ 3` → `x/3 + 1/2`) |
//! | `softsign` | `x = 0` (`\|x\|` inside) | 1 (`1/(1 + \|x\|)²` is continuous) | same |
//! | `floor`, `ceil`, `sign` | jumps | 0 everywhere; reverse mode refuses a path that only runs through them | 0 |
//! | `round`, `round_to_format` | jumps | 1 (straight-through, as the API specifies) | 0 for `round` (rlx differs by design) |
//! | `maximum` / `minimum` | `l = r` | ½ to each operand (NaN compares as a tie) | same (`masked_fill` … `/ 2`) |
//! | `clamp` (built from max/min) | at a bound | ½ (a tie of `maximum`/`minimum`) | 1 (rlx differs: it is a composite here) |
//! | `reduce max` / `min` | tied extrema | split evenly over the tied elements | same for `amax`/`amin` |
//! | max pooling | tied taps | the first maximal tap of the window | same |
//! | `where` | mask flips | the branch the mask picks; the mask gets none | same |
//! | `pow(l, r)`, `∂/∂l` | `r = 0` | 0 (not `0·l⁻¹`, NaN at `l = 0`) | same (`pow_backward`: `exponent == 0` → 0) |
//! | `pow(l, r)`, `∂/∂r` | `l = 0` | 0 (not `0^r · ln 0`, NaN) | same for `r ≥ 0` (`pow_backward_exponent`); rlx also takes 0 for `r < 0` |
//! | `fmod(l, r)` | `l/r` an integer (a jump) | `∂/∂l = 1`; `∂/∂r = −q` with `q = round((l − y)/r)` the integer quotient the op used | `∂/∂r = −trunc(l/r)` |

use crate::build::Build;
use rlx_ir::{Activation, BinaryOp, CmpOp, IrResult, NodeId};

/// The region where `relu` and `elu` take their right branch: `v > 0`. `v` may be
/// `x` or the op's output `relu(x)` / `elu(x)`, which are positive exactly where `x`
/// is (so reverse mode can use the output when the input is not a graph value).
pub(crate) fn positive<B: Build>(b: &mut B, v: NodeId) -> IrResult<NodeId> {
    b.cmp_scalar(CmpOp::Gt, v, 0.0)
}

/// `elu′`: 1 where `v > 0` (see [`positive`]), else `eˣ = y + 1`.
pub(crate) fn elu_slope<B: Build>(b: &mut B, v: NodeId, y: NodeId) -> IrResult<NodeId> {
    let pos = positive(b, v)?;
    let left = b.add_scalar(y, 1.0)?;
    let one = b.scalar_like(1.0, y);
    b.select(pos, one, left)
}

/// `abs′ = sign(x)`, 0 at 0.
pub(crate) fn abs_slope<B: Build>(b: &mut B, x: NodeId) -> IrResult<NodeId> {
    b.act(Activation::Sign, x)
}

/// `hard_sigmoid′`: 1/6 on the open interval `(−3, 3)`, 0 elsewhere (and at ±3).
pub(crate) fn hard_sigmoid_slope<B: Build>(b: &mut B, x: NodeId) -> IrResult<NodeId> {
    let abs = b.act(Activation::Abs, x)?;
    let inside = b.cmp_scalar(CmpOp::Lt, abs, 3.0)?;
    let sixth = b.scalar_like(1.0 / 6.0, x);
    let zero = b.scalar_like(0.0, x);
    b.select(inside, sixth, zero)
}

/// `hard_swish′`: 0 below −3, 1 above 3, `x/3 + 1/2` on the closed `[−3, 3]`.
pub(crate) fn hard_swish_slope<B: Build>(b: &mut B, x: NodeId) -> IrResult<NodeId> {
    let lin = b.scale(x, 1.0 / 3.0)?;
    let mid = b.add_scalar(lin, 0.5)?;
    let hi = b.cmp_scalar(CmpOp::Gt, x, 3.0)?;
    let one = b.scalar_like(1.0, x);
    let upper = b.select(hi, one, mid)?;
    let lo = b.cmp_scalar(CmpOp::Lt, x, -3.0)?;
    b.zero_where(lo, upper)
}

/// For `maximum` (`b = Max`) or `minimum` (`Min`) of `l` and `r` (already in the
/// result dtype): the masks `(l wins, r wins)`. Where neither wins (a tie, or a NaN
/// operand) each operand gets half the derivative.
pub(crate) fn winners<B: Build>(
    b: &mut B,
    op: BinaryOp,
    l: NodeId,
    r: NodeId,
) -> IrResult<(NodeId, NodeId)> {
    let wins = if op == BinaryOp::Max {
        CmpOp::Gt
    } else {
        CmpOp::Lt
    };
    let l_wins = b.cmp(wins, l, r)?;
    let r_wins = b.cmp(wins, r, l)?;
    Ok((l_wins, r_wins))
}

/// The elements of `x` that attain the `max`/`min` reduction `yk` (in keep-dim
/// form): ties all count, and the derivative is split evenly over them.
pub(crate) fn extremum_hits<B: Build>(b: &mut B, x: NodeId, yk: NodeId) -> IrResult<NodeId> {
    b.cmp(CmpOp::Eq, x, yk)
}

/// `∂ pow(l, r)/∂l = r·l^(r−1)`, 0 where `r = 0` (where `0·l⁻¹` would be NaN at
/// `l = 0`). `rm1` is `r − 1`; `r_nonzero` says the guard cannot fire (a constant
/// exponent without zeros), so it is not built.
pub(crate) fn pow_base_slope<B: Build>(
    b: &mut B,
    l: NodeId,
    r: NodeId,
    rm1: NodeId,
    r_nonzero: bool,
) -> IrResult<NodeId> {
    let p = b.bin(BinaryOp::Pow, l, rm1)?;
    let d = b.mul(r, p)?;
    if r_nonzero {
        return Ok(d);
    }
    let rz = b.cmp_scalar(CmpOp::Eq, r, 0.0)?;
    b.zero_where(rz, d)
}

/// `∂ pow(l, r)/∂r = y·ln l` with `y = pow(l, r)`, 0 where `l = 0` (where `0^r` is
/// flat in `r` for `r > 0`, and `0·ln 0` would be NaN).
pub(crate) fn pow_exponent_slope<B: Build>(b: &mut B, l: NodeId, y: NodeId) -> IrResult<NodeId> {
    let ln = b.act(Activation::Log, l)?;
    let yl = b.mul(y, ln)?;
    let z = b.cmp_scalar(CmpOp::Eq, l, 0.0)?;
    b.zero_where(z, yl)
}

/// The integer quotient `fmod(l, r)` used: `trunc(l/r) = (l − y)/r`, rounded to the
/// integer it is (the division can land a rounding error off it), so
/// `∂ fmod(l, r)/∂r = −q`. `l`, `y` and `r` are in the result dtype.
pub(crate) fn mod_quotient<B: Build>(
    b: &mut B,
    l: NodeId,
    y: NodeId,
    r: NodeId,
) -> IrResult<NodeId> {
    let diff = b.sub(l, y)?;
    let q = b.div(diff, r)?;
    b.act(Activation::Round, q)
}
