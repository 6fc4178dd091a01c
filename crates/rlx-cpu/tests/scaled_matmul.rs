//! The CPU scaled-matmul kernel (decode panels of codes × block scales, f32 GEMM panel
//! by panel) and the native quantization kernels, against the oracle.
//!
//! - On data whose partial sums are exact in f32 (small integers times powers of two)
//!   the compiled result equals the oracle bit for bit — for every layout, for fp8,
//!   fp6 and fp4 formats, across K-panel, N-block and M-tile boundaries.
//! - On random data it stays within the f32-accumulation bound
//!   `(k + 2)·2⁻²⁴·Σₚ|aₚ·bₚ| + 2⁻²⁴·|c|` of the oracle's f64 sum.
//! - Codes and scales from the native quantizers equal the oracle's exactly.

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, NodeId, Op, ScaleLayout, ScaledFormat, Shape, TensorData, interp};
use rlx_runtime::{Backend, Device};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }
    fn normal(&mut self) -> f32 {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64 + 1e-12;
        let v = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// `x [m,k]`, `w [n,k]` f32 inputs → outputs `[y, lq, rq, ls, rs]` where
/// `y = scaled_matmul(x, w)` (+ `b [n]` when `bias`).
fn graph(
    m: usize,
    n: usize,
    k: usize,
    fmts: [ScaledFormat; 2],
    layout: ScaleLayout,
    bias: bool,
) -> Graph {
    let mut g = Graph::new("scaled");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let w = g.input("w", Shape::new(&[n, k], DType::F32));
    let (lq, ls) = quantized(&mut g, x, fmts[0], layout);
    let (rq, rs) = quantized(&mut g, w, fmts[1], layout);
    let mut ins = vec![lq, rq, ls, rs];
    if bias {
        ins.push(g.input("b", Shape::new(&[n], DType::F32)));
    }
    let y = g
        .add_op(
            Op::ScaledMatMul {
                lhs_format: fmts[0],
                rhs_format: fmts[1],
                scale_layout: layout,
                has_bias: bias,
            },
            ins,
        )
        .unwrap();
    g.set_outputs(vec![y, lq, rq, ls, rs]);
    g
}

/// `(codes, scales)` of `t` quantized to `format` with `layout` (two graph nodes).
fn quantized(
    g: &mut Graph,
    t: NodeId,
    format: ScaledFormat,
    layout: ScaleLayout,
) -> (NodeId, NodeId) {
    let s = g
        .add_op(
            Op::ScaledQuantScale {
                format,
                scale_layout: layout,
            },
            vec![t],
        )
        .unwrap();
    let q = g
        .add_op(
            Op::ScaledQuantize {
                format,
                scale_layout: layout,
            },
            vec![t, s],
        )
        .unwrap();
    (q, s)
}

fn both(g: &Graph, args: &[(&str, TensorData)]) -> (Vec<TensorData>, Vec<TensorData>) {
    let want = interp::run(g, args).unwrap();
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    let views: Vec<_> = args.iter().map(|(_, d)| d.view()).collect();
    (exe.run(&views).unwrap(), want)
}

/// The largest value of the exact data for a format: `max_finite` times a power of two,
/// in (4, 8]. It has the mantissa of `max_finite`, so no MX scale saturates it, and
/// `pinned / max_finite` is a power of two, so per-tensor and NVFP4 scales are exact.
fn pinned(f: ScaledFormat) -> f32 {
    let mut p = f.max_finite();
    while p > 8.0 {
        p /= 2.0;
    }
    while p <= 4.0 {
        p *= 2.0;
    }
    p
}

/// Rows of small integers (≤ mantissa + 1 significant bits, so exact in the format at
/// any power-of-two scale) times a power of two per scale block, with one element of
/// each block at [`pinned`] so that every scale is a power of two. Partial sums of
/// the products stay below 2²¹ units of their granularity.
fn exact_rows(
    rng: &mut Rng,
    rows: usize,
    k: usize,
    f: ScaledFormat,
    layout: ScaleLayout,
) -> Vec<f32> {
    let block = layout.block().map_or(k, |b| b as usize);
    let top = if f.mant_bits() >= 2 { 7 } else { 3 };
    let mut v = vec![0f32; rows * k];
    for r in 0..rows {
        for b0 in (0..k).step_by(block) {
            // Per-tensor scales are shared by the whole tensor, so only block layouts
            // vary the power of two between blocks.
            let p = if layout.block().is_some() {
                2f32.powi(rng.below(3) as i32 - 1)
            } else {
                1.0
            };
            for p_ in 0..block {
                let i = rng.below(2 * top as u64 + 1) - top;
                v[r * k + b0 + p_] = i as f32 * p;
            }
            let sign = if rng.below(2) == 0 { 1.0 } else { -1.0 };
            v[r * k + b0 + rng.below(block as u64) as usize] = sign * pinned(f) * p;
        }
    }
    v
}

const LAYOUTS: [ScaleLayout; 3] = [
    ScaleLayout::PerTensor,
    ScaleLayout::BlockMxE8M0 { block: 32 },
    ScaleLayout::Nvfp4 { group: 16 },
];

/// One product of [`exact_rows`] data: the compiled result equals the oracle's bits, and
/// (the data being exactly representable) the exact f64 dot product — unless an NVFP4
/// scale (E4M3, ≥ 2⁻⁹) underflows, as for e5m2 elements.
fn check_exact_product(
    rng: &mut Rng,
    (m, n, k): (usize, usize, usize),
    fmts: [ScaledFormat; 2],
    layout: ScaleLayout,
) {
    let x = exact_rows(rng, m, k, fmts[0], layout);
    let w = exact_rows(rng, n, k, fmts[1], layout);
    let g = graph(m, n, k, fmts, layout, false);
    let args = [
        ("x", TensorData::from_f32(&[m, k], &x)),
        ("w", TensorData::from_f32(&[n, k], &w)),
    ];
    let (got, want) = both(&g, &args);
    let f = fmts[0];
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a, b, "output {i}, {m}x{n}x{k} {f} {layout}");
    }
    let nvfp4_underflow = matches!(layout, ScaleLayout::Nvfp4 { .. })
        && fmts
            .iter()
            .any(|f| pinned(*f) / f.max_finite() < 2f32.powi(-9));
    if nvfp4_underflow {
        return;
    }
    let y = got[0].to_f32_vec();
    for i in 0..m {
        for j in 0..n {
            let dot: f64 = (0..k)
                .map(|p| x[i * k + p] as f64 * w[j * k + p] as f64)
                .sum();
            assert_eq!(
                y[i * n + j] as f64,
                dot,
                "({i},{j}) {m}x{n}x{k} {f} {layout}"
            );
        }
    }
}

