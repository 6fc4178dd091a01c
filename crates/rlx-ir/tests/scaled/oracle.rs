//! Oracle semantics of `ScaledQuantScale`, `ScaledQuantize` and `ScaledMatMul`, checked
//! against hand-computed scale codes and a decode-then-matmul reference written here.

use rlx_ir::{DType, Graph, Op, ScaleLayout, ScaledFormat, Shape, TensorData, interp};

/// xorshift64* — deterministic test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller).
    fn gauss(&mut self) -> f64 {
        let u = self.uniform().max(1e-300);
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * self.uniform()).cos()
    }

    /// `rows × k` normal values whose magnitude varies by up to 10^±2 between rows, so
    /// that per-block scales matter.
    fn matrix(&mut self, rows: usize, k: usize) -> Vec<f32> {
        (0..rows)
            .flat_map(|_| {
                let s = 10f64.powf(4.0 * self.uniform() - 2.0);
                (0..k)
                    .map(|_| (self.gauss() * s) as f32)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// Run `x → ScaledQuantScale → ScaledQuantize`; returns `(scales, codes)`.
fn quantize(format: ScaledFormat, layout: ScaleLayout, x: &TensorData) -> (TensorData, TensorData) {
    let mut g = Graph::new("quantize");
    let xi = g.input("x", x.shape());
    let s = g
        .add_op(
            Op::ScaledQuantScale {
                format,
                scale_layout: layout,
            },
            vec![xi],
        )
        .unwrap();
    let q = g
        .add_op(
            Op::ScaledQuantize {
                format,
                scale_layout: layout,
            },
            vec![xi, s],
        )
        .unwrap();
    g.set_outputs(vec![s, q]);
    let mut out = interp::run(&g, &[("x", x.clone())]).unwrap();
    let q = out.pop().unwrap();
    (out.pop().unwrap(), q)
}

struct MatMulRun {
    out: Vec<f32>,
    lq: TensorData,
    rq: TensorData,
    ls: TensorData,
    rs: TensorData,
}

/// The whole pipeline in one graph: both operands quantized, then `ScaledMatMul`.
fn scaled_matmul(
    formats: [ScaledFormat; 2],
    layout: ScaleLayout,
    (a, m): (&[f32], usize),
    (b, n): (&[f32], usize),
    k: usize,
    bias: Option<&[f32]>,
) -> MatMulRun {
    let mut g = Graph::new("scaled_matmul");
    let ai = g.input("a", Shape::new(&[m, k], DType::F32));
    let bi = g.input("b", Shape::new(&[n, k], DType::F32));
    let mut quant = |x, format| {
        let s = g
            .add_op(
                Op::ScaledQuantScale {
                    format,
                    scale_layout: layout,
                },
                vec![x],
            )
            .unwrap();
        let q = g
            .add_op(
                Op::ScaledQuantize {
                    format,
                    scale_layout: layout,
                },
                vec![x, s],
            )
            .unwrap();
        (q, s)
    };
    let (lq, ls) = quant(ai, formats[0]);
    let (rq, rs) = quant(bi, formats[1]);
    let mut args = vec![lq, rq, ls, rs];
    let mut feeds = vec![
        ("a", TensorData::from_f32(&[m, k], a)),
        ("b", TensorData::from_f32(&[n, k], b)),
    ];
    if let Some(bias) = bias {
        args.push(g.input("bias", Shape::new(&[n], DType::F32)));
        feeds.push(("bias", TensorData::from_f32(&[n], bias)));
    }
    let op = Op::ScaledMatMul {
        lhs_format: formats[0],
        rhs_format: formats[1],
        scale_layout: layout,
        has_bias: bias.is_some(),
    };
    let y = g.add_op(op, args).unwrap();
    g.set_outputs(vec![y, lq, rq, ls, rs]);
    let out = interp::run(&g, &feeds).unwrap();
    assert_eq!(out[0].dtype, DType::F32);
    assert_eq!(out[0].dims, vec![m, n]);
    MatMulRun {
        out: out[0].to_f32_vec(),
        lq: out[1].clone(),
        rq: out[2].clone(),
        ls: out[3].clone(),
        rs: out[4].clone(),
    }
}

/// The value a scale code stands for, written independently of the crate.
fn scale_value(layout: ScaleLayout, code: f64) -> f64 {
    match layout {
        ScaleLayout::PerTensor => code,
        ScaleLayout::BlockMxE8M0 { .. } => 2f64.powi(code as i32 - 127),
        ScaleLayout::Nvfp4 { .. } => ScaledFormat::F8E4M3.decode(code as u8) as f64,
    }
}

/// `decode(code) · scale` per element of a `[rows, k]` operand.
fn dequantize(
    format: ScaledFormat,
    layout: ScaleLayout,
    q: &TensorData,
    s: &TensorData,
) -> Vec<f64> {
    let k = q.dims[1];
    let scales = s.to_f64_vec();
    q.bytes
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let si = match layout.block() {
                None => 0,
                Some(b) => (i / k) * (k / b as usize) + (i % k) / b as usize,
            };
            format.decode(c) as f64 * scale_value(layout, scales[si])
        })
        .collect()
}

fn matmul_f64(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0;
            for p in 0..k {
                acc += a[i * k + p] * b[j * k + p];
            }
            out[i * n + j] = acc;
        }
    }
    out
}

