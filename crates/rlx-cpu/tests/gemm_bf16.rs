//! The half-precision GEMM (`rlx_cpu::gemm::lowp`) on each of its paths — AMX tiles,
//! AVX512_BF16, f32 FMA over operands widened while packing, and the portable cast to f32
//! — against an f64 reference computed from the same bf16/f16 inputs; and bf16/f16 matmul
//! graphs run by the CPU backend against the oracle interpreter, once per path.
//!
//! Tolerances:
//! - f32 output: every path multiplies the exact half inputs and sums in f32 in some
//!   order, so `|c − exact| ≤ (K + 2) · 2⁻²⁴ · Σₖ|aᵢₖ·bₖⱼ|` (the standard bound for a
//!   K-term f32 sum, with 2 spare roundings for the pairwise `vdpbf16ps`/`tdpbf16ps`
//!   steps). A wrong element, a lost or doubled term is off by about `|aᵢₖ·bₖⱼ|` instead.
//! - rounded (bf16/f16) output: within one unit in the last place of the exact value, i.e.
//!   one of its two neighbours (the f32 error above is far below half an ulp).
//!
//! Paths the CPU lacks are skipped with a message on stderr.

use rlx_cpu::CpuBackend;
use rlx_cpu::gemm::lowp::{
    HalfFloat, LowpPath, bf16, f16, gemm_half, gemm_half_rounded_with, gemm_half_with,
};
use rlx_cpu::gemm::{F32Path, MatMut, MatRef, sgemm_with};
use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, Shape, TensorData, interp};
use rlx_runtime::{Backend, Device, arg_order};

mod common;

use common::mats::{Elem, LAYOUTS_4, Layout, Lcg, Mat, reference};

/// The f32 bound stated in the module docs.
fn f32_tol(k: usize, abs: f64) -> f64 {
    (k as f64 + 2.0) * 2f64.powi(-24) * abs
}

/// The paths available for `T`, printing why the others are skipped.
fn paths<T: HalfFloat>(want: &[LowpPath]) -> Vec<LowpPath> {
    want.iter()
        .copied()
        .filter(|p| {
            let ok = p.available::<T>();
            if !ok {
                eprintln!(
                    "skipped: the {} path is not available for {} on this CPU",
                    p.name(),
                    T::NAME
                );
            }
            ok
        })
        .collect()
}

/// (m, n, k) cases: tails of every tile size, M = 1, N = 1, K odd, K past one micro-kernel
/// step (256 / 512 sums) and past one packed super-block (1024 / 2048 sums), M past one
/// block of rows (128 / 144 / 192).
const SHAPES: [(usize, usize, usize); 13] = [
    (1, 1, 1),
    (1, 64, 33),
    (70, 1, 45),
    (33, 47, 31),
    (32, 32, 32),
    (64, 64, 64),
    (100, 96, 129),
    (13, 40, 3),
    (37, 200, 600),
    (300, 40, 17),
    (20, 33, 1100),
    (520, 35, 70),
    (35, 70, 2100),
];

/// Every shape × a rotation of A and B layouts, C row-major or column-major, overwrite or
/// accumulate, on 1 and 2 threads: within the f32 bound of the exact product.
fn check_path<T: HalfFloat + Elem>(path: LowpPath) {
    let mut rng = Lcg(0x5eed ^ path as u64);
    let mut cases = 0;
    for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
        for v in 0..4 {
            let (la, lb) = (LAYOUTS_4[(s + v) % 4], LAYOUTS_4[(s + 3 * v + 1) % 4]);
            let a = Mat::<T>::random(&mut rng, m, k, la);
            let b = Mat::<T>::random(&mut rng, k, n, lb);
            let (exact, abs) = reference(&a, &b);
            let accumulate = v % 2 == 1;
            let col_major_c = v >= 2;
            let init: Vec<f32> = (0..m * n).map(|_| rng.uniform() as f32).collect();
            let mut c = vec![0f32; m * n];
            let (rs, cs) = if col_major_c {
                (1, m as isize)
            } else {
                (n as isize, 1)
            };
            let idx = |i: usize, j: usize| (i as isize * rs + j as isize * cs) as usize;
            for i in 0..m {
                for j in 0..n {
                    c[idx(i, j)] = if accumulate {
                        init[i * n + j]
                    } else {
                        f32::NAN
                    };
                }
            }
            let threads = 1 + v % 2;
            let cv = MatMut {
                data: &mut c,
                rows: m,
                cols: n,
                row_stride: rs,
                col_stride: cs,
                offset: 0,
            };
            gemm_half_with(path, a.view(), b.view(), cv, accumulate, threads);
            for i in 0..m {
                for j in 0..n {
                    let base = if accumulate {
                        init[i * n + j] as f64
                    } else {
                        0.0
                    };
                    let want = exact[i * n + j] + base;
                    let got = c[idx(i, j)] as f64;
                    let tol = f32_tol(k, abs[i * n + j]) + base.abs() * 2f64.powi(-23);
                    assert!(
                        (got - want).abs() <= tol,
                        "{} {}: {m}x{k}·{k}x{n} (A {la:?}, B {lb:?}, C col-major {col_major_c}, \
                         accumulate {accumulate}, {threads} threads): C[{i}][{j}] = {got}, \
                         exact {want}, |diff| {} > tol {tol}",
                        path.name(),
                        T::NAME,
                        (got - want).abs()
                    );
                }
            }
            cases += 1;
        }
    }
    assert_eq!(cases, SHAPES.len() * 4);
}

