//! The int8 GEMM (`rlx_cpu::gemm::int8`) on each of its paths — AMX-INT8 tiles, AVX512_VNNI
//! `vpdpbusd`, AVX-512 `vpmaddwd`, portable loops — against an exact reference (integer sums wrapped to i32), and
//! i8 matmul graphs run by the CPU backend against the oracle interpreter, once per path.
//! Integer products are exact, so every comparison is for equal bits. Paths the CPU lacks
//! are skipped with a message on stderr.

use rlx_cpu::CpuBackend;
use rlx_cpu::gemm::int8::{I8Path, gemm_i8_with};
use rlx_cpu::gemm::{MatMut, MatRef};
use rlx_ir::{DType, Graph, Op, Shape, TensorData, interp};
use rlx_runtime::{Backend, Device, arg_order};

mod common;

use common::mats::{LAYOUTS_4, Layout, Lcg, Mat, reference};

/// `A·B` summed exactly (integers far below 2⁵³ in f64), wrapped to i32: the documented
/// result.
fn reference_i32(a: &Mat<i8>, b: &Mat<i8>) -> Vec<i32> {
    reference(a, b).0.iter().map(|&s| s as i64 as i32).collect()
}

fn paths() -> Vec<I8Path> {
    I8Path::ALL
        .into_iter()
        .filter(|p| {
            let ok = p.available();
            if !ok {
                eprintln!("skipped: the {} int8 path is not available here", p.name());
            }
            ok
        })
        .collect()
}

/// (m, n, k): tails of every tile (32 × 32, 64 sums), M = 1, N = 1, K odd, K past one
/// micro-kernel step (512 / 4096 sums) and one packed super-block (2048 / 4096).
const SHAPES: [(usize, usize, usize); 10] = [
    (1, 1, 1),
    (1, 70, 65),
    (45, 1, 130),
    (33, 47, 31),
    (64, 64, 64),
    (100, 96, 129),
    (37, 200, 600),
    (300, 40, 17),
    (20, 33, 2100),
    (9, 35, 4200),
];

/// Every shape × rotations of A/B layouts, C row- or column-major, overwrite or
/// accumulate (wrapping), 1 or 2 threads: equal to the reference.
fn check_path(path: I8Path) {
    let mut rng = Lcg(path as u64 + 1);
    for (s, &(m, n, k)) in SHAPES.iter().enumerate() {
        for v in 0..4 {
            let (la, lb) = (LAYOUTS_4[(s + v) % 4], LAYOUTS_4[(s + 3 * v + 1) % 4]);
            let a = Mat::<i8>::random(&mut rng, m, k, la);
            let b = Mat::<i8>::random(&mut rng, k, n, lb);
            let want = reference_i32(&a, &b);
            let accumulate = v % 2 == 1;
            let (rs, cs) = if v >= 2 {
                (1, m as isize)
            } else {
                (n as isize, 1)
            };
            let idx = |i: usize, j: usize| (i as isize * rs + j as isize * cs) as usize;
            let init: Vec<i32> = (0..m * n)
                .map(|e| (i32::MAX - 3).wrapping_add((e % 7) as i32))
                .collect();
            let mut c = vec![-1i32; m * n];
            if accumulate {
                for i in 0..m {
                    for j in 0..n {
                        c[idx(i, j)] = init[i * n + j];
                    }
                }
            }
            let cv = MatMut {
                data: &mut c,
                rows: m,
                cols: n,
                row_stride: rs,
                col_stride: cs,
                offset: 0,
            };
            gemm_i8_with(path, a.view(), b.view(), cv, accumulate, 1 + v % 2);
            for i in 0..m {
                for j in 0..n {
                    let base = if accumulate { init[i * n + j] } else { 0 };
                    assert_eq!(
                        c[idx(i, j)],
                        base.wrapping_add(want[i * n + j]),
                        "{}: {m}x{k}·{k}x{n} (layouts {:?} {:?}, C col-major {}, accumulate \
                         {accumulate}): C[{i}][{j}]",
                        path.name(),
                        la,
                        lb,
                        v >= 2
                    );
                }
            }
        }
    }
}

#[test]
fn amx_int8_equals_the_exact_product_on_tails_layouts_and_k_blocks() {
    paths()
        .into_iter()
        .filter(|&p| p == I8Path::Amx)
        .for_each(check_path);
}

