//! The data-parallel training step.

use crate::bucket::{BucketPlan, DEFAULT_BUCKET_BYTES};
use crate::comm::Communicator;
use crate::error::{DistError, Result};
use rlx_tensor::{Func, LrSchedule, Optimizer};
use std::cell::RefCell;
use std::ops::Range;
use std::path::Path;

/// Data-parallel training of one model over the ranks of a [`Communicator`].
///
/// Built once per training run with [`DataParallel::new`], which checks that every rank
/// declared the same params and copies rank 0's values to all ranks. Then, per step,
/// every rank calls [`DataParallel::step`] with its own shard of the global batch:
///
/// 1. the loss and gradients of the shard are computed by the compiled
///    value-and-gradient program ([`Func::try_loss_and_grads`]);
/// 2. the gradients, in that program's output order, and the loss are packed into
///    buckets of at most the bucket size ([`BucketPlan`], 4 MiB by default), each
///    bucket is summed across ranks by one collective, and divided by the number of
///    ranks;
/// 3. every rank applies the same optimizer step to the same params from the same
///    averaged gradients ([`Func::try_apply_grads`]: the fused compiled update when the
///    optimizer has one), so the ranks stay identical without further communication.
///
/// What overlaps: on the CPU backend the backward is one compiled program whose
/// gradients all arrive when it returns, so no communication overlaps the backward
/// itself. With [`MpiComm`](crate::MpiComm) the reduction of bucket `i` is started
/// (nonblocking) before bucket `i + 1` is packed, so packing overlaps the reductions in
/// flight and all buckets are reduced concurrently; unpacking starts once all are done.
///
/// With equal shards (see [`shard_range`]) of a loss that is a mean over the batch, the
/// averaged gradient is the gradient of the whole global batch, and the returned loss
/// (the mean of the shard losses) is the global batch's loss.
pub struct DataParallel<C: Communicator> {
    comm: C,
    wrt: Vec<String>,
    /// Buckets over the params' gradients and, last, the loss.
    plan: BucketPlan,
    /// The reduction buffers, kept between steps.
    bufs: RefCell<Vec<Vec<f32>>>,
}

impl<C: Communicator> std::fmt::Debug for DataParallel<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataParallel")
            .field("rank", &self.comm.rank())
            .field("size", &self.comm.size())
            .field("params", &self.wrt)
            .field("buckets", &self.plan.buckets().len())
            .finish()
    }
}

impl<C: Communicator> DataParallel<C> {
    /// Prepares data-parallel training of every param of `model`, with buckets of
    /// [`DEFAULT_BUCKET_BYTES`]. Collective: every rank calls it. Checks that every rank's
    /// `model` declares the same params with the same shapes and bound sizes (the error
    /// names the rank and the param), then returns `model` with rank 0's param values.
    pub fn new(comm: C, model: &Func) -> Result<(Self, Func)> {
        Self::with_bucket_bytes(comm, model, DEFAULT_BUCKET_BYTES)
    }

    /// [`DataParallel::new`] with buckets of at most `bucket_bytes` bytes.
    pub fn with_bucket_bytes(comm: C, model: &Func, bucket_bytes: usize) -> Result<(Self, Func)> {
        let rank = comm.rank();
        let wrt = model.param_names();
        let mut sizes = Vec::with_capacity(wrt.len() + 1);
        let mut unbound = Vec::new();
        for name in &wrt {
            match model.param_binding(name) {
                Some(d) => sizes.push(d.len()),
                None => {
                    unbound.push(name.as_str());
                    sizes.push(0);
                }
            }
        }
        // The roster goes out even when this rank has unbound params, so that every rank
        // reaches the same verdict instead of some waiting for the others.
        let roster = roster_text(model);
        let all = comm.all_gather_bytes(roster.as_bytes())?;
        let mut problems = Vec::new();
        if !unbound.is_empty() {
            problems.push(format!(
                "rank {rank}: params {unbound:?} of Func `{}` are not bound; bind every param (with_param, init_params or init_randn) before DataParallel::new",
                model.graph().name
            ));
        }
        problems.extend(compare_rosters(&all));
        if !problems.is_empty() {
            return Err(DistError::new(format!(
                "DataParallel::new: the ranks' models differ: {}; every rank must build the same model (same param names, shapes and bound sizes)",
                problems.join("; ")
            )));
        }
        sizes.push(1); // the loss, reduced with the last bucket
        let plan = BucketPlan::new(&sizes, bucket_bytes)?;
        let dp = DataParallel {
            comm,
            wrt,
            plan,
            bufs: RefCell::new(Vec::new()),
        };
        let synced = dp.broadcast_params(model)?;
        Ok((dp, synced))
    }

