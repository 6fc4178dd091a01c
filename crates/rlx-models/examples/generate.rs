//! Generate text from a Hugging Face checkpoint directory.
//!
//! ```text
//! cargo run --release -p rlx-models --example generate -- --model DIR --prompt "TEXT" \
//!     --max-new-tokens N [--temperature T] [--top-p P] [--top-k K] [--seed S] \
//!     [--dtype f32|bf16|f16] [--print-token-ids]
//! ```
//!
//! DIR holds `config.json`, `tokenizer.json` and the safetensors (one file or an index of
//! shards). The text streams as it is generated; tokens/s follow. `--temperature 0` (the
//! default) is greedy; without `--dtype` the checkpoint's dtype is used.
//! `--print-token-ids` also prints one line `token_ids: <the generated ids>`.

use rlx_models::{CausalLm, GenerateOptions, Sampling, Tokenizer};
use rlx_tensor::DType;
use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

struct Args {
    model: PathBuf,
    prompt: String,
    max_new_tokens: usize,
    sampling: Sampling,
    dtype: Option<DType>,
    print_ids: bool,
}

const USAGE: &str = "usage: generate --model DIR --prompt TEXT --max-new-tokens N \
[--temperature T] [--top-p P] [--top-k K] [--seed S] [--dtype f32|bf16|f16] [--print-token-ids]";

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut model, mut prompt, mut max) = (None, None, None);
    let mut sampling = Sampling::greedy();
    let (mut dtype, mut print_ids) = (None, false);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |v: String| v.parse::<f64>().map_err(|e| format!("{flag} {v:?}: {e}"));
        match flag.as_str() {
            "--model" => model = Some(PathBuf::from(value()?)),
            "--prompt" => prompt = Some(value()?),
            "--max-new-tokens" => max = Some(num(value()?)? as usize),
            "--temperature" => sampling.temperature = num(value()?)? as f32,
            "--top-p" => sampling.top_p = num(value()?)? as f32,
            "--top-k" => sampling.top_k = num(value()?)? as usize,
            "--seed" => sampling.seed = num(value()?)? as u64,
            "--dtype" => {
                dtype = Some(match value()?.as_str() {
                    "f32" => DType::F32,
                    "bf16" => DType::BF16,
                    "f16" => DType::F16,
                    other => return Err(format!("--dtype {other:?}: use f32, bf16 or f16")),
                })
            }
            "--print-token-ids" => print_ids = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(Args {
        model: model.ok_or(format!("--model is required\n{USAGE}"))?,
        prompt: prompt.ok_or(format!("--prompt is required\n{USAGE}"))?,
        max_new_tokens: max.ok_or(format!("--max-new-tokens is required\n{USAGE}"))?,
        sampling,
        dtype,
        print_ids,
    })
}

fn run(a: Args) -> rlx_tensor::Result<()> {
    let tok = Tokenizer::from_file(a.model.join("tokenizer.json"))?;
    let mut lm = CausalLm::load(&a.model, a.dtype)?;
    let prompt = tok.encode(&a.prompt, true)?;
    let opts = GenerateOptions {
        max_new_tokens: a.max_new_tokens,
        sampling: a.sampling,
        eos_token_ids: None,
    };
    let mut stream = tok.stream();
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "{}", a.prompt);
    let _ = out.flush();
    let mut failed = None;
    let g = lm.generate(&prompt, &opts, |t| match stream.push(t) {
        Ok(text) => {
            let _ = write!(out, "{text}");
            let _ = out.flush();
            ControlFlow::Continue(())
        }
        Err(e) => {
            failed = Some(e);
            ControlFlow::Break(())
        }
    })?;
    if let Some(e) = failed {
        return Err(e);
    }
    let _ = writeln!(out);
    if a.print_ids {
        let ids: Vec<String> = g.tokens.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "token_ids: {}", ids.join(" "));
    }
    let _ = writeln!(
        out,
        "{:?}: prompt {} tokens, prefill {:.1} tokens/s; generated {} tokens ({:?}), decode {:.1} tokens/s",
        lm,
        g.prompt_tokens,
        g.prefill_tokens_per_sec(),
        g.tokens.len(),
        g.stop,
        g.decode_tokens_per_sec()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
