//! Random graphs over every kernel kind: elementwise chains, broadcasts, views,
//! reductions, matmuls (with fused bias/activation epilogues), row ops, casts and
//! opaque ops (cumsum, concat, pad, gather), in f32/f64/f16/bf16 and integer dtypes.
//!
//! Ops whose result amplifies last-ulp differences without bound (periodic functions,
//! `pow`, `rem`, `atan2`, division, comparisons) are only applied to exact inputs: the
//! oracle rounds each node once, a backend may fuse and round differently, and such
//! ops would turn a 1-ulp difference into an arbitrary one.

use crate::rng::{Rng, random_data};
use rlx_ir::{Activation, BinaryOp, CmpOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData};

/// Builds a random graph step by step: each step applies a random op to a recent value.
struct Builder<'r> {
    g: Graph,
    args: Vec<TensorData>,
    vals: Vec<NodeId>,
    rng: &'r mut Rng,
}

/// Activations that amplify last-ulp differences of computed operands (the
/// reciprocals turn a cancellation's absolute error near 0 into an unbounded one).
const EXACT_INPUT_ACTS: [Activation; 9] = [
    Activation::Recip,
    Activation::Rsqrt,
    Activation::Tan,
    Activation::Sin,
    Activation::Cos,
    Activation::Round,
    Activation::Floor,
    Activation::Ceil,
    Activation::Sign,
];

const BOOL_BINARY: [BinaryOp; 4] = [
    BinaryOp::BitAnd,
    BinaryOp::BitOr,
    BinaryOp::BitXor,
    BinaryOp::Max,
];

const INT_BINARY: [BinaryOp; 7] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Max,
    BinaryOp::Min,
    BinaryOp::BitXor,
    BinaryOp::BitAnd,
];

const COMPARISONS: [CmpOp; 6] = [
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
    CmpOp::Eq,
    CmpOp::Ne,
];

const REDUCTIONS: [ReduceOp; 5] = [
    ReduceOp::Sum,
    ReduceOp::Mean,
    ReduceOp::Max,
    ReduceOp::Min,
    ReduceOp::Prod,
];

const CAST_TARGETS: [DType; 8] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I32,
    DType::I8,
    DType::U8,
    DType::Bool,
];

