//! Oracle semantics of the nn, conv/pool and fft ops, checked against hand-computed
//! values and independent naive `f64` references written here (not in the crate).
//! The per-family tests live in `tests/interp_nn/`.

#[path = "interp_nn/attention.rs"]
mod attention;
#[path = "interp_nn/attention_vjp.rs"]
mod attention_vjp;
#[path = "interp_nn/conv.rs"]
mod conv;
#[path = "interp_nn/fft.rs"]
mod fft;
#[path = "interp_nn/pool.rs"]
mod pool;
#[path = "interp_nn/rope_loss.rs"]
mod rope_loss;
#[path = "interp_nn/softmax_norm.rs"]
mod softmax_norm;

use rlx_ir::{DType, Graph, IrResult, Op, TensorData, interp};

/// Build a one-op graph over inputs `a0, a1, …` (declared with the dims and dtype of
/// `args`), run it in the oracle, and return its result.
pub fn try_eval(op: Op, args: &[TensorData]) -> IrResult<TensorData> {
    let mut g = Graph::new("interp_nn");
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

/// [`eval`] decoded to `f64`.
#[track_caller]
pub fn eval64(op: Op, args: &[TensorData]) -> Vec<f64> {
    eval(op, args).to_f64_vec()
}

/// F64 tensor.
#[track_caller]
pub fn t64(dims: &[usize], vals: &[f64]) -> TensorData {
    TensorData::from_f64(dims, vals)
}

/// Tensor of `dtype` holding `vals` (rounded to it).
#[track_caller]
pub fn t_as(dtype: DType, dims: &[usize], vals: &[f64]) -> TensorData {
    TensorData::from_f64_as(dtype, dims, vals)
}

/// `n` deterministic pseudo-random values in `[-1, 1)` (xorshift; seed picks the stream).
pub fn rand(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

/// Element-wise `|got − want| ≤ tol·(1 + |want|)`; `NaN` must meet `NaN`.
#[track_caller]
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(
            ok,
            "{what}: element {i} is {g}, expected {w}\n got {got:?}\nwant {want:?}"
        );
    }
}

/// `Σ a·b`.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Central finite difference of the scalar `f` at `x` along every coordinate.
pub fn grad_fd(x: &[f64], h: f64, f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    (0..x.len())
        .map(|i| {
            let mut p = x.to_vec();
            let mut m = x.to_vec();
            p[i] += h;
            m[i] -= h;
            (f(&p) - f(&m)) / (2.0 * h)
        })
        .collect()
}
