//! Shared by the differential tests: a small deterministic generator, random graphs
//! over every kernel kind and several dtypes, and the comparison against the oracle.

#![allow(dead_code)]

pub mod cases;

use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Graph, MaskKind, NodeId, Op, ReduceOp, Shape, TensorData,
    interp,
};
use rlx_runtime::{Executable, RuntimeResult, arg_order};
use std::sync::Arc;

/// splitmix64: deterministic, seedable.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x51_7cc1_b727_220a)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// Random values for `shape`: floats in [−2, 2], small integers, bools.
pub fn random_data(rng: &mut Rng, shape: &Shape) -> TensorData {
    let dims = shape.static_dims().unwrap();
    let n: usize = dims.iter().product();
    let dt = shape.dtype();
    if dt.is_float() {
        let v: Vec<f64> = (0..n).map(|_| rng.unit() * 4.0 - 2.0).collect();
        TensorData::from_f64_as(dt, &dims, &v)
    } else if dt == DType::Bool {
        let v: Vec<bool> = (0..n).map(|_| rng.chance(0.5)).collect();
        TensorData::from_bool(&dims, &v)
    } else {
        let lo: i64 = if dt.is_unsigned() { 0 } else { -15 };
        let v: Vec<i64> = (0..n).map(|_| lo + rng.below(31) as i64).collect();
        TensorData::from_i64_as(dt, &dims, &v)
    }
}

/// Builds a random graph step by step.
pub struct Builder<'r> {
    pub g: Graph,
    pub args: Vec<TensorData>,
    pub vals: Vec<NodeId>,
    pub rng: &'r mut Rng,
}

