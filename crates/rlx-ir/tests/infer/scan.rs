//! Scan (body contract, trajectory) and Fft (block layout).

use crate::{bad, d, dy, f32s, ok, s, sh};
use rlx_ir::op::{FftAlgo, FftNorm};
use rlx_ir::{BinaryOp, DType, Graph, Op, Shape};

/// `carry + bcast_0 · x_0` over `[3]` f32 values: the body convention of `Op::Scan`.
pub fn accumulate_body() -> Graph {
    let mut b = Graph::new("acc");
    let carry = b.input("carry", f32s(&[3]));
    let w = b.input("bcast_0", f32s(&[3]));
    let x = b.input("x_0", f32s(&[3]));
    let wx = b.add_op(Op::Binary(BinaryOp::Mul), vec![w, x]).unwrap();
    let next = b
        .add_op(Op::Binary(BinaryOp::Add), vec![carry, wx])
        .unwrap();
    b.set_outputs(vec![next]);
    b
}

fn scan(body: Graph, length: u32, save: bool, num_bcast: u32, num_xs: u32) -> Op {
    Op::Scan {
        body: Box::new(body),
        length,
        save_trajectory: save,
        num_bcast,
        num_xs,
        num_checkpoints: 0,
    }
}

#[test]
fn scan_returns_the_carry_or_the_trajectory() {
    let (init, w, xs) = (f32s(&[3]), f32s(&[3]), f32s(&[5, 3]));
    assert_eq!(
        ok(&scan(accumulate_body(), 5, false, 1, 1), &[&init, &w, &xs]),
        init
    );
    assert_eq!(
        ok(&scan(accumulate_body(), 5, true, 1, 1), &[&init, &w, &xs]),
        f32s(&[5, 3])
    );
}

#[test]
fn scan_body_may_ignore_inputs_and_carry_scalars_or_dynamic_dims() {
    // a body that only reads its carry, over a rank-0 carry, with no xs
    let mut b = Graph::new("halve");
    let c = b.input("carry", f32s(&[]));
    let y = b
        .add_op(Op::Activation(rlx_ir::Activation::Sqrt), vec![c])
        .unwrap();
    b.set_outputs(vec![y]);
    assert_eq!(
        ok(&scan(b.clone(), 4, true, 1, 0), &[&f32s(&[]), &f32s(&[7])]),
        f32s(&[4])
    );
    assert_eq!(ok(&scan(b, 0, false, 0, 0), &[&f32s(&[])]), f32s(&[]));
    // dynamic dims in the carry match by symbol
    let carry = dy(&[d(0), s(2)], DType::F32);
    let mut b = Graph::new("id");
    let c = b.input("carry", carry.clone());
    let y = b.add_op(Op::StopGradient, vec![c]).unwrap();
    b.set_outputs(vec![y]);
    assert_eq!(
        ok(&scan(b, 3, true, 0, 0), &[&carry]),
        dy(&[s(3), d(0), s(2)], DType::F32)
    );
}

#[test]
fn scan_rejects_wrong_arity_and_xs_length() {
    let (init, w) = (f32s(&[3]), f32s(&[3]));
    bad(
        &scan(accumulate_body(), 5, false, 1, 1),
        &[&init, &w],
        &["takes 3 input(s)", "init, 1 bcast(s), 1 xs"],
    );
    bad(
        &scan(accumulate_body(), 5, false, 1, 1),
        &[&init, &w, &f32s(&[6, 3])],
        &["xs 0 is [6, 3] f32", "scan length 5"],
    );
    bad(
        &scan(accumulate_body(), 5, false, 1, 1),
        &[&init, &w, &f32s(&[])],
        &["xs 0 is [] f32"],
    );
}

