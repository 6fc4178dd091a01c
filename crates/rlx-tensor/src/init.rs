//! Parameter initializers and a seeded host random-number generator.
//!
//! - [`Initializer`]s: [`zeros`], [`ones`], [`constant`], [`normal`], [`uniform`],
//!   [`truncated_normal`], [`xavier_uniform`], [`xavier_normal`], [`kaiming_uniform`],
//!   [`kaiming_normal`]. Each turns a shape into `Vec<f32>` values.
//! - [`Init`]: a seed plus an ordered rule list choosing an initializer per parameter by a
//!   predicate on its name and shape. It plugs into [`Func::init_params`](crate::Func::init_params)
//!   through [`Init::to_fn`], and produces named weights for a [`Graph`] (to load into a
//!   `Model`) through [`Init::weights`].
//! - [`Rng`]: the seeded SplitMix64 stream (uniform, normal, `gen_range`, `shuffle`,
//!   `permutation`, and shuffled mini-batches via [`Rng::batches`]).
//!
//! Fans follow PyTorch: a 2-D weight is `[out, in]` (fan_in = `in`, fan_out = `out`), a
//! convolution kernel `[out, in, k…]` multiplies both by the receptive field `∏ k`.
//!
//! ```
//! use rlx_tensor::{init, shape, Func};
//! let f = Func::new("mlp", |s| {
//!     let x = s.input("x", shape![?, 4]);
//!     let w = s.param("fc.weight", shape![8, 4]);
//!     let b = s.param("fc.bias", shape![8]);
//!     x.linear(&w, &b)
//! });
//! let rules = init::Init::new(0)
//!     .rule(|_, shape| shape.len() < 2, init::zeros())
//!     .rule(|name, _| name.ends_with("weight"), init::xavier_uniform())
//!     .default(init::normal(0.0, 0.02));
//! let f = f.init_params(rules.to_fn());
//! assert_eq!(f.param_binding("fc.bias").unwrap(), &[0.0; 8]);
//! let bound = (6.0f32 / (4.0 + 8.0)).sqrt();
//! assert!(f.param_binding("fc.weight").unwrap().iter().all(|v| v.abs() <= bound));
//! ```

use std::fmt;
use std::sync::Arc;

use rlx_ir::{Dim, Graph, Op};

pub use crate::rng::{Batches, Rng};

/// How to fill one parameter, given its shape. Build one with the functions of this
/// module ([`normal`], [`xavier_uniform`], …); draw values with [`Initializer::sample`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Initializer {
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Constant(f32),
    Normal {
        mean: f32,
        std: f32,
    },
    Uniform {
        lo: f32,
        hi: f32,
    },
    TruncatedNormal {
        std: f32,
        a: f32,
        b: f32,
    },
    Xavier {
        normal: bool,
        gain: f32,
    },
    Kaiming {
        normal: bool,
        gain: f32,
        fan_out: bool,
    },
}

/// The nonlinearity a layer feeds, for the recommended gain of [`kaiming_uniform`] /
/// [`kaiming_normal`] (and optionally [`xavier_uniform`]), as PyTorch's `calculate_gain`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Nonlinearity {
    /// Identity / linear / convolution: gain 1.
    Linear,
    /// Sigmoid: gain 1.
    Sigmoid,
    /// Tanh: gain 5/3.
    Tanh,
    /// ReLU: gain √2.
    Relu,
    /// Leaky ReLU with this negative slope: gain √(2 / (1 + slope²)).
    LeakyRelu(f32),
    /// SELU: gain 3/4.
    Selu,
}

impl Nonlinearity {
    /// The recommended gain.
    ///
    /// ```
    /// use rlx_tensor::init::Nonlinearity;
    /// assert_eq!(Nonlinearity::Relu.gain(), 2f32.sqrt());
    /// assert_eq!(Nonlinearity::Tanh.gain(), 5.0 / 3.0);
    /// ```
    pub fn gain(self) -> f32 {
        match self {
            Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
            Nonlinearity::Tanh => 5.0 / 3.0,
            Nonlinearity::Relu => 2f32.sqrt(),
            Nonlinearity::LeakyRelu(s) => (2.0 / (1.0 + s * s)).sqrt(),
            Nonlinearity::Selu => 0.75,
        }
    }
}

