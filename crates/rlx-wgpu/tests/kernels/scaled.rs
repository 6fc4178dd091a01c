//! The scaled low-precision ops on the adapter: `scaled_quant_scale` and
//! `scaled_quantize` of f32 / f16 / bf16 data run as WGSL (the loop IR's integer
//! spelling) and give the oracle's bytes exactly for every format and scale layout, on
//! data full of hard cases (ties between codes and their f32 neighbours, f32 subnormals,
//! ±0, ±∞, NaN, absmax at powers of two, zero blocks). `scaled_matmul` with block
//! scales (MX, NVFP4) runs as WGSL too (a software f64 in 32-bit integers) and gives
//! the oracle's f32 bits (NaN as NaN); with a per-tensor scale its products round in f64,
//! so it runs on the host, and says why.

use super::support;
use rlx_ir::{DType, Graph, NodeId, Op, ScaleLayout, ScaledFormat, Shape, TensorData};
use rlx_runtime::Device;

fn formats() -> Vec<ScaledFormat> {
    let mut v = ScaledFormat::NAMED.to_vec();
    v.push(ScaledFormat::custom(3, 0));
    v.push(ScaledFormat::custom_with_bias(2, 2, 9));
    v.push(ScaledFormat::custom_with_bias(3, 4, 100));
    v
}

/// `k`-wide rows of hard values for `f`: each row a different mix of representable
/// values, midpoints and their f32 neighbours, scaled by a power of two per row (so the
/// block scales vary), with specials sprinkled in.
fn hard_data(f: ScaledFormat, rows: usize, k: usize) -> Vec<f32> {
    let vals = f.representable_values();
    let mut pool: Vec<f32> = Vec::new();
    for w in vals.windows(2) {
        let (a, b) = (w[0] as f64, w[1] as f64);
        for v in [a, (a + b) / 2.0] {
            let x = v as f32;
            pool.extend([x, x.next_up(), x.next_down(), -x]);
        }
    }
    let specials = [
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        -f32::INFINITY,
        f32::from_bits(1),
        f32::from_bits(0x7f_ffff),
        f32::MAX,
    ];
    (0..rows * k)
        .map(|i| {
            let (r, j) = (i / k, i % k);
            if (i * 7) % 41 == 0 {
                return specials[(i / 41) % specials.len()];
            }
            let v = pool[(i * 13 + r) % pool.len()];
            // Rows 0 mod 9 stay at scale 1; others move by up to 2^±60 (f32 subnormal
            // data included); every fifth row is all zeros.
            if r % 5 == 4 {
                0.0
            } else if r % 9 == 0 {
                v
            } else {
                v * 2f32.powi(((r * 37 + j / 16) % 121) as i32 - 60)
            }
        })
        .collect()
}

fn quant_graph(f: ScaledFormat, l: ScaleLayout, dt: DType, rows: usize, k: usize) -> Graph {
    let mut g = Graph::new(format!("scaled_{f}_{l}_{dt}"));
    let x = g.input("x", Shape::new(&[rows, k], dt));
    let (q, s) = rlx_testkit::quantize(&mut g, x, f, l);
    g.set_outputs(vec![s, q]);
    g
}

fn op(g: &mut Graph, o: Op, ins: Vec<NodeId>) -> NodeId {
    g.add_op(o, ins).unwrap_or_else(|e| panic!("{e}"))
}

/// Run `g` on the adapter and return (results, per-kernel placement, explain).
fn run_gpu(g: &Graph, args: &[TensorData]) -> (Vec<TensorData>, Vec<bool>, String) {
    support::register_cpu();
    let (exe, placement) = rlx_wgpu::compile_with_placement(Device::Gpu, g)
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{g}"));
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe
        .run(&views)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", g.name, exe.explain()));
    (got, placement, exe.explain())
}

fn same_bytes(got: &TensorData, want: &TensorData, what: &str) {
    assert_eq!((got.dtype, &got.dims), (want.dtype, &want.dims), "{what}");
    if let Some(i) = (0..got.bytes.len()).find(|&i| got.bytes[i] != want.bytes[i]) {
        panic!(
            "{what}: byte {i} differs: got {} want {}",
            got.bytes[i], want.bytes[i]
        );
    }
}