#[test]
fn scan_rejects_a_body_whose_output_is_not_the_carry() {
    let (w, xs) = (f32s(&[3]), f32s(&[5, 3]));
    bad(
        &scan(accumulate_body(), 5, false, 1, 1),
        &[&sh(&[3], DType::F64), &w, &xs],
        &["returns [3] f32", "carry is [3] f64"],
    );
    let mut two = accumulate_body();
    two.set_outputs(vec![rlx_ir::NodeId(0), rlx_ir::NodeId(4)]);
    bad(
        &scan(two, 5, false, 1, 1),
        &[&f32s(&[3]), &w, &xs],
        &["exactly one output", "it has 2"],
    );
    let mut dangling = accumulate_body();
    dangling.set_outputs(vec![rlx_ir::NodeId(40)]);
    bad(
        &scan(dangling, 5, false, 1, 1),
        &[&f32s(&[3]), &w, &xs],
        &["%40", "5 nodes"],
    );
}

/// A body `carry + <name>` where the second input is declared as `shape`.
fn body_reading(name: &str, shape: Shape) -> Graph {
    let mut b = Graph::new("reads");
    let c = b.input("carry", f32s(&[3]));
    let other = b.input(name, shape);
    let y = b.add_op(Op::Binary(BinaryOp::Add), vec![c, other]).unwrap();
    b.set_outputs(vec![y]);
    b
}

#[test]
fn scan_rejects_body_inputs_the_scan_does_not_feed_or_types_it_does_not_give() {
    let init = f32s(&[3]);
    let xs = f32s(&[5, 3]);
    // x_1 does not exist with one xs; bcast_0 does not exist with no bcasts
    for name in ["x_1", "bcast_0", "weights", "x_01", "x_+0"] {
        bad(
            &scan(body_reading(name, f32s(&[3])), 5, false, 0, 1),
            &[&init, &xs],
            &[&format!("`{name}`"), "carry", "0 bcast(s)"],
        );
    }
    // x_0 is one slice of xs: [3] (a [1] declaration would still broadcast to the carry)
    bad(
        &scan(body_reading("x_0", f32s(&[1])), 5, false, 0, 1),
        &[&init, &xs],
        &["`x_0` as [1] f32", "feeds it [3] f32"],
    );
    assert_eq!(
        ok(
            &scan(body_reading("x_0", f32s(&[3])), 5, false, 0, 1),
            &[&init, &xs]
        ),
        init
    );
    // a param in the body cannot be bound
    let mut b = body_reading("x_0", f32s(&[3]));
    b.param("w", f32s(&[3]));
    bad(
        &scan(b, 5, false, 0, 1),
        &[&init, &xs],
        &["param `w`", "bcast"],
    );
}

fn fft(inverse: bool) -> Op {
    Op::Fft {
        inverse,
        norm: FftNorm::Backward,
        algo: FftAlgo::Native,
    }
}

#[test]
fn fft_keeps_the_shape_in_block_or_complex_layout() {
    for inverse in [false, true] {
        let x = f32s(&[4, 8]);
        assert_eq!(ok(&fft(inverse), &[&x]), x);
        let z = sh(&[4, 7], DType::C64);
        assert_eq!(ok(&fft(inverse), &[&z]), z);
        let xd = dy(&[s(2), d(0)], DType::F64);
        assert_eq!(ok(&fft(inverse), &[&xd]), xd);
    }
    let ortho = Op::Fft {
        inverse: false,
        norm: FftNorm::Ortho,
        algo: FftAlgo::Dft,
    };
    assert_eq!(ok(&ortho, &[&f32s(&[2])]), f32s(&[2]));
}

#[test]
fn fft_rejects_odd_real_blocks_integers_and_scalars() {
    bad(
        &fft(false),
        &[&f32s(&[4, 7])],
        &["[4, 7] f32", "even", "got 7"],
    );
    bad(&fft(true), &[&sh(&[8], DType::I32)], &["[8] i32", "cast"]);
    bad(&fft(false), &[&f32s(&[])], &["scalar [] f32"]);
    bad(&fft(false), &[], &["takes 1 input(s)"]);
}
