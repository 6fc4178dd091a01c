//! Both modes at the kinks: for every piecewise op, the reverse-mode gradient
//! (`vjp_graph`, cotangent 1) and the forward-mode tangent (`jvp_graph`, tangent 1
//! and a random tangent) are evaluated by the oracle interpreter exactly at each
//! non-differentiable point and just beside it, and must
//! (a) agree exactly: `jvp(v) == grad · v` per element (the Jacobians here are
//!     diagonal, or the sum is over exactly representable terms), and
//! (b) equal the convention documented in `rlx_compile::kinks`.
//!
//! The graphs are f64, so the products in (a) are computed in the same precision
//! the graphs use; exact equality only holds when both modes build the same
//! derivative expression, which is what `rlx_compile::kinks` guarantees.

use rlx_compile::autodiff::vjp_graph;
use rlx_compile::jvp::{jvp_graph, tangent_name};
use rlx_ir::interp;
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};

/// Just beside a kink: far enough that every op is on the neighbouring branch.
const D: f64 = 1e-3;

/// Deterministic tangents in `[-1, 1)` (a 64-bit LCG), never exactly 0.
fn tangents(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            let t = 2.0 * u - 1.0;
            if t == 0.0 { 0.5 } else { t }
        })
        .collect()
}

/// Exact equality, with `0 == -0` (a zero derivative's sign carries nothing).
fn same(a: f64, b: f64) -> bool {
    a == b
}

fn input(g: &mut Graph, name: &str, n: usize) -> NodeId {
    g.add_node(
        Op::Input { name: name.into() },
        vec![],
        Shape::new(&[n], DType::F64),
    )
}

fn op(g: &mut Graph, op: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(op.clone(), inputs)
        .unwrap_or_else(|e| panic!("building {}: {e}", op.name()))
}

fn run(g: &Graph, feeds: Vec<(String, Vec<f64>)>) -> Vec<Vec<f64>> {
    let refs: Vec<(&str, TensorData)> = feeds
        .iter()
        .map(|(n, v)| (n.as_str(), TensorData::from_f64(&[v.len()], v)))
        .collect();
    interp::run(g, &refs)
        .unwrap_or_else(|e| panic!("running `{}`: {e}", g.name))
        .iter()
        .map(|d| d.to_f64_vec())
        .collect()
}

/// Both modes for `f(x₀, x₁, …)` (inputs named `x0`, `x1`, … of equal length `n`):
/// the gradients for cotangent `ct` (one per input) and the tangent of the output for
/// the tangents `ts` (one per input).
struct Modes {
    g: Graph,
    ids: Vec<NodeId>,
}

impl Modes {
    fn new(arity: usize, n: usize, build: impl Fn(&mut Graph, &[NodeId]) -> NodeId) -> Modes {
        let mut g = Graph::new("kink");
        let ids: Vec<NodeId> = (0..arity)
            .map(|i| input(&mut g, &format!("x{i}"), n))
            .collect();
        let y = build(&mut g, &ids);
        g.set_outputs(vec![y]);
        Modes { g, ids }
    }

    fn feeds(&self, xs: &[Vec<f64>]) -> Vec<(String, Vec<f64>)> {
        xs.iter()
            .enumerate()
            .map(|(i, x)| (format!("x{i}"), x.clone()))
            .collect()
    }

    /// `∂⟨ct, f⟩/∂xᵢ` for every input.
    fn grad(&self, xs: &[Vec<f64>], ct: Vec<f64>) -> Vec<Vec<f64>> {
        let vg = vjp_graph(&self.g, &self.ids).expect("vjp_graph");
        let mut feeds = self.feeds(xs);
        feeds.push(("d_output".into(), ct));
        run(&vg, feeds)
    }