#[test]
fn amx_bf16_matches_f64_reference_on_tails_layouts_and_k_blocks() {
    paths::<bf16>(&[LowpPath::Amx])
        .into_iter()
        .for_each(check_path::<bf16>);
}

#[test]
fn avx512bf16_matches_f64_reference_on_tails_layouts_and_k_blocks() {
    paths::<bf16>(&[LowpPath::Avx512Bf16])
        .into_iter()
        .for_each(check_path::<bf16>);
}

#[test]
fn avx512f32_bf16_and_f16_match_f64_reference() {
    paths::<bf16>(&[LowpPath::Avx512F32])
        .into_iter()
        .for_each(check_path::<bf16>);
    paths::<f16>(&[LowpPath::Avx512F32])
        .into_iter()
        .for_each(check_path::<f16>);
}

#[test]
fn cast_f32_path_bf16_and_f16_match_f64_reference() {
    check_path::<bf16>(LowpPath::CastF32);
    check_path::<f16>(LowpPath::CastF32);
}

/// One product on `threads` threads, C row-major.
fn product<T: HalfFloat>(path: LowpPath, a: &Mat<T>, b: &Mat<T>, threads: usize) -> Vec<f32> {
    let mut c = vec![0f32; a.r * b.c];
    gemm_half_with(
        path,
        a.view(),
        b.view(),
        MatMut::row_major(&mut c, a.r, b.c),
        false,
        threads,
    );
    c
}

#[test]
fn every_path_gives_the_same_bits_on_1_2_and_3_threads() {
    for path in paths::<bf16>(&LowpPath::ALL) {
        for &(m, n, k) in &[(200, 170, 300), (96, 700, 530)] {
            let mut rng = Lcg(7);
            let a = Mat::<bf16>::random(&mut rng, m, k, Layout::RowMajor);
            let b = Mat::<bf16>::random(&mut rng, k, n, Layout::ColMajor);
            let one = product(path, &a, &b, 1);
            for threads in [2, 3] {
                let many = product(path, &a, &b, threads);
                let same = one
                    .iter()
                    .zip(&many)
                    .all(|(x, y)| x.to_bits() == y.to_bits());
                assert!(
                    same,
                    "{}: {m}x{k}·{k}x{n} differs between 1 and {threads} threads",
                    path.name()
                );
            }
        }
    }
}

