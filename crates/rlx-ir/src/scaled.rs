//! Low-precision element formats and scale layouts for [`crate::Op::ScaledMatMul`].
//!
//! # Bit layout
//!
//! A code of a format with `e` exponent and `m` mantissa bits occupies the low
//! `1 + e + m` bits of a `u8`: sign at bit `e + m`, then the biased exponent, then the
//! mantissa. Bits above the format's width are ignored by [`ScaledFormat::decode`] and
//! are always zero in codes from [`ScaledFormat::encode`]. Exponent field `0` holds the
//! subnormals `(M / 2^m)·2^(1−bias)`; any other field `E` is `(1 + M / 2^m)·2^(E−bias)`.
//!
//! # Special values
//!
//! - `F8E4M3` (OCP "fn"): `S.1111.111` is NaN, no infinities, both zeros.
//! - `F8E5M2`: IEEE — exponent all ones is `±Inf` (mantissa 0) or NaN.
//! - `F8E4M3Fnuz` / `F8E5M2Fnuz` ("finite, no unsigned zero"): the single code `0x80`
//!   (negative zero's slot) is NaN; there is no negative zero (a negative value that
//!   rounds to zero encodes as `0x00`) and no infinity; every other code is finite.
//! - `F6E2M3`, `F6E3M2`, `F4E2M1` and every `Custom`: all codes finite, both zeros.

use crate::float_format::{digits, exponent_of, pow2};
use crate::{DType, IrError};
use std::fmt;
use std::str::FromStr;

/// Element format of a low-precision GEMM operand (≤ 8 bits per element).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScaledFormat {
    /// fp8 E4M3 (bias 7, max 448, finite + one NaN encoding).
    F8E4M3,
    /// fp8 E5M2 (bias 15, IEEE inf/NaN, max 57344).
    F8E5M2,
    /// fp8 E4M3 "fnuz" (bias 8, max 240).
    F8E4M3Fnuz,
    /// fp8 E5M2 "fnuz" (bias 16).
    F8E5M2Fnuz,
    /// fp6 E2M3 (bias 1, max 7.5).
    F6E2M3,
    /// fp6 E3M2 (bias 3, max 28).
    F6E3M2,
    /// fp4 E2M1 (bias 1, max 6).
    F4E2M1,
    /// Any all-finite format with subnormals, ≤ 8 bits, `exp_bits ≥ 1`.
    Custom {
        exp_bits: u8,
        mant_bits: u8,
        bias: i8,
    },
}

/// Why a custom format is invalid, or `None` if `(e, m, bias)` is a usable format:
/// an exponent, at most 8 bits in all, and a largest value inside `f32`.
const fn custom_problem(e: u8, m: u8, bias: i8) -> Option<&'static str> {
    if e == 0 {
        Some("a custom ScaledFormat needs at least one exponent bit")
    } else if 1 + e as u32 + m as u32 > 8 {
        Some("a custom ScaledFormat must fit in 8 bits (1 + exp_bits + mant_bits ≤ 8)")
    } else if (1i32 << e) - 1 - bias as i32 > 127 {
        Some("the bias is so negative that the largest value overflows f32")
    } else {
        None
    }
}

/// IEEE bias `2^(e−1) − 1` for `1 ≤ e ≤ 7`.
const fn ieee_bias(e: u8) -> i8 {
    ((1i32 << (e - 1)) - 1) as i8
}

impl ScaledFormat {
    /// Every named (non-custom) format, in declaration order.
    pub const NAMED: [ScaledFormat; 7] = [
        ScaledFormat::F8E4M3,
        ScaledFormat::F8E5M2,
        ScaledFormat::F8E4M3Fnuz,
        ScaledFormat::F8E5M2Fnuz,
        ScaledFormat::F6E2M3,
        ScaledFormat::F6E3M2,
        ScaledFormat::F4E2M1,
    ];

