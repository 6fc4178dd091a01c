//! Random graph generation and oracle comparison for the differential tests.

#![allow(dead_code)]

use rlx_cpu::CpuBackend;
use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Graph, NodeId, Op, ReduceOp, Shape, TensorData, interp,
};
use rlx_runtime::{Backend, Device, arg_order};

/// xorshift64*: a tiny deterministic generator.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }
    pub fn uniform(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Random data for `shape` (floats in [-2, 2], small integers, bools).
pub fn random_data(rng: &mut Rng, shape: &Shape) -> TensorData {
    let dims = shape.static_dims().unwrap();
    let n: usize = dims.iter().product();
    let dt = shape.dtype();
    if dt.is_float() {
        let v: Vec<f64> = (0..n).map(|_| rng.uniform() * 4.0 - 2.0).collect();
        TensorData::from_f64_as(dt, &dims, &v)
    } else if dt == DType::Bool {
        let v: Vec<bool> = (0..n).map(|_| rng.chance(0.5)).collect();
        TensorData::from_bool(&dims, &v)
    } else {
        let lo: i64 = if dt.is_unsigned() { 0 } else { -20 };
        let v: Vec<i64> = (0..n).map(|_| lo + rng.below(41) as i64).collect();
        TensorData::from_i64_as(dt, &dims, &v)
    }
}

struct Builder<'r> {
    g: Graph,
    args: Vec<TensorData>,
    vals: Vec<NodeId>,
    rng: &'r mut Rng,
}

const FLOAT_ACTS: [Activation; 29] = Activation::ALL;

