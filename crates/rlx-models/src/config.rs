//! `config.json` as Hugging Face `transformers` writes it (4.x and 5.x), for the
//! architectures this crate runs.

use crate::rope::RopeScaling;
use crate::{Error, Result};
use rlx_tensor::DType;
use serde_json::Value;
use std::path::Path;

/// Which network a config describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Llama-family decoder (`llama`, `mistral`, `qwen2`): RMSNorm, rotary embeddings,
    /// grouped-query attention, SwiGLU MLP.
    Llama,
    /// GPT-2: learned positions, LayerNorm, `gelu_new`, Conv1D weights stored `[in, out]`.
    Gpt2,
}

/// The model's hyperparameters, normalized across architectures and config versions.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The network.
    pub arch: Arch,
    /// `model_type` as written (`llama`, `mistral`, `qwen2`, `gpt2`).
    pub model_type: String,
    /// Vocabulary size (rows of the token embedding).
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (fewer than `num_heads` for grouped-query attention).
    pub num_kv_heads: usize,
    /// Per-head width.
    pub head_dim: usize,
    /// Epsilon of every norm.
    pub norm_eps: f32,
    /// Rotary embedding base and scaling (Llama family only).
    pub rope: RopeScaling,
    /// Positions the model was trained for (GPT-2: the size of its position table).
    pub max_position_embeddings: usize,
    /// Whether the lm head reuses the token embedding.
    pub tie_word_embeddings: bool,
    /// Whether q/k/v projections have biases (Qwen2; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// Whether the attention output projection has a bias (Llama's `attention_bias`).
    pub o_bias: bool,
    /// Whether the MLP projections have biases (Llama's `mlp_bias`).
    pub mlp_bias: bool,
    /// Sliding-window size of the attention (Mistral, Qwen2 when enabled).
    pub sliding_window: Option<usize>,
    /// Token ids that end generation.
    pub eos_token_ids: Vec<u32>,
    /// The beginning-of-sequence token, if the config names one.
    pub bos_token_id: Option<u32>,
    /// The dtype the checkpoint was saved in (`torch_dtype` / `dtype`), if stated.
    pub dtype: Option<DType>,
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::new(format!("config.json: {what}"))
}

/// Field access with error messages naming the key.
struct Fields<'a>(&'a Value);

impl Fields<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key).filter(|v| !v.is_null())
    }

    fn usize(&self, key: &str) -> Result<Option<usize>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(|n| Some(n as usize))
                .ok_or_else(|| bad(format!("`{key}` is {v}, expected a non-negative integer"))),
        }
    }

    fn need(&self, key: &str) -> Result<usize> {
        self.usize(key)?
            .ok_or_else(|| bad(format!("`{key}` is missing (required for this model type)")))
    }

    fn f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .map(Some)
                .ok_or_else(|| bad(format!("`{key}` is {v}, expected a number"))),
        }
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_bool()
                .map(Some)
                .ok_or_else(|| bad(format!("`{key}` is {v}, expected true or false"))),
        }
    }

    /// A token id or a list of them.
    fn ids(&self, key: &str) -> Result<Vec<u32>> {
        let one = |v: &Value| {
            v.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(format!("`{key}` holds {v}, expected token ids")))
        };
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a.iter().map(one).collect(),
            Some(v) => Ok(vec![one(v)?]),
        }
    }
}

/// `torch_dtype` / `dtype` names.
fn dtype_of(name: &str) -> Option<DType> {
    match name.trim_start_matches("torch.") {
        "float32" | "float" => Some(DType::F32),
        "bfloat16" => Some(DType::BF16),
        "float16" | "half" => Some(DType::F16),
        _ => None,
    }
}

