//! The op table shared by the JVP and vmap tests: one or more small graphs per
//! `Op` variant, each ending in the op under test, with input generators that keep
//! every op in its domain (positive logs, invertible solves, valid indices).
#![allow(dead_code)]

use rlx_ir::{DType, Graph, IrResult, NodeId, Op, Shape, TensorData};

/// How an input's per-example data is drawn.
#[derive(Clone, Debug)]
pub enum Gen {
    /// Uniform in `[lo, hi)`.
    Uniform(f64, f64),
    /// Uniform in `[lo, hi)` with a random sign.
    Away(f64, f64),
    /// Integers in `0..n`.
    Ints(i64),
    /// Random bools.
    Bools,
    /// Exactly these values (the same for every example).
    Fixed(Vec<f64>),
    /// Square matrices `[.., n, n]` with a dominant diagonal (invertible).
    Invertible,
}

/// One graph input.
#[derive(Clone, Debug)]
pub struct In {
    pub name: &'static str,
    pub dims: Vec<usize>,
    pub dtype: DType,
    pub source: Gen,
    /// Whether the JVP test feeds it a tangent.
    pub diff: bool,
}

/// A host reference: the expected tangent from the inputs and the tangents.
pub type Reference = Box<dyn Fn(&[TensorData], &[TensorData]) -> Vec<f64>>;

/// What the JVP of a case is checked against.
pub enum Check {
    /// Central finite differences of the function.
    Fd,
    /// The tangent is the tangent of the (single) differentiated input (straight-through).
    Identity,
    /// The tangent is zero.
    Zero,
    /// Computed on the host from the inputs and the tangents.
    Custom(Reference),
}

type Build = Box<dyn Fn(&mut Graph, &[NodeId]) -> IrResult<NodeId>>;

/// One case: inputs, the graph builder (given the input ids), the JVP check.
pub struct Case {
    pub name: String,
    pub inputs: Vec<In>,
    pub build: Build,
    pub check: Check,
    /// Finite-difference step and tolerance.
    pub eps: f64,
    pub tol: f64,
}

impl Case {
    pub fn check(mut self, c: Check) -> Case {
        self.check = c;
        self
    }

    pub fn fd(mut self, eps: f64, tol: f64) -> Case {
        self.eps = eps;
        self.tol = tol;
        self
    }

    /// The graph: one input per spec, the op under test as its single output.
    pub fn graph(&self) -> Graph {
        let mut g = Graph::new(self.name.clone());
        let ids: Vec<NodeId> = self
            .inputs
            .iter()
            .map(|i| g.input(i.name, Shape::new(&i.dims, i.dtype)))
            .collect();
        let out = (self.build)(&mut g, &ids)
            .unwrap_or_else(|e| panic!("case {}: building the graph failed: {e}", self.name));
        g.set_outputs(vec![out]);
        g.verify()
            .unwrap_or_else(|e| panic!("case {}: {e}", self.name));
        g
    }
}

pub fn case(
    name: impl Into<String>,
    inputs: Vec<In>,
    build: impl Fn(&mut Graph, &[NodeId]) -> IrResult<NodeId> + 'static,
) -> Case {
    Case {
        name: name.into(),
        inputs,
        build: Box::new(build),
        check: Check::Fd,
        eps: 1e-6,
        tol: 1e-6,
    }
}

/// How many variants are not leaves (every variant but input, param and constant).
pub const NON_LEAF: usize = Op::VARIANT_NAMES.len() - 3;

// ------------------------------------------------------------------ data

/// A small deterministic generator (SplitMix64).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// One example's values for `spec`.
pub fn values(spec: &In, rng: &mut Rng) -> Vec<f64> {
    let n: usize = spec.dims.iter().product();
    match &spec.source {
        Gen::Uniform(lo, hi) => (0..n).map(|_| rng.uniform(*lo, *hi)).collect(),
        Gen::Away(lo, hi) => (0..n)
            .map(|_| {
                let m = rng.uniform(*lo, *hi);
                if rng.unit() < 0.5 { -m } else { m }
            })
            .collect(),
        Gen::Ints(k) => (0..n)
            .map(|_| (rng.next_u64() % *k as u64) as f64)
            .collect(),
        Gen::Bools => (0..n).map(|_| (rng.next_u64() % 2) as f64).collect(),
        Gen::Fixed(v) => v.clone(),
        Gen::Invertible => {
            let d = *spec.dims.last().unwrap();
            (0..n)
                .map(|i| {
                    let (r, c) = ((i / d) % d, i % d);
                    rng.uniform(-0.5, 0.5) + if r == c { 3.0 } else { 0.0 }
                })
                .collect()
        }
    }
}

/// `values` encoded in the spec's dtype with leading `batch` dims.
pub fn data(spec: &In, batch: &[usize], vals: &[f64]) -> TensorData {
    let mut dims = batch.to_vec();
    dims.extend_from_slice(&spec.dims);
    TensorData::from_f64_as(spec.dtype, &dims, vals)
}

/// `a` equals `b` up to `tol` relative to `1 + |b|` (false for NaN).
pub fn within(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + b.abs())
}
