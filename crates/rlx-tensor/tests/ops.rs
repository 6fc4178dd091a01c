//! Element-wise methods and operators: values against hand-computed results,
//! and the exact IR each one appends.
#![cfg(feature = "eval")]

use rlx_ir::op::{BinaryOp, CmpOp};
use rlx_ir::{Node, Op, TensorData};
use rlx_tensor::{Activation, DType, Tensor};

fn assert_close(got: &[f32], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "length: got {got:?}, want {want:?}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g as f64 == w
        } else {
            (g as f64 - w).abs() <= tol * (1.0 + w.abs())
        };
        assert!(
            ok,
            "element {i}: got {g}, want {w} (got {got:?}, want {want:?})"
        );
    }
}

/// The nodes of `t`'s graph.
fn nodes(t: &Tensor) -> Vec<Node> {
    t.to_graph().nodes().to_vec()
}

/// The node `t` refers to.
fn node(t: &Tensor) -> Node {
    t.to_graph().node(t.id()).clone()
}

fn count(t: &Tensor, pred: impl Fn(&Op) -> bool) -> usize {
    nodes(t).iter().filter(|n| pred(&n.op)).count()
}

/// The value of a constant node.
fn constant_value(n: &Node) -> TensorData {
    let Op::Constant { data } = &n.op else {
        panic!("node {} is {:?}, not a constant", n.id, n.op)
    };
    TensorData::new(
        n.shape.dtype(),
        &n.shape.static_dims().unwrap(),
        data.clone(),
    )
    .unwrap()
}

const XS: [f64; 5] = [-2.0, -0.5, 0.0, 0.5, 2.0];

