//! Gradient checks: every VJP rule against central finite differences, in f64,
//! through the oracle interpreter.
//!
//! [`check`] builds a graph, appends its VJP with a random cotangent `r` (so the
//! checked scalar is `⟨r, f(x)⟩`, not just a sum), runs it with `interp`, and
//! compares every gradient element with `(⟨r, f(x + h·e)⟩ − ⟨r, f(x − h·e)⟩) / 2h`.
//! The per-family files in `tests/grad_check/` hold the cases.

#[path = "grad_check/attention.rs"]
mod attention;
#[path = "grad_check/conv.rs"]
mod conv;
#[path = "grad_check/elementwise.rs"]
mod elementwise;
#[path = "grad_check/errors.rs"]
mod errors;
#[path = "grad_check/linalg.rs"]
mod linalg;
#[path = "grad_check/models.rs"]
mod models;
#[path = "grad_check/movement.rs"]
mod movement;
#[path = "grad_check/nn.rs"]
mod nn;
#[path = "grad_check/reduce.rs"]
mod reduce;
#[path = "grad_check/scan.rs"]
mod scan;

use rlx_compile::autodiff::append_vjp;
use rlx_ir::{DType, Graph, NodeId, Op, Shape, TensorData, interp};

/// Deterministic values in `[lo, hi)` (a 64-bit LCG; `seed` picks the stream).
pub fn uniform(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            lo + (hi - lo) * u
        })
        .collect()
}

/// An f64 tensor of `dims` with values in `[-1, 1)`.
pub fn rand(dims: &[usize], seed: u64) -> TensorData {
    let n = dims.iter().product();
    TensorData::from_f64(dims, &uniform(n, seed, -1.0, 1.0))
}

/// An f64 tensor of `dims` with values in `[lo, hi)`.
pub fn rand_in(dims: &[usize], seed: u64, lo: f64, hi: f64) -> TensorData {
    let n = dims.iter().product();
    TensorData::from_f64(dims, &uniform(n, seed, lo, hi))
}

/// An f64 tensor with the given values.
pub fn vals(dims: &[usize], v: &[f64]) -> TensorData {
    TensorData::from_f64(dims, v)
}

/// Append `op` to `g`, panicking with the shape error.
#[track_caller]
pub fn op(g: &mut Graph, op: Op, inputs: Vec<NodeId>) -> NodeId {
    match g.add_op(op.clone(), inputs) {
        Ok(id) => id,
        Err(e) => panic!("building {}: {e}", op.name()),
    }
}

/// A rank-0 f64 constant.
pub fn scalar(g: &mut Graph, v: f64) -> NodeId {
    let d = TensorData::from_f64(&[], &[v]);
    g.add_node(
        Op::Constant { data: d.bytes },
        vec![],
        Shape::scalar(DType::F64),
    )
}

/// A constant node holding `d`.
pub fn constant(g: &mut Graph, d: TensorData) -> NodeId {
    let s = d.shape();
    g.add_node(Op::Constant { data: d.bytes }, vec![], s)
}

/// Finite-difference check of the VJP of `build` with respect to every float input.
#[track_caller]
pub fn check(
    name: &str,
    inputs: Vec<(&str, TensorData)>,
    build: impl Fn(&mut Graph, &[NodeId]) -> NodeId,
) {
    let all: Vec<&str> = inputs
        .iter()
        .filter(|(_, d)| d.dtype.is_float())
        .map(|(n, _)| *n)
        .collect();
    check_wrt(name, inputs.clone(), &all, build);
}

/// [`check`] with respect to the named inputs only.
#[track_caller]
pub fn check_wrt(
    name: &str,
    inputs: Vec<(&str, TensorData)>,
    wrt: &[&str],
    build: impl Fn(&mut Graph, &[NodeId]) -> NodeId,
) {
    check_tol(name, inputs, wrt, 1e-6, build)
}

/// [`check_wrt`] with a relative tolerance `tol`.
#[track_caller]
pub fn check_tol(
    name: &str,
    inputs: Vec<(&str, TensorData)>,
    wrt: &[&str],
    tol: f64,
    build: impl Fn(&mut Graph, &[NodeId]) -> NodeId,
) {
    let mut g = Graph::new(name);
    let ids: Vec<NodeId> = inputs.iter().map(|(n, d)| g.input(*n, d.shape())).collect();
    let out = build(&mut g, &ids);
    g.set_outputs(vec![out]);
    let fwd = g.clone();
    let y = run(&fwd, &inputs).remove(0);
    let r = TensorData::from_f64(&y.dims, &uniform(y.numel(), 99, -1.0, 1.0));
    let ct = g.input("ct", g.shape(out).clone());
    let wrt_ids: Vec<NodeId> = wrt
        .iter()
        .map(|w| {
            ids[inputs
                .iter()
                .position(|(n, _)| n == w)
                .expect("wrt names an input")]
        })
        .collect();
    let grads = append_vjp(&mut g, &[out], &[ct], &wrt_ids)
        .unwrap_or_else(|e| panic!("{name}: append_vjp failed: {e}"));
    let outs: Vec<NodeId> = grads
        .iter()
        .zip(wrt)
        .map(|(gr, w)| gr.unwrap_or_else(|| panic!("{name}: no gradient reached `{w}`")))
        .collect();
    g.set_outputs(outs);
    g.verify()
        .unwrap_or_else(|e| panic!("{name}: the gradient graph does not verify: {e}\n{g}"));
    let mut with_ct = inputs.clone();
    with_ct.push(("ct", r.clone()));
    let analytic = run(&g, &with_ct);
    let rv = r.to_f64_vec();
    let objective = |ins: &[(&str, TensorData)]| -> f64 {
        let y = run(&fwd, ins).remove(0).to_f64_vec();
        y.iter().zip(&rv).map(|(a, b)| a * b).sum()
    };
    for (k, w) in wrt.iter().enumerate() {
        let pos = inputs.iter().position(|(n, _)| n == w).unwrap();
        let base = inputs[pos].1.to_f64_vec();
        let got = analytic[k].to_f64_vec();
        assert_eq!(
            analytic[k].dims, inputs[pos].1.dims,
            "{name}: gradient of `{w}` has the wrong dims"
        );
        for j in 0..base.len() {
            let h = 1e-6 * base[j].abs().max(1.0);
            let at = |delta: f64| {
                let mut ins = inputs.clone();
                let mut v = base.clone();
                v[j] += delta;
                ins[pos].1 = TensorData::from_f64(&inputs[pos].1.dims, &v);
                objective(&ins)
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            let err = (got[j] - fd).abs();
            assert!(
                err <= tol * (1.0 + fd.abs().max(got[j].abs())),
                "{name}: d/d{w}[{j}] analytic {} vs finite difference {fd} (error {err:e})",
                got[j]
            );
        }
    }
}

/// Run `g` through the oracle.
#[track_caller]
pub fn run(g: &Graph, inputs: &[(&str, TensorData)]) -> Vec<TensorData> {
    interp::run(g, inputs).unwrap_or_else(|e| panic!("interp failed on `{}`: {e}\n{g}", g.name))
}

/// `Σ x` over every axis, rank-0.
pub fn sum_all(g: &mut Graph, x: NodeId) -> NodeId {
    let r = g.shape(x).rank();
    op(
        g,
        Op::Reduce {
            op: rlx_ir::ReduceOp::Sum,
            axes: (0..r).collect(),
            keep_dim: false,
        },
        vec![x],
    )
}
