//! Scan: gradients to the initial carry, the broadcast operands and the per-step xs.

use crate::{check, op, rand};
use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, Shape};

/// `carry ← tanh(carry · bcast_0 + x_0) + bcast_1` over `[2]` values.
fn rnn_body() -> Graph {
    let mut b = Graph::new("rnn_body");
    let s = Shape::new(&[2], DType::F64);
    let c = b.input("carry", s.clone());
    let w = b.input("bcast_0", s.clone());
    let u = b.input("bcast_1", Shape::new(&[], DType::F64));
    let x = b.input("x_0", s);
    let cw = op(&mut b, Op::Binary(BinaryOp::Mul), vec![c, w]);
    let z = op(&mut b, Op::Binary(BinaryOp::Add), vec![cw, x]);
    let t = op(&mut b, Op::Activation(Activation::Tanh), vec![z]);
    let out = op(&mut b, Op::Binary(BinaryOp::Add), vec![t, u]);
    b.set_outputs(vec![out]);
    b
}

fn scan(length: u32, save_trajectory: bool) -> Op {
    Op::Scan {
        body: Box::new(rnn_body()),
        length,
        save_trajectory,
        num_bcast: 2,
        num_xs: 1,
        num_checkpoints: 0,
    }
}

#[test]
fn scan_final_carry_and_trajectory_gradients() {
    for save in [false, true] {
        for length in [1, 3] {
            check(
                &format!("scan len {length} save={save}"),
                vec![
                    ("init", rand(&[2], 1)),
                    ("w", rand(&[2], 2)),
                    ("u", rand(&[], 3)),
                    ("xs", rand(&[length as usize, 2], 4)),
                ],
                |g, x| op(g, scan(length, save), vec![x[0], x[1], x[2], x[3]]),
            );
        }
    }
}

#[test]
fn scan_whose_bcast_is_computed_from_init_is_not_double_counted() {
    // bcast_0 = 2·init: the path through the bcast is differentiated once.
    check(
        "scan bcast from init",
        vec![
            ("init", rand(&[2], 5)),
            ("u", rand(&[], 6)),
            ("xs", rand(&[2, 2], 7)),
        ],
        |g, x| {
            let two = crate::scalar(g, 2.0);
            let w = op(g, Op::Binary(BinaryOp::Mul), vec![x[0], two]);
            op(g, scan(2, false), vec![x[0], w, x[1], x[2]])
        },
    );
}
