//! Argmax/argmin lowered as reductions: the loop interpreter runs them (one item per
//! output, work-group trees with and without shuffles) over values full of ties, NaNs,
//! signed zeros and infinities, and every index equals the oracle's (the first
//! extremum, the first NaN winning); the kernels render as C and, for f32, as WGSL.

use rlx_compile::loops::eval::{self, HostBuf};
use rlx_compile::loops::{self, Dialect, LowerOptions};
use rlx_compile::program::{BufKind, KernelKind, Program};
use rlx_compile::{CompileOptions, compile};
use rlx_ir::{DType, Dim, DimBinding, Graph, Op, Shape, TensorData, interp};

fn graph(max: bool, dims: &[Dim], axis: usize, keep_dim: bool, dt: DType) -> Graph {
    let mut g = Graph::new("arg");
    let x = g.input("x", Shape::from_dims(dims, dt));
    let o = if max {
        Op::ArgMax { axis, keep_dim }
    } else {
        Op::ArgMin { axis, keep_dim }
    };
    let y = g.add_op(o, vec![x]).unwrap();
    g.set_outputs(vec![y]);
    g
}

/// Values drawn from a small set (ties everywhere), with NaN, ±0 and ±∞ for floats.
fn data(dims: &[usize], dt: DType, seed: u64, nan: bool) -> TensorData {
    let n: usize = dims.iter().product();
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    if dt.is_int() {
        let v: Vec<i64> = (0..n).map(|_| (next() % 7) as i64 - 3).collect();
        return TensorData::from_i64_as(dt, dims, &v);
    }
    let pool = [
        0.0,
        -0.0,
        1.5,
        -1.5,
        3.0,
        -3.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let k = if nan { pool.len() } else { pool.len() - 1 };
    let v: Vec<f64> = (0..n).map(|_| pool[(next() % k as u64) as usize]).collect();
    TensorData::from_f64_as(dt, dims, &v)
}

/// Kernel 0 of `p` lowered with `opts`, run over `x`: the output's bits as f64/i64.
fn run(p: &Program, opts: LowerOptions, x: &TensorData, b: &DimBinding) -> Vec<f64> {
    let lk = loops::lower_kernel_with(p, 0, opts).unwrap_or_else(|e| panic!("{e}"));
    let src = loops::render_c(&lk, Dialect::Cuda);
    assert!(src.contains(&lk.name), "{src}");
    let out = p.outputs[0];
    let n: usize = p.buffers[out]
        .shape
        .dims()
        .iter()
        .map(|d| d.resolve(b).unwrap())
        .product();
    let input = if x.dtype.is_int() {
        HostBuf::Int(x.to_i64_vec())
    } else {
        HostBuf::Float(x.to_f64_vec())
    };
    let mut slots: Vec<HostBuf> = lk
        .bufs
        .iter()
        .map(|s| match p.buffers[s.buf].kind {
            BufKind::Arg(_) => input.clone(),
            _ => HostBuf::zeros(p.buffers[s.buf].shape.dtype(), n),
        })
        .collect();
    eval::run(&lk, &mut slots, b).unwrap_or_else(|e| panic!("{e}"));
    let at = lk.bufs.iter().position(|s| s.buf == out).unwrap();
    match slots.swap_remove(at) {
        HostBuf::Float(v) => v,
        HostBuf::Int(v) => v.into_iter().map(|i| i as f64).collect(),
    }
}

#[test]
fn argmax_and_argmin_lower_to_reductions_giving_the_oracles_first_extremum() {
    let s = Dim::Static;
    // (dims, axis): short rows (one item per output), long rows and long columns
    // (work-group trees of 32..256 lanes), length-1 axes, a middle axis.
    let shapes: Vec<(Vec<usize>, usize)> = vec![
        (vec![5, 7], 1),
        (vec![7, 5], 0),
        (vec![3, 1], 1),
        (vec![1, 4], 0),
        (vec![2, 9, 3], 1),
        (vec![3, 700], 1),
        (vec![2, 3000], 1),
        (vec![900, 2], 0),
        (vec![4, 100, 3], 1),
    ];
    let mut trees = 0;
    for (case, (dims, axis)) in shapes.iter().enumerate() {
        for dt in [DType::F32, DType::F16, DType::F64, DType::I32, DType::U8] {
            for (max, keep_dim) in [(true, false), (false, true), (true, true), (false, false)] {
                let sd: Vec<Dim> = dims.iter().map(|&d| s(d)).collect();
                let g = graph(max, &sd, *axis, keep_dim, dt);
                let p = compile(&g, &CompileOptions::default()).unwrap();
                assert_eq!(p.kernels.len(), 1, "{}", p.kernels.len());
                assert!(
                    matches!(p.kernels[0].kind, KernelKind::Reduce { arg: true, .. }),
                    "{}",
                    p.kernels[0].label()
                );
                for seed in 0..3u64 {
                    let x = data(dims, dt, seed + 10 * case as u64, seed != 1);
                    let want = interp::run(&g, &[("x", x.clone())]).unwrap()[0].to_f64_vec();
                    let b = DimBinding::new();
                    for (shuffles, width) in [(false, 0), (true, 0), (true, 8), (true, 16)] {
                        let opts = LowerOptions {
                            shuffles,
                            shuffle_width: width,
                            ..Default::default()
                        };
                        let lk = loops::lower_kernel_with(&p, 0, opts).unwrap();
                        trees += lk.group.is_some() as usize;
                        let got = run(&p, opts, &x, &b);
                        assert_eq!(
                            got,
                            want,
                            "arg{} {dt:?} {dims:?} axis {axis} keep {keep_dim} seed {seed} \
                             shuffles {shuffles}/{width}: input {:?}",
                            if max { "max" } else { "min" },
                            x.to_f64_vec()
                        );
                    }
                }
            }
        }
    }
    assert!(trees > 0, "no case used a work-group tree");
}

#[test]
fn all_equal_rows_pick_index_zero_and_indices_wrap_or_round_like_the_oracle() {
    // 300 equal values (a tree whose every lane ties), and an argmax at position 299
    // stored as u8 (wraps to 43), as f16 (exact) and as bf16 (rounded to 8 bits).
    for dt in [DType::F32, DType::I32, DType::U8, DType::F16, DType::BF16] {
        let g = graph(true, &[Dim::Static(2), Dim::Static(300)], 1, false, dt);
        let p = compile(&g, &CompileOptions::default()).unwrap();
        let mut v = vec![1i64; 600];
        v[300 + 299] = 5;
        let x = TensorData::from_i64_as(dt, &[2, 300], &v);
        let want = interp::run(&g, &[("x", x.clone())]).unwrap()[0].to_f64_vec();
        assert_eq!(want[0], 0.0);
        let got = run(&p, LowerOptions::default(), &x, &DimBinding::new());
        assert_eq!(got, want, "{dt:?}");
    }
}

#[test]
fn an_empty_dynamic_axis_is_a_run_time_error_and_splits_are_refused() {
    let g = graph(
        false,
        &[Dim::Static(2), Dim::Dynamic(0)],
        1,
        false,
        DType::F32,
    );
    let p = compile(&g, &CompileOptions::default()).unwrap();
    let lk = loops::lower_kernel(&p, 0).unwrap();
    let mut b = DimBinding::new();
    b.set(0, 0);
    let mut slots: Vec<HostBuf> = lk
        .bufs
        .iter()
        .map(|s| HostBuf::zeros(p.buffers[s.buf].shape.dtype(), 2))
        .collect();
    let e = eval::run(&lk, &mut slots, &b).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    b.set(0, 70);
    let x = data(&[2, 70], DType::F32, 3, true);
    let want = interp::run(&g, &[("x", x.clone())]).unwrap()[0].to_f64_vec();
    assert_eq!(run(&p, LowerOptions::default(), &x, &b), want);
    let e = loops::lower_split_reduction(&p, 0, 4).unwrap_err();
    assert!(e.to_string().contains("argmax/argmin"), "{e}");
}

#[test]
fn f32_argmax_renders_as_wgsl() {
    let g = graph(
        true,
        &[Dim::Static(4), Dim::Static(1000)],
        1,
        false,
        DType::F32,
    );
    let p = compile(&g, &CompileOptions::default()).unwrap();
    let lk = loops::lower_kernel(&p, 0).unwrap();
    assert!(lk.group.is_some());
    let src = loops::render_wgsl(&lk).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(src.contains("workgroupBarrier"), "{src}");
}
