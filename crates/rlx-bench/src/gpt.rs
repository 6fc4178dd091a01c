//! W11's model: a small GPT (decoder-only transformer) written against the public
//! `rlx_tensor` API the way a user would write it, parameterized by its sizes so that other
//! benches, examples and tests can reuse it.
//!
//! The model is the one in `shared/bench/transformer.py`: token embedding + learned
//! positions, `layers` pre-LayerNorm blocks (one fused qkv projection split with `narrow`,
//! causal multi-head attention through [`Tensor::attention`] with [`MaskKind::Causal`], an
//! output projection, an MLP of width 4d with exact (erf) GELU), a final LayerNorm, the lm
//! head tied to the token embedding, and the mean softmax cross-entropy of integer labels.
//!
//! Weights are stored `[in, out]` and applied as `x · W` (the layout of the JAX peer in
//! `transformer.py`; PyTorch's `nn.Linear` stores `[out, in]` and computes `x · Wᵀ`, the
//! same function). The tied head is `h · wteᵀ` ([`Tensor::matmul_t`]).

use rlx_tensor::{DType, Func, GraphScope, MaskKind, Shape, Tensor};

/// The sizes of one GPT and its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GptConfig {
    /// Vocabulary size (also the lm head's width).
    pub vocab: usize,
    /// Number of transformer blocks.
    pub layers: usize,
    /// Model width `d`.
    pub d_model: usize,
    /// Attention heads (`d_model` must be a multiple).
    pub heads: usize,
    /// Sequence length `T` (also the number of learned positions).
    pub seq: usize,
    /// Sequences per batch `B`.
    pub batch: usize,
}

/// LayerNorm epsilon of every norm in the model (PyTorch's default).
pub const LN_EPS: f32 = 1e-5;
/// Standard deviation of the N(0, σ²) init of every 2-D weight.
pub const INIT_STD: f32 = 0.02;

impl GptConfig {
    /// W11's model with `layers` blocks: vocab 512, d = 256, 8 heads of 32, B = 8, T = 128.
    pub fn w11(layers: usize) -> GptConfig {
        GptConfig {
            vocab: 512,
            layers,
            d_model: 256,
            heads: 8,
            seq: 128,
            batch: 8,
        }
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }

    /// Tokens per batch (`B·T`, the rows of every activation matrix).
    pub fn tokens(&self) -> usize {
        self.batch * self.seq
    }

    /// Every param as `(name, dims)`, in the order the model declares them.
    pub fn param_shapes(&self) -> Vec<(String, Vec<usize>)> {
        let (d, v, t) = (self.d_model, self.vocab, self.seq);
        let mut p = vec![("wte".to_string(), vec![v, d]), ("wpe".into(), vec![t, d])];
        for l in 0..self.layers {
            for (n, dims) in [
                ("ln1.g", vec![d]),
                ("ln1.b", vec![d]),
                ("qkv.w", vec![d, 3 * d]),
                ("qkv.b", vec![3 * d]),
                ("proj.w", vec![d, d]),
                ("proj.b", vec![d]),
                ("ln2.g", vec![d]),
                ("ln2.b", vec![d]),
                ("fc.w", vec![d, 4 * d]),
                ("fc.b", vec![4 * d]),
                ("fc2.w", vec![4 * d, d]),
                ("fc2.b", vec![d]),
            ] {
                p.push((format!("h{l}.{n}"), dims));
            }
        }
        p.push(("lnf.g".into(), vec![d]));
        p.push(("lnf.b".into(), vec![d]));
        p
    }

    /// Number of trained values.
    pub fn param_count(&self) -> usize {
        self.param_shapes()
            .iter()
            .map(|(_, d)| d.iter().product::<usize>())
            .sum()
    }

    /// Matmul flops of one forward pass (2 per multiply-add): the four projections of every
    /// block, the tied head, and attention's two products counting only the causal half
    /// (`q·kᵀ` and `p·v` over the `T(T+1)/2` visible pairs).
    pub fn forward_flops(&self) -> f64 {
        let (n, d) = (self.tokens() as f64, self.d_model as f64);
        let per_block_proj = 2.0 * n * (3.0 * d * d + d * d + 4.0 * d * d + 4.0 * d * d);
        let t = self.seq as f64;
        let pairs = self.batch as f64 * t * (t + 1.0) / 2.0;
        let per_block_att = 2.0 * 2.0 * pairs * d; // all heads: H · head_dim = d
        let head = 2.0 * n * d * self.vocab as f64;
        self.layers as f64 * (per_block_proj + per_block_att) + head
    }

