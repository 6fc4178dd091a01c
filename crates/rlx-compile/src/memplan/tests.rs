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

/// Compile a graph built by `f` (inputs `x`, `y`: `[8, 8]` f32) with default options.
fn program(f: impl FnOnce(&mut Graph, NodeIdPair) -> Vec<rlx_ir::NodeId>) -> Program {
    let mut g = Graph::new("donate");
    let sh = Shape::new(&[8, 8], DType::F32);
    let x = g.input("x", sh.clone());
    let y = g.input("y", sh);
    let outs = f(&mut g, (x, y));
    g.set_outputs(outs);
    compile(&g, &CompileOptions::default()).unwrap()
}

type NodeIdPair = (rlx_ir::NodeId, rlx_ir::NodeId);

fn bin(
    g: &mut Graph,
    op: rlx_ir::BinaryOp,
    a: rlx_ir::NodeId,
    b: rlx_ir::NodeId,
) -> rlx_ir::NodeId {
    g.add_op(Op::Binary(op), vec![a, b]).unwrap()
}

#[test]
fn an_elementwise_result_may_take_over_an_identically_read_argument() {
    use rlx_ir::BinaryOp::{Add, Mul};
    let p = program(|g, (x, y)| {
        let m = bin(g, Mul, x, y);
        vec![bin(g, Add, m, x)]
    });
    assert!(donatable(&p, 0, 0), "x is read at the stored index only");
    assert!(donatable(&p, 1, 0));
    assert!(!donatable(&p, 2, 0), "no such argument");
    assert!(!donatable(&p, 0, 1), "no such output");
}

#[test]
fn a_transposed_or_broadcast_read_forbids_donation() {
    use rlx_ir::BinaryOp::Add;
    let p = program(|g, (x, y)| {
        let t = g
            .add_op(Op::Transpose { perm: vec![1, 0] }, vec![x])
            .unwrap();
        vec![bin(g, Add, t, y)]
    });
    assert!(!donatable(&p, 0, 0), "element (i, j) reads x at (j, i)");
    assert!(donatable(&p, 1, 0));
    let mut g = Graph::new("bcast");
    let v = g.input("v", Shape::new(&[8], DType::F32));
    let y = g.input("y", Shape::new(&[8, 8], DType::F32));
    let s = bin(&mut g, Add, v, y);
    g.set_outputs(vec![s]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert!(
        !donatable(&p, 0, 0),
        "a broadcast argument is smaller than the result"
    );
}

#[test]
fn an_output_that_passes_the_argument_through_is_not_donatable() {
    use rlx_ir::BinaryOp::Add;
    let p = program(|g, (x, y)| vec![x, bin(g, Add, x, y)]);
    assert!(!donatable(&p, 0, 0), "output 0 is x itself");
}

#[test]
fn an_argument_read_after_the_output_is_written_is_not_donatable() {
    use rlx_ir::BinaryOp::Add;
    // s = x + y is stored by an elementwise kernel; the product s·x reads x afterwards.
    let p = program(|g, (x, y)| {
        let s = bin(g, Add, x, y);
        let mm = g.add_op(Op::MatMul, vec![s, x]).unwrap();
        vec![s, mm]
    });
    let writer = |o: usize| {
        p.kernels
            .iter()
            .position(|k| k.writes().any(|b| b == p.outputs[o]))
            .unwrap()
    };
    assert!(matches!(
        p.kernels[writer(0)].kind,
        KernelKind::Elementwise { .. }
    ));
    assert!(writer(1) > writer(0));
    assert!(
        !donatable(&p, 0, 0),
        "x is read by the matmul after s is stored"
    );
    assert!(donatable(&p, 1, 0), "y is not read after s is stored");
}

#[test]
fn a_contraction_epilogue_may_write_over_its_addend_but_not_over_an_operand() {
    use rlx_ir::BinaryOp::Add;
    let mut g = Graph::new("mm");
    let sh = Shape::new(&[8, 8], DType::F32);
    let a = g.input("a", sh.clone());
    let b = g.input("b", sh.clone());
    let c = g.input("c", sh);
    let mm = g.add_op(Op::MatMul, vec![a, b]).unwrap();
    let r = bin(&mut g, Add, mm, c);
    g.set_outputs(vec![r]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert!(
        p.kernels
            .iter()
            .any(|k| matches!(k.kind, KernelKind::Contraction { .. }) && k.stores.len() == 1),
        "the add is fused into the product's epilogue"
    );
    assert!(donatable(&p, 2, 0), "c is read at the stored index");
    assert!(
        !donatable(&p, 0, 0),
        "a is a GEMM operand: every row of it is read"
    );
    assert!(!donatable(&p, 1, 0));
}

#[test]
fn placed_tree_finds_exactly_the_overlapping_placements() {
    // Pseudo-random lifetimes over 37 kernels, checked against a scan of all of them.
    let kernels = 37;
    let mut placed = Placed::new(kernels);
    let mut all: Vec<(usize, usize, (usize, usize))> = Vec::new();
    let mut state = 12345u64;
    let mut next = |m: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize % m
    };
    for i in 0..200 {
        let s = next(kernels);
        let e = s + next(kernels - s);
        placed.insert(i * 64, 64 + next(3) * 64, (s, e));
        all.push((i * 64, placed.at[s].last().unwrap().1, (s, e)));
        for (qs, qe) in [
            (s, e),
            (0, kernels - 1),
            (e, e),
            (next(kernels), kernels - 1),
        ] {
            let mut got = placed.overlapping(qs, qe);
            let mut want: Vec<(usize, usize)> = all
                .iter()
                .filter(|(_, _, (s2, e2))| qs <= *e2 && *s2 <= qe)
                .map(|(o, sz, _)| (*o, *sz))
                .collect();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "query [{qs}, {qe}] after {} placements", i + 1);
        }
    }
}

#[test]
fn a_ten_thousand_kernel_chain_plans_into_two_slots() {
    // A chain of kernels each reading the previous one's temporary: with a scan of every
    // placement per buffer, planning it was quadratic in the kernel count.
    let mut g = Graph::new("long");
    let mut x = g.input("x", Shape::new(&[4], DType::F32));
    for _ in 0..10_000 {
        x = g
            .add_op(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: vec![0],
                    keep_dim: true,
                },
                vec![x],
            )
            .unwrap();
        x = g.add_op(Op::Activation(Activation::Exp), vec![x]).unwrap();
    }
    g.set_outputs(vec![x]);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    let sizes: Vec<usize> = p
        .buffers
        .iter()
        .map(|b| b.shape.size_bytes().unwrap())
        .collect();
    let (offsets, arena) = plan_offsets(&p, &sizes);
    // Two live temporaries at a time at most: each kernel reads one and writes one.
    assert!(arena <= 2 * ALIGN, "arena {arena}");
    assert_eq!(offsets.len(), p.buffers.len());
}
