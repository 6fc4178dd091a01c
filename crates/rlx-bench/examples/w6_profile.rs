//! W6 broken down: where the time of one compiled training step goes.
//!
//! `cargo run --release -p rlx-bench --example w6_profile [-- --explain] [-- --steps N]`
//!
//! Times (median of N steps, after warm-up): the full `train_step_all` (fused and host
//! path), the forward alone, and forward + backward alone (`value_and_grad_all`, jitted),
//! so the update's and the step machinery's shares can be read off by difference.

use rlx_tensor::{AdamW, DType, Func, Optimizer, Shape, Unfused};
use std::time::Instant;

const MLP: [usize; 4] = [784, 512, 512, 10];
const BATCH: usize = 256;

fn func() -> Func {
    let f32s = |d: &[usize]| Shape::new(d, DType::F32);
    Func::new("w6", |s| {
        let x = s.input("x", f32s(&[BATCH, MLP[0]]));
        let y = s.input("y", f32s(&[BATCH]));
        let mut h = x;
        for (i, d) in MLP.windows(2).enumerate() {
            let w = s.param(format!("w{}", i + 1), f32s(&[d[0], d[1]]));
            let b = s.param(format!("b{}", i + 1), f32s(&[d[1]]));
            h = &h.matmul(&w) + &b;
            if i + 2 < MLP.len() {
                h = h.gelu_approx();
            }
        }
        h.softmax_cross_entropy_with_logits(&y).mean_all()
    })
    .init_randn(1, 0.05)
}

/// (median, min) milliseconds over `steps` calls after 3 warm-up calls.
fn median_ms(mut f: impl FnMut(), steps: usize) -> (f64, f64) {
    for _ in 0..3 {
        f();
    }
    let mut t: Vec<f64> = (0..steps)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    t.sort_by(f64::total_cmp);
    (t[t.len() / 2], t[0])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let steps = args
        .iter()
        .position(|a| a == "--steps")
        .map_or(41, |i| args[i + 1].parse().expect("--steps N"));
    let x: Vec<f32> = (0..BATCH * MLP[0])
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    let y: Vec<f32> = (0..BATCH).map(|i| (i * 7 % 10) as f32).collect();
    let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
    let f0 = func();
    if args.iter().any(|a| a == "--explain") {
        println!(
            "{}",
            f0.explain_train_step(&mut AdamW::new(1e-3), &["w1", "b1", "w2", "b2", "w3", "b3"])
        );
    }
    if let Some(i) = args.iter().position(|a| a == "--only") {
        // One configuration for `steps` steps (for perf record).
        let mut opt: Box<dyn Optimizer> = match args[i + 1].as_str() {
            "fused64" => Box::new(AdamW::new(1e-3)),
            "fused32" => Box::new(AdamW::new(1e-3).with_f32_math(true)),
            "host64" => Box::new(Unfused(AdamW::new(1e-3))),
            "host32" => Box::new(Unfused(AdamW::new(1e-3).with_f32_math(true))),
            other => panic!("--only fused64|fused32|host64|host32, not {other}"),
        };
        let mut f = f0.clone();
        let t = median_ms(|| f = f.train_step_all(opt.as_mut(), &inputs).0, steps);
        println!("{} {:8.2} ms  (min {:.2})", args[i + 1], t.0, t.1);
        return;
    }
    let fwd = f0.jit();
    let vg = f0.value_and_grad_all().jit();
    let t_fwd = median_ms(|| drop(fwd.run(&inputs)), steps);
    let t_vg = median_ms(|| drop(vg.run(&inputs)), steps);
    let row = |name: &str, opt: &mut dyn Optimizer| {
        let mut f = f0.clone();
        let t = median_ms(
            || {
                f = f.train_step_all(opt, &inputs).0;
            },
            steps,
        );
        println!("{name:<34} {:8.2} ms  (min {:.2})", t.0, t.1);
    };
    println!(
        "{:<34} {:8.2} ms  (min {:.2})",
        "forward (jit)", t_fwd.0, t_fwd.1
    );
    println!(
        "{:<34} {:8.2} ms  (min {:.2})",
        "forward + backward (jit)", t_vg.0, t_vg.1
    );
    row("train_step fused, AdamW f64 math", &mut AdamW::new(1e-3));
    row(
        "train_step fused, AdamW f32 math",
        &mut AdamW::new(1e-3).with_f32_math(true),
    );
    row(
        "train_step host,  AdamW f64 math",
        &mut Unfused(AdamW::new(1e-3)),
    );
    row(
        "train_step host,  AdamW f32 math",
        &mut Unfused(AdamW::new(1e-3).with_f32_math(true)),
    );
}
