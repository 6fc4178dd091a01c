//! The derivative rules both modes share, written once and generic over [`Build`].
//!
//! Reverse mode (`autodiff`) and forward mode (`jvp`) differ only in
//! the seed they push through a rule: a cotangent flowing back from the output, or
//! tangents flowing forward from the operands. Where an op's Jacobian has a shape that
//! both directions can use directly, the rule lives here and each mode applies it:
//!
//! - [`elementwise`]: the element-wise family (activations, binary arithmetic, casts,
//!   `where`, straight-through rounding). The Jacobian is diagonal, so one partial
//!   derivative per operand, expressed as the linear map it applies to a seed
//!   ([`Partial`]), serves both: forward mode sums the maps applied to the operands'
//!   tangents, reverse mode applies each to the cotangent (and `give` sums it back to
//!   the operand's dims).
//! - [`linear`]: the ops that are linear (jointly or in each operand separately) —
//!   movement, sum/mean, cumsum, gathers and scatters, matmuls, the convolution
//!   gradient ops, linear pooling, FFT. Their tangent is the op applied to the
//!   tangents, built in one generic place; reverse mode applies each op's transpose
//!   rule (in `autodiff`, one per op: a linear op has no other derivative rule).
//! - [`nn`]: softmax and the normalizations (symmetric Jacobians, applied to either
//!   seed), the cross-entropy losses (partials over the class axis) and the spline's
//!   slope.
//! - [`reduce`]: the non-linear reductions (`max`/`min`: split evenly over ties;
//!   `prod`: prefix × suffix partials), whose partials both modes build here.
//!
//! - attention: one primitive form in `decompose::attention` (scores →
//!   probabilities → output, from one head-major forward pass). Forward mode
//!   differentiates its value through those primitives; reverse mode builds its
//!   backward pass on the same forward pass (with [`nn::softmax_jacobian`]) when the
//!   fused `attention_vjp` does not apply, and that op lowers to it.
//! - [`pool`] and [`scaled`]: the primitive forms both modes' rules for max pooling
//!   and the straight-through scaled matmul are built from.
//!
//! The conventions at non-differentiable points are those of [`crate::kinks`].
//!
//! [`Build`]: crate::build::Build
//! [`Partial`]: elementwise::Partial

pub(crate) mod elementwise;
pub(crate) mod linear;
pub(crate) mod nn;
pub(crate) mod pool;
pub(crate) mod prod;
pub(crate) mod reduce;
pub(crate) mod scaled;