    /// The tangent of f for input tangents `ts`.
    fn jvp(&self, xs: &[Vec<f64>], ts: &[Vec<f64>]) -> Vec<f64> {
        let jg = jvp_graph(&self.g, &self.ids).expect("jvp_graph");
        let mut feeds = self.feeds(xs);
        for (i, t) in ts.iter().enumerate() {
            feeds.push((tangent_name(&format!("x{i}")), t.clone()));
        }
        run(&jg, feeds).swap_remove(1)
    }

    /// The tangent of f when only input `k` has a tangent, `t`.
    fn jvp_of(&self, k: usize, xs: &[Vec<f64>], t: Vec<f64>) -> Vec<f64> {
        let jg = jvp_graph(&self.g, &self.ids[k..k + 1]).expect("jvp_graph");
        let mut feeds = self.feeds(xs);
        feeds.push((tangent_name(&format!("x{k}")), t));
        run(&jg, feeds).swap_remove(1)
    }
}

/// Checks an element-wise function of one input at the points `xs`: both modes
/// must agree exactly and give `want[i]` at `xs[i]` (within `tol`, 0 = exact).
#[track_caller]
fn unary(name: &str, xs: &[f64], want: &[f64], tol: f64, f: impl Fn(&mut Graph, NodeId) -> NodeId) {
    let n = xs.len();
    let m = Modes::new(1, n, |g, ids| f(g, ids[0]));
    let x = vec![xs.to_vec()];
    let grad = m.grad(&x, vec![1.0; n]).swap_remove(0);
    let j1 = m.jvp(&x, &[vec![1.0; n]]);
    let v = tangents(n, n as u64 + name.len() as u64);
    let jv = m.jvp(&x, std::slice::from_ref(&v));
    for i in 0..n {
        let at = format!("{name} at x = {}", xs[i]);
        assert!(
            same(j1[i], grad[i]),
            "{at}: jvp with tangent 1 gives {}, the gradient {}",
            j1[i],
            grad[i]
        );
        assert!(
            same(jv[i], grad[i] * v[i]),
            "{at}: jvp·v = {} but grad·v = {} (v = {})",
            jv[i],
            grad[i] * v[i],
            v[i]
        );
        let ok = if tol == 0.0 {
            grad[i] == want[i]
        } else {
            (grad[i] - want[i]).abs() <= tol * want[i].abs().max(1.0)
        };
        assert!(
            ok,
            "{at}: derivative {} but the convention says {}",
            grad[i], want[i]
        );
    }
}

fn act(g: &mut Graph, a: Activation, x: NodeId) -> NodeId {
    op(g, Op::Activation(a), vec![x])
}

#[test]
fn relu_has_slope_zero_at_zero_in_both_modes() {
    let xs = [0.0, -0.0, D, -D];
    unary("relu", &xs, &[0.0, 0.0, 1.0, 0.0], 0.0, |g, x| {
        act(g, Activation::Relu, x)
    });
}

#[test]
fn elu_has_slope_one_at_zero_in_both_modes() {
    let xs = [0.0, D, -D];
    unary("elu", &xs, &[1.0, 1.0, (-D).exp()], 1e-15, |g, x| {
        act(g, Activation::Elu, x)
    });
}

#[test]
fn abs_has_slope_zero_at_zero_in_both_modes() {
    let xs = [0.0, -0.0, D, -D];
    unary("abs", &xs, &[0.0, 0.0, 1.0, -1.0], 0.0, |g, x| {
        act(g, Activation::Abs, x)
    });
}

#[test]
fn hard_sigmoid_has_slope_zero_at_plus_minus_three_in_both_modes() {
    let s = 1.0 / 6.0;
    let xs = [-3.0, 3.0, -3.0 - D, -3.0 + D, 3.0 - D, 3.0 + D, 0.0];
    let want = [0.0, 0.0, 0.0, s, s, 0.0, s];
    unary("hard_sigmoid", &xs, &want, 0.0, |g, x| {
        act(g, Activation::HardSigmoid, x)
    });
}

