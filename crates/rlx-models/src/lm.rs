//! [`CausalLm`]: a checkpoint's two step graphs compiled, its weights bound, and the
//! host side of the KV cache.

use crate::config::{Arch, Config};
use crate::graph::{Step, names, step_func};
use crate::{Error, Result};
use rlx_tensor::{DType, Device, Model, SafeTensors, fastest_device_for};
use std::path::Path;

/// The keys and values of every layer for the tokens seen so far (host memory, f32).
///
/// One row per position per layer, `num_kv_heads · head_dim` wide, after rotary
/// embedding — what `transformers` caches. Made by [`CausalLm::new_cache`].
#[derive(Debug, Clone)]
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    len: usize,
    width: usize,
}

impl KvCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached (the next step is a prefill).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forget everything (keeps the allocations).
    pub fn clear(&mut self) {
        self.k
            .iter_mut()
            .chain(self.v.iter_mut())
            .for_each(Vec::clear);
        self.len = 0;
    }

    /// The cached keys of layer `l`: `len · width` values, one row per position.
    pub fn keys(&self, l: usize) -> &[f32] {
        &self.k[l]
    }

    /// The cached values of layer `l`.
    pub fn values(&self, l: usize) -> &[f32] {
        &self.v[l]
    }
}

/// A causal language model loaded from a checkpoint, ready to run step by step.
///
/// Holds two compiled graphs (see [`crate::graph`]): prefill, for a prompt of any length,
/// and decode, for one token against a cache of any length. Each compiles once, when
/// the model is loaded; the dynamic dims bind per call, so generating never recompiles.
pub struct CausalLm {
    config: Config,
    dtype: DType,
    prefill: Model,
    decode: Model,
    cache_names: Vec<(String, String)>,
}

impl std::fmt::Debug for CausalLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CausalLm({} × {} layers, d = {}, {} on {})",
            self.config.model_type,
            self.config.num_layers,
            self.config.hidden_size,
            self.dtype,
            self.prefill.device()
        )
    }
}

/// How a stored tensor name maps to the graph's param names (`None`: not a weight).
fn rename(config: &Config) -> impl Fn(&str) -> Option<String> + '_ {
    move |n: &str| match config.arch {
        Arch::Llama => {
            let skip = n.ends_with(".rotary_emb.inv_freq")
                || (config.tie_word_embeddings && n == "lm_head.weight");
            (!skip).then(|| n.to_string())
        }
        Arch::Gpt2 => {
            let n = n.strip_prefix("transformer.").unwrap_or(n);
            // Causal-mask buffers of old checkpoints, and the head tied to wte.
            let skip = n.ends_with(".attn.bias") && !n.contains("c_attn")
                || n.ends_with(".attn.masked_bias")
                || n == "lm_head.weight";
            (!skip).then(|| n.to_string())
        }
    }
}

impl CausalLm {
    /// Load a model directory: `config.json` and the safetensors (one file or an index
    /// of shards). `dtype` is the dtype to run in (`None`: the checkpoint's, from the
    /// config's `torch_dtype`/`dtype`, else f32).
    pub fn load(dir: impl AsRef<Path>, dtype: Option<DType>) -> Result<CausalLm> {
        let dir = dir.as_ref();
        let config = Config::from_file(dir.join("config.json"))?;
        let weights = SafeTensors::open_sharded(dir)?;
        CausalLm::from_parts(config, &weights, dtype)
    }