    /// The communicator.
    pub fn comm(&self) -> &C {
        &self.comm
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// The trained params, in gradient (and bucket) order.
    pub fn params(&self) -> &[String] {
        &self.wrt
    }

    /// The bucket plan: the params' gradients in order, then the loss (one value).
    pub fn plan(&self) -> &BucketPlan {
        &self.plan
    }

    /// `model` with every param set to rank 0's values. Collective.
    pub fn broadcast_params(&self, model: &Func) -> Result<Func> {
        let n = self.wrt.len();
        let mut values: Vec<Vec<f32>> = self
            .wrt
            .iter()
            .map(|name| {
                model
                    .param_binding(name)
                    .map(<[f32]>::to_vec)
                    .unwrap_or_default()
            })
            .collect();
        values.push(vec![0.0]);
        for (i, len) in self.plan.lens().into_iter().enumerate() {
            let mut buf = vec![0.0; len];
            self.plan.pack(i, &values, &mut buf);
            self.comm.broadcast(&mut buf, 0)?;
            self.plan.unpack(i, &buf, 1.0, &mut values);
        }
        values.truncate(n);
        let mut out = model.clone();
        for (name, data) in self.wrt.iter().zip(values) {
            out = out
                .try_with_param(name.as_str(), data)
                .map_err(|e| self.err("broadcast_params", e))?;
        }
        Ok(out)
    }

    /// One data-parallel training step on this rank's shard `inputs`; returns the updated
    /// model (identical on every rank) and the mean of the ranks' losses. Collective.
    pub fn step(
        &self,
        model: &Func,
        opt: &mut dyn Optimizer,
        inputs: &[(&str, &[f32])],
    ) -> Result<(Func, f32)> {
        let grads = self.averaged_grads(model, inputs)?;
        self.apply(model, opt, grads)
    }

    /// [`DataParallel::step`] with the learning rate of `schedule` at `step`.
    pub fn step_at(
        &self,
        model: &Func,
        opt: &mut dyn Optimizer,
        schedule: &LrSchedule,
        step: usize,
        inputs: &[(&str, &[f32])],
    ) -> Result<(Func, f32)> {
        let grads = self.averaged_grads(model, inputs)?;
        opt.set_lr(schedule.lr_at(step));
        self.apply(model, opt, grads)
    }

    /// The loss and gradients of this rank's shard, averaged over the ranks: returns the
    /// gradients in [`DataParallel::params`] order, followed by the mean loss as a
    /// one-value vector. Collective.
    pub fn averaged_grads(&self, model: &Func, inputs: &[(&str, &[f32])]) -> Result<Vec<Vec<f32>>> {
        let wrt: Vec<&str> = self.wrt.iter().map(String::as_str).collect();
        let (loss, mut grads) = model
            .try_loss_and_grads(&wrt, inputs)
            .map_err(|e| self.err("step", e))?;
        if loss.len() != 1 {
            return Err(DistError::new(format!(
                "DataParallel::step on rank {}: the loss (first output of Func `{}`) has {} values; it must be a scalar (reduce it, e.g. with mean_all)",
                self.rank(),
                model.graph().name,
                loss.len()
            )));
        }
        let sizes: Vec<usize> = grads.iter().map(Vec::len).collect();
        if sizes[..] != self.plan.sizes()[..self.wrt.len()] {
            return Err(DistError::new(format!(
                "DataParallel::step on rank {}: Func `{}` has gradient sizes {sizes:?} but DataParallel was built for {:?}; step the model DataParallel::new returned (or one of its updates)",
                self.rank(),
                model.graph().name,
                &self.plan.sizes()[..self.wrt.len()]
            )));
        }
        grads.push(loss);
        if self.size() == 1 {
            return Ok(grads);
        }
        let lens = self.plan.lens();
        let mut bufs = self.bufs.borrow_mut();
        bufs.resize_with(lens.len(), Vec::new);
        {
            let grads = &grads;
            let mut pack = |i: usize, buf: &mut [f32]| self.plan.pack(i, grads, buf);
            self.comm
                .all_reduce_sum_packed(&lens, &mut pack, &mut bufs)?;
        }
        let n = self.size() as f32;
        for (i, buf) in bufs.iter().enumerate() {
            self.plan.unpack(i, buf, n, &mut grads);
        }
        Ok(grads)
    }

    /// Applies the optimizer step from [`DataParallel::averaged_grads`]'s result.
    fn apply(
        &self,
        model: &Func,
        opt: &mut dyn Optimizer,
        mut grads: Vec<Vec<f32>>,
    ) -> Result<(Func, f32)> {
        let loss = grads.pop().expect("the loss follows the gradients")[0];
        let wrt: Vec<&str> = self.wrt.iter().map(String::as_str).collect();
        let refs: Vec<&[f32]> = grads.iter().map(Vec::as_slice).collect();
        let next = model
            .try_apply_grads(opt, &wrt, &refs)
            .map_err(|e| self.err("step", e))?;
        Ok((next, loss))
    }

    /// Writes `model`'s params and `opt`'s state to `path` from rank 0 only (a
    /// [`Func::save_checkpoint`] file); every rank returns rank 0's outcome. Collective.
    pub fn save_checkpoint(
        &self,
        model: &Func,
        opt: Option<&dyn Optimizer>,
        path: impl AsRef<Path>,
    ) -> Result<()> {
        let mut status = Vec::new();
        if self.rank() == 0
            && let Err(e) = model.save_checkpoint(path.as_ref(), opt)
        {
            status = e.to_string().into_bytes();
        }
        self.comm.broadcast_bytes(&mut status, 0)?;
        if status.is_empty() {
            Ok(())
        } else {
            Err(DistError::new(format!(
                "DataParallel::save_checkpoint: rank 0 could not write {}: {}",
                path.as_ref().display(),
                String::from_utf8_lossy(&status)
            )))
        }
    }

    /// Resumes from a checkpoint written by [`DataParallel::save_checkpoint`] (with any
    /// number of ranks): every rank reads `path` (it must be readable by every rank, e.g.
    /// on a shared file system) into `model` and `opt`. Collective; fails on every rank
    /// when any rank cannot read it, and checks that all ranks then hold the same params.
    pub fn load_checkpoint(
        &self,
        model: &Func,
        opt: Option<&mut dyn Optimizer>,
        path: impl AsRef<Path>,
    ) -> Result<Func> {
        let loaded = model.load_checkpoint(path.as_ref(), opt);
        let mine = match &loaded {
            Ok(_) => Vec::new(),
            Err(e) => e.to_string().into_bytes(),
        };
        let all = self.comm.all_gather_bytes(&mine)?;
        let failed: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
            .map(|(r, s)| format!("rank {r}: {}", String::from_utf8_lossy(s)))
            .collect();
        if !failed.is_empty() {
            return Err(DistError::new(format!(
                "DataParallel::load_checkpoint of {}: {}",
                path.as_ref().display(),
                failed.join("; ")
            )));
        }
        let model = loaded.expect("no rank failed");
        self.check_in_sync(&model)?;
        Ok(model)
    }

    /// `Err` naming the ranks whose params differ from rank 0's (compared bit for bit
    /// through a 64-bit hash of every param). Collective.
    pub fn check_in_sync(&self, model: &Func) -> Result<()> {
        let mut h = Fnv::new();
        for name in &self.wrt {
            h.write(name.as_bytes());
            for v in model.param_binding(name).unwrap_or_default() {
                h.write(&v.to_bits().to_le_bytes());
            }
        }
        let all = self.comm.all_gather_bytes(&h.0.to_le_bytes())?;
        let differ: Vec<usize> = (1..all.len()).filter(|&r| all[r] != all[0]).collect();
        if differ.is_empty() {
            Ok(())
        } else {
            Err(DistError::new(format!(
                "DataParallel::check_in_sync: the params of ranks {differ:?} differ from rank 0's; every rank must step the same model with the same optimizer (or resume from the same checkpoint)"
            )))
        }
    }

    fn err(&self, op: &str, e: rlx_tensor::Error) -> DistError {
        DistError::new(format!("DataParallel::{op} on rank {}: {e}", self.rank()))
    }
}

/// The examples `[start, end)` of a global batch of `global` examples that `rank` of
/// `size` trains on: contiguous shards, the first `global % size` ranks one example
/// longer. The averaged gradient equals the global batch's only when all shards have the
/// same length, so choose `global` divisible by `size`.
pub fn shard_range(global: usize, rank: usize, size: usize) -> Range<usize> {
    assert!(
        size > 0 && rank < size,
        "shard_range: rank {rank} of {size} ranks"
    );
    let (base, extra) = (global / size, global % size);
    let start = rank * base + rank.min(extra);
    start..start + base + usize::from(rank < extra)
}

/// One line per param: `name<TAB>declared shape<TAB>bound length` (`-` when unbound).
fn roster_text(model: &Func) -> String {
    let mut text = String::new();
    for name in model.param_names() {
        let shape = model
            .param_shape_of(&name)
            .map(|d| format!("{d:?}"))
            .unwrap_or_default();
        let len = model
            .param_binding(&name)
            .map_or("-".to_string(), |d| d.len().to_string());
        text.push_str(&format!("{name}\t{shape}\t{len}\n"));
    }
    text
}

/// Every difference between rank 0's roster and another rank's, naming rank and param.
fn compare_rosters(all: &[Vec<u8>]) -> Vec<String> {
    let parse = |bytes: &[u8]| -> Vec<(String, String, String)> {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(|l| {
                let mut f = l.splitn(3, '\t').map(str::to_string);
                let mut next = || f.next().unwrap_or_default();
                (next(), next(), next())
            })
            .collect()
    };
    let Some(first) = all.first() else {
        return Vec::new();
    };
    let zero = parse(first);
    let mut problems = Vec::new();
    for (r, bytes) in all.iter().enumerate().skip(1) {
        let other = parse(bytes);
        for (name, shape, len) in &other {
            match zero.iter().find(|(n, _, _)| n == name) {
                None => problems.push(format!(
                    "param `{name}` exists on rank {r} but not on rank 0"
                )),
                Some((_, s0, l0)) => {
                    if s0 != shape {
                        problems.push(format!(
                            "param `{name}` has shape {shape} on rank {r} but {s0} on rank 0"
                        ));
                    } else if l0 != len {
                        problems.push(format!(
                            "param `{name}` is bound to {len} values on rank {r} but {l0} on rank 0"
                        ));
                    }
                }
            }
        }
        for (name, _, _) in &zero {
            if !other.iter().any(|(n, _, _)| n == name) {
                problems.push(format!(
                    "param `{name}` exists on rank 0 but not on rank {r}"
                ));
            }
        }
        let order =
            |v: &[(String, String, String)]| v.iter().map(|t| t.0.clone()).collect::<Vec<_>>();
        if problems.is_empty() && order(&zero) != order(&other) {
            problems.push(format!(
                "rank {r} declares the params in the order {:?} but rank 0 in {:?}",
                order(&other),
                order(&zero)
            ));
        }
    }
    problems
}

/// 64-bit FNV-1a, for comparing params across ranks without sending them.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SingleProcess;
    use rlx_tensor::{Adam, Func, Sgd, shape};

