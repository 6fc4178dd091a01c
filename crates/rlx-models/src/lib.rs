//! # rlx-models
//!
//! Pretrained causal language models on [`rlx_tensor`]: load a Hugging Face checkpoint
//! directory (`config.json`, `*.safetensors`, `tokenizer.json`) and generate text with a
//! KV cache.
//!
//! - Architectures: the Llama family (`llama`, `mistral`, `qwen2` configs: RMSNorm,
//!   rotary embeddings with every common `rope_type`, grouped-query attention, SwiGLU,
//!   tied or untied head, Qwen2's q/k/v biases) and GPT-2.
//! - dtypes: run in f32, bf16 or f16 whatever the checkpoint stores (f32, f16, bf16, fp8).
//! - Generation: one compiled graph for the prompt and one for each new token, the
//!   cache's sequence axis a dynamic dim — no recompile per token; greedy, temperature,
//!   top-k and top-p sampling with a seed; EOS; a streaming callback.
//!
//! Limits today: batch size 1; rotary embeddings over whole heads (no
//! `partial_rotary_factor` < 1) and no `longrope`; the prefill and decode graphs are two
//! compiled `Model`s, each holding its own copy of the weights.
//!
//! ```no_run
//! use rlx_models::{CausalLm, GenerateOptions, Tokenizer};
//! use std::ops::ControlFlow;
//! let mut lm = CausalLm::load("path/to/model", None)?;
//! let tok = Tokenizer::from_file("path/to/model/tokenizer.json")?;
//! let prompt = tok.encode("Once upon a time", true)?;
//! let mut stream = tok.stream();
//! let out = lm.generate(&prompt, &GenerateOptions::greedy(20), |t| {
//!     print!("{}", stream.push(t).unwrap());
//!     ControlFlow::Continue(())
//! })?;
//! println!("\n{:.1} tokens/s", out.decode_tokens_per_sec());
//! # Ok::<(), rlx_tensor::Error>(())
//! ```

pub mod config;
mod generate;
pub mod graph;
mod lm;
pub mod rope;
mod sample;
#[cfg(feature = "tokenizers")]
mod tokenizer;

pub use config::{Arch, Config};
pub use generate::{GenerateOptions, Generation, StopReason};
pub use lm::{CausalLm, KvCache};
pub use rlx_tensor::{Error, Result};
pub use sample::{Sampler, Sampling, argmax};
#[cfg(feature = "tokenizers")]
pub use tokenizer::{TextStream, Tokenizer};