/// `(fan_in, fan_out)` of a weight of `shape`, with PyTorch's convention: `[out, in]` for
/// a 2-D weight, `[out, in, k…]` for a convolution kernel (both fans times `∏ k`). A
/// vector has fan_in = fan_out = its length and a scalar 1; zero-size (or dynamic) axes
/// count as 1 so that the bounds stay finite.
///
/// ```
/// use rlx_tensor::init::fans;
/// assert_eq!(fans(&[128, 64]), (64, 128));
/// assert_eq!(fans(&[16, 3, 5, 5]), (75, 400));
/// assert_eq!(fans(&[10]), (10, 10));
/// ```
pub fn fans(shape: &[usize]) -> (usize, usize) {
    let d = |i: usize| shape[i].max(1);
    match shape.len() {
        0 => (1, 1),
        1 => (d(0), d(0)),
        _ => {
            let field: usize = (2..shape.len()).map(d).product();
            (d(1) * field, d(0) * field)
        }
    }
}

/// Every element `value`.
///
/// ```
/// use rlx_tensor::init::{constant, Rng};
/// assert_eq!(constant(0.5).sample(&[2], &mut Rng::new(0)), vec![0.5, 0.5]);
/// ```
pub fn constant(value: f32) -> Initializer {
    Initializer {
        kind: Kind::Constant(value),
    }
}

/// Every element 0.
///
/// ```
/// use rlx_tensor::init::{zeros, Rng};
/// assert_eq!(zeros().sample(&[3], &mut Rng::new(0)), vec![0.0; 3]);
/// ```
pub fn zeros() -> Initializer {
    constant(0.0)
}

/// Every element 1.
///
/// ```
/// use rlx_tensor::init::{ones, Rng};
/// assert_eq!(ones().sample(&[2, 2], &mut Rng::new(0)), vec![1.0; 4]);
/// ```
pub fn ones() -> Initializer {
    constant(1.0)
}

/// Draws from N(mean, std²). Sampling panics unless `mean` is finite and `std` is finite
/// and ≥ 0.
///
/// ```
/// use rlx_tensor::init::{normal, Rng};
/// let v = normal(0.0, 0.02).sample(&[1000], &mut Rng::new(1));
/// assert!(v.iter().all(|x| x.abs() < 0.2));
/// ```
pub fn normal(mean: f32, std: f32) -> Initializer {
    Initializer {
        kind: Kind::Normal { mean, std },
    }
}

/// Draws uniformly from `[lo, hi)`. Sampling panics unless the bounds are finite and
/// `lo < hi`.
///
/// ```
/// use rlx_tensor::init::{uniform, Rng};
/// let v = uniform(-1.0, 1.0).sample(&[100], &mut Rng::new(1));
/// assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
/// ```
pub fn uniform(lo: f32, hi: f32) -> Initializer {
    Initializer {
        kind: Kind::Uniform { lo, hi },
    }
}

/// Draws from N(0, std²) restricted to `[a, b]`: values outside are redrawn. `a` and `b`
/// are absolute values, not multiples of `std` (PyTorch's `trunc_normal_` convention);
/// `truncated_normal(0.02, -0.04, 0.04)` cuts at two standard deviations. Sampling panics
/// when `a ≥ b` or the interval lies more than 6 std away from 0 (almost no mass to draw).
///
/// ```
/// use rlx_tensor::init::{truncated_normal, Rng};
/// let v = truncated_normal(1.0, -0.5, 2.0).sample(&[500], &mut Rng::new(1));
/// assert!(v.iter().all(|x| (-0.5..=2.0).contains(x)));
/// ```
pub fn truncated_normal(std: f32, a: f32, b: f32) -> Initializer {
    Initializer {
        kind: Kind::TruncatedNormal { std, a, b },
    }
}

/// Glorot/Xavier uniform: `U(-g·√(6 / (fan_in + fan_out)), +…)` with gain `g = 1`
/// (change it with [`Initializer::gain`]).
///
/// ```
/// use rlx_tensor::init::{xavier_uniform, Rng};
/// let v = xavier_uniform().sample(&[20, 10], &mut Rng::new(1));
/// assert!(v.iter().all(|x| x.abs() <= (6.0f32 / 30.0).sqrt()));
/// ```
pub fn xavier_uniform() -> Initializer {
    Initializer {
        kind: Kind::Xavier {
            normal: false,
            gain: 1.0,
        },
    }
}

