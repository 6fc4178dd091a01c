//! Hand-written checks of the compiled CPU executor against the oracle and against
//! hand-computed values (the random differential suite is in `differential*.rs`).

use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, BinaryOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::{Backend, Device};
use rlx_testkit::{close, op, reduce, scalar, seq};

fn run(g: &Graph, args: &[TensorData]) -> Vec<TensorData> {
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap()
}

fn oracle(g: &Graph, args: &[TensorData]) -> Vec<TensorData> {
    rlx_testkit::oracle(g, args).unwrap()
}

/// Every output of the compiled `g` is within `tol` of the oracle's.
fn assert_matches_oracle(g: &Graph, args: &[TensorData], tol: f64) {
    let (got, want) = (run(g, args), oracle(g, args));
    assert_eq!(got.len(), want.len(), "output count");
    for (a, b) in got.iter().zip(&want) {
        close(a, b, tol);
    }
}

/// Layer norm (or RMS norm) of `x` over its last axis with scale `g` and shift `b`.
fn norm(graph: &mut Graph, rms: bool, x: NodeId, g: NodeId, b: NodeId) -> NodeId {
    let (axis, eps) = (-1, 1e-5);
    let o = if rms {
        Op::RmsNorm { axis, eps }
    } else {
        Op::LayerNorm { axis, eps }
    };
    op(graph, o, vec![x, g, b])
}

#[test]
fn w1_elementwise_chain_matches_the_oracle() {
    let n = 5000;
    let mut g = Graph::new("w1");
    let a = g.input("a", Shape::new(&[n], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let c = g.input("c", Shape::new(&[n], DType::F32));
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![a, b]);
    let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![s, c]);
    let h = scalar(&mut g, 0.5);
    let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![m, h]);
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![d]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![r]);
    g.set_outputs(vec![e]);
    let args = vec![
        TensorData::from_f32(&[n], &seq(n, 1.0)),
        TensorData::from_f32(&[n], &seq(n, 0.5)),
        TensorData::from_f32(&[n], &seq(n, 2.0)),
    ];
    close(&run(&g, &args)[0], &oracle(&g, &args)[0], 1e-6);
}

#[test]
fn reductions_over_any_axes_match_the_oracle() {
    for axes in [
        vec![0],
        vec![1],
        vec![2],
        vec![0, 2],
        vec![0, 1, 2],
        vec![1, 2],
    ] {
        for keep in [false, true] {
            for rop in [
                ReduceOp::Sum,
                ReduceOp::Mean,
                ReduceOp::Max,
                ReduceOp::Min,
                ReduceOp::Prod,
            ] {
                let mut g = Graph::new("r");
                let x = g.input("x", Shape::new(&[3, 70, 5], DType::F32));
                let e = op(&mut g, Op::Activation(Activation::Tanh), vec![x]);
                let r = reduce(&mut g, rop, axes.clone(), keep, e);
                let y = op(&mut g, Op::Activation(Activation::Neg), vec![r]);
                g.set_outputs(vec![y]);
                let args = vec![TensorData::from_f32(&[3, 70, 5], &seq(1050, 1.0))];
                close(&run(&g, &args)[0], &oracle(&g, &args)[0], 1e-5);
            }
        }
    }
}

#[test]
fn matmul_with_bias_and_activation_matches_the_oracle() {
    let mut g = Graph::new("mm");
    let x = g.input("x", Shape::new(&[2, 7, 5], DType::F32));
    let w = g.input("w", Shape::new(&[5, 6], DType::F32));
    let b = g.input("b", Shape::new(&[6], DType::F32));
    let y = op(
        &mut g,
        Op::FusedMatMulBiasAct {
            activation: Some(Activation::GeluApprox),
        },
        vec![x, w, b],
    );
    let t = op(
        &mut g,
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        vec![x],
    );
    let z = op(&mut g, Op::MatMul, vec![t, x]);
    g.set_outputs(vec![y, z]);
    let args = vec![
        TensorData::from_f32(&[2, 7, 5], &seq(70, 1.0)),
        TensorData::from_f32(&[5, 6], &seq(30, 0.7)),
        TensorData::from_f32(&[6], &seq(6, 0.3)),
    ];
    let (got, want) = (run(&g, &args), oracle(&g, &args));
    close(&got[0], &want[0], 1e-5);
    close(&got[1], &want[1], 1e-5);
}

