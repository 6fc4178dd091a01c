//! Running the W12 peers (PyTorch eager and candle) on the same checkpoint and parsing
//! the one line each prints per dtype:
//! `W12PEER <system> <dtype> prefill_tok_s=<x,…> decode_tok_s=<y,…> tokens=<id,id,…>`,
//! one rate per timed run.

use super::{Measured, Opts};
use std::process::Command;

/// The PyTorch peer script, relative to the repository root.
const TORCH_SCRIPT: &str = "crates/rlx-bench/peers/w12_torch.py";
/// The candle peer crate, relative to the repository root.
const CANDLE_CRATE: &str = "bench-peers/candle-w12";

fn peer_args(o: &Opts, dtype: &str, repeats: usize) -> Vec<String> {
    vec![
        "--model".into(),
        o.dir.display().to_string(),
        "--dtype".into(),
        dtype.into(),
        "--prompt-len".into(),
        o.prompt_len.to_string(),
        "--gen".into(),
        o.gen_tokens.to_string(),
        "--repeats".into(),
        repeats.to_string(),
    ]
}

/// Parses a peer's `W12PEER` line for `dtype`.
pub(crate) fn parse_line(out: &str, system: &str, dtype: &str) -> Result<Measured, String> {
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("W12PEER {system} {dtype} ")))
        .ok_or_else(|| format!("no `W12PEER {system} {dtype}` line in its output"))?;
    let field = |key: &str| -> Result<&str, String> {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(key))
            .ok_or_else(|| format!("`{key}` missing from `{line}`"))
    };
    // One rate per timed run, comma-separated (empty: nothing timed, e.g. `--gen 1`).
    let rates = |key: &str| -> Result<Vec<f64>, String> {
        field(key)?
            .split(',')
            .filter(|r| !r.is_empty())
            .map(|r| {
                r.parse::<f64>()
                    .map_err(|e| format!("`{key}` in `{line}`: {e}"))
            })
            .collect()
    };
    let tokens = field("tokens=")?
        .split(',')
        .filter(|t| !t.is_empty())
        .map(|t| t.parse::<u32>().map_err(|e| format!("token `{t}`: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let prefill_tok_s = rates("prefill_tok_s=")?;
    if prefill_tok_s.is_empty() {
        return Err(format!("no prefill rate in `{line}`"));
    }
    Ok(Measured {
        prefill_tok_s,
        decode_tok_s: rates("decode_tok_s=")?,
        tokens,
    })
}

fn run_peer(mut cmd: Command, system: &str, dtype: &str) -> Result<Measured, String> {
    // Same thread budget as rlx on this machine.
    let threads = rayon::current_num_threads().to_string();
    cmd.env("OMP_NUM_THREADS", &threads)
        .env("RAYON_NUM_THREADS", &threads);
    match crate::peer::output(cmd) {
        (stdout, None) => parse_line(&stdout, system, dtype),
        (_, Some(failed)) => Err(failed),
    }
}

/// Runs the peers whose paths were given (`--w12-python`, `--w12-candle`) for one dtype.
pub(crate) fn run(
    o: &Opts,
    dtype: &str,
    repeats: usize,
) -> Vec<(&'static str, Result<Measured, String>)> {
    let mut res = Vec::new();
    if let Some(py) = &o.python {
        let mut c = Command::new(py);
        c.arg(crate::peer::script(TORCH_SCRIPT))
            .args(peer_args(o, dtype, repeats));
        res.push(("torch", run_peer(c, "torch", dtype)));
    }
    if let Some(bin) = &o.candle {
        let mut c = Command::new(bin);
        c.args(peer_args(o, dtype, repeats));
        res.push(("candle", run_peer(c, "candle", dtype)));
    }
    res
}

/// The commands that run the peers by hand on the same checkpoint.
pub(crate) fn commands(o: &Opts, repeats: usize) -> Vec<String> {
    let dtypes = o.dtypes.join(",");
    let args = peer_args(o, &dtypes, repeats).join(" ");
    vec![
        "W12 peers on the same checkpoint (each prints `W12PEER <system> <dtype> …` lines):".into(),
        format!("  OMP_NUM_THREADS=2 python {TORCH_SCRIPT} {args}"),
        format!(
            "  CARGO_TARGET_DIR=target/candle cargo run --release --manifest-path {CANDLE_CRATE}/Cargo.toml -- {args}"
        ),
        "  or in this run: --w12-python PATH/TO/python --w12-candle target/candle/release/candle-w12"
            .into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_line_parses_into_rates_and_tokens() {
        let out =
            "noise\nW12PEER torch f32 prefill_tok_s=512.5,500 decode_tok_s=31.25 tokens=5,6,7\n";
        let m = parse_line(out, "torch", "f32").unwrap();
        assert_eq!(m.prefill_tok_s, [512.5, 500.0]);
        assert_eq!(m.decode_tok_s, [31.25]);
        assert_eq!(m.tokens, [5, 6, 7]);
        let e = parse_line(out, "torch", "bf16").err().unwrap();
        assert!(e.contains("W12PEER torch bf16"), "{e}");
        let bad = "W12PEER candle f32 prefill_tok_s=x decode_tok_s=1 tokens=1";
        assert!(parse_line(bad, "candle", "f32").is_err());
    }
}
