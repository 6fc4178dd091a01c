//! Case tables that several backends' suites run: argmax/argmin over tie-heavy data,
//! the f16/bf16 attention graphs (forward and backward) of the tensor-core and
//! attention-backward tests, and the block-scaled matmul graph and its sums that round
//! at f64 ties.
//! Each suite keeps how it compiles and runs a case; the data and graphs are built here
//! once, so the backends are checked on the same cases.

use crate::op;
use crate::rng::{Rng, random_data};
use rlx_ir::{
    BinaryOp, DType, Graph, MaskKind, Op, ReduceOp, ScaleLayout, ScaledFormat, Shape, TensorData,
};

/// One argmax or argmin graph (input `x`, one output) and the data of `x`.
pub struct ArgCase {
    pub graph: Graph,
    pub x: TensorData,
}

/// Argmax and argmin for each dtype of `dtypes` over tie-heavy values: NaN, ±0, ±∞ and
/// repeats for floats, small integers (negative ones included) for integer dtypes. The
/// shapes give short rows (a thread per output), long rows and columns (a block or
/// workgroup tree per output), a length-1 axis, and kept and dropped axes. The graph's
/// name says the op, dtype, dims and axis. Data replays from `seed`.
pub fn argmax_cases(dtypes: &[DType], seed: u64) -> Vec<ArgCase> {
    let pool = [
        0.0,
        -0.0,
        2.5,
        -1.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let mut rng = Rng::new(seed);
    let mut cases = Vec::new();
    for &dt in dtypes {
        for (dims, axis) in [
            (vec![6, 9], 1),
            (vec![9, 6], 0),
            (vec![3, 1], 1),
            (vec![4, 2000], 1),
            (vec![700, 3], 0),
        ] {
            for (max, keep_dim) in [(true, false), (false, true)] {
                let (o, name) = if max {
                    (Op::ArgMax { axis, keep_dim }, "argmax")
                } else {
                    (Op::ArgMin { axis, keep_dim }, "argmin")
                };
                let mut g = Graph::new(format!("{name}_{dt}_{dims:?}_axis{axis}"));
                let x = g.input("x", Shape::new(&dims, dt));
                let r = op(&mut g, o, vec![x]);
                g.set_outputs(vec![r]);
                let n: usize = dims.iter().product();
                let v: Vec<f64> = (0..n)
                    .map(|_| {
                        let k = rng.below(pool.len());
                        if dt.is_int() { k as f64 - 3.0 } else { pool[k] }
                    })
                    .collect();
                let x = TensorData::from_f64_as(dt, &dims, &v);
                cases.push(ArgCase { graph: g, x });
            }
        }
    }
    cases
}

/// Attention over `[2, s, h, d]` (`four`) or `[2, s, h·d]` operands of `dt` with `hk` kv
/// heads and `mask` (no softcap), as the whole graph (inputs q, k, v); and random q, k, v
/// in ±2.
pub fn attention_case(
    dt: DType,
    mask: MaskKind,
    four: bool,
    (h, hk): (usize, usize),
    s: usize,
    d: usize,
) -> (Graph, Vec<TensorData>) {
    let dims = |heads: usize| {
        if four {
            vec![2, s, heads, d]
        } else {
            vec![2, s, heads * d]
        }
    };
    let mut g = Graph::new(format!("attn_{dt}_{mask:?}_{s}_{d}").replace(['(', ')'], "_"));
    let mut rng = Rng::new((s * 131 + d) as u64);
    let mut ins = Vec::new();
    let mut args = Vec::new();
    for (name, heads) in [("q", h), ("k", hk), ("v", hk)] {
        let shape = Shape::new(&dims(heads), dt);
        args.push(random_data(&mut rng, &shape));
        ins.push(g.input(name, shape));
    }
    let a = op(
        &mut g,
        Op::Attention {
            num_heads: h,
            head_dim: d,
            v_head_dim: None,
            mask_kind: mask,
            score_scale: None,
            attn_logit_softcap: None,
        },
        ins,
    );
    g.set_outputs(vec![a]);
    (g, args)
}

/// The f16/bf16 attention backward cases the GPU suites run, as `(mask, (heads, kv
/// heads), s, d)` for [`attention_backward_case`]: causal with grouped-query and with
/// equal heads, and a sliding window.
pub const ATTENTION_BACKWARD_CASES: [(MaskKind, (usize, usize), usize, usize); 3] = [
    (MaskKind::Causal, (2, 1), 21, 32),
    (MaskKind::Causal, (2, 2), 40, 64),
    (MaskKind::SlidingWindow(5), (2, 1), 17, 16),
];

/// `sum(attention(q, k, v) · w)` over `[2, s, h, d]` operands of `dt` (the graph of
/// [`attention_case`]), differentiated for q, k and v: the gradient graph and its
/// arguments (q, k, v, w; w the output's cotangent, random in ±2). Panics unless
/// reverse mode gives the fused `Op::AttentionVjp`, the op these cases test.
pub fn attention_backward_case(
    dt: DType,
    mask: MaskKind,
    heads: (usize, usize),
    s: usize,
    d: usize,
) -> (Graph, Vec<TensorData>) {
    let (mut g, mut args) = attention_case(dt, mask, true, heads, s, d);
    let a = g.outputs[0];
    let shape = Shape::new(&[2, s, heads.0, d], dt);
    let mut rng = Rng::new((s * 7 + d) as u64);
    args.push(random_data(&mut rng, &shape));
    let w = g.input("w", shape);
    let aw = op(&mut g, Op::Binary(BinaryOp::Mul), vec![a, w]);
    let all = Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![0, 1, 2, 3],
        keep_dim: false,
    };
    let loss = op(&mut g, all, vec![aw]);
    g.set_outputs(vec![loss]);
    let wrt: Vec<_> = ["q", "k", "v"]
        .iter()
        .map(|n| g.input_id(n).unwrap())
        .collect();
    let mut gg = rlx_compile::autodiff::grad_graph(&g, &wrt).unwrap();
    gg.name = format!("{}_grad", g.name);
    assert!(
        gg.nodes()
            .iter()
            .any(|n| matches!(n.op, Op::AttentionVjp { .. })),
        "{}: reverse mode gives the fused attention backward",
        gg.name
    );
    (gg, args)
}

