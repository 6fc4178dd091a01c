//! Evaluating a case's tensors on the compiled path and through the oracle
//! interpreter (`rlx_ir::interp`), and comparing the two.
//!
//! Rules: a panic on either path is a failure; both `Ok` must agree in dims, dtype
//! and values (within the per-dtype tolerance of the least precise float dtype the
//! graph computes in); both `Err` is agreement; one `Ok` and one `Err` is a failure,
//! except that the oracle evaluates whole nodes while a compiled program computes
//! only the elements its output reads, so an integer division by zero the output
//! never reads may go unnoticed there (the same exception the backend suites make).

use super::case::{Case, Failure, guarded, short};
use super::leaves;
use super::source::Draw;
use rlx_ir::{Op, TensorData, interp};
use rlx_tensor::{DType, Dim, Graph, Tensor};

/// Relative tolerance of results computed in `dt`.
fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-9,
        DType::F32 => 2e-4,
        DType::F16 => 2e-2,
        DType::BF16 => 8e-2,
        DType::C64 => 2e-4,
        DType::C128 => 1e-9,
        _ => 0.0,
    }
}

/// Float or complex: compared with a tolerance.
fn inexact(dt: DType) -> bool {
    dt.is_float() || dt.is_complex()
}

/// The loosest tolerance of any float node `out` depends on.
fn graph_tolerance(g: &Graph, live: &[bool]) -> f64 {
    g.nodes()
        .iter()
        .filter(|n| live[n.id.0 as usize] && inexact(n.shape.dtype()))
        .map(|n| tolerance(n.shape.dtype()))
        .fold(0.0, f64::max)
}

/// Which nodes the graph's outputs depend on (ids are topological).
fn live(g: &Graph) -> Vec<bool> {
    let mut live = vec![false; g.len()];
    for o in &g.outputs {
        live[o.0 as usize] = true;
    }
    for n in g.nodes().iter().rev() {
        if live[n.id.0 as usize] {
            for i in &n.inputs {
                live[i.0 as usize] = true;
            }
        }
    }
    live
}

/// `Ok(())` when `got` matches `want`, else what differs.
fn same(got: &TensorData, want: &TensorData, graph_tol: f64) -> Result<(), String> {
    if got.dims != want.dims || got.dtype != want.dtype {
        return Err(format!(
            "compiled gives {:?} {} but the oracle {:?} {}",
            got.dims, got.dtype, want.dims, want.dtype
        ));
    }
    let (x, y) = (got.to_f64_vec(), want.to_f64_vec());
    let differ = |p: f64, q: f64| p != q && !(p.is_nan() && q.is_nan());
    if !inexact(want.dtype) {
        // Integers and bools computed from float math may flip where a float lands on
        // a boundary (a comparison, a cast): allow a few, none in a pure integer graph.
        let bad = x.iter().zip(&y).filter(|(p, q)| differ(**p, **q)).count();
        let allowed = if graph_tol == 0.0 {
            0
        } else {
            x.len().div_ceil(20)
        };
        if bad > allowed {
            let i = x.iter().zip(&y).position(|(p, q)| differ(*p, *q)).unwrap();
            return Err(format!(
                "{bad} of {} elements differ; first at {i}: compiled {} vs oracle {}",
                x.len(),
                x[i],
                y[i]
            ));
        }
        return Ok(());
    }
    let tol = tolerance(want.dtype).max(graph_tol);
    // Relative to the output's scale: reductions of cancelling terms have absolute error.
    let scale = y
        .iter()
        .filter(|v| v.is_finite())
        .fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        let close = (p - q).abs() <= tol * (q.abs() + scale);
        if differ(*p, *q) && !close {
            return Err(format!(
                "element {i}: compiled {p} vs oracle {q} (tolerance {tol}, scale {scale})"
            ));
        }
    }
    Ok(())
}

type Got = Result<Result<Vec<TensorData>, String>, String>;

/// Compares the compiled result with the oracle's for the tensors `slots` (whose
/// graph is `g`), recording any failure in the case.
fn judge(c: &mut Case, slots: &[usize], g: &Graph, got: Got, want: Got) {
    let fail = |c: &mut Case, kind: &'static str, message: String| {
        c.failures.push(Failure {
            kind,
            message: format!("{message}\ngraph:\n{g}"),
            step: None,
            slots: slots.to_vec(),
        });
    };
    match (got, want) {
        (Err(p), _) => fail(c, "panic on the compiled path", p),
        (_, Err(p)) => fail(c, "panic in the oracle interpreter", p),
        (Ok(Ok(a)), Ok(Ok(b))) => {
            if a.len() != b.len() {
                return fail(c, "output count", format!("{} vs {}", a.len(), b.len()));
            }
            c.agreed[0] += 1;
            let tol = graph_tolerance(g, &live(g));
            for (k, (x, y)) in a.iter().zip(&b).enumerate() {
                if let Err(e) = same(x, y, tol) {
                    fail(c, "value mismatch", format!("output {k}: {e}"));
                }
            }
        }
        (Ok(Err(a)), Ok(Err(b))) => {
            if std::env::var("RLX_FUZZ_DEBUG").is_ok() {
                eprintln!(
                    "BOTH-ERR compiled: {}\n         oracle: {}",
                    short(&a, 150),
                    short(&b, 150)
                );
            }
            c.agreed[1] += 1
        }
        (Ok(Ok(_)), Ok(Err(e))) if e.contains("division by zero") => {}
        (Ok(Ok(_)), Ok(Err(e))) => fail(
            c,
            "compiled Ok, oracle Err",
            format!(
                "the oracle fails with `{}` but the compiled path returns a value",
                short(&e, 300)
            ),
        ),
        (Ok(Err(e)), Ok(Ok(_))) => fail(
            c,
            "compiled Err, oracle Ok",
            format!(
                "the compiled path fails with `{}` but the oracle computes a value",
                short(&e, 300)
            ),
        ),
    }
}

