//! Forward mode against central finite differences in f64, one table entry per op
//! flavour (see `jvp_ops/cases.rs`), plus the coverage check that every `Op`
//! variant has a case.

#[path = "jvp_ops/cases.rs"]
mod cases;
#[path = "jvp_ops/table.rs"]
mod table;

use cases::{Case, Check, NON_LEAF, Rng, data, values, within};
use rlx_compile::jvp::{jvp_graph, tangent_name};
use rlx_ir::{Graph, NodeId, TensorData, interp};
use std::collections::BTreeSet;
use table::all;

fn seed_of(name: &str) -> u64 {
    name.bytes()
        .fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64))
}

fn run(g: &Graph, inputs: &[(String, TensorData)]) -> Result<Vec<TensorData>, String> {
    let refs: Vec<(&str, TensorData)> = inputs
        .iter()
        .map(|(n, d)| (n.as_str(), d.clone()))
        .collect();
    interp::run(g, &refs).map_err(|e| e.to_string())
}

/// Check one case; `Err` describes the first mismatch.
fn check(c: &Case) -> Result<(), String> {
    let g = c.graph();
    let diff: Vec<usize> = (0..c.inputs.len()).filter(|&i| c.inputs[i].diff).collect();
    let ids: Vec<NodeId> = diff.iter().map(|&i| NodeId(i as u32)).collect();
    let jg = jvp_graph(&g, &ids).map_err(|e| format!("jvp_graph: {e}"))?;
    jg.verify()
        .map_err(|e| format!("the jvp graph does not verify: {e}"))?;
    let mut rng = Rng::new(seed_of(&c.name));
    let xs: Vec<Vec<f64>> = c.inputs.iter().map(|s| values(s, &mut rng)).collect();
    let ts: Vec<Vec<f64>> = diff
        .iter()
        .map(|&i| (0..xs[i].len()).map(|_| rng.uniform(-1.0, 1.0)).collect())
        .collect();
    let feed = |shift: f64| -> Vec<(String, TensorData)> {
        c.inputs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut v = xs[i].clone();
                if let Some(k) = diff.iter().position(|&d| d == i) {
                    for (a, t) in v.iter_mut().zip(&ts[k]) {
                        *a += shift * t;
                    }
                }
                (s.name.to_string(), data(s, &[], &v))
            })
            .collect()
    };
    let primal_in = feed(0.0);
    let tangents: Vec<TensorData> = diff
        .iter()
        .enumerate()
        .map(|(k, &i)| data(&c.inputs[i], &[], &ts[k]))
        .collect();
    let mut jin = primal_in.clone();
    for (k, &i) in diff.iter().enumerate() {
        jin.push((tangent_name(c.inputs[i].name), tangents[k].clone()));
    }
    let out = run(&jg, &jin)?;
    let y = run(&g, &primal_in)?;
    if out[0] != y[0] {
        return Err("the jvp graph's primal output differs from the function's".into());
    }
    let got = out[1].to_f64_vec();
    let want: Vec<f64> = match &c.check {
        Check::Fd => {
            let hi = run(&g, &feed(c.eps))?[0].to_f64_vec();
            let lo = run(&g, &feed(-c.eps))?[0].to_f64_vec();
            hi.iter()
                .zip(&lo)
                .map(|(a, b)| (a - b) / (2.0 * c.eps))
                .collect()
        }
        Check::Identity => ts[0].clone(),
        Check::Zero => vec![0.0; got.len()],
        Check::Custom(f) => {
            let ins: Vec<TensorData> = primal_in.iter().map(|(_, d)| d.clone()).collect();
            f(&ins, &tangents)
        }
    };
    if got.len() != want.len() {
        return Err(format!(
            "{} tangent values, expected {}",
            got.len(),
            want.len()
        ));
    }
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        if !within(*a, *b, c.tol) {
            return Err(format!(
                "element {i}: jvp {a} vs expected {b}\n  jvp:      {got:?}\n  expected: {want:?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn jvp_of_every_op_matches_finite_differences() {
    let cases = all();
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(c)))
                .unwrap_or_else(|_| Err("panicked".into()));
            r.err().map(|e| format!("{}: {e}", c.name))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    eprintln!("{} jvp cases checked", cases.len());
}

#[test]
fn every_op_variant_has_a_jvp_case() {
    let covered: BTreeSet<&str> = all()
        .iter()
        .map(|c| {
            let g = c.graph();
            g.node(g.outputs[0]).op.variant_name()
        })
        .collect();
    assert_eq!(covered.len(), NON_LEAF, "covered: {covered:?}");
}
