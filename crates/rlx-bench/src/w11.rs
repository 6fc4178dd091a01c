//! W11: one training step of the small GPT of `shared/bench/transformer.py`
//! ([`rlx_bench::gpt`]) through `Func::train_step_all`, timed like the peers' script: a new
//! batch each step, `steps` steps, the median over the steps after the first 10 (the first
//! step compiles). Depth variants show how the step grows with the number of blocks.

use crate::report::Row;
#[cfg(feature = "train")]
use crate::timing::{Timing, median};
#[cfg(feature = "train")]
use rlx_bench::gpt::{self, GptConfig, Layout, Precision, TokenStream};

/// Steps excluded from the median (as in `transformer.py`).
#[cfg(feature = "train")]
const UNTIMED: usize = 10;

/// The `W11_gpt_train_step` row (4 blocks; with `flat` also the same model with `[B·T, d]`
/// activations) and one `W11_L{n}` row per depth in `layers`; returns lines to print after
/// the table (the per-block slope).
#[cfg(feature = "train")]
pub fn rows(rows: &mut Vec<Row>, steps: usize, layers: &[usize], flat: bool) -> Vec<String> {
    let mut depths: Vec<usize> = layers.to_vec();
    if !depths.contains(&4) {
        depths.push(4);
    }
    depths.sort_unstable();
    depths.dedup();
    let mut per_depth: Vec<(usize, f64)> = Vec::new();
    for &l in &depths {
        let c = GptConfig::w11(l);
        let (t, note) = measure(&c, Layout::Batched, Precision::F32, steps);
        per_depth.push((l, t.median_s * 1e3));
        if l == 4 {
            rows.push(
                Row::new("W11_gpt_train_step", "rlx", t.clone())
                    .flops(c.step_flops())
                    .steps()
                    .note(&format!(
                        "B=8 T=128 d=256 V=512, {:.2} M params; decay on 2-D params only; {note}",
                        c.param_count() as f64 / 1e6
                    )),
            );
            // Mixed precision: bf16 products, f32 master weights (peer:
            // peers/w11_torch_bf16.py, torch.autocast).
            let (tb, note_b) = measure(&c, Layout::Batched, Precision::Bf16Matmuls, steps);
            let ratio = tb.median_s / t.median_s;
            rows.push(
                Row::new("W11_gpt_train_step", "rlx_bf16", tb)
                    .flops(c.step_flops())
                    .steps()
                    .note(&format!(
                        "bf16 matmuls (x.cast(BF16).matmul(&w.cast(BF16))), f32 weights; \
                         {ratio:.2}x the f32 step; {note_b}"
                    )),
            );
            if flat {
                // The same model with [B·T, d] activations: what the batched form costs.
                let (t2, note2) = measure(&c, Layout::Flat, Precision::F32, steps);
                rows.push(
                    Row::new("W11_gpt_train_step", "rlx_2d_activations", t2)
                        .flops(c.step_flops())
                        .steps()
                        .note(&format!("[B·T, d] between the ops (Layout::Flat); {note2}")),
                );
            }
        }
        if layers.contains(&l) {
            rows.push(
                Row::new(&format!("W11_L{l}"), "rlx", t)
                    .flops(c.step_flops())
                    .steps()
                    .note(&note),
            );
        }
    }
    let mut lines = Vec::new();
    // The marginal cost of a block: the slope between the shallowest and deepest model.
    if let (Some(&(l0, t0)), Some(&(l1, t1))) = (per_depth.first(), per_depth.last())
        && l1 > l0
    {
        let slope = (t1 - t0) / (l1 - l0) as f64;
        let fixed = t0 - slope * l0 as f64;
        let fit: Vec<String> = per_depth
            .iter()
            .map(|&(l, t)| format!("L{l} {t:.1} ms (line {:.1})", fixed + slope * l as f64))
            .collect();
        lines.push(format!(
            "W11 depth: {slope:.2} ms per added block, {fixed:.2} ms outside the blocks; {}",
            fit.join(", ")
        ));
    }
    lines
}

/// `steps` training steps of the model of `c`: the median step time after the first
/// [`UNTIMED`] and a note (per-block time, first and last loss, compile step, path).
#[cfg(feature = "train")]
fn measure(c: &GptConfig, layout: Layout, prec: Precision, steps: usize) -> (Timing, String) {
    let f = gpt::model_in(c, layout, prec, 0);
    let mut opt = gpt::adamw();
    let wrt = f.param_names();
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    let fused = f.explain_train_step(&mut opt, &wrt).starts_with("program");
    let run = gpt::train(f, &mut opt, &mut TokenStream::new(c, 11), steps);
    let t = median(run.step_s[UNTIMED..].to_vec());
    let (first, last) = (run.losses[0], run.losses[steps - 1]);
    let path = if fused { "fused" } else { "HOST path" };
    let note = format!(
        "{} blocks, {:.2} ms/block; loss {first:.4} -> {last:.4} in {steps} steps; first step {:.2} s; {path} AdamW",
        c.layers,
        t.median_s * 1e3 / c.layers as f64,
        run.step_s[0]
    );
    (t, note)
}

#[cfg(not(feature = "train"))]
pub fn rows(_: &mut Vec<Row>, _: usize, _: &[usize], _: bool) -> Vec<String> {
    vec!["note: W11 on rlx skipped: built without feature `train` (Func::train_step_all)".into()]
}