fn xs() -> Tensor {
    Tensor::from_vec(XS.map(|v| v as f32).to_vec(), [5])
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn softplus(x: f64) -> f64 {
    (1.0 + x.exp()).ln()
}

type Method = fn(&Tensor) -> Tensor;

/// A unary op, the `Tensor` method that records it, and its f64 reference formula.
type UnaryCase = (Activation, Method, fn(f64) -> f64);

/// Every unary method with its f64 reference formula.
fn unary_cases() -> Vec<UnaryCase> {
    vec![
        (Activation::Relu, |t| t.relu(), |x| x.max(0.0)),
        (Activation::Silu, |t| t.silu(), |x| x * sigmoid(x)),
        (Activation::Tanh, |t| t.tanh(), f64::tanh),
        (Activation::Exp, |t| t.exp(), f64::exp),
        (Activation::Sigmoid, |t| t.sigmoid(), sigmoid),
        (Activation::Abs, |t| t.abs(), f64::abs),
        (Activation::Sin, |t| t.sin(), f64::sin),
        (Activation::Cos, |t| t.cos(), f64::cos),
        (Activation::Tan, |t| t.tan(), f64::tan),
        (Activation::Atan, |t| t.atan(), f64::atan),
        (Activation::Floor, |t| t.floor(), f64::floor),
        (Activation::Ceil, |t| t.ceil(), f64::ceil),
        (
            Activation::Sign,
            |t| t.sign(),
            |x| {
                if x == 0.0 { 0.0 } else { x.signum() }
            },
        ),
        (Activation::Softplus, |t| t.softplus(), softplus),
        (
            Activation::Elu,
            |t| t.elu(),
            |x| {
                if x > 0.0 { x } else { x.exp() - 1.0 }
            },
        ),
        (
            Activation::HardSwish,
            |t| t.hard_swish(),
            |x| x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
        ),
        (
            Activation::HardSigmoid,
            |t| t.hard_sigmoid(),
            |x| (x + 3.0).clamp(0.0, 6.0) / 6.0,
        ),
        (Activation::Mish, |t| t.mish(), |x| x * softplus(x).tanh()),
        (
            Activation::Softsign,
            |t| t.softsign(),
            |x| x / (1.0 + x.abs()),
        ),
        (
            Activation::LogSigmoid,
            |t| t.log_sigmoid(),
            |x| sigmoid(x).ln(),
        ),
        (
            Activation::GeluApprox,
            |t| t.gelu_approx(),
            |x| {
                0.5 * x
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
            },
        ),
    ]
}

#[test]
fn every_unary_method_matches_its_formula_and_emits_one_activation() {
    for (act, method, reference) in unary_cases() {
        let x = xs();
        let y = method(&x);
        assert_eq!(node(&y).op, Op::Activation(act), "{act:?}");
        assert_eq!(nodes(&y).len(), 2, "{act:?}: constant + one activation");
        assert_eq!((y.dims(), y.dtype()), (vec![5], DType::F32));
        let want: Vec<f64> = XS.iter().map(|&v| reference(v)).collect();
        let got = y.to_vec();
        println!("{act:?}: {got:?}");
        assert_close(&got, &want, 1e-5);
    }
}

#[test]
fn positive_domain_methods_match_their_formulas() {
    let v = [0.25f64, 1.0, 4.0];
    let x = Tensor::from_vec(v.map(|a| a as f32).to_vec(), [3]);
    let cases: Vec<UnaryCase> = vec![
        (Activation::Sqrt, |t| t.sqrt(), f64::sqrt),
        (Activation::Log, |t| t.log(), f64::ln),
        (Activation::Rsqrt, |t| t.rsqrt(), |a| 1.0 / a.sqrt()),
        (Activation::Recip, |t| t.recip(), |a| 1.0 / a),
    ];
    for (act, method, reference) in cases {
        let y = method(&x);
        assert_eq!(node(&y).op, Op::Activation(act));
        let want: Vec<f64> = v.iter().map(|&a| reference(a)).collect();
        assert_close(&y.to_vec(), &want, 1e-6);
    }
}

#[test]
fn gelu_and_erf_match_tabulated_values() {
    // erf(0.5) = 0.5204998778, erf(2) = 0.9953222650; erf is odd.
    let e = xs().erf();
    assert_eq!(node(&e).op, Op::Activation(Activation::Erf));
    assert_close(
        &e.to_vec(),
        &[
            -0.9953222650,
            -0.5204998778,
            0.0,
            0.5204998778,
            0.9953222650,
        ],
        1e-6,
    );
    // gelu(x) = x/2 (1 + erf(x/√2)); erf(√2) = 0.9544997361, erf(0.5/√2) = 0.3829249225.
    let g = xs().gelu();
    assert_eq!(node(&g).op, Op::Activation(Activation::Gelu));
    assert_close(
        &g.to_vec(),
        &[
            -0.0455002639,
            -0.1542687694,
            0.0,
            0.3457312306,
            1.9544997361,
        ],
        1e-6,
    );
}

#[test]
fn round_is_half_to_even() {
    let x = Tensor::from_vec(vec![0.5, 1.5, 2.5, -0.5, -1.5, 1.2], [6]);
    assert_eq!(x.round().to_vec(), vec![0.0, 2.0, 2.0, -0.0, -2.0, 1.0]);
}

#[test]
fn integer_closed_activations_keep_integer_dtype() {
    let x = Tensor::from_i64([-3, 0, 4], [3]);
    let r = x.relu();
    assert_eq!(r.dtype(), DType::I64);
    assert_eq!(r.to_vec_i64(), vec![0, 0, 4]);
    assert_eq!(x.abs().to_vec_i64(), vec![3, 0, 4]);
    assert_eq!((-&x).to_vec_i64(), vec![3, 0, -4]);
}

#[test]
fn try_activation_rejects_exp_of_integers_naming_op_and_fix() {
    let x = Tensor::from_i64([1, 2], [2]);
    let err = x.try_activation(Activation::Exp).unwrap_err().to_string();
    assert!(err.contains("exp"), "{err}");
    assert!(err.contains("cast"), "{err}");
    assert!(x.try_activation(Activation::Abs).is_ok());
}

#[test]
#[should_panic(expected = "exp")]
fn exp_of_a_bool_tensor_panics_naming_exp() {
    let _ = Tensor::ones([2]).gt(0.0).exp();
}

// ------------------------------------------------------------------ operators

#[test]
fn all_ten_operator_forms_compute_the_same_sum() {
    let a = Tensor::from_vec(vec![1.0, 2.0], [2]);
    let b = Tensor::from_vec(vec![10.0, 20.0], [2]);
    let want = vec![11.0, 22.0];
    assert_eq!((&a + &b).to_vec(), want);
    assert_eq!((&a + b.clone()).to_vec(), want);
    assert_eq!((a.clone() + &b).to_vec(), want);
    assert_eq!((a.clone() + b.clone()).to_vec(), want);
    assert_eq!((&a + 1.0f64).to_vec(), vec![2.0, 3.0]);
    assert_eq!((&a + 1.0f32).to_vec(), vec![2.0, 3.0]);
    assert_eq!((&a + 1i32).to_vec(), vec![2.0, 3.0]);
    assert_eq!((a.clone() + 1.0f64).to_vec(), vec![2.0, 3.0]);
    assert_eq!((a.clone() + 1.0f32).to_vec(), vec![2.0, 3.0]);
    assert_eq!((a.clone() + 1i32).to_vec(), vec![2.0, 3.0]);
}

#[test]
fn sub_mul_div_operators_compute_elementwise() {
    let a = Tensor::from_vec(vec![6.0, -8.0, 9.0], [3]);
    let b = Tensor::from_vec(vec![2.0, 4.0, -3.0], [3]);
    assert_eq!((&a - &b).to_vec(), vec![4.0, -12.0, 12.0]);
    assert_eq!((&a * &b).to_vec(), vec![12.0, -32.0, -27.0]);
    assert_eq!((&a / &b).to_vec(), vec![3.0, -2.0, -3.0]);
    assert_eq!((a.clone() - 1i32).to_vec(), vec![5.0, -9.0, 8.0]);
    assert_eq!((a.clone() * 0.5f32).to_vec(), vec![3.0, -4.0, 4.5]);
    assert_eq!((a / 2.0f64).to_vec(), vec![3.0, -4.0, 4.5]);
}

#[test]
fn scalar_on_the_left_is_the_left_operand() {
    let x = Tensor::from_vec(vec![1.0, 2.0, 4.0], [3]);
    assert_eq!((10.0f64 - &x).to_vec(), vec![9.0, 8.0, 6.0]);
    assert_eq!((8.0f32 / &x).to_vec(), vec![8.0, 4.0, 2.0]);
    assert_eq!((3i32 * &x).to_vec(), vec![3.0, 6.0, 12.0]);
    assert_eq!((1i32 + &x).to_vec(), vec![2.0, 3.0, 5.0]);
    // IR: Binary(scalar constant, tensor).
    let y = 10.0 - &x;
    let n = node(&y);
    assert_eq!(n.op, Op::Binary(BinaryOp::Sub));
    let g = y.to_graph();
    let lhs = g.node(n.inputs[0]);
    assert!(matches!(lhs.op, Op::Constant { .. }));
    assert_eq!(lhs.shape.rank(), 0);
    assert_eq!(n.inputs[1], x_id_in(&y, &x));
}

/// The id of `x`'s node in `y`'s graph (they share one).
fn x_id_in(y: &Tensor, x: &Tensor) -> rlx_ir::NodeId {
    assert!(y.shares_graph(x));
    x.id()
}

#[test]
fn scalar_operand_is_exactly_one_rank0_constant() {
    let x = Tensor::from_vec(vec![1.0, 2.0], [2]);
    let y = &x * 3.0;
    let consts: Vec<Node> = nodes(&y)
        .into_iter()
        .filter(|n| matches!(n.op, Op::Constant { .. }))
        .collect();
    assert_eq!(consts.len(), 2, "x plus one scalar");
    let scalar = &consts[1];
    assert_eq!(scalar.shape.rank(), 0);
    assert_eq!(scalar.shape.dtype(), DType::F32);
    assert_eq!(constant_value(scalar).to_f64_vec(), vec![3.0]);
    assert_eq!(nodes(&y).len(), 3);
    assert_eq!(node(&y).op, Op::Binary(BinaryOp::Mul));
}

#[test]
fn scalar_takes_integer_tensor_dtype_and_f32_otherwise() {
    // Against an integer tensor the scalar takes the tensor's dtype.
    let i = Tensor::from_f64_as([1.0, 2.0, 3.0], [3], DType::I32);
    let y = &i + 2;
    let g = y.to_graph();
    let c = g.node(node(&y).inputs[1]);
    assert_eq!(c.shape.dtype(), DType::I32);
    assert_eq!(y.dtype(), DType::I32);
    assert_eq!(y.to_vec_i64(), vec![3, 4, 5]);
    assert_eq!(i.maximum(2.0).to_vec_i64(), vec![2, 2, 3]);
    // Against f64 the scalar is F32; the result keeps the tensor's dtype (LHS).
    let d = Tensor::from_f64([0.1, 0.2], [2]);
    let z: Tensor = &d * 2.0;
    let g = z.to_graph();
    assert_eq!(g.node(node(&z).inputs[1]).shape.dtype(), DType::F32);
    assert_eq!(z.dtype(), DType::F64);
    assert_eq!(z.to_vec_f64(), vec![0.2, 0.4]);
}

#[test]
fn huge_integer_scalar_is_exact_on_i64_tensors() {
    let x = Tensor::from_i64([1], [1]);
    assert_eq!(
        x.maximum((1i64 << 60) + 1).to_vec_i64(),
        vec![(1i64 << 60) + 1]
    );
}

#[test]
#[should_panic(expected = "does not fit the i32")]
fn integer_scalar_outside_the_tensors_integer_dtype_panics() {
    let x = Tensor::from_i64([1], [1]).cast(rlx_tensor::DType::I32);
    let _ = x.maximum(1i64 << 40);
}

#[test]
fn neg_is_one_neg_activation() {
    let x = Tensor::from_vec(vec![1.0, -2.0], [2]);
    let y = -&x;
    assert_eq!(node(&y).op, Op::Activation(Activation::Neg));
    assert_eq!(nodes(&y).len(), 2);
    assert_eq!(y.to_vec(), vec![-1.0, 2.0]);
    assert_eq!((-x).to_vec(), vec![-1.0, 2.0]);
}

#[test]
fn operators_broadcast_size_one_axes() {
    let col = Tensor::from_vec(vec![1.0, 2.0], [2, 1]);
    let row = Tensor::from_vec(vec![10.0, 20.0, 30.0], [1, 3]);
    let s = &col + &row;
    assert_eq!(s.dims(), vec![2, 3]);
    assert_eq!(s.to_vec(), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
    // Lower rank on the right aligns trailing axes.
    let m = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
    let v = Tensor::from_vec(vec![1.0, 0.0, -1.0], [3]);
    assert_eq!((&m * &v).to_vec(), vec![1.0, 0.0, -3.0, 4.0, 0.0, -6.0]);
    // And on the left.
    let p = &v - &m;
    assert_eq!(p.dims(), vec![2, 3]);
    assert_eq!(p.to_vec(), vec![0.0, -2.0, -4.0, -3.0, -5.0, -7.0]);
}

#[test]
fn tensors_from_different_graphs_combine_into_the_left_graph() {
    let a = Tensor::from_vec(vec![1.0, 2.0], [2]);
    let b = Tensor::from_vec(vec![3.0, 4.0], [2]);
    assert!(!a.shares_graph(&b));
    let c = &a * &b;
    assert!(c.shares_graph(&a));
    assert_eq!(c.to_vec(), vec![3.0, 8.0]);
}

#[test]
fn try_add_reports_op_shapes_and_fix() {
    let a = Tensor::ones([2, 3]);
    let b = Tensor::ones([4]);
    let err = a.try_add(&b).unwrap_err().to_string();
    assert!(err.starts_with("add:"), "{err}");
    assert!(err.contains("[2, 3]") && err.contains("[4]"), "{err}");
    assert!(err.contains("broadcast_to"), "{err}");
    assert!(a.try_sub(&b).unwrap_err().to_string().starts_with("sub:"));
    assert!(a.try_mul(&b).unwrap_err().to_string().starts_with("mul:"));
    assert!(a.try_div(&b).unwrap_err().to_string().starts_with("div:"));
    assert_eq!(a.try_add(1.0).unwrap().to_vec(), vec![2.0; 6]);
    assert_eq!(
        a.try_div(&Tensor::full([3], 2.0)).unwrap().to_vec(),
        vec![0.5; 6]
    );
}

#[test]
#[should_panic(expected = "cannot broadcast [2, 3]")]
fn add_operator_panics_with_the_shape_message() {
    let _ = &Tensor::ones([2, 3]) + &Tensor::ones([2]);
}

#[test]
fn try_twins_of_binary_methods_report_errors() {
    let a = Tensor::ones([2]);
    let b = Tensor::ones([3]);
    for (name, r) in [
        ("maximum", a.try_maximum(&b)),
        ("minimum", a.try_minimum(&b)),
        ("atan2", a.try_atan2(&b)),
        ("rem", a.try_rem(&b)),
        ("pow", a.try_pow(&b)),
        ("lt", a.try_lt(&b)),
        ("eq", a.try_eq(&b)),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.starts_with(&format!("{name}:")), "{e}");
        assert!(e.contains("[2]") && e.contains("[3]"), "{e}");
    }
    assert!(a.try_ge(&a).is_ok());
}

// ------------------------------------------------------------ binary methods

#[test]
fn maximum_minimum_with_tensors_scalars_and_nan() {
    let x = Tensor::from_vec(vec![-1.0, 2.0, f32::NAN], [3]);
    let y = Tensor::from_vec(vec![0.0, 3.0, 1.0], [3]);
    assert_close(&x.maximum(&y).to_vec(), &[0.0, 3.0, f64::NAN], 0.0);
    assert_close(&x.minimum(&y).to_vec(), &[-1.0, 2.0, f64::NAN], 0.0);
    assert_close(&x.maximum(0).to_vec(), &[0.0, 2.0, f64::NAN], 0.0);
    assert_close(&x.minimum(0.5f32).to_vec(), &[-1.0, 0.5, f64::NAN], 0.0);
    assert_eq!(node(&x.maximum(&y)).op, Op::Binary(BinaryOp::Max));
    assert_eq!(node(&x.minimum(&y)).op, Op::Binary(BinaryOp::Min));
}

#[test]
fn atan2_rem_pow_match_libm() {
    let y = Tensor::from_vec(vec![1.0, -1.0, 1.0], [3]);
    let x = Tensor::from_vec(vec![1.0, -1.0, -1.0], [3]);
    let pi = std::f64::consts::PI;
    assert_close(
        &y.atan2(&x).to_vec(),
        &[pi / 4.0, -3.0 * pi / 4.0, 3.0 * pi / 4.0],
        1e-6,
    );
    assert_eq!(node(&y.atan2(&x)).op, Op::Binary(BinaryOp::Atan2));

    // C fmod: the sign follows the dividend.
    let a = Tensor::from_vec(vec![5.5, -5.5, 7.0], [3]);
    let r = a.rem(2.0);
    assert_eq!(node(&r).op, Op::Binary(BinaryOp::Mod));
    assert_eq!(r.to_vec(), vec![1.5, -1.5, 1.0]);

    let b = Tensor::from_vec(vec![2.0, 9.0, 4.0], [3]);
    let e = Tensor::from_vec(vec![3.0, 0.5, -1.0], [3]);
    assert_eq!(b.pow(&e).to_vec(), vec![8.0, 3.0, 0.25]);
    assert_eq!(node(&b.pow(&e)).op, Op::Binary(BinaryOp::Pow));
    let p = b.pow_scalar(2.0);
    assert_eq!(node(&p).op, Op::Binary(BinaryOp::Pow));
    assert_eq!(p.to_vec(), vec![4.0, 81.0, 16.0]);
    assert_eq!(b.pow(0.5).to_vec(), vec![2f32.sqrt(), 3.0, 2.0]);
}

#[test]
fn clamp_emits_exactly_one_max_then_one_min() {
    let x = Tensor::from_vec(vec![-3.0, -0.5, 0.5, 3.0, f32::NAN], [5]);
    let y = x.clamp(-1.0, 1.0);
    let binaries: Vec<Op> = nodes(&y)
        .into_iter()
        .map(|n| n.op)
        .filter(|op| matches!(op, Op::Binary(_)))
        .collect();
    assert_eq!(
        binaries,
        vec![Op::Binary(BinaryOp::Max), Op::Binary(BinaryOp::Min)]
    );
    // x + two rank-0 bounds + max + min.
    assert_eq!(nodes(&y).len(), 5);
    assert_close(&y.to_vec(), &[-1.0, -0.5, 0.5, 1.0, f64::NAN], 0.0);
    assert_eq!(x.clamp_min(0.0).to_vec()[..4], [0.0, 0.0, 0.5, 3.0]);
    assert_eq!(x.clamp_max(0.0).to_vec()[..4], [-3.0, -0.5, 0.0, 0.0]);
    assert_eq!(node(&x.clamp_min(0.0)).op, Op::Binary(BinaryOp::Max));
    assert_eq!(node(&x.clamp_max(0.0)).op, Op::Binary(BinaryOp::Min));
}

// ----------------------------------------------------------------- compares

#[test]
fn comparisons_are_bool_with_broadcast_shape() {
    let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3, 1]);
    let y = Tensor::from_vec(vec![2.0, 3.0], [2]);
    let cases: [(CmpOp, Tensor, [bool; 6]); 6] = [
        (
            CmpOp::Eq,
            x.eq(&y),
            [false, false, true, false, false, true],
        ),
        (CmpOp::Ne, x.ne(&y), [true, true, false, true, true, false]),
        (CmpOp::Lt, x.lt(&y), [true, true, false, true, false, false]),
        (CmpOp::Le, x.le(&y), [true, true, true, true, false, true]),
        (
            CmpOp::Gt,
            x.gt(&y),
            [false, false, false, false, true, false],
        ),
        (CmpOp::Ge, x.ge(&y), [false, false, true, false, true, true]),
    ];
    for (op, t, want) in cases {
        assert_eq!(node(&t).op, Op::Compare(op));
        assert_eq!((t.dims(), t.dtype()), (vec![3, 2], DType::Bool), "{op:?}");
        assert_eq!(t.to_vec_bool(), want.to_vec(), "{op:?}");
    }
    let s = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    assert_eq!(s.gt(2.0).to_vec_bool(), vec![false, false, true]);
    assert_eq!(s.le(2).to_vec_bool(), vec![true, true, false]);
    assert_eq!(s.eq(2.0f32).to_vec_bool(), vec![false, true, false]);
}

