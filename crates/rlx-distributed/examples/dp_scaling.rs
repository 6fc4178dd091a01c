//! Step time of data-parallel training against one process, on rlx-bench's W6 (MLP
//! 784-512-512-10, global batch 256, AdamW) and W11 (4-block GPT, global batch 8 × 128
//! tokens, PyTorch-style AdamW) workloads.
//!
//! Every rank trains on `global batch / ranks` examples per step; the thread count comes
//! from `RLX_NUM_THREADS`. Rank 0 prints the median and minimum step time over the timed
//! steps (after 3 warm-up steps). With one rank it also times plain `train_step_all` on
//! the whole batch, the single-process baseline.
//!
//! ```text
//! cargo build --release -p rlx-distributed --features mpi --example dp_scaling
//! RLX_NUM_THREADS=2 mpirun -np 1 -x RLX_NUM_THREADS target/release/examples/dp_scaling w6 20
//! RLX_NUM_THREADS=1 mpirun -np 2 -x RLX_NUM_THREADS target/release/examples/dp_scaling w6 20
//! ```

use rlx_bench::gpt::{self, GptConfig, TokenStream};
use rlx_bench::inputs::{MLP, W6_BATCH, mlp_inputs, mlp_params};
use rlx_distributed::{Communicator, DataParallel, MpiComm, shard_range};
use rlx_tensor::{AdamW, DType, Func, Optimizer, Shape};
use std::time::Instant;

const WARMUP: usize = 3;

/// W6's loss on `batch` rows, params from rlx-bench's seed.
fn w6(batch: usize) -> Func {
    let f = Func::new("w6", |s| {
        let mut h = s.input("x", Shape::new(&[batch, MLP[0]], DType::F32));
        let y = s.input("y", Shape::new(&[batch], DType::F32));
        for (i, d) in MLP.windows(2).enumerate() {
            let w = s.param(format!("w{}", i + 1), Shape::new(&[d[0], d[1]], DType::F32));
            let b = s.param(format!("b{}", i + 1), Shape::new(&[d[1]], DType::F32));
            h = &h.matmul(&w) + &b;
            if i + 2 < MLP.len() {
                h = h.gelu_approx();
            }
        }
        h.softmax_cross_entropy_with_logits(&y).mean_all()
    });
    let mut f = f;
    for (i, p) in mlp_params(1).into_iter().enumerate() {
        let kind = if i % 2 == 0 { "w" } else { "b" };
        f = f.with_param(format!("{kind}{}", i / 2 + 1), p);
    }
    f
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `steps` calls of `step` after the warm-up; returns (median, min) in ms.
fn time(steps: usize, mut step: impl FnMut()) -> (f64, f64) {
    for _ in 0..WARMUP {
        step();
    }
    let mut ms: Vec<f64> = (0..steps)
        .map(|_| {
            let t = Instant::now();
            step();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let min = ms.iter().copied().fold(f64::INFINITY, f64::min);
    (median(&mut ms), min)
}

/// Named f32 inputs of a model, as `Func::run` takes them.
type NamedInputs = Vec<(String, Vec<f32>)>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let workload = args.get(1).map_or("w6", String::as_str).to_string();
    let steps: usize = args
        .get(2)
        .map_or(20, |s| s.parse().expect("steps: a number"));
    let comm = MpiComm::init().unwrap_or_else(|e| panic!("{e}"));
    let (rank, size) = (comm.rank(), comm.size());
    let threads = std::env::var("RLX_NUM_THREADS").unwrap_or_else(|_| "default".into());
    // (model for this rank's shard, whole-batch model, inputs of the shard, whole inputs)
    let (local, whole, shard, all): (Func, Func, NamedInputs, NamedInputs) = match workload.as_str()
    {
        "w6" => {
            let global = W6_BATCH;
            let r = shard_range(global, rank, size);
            let (x, y) = mlp_inputs(global, 2);
            let shard = vec![
                ("x".into(), x[r.start * MLP[0]..r.end * MLP[0]].to_vec()),
                ("y".into(), y[r.clone()].to_vec()),
            ];
            (
                w6(r.len()),
                w6(global),
                shard,
                vec![("x".into(), x), ("y".into(), y)],
            )
        }
        "w11" => {
            let c = GptConfig::w11(4);
            let r = shard_range(c.batch, rank, size);
            let local_c = GptConfig {
                batch: r.len(),
                ..c
            };
            let (idx, tgt) = TokenStream::new(&c, 3).next_batch();
            let t = c.seq;
            let shard = vec![
                ("idx".into(), idx[r.start * t..r.end * t].to_vec()),
                ("tgt".into(), tgt[r.start * t..r.end * t].to_vec()),
            ];
            (
                gpt::model(&local_c, 1),
                gpt::model(&c, 1),
                shard,
                vec![("idx".into(), idx), ("tgt".into(), tgt)],
            )
        }
        other => panic!("unknown workload {other}; use w6 or w11"),
    };
    let new_opt = || -> Box<dyn Optimizer> {
        if workload == "w6" {
            Box::new(AdamW::new(1e-3).with_f32_math(true))
        } else {
            Box::new(gpt::adamw())
        }
    };
    let (dp, mut f) = DataParallel::new(comm, &local).unwrap_or_else(|e| panic!("{e}"));
    let inputs: Vec<(&str, &[f32])> = shard
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_slice()))
        .collect();
    let mut opt = new_opt();
    let (med, min) = time(steps, || {
        f = dp
            .step(&f, &mut *opt, &inputs)
            .unwrap_or_else(|e| panic!("{e}"))
            .0;
    });
    if rank == 0 {
        println!(
            "{workload}: {size} rank(s) x {threads} thread(s), DataParallel::step: median {med:.2} ms, min {min:.2} ms over {steps} steps"
        );
    }
    if size == 1 {
        let inputs: Vec<(&str, &[f32])> = all
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        let mut g = whole;
        let mut opt = new_opt();
        let (med, min) = time(steps, || {
            g = g.train_step_all(&mut *opt, &inputs).0;
        });
        println!(
            "{workload}: 1 rank x {threads} thread(s), train_step_all (one program): median {med:.2} ms, min {min:.2} ms over {steps} steps"
        );
    }
}