/// Evaluates the constant-only tensor of slot `s` (`try_to_data` against the oracle on
/// `to_graph()`).
pub fn eval_static(c: &mut Case, s: usize) {
    let t = c.t(s).clone();
    let Ok(g) = guarded(|| t.to_graph()) else {
        return c.failures.push(Failure {
            kind: "panic in to_graph",
            message: "to_graph panicked".into(),
            step: None,
            slots: vec![s],
        });
    };
    let name = c.name(s);
    c.epilogue.push(format!(
        "// then: {name}.try_to_data() against rlx_ir::interp::run(&{name}.to_graph(), &[])"
    ));
    let want: Got = guarded(|| interp::run(&g, &[]).map_err(|e| e.to_string()));
    #[cfg(feature = "eval")]
    let got: Got = guarded(|| t.try_to_data().map(|v| vec![v]).map_err(|e| e.to_string()));
    #[cfg(not(feature = "eval"))]
    let got: Got = want.clone();
    judge(c, &[s], &g, got, want);
}

/// Evaluates slot `s` of a `Func` case: its graph becomes a `Func`, each input it
/// reads gets data with the dynamic dims bound to random sizes (0 included; now and
/// then sizes that disagree with the declared type), and `Func::run_data` is
/// compared with the oracle on the same data.
pub fn eval_func(c: &mut Case, d: &mut Draw, s: usize, sizes: &[usize]) {
    let t: Tensor = c.t(s).clone();
    let Ok(g) = guarded(|| t.to_graph()) else {
        return;
    };
    // Typed data (`run_data`) most of the time; flat f32 slices (`try_run`, whose dims
    // are inferred from the lengths) or a `Jitted` handle otherwise.
    let how = d.pick(&["run_data", "run_data", "run_data", "try_run", "jit"]);
    let lv = live(&g);
    let mut inputs: Vec<(String, TensorData)> = Vec::new();
    let mut shown = Vec::new();
    for n in g.nodes() {
        let Op::Input { name } = &n.op else { continue };
        if !lv[n.id.0 as usize] {
            continue;
        }
        let mut dims: Vec<usize> = n
            .shape
            .dims()
            .iter()
            .map(|dim| match dim {
                Dim::Static(k) => *k,
                Dim::Dynamic(sym) => sizes[*sym as usize % sizes.len()],
            })
            .collect();
        // A wrong size now and then (typed runs only: a flat slice of another length
        // just reads as another size of a dynamic dim).
        if how == "run_data" && d.percent(5) && !dims.is_empty() {
            let i = d.below(dims.len());
            dims[i] += 1;
        }
        let count: usize = dims.iter().product();
        let v = leaves::values(d, n.shape.dtype(), count);
        shown.push(format!(
            "(\"{name}\", TensorData::from_f64_as(DType::{:?}, &{dims:?}, &{}))",
            n.shape.dtype(),
            leaves::vec_code(&v)
        ));
        inputs.push((
            name.clone(),
            TensorData::from_f64_as(n.shape.dtype(), &dims, &v),
        ));
    }
    let name = c.name(s);
    c.epilogue.push(format!(
        "// then: Func::from_graph({name}.to_graph()).{how}(&[{}])",
        shown.join(", ")
    ));
    let refs: Vec<(&str, TensorData)> = inputs
        .iter()
        .map(|(n, v)| (n.as_str(), v.clone()))
        .collect();
    let want: Got = guarded(|| interp::run(&g, &refs).map_err(|e| e.to_string()));
    if how == "run_data" {
        #[cfg(feature = "eval")]
        let got: Got = guarded(|| {
            rlx_tensor::Func::from_graph(g.clone())
                .run_data(&refs)
                .map_err(|e| e.to_string())
        });
        #[cfg(not(feature = "eval"))]
        let got: Got = want.clone();
        return judge(c, &[s], &g, got, want);
    }
    // Flat f32 in and out: compare as flat f32 vectors.
    let want = want.map(|r| r.map(|outs| outs.iter().map(flat_f32).collect()));
    #[cfg(feature = "eval")]
    let got: Got = guarded(|| {
        let f32s: Vec<(&str, Vec<f32>)> = refs
            .iter()
            .map(|(n, v)| (*n, v.to_f64_vec().iter().map(|&x| x as f32).collect()))
            .collect();
        let args: Vec<(&str, &[f32])> = f32s.iter().map(|(n, v)| (*n, v.as_slice())).collect();
        let func = rlx_tensor::Func::from_graph(g.clone());
        let out = if how == "jit" {
            func.try_jit_on(rlx_tensor::Device::Cpu)
                .and_then(|j| j.try_run(&args))
        } else {
            func.try_run(&args)
        };
        out.map(|outs| {
            outs.iter()
                .map(|v| TensorData::from_f32(&[v.len()], v))
                .collect()
        })
        .map_err(|e| e.to_string())
    });
    #[cfg(not(feature = "eval"))]
    let got: Got = want.clone();
    // A flat slice fixes at most one unknown dim per input (and none when it is empty):
    // `try_run` refuses, as documented, where the typed oracle run succeeds.
    if matches!(&got, Ok(Err(e)) if e.contains("cannot infer the dynamic dims")) {
        return;
    }
    judge(c, &[s], &g, got, want);
}

/// `t`'s values as a flat f32 vector (how `Func::try_run` returns them).
fn flat_f32(t: &TensorData) -> TensorData {
    let v: Vec<f32> = t.to_f64_vec().iter().map(|&x| x as f32).collect();
    TensorData::from_f32(&[v.len()], &v)
}