#[test]
fn comparisons_with_nan_are_false_except_ne() {
    let x = Tensor::from_vec(vec![f32::NAN], [1]);
    assert_eq!(x.eq(&x).to_vec_bool(), vec![false]);
    assert_eq!(x.ne(&x).to_vec_bool(), vec![true]);
    assert_eq!(x.lt(0.0).to_vec_bool(), vec![false]);
    assert_eq!(x.ge(0.0).to_vec_bool(), vec![false]);
}

// ------------------------------------------------------------------ select

#[test]
fn where_selects_from_tensors_and_scalars() {
    let x = Tensor::from_vec(vec![-1.0, 2.0, -3.0, 4.0], [4]);
    let y = Tensor::from_vec(vec![10.0, 20.0, 30.0, 40.0], [4]);
    let m = x.gt(0.0);
    let w = m.where_(&x, &y);
    let n = node(&w);
    assert_eq!(n.op, Op::Where);
    assert_eq!(n.inputs[0], m.id());
    assert_eq!(w.to_vec(), vec![10.0, 2.0, 30.0, 4.0]);
    assert_eq!(m.where_(&x, 0.0).to_vec(), vec![0.0, 2.0, 0.0, 4.0]);
    assert_eq!(m.where_(1.0, &y).to_vec(), vec![10.0, 1.0, 30.0, 1.0]);
    let both = m.where_(1.0, -1.0);
    assert_eq!(both.dtype(), DType::F32);
    assert_eq!(both.to_vec(), vec![-1.0, 1.0, -1.0, 1.0]);
}