fn cosine(x: &[f64], y: &[f64]) -> f64 {
    let dot: f64 = x.iter().zip(y).map(|(a, b)| a * b).sum();
    let nx: f64 = x.iter().map(|a| a * a).sum::<f64>().sqrt();
    let ny: f64 = y.iter().map(|a| a * a).sum::<f64>().sqrt();
    dot / (nx * ny)
}

/// Random `[16, 128] × [24, 128]ᵀ` through the scaled pipeline: the result must equal the
/// decode-then-matmul reference bit for bit and be close (cosine) to the exact product.
fn check_random_matmul(
    formats: [ScaledFormat; 2],
    layout: ScaleLayout,
    min_cosine: f64,
    seed: u64,
    with_bias: bool,
) {
    let (m, n, k) = (16, 24, 128);
    let mut rng = Rng(seed);
    let a = rng.matrix(m, k);
    let b = rng.matrix(n, k);
    let bias: Vec<f32> = (0..n).map(|_| rng.gauss() as f32).collect();
    let run = scaled_matmul(
        formats,
        layout,
        (&a, m),
        (&b, n),
        k,
        with_bias.then_some(&bias[..]),
    );
    let da = dequantize(formats[0], layout, &run.lq, &run.ls);
    let db = dequantize(formats[1], layout, &run.rq, &run.rs);
    let mut reference = matmul_f64(&da, &db, m, n, k);
    if with_bias {
        for (i, r) in reference.iter_mut().enumerate() {
            *r += bias[i % n] as f64;
        }
    }
    for (i, (&got, &want)) in run.out.iter().zip(&reference).enumerate() {
        assert_eq!(
            got.to_bits(),
            (want as f32).to_bits(),
            "{formats:?} {layout}: element {i}"
        );
    }
    let a64: Vec<f64> = a.iter().map(|&v| v as f64).collect();
    let b64: Vec<f64> = b.iter().map(|&v| v as f64).collect();
    let exact = matmul_f64(&a64, &b64, m, n, k);
    let got: Vec<f64> = run.out.iter().map(|&o| o as f64).collect();
    let got_no_bias: Vec<f64> = if with_bias {
        got.iter()
            .enumerate()
            .map(|(i, g)| g - bias[i % n] as f64)
            .collect()
    } else {
        got
    };
    let c = cosine(&got_no_bias, &exact);
    assert!(
        c >= min_cosine,
        "{formats:?} {layout}: cosine {c} < {min_cosine}"
    );
}

