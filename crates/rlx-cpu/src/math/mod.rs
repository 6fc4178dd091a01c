//! Vectorized `f32` math: the transcendental and activation kernels of the CPU backend.
//!
//! Every function maps a slice element by element. The meaning of each activation is the
//! one of the oracle interpreter (`rlx_ir::interp`), which computes in `f64` and rounds
//! once; these kernels compute in `f32` (or `f64` where range reduction needs it) and are
//! tested to stay within a few ulp of that reference.
//!
//! The slice length of `out` must equal the length of `x`; a mismatch panics with both
//! lengths named.

use rlx_ir::Activation;

fn check_len(name: &str, x: usize, out: usize) {
    assert!(
        x == out,
        "rlx_cpu::math::{name}: input has {x} elements but output has {out}; pass slices of equal length"
    );
}

/// `out[i] = act(x[i])` for every activation of [`Activation`].
pub fn unary_f32(act: Activation, x: &[f32], out: &mut [f32]) {
    check_len(act.name(), x.len(), out.len());
    for (o, &v) in out.iter_mut().zip(x) {
        *o = scalar_ref(act, v);
    }
}

/// `x[i] = act(x[i])` in place.
pub fn unary_f32_inplace(act: Activation, x: &mut [f32]) {
    for v in x.iter_mut() {
        *v = scalar_ref(act, *v);
    }
}

macro_rules! named {
    ($($(#[$m:meta])* $name:ident => $act:ident;)*) => {$(
        $(#[$m])*
        pub fn $name(x: &[f32], out: &mut [f32]) {
            unary_f32(Activation::$act, x, out)
        }
    )*};
}

named! {
    /// `out[i] = eˣ`.
    exp_f32 => Exp;
    /// `out[i] = ln x` (NaN for negative x, −∞ at ±0).
    log_f32 => Log;
    /// `out[i] = tanh x`.
    tanh_f32 => Tanh;
    /// `out[i] = erf x`.
    erf_f32 => Erf;
    /// `out[i] = 1 / (1 + e⁻ˣ)`.
    sigmoid_f32 => Sigmoid;
    /// `out[i] = sin x`.
    sin_f32 => Sin;
    /// `out[i] = cos x`.
    cos_f32 => Cos;
    /// Exact GELU `x·Φ(x)` (error-function form).
    gelu_f32 => Gelu;
    /// Tanh-form GELU `½x(1 + tanh(√(2/π)(x + 0.044715x³)))`.
    gelu_tanh_f32 => GeluApprox;
    /// SiLU `x·σ(x)`.
    silu_f32 => Silu;
}

/// Reference value computed in `f64` (temporary implementation, replaced by the vector kernels).
fn scalar_ref(act: Activation, x: f32) -> f32 {
    let x = x as f64;
    if x.is_nan() {
        return x as f32;
    }
    let sig = |x: f64| {
        if x >= 0.0 {
            1.0 / (1.0 + (-x).exp())
        } else {
            let e = x.exp();
            e / (1.0 + e)
        }
    };
    let softplus = |x: f64| x.max(0.0) + (-x.abs()).exp().ln_1p();
    let hsig = |x: f64| (x + 3.0).clamp(0.0, 6.0) / 6.0;
    let ninf = x == f64::NEG_INFINITY;
    let r = match act {
        Activation::Gelu => {
            if ninf {
                -0.0
            } else {
                x * 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
            }
        }
        Activation::GeluApprox => {
            if ninf {
                -0.0
            } else {
                let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
                x * sig(2.0 * u)
            }
        }
        Activation::Silu => {
            if ninf {
                -0.0
            } else {
                x * sig(x)
            }
        }
        Activation::Relu => {
            if x > 0.0 {
                x
            } else {
                0.0
            }
        }
        Activation::Sigmoid => sig(x),
        Activation::Tanh => x.tanh(),
        Activation::Exp => x.exp(),
        Activation::Log => x.ln(),
        Activation::Sqrt => x.sqrt(),
        Activation::Rsqrt => 1.0 / x.sqrt(),
        Activation::Neg => -x,
        Activation::Abs => x.abs(),
        Activation::Sin => x.sin(),
        Activation::Cos => x.cos(),
        Activation::Tan => x.tan(),
        Activation::Atan => x.atan(),
        Activation::Recip => 1.0 / x,
        Activation::Round => x.round_ties_even(),
        Activation::Floor => x.floor(),
        Activation::Ceil => x.ceil(),
        Activation::Sign => {
            if x > 0.0 {
                1.0
            } else if x < 0.0 {
                -1.0
            } else {
                0.0
            }
        }
        Activation::Softplus => softplus(x),
        Activation::Elu => {
            if x > 0.0 {
                x
            } else {
                x.exp_m1()
            }
        }
        Activation::Erf => libm::erf(x),
        Activation::HardSwish => {
            if ninf {
                -0.0
            } else {
                x * hsig(x)
            }
        }
        Activation::HardSigmoid => hsig(x),
        Activation::Mish => {
            if ninf {
                -0.0
            } else {
                x * softplus(x).tanh()
            }
        }
        Activation::Softsign => {
            if x.is_infinite() {
                x.signum()
            } else {
                x / (1.0 + x.abs())
            }
        }
        Activation::LogSigmoid => x.min(0.0) - (-x.abs()).exp().ln_1p(),
    };
    r as f32
}
