//! The loop IR against the `rlx-ir` oracle: programs are compiled, every kernel is
//! lowered with `loops::lower_kernel`, run by the loop IR's reference interpreter in
//! kernel order over host buffers, and the outputs compared with `interp::run`.
//!
//! f32 chains of `+ − · /` and every view must match bit for bit (one f32 rounding
//! per op either way); transcendental activations within a few f32 ulps (the oracle
//! evaluates in f64), with NaN, ±∞ and the sign of zero exactly as the oracle gives them.

/// Argmax/argmin lowered as reductions (every tree shape, with and without shuffles).
#[path = "loops/arg.rs"]
mod arg;

use rlx_compile::loops::eval::HostBuf;
use rlx_compile::loops::{self, Dialect, LowerError};
use rlx_compile::program::{BufKind, Program};
use rlx_compile::{CompileOptions, compile};
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, DimBinding, Graph, NodeId, Op, Shape, TensorData,
    interp,
};

/// Run every kernel of `p` through the loop IR; inputs by argument name.
fn run_loops(p: &Program, inputs: &[(&str, TensorData)], binding: &DimBinding) -> Vec<TensorData> {
    try_run_loops(p, inputs, binding).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_loops`], with a kernel's run-time error as `Err`.
fn try_run_loops(
    p: &Program,
    inputs: &[(&str, TensorData)],
    binding: &DimBinding,
) -> Result<Vec<TensorData>, String> {
    let bound = |s: &Shape| -> Vec<usize> {
        s.dims()
            .iter()
            .map(|d| d.resolve(binding).expect("every dim bound"))
            .collect()
    };
    let host_of = |d: &TensorData| {
        if d.dtype.is_int() {
            HostBuf::Int(d.to_i64_vec())
        } else {
            HostBuf::Float(d.to_f64_vec())
        }
    };
    let mut host: Vec<HostBuf> = p
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufKind::Arg(i) => {
                let name = &p.args[*i].0;
                let (_, d) = inputs
                    .iter()
                    .find(|(n, _)| n == name)
                    .unwrap_or_else(|| panic!("no input `{name}`"));
                host_of(d)
            }
            BufKind::Const(bytes) => host_of(
                &TensorData::new(b.shape.dtype(), &bound(&b.shape), bytes.clone())
                    .expect("constant bytes"),
            ),
            BufKind::Temp | BufKind::Output(_) => {
                HostBuf::zeros(b.shape.dtype(), bound(&b.shape).iter().product())
            }
        })
        .collect();
    for k in 0..p.kernels.len() {
        let lk = loops::lower_kernel(p, k).unwrap_or_else(|e| panic!("{e}"));
        // The renderer accepts every lowered kernel.
        let src = loops::render_c(&lk, Dialect::Cuda);
        assert!(src.contains(&lk.name), "{src}");
        let mut slots: Vec<HostBuf> = lk
            .bufs
            .iter()
            .map(|b| std::mem::replace(&mut host[b.buf], HostBuf::Int(Vec::new())))
            .collect();
        loops::eval::run(&lk, &mut slots, binding)?;
        for (b, v) in lk.bufs.iter().zip(slots) {
            host[b.buf] = v;
        }
    }
    Ok(p.outputs
        .iter()
        .map(|&o| {
            let b = &p.buffers[o];
            let dims = bound(&b.shape);
            match &host[o] {
                HostBuf::Int(v) => TensorData::from_i64_as(b.shape.dtype(), &dims, v),
                HostBuf::Float(v) => TensorData::from_f64_as(b.shape.dtype(), &dims, v),
            }
        })
        .collect())
}

/// Add `o` to `g` (the test graphs are valid by construction).
fn op(g: &mut Graph, o: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(o, inputs).unwrap_or_else(|e| panic!("{e}"))
}

fn oracle(g: &Graph, inputs: &[(&str, TensorData)]) -> Vec<TensorData> {
    interp::run(g, inputs).unwrap_or_else(|e| panic!("oracle: {e}"))
}

fn compiled(g: &Graph) -> Program {
    compile(g, &CompileOptions::default()).unwrap_or_else(|e| panic!("compile: {e}"))
}

/// Same bits (NaN payloads aside).
fn same_bits_f32(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits();
        assert!(ok, "{what}: element {i}: loop IR {g:?}, oracle {w:?}");
    }
}

/// Within `ulps` f32 ulps of the oracle, NaN/∞/signed zero exact.
fn close_f32(got: &[f32], want: &[f32], ulps: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || w.is_infinite() || *w == 0.0 {
            let ok = (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits();
            assert!(
                ok,
                "{what}: element {i}: loop IR {g:?}, oracle {w:?} (exact expected)"
            );
            continue;
        }
        let tol = ulps * f32::EPSILON * w.abs().max(f32::MIN_POSITIVE);
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: loop IR {g:?}, oracle {w:?} (> {ulps} ulps)"
        );
    }
}

/// Interesting f32 inputs: the specials, kinks, and a spread of ordinary values.
fn probe_values() -> Vec<f32> {
    let mut v = vec![
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        3.0,
        -3.0,
        0.5,
        -0.5,
        1e-30,
        -1e-30,
        20.0,
        -20.0,
        88.0,
        -88.0,
        1e30,
        -1e30,
    ];
    let mut s = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..45 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.push(((s >> 11) as f64 / (1u64 << 53) as f64 * 16.0 - 8.0) as f32);
    }
    v
}

#[test]
fn every_activation_matches_the_oracle_at_specials_kinks_and_ordinary_values() {
    let xs = probe_values();
    for a in Activation::ALL {
        let mut g = Graph::new("act");
        let x = g.input("x", Shape::new(&[xs.len()], DType::F32));
        let y = op(&mut g, Op::Activation(a), vec![x]);
        g.set_outputs(vec![y]);
        let inputs = [("x", TensorData::from_f32(&[xs.len()], &xs))];
        let want = oracle(&g, &inputs)[0].to_f32_vec();
        let got = run_loops(&compiled(&g), &inputs, &DimBinding::new())[0].to_f32_vec();
        // Compositions (gelu via erfc, mish via tanh∘softplus…) round several times in f32.
        let ulps = match a {
            Activation::Relu
            | Activation::Neg
            | Activation::Abs
            | Activation::Floor
            | Activation::Ceil
            | Activation::Round
            | Activation::Sign
            | Activation::Sqrt
            | Activation::Recip => 0.5,
            _ => 64.0,
        };
        close_f32(&got, &want, ulps, &format!("{a:?}"));
    }
}

#[test]
fn binary_ops_match_the_oracle_including_nan_and_signed_zero_rules() {
    let xs = probe_values();
    let n = xs.len();
    let ys: Vec<f32> = xs.iter().rev().copied().collect();
    for (bop, exact) in [
        (BinaryOp::Add, true),
        (BinaryOp::Sub, true),
        (BinaryOp::Mul, true),
        (BinaryOp::Div, true),
        (BinaryOp::Max, true),
        (BinaryOp::Min, true),
        (BinaryOp::Mod, true),
        (BinaryOp::Pow, false),
        (BinaryOp::Atan2, false),
    ] {
        let mut g = Graph::new("bin");
        let a = g.input("a", Shape::new(&[n], DType::F32));
        let b = g.input("b", Shape::new(&[n], DType::F32));
        let y = op(&mut g, Op::Binary(bop), vec![a, b]);
        g.set_outputs(vec![y]);
        let inputs = [
            ("a", TensorData::from_f32(&[n], &xs)),
            ("b", TensorData::from_f32(&[n], &ys)),
        ];
        let want = oracle(&g, &inputs)[0].to_f32_vec();
        let got = run_loops(&compiled(&g), &inputs, &DimBinding::new())[0].to_f32_vec();
        if exact {
            same_bits_f32(&got, &want, bop.name());
        } else {
            close_f32(&got, &want, 8.0, bop.name());
        }
    }
    // max/min of ±0 in both orders: +0 for max, −0 for min, as the oracle says.
    let zeros = [0.0f32, -0.0, -0.0, 0.0];
    let flip = [-0.0f32, 0.0, -0.0, 0.0];
    for bop in [BinaryOp::Max, BinaryOp::Min] {
        let mut g = Graph::new("zeros");
        let a = g.input("a", Shape::new(&[4], DType::F32));
        let b = g.input("b", Shape::new(&[4], DType::F32));
        let y = op(&mut g, Op::Binary(bop), vec![a, b]);
        g.set_outputs(vec![y]);
        let inputs = [
            ("a", TensorData::from_f32(&[4], &zeros)),
            ("b", TensorData::from_f32(&[4], &flip)),
        ];
        let want = oracle(&g, &inputs)[0].to_f32_vec();
        let got = run_loops(&compiled(&g), &inputs, &DimBinding::new())[0].to_f32_vec();
        same_bits_f32(&got, &want, bop.name());
    }
}

fn data(dims: &[usize], seed: usize) -> TensorData {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 37 + seed * 11) % 23) as f32 / 4.0 - 2.5)
        .collect();
    TensorData::from_f32(dims, &v)
}

#[test]
fn fused_views_transpose_narrow_broadcast_and_reshape_of_a_transpose_read_the_right_elements() {
    // y = reshape(transpose(a)) · narrow(b) + bias (broadcast), then compared, selected.
    let mut g = Graph::new("views");
    let a = g.input("a", Shape::new(&[4, 6], DType::F32));
    let b = g.input("b", Shape::new(&[3, 10], DType::F32));
    let bias = g.input("bias", Shape::new(&[8], DType::F32));
    let at = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![a]); // [6, 4]
    let ar = op(
        &mut g,
        Op::Reshape {
            new_shape: vec![3, 8],
        },
        vec![at],
    ); // a reshape of a transposed view: no strided form
    let bn = op(
        &mut g,
        Op::Narrow {
            axis: 1,
            start: 1,
            len: 8,
        },
        vec![b],
    ); // [3, 8]
    let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![ar, bn]);
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![m, bias]); // bias broadcasts
    let c = op(&mut g, Op::Compare(CmpOp::Gt), vec![s, bn]);
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![s]);
    let y = op(&mut g, Op::Where, vec![c, s, r]);
    let yt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![y]);
    let z = op(&mut g, Op::Binary(BinaryOp::Div), vec![yt, yt]);
    g.set_outputs(vec![y, z]);
    let inputs = [
        ("a", data(&[4, 6], 1)),
        ("b", data(&[3, 10], 2)),
        ("bias", data(&[8], 3)),
    ];
    let want = oracle(&g, &inputs);
    let got = run_loops(&compiled(&g), &inputs, &DimBinding::new());
    for (i, (gv, wv)) in got.iter().zip(&want).enumerate() {
        assert_eq!(gv.dims, wv.dims, "output {i} dims");
        same_bits_f32(&gv.to_f32_vec(), &wv.to_f32_vec(), &format!("output {i}"));
    }
}

#[test]
fn dynamic_dims_become_kernel_parameters_bound_per_run() {
    // x: [?0, 5], scale: [1, 5] broadcast over the dynamic axis; narrow + transpose too.
    let mut g = Graph::new("dyn");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(5)], DType::F32),
    );
    let sc = g.input("scale", Shape::new(&[1, 5], DType::F32));
    let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, sc]);
    let n = op(
        &mut g,
        Op::Narrow {
            axis: 1,
            start: 2,
            len: 3,
        },
        vec![m],
    );
    let t = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![n]);
    let e = op(&mut g, Op::Activation(Activation::Tanh), vec![t]);
    g.set_outputs(vec![e]);
    let p = compiled(&g);
    let lk = loops::lower_kernel(&p, p.kernels.len() - 1).expect("lowered");
    assert_eq!(lk.dims, vec![0], "the dynamic symbol is a parameter");
    assert!(loops::render_c(&lk, Dialect::Hip).contains("i64 d0"));
    for rows in [1usize, 3, 7] {
        let inputs = [("x", data(&[rows, 5], rows)), ("scale", data(&[1, 5], 9))];
        let binding =
            interp::bind_dims(&g, &inputs.iter().map(|(n, d)| (*n, d)).collect::<Vec<_>>())
                .expect("bind");
        let want = oracle(&g, &inputs)[0].to_f32_vec();
        let got = run_loops(&p, &inputs, &binding)[0].to_f32_vec();
        close_f32(&got, &want, 4.0, &format!("rows = {rows}"));
    }
}

#[test]
fn half_precision_chains_round_after_every_op_like_the_oracle() {
    for dt in [DType::F16, DType::BF16] {
        let mut g = Graph::new("half");
        let a = g.input("a", Shape::new(&[64], dt));
        let b = g.input("b", Shape::new(&[64], dt));
        let s = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, b]);
        let t = op(&mut g, Op::Binary(BinaryOp::Add), vec![s, a]);
        let u = op(&mut g, Op::Activation(Activation::Sigmoid), vec![t]);
        let w = op(&mut g, Op::Cast { to: DType::F32 }, vec![u]);
        let back = op(&mut g, Op::Cast { to: dt }, vec![t]);
        g.set_outputs(vec![w, back]);
        let cast = |d: TensorData| TensorData::from_f64_as(dt, &d.dims, &d.to_f64_vec());
        let inputs = [("a", cast(data(&[64], 4))), ("b", cast(data(&[64], 5)))];
        let want = oracle(&g, &inputs);
        let got = run_loops(&compiled(&g), &inputs, &DimBinding::new());
        // The products and sums of these short values are exact in f32, so the per-op
        // rounding gives the oracle's bits; sigmoid is within one unit of the format.
        same_bits_f32(
            &got[1].to_f32_vec(),
            &want[1].to_f32_vec(),
            &format!("{dt:?} t"),
        );
        let unit = if dt == DType::F16 {
            1.0 / 1024.0
        } else {
            1.0 / 128.0
        };
        for (i, (g, w)) in got[0]
            .to_f32_vec()
            .iter()
            .zip(want[0].to_f32_vec())
            .enumerate()
        {
            assert!(
                (g - w).abs() <= unit * w.abs(),
                "{dt:?} sigmoid {i}: {g} vs {w}"
            );
        }
    }
}

/// Compile with the row ops kept whole (as the GPU backends do).
fn compiled_keeping_rows(g: &Graph) -> Program {
    let opts = CompileOptions {
        keep_whole: ["softmax", "log_softmax", "layer_norm", "rms_norm"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    };
    compile(g, &opts).unwrap_or_else(|e| panic!("compile: {e}"))
}

fn labels(p: &Program) -> Vec<String> {
    p.kernels.iter().map(|k| k.label()).collect()
}

#[test]
fn reductions_over_any_axes_with_fused_prologue_and_epilogue_match_the_oracle() {
    use rlx_ir::ReduceOp;
    for (op_kind, axes, keep_dim) in [
        (ReduceOp::Sum, vec![1], false),
        (ReduceOp::Mean, vec![0, 2], true),
        (ReduceOp::Max, vec![2], false),
        (ReduceOp::Min, vec![0], true),
        (ReduceOp::Prod, vec![1, 2], false),
        (ReduceOp::Sum, vec![0, 1, 2], false),
    ] {
        let mut g = Graph::new("red");
        let x = g.input("x", Shape::new(&[3, 4, 5], DType::F32));
        let xt = op(
            &mut g,
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            vec![x],
        );
        let xt = op(
            &mut g,
            Op::Transpose {
                perm: vec![0, 2, 1],
            },
            vec![xt],
        );
        let e = op(&mut g, Op::Activation(Activation::Tanh), vec![xt]);
        let r = op(
            &mut g,
            Op::Reduce {
                op: op_kind,
                axes: axes.clone(),
                keep_dim,
            },
            vec![e],
        );
        let y = op(&mut g, Op::Activation(Activation::Exp), vec![r]);
        g.set_outputs(vec![y]);
        let p = compiled(&g);
        assert!(
            labels(&p).iter().any(|l| l.starts_with("reduce_")),
            "{:?}",
            labels(&p)
        );
        let inputs = [("x", data(&[3, 4, 5], 6))];
        let want = oracle(&g, &inputs)[0].to_f32_vec();
        let got = run_loops(&p, &inputs, &DimBinding::new());
        assert_eq!(got[0].dims, oracle(&g, &inputs)[0].dims);
        // f32 accumulation in order against the oracle's f64 sum.
        close_f32(
            &got[0].to_f32_vec(),
            &want,
            64.0,
            &format!("{op_kind:?} {axes:?}"),
        );
    }
    // A NaN in a group makes its max NaN; other groups are unaffected.
    let mut g = Graph::new("nanmax");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let r = op(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Max,
            axes: vec![1],
            keep_dim: false,
        },
        vec![x],
    );
    g.set_outputs(vec![r]);
    let inputs = [(
        "x",
        TensorData::from_f32(&[2, 3], &[1.0, f32::NAN, 3.0, -1.0, -2.0, -0.5]),
    )];
    let got = run_loops(&compiled(&g), &inputs, &DimBinding::new())[0].to_f32_vec();
    same_bits_f32(&got, &oracle(&g, &inputs)[0].to_f32_vec(), "max with NaN");
}

#[test]
fn row_ops_softmax_log_softmax_layer_norm_and_rms_norm_match_the_oracle() {
    let (rows, c) = (6usize, 9usize);
    let mut g = Graph::new("rows");
    let x = g.input("x", Shape::new(&[2, 3, c], DType::F32));
    let gamma = g.input("gamma", Shape::new(&[c], DType::F32));
    let beta = g.input("beta", Shape::new(&[c], DType::F32));
    let x2 = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, x]);
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x2]);
    let ln = op(
        &mut g,
        Op::LayerNorm {
            axis: -1,
            eps: 1e-5,
        },
        vec![x, gamma, beta],
    );
    let rn = op(
        &mut g,
        Op::RmsNorm {
            axis: -1,
            eps: 1e-6,
        },
        vec![x2, gamma, beta],
    );
    let out = op(&mut g, Op::Activation(Activation::Silu), vec![ln]);
    let lsm = op(&mut g, Op::LogSoftmax { axis: -1 }, vec![x]);
    g.set_outputs(vec![sm, out, rn, lsm]);
    let p = compiled_keeping_rows(&g);
    let ls = labels(&p);
    for want in ["softmax", "layer_norm", "rms_norm", "log_softmax"] {
        assert!(ls.iter().any(|l| l == want), "no {want} kernel in {ls:?}");
    }
    let inputs = [
        ("x", data(&[2, 3, c], 7)),
        ("gamma", data(&[c], 8)),
        ("beta", data(&[c], 9)),
    ];
    let want = oracle(&g, &inputs);
    let got = run_loops(&p, &inputs, &DimBinding::new());
    for i in 0..4 {
        assert_eq!(got[i].dims, want[i].dims);
        let (gv, wv) = (got[i].to_f32_vec(), want[i].to_f32_vec());
        assert_eq!(gv.len(), rows * c);
        for (j, (a, b)) in gv.iter().zip(&wv).enumerate() {
            assert!(
                (a - b).abs() <= 2e-5 * b.abs().max(1.0),
                "output {i} element {j}: loop IR {a}, oracle {b}"
            );
        }
    }
    // A row holding +∞ is NaN throughout, like the oracle's max-shifted softmax.
    let mut g = Graph::new("infrow");
    let x = g.input("x", Shape::new(&[2, 3], DType::F32));
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    g.set_outputs(vec![sm]);
    let inputs = [(
        "x",
        TensorData::from_f32(&[2, 3], &[1.0, f32::INFINITY, 3.0, 0.0, 1.0, 2.0]),
    )];
    let got = run_loops(&compiled_keeping_rows(&g), &inputs, &DimBinding::new())[0].to_f32_vec();
    let want = oracle(&g, &inputs)[0].to_f32_vec();
    for j in 0..3 {
        assert!(got[j].is_nan() && want[j].is_nan(), "{got:?} vs {want:?}");
    }
    close_f32(&got[3..], &want[3..], 8.0, "the finite row");
}

#[test]
fn batched_matmuls_with_broadcast_batch_transposed_operands_and_epilogues_match_the_oracle() {
    // [2, 3, 4, 5] · broadcast [5, 6] (no batch), then a bias and relu in the epilogue.
    let mut g = Graph::new("mm");
    let a = g.input("a", Shape::new(&[2, 3, 4, 5], DType::F32));
    let b = g.input("b", Shape::new(&[6, 5], DType::F32));
    let bias = g.input("bias", Shape::new(&[6], DType::F32));
    let bt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![b]);
    let y = op(&mut g, Op::MatMul, vec![a, bt]);
    let y = op(&mut g, Op::Binary(BinaryOp::Add), vec![y, bias]);
    let y = op(&mut g, Op::Activation(Activation::Relu), vec![y]);
    // A batched product with a size-1 batch axis that broadcasts.
    let c = g.input("c", Shape::new(&[1, 3, 5, 2], DType::F32));
    let z = op(&mut g, Op::MatMul, vec![a, c]);
    g.set_outputs(vec![y, z]);
    let p = compiled(&g);
    assert!(labels(&p).iter().any(|l| l == "matmul"), "{:?}", labels(&p));
    let inputs = [
        ("a", data(&[2, 3, 4, 5], 10)),
        ("b", data(&[6, 5], 11)),
        ("bias", data(&[6], 12)),
        ("c", data(&[1, 3, 5, 2], 13)),
    ];
    let want = oracle(&g, &inputs);
    let got = run_loops(&p, &inputs, &DimBinding::new());
    for i in 0..2 {
        assert_eq!(got[i].dims, want[i].dims);
        // Products of quarter-integers sum exactly in f32.
        same_bits_f32(
            &got[i].to_f32_vec(),
            &want[i].to_f32_vec(),
            &format!("output {i}"),
        );
    }
}

#[test]
fn kernels_the_loop_ir_cannot_express_yet_are_named_errors() {
    let mut g = Graph::new("fft");
    let a = g.input("a", Shape::new(&[4, 16], DType::F32));
    let fft = Op::Fft {
        inverse: false,
        norm: rlx_ir::FftNorm::Backward,
        algo: rlx_ir::FftAlgo::Native,
    };
    let y = op(&mut g, fft, vec![a]);
    g.set_outputs(vec![y]);
    let p = compiled(&g);
    let k = p
        .kernels
        .iter()
        .position(|k| k.label().starts_with("opaque"))
        .expect("an FFT runs as an opaque kernel");
    let e = loops::lower_kernel(&p, k).expect_err("opaque kernels are not lowered");
    let LowerError::Unsupported { label, .. } = &e;
    assert!(label.starts_with("opaque"), "{label}");
    assert!(e.to_string().contains("not lowered"), "{e}");
}

/// Small integers of every sign, the dtype's extremes, and values past them.
fn int_values(dt: DType, n: usize, seed: i64) -> Vec<i64> {
    let (lo, hi): (i64, i64) = match dt {
        DType::I8 => (-128, 127),
        DType::I16 => (-32768, 32767),
        DType::I32 => (i32::MIN as i64, i32::MAX as i64),
        DType::U8 => (0, 255),
        DType::U32 => (0, u32::MAX as i64),
        _ => (i64::MIN, i64::MAX),
    };
    let mut v = vec![lo, hi, 0, 1, lo + 1, hi - 1];
    if lo < 0 {
        v.extend([-1, -2, -7]);
    }
    let mut s = seed as u64 | 1;
    while v.len() < n {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        let r = (s % 19) as i64 - 9;
        v.push(if lo < 0 { r } else { r.abs() });
    }
    v.truncate(n);
    v
}

#[test]
fn integer_arithmetic_wraps_and_shifts_and_casts_exactly_like_the_oracle() {
    let n = 24;
    for dt in [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
    ] {
        let mut g = Graph::new("ints");
        let a = g.input("a", Shape::new(&[n], dt));
        let b = g.input("b", Shape::new(&[n], dt));
        let sh = g.input("sh", Shape::new(&[n], dt));
        let mut outs = Vec::new();
        for bop in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Max,
            BinaryOp::Min,
            BinaryOp::BitAnd,
            BinaryOp::BitOr,
            BinaryOp::BitXor,
            BinaryOp::Div,
            BinaryOp::Mod,
        ] {
            outs.push(op(&mut g, Op::Binary(bop), vec![a, b]));
        }
        for bop in [BinaryOp::Shl, BinaryOp::Shr, BinaryOp::Pow] {
            outs.push(op(&mut g, Op::Binary(bop), vec![a, sh]));
        }
        for act in [
            Activation::Neg,
            Activation::Abs,
            Activation::Relu,
            Activation::Sign,
            Activation::Floor,
        ] {
            outs.push(op(&mut g, Op::Activation(act), vec![a]));
        }
        for to in [
            DType::I8,
            DType::U8,
            DType::I32,
            DType::I64,
            DType::F32,
            DType::F64,
            DType::Bool,
        ] {
            outs.push(op(&mut g, Op::Cast { to }, vec![a]));
        }
        outs.push(op(&mut g, Op::Compare(CmpOp::Lt), vec![a, b]));
        g.set_outputs(outs);
        let av = int_values(dt, n, 3);
        // Divisors without zero (the zero case is an error, tested below); −1 included.
        let bv: Vec<i64> = int_values(dt, n, 5)
            .into_iter()
            .rev()
            .map(|x| match (x, dt) {
                (0, DType::U8 | DType::U32) => 1,
                (0, _) => -1,
                _ => x,
            })
            .collect();
        // Shift amounts and exponents 0..=width+2 (past the width on purpose).
        let width = (dt.size_bytes() * 8) as i64;
        let shv: Vec<i64> = (0..n as i64).map(|i| (i * 5) % (width + 3)).collect();
        let shv: Vec<i64> = shv
            .into_iter()
            .map(|x| {
                if dt == DType::I8 || dt == DType::U8 {
                    x.min(127)
                } else {
                    x
                }
            })
            .collect();
        let inputs = [
            ("a", TensorData::from_i64_as(dt, &[n], &av)),
            ("b", TensorData::from_i64_as(dt, &[n], &bv)),
            ("sh", TensorData::from_i64_as(dt, &[n], &shv)),
        ];
        let want = oracle(&g, &inputs);
        let got = run_loops(&compiled(&g), &inputs, &DimBinding::new());
        for (i, (gv, wv)) in got.iter().zip(&want).enumerate() {
            assert_eq!(gv.dtype, wv.dtype);
            assert_eq!(
                gv.bytes,
                wv.bytes,
                "{dt:?} output {i}: {:?} vs {:?}",
                gv.to_f64_vec(),
                wv.to_f64_vec()
            );
        }
    }
}

#[test]
fn float_to_integer_casts_truncate_saturate_and_map_nan_to_zero() {
    let xs = probe_values();
    let n = xs.len();
    let mut g = Graph::new("f2i");
    let x = g.input("x", Shape::new(&[n], DType::F32));
    let outs: Vec<NodeId> = [
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U32,
    ]
    .into_iter()
    .map(|to| op(&mut g, Op::Cast { to }, vec![x]))
    .collect();
    g.set_outputs(outs);
    let inputs = [("x", TensorData::from_f32(&[n], &xs))];
    let want = oracle(&g, &inputs);
    let got = run_loops(&compiled(&g), &inputs, &DimBinding::new());
    for (i, (gv, wv)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            gv.bytes,
            wv.bytes,
            "cast {i}: {:?} vs {:?}",
            gv.to_f64_vec(),
            wv.to_f64_vec()
        );
    }
}

#[test]
fn integer_division_by_zero_and_negative_shifts_are_run_time_errors_like_the_oracle() {
    for (bop, b, want) in [
        (BinaryOp::Div, 0i64, "division by zero"),
        (BinaryOp::Mod, 0, "division by zero"),
        (BinaryOp::Shl, -1, "negative shift"),
        (BinaryOp::Shr, -3, "negative shift"),
    ] {
        let mut g = Graph::new("fault");
        let a = g.input("a", Shape::new(&[3], DType::I32));
        let d = g.input("d", Shape::new(&[3], DType::I32));
        let y = op(&mut g, Op::Binary(bop), vec![a, d]);
        g.set_outputs(vec![y]);
        let inputs = [
            ("a", TensorData::from_i64_as(DType::I32, &[3], &[7, 8, 9])),
            ("d", TensorData::from_i64_as(DType::I32, &[3], &[2, b, 3])),
        ];
        let oracle_err = interp::run(&g, &inputs).expect_err("the oracle refuses it");
        assert!(oracle_err.to_string().contains(want), "{oracle_err}");
        let e = try_run_loops(&compiled(&g), &inputs, &DimBinding::new())
            .expect_err("the loop IR raises it");
        assert!(e.contains(want), "{e}");
    }
}

#[test]
fn bool_logic_max_min_and_xor_match_the_oracle() {
    let a = [false, false, true, true];
    let b = [false, true, false, true];
    for bop in [
        BinaryOp::BitAnd,
        BinaryOp::BitOr,
        BinaryOp::BitXor,
        BinaryOp::Max,
        BinaryOp::Min,
    ] {
        let mut g = Graph::new("bools");
        let x = g.input("a", Shape::new(&[4], DType::Bool));
        let y = g.input("b", Shape::new(&[4], DType::Bool));
        let z = op(&mut g, Op::Binary(bop), vec![x, y]);
        g.set_outputs(vec![z]);
        let inputs = [
            ("a", TensorData::from_bool(&[4], &a)),
            ("b", TensorData::from_bool(&[4], &b)),
        ];
        let want = oracle(&g, &inputs);
        let got = run_loops(&compiled(&g), &inputs, &DimBinding::new());
        assert_eq!(got[0].bytes, want[0].bytes, "{}", bop.name());
    }
}

#[test]
fn rendered_source_declares_buffers_by_storage_type_and_loops_grid_stride() {
    let mut g = Graph::new("render me");
    let a = g.input("a", Shape::new(&[8], DType::BF16));
    let b = g.input("b", Shape::new(&[8], DType::F32));
    let ac = op(&mut g, Op::Cast { to: DType::F32 }, vec![a]);
    let y = op(&mut g, Op::Binary(BinaryOp::Add), vec![ac, b]);
    let yh = op(&mut g, Op::Cast { to: DType::F16 }, vec![y]);
    g.set_outputs(vec![yh]);
    let p = compiled(&g);
    let lk = loops::lower_kernel(&p, 0).expect("lowered");
    let src = loops::render_c(&lk, Dialect::Cuda);
    assert!(
        src.contains("extern \"C\" __global__ void render_me_k0("),
        "{src}"
    );
    assert!(src.contains("const unsigned short* __restrict__"), "{src}");
    assert!(src.contains("const float* __restrict__"), "{src}");
    assert!(src.contains("rlx_f32_to_f16("), "{src}");
    assert!(src.contains("item += (i64)gridDim.x * blockDim.x"), "{src}");
}

#[test]
fn emulated_formats_narrowing_casts_and_mixed_comparisons_match_the_oracle_bit_for_bit() {
    let xs = probe_values();
    let n = xs.len();
    let xd: Vec<f64> = xs
        .iter()
        .map(|&x| x as f64 * 1.000_000_123)
        .chain([65519.9, 65520.0, 1e-8, 3.3961775e38])
        .collect();
    let nd = xd.len();
    let big: Vec<i64> = vec![
        i64::MAX,
        i64::MIN,
        (1 << 53) + 1,
        (1 << 60) + (1 << 52) + 1,
        -((1 << 55) + 3),
        65519,
        65520,
        2049,
        -2051,
        0,
    ];
    let mut g = Graph::new("formats");
    let x = g.input("x", Shape::new(&[n], DType::F32));
    let d = g.input("d", Shape::new(&[nd], DType::F64));
    let i = g.input("i", Shape::new(&[big.len()], DType::I64));
    let mut outs = Vec::new();
    for (e, m, max) in [
        (4, 3, 448.0f32),
        (5, 2, 57344.0),
        (5, 10, 65504.0),
        (8, 7, 3.389_531_4e38),
    ] {
        let f = Op::RoundToFormat {
            exp_bits: e,
            man_bits: m,
            max_normal: max,
        };
        outs.push(op(&mut g, f.clone(), vec![x]));
        outs.push(op(&mut g, f, vec![d]));
    }
    for to in [DType::F16, DType::BF16, DType::F32] {
        outs.push(op(&mut g, Op::Cast { to }, vec![d]));
        outs.push(op(&mut g, Op::Cast { to }, vec![i]));
    }
    // Mixed-class comparisons: f32 with f64 slices of the same length.
    let dn = op(
        &mut g,
        Op::Narrow {
            axis: 0,
            start: 0,
            len: n,
        },
        vec![d],
    );
    outs.push(op(&mut g, Op::Compare(CmpOp::Lt), vec![x, dn]));
    outs.push(op(&mut g, Op::Compare(CmpOp::Eq), vec![x, dn]));
    g.set_outputs(outs);
    let inputs = [
        ("x", TensorData::from_f32(&[n], &xs)),
        ("d", TensorData::from_f64(&[nd], &xd)),
        ("i", TensorData::from_i64(&[big.len()], &big)),
    ];
    let want = oracle(&g, &inputs);
    let got = run_loops(&compiled(&g), &inputs, &DimBinding::new());
    for (k, (gv, wv)) in got.iter().zip(&want).enumerate() {
        assert_eq!(gv.dtype, wv.dtype, "output {k}");
        let same = gv
            .to_f64_vec()
            .iter()
            .zip(wv.to_f64_vec())
            .all(|(a, b)| (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits());
        assert!(
            same,
            "output {k}: {:?} vs {:?}",
            gv.to_f64_vec(),
            wv.to_f64_vec()
        );
    }
}

#[test]
fn the_reference_interpreter_refuses_wrong_buffers_instead_of_reading_past_them() {
    let mut g = Graph::new("bounds");
    let x = g.input("x", Shape::new(&[8], DType::F32));
    let y = op(&mut g, Op::Activation(Activation::Exp), vec![x]);
    g.set_outputs(vec![y]);
    let p = compiled(&g);
    let lk = loops::lower_kernel(&p, 0).expect("lowered");
    assert_eq!(lk.bufs.len(), 2);
    let e = loops::eval::run(&lk, &mut [], &DimBinding::new()).expect_err("no buffers");
    assert!(e.contains("0 buffers given, the kernel has 2 slots"), "{e}");
    // A buffer shorter than the kernel's space: the first read past it is an error.
    let mut bufs = [HostBuf::Float(vec![1.0; 5]), HostBuf::Float(vec![0.0; 8])];
    let e = loops::eval::run(&lk, &mut bufs, &DimBinding::new()).expect_err("short input");
    assert!(e.contains("out of bounds of slot"), "{e}");
}

#[test]
fn fragments_bind_only_the_buffers_they_use_and_refuse_what_they_cannot_express() {
    let mut g = Graph::new("frag");
    let a = g.input("a", Shape::new(&[2, 3], DType::F32));
    let b = g.input("b", Shape::new(&[3, 4], DType::F32));
    let bias = g.input("bias", Shape::new(&[4], DType::F32));
    let y = op(&mut g, Op::MatMul, vec![a, b]);
    let y = op(&mut g, Op::Binary(BinaryOp::Add), vec![y, bias]);
    g.set_outputs(vec![y]);
    let p = compiled(&g);
    let (k, epilogue, space) = p
        .kernels
        .iter()
        .enumerate()
        .find_map(|(k, kern)| match &kern.kind {
            rlx_compile::program::KernelKind::Contraction {
                epilogue,
                out_space,
                ..
            } => Some((k, epilogue.clone(), out_space.clone())),
            _ => None,
        })
        .expect("a contraction");
    let frag =
        loops::lower_epilogue(&p, k, &epilogue, &space, "f", "core", DType::F32).expect("lowered");
    // The bias (read) and the output (written); not the product's operands.
    assert_eq!(frag.bufs.len(), 2, "{:?}", frag.bufs);
    let src = loops::render_c(&frag, Dialect::Cuda);
    assert!(src.contains("core") && src.contains("f"), "{src}");
    let e = loops::lower_epilogue(&p, k, &epilogue, &space, "f", "core", DType::C64)
        .expect_err("a complex core");
    assert!(e.to_string().contains("C64"), "{e}");
    // The epilogue reads the core: as a prologue (no core) it is refused by name.
    let core_node = epilogue
        .nodes
        .iter()
        .position(|n| matches!(n.op, rlx_compile::program::EOp::Core))
        .expect("the epilogue reads the core") as u32;
    let e = loops::lower_value(
        &p,
        k,
        &epilogue,
        core_node,
        &space,
        "f",
        &["i".into(), "j".into()],
    )
    .expect_err("no core outside an epilogue");
    assert!(e.to_string().contains("core outside an epilogue"), "{e}");
}