/// `y = a · bᵀ (+ bias)` over raw `[m, k]` / `[n, k]` u8 codes of `fs` (inputs `a`, `b`)
/// with their scales `sa`, `sb` as layout `l` holds them (u8 codes `[rows, k / block]`
/// for block layouts, one f32 per tensor otherwise), plus a `[n]` input `bias` of dtype
/// `bias` when one is given. The graph's name says the formats and the layout.
pub fn scaled_matmul_graph(
    fs: [ScaledFormat; 2],
    l: ScaleLayout,
    (m, n, k): (usize, usize, usize),
    bias: Option<DType>,
) -> Graph {
    let sdims = |r: usize| match l.block() {
        None => Shape::new(&[1], DType::F32),
        Some(b) => Shape::new(&[r, k / b as usize], DType::U8),
    };
    let mut g = Graph::new(format!("scaled_matmul_{}_{}_{l}", fs[0], fs[1]).replace(' ', "_"));
    let mut ins = vec![
        g.input("a", Shape::new(&[m, k], DType::U8)),
        g.input("b", Shape::new(&[n, k], DType::U8)),
        g.input("sa", sdims(m)),
        g.input("sb", sdims(n)),
    ];
    if let Some(dt) = bias {
        ins.push(g.input("bias", Shape::new(&[n], dt)));
    }
    let y = op(
        &mut g,
        Op::ScaledMatMul {
            lhs_format: fs[0],
            rhs_format: fs[1],
            scale_layout: l,
            has_bias: bias.is_some(),
        },
        ins,
    );
    g.set_outputs(vec![y]);
    g
}

