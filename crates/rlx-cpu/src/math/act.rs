//! One [`Lane`] per [`Activation`](rlx_ir::Activation), and the dispatch from an activation value to the
//! monomorphized slice loop.
//!
//! The semantics follow the oracle (`rlx_ir::interp`): NaN in gives NaN out for every
//! activation; `relu(−0) = sign(±0) = +0`; where `x·g(x)` would be `∞·0` at `x = −∞` the
//! limit `−0` is returned.

use super::simd::{Lane, Look16, sel};
use super::{expo, special, trig};

macro_rules! lanes {
    ($($(#[$m:meta])* $name:ident = |$x:ident, $F:ident| $body:expr;)*) => {$(
        $(#[$m])*
        pub(crate) struct $name;
        impl Lane for $name {
            #[inline(always)]
            fn f<const $F: bool>($x: f32) -> f32 {
                $body
            }
        }
    )*};
}

/// Exact GELU; 16-lane chunks read the table by permutes.
pub(crate) struct Gelu;
impl Lane for Gelu {
    #[inline(always)]
    fn f<const F: bool>(x: f32) -> f32 {
        special::gelu::<F>(x)
    }
    const CHUNKED: bool = true;
    #[inline(always)]
    unsafe fn f16<const F: bool, T: Look16>(x: &[f32; 16]) -> [f32; 16] {
        // SAFETY: the caller's contract.
        unsafe { special::gelu16::<F, T>(x) }
    }
}

/// erf; 16-lane chunks read the table by permutes.
pub(crate) struct Erf;
impl Lane for Erf {
    #[inline(always)]
    fn f<const F: bool>(x: f32) -> f32 {
        special::erf::<F>(x)
    }
    const CHUNKED: bool = true;
    #[inline(always)]
    unsafe fn f16<const F: bool, T: Look16>(x: &[f32; 16]) -> [f32; 16] {
        // SAFETY: the caller's contract.
        unsafe { special::erf16::<F, T>(x) }
    }
}

lanes! {
    GeluApprox = |x, F| special::gelu_tanh::<F>(x);
    Silu = |x, F| special::silu::<F>(x);
    Relu = |x, F| sel(x > 0.0 || x.is_nan(), x, 0.0);
    Sigmoid = |x, F| special::sigmoid::<F>(x);
    Tanh = |x, F| special::tanh::<F>(x);
    Exp = |x, F| expo::exp::<F>(x);
    Log = |x, F| expo::log::<F>(x);
    Sqrt = |x, F| x.sqrt();
    Rsqrt = |x, F| 1.0 / x.sqrt();
    Neg = |x, F| -x;
    Abs = |x, F| x.abs();
    Atan = |x, F| trig::atan::<F>(x);
    Recip = |x, F| 1.0 / x;
    Round = |x, F| x.round_ties_even();
    Floor = |x, F| x.floor();
    Ceil = |x, F| x.ceil();
    Sign = |x, F| sel(x > 0.0, 1.0, sel(x < 0.0, -1.0, sel(x.is_nan(), x, 0.0)));
    Softplus = |x, F| special::softplus::<F>(x);
    Elu = |x, F| sel(x > 0.0, x, expo::expm1::<F>(x));
    HardSwish = |x, F| special::hard_swish(x);
    HardSigmoid = |x, F| special::hard_sigmoid(x);
    Mish = |x, F| special::mish::<F>(x);
    Softsign = |x, F| sel(x.is_infinite(), x.signum(), x / (1.0 + x.abs()));
    LogSigmoid = |x, F| special::log_sigmoid::<F>(x);
}

macro_rules! trig_lanes {
    ($($name:ident = $kernel:ident, $scalar:ident;)*) => {$(
        pub(crate) struct $name;
        impl Lane for $name {
            #[inline(always)]
            fn f<const F: bool>(x: f32) -> f32 {
                trig::$kernel::<F>(x)
            }
            const SLOW: bool = true;
            #[inline(always)]
            fn needs_slow(x: f32) -> bool {
                trig::trig_needs_slow(x)
            }
            // Huge arguments: f64 has enough bits for an exact reduction by the libm routine.
            fn slow(x: f32) -> f32 {
                (x as f64).$scalar() as f32
            }
        }
    )*};
}

trig_lanes! {
    Sin = sin, sin;
    Cos = cos, cos;
    Tan = tan, tan;
}

/// Expand `$run::<Lane>($($arg),*)` for the lane of `$act`.
macro_rules! dispatch {
    ($act:expr, $run:ident($($arg:expr),*)) => {
        match $act {
            Activation::Gelu => $run::<act::Gelu>($($arg),*),
            Activation::GeluApprox => $run::<act::GeluApprox>($($arg),*),
            Activation::Silu => $run::<act::Silu>($($arg),*),
            Activation::Relu => $run::<act::Relu>($($arg),*),
            Activation::Sigmoid => $run::<act::Sigmoid>($($arg),*),
            Activation::Tanh => $run::<act::Tanh>($($arg),*),
            Activation::Exp => $run::<act::Exp>($($arg),*),
            Activation::Log => $run::<act::Log>($($arg),*),
            Activation::Sqrt => $run::<act::Sqrt>($($arg),*),
            Activation::Rsqrt => $run::<act::Rsqrt>($($arg),*),
            Activation::Neg => $run::<act::Neg>($($arg),*),
            Activation::Abs => $run::<act::Abs>($($arg),*),
            Activation::Sin => $run::<act::Sin>($($arg),*),
            Activation::Cos => $run::<act::Cos>($($arg),*),
            Activation::Tan => $run::<act::Tan>($($arg),*),
            Activation::Atan => $run::<act::Atan>($($arg),*),
            Activation::Recip => $run::<act::Recip>($($arg),*),
            Activation::Round => $run::<act::Round>($($arg),*),
            Activation::Floor => $run::<act::Floor>($($arg),*),
            Activation::Ceil => $run::<act::Ceil>($($arg),*),
            Activation::Sign => $run::<act::Sign>($($arg),*),
            Activation::Softplus => $run::<act::Softplus>($($arg),*),
            Activation::Elu => $run::<act::Elu>($($arg),*),
            Activation::Erf => $run::<act::Erf>($($arg),*),
            Activation::HardSwish => $run::<act::HardSwish>($($arg),*),
            Activation::HardSigmoid => $run::<act::HardSigmoid>($($arg),*),
            Activation::Mish => $run::<act::Mish>($($arg),*),
            Activation::Softsign => $run::<act::Softsign>($($arg),*),
            Activation::LogSigmoid => $run::<act::LogSigmoid>($($arg),*),
        }
    };
}
pub(crate) use dispatch;
