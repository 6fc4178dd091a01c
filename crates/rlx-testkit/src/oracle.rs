//! The comparison of a backend's results against the oracle interpreter.

use rlx_ir::{DType, Graph, IrResult, Op, TensorData, interp};
use rlx_runtime::{Executable, RuntimeResult, arg_order};
use std::sync::Arc;

/// Names of `g`'s arguments in argument order (the order backends take them in).
pub fn arg_names(g: &Graph) -> Vec<String> {
    arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            other => unreachable!("arg_order returned a non-argument node {other:?}"),
        })
        .collect()
}

/// The oracle's outputs for `g` on `args` (given in argument order), or its error.
pub fn oracle(g: &Graph, args: &[TensorData]) -> IrResult<Vec<TensorData>> {
    let names = arg_names(g);
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    interp::run_refs(g, &named)
}

/// Relative tolerance for results of `dt`: f32 transcendentals are a few ulp off on
/// every backend, while the oracle computes in f64 and rounds each node once.
/// Integers and bools are exact (0).
pub fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-9,
        DType::F32 => 2e-4,
        DType::F16 => 2e-2,
        DType::BF16 => 8e-2,
        _ => 0.0,
    }
}

/// The loosest [`tolerance`] of any float node of `g`: the least precise float
/// dtype computed anywhere bounds the error of every output.
pub fn graph_tolerance(g: &Graph) -> f64 {
    g.nodes()
        .iter()
        .filter(|n| n.shape.dtype().is_float())
        .map(|n| tolerance(n.shape.dtype()))
        .fold(0.0f64, f64::max)
}

/// Compiles `g` with `compile`, runs it on `args` and requires agreement with the
/// oracle (or that both fail), naming the backend as `backend` in failures. Returns
/// the executable for further checks of its plan.
pub fn check(
    g: &Graph,
    args: &[TensorData],
    backend: &str,
    compile: impl FnOnce(&Graph) -> RuntimeResult<Arc<dyn Executable>>,
) -> Arc<dyn Executable> {
    let exe = compile(g).unwrap_or_else(|e| panic!("{backend} compile failed: {e}\n{g}"));
    check_executable(g, args, backend, exe.as_ref());
    exe
}

/// Runs an executable compiled from `g` on `args` and compares with the oracle.
pub fn check_executable(g: &Graph, args: &[TensorData], backend: &str, exe: &dyn Executable) {
    let want = oracle(g, args);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    compare(g, exe, backend, want, exe.run(&views));
}

/// Compares a backend's results (`got`, from `exe`) with the oracle's (`want`): both
/// may fail; otherwise dims and dtypes must match exactly and values within the
/// per-dtype tolerance. Failures print the graph and `exe`'s plan.
pub fn compare(
    g: &Graph,
    exe: &dyn Executable,
    backend: &str,
    want: IrResult<Vec<TensorData>>,
    got: RuntimeResult<Vec<TensorData>>,
) {
    let (want, got) = match (want, got) {
        (Ok(w), Ok(g2)) => (w, g2),
        (Err(_), Err(_)) => return,
        // The oracle evaluates every node whole; a compiled program computes only the
        // elements its outputs read, so an integer division by zero in an element
        // nobody reads (a view, a gather) legitimately goes unnoticed there.
        (Err(e), Ok(_)) if e.message.contains("division by zero") => return,
        (w, g2) => panic!(
            "oracle {:?} but {backend} {:?}\n{g}\n{}",
            w.map(|_| "ok"),
            g2.map(|_| "ok"),
            exe.explain()
        ),
    };
    assert_eq!(got.len(), want.len(), "output count\n{g}");
    let graph_tol = graph_tolerance(g);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.dims, b.dims, "output {k} dims\n{g}");
        assert_eq!(a.dtype, b.dtype, "output {k} dtype\n{g}");
        let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
        if !b.dtype.is_float() && graph_tol > 0.0 {
            // Integers and bools derived from float math may flip where a float lands
            // on a boundary: require all but a few elements to agree exactly.
            let bad = x
                .iter()
                .zip(&y)
                .filter(|(p, q)| p != q && !(p.is_nan() && q.is_nan()))
                .count();
            // Half-precision graphs round every node to 8–11 bits, so far more
            // integers derived from them sit on a rounding edge.
            let allowed = if graph_tol > tolerance(DType::F32) {
                4
            } else {
                20
            };
            assert!(
                bad * allowed <= x.len().max(1),
                "output {k}: {bad} of {} elements differ\n{g}\n{}",
                x.len(),
                exe.explain()
            );
            continue;
        }
        let tol = tolerance(b.dtype).max(graph_tol);
        // Values are compared relative to the output's scale (reductions of
        // cancelling terms have absolute, not relative, error).
        let scale = y
            .iter()
            .filter(|v| v.is_finite())
            .fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let ok =
                p == q || (p.is_nan() && q.is_nan()) || (p - q).abs() <= tol * (q.abs() + scale);
            assert!(
                ok,
                "output {k} element {i}: {backend} {p} vs oracle {q} (tol {tol})\n{g}\n{}",
                exe.explain()
            );
        }
    }
}

/// Asserts `a` and `b` have the same dims and dtype and every element agrees within
/// `tol` relative to `1 + |b|` (NaN matches NaN). For hand-written cases.
pub fn close(a: &TensorData, b: &TensorData, tol: f64) {
    assert_eq!(a.dims, b.dims, "dims differ");
    assert_eq!(a.dtype, b.dtype, "dtypes differ");
    for (i, (x, y)) in a.to_f64_vec().iter().zip(b.to_f64_vec()).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == &y || (x - y).abs() <= tol * (1.0 + y.abs());
        assert!(ok, "element {i}: {x} vs {y} (tol {tol})");
    }
}

/// Prints every oracle node value, `exe`'s plan and its outputs (the first elements
/// of each), for replaying a failing seed.
pub fn print_both(g: &Graph, args: &[TensorData], exe: &dyn Executable) {
    let names = arg_names(g);
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    if let Ok(all) = interp::run_all(g, &named) {
        for (i, v) in all.iter().enumerate() {
            if let Some(v) = v {
                eprintln!("oracle %{i}: {:?}", &v.to_f64_vec()[..v.numel().min(12)]);
            }
        }
    }
    eprintln!("{}", exe.explain());
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    match exe.run(&views) {
        Ok(outs) => {
            for o in outs {
                eprintln!("compiled: {:?}", &o.to_f64_vec()[..o.numel().min(80)]);
            }
        }
        Err(e) => eprintln!("compiled error: {e}"),
    }
}
