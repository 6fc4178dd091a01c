//! Reduction prologues evaluated as machine code (the JIT) against the interpreter, bit
//! for bit: a LayerNorm / RMSNorm backward's row means and column sums, whose prologues
//! (`(x − μ)·r·g…`) used to be interpreted one pass per instruction.
//!
//! Switching the JIT off is process-wide, which is harmless to the other modules of this
//! binary: both ways give the same bits (that is what this module checks).

use super::{bits, oracle, run};
use rlx_compile::autodiff::grad_graph;
use rlx_ir::{BinaryOp, DType, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_testkit::{Rng, close, op, reduce};

/// `Σ norm(x; γ, β) ⊙ gy` over `[rows, c]`, differentiated for x, γ and β.
fn norm_backward(rows: usize, c: usize, rms: bool) -> Graph {
    let mut g = Graph::new("norm_bwd");
    let x = g.input("x", Shape::new(&[rows, c], DType::F32));
    let gamma = g.input("gamma", Shape::new(&[c], DType::F32));
    let beta = g.input("beta", Shape::new(&[c], DType::F32));
    let gy = g.input("gy", Shape::new(&[rows, c], DType::F32));
    let (axis, eps) = (-1, 1e-5);
    let o = if rms {
        Op::RmsNorm { axis, eps }
    } else {
        Op::LayerNorm { axis, eps }
    };
    let y = op(&mut g, o, vec![x, gamma, beta]);
    let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, gy]);
    let loss = reduce(&mut g, ReduceOp::Sum, vec![0, 1], false, p);
    g.set_outputs(vec![loss]);
    let wrt = if rms {
        vec![x, gamma]
    } else {
        vec![x, gamma, beta]
    };
    grad_graph(&g, &wrt).unwrap()
}

#[test]
fn norm_backward_reductions_compiled_and_interpreted_agree_bit_for_bit() {
    let mut rng = Rng::new(5);
    for (rows, c) in [(1, 1), (3, 7), (16, 256), (9, 300), (40, 33), (2, 1500)] {
        for rms in [false, true] {
            let g = norm_backward(rows, c, rms);
            let mut v = |n: usize, scale: f64| -> Vec<f32> {
                (0..n)
                    .map(|_| ((rng.uniform() * 2.0 - 1.0) * scale) as f32)
                    .collect()
            };
            let args = vec![
                TensorData::from_f32(&[rows, c], &v(rows * c, 3.0)),
                TensorData::from_f32(&[c], &v(c, 1.0)),
                TensorData::from_f32(&[c], &v(c, 1.0)),
                TensorData::from_f32(&[rows, c], &v(rows * c, 1.0)),
            ];
            let names: Vec<String> = g.input_names().iter().map(|s| s.to_string()).collect();
            // The gradient program may drop inputs it does not read (β).
            let all = ["x", "gamma", "beta", "gy"];
            let args: Vec<TensorData> = all
                .iter()
                .zip(args)
                .filter(|(n, _)| names.iter().any(|m| m == *n))
                .map(|(_, a)| a)
                .collect();
            rlx_cpu::set_jit(true);
            let fast = run(&g, &args);
            rlx_cpu::set_jit(false);
            let slow = run(&g, &args);
            rlx_cpu::set_jit(true);
            let want = oracle(&g, &args);
            for (k, ((a, b), w)) in fast.iter().zip(&slow).zip(&want).enumerate() {
                assert_eq!(bits(a), bits(b), "[{rows}, {c}] rms={rms} output {k}");
                close(a, w, 1e-4);
            }
        }
    }
}