impl Builder<'_> {
    pub fn input(&mut self, shape: Shape) -> NodeId {
        let name = format!("in{}", self.args.len());
        let id = self.g.input(name, shape.clone());
        let d = random_data(self.rng, &shape);
        self.args.push(d);
        id
    }

    fn recent(&mut self) -> NodeId {
        let n = self.vals.len();
        let back = if self.rng.chance(0.7) {
            self.rng.below(n.min(2))
        } else {
            self.rng.below(n)
        };
        self.vals[n - 1 - back]
    }

    fn push(&mut self, op: Op, ins: Vec<NodeId>) -> Option<NodeId> {
        let id = self.g.add_op(op, ins).ok()?;
        self.vals.push(id);
        Some(id)
    }

    fn dims(&self, id: NodeId) -> Vec<usize> {
        self.g.shape(id).static_dims().unwrap()
    }

    /// Dims broadcasting against `d`: some axes 1, maybe a leading axis dropped.
    fn bcast_of(&mut self, d: &[usize]) -> Vec<usize> {
        let mut v: Vec<usize> = d
            .iter()
            .map(|&x| if self.rng.chance(0.3) { 1 } else { x })
            .collect();
        if !v.is_empty() && self.rng.chance(0.25) {
            v.remove(0);
        }
        v
    }

    fn step(&mut self) {
        let x = self.recent();
        let d = self.dims(x);
        let dt = self.g.shape(x).dtype();
        let float = dt.is_float();
        match self.rng.below(17) {
            0 | 1 => {
                let a = if float {
                    self.rng.pick(&Activation::ALL)
                } else {
                    self.rng.pick(&[
                        Activation::Neg,
                        Activation::Abs,
                        Activation::Relu,
                        Activation::Sign,
                    ])
                };
                self.push(Op::Activation(a), vec![x]);
            }
            2..=4 => {
                let y = if self.rng.chance(0.4) && self.vals.len() > 1 {
                    self.recent()
                } else {
                    let bd = self.bcast_of(&d);
                    let ydt = if self.rng.chance(0.8) {
                        dt
                    } else {
                        self.rng
                            .pick(&[DType::F32, DType::I32, DType::F64, DType::F16])
                    };
                    self.input(Shape::new(&bd, ydt))
                };
                let ops: &[BinaryOp] = if float {
                    &[
                        BinaryOp::Add,
                        BinaryOp::Sub,
                        BinaryOp::Mul,
                        BinaryOp::Div,
                        BinaryOp::Max,
                        BinaryOp::Min,
                        BinaryOp::Pow,
                        BinaryOp::Mod,
                        BinaryOp::Atan2,
                    ]
                } else if dt == DType::Bool {
                    &[
                        BinaryOp::BitAnd,
                        BinaryOp::BitOr,
                        BinaryOp::BitXor,
                        BinaryOp::Max,
                    ]
                } else {
                    &[
                        BinaryOp::Add,
                        BinaryOp::Sub,
                        BinaryOp::Mul,
                        BinaryOp::Max,
                        BinaryOp::Min,
                        BinaryOp::BitXor,
                        BinaryOp::BitAnd,
                    ]
                };
                let b = self.rng.pick(ops);
                let (l, r) = if self.rng.chance(0.5) { (x, y) } else { (y, x) };
                self.push(Op::Binary(b), vec![l, r]);
            }
            5 => {
                let bd = self.bcast_of(&d);
                let y = self.input(Shape::new(&bd, if float { dt } else { DType::F32 }));
                let c = self.rng.pick(&[
                    CmpOp::Lt,
                    CmpOp::Le,
                    CmpOp::Gt,
                    CmpOp::Ge,
                    CmpOp::Eq,
                    CmpOp::Ne,
                ]);
                if let Some(m) = self.push(Op::Compare(c), vec![x, y]) {
                    let od = self.bcast_of(&d);
                    let other = self.input(Shape::new(&od, dt));
                    self.push(Op::Where, vec![m, x, other]);
                }
            }
            6 if d.len() >= 2 => {
                let mut perm: Vec<usize> = (0..d.len()).collect();
                for i in (1..perm.len()).rev() {
                    let j = self.rng.below(i + 1);
                    perm.swap(i, j);
                }
                self.push(Op::Transpose { perm }, vec![x]);
            }
            7 if !d.is_empty() => {
                let axis = self.rng.below(d.len());
                if d[axis] > 1 {
                    let len = 1 + self.rng.below(d[axis] - 1);
                    let start = self.rng.below(d[axis] - len + 1);
                    self.push(Op::Narrow { axis, start, len }, vec![x]);
                }
            }
            8 => {
                let n: usize = d.iter().product();
                let new_shape: Vec<i64> = if d.len() >= 2 && self.rng.chance(0.5) {
                    vec![-1]
                } else if n.is_multiple_of(2) && n > 0 {
                    vec![2, -1]
                } else {
                    vec![-1, 1]
                };
                self.push(Op::Reshape { new_shape }, vec![x]);
            }
            9 => {
                let mut t: Vec<i64> = d.iter().map(|&v| v as i64).collect();
                match d.iter().position(|&v| v == 1) {
                    Some(i) => t[i] = 3,
                    None => t.insert(0, 2),
                }
                self.push(Op::Expand { target_shape: t }, vec![x]);
            }
            10 | 11 if !d.is_empty() => {
                let mut axes: Vec<usize> = (0..d.len()).filter(|_| self.rng.chance(0.5)).collect();
                if axes.is_empty() {
                    axes.push(self.rng.below(d.len()));
                }
                let op = if dt == DType::Bool {
                    self.rng.pick(&[ReduceOp::Max, ReduceOp::Min])
                } else {
                    self.rng.pick(&[
                        ReduceOp::Sum,
                        ReduceOp::Mean,
                        ReduceOp::Max,
                        ReduceOp::Min,
                        ReduceOp::Prod,
                    ])
                };
                let keep_dim = self.rng.chance(0.5);
                self.push(Op::Reduce { op, axes, keep_dim }, vec![x]);
            }
            12 if d.len() >= 2 && dt != DType::Bool => {
                let k = d[d.len() - 1];
                let n = 1 + self.rng.below(9);
                let w = self.input(Shape::new(&[k, n], dt));
                if float && self.rng.chance(0.5) {
                    let b = self.input(Shape::new(&[n], dt));
                    let act = self.rng.pick(&[
                        None,
                        Some(Activation::Relu),
                        Some(Activation::GeluApprox),
                        Some(Activation::Tanh),
                    ]);
                    self.push(Op::FusedMatMulBiasAct { activation: act }, vec![x, w, b]);
                } else {
                    self.push(Op::MatMul, vec![x, w]);
                }
            }
            13 if float && !d.is_empty() => {
                let c = *d.last().unwrap();
                match self.rng.below(4) {
                    0 => {
                        self.push(Op::Softmax { axis: -1 }, vec![x]);
                    }
                    1 => {
                        self.push(Op::LogSoftmax { axis: -1 }, vec![x]);
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
                        self.push(op, vec![x, gm, bt]);
                    }
                }
            }
            14 => {
                let to = self.rng.pick(&[
                    DType::F32,
                    DType::F16,
                    DType::BF16,
                    DType::F64,
                    DType::I32,
                    DType::I8,
                    DType::U8,
                    DType::Bool,
                ]);
                self.push(Op::Cast { to }, vec![x]);
            }
            15 if !d.is_empty() && dt != DType::Bool => {
                let axis = self.rng.below(d.len()) as i32;
                let exclusive = self.rng.chance(0.5);
                self.push(Op::Cumsum { axis, exclusive }, vec![x]);
            }
            16 if !d.is_empty() => {
                let axis = self.rng.below(d.len());
                if self.rng.chance(0.5) {
                    let mut od = d.clone();
                    od[axis] = 1 + self.rng.below(3);
                    let y = self.input(Shape::new(&od, dt));
                    self.push(Op::Concat { axis }, vec![x, y]);
                } else {
                    let (before, after) = (self.rng.below(3), self.rng.below(3));
                    self.push(
                        Op::Pad {
                            axis,
                            before,
                            after,
                            value: 0.5,
                        },
                        vec![x],
                    );
                }
            }
            _ => {
                if dt != DType::Bool {
                    let v =
                        TensorData::from_f64_as(dt, &[], &[self.rng.pick(&[0.5, 2.0, -1.0, 3.0])]);
                    let s = v.shape();
                    let c = self.g.add_node(Op::Constant { data: v.bytes }, vec![], s);
                    let b = self
                        .rng
                        .pick(&[BinaryOp::Mul, BinaryOp::Add, BinaryOp::Sub]);
                    self.push(Op::Binary(b), vec![x, c]);
                }
            }
        }
    }
}

