//! Vectorized `f32` math: the transcendental and activation kernels of the CPU backend.
//!
//! Every function maps a slice element by element. The meaning of each activation is the
//! one of the oracle interpreter (`rlx_ir::interp`), which computes in `f64` and rounds
//! once; these kernels compute in `f32` (in `f64` for the trigonometric range reduction) and
//! are tested against that reference: exp, log, tanh, erf, sigmoid, sin, cos, both GELUs and
//! SiLU stay within a few ulp over the whole `f32` range, special values included.
//!
//! Three code paths exist ([`Isa`]), chosen at run time: AVX-512 (16 lanes), AVX2+FMA
//! (8 lanes) and a portable one. All run the same kernels, written branch-free so that LLVM
//! vectorizes them. AVX-512 and AVX2+FMA execute the same IEEE operations and give the same
//! bits; the portable path does not fuse `a·b + c` and may differ by an ulp or two (pinned
//! by the tests). Each path is deterministic: the same input gives the same bits, whatever
//! the slice length or alignment (the loop tail runs the same operations as the vector
//! body).
//!
//! Measured maxima against the oracle (see `tests/math_ulp.rs`): exp 0.96 ulp, log 0.78,
//! sin/cos/tan 0.5, atan 1.7, tanh 2.2, sigmoid 2.3, erf 1.6 (1.0 on the FMA paths),
//! softplus 1.9, GELU (erf) 3.3 (3.1 on the FMA paths), GELU (tanh) 2.9, SiLU 2.9, Mish
//! 3.7; the exactly rounded ops are exact. erf and exact GELU read piecewise-polynomial
//! tables (`math/erf_tables.rs`); on the JIT's AVX-512 code each coefficient is one `vpermps`,
//! here an indexed load (a gather once vectorized).
//!
//! The output slice must have the input's length; a mismatch panics naming both lengths.

mod act;
pub(crate) mod erf_tables;
pub(crate) mod expo;
mod simd;
pub(crate) mod special;
mod trig;

use act::dispatch;
use rlx_ir::Activation;
use simd::Lane;

/// An instruction-set path of the math kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Isa {
    /// Baseline code for any target (on x86-64: SSE2, no FMA).
    Portable,
    /// x86-64 with AVX2 and FMA: 8 lanes, fused multiply-add.
    Avx2Fma,
    /// x86-64 with AVX-512 (F, DQ, BW, VL): 16 lanes. Runs the same operations as
    /// [`Isa::Avx2Fma`], so it gives the same bits.
    Avx512,
}

impl Isa {
    /// The fastest path this CPU supports (checked once per call; the check is cached by std).
    pub fn detect() -> Isa {
        if Isa::Avx512.is_available() {
            Isa::Avx512
        } else if Isa::Avx2Fma.is_available() {
            Isa::Avx2Fma
        } else {
            Isa::Portable
        }
    }

    /// Whether this CPU can run the path.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2Fma => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2Fma.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Isa::Avx2Fma | Isa::Avx512 => false,
        }
    }
}

/// Which code [`wide_fn!`] runs: 3 = AVX-512, 2 = AVX2+FMA, 1 = the baseline (checked
/// once per process).
#[inline(always)]
pub(crate) fn wide_level() -> u8 {
    use std::sync::atomic::{AtomicU8, Ordering};
    static LEVEL: AtomicU8 = AtomicU8::new(0);
    let level = LEVEL.load(Ordering::Relaxed);
    if level != 0 {
        return level;
    }
    let level = match Isa::detect() {
        Isa::Avx512 => 3,
        Isa::Avx2Fma => 2,
        Isa::Portable => 1,
    };
    LEVEL.store(level, Ordering::Relaxed);
    level
}

