//! Generation: prefill the prompt, then decode token by token from the KV cache,
//! sampling each next token, streaming it to a callback, stopping at EOS.

use crate::lm::CausalLm;
use crate::sample::{Sampler, Sampling};
use crate::{Error, Result};
use std::ops::ControlFlow;
use std::time::Instant;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// At most this many new tokens.
    pub max_new_tokens: usize,
    /// How each token is chosen.
    pub sampling: Sampling,
    /// Tokens that end generation (included in the output); `None`: the config's
    /// `eos_token_id`s. An empty list never stops early.
    pub eos_token_ids: Option<Vec<u32>>,
}

impl GenerateOptions {
    /// Greedy generation of up to `max_new_tokens`, stopping at the config's EOS.
    pub fn greedy(max_new_tokens: usize) -> GenerateOptions {
        GenerateOptions {
            max_new_tokens,
            sampling: Sampling::greedy(),
            eos_token_ids: None,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `max_new_tokens` were generated.
    MaxTokens,
    /// An EOS token was generated.
    Eos,
    /// The callback asked to stop.
    Callback,
}

/// The outcome of [`CausalLm::generate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The generated token ids (not the prompt).
    pub tokens: Vec<u32>,
    /// Why it ended.
    pub stop: StopReason,
    /// Seconds spent on the prompt (prefill, including the first token's sampling).
    pub prefill_secs: f64,
    /// Seconds spent on the tokens after the first (decode steps).
    pub decode_secs: f64,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
}

impl Generation {
    /// Prompt tokens per second of the prefill.
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_secs.max(1e-12)
    }

    /// Generated tokens per second of the decode steps (the first token comes from the
    /// prefill and is not counted).
    pub fn decode_tokens_per_sec(&self) -> f64 {
        self.tokens.len().saturating_sub(1) as f64 / self.decode_secs.max(1e-12)
    }
}

impl CausalLm {
    /// Generate after `prompt`, calling `on_token` with each new token as soon as it is
    /// chosen (return `ControlFlow::Break(())` to stop).
    ///
    /// The prompt runs once through the prefill graph; each later token runs through the
    /// decode graph against the cache. Neither recompiles per token.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        opts: &GenerateOptions,
        mut on_token: impl FnMut(u32) -> ControlFlow<()>,
    ) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(Error::new(
                "generate: the prompt is empty; give at least one token (e.g. the BOS token)",
            ));
        }
        let eos = opts
            .eos_token_ids
            .clone()
            .unwrap_or_else(|| self.config().eos_token_ids.clone());
        let mut sampler = Sampler::new(opts.sampling);
        let mut cache = self.new_cache();
        let mut out = Generation {
            tokens: Vec::new(),
            stop: StopReason::MaxTokens,
            prefill_secs: 0.0,
            decode_secs: 0.0,
            prompt_tokens: prompt.len(),
        };
        if opts.max_new_tokens == 0 {
            return Ok(out);
        }
        let t0 = Instant::now();
        let mut logits = self.forward(&mut cache, prompt)?;
        let mut next = sampler.sample(&logits);
        out.prefill_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        loop {
            out.tokens.push(next);
            if on_token(next).is_break() {
                out.stop = StopReason::Callback;
                break;
            }
            if eos.contains(&next) {
                out.stop = StopReason::Eos;
                break;
            }
            if out.tokens.len() >= opts.max_new_tokens {
                break;
            }
            logits = self.forward(&mut cache, &[next])?;
            next = sampler.sample(&logits);
        }
        out.decode_secs = t1.elapsed().as_secs_f64();
        Ok(out)
    }
}