#[test]
fn scaled_quant_scale_and_quantize_run_on_the_gpu_bit_for_bit_with_the_oracle() {
    if !support::gpu_or_skip("scaled quantizers") {
        return;
    }
    let layouts = [
        ScaleLayout::PerTensor,
        ScaleLayout::BlockMxE8M0 { block: 8 },
        ScaleLayout::mx(),
        ScaleLayout::Nvfp4 { group: 4 },
        ScaleLayout::nvfp4(),
    ];
    let mut checked = 0;
    for f in formats() {
        for l in layouts {
            for dt in [DType::F32, DType::F16, DType::BF16] {
                let (rows, k) = (45, 32);
                let v: Vec<f64> = hard_data(f, rows, k).iter().map(|&x| x as f64).collect();
                let x = match dt {
                    DType::F32 => TensorData::from_f32(
                        &[rows, k],
                        &v.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                    ),
                    _ => TensorData::from_f64_as(dt, &[rows, k], &v),
                };
                let g = quant_graph(f, l, dt, rows, k);
                let args = [x];
                let (got, placement, explain) = run_gpu(&g, &args);
                assert!(
                    placement.iter().all(|&p| p),
                    "{}: a scaled kernel fell back to the host\n{explain}",
                    g.name
                );
                let want = rlx_testkit::oracle(&g, &args).unwrap();
                same_bytes(&got[0], &want[0], &format!("{}: scales", g.name));
                same_bytes(&got[1], &want[1], &format!("{}: codes", g.name));
                checked += 1;
            }
        }
    }
    assert_eq!(checked, formats().len() * 5 * 3);
}

/// `y = a · bᵀ (+ an f32 bias)` over raw `[m, k]` / `[n, k]` codes of `fs` and their
/// scales (`u8` codes for block layouts, an f32 per tensor).
fn matmul_graph(fs: [ScaledFormat; 2], l: ScaleLayout, m: usize, n: usize, k: usize) -> Graph {
    rlx_testkit::scaled_matmul_graph(fs, l, (m, n, k), Some(DType::F32))
}

/// Codes and scales for [`matmul_graph`]: random codes (every code, NaN and ∞ ones
/// included, in half the rows; finite low codes in the rest), scale codes close together
/// or spread over the whole range (the MX NaN code and zero / negative NVFP4 scales
/// included), f32 biases of every kind.
fn matmul_args(l: ScaleLayout, m: usize, n: usize, k: usize, seed: u64) -> Vec<TensorData> {
    let mut x = seed;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut codes = |r: usize| -> TensorData {
        let c: Vec<i64> = (0..r * k)
            .map(|i| {
                let c = (next() % 256) as i64;
                if (i / k).is_multiple_of(2) {
                    c & 0x3f
                } else {
                    c
                }
            })
            .collect();
        TensorData::from_i64_as(DType::U8, &[r, k], &c)
    };
    let (a, b) = (codes(m), codes(n));
    let mut scales = |r: usize| -> TensorData {
        match l {
            ScaleLayout::PerTensor => TensorData::from_f32(&[1], &[0.375]),
            _ => {
                let per = k / l.block().unwrap() as usize;
                let c: Vec<i64> = (0..r * per)
                    .map(|i| {
                        let x = next();
                        match (l, i % 3) {
                            (ScaleLayout::BlockMxE8M0 { .. }, 0) => (120 + x % 16) as i64,
                            (ScaleLayout::BlockMxE8M0 { .. }, 1) => (40 + (x % 4) * 50) as i64,
                            (_, 0 | 1) => (0x30 + x % 0x20) as i64,
                            _ => (x % 256) as i64,
                        }
                    })
                    .collect();
                TensorData::from_i64_as(DType::U8, &[r, per], &c)
            }
        }
    };
    let (sa, sb) = (scales(m), scales(n));
    let hard = [
        0.0,
        -0.0,
        1.0e-45,
        -1.1754942e-38,
        0.375,
        -3.0e5,
        3.4028235e38,
        f32::INFINITY,
        f32::NAN,
    ];
    let bias: Vec<f32> = (0..n)
        .map(|j| hard[(j + seed as usize) % hard.len()])
        .collect();
    vec![a, b, sa, sb, TensorData::from_f32(&[n], &bias)]
}