#[test]
fn exact_data_gives_the_oracle_bit_for_bit_for_every_layout_and_format() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let formats = [
        ScaledFormat::F8E4M3,
        ScaledFormat::F8E5M2,
        ScaledFormat::F6E2M3,
        ScaledFormat::F4E2M1,
        ScaledFormat::F8E4M3Fnuz,
    ];
    // k = 320 crosses a 256-wide K panel; m = 3 splits C's columns; m = 130 has a
    // ragged last M tile.
    for mnk in [(3, 20, 64), (130, 37, 320), (5, 300, 96)] {
        for layout in LAYOUTS {
            for f in formats {
                check_exact_product(&mut rng, mnk, [f, ScaledFormat::F8E4M3], layout);
            }
        }
    }
}

/// The bf16 decoding of narrow formats looks codes up 16 at a time in registers (tables of
/// up to 64 codes) and the rest one by one: per-tensor scales with K = 70 and 45 leave
/// tails of 6 and 13 codes after the vectors, and both table sizes (fp4: 16 codes, fp6:
/// 64) must give the oracle's bits.
#[test]
fn narrow_formats_with_k_tails_give_the_oracle_bit_for_bit() {
    let mut rng = Rng(0x51ed_270b_27d4_eb2f);
    for mnk in [(9, 21, 70), (17, 5, 45)] {
        for f in [
            ScaledFormat::F4E2M1,
            ScaledFormat::F6E2M3,
            ScaledFormat::F6E3M2,
        ] {
            check_exact_product(&mut rng, mnk, [f, f], ScaleLayout::PerTensor);
        }
    }
}

