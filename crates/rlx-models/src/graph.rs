//! The step graphs of a causal LM, written on the public `rlx_tensor` API: one for the
//! prompt (prefill) and one for each generated token (decode), both with the sequence
//! axis of the KV cache as a dynamic dim so that each compiles once.
//!
//! Param names are the checkpoint's own (`model.layers.0.self_attn.q_proj.weight`, or
//! GPT-2's `h.0.attn.c_attn.weight` without the `transformer.` prefix), so binding a
//! checkpoint is a by-name lookup.
//!
//! Inputs (all f32 or i32 host data; the graph casts to the model dtype, as
//! `transformers` casts cos/sin to the activations' dtype):
//! - `ids` `[1, S]` (i32): the new tokens (`S` dynamic in prefill, 1 in decode);
//! - Llama: `rope_cos`, `rope_sin` `[S, head_dim/2]`: the rotations of the new positions;
//!   GPT-2: `pos` `[1, S]` (i32): their positions;
//! - prefill: `last` `[1]` (i32): the position whose logits are returned (`S − 1`);
//! - decode: `cache.k.{l}`, `cache.v.{l}` `[1, T, kv_heads·head_dim]` (`T` dynamic): the
//!   cache with one zero row appended for the new token, and `slot` `[T]`, one-hot at that
//!   row; with a sliding window also `key_mask` `[1, T]` (1 attends, 0 does not).
//!
//! Outputs: the logits `[1, vocab]` (f32), then `k`, `v` of every layer for the new
//! tokens, `[1, S, kv_heads·head_dim]` (f32, after rotary embedding).

use crate::config::{Arch, Config};
use rlx_tensor::{DType, Dim, Func, GraphScope, MaskKind, Shape, Tensor};

/// Which step graph to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The prompt: `S` new tokens, no cache (causal attention among them).
    Prefill,
    /// One new token attending the whole cache.
    Decode,
}

/// The symbol of the new-token axis in prefill.
const SEQ: Dim = Dim::Dynamic(0);
/// The symbol of the cache length in decode.
const CACHE: Dim = Dim::Dynamic(1);

/// Names of the inputs and params the graphs declare.
pub(crate) mod names {
    /// Cache input of layer `l` (`"k"` or `"v"`).
    pub(crate) fn cache(kind: &str, l: usize) -> String {
        format!("cache.{kind}.{l}")
    }
}

fn shape(dims: &[Dim], dtype: DType) -> Shape {
    Shape::from_dims(dims, dtype)
}

fn st(n: usize) -> Dim {
    Dim::Static(n)
}

/// `x · wᵀ (+ b)` for an `nn.Linear` weight `[out, in]`.
fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Tensor {
    match b {
        Some(b) => x.linear(w, b),
        None => x.matmul_t(w),
    }
}

/// The step's inputs that do not depend on the architecture.
struct Common {
    ids: Tensor,
    seq: Dim,
    /// Prefill: the index of the position whose logits are returned.
    last: Option<Tensor>,
    /// Decode: the one-hot row of the new token, `[1, T, 1]` (f32, like the cache).
    slot: Option<Tensor>,
    /// Decode with a sliding window: the key mask `[1, T]`.
    key_mask: Option<Tensor>,
}

fn common(s: &mut GraphScope, c: &Config, step: Step) -> Common {
    let seq = match step {
        Step::Prefill => SEQ,
        Step::Decode => st(1),
    };
    let ids = s.input("ids", shape(&[st(1), seq], DType::I32));
    let (last, slot, key_mask) = match step {
        Step::Prefill => (
            Some(s.input("last", shape(&[st(1)], DType::I32))),
            None,
            None,
        ),
        Step::Decode => {
            let slot = s
                .input("slot", shape(&[CACHE], DType::F32))
                .reshape([1, -1, 1]);
            let mask = c
                .sliding_window
                .map(|_| s.input("key_mask", shape(&[st(1), CACHE], DType::F32)));
            (None, Some(slot), mask)
        }
    };
    Common {
        ids,
        seq,
        last,
        slot,
        key_mask,
    }
}

