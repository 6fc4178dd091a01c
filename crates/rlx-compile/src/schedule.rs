//! `schedule`: the execution order of the kernels.
//!
//! Any topological order of the kernel dependency graph is correct; this one runs a
//! consumer as soon as possible after its most recent producer (depth-first), which
//! shortens the lifetimes of the temporaries and so the arena the memory plan needs.

use crate::program::{BufKind, Program};

/// Reorder `p.kernels` into a dependency-respecting, lifetime-shortening order.
pub fn schedule(p: &mut Program) {
    let nk = p.kernels.len();
    let mut writer = vec![usize::MAX; p.buffers.len()];
    for (k, kernel) in p.kernels.iter().enumerate() {
        for b in kernel.writes() {
            writer[b] = k;
        }
    }
    let deps: Vec<Vec<usize>> = p
        .kernels
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
        .collect();
    let mut remaining: Vec<usize> = deps.iter().map(|d| d.len()).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); nk];
    for (k, d) in deps.iter().enumerate() {
        for &w in d {
            users[w].push(k);
        }
    }
    let mut done_at = vec![usize::MAX; nk];
    let mut ready: Vec<usize> = (0..nk).filter(|&k| remaining[k] == 0).collect();
    let mut order = Vec::with_capacity(nk);
    while !ready.is_empty() {
        // Prefer the kernel whose latest producer ran most recently; ties by original order.
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
        for &u in &users[k] {
            remaining[u] -= 1;
            if remaining[u] == 0 {
                ready.push(u);
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
