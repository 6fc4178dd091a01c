//! Reduction and row-op trees finished with warp shuffles (`Routing::shuffles`, on by
//! default) against the same programs without them and against the oracle.
//!
//! What is promised: the shuffled trees give the shared-memory trees' results bit for
//! bit (item 0's operands are the tree's), so wherever the unshuffled kernels equal
//! the oracle bit for bit (max, min, integer sums and means) the shuffled ones do too,
//! and float sums and means stay within the oracle comparison's tolerance.

use super::cases::Target;
use super::check;
use rlx_cuda::Routing;
use rlx_cuda::codegen::{CodegenOptions, generate_with};
use rlx_cuda::device::Dialect;
use rlx_ir::{DType, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_testkit::{Rng, op, random_data, reduce};

fn routing(shuffles: bool) -> Routing {
    Routing {
        shuffles,
        ..Routing::default()
    }
}

fn bits(t: &TensorData) -> Vec<u64> {
    t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

/// Row lengths: below the work-group threshold (1, 31, 32, 33: a thread per output),
/// a 32-thread group that shuffles only (200), 128 threads (1000) and 256 threads over
/// a reduction long enough to carry a split form (100000, with enough rows not to split
/// by default).
const ROWS: [(usize, usize); 7] = [
    (37, 1),
    (37, 31),
    (37, 32),
    (37, 33),
    (37, 200),
    (37, 1000),
    (9, 100_000),
];

/// One graph per dtype: sum, max, min and mean over the last axis of one input per row
/// length (and a column reduction of few outputs, which also runs as work-groups), with
/// each output's reduction.
fn reductions(dt: DType) -> (Graph, Vec<ReduceOp>) {
    let mut g = Graph::new("shuffled_reductions");
    let (mut outs, mut kinds) = (Vec::new(), Vec::new());
    for (i, &(rows, len)) in ROWS.iter().enumerate() {
        let x = g.input(format!("x{i}"), Shape::new(&[rows, len], dt));
        for kind in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Mean] {
            outs.push(reduce(&mut g, kind, vec![1], false, x));
            kinds.push(kind);
        }
        if len == 1000 {
            outs.push(reduce(&mut g, ReduceOp::Sum, vec![0], false, x));
            kinds.push(ReduceOp::Sum);
        }
    }
    g.set_outputs(outs);
    (g, kinds)
}

/// Sums, max, min and means of f32/f64/i32/i64/f16 rows of 1 to 100000 elements, shuffled
/// and not: the same bits, the oracle's bits where the result does not depend on the
/// order, the oracle within tolerance elsewhere; the generated source shuffles (in the
/// target's dialect) only when asked to.
pub fn shuffled_reductions_match_unshuffled_and_the_oracle(t: &Target) {
    let mut rng = Rng::new(41);
    let dialect = t.gpu.dialect();
    for dt in [DType::F32, DType::F64, DType::I32, DType::I64, DType::F16] {
        let (g, kinds) = reductions(dt);
        let names: Vec<String> = g.input_names().iter().map(|n| n.to_string()).collect();
        let args: Vec<TensorData> = names
            .iter()
            .map(|n| random_data(&mut rng, g.shape(g.input_id(n).unwrap())))
            .collect();
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        let on = t.routed(&g, routing(true)).unwrap();
        let off = t.routed(&g, routing(false)).unwrap();
        let got = on.run(&views).unwrap();
        let want = off.run(&views).unwrap();
        let named: Vec<(&str, TensorData)> = names
            .iter()
            .zip(&args)
            .map(|(n, a)| (n.as_str(), a.clone()))
            .collect();
        let oracle = rlx_ir::interp::run(&g, &named).unwrap();
        for (o, ((a, b), r)) in got.iter().zip(&want).zip(&oracle).enumerate() {
            let what = format!("{dt:?} output {o} in {dialect:?}");
            assert_eq!(bits(a), bits(b), "{what}: shuffled != unshuffled bits");
            if dt.is_int() || matches!(kinds[o], ReduceOp::Max | ReduceOp::Min) {
                assert_eq!(bits(a), bits(r), "{what}: != oracle bits");
            }
        }
        check(&g, &args, &|g| t.routed(g, routing(true)));
        let program = rlx_runtime::compile_program(&g, &rlx_cuda::compile_options()).unwrap();
        let intrinsic = match dialect {
            Dialect::Cuda => "__shfl_xor_sync(0xffffffffu, ",
            Dialect::Hip => "__shfl_xor(",
        };
        let src = |shuffles| {
            generate_with(&program, dialect, CodegenOptions { shuffles })
                .unwrap()
                .source
        };
        assert!(src(true).contains(intrinsic), "{dt:?}: no {intrinsic}");
        assert!(
            !src(false).contains("__shfl_xor"),
            "{dt:?}: shuffles when off"
        );
    }
}

/// Softmax, log-softmax, layer norm and RMS norm over rows of 200 (32 threads), 1000
/// (128) and 5000 (256) columns: shuffled == unshuffled bit for bit, and the oracle.
pub fn shuffled_row_ops_match_unshuffled_and_the_oracle(t: &Target) {
    let mut rng = Rng::new(43);
    for c in [200usize, 1000, 5000] {
        let mut g = Graph::new("shuffled_rows");
        let x = g.input("x", Shape::new(&[6, c], DType::F32));
        let gm = g.input("g", Shape::new(&[c], DType::F32));
        let bt = g.input("b", Shape::new(&[c], DType::F32));
        let outs = vec![
            op(&mut g, Op::Softmax { axis: -1 }, vec![x]),
            op(&mut g, Op::LogSoftmax { axis: -1 }, vec![x]),
            op(
                &mut g,
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x, gm, bt],
            ),
            op(
                &mut g,
                Op::RmsNorm {
                    axis: -1,
                    eps: 1e-5,
                },
                vec![x, gm, bt],
            ),
        ];
        g.set_outputs(outs);
        let args: Vec<TensorData> = [x, gm, bt]
            .iter()
            .map(|&n| random_data(&mut rng, g.shape(n)))
            .collect();
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        let on = t.routed(&g, routing(true)).unwrap();
        let off = t.routed(&g, routing(false)).unwrap();
        let (a, b) = (on.run(&views).unwrap(), off.run(&views).unwrap());
        for (o, (a, b)) in a.iter().zip(&b).enumerate() {
            assert_eq!(bits(a), bits(b), "row op {o} over {c} columns");
        }
        check(&g, &args, &|g| t.routed(g, routing(true)));
    }
}