#[test]
fn where_scalar_branch_takes_the_other_branch_dtype() {
    let m = Tensor::from_vec(vec![1.0, 0.0], [2]).gt(0.5);
    let i = Tensor::from_i64([7, 8], [2]);
    let w = m.where_(&i, 0);
    assert_eq!(w.dtype(), DType::I64);
    let g = w.to_graph();
    assert_eq!(
        g.node(node(&w).inputs[2]).shape,
        rlx_ir::Shape::scalar(DType::I64)
    );
    assert_eq!(w.to_vec_i64(), vec![7, 0]);
    let d = Tensor::from_f64([0.1, 0.2], [2]);
    let w = m.where_(-1.5, &d);
    assert_eq!(w.dtype(), DType::F64);
    assert_eq!(w.to_vec_f64(), vec![-1.5, 0.2]);
    let b = m.where_(false, true);
    assert_eq!(b.dtype(), DType::Bool);
    assert_eq!(b.to_vec_bool(), vec![false, true]);
}

#[test]
fn where_broadcasts_mask_and_branches() {
    let m = Tensor::from_vec(vec![1.0, 0.0], [2, 1]).gt(0.5);
    let t = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    let w = m.where_(&t, -1.0);
    assert_eq!(w.dims(), vec![2, 3]);
    assert_eq!(w.to_vec(), vec![1.0, 2.0, 3.0, -1.0, -1.0, -1.0]);
    // A numeric mask: non-zero selects on_true.
    let num = Tensor::from_vec(vec![0.0, 2.0, -1.0], [3]);
    assert_eq!(num.where_(1.0, 0.0).to_vec(), vec![0.0, 1.0, 1.0]);
}

