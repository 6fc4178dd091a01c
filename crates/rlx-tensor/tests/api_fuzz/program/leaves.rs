//! Where a case's tensors start: constructors (valid and invalid) and, in a `Func`
//! case, scope inputs with dynamic dims (`shape![?0, 3]`).

use super::case::Case;
use super::source::Draw;
use rlx_tensor::{DType, Dim, GraphScope, Shape, Tensor};

/// Dtypes a constant or input may have; F32 dominates, as it does in real programs.
pub const DTYPES: [DType; 12] = [
    DType::F32,
    DType::F32,
    DType::F32,
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::I8,
    DType::U8,
    DType::Bool,
];

/// Every real dtype (cast targets).
pub const ALL_DTYPES: [DType; 11] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
    DType::Bool,
];

/// A small size for one axis (0 now and then).
pub fn size(d: &mut Draw) -> usize {
    if d.percent(3) {
        return 0;
    }
    d.pick(&[1, 1, 2, 2, 3, 3, 4, 5, 6, 8])
}

/// Small static dims of rank 0–4.
pub fn dims(d: &mut Draw) -> Vec<usize> {
    let rank = d.pick(&[0, 1, 1, 2, 2, 2, 3, 3, 4]);
    (0..rank).map(|_| size(d)).collect()
}

/// `n` values suited to `dtype`: floats in [-2, 2] with some exact small values, small
/// integers (non-negative for unsigned), bools as 0/1.
pub fn values(d: &mut Draw, dtype: DType, n: usize) -> Vec<f64> {
    (0..n)
        .map(|_| {
            if dtype == DType::Bool {
                d.below(2) as f64
            } else if dtype.is_float() {
                if d.percent(10) {
                    d.pick(&[0.0, 1.0, -1.0, 0.5, 2.0, -3.0])
                } else {
                    (d.float(-2.0, 2.0) * 1024.0).round() / 1024.0
                }
            } else if dtype.is_unsigned() {
                d.range(0, 9) as f64
            } else {
                d.range(-6, 6) as f64
            }
        })
        .collect()
}

/// Rust source of a value list (elided past 48 values; the seed replays them exactly).
pub fn vec_code(v: &[f64]) -> String {
    if v.len() > 48 {
        return format!("/* {} values (replay the seed) */ vec![..]", v.len());
    }
    let items: Vec<String> = v.iter().map(|x| format!("{x:?}")).collect();
    format!("vec![{}]", items.join(", "))
}

/// A constant of `dims` and `dtype` with random values.
pub fn constant(c: &mut Case, d: &mut Draw, dims: &[usize], dtype: DType) -> Option<usize> {
    // `Tensor::from_f64_as` cannot build a complex tensor (its length check wants one
    // value per element, the encoder an (re, im) pair): known bug, real dtypes only.
    let dtype = if dtype.is_complex() && !c.known_bugs {
        DType::F32
    } else {
        dtype
    };
    let n: usize = dims.iter().product();
    let v = values(d, dtype, n);
    let code = format!(
        "Tensor::from_f64_as({}, {dims:?}, DType::{dtype:?})",
        vec_code(&v)
    );
    let dims = dims.to_vec();
    c.call(code, &[], move |_| {
        Ok(vec![Tensor::from_f64_as(&v, &dims, dtype)])
    })
    .map(|ids| ids[0])
}

/// An i64 index vector with values in `lo..=hi`.
pub fn index_vec(c: &mut Case, d: &mut Draw, len: usize, lo: i64, hi: i64) -> Option<usize> {
    let v: Vec<i64> = (0..len).map(|_| d.range(lo, hi)).collect();
    c.call(format!("Tensor::index_vec({v:?})"), &[], move |_| {
        Ok(vec![Tensor::index_vec(&v)])
    })
    .map(|ids| ids[0])
}

