//! Second order over every op of the table: for `loss = Σ c ⊙ op(inputs)` (fixed
//! random weights `c`), the Hessian-vector product by forward-over-reverse
//! (`jvp_graph` of `value_and_grad_graph`) equals central differences of the
//! gradient, and `vmap` of the gradient function equals a loop of it. This drives the
//! JVP and batching rules through every op the reverse mode emits. First order, the
//! two modes must agree exactly: `jvp(loss)·v = ⟨grad loss, v⟩` for every op.

#[path = "jvp_ops/cases.rs"]
mod cases;
#[path = "jvp_ops/table.rs"]
mod table;

use cases::{Case, Check, Rng, data, values, within};
use rlx_compile::autodiff::{append_vjp, ones_like, value_and_grad_graph};
use rlx_compile::jvp::{jvp_graph, tangent_name};
use rlx_compile::vmap::vmap;
use rlx_ir::{BinaryOp, DType, Graph, NodeId, Op, ReduceOp, TensorData, interp};
use table::all;

/// The case's graph with its output `y` turned into the scalar `Σ c ⊙ y`; `None` when
/// the output is not a float (nothing to differentiate).
fn with_loss(c: &Case, rng: &mut Rng) -> Option<(Graph, Vec<NodeId>)> {
    let mut g = c.graph();
    let y = g.outputs[0];
    let s = g.shape(y).clone();
    if !s.dtype().is_float() || !matches!(c.check, Check::Fd) {
        return None;
    }
    let dims = s.static_dims()?;
    let n: usize = dims.iter().product();
    let w: Vec<f64> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let wd = TensorData::from_f64_as(s.dtype(), &dims, &w);
    let ws = wd.shape();
    let cw = g.add_node(Op::Constant { data: wd.bytes }, vec![], ws);
    let p = g.add_op(Op::Binary(BinaryOp::Mul), vec![y, cw]).ok()?;
    let l = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: (0..dims.len()).collect(),
                keep_dim: false,
            },
            vec![p],
        )
        .ok()?;
    g.set_outputs(vec![l]);
    let diff: Vec<NodeId> = (0..c.inputs.len())
        .filter(|&i| c.inputs[i].diff && c.inputs[i].dtype == DType::F64)
        .map(|i| NodeId(i as u32))
        .collect();
    if diff.is_empty() {
        return None;
    }
    Some((g, diff))
}

fn run(g: &Graph, ins: &[(String, TensorData)]) -> Result<Vec<Vec<f64>>, String> {
    let refs: Vec<(&str, TensorData)> = ins.iter().map(|(n, d)| (n.as_str(), d.clone())).collect();
    interp::run(g, &refs)
        .map(|v| v.iter().map(|d| d.to_f64_vec()).collect())
        .map_err(|e| e.to_string())
}

fn check_hvp(c: &Case) -> Result<bool, String> {
    let mut rng = Rng::new(c.name.len() as u64 * 977 + 5);
    let Some((g, diff)) = with_loss(c, &mut rng) else {
        return Ok(false);
    };
    let vg = match value_and_grad_graph(&g, &diff) {
        Ok(vg) => vg,
        // No gradient reaches some input (e.g. a shape-only operand): not second order.
        Err(e) if e.to_string().contains("no gradient reaches") => return Ok(false),
        Err(e) => return Err(format!("value_and_grad_graph: {e}")),
    };
    let h = jvp_graph(&vg, &diff).map_err(|e| format!("jvp of the gradient: {e}"))?;
    h.verify()
        .map_err(|e| format!("the hvp graph does not verify: {e}"))?;
    let xs: Vec<Vec<f64>> = c.inputs.iter().map(|s| values(s, &mut rng)).collect();
    let vs: Vec<Vec<f64>> = diff
        .iter()
        .map(|d| {
            (0..xs[d.index()].len())
                .map(|_| rng.uniform(-1.0, 1.0))
                .collect()
        })
        .collect();
    let feed = |e: f64| -> Vec<(String, TensorData)> {
        c.inputs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let mut v = xs[i].clone();
                if let Some(k) = diff.iter().position(|d| d.index() == i) {
                    for (a, t) in v.iter_mut().zip(&vs[k]) {
                        *a += e * t;
                    }
                }
                (s.name.to_string(), data(s, &[], &v))
            })
            .collect()
    };
    let mut ins = feed(0.0);
    for (k, d) in diff.iter().enumerate() {
        let s = &c.inputs[d.index()];
        ins.push((tangent_name(s.name), data(s, &[], &vs[k])));
    }
    let out = run(&h, &ins)?;
    let k = diff.len();
    let eps = 1e-5;
    let (hi, lo) = (run(&vg, &feed(eps))?, run(&vg, &feed(-eps))?);
    for j in 0..k {
        let fd: Vec<f64> = hi[1 + j]
            .iter()
            .zip(&lo[1 + j])
            .map(|(a, b)| (a - b) / (2.0 * eps))
            .collect();
        let got = &out[2 + k + j];
        for (i, (a, b)) in got.iter().zip(&fd).enumerate() {
            if !within(*a, *b, 1e-5) {
                return Err(format!(
                    "H·v block {j} element {i}: {a} vs finite differences {b}\n  hvp: {got:?}\n  fd:  {fd:?}"
                ));
            }
        }
    }
    Ok(true)
}