/// The avx512f32 path widens A and B into the own f32 kernel's packing, so its sums are
/// the f32 kernel's, in its order: the bits equal those of `sgemm` on the avx512 path over
/// f32 copies of the operands, for every layout, overwrite or accumulate, and thread count
/// (K past one block of sums, M and N past one block and with partial tiles).
#[test]
fn avx512f32_path_gives_the_bits_of_the_own_f32_kernel_on_widened_copies() {
    fn check<T: HalfFloat + Elem>() {
        if !LowpPath::Avx512F32.available::<T>() || !F32Path::Avx512.available() {
            eprintln!("skipped: AVX-512 F/BW absent");
            return;
        }
        let mut rng = Lcg(0xf16);
        for (s, &(m, n, k)) in [
            (37, 200, 600),
            (200, 170, 300),
            (13, 40, 3),
            (300, 520, 1100),
        ]
        .iter()
        .enumerate()
        {
            for v in 0..4 {
                let (la, lb) = (LAYOUTS_4[(s + v) % 4], LAYOUTS_4[(s + 3 * v + 1) % 4]);
                let a = Mat::<T>::random(&mut rng, m, k, la);
                let b = Mat::<T>::random(&mut rng, k, n, lb);
                let wide = |x: &Mat<T>| -> Vec<f32> {
                    (0..x.r * x.c)
                        .map(|e| x.get(e / x.c, e % x.c).to_f32_exact())
                        .collect()
                };
                let (af, bf) = (wide(&a), wide(&b));
                let accumulate = v % 2 == 1;
                let threads = 1 + v / 2;
                let init: Vec<f32> = (0..m * n).map(|_| rng.uniform() as f32).collect();
                let mut half = init.clone();
                let mut own = init.clone();
                gemm_half_with(
                    LowpPath::Avx512F32,
                    a.view(),
                    b.view(),
                    MatMut::row_major(&mut half, m, n),
                    accumulate,
                    threads,
                );
                sgemm_with(
                    F32Path::Avx512,
                    1.0,
                    MatRef::row_major(&af, m, k),
                    MatRef::row_major(&bf, k, n),
                    if accumulate { 1.0 } else { 0.0 },
                    MatMut::row_major(&mut own, m, n),
                    threads,
                );
                let diff = half
                    .iter()
                    .zip(&own)
                    .position(|(x, y)| x.to_bits() != y.to_bits());
                assert!(
                    diff.is_none(),
                    "{}: {m}x{k}·{k}x{n} (A {la:?}, B {lb:?}, accumulate {accumulate}, \
                     {threads} threads): element {diff:?} differs from the f32 kernel's",
                    T::NAME
                );
            }
        }
    }
    check::<f16>();
    check::<bf16>();
}

/// Spacing of `T` values at magnitude `x` (normal range).
fn ulp<T: HalfFloat>(x: f64) -> f64 {
    let bits = if T::NAME == "bf16" { 7 } else { 10 };
    let x = x.abs().max(1e-30);
    2f64.powi(x.log2().floor() as i32 - bits)
}

#[test]
fn rounded_output_is_within_one_ulp_of_the_exact_product() {
    fn check<T: HalfFloat + Elem>(path: LowpPath) {
        let mut rng = Lcg(11);
        for &(m, n, k) in &[(45, 37, 77), (1, 50, 600), (64, 1, 31)] {
            let a = Mat::<T>::random(&mut rng, m, k, Layout::Padded);
            let b = Mat::<T>::random(&mut rng, k, n, Layout::RowMajor);
            let (exact, _) = reference(&a, &b);
            let mut c = vec![T::from_f32_rne(0.0); m * n];
            gemm_half_rounded_with(path, a.view(), b.view(), MatMut::row_major(&mut c, m, n), 2);
            for (e, (got, want)) in c.iter().zip(&exact).enumerate() {
                let got = got.to_f32_exact() as f64;
                assert!(
                    (got - want).abs() <= ulp::<T>(*want),
                    "{} {}: {m}x{k}·{k}x{n}, element {e}: {got} vs exact {want}",
                    path.name(),
                    T::NAME
                );
            }
        }
    }
    paths::<bf16>(&LowpPath::ALL)
        .into_iter()
        .for_each(check::<bf16>);
    paths::<f16>(&LowpPath::ALL)
        .into_iter()
        .for_each(check::<f16>);
}

#[test]
fn infinity_in_the_last_odd_sum_stays_in_its_row_and_padding_adds_no_nan() {
    // K = 33 pads to 34 (pairs) or 64 (AMX tiles) with zeros: a padded 0 · ∞ would be NaN.
    let (m, n, k) = (40, 36, 33);
    for path in paths::<bf16>(&LowpPath::ALL) {
        let mut rng = Lcg(3);
        let mut a = Mat::<bf16>::random(&mut rng, m, k, Layout::RowMajor);
        let mut b = Mat::<bf16>::random(&mut rng, k, n, Layout::RowMajor);
        a.set(5, k - 1, bf16::INFINITY);
        for j in 0..n {
            b.set(
                k - 1,
                j,
                bf16::from_f32(if j % 2 == 0 { 0.5 } else { -0.25 }),
            );
        }
        let c = product(path, &a, &b, 2);
        for i in 0..m {
            for j in 0..n {
                let v = c[i * n + j];
                if i == 5 {
                    let want = if j % 2 == 0 {
                        f32::INFINITY
                    } else {
                        f32::NEG_INFINITY
                    };
                    assert_eq!(v, want, "{}: C[5][{j}]", path.name());
                } else {
                    assert!(v.is_finite(), "{}: C[{i}][{j}] = {v}", path.name());
                }
            }
        }
    }
}

