//! W11 broken down: where the time of one compiled GPT training step goes.
//!
//! `cargo run --release -p rlx-bench --example w11_profile [-- --layers 4] [-- --steps 20]
//! [-- --top 15] [-- --explain] [-- --flat] [-- --bf16]`
//!
//! Runs the W11 model (`rlx_bench::gpt`, `--layers` blocks) through `Func::train_step_all`
//! with `RLX_PROFILE=1` (set here when unset), then reads the compiled step's `explain()`
//! (kernels, fused ops, per-kernel times) and prints:
//! - the step time, and the forward / forward+backward programs alone (jitted);
//! - per kernel kind: kernels, µs per step, share;
//! - the slowest `--top` kernels with the ops fused into each;
//! - the LayerNorm kernels and the adds they recompute in their prologues;
//! - the cross-entropy kernels and the kernels that take `narrow` apart (its backward);
//! - from the value-and-grad program (compiled here with the CPU backend's options):
//!   how many times each residual-stream add is computed across kernels.
//!
//! `--explain` also prints the whole `explain()` text; `--flat` profiles the same model with
//! `[B·T, d]` activations (`gpt::Layout::Flat`) instead of `[B, T, d]`; `--bf16` the model
//! with bf16 matmuls (`gpt::Precision::Bf16Matmuls`).

use rlx_bench::gpt::{self, GptConfig, TokenStream};
use std::collections::BTreeMap;
use std::time::Instant;

/// One kernel as `explain()` describes it.
#[derive(Debug, Default, Clone)]
struct Kernel {
    label: String,
    space: String,
    ops: Vec<String>,
    us: f64,
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .map_or(default, |i| args[i + 1].parse().expect("a count"))
}

fn median_ms(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2] * 1e3
}

/// Kernels of an `explain()` text, with the µs/run of its `RLX_PROFILE` table.
fn parse(explain: &str) -> Vec<Kernel> {
    let mut ks: BTreeMap<usize, Kernel> = BTreeMap::new();
    for line in explain.lines() {
        let Some(rest) = line.trim_start().strip_prefix("kernel ") else {
            continue;
        };
        let Some((k, body)) = rest.split_once(": ") else {
            continue;
        };
        let Ok(k) = k.trim().parse::<usize>() else {
            continue;
        };
        if let Some((us, _)) = body.split_once(" µs/run") {
            ks.entry(k).or_default().us = us.trim().parse().unwrap_or(0.0);
        } else if let Some((label, tail)) = body.split_once(" over ") {
            let e = ks.entry(k).or_default();
            e.label = label.to_string();
            e.space = tail.split(';').next().unwrap_or("").to_string();
            if let Some(i) = tail.find("op(s) [") {
                let names = &tail[i + 7..];
                let names = &names[..names.find("]; ").unwrap_or(names.len())];
                e.ops = names.split(", ").map(String::from).collect();
            }
        }
    }
    ks.into_values().collect()
}

/// `add×8, layer_norm, …`: op names with repeat counts, in first-seen order.
fn summary(ops: &[String], max: usize) -> String {
    let mut order: Vec<(&str, usize)> = Vec::new();
    for o in ops {
        match order.iter_mut().find(|(n, _)| n == o) {
            Some((_, c)) => *c += 1,
            None => order.push((o, 1)),
        }
    }
    let mut parts: Vec<String> = order
        .iter()
        .take(max)
        .map(|&(n, c)| if c > 1 { format!("{n}×{c}") } else { n.into() })
        .collect();
    if order.len() > max {
        parts.push(format!("… {} more kinds", order.len() - max));
    }
    parts.join(", ")
}

fn count(ops: &[String], name: &str) -> usize {
    ops.iter().filter(|o| *o == name).count()
}