/// Forward and reverse mode agree: the tangent of the loss along random `v` equals
/// `Σ_k ⟨∂loss/∂x_k, v_k⟩`. An input that reverse mode says no gradient reaches must
/// get a zero tangent (so conventions such as which operands are constants match).
fn check_adjoint(c: &Case) -> Result<bool, String> {
    let mut rng = Rng::new(c.name.len() as u64 * 313 + 1);
    let Some((g, diff)) = with_loss(c, &mut rng) else {
        return Ok(false);
    };
    let mut gg = g.clone();
    let loss = gg.outputs[0];
    let seed = ones_like(&mut gg, loss).map_err(|e| e.to_string())?;
    let grads =
        append_vjp(&mut gg, &[loss], &[seed], &diff).map_err(|e| format!("append_vjp: {e}"))?;
    let reached: Vec<(usize, NodeId)> = grads
        .iter()
        .enumerate()
        .filter_map(|(k, gr)| gr.map(|id| (k, id)))
        .collect();
    gg.set_outputs(reached.iter().map(|&(_, id)| id).collect());
    let jg = jvp_graph(&g, &diff).map_err(|e| format!("jvp_graph: {e}"))?;
    let xs: Vec<(String, TensorData)> = c
        .inputs
        .iter()
        .map(|s| (s.name.to_string(), data(s, &[], &values(s, &mut rng))))
        .collect();
    let vs: Vec<Vec<f64>> = diff
        .iter()
        .map(|d| {
            (0..xs[d.index()].1.numel())
                .map(|_| rng.uniform(-1.0, 1.0))
                .collect()
        })
        .collect();
    let mut jin = xs.clone();
    for (k, d) in diff.iter().enumerate() {
        let s = &c.inputs[d.index()];
        jin.push((tangent_name(s.name), data(s, &[], &vs[k])));
    }
    let forward = run(&jg, &jin)?[1][0];
    let gvals = if reached.is_empty() {
        Vec::new()
    } else {
        run(&gg, &xs)?
    };
    let reverse: f64 = reached
        .iter()
        .zip(&gvals)
        .map(|(&(k, _), gk)| gk.iter().zip(&vs[k]).map(|(a, b)| a * b).sum::<f64>())
        .sum();
    // Exact up to rounding: f64 rounding unless some value is computed in a narrower
    // float (the cast cases), where the two modes round at different places.
    let narrow = g
        .nodes()
        .iter()
        .any(|n| n.shape.dtype().is_float() && n.shape.dtype() != DType::F64);
    let tol = if narrow { 1e-5 } else { 1e-9 };
    if !within(forward, reverse, tol) {
        let names: Vec<&str> = reached
            .iter()
            .map(|&(k, _)| c.inputs[diff[k].index()].name)
            .collect();
        return Err(format!(
            "jvp·v = {forward} but ⟨grad, v⟩ = {reverse} (reverse mode reached {names:?})"
        ));
    }
    Ok(true)
}

fn check_vmap_grad(c: &Case) -> Result<bool, String> {
    let mut rng = Rng::new(c.name.len() as u64 * 131 + 9);
    let Some((g, diff)) = with_loss(c, &mut rng) else {
        return Ok(false);
    };
    let vg = match value_and_grad_graph(&g, &diff) {
        Ok(vg) => vg,
        Err(e) if e.to_string().contains("no gradient reaches") => return Ok(false),
        Err(e) => return Err(format!("value_and_grad_graph: {e}")),
    };
    const B: usize = 2;
    let bg = vmap(&vg, &diff, B).map_err(|e| format!("vmap of the gradient: {e}"))?;
    bg.verify().map_err(|e| format!("does not verify: {e}"))?;
    let per: Vec<Vec<Vec<f64>>> = c
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = if diff.iter().any(|d| d.index() == i) {
                B
            } else {
                1
            };
            (0..n).map(|_| values(s, &mut rng)).collect()
        })
        .collect();
    let feed: Vec<(String, TensorData)> = c
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let d = if per[i].len() == B {
                data(s, &[B], &per[i].concat())
            } else {
                data(s, &[], &per[i][0])
            };
            (s.name.to_string(), d)
        })
        .collect();
    let got = run(&bg, &feed)?;
    for (o, got_o) in got.iter().enumerate() {
        let mut want = Vec::new();
        for b in 0..B {
            let ex: Vec<(String, TensorData)> = c
                .inputs
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    (
                        s.name.to_string(),
                        data(s, &[], &per[i][b.min(per[i].len() - 1)]),
                    )
                })
                .collect();
            want.extend(run(&vg, &ex)?[o].clone());
        }
        for (i, (a, b)) in got_o.iter().zip(&want).enumerate() {
            if !within(*a, *b, 1e-9) {
                return Err(format!("output {o} element {i}: vmap {a} vs loop {b}"));
            }
        }
    }
    Ok(true)
}

