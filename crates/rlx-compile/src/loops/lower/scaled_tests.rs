//! The scaled ops lowered to the loop IR against the `rlx-ir` oracle, bit for bit: every
//! code of every named format (and two custom ones), every scale layout, zero / NaN /
//! infinite / negative scales, ties, signed zeros, NaN and infinite inputs, M = 1 and
//! N = 1, per-tensor K not a multiple of anything. The loop interpreter runs the
//! lowering; the matmul's NaN outputs are compared as NaN (their payload is not part of
//! the oracle's contract), every other output by its bytes.

use super::super::tests::run_loops;
use crate::loops::{Dialect, WgslError, lower_kernel, render_c, render_wgsl};
use crate::{CompileOptions, compile};
use rlx_ir::{
    DType, DimBinding, Graph, NodeId, Op, ScaleLayout, ScaledFormat, Shape, TensorData, interp,
};

pub(super) fn formats() -> Vec<ScaledFormat> {
    let mut v = ScaledFormat::NAMED.to_vec();
    // No mantissa bits (ties decided by the exponent field's parity), and a large bias.
    v.push(ScaledFormat::custom(3, 0));
    v.push(ScaledFormat::custom_with_bias(2, 2, 9));
    v
}

pub(super) fn layouts() -> [ScaleLayout; 4] {
    [
        ScaleLayout::PerTensor,
        ScaleLayout::BlockMxE8M0 { block: 8 },
        ScaleLayout::Nvfp4 { group: 4 },
        ScaleLayout::Nvfp4 { group: 16 },
    ]
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A value of random sign and magnitude `2^(−40..24)`, with 1 in 16 special
    /// (±0, NaN, ±∞) and 1 in 8 a small exact multiple of ½ (ties of narrow formats).
    fn value(&mut self) -> f64 {
        let r = self.next();
        let sign = if r & 1 == 0 { 1.0 } else { -1.0 };
        match (r >> 1) % 16 {
            0 => [0.0, -0.0, f64::NAN, f64::INFINITY, -f64::INFINITY][(r >> 8) as usize % 5],
            1 | 2 => sign * ((r >> 8) % 40) as f64 * 0.5,
            _ => {
                let e = ((r >> 8) % 64) as i32 - 40;
                let m = 1.0 + ((r >> 16) % (1 << 20)) as f64 / (1 << 20) as f64;
                sign * m * 2f64.powi(e)
            }
        }
    }
}

pub(super) fn op(g: &mut Graph, o: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(o, inputs).unwrap_or_else(|e| panic!("{e}"))
}

/// Compile `g`, check every kernel is a lowered opaque scaled kernel that renders as
/// CUDA/HIP and that WGSL refuses by name, then run it through the loop interpreter.
pub(super) fn run(g: &Graph, inputs: &[(&str, TensorData)]) -> (Vec<TensorData>, Vec<TensorData>) {
    let p = compile(g, &CompileOptions::default()).unwrap();
    for k in 0..p.kernels.len() {
        let label = p.kernels[k].label();
        assert!(label.starts_with("opaque(scaled_"), "{label}");
        let lk = lower_kernel(&p, k).unwrap_or_else(|e| panic!("{e}"));
        assert!(lk.group.is_none(), "{label}: an item kernel");
        for d in [Dialect::Cuda, Dialect::Hip] {
            let src = render_c(&lk, d);
            assert!(src.contains(&lk.name), "{label}");
        }
        // The per-tensor matmul folds in f64, and f64 data has no WGSL type: WGSL refuses
        // those by name. The quantizers of f32 / f16 / bf16 data and the block-scaled
        // matmul (a software f64 in i32) are integer code: valid WGSL.
        let f64_data = lk.bufs.iter().any(|b| b.dtype == DType::F64);
        let f64_fold = label.contains("scaled_matmul") && per_tensor_matmul(g);
        match render_wgsl(&lk) {
            Err(WgslError::F64 { kernel, .. } | WgslError::WideInteger { kernel, .. })
                if f64_data || f64_fold =>
            {
                assert_eq!(kernel, lk.name)
            }
            Ok(src) if !f64_data && !f64_fold => validate_wgsl(&src, &label),
            other => panic!("{label} (f64 data: {f64_data}): unexpected WGSL result {other:?}"),
        }
    }
    let got = run_loops(&p, inputs, &DimBinding::default()).unwrap_or_else(|e| panic!("{e}"));
    let want = interp::run(g, inputs).unwrap();
    (got, want)
}

/// Whether `g` holds a scaled matmul with a per-tensor scale (lowered in f64).
fn per_tensor_matmul(g: &Graph) -> bool {
    g.nodes().iter().any(|n| {
        matches!(
            n.op,
            Op::ScaledMatMul {
                scale_layout: ScaleLayout::PerTensor,
                ..
            }
        )
    })
}