#[test]
fn row_ops_match_the_oracle() {
    let mut g = Graph::new("rows");
    let x = g.input("x", Shape::new(&[5, 300], DType::F32));
    let gm = g.input("g", Shape::new(&[300], DType::F32));
    let bt = g.input("b", Shape::new(&[300], DType::F32));
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    let l = op(&mut g, Op::LogSoftmax { axis: 1 }, vec![x]);
    let n = norm(&mut g, false, x, gm, bt);
    let r = norm(&mut g, true, x, gm, bt);
    let s0 = op(&mut g, Op::Softmax { axis: 0 }, vec![x]);
    g.set_outputs(vec![s, l, n, r, s0]);
    let args = vec![
        TensorData::from_f32(&[5, 300], &seq(1500, 3.0)),
        TensorData::from_f32(&[300], &seq(300, 1.0)),
        TensorData::from_f32(&[300], &seq(300, 0.5)),
    ];
    assert_matches_oracle(&g, &args, 1e-5);
}

#[test]
fn opaque_ops_and_integer_errors_behave_like_the_oracle() {
    let mut g = Graph::new("cum");
    let x = g.input("x", Shape::new(&[4, 3], DType::I32));
    let y = g.input("y", Shape::new(&[4, 3], DType::I32));
    let c = op(
        &mut g,
        Op::Cumsum {
            axis: 0,
            exclusive: false,
        },
        vec![x],
    );
    let d = op(&mut g, Op::Binary(BinaryOp::Div), vec![c, y]);
    g.set_outputs(vec![d]);
    let xs = TensorData::from_i64_as(DType::I32, &[4, 3], &(0..12).collect::<Vec<_>>());
    let ys = TensorData::from_i64_as(DType::I32, &[4, 3], &(1..13).collect::<Vec<_>>());
    let args = vec![xs.clone(), ys];
    assert_eq!(run(&g, &args)[0], oracle(&g, &args)[0]);
    let zero = TensorData::from_i64_as(DType::I32, &[4, 3], &[0; 12]);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let err = exe.run(&[xs.view(), zero.view()]).unwrap_err().to_string();
    assert!(err.contains("division by zero"), "{err}");
}

#[test]
fn explain_lists_kernels_fused_ops_and_the_memory_plan() {
    let mut g = Graph::new("ex");
    let x = g.input("x", Shape::new(&[64, 64], DType::F32));
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![1], true, e);
    let d = op(&mut g, Op::Binary(BinaryOp::Div), vec![e, s]);
    g.set_outputs(vec![d]);
    let text = CpuBackend.compile(Device::Cpu, &g).unwrap().explain();
    assert!(text.contains("kernel 0"), "{text}");
    assert!(text.contains("reduce_sum"), "{text}");
    assert!(text.contains("peak arena"), "{text}");
    assert!(text.contains("cpu"), "{text}");
}

#[test]
fn dynamic_batch_dims_run_at_any_size_without_recompiling() {
    use rlx_ir::Dim;
    let mut g = Graph::new("dyn");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(5)], DType::F32),
    );
    let w = g.input("w", Shape::new(&[5, 3], DType::F32));
    let m = op(&mut g, Op::MatMul, vec![x, w]);
    let s = op(&mut g, Op::Softmax { axis: -1 }, vec![m]);
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![s]);
    let r = reduce(&mut g, ReduceOp::Sum, vec![1], false, t);
    g.set_outputs(vec![s, r]);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    for n in [1usize, 4, 33, 4, 1] {
        let args = vec![
            TensorData::from_f32(&[n, 5], &seq(n * 5, 1.0)),
            TensorData::from_f32(&[5, 3], &seq(15, 0.5)),
        ];
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        let got = exe.run(&views).unwrap();
        let want = oracle(&g, &args);
        assert_eq!(got[0].dims, vec![n, 3]);
        close(&got[0], &want[0], 1e-5);
        close(&got[1], &want[1], 1e-5);
    }
    let bad = TensorData::from_f32(&[2, 4], &[0.0; 8]);
    let w = TensorData::from_f32(&[5, 3], &[0.0; 15]);
    let err = exe.run(&[bad.view(), w.view()]).unwrap_err().to_string();
    assert!(err.contains("`x`"), "{err}");
}

