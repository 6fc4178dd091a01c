//! W12 peer: candle-transformers' llama (CPU) on a Hugging Face checkpoint directory.
//!
//! Prefill a fixed prompt of `--prompt-len` token ids, then generate `--gen` tokens greedily
//! (one from the prefill logits, `gen - 1` single-token decode steps with the KV cache), batch 1.
//! Times prefill and decode separately over `--repeats` runs after one warm-up run and prints
//! one machine-readable line per dtype:
//!
//! `W12PEER candle <dtype> prefill_tok_s=<r1,r2,…> decode_tok_s=<r1,r2,…> tokens=<ids of the last run>`
//!
//! (one rate per timed run; rlx-bench reports their median).
//!
//! The prompt ids are the same arithmetic sequence rlx-bench's W12 uses
//! (`(i * 7919 + 13) % vocab`), so the greedy tokens can be compared across engines.

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Llama, LlamaConfig};

struct Args {
    model: PathBuf,
    dtypes: Vec<String>,
    prompt_len: usize,
    gen_tokens: usize,
    repeats: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        model: PathBuf::new(),
        dtypes: vec!["f32".into(), "bf16".into()],
        prompt_len: 128,
        gen_tokens: 128,
        repeats: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--model" => args.model = PathBuf::from(value()?),
            "--dtype" => args.dtypes = value()?.split(',').map(str::to_string).collect(),
            "--prompt-len" => args.prompt_len = value()?.parse().map_err(|e| format!("{e}"))?,
            "--gen" => args.gen_tokens = value()?.parse().map_err(|e| format!("{e}"))?,
            "--repeats" => args.repeats = value()?.parse().map_err(|e| format!("{e}"))?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    if args.model.as_os_str().is_empty() {
        return Err("usage: candle-w12 --model DIR [--dtype f32,bf16] [--prompt-len 128] [--gen 128] [--repeats 3]".into());
    }
    if args.gen_tokens == 0 || args.prompt_len == 0 || args.repeats == 0 {
        return Err("--prompt-len, --gen and --repeats must be at least 1".into());
    }
    Ok(args)
}

fn argmax_last(logits: &Tensor) -> candle_core::Result<u32> {
    logits.squeeze(0)?.argmax(0)?.to_scalar::<u32>()
}

/// One prefill + greedy decode; returns (prefill seconds, decode seconds, generated ids).
fn run_once(
    model: &Llama,
    config: &candle_transformers::models::llama::Config,
    dtype: DType,
    prompt: &[u32],
    gen_tokens: usize,
) -> candle_core::Result<(f64, f64, Vec<u32>)> {
    let dev = Device::Cpu;
    let mut cache = Cache::new(true, dtype, config, &dev)?;
    let input = Tensor::new(prompt, &dev)?.unsqueeze(0)?;
    let t0 = Instant::now();
    let logits = model.forward(&input, 0, &mut cache)?;
    let mut next = argmax_last(&logits)?;
    let prefill = t0.elapsed().as_secs_f64();
    let mut out = vec![next];
    let t1 = Instant::now();
    for step in 1..gen_tokens {
        let input = Tensor::new(&[next], &dev)?.unsqueeze(0)?;
        let logits = model.forward(&input, prompt.len() + step - 1, &mut cache)?;
        next = argmax_last(&logits)?;
        out.push(next);
    }
    let decode = t1.elapsed().as_secs_f64();
    Ok((prefill, decode, out))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    let config_text = std::fs::read_to_string(args.model.join("config.json"))?;
    let llama_config: LlamaConfig = serde_json::from_str(&config_text)?;
    let vocab = llama_config.vocab_size;
    let config = llama_config.into_config(false);
    let weights = args.model.join("model.safetensors");
    let prompt: Vec<u32> = (0..args.prompt_len)
        .map(|i| ((i * 7919 + 13) % vocab) as u32)
        .collect();
    for dtype_name in &args.dtypes {
        let dtype = match dtype_name.as_str() {
            "f32" => DType::F32,
            "bf16" => DType::BF16,
            other => return Err(format!("--dtype {other}: expected f32 or bf16").into()),
        };
        // SAFETY: the checkpoint file is not modified while the benchmark runs.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights], dtype, &Device::Cpu)? };
        let model = Llama::load(vb, &config)?;
        run_once(&model, &config, dtype, &prompt, args.gen_tokens)?; // warm-up
        let (mut pre, mut dec) = (Vec::new(), Vec::new());
        let mut tokens = Vec::new();
        for _ in 0..args.repeats {
            let (p, d, t) = run_once(&model, &config, dtype, &prompt, args.gen_tokens)?;
            pre.push(args.prompt_len as f64 / p);
            if args.gen_tokens > 1 {
                dec.push((args.gen_tokens - 1) as f64 / d);
            }
            tokens = t;
        }
        let list = |v: &[f64]| {
            v.iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let ids: Vec<String> = tokens.iter().map(u32::to_string).collect();
        println!(
            "W12PEER candle {dtype_name} prefill_tok_s={} decode_tok_s={} tokens={}",
            list(&pre),
            list(&dec),
            ids.join(",")
        );
    }
    Ok(())
}