#[test]
fn try_where_reports_dtype_and_shape_mismatches() {
    let m = Tensor::ones([2]).gt(0.0);
    let e = m
        .try_where(&Tensor::ones([2]), &Tensor::from_i64([1, 2], [2]))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("where:") && e.contains("different dtypes"),
        "{e}"
    );
    let e = m
        .try_where(&Tensor::ones([3]), 0.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("where:") && e.contains("[2]") && e.contains("[3]"),
        "{e}"
    );
}

#[test]
#[should_panic(expected = "where:")]
fn where_panics_on_mismatched_shapes() {
    let _ = Tensor::ones([2])
        .gt(0.0)
        .where_(&Tensor::ones([3]), &Tensor::ones([4]));
}

#[test]
fn masked_fill_replaces_masked_elements_in_the_mask_graph() {
    let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    let y = x.masked_fill(&x.gt(2.5), -9.0);
    assert_eq!(node(&y).op, Op::Where);
    assert_eq!(y.to_vec(), vec![1.0, 2.0, -9.0, -9.0]);
    // The mask from another graph: the result lives in the mask's graph.
    let mask = Tensor::from_vec(vec![1.0, 0.0], [2]).gt(0.5);
    let z = x.masked_fill(&mask, 0.0);
    assert!(z.shares_graph(&mask));
    assert!(!z.shares_graph(&x));
    assert_eq!(z.to_vec(), vec![0.0, 2.0, 0.0, 4.0]);
    // Keeps self's dtype.
    let d = Tensor::from_f64([0.5, 1.5], [2]);
    let f = d.masked_fill(&mask, 0.25);
    assert_eq!(f.dtype(), DType::F64);
    assert_eq!(f.to_vec_f64(), vec![0.25, 1.5]);
    let e = x
        .try_masked_fill(&Tensor::ones([3]).gt(0.0), 0.0)
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("where:"), "{e}");
}