#[test]
fn mx_fp8_matmul_matches_reference_and_exact_product() {
    let f = ScaledFormat::F8E4M3;
    check_random_matmul([f, f], ScaleLayout::mx(), 0.99, 1, false);
}

#[test]
fn mx_fp4_matmul_matches_reference_and_exact_product() {
    let f = ScaledFormat::F4E2M1;
    check_random_matmul([f, f], ScaleLayout::mx(), 0.9, 2, false);
}

#[test]
fn nvfp4_matmul_matches_reference_and_exact_product() {
    let f = ScaledFormat::F4E2M1;
    check_random_matmul([f, f], ScaleLayout::nvfp4(), 0.9, 3, false);
}

#[test]
fn per_tensor_and_mixed_format_matmuls_with_bias() {
    use ScaledFormat::*;
    check_random_matmul([F8E5M2, F8E5M2], ScaleLayout::PerTensor, 0.9, 4, true);
    check_random_matmul([F8E4M3, F8E5M2], ScaleLayout::mx(), 0.99, 5, true);
    check_random_matmul(
        [F8E4M3Fnuz, F6E2M3],
        ScaleLayout::BlockMxE8M0 { block: 16 },
        0.99,
        6,
        true,
    );
    check_random_matmul(
        [F6E3M2, ScaledFormat::custom(3, 0)],
        ScaleLayout::nvfp4(),
        0.9,
        7,
        false,
    );
}

#[test]
fn scaled_matmul_of_hand_written_codes() {
    // F4E2M1 codes: 0x2 = 1.0, 0x5 = 3.0, 0xb = -1.5, 0x7 = 6.0; per-tensor scales 0.5, 2.
    let f = ScaledFormat::F4E2M1;
    let mut g = Graph::new("hand");
    let lq = g.input("lq", Shape::new(&[1, 2], DType::U8));
    let rq = g.input("rq", Shape::new(&[2, 2], DType::U8));
    let ls = g.input("ls", Shape::new(&[1], DType::F32));
    let rs = g.input("rs", Shape::new(&[1], DType::F32));
    let bias = g.input("bias", Shape::new(&[2], DType::F32));
    let op = Op::ScaledMatMul {
        lhs_format: f,
        rhs_format: f,
        scale_layout: ScaleLayout::PerTensor,
        has_bias: true,
    };
    let y = g.add_op(op, vec![lq, rq, ls, rs, bias]).unwrap();
    g.set_outputs(vec![y]);
    let u8s = |dims: &[usize], v: &[i64]| TensorData::from_i64_as(DType::U8, dims, v);
    let out = interp::run(
        &g,
        &[
            ("lq", u8s(&[1, 2], &[0x2, 0x5])),
            ("rq", u8s(&[2, 2], &[0xb, 0x7, 0x2, 0x2])),
            ("ls", TensorData::from_f32(&[1], &[0.5])),
            ("rs", TensorData::from_f32(&[1], &[2.0])),
            ("bias", TensorData::from_f32(&[2], &[0.25, -1.0])),
        ],
    )
    .unwrap();
    // row 0: [0.5, 1.5]; rhs rows: [-3, 12], [2, 2].
    assert_eq!(
        out[0].to_f32_vec(),
        vec![-1.5 + 18.0 + 0.25, 1.0 + 3.0 - 1.0]
    );
}