#[test]
fn avx512_vnni_int8_equals_the_exact_product_on_tails_layouts_and_k_blocks() {
    paths()
        .into_iter()
        .filter(|&p| p == I8Path::Avx512Vnni)
        .for_each(check_path);
}

/// The VNNI kernel biases B by +128 and subtracts 128·Σa per row: the extremes of both
/// operands (−128 · −128, −128 · 127, 127 · 127) and columns whose sums are extreme must
/// still give the exact product.
#[test]
fn avx512_vnni_bias_correction_is_exact_at_the_byte_extremes() {
    if !I8Path::Avx512Vnni.available() {
        eprintln!("skipped: the avx512vnni int8 path is not available here");
        return;
    }
    let (m, n, k) = (14, 40, 1030);
    for (fa, fb) in [(-128i8, -128i8), (-128, 127), (127, 127), (127, -128)] {
        let mut flip = 0u32;
        let mut alt = |v: i8| {
            flip += 1;
            if flip.is_multiple_of(5) { -1 - v } else { v }
        };
        let a = Mat::from_fn(m, k, Layout::RowMajor, || alt(fa));
        let b = Mat::from_fn(k, n, Layout::Padded, || fb);
        let want = reference_i32(&a, &b);
        let mut c = vec![0i32; m * n];
        gemm_i8_with(
            I8Path::Avx512Vnni,
            a.view(),
            b.view(),
            MatMut::row_major(&mut c, m, n),
            false,
            1,
        );
        assert_eq!(
            c,
            want,
            "A filled with {fa} (every 5th {}), B with {fb}",
            -1 - fa
        );
    }
}

#[test]
fn avx512_int8_equals_the_exact_product_on_tails_layouts_and_k_blocks() {
    paths()
        .into_iter()
        .filter(|&p| p == I8Path::Avx512)
        .for_each(check_path);
}

#[test]
fn portable_int8_equals_the_exact_product() {
    check_path(I8Path::Portable);
}

#[test]
fn sums_past_i32_wrap_identically_on_every_path() {
    // 140 000 · (−128)·(−128) = 2 293 760 000 > i32::MAX: the sum wraps.
    let (m, n, k) = (3, 34, 140_000);
    let a = Mat::from_fn(m, k, Layout::RowMajor, || -128);
    let mut rng = Lcg(9);
    let b = Mat::from_fn(k, n, Layout::RowMajor, || {
        if rng.next_i8() > 0 { -128 } else { 127 }
    });
    let want = reference_i32(&a, &b);
    assert!(want.iter().any(|&v| v < 0), "the test must overflow i32");
    for path in paths() {
        let mut c = vec![0i32; m * n];
        gemm_i8_with(
            path,
            a.view(),
            b.view(),
            MatMut::row_major(&mut c, m, n),
            false,
            2,
        );
        assert_eq!(c, want, "{}", path.name());
    }
}

#[test]
fn thread_count_does_not_change_the_result() {
    let (m, n, k) = (200, 170, 300);
    let mut rng = Lcg(4);
    let a = Mat::<i8>::random(&mut rng, m, k, Layout::RowMajor);
    let b = Mat::<i8>::random(&mut rng, k, n, Layout::ColMajor);
    for path in paths() {
        let run = |threads| {
            let mut c = vec![0i32; m * n];
            let cv = MatMut::row_major(&mut c, m, n);
            gemm_i8_with(path, a.view(), b.view(), cv, false, threads);
            c
        };
        let one = run(1);
        assert_eq!(one, reference_i32(&a, &b), "{}", path.name());
        assert_eq!(run(2), one, "{}: 2 threads", path.name());
        assert_eq!(run(3), one, "{}: 3 threads", path.name());
    }
}

#[test]
#[should_panic(expected = "shapes do not chain: A is 2x3, B is 2x2")]
fn shapes_that_do_not_chain_panic_with_the_shapes() {
    let x = [1i8; 6];
    let mut c = [0i32; 4];
    gemm_i8_with(
        I8Path::Portable,
        MatRef::row_major(&x[..], 2, 3),
        MatRef::row_major(&x[..4], 2, 2),
        MatMut::row_major(&mut c, 2, 2),
        false,
        1,
    );
}