#[test]
fn nan_in_b_makes_exactly_its_column_nan() {
    let (m, n, k) = (50, 45, 70);
    for path in paths::<bf16>(&LowpPath::ALL) {
        let mut rng = Lcg(5);
        let a = Mat::<bf16>::random(&mut rng, m, k, Layout::ColMajor);
        let mut b = Mat::<bf16>::random(&mut rng, k, n, Layout::RowMajor);
        b.set(40, 17, bf16::NAN);
        let c = product(path, &a, &b, 1);
        for (e, v) in c.iter().enumerate() {
            assert_eq!(
                v.is_nan(),
                e % n == 17,
                "{}: element {e} = {v}",
                path.name()
            );
        }
    }
}

#[test]
fn zero_k_overwrites_or_keeps_c_and_empty_outputs_are_untouched() {
    for path in paths::<bf16>(&LowpPath::ALL) {
        let a: Vec<bf16> = vec![];
        let b: Vec<bf16> = vec![];
        let mut c = vec![3.0f32; 6];
        let av = MatRef::row_major(&a[..], 2, 0);
        let bv = MatRef::row_major(&b[..], 0, 3);
        gemm_half_with(path, av, bv, MatMut::row_major(&mut c, 2, 3), true, 1);
        assert_eq!(c, vec![3.0; 6], "{}: accumulate with K = 0", path.name());
        gemm_half_with(path, av, bv, MatMut::row_major(&mut c, 2, 3), false, 1);
        assert_eq!(c, vec![0.0; 6], "{}: overwrite with K = 0", path.name());
        let a1 = [bf16::ONE; 4];
        let mut none: Vec<f32> = vec![];
        gemm_half_with(
            path,
            MatRef::row_major(&a1[..], 0, 4),
            MatRef::row_major(&a1[..], 4, 1),
            MatMut::row_major(&mut none, 0, 1),
            false,
            2,
        );
    }
}

#[test]
#[should_panic(expected = "the amx path cannot multiply f16 operands")]
fn amx_path_on_f16_operands_panics_naming_the_path_and_dtype() {
    let x = [f16::ONE; 4];
    let mut c = vec![0f32; 4];
    gemm_half_with(
        LowpPath::Amx,
        MatRef::row_major(&x[..], 2, 2),
        MatRef::row_major(&x[..], 2, 2),
        MatMut::row_major(&mut c, 2, 2),
        false,
        1,
    );
}

#[test]
#[should_panic(expected = "shapes do not chain: A is 2x3, B is 2x2")]
fn shapes_that_do_not_chain_panic_with_the_shapes() {
    let x = [bf16::ONE; 6];
    let mut c = vec![0f32; 4];
    gemm_half(
        MatRef::row_major(&x[..], 2, 3),
        MatRef::row_major(&x[..4], 2, 2),
        MatMut::row_major(&mut c, 2, 2),
        false,
        1,
    );
}

#[test]
fn default_path_is_the_environment_choice_or_the_first_available_preference() {
    for (var, bf) in [("RLX_GEMM_BF16", true), ("RLX_GEMM_F16", false)] {
        let order = LowpPath::preference();
        let (got, first) = if bf {
            let first = order.into_iter().find(|p| p.available::<bf16>());
            (LowpPath::default_for::<bf16>(), first)
        } else {
            let first = order.into_iter().find(|p| p.available::<f16>());
            (LowpPath::default_for::<f16>(), first)
        };
        match std::env::var(var).ok().and_then(|v| LowpPath::parse(&v)) {
            Some(p) if (bf && p.available::<bf16>()) || (!bf && p.available::<f16>()) => {
                assert_eq!(got, p, "{var} names an available path")
            }
            _ => assert_eq!(
                Some(got),
                first,
                "{var}: first available in preference order"
            ),
        }
    }
    let order = LowpPath::preference();
    assert_eq!(order[0], LowpPath::Amx, "AMX, where present, comes first");
    assert_eq!(order[3], LowpPath::CastF32, "the portable path comes last");
    assert_eq!(LowpPath::parse("avx512bf16"), Some(LowpPath::Avx512Bf16));
    assert_eq!(LowpPath::parse("tpu"), None);
}

// ---- graphs through the CPU backend vs the oracle -------------------------------------

