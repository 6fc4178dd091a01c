//! `schedule`: the execution order of the kernels.
//!
//! Any topological order of the kernel dependency graph is correct; this one runs a
//! consumer as soon as possible after its most recent producer (depth-first), which
//! shortens the lifetimes of the temporaries and so the arena the memory plan needs.

use crate::program::{BufKind, Program};

/// Reorder `p.kernels` into a dependency-respecting, lifetime-shortening order.
pub fn schedule(p: &mut Program) {
    let nk = p.kernels.len();
    let deps = kernel_deps(p);
    let mut remaining: Vec<usize> = deps.iter().map(|d| d.len()).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nk];
    for (k, d) in deps.iter().enumerate() {
        for &w in d {
            users[w].push(k);
        }
    }
    let mut done_at = vec![usize::MAX; nk];
    // Prefer the kernel whose latest producer ran most recently; ties by original order.
    // A kernel's priority is fixed once it is ready (all its producers have run), so a
    // heap picks the same kernel as a scan of the ready set, without the scan (which
    // made scheduling quadratic when many kernels are ready at once).
    let priority = |k: usize, done_at: &[usize]| {
        let latest = deps[k]
            .iter()
            .map(|&w| done_at[w])
            .max()
            .map_or(0, |t| t + 1);
        (latest, std::cmp::Reverse(k))
    };
    let mut ready: std::collections::BinaryHeap<(usize, std::cmp::Reverse<usize>)> = (0..nk)
        .filter(|&k| remaining[k] == 0)
        .map(|k| priority(k, &done_at))
        .collect();
    let mut order = Vec::with_capacity(nk);
    while let Some((_, std::cmp::Reverse(k))) = ready.pop() {
        done_at[k] = order.len();
        order.push(k);
        for &u in &users[k] {
            remaining[u] -= 1;
            if remaining[u] == 0 {
                ready.push(priority(u, &done_at));
            }
        }
    }
    debug_assert_eq!(order.len(), nk, "the kernel graph is acyclic");
    let mut old: Vec<Option<crate::program::Kernel>> = std::mem::take(&mut p.kernels)
        .into_iter()
        .map(Some)
        .collect();
    p.kernels = order.into_iter().map(|k| old[k].take().unwrap()).collect();
}

/// Per kernel: the kernels that write a temporary it reads (sorted, no repeats).
fn kernel_deps(p: &Program) -> Vec<Vec<usize>> {
    let mut writer = vec![usize::MAX; p.buffers.len()];
    for (k, kernel) in p.kernels.iter().enumerate() {
        for b in kernel.writes() {
            writer[b] = k;
        }
    }
    p.kernels
        .iter()
        .map(|kernel| {
            let mut d: Vec<usize> = kernel
                .reads()
                .filter(|&b| !matches!(p.buffers[b].kind, BufKind::Arg(_) | BufKind::Const(_)))
                .map(|b| writer[b])
                .filter(|&w| w != usize::MAX)
                .collect();
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CompileOptions, compile};
    use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, ReduceOp, Shape};

    /// The order the scan over the ready set gave (what the heap must reproduce).
    fn scan_order(p: &Program) -> Vec<Vec<rlx_ir::NodeId>> {
        let nk = p.kernels.len();
        let deps = kernel_deps(p);
        let mut remaining: Vec<usize> = deps.iter().map(|d| d.len()).collect();
        let mut done_at = vec![usize::MAX; nk];
        let mut ready: Vec<usize> = (0..nk).filter(|&k| remaining[k] == 0).collect();
        let mut order = Vec::new();
        while !ready.is_empty() {
            let (pos, _) = ready
                .iter()
                .enumerate()
                .max_by_key(|(_, k)| {
                    let latest = deps[**k]
                        .iter()
                        .map(|&w| done_at[w])
                        .max()
                        .map_or(0, |t| t + 1);
                    (latest, std::cmp::Reverse(**k))
                })
                .unwrap();
            let k = ready.swap_remove(pos);
            done_at[k] = order.len();
            order.push(k);
            for (u, d) in deps.iter().enumerate() {
                if d.contains(&k) {
                    remaining[u] -= 1;
                    if remaining[u] == 0 {
                        ready.push(u);
                    }
                }
            }
        }
        order.iter().map(|&k| p.kernels[k].fused.clone()).collect()
    }

    #[test]
    fn the_heap_schedules_exactly_as_the_ready_set_scan_did() {
        // Twelve branches of reductions over one input, combined pairwise: many kernels
        // are ready at once.
        let mut g = Graph::new("wide");
        let x = g.input("x", Shape::new(&[8, 8], DType::F32));
        let sum = |g: &mut Graph, v| {
            g.add_op(
                Op::Reduce {
                    op: ReduceOp::Sum,
                    axes: vec![1],
                    keep_dim: true,
                },
                vec![v],
            )
            .unwrap()
        };
        let mut outs = Vec::new();
        let mut prev = None;
        for i in 0..12 {
            let a = if i % 2 == 0 {
                Activation::Exp
            } else {
                Activation::Tanh
            };
            // A distinct scale per branch, so common-subexpression elimination keeps them.
            let c = rlx_ir::TensorData::from_f32(&[], &[i as f32 + 1.0]);
            let cs = c.shape();
            let c = g.add_node(Op::Constant { data: c.bytes }, vec![], cs);
            let xc = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, c]).unwrap();
            let e = g.add_op(Op::Activation(a), vec![xc]).unwrap();
            let s = sum(&mut g, e);
            let t = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, s]).unwrap();
            let s2 = sum(&mut g, t);
            if let Some(p) = prev {
                outs.push(g.add_op(Op::Binary(BinaryOp::Sub), vec![p, s2]).unwrap());
            }
            prev = Some(s2);
        }
        g.set_outputs(outs);
        let opts = CompileOptions {
            fuse: false,
            ..Default::default()
        };
        let mut p = compile(&g, &opts).unwrap();
        assert!(p.kernels.len() > 30, "{} kernels", p.kernels.len());
        // From two different starting orders.
        for reverse in [false, true] {
            if reverse {
                p.kernels.reverse();
            }
            let want = scan_order(&p);
            schedule(&mut p);
            let got: Vec<_> = p.kernels.iter().map(|k| k.fused.clone()).collect();
            assert_eq!(got, want);
        }
    }
}