#[test]
fn runs_are_bit_identical_across_calls() {
    let n = 300_000;
    let mut g = Graph::new("det");
    let x = g.input("x", Shape::new(&[n], DType::F32));
    let e = op(&mut g, Op::Activation(Activation::Sin), vec![x]);
    let s = reduce(&mut g, ReduceOp::Sum, vec![0], false, e);
    g.set_outputs(vec![s, e]);
    let args = vec![TensorData::from_f32(&[n], &seq(n, 3.0))];
    let first = run(&g, &args);
    for _ in 0..5 {
        assert_eq!(run(&g, &args), first);
    }
    close(&first[0], &oracle(&g, &args)[0], 1e-5);
}

/// Stored values are computed straight into their output buffers where nothing can
/// alias them: values that later nodes read again (the moments of an Adam-like update)
/// and the results of a matmul epilogue storing several values (the product lives in
/// one of their buffers) must still match the oracle exactly.
#[test]
fn values_computed_into_their_outputs_match_the_oracle() {
    let n = 3 * 1024 + 77;
    let mut g = Graph::new("direct");
    let sh = Shape::new(&[n], DType::F32);
    let (p, gr, m, v) = (
        g.input("p", sh.clone()),
        g.input("g", sh.clone()),
        g.input("m", sh.clone()),
        g.input("v", sh),
    );
    let bin = |g: &mut Graph, o: BinaryOp, a, b| op(g, Op::Binary(o), vec![a, b]);
    let m2 = bin(&mut g, BinaryOp::Add, m, gr);
    let gg = bin(&mut g, BinaryOp::Mul, gr, gr);
    let v2 = bin(&mut g, BinaryOp::Add, v, gg);
    let root = op(&mut g, Op::Activation(Activation::Sqrt), vec![v2]);
    let q = bin(&mut g, BinaryOp::Div, m2, root);
    let p2 = bin(&mut g, BinaryOp::Sub, p, q);
    g.set_outputs(vec![p2, m2, v2]);
    let args = vec![
        TensorData::from_f32(&[n], &seq(n, 1.0)),
        TensorData::from_f32(&[n], &seq(n, 0.3)),
        TensorData::from_f32(&[n], &seq(n, 0.2)),
        TensorData::from_f32(
            &[n],
            &seq(n, 0.1)
                .iter()
                .map(|x| x.abs() + 0.5)
                .collect::<Vec<_>>(),
        ),
    ];
    assert_matches_oracle(&g, &args, 0.0);

    // A matmul whose product lives in an output buffer its epilogue also computes into
    // (either output, by their order).
    for swap in [false, true] {
        let mut g = Graph::new("direct_mm");
        let x = g.input("x", Shape::new(&[37, 64], DType::F32));
        let w = g.input("w", Shape::new(&[64, 70], DType::F32));
        let y = op(&mut g, Op::MatMul, vec![x, w]);
        let r = op(&mut g, Op::Activation(Activation::Relu), vec![y]);
        let yy = bin(&mut g, BinaryOp::Mul, y, y);
        let s = bin(&mut g, BinaryOp::Add, yy, r);
        g.set_outputs(if swap { vec![s, r] } else { vec![r, s] });
        let args = vec![
            TensorData::from_f32(&[37, 64], &seq(37 * 64, 1.0)),
            TensorData::from_f32(&[64, 70], &seq(64 * 70, 0.5)),
        ];
        assert_matches_oracle(&g, &args, 1e-5);
    }
}

