//! Generic low-precision numerics: the [`float_format!`](crate::float_format) macro and
//! the `fXmYeZ` quantizer for emulated any-precision (nvf4 / f8 / bf8 / …) training.
//!
//! [`quantize`] rounds an `f32` to the grid of an arbitrary binary float format (1 sign
//! bit, `exp_bits` exponent bits with IEEE bias `2^(exp_bits−1) − 1`, `man_bits`
//! mantissa bits, saturating at `max_normal`), and computation then continues in `f32`.
//! Training can thus run at any precision on any backend, including formats with no
//! hardware support, by round-tripping values through the format's representable set.
//!
//! ```
//! use rlx_tensor::lowp::{self, FloatFormat, Nvf4};
//! assert_eq!(lowp::quantize(1.1, 4, 3, 448.0), 1.125);
//! assert_eq!(Nvf4::quantize(5.0), 4.0); // a tie between 4 and 6 goes to the even mantissa
//! assert_eq!(lowp::parse_format("bf8"), Some((5, 2, 57344.0)));
//! ```

/// Round `x` to the grid of the format `(exp_bits, man_bits, max_normal)`:
///
/// - `±0` and NaN pass through unchanged; f32-subnormal inputs flush to signed zero;
/// - `|x| ≥ max_normal` (including `±Inf`) saturates to `±max_normal` (never `Inf`);
/// - otherwise round-to-nearest-even at step `2^(max(⌊log2|x|⌋, 1−bias) − man_bits)`,
///   keeping the target's subnormals; a result that would be an f32 subnormal is zero.
///
/// Delegates to [`rlx_ir::FloatFormat::round`].
///
/// # Panics
/// If `exp_bits ∉ 1..=8`, `man_bits > 23`, or `max_normal` is not positive and finite.
pub fn quantize(x: f32, exp_bits: u32, man_bits: u32, max_normal: f32) -> f32 {
    rlx_ir::FloatFormat::ieee(exp_bits, man_bits, max_normal).round(x)
}

/// [`quantize`] every element of `xs` in place.
///
/// # Panics
/// As [`quantize`].
pub fn quantize_slice(xs: &mut [f32], exp_bits: u32, man_bits: u32, max_normal: f32) {
    let f = rlx_ir::FloatFormat::ieee(exp_bits, man_bits, max_normal);
    for x in xs {
        *x = f.round(*x);
    }
}

/// Quantize with one per-tensor scale: `s = absmax / max_normal`, `x ← Q(x / s) · s`.
///
/// The largest finite magnitude maps to `max_normal` and back, so it is preserved
/// exactly; the rest of the slice lands on the scaled grid. The absmax ignores NaN and
/// infinities (an infinity saturates to `±absmax`); a slice whose absmax is zero (all
/// zeros, or no finite values) is left unchanged. The scale arithmetic is done in `f64`.
///
/// # Panics
/// As [`quantize`].
pub fn quantize_slice_scaled(xs: &mut [f32], exp_bits: u32, man_bits: u32, max_normal: f32) {
    let f = rlx_ir::FloatFormat::ieee(exp_bits, man_bits, max_normal);
    let absmax = xs
        .iter()
        .filter(|x| x.is_finite())
        .fold(0.0f32, |m, x| m.max(x.abs()));
    if absmax == 0.0 {
        return;
    }
    let s = absmax as f64 / max_normal as f64;
    for x in xs {
        // `x / s` for the absmax element is within an f64 ulp of `max_normal`, so it
        // becomes exactly `max_normal` in f32 and the product comes back as `absmax`.
        let q = f.round((*x as f64 / s) as f32);
        *x = (q as f64 * s) as f32;
    }
}

/// A binary float format known at compile time (generate with [`float_format!`](crate::float_format)).
pub trait FloatFormat: Copy {
    /// Exponent field width.
    const EXP_BITS: u32;
    /// Mantissa field width.
    const MAN_BITS: u32;
    /// Largest finite magnitude (saturation bound).
    const MAX_NORMAL: f32;
    /// The spec name (`"f16"`, `"nvf4"`, …).
    const NAME: &'static str;
    /// Total bits: `1 + EXP_BITS + MAN_BITS`.
    const BITS: u32 = 1 + Self::EXP_BITS + Self::MAN_BITS;