// ------------------------------------------------------------- cast, misc

#[test]
fn cast_truncates_toward_zero_and_converts_back() {
    let x = Tensor::from_vec(vec![1.7, -1.7, 2.0, -0.2], [4]);
    let i = x.cast(DType::I32);
    assert_eq!(node(&i).op, Op::Cast { to: DType::I32 });
    assert_eq!(i.dtype(), DType::I32);
    assert_eq!(i.to_vec_i64(), vec![1, -1, 2, 0]);
    let back = i.cast(DType::F32);
    assert_eq!(back.to_vec(), vec![1.0, -1.0, 2.0, 0.0]);
    let b = x.try_cast(DType::Bool).unwrap();
    assert_eq!(b.to_vec_bool(), vec![true, true, true, true]);
    assert_eq!(
        x.cast(DType::F64).to_vec_f64(),
        vec![1.7f32 as f64, -1.7f32 as f64, 2.0, -0.2f32 as f64]
    );
}

#[test]
fn stop_gradient_is_an_identity_node() {
    let x = Tensor::from_vec(vec![1.0, -2.0], [2]);
    let y = x.stop_gradient();
    assert_eq!(node(&y).op, Op::StopGradient);
    assert_eq!(y.to_vec(), vec![1.0, -2.0]);
}

#[test]
fn builders_emit_unfused_primitives() {
    let x = Tensor::from_vec(vec![1.0, 2.0], [2]);
    let w = Tensor::from_vec(vec![3.0, 4.0], [2]);
    let y = (&x * &w + 1.0f64).relu();
    let ops: Vec<Op> = nodes(&y)
        .into_iter()
        .map(|n| n.op)
        .filter(|op| !matches!(op, Op::Constant { .. }))
        .collect();
    assert_eq!(
        ops,
        vec![
            Op::Binary(BinaryOp::Mul),
            Op::Binary(BinaryOp::Add),
            Op::Activation(Activation::Relu)
        ]
    );
    assert_eq!(count(&y, |op| matches!(op, Op::Constant { .. })), 3);
    assert_eq!(y.to_vec(), vec![4.0, 9.0]);
}

#[test]
fn node_origin_points_at_the_caller() {
    let x = Tensor::from_vec(vec![1.0], [1]);
    let y = &x + 1.0;
    let origin = node(&y).origin.expect("operators record their origin");
    assert!(origin.to_string().contains("tests/ops.rs"), "{origin}");
    let z = x.clamp(0.0, 1.0);
    let origin = node(&z).origin.expect("clamp records its origin");
    assert!(origin.to_string().contains("tests/ops.rs"), "{origin}");
}