/// Rows shorter than a tile are processed several to a tile (prologue, statistics per
/// row, epilogue), and rows of a plain input are read in place: every row op over short
/// rows of odd lengths, with a broadcast prologue or none, with and without an epilogue,
/// in f32 and f64, with a row count that leaves a partial group, matches the oracle.
#[test]
fn short_rows_grouped_into_tiles_match_the_oracle() {
    for (c, dt) in [
        (10, DType::F32),
        (7, DType::F32),
        (1, DType::F32),
        (3, DType::F64),
    ] {
        let rows = 1027 / c + 300;
        let mut g = Graph::new("short_rows");
        let x = g.input("x", Shape::new(&[rows, c], dt));
        let b = g.input("b", Shape::new(&[c], dt));
        let e = g.input("e", Shape::new(&[rows, c], dt));
        let gm = g.input("g", Shape::new(&[c], dt));
        let bx = op(&mut g, Op::BroadcastLike, vec![b, x]);
        let pre = op(&mut g, Op::Binary(BinaryOp::Add), vec![x, bx]);
        let rows_of_pre = [
            op(&mut g, Op::Softmax { axis: -1 }, vec![pre]),
            op(&mut g, Op::LogSoftmax { axis: -1 }, vec![pre]),
            norm(&mut g, false, pre, gm, b),
            norm(&mut g, true, pre, gm, b),
        ];
        let mut outs: Vec<NodeId> = rows_of_pre
            .into_iter()
            .map(|y| op(&mut g, Op::Binary(BinaryOp::Mul), vec![y, e]))
            .collect();
        // Rows read where they lie (the prologue is a plain load), with and without an
        // epilogue.
        outs.push(op(&mut g, Op::Softmax { axis: -1 }, vec![x]));
        let ln = norm(&mut g, false, x, gm, b);
        outs.push(op(&mut g, Op::Binary(BinaryOp::Mul), vec![ln, e]));
        g.set_outputs(outs);
        let n = rows * c;
        let data = |v: Vec<f32>, dims: &[usize]| match dt {
            DType::F64 => {
                TensorData::from_f64(dims, &v.iter().map(|&x| x as f64).collect::<Vec<_>>())
            }
            _ => TensorData::from_f32(dims, &v),
        };
        let args = vec![
            data(seq(n, 3.0), &[rows, c]),
            data(seq(c, 0.5), &[c]),
            data(seq(n, 1.5), &[rows, c]),
            data(seq(c, 1.0), &[c]),
        ];
        assert_matches_oracle(&g, &args, 1e-5);
    }
}

/// Norm rows whose squares (or sums) leave the f32 range — one element of 3e26, a row of
/// values near f32::MAX — still match the oracle, which accumulates in f64.
#[test]
fn norms_over_rows_beyond_the_f32_square_range_match_the_oracle() {
    let c = 15;
    let mut g = Graph::new("huge_rows");
    let x = g.input("x", Shape::new(&[3, c], DType::F32));
    let gm = g.input("g", Shape::new(&[c], DType::F32));
    let b = g.input("b", Shape::new(&[c], DType::F32));
    let r = norm(&mut g, true, x, gm, b);
    let l = norm(&mut g, false, x, gm, b);
    g.set_outputs(vec![r, l]);
    let mut xs = seq(3 * c, 2.0);
    xs[5] = -2.97e26;
    xs[17] = 4.0e21;
    for v in &mut xs[2 * c..] {
        *v = if v.is_sign_negative() {
            -3.0e38
        } else {
            3.0e38
        };
    }
    let args = vec![
        TensorData::from_f32(&[3, c], &xs),
        TensorData::from_f32(&[c], &seq(c, 1.0)),
        TensorData::from_f32(&[c], &seq(c, 0.5)),
    ];
    assert_matches_oracle(&g, &args, 1e-5);
}

