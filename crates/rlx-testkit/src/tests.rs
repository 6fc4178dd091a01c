//! The kit checks itself: generators give valid graphs, and the comparison accepts
//! results within tolerance and rejects results outside it.

use super::*;
use rlx_ir::{Activation, DType, Shape, TensorData, TensorView};
use rlx_runtime::{Executable, RuntimeResult};
use std::sync::Arc;

/// An "executable" that runs the oracle and scales every float result by `1 + rel`.
struct Perturbed {
    g: Graph,
    rel: f64,
}

impl Executable for Perturbed {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let owned: Vec<TensorData> = args.iter().map(|a| a.to_owned()).collect();
        let outs = oracle(&self.g, &owned).map_err(rlx_runtime::RuntimeError::from)?;
        Ok(outs
            .into_iter()
            .map(|t| {
                if !t.dtype.is_float() {
                    return t;
                }
                let v: Vec<f64> = t
                    .to_f64_vec()
                    .iter()
                    .map(|x| x * (1.0 + self.rel))
                    .collect();
                TensorData::from_f64_as(t.dtype, &t.dims, &v)
            })
            .collect())
    }

    fn explain(&self) -> String {
        format!("oracle scaled by 1 + {}", self.rel)
    }
}

fn perturbed(rel: f64) -> impl Fn(&Graph) -> RuntimeResult<Arc<dyn Executable>> {
    move |g| Ok(Arc::new(Perturbed { g: g.clone(), rel }) as Arc<dyn Executable>)
}

/// `exp(x)` of a 2×3 f32 input, with its data.
fn exp_graph() -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("exp");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let y = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
    g.set_outputs(vec![y]);
    (g, vec![TensorData::from_f32(&[2, 3], &seq(6, 1.0))])
}

#[test]
fn rng_replays_from_its_seed_and_stays_in_range() {
    let (mut a, mut b) = (Rng::new(42), Rng::new(42));
    let xs: Vec<u64> = (0..16).map(|_| a.next()).collect();
    assert_eq!(xs, (0..16).map(|_| b.next()).collect::<Vec<_>>());
    assert_ne!(xs, (0..16).map(|_| Rng::new(43).next()).collect::<Vec<_>>());
    let mut r = Rng::new(0);
    for _ in 0..1000 {
        assert!(r.below(7) < 7);
        let u = r.uniform();
        assert!((0.0..1.0).contains(&u));
    }
    assert_eq!(r.below(0), 0);
    let d = random_data(&mut r, &Shape::new(&[50], DType::I8));
    assert!(d.to_f64_vec().iter().all(|v| (-20.0..=20.0).contains(v)));
    let d = random_data(&mut r, &Shape::new(&[50], DType::F32));
    assert!(d.to_f64_vec().iter().all(|v| (-2.0..=2.0).contains(v)));
}

#[test]
fn random_graphs_are_valid_and_pass_against_the_oracle_itself() {
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        let (g, args) = match seed % 4 {
            0 => build_attention_graph(&mut rng),
            1 => build_conv_graph(&mut rng),
            2 => build_random_graph(&mut rng, seed % 8 == 2),
            _ => build_random_graph(&mut rng, false),
        };
        assert!(!g.outputs.is_empty(), "seed {seed}: no outputs\n{g}");
        assert_eq!(arg_names(&g).len(), args.len(), "seed {seed}\n{g}");
        check(&g, &args, "oracle", perturbed(0.0));
    }
}

#[test]
fn compare_accepts_results_within_the_f32_tolerance() {
    let (g, args) = exp_graph();
    check(&g, &args, "test", perturbed(1e-5));
}

#[test]
#[should_panic(expected = "vs oracle")]
fn compare_rejects_results_beyond_the_f32_tolerance() {
    let (g, args) = exp_graph();
    check(&g, &args, "test", perturbed(1e-2));
}

#[test]
fn graph_tolerance_is_that_of_the_least_precise_float_node() {
    let mut g = Graph::new("mixed");
    let x = g.input("x", Shape::new(&[2], DType::F64));
    let h = op(&mut g, Op::Cast { to: DType::BF16 }, vec![x]);
    let i = op(&mut g, Op::Cast { to: DType::I32 }, vec![h]);
    g.set_outputs(vec![i]);
    assert_eq!(graph_tolerance(&g), tolerance(DType::BF16));
    assert_eq!(tolerance(DType::I32), 0.0);
}

#[test]
fn argmax_cases_cover_both_ops_every_shape_and_hold_ties_and_specials() {
    let cases = argmax_cases(&[DType::F32, DType::I32], 5);
    assert_eq!(cases.len(), 2 * 5 * 2);
    for c in &cases {
        c.graph.verify().unwrap();
        let v = c.x.to_f64_vec();
        let count = |x: f64| v.iter().filter(|&&y| y.to_bits() == x.to_bits()).count();
        // Ties: with more elements than the pool's 7 values, some value repeats.
        if v.len() > 7 {
            assert!(v.iter().any(|&x| count(x) > 1), "{}", c.graph.name);
        }
        if c.x.dtype.is_float() && v.len() > 100 {
            assert!(v.iter().any(|x| x.is_nan()), "{}", c.graph.name);
            assert!(count(-0.0) > 0 && count(f64::NEG_INFINITY) > 0);
        }
    }
    let argmin = cases
        .iter()
        .filter(|c| c.graph.name.starts_with("argmin"))
        .count();
    assert_eq!(argmin, cases.len() / 2);
}

#[test]
fn scaled_tie_case_rows_known_by_hand_are_the_oracles() {
    let c = ScaledTieCase::new();
    assert_eq!(
        c.m,
        18 * 18 * 18,
        "one row per ordered choice of three terms"
    );
    let mut g = Graph::new("ties");
    let dims = [
        vec![c.m, c.k],
        vec![c.n, c.k],
        vec![c.m, c.k / 2],
        vec![c.n, c.k / 2],
    ];
    let mut ins: Vec<_> = ["a", "b", "sa", "sb"]
        .iter()
        .zip(&dims)
        .map(|(name, d)| g.input(*name, Shape::new(d, DType::U8)))
        .collect();
    ins.push(g.input("bias", Shape::new(&[c.n], DType::F32)));
    let mm = Op::ScaledMatMul {
        lhs_format: c.format,
        rhs_format: c.format,
        scale_layout: c.layout,
        has_bias: true,
    };
    let y = op(&mut g, mm, ins);
    g.set_outputs(vec![y]);
    let want = oracle(&g, &c.args()).unwrap()[0].to_f32_vec();
    for (row, value) in c.known_rows() {
        assert_eq!(want[row], value, "row {row}");
    }
    // The first row is 1 + 1 + 1 + 1 (every term 2^0, positive).
    assert_eq!(want[c.row([(0, false); 3])], 4.0);
}