#[test]
fn hard_swish_takes_the_middle_branch_at_plus_minus_three_in_both_modes() {
    let mid = |x: f64| x / 3.0 + 0.5;
    let xs = [-3.0, 3.0, -3.0 - D, -3.0 + D, 3.0 - D, 3.0 + D, 0.0];
    let want = [-0.5, 1.5, 0.0, mid(-3.0 + D), mid(3.0 - D), 1.0, 0.5];
    unary("hard_swish", &xs, &want, 1e-15, |g, x| {
        act(g, Activation::HardSwish, x)
    });
}

#[test]
fn softsign_is_smooth_at_zero_in_both_modes() {
    let xs = [0.0, D, -D];
    let want = [1.0, 1.0 / (1.0 + D).powi(2), 1.0 / (1.0 + D).powi(2)];
    unary("softsign", &xs, &want, 1e-15, |g, x| {
        act(g, Activation::Softsign, x)
    });
}

#[test]
fn round_is_straight_through_at_its_jumps_in_both_modes() {
    let xs = [0.5, 1.5, -2.5, 0.5 + D, 0.5 - D];
    unary("round", &xs, &[1.0; 5], 0.0, |g, x| {
        act(g, Activation::Round, x)
    });
}

/// `floor`, `ceil` and `sign` have derivative 0; reverse mode refuses a path that
/// only runs through them, so they are checked inside `op(x) + x` (derivative 1).
#[test]
fn floor_ceil_sign_have_derivative_zero_at_their_jumps_in_both_modes() {
    for a in [Activation::Floor, Activation::Ceil, Activation::Sign] {
        let xs = [0.0, 1.0, -1.0, 1.0 + D, 1.0 - D, D, -D];
        unary(a.name(), &xs, &[1.0; 7], 0.0, |g, x| {
            let y = act(g, a, x);
            op(g, Op::Binary(BinaryOp::Add), vec![y, x])
        });
    }
}

/// Checks `f(l, r)` element-wise: both modes agree exactly and give
/// `(∂f/∂l, ∂f/∂r) = want[i]` at `(ls[i], rs[i])`.
#[track_caller]
fn binary(name: &str, ls: &[f64], rs: &[f64], want: &[(f64, f64)], b: BinaryOp) {
    let n = ls.len();
    let m = Modes::new(2, n, |g, ids| op(g, Op::Binary(b), vec![ids[0], ids[1]]));
    let x = vec![ls.to_vec(), rs.to_vec()];
    let grads = m.grad(&x, vec![1.0; n]);
    let (vl, vr) = (tangents(n, 11), tangents(n, 12));
    let jv = m.jvp(&x, &[vl.clone(), vr.clone()]);
    let j_l = m.jvp(&x, &[vec![1.0; n], vec![0.0; n]]);
    let j_r = m.jvp(&x, &[vec![0.0; n], vec![1.0; n]]);
    for i in 0..n {
        let at = format!("{name} at (l, r) = ({}, {})", ls[i], rs[i]);
        let (gl, gr) = (grads[0][i], grads[1][i]);
        assert!(same(j_l[i], gl), "{at}: ∂/∂l: jvp {} vs grad {gl}", j_l[i]);
        assert!(same(j_r[i], gr), "{at}: ∂/∂r: jvp {} vs grad {gr}", j_r[i]);
        let dot = gl * vl[i] + gr * vr[i];
        assert!(
            same(jv[i], dot),
            "{at}: jvp·v = {} but ⟨grad, v⟩ = {dot}",
            jv[i]
        );
        assert_eq!(
            (gl, gr),
            want[i],
            "{at}: derivative ({gl}, {gr}) but the convention says {:?}",
            want[i]
        );
    }
}

#[test]
fn maximum_and_minimum_split_ties_evenly_in_both_modes() {
    let ls = [1.0, 1.0, 1.0, -2.0];
    let rs = [1.0, 1.0 + D, 1.0 - D, -2.0];
    let max = [(0.5, 0.5), (0.0, 1.0), (1.0, 0.0), (0.5, 0.5)];
    let min = [(0.5, 0.5), (1.0, 0.0), (0.0, 1.0), (0.5, 0.5)];
    binary("maximum", &ls, &rs, &max, BinaryOp::Max);
    binary("minimum", &ls, &rs, &min, BinaryOp::Min);
}

