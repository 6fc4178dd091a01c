//! Element loads and stores of the arena `A` in every storage dtype WGSL computes in.

use super::WgslHelpers;
use rlx_ir::DType;

/// Element `index` (a `u32` expression) of a buffer of `dtype` at word `base` of the
/// arena, widened to its compute type's WGSL type (`f32`, `i32` or `bool`); `None` for
/// dtypes WGSL has no compute type for (f64, i64, u32, complex).
pub fn wgsl_load(h: &mut WgslHelpers, dtype: DType, base: &str, index: &str) -> Option<String> {
    let acc = |f: &'static str, h: &mut WgslHelpers| {
        h.need(f);
        format!("{f}({base}, {index})")
    };
    Some(match dtype {
        DType::F32 => format!("bitcast<f32>({})", acc("ld32_", h)),
        DType::I32 => format!("bitcast<i32>({})", acc("ld32_", h)),
        DType::F16 => {
            h.need("f16_dec");
            format!("f16_dec({})", acc("ld16_", h))
        }
        DType::BF16 => format!("bitcast<f32>({} << 16u)", acc("ld16_", h)),
        DType::I16 => format!("(bitcast<i32>({} << 16u) >> 16u)", acc("ld16_", h)),
        DType::I8 => format!("(bitcast<i32>({} << 24u) >> 24u)", acc("ld8_", h)),
        DType::U8 => format!("i32({})", acc("ld8_", h)),
        DType::Bool => format!("({} != 0u)", acc("ld8_", h)),
        _ => return None,
    })
}

/// The statement storing `value` (in the compute type's WGSL type) as element `index` of
/// a buffer of `dtype` at word `base`, narrowed to the dtype (f16 rounded to nearest
/// even; bf16 values must be rounded already, as every bf16 node of the loop IR is). `None`
/// for dtypes WGSL has no compute type for. Elements narrower than a word need an atomic
/// arena ([`WgslHelpers::new`]).
pub fn wgsl_store(
    h: &mut WgslHelpers,
    dtype: DType,
    base: &str,
    index: &str,
    value: &str,
) -> Option<String> {
    let v = value;
    let (f, bits) = match dtype {
        DType::F32 | DType::I32 => ("st32_", format!("bitcast<u32>({v})")),
        DType::F16 => {
            h.need("rf16");
            h.need("f16_enc");
            ("st16_", format!("f16_enc(rf16({v}))"))
        }
        DType::BF16 => ("st16_", format!("(bitcast<u32>({v}) >> 16u)")),
        DType::I16 => ("st16_", format!("bitcast<u32>({v})")),
        DType::I8 | DType::U8 => ("st8_", format!("bitcast<u32>({v})")),
        DType::Bool => ("st8_", format!("select(0u, 1u, {v})")),
        _ => return None,
    };
    h.need(f);
    Some(format!("{f}({base}, {index}, {bits});"))
}
