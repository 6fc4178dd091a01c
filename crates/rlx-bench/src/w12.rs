//! W12: Llama-family generation, batch 1: prefill a 128-token prompt, then generate 128
//! tokens greedily with the KV cache, in f32 and bf16, reported in tokens/s.
//!
//! The model is a ~100M-parameter Llama (hidden 768, 12 layers, 12 query heads over 4
//! key/value heads, SwiGLU 2048, vocab 32000, head tied to the embedding: 100.1M params)
//! with seeded random weights, written once in Hugging Face layout (`config.json` +
//! `model.safetensors`, f32) and loaded back through `rlx_models::CausalLm::load` like any
//! checkpoint. The peers (`peers/w12_torch.py`, `bench-peers/candle-w12`) read the same
//! directory and feed the same prompt ids, so their greedy tokens can be compared.
//!
//! Options (`--w12-<name> <value>`):
//! - `checkpoint-dir DIR`: where the checkpoint lives (written there if `config.json` is
//!   missing; default: a directory under the system temp dir);
//! - `dtypes f32,bf16`: which dtypes to run;
//! - `prompt-len N`, `gen N`: token counts (default 128 and 128);
//! - `python PATH`, `candle BIN`: run the peers in this same process run and add their rows
//!   (otherwise the commands to run them are printed);
//! - `rounds N` (default 1): alternate the engines N times per dtype — rlx, then each peer,
//!   each timing its share of the repeats per round — so a change in the machine's load
//!   (it is shared) falls on every engine alike instead of on whichever ran during it.

mod checkpoint;
mod peers;

use crate::report::Row;
use crate::timing::{Plan, median};
use rlx_models::{CausalLm, GenerateOptions};
use rlx_tensor::DType;
use std::ops::ControlFlow;
use std::path::PathBuf;

/// Parsed `--w12-*` options.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    pub dir: PathBuf,
    pub dtypes: Vec<String>,
    pub prompt_len: usize,
    pub gen_tokens: usize,
    pub python: Option<String>,
    pub candle: Option<String>,
    pub rounds: usize,
}

fn parse(args: &[(String, String)]) -> Result<Opts, String> {
    let mut o = Opts {
        dir: std::env::temp_dir().join("rlx_w12_llama100m"),
        dtypes: vec!["f32".into(), "bf16".into()],
        prompt_len: 128,
        gen_tokens: 128,
        python: None,
        candle: None,
        rounds: 1,
    };
    for (flag, value) in args {
        let count = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{flag} {value}: expected a positive integer"))
        };
        match flag.as_str() {
            "--w12-checkpoint-dir" => o.dir = PathBuf::from(value),
            "--w12-dtypes" => o.dtypes = value.split(',').map(str::to_string).collect(),
            "--w12-prompt-len" => o.prompt_len = count()?,
            "--w12-gen" => o.gen_tokens = count()?,
            "--w12-python" => o.python = Some(value.clone()),
            "--w12-candle" => o.candle = Some(value.clone()),
            "--w12-rounds" => o.rounds = count()?,
            other => {
                return Err(format!(
                    "unknown option {other}; W12 takes --w12-checkpoint-dir, --w12-dtypes, \
                     --w12-prompt-len, --w12-gen, --w12-python, --w12-candle, --w12-rounds"
                ));
            }
        }
    }
    if let Some(bad) = o
        .dtypes
        .iter()
        .find(|d| !matches!(d.as_str(), "f32" | "bf16"))
    {
        return Err(format!("--w12-dtypes: `{bad}` is not f32 or bf16"));
    }
    Ok(o)
}

/// The prompt every engine feeds: an arithmetic walk through the vocabulary.
pub(crate) fn prompt(len: usize, vocab: usize) -> Vec<u32> {
    (0..len).map(|i| ((i * 7919 + 13) % vocab) as u32).collect()
}

/// One engine's measurement: median prompt and generated tokens/s, last run's tokens.
pub(crate) struct Measured {
    pub prefill_tok_s: Vec<f64>,
    pub decode_tok_s: Vec<f64>,
    pub tokens: Vec<u32>,
}

impl Measured {
    fn empty() -> Measured {
        Measured {
            prefill_tok_s: Vec::new(),
            decode_tok_s: Vec::new(),
            tokens: Vec::new(),
        }
    }

    /// Adds another round's rates; the tokens are the latest round's.
    fn extend(&mut self, other: Measured) {
        self.prefill_tok_s.extend(other.prefill_tok_s);
        self.decode_tok_s.extend(other.decode_tok_s);
        self.tokens = other.tokens;
    }
}

/// rlx's engine: the model loaded (and warmed up) once, timed round after round.
struct RlxEngine {
    lm: CausalLm,
    ids: Vec<u32>,
    opts: GenerateOptions,
}

impl RlxEngine {
    fn load(o: &Opts, dtype: DType) -> Result<RlxEngine, String> {
        let lm = CausalLm::load(&o.dir, Some(dtype)).map_err(|e| e.to_string())?;
        let ids = prompt(o.prompt_len, lm.config().vocab_size);
        let opts = GenerateOptions {
            eos_token_ids: Some(Vec::new()),
            ..GenerateOptions::greedy(o.gen_tokens)
        };
        let mut e = RlxEngine { lm, ids, opts };
        // The first run warms the JIT and the allocator; it is not timed.
        e.timed(0)?;
        Ok(e)
    }