#[test]
fn gather_of_table_rows_reads_the_table_in_place_with_negative_and_bad_indices() {
    // The embedding-lookup shape: a dense [vocab, d] table, [1, S] indices on axis 0.
    let mut g = Graph::new("embed");
    let t = g.input("t", Shape::new(&[4, 3], DType::F32));
    let i = g.input("i", Shape::new(&[1, 3], DType::I64));
    let o = op(&mut g, Op::Gather { axis: 0 }, vec![t, i]);
    g.set_outputs(vec![o]);
    let table = TensorData::from_f32(&[4, 3], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    let idx = TensorData::from_i64(&[1, 3], &[2, -1, 0]);
    let out = run(&g, &[table.clone(), idx]);
    assert_eq!(out[0].dims, [1, 3, 3]);
    assert_eq!(
        out[0].to_f32_vec(),
        [6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0]
    );
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let bad = TensorData::from_i64(&[1, 3], &[0, 4, 1]);
    let err = exe
        .run(&[table.view(), bad.view()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("index 4 is out of range for axis 0 of size 4"),
        "{err}"
    );
}

/// `x · w` for an `x` of `x_dims` viewed through `view` (a transpose or narrow of the
/// input, or nothing) and a `w` of `w_dims`, in `dt`.
fn batched_product(
    (dt, scale): (DType, f32),
    x_dims: &[usize],
    view: Option<Op>,
    w_dims: &[usize],
) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("bmm");
    let x = g.input("x", Shape::new(x_dims, dt));
    let w = g.input("w", Shape::new(w_dims, dt));
    let xv = match view {
        Some(v) => op(&mut g, v, vec![x]),
        None => x,
    };
    let y = op(&mut g, Op::MatMul, vec![xv, w]);
    g.set_outputs(vec![y]);
    let data = |dims: &[usize], scale: f32| {
        let n = dims.iter().product();
        let v: Vec<f64> = seq(n, scale).iter().map(|&e| e as f64).collect();
        TensorData::from_f64_as(dt, dims, &v)
    };
    let args = vec![data(x_dims, scale), data(w_dims, 0.7 * scale)];
    (g, args)
}

#[test]
fn batched_products_with_a_shared_weight_match_the_oracle_whether_or_not_they_fold() {
    // Batches whose rows chain into one `(batch·m) × k` GEMM (contiguous activations,
    // size-1 batch axes, a broadcast weight with a leading 1) and batches that must stay
    // per-batch products (a transposed batch order, rows narrowed inside each batch, a
    // weight that differs per batch): every one equals the oracle, in f32, f64, bf16,
    // f16 (one rounding of an f32 sum vs the oracle's f64 sum: a format ulp) and i8
    // (exact, wrapping), with products large enough to run on every thread.
    let k = 40;
    // For `m` rows per batch: a shared weight over contiguous rows, a transposed batch
    // order (`m` rows each), rows narrowed to `narrow` inside each batch, a weight per
    // batch (`own` rows each). With 33 rows the products run in the GEMM (folded or per
    // batch); with a few (at most 12) f32 and bf16 take the matrix-vector kernels (B
    // read in place) batch by batch, through the same views.
    let with_rows =
        |m: usize, narrow: usize, own: usize| -> Vec<(Vec<usize>, Option<Op>, Vec<usize>)> {
            vec![
                (vec![3, 4, m, k], None, vec![k, 70]),
                (
                    vec![4, 3, m, k],
                    Some(Op::Transpose {
                        perm: vec![1, 0, 2, 3],
                    }),
                    vec![k, 70],
                ),
                (
                    vec![6, 50, k],
                    Some(Op::Narrow {
                        axis: 1,
                        start: 3,
                        len: narrow,
                    }),
                    vec![k, 70],
                ),
                (vec![6, own, k], None, vec![6, k, 70]),
            ]
        };
    let mut cases = with_rows(33, 41, 50);
    cases.push((vec![5, 1, 33, k], None, vec![1, k, 70]));
    cases.extend(with_rows(1, 1, 1));
    cases.extend(with_rows(5, 9, 9));
    for (dt, scale, tol) in [
        (DType::F32, 1.0, 1e-5),
        (DType::F64, 1.0, 1e-5),
        (DType::BF16, 1.0, 1e-2),
        (DType::F16, 1.0, 2e-3),
        (DType::I8, 60.0, 0.0),
    ] {
        for (x_dims, view, w_dims) in &cases {
            let (g, args) = batched_product((dt, scale), x_dims, view.clone(), w_dims);
            let (got, want) = (run(&g, &args), oracle(&g, &args));
            assert_eq!(got[0].dims, want[0].dims, "{dt}: {x_dims:?} · {w_dims:?}");
            close(&got[0], &want[0], tol);
        }
    }
}

/// Random values of every magnitude class the rope's vector path treats apart: ordinary,
/// zero, tiny (subnormal results in f32 and bf16), huge (overflowing products), ±∞ and NaN.
fn rope_values(n: usize, seed: u64, specials: bool) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
            match (specials, i % 37) {
                (true, 3) => 0.0,
                (true, 7) => u * 1e-39,
                (true, 11) => u * 3e38,
                (true, 13) => f64::INFINITY,
                (true, 17) => f64::NAN,
                (true, 19) => -0.0,
                _ => u * 4.0,
            }
        })
        .collect()
}