#[test]
fn per_tensor_scale_maps_absmax_to_max_finite() {
    let f = ScaledFormat::F8E4M3;
    let x = TensorData::from_f32(&[2, 3], &[1.0, -896.0, 3.0, 0.5, 2.0, -7.0]);
    let (s, q) = quantize(f, ScaleLayout::PerTensor, &x);
    assert_eq!(
        (s.dtype, s.dims.clone(), s.to_f32_vec()),
        (DType::F32, vec![1], vec![2.0])
    );
    assert_eq!(q.dtype, DType::U8);
    assert_eq!(q.dims, vec![2, 3]);
    assert_eq!(q.bytes[1], 0xfe); // -448
    let (s, q) = quantize(
        f,
        ScaleLayout::PerTensor,
        &TensorData::from_f32(&[4], &[0.0; 4]),
    );
    assert_eq!(s.to_f32_vec(), vec![1.0]);
    assert_eq!(q.bytes, vec![0; 4]);
    // Infinities are left out of the absmax and saturate.
    let x = TensorData::from_f32(&[3], &[f32::INFINITY, 3.0, -6.0]);
    let (s, q) = quantize(ScaledFormat::F4E2M1, ScaleLayout::PerTensor, &x);
    assert_eq!(s.to_f32_vec(), vec![1.0]);
    assert_eq!(q.bytes, vec![0x7, 0x5, 0xf]);
}

#[test]
fn mx_scale_codes_follow_the_ocp_shared_exponent_rule() {
    let x = TensorData::from_f32(
        &[2, 8],
        &[
            3.0, -1.0, 0.0, 2.9, 0.0, 0.0, 0.0, -0.0, 448.0, 1.0, 2.0, 3.0, 1e-3, 0.0, 0.0, 0.0,
        ],
    );
    let (s, _) = quantize(
        ScaledFormat::F8E4M3,
        ScaleLayout::BlockMxE8M0 { block: 4 },
        &x,
    );
    assert_eq!(s.dtype, DType::U8);
    assert_eq!(s.dims, vec![2, 2]);
    // ⌊log2 absmax⌋ − ⌊log2 448⌋ + 127: 3 → 1−8+127; 0 → code 0; 448 → 127; 1e-3 → −10−8+127.
    assert_eq!(s.bytes, vec![120, 0, 127, 109]);
    let x = TensorData::from_f32(&[3, 2], &[1e38, 1.0, 1e-40, 0.0, f32::MAX, 5.0]);
    let (s, _) = quantize(
        ScaledFormat::F4E2M1,
        ScaleLayout::BlockMxE8M0 { block: 2 },
        &x,
    );
    // 1e38 ≈ 2^126.2 → 126−2+127; 1e-40 ≈ 2^−132.9 → clamps to 0; f32::MAX → 127−2+127.
    assert_eq!(s.bytes, vec![251, 0, 252]);
    let tiny = ScaledFormat::custom_with_bias(1, 0, 127); // max 2^−126
    let (s, _) = quantize(tiny, ScaleLayout::BlockMxE8M0 { block: 2 }, &x);
    // 2^126 / 2^-126 clamps below E8M0's NaN code; 1e-40 → −133 + 126 + 127.
    assert_eq!(s.bytes, vec![254, 120, 254]);
}

#[test]
fn mx_quantized_block_maximum_is_within_half_an_ulp() {
    let mut rng = Rng(11);
    let (rows, k) = (8, 64);
    let x = rng.matrix(rows, k);
    let f = ScaledFormat::F8E4M3;
    let layout = ScaleLayout::mx();
    let (s, q) = quantize(f, layout, &TensorData::from_f32(&[rows, k], &x));
    let d = dequantize(f, layout, &q, &s);
    for (blk, xs) in x.chunks(32).enumerate() {
        let (i, amax) =
            xs.iter().enumerate().fold(
                (0, 0.0f32),
                |b, (i, v)| if v.abs() > b.1 { (i, v.abs()) } else { b },
            );
        let rel = (d[blk * 32 + i].abs() - amax as f64).abs() / amax as f64;
        // E4M3 has 3 mantissa bits: relative rounding error ≤ 2^−4 (no saturation: the
        // scaled absmax is < 2^9 and the MX rule can put it above 448 only if ≥ 448).
        assert!(
            rel <= 1.0 / 16.0 + 1e-12
                || d[blk * 32 + i].abs() == 448.0 * scale_value(layout, s.to_f64_vec()[blk]),
            "block {blk}: rel {rel}"
        );
    }
}