/// A random graph and its arguments; `large` makes the last axis a few hundred long.
pub fn random_graph(rng: &mut Rng, large: bool) -> (Graph, Vec<TensorData>) {
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
                150 + b.rng.below(700)
            } else {
                1 + b.rng.below(if large { 6 } else { 5 })
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
    let steps = 2 + b.rng.below(if large { 5 } else { 8 });
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

/// A random attention graph: both layouts, grouped-query heads, every mask kind,
/// optional scale, softcap and epilogue, sometimes a strided (transposed) q.
pub fn attention_graph(rng: &mut Rng) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("attention");
    let mut args = Vec::new();
    let (b, sq, sk) = (1 + rng.below(2), 1 + rng.below(80), 1 + rng.below(80));
    let hk = 1 + rng.below(2);
    let h = hk * (1 + rng.below(2));
    let d = rng.pick(&[1, 4, 8, 16]);
    let dv = if rng.chance(0.3) { 5 } else { d };
    let four = rng.chance(0.5);
    let mut input = |g: &mut Graph, rng: &mut Rng, name: &str, dims: &[usize]| {
        let s = Shape::new(dims, DType::F32);
        args.push(random_data(rng, &s));
        g.input(name, s)
    };
    let lay = |s: usize, hh: usize, dd: usize| {
        if four {
            vec![b, s, hh, dd]
        } else {
            vec![b, s, hh * dd]
        }
    };
    let q = if four && rng.chance(0.3) {
        let t = input(&mut g, rng, "q", &[b, h, sq, d]);
        g.add_op(
            Op::Transpose {
                perm: vec![0, 2, 1, 3],
            },
            vec![t],
        )
        .unwrap()
    } else {
        input(&mut g, rng, "q", &lay(sq, h, d))
    };
    let k = input(&mut g, rng, "k", &lay(sk, hk, d));
    let v = input(&mut g, rng, "v", &lay(sk, hk, dv));
    let window = rng.below(9);
    let mask = rng.pick(&[
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(window),
        MaskKind::Custom,
        MaskKind::Bias,
    ]);
    let mut ins = vec![q, k, v];
    match mask {
        MaskKind::Custom => ins.push(input(&mut g, rng, "mask", &[b, sk])),
        MaskKind::Bias => {
            let from = rng.below(2);
            ins.push(input(&mut g, rng, "bias", &[h, sq, sk][from..]));
        }
        _ => {}
    }
    let op = Op::Attention {
        num_heads: h,
        head_dim: d,
        v_head_dim: (dv != d).then_some(dv),
        mask_kind: mask,
        score_scale: rng.chance(0.3).then_some(0.7),
        attn_logit_softcap: rng.chance(0.3).then_some(5.0),
    };
    let a = g.add_op(op, ins).unwrap();
    let out = if rng.chance(0.5) {
        g.add_op(Op::Activation(Activation::Tanh), vec![a]).unwrap()
    } else {
        a
    };
    g.set_outputs(vec![out]);
    (g, args)
}

