//! Low-precision element formats and scale layouts for [`crate::Op::ScaledMatMul`].

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