/// Glorot/Xavier normal: `N(0, g²·2 / (fan_in + fan_out))` with gain `g = 1`.
///
/// ```
/// use rlx_tensor::init::{xavier_normal, Rng};
/// assert_eq!(xavier_normal().sample(&[20, 10], &mut Rng::new(1)).len(), 200);
/// ```
pub fn xavier_normal() -> Initializer {
    Initializer {
        kind: Kind::Xavier {
            normal: true,
            gain: 1.0,
        },
    }
}

/// He/Kaiming uniform for a ReLU layer: `U(-g·√(3 / fan_in), +…)` with `g = √2`
/// (so the bound is `√(6 / fan_in)`); see [`Initializer::nonlinearity`],
/// [`Initializer::gain`] and [`Initializer::fan_out`].
///
/// ```
/// use rlx_tensor::init::{kaiming_uniform, Rng};
/// let v = kaiming_uniform().sample(&[16, 24], &mut Rng::new(1));
/// assert!(v.iter().all(|x| x.abs() <= 0.5)); // √(6/24)
/// ```
pub fn kaiming_uniform() -> Initializer {
    Initializer {
        kind: Kind::Kaiming {
            normal: false,
            gain: Nonlinearity::Relu.gain(),
            fan_out: false,
        },
    }
}

/// He/Kaiming normal for a ReLU layer: `N(0, g² / fan_in)` with `g = √2`.
///
/// ```
/// use rlx_tensor::init::{kaiming_normal, Rng};
/// assert_eq!(kaiming_normal().sample(&[4, 8], &mut Rng::new(1)).len(), 32);
/// ```
pub fn kaiming_normal() -> Initializer {
    Initializer {
        kind: Kind::Kaiming {
            normal: true,
            gain: Nonlinearity::Relu.gain(),
            fan_out: false,
        },
    }
}

impl Initializer {
    /// Scale a Xavier or Kaiming initializer by `gain` instead of its default (no effect
    /// on the other kinds).
    ///
    /// ```
    /// use rlx_tensor::init::{xavier_uniform, Rng};
    /// let v = xavier_uniform().gain(2.0).sample(&[3, 3], &mut Rng::new(0));
    /// assert!(v.iter().all(|x| x.abs() <= 2.0));
    /// ```
    pub fn gain(mut self, g: f32) -> Initializer {
        match &mut self.kind {
            Kind::Xavier { gain, .. } | Kind::Kaiming { gain, .. } => *gain = g,
            _ => {}
        }
        self
    }

    /// [`Initializer::gain`] with the recommended gain of `nl`.
    ///
    /// ```
    /// use rlx_tensor::init::{kaiming_uniform, Nonlinearity, Rng};
    /// let v = kaiming_uniform().nonlinearity(Nonlinearity::Linear).sample(&[4, 3], &mut Rng::new(0));
    /// assert!(v.iter().all(|x| x.abs() <= 1.0)); // √(3/3)
    /// ```
    pub fn nonlinearity(self, nl: Nonlinearity) -> Initializer {
        self.gain(nl.gain())
    }

    /// Make a Kaiming initializer scale by fan_out (preserves gradient magnitudes in the
    /// backward pass) instead of fan_in.
    ///
    /// ```
    /// use rlx_tensor::init::{kaiming_uniform, Rng};
    /// let v = kaiming_uniform().fan_out().sample(&[6, 100], &mut Rng::new(0));
    /// assert!(v.iter().any(|x| x.abs() > 0.5)); // bound √(6/6) = 1, not √(6/100)
    /// ```
    pub fn fan_out(mut self) -> Initializer {
        if let Kind::Kaiming { fan_out, .. } = &mut self.kind {
            *fan_out = true;
        }
        self
    }