    fn model(hidden: usize) -> Func {
        Func::new("mlp", |s| {
            let x = s.input("x", shape![?, 3]);
            let y = s.input("y", shape![?]);
            let w1 = s.param("w1", shape![3, hidden]);
            let w2 = s.param("w2", shape![hidden]);
            let h = x.matmul(&w1).tanh();
            let d = &(&h * &w2).sum([1], false) - &y;
            (&d * &d).mean_all()
        })
        .init_randn(5, 0.5)
    }

    fn batch() -> (Vec<f32>, Vec<f32>) {
        let x = (0..24).map(|i| ((i * 5 % 13) as f32 - 6.0) / 6.0).collect();
        let y = (0..8).map(|i| (i % 3) as f32 - 1.0).collect();
        (x, y)
    }

    #[test]
    fn shard_ranges_cover_the_batch_once_in_order() {
        assert_eq!(shard_range(8, 0, 2), 0..4);
        assert_eq!(shard_range(8, 1, 2), 4..8);
        let parts: Vec<_> = (0..3).map(|r| shard_range(7, r, 3)).collect();
        assert_eq!(parts, vec![0..3, 3..5, 5..7]);
    }

    #[test]
    fn single_process_steps_equal_train_step_bit_for_bit() {
        let (x, y) = batch();
        let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
        let (dp, mut a) = DataParallel::with_bucket_bytes(SingleProcess, &model(4), 16).unwrap();
        assert!(
            dp.plan().buckets().len() > 2,
            "small buckets split the gradients"
        );
        let mut b = a.clone();
        let (mut oa, mut ob) = (Adam::new(0.05), Adam::new(0.05));
        for step in 0..5 {
            let (na, la) = dp.step(&a, &mut oa, &inputs).unwrap();
            let (nb, lb) = b.train_step_all(&mut ob, &inputs);
            assert_eq!(la, lb[0], "loss at step {step}");
            (a, b) = (na, nb);
        }
        for name in ["w1", "w2"] {
            assert_eq!(a.param_binding(name), b.param_binding(name), "{name}");
        }
        dp.check_in_sync(&a).unwrap();
    }