#[test]
fn pow_is_zero_not_nan_at_a_zero_base_or_exponent_in_both_modes() {
    // (0, 2): ∂l = 2·0¹ = 0, ∂r = 0 by convention (0²·ln 0 would be NaN);
    // (0, 0): ∂l = 0 by convention (0·0⁻¹ would be NaN), ∂r = 0;
    // (2, 0): ∂l = 0, ∂r = 2⁰·ln 2; (2, 3): ∂l = 12, ∂r = 8 ln 2.
    let ls = [0.0, 0.0, 2.0, 2.0];
    let rs = [2.0, 0.0, 0.0, 3.0];
    let ln2 = 2f64.ln();
    let want = [(0.0, 0.0), (0.0, 0.0), (0.0, ln2), (12.0, 8.0 * ln2)];
    binary("pow", &ls, &rs, &want, BinaryOp::Pow);
}

#[test]
fn fmod_gets_the_integer_quotient_at_and_beside_its_jumps_in_both_modes() {
    // fmod(l, r) = l − trunc(l/r)·r: ∂l = 1, ∂r = −trunc(l/r). At l = 6, r = 2 the op
    // jumps; 0.7/0.1 is 6.999… in f64, so fmod(0.7, 0.1) ≈ 0.1 and trunc = 6, which
    // (l − y)/r only reaches up to a rounding error.
    let ls = [6.0, 6.0 + D, 6.0 - D, 0.7, -6.0];
    let rs = [2.0, 2.0, 2.0, 0.1, 2.0];
    let want = [
        (1.0, -3.0),
        (1.0, -3.0),
        (1.0, -2.0),
        (1.0, -6.0),
        (1.0, 3.0),
    ];
    binary("fmod", &ls, &rs, &want, BinaryOp::Mod);
}

/// `clamp(x, lo, hi) = min(max(x, lo), hi)`: at a bound the derivative is ½ (a tie).
#[test]
fn clamp_passes_half_at_its_bounds_in_both_modes() {
    let xs = [-1.0, 1.0, -1.0 - D, -1.0 + D, 1.0 + D, 0.0];
    unary(
        "clamp",
        &xs,
        &[0.5, 0.5, 0.0, 1.0, 0.0, 1.0],
        0.0,
        |g, x| {
            let lo = g.add_node(
                Op::Constant {
                    data: TensorData::from_f64(&[], &[-1.0]).bytes,
                },
                vec![],
                Shape::scalar(DType::F64),
            );
            let hi = g.add_node(
                Op::Constant {
                    data: TensorData::from_f64(&[], &[1.0]).bytes,
                },
                vec![],
                Shape::scalar(DType::F64),
            );
            let m = op(g, Op::Binary(BinaryOp::Max), vec![x, lo]);
            op(g, Op::Binary(BinaryOp::Min), vec![m, hi])
        },
    );
}

/// `where(x > 0, 2x, 3x)`: the derivative is the slope of the branch the mask picks,
/// so 3 at x = 0.
#[test]
fn where_takes_the_branch_its_mask_picks_at_the_flip_in_both_modes() {
    let xs = [0.0, D, -D];
    unary("where", &xs, &[3.0, 2.0, 3.0], 0.0, |g, x| {
        let zero = g.add_node(
            Op::Constant {
                data: TensorData::from_f64(&[], &[0.0]).bytes,
            },
            vec![],
            Shape::scalar(DType::F64),
        );
        let (two, three) = (
            g.add_node(
                Op::Constant {
                    data: TensorData::from_f64(&[], &[2.0]).bytes,
                },
                vec![],
                Shape::scalar(DType::F64),
            ),
            g.add_node(
                Op::Constant {
                    data: TensorData::from_f64(&[], &[3.0]).bytes,
                },
                vec![],
                Shape::scalar(DType::F64),
            ),
        );
        let mask = op(g, Op::Compare(CmpOp::Gt), vec![x, zero]);
        let a = op(g, Op::Binary(BinaryOp::Mul), vec![x, two]);
        let b = op(g, Op::Binary(BinaryOp::Mul), vec![x, three]);
        op(g, Op::Where, vec![mask, a, b])
    });
}

