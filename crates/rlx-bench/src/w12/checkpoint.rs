//! The W12 checkpoint: a ~100M-parameter Llama with seeded random weights, written in
//! Hugging Face layout so that rlx, PyTorch (`transformers`) and candle all load the same
//! files.

use rlx_tensor::{TensorData, save_safetensors_data};
use std::path::Path;

/// Width, depth and vocabulary of the W12 model.
pub(crate) const HIDDEN: usize = 768;
pub(crate) const LAYERS: usize = 12;
pub(crate) const HEADS: usize = 12;
pub(crate) const KV_HEADS: usize = 4;
pub(crate) const INTERMEDIATE: usize = 2048;
pub(crate) const VOCAB: usize = 32000;

/// `config.json` of the W12 model (what `transformers` writes for a `LlamaConfig`).
pub(crate) fn config_json() -> String {
    serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN / HEADS,
        "vocab_size": VOCAB,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": false,
        "mlp_bias": false,
        "tie_word_embeddings": true,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    })
    .to_string()
}

/// Every weight's name and shape, in checkpoint order.
pub(crate) fn weight_shapes() -> Vec<(String, Vec<usize>)> {
    let (d, hd, f) = (HIDDEN, HIDDEN / HEADS, INTERMEDIATE);
    let mut w = vec![("model.embed_tokens.weight".to_string(), vec![VOCAB, d])];
    for l in 0..LAYERS {
        let p = |n: &str| format!("model.layers.{l}.{n}");
        w.push((p("input_layernorm.weight"), vec![d]));
        w.push((p("self_attn.q_proj.weight"), vec![HEADS * hd, d]));
        w.push((p("self_attn.k_proj.weight"), vec![KV_HEADS * hd, d]));
        w.push((p("self_attn.v_proj.weight"), vec![KV_HEADS * hd, d]));
        w.push((p("self_attn.o_proj.weight"), vec![d, HEADS * hd]));
        w.push((p("post_attention_layernorm.weight"), vec![d]));
        w.push((p("mlp.gate_proj.weight"), vec![f, d]));
        w.push((p("mlp.up_proj.weight"), vec![f, d]));
        w.push((p("mlp.down_proj.weight"), vec![d, f]));
    }
    w.push(("model.norm.weight".to_string(), vec![d]));
    w
}

/// Seeded normal samples (SplitMix64 + Box–Muller), so every run writes the same model.
struct Normal(u64);

impl Normal {
    fn uniform(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn sample(&mut self) -> f32 {
        let (u, v) = (self.uniform(), self.uniform());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// The weights: norms 1, everything else N(0, 0.02²) as `transformers` initializes Llama.
fn weights() -> Vec<(String, TensorData)> {
    let mut rng = Normal(0x5eed_0012);
    weight_shapes()
        .into_iter()
        .map(|(name, dims)| {
            let n: usize = dims.iter().product();
            let values: Vec<f32> = if name.ends_with("norm.weight") {
                vec![1.0; n]
            } else {
                (0..n).map(|_| 0.02 * rng.sample()).collect()
            };
            let data = TensorData::from_f32(&dims, &values);
            (name, data)
        })
        .collect()
}

/// Writes the checkpoint into `dir` unless its `config.json` is already there (the config
/// is written last, so its presence means the weights are complete). Returns whether it
/// wrote.
pub(crate) fn ensure(dir: &Path) -> Result<bool, String> {
    let config = dir.join("config.json");
    if config.exists() {
        return Ok(false);
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("cannot create the checkpoint dir {}: {e}", dir.display()))?;
    let w = weights();
    let refs: Vec<(&str, &TensorData)> = w.iter().map(|(n, d)| (n.as_str(), d)).collect();
    save_safetensors_data(dir.join("model.safetensors"), &refs).map_err(|e| e.to_string())?;
    std::fs::write(&config, config_json())
        .map_err(|e| format!("cannot write {}: {e}", config.display()))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_has_about_100m_params_with_a_tied_head() {
        let n: usize = weight_shapes()
            .iter()
            .map(|(_, d)| d.iter().product::<usize>())
            .sum();
        // 24.6M embedding + 12 × 6.29M per layer + the final norm.
        assert_eq!(n, 100_092_672);
        assert!(!weight_shapes().iter().any(|(n, _)| n == "lm_head.weight"));
        let c: serde_json::Value = serde_json::from_str(&config_json()).unwrap();
        assert_eq!(c["tie_word_embeddings"], true);
        assert_eq!(c["num_key_value_heads"], 4);
    }

    #[test]
    fn normal_samples_have_unit_variance() {
        let mut r = Normal(7);
        let xs: Vec<f64> = (0..20000).map(|_| r.sample() as f64).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.03, "mean {mean}");
        assert!((var - 1.0).abs() < 0.05, "variance {var}");
    }
}
