//! f64 host references for the OPS rows' checks (plain loops, written for clarity).

/// Rows `idx` of the `[_, d]` table.
pub fn gather(table: &[f32], idx: &[f32], d: usize) -> Vec<f32> {
    idx.iter()
        .flat_map(|&i| table[i as usize * d..][..d].iter().copied())
        .collect()
}

/// `dW[idx[r]] += g[r]` over a zeroed `[v, d]` table (f64 accumulation).
pub fn scatter_add(g: &[f32], idx: &[f32], v: usize, d: usize) -> Vec<f32> {
    let mut w = vec![0f64; v * d];
    for (r, &i) in idx.iter().enumerate() {
        for j in 0..d {
            w[i as usize * d + j] += g[r * d + j] as f64;
        }
    }
    w.into_iter().map(|x| x as f32).collect()
}

/// Columns `start..start + len` of a row-major `[_, width]` matrix.
pub fn narrow_last(x: &[f32], width: usize, start: usize, len: usize) -> Vec<f32> {
    x.chunks(width)
        .flat_map(|row| row[start..start + len].iter().copied())
        .collect()
}

/// Row-wise concatenation of `[_, d]` matrices.
pub fn concat_last(parts: &[Vec<f32>], d: usize) -> Vec<f32> {
    let rows = parts[0].len() / d;
    (0..rows)
        .flat_map(|r| {
            parts
                .iter()
                .flat_map(move |p| p[r * d..][..d].iter().copied())
        })
        .collect()
}

/// Causal softmax attention, `[B, T, H·hd]` layout, scale `1/√hd`.
pub fn causal_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    b: usize,
    t: usize,
    h: usize,
    hd: usize,
) -> Vec<f32> {
    let d = h * hd;
    let mut out = vec![0f32; b * t * d];
    let at = |x: &[f32], bi: usize, s: usize, head: usize, e: usize| {
        x[(bi * t + s) * d + head * hd + e] as f64
    };
    for bi in 0..b {
        for head in 0..h {
            for i in 0..t {
                let scores: Vec<f64> = (0..=i)
                    .map(|j| {
                        (0..hd)
                            .map(|e| at(q, bi, i, head, e) * at(k, bi, j, head, e))
                            .sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let mx = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|s| (s - mx).exp()).sum();
                for e in 0..hd {
                    let y: f64 = (0..=i)
                        .map(|j| (scores[j] - mx).exp() / z * at(v, bi, j, head, e))
                        .sum();
                    out[(bi * t + i) * d + head * hd + e] = y as f32;
                }
            }
        }
    }
    out
}

/// Layer norm over rows of width `d` (eps as in W11).
pub fn layer_norm(x: &[f32], d: usize, g: &[f32], b: &[f32]) -> Vec<f32> {
    let eps = rlx_bench::gpt::LN_EPS as f64;
    x.chunks(d)
        .flat_map(|row| {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / d as f64;
            let rstd = 1.0 / (var + eps).sqrt();
            (0..d).map(move |j| ((row[j] as f64 - mean) * rstd * g[j] as f64 + b[j] as f64) as f32)
        })
        .collect()
}

/// `x / √(mean(x²) + eps) · g + b` per row of `d`, in f64.
pub fn rms_norm(x: &[f32], d: usize, g: &[f32], b: &[f32]) -> Vec<f32> {
    let eps = rlx_bench::gpt::LN_EPS as f64;
    x.chunks(d)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / d as f64;
            let r = 1.0 / (ms + eps).sqrt();
            (0..d).map(move |j| (row[j] as f64 * r * g[j] as f64 + b[j] as f64) as f32)
        })
        .collect()
}

/// erf to ~1.2e-7 absolute (Numerical Recipes' erfc Chebyshev fit).
fn erf(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let erfc = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { 1.0 - erfc } else { erfc - 1.0 }
}

/// Exact GELU `u · Φ(u)`.
pub fn gelu(u: &[f32]) -> Vec<f32> {
    u.iter()
        .map(|&x| {
            let x = x as f64;
            (0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))) as f32
        })
        .collect()
}

/// `g · GELU'(u)` with `GELU'(u) = Φ(u) + u · φ(u)`.
pub fn gelu_vjp(u: &[f32], g: &[f32]) -> Vec<f32> {
    u.iter()
        .zip(g)
        .map(|(&x, &g)| {
            let x = x as f64;
            let cdf = 0.5 * (1.0 + erf(x / std::f64::consts::SQRT_2));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            (g as f64 * (cdf + x * pdf)) as f32
        })
        .collect()
}

/// Mean softmax cross-entropy of `[_, v]` logits with class labels.
pub fn mean_ce(logits: &[f32], labels: &[f32], v: usize) -> f64 {
    let total: f64 = logits
        .chunks(v)
        .zip(labels)
        .map(|(row, &y)| {
            let mx = row.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
            let lse = mx + row.iter().map(|&z| (z as f64 - mx).exp()).sum::<f64>().ln();
            lse - row[y as usize] as f64
        })
        .sum();
    total / labels.len() as f64
}

/// `a [m, k] · b [k, n]`.
pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let x = a[i * k + p] as f64;
            for j in 0..n {
                c[i * n + j] += x * b[p * n + j] as f64;
            }
        }
    }
    c.into_iter().map(|x| x as f32).collect()
}

/// `a [m, k] · b [n, k]ᵀ`.
pub fn matmul_t(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k)
                .map(|p| a[i * k + p] as f64 * b[j * k + p] as f64)
                .sum::<f64>() as f32;
        }
    }
    c
}

/// The first `rows` rows of `a [m, k]ᵀ · b [m, n]` (a `[k, n]` result).
pub fn matmul_tn(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, rows: usize) -> Vec<f32> {
    let mut c = vec![0f64; rows * n];
    for r in 0..m {
        for p in 0..rows {
            let x = a[r * k + p] as f64;
            for j in 0..n {
                c[p * n + j] += x * b[r * n + j] as f64;
            }
        }
    }
    c.into_iter().map(|x| x as f32).collect()
}