    /// Matmul flops of one training step: forward + backward (twice the forward's products:
    /// the gradients of both operands), the usual 3× the forward.
    pub fn step_flops(&self) -> f64 {
        3.0 * self.forward_flops()
    }
}

fn f32s(dims: &[usize]) -> Shape {
    Shape::new(dims, DType::F32)
}

/// How the activations are shaped between the ops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[B, T, d]` throughout, as `transformer.py` writes it (a projection is a batched
    /// `[B, T, d] · [d, n]` matmul).
    Batched,
    /// `[B·T, d]` matrices, reshaped to `[B, T, d]` only around attention (every projection
    /// is one 2-D matmul). The same function; a comparison of how rlx handles the two.
    Flat,
}

/// The arithmetic of the matmuls.
///
/// Mixed precision is asked for the way a JAX user writes it, with explicit casts: a
/// product in bf16 is `x.cast(DType::BF16).matmul(&w.cast(DType::BF16))`, its result cast
/// back to f32 (see [`Precision::matmul`]). Params, optimizer state, LayerNorm,
/// attention, softmax and the cross-entropy stay f32 — what `torch.autocast("cpu",
/// dtype=torch.bfloat16)` does for these ops, except that it also runs attention in bf16.
/// Gradients flow through the casts: the backward's products are bf16 products too, and
/// the f32 master weights receive f32 gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    /// Every op in f32.
    F32,
    /// Every matmul (projections, MLP, the tied head) on bf16 operands with f32
    /// accumulation, rounded to bf16, then widened back to f32.
    Bf16Matmuls,
}

impl Precision {
    /// `x · w` in this precision (an f32 result either way).
    pub fn matmul(self, x: &Tensor, w: &Tensor) -> Tensor {
        match self {
            Precision::F32 => x.matmul(w),
            Precision::Bf16Matmuls => x
                .cast(DType::BF16)
                .matmul(&w.cast(DType::BF16))
                .cast(DType::F32),
        }
    }

    /// `x · wᵀ` in this precision (an f32 result either way).
    pub fn matmul_t(self, x: &Tensor, w: &Tensor) -> Tensor {
        match self {
            Precision::F32 => x.matmul_t(w),
            Precision::Bf16Matmuls => x
                .cast(DType::BF16)
                .matmul_t(&w.cast(DType::BF16))
                .cast(DType::F32),
        }
    }
}

/// One pre-LN block on the residual stream `x` (`[B, T, d]`, or `[B·T, d]` for
/// [`Layout::Flat`]); params named `h{l}.*`.
fn block(
    s: &mut GraphScope,
    c: &GptConfig,
    (layout, prec): (Layout, Precision),
    l: usize,
    x: &Tensor,
) -> Tensor {
    let d = c.d_model;
    let mut p = |n: &str, dims: &[usize]| s.param(format!("h{l}.{n}"), f32s(dims));
    let (ln1_g, ln1_b) = (p("ln1.g", &[d]), p("ln1.b", &[d]));
    let (qkv_w, qkv_b) = (p("qkv.w", &[d, 3 * d]), p("qkv.b", &[3 * d]));
    let (proj_w, proj_b) = (p("proj.w", &[d, d]), p("proj.b", &[d]));
    let (ln2_g, ln2_b) = (p("ln2.g", &[d]), p("ln2.b", &[d]));
    let (fc_w, fc_b) = (p("fc.w", &[d, 4 * d]), p("fc.b", &[4 * d]));
    let (fc2_w, fc2_b) = (p("fc2.w", &[4 * d, d]), p("fc2.b", &[d]));

    let h = x.layer_norm(&ln1_g, &ln1_b, LN_EPS);
    let qkv = &prec.matmul(&h, &qkv_w) + &qkv_b; // [B, T, 3d] (or [B·T, 3d])
    let ax = qkv.dims().len() - 1;
    let (q, k, v) = (
        qkv.narrow(ax, 0, d),
        qkv.narrow(ax, d, d),
        qkv.narrow(ax, 2 * d, d),
    );
    // [B, T, H·hd] is one of attention's layouts: no transpose needed.
    let y = match layout {
        Layout::Batched => q.attention(&k, &v, c.heads, c.head_dim(), MaskKind::Causal),
        Layout::Flat => {
            let bt = |t: &Tensor| t.reshape([c.batch as i64, c.seq as i64, d as i64]);
            bt(&q)
                .attention(&bt(&k), &bt(&v), c.heads, c.head_dim(), MaskKind::Causal)
                .reshape([c.tokens() as i64, d as i64])
        }
    };
    let x = x + &(&prec.matmul(&y, &proj_w) + &proj_b);
    let h = x.layer_norm(&ln2_g, &ln2_b, LN_EPS);
    let h = (&prec.matmul(&h, &fc_w) + &fc_b).gelu();
    &x + &(&prec.matmul(&h, &fc2_w) + &fc2_b)
}