    /// An all-finite custom format with the IEEE bias `2^(exp_bits−1) − 1`.
    ///
    /// ```
    /// use rlx_ir::ScaledFormat;
    /// let f = ScaledFormat::custom(3, 0);
    /// assert_eq!(f.to_string(), "f4e3m0");
    /// assert_eq!((f.quantize(1.4), f.max_finite()), (1.0, 16.0));
    /// ```
    ///
    /// # Panics
    /// If `exp_bits == 0` or `1 + exp_bits + mant_bits > 8`.
    pub const fn custom(exp_bits: u8, mant_bits: u8) -> ScaledFormat {
        assert!(
            exp_bits >= 1 && exp_bits <= 7,
            "a custom ScaledFormat needs 1..=7 exponent bits and 1 + exp_bits + mant_bits ≤ 8"
        );
        ScaledFormat::custom_with_bias(exp_bits, mant_bits, ieee_bias(exp_bits))
    }

    /// An all-finite custom format with an explicit exponent bias.
    ///
    /// # Panics
    /// If `exp_bits == 0`, `1 + exp_bits + mant_bits > 8`, or the bias is so negative that
    /// the largest value, `2^(2^exp_bits − 1 − bias)·(2 − 2^−mant_bits)`, exceeds `f32`.
    pub const fn custom_with_bias(exp_bits: u8, mant_bits: u8, bias: i8) -> ScaledFormat {
        if let Some(problem) = custom_problem(exp_bits, mant_bits, bias) {
            panic!("{}", problem);
        }
        ScaledFormat::Custom {
            exp_bits,
            mant_bits,
            bias,
        }
    }

    /// `(exp_bits, mant_bits, bias)`.
    pub const fn fields(&self) -> (u32, u32, i32) {
        match *self {
            ScaledFormat::F8E4M3 => (4, 3, 7),
            ScaledFormat::F8E5M2 => (5, 2, 15),
            ScaledFormat::F8E4M3Fnuz => (4, 3, 8),
            ScaledFormat::F8E5M2Fnuz => (5, 2, 16),
            ScaledFormat::F6E2M3 => (2, 3, 1),
            ScaledFormat::F6E3M2 => (3, 2, 3),
            ScaledFormat::F4E2M1 => (2, 1, 1),
            ScaledFormat::Custom {
                exp_bits,
                mant_bits,
                bias,
            } => (exp_bits as u32, mant_bits as u32, bias as i32),
        }
    }

    /// Bits per element, sign included: `1 + exp_bits + mant_bits`.
    pub const fn bit_width(&self) -> u32 {
        let (e, m, _) = self.fields();
        1 + e + m
    }

    /// Exponent field width.
    pub const fn exp_bits(&self) -> u32 {
        self.fields().0
    }

    /// Mantissa (fraction) field width.
    pub const fn mant_bits(&self) -> u32 {
        self.fields().1
    }

    /// Exponent bias.
    pub const fn bias(&self) -> i32 {
        self.fields().2
    }

    /// Whether this is a [`ScaledFormat::Custom`] format.
    pub const fn is_custom(&self) -> bool {
        matches!(self, ScaledFormat::Custom { .. })
    }

    /// Whether this is one of [`ScaledFormat::NAMED`].
    pub const fn is_named(&self) -> bool {
        !self.is_custom()
    }

    /// Whether this is a "fnuz" format (`0x80` is NaN, no negative zero, no infinity).
    pub const fn is_fnuz(&self) -> bool {
        matches!(self, ScaledFormat::F8E4M3Fnuz | ScaledFormat::F8E5M2Fnuz)
    }

    /// Whether the format encodes infinities (only `F8E5M2`).
    pub const fn has_inf(&self) -> bool {
        matches!(self, ScaledFormat::F8E5M2)
    }

    /// Whether GPUs have native tensor-core support for it (the four fp8 formats).
    pub const fn is_native_fp8(&self) -> bool {
        matches!(
            self,
            ScaledFormat::F8E4M3
                | ScaledFormat::F8E5M2
                | ScaledFormat::F8E4M3Fnuz
                | ScaledFormat::F8E5M2Fnuz
        )
    }

    /// A stable numeric id for kernel dispatch: the index in [`ScaledFormat::NAMED`]
    /// (`0..=6`) for named formats; `0x1_0000 | exp_bits << 12 | mant_bits << 8 | bias as u8`
    /// for `Custom`, so distinct formats always get distinct ids.
    pub const fn kernel_id(&self) -> u32 {
        match *self {
            ScaledFormat::F8E4M3 => 0,
            ScaledFormat::F8E5M2 => 1,
            ScaledFormat::F8E4M3Fnuz => 2,
            ScaledFormat::F8E5M2Fnuz => 3,
            ScaledFormat::F6E2M3 => 4,
            ScaledFormat::F6E3M2 => 5,
            ScaledFormat::F4E2M1 => 6,
            ScaledFormat::Custom {
                exp_bits,
                mant_bits,
                bias,
            } => 0x1_0000 | (exp_bits as u32) << 12 | (mant_bits as u32) << 8 | bias as u8 as u32,
        }
    }