impl Config {
    /// Read `config.json` from a file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Config> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::new(format!("cannot read {}: {e}", path.display())))?;
        Config::from_json(&text)
            .map_err(|e| Error::new(format!("{} ({})", e.message(), path.display())))
    }

    /// Parse the text of a `config.json`.
    ///
    /// ```
    /// use rlx_models::{Arch, Config};
    /// let c = Config::from_json(r#"{"model_type": "llama", "vocab_size": 32, "hidden_size": 16,
    ///     "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
    ///     "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
    ///     "rope_scaling": {"rope_type": "linear", "factor": 2.0}}"#).unwrap();
    /// assert_eq!((c.arch, c.head_dim, c.num_kv_heads), (Arch::Llama, 4, 2));
    /// assert_eq!(c.rope.theta, 500000.0);
    /// ```
    pub fn from_json(text: &str) -> Result<Config> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
        let f = Fields(&v);
        let model_type = f
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("`model_type` is missing"))?
            .to_string();
        let dtype = f
            .get("dtype")
            .or_else(|| f.get("torch_dtype"))
            .and_then(Value::as_str)
            .and_then(dtype_of);
        let mut eos = f.ids("eos_token_id")?;
        eos.dedup();
        let bos = f.ids("bos_token_id")?.first().copied();
        match model_type.as_str() {
            "llama" | "mistral" | "qwen2" => {
                let hidden = f.need("hidden_size")?;
                let heads = f.need("num_attention_heads")?;
                let kv = f.usize("num_key_value_heads")?.unwrap_or(heads);
                if heads == 0 || kv == 0 || heads % kv != 0 {
                    return Err(bad(format!(
                        "num_attention_heads {heads} must be a positive multiple of num_key_value_heads {kv}"
                    )));
                }
                let head_dim = match f.usize("head_dim")? {
                    Some(d) => d,
                    None if hidden % heads == 0 => hidden / heads,
                    None => {
                        return Err(bad(format!(
                            "hidden_size {hidden} is not a multiple of num_attention_heads {heads} and no head_dim is given"
                        )));
                    }
                };
                let max_pos = f.usize("max_position_embeddings")?.unwrap_or(2048);
                let qwen = model_type == "qwen2";
                let attention_bias = f.bool("attention_bias")?.unwrap_or(false);
                let sliding = match model_type.as_str() {
                    "mistral" => f.usize("sliding_window")?,
                    "qwen2" if f.bool("use_sliding_window")?.unwrap_or(false) => {
                        f.usize("sliding_window")?
                    }
                    _ => None,
                };
                Ok(Config {
                    arch: Arch::Llama,
                    vocab_size: f.need("vocab_size")?,
                    hidden_size: hidden,
                    intermediate_size: f.need("intermediate_size")?,
                    num_layers: f.need("num_hidden_layers")?,
                    num_heads: heads,
                    num_kv_heads: kv,
                    head_dim,
                    norm_eps: f.f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
                    rope: RopeScaling::from_config(&v, head_dim, max_pos)?,
                    max_position_embeddings: max_pos,
                    tie_word_embeddings: f.bool("tie_word_embeddings")?.unwrap_or(false),
                    qkv_bias: qwen || attention_bias,
                    o_bias: attention_bias,
                    mlp_bias: f.bool("mlp_bias")?.unwrap_or(false),
                    sliding_window: sliding,
                    eos_token_ids: eos,
                    bos_token_id: bos,
                    dtype,
                    model_type,
                })
            }
            "gpt2" => {
                let hidden = f.need("n_embd")?;
                let heads = f.need("n_head")?;
                if heads == 0 || hidden % heads != 0 {
                    return Err(bad(format!(
                        "n_embd {hidden} is not a multiple of n_head {heads}"
                    )));
                }
                let act = f
                    .get("activation_function")
                    .and_then(Value::as_str)
                    .unwrap_or("gelu_new");
                if act != "gelu_new" {
                    return Err(bad(format!(
                        "activation_function {act:?} is not supported (GPT-2 uses \"gelu_new\")"
                    )));
                }
                if f.bool("scale_attn_by_inverse_layer_idx")?.unwrap_or(false)
                    || f.bool("reorder_and_upcast_attn")?.unwrap_or(false)
                {
                    return Err(bad(
                        "scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are not supported",
                    ));
                }
                let positions = f.need("n_positions")?;
                Ok(Config {
                    arch: Arch::Gpt2,
                    vocab_size: f.need("vocab_size")?,
                    hidden_size: hidden,
                    intermediate_size: f.usize("n_inner")?.unwrap_or(4 * hidden),
                    num_layers: f.need("n_layer")?,
                    num_heads: heads,
                    num_kv_heads: heads,
                    head_dim: hidden / heads,
                    norm_eps: f.f64("layer_norm_epsilon")?.unwrap_or(1e-5) as f32,
                    rope: RopeScaling::none(),
                    max_position_embeddings: positions,
                    tie_word_embeddings: true,
                    qkv_bias: true,
                    o_bias: true,
                    mlp_bias: true,
                    sliding_window: None,
                    eos_token_ids: eos,
                    bos_token_id: bos,
                    dtype,
                    model_type,
                })
            }
            other => Err(bad(format!(
                "model_type {other:?} is not supported (supported: llama, mistral, qwen2, gpt2)"
            ))),
        }
    }

    /// Width of one key (or value) row of the cache: `num_kv_heads · head_dim`.
    pub fn kv_width(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }
}