    /// `runs` timed generations (0: one untimed).
    fn timed(&mut self, runs: usize) -> Result<Measured, String> {
        let mut m = Measured::empty();
        for _ in 0..runs.max(1) {
            let g = self
                .lm
                .generate(&self.ids, &self.opts, |_| ControlFlow::Continue(()))
                .map_err(|e| e.to_string())?;
            if runs > 0 {
                m.prefill_tok_s.push(g.prefill_tokens_per_sec());
                if g.tokens.len() > 1 {
                    m.decode_tok_s.push(g.decode_tokens_per_sec());
                }
            }
            m.tokens = g.tokens;
        }
        Ok(m)
    }
}

/// How many leading tokens two greedy runs share.
fn agree(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Adds a prefill and a decode row for one engine; `reference` is rlx's tokens.
fn push_rows(
    rows: &mut Vec<Row>,
    system: &str,
    dtype: &str,
    m: &Measured,
    reference: Option<&[u32]>,
) {
    let note = match reference {
        Some(r) => format!(
            "greedy tokens equal to rlx's for the first {} of {}",
            agree(&m.tokens, r),
            r.len()
        ),
        None => String::new(),
    };
    for (phase, rates) in [("prefill", &m.prefill_tok_s), ("decode", &m.decode_tok_s)] {
        if rates.is_empty() {
            continue;
        }
        // Seconds per token; the table shows its inverse as tokens/s.
        let t = median(rates.iter().map(|r| 1.0 / r).collect());
        rows.push(
            Row::new(&format!("W12_llama100m_{phase}_{dtype}"), system, t)
                .tokens()
                .note(&note),
        );
    }
}

/// The W12 rows; returns lines to print after the table. `args` are the `--w12-*` options.
pub fn rows(rows: &mut Vec<Row>, plan: Plan, args: &[(String, String)]) -> Vec<String> {
    let o = match parse(args) {
        Ok(o) => o,
        Err(e) => return vec![format!("W12: {e}")],
    };
    let mut after = Vec::new();
    match checkpoint::ensure(&o.dir) {
        Ok(true) => after.push(format!("W12: wrote the checkpoint to {}", o.dir.display())),
        Ok(false) => after.push(format!("W12: reused the checkpoint in {}", o.dir.display())),
        Err(e) => return vec![format!("W12: {e}")],
    }
    let repeats = plan.repeats.clamp(1, 5);
    let rounds = o.rounds.min(repeats);
    // Each round times its share of the repeats on every engine.
    let per_round = repeats.div_ceil(rounds);
    for dtype_name in &o.dtypes {
        let dtype = if dtype_name == "bf16" {
            DType::BF16
        } else {
            DType::F32
        };
        let mut engine = match RlxEngine::load(&o, dtype) {
            Ok(e) => e,
            Err(e) => {
                after.push(format!("W12 rlx {dtype_name}: {e}"));
                continue;
            }
        };
        let mut rlx = Measured::empty();
        let mut peers: Vec<(&'static str, Result<Measured, String>)> = Vec::new();
        for _ in 0..rounds {
            match engine.timed(per_round) {
                Ok(m) => rlx.extend(m),
                Err(e) => {
                    after.push(format!("W12 rlx {dtype_name}: {e}"));
                    break;
                }
            }
            for (system, result) in peers::run(&o, dtype_name, per_round) {
                let Some(entry) = peers.iter_mut().find(|(s, _)| *s == system) else {
                    peers.push((system, result));
                    continue;
                };
                // An engine that failed once stays failed.
                let failed = match (&mut entry.1, result) {
                    (Ok(acc), Ok(m)) => {
                        acc.extend(m);
                        None
                    }
                    (Ok(_), Err(e)) => Some(e),
                    (Err(_), _) => None,
                };
                if let Some(e) = failed {
                    entry.1 = Err(e);
                }
            }
        }
        if rlx.prefill_tok_s.is_empty() {
            continue;
        }
        push_rows(rows, "rlx", dtype_name, &rlx, None);
        for (system, result) in peers {
            match result {
                Ok(m) => push_rows(rows, system, dtype_name, &m, Some(&rlx.tokens)),
                Err(e) => after.push(format!("W12 {system} {dtype_name}: {e}")),
            }
        }
    }
    after.push(
        "W12: rates are tokens/s (prefill: prompt tokens; decode: generated tokens after the \
         first, which comes from the prefill); medians over the timed runs after one warm-up."
            .into(),
    );
    after.extend(peers::commands(&o, repeats));
    after
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_reject_bad_values() {
        let a = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(f, v)| (f.to_string(), v.to_string()))
                .collect()
        };
        let o = parse(&a(&[
            ("--w12-checkpoint-dir", "/x/y"),
            ("--w12-dtypes", "bf16"),
            ("--w12-gen", "5"),
            ("--w12-rounds", "3"),
        ]))
        .unwrap();
        assert_eq!(o.rounds, 3);
        assert!(parse(&a(&[("--w12-rounds", "0")])).is_err());
        assert_eq!(o.dir, PathBuf::from("/x/y"));
        assert_eq!(o.dtypes, ["bf16"]);
        assert_eq!((o.prompt_len, o.gen_tokens), (128, 5));
        assert!(parse(&a(&[("--w12-gen", "0")])).is_err());
        assert!(parse(&a(&[("--w12-dtypes", "f16")])).is_err());
        assert!(parse(&a(&[("--w12-bogus", "1")])).is_err());
    }

    #[test]
    fn prompt_ids_stay_in_the_vocabulary_and_match_the_peers_formula() {
        let p = prompt(128, 32000);
        assert_eq!(&p[..3], &[13, 7932, 15851]);
        assert!(p.iter().all(|&t| t < 32000));
        assert_eq!(agree(&[1, 2, 3], &[1, 2, 4]), 2);
    }
}