/// Relative tolerance per dtype (GPU transcendentals are a few ulp; the oracle computes
/// in f64 and rounds each node once).
pub fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-9,
        DType::F32 => 2e-4,
        DType::F16 => 2e-2,
        DType::BF16 => 8e-2,
        _ => 0.0,
    }
}

/// The oracle's outputs (or its error).
pub fn oracle(g: &Graph, args: &[TensorData]) -> rlx_ir::IrResult<Vec<TensorData>> {
    let names: Vec<String> = arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    interp::run_refs(g, &named)
}

/// Compile `g` with `compile`, run it, and require agreement with the oracle (or that
/// both fail).
pub fn check(
    g: &Graph,
    args: &[TensorData],
    compile: &dyn Fn(&Graph) -> RuntimeResult<Arc<dyn Executable>>,
) {
    let want = oracle(g, args);
    let exe = compile(g).unwrap_or_else(|e| panic!("compile failed: {e}\n{g}"));
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe.run(&views);
    let (want, got) = match (want, got) {
        (Ok(w), Ok(x)) => (w, x),
        (Err(_), Err(_)) => return,
        (w, x) => panic!(
            "oracle {:?} but compiled {:?}\n{g}\n{}",
            w.map(|_| "ok"),
            x.map(|_| "ok"),
            exe.explain()
        ),
    };
    let graph_tol = g
        .nodes()
        .iter()
        .filter(|n| n.shape.dtype().is_float())
        .map(|n| tolerance(n.shape.dtype()))
        .fold(0.0f64, f64::max);
    assert_eq!(got.len(), want.len());
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.dims, b.dims, "output {k} dims\n{g}");
        assert_eq!(a.dtype, b.dtype, "output {k} dtype\n{g}");
        let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
        if !b.dtype.is_float() && graph_tol > 0.0 {
            // Integers derived from float math may flip where a value lands on a boundary.
            let bad = x.iter().zip(&y).filter(|(p, q)| p != q).count();
            assert!(
                bad * 20 <= x.len().max(1),
                "output {k}: {bad} of {} elements differ\n{g}",
                x.len()
            );
            continue;
        }
        let tol = tolerance(b.dtype).max(graph_tol);
        let scale = y
            .iter()
            .filter(|v| v.is_finite())
            .fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let ok =
                p == q || (p.is_nan() && q.is_nan()) || (p - q).abs() <= tol * (q.abs() + scale);
            assert!(
                ok,
                "output {k} element {i}: compiled {p} vs oracle {q} (tol {tol})\n{g}\n{}",
                exe.explain()
            );
        }
    }
}