impl Builder<'_> {
    fn input(&mut self, shape: Shape) -> NodeId {
        let name = format!("in{}", self.args.len());
        let id = self.g.input(name, shape.clone());
        let d = random_data(self.rng, &shape);
        self.args.push(d);
        id
    }

    fn is_input(&self, id: NodeId) -> bool {
        matches!(self.g.node(id).op, Op::Input { .. })
    }

    fn pick(&mut self) -> NodeId {
        // Prefer recent values so chains get long.
        let n = self.vals.len();
        let k = if self.rng.chance(0.6) {
            n - 1 - self.rng.below(n.min(3))
        } else {
            self.rng.below(n)
        };
        self.vals[k]
    }

    fn add(&mut self, op: Op, ins: Vec<NodeId>) -> Option<NodeId> {
        let id = self.g.add_op(op, ins).ok()?;
        self.vals.push(id);
        Some(id)
    }

    fn dims(&self, id: NodeId) -> Vec<usize> {
        self.g.shape(id).static_dims().unwrap()
    }

    /// A shape that broadcasts against `dims`: some axes set to 1, maybe fewer axes.
    fn broadcastable(&mut self, dims: &[usize]) -> Vec<usize> {
        let mut d: Vec<usize> = dims
            .iter()
            .map(|&x| if self.rng.chance(0.3) { 1 } else { x })
            .collect();
        if !d.is_empty() && self.rng.chance(0.3) {
            d.remove(0);
        }
        d
    }

    fn step(&mut self) {
        let x = self.pick();
        let dims = self.dims(x);
        let dt = self.g.shape(x).dtype();
        let float = dt.is_float();
        match self.rng.below(19) {
            0 | 1 if float => {
                let mut a = self.rng.pick(&Activation::ALL);
                if EXACT_INPUT_ACTS.contains(&a) && !self.is_input(x) {
                    a = Activation::Tanh;
                }
                // exp(x) turns x's absolute error into a relative one: one bf16 ulp
                // at 84 (0.5) is a factor 1.6.
                if a == Activation::Exp
                    && matches!(dt, DType::F16 | DType::BF16)
                    && !self.is_input(x)
                {
                    a = Activation::Tanh;
                }
                self.add(Op::Activation(a), vec![x]);
            }
            0 | 1 => {
                let a = self.rng.pick(&[
                    Activation::Neg,
                    Activation::Abs,
                    Activation::Relu,
                    Activation::Sign,
                ]);
                self.add(Op::Activation(a), vec![x]);
            }
            2..=4 => self.binary(x, &dims, dt),
            5 => {
                let bd = self.broadcastable(&dims);
                let y = self.input(Shape::new(&bd, if float { dt } else { DType::F32 }));
                let c = self.rng.pick(&COMPARISONS);
                // A comparison of a computed value flips where the value lands on the
                // threshold: compare exact inputs only (the selected values may be computed).
                let lhs = if self.is_input(x) {
                    x
                } else {
                    self.input(Shape::new(&dims, if float { dt } else { DType::F32 }))
                };
                if let Some(m) = self.add(Op::Compare(c), vec![lhs, y]) {
                    let od = self.broadcastable(&dims);
                    let other = self.input(Shape::new(&od, dt));
                    self.add(Op::Where, vec![m, x, other]);
                }
            }
            6 if dims.len() >= 2 => {
                let mut perm: Vec<usize> = (0..dims.len()).collect();
                for i in (1..perm.len()).rev() {
                    let j = self.rng.below(i + 1);
                    perm.swap(i, j);
                }
                self.add(Op::Transpose { perm }, vec![x]);
            }
            7 if !dims.is_empty() => {
                let axis = self.rng.below(dims.len());
                if dims[axis] > 1 {
                    let len = 1 + self.rng.below(dims[axis] - 1);
                    let start = self.rng.below(dims[axis] - len + 1);
                    self.add(Op::Narrow { axis, start, len }, vec![x]);
                }
            }
            8 => {
                let n: usize = dims.iter().product();
                let new_shape: Vec<i64> = if dims.len() >= 2 && self.rng.chance(0.5) {
                    vec![-1]
                } else if n.is_multiple_of(2) && n > 0 {
                    vec![2, -1]
                } else {
                    vec![1, -1]
                };
                self.add(Op::Reshape { new_shape }, vec![x]);
            }
            9 => {
                let mut target: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
                match dims.iter().position(|&d| d == 1) {
                    Some(i) => target[i] = 3,
                    None => target.insert(0, 2),
                }
                let op = Op::Expand {
                    target_shape: target,
                };
                self.add(op, vec![x]);
            }
            10 | 11 if !dims.is_empty() => {
                let mut axes: Vec<usize> =
                    (0..dims.len()).filter(|_| self.rng.chance(0.5)).collect();
                if axes.is_empty() {
                    axes.push(self.rng.below(dims.len()));
                }
                let mut op = if dt == DType::Bool {
                    self.rng.pick(&[ReduceOp::Max, ReduceOp::Min])
                } else {
                    self.rng.pick(&REDUCTIONS)
                };
                // A product of hundreds of computed values compounds their roundings
                // (and overflows into values that swamp anything added to them).
                if op == ReduceOp::Prod && !self.is_input(x) {
                    op = ReduceOp::Sum;
                }
                let keep_dim = self.rng.chance(0.5);
                self.add(Op::Reduce { op, axes, keep_dim }, vec![x]);
            }
            // A half-precision contraction of a computed operand sums values that carry
            // one rounding each (the compiled f32 and the oracle's f64 accumulation may
            // round a product differently): with cancellation, and a tanh/gelu epilogue
            // after it, one ulp of an input becomes an error far beyond any tolerance.
            12 if dims.len() >= 2
                && dt != DType::Bool
                && (!matches!(dt, DType::F16 | DType::BF16) || self.is_input(x)) =>
            {
                self.matmul(x, &dims, dt)
            }
            // Softmax-like row ops exponentiate: one half-precision ulp of a computed
            // operand (1/8 at 30 in bf16) moves the result by more than the tolerance.
            13 if float
                && !dims.is_empty()
                && (!matches!(dt, DType::F16 | DType::BF16) || self.is_input(x)) =>
            {
                self.row_op(x, &dims, dt)
            }
            14 => {
                let to = self.rng.pick(&CAST_TARGETS);
                self.add(Op::Cast { to }, vec![x]);
            }
            15 if !dims.is_empty() && dt != DType::Bool => {
                let axis = self.rng.below(dims.len()) as i32;
                let exclusive = self.rng.chance(0.5);
                self.add(Op::Cumsum { axis, exclusive }, vec![x]);
            }
            16 if !dims.is_empty() => {
                let axis = self.rng.below(dims.len());
                let mut od = dims.clone();
                od[axis] = 1 + self.rng.below(3);
                let y = self.input(Shape::new(&od, dt));
                let ins = if self.rng.chance(0.5) {
                    vec![x, y]
                } else {
                    vec![y, x, y]
                };
                self.add(Op::Concat { axis }, ins);
            }
            17 if !dims.is_empty() => {
                let axis = self.rng.below(dims.len());
                let (before, after) = (self.rng.below(3), self.rng.below(3));
                let value = self.rng.pick(&[0.0, 0.5, -1.0]);
                let op = Op::Pad {
                    axis,
                    before,
                    after,
                    value,
                };
                self.add(op, vec![x]);
            }
            18 if !dims.is_empty() => self.gather(x, &dims),
            _ => {
                let v = TensorData::from_f64_as(dt, &[], &[self.rng.pick(&[0.5, 2.0, -1.0, 3.0])]);
                let s = v.shape();
                let c = self.g.add_node(Op::Constant { data: v.bytes }, vec![], s);
                let b = self
                    .rng
                    .pick(&[BinaryOp::Mul, BinaryOp::Add, BinaryOp::Sub]);
                if dt != DType::Bool {
                    self.add(Op::Binary(b), vec![x, c]);
                }
            }
        }
    }

    /// A binary op of `x` and a recent value or a new (broadcastable, maybe other-dtype)
    /// input.
    fn binary(&mut self, x: NodeId, dims: &[usize], dt: DType) {
        let y = if self.rng.chance(0.5) && self.vals.len() > 1 {
            self.pick()
        } else {
            let bd = self.broadcastable(dims);
            let ydt = if self.rng.chance(0.85) {
                dt
            } else {
                self.rng
                    .pick(&[DType::F32, DType::I32, DType::F64, DType::F16])
            };
            self.input(Shape::new(&bd, ydt))
        };
        let ops: &[BinaryOp] = if dt.is_float() {
            &BinaryOp::FLOAT_ARITHMETIC
        } else if dt == DType::Bool {
            &BOOL_BINARY
        } else {
            &INT_BINARY
        };
        let mut b = self.rng.pick(ops);
        // pow and rem amplify last-ulp differences of computed operands without
        // bound (rem by a tiny divisor, pow of a base near 0): only exact inputs.
        if matches!(b, BinaryOp::Pow | BinaryOp::Mod | BinaryOp::Atan2)
            && !(self.is_input(x) && self.is_input(y))
        {
            b = BinaryOp::Add;
        }
        let (l, r) = if self.rng.chance(0.5) { (x, y) } else { (y, x) };
        // Division by a computed value near 0 is just as ill-conditioned.
        if b == BinaryOp::Div && !self.is_input(r) {
            b = BinaryOp::Mul;
        }
        self.add(Op::Binary(b), vec![l, r]);
    }

    /// A matmul by a new `[K, N]` weight, sometimes with a fused bias and activation.
    fn matmul(&mut self, x: NodeId, dims: &[usize], dt: DType) {
        let k = dims[dims.len() - 1];
        let n = 1 + self.rng.below(9);
        let w = self.input(Shape::new(&[k, n], dt));
        if dt.is_float() && self.rng.chance(0.5) {
            let b = self.input(Shape::new(&[n], dt));
            let activation = self.rng.pick(&[
                None,
                Some(Activation::Relu),
                Some(Activation::GeluApprox),
                Some(Activation::Tanh),
            ]);
            self.add(Op::FusedMatMulBiasAct { activation }, vec![x, w, b]);
        } else {
            self.add(Op::MatMul, vec![x, w]);
        }
    }

    /// Softmax, log-softmax, layer norm or RMS norm of `x`.
    fn row_op(&mut self, x: NodeId, dims: &[usize], dt: DType) {
        let c = *dims.last().unwrap();
        match self.rng.below(4) {
            0 => self.add(Op::Softmax { axis: -1 }, vec![x]),
            1 => {
                let axis = self.rng.below(dims.len()) as i32;
                self.add(Op::LogSoftmax { axis }, vec![x])
            }
            _ => {
                let gm = self.input(Shape::new(&[c], dt));
                let bt = self.input(Shape::new(&[c], dt));
                let op = if self.rng.chance(0.5) {
                    Op::LayerNorm {
                        axis: -1,
                        eps: 1e-5,
                    }
                } else {
                    Op::RmsNorm {
                        axis: -1,
                        eps: 1e-5,
                    }
                };
                self.add(op, vec![x, gm, bt])
            }
        };
    }

    /// A gather along a random axis by a short index list in a random index dtype.
    fn gather(&mut self, x: NodeId, dims: &[usize]) {
        let axis = self.rng.below(dims.len());
        let n = dims[axis] as i64;
        let count = 1 + self.rng.below(4);
        // Mostly valid (negative ones count from the end), rarely out of range.
        let idx: Vec<i64> = (0..count)
            .map(|_| {
                let hi = if self.rng.chance(0.05) { n + 2 } else { n };
                self.rng.below((2 * hi) as usize) as i64 - hi
            })
            .collect();
        let idt = self.rng.pick(&[DType::I32, DType::I64, DType::F32]);
        let d = TensorData::from_i64_as(idt, &[count], &idx);
        let name = format!("in{}", self.args.len());
        let id = self.g.input(name, d.shape());
        self.args.push(d);
        self.add(Op::Gather { axis }, vec![x, id]);
    }
}

