//! `memplan`: liveness intervals of the arena temporaries, in-place reuse, and
//! offsets in one arena (per binding of the dynamic dims).
//!
//! A temporary lives from the first kernel that writes it to the last that reads it.
//! Buffers whose intervals do not overlap may share bytes. An elementwise kernel that
//! reads a temporary for the last time with the identity view (same dims, same element
//! width, no steps) writes its own temporary in place over it: each tile reads every
//! input before storing, and tiles are disjoint.

use crate::program::{BufId, BufKind, EOp, KernelKind, Liveness, Program};

/// Offsets are multiples of this many bytes (a cache line).
pub const ALIGN: usize = 64;

/// Compute the liveness of `p`'s temporaries and its in-place decisions.
pub fn liveness(p: &Program) -> Liveness {
    let nb = p.buffers.len();
    let mut iv: Vec<Option<(usize, usize)>> = vec![None; nb];
    for (k, kernel) in p.kernels.iter().enumerate() {
        for b in kernel.writes() {
            if p.buffers[b].kind == BufKind::Temp {
                let e = iv[b].get_or_insert((k, k));
                e.0 = e.0.min(k);
            }
        }
        for b in kernel.reads() {
            if let Some(e) = iv[b].as_mut() {
                e.1 = e.1.max(k);
            }
        }
    }
    let mut in_place = Vec::new();
    let mut reused = vec![false; nb];
    for (k, kernel) in p.kernels.iter().enumerate() {
        if !matches!(kernel.kind, KernelKind::Elementwise { .. }) || kernel.stores.len() != 1 {
            continue;
        }
        let out = kernel.stores[0].buf;
        if p.buffers[out].kind != BufKind::Temp {
            continue;
        }
        let cand = kernel.loads.iter().find(|l| {
            let b = l.buf;
            p.buffers[b].kind == BufKind::Temp
                && !reused[b]
                && iv[b].is_some_and(|(_, last)| last == k)
                && l.steps.is_empty()
                && p.buffers[b].shape.dims() == p.buffers[out].shape.dims()
                && p.buffers[b].shape.dtype().size_bytes() == p.buffers[out].shape.dtype().size_bytes()
                // only this one load of that buffer in the kernel
                && kernel.loads.iter().filter(|m| m.buf == b).count() == 1
        });
        if let Some(l) = cand {
            reused[l.buf] = true;
            in_place.push((out, l.buf));
        }
    }
    Liveness {
        intervals: iv,
        in_place,
    }
}

/// Arena offsets of the temporaries given their byte sizes (`sizes[b]`; ignored for
/// non-temporaries), and the arena size. Greedy: the largest buffers are placed
/// first, each at the lowest aligned offset free for its whole lifetime.
pub fn plan_offsets(p: &Program, sizes: &[usize]) -> (Vec<usize>, usize) {
    let lv = &p.liveness;
    let nb = p.buffers.len();
    // In-place chains share one slot: map each buffer to its representative.
    let mut rep: Vec<BufId> = (0..nb).collect();
    for &(out, over) in &lv.in_place {
        rep[out] = rep[over];
    }
    // Slot interval and size = union over its members.
    let mut slot_iv: Vec<Option<(usize, usize)>> = vec![None; nb];
    let mut slot_size = vec![0usize; nb];
    for b in 0..nb {
        if let Some((s, e)) = lv.intervals.get(b).copied().flatten() {
            let r = rep[b];
            let v = slot_iv[r].get_or_insert((s, e));
            v.0 = v.0.min(s);
            v.1 = v.1.max(e);
            slot_size[r] = slot_size[r].max(sizes[b]);
        }
    }
    let mut order: Vec<BufId> = (0..nb).filter(|&b| slot_iv[b].is_some()).collect();
    order.sort_by(|&a, &b| slot_size[b].cmp(&slot_size[a]).then(a.cmp(&b)));
    let mut placed = Placed::new(p.kernels.len());
    let mut slot_off = vec![0usize; nb];
    let mut arena = 0;
    for b in order {
        let (s, e) = slot_iv[b].unwrap();
        let size = slot_size[b].div_ceil(ALIGN) * ALIGN;
        let mut conflicts = placed.overlapping(s, e);
        conflicts.sort_unstable();
        let mut off = 0;
        for (o, sz) in conflicts {
            if off + size <= o {
                break;
            }
            off = off.max(o + sz);
        }
        placed.insert(off, size, (s, e));
        slot_off[b] = off;
        arena = arena.max(off + size);
    }
    let offsets = (0..nb).map(|b| slot_off[rep[b]]).collect();
    (offsets, arena)
}

