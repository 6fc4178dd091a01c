//! Tests of the host-input runner: half-precision conversion, dynamic-dim binding and
//! argument checks.

#[test]
fn halves_from_f32_round_each_f32_once_to_nearest_even() {
    // Every exponent with mantissas around both formats' rounding points, specials
    // (±0, ±∞, NaNs with payloads), subnormals of each format and random patterns.
    let mut xs: Vec<f32> = Vec::new();
    for e in 0..512u32 {
        for lo in [
            0u32, 1, 0xfff, 0x1000, 0x1001, 0x7fff, 0x8000, 0x8001, 0x7f_ffff,
        ] {
            xs.push(f32::from_bits((e << 23) | lo));
            xs.push(f32::from_bits((e << 23) | (1 << 13) | lo));
        }
    }
    xs.extend(
        [f32::NAN, -f32::NAN]
            .into_iter()
            .chain([0x7f80_0001u32, 0xffc1_2345, 0x7fbf_ffff].map(f32::from_bits)),
    );
    let mut s = 0x2545_f491u32;
    for _ in 0..20_000 {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        xs.push(f32::from_bits(s));
    }
    for dt in [rlx_ir::DType::BF16, rlx_ir::DType::F16] {
        let fast = super::halves_from_f32(dt, &[xs.len()], &xs);
        for (i, (got, &x)) in fast.bytes.chunks(2).zip(&xs).enumerate() {
            // The reference: the scalar f32 conversion, correctly rounded (ties to
            // even, NaN kept NaN with its sign and top payload bits).
            let want = match dt {
                rlx_ir::DType::BF16 => half::bf16::from_f32(x).to_bits(),
                _ => half::f16::from_f32(x).to_bits(),
            };
            assert_eq!(
                got,
                want.to_le_bytes(),
                "{dt} element {i}: {:#x}",
                x.to_bits()
            );
        }
    }
    // Just above a bf16 tie rounds up (the f64 path's truncation rounded it down).
    let up = super::halves_from_f32(rlx_ir::DType::BF16, &[1], &[f32::from_bits(0x3f80_8001)]);
    assert_eq!(up.bytes, 0x3f81u16.to_le_bytes());
    let tie = super::halves_from_f32(
        rlx_ir::DType::BF16,
        &[2],
        &[f32::from_bits(0x3f80_8000), f32::from_bits(0x3f81_8000)],
    );
    assert_eq!(tie.bytes, [0x80, 0x3f, 0x82, 0x3f]);
}

use super::*;

#[test]
fn exact_root_finds_perfect_powers_and_nothing_else() {
    assert_eq!(exact_root(0, 2), Some(0));
    assert_eq!(exact_root(1, 5), Some(1));
    assert_eq!(exact_root(81, 2), Some(9));
    assert_eq!(exact_root(81, 4), Some(3));
    assert_eq!(exact_root(80, 4), None);
    assert_eq!(exact_root(1 << 62, 2), Some(1 << 31));
    assert_eq!(exact_root(usize::MAX, 3), None);
    assert_eq!(exact_root(100_000, 4), None); // the old search overflowed 65536⁴ here
}

#[test]
fn a_repeated_dynamic_dim_binds_its_root_or_reports_the_misfit() {
    let shape = Shape::from_dims(
        &[Dim::Dynamic(0), Dim::Dynamic(0), Dim::Static(2)],
        rlx_ir::DType::F32,
    );
    let mut b = DimBinding::new();
    let dims = resolve_dims("t".into(), "x", &shape, 18, &mut b).unwrap();
    assert_eq!(dims.map(|d| d.as_slice().to_vec()), Some(vec![3, 3, 2]));
    let mut b = DimBinding::new();
    let err = resolve_dims("t".into(), "x", &shape, 20, &mut b)
        .unwrap_err()
        .to_string();
    assert!(err.contains("20 values do not fit"), "{err}");
}

/// Duplicate names are found both by the pairwise scan (few inputs) and the set
/// (many inputs), and the message names the duplicate.
#[test]
fn a_name_given_twice_is_reported_among_few_and_many_inputs() {
    for n in [2usize, 5, 16, 17, 40] {
        let names: Vec<String> = (0..n).map(|i| format!("x{i}")).collect();
        let mut inputs: Vec<(&str, ())> = names.iter().map(|s| (s.as_str(), ())).collect();
        assert!(
            check_unique("t".into(), &inputs).is_ok(),
            "{n} distinct names"
        );
        inputs.push((names[n / 2].as_str(), ()));
        let err = check_unique(What::Named("Jitted", "g"), &inputs)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("Jitted `g`: `x{}` is given twice", n / 2)),
            "{err}"
        );
    }
}