impl Builder<'_> {
    fn input(&mut self, shape: Shape) -> NodeId {
        let name = format!("in{}", self.args.len());
        let id = self.g.input(name, shape.clone());
        let d = random_data(self.rng, &shape);
        self.args.push(d);
        id
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
                let mut a = FLOAT_ACTS[self.rng.below(FLOAT_ACTS.len())];
                // Periodic functions of large computed values amplify last-ulp
                // differences without bound: only of exact inputs.
                if matches!(
                    a,
                    Activation::Tan
                        | Activation::Sin
                        | Activation::Cos
                        | Activation::Round
                        | Activation::Floor
                        | Activation::Ceil
                        | Activation::Sign
                ) && !matches!(self.g.node(x).op, Op::Input { .. })
                {
                    a = Activation::Tanh;
                }
                self.add(Op::Activation(a), vec![x]);
            }
            0 | 1 => {
                let a = [
                    Activation::Neg,
                    Activation::Abs,
                    Activation::Relu,
                    Activation::Sign,
                ][self.rng.below(4)];
                self.add(Op::Activation(a), vec![x]);
            }
            2..=4 => {
                let y = if self.rng.chance(0.5) && self.vals.len() > 1 {
                    self.pick()
                } else {
                    let bd = self.broadcastable(&dims);
                    let ydt = if self.rng.chance(0.85) {
                        dt
                    } else {
                        [DType::F32, DType::I32, DType::F64][self.rng.below(3)]
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
                    ]
                };
                let mut b = ops[self.rng.below(ops.len())];
                // pow and rem amplify last-ulp differences of computed operands without
                // bound (rem by a tiny divisor, pow of a base near 0): only exact inputs.
                let leaf = |id: NodeId| matches!(self.g.node(id).op, Op::Input { .. });
                if matches!(b, BinaryOp::Pow | BinaryOp::Mod | BinaryOp::Atan2)
                    && !(leaf(x) && leaf(y))
                {
                    b = BinaryOp::Add;
                }
                let (l, r) = if self.rng.chance(0.5) { (x, y) } else { (y, x) };
                // Division by a computed value near 0 is just as ill-conditioned.
                if b == BinaryOp::Div && !leaf(r) {
                    b = BinaryOp::Mul;
                }
                self.add(Op::Binary(b), vec![l, r]);
            }
            5 => {
                let bd = self.broadcastable(&dims);
                let y = self.input(Shape::new(&bd, if float { dt } else { DType::F32 }));
                let c = [
                    CmpOp::Lt,
                    CmpOp::Le,
                    CmpOp::Gt,
                    CmpOp::Ge,
                    CmpOp::Eq,
                    CmpOp::Ne,
                ][self.rng.below(6)];
                // A comparison of a computed value flips where the value lands on the
                // threshold: compare exact inputs only (the selected values may be computed).
                let lhs = if matches!(self.g.node(x).op, Op::Input { .. }) {
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
                if let Some(i) = dims.iter().position(|&d| d == 1) {
                    target[i] = 3;
                } else {
                    target.insert(0, 2);
                }
                self.add(
                    Op::Expand {
                        target_shape: target,
                    },
                    vec![x],
                );
            }
            10 | 11 if !dims.is_empty() => {
                let mut axes: Vec<usize> =
                    (0..dims.len()).filter(|_| self.rng.chance(0.5)).collect();
                if axes.is_empty() {
                    axes.push(self.rng.below(dims.len()));
                }
                let ops: &[ReduceOp] = if dt == DType::Bool {
                    &[ReduceOp::Max, ReduceOp::Min]
                } else {
                    &[
                        ReduceOp::Sum,
                        ReduceOp::Mean,
                        ReduceOp::Max,
                        ReduceOp::Min,
                        ReduceOp::Prod,
                    ]
                };
                let op = ops[self.rng.below(ops.len())];
                let keep_dim = self.rng.chance(0.5);
                self.add(Op::Reduce { op, axes, keep_dim }, vec![x]);
            }
            12 if dims.len() >= 2 && dt != DType::Bool => {
                let k = dims[dims.len() - 1];
                let n = 1 + self.rng.below(7);
                let w = self.input(Shape::new(&[k, n], dt));
                if self.rng.chance(0.5) && float {
                    let b = self.input(Shape::new(&[n], dt));
                    let act = if self.rng.chance(0.5) {
                        Some(Activation::Tanh)
                    } else {
                        None
                    };
                    self.add(Op::FusedMatMulBiasAct { activation: act }, vec![x, w, b]);
                } else {
                    self.add(Op::MatMul, vec![x, w]);
                }
            }
            13 if float && !dims.is_empty() => {
                let c = *dims.last().unwrap();
                match self.rng.below(4) {
                    0 => self.add(Op::Softmax { axis: -1 }, vec![x]),
                    1 => {
                        let axis = self.rng.below(dims.len()) as i32;
                        self.add(Op::LogSoftmax { axis }, vec![x])
                    }
                    2 | 3 => {
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
                    _ => None,
                };
            }
            14 => {
                let to = [
                    DType::F32,
                    DType::F16,
                    DType::BF16,
                    DType::F64,
                    DType::I32,
                    DType::I8,
                    DType::U8,
                    DType::Bool,
                ][self.rng.below(8)];
                self.add(Op::Cast { to }, vec![x]);
            }
            15 if !dims.is_empty() && dt != DType::Bool => {
                let axis = self.rng.below(dims.len());
                let exclusive = self.rng.chance(0.5);
                self.add(
                    Op::Cumsum {
                        axis: axis as i32,
                        exclusive,
                    },
                    vec![x],
                );
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
                let value = [0.0, 0.5, -1.0][self.rng.below(3)];
                self.add(
                    Op::Pad {
                        axis,
                        before,
                        after,
                        value,
                    },
                    vec![x],
                );
            }
            18 if !dims.is_empty() => {
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
                let idt = [DType::I32, DType::I64, DType::F32][self.rng.below(3)];
                let d = TensorData::from_i64_as(idt, &[count], &idx);
                let name = format!("in{}", self.args.len());
                let id = self.g.input(name, d.shape());
                self.args.push(d);
                self.add(Op::Gather { axis }, vec![x, id]);
            }
            _ => {
                let v =
                    TensorData::from_f64_as(dt, &[], &[[0.5, 2.0, -1.0, 3.0][self.rng.below(4)]]);
                let s = v.shape();
                let c = self.g.add_node(Op::Constant { data: v.bytes }, vec![], s);
                let b = [BinaryOp::Mul, BinaryOp::Add, BinaryOp::Sub][self.rng.below(3)];
                if dt != DType::Bool {
                    self.add(Op::Binary(b), vec![x, c]);
                }
            }
        }
    }
}