    /// `∏ shape` values for a tensor of `shape`, drawn from `rng`. Panics on an invalid
    /// truncated normal (see [`truncated_normal`]).
    ///
    /// ```
    /// use rlx_tensor::init::{normal, Rng};
    /// let a = normal(0.0, 1.0).sample(&[2, 3], &mut Rng::new(5));
    /// let b = normal(0.0, 1.0).sample(&[2, 3], &mut Rng::new(5));
    /// assert_eq!(a, b);
    /// ```
    #[track_caller]
    pub fn sample(&self, shape: &[usize], rng: &mut Rng) -> Vec<f32> {
        let n: usize = shape.iter().product();
        let (fan_in, fan_out) = fans(shape);
        let normal = |rng: &mut Rng, mean: f32, std: f32| -> Vec<f32> {
            (0..n).map(|_| mean + std * rng.normal()).collect()
        };
        let uniform = |rng: &mut Rng, lo: f32, hi: f32| -> Vec<f32> {
            (0..n).map(|_| rng.uniform_in(lo, hi)).collect()
        };
        match self.kind {
            Kind::Constant(v) => vec![v; n],
            Kind::Normal { mean, std } => {
                assert!(
                    mean.is_finite() && std.is_finite() && std >= 0.0,
                    "init::normal(mean {mean}, std {std}): needs a finite mean and a finite std ≥ 0"
                );
                normal(rng, mean, std)
            }
            Kind::Uniform { lo, hi } => {
                assert!(
                    lo.is_finite() && hi.is_finite() && lo < hi,
                    "init::uniform(lo {lo}, hi {hi}): needs finite bounds with lo < hi (the range is [lo, hi))"
                );
                uniform(rng, lo, hi)
            }
            Kind::TruncatedNormal { std, a, b } => {
                assert!(
                    a < b && std > 0.0 && a < 6.0 * std && b > -6.0 * std,
                    "init::truncated_normal(std {std}, a {a}, b {b}): needs std > 0, a < b and an interval within 6 std of 0 so that values can be drawn; widen [a, b] or raise std"
                );
                (0..n)
                    .map(|_| {
                        loop {
                            let v = std * rng.normal();
                            if (a..=b).contains(&v) {
                                break v;
                            }
                        }
                    })
                    .collect()
            }
            Kind::Xavier { normal: nrm, gain } => {
                let s = (fan_in + fan_out) as f32;
                if nrm {
                    normal(rng, 0.0, gain * (2.0 / s).sqrt())
                } else {
                    let bound = gain * (6.0 / s).sqrt();
                    uniform(rng, -bound, bound)
                }
            }
            Kind::Kaiming {
                normal: nrm,
                gain,
                fan_out: by_out,
            } => {
                let fan = if by_out { fan_out } else { fan_in } as f32;
                if nrm {
                    normal(rng, 0.0, gain / fan.sqrt())
                } else {
                    let bound = gain * (3.0 / fan).sqrt();
                    uniform(rng, -bound, bound)
                }
            }
        }
    }
}

type Predicate = Arc<dyn Fn(&str, &[usize]) -> bool + Send + Sync>;

/// A seeded rule set choosing an [`Initializer`] per parameter.
///
/// Rules are tried in the order they were added; the first whose predicate accepts the
/// parameter's `(name, shape)` decides; when none does, the [`Init::default`] initializer
/// applies (N(0, 0.02²) unless set).
///
/// Each parameter draws from its own stream, seeded by the rule set's seed and the
/// parameter's name, so its values depend only on `(seed, name, shape, rule)`: adding,
/// removing or reordering other parameters never changes them.
///
/// ```
/// use rlx_tensor::init::{self, Init};
/// let rules = Init::new(7)
///     .rule(|_, shape| shape.len() < 2, init::zeros())
///     .rule(|name, _| name.ends_with("weight"), init::kaiming_uniform())
///     .default(init::normal(0.0, 0.02));
/// assert_eq!(rules.sample("fc.bias", &[4]), vec![0.0; 4]);
/// assert_eq!(rules.sample("fc.weight", &[4, 6]), rules.sample("fc.weight", &[4, 6]));
/// assert_eq!(rules.initializer_for("emb", &[10, 4]), init::normal(0.0, 0.02));
/// ```
#[derive(Clone)]
pub struct Init {
    seed: u64,
    rules: Vec<(Predicate, Initializer)>,
    default: Initializer,
}

impl fmt::Debug for Init {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Init")
            .field("seed", &self.seed)
            .field(
                "rules",
                &self.rules.iter().map(|(_, i)| i).collect::<Vec<_>>(),
            )
            .field("default", &self.default)
            .finish()
    }
}

impl Init {
    /// No rules yet; the default initializer is N(0, 0.02²).
    ///
    /// ```
    /// use rlx_tensor::init::{self, Init};
    /// assert_eq!(Init::new(0).initializer_for("w", &[2, 2]), init::normal(0.0, 0.02));
    /// ```
    pub fn new(seed: u64) -> Init {
        Init {
            seed,
            rules: Vec::new(),
            default: normal(0.0, 0.02),
        }
    }