#[test]
fn tiny_block_scales_give_the_oracle_bit_for_bit_where_a_bf16_unit_would_flush() {
    // Data around 2⁻¹²⁸: MX block scales near 2⁻¹³⁰ decode to f32 subnormals, which a bf16
    // unit (AMX, vdpbf16ps) treats as zero. Such products must keep the exact f32 path:
    // the result is the oracle's bit for bit (the data is exact and its sums
    // representable), where a flushed element would give zeros.
    let mut rng = Rng(0x51ed_2701_aa55_0f0f);
    let tiny = 2f32.powi(-128);
    for layout in LAYOUTS {
        for (m, n, k) in [(4, 24, 64), (40, 33, 96)] {
            let fmts = [ScaledFormat::F8E4M3, ScaledFormat::F8E4M3];
            let x: Vec<f32> = exact_rows(&mut rng, m, k, fmts[0], layout)
                .iter()
                .map(|v| v * tiny)
                .collect();
            let w = exact_rows(&mut rng, n, k, fmts[1], layout);
            let g = graph(m, n, k, fmts, layout, false);
            let args = [
                ("x", TensorData::from_f32(&[m, k], &x)),
                ("w", TensorData::from_f32(&[n, k], &w)),
            ];
            let (got, want) = both(&g, &args);
            assert_eq!(got[0], want[0], "{m}x{n}x{k} {layout}");
            if matches!(layout, ScaleLayout::BlockMxE8M0 { .. }) {
                let y = got[0].to_f32_vec();
                assert!(
                    y.iter().any(|v| *v != 0.0 && v.abs() < f32::MIN_POSITIVE),
                    "the MX case must produce subnormal results (else it tests nothing)"
                );
            }
        }
    }
}

/// Decoded operand values (f64) from codes and scales, the oracle's definition.
fn decoded(f: ScaledFormat, layout: ScaleLayout, q: &TensorData, s: &TensorData) -> Vec<f64> {
    let k = q.dims[1];
    let sv = s.to_f64_vec();
    q.bytes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let sc = match layout {
                ScaleLayout::PerTensor => sv[0],
                ScaleLayout::BlockMxE8M0 { block } => {
                    (sv[(i / k) * (k / block as usize) + (i % k) / block as usize] - 127.0).exp2()
                }
                ScaleLayout::Nvfp4 { group } => ScaledFormat::F8E4M3
                    .decode(sv[(i / k) * (k / group as usize) + (i % k) / group as usize] as u8)
                    as f64,
            };
            f.decode(c) as f64 * sc
        })
        .collect()
}