#[test]
fn default_path_is_the_environment_choice_or_the_first_available() {
    let first = I8Path::ALL.into_iter().find(|p| p.available());
    match std::env::var("RLX_GEMM_I8")
        .ok()
        .and_then(|v| I8Path::parse(&v))
    {
        Some(p) if p.available() => assert_eq!(I8Path::default_path(), p),
        _ => assert_eq!(Some(I8Path::default_path()), first),
    }
    assert_eq!(I8Path::parse("portable"), Some(I8Path::Portable));
    assert_eq!(I8Path::parse("vnni"), None);
    assert_eq!(I8Path::parse("avx512vnni"), Some(I8Path::Avx512Vnni));
}

// ---- graphs through the CPU backend vs the oracle -------------------------------------

/// `x [.., m, k] · w` (`w` `[k, n]` or, transposed in the graph, `[n, k]`) on i8 data:
/// compiled result equals the oracle's (wrapping sums stored as i8).
fn graph_case(x_dims: &[usize], w_dims: &[usize], transpose_w: bool) {
    let mut rng = Lcg(x_dims
        .iter()
        .chain(w_dims)
        .fold(3, |h, &d| h * 31 + d as u64));
    let mut g = Graph::new("i8_matmul");
    let x = g.input("x", Shape::new(x_dims, DType::I8));
    let w = g.input("w", Shape::new(w_dims, DType::I8));
    let wk = if transpose_w {
        let r = w_dims.len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        g.add_op(Op::Transpose { perm }, vec![w]).unwrap()
    } else {
        w
    };
    let mm = g.add_op(Op::MatMul, vec![x, wk]).unwrap();
    g.set_outputs(vec![mm]);
    let data = |rng: &mut Lcg, dims: &[usize]| {
        let n: usize = dims.iter().product();
        let v: Vec<i64> = (0..n).map(|_| rng.next_i8() as i64).collect();
        TensorData::from_i64_as(DType::I8, dims, &v)
    };
    let args = vec![data(&mut rng, x_dims), data(&mut rng, w_dims)];
    let names: Vec<String> = arg_order(&g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(&args).collect();
    let want = interp::run_refs(&g, &named).expect("oracle runs");
    let exe = CpuBackend.compile(Device::Cpu, &g).expect("compiles");
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe.run(&views).expect("runs");
    assert_eq!(
        got[0].to_i64_vec(),
        want[0].to_i64_vec(),
        "{x_dims:?}·{w_dims:?} (transposed {transpose_w}), RLX_GEMM_I8={:?}",
        std::env::var("RLX_GEMM_I8").ok()
    );
}

#[test]
fn graph_i8_matmuls_equal_the_oracle() {
    if let Ok(v) = std::env::var("RLX_GEMM_I8") {
        assert_eq!(I8Path::default_path().name(), v.trim(), "forced path taken");
    }
    graph_case(&[3, 17, 45], &[45, 33], false);
    graph_case(&[2, 1, 70], &[33, 70], true);
    graph_case(&[40, 9], &[9, 1], false);
    graph_case(&[4, 20, 64], &[4, 64, 24], false);
    graph_case(&[130, 600], &[70, 600], true);
}

#[test]
fn graph_i8_matmuls_equal_the_oracle_on_every_path() {
    if std::env::var_os("RLX_GEMM_CHILD").is_some() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for path in paths() {
        let out = std::process::Command::new(&exe)
            .args([
                "--exact",
                "graph_i8_matmuls_equal_the_oracle",
                "--nocapture",
            ])
            .env("RLX_GEMM_I8", path.name())
            .env("RLX_GEMM_CHILD", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "RLX_GEMM_I8={}: {text}",
            path.name()
        );
    }
}

#[test]
#[should_panic(
    expected = "gemm_i8: output view C (2x2, strides (1, 1)) maps distinct elements to the same storage"
)]
fn an_output_whose_elements_share_storage_panics() {
    let x = [1i8; 6];
    let mut c = [0i32; 4];
    let c = MatMut {
        data: &mut c[..],
        rows: 2,
        cols: 2,
        row_stride: 1,
        col_stride: 1,
        offset: 0,
    };
    gemm_i8_with(
        I8Path::Portable,
        MatRef::row_major(&x[..], 2, 3),
        MatRef::row_major(&x[..], 3, 2),
        c,
        false,
        1,
    );
}