fn main() {
    if std::env::var_os("RLX_PROFILE").is_none() {
        // SAFETY: first statement of main, before this program starts any thread (the
        // rayon pools and the executor start on the first compiled run, later).
        unsafe { std::env::set_var("RLX_PROFILE", "1") };
    }
    let args: Vec<String> = std::env::args().collect();
    let layers = arg(&args, "--layers", 4);
    let steps = arg(&args, "--steps", 20);
    let top = arg(&args, "--top", 15);
    let c = GptConfig::w11(layers);
    let layout = if args.iter().any(|a| a == "--flat") {
        gpt::Layout::Flat
    } else {
        gpt::Layout::Batched
    };
    let prec = if args.iter().any(|a| a == "--bf16") {
        gpt::Precision::Bf16Matmuls
    } else {
        gpt::Precision::F32
    };
    let f0 = gpt::model_in(&c, layout, prec, 0);
    let wrt_owned = f0.param_names();
    let wrt: Vec<&str> = wrt_owned.iter().map(String::as_str).collect();

    // The training step (the first call compiles and is not timed).
    let mut data = TokenStream::new(&c, 11);
    let mut opt = gpt::adamw();
    let run = gpt::train(f0.clone(), &mut opt, &mut data, steps + 1);
    let step_ms = median_ms(run.step_s[1..].to_vec());
    let explain = run.model.explain_train_step(&mut opt, &wrt);
    if args.iter().any(|a| a == "--explain") {
        println!("{explain}\n");
    }
    let ks = parse(&explain);
    let total_us: f64 = ks.iter().map(|k| k.us).sum();

    // Forward and forward + backward alone, for the split.
    let (idx, tgt) = data.next_batch();
    let inputs: [(&str, &[f32]); 2] = [("idx", &idx), ("tgt", &tgt)];
    let time = |j: &rlx_tensor::Jitted| {
        drop(j.run(&inputs));
        median_ms(
            (0..steps)
                .map(|_| {
                    let t = Instant::now();
                    drop(j.run(&inputs));
                    t.elapsed().as_secs_f64()
                })
                .collect(),
        )
    };
    let fwd_ms = time(&f0.jit());
    let vg_ms = time(&f0.value_and_grad_all().jit());

    println!(
        "W11 profile: {layers} blocks ({layout:?} activations), {:.2} M params, {steps} timed steps; load average {}",
        c.param_count() as f64 / 1e6,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "step {step_ms:.2} ms (median of the timed steps); kernels {:.2} ms (profile mean over every run, the first included) leaves {:.2} ms outside kernels; forward alone {fwd_ms:.2} ms, forward+backward {vg_ms:.2} ms",
        total_us / 1e3,
        step_ms - total_us / 1e3
    );
    println!(
        "losses {:.4} -> {:.4}; {} kernels",
        run.losses[0],
        run.losses[steps],
        ks.len()
    );

    // Per kernel kind.
    let mut kinds: BTreeMap<&str, (usize, f64, usize)> = BTreeMap::new();
    for k in &ks {
        let e = kinds.entry(&k.label).or_default();
        e.0 += 1;
        e.1 += k.us;
        e.2 += k.ops.len();
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    println!("\nper kernel kind:            kernels    ms/step   share   fused ops");
    for (kind, (n, us, ops)) in &kinds {
        println!(
            "  {kind:<26} {n:>6} {:>10.3} {:>6.1} % {ops:>8}",
            us / 1e3,
            100.0 * us / total_us
        );
    }

    // Per kind and iteration space: which shapes the time goes to (e.g. the attention
    // backward's [B, H, T, T] kernels, the per-batch weight-gradient products).
    let mut by_space: BTreeMap<(String, String), (usize, f64)> = BTreeMap::new();
    for k in &ks {
        let e = by_space
            .entry((k.label.clone(), k.space.clone()))
            .or_default();
        e.0 += 1;
        e.1 += k.us;
    }
    let mut by_space: Vec<_> = by_space.into_iter().collect();
    by_space.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
    println!(
        "
per kernel kind and iteration space (top {top}):"
    );
    for ((kind, space), (n, us)) in by_space.iter().take(top) {
        println!(
            "  {kind:<26} over {space:<32} {n:>4} kernels {:>9.3} ms {:>5.1} %",
            us / 1e3,
            100.0 * us / total_us
        );
    }

    let mut order: Vec<usize> = (0..ks.len()).collect();
    order.sort_by(|&a, &b| ks[b].us.total_cmp(&ks[a].us));
    println!("\ntop {top} kernels:");
    for &i in order.iter().take(top) {
        let k = &ks[i];
        println!(
            "  kernel {i:>3} {:>9.1} µs {:>5.1} %  {} over {} ({} ops: {})",
            k.us,
            100.0 * k.us / total_us,
            k.label,
            k.space,
            k.ops.len(),
            summary(&k.ops, 8)
        );
    }

    // The selected kernels' total; each one listed when `list` (the slowest 8 otherwise).
    let report = |title: &str, list: bool, pick: &dyn Fn(&Kernel) -> bool| {
        let sel: Vec<usize> = (0..ks.len()).filter(|&i| pick(&ks[i])).collect();
        let us: f64 = sel.iter().map(|&i| ks[i].us).sum();
        let adds: usize = sel.iter().map(|&i| count(&ks[i].ops, "add")).sum();
        println!(
            "\n{title}: {} kernels, {:.3} ms/step ({:.1} %), {adds} adds fused into them",
            sel.len(),
            us / 1e3,
            100.0 * us / total_us
        );
        let mut shown = sel.clone();
        if !list {
            shown.sort_by(|&a, &b| ks[b].us.total_cmp(&ks[a].us));
            shown.truncate(8);
        }
        for &i in &shown {
            let k = &ks[i];
            println!(
                "  kernel {i:>3} {:>9.1} µs  {} over {}: {} adds; {}",
                k.us,
                k.label,
                k.space,
                count(&k.ops, "add"),
                summary(&k.ops, 6)
            );
        }
    };
    report("LayerNorm kernels (forward and backward)", true, &|k| {
        k.label.contains("layer_norm") || k.ops.iter().any(|o| o.contains("layer_norm"))
    });
    report("cross-entropy kernels", true, &|k| {
        k.label.contains("cross_entropy") || k.ops.iter().any(|o| o.contains("cross_entropy"))
    });
    report(
        "kernels with narrow / pad / concat (the qkv split and its backward)",
        true,
        &|k| {
            k.ops
                .iter()
                .any(|o| o == "narrow" || o == "pad" || o == "concat" || o == "slice")
        },
    );
    report(
        "kernels applying the AdamW update (they fuse sqrt; most also reduce the gradient), slowest 8",
        false,
        &|k| k.ops.iter().any(|o| o == "sqrt"),
    );
    residual_adds(&c, &f0);
}

/// From the value-and-grad program compiled here with the CPU backend's options: each add
/// of two full `[.., d]` activations (the residual stream and its gradient's sums), and in
/// how many kernels it is computed.
fn residual_adds(c: &GptConfig, f: &rlx_tensor::Func) {
    use rlx_ir::{BinaryOp, Op};
    let vg = f.value_and_grad_all();
    let opts = rlx_cpu::compile_options();
    // The pipeline of `rlx_compile::compile`, so the kernels' node ids can be looked up.
    let g = rlx_compile::simplify::simplify(vg.graph());
    let g = rlx_compile::decompose::decompose(&g, &opts.keep_whole).expect("decompose");
    let g = rlx_compile::simplify::simplify(&g);
    let p = rlx_compile::compile(vg.graph(), &opts).expect("compile");
    let consistent = p.graph_nodes == g.len()
        && p.kernels.iter().all(|k| {
            k.fused
                .iter()
                .zip(&k.fused_names)
                .all(|(&n, name)| g.node(n).op.name() == *name)
        });
    if !consistent {
        println!(
            "\nresidual adds: skipped (the compile pipeline no longer matches simplify → decompose → simplify)"
        );
        return;
    }
    let full = |n: rlx_ir::NodeId| {
        g.node(n)
            .shape
            .static_dims()
            .is_some_and(|d| d.iter().product::<usize>() == c.tokens() * c.d_model)
    };
    let mut times: BTreeMap<usize, usize> = BTreeMap::new();
    for k in &p.kernels {
        for &n in &k.fused {
            let node = g.node(n);
            if matches!(node.op, Op::Binary(BinaryOp::Add))
                && full(n)
                && node.inputs.iter().all(|&i| full(i))
            {
                *times.entry(n.index()).or_default() += 1;
            }
        }
    }
    let total: usize = times.values().sum();
    let max = times.values().copied().max().unwrap_or(0);
    let mut hist: BTreeMap<usize, usize> = BTreeMap::new();
    for &t in times.values() {
        *hist.entry(t).or_default() += 1;
    }
    println!(
        "\nresidual-stream adds (value-and-grad program, {} kernels): {} distinct adds of two [{}×{}] values, computed {total} times (max {max} times one add); histogram (times computed: adds) {:?}",
        p.kernels.len(),
        times.len(),
        c.tokens(),
        c.d_model,
        hist
    );
}