#[test]
fn random_data_stays_within_the_f32_accumulation_bound_of_the_oracle() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    // One row (a decoding step: the few-rows path, K in two chunks), 17 rows, 64 rows.
    for (m, n, k) in [(1, 700, 544), (17, 1100, 288), (64, 9, 512)] {
        for layout in LAYOUTS {
            for f in [ScaledFormat::F8E4M3, ScaledFormat::F4E2M1] {
                let x: Vec<f32> = (0..m * k).map(|_| rng.normal()).collect();
                let w: Vec<f32> = (0..n * k).map(|_| rng.normal()).collect();
                let b: Vec<f32> = (0..n).map(|_| rng.normal()).collect();
                let g = graph(m, n, k, [f, f], layout, true);
                let args = [
                    ("x", TensorData::from_f32(&[m, k], &x)),
                    ("w", TensorData::from_f32(&[n, k], &w)),
                    ("b", TensorData::from_f32(&[n], &b)),
                ];
                let (got, want) = both(&g, &args);
                for i in 1..5 {
                    assert_eq!(got[i], want[i], "quantizer output {i}, {f} {layout}");
                }
                let a = decoded(f, layout, &want[1], &want[3]);
                let bb = decoded(f, layout, &want[2], &want[4]);
                let (y, yo) = (got[0].to_f32_vec(), want[0].to_f32_vec());
                let eps = 2f64.powi(-24);
                let mut exact = 0;
                for i in 0..m {
                    for j in 0..n {
                        let mag: f64 = (0..k).map(|p| (a[i * k + p] * bb[j * k + p]).abs()).sum();
                        let (g_, o) = (y[i * n + j] as f64, yo[i * n + j] as f64);
                        let bound = (k as f64 + 2.0) * eps * mag + 2.0 * eps * o.abs();
                        assert!(
                            (g_ - o).abs() <= bound,
                            "({i},{j}) {f} {layout}: {g_} vs {o}, bound {bound:e}"
                        );
                        exact += (g_ == o) as usize;
                    }
                }
                println!(
                    "{m}x{n}x{k} {f} {layout}: {exact}/{} sums equal the oracle's",
                    m * n
                );
            }
        }
    }
}

#[test]
fn quantizers_match_the_oracle_on_f16_bf16_f64_inputs_and_special_values() {
    let mut rng = Rng(77);
    for dt in [DType::F16, DType::BF16, DType::F64, DType::F32] {
        for layout in LAYOUTS {
            for f in [
                ScaledFormat::F8E5M2,
                ScaledFormat::F8E4M3Fnuz,
                ScaledFormat::F4E2M1,
            ] {
                let (rows, k) = (6, 64);
                let mut v: Vec<f64> = (0..rows * k).map(|_| rng.normal() as f64 * 3.0).collect();
                v[3] = f64::INFINITY;
                v[70] = f64::NAN;
                v[100] = -0.0;
                v[200..232].fill(0.0); // an all-zero block
                let x = TensorData::from_f64_as(dt, &[rows, k], &v);
                let mut g = Graph::new("q");
                let xi = g.input("x", x.shape());
                let (q, s) = quantized(&mut g, xi, f, layout);
                g.set_outputs(vec![s, q]);
                let (got, want) = both(&g, &[("x", x)]);
                assert_eq!(got, want, "{dt} {f} {layout}");
            }
        }
    }
}

#[test]
fn empty_and_degenerate_shapes_match_the_oracle() {
    for (m, n, k) in [(0, 4, 32), (4, 0, 32), (1, 1, 32), (2, 3, 0)] {
        for layout in LAYOUTS {
            if k == 0 && layout.block().is_some() {
                continue;
            }
            let g = graph(m, n, k, [ScaledFormat::F8E4M3; 2], layout, true);
            let args = [
                ("x", TensorData::from_f32(&[m, k], &vec![1.5; m * k])),
                ("w", TensorData::from_f32(&[n, k], &vec![-0.75; n * k])),
                ("b", TensorData::from_f32(&[n], &vec![0.25; n])),
            ];
            let (got, want) = both(&g, &args);
            assert_eq!(got, want, "{m}x{n}x{k} {layout}");
        }
    }
}