/// Attention of the new queries `q` over the new keys/values (prefill) or the cache
/// with them written in (decode). Returns the attention output (in `dt`).
///
/// Attention itself runs in f32 whatever `dt` is: casting bf16/f16 to f32 is exact, the
/// scores and softmax accumulate in f32 as `transformers`' CPU attention does for
/// half-precision inputs, and the output is rounded once to `dt`. The cache is kept in
/// f32 (holding `dt`-rounded values), so decode reads it without a cast.
#[allow(clippy::too_many_arguments)]
fn attend(
    s: &mut GraphScope,
    c: &Config,
    dt: DType,
    cm: &Common,
    l: usize,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Tensor {
    let (h, hd) = (c.num_heads, c.head_dim);
    let f32 = |t: &Tensor| {
        if dt == DType::F32 {
            t.clone()
        } else {
            t.cast(DType::F32)
        }
    };
    let (q, k, v) = (f32(q), f32(k), f32(v));
    let out = match &cm.slot {
        None => {
            // HF's window admits keys with q − k < window; rlx's admits q − k ≤ w.
            let mask = match c.sliding_window {
                Some(w) => MaskKind::SlidingWindow(w.saturating_sub(1)),
                None => MaskKind::Causal,
            };
            q.attention(&k, &v, h, hd, mask)
        }
        Some(slot) => {
            let width = c.kv_width();
            let mut cached = |kind: &str, new: &Tensor| {
                let past = s.input(
                    names::cache(kind, l),
                    shape(&[st(1), CACHE, st(width)], DType::F32),
                );
                // The appended row of the cache is zero: adding slot·new writes it in.
                &past + &(slot * new)
            };
            let (kk, vv) = (cached("k", &k), cached("v", &v));
            match &cm.key_mask {
                Some(m) => q.attention_masked(&kk, &vv, m, h, hd),
                None => q.attention(&kk, &vv, h, hd, MaskKind::None),
            }
        }
    };
    if dt == DType::F32 { out } else { out.cast(dt) }
}

/// The logits `[1, vocab]` (f32) from the final hidden states `[1, S, d]`.
fn head(
    s: &mut GraphScope,
    c: &Config,
    cm: &Common,
    x: &Tensor,
    norm: impl FnOnce(&mut GraphScope, &Tensor) -> Tensor,
    lm_head: &Tensor,
) -> Tensor {
    let d = c.hidden_size as i64;
    let x = match &cm.last {
        Some(last) => x.gather(last, 1),
        None => x.clone(),
    }
    .reshape([1, d]);
    norm(s, &x).matmul_t(lm_head).cast(DType::F32)
}

/// RMSNorm of `x` (in `dt`) computed in f32 and rounded once to `dt`, as `transformers`'
/// `LlamaRMSNorm` upcasts half-precision activations (the CPU backend's f32 row kernels
/// are also its fast ones).
fn rms_norm_f32(x: &Tensor, w: &Tensor, zero: &Tensor, eps: f32, dt: DType) -> Tensor {
    if dt == DType::F32 {
        return x.rms_norm(w, zero, eps);
    }
    x.cast(DType::F32)
        .rms_norm(&w.cast(DType::F32), zero, eps)
        .cast(dt)
}

fn llama(s: &mut GraphScope, c: &Config, dt: DType, step: Step) -> Vec<Tensor> {
    let (d, hd, w) = (c.hidden_size, c.head_dim, c.kv_width());
    let p = |s: &mut GraphScope, name: &str, dims: &[usize]| {
        s.param(name.to_string(), Shape::new(dims, dt))
    };
    let cm = common(s, c, step);
    let half = hd / 2;
    let cos = s
        .input("rope_cos", shape(&[cm.seq, st(half)], DType::F32))
        .cast(dt);
    let sin = s
        .input("rope_sin", shape(&[cm.seq, st(half)], DType::F32))
        .cast(dt);
    let zero32 = s.constant(0.0, DType::F32);
    let embed = p(s, "model.embed_tokens.weight", &[c.vocab_size, d]);
    let mut x = embed.gather(&cm.ids, 0); // [1, S, d]
    let mut outs = Vec::new();
    for l in 0..c.num_layers {
        let pre = format!("model.layers.{l}.");
        let lin =
            |s: &mut GraphScope, x: &Tensor, name: &str, out: usize, inp: usize, bias: bool| {
                let wt = p(s, &format!("{pre}{name}.weight"), &[out, inp]);
                let b = bias.then(|| p(s, &format!("{pre}{name}.bias"), &[out]));
                linear(x, &wt, b.as_ref())
            };
        let ln1 = p(s, &format!("{pre}input_layernorm.weight"), &[d]);
        let h = rms_norm_f32(&x, &ln1, &zero32, c.norm_eps, dt);
        let q = lin(s, &h, "self_attn.q_proj", c.num_heads * hd, d, c.qkv_bias);
        let k = lin(s, &h, "self_attn.k_proj", w, d, c.qkv_bias);
        let v = lin(s, &h, "self_attn.v_proj", w, d, c.qkv_bias);
        let q = q.rope(&cos, &sin, hd);
        let k = k.rope(&cos, &sin, hd);
        let a = attend(s, c, dt, &cm, l, &q, &k, &v);
        let o = lin(s, &a, "self_attn.o_proj", d, c.num_heads * hd, c.o_bias);
        x = &x + &o;
        let ln2 = p(s, &format!("{pre}post_attention_layernorm.weight"), &[d]);
        let h = rms_norm_f32(&x, &ln2, &zero32, c.norm_eps, dt);
        let (f, mb) = (c.intermediate_size, c.mlp_bias);
        let gate = lin(s, &h, "mlp.gate_proj", f, d, mb).silu();
        let up = lin(s, &h, "mlp.up_proj", f, d, mb);
        let m = lin(s, &(&gate * &up), "mlp.down_proj", d, f, mb);
        x = &x + &m;
        outs.push(k.cast(DType::F32));
        outs.push(v.cast(DType::F32));
    }
    let lm_head = if c.tie_word_embeddings {
        embed
    } else {
        p(s, "lm_head.weight", &[c.vocab_size, d])
    };
    let norm_w = p(s, "model.norm.weight", &[d]);
    let eps = c.norm_eps;
    let logits = head(
        s,
        c,
        &cm,
        &x,
        |_, x| rms_norm_f32(x, &norm_w, &zero32, eps, dt),
        &lm_head,
    );
    outs.insert(0, logits);
    outs
}

fn gpt2(s: &mut GraphScope, c: &Config, dt: DType, step: Step) -> Vec<Tensor> {
    let (d, f) = (c.hidden_size, c.intermediate_size);
    let p = |s: &mut GraphScope, name: &str, dims: &[usize]| {
        s.param(name.to_string(), Shape::new(dims, dt))
    };
    let cm = common(s, c, step);
    let pos = s.input("pos", shape(&[st(1), cm.seq], DType::I32));
    let wte = p(s, "wte.weight", &[c.vocab_size, d]);
    let wpe = p(s, "wpe.weight", &[c.max_position_embeddings, d]);
    let mut x = &wte.gather(&cm.ids, 0) + &wpe.gather(&pos, 0);
    let mut outs = Vec::new();
    let eps = c.norm_eps;
    for l in 0..c.num_layers {
        let pre = format!("h.{l}.");
        let ln = |s: &mut GraphScope, x: &Tensor, name: &str| {
            let g = p(s, &format!("{pre}{name}.weight"), &[d]);
            let b = p(s, &format!("{pre}{name}.bias"), &[d]);
            x.layer_norm(&g, &b, eps)
        };
        // Conv1D stores its weight [in, out]: x · W + b.
        let conv = |s: &mut GraphScope, x: &Tensor, name: &str, inp: usize, out: usize| {
            let wt = p(s, &format!("h.{l}.{name}.weight"), &[inp, out]);
            let b = p(s, &format!("h.{l}.{name}.bias"), &[out]);
            &x.matmul(&wt) + &b
        };
        let a = ln(s, &x, "ln_1");
        let qkv = conv(s, &a, "attn.c_attn", d, 3 * d);
        let (q, k, v) = (
            qkv.narrow(2, 0, d),
            qkv.narrow(2, d, d),
            qkv.narrow(2, 2 * d, d),
        );
        let att = attend(s, c, dt, &cm, l, &q, &k, &v);
        x = &x + &conv(s, &att, "attn.c_proj", d, d);
        let m = ln(s, &x, "ln_2");
        let m = conv(s, &m, "mlp.c_fc", d, f).gelu_approx();
        x = &x + &conv(s, &m, "mlp.c_proj", f, d);
        outs.push(k.cast(DType::F32));
        outs.push(v.cast(DType::F32));
    }
    let g = p(s, "ln_f.weight", &[d]);
    let b = p(s, "ln_f.bias", &[d]);
    let logits = head(s, c, &cm, &x, |_, x| x.layer_norm(&g, &b, eps), &wte);
    outs.insert(0, logits);
    outs
}

/// The step graph of `config` with params of `dtype` (see the module docs for its inputs
/// and outputs).
pub fn step_func(config: &Config, dtype: DType, step: Step) -> Func {
    let name = format!(
        "{}_{}_{}",
        config.model_type,
        match step {
            Step::Prefill => "prefill",
            Step::Decode => "decode",
        },
        dtype
    );
    let c = config.clone();
    Func::multi(name, move |s| match c.arch {
        Arch::Llama => llama(s, &c, dtype, step),
        Arch::Gpt2 => gpt2(s, &c, dtype, step),
    })
}