/// The buffers placed so far, indexed by the kernel where their lifetime starts: a
/// tree over start times keeps the latest end below each node, so finding the
/// placements whose lifetimes overlap an interval visits only subtrees that hold one
/// (a scan of every placement per buffer made planning quadratic in the kernel count).
struct Placed {
    /// Leaves (start times) in the tree.
    width: usize,
    /// Per tree node (1 is the root; leaf `t` is `width + t`): the latest end of a
    /// placement starting below it.
    max_end: Vec<Option<usize>>,
    /// Per start time: `(offset, size, end)` of the placements starting there.
    at: Vec<Vec<(usize, usize, usize)>>,
}

impl Placed {
    fn new(kernels: usize) -> Placed {
        let width = kernels.max(1).next_power_of_two();
        Placed {
            width,
            max_end: vec![None; 2 * width],
            at: vec![Vec::new(); width],
        }
    }

    fn insert(&mut self, off: usize, size: usize, (s, e): (usize, usize)) {
        self.at[s].push((off, size, e));
        let mut node = self.width + s;
        while node >= 1 {
            let m = &mut self.max_end[node];
            *m = Some(m.map_or(e, |x| x.max(e)));
            node /= 2;
        }
    }

    /// `(offset, size)` of every placement whose lifetime overlaps `[s, e]`.
    fn overlapping(&self, s: usize, e: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        // (node, first start time below it)
        let mut stack = vec![(1usize, 0usize)];
        while let Some((node, lo)) = stack.pop() {
            if lo > e || self.max_end[node].is_none_or(|m| m < s) {
                continue;
            }
            if node >= self.width {
                let t = node - self.width;
                out.extend(
                    self.at[t]
                        .iter()
                        .filter(|&&(_, _, e2)| s <= e2)
                        .map(|&(o, sz, _)| (o, sz)),
                );
                continue;
            }
            let half = self.width >> (usize::BITS - 1 - node.leading_zeros() + 1);
            stack.push((2 * node + 1, lo + half));
            stack.push((2 * node, lo));
        }
        out
    }
}

/// Whether argument `arg`'s storage may be handed over to the run as the storage of
/// graph output `output` (a *donation*: the result is written over the argument, as an
/// optimizer writes a state buffer's new value over the old one).
///
/// Legal when the one kernel that writes the output is elementwise or a contraction's
/// epilogue, reads the argument only with the identity view at the stored index (every
/// tile reads its inputs before it stores, and tiles are disjoint), stores no value
/// that could be the argument's own storage (a load, a select or a same-type cast may
/// hand an operand through), and no later kernel reads the argument. A backend that
/// computes a contraction's product into one of its stores' buffers must not pick one
/// that holds a donated argument (it would overwrite operands the epilogue still reads).
pub fn donatable(p: &Program, arg: usize, output: usize) -> bool {
    let Some(&out) = p.outputs.get(output) else {
        return false;
    };
    let Some(src) = p.buffers.iter().position(|b| b.kind == BufKind::Arg(arg)) else {
        return false;
    };
    if p.outputs.iter().filter(|&&o| o == out).count() != 1
        || p.buffers[src].shape != p.buffers[out].shape
        || !p.buffers[out].shape.is_static()
    {
        return false;
    }
    let writers: Vec<usize> = (0..p.kernels.len())
        .filter(|&k| p.kernels[k].writes().any(|b| b == out))
        .collect();
    let [k] = writers[..] else {
        return false;
    };
    if p.kernels[k + 1..]
        .iter()
        .any(|kn| kn.reads().any(|b| b == src))
    {
        return false;
    }
    let kernel = &p.kernels[k];
    let (expr, operands) = match &kernel.kind {
        KernelKind::Elementwise { expr, .. } => (expr, None),
        KernelKind::Contraction { a, b, epilogue, .. } => (epilogue, Some((*a, *b))),
        _ => return false,
    };
    let identity_reads = kernel.loads.iter().enumerate().all(|(i, l)| {
        l.buf != src || (l.steps.is_empty() && operands.is_none_or(|(a, b)| i != a && i != b))
    });
    let passes_operand = |v: u32| {
        let n = &expr.nodes[v as usize];
        match n.op {
            EOp::Load(_) | EOp::Where => true,
            EOp::Cast => expr.nodes[n.args[0] as usize].dtype == n.dtype,
            _ => false,
        }
    };
    identity_reads && !kernel.stores.iter().any(|st| passes_operand(st.value))
}

#[cfg(test)]
mod tests;