/// A random graph and its argument data (in argument order). `large` makes the last
/// axis a few hundred to ~1400 long so tiles, row mode and parallel chunks are
/// exercised; otherwise every axis is 1–5 long.
pub fn build_random_graph(rng: &mut Rng, large: bool) -> (Graph, Vec<TensorData>) {
    let mut b = Builder {
        g: Graph::new("random"),
        args: Vec::new(),
        vals: Vec::new(),
        rng,
    };
    let rank = 1 + b.rng.below(3);
    let dims: Vec<usize> = (0..rank)
        .map(|i| {
            if large && i == rank - 1 {
                200 + b.rng.below(1200)
            } else {
                1 + b.rng.below(if large { 8 } else { 5 })
            }
        })
        .collect();
    let dt = b.rng.pick(&[
        DType::F32,
        DType::F32,
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
    ]);
    let x = b.input(Shape::new(&dims, dt));
    b.vals.push(x);
    let steps = 2 + b.rng.below(if large { 5 } else { 9 });
    for _ in 0..steps {
        b.step();
    }
    let n = b.vals.len();
    let mut outs = vec![b.vals[n - 1]];
    if n > 2 && b.rng.chance(0.4) {
        outs.push(b.vals[b.rng.below(n - 1)]);
    }
    b.g.set_outputs(outs);
    (b.g, b.args)
}