    /// The sign bit of a code.
    fn sign_bit(&self) -> u32 {
        let (e, m, _) = self.fields();
        1 << (e + m)
    }

    /// The magnitude code (sign clear) of the largest finite value. Magnitude codes are
    /// ordered like their values, so clamping a code to this saturates it.
    fn max_code(&self) -> u32 {
        match self {
            ScaledFormat::F8E4M3 => 0x7E,
            ScaledFormat::F8E5M2 => 0x7B,
            _ => self.sign_bit() - 1,
        }
    }

    /// The largest finite value.
    pub fn max_finite(&self) -> f32 {
        self.decode(self.max_code() as u8)
    }

    /// The value of `code` (see the module docs for the layout and special values).
    pub fn decode(&self, code: u8) -> f32 {
        let (e, m, bias) = self.fields();
        let c = code as u32 & ((1 << (1 + e + m)) - 1);
        let negative = c & self.sign_bit() != 0;
        let ef = (c >> m) & ((1 << e) - 1);
        let mf = c & ((1 << m) - 1);
        let special = match self {
            ScaledFormat::F8E4M3 if ef == 15 && mf == 7 => Some(f32::NAN),
            ScaledFormat::F8E5M2 if ef == 31 => {
                Some(if mf == 0 { f32::INFINITY } else { f32::NAN })
            }
            ScaledFormat::F8E4M3Fnuz | ScaledFormat::F8E5M2Fnuz if c == 0x80 => Some(f32::NAN),
            _ => None,
        };
        let magnitude = special.unwrap_or_else(|| {
            let v = if ef == 0 {
                mf as f64 * pow2(1 - bias - m as i32)
            } else {
                ((1u32 << m) + mf) as f64 * pow2(ef as i32 - bias - m as i32)
            };
            v as f32
        });
        if negative && !magnitude.is_nan() {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The code nearest to `x`: round-to-nearest-even, saturating to `±max_finite`
    /// (`±Inf` included, even for `F8E5M2`), NaN → `0`. Negative values that round to zero
    /// keep their sign (negative zero) except in the fnuz formats, which have none.
    ///
    /// A tie goes to the neighbour with the even code, as bit-level RNE does. For
    /// `mant_bits ≥ 1` that is the even mantissa; for `mant_bits = 0` (e.g. `f4e3m0`) it
    /// is the even exponent field, so `12` (between 8 and 16) encodes as 8. (The
    /// step rule of [`crate::FloatFormat::round`] rounds such a tie to 16 instead.)
    pub fn encode(&self, x: f32) -> u8 {
        self.encode_f64(x as f64)
    }

    /// [`ScaledFormat::encode`] of an `f64`, rounded once (no detour through `f32`).
    pub fn encode_f64(&self, x: f64) -> u8 {
        if x.is_nan() {
            return 0;
        }
        let (_, m, bias) = self.fields();
        let a = x.abs();
        let emin = 1 - bias;
        // Anything below half the smallest subnormal (≥ 2^−134 for any i8 bias) rounds to
        // zero; cutting off well below that keeps `exponent_of` away from f64 subnormals.
        let magnitude = if a >= self.max_finite() as f64 {
            self.max_code()
        } else if a < pow2(-200) {
            0
        } else {
            let mut k = exponent_of(a).max(emin);
            let scaled = a * pow2(m as i32 - k);
            let mut q = if m == 0 && scaled == 1.5 {
                // With no mantissa bits, both neighbours of a tie have significand 1, so
                // "even" is decided by the code: keep 2^k when its exponent field is even.
                if (k + bias) % 2 == 0 { 1 } else { 2 }
            } else {
                scaled.round_ties_even() as u32
            };
            if q == 1 << (m + 1) {
                // Rounded up into the next binade.
                k += 1;
                q = 1 << m;
            }
            let code = if q < 1 << m {
                q // subnormal (only reachable when k == emin) or zero
            } else {
                let biased = (k + bias) as u32;
                (biased << m) | (q - (1 << m))
            };
            code.min(self.max_code())
        };
        let sign = if x.is_sign_negative() && !(self.is_fnuz() && magnitude == 0) {
            self.sign_bit()
        } else {
            0
        };
        (sign | magnitude) as u8
    }

    /// `decode(encode(x))`: the nearest representable value (RNE, saturating, NaN → 0).
    pub fn quantize(&self, x: f32) -> f32 {
        self.decode(self.encode(x))
    }

    /// Every finite value the format represents, ascending, without duplicates (the two
    /// zeros appear once, as `0.0`).
    pub fn representable_values(&self) -> Vec<f32> {
        let mut v: Vec<f32> = (0..1u32 << self.bit_width())
            .map(|c| self.decode(c as u8))
            .filter(|v| v.is_finite())
            .map(|v| if v == 0.0 { 0.0 } else { v })
            .collect();
        v.sort_by(f32::total_cmp);
        v.dedup();
        v
    }

    /// The name of a named format, `None` for `Custom`.
    fn named_str(&self) -> Option<&'static str> {
        Some(match self {
            ScaledFormat::F8E4M3 => "f8e4m3",
            ScaledFormat::F8E5M2 => "f8e5m2",
            ScaledFormat::F8E4M3Fnuz => "f8e4m3fnuz",
            ScaledFormat::F8E5M2Fnuz => "f8e5m2fnuz",
            ScaledFormat::F6E2M3 => "f6e2m3",
            ScaledFormat::F6E3M2 => "f6e3m2",
            ScaledFormat::F4E2M1 => "f4e2m1",
            ScaledFormat::Custom { .. } => return None,
        })
    }
}

/// Named formats print their name (`f8e4m3`, `f8e5m2fnuz`, …). A `Custom` prints
/// `fNeXmY`; it appends `b<bias>` when the bias is not the IEEE one, or when `fNeXmY` is
/// a named format's name (`custom(4, 3)` is all-finite, unlike `F8E4M3`, so it prints
/// `f8e4m3b7`), so that [`FromStr`] always gives back the same value.
impl fmt::Display for ScaledFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = self.named_str() {
            return f.write_str(name);
        }
        let (e, m, bias) = self.fields();
        let base = format!("f{}e{e}m{m}", 1 + e + m);
        let collides = ScaledFormat::NAMED
            .iter()
            .any(|n| n.named_str() == Some(base.as_str()));
        if collides || bias != ieee_bias(e as u8) as i32 {
            write!(f, "{base}b{bias}")
        } else {
            f.write_str(&base)
        }
    }
}

