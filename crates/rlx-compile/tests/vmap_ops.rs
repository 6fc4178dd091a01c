//! `vmap(f)` equals a loop of `f` over the examples (both run through the oracle),
//! for every op flavour of the shared table (`jvp_ops/cases.rs`) and for every way of
//! choosing which inputs carry the batch.

#[path = "jvp_ops/cases.rs"]
mod cases;
#[path = "jvp_ops/table.rs"]
mod table;

use cases::{Case, NON_LEAF, Rng, data, values};
use rlx_compile::vmap::vmap;
use rlx_ir::{Graph, NodeId, TensorData, interp};
use std::collections::BTreeSet;
use table::all;

const B: usize = 3;

fn seed_of(name: &str) -> u64 {
    name.bytes()
        .fold(11u64, |h, b| h.wrapping_mul(131).wrapping_add(b as u64))
}

fn run(g: &Graph, inputs: &[(&str, TensorData)]) -> Result<Vec<TensorData>, String> {
    interp::run(g, inputs).map_err(|e| e.to_string())
}

/// Which inputs to batch: every non-empty subset for up to 3 inputs, else each single
/// input, all of them, and all but the first.
fn subsets(n: usize) -> Vec<Vec<usize>> {
    if n <= 3 {
        return (1..1u32 << n)
            .map(|m| (0..n).filter(|&i| m & (1 << i) != 0).collect())
            .collect();
    }
    let mut s: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
    s.push((0..n).collect());
    s.push((1..n).collect());
    s
}

fn check(c: &Case, batched: &[usize]) -> Result<(), String> {
    let g = c.graph();
    let ids: Vec<NodeId> = batched.iter().map(|&i| NodeId(i as u32)).collect();
    let vg = vmap(&g, &ids, B).map_err(|e| format!("vmap: {e}"))?;
    vg.verify()
        .map_err(|e| format!("the batched graph does not verify: {e}"))?;
    let mut rng = Rng::new(seed_of(&c.name) ^ batched.len() as u64);
    // Per input: one example (shared) or B examples.
    let per: Vec<Vec<Vec<f64>>> = c
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = if batched.contains(&i) { B } else { 1 };
            (0..n).map(|_| values(s, &mut rng)).collect()
        })
        .collect();
    let feed: Vec<(&str, TensorData)> = c
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if batched.contains(&i) {
                (s.name, data(s, &[B], &per[i].concat()))
            } else {
                (s.name, data(s, &[], &per[i][0]))
            }
        })
        .collect();
    let got = &run(&vg, &feed)?[0];
    let mut want: Vec<f64> = Vec::new();
    let mut want_dims = vec![B];
    for b in 0..B {
        let ex: Vec<(&str, TensorData)> = c
            .inputs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    s.name,
                    data(s, &[], &per[i][if batched.contains(&i) { b } else { 0 }]),
                )
            })
            .collect();
        let y = &run(&g, &ex)?[0];
        if b == 0 {
            want_dims.extend_from_slice(&y.dims);
            if y.dtype != got.dtype {
                return Err(format!("dtype {} vs the loop's {}", got.dtype, y.dtype));
            }
        }
        want.extend(y.to_f64_vec());
    }
    if got.dims != want_dims {
        return Err(format!("dims {:?} vs the loop's {want_dims:?}", got.dims));
    }
    let tol = if got.dtype == rlx_ir::DType::F64 {
        1e-9
    } else {
        1e-5
    };
    let gv = got.to_f64_vec();
    for (i, (a, b)) in gv.iter().zip(&want).enumerate() {
        let same = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= tol * (1.0 + b.abs());
        if !same {
            return Err(format!(
                "element {i}: vmap {a} vs loop {b}\n  vmap: {gv:?}\n  loop: {want:?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn vmap_of_every_op_equals_a_loop_for_every_batched_subset() {
    let cases = all();
    let mut failures = Vec::new();
    let mut checked = 0;
    for c in &cases {
        for s in subsets(c.inputs.len()) {
            checked += 1;
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(c, &s)))
                .unwrap_or_else(|_| Err("panicked".into()));
            if let Err(e) = r {
                let names: Vec<&str> = s.iter().map(|&i| c.inputs[i].name).collect();
                failures.push(format!("{} batched {names:?}: {e}", c.name));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{checked} vmap checks over {} cases", cases.len());
}

#[test]
fn every_op_variant_has_a_vmap_case() {
    let covered: BTreeSet<&str> = all()
        .iter()
        .map(|c| {
            let g = c.graph();
            g.node(g.outputs[0]).op.variant_name()
        })
        .collect();
    assert_eq!(covered.len(), NON_LEAF, "covered: {covered:?}");
}
