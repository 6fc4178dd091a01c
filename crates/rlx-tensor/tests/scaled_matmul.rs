//! `Tensor::scaled_matmul` on the compiled CPU backend: accuracy against the f32 matmul
//! (cosine similarity on random data) and agreement with the oracle interpreter's
//! decode-then-matmul (bit for bit where the f32 sums are exact, within the documented
//! f32-accumulation bound elsewhere).
#![cfg(feature = "eval")]

use rlx_ir::interp;
use rlx_tensor::{Device, ScaleLayout, ScaledFormat, Tensor};

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// The oracle's value of `t` (its graph run op by op by `rlx_ir::interp`).
fn oracle(t: &Tensor) -> Vec<f32> {
    interp::run(&t.to_graph(), &[]).unwrap()[0].to_f32_vec()
}

const CASES: [(&str, ScaledFormat, ScaleLayout, f64); 5] = [
    ("mxfp8 e4m3", ScaledFormat::F8E4M3, ScaleLayout::mx(), 0.99),
    ("mxfp8 e5m2", ScaledFormat::F8E5M2, ScaleLayout::mx(), 0.99),
    ("mxfp4", ScaledFormat::F4E2M1, ScaleLayout::mx(), 0.9),
    ("nvfp4", ScaledFormat::F4E2M1, ScaleLayout::nvfp4(), 0.9),
    (
        "per-tensor fp8",
        ScaledFormat::F8E4M3,
        ScaleLayout::PerTensor,
        0.99,
    ),
];

#[test]
fn cosine_similarity_to_the_f32_matmul_is_at_least_0_99_for_fp8_and_0_9_for_fp4() {
    let (m, n, k) = (96, 80, 512);
    let x = Tensor::randn([m, k], 1);
    let w = Tensor::randn([n, k], 2);
    let reference = x.matmul(&w.t()).to_vec_on(Device::Cpu);
    for (name, fmt, layout, min) in CASES {
        let y = x.scaled_matmul(&w, fmt, layout);
        assert_eq!(y.dims(), vec![m, n]);
        let got = y.to_vec_on(Device::Cpu);
        let c = cosine(&got, &reference);
        println!("{name}: cosine {c:.5}");
        assert!(c >= min, "{name}: cosine {c} < {min}");
    }
}

#[test]
fn random_data_is_within_the_f32_accumulation_bound_of_the_oracle() {
    let (m, n, k) = (40, 300, 320);
    let x = Tensor::randn([m, k], 3);
    let w = Tensor::randn([n, k], 4);
    let xa = x.to_vec();
    let wa = w.to_vec();
    for (name, fmt, layout, _) in CASES {
        let y = x.scaled_matmul(&w, fmt, layout);
        let (got, want) = (y.to_vec_on(Device::Cpu), oracle(&y));
        // Every decoded element is within a factor 2 of its input's magnitude (or
        // below the block's quantization step), so Σ|x||w| bounds Σ|a||b| up to 4×.
        let eps = 2f64.powi(-24);
        let mut exact = 0;
        for i in 0..m {
            for j in 0..n {
                let mag: f64 = (0..k)
                    .map(|p| (xa[i * k + p] as f64 * wa[j * k + p] as f64).abs())
                    .sum();
                let (g, o) = (got[i * n + j] as f64, want[i * n + j] as f64);
                let bound = 4.0 * (k as f64 + 2.0) * eps * mag + 2.0 * eps * o.abs();
                assert!(
                    (g - o).abs() <= bound,
                    "{name} ({i},{j}): {g} vs oracle {o}"
                );
                exact += (g == o) as usize;
            }
        }
        println!(
            "{name}: {exact}/{} elements equal the oracle bit for bit",
            m * n
        );
    }
}

/// Integers in `-7..=7` (one per row pinned at 7) times a power of two per 32-column
/// block: every scale is a power of two and every element is exact in fp8 e4m3, so the
/// f32 sums are exact.
fn exact_operand(rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut v = vec![0f32; rows * k];
    for r in 0..rows {
        for b in (0..k).step_by(32) {
            let p = 2f32.powi((next() % 3) as i32 - 1);
            for c in 0..32 {
                v[r * k + b + c] = ((next() % 15) as i32 - 7) as f32 * p;
            }
            v[r * k + b + (next() % 32) as usize] = 7.0 * p;
        }
    }
    v
}

#[test]
fn exact_data_equals_the_oracle_and_the_f32_matmul_bit_for_bit() {
    let (m, n, k) = (33, 130, 288);
    let xv = exact_operand(m, k, 5);
    let wv = exact_operand(n, k, 6);
    let x = Tensor::from_vec(xv.clone(), [m, k]);
    let w = Tensor::from_vec(wv.clone(), [n, k]);
    for layout in [ScaleLayout::mx(), ScaleLayout::PerTensor] {
        let y = x.scaled_matmul(&w, ScaledFormat::F8E4M3, layout);
        let got = y.to_vec_on(Device::Cpu);
        assert_eq!(got, oracle(&y), "{layout}");
        for i in 0..m {
            for j in 0..n {
                let dot: f64 = (0..k)
                    .map(|p| xv[i * k + p] as f64 * wv[j * k + p] as f64)
                    .sum();
                assert_eq!(got[i * n + j] as f64, dot, "{layout} ({i},{j})");
            }
        }
    }
}

#[test]
fn explain_lists_the_scaled_kernels() {
    let x = Tensor::randn([4, 64], 7);
    let w = Tensor::randn([8, 64], 8);
    let y = x.scaled_matmul(&w, ScaledFormat::F8E4M3, ScaleLayout::mx());
    let e = y.explain();
    for op in ["scaled_quant_scale", "scaled_quantize", "scaled_matmul"] {
        assert!(e.contains(op), "{e}");
    }
}