/// A random graph and argument data. `large` uses dims up to a few hundred so tiles,
/// row mode and parallel chunks are exercised.
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
    let dt = [
        DType::F32,
        DType::F32,
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
    ][b.rng.below(8)];
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

/// Relative tolerance for results of `dt` (f32 transcendentals are a few ulp; the
/// oracle computes in f64 and rounds each node once).
pub fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-9,
        DType::F32 => 2e-4,
        DType::F16 => 2e-2,
        DType::BF16 => 8e-2,
        _ => 0.0,
    }
}

/// Run `g` compiled and through the oracle; they must agree (or both fail).
pub fn check_against_oracle(g: &Graph, args: &[TensorData]) {
    let names: Vec<String> = arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    let want = interp::run_refs(g, &named);
    let exe = CpuBackend
        .compile(Device::Cpu, g)
        .unwrap_or_else(|e| panic!("compile failed: {e}\n{g}"));
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let got = exe.run(&views);
    let (want, got) = match (want, got) {
        (Ok(w), Ok(g2)) => (w, g2),
        (Err(_), Err(_)) => return,
        (w, g2) => panic!(
            "oracle {:?} but compiled {:?}\n{g}\n{}",
            w.map(|_| "ok"),
            g2.map(|_| "ok"),
            exe.explain()
        ),
    };
    // The least precise float dtype computed anywhere bounds the error of every output.
    let graph_tol = g
        .nodes()
        .iter()
        .filter(|n| n.shape.dtype().is_float())
        .map(|n| tolerance(n.shape.dtype()))
        .fold(0.0f64, f64::max);
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!(a.dims, b.dims, "output {k} dims\n{g}");
        assert_eq!(a.dtype, b.dtype, "output {k} dtype\n{g}");
        if !b.dtype.is_float() && graph_tol > 0.0 {
            // Integers and bools derived from float math may flip where a float lands
            // on a boundary: require all but a few elements to agree exactly.
            let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
            let bad = x
                .iter()
                .zip(&y)
                .filter(|(p, q)| p != q && !(p.is_nan() && q.is_nan()))
                .count();
            // Half-precision graphs round every node to 8–11 bits, so far more
            // integers derived from them sit on a rounding edge.
            let allowed = if graph_tol > tolerance(DType::F32) {
                4
            } else {
                20
            };
            assert!(
                bad * allowed <= x.len().max(1),
                "output {k}: {bad} of {} elements differ\n{g}",
                x.len()
            );
            continue;
        }
        let tol = tolerance(b.dtype).max(graph_tol);
        let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
        // Values are compared relative to the output's scale (reductions of
        // cancelling terms have absolute, not relative, error).
        let scale = y
            .iter()
            .filter(|v| v.is_finite())
            .fold(1.0f64, |m, v| m.max(v.abs()));
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let ok = p == q
                || (p.is_nan() && q.is_nan())
                || (p - q).abs() <= tol * (q.abs() + scale)
                || (tol > 0.0 && (p - q).abs() <= tol * 1e-3);
            assert!(
                ok,
                "output {k} element {i}: compiled {p} vs oracle {q} (tol {tol})\n{g}\n{}",
                exe.explain()
            );
        }
    }
}

/// Print compiled and oracle outputs (for replaying a failing seed).
pub fn print_both(g: &Graph, args: &[TensorData]) {
    let names: Vec<String> = arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    let all = interp::run_all(g, &named);
    if let Ok(all) = all {
        for (i, v) in all.iter().enumerate() {
            if let Some(v) = v {
                eprintln!("oracle %{i}: {:?}", &v.to_f64_vec()[..v.numel().min(12)]);
            }
        }
    }
    let exe = CpuBackend.compile(Device::Cpu, g).unwrap();
    eprintln!("{}", exe.explain());
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    match exe.run(&views) {
        Ok(outs) => {
            for o in outs {
                eprintln!("compiled: {:?}", &o.to_f64_vec()[..o.numel().min(80)]);
            }
        }
        Err(e) => eprintln!("compiled error: {e}"),
    }
}

