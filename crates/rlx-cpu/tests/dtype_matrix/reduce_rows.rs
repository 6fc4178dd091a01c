//! Sums over leading axes into one short row (`[B, T, d] → [d]`, a bias gradient):
//! tiles span several rows, rows are cut into fixed blocks whose sums combine in block
//! order. Checked against the oracle (f64 sums) for f32 and f64, sums and means, with
//! an elementwise prologue, a broadcast operand, and row counts that do not divide into
//! tiles or blocks; and run to run bit-identical. Also reductions whose prologue reads
//! one value per row (a LayerNorm backward's mean and rstd) or a transposed view.

use super::cases::random;
use super::rng::Rng;
use rlx_cpu::CpuBackend;
use rlx_ir::{BinaryOp, DType, Graph, Op, ReduceOp, TensorData, interp};
use rlx_runtime::{Backend, Device};

fn reduce_graph(
    rng: &mut Rng,
    dims: &[usize],
    axes: Vec<usize>,
    rop: ReduceOp,
    dt: DType,
    with_prologue: bool,
) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("reduce_rows");
    let x = random(rng, dims, dt);
    let xi = g.input("x", x.shape());
    let mut args = vec![x];
    let body = if with_prologue {
        // x · y + s with y dense and s a broadcast row.
        let y = random(rng, dims, dt);
        let yi = g.input("y", y.shape());
        args.push(y);
        let row = random(rng, &[dims[dims.len() - 1]], dt);
        let ri = g.input("s", row.shape());
        args.push(row);
        let m = g.add_op(Op::Binary(BinaryOp::Mul), vec![xi, yi]).unwrap();
        g.add_op(Op::Binary(BinaryOp::Add), vec![m, ri]).unwrap()
    } else {
        xi
    };
    let r = g
        .add_op(
            Op::Reduce {
                op: rop,
                axes,
                keep_dim: false,
            },
            vec![body],
        )
        .unwrap();
    g.set_outputs(vec![r]);
    (g, args)
}

fn run(g: &Graph, args: &[TensorData]) -> TensorData {
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap().remove(0)
}

#[test]
fn leading_axis_sums_into_short_rows_match_the_oracle_and_repeat_bit_for_bit() {
    let mut rng = Rng::new(41);
    for (dims, axes) in [
        (vec![8, 128, 256], vec![0, 1]),
        (vec![1000, 512], vec![0]),
        (vec![3, 333, 24], vec![0, 1]),
        (vec![2, 700, 96], vec![1]),
        (vec![2, 3, 300, 40], vec![1, 2]),
    ] {
        for dt in [DType::F32, DType::F64] {
            for rop in [ReduceOp::Sum, ReduceOp::Mean] {
                for pro in [false, true] {
                    let (g, args) = reduce_graph(&mut rng, &dims, axes.clone(), rop, dt, pro);
                    let got = run(&g, &args);
                    let names = ["x", "y", "s"];
                    let named: Vec<(&str, &TensorData)> =
                        names.iter().copied().zip(args.iter()).collect();
                    let want = interp::run_refs(&g, &named).unwrap().remove(0);
                    assert_eq!(got.dims, want.dims);
                    let tol = if dt == DType::F32 { 1e-6 } else { 1e-12 };
                    for (i, (a, b)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
                        assert!(
                            (a - b).abs() <= tol * b.abs().max(1.0),
                            "{dims:?} {axes:?} {dt} {rop:?} prologue {pro}: [{i}] {a} vs {b}"
                        );
                    }
                    assert_eq!(run(&g, &args).bytes, got.bytes, "run to run");
                }
            }
        }
    }
}

