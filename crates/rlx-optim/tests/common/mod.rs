//! Shared problems for the integration tests: a seeded RNG, a least-squares regression
//! and a 2-4-1 tanh/sigmoid MLP on XOR, each with a hand-written f64 backward pass.

#![allow(dead_code)]

use rlx_optim::{Adam, AdamW, Lion, LrSchedule, Muon, OptItem, Optimizer, OptimizerState, Sgd};

/// SplitMix64 stream with Box–Muller normals.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    pub fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    pub fn normals(&mut self, n: usize, std: f64) -> Vec<f32> {
        (0..n).map(|_| (self.normal() * std) as f32).collect()
    }
}

/// A named parameter with its static shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: &'static str,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// A differentiable problem: loss and gradients (same order as the params), in f64.
pub trait Problem {
    fn init(&self) -> Vec<Param>;
    fn loss_and_grads(&self, params: &[Param]) -> (f64, Vec<Vec<f64>>);
}

/// One training iteration the way `Func::train_step` drives an optimizer: one
/// `step_batch` over all params, then `end_iteration`.
pub fn train_step(opt: &mut dyn Optimizer, problem: &dyn Problem, params: &mut [Param]) -> f64 {
    let (loss, grads) = problem.loss_and_grads(params);
    let grads: Vec<Vec<f32>> = grads
        .iter()
        .map(|g| g.iter().map(|&v| v as f32).collect())
        .collect();
    let mut items: Vec<OptItem<'_>> = params
        .iter_mut()
        .zip(&grads)
        .map(|(p, g)| OptItem {
            name: p.name,
            shape: &p.shape,
            param: &mut p.data,
            grad: g,
        })
        .collect();
    opt.step_batch(&mut items);
    opt.end_iteration();
    loss
}

/// Runs `steps` iterations with `schedule`; returns (initial loss, final loss).
pub fn train(
    opt: &mut dyn Optimizer,
    problem: &dyn Problem,
    params: &mut [Param],
    schedule: LrSchedule,
    steps: usize,
) -> (f64, f64) {
    let initial = problem.loss_and_grads(params).0;
    for step in 0..steps {
        opt.set_lr(schedule.lr_at(step));
        train_step(opt, problem, params);
    }
    (initial, problem.loss_and_grads(params).0)
}

/// Least squares: fit `Y = X·W + b` (X: n×d, W: d×o, b: o); loss = ½·mean_n ‖row residual‖².
pub struct LeastSquares {
    pub n: usize,
    pub d: usize,
    pub o: usize,
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub w_true: Vec<f64>,
    pub b_true: Vec<f64>,
}

impl LeastSquares {
    pub fn new(seed: u64, n: usize, d: usize, o: usize) -> Self {
        let mut rng = Rng::new(seed);
        let x: Vec<f64> = (0..n * d).map(|_| rng.normal()).collect();
        let w_true: Vec<f64> = (0..d * o).map(|_| rng.normal()).collect();
        let b_true: Vec<f64> = (0..o).map(|_| rng.normal()).collect();
        let mut y = vec![0.0; n * o];
        for i in 0..n {
            for j in 0..o {
                y[i * o + j] = b_true[j]
                    + (0..d)
                        .map(|k| x[i * d + k] * w_true[k * o + j])
                        .sum::<f64>();
            }
        }
        LeastSquares {
            n,
            d,
            o,
            x,
            y,
            w_true,
            b_true,
        }
    }
}

impl Problem for LeastSquares {
    fn init(&self) -> Vec<Param> {
        vec![
            Param {
                name: "w",
                shape: vec![self.d, self.o],
                data: vec![0.0; self.d * self.o],
            },
            Param {
                name: "b",
                shape: vec![self.o],
                data: vec![0.0; self.o],
            },
        ]
    }

    fn loss_and_grads(&self, params: &[Param]) -> (f64, Vec<Vec<f64>>) {
        let (n, d, o) = (self.n, self.d, self.o);
        let w = &params[0].data;
        let b = &params[1].data;
        let mut gw = vec![0.0; d * o];
        let mut gb = vec![0.0; o];
        let mut loss = 0.0;
        for i in 0..n {
            for j in 0..o {
                let pred = b[j] as f64
                    + (0..d)
                        .map(|k| self.x[i * d + k] * w[k * o + j] as f64)
                        .sum::<f64>();
                let r = pred - self.y[i * o + j];
                loss += 0.5 * r * r / n as f64;
                gb[j] += r / n as f64;
                for k in 0..d {
                    gw[k * o + j] += self.x[i * d + k] * r / n as f64;
                }
            }
        }
        (loss, vec![gw, gb])
    }
}

/// XOR with a 2-4-1 MLP: h = tanh(x·W1 + b1), y = sigmoid(h·W2 + b2), mean binary
/// cross-entropy over the four points.
pub struct Xor {
    pub seed: u64,
}