/// Reverse mode through the batched graph: `grad(Σ_b loss_b)` with respect to the
/// batched inputs is the per-example gradient.
fn check_grad_of_vmap(c: &Case) -> Result<bool, String> {
    let mut rng = Rng::new(c.name.len() as u64 * 71 + 3);
    let Some((g, diff)) = with_loss(c, &mut rng) else {
        return Ok(false);
    };
    let vg = match value_and_grad_graph(&g, &diff) {
        Ok(vg) => vg,
        Err(e) if e.to_string().contains("no gradient reaches") => return Ok(false),
        Err(e) => return Err(format!("value_and_grad_graph: {e}")),
    };
    const B: usize = 2;
    let bg = vmap(&g, &diff, B).map_err(|e| format!("vmap: {e}"))?;
    let names: Vec<&str> = diff.iter().map(|d| c.inputs[d.index()].name).collect();
    let ids: Vec<NodeId> = names.iter().map(|n| bg.input_id(n).unwrap()).collect();
    let gb =
        value_and_grad_graph(&bg, &ids).map_err(|e| format!("grad of the vmapped graph: {e}"))?;
    let per: Vec<Vec<Vec<f64>>> = c
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n = if diff.iter().any(|d| d.index() == i) {
                B
            } else {
                1
            };
            (0..n).map(|_| values(s, &mut rng)).collect()
        })
        .collect();
    let feed: Vec<(String, TensorData)> = c
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let d = if per[i].len() == B {
                data(s, &[B], &per[i].concat())
            } else {
                data(s, &[], &per[i][0])
            };
            (s.name.to_string(), d)
        })
        .collect();
    let got = run(&gb, &feed)?;
    for k in 0..diff.len() {
        let mut want = Vec::new();
        for b in 0..B {
            let ex: Vec<(String, TensorData)> = c
                .inputs
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    (
                        s.name.to_string(),
                        data(s, &[], &per[i][b.min(per[i].len() - 1)]),
                    )
                })
                .collect();
            want.extend(run(&vg, &ex)?[1 + k].clone());
        }
        for (i, (a, b)) in got[1 + k].iter().zip(&want).enumerate() {
            if !within(*a, *b, 1e-9) {
                return Err(format!("gradient {k} element {i}: {a} vs loop {b}"));
            }
        }
    }
    Ok(true)
}

fn sweep(check: fn(&Case) -> Result<bool, String>) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut failures = Vec::new();
    for c in all() {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&c)))
            .unwrap_or_else(|_| Err("panicked".into()));
        match r {
            Ok(true) => checked += 1,
            Ok(false) => {}
            Err(e) => failures.push(format!("{}: {e}", c.name)),
        }
    }
    (checked, failures)
}

#[test]
fn hessian_vector_products_match_finite_differences_of_the_gradient_for_every_op() {
    let (checked, failures) = sweep(check_hvp);
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        checked >= 80,
        "only {checked} cases were second-order checked"
    );
    eprintln!("{checked} hvp checks");
}

#[test]
fn gradient_of_vmap_equals_a_loop_of_gradients_for_every_op() {
    let (checked, failures) = sweep(check_grad_of_vmap);
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 80, "only {checked} cases were checked");
    eprintln!("{checked} grad(vmap) checks");
}

#[test]
fn vmap_of_the_gradient_equals_a_loop_for_every_op() {
    let (checked, failures) = sweep(check_vmap_grad);
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 80, "only {checked} cases were checked");
    eprintln!("{checked} vmap(grad) checks");
}

#[test]
fn forward_and_reverse_mode_agree_for_every_op() {
    let (checked, failures) = sweep(check_adjoint);
    assert!(
        failures.is_empty(),
        "{} failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(checked >= 80, "only {checked} cases were checked");
    eprintln!("{checked} jvp/vjp agreement checks");
}
