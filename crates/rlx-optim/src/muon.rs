//! Muon: momentum orthogonalized by a Newton–Schulz iteration.

use crate::group::{ParamGroups, param_group_methods};
use crate::state::{Slots, iteration_and_state_methods};
use crate::{Optimizer, check_grad_len};

const PREFIXES: [&str; 1] = ["m"];

/// Added to the Frobenius norm before normalizing, so an all-zero momentum stays zero.
const NORM_EPS: f64 = 1e-7;

/// Muon ("MomentUm Orthogonalized by Newton–Schulz", Jordan et al. 2024).
///
/// Per step, `m = momentum·m + g` and the update direction is `u = g + momentum·m`
/// (Nesterov, the default) or `u = m`. Then
/// - 2-D params `[r, c]`: `O` = Newton–Schulz orthogonalization of `u` (see
///   [`Muon::orthogonalize`]) and `p −= lr·(√max(r,c)·O + weight_decay·p)`. The
///   `√max(r,c)` factor makes the update's RMS about `lr`, like Adam's.
/// - any other rank (biases, norms, scalars, 3-D+ tensors): plain (Nesterov) momentum
///   SGD, `p −= lr·(u + weight_decay·p)`.
///
/// Arithmetic is `f32` (the Frobenius norm is accumulated in `f64`). State: one momentum
/// buffer per param, exported as `"m/<param>"` — unlike the reference implementation,
/// Muon here supports `state_dict` / `load_state_dict`.
///
/// [Parameter groups](crate::ParamGroup) may replace `weight_decay` (still decoupled) and
/// scale `lr` per param, on both branches.
///
/// ```
/// use rlx_optim::{Muon, Optimizer};
///
/// let mut opt = Muon::new(0.02);
/// let mut w = vec![0.0f32; 6]; // a 2×3 matrix
/// opt.step("w", &[2, 3], &mut w, &[1.0, 0.0, 0.0, 0.0, 4.0, 0.0]);
/// opt.end_iteration();
/// // Both singular directions get about the same step despite the 1:4 gradient.
/// assert!((w[0] / w[4] - 1.0).abs() < 0.1);
/// assert!(w[0] < 0.0 && w[4] < 0.0);
/// ```
#[derive(Debug, Clone)]
pub struct Muon {
    /// Learning rate.
    pub lr: f32,
    /// Momentum factor μ.
    pub momentum: f32,
    /// Orthogonalize `g + μ·m` (Nesterov) instead of `m`.
    pub nesterov: bool,
    /// Decoupled weight decay (`p −= lr·weight_decay·p`).
    pub weight_decay: f32,
    /// Newton–Schulz iterations.
    pub ns_steps: u32,
    /// Quintic Newton–Schulz coefficients `(a, b, c)`: `X ← a·X + (b·A + c·A²)·X`, `A = X·Xᵀ`.
    pub ns_coeffs: (f32, f32, f32),
    step: u64,
    momentum_buf: Slots<1>,
    groups: ParamGroups,
}

impl Muon {
    /// Muon with momentum 0.95 (Nesterov), no weight decay, 5 Newton–Schulz steps with
    /// coefficients (3.4445, −4.7750, 2.0315).
    ///
    /// ```
    /// let o = rlx_optim::Muon::new(0.02);
    /// assert_eq!((o.momentum, o.nesterov, o.weight_decay, o.ns_steps), (0.95, true, 0.0, 5));
    /// assert_eq!(o.ns_coeffs, (3.4445, -4.7750, 2.0315));
    /// ```
    pub fn new(lr: f32) -> Self {
        Muon {
            lr,
            momentum: 0.95,
            nesterov: true,
            weight_decay: 0.0,
            ns_steps: 5,
            ns_coeffs: (3.4445, -4.7750, 2.0315),
            step: 0,
            momentum_buf: Slots::new(),
            groups: ParamGroups::default(),
        }
    }

    /// Set the momentum factor μ.
    pub fn with_momentum(mut self, momentum: f32) -> Self {
        self.momentum = momentum;
        self
    }