/// The `max`/`min` reductions of `xs` (one axis to a scalar): both modes agree and
/// the gradient is `want`. Tie counts are powers of two, so `⟨grad, v⟩` is exact.
#[track_caller]
fn reduce(name: &str, kind: ReduceOp, xs: &[f64], want: &[f64]) {
    let n = xs.len();
    let m = Modes::new(1, n, |g, ids| {
        op(
            g,
            Op::Reduce {
                op: kind,
                axes: vec![0],
                keep_dim: true,
            },
            vec![ids[0]],
        )
    });
    let x = vec![xs.to_vec()];
    let grad = m.grad(&x, vec![1.0]).swap_remove(0);
    assert_eq!(grad, want, "{name} of {xs:?}: the gradient");
    let v = tangents(n, 21);
    let jv = m.jvp(&x, std::slice::from_ref(&v))[0];
    let dot: f64 = grad.iter().zip(&v).map(|(g, v)| g * v).sum();
    assert!(
        same(jv, dot),
        "{name} of {xs:?}: jvp·v = {jv} but ⟨grad, v⟩ = {dot}"
    );
}

#[test]
fn reduce_max_and_min_split_ties_evenly_in_both_modes() {
    reduce(
        "max",
        ReduceOp::Max,
        &[1.0, 3.0, 3.0, 0.0],
        &[0.0, 0.5, 0.5, 0.0],
    );
    reduce("max", ReduceOp::Max, &[2.0; 4], &[0.25; 4]);
    reduce(
        "max",
        ReduceOp::Max,
        &[1.0, 3.0, 3.0 - D, 0.0],
        &[0.0, 1.0, 0.0, 0.0],
    );
    reduce(
        "min",
        ReduceOp::Min,
        &[1.0, -3.0, 5.0, -3.0],
        &[0.0, 0.5, 0.0, 0.5],
    );
    reduce(
        "min",
        ReduceOp::Min,
        &[1.0, -3.0, 5.0, -3.0 + D],
        &[0.0, 1.0, 0.0, 0.0],
    );
}

/// Max pooling over one 2×2 window of the 4 values `xs` (reshaped to `[1, 1, 2, 2]`):
/// both modes agree and route the derivative to the first maximal tap.
#[track_caller]
fn max_pool(xs: [f64; 4], want: [f64; 4]) {
    let m = Modes::new(1, 4, |g, ids| {
        let x4 = op(
            g,
            Op::Reshape {
                new_shape: vec![1, 1, 2, 2],
            },
            vec![ids[0]],
        );
        let p = op(
            g,
            Op::Pool {
                kind: ReduceOp::Max,
                kernel_size: vec![2, 2],
                stride: vec![2, 2],
                padding: vec![0, 0],
            },
            vec![x4],
        );
        op(g, Op::Reshape { new_shape: vec![1] }, vec![p])
    });
    let x = vec![xs.to_vec()];
    let grad = m.grad(&x, vec![1.0]).swap_remove(0);
    assert_eq!(grad, want, "max pool of {xs:?}: the gradient");
    let v = tangents(4, 31);
    let jv = m.jvp(&x, std::slice::from_ref(&v))[0];
    let dot: f64 = grad.iter().zip(&v).map(|(g, v)| g * v).sum();
    assert!(
        same(jv, dot),
        "max pool of {xs:?}: jvp·v = {jv} but ⟨grad, v⟩ = {dot}"
    );
}