    #[test]
    fn unbound_params_and_non_scalar_losses_are_errors_naming_them() {
        let unbound = Func::new("u", |s| s.param("w", shape![2]).sum_all());
        let e = DataParallel::new(SingleProcess, &unbound).unwrap_err();
        assert!(
            e.message()
                .contains("rank 0: params [\"w\"] of Func `u` are not bound"),
            "{e}"
        );
        let vector =
            Func::new("v", |s| s.param("w", shape![2]) * 2.0).with_param("w", vec![1.0, 2.0]);
        let (dp, f) = DataParallel::new(SingleProcess, &vector).unwrap();
        let e = dp.step(&f, &mut Sgd::new(0.1), &[]).unwrap_err();
        assert!(
            e.message()
                .contains("the loss (first output of Func `v`) has 2 values"),
            "{e}"
        );
    }

    #[test]
    fn roster_differences_name_the_rank_and_the_param() {
        let a = roster_text(&model(4));
        let b = roster_text(&model(5));
        let p = compare_rosters(&[a.clone().into_bytes(), b.into_bytes()]);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(
            p[0],
            "param `w1` has shape [3, 5] on rank 1 but [3, 4] on rank 0"
        );
        let extra = Func::new("m", |s| {
            s.param("w1", shape![3, 4]).sum_all() + s.param("w3", shape![1]).sum_all()
        });
        let p = compare_rosters(&[a.into_bytes(), roster_text(&extra).into_bytes()]);
        assert!(
            p.contains(&"param `w3` exists on rank 1 but not on rank 0".to_string()),
            "{p:?}"
        );
        assert!(
            p.contains(&"param `w2` exists on rank 0 but not on rank 1".to_string()),
            "{p:?}"
        );
    }

    #[test]
    fn checkpoints_round_trip_through_rank_0() {
        let dir = std::env::temp_dir().join(format!("rlx-dist-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ck.safetensors");
        let (x, y) = batch();
        let inputs: [(&str, &[f32]); 2] = [("x", &x), ("y", &y)];
        let (dp, f) = DataParallel::new(SingleProcess, &model(4)).unwrap();
        let mut opt = Adam::new(0.05);
        let (f, _) = dp.step(&f, &mut opt, &inputs).unwrap();
        dp.save_checkpoint(&f, Some(&opt), &path).unwrap();
        let (after, _) = dp.step(&f, &mut opt, &inputs).unwrap();
        let mut opt2 = Adam::new(0.05);
        let resumed = dp
            .load_checkpoint(&model(4), Some(&mut opt2), &path)
            .unwrap();
        let (resumed_after, _) = dp.step(&resumed, &mut opt2, &inputs).unwrap();
        assert_eq!(after.param_binding("w1"), resumed_after.param_binding("w1"));
        let e = dp
            .load_checkpoint(&model(4), None, dir.join("missing.safetensors"))
            .unwrap_err();
        assert!(e.message().contains("rank 0:"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