    /// Use Nesterov momentum (`true`, the default) or plain momentum.
    pub fn with_nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }

    /// Set the decoupled weight decay.
    pub fn with_weight_decay(mut self, weight_decay: f32) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// Set the number of Newton–Schulz iterations.
    pub fn with_ns_steps(mut self, ns_steps: u32) -> Self {
        self.ns_steps = ns_steps;
        self
    }

    /// Set the Newton–Schulz coefficients `(a, b, c)`.
    pub fn with_ns_coeffs(mut self, a: f32, b: f32, c: f32) -> Self {
        self.ns_coeffs = (a, b, c);
        self
    }

    /// Number of completed iterations (`end_iteration` calls).
    pub fn current_step(&self) -> u64 {
        self.step
    }

    param_group_methods!(Muon);

    /// Approximately orthogonalize a row-major `rows × cols` matrix: divide by its
    /// Frobenius norm, then run `ns_steps` iterations of `X ← a·X + (b·A + c·A²)·X` with
    /// `A = X·Xᵀ`. A tall matrix is transposed first so `A` is the smaller Gram matrix.
    /// With the default coefficients the result's singular values land in roughly
    /// [0.7, 1.2] (the iteration trades exactness for speed) and its singular vectors are
    /// the input's.
    ///
    /// Panics if `matrix.len() != rows·cols`.
    ///
    /// ```
    /// let o = rlx_optim::Muon::new(0.02).orthogonalize(&[3.0, 0.0, 0.0, 0.5], 2, 2);
    /// // Both singular values (3 and 0.5 before) end up near 1.
    /// assert!((0.6..1.3).contains(&o[0]) && (0.6..1.3).contains(&o[3]));
    /// assert_eq!((o[1], o[2]), (0.0, 0.0));
    /// ```
    pub fn orthogonalize(&self, matrix: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        assert!(
            matrix.len() == rows * cols,
            "Muon::orthogonalize: a {rows}×{cols} matrix needs {} values but got {}; pass \
             rows and cols matching the data",
            rows * cols,
            matrix.len()
        );
        let norm = matrix
            .iter()
            .map(|&x| x as f64 * x as f64)
            .sum::<f64>()
            .sqrt();
        let scale = (1.0 / (norm + NORM_EPS)) as f32;
        let tall = rows > cols;
        // Work on the wide orientation: x is n × k with n ≤ k.
        let (n, k) = if tall { (cols, rows) } else { (rows, cols) };
        let mut x: Vec<f32> = if tall {
            transpose(matrix, rows, cols)
        } else {
            matrix.to_vec()
        };
        x.iter_mut().for_each(|v| *v *= scale);
        let (a, b, c) = self.ns_coeffs;
        for _ in 0..self.ns_steps {
            let gram = gram(&x, n, k);
            let gram2 = matmul(&gram, &gram, n, n, n);
            let poly: Vec<f32> = gram
                .iter()
                .zip(&gram2)
                .map(|(g, g2)| b * g + c * g2)
                .collect();
            let px = matmul(&poly, &x, n, n, k);
            x.iter_mut()
                .zip(&px)
                .for_each(|(xv, pv)| *xv = a * *xv + pv);
        }
        if tall { transpose(&x, n, k) } else { x }
    }
}

/// Row-major transpose of an `r × c` matrix.
fn transpose(x: &[f32], r: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            out[j * r + i] = x[i * c + j];
        }
    }
    out
}

/// `x·xᵀ` for an `n × k` matrix (symmetric, so only the upper half is summed).
fn gram(x: &[f32], n: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        let xi = &x[i * k..(i + 1) * k];
        for j in i..n {
            let xj = &x[j * k..(j + 1) * k];
            let dot: f32 = xi.iter().zip(xj).map(|(a, b)| a * b).sum();
            out[i * n + j] = dot;
            out[j * n + i] = dot;
        }
    }
    out
}

/// `(n × m) · (m × k)`, row-major, in i-l-j order so the inner loop is contiguous.
fn matmul(a: &[f32], b: &[f32], n: usize, m: usize, k: usize) -> Vec<f32> {
    let mut out = vec![0.0; n * k];
    for i in 0..n {
        let row = &mut out[i * k..(i + 1) * k];
        for l in 0..m {
            let av = a[i * m + l];
            for (o, bv) in row.iter_mut().zip(&b[l * k..(l + 1) * k]) {
                *o += av * bv;
            }
        }
    }
    out
}

impl Optimizer for Muon {
    fn step(&mut self, name: &str, shape: &[usize], param: &mut [f32], grad: &[f32]) {
        check_grad_len("Muon", name, param.len(), grad.len());
        let matrix = match *shape {
            [r, c] => {
                assert!(
                    r.checked_mul(c) == Some(param.len()),
                    "Muon::step: param `{name}` has shape {shape:?} ({} elements) but {} \
                     values; pass the param's static shape",
                    r as u128 * c as u128,
                    param.len()
                );
                Some((r, c))
            }
            _ => None,
        };
        let o = self.groups.resolve(name, shape);
        let (lr, wd) = (self.lr * o.lr_scale, o.weight_decay_or(self.weight_decay));
        let (mu, nesterov) = (self.momentum, self.nesterov);
        let [m] = self.momentum_buf.get_or_zero("Muon", name, param.len());
        for (m, &g) in m.iter_mut().zip(grad) {
            *m = mu * *m + g;
        }
        let direction: Vec<f32> = if nesterov {
            grad.iter()
                .zip(m.iter())
                .map(|(&g, &m)| g + mu * m)
                .collect()
        } else {
            m.clone()
        };
        let (update, scale) = match matrix {
            Some((r, c)) if r > 0 && c > 0 => (
                self.orthogonalize(&direction, r, c),
                (r.max(c) as f32).sqrt(),
            ),
            _ => (direction, 1.0),
        };
        for (p, u) in param.iter_mut().zip(&update) {
            *p -= lr * (scale * u + wd * *p);
        }
        self.groups.note(name, shape);
    }

    fn set_lr(&mut self, lr: f32) {
        self.lr = lr;
    }

    iteration_and_state_methods!("Muon", momentum_buf, PREFIXES);
}

#[cfg(test)]
mod tests;
