use super::*;
use crate::{CompileOptions, compile};
use rlx_ir::{Activation, DType, Graph, Op, ReduceOp, Shape};

/// exp → sum → div → exp → sum …: a chain of kernels with temporaries.
fn chain(n: usize) -> Graph {
    let mut g = Graph::new("chain");
    let mut x = g.input("x", Shape::new(&[64, 64], DType::F32));
    for _ in 0..n {
        let e = g.add_op(Op::Activation(Activation::Exp), vec![x]).unwrap();
        let s = g
            .add_op(
                Op::Reduce {
                    op: ReduceOp::Max,
                    axes: vec![1],
                    keep_dim: true,
                },
                vec![e],
            )
            .unwrap();
        x = g
            .add_op(Op::Binary(rlx_ir::BinaryOp::Div), vec![e, s])
            .unwrap();
        x = g.add_op(Op::Activation(Activation::Sin), vec![x]).unwrap();
    }
    g.set_outputs(vec![x]);
    g
}

fn sizes(p: &Program) -> Vec<usize> {
    p.buffers
        .iter()
        .map(|b| b.shape.size_bytes().unwrap())
        .collect()
}

#[test]
fn buffers_with_overlapping_lifetimes_never_share_bytes() {
    for n in 1..6 {
        let p = compile(&chain(n), &CompileOptions::default()).unwrap();
        let sz = sizes(&p);
        let (off, arena) = plan_offsets(&p, &sz);
        let lv = &p.liveness;
        let shares = |a: usize, b: usize| {
            lv.in_place
                .iter()
                .any(|&(x, y)| (x, y) == (a, b) || (x, y) == (b, a))
        };
        for a in 0..p.buffers.len() {
            for b in a + 1..p.buffers.len() {
                let (Some(ia), Some(ib)) = (lv.intervals[a], lv.intervals[b]) else {
                    continue;
                };
                let live_together = ia.0 <= ib.1 && ib.0 <= ia.1;
                let bytes_overlap = off[a] < off[b] + sz[b] && off[b] < off[a] + sz[a];
                assert!(
                    !(live_together && bytes_overlap) || shares(a, b),
                    "buffers {a} and {b} collide"
                );
            }
            if lv.intervals[a].is_some() {
                assert!(off[a] + sz[a] <= arena);
            }
        }
    }
}

#[test]
fn the_arena_reuses_bytes_of_dead_temporaries() {
    let p = compile(&chain(5), &CompileOptions::default()).unwrap();
    let sz = sizes(&p);
    let (_, arena) = plan_offsets(&p, &sz);
    let total: usize = p
        .buffers
        .iter()
        .enumerate()
        .filter(|(_, b)| b.kind == BufKind::Temp)
        .map(|(i, _)| sz[i])
        .sum();
    assert!(
        arena * 2 < total,
        "arena {arena} vs sum of temporaries {total}"
    );
}

#[test]
fn elementwise_kernels_write_in_place_over_a_dying_input() {
    let p = compile(&chain(2), &CompileOptions::default()).unwrap();
    assert!(!p.liveness.in_place.is_empty(), "{:#?}", p.liveness);
    for &(out, over) in &p.liveness.in_place {
        assert_eq!(p.buffers[out].shape.dims(), p.buffers[over].shape.dims());
    }
}