pub const XOR_X: [[f64; 2]; 4] = [[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]];
pub const XOR_T: [f64; 4] = [0.0, 1.0, 1.0, 0.0];

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

impl Xor {
    /// Network outputs (probabilities) for the four XOR inputs.
    pub fn predict(&self, params: &[Param]) -> [f64; 4] {
        let mut out = [0.0; 4];
        for (s, x) in XOR_X.iter().enumerate() {
            out[s] = self.forward(params, x).1;
        }
        out
    }

    /// Hidden activations and output probability for one input.
    fn forward(&self, params: &[Param], x: &[f64; 2]) -> ([f64; 4], f64) {
        let (w1, b1, w2, b2) = (
            &params[0].data,
            &params[1].data,
            &params[2].data,
            &params[3].data,
        );
        let mut h = [0.0; 4];
        for (j, hj) in h.iter_mut().enumerate() {
            *hj = (x[0] * w1[j] as f64 + x[1] * w1[4 + j] as f64 + b1[j] as f64).tanh();
        }
        let z = b2[0] as f64 + (0..4).map(|j| h[j] * w2[j] as f64).sum::<f64>();
        (h, sigmoid(z))
    }
}

impl Problem for Xor {
    fn init(&self) -> Vec<Param> {
        let mut rng = Rng::new(self.seed);
        vec![
            Param {
                name: "w1",
                shape: vec![2, 4],
                data: rng.normals(8, 1.0),
            },
            Param {
                name: "b1",
                shape: vec![4],
                data: vec![0.0; 4],
            },
            Param {
                name: "w2",
                shape: vec![4, 1],
                data: rng.normals(4, 1.0),
            },
            Param {
                name: "b2",
                shape: vec![1],
                data: vec![0.0],
            },
        ]
    }

    fn loss_and_grads(&self, params: &[Param]) -> (f64, Vec<Vec<f64>>) {
        let w2 = &params[2].data;
        let (mut gw1, mut gb1, mut gw2, mut gb2) =
            (vec![0.0; 8], vec![0.0; 4], vec![0.0; 4], vec![0.0]);
        let mut loss = 0.0;
        for (x, &t) in XOR_X.iter().zip(&XOR_T) {
            let (h, y) = self.forward(params, x);
            let y_c = y.clamp(1e-12, 1.0 - 1e-12);
            loss -= (t * y_c.ln() + (1.0 - t) * (1.0 - y_c).ln()) / 4.0;
            // d(BCE∘sigmoid)/dz = y − t.
            let dz = (y - t) / 4.0;
            gb2[0] += dz;
            for j in 0..4 {
                gw2[j] += h[j] * dz;
                let dpre = dz * w2[j] as f64 * (1.0 - h[j] * h[j]);
                gb1[j] += dpre;
                gw1[j] += x[0] * dpre;
                gw1[4 + j] += x[1] * dpre;
            }
        }
        (loss, vec![gw1, gb1, gw2, gb2])
    }
}

/// Every optimizer configuration the round-trip and convergence tests cover, by name.
/// Builds a fresh optimizer.
pub type MakeOptimizer = fn() -> Box<dyn Optimizer>;

pub fn all_optimizers() -> Vec<(&'static str, MakeOptimizer)> {
    vec![
        ("sgd", || Box::new(Sgd::new(0.1))),
        ("sgd+momentum", || {
            Box::new(
                Sgd::new(0.1)
                    .with_momentum(0.9, false)
                    .with_weight_decay(1e-4),
            )
        }),
        ("sgd+nesterov", || {
            Box::new(Sgd::new(0.1).with_momentum(0.9, true))
        }),
        ("adam", || Box::new(Adam::new(0.05))),
        ("adam+f32+l2", || {
            Box::new(Adam::new(0.05).with_f32_math(true).with_weight_decay(1e-4))
        }),
        ("adamw", || {
            Box::new(AdamW::new(0.05).with_weight_decay(1e-4))
        }),
        ("adamw+f32", || {
            Box::new(AdamW::new(0.05).with_weight_decay(1e-4).with_f32_math(true))
        }),
        ("adamw+torch", || {
            Box::new(AdamW::torch(0.05, (0.9, 0.999), 1e-4))
        }),
        ("lion", || Box::new(Lion::new(0.01))),
        ("muon", || Box::new(Muon::new(0.05))),
        ("muon+plain", || {
            Box::new(Muon::new(0.05).with_momentum(0.9).with_nesterov(false))
        }),
    ]
}

/// Bit patterns of all params, for exact comparisons.
pub fn bits(params: &[Param]) -> Vec<Vec<u32>> {
    params
        .iter()
        .map(|p| p.data.iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// Bit patterns of every state buffer, for exact comparisons.
pub fn state_bits(state: &OptimizerState) -> (u64, Vec<(String, Vec<u32>)>) {
    (
        state.step,
        state
            .buffers
            .iter()
            .map(|(n, v)| (n.clone(), v.iter().map(|x| x.to_bits()).collect()))
            .collect(),
    )
}