    /// [`quantize`] `x` to this format.
    fn quantize(x: f32) -> f32 {
        quantize(x, Self::EXP_BITS, Self::MAN_BITS, Self::MAX_NORMAL)
    }
}

/// Generate a marker type + [`lowp::FloatFormat`](crate::lowp::FloatFormat) impl per
/// format, plus one `BUILTIN` lookup table of `(spec, exp_bits, man_bits, max_normal)`.
///
/// Each entry is `[attributes] Name = (exp_bits, man_bits, max_normal, "spec");`. The
/// table is a `pub const BUILTIN`, so invoke the macro once per module.
///
/// ```
/// mod formats {
///     rlx_tensor::float_format! {
///         /// fp8 with 3 exponent bits.
///         F8E3M4 = (3, 4, 31.0, "f8e3m4");
///         F5E2M2 = (2, 2, 7.0, "f5e2m2");
///     }
/// }
/// use rlx_tensor::lowp::FloatFormat;
/// assert_eq!(formats::F8E3M4::BITS, 8);
/// assert_eq!(formats::F5E2M2::quantize(100.0), 7.0);
/// assert_eq!(formats::BUILTIN[1], ("f5e2m2", 2, 2, 7.0));
/// ```
#[macro_export]
macro_rules! float_format {
    ($($(#[$attr:meta])* $name:ident = ($exp:expr, $man:expr, $max:expr, $spec:literal);)*) => {
        $(
            $(#[$attr])*
            #[derive(Clone, Copy, Debug, Default)]
            pub struct $name;

            impl $crate::lowp::FloatFormat for $name {
                const EXP_BITS: u32 = $exp;
                const MAN_BITS: u32 = $man;
                const MAX_NORMAL: f32 = $max;
                const NAME: &'static str = $spec;
            }
        )*

        /// Every format of this invocation: `(spec, exp_bits, man_bits, max_normal)`.
        pub const BUILTIN: &[(&str, u32, u32, f32)] = &[$(($spec, $exp, $man, $max)),*];
    };
}

crate::float_format! {
    /// IEEE half precision.
    F16 = (5, 10, 65504.0, "f16");
    /// bfloat16 (f32's exponent range, 7 mantissa bits).
    Bf16 = (8, 7, 3.3895314e38, "bf16");
    /// fp8 E4M3 (OCP "fn": no infinity, max 448).
    F8E4M3 = (4, 3, 448.0, "f8e4m3");
    /// fp8 E5M2 ("bf8", max 57344).
    F8E5M2 = (5, 2, 57344.0, "bf8");
    /// fp4 E2M1 as used by NVFP4 (grid 0, 0.5, 1, 1.5, 2, 3, 4, 6).
    Nvf4 = (2, 1, 6.0, "nvf4");
    /// fp6 E3M2 (max 28).
    F6E3M2 = (3, 2, 28.0, "f6e3m2");
}

/// Parse a format name into `(exp_bits, man_bits, max_normal)` (trimmed, case-insensitive).
///
/// Accepts the names `f16|half|fp16`, `bf16`, `f8|fp8|e4m3|f8e4m3`, `bf8|e5m2|f8e5m2`,
/// `f6|fp6|e2m3`, `e3m2`, `f4|fp4|e2m1|nvf4`; any `fNeXmY` that is a
/// [`ScaledFormat`](crate::ScaledFormat) (≤ 8 bits, e.g. `f4e3m0`, `f8e4m3fnuz`); and the
/// generic IEEE form `fXmYeZ` (`X = 1 + Y + Z`, `1 ≤ Z ≤ 8`, `Y ≤ 23`, max
/// `(2 − 2^−Y)·2^bias`). See [`rlx_ir::FloatFormat::parse`].
///
/// ```
/// use rlx_tensor::lowp::parse_format;
/// assert_eq!(parse_format("f8m3e4"), Some((4, 3, 240.0)));
/// assert_eq!(parse_format("f8m4e4"), None);
/// ```
pub fn parse_format(spec: &str) -> Option<(u32, u32, f32)> {
    rlx_ir::FloatFormat::parse(spec).map(|f| (f.exp_bits, f.man_bits, f.max_normal))
}
