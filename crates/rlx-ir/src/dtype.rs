//! Element types.

use std::fmt;

/// Scalar element type of a tensor.
///
/// Floating types `F16`/`BF16` are stored in their own width and computed
/// through `f32`; `Bool` is stored as one byte (0 or 1); complex types store
/// interleaved (re, im) pairs.
///
/// ```
/// use rlx_ir::DType;
/// assert_eq!(DType::BF16.size_bytes(), 2);
/// assert_eq!(DType::I32.promote(DType::F16), DType::F16);
/// assert_eq!(DType::F32.to_string(), "f32");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U32,
    Bool,
    C64,
    C128,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
        DType::Bool,
        DType::C64,
        DType::C128,
    ];

    /// Bytes per element.
    pub const fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// Real floating-point types (`F32`, `F16`, `BF16`, `F64`).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// Integer types, signed and unsigned (not `Bool`).
    pub const fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U32
        )
    }

    /// Unsigned integer types.
    pub const fn is_unsigned(self) -> bool {
        matches!(self, DType::U8 | DType::U32)
    }

    /// Complex types (`C64`, `C128`).
    pub const fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// Rank used by [`DType::promote`]: the higher rank wins.
    pub const fn promotion_rank(self) -> u32 {
        match self {
            DType::Bool => 0,
            DType::U8 => 1,
            DType::I8 => 2,
            DType::I16 => 3,
            DType::U32 => 4,
            DType::I32 => 5,
            DType::I64 => 6,
            DType::BF16 => 7,
            DType::F16 => 8,
            DType::F32 => 9,
            DType::F64 => 10,
            DType::C64 => 11,
            DType::C128 => 12,
        }
    }

    /// The common type of `self` and `other` (the one with the higher promotion rank).
    pub const fn promote(self, other: DType) -> DType {
        if other.promotion_rank() > self.promotion_rank() {
            other
        } else {
            self
        }
    }

    /// Lowercase name, as printed by `Display` (`"f32"`, `"bf16"`, `"bool"`).
    pub const fn name(self) -> &'static str {
        match self {
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
            DType::C64 => "c64",
            DType::C128 => "c128",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        DType::ALL
            .iter()
            .copied()
            .find(|d| d.name() == lower)
            .ok_or_else(|| format!("unknown dtype `{s}`: expected one of f32, f16, bf16, f64, i8, i16, i32, i64, u8, u32, bool, c64, c128"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_match_storage_width() {
        let expected = [4, 2, 2, 8, 1, 2, 4, 8, 1, 4, 1, 8, 16];
        for (d, n) in DType::ALL.iter().zip(expected) {
            assert_eq!(d.size_bytes(), n, "{d}");
        }
    }

    #[test]
    fn classification_is_a_partition() {
        for d in DType::ALL {
            let classes = [d.is_float(), d.is_int(), d.is_complex(), d == DType::Bool];
            assert_eq!(classes.iter().filter(|c| **c).count(), 1, "{d}");
        }
    }

    #[test]
    fn promotion_is_commutative_and_picks_the_wider_type() {
        for a in DType::ALL {
            for b in DType::ALL {
                assert_eq!(a.promote(b), b.promote(a));
            }
        }
        assert_eq!(DType::I64.promote(DType::F32), DType::F32);
        assert_eq!(DType::Bool.promote(DType::U8), DType::U8);
        assert_eq!(DType::F16.promote(DType::F64), DType::F64);
    }

    #[test]
    fn display_and_parse_round_trip() {
        for d in DType::ALL {
            assert_eq!(d.to_string().parse::<DType>().unwrap(), d);
        }
        assert!(
            "f33"
                .parse::<DType>()
                .unwrap_err()
                .contains("unknown dtype")
        );
    }
}
