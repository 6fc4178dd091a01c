//! Data-parallel training of an MLP on the 8×8 handwritten digits (1797 images, 10
//! classes), then the held-out accuracy.
//!
//! Every rank reads the same data, shuffles it with the same seed and trains on its
//! shard of each global batch of 64 images; gradients are averaged over MPI, so every
//! rank holds the same model. Rank 0 prints progress and the accuracy.
//!
//! ```text
//! cargo build -p rlx-distributed --features mpi --example digits_dp
//! mpirun -np 2 target/debug/examples/digits_dp
//! ```
//!
//! (As root add `--allow-run-as-root`; with more ranks than cores add `--oversubscribe`.)

use rlx_distributed::{Communicator, DataParallel, MpiComm, shard_range};
use rlx_tensor::init::{self, Init, Rng};
use rlx_tensor::{AdamW, Func, GraphScope, LrSchedule, Tensor, shape};
use std::time::Instant;

const PIXELS: usize = 64;
const CLASSES: usize = 10;
const HIDDEN: usize = 128;
const GLOBAL_BATCH: usize = 64;
const EPOCHS: usize = 40;

/// The digits shipped with rlx-tensor's examples: 1797 records of 64 pixels (0..=16)
/// followed by the label.
fn read_records() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../rlx-tensor/examples/data/digits/digits.u8");
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

struct Split {
    x: Vec<f32>,
    y: Vec<f32>,
}

/// Shuffle with a fixed seed (the same on every rank) and hold out a fifth for testing.
fn load(seed: u64) -> (Split, Split) {
    let raw = read_records();
    let records: Vec<&[u8]> = raw.chunks_exact(PIXELS + 1).collect();
    assert_eq!(records.len(), 1797, "digits.u8 is damaged");
    let order = Rng::new(seed).permutation(records.len());
    let split = |idx: &[usize]| Split {
        x: idx
            .iter()
            .flat_map(|&i| records[i][..PIXELS].iter().map(|&p| p as f32 / 16.0))
            .collect(),
        y: idx.iter().map(|&i| records[i][PIXELS] as f32).collect(),
    };
    let (test, train) = order.split_at(records.len() / 5);
    (split(train), split(test))
}

fn logits(s: &mut GraphScope) -> Tensor {
    let x = s.input("x", shape![?, PIXELS]);
    let w1 = s.param("w1", shape![HIDDEN, PIXELS]);
    let b1 = s.param("b1", shape![HIDDEN]);
    let w2 = s.param("w2", shape![CLASSES, HIDDEN]);
    let b2 = s.param("b2", shape![CLASSES]);
    x.linear(&w1, &b1).gelu().linear(&w2, &b2)
}

fn accuracy(model: &Func, data: &Split) -> f64 {
    let mut predict = Func::new("digits_predict", |s| logits(s).argmax(1, false));
    for (name, value) in model.param_bindings() {
        predict = predict.with_param(name.as_str(), value.clone());
    }
    let pred = predict.run(&[("x", &data.x)]).remove(0);
    let right = pred.iter().zip(&data.y).filter(|(p, y)| p == y).count();
    right as f64 / data.y.len() as f64
}

fn main() {
    let comm = MpiComm::init().unwrap_or_else(|e| panic!("{e}"));
    let (rank, size) = (comm.rank(), comm.size());
    assert!(
        GLOBAL_BATCH.is_multiple_of(size),
        "the global batch of {GLOBAL_BATCH} must split evenly over {size} ranks"
    );
    let (train, test) = load(2024);
    let loss_fn = Func::new("digits_loss", |s| {
        let y = s.input("y", shape![?]);
        logits(s).softmax_cross_entropy_with_logits(&y).mean_all()
    });
    // Any rank's init would do: DataParallel::new copies rank 0's values to every rank.
    let rules = Init::new(7)
        .rule(|_, shape| shape.len() < 2, init::zeros())
        .default(init::kaiming_uniform());
    let (dp, mut model) = DataParallel::new(comm, &loss_fn.init_params(rules.to_fn()))
        .unwrap_or_else(|e| panic!("{e}"));

    // Whole global batches only, so every shard has GLOBAL_BATCH / size images.
    let steps_per_epoch = train.y.len() / GLOBAL_BATCH;
    let total = EPOCHS * steps_per_epoch;
    let schedule = LrSchedule::WarmupCosine {
        base: 3e-3,
        min: 1e-4,
        warmup: steps_per_epoch,
        total,
    };
    let mut opt = AdamW::new(3e-3);
    let mut rng = Rng::new(2025);
    if rank == 0 {
        println!(
            "digits: {} training and {} held-out images; {size} rank(s) x {} images per global batch of {GLOBAL_BATCH}",
            train.y.len(),
            test.y.len(),
            GLOBAL_BATCH / size
        );
    }
    let start = Instant::now();
    let mut step = 0;
    for epoch in 1..=EPOCHS {
        let mut loss_sum = 0.0;
        for idx in rng
            .batches(train.y.len(), GLOBAL_BATCH)
            .take(steps_per_epoch)
        {
            let mine = &idx[shard_range(idx.len(), rank, size)];
            let x: Vec<f32> = mine
                .iter()
                .flat_map(|&i| &train.x[i * PIXELS..(i + 1) * PIXELS])
                .copied()
                .collect();
            let y: Vec<f32> = mine.iter().map(|&i| train.y[i]).collect();
            let (next, loss) = dp
                .step_at(&model, &mut opt, &schedule, step, &[("x", &x), ("y", &y)])
                .unwrap_or_else(|e| panic!("{e}"));
            model = next;
            loss_sum += loss;
            step += 1;
        }
        if rank == 0 && (epoch == 1 || epoch % 10 == 0) {
            println!(
                "epoch {epoch:>2}/{EPOCHS}  loss {:.4}  {:.0} steps/s",
                loss_sum / steps_per_epoch as f32,
                step as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    dp.check_in_sync(&model).unwrap_or_else(|e| panic!("{e}"));
    if rank == 0 {
        println!(
            "trained {total} steps on {size} rank(s) in {:.1}s; held-out test accuracy: {:.2}% ({} images)",
            start.elapsed().as_secs_f64(),
            accuracy(&model, &test) * 100.0,
            test.y.len()
        );
    }
}