#[test]
fn rope_rotates_rows_in_place_with_the_oracles_bits() {
    use rlx_ir::RopeStyle;
    // (x dims, head_dim, n_rot, table width): whole heads of 32 (two 8-pair vector groups
    // per half), a partial rotation with scalar tail pairs and pass-through dimensions,
    // tables wider than half a rotation, and a [B, S, H, D] input.
    let shapes: [(&[usize], usize, usize, usize); 4] = [
        (&[2, 5, 96], 32, 32, 16),
        (&[1, 7, 48], 24, 20, 10),
        (&[1, 3, 64], 64, 48, 30),
        (&[2, 4, 3, 16], 16, 16, 8),
    ];
    for dt in [DType::F32, DType::BF16, DType::F16, DType::F64] {
        for style in [RopeStyle::NeoX, RopeStyle::GptJ] {
            for (si, &(dims, head_dim, n_rot, width)) in shapes.iter().enumerate() {
                for specials in [false, true] {
                    let seq = dims[1];
                    let mut g = Graph::new("rope");
                    let x = g.input("x", Shape::new(dims, dt));
                    let c = g.input("cos", Shape::new(&[seq, width], dt));
                    let s = g.input("sin", Shape::new(&[seq, width], dt));
                    let r = op(
                        &mut g,
                        Op::Rope {
                            head_dim,
                            n_rot,
                            style,
                        },
                        vec![x, c, s],
                    );
                    g.set_outputs(vec![r]);
                    let n: usize = dims.iter().product();
                    let seed = si as u64 * 31 + specials as u64;
                    let args = vec![
                        TensorData::from_f64_as(dt, dims, &rope_values(n, seed, specials)),
                        TensorData::from_f64_as(
                            dt,
                            &[seq, width],
                            &rope_values(seq * width, seed + 7, specials),
                        ),
                        TensorData::from_f64_as(
                            dt,
                            &[seq, width],
                            &rope_values(seq * width, seed + 9, false),
                        ),
                    ];
                    let (got, want) = (run(&g, &args), oracle(&g, &args));
                    assert_eq!(
                        got[0].bytes, want[0].bytes,
                        "rope {dt} {style:?} x {dims:?} head_dim {head_dim} n_rot {n_rot} specials {specials}"
                    );
                }
            }
        }
    }
}