/// Block-scaled matmul data whose f64 sums round at ties: row `r` of `a · bᵀ` is the
/// ordered sum `1 ± 2^a ± 2^b ± 2^c` with `a, b, c` around the f32 rounding bit
/// (`−23..−25`), the f64 rounding bit (`−52..−55`) and far below (`−77`), one term per
/// MX block (2^e as the block's scale, the block's other element zero; `b` is all ones
/// under scale 1). The f64 partial sums round at ties (to even, both ways), just off
/// ties and across binades, and the final f32 rounding sees the f64 value (double
/// rounding), so a wrong 53-bit rounding changes the f32 result.
pub struct ScaledTieCase {
    /// E4M3 codes for both operands.
    pub format: ScaledFormat,
    /// MX blocks of two elements.
    pub layout: ScaleLayout,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Codes `[m, k]`, `[n, k]` and block scale codes `[m, k / 2]`, `[n, k / 2]`.
    pub a: Vec<i64>,
    pub b: Vec<i64>,
    pub sa: Vec<i64>,
    pub sb: Vec<i64>,
    /// The signed exponents of the terms, in the order the rows enumerate them.
    terms: Vec<(i64, bool)>,
}

impl ScaledTieCase {
    /// The cases: every ordered choice of three terms, one row each.
    pub fn new() -> ScaledTieCase {
        let format = ScaledFormat::F8E4M3;
        let exps = [0i64, -23, -24, -25, -52, -53, -54, -55, -77];
        let terms: Vec<(i64, bool)> = exps.iter().flat_map(|&e| [(e, false), (e, true)]).collect();
        let (one, minus) = (format.encode(1.0) as i64, format.encode(-1.0) as i64);
        let (mut a, mut sa) = (vec![], vec![]);
        for &t1 in &terms {
            for &t2 in &terms {
                for &t3 in &terms {
                    for (e, neg) in [(0, false), t1, t2, t3] {
                        a.extend([if neg { minus } else { one }, 0]);
                        sa.push(127 + e);
                    }
                }
            }
        }
        let (n, k) = (1, 8);
        ScaledTieCase {
            format,
            layout: ScaleLayout::BlockMxE8M0 { block: 2 },
            m: a.len() / k,
            n,
            k,
            a,
            b: vec![one; n * k],
            sa,
            sb: vec![127; n * k / 2],
            terms,
        }
    }

    /// The arguments `a`, `b`, `sa`, `sb` as u8 tensors, then a zero f32 bias `[n]`.
    pub fn args(&self) -> Vec<TensorData> {
        let u8s = |d: &[usize], v: &[i64]| TensorData::from_i64_as(DType::U8, d, v);
        let (m, n, k) = (self.m, self.n, self.k);
        vec![
            u8s(&[m, k], &self.a),
            u8s(&[n, k], &self.b),
            u8s(&[m, k / 2], &self.sa),
            u8s(&[n, k / 2], &self.sb),
            TensorData::from_f32(&[n], &vec![0.0; n]),
        ]
    }

    /// The row holding `1 + t[0] + t[1] + t[2]` (each term `(exponent, negative)`).
    pub fn row(&self, t: [(i64, bool); 3]) -> usize {
        let at = |x: (i64, bool)| self.terms.iter().position(|&y| y == x).unwrap();
        let n = self.terms.len();
        (at(t[0]) * n + at(t[1])) * n + at(t[2])
    }

    /// Rows whose results are known by hand, as `(row, f32 result)`: in 1 + 2^−24 + 2^−53
    /// (+ 2^−77) the f64 tie rounds to even (down), leaving an f32 tie that rounds to
    /// even: 1, where the exact sum would round up to 1 + 2^−23; in 1 + 2^−24 + 2^−52 +
    /// 2^−53 the f64 tie rounds to even upward (to 1 + 2^−24 + 2^−51), just above the f32
    /// tie: 1 + 2^−23.
    pub fn known_rows(&self) -> [(usize, f32); 2] {
        [
            (self.row([(-24, false), (-53, false), (-77, false)]), 1.0),
            (
                self.row([(-24, false), (-52, false), (-53, false)]),
                1.0 + 2f32.powi(-23),
            ),
        ]
    }
}

impl Default for ScaledTieCase {
    fn default() -> ScaledTieCase {
        ScaledTieCase::new()
    }
}