#[test]
fn short_row_reductions_over_trailing_axes_match_the_oracle_for_every_reduce_op() {
    let mut rng = Rng::new(43);
    for (dims, axes) in [
        (vec![300, 256], vec![1]),
        (vec![7, 3, 100], vec![1, 2]),
        (vec![5, 9, 2, 50], vec![3]),
        (vec![4, 100, 768], vec![0, 1]),
    ] {
        for dt in [DType::F32, DType::F64, DType::I32] {
            for rop in [
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Prod,
            ] {
                if dt == DType::I32 && rop == ReduceOp::Mean {
                    continue;
                }
                for pro in [false, true] {
                    let (g, args) = reduce_graph(&mut rng, &dims, axes.clone(), rop, dt, pro);
                    let got = run(&g, &args);
                    let names = ["x", "y", "s"];
                    let named: Vec<(&str, &TensorData)> =
                        names.iter().copied().zip(args.iter()).collect();
                    let want = interp::run_refs(&g, &named).unwrap().remove(0);
                    assert_eq!(got.dims, want.dims);
                    if dt == DType::I32 {
                        assert_eq!(got.bytes, want.bytes, "{dims:?} {rop:?} prologue {pro}");
                        continue;
                    }
                    let tol = if dt == DType::F32 { 1e-5 } else { 1e-12 };
                    for (i, (a, b)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
                        assert!(
                            *a == b
                                || (a - b).abs() <= tol * b.abs().max(1.0)
                                || (a.is_nan() && b.is_nan()),
                            "{dims:?} {axes:?} {dt} {rop:?} prologue {pro}: [{i}] {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}

/// `Σ (x − m)·r + xᵀ` over `axes` of `dims` (rank 3, the last two equal): `m` and `r`
/// hold one value per row (`[.., 1]`, broadcast along the last axis, as a LayerNorm
/// backward's mean and rstd), `xᵀ` is a strided view (the last two axes swapped).
fn per_row_graph(
    rng: &mut Rng,
    dims: &[usize],
    axes: Vec<usize>,
    rop: ReduceOp,
    dt: DType,
) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("reduce_per_row");
    let mut args = Vec::new();
    let mut input = |g: &mut Graph, name: &str, d: &[usize]| {
        let t = random(rng, d, dt);
        let id = g.input(name, t.shape());
        args.push(t);
        id
    };
    let mut row_dims = dims.to_vec();
    *row_dims.last_mut().unwrap() = 1;
    let x = input(&mut g, "x", dims);
    let m = input(&mut g, "m", &row_dims);
    let r = input(&mut g, "r", &row_dims);
    let y = input(&mut g, "y", dims);
    let c = g.add_op(Op::Binary(BinaryOp::Sub), vec![x, m]).unwrap();
    let n = g.add_op(Op::Binary(BinaryOp::Mul), vec![c, r]).unwrap();
    let yt = g
        .add_op(
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            vec![y],
        )
        .unwrap();
    let body = g.add_op(Op::Binary(BinaryOp::Add), vec![n, yt]).unwrap();
    let out = g
        .add_op(
            Op::Reduce {
                op: rop,
                axes,
                keep_dim: false,
            },
            vec![body],
        )
        .unwrap();
    g.set_outputs(vec![out]);
    (g, args)
}

#[test]
fn reductions_reading_per_row_operands_and_strided_views_match_the_oracle() {
    // Row means of a LayerNorm backward (last axis, 256 and odd widths: several rows per
    // tile) and its gain gradient (leading axes into one row), with the per-row operands
    // and a transposed view read across the rows a tile spans.
    let mut rng = Rng::new(47);
    for (dims, axes) in [
        (vec![8, 256, 256], vec![2]),
        (vec![3, 100, 100], vec![2]),
        (vec![5, 37, 37], vec![2]),
        (vec![8, 128, 128], vec![0, 1]),
        (vec![2, 300, 300], vec![0, 1]),
    ] {
        for dt in [DType::F32, DType::F64] {
            for rop in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
                let (g, args) = per_row_graph(&mut rng, &dims, axes.clone(), rop, dt);
                let got = run(&g, &args);
                let names = ["x", "m", "r", "y"];
                let named: Vec<(&str, &TensorData)> =
                    names.iter().copied().zip(args.iter()).collect();
                let want = interp::run_refs(&g, &named).unwrap().remove(0);
                assert_eq!(got.dims, want.dims);
                let tol = if dt == DType::F32 { 1e-5 } else { 1e-12 };
                for (i, (a, b)) in got.to_f64_vec().iter().zip(want.to_f64_vec()).enumerate() {
                    assert!(
                        (a - b).abs() <= tol * b.abs().max(1.0),
                        "{dims:?} {axes:?} {dt} {rop:?}: [{i}] {a} vs {b}"
                    );
                }
                assert_eq!(run(&g, &args).bytes, got.bytes, "run to run");
            }
        }
    }
}