/// The GPT's mean cross-entropy as a [`Func`] (params unbound; see [`init_params`]), with
/// `[B, T, d]` activations as `transformer.py` writes it ([`Layout::Batched`]).
///
/// Inputs: `idx: [B, T]` token ids and `tgt: [B·T]` next-token labels, both declared
/// `I32` (the `f32` slices given to `run`/`train_step` are converted to integers; they
/// must hold whole numbers in `0..vocab`). Output: the scalar loss.
pub fn loss_func(c: &GptConfig) -> Func {
    loss_func_with(c, Layout::Batched)
}

/// [`loss_func`] with the activations shaped by `layout` (the same function either way).
pub fn loss_func_with(c: &GptConfig, layout: Layout) -> Func {
    loss_func_in(c, layout, Precision::F32)
}

/// [`loss_func_with`] with the matmuls in precision `prec` (the same params; see
/// [`Precision`]).
pub fn loss_func_in(c: &GptConfig, layout: Layout, prec: Precision) -> Func {
    assert!(
        c.d_model.is_multiple_of(c.heads),
        "GPT config: d_model {} is not a multiple of heads {}",
        c.d_model,
        c.heads
    );
    let c = *c;
    let name = match layout {
        Layout::Batched => format!("gpt_l{}", c.layers),
        Layout::Flat => format!("gpt_l{}_2d", c.layers),
    };
    let name = match prec {
        Precision::F32 => name,
        Precision::Bf16Matmuls => format!("{name}_bf16"),
    };
    Func::new(name, move |s| {
        let (b, t, d, v) = (c.batch, c.seq, c.d_model, c.vocab);
        let idx = s.input("idx", Shape::new(&[b, t], DType::I32));
        let tgt = s.input("tgt", Shape::new(&[b * t], DType::I32));
        let wte = s.param("wte", f32s(&[v, d]));
        let wpe = s.param("wpe", f32s(&[t, d]));
        let mut x = &wte.gather(&idx, 0) + &wpe; // [B, T, d] + [T, d]
        if layout == Layout::Flat {
            x = x.reshape([(b * t) as i64, d as i64]);
        }
        for l in 0..c.layers {
            x = block(s, &c, (layout, prec), l, &x);
        }
        let lnf_g = s.param("lnf.g", f32s(&[d]));
        let lnf_b = s.param("lnf.b", f32s(&[d]));
        let h = x
            .layer_norm(&lnf_g, &lnf_b, LN_EPS)
            .reshape([(b * t) as i64, d as i64]);
        prec.matmul_t(&h, &wte)
            .softmax_cross_entropy_with_logits(&tgt)
            .mean_all()
    })
}

/// Whether param `name` is a LayerNorm gain (initialized to ones).
fn is_ln_gain(name: &str) -> bool {
    name.ends_with(".g")
}

/// Binds `transformer.py`'s init: N(0, 0.02²) for every 2-D weight (embeddings and
/// matrices), zeros for biases, ones for LayerNorm gains; deterministic in `seed` (the
/// numbers differ from PyTorch's, the distributions are the same).
pub fn init_params(f: Func, seed: u64) -> Func {
    let mut rng = crate::inputs::Normal::new(seed);
    f.init_params(|name, dims| {
        let n: usize = dims.iter().product();
        if dims.len() >= 2 {
            rng.vec(n, INIT_STD)
        } else if is_ln_gain(name) {
            vec![1.0; n]
        } else {
            vec![0.0; n]
        }
    })
}

