//! Huge reductions into few outputs: split across blocks (a part per block, then a
//! combine per output in part order) or not, chosen by [`Routing::split_min`].
//!
//! What is promised: max, min and integer sums are bit-identical to the oracle on both
//! paths (their result does not depend on the fold order); float sums and means are
//! within the oracle comparison's tolerance on both paths and bit-identical from run to
//! run (the part count is fixed by the program, never by the device or grid); an
//! integer mean (two accumulators) is never split and equals the oracle exactly.

use super::cases::Target;
use super::check;
use rlx_cuda::Routing;
use rlx_ir::{DType, Dim, Graph, ReduceOp, Shape, TensorData};
use rlx_runtime::Executable;
use rlx_testkit::{Rng, random_data, reduce};
use std::sync::Arc;

/// Routing that splits every reduction that has a split form.
fn split() -> Routing {
    Routing {
        split_min: 0,
        ..Routing::default()
    }
}

/// Routing that never splits.
fn unsplit() -> Routing {
    Routing {
        split_min: usize::MAX,
        ..Routing::default()
    }
}

fn run(exe: &Arc<dyn Executable>, x: &TensorData) -> Vec<u64> {
    let out = exe.run(&[x.view()]).unwrap();
    out[0].to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

fn oracle(g: &Graph, x: &TensorData) -> Vec<u64> {
    let out = rlx_ir::interp::run(g, &[("x", x.clone())]).unwrap();
    out[0].to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

/// The reduction of `x` (dims `dims`, possibly dynamic) over `axes` with `kind`.
fn graph(kind: ReduceOp, dims: &[Dim], dt: DType, axes: Vec<usize>) -> Graph {
    let mut g = Graph::new("huge_reduce");
    let x = g.input("x", Shape::from_dims(dims, dt));
    let r = reduce(&mut g, kind, axes, false, x);
    g.set_outputs(vec![r]);
    g
}

/// Static reductions of 10⁶ elements into 1, 3 (rows) and 2 (columns) outputs, split
/// and unsplit, against the oracle; the split path is the one taken (the plan lists the
/// part and combine kernels) and is deterministic.
pub fn huge_reductions_split_match_the_oracle(t: &Target) {
    let mut rng = Rng::new(23);
    let shapes: [(&[usize], Vec<usize>); 3] = [
        (&[1_000_000], vec![0]),
        (&[3, 333_334], vec![1]),
        (&[500_000, 2], vec![0]),
    ];
    let cases = [
        (ReduceOp::Sum, DType::F32),
        (ReduceOp::Mean, DType::F32),
        (ReduceOp::Max, DType::F32),
        (ReduceOp::Min, DType::F16),
        (ReduceOp::Sum, DType::I32),
    ];
    for (dims, axes) in &shapes {
        for (kind, dt) in cases {
            let sd: Vec<Dim> = dims.iter().map(|&d| Dim::Static(d)).collect();
            let g = graph(kind, &sd, dt, axes.clone());
            let x = random_data(&mut rng, &Shape::new(dims, dt));
            let what = format!("{} {dt:?} over {dims:?} axes {axes:?}", kind.name());
            let s = t.routed(&g, split()).unwrap();
            let u = t.routed(&g, unsplit()).unwrap();
            assert!(
                s.explain().contains("_part"),
                "{what}: not split\n{}",
                s.explain()
            );
            assert!(s.explain().contains("_combine"), "{what}\n{}", s.explain());
            assert!(
                !u.explain().contains("_part"),
                "{what}: split\n{}",
                u.explain()
            );
            check(&g, std::slice::from_ref(&x), &|g| t.routed(g, split()));
            check(&g, std::slice::from_ref(&x), &|g| t.routed(g, unsplit()));
            let first = run(&s, &x);
            assert_eq!(first, run(&s, &x), "{what}: split runs differ");
            if kind != ReduceOp::Mean && (kind != ReduceOp::Sum || dt.is_int()) {
                assert_eq!(first, oracle(&g, &x), "{what}: split != oracle bits");
                assert_eq!(
                    run(&u, &x),
                    oracle(&g, &x),
                    "{what}: unsplit != oracle bits"
                );
            }
        }
    }
}

/// A dynamic reduced extent: one program serves long (split), short and empty extents
/// under `split_min = 0` and under the default threshold.
pub fn dynamic_huge_reductions_split_match_the_oracle(t: &Target) {
    let mut rng = Rng::new(29);
    for kind in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean] {
        let g = graph(
            kind,
            &[Dim::Static(2), Dim::Dynamic(0)],
            DType::F32,
            vec![1],
        );
        for r in [split(), Routing::default()] {
            for n in [1_000_000usize, 9000, 5, 0] {
                let x = random_data(&mut rng, &Shape::new(&[2, n], DType::F32));
                check(&g, std::slice::from_ref(&x), &|g| t.routed(g, r));
                if n > 0 && kind == ReduceOp::Max {
                    let exe = t.routed(&g, r).unwrap();
                    assert_eq!(run(&exe, &x), oracle(&g, &x), "max over {n}");
                }
            }
        }
    }
}

/// An integer mean keeps two accumulators and has no split form: under
/// `split_min = 0` it runs unsplit and equals the oracle exactly.
pub fn integer_means_are_never_split(t: &Target) {
    let mut rng = Rng::new(31);
    for dt in [DType::I32, DType::I64] {
        let g = graph(ReduceOp::Mean, &[Dim::Static(1_000_000)], dt, vec![0]);
        let x = random_data(&mut rng, &Shape::new(&[1_000_000], dt));
        let exe = t.routed(&g, split()).unwrap();
        assert!(
            !exe.explain().contains("_part"),
            "{dt:?}\n{}",
            exe.explain()
        );
        assert_eq!(run(&exe, &x), oracle(&g, &x), "integer mean {dt:?}");
    }
}
