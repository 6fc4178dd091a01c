//! The workloads on `ndarray` 0.16 (eager Rust baseline; matmul through its
//! `matrixmultiply` backend, single-threaded; transcendental functions from libm).

use ndarray::{Array1, Array2, Axis, Zip, s};
use rlx_bench::inputs::{self, ATT, LN, LN_EPS, MLP, Normal, SM, W5_BATCH, W6_BATCH, W10};

/// `0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³)))`.
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

fn gelu_tanh_grad(x: f32) -> f32 {
    const C: f32 = 0.797_884_6;
    let t = (C * (x + 0.044_715 * x * x * x)).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * C * (1.0 + 3.0 * 0.044_715 * x * x)
}

/// W1 written the eager way (each operator allocates or rewrites a temporary, as NumPy does).
pub fn w1_eager(a: &Array1<f32>, b: &Array1<f32>, c: &Array1<f32>) -> Array1<f32> {
    (((a + b) * c) - 0.5f32)
        .mapv_into(|v| v.max(0.0))
        .mapv_into(f32::exp)
}

/// W1 fused by hand into one `Zip` pass.
pub fn w1_zip(a: &Array1<f32>, b: &Array1<f32>, c: &Array1<f32>, out: &mut Array1<f32>) {
    Zip::from(out)
        .and(a)
        .and(b)
        .and(c)
        .for_each(|o, &a, &b, &c| *o = ((a + b) * c - 0.5).max(0.0).exp());
}

/// W2: softmax over the last axis.
pub fn w2(x: &Array2<f32>) -> Array2<f32> {
    let mut out = x.clone();
    for mut row in out.rows_mut() {
        let m = row.fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        row.mapv_inplace(|v| (v - m).exp());
        let s = row.sum();
        row.mapv_inplace(|v| v / s);
    }
    out
}

/// W3: layer norm over the last axis with gamma/beta.
pub fn w3(x: &Array2<f32>, g: &Array1<f32>, b: &Array1<f32>) -> Array2<f32> {
    let n = x.ncols() as f32;
    let mut out = x.clone();
    for mut row in out.rows_mut() {
        let mu = row.sum() / n;
        row.mapv_inplace(|v| v - mu);
        let var = row.fold(0.0, |a, &v| a + v * v) / n;
        let inv = 1.0 / (var + LN_EPS).sqrt();
        Zip::from(&mut row)
            .and(g)
            .and(b)
            .for_each(|v, &g, &b| *v = *v * inv * g + b);
    }
    out
}

/// MLP parameters as arrays `[w1, b1, w2, b2, w3, b3]` (weights `[in, out]`).
pub struct Mlp {
    /// Weights `[in, out]`.
    pub w: Vec<Array2<f32>>,
    /// Biases `[out]`.
    pub b: Vec<Array1<f32>>,
}

impl Mlp {
    /// From the flat parameter list of [`inputs::mlp_params`].
    pub fn new(ps: &[Vec<f32>]) -> Mlp {
        let mut w = Vec::new();
        let mut b = Vec::new();
        for (i, d) in MLP.windows(2).enumerate() {
            w.push(Array2::from_shape_vec((d[0], d[1]), ps[2 * i].clone()).expect("weight shape"));
            b.push(Array1::from_vec(ps[2 * i + 1].clone()));
        }
        Mlp { w, b }
    }

    /// W5: the forward pass (GELU in tanh form between layers).
    pub fn forward(&self, x: &Array2<f32>) -> Array2<f32> {
        let h = (x.dot(&self.w[0]) + &self.b[0]).mapv_into(gelu_tanh);
        let h = (h.dot(&self.w[1]) + &self.b[1]).mapv_into(gelu_tanh);
        h.dot(&self.w[2]) + &self.b[2]
    }
}

/// AdamW state for the W6 step (hyperparameters of the workload).
pub struct AdamW {
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    t: i32,
}