    /// Build from a parsed config and opened weights.
    pub fn from_parts(
        config: Config,
        weights: &SafeTensors,
        dtype: Option<DType>,
    ) -> Result<CausalLm> {
        let dtype = dtype.or(config.dtype).unwrap_or(DType::F32);
        if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) {
            return Err(Error::new(format!(
                "CausalLm: cannot run in {dtype}; use f32, bf16 or f16"
            )));
        }
        if config.arch == Arch::Llama && config.rope.rot_dim != config.head_dim {
            return Err(Error::new(format!(
                "CausalLm: partial rotary embeddings (rotating {} of {} dims per head) are not supported: Tensor::rope rotates whole heads",
                config.rope.rot_dim, config.head_dim
            )));
        }
        let prefill_f = step_func(&config, dtype, Step::Prefill);
        let decode_f = step_func(&config, dtype, Step::Decode);
        let graph = prefill_f.graph();
        let report = weights.check_params(graph, rename(&config));
        if !report.is_empty() {
            return Err(Error::new(format!(
                "CausalLm: the checkpoint does not fit a {} model with this config: {report}",
                config.model_type
            )));
        }
        let device: Device = fastest_device_for(graph);
        let mut prefill = Model::try_on(prefill_f.graph().clone(), device)?;
        let mut decode = Model::try_on(decode_f.graph().clone(), device)?;
        // One tensor at a time: converted to f32 once, bound (in the model dtype) to both.
        for stored in weights.names() {
            let Some(param) = rename(&config)(stored) else {
                continue;
            };
            let data = weights.load_f32(stored)?;
            prefill.try_set(&param, &data)?;
            decode.try_set(&param, &data)?;
        }
        let cache_names = (0..config.num_layers)
            .map(|l| (names::cache("k", l), names::cache("v", l)))
            .collect();
        Ok(CausalLm {
            config,
            dtype,
            prefill,
            decode,
            cache_names,
        })
    }

    /// The config.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The dtype the model runs in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device it runs on.
    pub fn device(&self) -> Device {
        self.prefill.device()
    }

    /// The compiled prefill and decode programs' per-kernel timings over their runs so far
    /// (`RLX_PROFILE=1`; `None` without it, before a run, or on a backend that does not
    /// time kernels), to see where a generation's time goes.
    pub fn profiles(&self) -> (Option<rlx_tensor::Profile>, Option<rlx_tensor::Profile>) {
        (self.prefill.profile(), self.decode.profile())
    }

    /// The compiled prefill and decode programs' reports (kernels, fused ops, memory plan).
    pub fn explain(&self) -> (String, String) {
        (self.prefill.explain(), self.decode.explain())
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache {
            k: vec![Vec::new(); self.config.num_layers],
            v: vec![Vec::new(); self.config.num_layers],
            len: 0,
            width: self.config.kv_width(),
        }
    }

    /// Run `ids` after what `cache` holds, append their keys and values to it, and return
    /// the logits of the last position (`vocab_size` values, f32).
    ///
    /// An empty cache runs the prompt through the prefill graph; afterwards each token
    /// runs through the decode graph.
    pub fn forward(&mut self, cache: &mut KvCache, ids: &[u32]) -> Result<Vec<f32>> {
        if ids.is_empty() {
            return Err(Error::new("CausalLm::forward: no token ids given"));
        }
        if cache.k.len() != self.config.num_layers || cache.width != self.config.kv_width() {
            return Err(Error::new(
                "CausalLm::forward: this cache was made by another model; use new_cache()",
            ));
        }
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= self.config.vocab_size) {
            return Err(Error::new(format!(
                "CausalLm::forward: token id {bad} is outside the vocabulary (size {})",
                self.config.vocab_size
            )));
        }
        let end = cache.len + ids.len();
        if self.config.arch == Arch::Gpt2 && end > self.config.max_position_embeddings {
            return Err(Error::new(format!(
                "CausalLm::forward: {end} positions exceed GPT-2's {} learned positions",
                self.config.max_position_embeddings
            )));
        }
        if cache.is_empty() {
            return self.prefill(cache, ids);
        }
        let mut logits = Vec::new();
        for &id in ids {
            logits = self.decode(cache, id)?;
        }
        Ok(logits)
    }

    /// Rotations (Llama) or positions (GPT-2) of positions `from..to`.
    fn position_inputs(&self, from: usize, to: usize) -> (Vec<f32>, Vec<f32>) {
        match self.config.arch {
            Arch::Llama => self.config.rope.tables(from..to, to),
            Arch::Gpt2 => ((from..to).map(|p| p as f32).collect(), Vec::new()),
        }
    }

    fn prefill(&mut self, cache: &mut KvCache, ids: &[u32]) -> Result<Vec<f32>> {
        let s = ids.len();
        let ids_f: Vec<f32> = ids.iter().map(|&i| i as f32).collect();
        let (a, b) = self.position_inputs(0, s);
        let last = [(s - 1) as f32];
        let mut inputs: Vec<(&str, &[f32])> = vec![("ids", &ids_f), ("last", &last)];
        match self.config.arch {
            Arch::Llama => inputs.extend([("rope_cos", &a[..]), ("rope_sin", &b[..])]),
            Arch::Gpt2 => inputs.push(("pos", &a)),
        }
        let mut out = self.prefill.try_run(&inputs)?.into_iter();
        let logits = out.next().expect("logits output");
        for l in 0..self.config.num_layers {
            cache.k[l] = out.next().expect("k output");
            cache.v[l] = out.next().expect("v output");
        }
        cache.len = s;
        Ok(logits)
    }

    fn decode(&mut self, cache: &mut KvCache, id: u32) -> Result<Vec<f32>> {
        let (p, w) = (cache.len, cache.width);
        let t = p + 1;
        for buf in cache.k.iter_mut().chain(cache.v.iter_mut()) {
            buf.resize(t * w, 0.0);
        }
        let mut slot = vec![0.0f32; t];
        slot[p] = 1.0;
        let key_mask: Option<Vec<f32>> = self.config.sliding_window.map(|win| {
            (0..t)
                .map(|k| if p - k < win { 1.0 } else { 0.0 })
                .collect()
        });
        let ids_f = [id as f32];
        let (a, b) = self.position_inputs(p, t);
        let mut inputs: Vec<(&str, &[f32])> = vec![("ids", &ids_f), ("slot", &slot)];
        match self.config.arch {
            Arch::Llama => inputs.extend([("rope_cos", &a[..]), ("rope_sin", &b[..])]),
            Arch::Gpt2 => inputs.push(("pos", &a)),
        }
        if let Some(m) = &key_mask {
            inputs.push(("key_mask", m));
        }
        for (l, (kn, vn)) in self.cache_names.iter().enumerate() {
            inputs.push((kn, &cache.k[l]));
            inputs.push((vn, &cache.v[l]));
        }
        let run = self.decode.try_run(&inputs);
        let mut out = match run {
            Ok(o) => o.into_iter(),
            Err(e) => {
                // Leave the cache as it was.
                for buf in cache.k.iter_mut().chain(cache.v.iter_mut()) {
                    buf.truncate(p * w);
                }
                return Err(e);
            }
        };
        let logits = out.next().expect("logits output");
        for l in 0..self.config.num_layers {
            let (k, v) = (out.next().expect("k output"), out.next().expect("v output"));
            cache.k[l][p * w..].copy_from_slice(&k);
            cache.v[l][p * w..].copy_from_slice(&v);
        }
        cache.len = t;
        Ok(logits)
    }
}
