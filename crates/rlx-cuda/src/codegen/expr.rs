//! Dtype names, C compute types, literals and casts for the code this backend still
//! writes by hand (attention, the native opaque kernels, contraction operands): f32/f16/
//! bf16 compute in `float`, f64 in `double`, integers and bool in `i64`. Fused
//! expressions (elementwise kernels, prologues, epilogues) are lowered to the loop IR
//! (`rlx_compile::loops`) and rendered by its C renderer instead.

use rlx_compile::program::compute_class;
use rlx_ir::DType;

/// The prelude's name of a dtype (`ld_f16`, `st_bool`).
pub(crate) fn dt_name(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "f32",
        DType::F16 => "f16",
        DType::BF16 => "bf16",
        DType::F64 => "f64",
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "u8",
        DType::U32 => "u32",
        DType::Bool => "bool",
        DType::C64 | DType::C128 => "complex",
    }
}

/// The C type values of `dt` are computed in.
pub(crate) fn ctype(dt: DType) -> &'static str {
    match compute_class(dt) {
        Some(DType::F32) => "float",
        Some(DType::F64) => "double",
        _ => "i64",
    }
}

/// `Some(F32 | F64 | I64)`: the compute class.
fn class(dt: DType) -> DType {
    compute_class(dt).expect("complex values are not computed by generated kernels")
}

/// `(lo, hi)` saturation bounds of a float → integer conversion into `to`.
fn int_bounds(to: DType) -> (&'static str, &'static str, &'static str, &'static str) {
    match to {
        DType::I8 => ("-128.0", "127.0", "-128ll", "127ll"),
        DType::I16 => ("-32768.0", "32767.0", "-32768ll", "32767ll"),
        DType::I32 => (
            "-2147483648.0",
            "2147483647.0",
            "-2147483648ll",
            "2147483647ll",
        ),
        DType::U8 => ("0.0", "255.0", "0ll", "255ll"),
        DType::U32 => ("0.0", "4294967295.0", "0ll", "4294967295ll"),
        _ => (
            "-9223372036854775808.0",
            "9223372036854775807.0",
            "(-9223372036854775807ll - 1)",
            "9223372036854775807ll",
        ),
    }
}

/// C expression converting `a` (a value of `from`) to `to` with the oracle's `Cast` rules.
pub(crate) fn cast(a: &str, from: DType, to: DType) -> String {
    if from == to {
        return a.to_string();
    }
    match (class(from), class(to)) {
        (DType::F32, DType::F32) => match to {
            DType::F16 => format!("rnd_h({a})"),
            DType::BF16 => format!("rnd_bf({a})"),
            _ => a.to_string(),
        },
        (DType::F32, DType::F64) => format!("(double)({a})"),
        (DType::F64, DType::F32) => match to {
            DType::F16 => format!("d2h({a})"),
            DType::BF16 => format!("d2bf({a})"),
            _ => format!("(float)({a})"),
        },
        (DType::F32 | DType::F64, _) => {
            if to == DType::Bool {
                format!("(i64)(({a}) != 0)")
            } else {
                let (lo, hi, ilo, ihi) = int_bounds(to);
                format!("f2i((double)({a}), {lo}, {hi}, {ilo}, {ihi})")
            }
        }
        (_, DType::F32) => match to {
            DType::F16 => format!("d2h(rlx_int_to_f64({a}, 11))"),
            DType::BF16 => format!("d2bf(rlx_int_to_f64({a}, 8))"),
            _ => format!("(float)({a})"),
        },
        (_, DType::F64) => format!("(double)({a})"),
        _ => match to {
            DType::Bool => format!("(i64)(({a}) != 0)"),
            DType::I64 => format!("(i64)({a})"),
            other => format!("(i64)({})({a})", dt_name(other)),
        },
    }
}