impl AdamW {
    /// Zero moments for the parameter tensors of `mlp`.
    pub fn new(mlp: &Mlp) -> AdamW {
        let sizes: Vec<usize> = mlp
            .w
            .iter()
            .flat_map(|w| [w.len()])
            .chain(mlp.b.iter().map(|b| b.len()))
            .collect();
        AdamW {
            m: sizes.iter().map(|&n| vec![0.0; n]).collect(),
            v: sizes.iter().map(|&n| vec![0.0; n]).collect(),
            t: 0,
        }
    }

    fn update(&mut self, slot: usize, p: &mut [f32], g: &[f32]) {
        let (lr, b1, b2, eps, wd) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32, 0.01f32);
        let c1 = 1.0 - b1.powi(self.t);
        let c2 = 1.0 - b2.powi(self.t);
        let (m, v) = (&mut self.m[slot], &mut self.v[slot]);
        for i in 0..p.len() {
            m[i] = b1 * m[i] + (1.0 - b1) * g[i];
            v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
            p[i] -= lr * ((m[i] / c1) / ((v[i] / c2).sqrt() + eps) + wd * p[i]);
        }
    }
}

/// W6: one training step (forward, softmax cross-entropy, backward, AdamW); returns the loss.
pub fn w6_step(mlp: &mut Mlp, opt: &mut AdamW, x: &Array2<f32>, y: &[usize]) -> f32 {
    let n = x.nrows() as f32;
    let z1 = x.dot(&mlp.w[0]) + &mlp.b[0];
    let h1 = z1.mapv(gelu_tanh);
    let z2 = h1.dot(&mlp.w[1]) + &mlp.b[1];
    let h2 = z2.mapv(gelu_tanh);
    let mut d = h2.dot(&mlp.w[2]) + &mlp.b[2];
    let mut loss = 0.0;
    for (i, mut row) in d.rows_mut().into_iter().enumerate() {
        let m = row.fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        row.mapv_inplace(|v| (v - m).exp());
        let s = row.sum();
        loss -= (row[y[i]] / s).ln();
        row.mapv_inplace(|v| v / s / n);
        row[y[i]] -= 1.0 / n;
    }
    let gw3 = h2.t().dot(&d);
    let gb3 = d.sum_axis(Axis(0));
    let mut d2 = d.dot(&mlp.w[2].t());
    Zip::from(&mut d2)
        .and(&z2)
        .for_each(|g, &z| *g *= gelu_tanh_grad(z));
    let gw2 = h1.t().dot(&d2);
    let gb2 = d2.sum_axis(Axis(0));
    let mut d1 = d2.dot(&mlp.w[1].t());
    Zip::from(&mut d1)
        .and(&z1)
        .for_each(|g, &z| *g *= gelu_tanh_grad(z));
    let gw1 = x.t().dot(&d1);
    let gb1 = d1.sum_axis(Axis(0));
    opt.t += 1;
    for (i, gw) in [gw1, gw2, gw3].iter().enumerate() {
        opt.update(
            i,
            mlp.w[i].as_slice_mut().expect("contiguous"),
            gw.as_standard_layout().as_slice().expect("contiguous"),
        );
    }
    for (i, gb) in [gb1, gb2, gb3].iter().enumerate() {
        opt.update(
            3 + i,
            mlp.b[i].as_slice_mut().expect("contiguous"),
            gb.as_slice().expect("contiguous"),
        );
    }
    loss / n
}

/// W7 inputs q, k, v as `[B, H, S, D]` arrays (row-major data).
pub fn w7_inputs() -> [Vec<f32>; 3] {
    let mut r = Normal::new(7);
    let n = ATT.0 * ATT.1 * ATT.2 * ATT.3;
    [r.vec(n, 1.0), r.vec(n, 1.0), r.vec(n, 1.0)]
}