/// Parse and validate `src` as naga does for wgpu.
pub(super) fn validate_wgsl(src: &str, what: &str) {
    let module = naga::front::wgsl::parse_str(src)
        .unwrap_or_else(|e| panic!("{what}: WGSL parse: {}\n{src}", e.emit_to_string(src)));
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{what}: WGSL validation: {e:?}\n{src}"));
}

pub(super) fn same_bytes(got: &TensorData, want: &TensorData, what: &str) {
    assert_eq!(got.dtype, want.dtype, "{what}");
    assert_eq!(got.dims, want.dims, "{what}");
    if got.bytes != want.bytes {
        let i = (0..got.bytes.len())
            .find(|&i| got.bytes[i] != want.bytes[i])
            .unwrap();
        panic!(
            "{what}: byte {i}: got {} want {}",
            got.bytes[i], want.bytes[i]
        );
    }
}

/// f32 outputs equal bit for bit, any NaN equal to any NaN.
pub(super) fn same_f32(got: &TensorData, want: &TensorData, what: &str) {
    assert_eq!(got.dims, want.dims, "{what}");
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a.to_bits() == b.to_bits();
        assert!(ok, "{what}: element {i}: got {a:e} want {b:e}");
    }
}

pub(super) fn quant_graph(dt: DType, dims: &[usize], f: ScaledFormat, l: ScaleLayout) -> Graph {
    let mut g = Graph::new("q");
    let x = g.input("x", Shape::new(dims, dt));
    let (q, s) = rlx_testkit::quantize(&mut g, x, f, l);
    g.set_outputs(vec![s, q]);
    g
}

#[test]
fn scale_and_quantize_of_random_values_equal_the_oracle_for_every_format_layout_and_dtype() {
    let mut rng = Rng(0x5eed);
    for f in formats() {
        for l in layouts() {
            for dt in [DType::F32, DType::F16, DType::BF16, DType::F64] {
                // K = 16 fits every block; K = 7 (per tensor only) fits none. M = 1 too.
                let shapes: &[&[usize]] = match l {
                    ScaleLayout::PerTensor => &[&[3, 7], &[1, 16], &[2, 3, 8]],
                    _ => &[&[3, 16], &[1, 16], &[2, 2, 16]],
                };
                for dims in shapes {
                    let n: usize = dims.iter().product();
                    let mut v: Vec<f64> = (0..n).map(|_| rng.value()).collect();
                    if rng.next().is_multiple_of(2) {
                        // A zero block (an all-zero tensor per tensor: scale 1.0).
                        let z = if l.block().is_some() { 16 } else { n };
                        v[..z].iter_mut().for_each(|x| *x = 0.0);
                    }
                    let g = quant_graph(dt, dims, f, l);
                    let x = TensorData::from_f64_as(dt, dims, &v);
                    let (got, want) = run(&g, &[("x", x)]);
                    let what = format!("{f} {l} {dt:?} {dims:?}");
                    same_bytes(&got[0], &want[0], &format!("scale of {what}"));
                    same_bytes(&got[1], &want[1], &format!("codes of {what}"));
                }
            }
        }
    }
}

#[test]
fn quantize_hits_every_code_and_every_tie_with_scales_of_every_kind() {
    for f in formats() {
        let vals = f.representable_values();
        // Every representable value, both signs, and every midpoint (ties) and a value
        // just either side of it, at scale 1; then the same under other scales.
        let mut x: Vec<f64> = Vec::new();
        for w in vals.windows(2) {
            let (a, b) = (w[0] as f64, w[1] as f64);
            let mid = (a + b) / 2.0;
            for v in [a, mid, mid * (1.0 + 1e-9), mid * (1.0 - 1e-9)] {
                x.extend([v, -v]);
            }
        }
        let top = *vals.last().unwrap() as f64;
        x.extend([
            top,
            top * 1.5,
            top * 4.0,
            f64::INFINITY,
            f64::NAN,
            -0.0,
            1e-300,
        ]);
        x.extend([-f64::INFINITY, -top * 3.0]);
        x.resize(x.len().div_ceil(16) * 16, 0.25);
        let k = 16;
        let rows = x.len() / k;
        for l in layouts() {
            let scales: Vec<TensorData> = match l {
                ScaleLayout::PerTensor => [1.0, 0.375, -2.0, 0.0, f64::NAN, f64::INFINITY, 1e-30]
                    .iter()
                    .map(|&s| TensorData::from_f64_as(DType::F32, &[1], &[s]))
                    .collect(),
                _ => {
                    // Every scale code, block by block, in two rotations (so every code
                    // meets several blocks of values), and all-ones codes.
                    let per = k / l.block().unwrap() as usize;
                    let count = rows * per;
                    (0..3u64)
                        .map(|r| {
                            let c: Vec<i64> = (0..count as u64)
                                .map(|i| match r {
                                    0 => (i * 7 + 3) % 256,
                                    1 => (i * 13 + 120) % 256,
                                    _ => 127,
                                } as i64)
                                .collect();
                            TensorData::from_i64_as(DType::U8, &[rows, per], &c)
                        })
                        .collect()
                }
            };
            let mut g = Graph::new("qz");
            let xs = g.input("x", Shape::new(&[rows, k], DType::F64));
            let ss = g.input("s", scales[0].shape_of());
            let q = op(
                &mut g,
                Op::ScaledQuantize {
                    format: f,
                    scale_layout: l,
                },
                vec![xs, ss],
            );
            g.set_outputs(vec![q]);
            let xd = TensorData::from_f64_as(DType::F64, &[rows, k], &x);
            for (si, s) in scales.into_iter().enumerate() {
                let (got, want) = run(&g, &[("x", xd.clone()), ("s", s)]);
                same_bytes(&got[0], &want[0], &format!("{f} {l} scales #{si}"));
            }
        }
    }
}

