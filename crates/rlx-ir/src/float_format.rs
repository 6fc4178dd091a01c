//! Emulated binary float formats (`lowp`): round an `f32` to the grid of any
//! sign + exponent + mantissa format.

/// A binary floating-point format described by its field widths and largest normal value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloatFormat {
    /// Exponent field width.
    pub exp_bits: u32,
    /// Mantissa (fraction) field width.
    pub man_bits: u32,
    /// Largest finite magnitude; larger inputs saturate to it.
    pub max_normal: f32,
}