/// The model of `c`, initialized (see [`init_params`]).
pub fn model(c: &GptConfig, seed: u64) -> Func {
    init_params(loss_func(c), seed)
}

/// [`model`] with the activations shaped by `layout` (same params, same init for a seed).
pub fn model_with(c: &GptConfig, layout: Layout, seed: u64) -> Func {
    init_params(loss_func_with(c, layout), seed)
}

/// [`model_with`] with the matmuls in precision `prec` (same params, same init for a
/// seed).
pub fn model_in(c: &GptConfig, layout: Layout, prec: Precision, seed: u64) -> Func {
    init_params(loss_func_in(c, layout, prec), seed)
}

/// `transformer.py`'s data: a fixed random token stream of 2¹⁶ tokens; each batch takes
/// `B` windows of `T + 1` tokens at random offsets (inputs = the first `T`, labels = the
/// last `T`). The same semantics as the peers', not the same numbers (another generator).
pub struct TokenStream {
    stream: Vec<u32>,
    rng: u64,
    c: GptConfig,
}

impl TokenStream {
    /// The stream for `c` from `seed`.
    pub fn new(c: &GptConfig, seed: u64) -> TokenStream {
        let mut ts = TokenStream {
            stream: Vec::new(),
            rng: seed ^ 0xD1B5_4A32_D192_ED03,
            c: *c,
        };
        ts.stream = (0..1 << 16)
            .map(|_| ts.below(c.vocab as u64) as u32)
            .collect();
        ts
    }

    /// A uniform integer in `0..n` (SplitMix64; the modulo bias is < 2⁻⁴⁸ for these n).
    fn below(&mut self, n: u64) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }

    /// The next batch: `(idx [B·T], tgt [B·T])` as f32-encoded token ids.
    pub fn next_batch(&mut self) -> (Vec<f32>, Vec<f32>) {
        let (b, t) = (self.c.batch, self.c.seq);
        let mut idx = Vec::with_capacity(b * t);
        let mut tgt = Vec::with_capacity(b * t);
        for _ in 0..b {
            let i = self.below((self.stream.len() - t - 1) as u64) as usize;
            idx.extend(self.stream[i..i + t].iter().map(|&v| v as f32));
            tgt.extend(self.stream[i + 1..i + t + 1].iter().map(|&v| v as f32));
        }
        (idx, tgt)
    }
}

/// W11's optimizer: AdamW(lr 3e-4, betas (0.9, 0.95), eps 1e-8) in PyTorch's arithmetic,
/// weight decay 0.1 on the 2-D weights (embeddings and matrices) and none on the biases and
/// LayerNorm gains (a `no_decay` parameter group of every param of rank < 2), as
/// `transformer.py` groups them.
#[cfg(feature = "train")]
pub fn adamw() -> rlx_tensor::AdamW {
    rlx_tensor::AdamW::torch(3e-4, (0.9, 0.95), 0.1).with_group(
        rlx_tensor::ParamGroup::new("no_decay", |_name: &str, shape: &[usize]| shape.len() < 2)
            .weight_decay(0.0),
    )
}

/// What a [`train`] run measured.
#[cfg(feature = "train")]
#[derive(Debug, Clone)]
pub struct TrainRun {
    /// Seconds per step, every step in order (the first includes compilation).
    pub step_s: Vec<f64>,
    /// Loss per step, in order.
    pub losses: Vec<f32>,
    /// The model after the last step.
    pub model: Func,
}

/// `steps` training steps of `model` through [`Func::train_step_all`] with `opt`, one new
/// batch from `data` per step (batch preparation is not timed, as in `transformer.py`).
#[cfg(feature = "train")]
pub fn train(
    model: Func,
    opt: &mut dyn rlx_tensor::Optimizer,
    data: &mut TokenStream,
    steps: usize,
) -> TrainRun {
    let mut f = model;
    let mut step_s = Vec::with_capacity(steps);
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let (idx, tgt) = data.next_batch();
        let t0 = std::time::Instant::now();
        let (nf, loss) = f.train_step_all(opt, &[("idx", &idx), ("tgt", &tgt)]);
        step_s.push(t0.elapsed().as_secs_f64());
        losses.push(loss[0]);
        f = nf;
    }
    TrainRun {
        step_s,
        losses,
        model: f,
    }
}

#[cfg(test)]
mod tests;