fn run_both(g: &Graph, args: &[TensorData]) -> (Vec<f64>, Vec<f64>) {
    let names: Vec<String> = arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    let want = interp::run_refs(g, &named).expect("oracle runs");
    let exe = CpuBackend.compile(Device::Cpu, g).expect("compiles");
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe.run(&views).expect("runs");
    (got[0].to_f64_vec(), want[0].to_f64_vec())
}

fn random_data(rng: &mut Lcg, dt: DType, dims: &[usize]) -> TensorData {
    let n: usize = dims.iter().product();
    let v: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    TensorData::from_f64_as(dt, dims, &v)
}

/// `x [.., m, k] · w` where `w` is `[k, n]` or (transposed in the graph) `[n, k]`, with an
/// optional `+ bias [n]` and ReLU; compiled vs oracle, per element within
/// `ulp(|x·w|) + 2·ulp(|result|)` of the dtype (one rounding of the product may land on
/// the other neighbour of the exact value; the epilogue rounds once more).
fn graph_case(dt: DType, x_dims: &[usize], w_dims: &[usize], transpose_w: bool, epilogue: bool) {
    let mut rng = Lcg(x_dims
        .iter()
        .chain(w_dims)
        .fold(17, |h, &d| h * 31 + d as u64));
    let mut g = Graph::new("lowp_matmul");
    let x = g.input("x", Shape::new(x_dims, dt));
    let w = g.input("w", Shape::new(w_dims, dt));
    let mut args = vec![
        random_data(&mut rng, dt, x_dims),
        random_data(&mut rng, dt, w_dims),
    ];
    let wk = if transpose_w {
        let r = w_dims.len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        g.add_op(Op::Transpose { perm }, vec![w]).unwrap()
    } else {
        w
    };
    let mm = g.add_op(Op::MatMul, vec![x, wk]).unwrap();
    let out = if epilogue {
        let n = g.node(mm).shape.dims().last().unwrap().as_static().unwrap();
        let bias = g.input("bias", Shape::new(&[n], dt));
        args.push(random_data(&mut rng, dt, &[n]));
        let s = g.add_op(Op::Binary(BinaryOp::Add), vec![mm, bias]).unwrap();
        g.add_op(Op::Activation(Activation::Relu), vec![s]).unwrap()
    } else {
        mm
    };
    g.set_outputs(vec![out]);
    // The exact product, for the tolerance: the oracle of the matmul alone, in f64.
    let mut g64 = Graph::new("exact");
    let x64 = g64.input("x", Shape::new(x_dims, DType::F64));
    let w64 = g64.input("w", Shape::new(w_dims, DType::F64));
    let wk64 = if transpose_w {
        let r = w_dims.len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        g64.add_op(Op::Transpose { perm }, vec![w64]).unwrap()
    } else {
        w64
    };
    let mm64 = g64.add_op(Op::MatMul, vec![x64, wk64]).unwrap();
    g64.set_outputs(vec![mm64]);
    let a64: Vec<TensorData> = args[..2]
        .iter()
        .map(|t| TensorData::from_f64(&t.dims, &t.to_f64_vec()))
        .collect();
    let exact = interp::run_refs(&g64, &[("x", &a64[0]), ("w", &a64[1])]).unwrap()[0].to_f64_vec();
    let (got, want) = run_both(&g, &args);
    assert_eq!(got.len(), want.len());
    let ulp_of = |v: f64| {
        if dt == DType::BF16 {
            ulp::<bf16>(v)
        } else {
            ulp::<f16>(v)
        }
    };
    for (e, ((x, o), p)) in got.iter().zip(&want).zip(&exact).enumerate() {
        let tol = ulp_of(*p) + 2.0 * ulp_of(*o);
        assert!(
            (x - o).abs() <= tol,
            "{dt:?} {x_dims:?}·{w_dims:?} (transposed {transpose_w}, epilogue {epilogue}), \
             path {:?}/{:?}: element {e}: compiled {x}, oracle {o}, exact product {p}",
            std::env::var("RLX_GEMM_BF16").ok(),
            std::env::var("RLX_GEMM_F16").ok(),
        );
    }
}