/// f32 outputs equal bit for bit, any NaN equal to any NaN.
fn same_f32(got: &TensorData, want: &TensorData, what: &str) {
    assert_eq!(got.dims, want.dims, "{what}");
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    for (i, (x, y)) in g.iter().zip(&w).enumerate() {
        assert!(
            (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits(),
            "{what}: element {i}: got {x:e} want {y:e}"
        );
    }
}

#[test]
fn block_scaled_matmul_runs_on_the_gpu_bit_for_bit_with_the_oracle() {
    if !support::gpu_or_skip("scaled matmul") {
        return;
    }
    let layouts = [
        ScaleLayout::BlockMxE8M0 { block: 8 },
        ScaleLayout::mx(),
        ScaleLayout::Nvfp4 { group: 4 },
        ScaleLayout::nvfp4(),
    ];
    let fs = formats();
    let mut checked = 0;
    for (fi, &fa) in fs.iter().enumerate() {
        let fb = fs[(fi + 1) % fs.len()];
        for (li, l) in layouts.into_iter().enumerate() {
            let (m, n, k) = (9, 7, 64);
            let g = matmul_graph([fa, fb], l, m, n, k);
            let args = matmul_args(l, m, n, k, (fi * 8 + li) as u64 + 1);
            let (got, placement, explain) = run_gpu(&g, &args);
            assert!(
                placement.iter().all(|&p| p),
                "{}: the scaled matmul fell back to the host\n{explain}",
                g.name
            );
            let want = rlx_testkit::oracle(&g, &args).unwrap();
            same_f32(&got[0], &want[0], &g.name);
            checked += 1;
        }
    }
    assert_eq!(checked, fs.len() * 4);
}

/// The shared f64 tie cases ([`rlx_testkit::ScaledTieCase`]: every ordered sum
/// `1 ± 2^a ± 2^b ± 2^c`, one term per MX block, with `a, b, c` at the f32 rounding bit,
/// the f64 rounding bit and far below): the f64 partial sums round at and near ties, and
/// the final f32 rounding sees the f64 value (double rounding), so the shader's 53-bit
/// rounding shows in the f32 result.
#[test]
fn block_scaled_matmul_rounds_f64_ties_on_the_gpu_like_the_oracle() {
    if !support::gpu_or_skip("scaled matmul ties") {
        return;
    }
    let c = rlx_testkit::ScaledTieCase::new();
    let g = matmul_graph([c.format; 2], c.layout, c.m, c.n, c.k);
    let args = c.args();
    let (got, placement, explain) = run_gpu(&g, &args);
    assert!(placement.iter().all(|&p| p), "{explain}");
    let want = rlx_testkit::oracle(&g, &args).unwrap();
    same_f32(&got[0], &want[0], &g.name);
    let got = got[0].to_f32_vec();
    for (row, value) in c.known_rows() {
        assert_eq!(got[row], value, "{}: row {row}", g.name);
    }
}

#[test]
fn quantized_mx_matmul_pipeline_runs_wholly_on_the_gpu() {
    if !support::gpu_or_skip("scaled matmul pipeline") {
        return;
    }
    let (m, n, k) = (3, 5, 32);
    let f = ScaledFormat::F8E4M3;
    let l = ScaleLayout::mx();
    let mut g = Graph::new("scaled_matmul");
    let a = g.input("a", Shape::new(&[m, k], DType::F32));
    let b = g.input("b", Shape::new(&[n, k], DType::F32));
    let mut qs = Vec::new();
    for x in [a, b] {
        qs.push(rlx_testkit::quantize(&mut g, x, f, l));
    }
    let y = op(
        &mut g,
        Op::ScaledMatMul {
            lhs_format: f,
            rhs_format: f,
            scale_layout: l,
            has_bias: false,
        },
        vec![qs[0].0, qs[1].0, qs[0].1, qs[1].1],
    );
    g.set_outputs(vec![y]);
    let args = [
        TensorData::from_f32(&[m, k], &hard_data(f, m, k)),
        TensorData::from_f32(&[n, k], &hard_data(f, n + 2, k)[2 * k..]),
    ];
    let (got, placement, explain) = run_gpu(&g, &args);
    assert!(placement.iter().all(|&p| p), "{explain}");
    let want = rlx_testkit::oracle(&g, &args).unwrap();
    same_f32(&got[0], &want[0], &g.name);
}

#[test]
fn per_tensor_scaled_matmul_runs_on_the_host_within_its_f32_bound() {
    if !support::gpu_or_skip("per-tensor scaled matmul") {
        return;
    }
    let (m, n, k) = (3, 5, 9);
    let f = ScaledFormat::F8E4M3;
    let g = matmul_graph([f, f], ScaleLayout::PerTensor, m, n, k);
    let args = matmul_args(ScaleLayout::PerTensor, m, n, k, 3);
    let (got, placement, explain) = run_gpu(&g, &args);
    let mm = explain
        .lines()
        .find(|l| l.contains("(opaque(scaled_matmul)):"))
        .unwrap_or_else(|| panic!("no scaled_matmul kernel in\n{explain}"));
    assert!(
        mm.contains("CPU fallback (") && mm.contains("which WGSL does not have"),
        "a per-tensor matmul runs on the host for its f64 fold: {mm}\n{explain}"
    );
    assert_eq!(placement, [false], "{explain}");
    assert!(
        support::unexpected_fallbacks(&explain).is_empty(),
        "{explain}"
    );
    let want = rlx_testkit::oracle(&g, &args).unwrap();
    within_host_bound(&got[0], &want[0], &args, f, (m, n, k), &g.name);
}

/// The host's scaled matmul sums in f32 (the order depends on the path its shape
/// takes, `rlx-cpu`'s `exec/scaled.rs`): each element within `(k + 2)·2⁻²⁴·Σ|aₚbₚ|`
/// (times the per-tensor scales) plus a rounding of the oracle's f64 sum; NaN for NaN,
/// and infinities equal.
fn within_host_bound(
    got: &TensorData,
    want: &TensorData,
    args: &[TensorData],
    f: ScaledFormat,
    (m, n, k): (usize, usize, usize),
    what: &str,
) {
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    let sab = (args[2].to_f64_vec()[0] * args[3].to_f64_vec()[0]).abs();
    let eps = 2f64.powi(-24);
    for i in 0..m {
        for j in 0..n {
            let (x, y) = (g[i * n + j] as f64, w[i * n + j] as f64);
            if !y.is_finite() {
                assert!(
                    (x.is_nan() && y.is_nan()) || x == y,
                    "{what}: ({i}, {j}): got {x:e} want {y:e}"
                );
                continue;
            }
            let mag: f64 = (0..k)
                .map(|p| {
                    let a = f.decode(args[0].bytes[i * k + p]) as f64;
                    let b = f.decode(args[1].bytes[j * k + p]) as f64;
                    (a * b).abs()
                })
                .sum();
            let bound = (k as f64 + 2.0) * eps * mag * sab + 2.0 * eps * y.abs();
            assert!(
                (x - y).abs() <= bound,
                "{what}: ({i}, {j}): got {x:e} want {y:e}, bound {bound:e}"
            );
        }
    }
}

/// Graphs of the scaled quantizers and block-scaled matmuls for
/// [`super::every_kind_graphs`] (the MSL check).
pub fn msl_graphs() -> Vec<Graph> {
    [
        (ScaledFormat::F8E4M3, ScaleLayout::PerTensor),
        (ScaledFormat::F8E5M2, ScaleLayout::mx()),
        (ScaledFormat::F4E2M1, ScaleLayout::nvfp4()),
        (ScaledFormat::custom(3, 0), ScaleLayout::mx()),
    ]
    .into_iter()
    .map(|(f, l)| quant_graph(f, l, DType::F32, 2, 32))
    .chain([
        matmul_graph(
            [ScaledFormat::F8E5M2, ScaledFormat::F8E4M3],
            ScaleLayout::mx(),
            2,
            3,
            64,
        ),
        matmul_graph([ScaledFormat::F4E2M1; 2], ScaleLayout::nvfp4(), 2, 3, 32),
    ])
    .collect()
}

/// The MSL check skips kernels that have no WGSL; the scaled quantizers and the
/// block-scaled matmul must have it (on any host, no adapter needed).
#[test]
fn scaled_quantizers_and_block_scaled_matmuls_always_generate_wgsl() {
    for g in msl_graphs() {
        let shaders = rlx_wgpu::generated_wgsl(&g).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let quantizer = !g.name.starts_with("scaled_matmul");
        assert_eq!(shaders.len(), if quantizer { 2 } else { 1 }, "{}", g.name);
        for (i, s) in shaders.iter().enumerate() {
            let wgsl = s
                .as_ref()
                .unwrap_or_else(|e| panic!("{} kernel {i} has no WGSL: {e}", g.name));
            assert!(wgsl.contains("bitcast<i32>"), "{} kernel {i}", g.name);
        }
    }
}