/// Strided operands: the quantizers read a transposed and a narrowed f32 view, and the
/// scaled matmul reads its left codes through a narrow of a wider code tensor. The
/// executor's in-place path takes only dense operands, so these go through its copying
/// path; the results must still be the oracle's bits.
#[test]
fn strided_operands_of_the_scaled_ops_give_the_oracle_bit_for_bit() {
    let mut rng = Rng(0x5eed_0f5c_a1ed);
    let (m, n, k, pad) = (5, 7, 64, 32);
    for layout in LAYOUTS {
        let f = ScaledFormat::F8E4M3;
        let x = exact_rows(&mut rng, m, k, f, layout);
        let w = exact_rows(&mut rng, n, k, f, layout);
        // x stored transposed ([k, m]); w stored inside wider rows ([n, pad + k]).
        let xt: Vec<f32> = (0..k * m).map(|i| x[(i % m) * k + i / m]).collect();
        let mut ww = vec![f32::NAN; n * (pad + k)];
        for r in 0..n {
            ww[r * (pad + k) + pad..(r + 1) * (pad + k)].copy_from_slice(&w[r * k..(r + 1) * k]);
        }
        let mut g = Graph::new("strided_quantize");
        let xi = g.input("xt", Shape::new(&[k, m], DType::F32));
        let xv = g
            .add_op(Op::Transpose { perm: vec![1, 0] }, vec![xi])
            .unwrap();
        let wi = g.input("ww", Shape::new(&[n, pad + k], DType::F32));
        let wv = g
            .add_op(
                Op::Narrow {
                    axis: 1,
                    start: pad,
                    len: k,
                },
                vec![wi],
            )
            .unwrap();
        let mut outs = Vec::new();
        for t in [xv, wv] {
            let (q, s) = quantized(&mut g, t, f, layout);
            outs.extend([q, s]);
        }
        let y = g
            .add_op(
                Op::ScaledMatMul {
                    lhs_format: f,
                    rhs_format: f,
                    scale_layout: layout,
                    has_bias: false,
                },
                vec![outs[0], outs[2], outs[1], outs[3]],
            )
            .unwrap();
        outs.push(y);
        g.set_outputs(outs);
        let args = [
            ("xt", TensorData::from_f32(&[k, m], &xt)),
            ("ww", TensorData::from_f32(&[n, pad + k], &ww)),
        ];
        let (got, want) = both(&g, &args);
        assert_eq!(got, want, "quantizers on strided views, {layout}");
        // The same product through graph()'s dense path gives the same bits.
        let dense = graph(m, n, k, [f; 2], layout, false);
        let (dense_got, _) = both(
            &dense,
            &[
                ("x", TensorData::from_f32(&[m, k], &x)),
                ("w", TensorData::from_f32(&[n, k], &w)),
            ],
        );
        assert_eq!(got[4], dense_got[0], "strided vs dense product, {layout}");

        // The matmul's left codes read through a narrow of a wider code tensor.
        let (lq, ls) = (&want[0], &want[1]);
        let (rq, rs) = (&want[2], &want[3]);
        let cw = lq.dtype.size_bytes() * k;
        let mut wide = vec![0xA5u8; m * (cw + pad)];
        for r in 0..m {
            wide[r * (cw + pad) + pad..(r + 1) * (cw + pad)]
                .copy_from_slice(&lq.bytes[r * cw..(r + 1) * cw]);
        }
        let wide = TensorData::new(lq.dtype, &[m, k + pad / lq.dtype.size_bytes()], wide).unwrap();
        let mut g = Graph::new("strided_codes");
        let li = g.input("lqw", wide.shape());
        let lv = g
            .add_op(
                Op::Narrow {
                    axis: 1,
                    start: pad / lq.dtype.size_bytes(),
                    len: k,
                },
                vec![li],
            )
            .unwrap();
        let ins = [("rq", rq), ("ls", ls), ("rs", rs)].map(|(name, t)| g.input(name, t.shape()));
        let y = g
            .add_op(
                Op::ScaledMatMul {
                    lhs_format: f,
                    rhs_format: f,
                    scale_layout: layout,
                    has_bias: false,
                },
                vec![lv, ins[0], ins[1], ins[2]],
            )
            .unwrap();
        g.set_outputs(vec![y]);
        let args = [
            ("lqw", wide),
            ("rq", rq.clone()),
            ("ls", ls.clone()),
            ("rs", rs.clone()),
        ];
        let (got_codes, want_codes) = both(&g, &args);
        assert_eq!(got_codes, want_codes, "matmul on strided codes, {layout}");
        assert_eq!(
            got_codes[0], dense_got[0],
            "strided codes vs dense, {layout}"
        );
    }
}