/// Parses (trimmed, case-insensitive) the names [`fmt::Display`] prints: a named format's
/// name, else `fNeXmY` (`N = 1 + X + Y ≤ 8`, `X ≥ 1`) → `Custom` with the IEEE bias, or
/// `fNeXmYb<bias>` with an explicit (possibly negative) bias.
impl FromStr for ScaledFormat {
    type Err = IrError;

    fn from_str(s: &str) -> Result<ScaledFormat, IrError> {
        let s = s.trim().to_ascii_lowercase();
        if let Some(f) = ScaledFormat::NAMED
            .iter()
            .find(|n| n.named_str() == Some(s.as_str()))
        {
            return Ok(*f);
        }
        parse_custom(&s).ok_or_else(|| {
            IrError::new(
                "scaled_format",
                format!(
                    "unknown element format `{s}`; use one of f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz, f6e2m3, f6e3m2, f4e2m1, or fNeXmY[b<bias>] with N = 1 + X + Y ≤ 8 and X ≥ 1 (e.g. f4e3m0)"
                ),
            )
        })
    }
}

/// `fNeXmY` or `fNeXmYb<bias>`.
fn parse_custom(s: &str) -> Option<ScaledFormat> {
    let rest = s.strip_prefix('f')?;
    let (total, rest) = rest.split_once('e')?;
    let (exp, rest) = rest.split_once('m')?;
    let (man, bias) = match rest.split_once('b') {
        Some((man, b)) => {
            let (neg, b) = match b.strip_prefix('-') {
                Some(b) => (true, b),
                None => (false, b),
            };
            let b = digits(b)? as i32;
            (man, Some(if neg { -b } else { b }))
        }
        None => (rest, None),
    };
    let (total, exp, man) = (digits(total)?, digits(exp)?, digits(man)?);
    if exp == 0 || exp > 7 || total != 1 + exp + man || total > 8 {
        return None;
    }
    let (e, m) = (exp as u8, man as u8);
    let bias = match bias {
        Some(b) => i8::try_from(b).ok()?,
        None => ieee_bias(e),
    };
    if custom_problem(e, m, bias).is_some() {
        return None;
    }
    Some(ScaledFormat::Custom {
        exp_bits: e,
        mant_bits: m,
        bias,
    })
}