#[test]
fn rope_of_a_transposed_view_and_of_bad_tables_behaves_like_the_oracle() {
    use rlx_ir::RopeStyle;
    let rope = Op::Rope {
        head_dim: 16,
        n_rot: 16,
        style: RopeStyle::NeoX,
    };
    // x read through a transpose (not dense): the generic path, same bits.
    let mut g = Graph::new("rope_view");
    let x = g.input("x", Shape::new(&[1, 32, 6], DType::F32));
    let xt = op(
        &mut g,
        Op::Transpose {
            perm: vec![0, 2, 1],
        },
        vec![x],
    );
    let c = g.input("cos", Shape::new(&[6, 8], DType::F32));
    let s = g.input("sin", Shape::new(&[6, 8], DType::F32));
    let r = op(&mut g, rope.clone(), vec![xt, c, s]);
    g.set_outputs(vec![r]);
    let args = vec![
        TensorData::from_f64_as(DType::F32, &[1, 32, 6], &rope_values(192, 1, false)),
        TensorData::from_f64_as(DType::F32, &[6, 8], &rope_values(48, 2, false)),
        TensorData::from_f64_as(DType::F32, &[6, 8], &rope_values(48, 3, false)),
    ];
    assert_eq!(run(&g, &args)[0].bytes, oracle(&g, &args)[0].bytes);
    // A table too short for the sequence is refused when the graph is built, naming the
    // op and both shapes (so no kernel can read past the table).
    let mut g = Graph::new("rope_short_table");
    let x = g.input("x", Shape::new(&[1, 6, 32], DType::F32));
    let c = g.input("cos", Shape::new(&[4, 8], DType::F32));
    let s = g.input("sin", Shape::new(&[4, 8], DType::F32));
    let err = g.add_op(rope, vec![x, c, s]).unwrap_err().to_string();
    assert!(
        err.contains("rope") && err.contains("[4, 8]") && err.contains("6 positions"),
        "{err}"
    );
}

/// `cast(row_op(cast(x, f32)), dt)` over `[rows, c]` half data, with `x` read either
/// densely or through a transpose of a `[c, rows]` input.
fn half_row_graph(
    dt: DType,
    norm_op: Option<bool>,
    rows: usize,
    c: usize,
    transposed: bool,
) -> Graph {
    let mut g = Graph::new("half_rows");
    let x = if transposed {
        let xt = g.input("x", Shape::new(&[c, rows], dt));
        op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![xt])
    } else {
        g.input("x", Shape::new(&[rows, c], dt))
    };
    let x32 = op(&mut g, Op::Cast { to: DType::F32 }, vec![x]);
    let y = match norm_op {
        Some(rms) => {
            let gamma = g.input("gamma", Shape::new(&[c], DType::F32));
            let beta = g.input("beta", Shape::new(&[c], DType::F32));
            norm(&mut g, rms, x32, gamma, beta)
        }
        None => op(&mut g, Op::Softmax { axis: -1 }, vec![x32]),
    };
    let out = op(&mut g, Op::Cast { to: dt }, vec![y]);
    g.set_outputs(vec![out]);
    g
}

#[test]
fn half_precision_rows_read_and_written_in_place_match_the_generic_path_bit_for_bit() {
    let (rows, c) = (70, 200);
    for dt in [DType::BF16, DType::F16] {
        for norm_op in [Some(true), Some(false), None] {
            let vals: Vec<f64> = (0..rows * c)
                .map(|i| ((i * 37 % 101) as f64 - 50.0) / 13.0)
                .collect();
            let dense = TensorData::from_f64_as(dt, &[rows, c], &vals);
            // The same matrix stored transposed, for the generic path.
            let mut tvals = vec![0.0; rows * c];
            for r in 0..rows {
                for j in 0..c {
                    tvals[j * rows + r] = vals[r * c + j];
                }
            }
            let stored_t = TensorData::from_f64_as(dt, &[c, rows], &tvals);
            let params: Vec<TensorData> = if norm_op.is_some() {
                vec![
                    TensorData::from_f32(&[c], &seq(c, 0.5)),
                    TensorData::from_f32(&[c], &seq(c, -0.25)),
                ]
            } else {
                Vec::new()
            };
            let args = |x: TensorData| -> Vec<TensorData> {
                std::iter::once(x).chain(params.iter().cloned()).collect()
            };
            let fast = half_row_graph(dt, norm_op, rows, c, false);
            let generic = half_row_graph(dt, norm_op, rows, c, true);
            let a = run(&fast, &args(dense.clone()));
            let b = run(&generic, &args(stored_t));
            assert_eq!(
                a[0].bytes, b[0].bytes,
                "{dt} {norm_op:?}: in-place rows differ from the generic path"
            );
            close(&a[0], &oracle(&fast, &args(dense))[0], 2.0 * 2f64.powi(-7));
        }
    }
}