/// A function compiled three times — for AVX-512, for AVX2+FMA and for the baseline — and
/// run on the widest the CPU has: the crate is built for baseline x86-64 (SSE2, 4 lanes),
/// so a plain loop in the executor runs 4 lanes wide unless it is compiled for more.
///
/// `wide_fn! { baseline = f_base; fn f(args) -> R { body } }` defines `f_base` (the body
/// as written, `#[inline(always)]`) and `f`, which dispatches. Helpers the body's loops
/// call should be `#[inline(always)]` too. The bits never change with the path: Rust
/// never contracts `a·b + c` into a fused multiply-add or reorders float operations, so
/// every variant performs the same IEEE operations (the math kernels' explicit fused
/// `mad::<true>` dispatch on their own); the tests of each user compare `f` with `f_base`.
macro_rules! wide_fn {
    (
        baseline = $base:ident;
        $(#[$m:meta])*
        $vis:vis unsafe fn $name:ident($($a:ident : $t:ty),* $(,)?) $(-> $r:ty)? $body:block
    ) => {
        $crate::math::wide_fn!(@ [unsafe] $base; $(#[$m])* $vis $name($($a: $t),*) $(-> $r)? $body);
    };
    (
        baseline = $base:ident;
        $(#[$m:meta])*
        $vis:vis fn $name:ident($($a:ident : $t:ty),* $(,)?) $(-> $r:ty)? $body:block
    ) => {
        $crate::math::wide_fn!(@ [] $base; $(#[$m])* $vis $name($($a: $t),*) $(-> $r)? $body);
    };
    (
        @ [$($kw:tt)*] $base:ident;
        $(#[$m:meta])*
        $vis:vis $name:ident($($a:ident : $t:ty),*) $(-> $r:ty)? $body:block
    ) => {
        #[inline(always)]
        #[allow(clippy::missing_safety_doc)]
        $vis $($kw)* fn $base($($a: $t),*) $(-> $r)? $body

        $(#[$m])*
        $vis $($kw)* fn $name($($a: $t),*) $(-> $r)? {
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")]
            unsafe fn v512($($a: $t),*) $(-> $r)? {
                // SAFETY: the caller's contract, passed through (a safe function has none).
                #[allow(unused_unsafe)]
                unsafe { $base($($a),*) }
            }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            unsafe fn v2($($a: $t),*) $(-> $r)? {
                // SAFETY: as in v512.
                #[allow(unused_unsafe)]
                unsafe { $base($($a),*) }
            }
            #[cfg(target_arch = "x86_64")]
            match $crate::math::wide_level() {
                // SAFETY: level 3 means `Isa::Avx512` is available (v512's features);
                // the caller's contract is passed through.
                3 => return unsafe { v512($($a),*) },
                // SAFETY: level 2 means `Isa::Avx2Fma` is available (v2's features).
                2 => return unsafe { v2($($a),*) },
                _ => {}
            }
            // SAFETY: the caller's contract, passed through.
            #[allow(unused_unsafe)]
            unsafe { $base($($a),*) }
        }
    };
}
pub(crate) use wide_fn;

fn check_len(name: &str, x: usize, out: usize) {
    assert!(
        x == out,
        "rlx_cpu::math::{name}: input has {x} elements but output has {out}; pass slices of equal length"
    );
}

fn check_isa(isa: Isa) {
    assert!(
        isa.is_available(),
        "rlx_cpu::math: the {isa:?} path is not supported by this CPU; use Isa::detect()"
    );
}

fn run_map<L: Lane>(isa: Isa, x: &[f32], out: &mut [f32]) {
    match isa {
        // SAFETY: every caller passes an `isa` from `Isa::detect` or checked by
        // `check_isa` (both via `is_available`), so this CPU has AVX2 and FMA, all that
        // map_avx2 is compiled for; the slices are safe references.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => unsafe { simd::map_avx2::<L>(x, out) },
        // SAFETY: as above: `Isa::Avx512` is available only with AVX-512F/DQ/BW/VL, AVX2
        // and FMA, exactly map_avx512's features.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { simd::map_avx512::<L>(x, out) },
        _ => simd::map_portable::<L>(x, out),
    }
}

fn run_inplace<L: Lane>(isa: Isa, x: &mut [f32]) {
    match isa {
        // SAFETY: as in `run_map`: the `isa` comes from `Isa::detect` or passed
        // `check_isa`, so AVX2 and FMA (inplace_avx2's features) are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => unsafe { simd::inplace_avx2::<L>(x) },
        // SAFETY: as in `run_map`: AVX-512F/DQ/BW/VL, AVX2 and FMA are present.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { simd::inplace_avx512::<L>(x) },
        _ => simd::inplace_portable::<L>(x),
    }
}

/// `out[i] = act(x[i])` for every activation of [`Activation`], on the fastest path.
pub fn unary_f32(act: Activation, x: &[f32], out: &mut [f32]) {
    unary_f32_with(Isa::detect(), act, x, out)
}

/// `x[i] = act(x[i])` in place, on the fastest path.
pub fn unary_f32_inplace(act: Activation, x: &mut [f32]) {
    unary_f32_inplace_with(Isa::detect(), act, x)
}

/// [`unary_f32`] on a chosen path (for tests and benchmarks); panics if the CPU lacks it.
pub fn unary_f32_with(isa: Isa, act: Activation, x: &[f32], out: &mut [f32]) {
    check_len(act.name(), x.len(), out.len());
    check_isa(isa);
    dispatch!(act, run_map(isa, x, out))
}

/// [`unary_f32_inplace`] on a chosen path; panics if the CPU lacks it.
pub fn unary_f32_inplace_with(isa: Isa, act: Activation, x: &mut [f32]) {
    check_isa(isa);
    dispatch!(act, run_inplace(isa, x))
}

macro_rules! named {
    ($($(#[$m:meta])* $name:ident => $act:ident;)*) => {$(
        $(#[$m])*
        pub fn $name(x: &[f32], out: &mut [f32]) {
            check_len(stringify!($name), x.len(), out.len());
            run_map::<act::$act>(Isa::detect(), x, out)
        }
    )*};
}

named! {
    /// `out[i] = eˣ`.
    exp_f32 => Exp;
    /// `out[i] = ln x` (NaN for x < 0, −∞ at ±0).
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