/// One constructor call: usually a random constant, sometimes another constructor,
/// now and then an invalid request (a wrong data length, a step of 0, a shape whose
/// element count overflows when `huge`).
pub fn constructor(c: &mut Case, d: &mut Draw, huge: bool) -> Option<usize> {
    let first = |r: Option<Vec<usize>>| r.map(|ids| ids[0]);
    match d.below(12) {
        0 => {
            let dims = dims(d);
            let n: usize = dims.iter().product();
            let len = if d.percent(30) { d.below(n + 3) } else { n };
            let v: Vec<f32> = values(d, DType::F32, len)
                .into_iter()
                .map(|x| x as f32)
                .collect();
            let vf: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            first(c.call(
                format!("Tensor::try_from_vec({}, {dims:?})", vec_code(&vf)),
                &[],
                move |_| Tensor::try_from_vec(v, &dims).map(|t| vec![t]),
            ))
        }
        1 => {
            let n = d.range(-2, 12);
            first(c.call(format!("Tensor::arange({n})"), &[], move |_| {
                Ok(vec![Tensor::arange(n)])
            }))
        }
        2 => {
            let (start, end) = (d.range(-8, 8), d.range(-8, 8));
            let step = if d.percent(10) {
                0
            } else {
                d.pick(&[1, 2, 3, -1, -2, 5])
            };
            first(c.call(
                format!("Tensor::try_arange_step({start}, {end}, {step})"),
                &[],
                move |_| Tensor::try_arange_step(start, end, step).map(|t| vec![t]),
            ))
        }
        3 => {
            let n = d.below(6);
            first(c.call(format!("Tensor::try_eye({n})"), &[], move |_| {
                Tensor::try_eye(n).map(|t| vec![t])
            }))
        }
        4 => {
            let dims = dims(d);
            let v = d.pick(&[0.0f32, 1.0, -2.5, 3.0]);
            first(c.call(
                format!("Tensor::try_full({dims:?}, {v:?})"),
                &[],
                move |_| Tensor::try_full(&dims, v).map(|t| vec![t]),
            ))
        }
        5 => {
            let dims = dims(d);
            let seed = d.below(1000) as u64;
            if d.percent(50) {
                first(
                    c.call(format!("Tensor::rand({dims:?}, {seed})"), &[], move |_| {
                        Ok(vec![Tensor::rand(&dims, seed)])
                    }),
                )
            } else {
                first(
                    c.call(format!("Tensor::randn({dims:?}, {seed})"), &[], move |_| {
                        Ok(vec![Tensor::randn(&dims, seed)])
                    }),
                )
            }
        }
        6 if huge => huge_constructor(c, d),
        _ => {
            let dims = dims(d);
            let dtype = d.pick(&DTYPES);
            constant(c, d, &dims, dtype)
        }
    }
}

/// A constructor asked for an element count that overflows or could never be
/// allocated: it must return `Err` without allocating.
fn huge_constructor(c: &mut Case, d: &mut Draw) -> Option<usize> {
    let big = d.pick(&[usize::MAX, 1 << 40, 1 << 33, usize::MAX / 2 + 1]);
    let dims = if d.percent(50) {
        vec![big]
    } else {
        vec![big, 1 << 32]
    };
    let first = |r: Option<Vec<usize>>| r.map(|ids| ids[0]);
    match d.below(4) {
        0 => first(
            c.call(format!("Tensor::try_zeros({dims:?})"), &[], move |_| {
                Tensor::try_zeros(&dims).map(|t| vec![t])
            }),
        ),
        1 => first(c.call(format!("Tensor::try_eye({big})"), &[], move |_| {
            Tensor::try_eye(big).map(|t| vec![t])
        })),
        2 => first(c.call(
            format!("Tensor::try_from_vec(vec![1.0; 4], {dims:?})"),
            &[],
            move |_| Tensor::try_from_vec(vec![1.0; 4], &dims).map(|t| vec![t]),
        )),
        _ => {
            let (start, end, step) = d.pick(&[
                (i64::MIN, i64::MAX, 1),
                (i64::MAX, i64::MIN, -1),
                (0, i64::MAX, 1 << 20),
                (i64::MIN, i64::MAX, i64::MAX),
            ]);
            first(c.call(
                format!("Tensor::try_arange_step({start}, {end}, {step})"),
                &[],
                move |_| Tensor::try_arange_step(start, end, step).map(|t| vec![t]),
            ))
        }
    }
}

/// The inputs of a `Func` case: 1–2 scope inputs whose dims are static or dynamic
/// (symbols 0 and 1, shared between inputs so binding them must agree).
pub fn scope_inputs(c: &mut Case, d: &mut Draw, scope: &mut GraphScope) -> Vec<usize> {
    let n = 1 + d.below(2);
    let mut ids = Vec::new();
    for k in 0..n {
        let rank = d.pick(&[1, 2, 2, 2, 3, 3, 4]);
        let dims: Vec<Dim> = (0..rank)
            .map(|_| {
                if d.percent(45) {
                    Dim::Dynamic(d.pick(&[0, 0, 1]))
                } else {
                    Dim::Static(size(d).max(1))
                }
            })
            .collect();
        let dtype = d.pick(&[
            DType::F32,
            DType::F32,
            DType::F32,
            DType::F64,
            DType::I64,
            DType::I32,
        ]);
        let name = format!("x{k}");
        let shown: Vec<String> = dims
            .iter()
            .map(|dim| match dim {
                Dim::Static(s) => s.to_string(),
                Dim::Dynamic(s) => format!("?{s}"),
            })
            .collect();
        let t = scope.input(name.clone(), Shape::from_dims(&dims, dtype));
        let code = format!(
            "scope.input(\"{name}\", shape![{dtype:?}; {}])",
            shown.join(", ")
        );
        ids.push(c.add_leaf(t, code));
    }
    ids
}