/// How scale factors are laid out for a scaled operand: element `i` reconstructs as
/// `decode(code[i]) * scale(block_of(i))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScaleLayout {
    /// One f32 scale for the whole tensor.
    PerTensor,
    /// OCP MX: one E8M0 (power of two) scale per `block` consecutive K elements.
    BlockMxE8M0 { block: u32 },
    /// NVFP4: one E4M3 scale per `group` consecutive K elements.
    Nvfp4 { group: u32 },
}

impl ScaleLayout {
    /// OCP MX with the standard block of 32.
    pub const fn mx() -> ScaleLayout {
        ScaleLayout::BlockMxE8M0 { block: 32 }
    }

    /// NVFP4 with the standard group of 16.
    pub const fn nvfp4() -> ScaleLayout {
        ScaleLayout::Nvfp4 { group: 16 }
    }

    /// The dtype of the scales tensor: `F32` per tensor, `U8` codes (E8M0 or E4M3) otherwise.
    pub const fn scale_dtype(&self) -> DType {
        match self {
            ScaleLayout::PerTensor => DType::F32,
            _ => DType::U8,
        }
    }

    /// How many consecutive K elements share one scale; `None` per tensor.
    pub const fn block(&self) -> Option<u32> {
        match *self {
            ScaleLayout::PerTensor => None,
            ScaleLayout::BlockMxE8M0 { block } => Some(block),
            ScaleLayout::Nvfp4 { group } => Some(group),
        }
    }

    /// `(mode, block)` as plain integers for kernel arguments: mode `0` per tensor (block
    /// `0`), `1` MX E8M0, `2` NVFP4.
    pub const fn mode_block(&self) -> (u32, u32) {
        match *self {
            ScaleLayout::PerTensor => (0, 0),
            ScaleLayout::BlockMxE8M0 { block } => (1, block),
            ScaleLayout::Nvfp4 { group } => (2, group),
        }
    }
}

/// `per_tensor`, `mx_e8m0/<block>`, `nvfp4/<group>`.
impl fmt::Display for ScaleLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScaleLayout::PerTensor => f.write_str("per_tensor"),
            ScaleLayout::BlockMxE8M0 { block } => write!(f, "mx_e8m0/{block}"),
            ScaleLayout::Nvfp4 { group } => write!(f, "nvfp4/{group}"),
        }
    }
}

/// Trimmed, case-insensitive: `per_tensor|pertensor`; `mx|mxfp8|block` (block 32);
/// `nvfp4` (group 16); `mx/<b>`, `mx_e8m0/<b>`, `nvfp4/<g>` with a size ≥ 1.
impl FromStr for ScaleLayout {
    type Err = IrError;

    fn from_str(s: &str) -> Result<ScaleLayout, IrError> {
        let s = s.trim().to_ascii_lowercase();
        let layout = match s.as_str() {
            "per_tensor" | "pertensor" => Some(ScaleLayout::PerTensor),
            "mx" | "mxfp8" | "block" => Some(ScaleLayout::mx()),
            "nvfp4" => Some(ScaleLayout::nvfp4()),
            _ => s.split_once('/').and_then(|(kind, n)| {
                let n = n.parse::<u32>().ok().filter(|&n| n >= 1)?;
                match kind {
                    "mx" | "mx_e8m0" => Some(ScaleLayout::BlockMxE8M0 { block: n }),
                    "nvfp4" => Some(ScaleLayout::Nvfp4 { group: n }),
                    _ => None,
                }
            }),
        };
        layout.ok_or_else(|| {
            IrError::new(
                "scale_layout",
                format!(
                    "unknown scale layout `{s}`; use per_tensor, mx, nvfp4, mx_e8m0/<block> or nvfp4/<group> (sizes ≥ 1)"
                ),
            )
        })
    }
}