#[test]
fn max_pool_routes_ties_to_the_first_maximal_tap_in_both_modes() {
    max_pool([1.0; 4], [1.0, 0.0, 0.0, 0.0]);
    max_pool([0.0, 2.0, 2.0, 1.0], [0.0, 1.0, 0.0, 0.0]);
    max_pool([0.0, 2.0 - D, 2.0, 1.0], [0.0, 0.0, 1.0, 0.0]);
}

/// `linear(x, w = 1, b = 0)` with a fused activation at the activation's kinks:
/// the fused op's rules reuse the activation rules, so the conventions hold there too.
#[test]
fn fused_linear_activations_follow_the_same_conventions_in_both_modes() {
    let s = 1.0 / 6.0;
    let cases: [(Activation, &[f64], &[f64]); 5] = [
        (Activation::Relu, &[0.0, D, -D], &[0.0, 1.0, 0.0]),
        (Activation::Elu, &[0.0, D], &[1.0, 1.0]),
        (Activation::Abs, &[0.0, D, -D], &[0.0, 1.0, -1.0]),
        (
            Activation::HardSigmoid,
            &[-3.0, 3.0, 3.0 - D],
            &[0.0, 0.0, s],
        ),
        (
            Activation::HardSwish,
            &[-3.0, 3.0, 3.0 + D],
            &[-0.5, 1.5, 1.0],
        ),
    ];
    for (a, xs, want) in cases {
        let n = xs.len() as i64;
        unary(&format!("linear+{}", a.name()), xs, want, 0.0, |g, x| {
            let one = TensorData::from_f64(&[1, 1], &[1.0]);
            let zero = TensorData::from_f64(&[1], &[0.0]);
            let (ws, bs) = (one.shape(), zero.shape());
            let w = g.add_node(Op::Constant { data: one.bytes }, vec![], ws);
            let b = g.add_node(Op::Constant { data: zero.bytes }, vec![], bs);
            let x2 = op(
                g,
                Op::Reshape {
                    new_shape: vec![n, 1],
                },
                vec![x],
            );
            let y = op(
                g,
                Op::FusedMatMulBiasAct {
                    activation: Some(a),
                },
                vec![x2, w, b],
            );
            op(g, Op::Reshape { new_shape: vec![n] }, vec![y])
        });
    }
}