#[test]
fn graph_half_matmuls_match_the_oracle() {
    // Run in a child process per path by the test below; directly, on the default path.
    if let Ok(v) = std::env::var("RLX_GEMM_BF16") {
        assert_eq!(
            LowpPath::default_for::<bf16>().name(),
            v.trim(),
            "forced path taken"
        );
    }
    for dt in [DType::BF16, DType::F16] {
        graph_case(dt, &[3, 17, 45], &[45, 33], false, false);
        graph_case(dt, &[2, 1, 70], &[33, 70], true, false);
        graph_case(dt, &[40, 9], &[9, 1], false, false);
        graph_case(dt, &[4, 20, 64], &[4, 64, 24], false, false);
        graph_case(dt, &[2, 31, 40], &[2, 50, 40], true, true);
        graph_case(dt, &[64, 100], &[100, 48], false, true);
        graph_case(dt, &[130, 600], &[70, 600], true, true);
        // A few rows per batch (the matrix-vector kernels of exec/gemv.rs read B in
        // place): shared and batched weights, both layouts, with and without epilogue.
        graph_case(dt, &[3, 5, 45], &[45, 33], false, false);
        graph_case(dt, &[2, 7, 70], &[33, 70], true, false);
        graph_case(dt, &[4, 12, 64], &[4, 64, 24], false, true);
        graph_case(dt, &[2, 16, 40], &[2, 50, 40], true, true);
    }
}

#[test]
fn graph_half_matmuls_match_the_oracle_on_every_path() {
    if std::env::var_os("RLX_GEMM_CHILD").is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let runs: Vec<(&str, LowpPath)> = paths::<bf16>(&LowpPath::ALL)
        .into_iter()
        .map(|p| ("RLX_GEMM_BF16", p))
        .chain(
            paths::<f16>(&[LowpPath::Avx512F32, LowpPath::CastF32])
                .into_iter()
                .map(|p| ("RLX_GEMM_F16", p)),
        )
        .collect();
    for (var, path) in runs {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "graph_half_matmuls_match_the_oracle",
                "--nocapture",
            ])
            .env_remove("RLX_GEMM_BF16")
            .env_remove("RLX_GEMM_F16")
            .env(var, path.name())
            .env("RLX_GEMM_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{var}={}: {text}",
            path.name()
        );
    }
}

#[test]
#[should_panic(
    expected = "gemm_half: view B (3x2, strides (2, 1), offset 1) reaches storage indices 1..=6 but its slice has 5 elements"
)]
fn a_view_past_its_slice_panics_naming_the_view() {
    let x = [bf16::ONE; 6];
    let mut c = vec![0f32; 4];
    let b = MatRef {
        data: &x[..5],
        rows: 3,
        cols: 2,
        row_stride: 2,
        col_stride: 1,
        offset: 1,
    };
    gemm_half(
        MatRef::row_major(&x[..], 2, 3),
        b,
        MatMut::row_major(&mut c, 2, 2),
        false,
        1,
    );
}

/// B row-major inside a wider matrix (row stride past N), N covering strips packed in
/// pairs (two full 16-column strips from one 64-byte line per row) next to a full strip
/// without a partner and a partial one, K odd: every packed column lands in its own
/// place on the AMX and `vdpbf16ps` paths, within the f32 bound of the exact product.
#[test]
fn row_major_b_strips_packed_in_pairs_match_f64_reference() {
    for path in paths::<bf16>(&[LowpPath::Amx, LowpPath::Avx512Bf16]) {
        for &(m, n, k) in &[(5, 80, 67), (33, 64, 1), (1, 112, 130), (40, 49, 33)] {
            let ld = n + 7;
            let mut rng = Lcg(0xb0b ^ (n * k) as u64);
            let a: Vec<bf16> = (0..m * k)
                .map(|_| bf16::from_f32(rng.uniform() as f32 * 2.0 - 1.0))
                .collect();
            let b: Vec<bf16> = (0..k * ld)
                .map(|_| bf16::from_f32(rng.uniform() as f32 * 2.0 - 1.0))
                .collect();
            let bv = MatRef {
                data: &b,
                rows: k,
                cols: n,
                row_stride: ld as isize,
                col_stride: 1,
                offset: 0,
            };
            let mut c = vec![f32::NAN; m * n];
            gemm_half_with(
                path,
                MatRef::row_major(&a, m, k),
                bv,
                MatMut::row_major(&mut c, m, n),
                false,
                1,
            );
            for i in 0..m {
                for j in 0..n {
                    let (mut want, mut abs) = (0f64, 0f64);
                    for p in 0..k {
                        let t = a[i * k + p].to_f64() * b[p * ld + j].to_f64();
                        want += t;
                        abs += t.abs();
                    }
                    let got = c[i * n + j] as f64;
                    assert!(
                        (got - want).abs() <= f32_tol(k, abs),
                        "{}: {m}x{k}·{k}x{n} (B row stride {ld}): C[{i}][{j}] = {got}, exact {want}",
                        path.name()
                    );
                }
            }
        }
    }
}