#[test]
fn nvfp4_scales_are_e4m3_codes_of_absmax_over_six() {
    let f = ScaledFormat::F4E2M1;
    let x = TensorData::from_f32(
        &[1, 16],
        &[
            6.0, -1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, -3.0, 0.1, 0.0, 0.0, 3000.0, 1.0, 0.0, 0.0,
        ],
    );
    let (s, q) = quantize(f, ScaleLayout::Nvfp4 { group: 4 }, &x);
    let e4m3 = ScaledFormat::F8E4M3;
    assert_eq!(
        s.bytes,
        vec![e4m3.encode(1.0), 0, e4m3.encode(0.5), e4m3.encode(448.0)]
    );
    assert_eq!(s.bytes[0], 0x38);
    // Group 0 at scale 1: 6, −1, 0, 2 → codes 0x7, 0xa (−1), 0, 0x4.
    assert_eq!(&q.bytes[0..4], &[0x7, 0xa, 0x0, 0x4]);
    // Zero group → zero codes; 3000 saturates at scale 448 (3000/448 ≈ 6.7 → 6).
    assert_eq!(&q.bytes[4..8], &[0; 4]);
    assert_eq!(q.bytes[12], 0x7);
    // A group whose scale underflows E4M3 gets scale code 0 and all-zero codes.
    let x = TensorData::from_f32(&[4], &[1e-6, -1e-6, 5e-7, 0.0]);
    let (s, q) = quantize(f, ScaleLayout::Nvfp4 { group: 4 }, &x);
    assert_eq!((s.bytes, q.bytes), (vec![0], vec![0; 4]));
}

#[test]
fn quantize_codes_are_encode_of_x_over_its_block_scale() {
    let mut rng = Rng(21);
    let (rows, k) = (6, 64);
    let x = rng.matrix(rows, k);
    for (f, layout) in [
        (ScaledFormat::F8E4M3, ScaleLayout::mx()),
        (
            ScaledFormat::F8E5M2Fnuz,
            ScaleLayout::BlockMxE8M0 { block: 8 },
        ),
        (ScaledFormat::F4E2M1, ScaleLayout::nvfp4()),
        (ScaledFormat::F6E3M2, ScaleLayout::PerTensor),
        (ScaledFormat::custom(2, 2), ScaleLayout::Nvfp4 { group: 32 }),
    ] {
        let (s, q) = quantize(f, layout, &TensorData::from_f32(&[rows, k], &x));
        let scales = s.to_f64_vec();
        for (i, &v) in x.iter().enumerate() {
            let si = layout
                .block()
                .map_or(0, |b| (i / k) * (k / b as usize) + (i % k) / b as usize);
            let sc = scale_value(layout, scales[si]);
            let want = if sc == 0.0 {
                0
            } else {
                f.encode_f64(v as f64 / sc)
            };
            assert_eq!(q.bytes[i], want, "{f} {layout} element {i}");
        }
    }
}

#[test]
fn quantize_accepts_f16_and_f64_inputs() {
    let vals: Vec<f64> = (0..32).map(|i| (i as f64 - 15.5) * 0.37).collect();
    let x32 = TensorData::from_f64_as(DType::F32, &[1, 32], &vals);
    let (s32, q32) = quantize(ScaledFormat::F8E4M3, ScaleLayout::mx(), &x32);
    for dt in [DType::F16, DType::F64] {
        let x = TensorData::from_f64_as(dt, &[1, 32], &vals);
        let (s, q) = quantize(ScaledFormat::F8E4M3, ScaleLayout::mx(), &x);
        assert_eq!(s.bytes, s32.bytes, "{dt}");
        // f16 storage moves some values by < half an f16 ulp — never across an E4M3 code
        // boundary for these inputs.
        assert_eq!(q.bytes, q32.bytes, "{dt}");
    }
}