/// Both modes of one element-wise function agree at every point: the forward tangent
/// for tangent 1 equals the gradient exactly (both apply the same partial from
/// `rlx_compile`'s shared element-wise rules to a seed of ones), and `jvp·v` equals
/// `⟨grad, v⟩` up to the rounding of a division (`v/d` against `(1/d)·v`; exact when
/// the partial is a product). NaN on both sides agrees (a derivative outside the
/// op's domain).
#[track_caller]
fn modes_agree(name: &str, xs: &[Vec<f64>], build: impl Fn(&mut Graph, &[NodeId]) -> NodeId) {
    let (arity, n) = (xs.len(), xs[0].len());
    let m = Modes::new(arity, n, build);
    let grads = m.grad(xs, vec![1.0; n]);
    // Tangents exactly representable in f32, so a round trip through f32 keeps them.
    let vs: Vec<Vec<f64>> = (0..arity)
        .map(|k| {
            tangents(n, 31 + k as u64)
                .iter()
                .map(|&t| t as f32 as f64)
                .collect()
        })
        .collect();
    let jv = m.jvp(xs, &vs);
    // A few roundings of each term: relative to the terms' size, not the sum's, which
    // may cancel.
    let agree = |a: f64, b: f64, size: f64| {
        (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-15 * size
    };
    for (k, grad) in grads.iter().enumerate() {
        // Only x_k gets a tangent: a zero tangent on another operand would add
        // `0·∂/∂x_j`, NaN where that partial is infinite (x/0).
        let j1 = m.jvp_of(k, xs, vec![1.0; n]);
        for i in 0..n {
            let g = grad[i];
            assert!(
                (j1[i].is_nan() && g.is_nan()) || same(j1[i], g),
                "{name} at {:?}: ∂/∂x{k}: jvp {} vs grad {g}",
                xs.iter().map(|x| x[i]).collect::<Vec<_>>(),
                j1[i]
            );
        }
    }
    for i in 0..n {
        let dot: f64 = (0..arity).map(|k| grads[k][i] * vs[k][i]).sum();
        let size: f64 = (0..arity).map(|k| (grads[k][i] * vs[k][i]).abs()).sum();
        assert!(
            agree(jv[i], dot, size),
            "{name} at {:?}: jvp·v = {} but ⟨grad, v⟩ = {dot}",
            xs.iter().map(|x| x[i]).collect::<Vec<_>>(),
            jv[i]
        );
    }
}

/// The kinks of `rlx_compile::kinks`' table (0, ±3, the jumps of round, floor and
/// ceil), values beside them, and random points in (−4, 4).
fn kink_points() -> Vec<f64> {
    let mut xs = vec![
        0.0,
        -0.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        1.5,
        1.0,
        -1.0,
        2.0,
        -2.0,
        D,
        -D,
        3.0 + D,
        -3.0 - D,
    ];
    xs.extend(tangents(12, 77).iter().map(|t| 4.0 * t));
    xs
}

#[test]
fn every_activation_agrees_between_modes_at_its_kinks_and_at_random_points() {
    let xs = kink_points();
    for a in Activation::ALL {
        modes_agree(a.name(), std::slice::from_ref(&xs), |g, ids| {
            act(g, a, ids[0])
        });
    }
}

#[test]
fn every_float_binary_op_agrees_between_modes_at_its_kinks_and_at_random_points() {
    // Every pair of the kink points: ties (max/min), zero bases and exponents (pow),
    // integer quotients (fmod), zero divisors — plus x·x with one operand twice.
    let pts = [0.0, 1.0, -1.0, 2.0, 3.0, -3.0, 0.5, 6.0, 0.7, 0.1];
    let (mut ls, mut rs) = (Vec::new(), Vec::new());
    for &l in &pts {
        for &r in &pts {
            ls.push(l);
            rs.push(r);
        }
    }
    let rand = tangents(24, 5);
    ls.extend(rand[..12].iter().map(|t| 4.0 * t));
    rs.extend(rand[12..].iter().map(|t| 4.0 * t));
    let xs = [ls, rs];
    for b in BinaryOp::FLOAT_ARITHMETIC {
        modes_agree(b.name(), &xs, |g, ids| {
            op(g, Op::Binary(b), vec![ids[0], ids[1]])
        });
    }
    modes_agree("x·x", &xs[..1], |g, ids| {
        op(g, Op::Binary(BinaryOp::Mul), vec![ids[0], ids[0]])
    });
}

#[test]
fn where_cast_and_rounding_agree_between_modes_at_their_kinks_and_at_random_points() {
    let xs = kink_points();
    let rs: Vec<f64> = xs.iter().rev().copied().collect();
    modes_agree("where(x0 > x1, x0, x1)", &[xs.clone(), rs], |g, ids| {
        let m = op(g, Op::Compare(CmpOp::Gt), vec![ids[0], ids[1]]);
        op(g, Op::Where, vec![m, ids[0], ids[1]])
    });
    modes_agree(
        "cast to f32 and back",
        std::slice::from_ref(&xs),
        |g, ids| {
            let narrow = op(g, Op::Cast { to: DType::F32 }, vec![ids[0]]);
            op(g, Op::Cast { to: DType::F64 }, vec![narrow])
        },
    );
    modes_agree("round_to_format (e4m3)", &[xs], |g, ids| {
        let r = op(
            g,
            Op::RoundToFormat {
                exp_bits: 4,
                man_bits: 3,
                max_normal: 448.0,
            },
            vec![ids[0]],
        );
        op(g, Op::Activation(Activation::Sin), vec![r])
    });
}