/// A random attention graph: layouts `[B, S, H, D]`/`[B, S, H·D]`, grouped-query heads,
/// every mask kind, optional scale and softcap, sometimes a transposed (strided) q.
pub fn build_attention_graph(rng: &mut Rng) -> (Graph, Vec<TensorData>) {
    use rlx_ir::MaskKind;
    let mut g = Graph::new("attention");
    let mut args = Vec::new();
    let (b, sq, sk) = (1 + rng.below(2), 1 + rng.below(70), 1 + rng.below(70));
    let hk = 1 + rng.below(2);
    let h = hk * (1 + rng.below(2));
    let d = [1, 3, 8, 16][rng.below(4)];
    let dv = if rng.chance(0.3) { 5 } else { d };
    let four = rng.chance(0.5);
    let mut input = |g: &mut Graph, rng: &mut Rng, name: &str, dims: &[usize]| {
        let s = Shape::new(dims, DType::F32);
        args.push(random_data(rng, &s));
        g.input(name, s)
    };
    let shape = |s: usize, hh: usize, dd: usize| {
        if four {
            vec![b, s, hh, dd]
        } else {
            vec![b, s, hh * dd]
        }
    };
    let q = if four && rng.chance(0.3) {
        // q given as [B, H, S, D] and transposed: a strided view.
        let t = input(&mut g, rng, "q", &[b, h, sq, d]);
        g.add_op(
            Op::Transpose {
                perm: vec![0, 2, 1, 3],
            },
            vec![t],
        )
        .unwrap()
    } else {
        input(&mut g, rng, "q", &shape(sq, h, d))
    };
    let k = input(&mut g, rng, "k", &shape(sk, hk, d));
    let v = input(&mut g, rng, "v", &shape(sk, hk, dv));
    let window = rng.below(9);
    let mask = [
        MaskKind::None,
        MaskKind::Causal,
        MaskKind::SlidingWindow(window),
        MaskKind::Custom,
        MaskKind::Bias,
    ][rng.below(5)];
    let mut ins = vec![q, k, v];
    match mask {
        MaskKind::Custom => ins.push(input(&mut g, rng, "mask", &[b, sk])),
        MaskKind::Bias => {
            let from = rng.below(2);
            ins.push(input(&mut g, rng, "bias", &[h, sq, sk][from..]))
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

/// A random f32 convolution: 1 or 2 spatial axes, groups, stride, padding, dilation,
/// optional bias, sometimes followed by an activation.
pub fn build_conv_graph(rng: &mut Rng) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("conv");
    let mut args = Vec::new();
    let sr = 1 + rng.below(2);
    let groups = 1 + rng.below(2);
    let (n, cin, cout) = (
        1 + rng.below(2),
        groups * (1 + rng.below(3)),
        groups * (1 + rng.below(3)),
    );
    let k: Vec<usize> = (0..sr).map(|_| 1 + rng.below(3)).collect();
    let stride: Vec<usize> = (0..sr).map(|_| 1 + rng.below(2)).collect();
    let padding: Vec<usize> = (0..sr).map(|_| rng.below(2)).collect();
    let dilation: Vec<usize> = (0..sr).map(|_| 1 + rng.below(2)).collect();
    let sp: Vec<usize> = (0..sr).map(|_| 4 + rng.below(6)).collect();
    let mut xd = vec![n, cin];
    xd.extend(&sp);
    let mut wd = vec![cout, cin / groups];
    wd.extend(&k);
    let mut input = |g: &mut Graph, rng: &mut Rng, name: &str, dims: &[usize]| {
        let s = Shape::new(dims, DType::F32);
        args.push(random_data(rng, &s));
        g.input(name, s)
    };
    let x = input(&mut g, rng, "x", &xd);
    let w = input(&mut g, rng, "w", &wd);
    let mut ins = vec![x, w];
    if rng.chance(0.5) {
        ins.push(input(&mut g, rng, "b", &[cout]));
    }
    let op = Op::Conv {
        kernel_size: k,
        stride,
        padding,
        dilation,
        groups,
    };
    let Ok(y) = g.add_op(op, ins) else {
        let y = g.add_op(Op::Activation(Activation::Relu), vec![x]).unwrap();
        g.set_outputs(vec![y]);
        return (g, args);
    };
    let out = if rng.chance(0.5) {
        g.add_op(Op::Activation(Activation::Relu), vec![y]).unwrap()
    } else {
        y
    };
    g.set_outputs(vec![out]);
    (g, args)
}