trait ShapeOf {
    fn shape_of(&self) -> Shape;
}

impl ShapeOf for TensorData {
    fn shape_of(&self) -> Shape {
        Shape::new(&self.dims, self.dtype)
    }
}

fn matmul_graph(fs: [ScaledFormat; 2], l: ScaleLayout, m: usize, n: usize, k: usize) -> Graph {
    let per = match l.block() {
        None => 1,
        Some(b) => k / b as usize,
    };
    let sdims = |r: usize| match l {
        ScaleLayout::PerTensor => Shape::new(&[1], DType::F32),
        _ => Shape::new(&[r, per], DType::U8),
    };
    let mut g = Graph::new("smm");
    let a = g.input("a", Shape::new(&[m, k], DType::U8));
    let b = g.input("b", Shape::new(&[n, k], DType::U8));
    let sa = g.input("sa", sdims(m));
    let sb = g.input("sb", sdims(n));
    let bias = g.input("bias", Shape::new(&[n], DType::BF16));
    let mut ins = vec![a, b, sa, sb];
    let has_bias = n % 2 == 1;
    if has_bias {
        ins.push(bias);
    }
    let y = op(
        &mut g,
        Op::ScaledMatMul {
            lhs_format: fs[0],
            rhs_format: fs[1],
            scale_layout: l,
            has_bias,
        },
        ins,
    );
    g.set_outputs(vec![y]);
    g
}

#[test]
fn scaled_matmul_over_every_code_equals_the_oracle_bit_for_bit() {
    let mut rng = Rng(77);
    let fs = formats();
    for (fi, &fa) in fs.iter().enumerate() {
        // Each format against itself and against the next one (mixed operands).
        for fb in [fa, fs[(fi + 1) % fs.len()]] {
            for l in layouts() {
                // (m, n, k): every code of a in the first shape; M = 1; N = 1; per
                // tensor K = 9.
                let k = if l.block().is_some() { 32 } else { 9 };
                for (m, n) in [(256usize.div_ceil(k), 3), (1, 5), (4, 1)] {
                    let codes = |rng: &mut Rng, r: usize, all: bool| -> TensorData {
                        let c: Vec<i64> = (0..r * k)
                            .map(|i| {
                                if all {
                                    (i % 256) as i64
                                } else {
                                    (rng.next() % 256) as i64
                                }
                            })
                            .collect();
                        TensorData::from_i64_as(DType::U8, &[r, k], &c)
                    };
                    let scales = |rng: &mut Rng, r: usize, wild: bool| -> TensorData {
                        match l {
                            ScaleLayout::PerTensor => {
                                let s = if wild {
                                    [0.0, -0.75, f64::NAN, 3e-3][(rng.next() % 4) as usize]
                                } else {
                                    0.625
                                };
                                TensorData::from_f64_as(DType::F32, &[1], &[s])
                            }
                            _ => {
                                let per = k / l.block().unwrap() as usize;
                                let c: Vec<i64> = (0..r * per)
                                    .map(|_| {
                                        let x = rng.next();
                                        if wild {
                                            (x % 256) as i64
                                        } else if matches!(l, ScaleLayout::Nvfp4 { .. }) {
                                            (0x30 + x % 0x20) as i64
                                        } else {
                                            (120 + x % 16) as i64
                                        }
                                    })
                                    .collect();
                                TensorData::from_i64_as(DType::U8, &[r, per], &c)
                            }
                        }
                    };
                    let g = matmul_graph([fa, fb], l, m, n, k);
                    for wild in [false, true] {
                        let bias: Vec<f64> = (0..n).map(|_| rng.value().clamp(-1e3, 1e3)).collect();
                        let inputs = [
                            ("a", codes(&mut rng, m, m * k >= 256)),
                            ("b", codes(&mut rng, n, false)),
                            ("sa", scales(&mut rng, m, wild)),
                            ("sb", scales(&mut rng, n, wild)),
                            ("bias", TensorData::from_f64_as(DType::BF16, &[n], &bias)),
                        ];
                        let (got, want) = run(&g, &inputs);
                        let what = format!("{fa} x {fb} {l} m={m} n={n} k={k} wild={wild}");
                        same_f32(&got[0], &want[0], &what);
                    }
                }
            }
        }
    }
}