/// W7: causal attention per (batch, head) on `[B, H, S, D]` data; returns `[B, H, S, D]`.
pub fn w7(q: &[f32], k: &[f32], v: &[f32]) -> Vec<f32> {
    let (b, h, sq, d) = ATT;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; q.len()];
    for bh in 0..b * h {
        let o = bh * sq * d;
        let qm = ndarray::ArrayView2::from_shape((sq, d), &q[o..o + sq * d]).expect("q block");
        let km = ndarray::ArrayView2::from_shape((sq, d), &k[o..o + sq * d]).expect("k block");
        let vm = ndarray::ArrayView2::from_shape((sq, d), &v[o..o + sq * d]).expect("v block");
        let mut sc = qm.dot(&km.t());
        for (i, mut row) in sc.rows_mut().into_iter().enumerate() {
            row.slice_mut(s![i + 1..]).fill(f32::NEG_INFINITY);
            let m = row.fold(f32::NEG_INFINITY, |a, &b| a.max(b)) * scale;
            row.mapv_inplace(|x| (x * scale - m).exp());
            let sum = row.sum();
            row.mapv_inplace(|x| x / sum);
        }
        let res = sc.dot(&vm);
        out[o..o + sq * d].copy_from_slice(res.as_slice().expect("contiguous"));
    }
    out
}

/// W10, gradient written by hand (ndarray has no autodiff): `2x·sin x + x²·cos x`.
pub fn w10(x: &Array2<f32>) -> Array2<f32> {
    x.mapv(|v| 2.0 * v * v.sin() + v * v * v.cos())
}

/// W10 input `[256, 1024]`.
pub fn w10_input() -> Vec<f32> {
    Normal::new(10).vec(W10.0 * W10.1, 1.0)
}

/// W2/W3 input matrices.
pub fn w2_input() -> Vec<f32> {
    Normal::new(2).vec(SM.0 * SM.1, 1.0)
}

/// W3 inputs x, gamma, beta.
pub fn w3_inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut r = Normal::new(3);
    let x = r.vec(LN.0 * LN.1, 1.0);
    let g = (0..LN.1).map(|_| 1.0 + 0.1 * r.sample()).collect();
    let b = r.vec(LN.1, 0.1);
    (x, g, b)
}

/// Inputs `[batch, 784]` and labels `[batch]` of one MLP batch.
pub type Batch = (Vec<f32>, Vec<f32>);

/// W5 forward input and W6 batch.
pub fn mlp_batches() -> (Batch, Batch) {
    (
        inputs::mlp_inputs(W5_BATCH, 6),
        inputs::mlp_inputs(W6_BATCH, 6),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_tanh_grad_matches_a_central_difference() {
        for i in -40..=40 {
            let x = i as f32 * 0.1;
            let h = 1e-3f64;
            let g = |v: f64| {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
            };
            let fd = (g(x as f64 + h) - g(x as f64 - h)) / (2.0 * h);
            assert!(
                (gelu_tanh_grad(x) as f64 - fd).abs() < 1e-4,
                "x = {x}: {} vs {fd}",
                gelu_tanh_grad(x)
            );
        }
    }

    #[test]
    fn softmax_rows_sum_to_one_and_keep_order() {
        let x = Array2::from_shape_vec((2, 3), vec![1.0, 2.0, 3.0, -1.0, -1.0, 5.0]).unwrap();
        let y = w2(&x);
        for row in y.rows() {
            assert!((row.sum() - 1.0).abs() < 1e-6);
        }
        assert!(y[[0, 0]] < y[[0, 1]] && y[[0, 1]] < y[[0, 2]]);
        assert!((y[[0, 2]] - 0.665_240_9).abs() < 1e-6);
    }

    #[test]
    fn w6_training_step_lowers_the_loss_on_a_fixed_batch() {
        let ps = inputs::mlp_params(5);
        let (x, y) = inputs::mlp_inputs(W6_BATCH, 6);
        let x = Array2::from_shape_vec((W6_BATCH, MLP[0]), x).unwrap();
        let y: Vec<usize> = y.iter().map(|&v| v as usize).collect();
        let mut mlp = Mlp::new(&ps);
        let mut opt = AdamW::new(&mlp);
        let first = w6_step(&mut mlp, &mut opt, &x, &y);
        // ln(10) ≈ 2.30: an untrained 10-class classifier.
        assert!((first - 2.3).abs() < 0.3, "first loss {first}");
        let mut last = first;
        for _ in 0..10 {
            last = w6_step(&mut mlp, &mut opt, &x, &y);
        }
        assert!(last < 0.5 * first, "loss {first} → {last}");
    }
}