    /// Add a rule: parameters for which `when(name, shape)` is true (and no earlier rule
    /// matched) use `init`.
    ///
    /// ```
    /// use rlx_tensor::init::{self, Init};
    /// let r = Init::new(0).rule(|n, _| n.starts_with("ln"), init::ones());
    /// assert_eq!(r.sample("ln.gamma", &[3]), vec![1.0; 3]);
    /// ```
    pub fn rule(
        mut self,
        when: impl Fn(&str, &[usize]) -> bool + Send + Sync + 'static,
        init: Initializer,
    ) -> Init {
        self.rules.push((Arc::new(when), init));
        self
    }

    /// The initializer for parameters no rule matches.
    ///
    /// ```
    /// use rlx_tensor::init::{self, Init};
    /// let r = Init::new(0).default(init::zeros());
    /// assert_eq!(r.sample("anything", &[2]), vec![0.0; 2]);
    /// ```
    pub fn default(mut self, init: Initializer) -> Init {
        self.default = init;
        self
    }

    /// The initializer chosen for `(name, shape)`.
    ///
    /// ```
    /// use rlx_tensor::init::{self, Init};
    /// let r = Init::new(0).rule(|_, s| s.len() == 1, init::zeros());
    /// assert_eq!(r.initializer_for("b", &[3]), init::zeros());
    /// ```
    pub fn initializer_for(&self, name: &str, shape: &[usize]) -> Initializer {
        self.rules
            .iter()
            .find(|(when, _)| when(name, shape))
            .map_or(self.default, |(_, init)| *init)
    }

    /// The stream parameter `name` draws from: the seed mixed with an FNV-1a hash of the
    /// name (stable across runs, platforms and versions).
    ///
    /// ```
    /// use rlx_tensor::init::Init;
    /// let r = Init::new(3);
    /// assert_eq!(r.rng_for("w").next_u64(), r.rng_for("w").next_u64());
    /// assert_ne!(r.rng_for("w").next_u64(), r.rng_for("v").next_u64());
    /// ```
    pub fn rng_for(&self, name: &str) -> Rng {
        let mut h: u64 = 0xCBF2_9CE4_8422_2325;
        for b in name.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
        }
        Rng::new(self.seed ^ h)
    }

    /// Values for parameter `name` of `shape` (`∏ shape` of them).
    ///
    /// ```
    /// use rlx_tensor::init::Init;
    /// assert_eq!(Init::new(0).sample("w", &[3, 2]).len(), 6);
    /// ```
    #[track_caller]
    pub fn sample(&self, name: &str, shape: &[usize]) -> Vec<f32> {
        self.initializer_for(name, shape)
            .sample(shape, &mut self.rng_for(name))
    }

    /// This rule set as the closure [`Func::init_params`](crate::Func::init_params) takes.
    ///
    /// ```
    /// use rlx_tensor::{init::{self, Init}, shape, Func};
    /// let f = Func::new("f", |s| s.param("w", shape![2, 3]).sum_all())
    ///     .init_params(Init::new(0).default(init::ones()).to_fn());
    /// assert_eq!(f.param_binding("w").unwrap(), &[1.0; 6]);
    /// ```
    pub fn to_fn(&self) -> impl FnMut(&str, &[usize]) -> Vec<f32> + '_ {
        move |name, shape| self.sample(name, shape)
    }

    /// Values for every `Op::Param` of `graph`, in node order, as `(name, values)` pairs —
    /// what a `Model` of that graph loads. A dynamic axis counts as size 1.
    ///
    /// ```
    /// use rlx_tensor::{graph, init::{self, Init}, shape};
    /// let g = graph("g", |s| s.param("w", shape![2, 2]).sum_all());
    /// let weights = Init::new(0).default(init::ones()).weights(&g);
    /// assert_eq!(weights, vec![("w".to_string(), vec![1.0; 4])]);
    /// # #[cfg(feature = "eval")] {
    /// let mut m = rlx_tensor::Model::new(g);
    /// m.load(weights.iter().map(|(n, v)| (n.as_str(), v.as_slice())));
    /// assert_eq!(m.run(&[])[0], vec![4.0]);
    /// # }
    /// ```
    pub fn weights(&self, graph: &Graph) -> Vec<(String, Vec<f32>)> {
        graph
            .nodes()
            .iter()
            .filter_map(|node| match &node.op {
                Op::Param { name } => {
                    let shape: Vec<usize> = node
                        .shape
                        .dims()
                        .iter()
                        .map(|d| match d {
                            Dim::Static(n) => *n,
                            Dim::Dynamic(_) => 1,
                        })
                        .collect();
                    Some((name.clone(), self.sample(name, &shape)))
                }
                _ => None,
            })
            .collect()
    }
}
