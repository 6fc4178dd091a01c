//! Oracle semantics of the elementwise, movement, reduction and linear-algebra
//! ops, checked against hand-computed values and independent naive `f64`
//! references written here (not in the crate).

#[path = "interp_core/dtypes.rs"]
mod dtypes;
#[path = "interp_core/elementwise.rs"]
mod elementwise;
#[path = "interp_core/linalg.rs"]
mod linalg;
#[path = "interp_core/movement.rs"]
mod movement;
#[path = "interp_core/reduce.rs"]
mod reduce;

use rlx_ir::{DType, Graph, IrResult, Op, TensorData, interp};

/// Build a one-op graph over inputs `a0, a1, …` (declared with the dims and
/// dtype of `args`), run it in the oracle, and return its result.
pub fn try_eval(op: Op, args: &[TensorData]) -> IrResult<TensorData> {
    let mut g = Graph::new("interp_core");
    let names: Vec<String> = (0..args.len()).map(|i| format!("a{i}")).collect();
    let ids = names
        .iter()
        .zip(args)
        .map(|(n, a)| g.input(n.clone(), a.shape()))
        .collect();
    let y = g.add_op(op, ids)?;
    g.set_outputs(vec![y]);
    let feeds: Vec<(&str, TensorData)> = names
        .iter()
        .map(|n| n.as_str())
        .zip(args.iter().cloned())
        .collect();
    Ok(interp::run(&g, &feeds)?.remove(0))
}

/// [`try_eval`], panicking with the error's message.
#[track_caller]
pub fn eval(op: Op, args: &[TensorData]) -> TensorData {
    try_eval(op, args).unwrap_or_else(|e| panic!("{e}"))
}

/// The message of the error [`try_eval`] returns (panics if it succeeds).
#[track_caller]
pub fn eval_err(op: Op, args: &[TensorData]) -> String {
    match try_eval(op, args) {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

/// F32 data.
pub fn f32s(dims: &[usize], v: &[f32]) -> TensorData {
    TensorData::from_f32(dims, v)
}

/// F64 data.
pub fn f64s(dims: &[usize], v: &[f64]) -> TensorData {
    TensorData::from_f64(dims, v)
}

/// Data of any dtype from real values (rounded/saturated like a cast).
pub fn real(dtype: DType, dims: &[usize], v: &[f64]) -> TensorData {
    TensorData::from_f64_as(dtype, dims, v)
}

/// Integer data of any dtype (wrapping).
pub fn ints(dtype: DType, dims: &[usize], v: &[i64]) -> TensorData {
    TensorData::from_i64_as(dtype, dims, v)
}

/// `v` rounded to `dtype` (the correct rounding, by the data layer).
pub fn rounded(dtype: DType, v: &[f64]) -> Vec<f64> {
    TensorData::from_f64_as(dtype, &[v.len()], v).to_f64_vec()
}

/// Element-wise `|got − want| ≤ tol · max(1, |want|)`; NaN matches NaN and
/// infinities must match exactly.
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "lengths differ: {got:?} vs {want:?}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol * w.abs().max(1.0)
        };
        assert!(
            ok,
            "element {i}: got {g}, want {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// Exact equality of f64 vectors where NaN matches NaN.
#[track_caller]
pub fn assert_same(got: &[f64], want: &[f64]) {
    assert_close(got, want, 0.0);
}
