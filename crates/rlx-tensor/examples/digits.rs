//! Train an MLP on the 8×8 handwritten digits (1797 images, 10 classes) and report
//! held-out accuracy.
//!
//! Weights come from an `rlx_tensor::init` rule set (Kaiming for the GELU layers, zero
//! biases); the data is shuffled and batched with the seeded host `Rng`, so every run
//! prints the same numbers.
//!
//! `cargo run --release -p rlx-tensor --features optim --example digits`

use rlx_tensor::init::{self, Init, Rng};
use rlx_tensor::{AdamW, Func, LrSchedule, Optimizer, shape};
use std::io::Write;
use std::time::Instant;

/// The data ships inside the package (examples/data/digits, with its provenance).
const RAW: &[u8] = include_bytes!("data/digits/digits.u8");
const PIXELS: usize = 64;
const CLASSES: usize = 10;
const HIDDEN: usize = 128;

struct Split {
    x: Vec<f32>,
    y: Vec<f32>,
}

impl Split {
    fn len(&self) -> usize {
        self.y.len()
    }
}

/// Parse the flat record layout (64 pixels 0..=16, then the label), shuffle with a fixed
/// seed and hold out 20% as the test split.
fn load(seed: u64) -> (Split, Split) {
    let records: Vec<&[u8]> = RAW.chunks_exact(PIXELS + 1).collect();
    assert_eq!(
        records.len(),
        1797,
        "examples/data/digits/digits.u8 is damaged"
    );
    let order = Rng::new(seed).permutation(records.len());
    let n_test = records.len() / 5;
    let split = |idx: &[usize]| Split {
        x: idx
            .iter()
            .flat_map(|&i| records[i][..PIXELS].iter().map(|&p| p as f32 / 16.0))
            .collect(),
        y: idx.iter().map(|&i| records[i][PIXELS] as f32).collect(),
    };
    let (test, train) = order.split_at(n_test);
    (split(train), split(test))
}

fn mlp(s: &mut rlx_tensor::GraphScope) -> (rlx_tensor::Tensor, rlx_tensor::Tensor) {
    let x = s.input("x", shape![?, PIXELS]);
    let w1 = s.param("w1", shape![HIDDEN, PIXELS]);
    let b1 = s.param("b1", shape![HIDDEN]);
    let w2 = s.param("w2", shape![CLASSES, HIDDEN]);
    let b2 = s.param("b2", shape![CLASSES]);
    let h = x.linear(&w1, &b1).gelu();
    (x, h.linear(&w2, &b2))
}

fn accuracy(predict: &Func, params: &Func, data: &Split) -> f32 {
    let mut f = predict.clone();
    for (name, value) in params.param_bindings() {
        f = f.with_param(name.as_str(), value.clone());
    }
    let pred = f.run(&[("x", &data.x)]).remove(0);
    let correct = pred.iter().zip(&data.y).filter(|(p, y)| **p == **y).count();
    correct as f32 / data.len() as f32
}

fn main() {
    let (train, test) = load(2024);
    println!(
        "digits: {} training and {} held-out images of 8×8 pixels, {CLASSES} classes",
        train.len(),
        test.len()
    );

    let loss_fn = Func::new("digits_loss", |s| {
        let (_, logits) = mlp(s);
        let y = s.input("y", shape![?]);
        logits.softmax_cross_entropy_with_logits(&y).mean_all()
    });
    let predict = Func::new("digits_predict", |s| {
        let (_, logits) = mlp(s);
        logits.argmax(1, false)
    });
    // Biases (rank 1) start at zero; [out, in] weights get Kaiming-uniform draws, whose
    // fan_in is the `in` axis.
    let rules = Init::new(7)
        .rule(|_, shape| shape.len() < 2, init::zeros())
        .default(init::kaiming_uniform());
    let mut model = loss_fn.init_params(rules.to_fn());

    let epochs = 40;
    let batch = 64;
    let steps_per_epoch = train.len().div_ceil(batch);
    let total = epochs * steps_per_epoch;
    let schedule = LrSchedule::WarmupCosine {
        base: 3e-3,
        min: 1e-4,
        warmup: steps_per_epoch,
        total,
    };
    let mut opt = AdamW::new(3e-3);
    let mut rng = Rng::new(2025);
    let start = Instant::now();
    let mut step = 0;
    for epoch in 1..=epochs {
        let t0 = Instant::now();
        let mut loss_sum = 0.0;
        // A fresh shuffle every epoch, cut into mini-batches of example indices.
        for idx in rng.batches(train.len(), batch) {
            let x: Vec<f32> = idx
                .iter()
                .flat_map(|&i| &train.x[i * PIXELS..(i + 1) * PIXELS])
                .copied()
                .collect();
            let y: Vec<f32> = idx.iter().map(|&i| train.y[i]).collect();
            let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
            let (next, loss) =
                model.train_step_all_at(&mut opt as &mut dyn Optimizer, &schedule, step, &inputs);
            model = next;
            loss_sum += loss[0];
            step += 1;
        }
        let secs = t0.elapsed().as_secs_f32();
        if epoch % 5 == 0 || epoch == 1 {
            let acc = accuracy(&predict, &model, &train);
            let bar = "#".repeat(epoch * 30 / epochs) + &".".repeat(30 - epoch * 30 / epochs);
            println!(
                "[{bar}] epoch {epoch:>2}/{epochs}  loss {:.4}  train acc {:.1}%  lr {:.2e}  {:.0} steps/s",
                loss_sum / steps_per_epoch as f32,
                acc * 100.0,
                schedule.lr_at(step.saturating_sub(1)),
                steps_per_epoch as f32 / secs
            );
            std::io::stdout().flush().ok();
        }
    }
    let test_acc = accuracy(&predict, &model, &test);
    println!(
        "trained {total} steps in {:.1}s; held-out test accuracy: {:.2}% ({} images)",
        start.elapsed().as_secs_f32(),
        test_acc * 100.0,
        test.len()
    );
}