/// Two distinct unbound dynamic symbols cannot be resolved from one flat length (the
/// caller retries once another input has bound one of them).
#[test]
fn two_unbound_dynamic_dims_wait_for_another_input() {
    let shape = Shape::from_dims(&[Dim::Dynamic(0), Dim::Dynamic(1)], rlx_ir::DType::F32);
    let mut b = DimBinding::new();
    assert!(
        resolve_dims("t".into(), "x", &shape, 6, &mut b)
            .unwrap()
            .is_none()
    );
    b.set(1, 3);
    let dims = resolve_dims("t".into(), "x", &shape, 6, &mut b).unwrap();
    assert_eq!(dims.map(|d| d.as_slice().to_vec()), Some(vec![2, 3]));
    let wide: Vec<Dim> = (0..8).map(|i| Dim::Static(i + 1)).collect();
    let shape = Shape::from_dims(&wide, rlx_ir::DType::F32);
    let dims = resolve_dims("t".into(), "x", &shape, 40320, &mut b).unwrap();
    assert_eq!(
        dims.map(|d| d.as_slice().to_vec()),
        Some((1..=8).collect::<Vec<usize>>()),
        "more axes than the inline dims hold"
    );
}

/// `Jitted::run` binds every call's own data: more inputs than the argument array
/// on the stack holds, and inputs given out of declaration order, with new values
/// each call (a stale argument would show as a wrong sum).
#[test]
fn jitted_runs_bind_each_calls_data_for_many_inputs_and_any_order() {
    use crate::{Func, Tensor, shape};
    let names: Vec<String> = (0..10).map(|i| format!("x{i}")).collect();
    let many = Func::new("many", |s| {
        let xs: Vec<Tensor> = names.iter().map(|n| s.input(n, shape![2])).collect();
        xs[1..].iter().fold(xs[0].clone(), |acc, x| &acc + x)
    })
    .jit();
    let two = Func::new("two", |s| {
        let a = s.input("a", shape![3]);
        let b = s.input("b", shape![3]);
        &a - &b
    })
    .jit();
    for call in 0..6 {
        let c = call as f32;
        let data: Vec<[f32; 2]> = (0..10).map(|k| [c + k as f32, -(k as f32)]).collect();
        let inputs: Vec<(&str, &[f32])> = names
            .iter()
            .zip(&data)
            .rev()
            .map(|(n, d)| (n.as_str(), &d[..]))
            .collect();
        assert_eq!(many.run(&inputs), vec![vec![10.0 * c + 45.0, -45.0]]);
        let (a, b) = ([c, 2.0, -c], [1.0, c, 4.0]);
        assert_eq!(
            two.run(&[("b", &b), ("a", &a)]),
            vec![vec![c - 1.0, 2.0 - c, -c - 4.0]]
        );
        assert_eq!(
            two.run(&[("a", &a), ("b", &b)]),
            vec![vec![c - 1.0, 2.0 - c, -c - 4.0]]
        );
    }
    let err = two
        .try_run(&[("a", &[1.0; 3]), ("c", &[1.0; 3])])
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Jitted `two`: no input or param named `c`"),
        "{err}"
    );
}

/// A program that lists one output several times returns it at every position, and
/// runs of two programs with different buffer counts alternate on one thread (the
/// executor's per-thread buffer tables are resized between them) with new data each
/// call.
#[test]
fn repeated_outputs_and_alternating_programs_return_each_calls_values() {
    use crate::Func;
    use rlx_ir::{Activation, BinaryOp};
    let mut g = Graph::new("dup");
    let a = g.input("a", Shape::new(&[2], rlx_ir::DType::F32));
    let r = g.add_op(Op::Activation(Activation::Relu), vec![a]).unwrap();
    let n = g.add_op(Op::Activation(Activation::Neg), vec![a]).unwrap();
    let m = g.add_op(Op::Binary(BinaryOp::Mul), vec![r, n]).unwrap();
    g.set_outputs(vec![r, m, r, n]);
    let dup = Func::from_graph(g).jit();
    let mut g = Graph::new("one");
    let x = g.input("x", Shape::new(&[3], rlx_ir::DType::F32));
    let e = g.add_op(Op::Activation(Activation::Abs), vec![x]).unwrap();
    g.set_outputs(vec![e]);
    let one = Func::from_graph(g).jit();
    for call in 0..5 {
        let c = call as f32;
        let out = dup.run(&[("a", &[c, -1.0])]);
        assert_eq!(
            out,
            vec![
                vec![c, 0.0],
                vec![-c * c, -0.0],
                vec![c, 0.0],
                vec![-c, 1.0]
            ]
        );
        assert_eq!(one.run(&[("x", &[-c, c, -2.0])]), vec![vec![c, c, 2.0]]);
    }
}
