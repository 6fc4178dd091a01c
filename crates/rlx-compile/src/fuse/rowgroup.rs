//! Row-group fusion: kernels that all work row by row over one `[R.., C]` space become
//! one [`KernelKind::RowGroup`] kernel.
//!
//! A normalization's backward (LayerNorm, RMSNorm, softmax written from primitives)
//! fuses into a chain of row reductions to `[R, 1]` (a mean, then a variance that reads
//! it, then sums that read both), column reductions to `[C]` (a gain's and a bias's
//! gradients) and an elementwise kernel over `[R, C]` that reads the row statistics.
//! Run one after another, each kernel streams the operands again. As one group, a
//! backend processes a block of rows at a time and runs every stage on that block
//! while it is in cache: the operands are read from memory once.
//!
//! A kernel joins a group over space `S = [d0, .., C]` (static dims, `C >= 2`) as a
//! *stage* when it is
//! - a row reduction ([`StageRole::RowReduce`]): a float sum, mean, max or min over
//!   exactly the last axis of `S` (its epilogue runs per row);
//! - a column reduction ([`StageRole::ColReduce`]): a float sum or mean over every axis
//!   but the last (per-block partial sums, combined in block order at the end, then its
//!   epilogue over `[C]`);
//! - an elementwise kernel that computes (not a pure copy or broadcast) over `S`
//!   ([`StageRole::Wide`]) or over the row space `[d0, .., 1]` / `[d0, ..]`
//!   ([`StageRole::Narrow`]);
//!
//! and every read of a buffer an earlier stage of the group writes is *row-aligned*:
//! element `(r, c)` of the stage reads row `r` of that buffer (the dense buffer itself,
//! or a `[R, 1]` statistic broadcast along the row), so a block of rows never needs
//! another block's results. A stage may not read a column reduction's result (known
//! only when every block is done). Kernels between the stages that read nothing the
//! group writes run before it; the first kernel that reads the group without being able
//! to join ends it. A group needs a row reduction and at least two stages.

use crate::program::{BufId, Kernel, KernelKind, Program, Strided, bind_load};
use rlx_ir::{DType, Dim, DimBinding, ReduceOp};

/// How far past a group's last stage the search for more stages looks (kernels
/// skipped over run before the group); bounds the pass to linear time.
pub const MAX_LOOKAHEAD: usize = 32;

/// The part a kernel plays in a row group (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageRole {
    /// A reduction of the last axis: `[R.., C] → [R.., 1]` (or `[R..]`).
    RowReduce,
    /// A sum or mean of every axis but the last: `[R.., C] → [C]` (or `[1.., C]`).
    ColReduce,
    /// Elementwise over the whole space.
    Wide,
    /// Elementwise over the row space (one element per row).
    Narrow,
}

impl StageRole {
    /// Elements of the stage's own space per row of the group (`C` or 1).
    fn width(self, c: usize) -> usize {
        match self {
            StageRole::Narrow => 1,
            _ => c,
        }
    }
}

/// Static dims, or `None`.
fn statics(d: &[Dim]) -> Option<Vec<usize>> {
    d.iter().map(|x| x.as_static()).collect()
}

/// Whether `d` is the row space of `s`: `s` with its last axis 1 or dropped.
fn is_row_space(d: &[Dim], s: &[Dim]) -> bool {
    let lead = &s[..s.len() - 1];
    d == lead || (d.len() == s.len() && &d[..lead.len()] == lead && d[lead.len()] == Dim::Static(1))
}

/// The role `k` can play in a row group over `space`, or `None`. Only floats reduce in
/// a group (integer and bool reductions keep their own kernels).
pub fn stage_role(k: &Kernel, space: &[Dim]) -> Option<StageRole> {
    let rank = space.len();
    if rank == 0 {
        return None;
    }
    match &k.kind {
        // Argmax/argmin keep their own kernels (the row programs fold values only).
        KernelKind::Reduce {
            op,
            arg: false,
            in_space,
            axes,
            prologue,
            input,
            dtype,
            ..
        } if in_space == space => {
            let float = |d: DType| matches!(d, DType::F32 | DType::F64);
            if !float(*dtype) || !float(prologue.nodes[*input as usize].dtype) {
                return None;
            }
            if axes == &[rank - 1] {
                Some(StageRole::RowReduce)
            } else if rank >= 2
                && axes.len() == rank - 1
                && axes.iter().enumerate().all(|(i, &a)| a == i)
                && matches!(op, ReduceOp::Sum | ReduceOp::Mean)
            {
                Some(StageRole::ColReduce)
            } else {
                None
            }
        }
        // A pure copy (or broadcast) computes nothing worth fusing, and backends move
        // copies with routines of their own: it stays a kernel.
        KernelKind::Elementwise { expr, .. } if expr.op_count() == 0 => None,
        KernelKind::Elementwise { space: s, .. } if s == space => Some(StageRole::Wide),
        KernelKind::Elementwise { space: s, .. } if is_row_space(s, space) => {
            Some(StageRole::Narrow)
        }
        _ => None,
    }
}

/// Whether view `v` of a stage `w` elements wide per row reads, at element `(r, j)`,
/// element `r·wb + j` of a buffer `wb` wide per row (`wb == w`: the dense buffer itself),
/// or element `r` of a 1-wide one (`wb == 1 < w`: a row statistic broadcast along the
/// row). Strides of size-1 axes do not matter.
fn row_aligned(v: &Strided, w: usize, wb: usize) -> bool {
    if v.offset != 0 {
        return false;
    }
    let bcast = w > 1 && wb == 1;
    let n = v.dims.len();
    let mut acc = 1isize;
    for i in (0..n).rev() {
        let want = if bcast && i == n - 1 {
            0
        } else {
            let s = acc;
            acc *= v.dims[i] as isize;
            s
        };
        if v.dims[i] != 1 && v.strides[i] != want {
            return false;
        }
    }
    true
}

/// What a group's stages write so far.
struct Written {
    /// Per buffer: `Some(width)` when a row stage (or elementwise stage) of the group
    /// writes it (`width` elements per row), `Some(0)` when a column reduction does.
    width: Vec<Option<usize>>,
}

/// Whether kernel `k` in role `role` over `space` can join a group whose stages wrote
/// `w`: every load of a buffer the group writes is row-aligned (a column reduction's
/// result is never readable), judged for each expression that uses the load.
fn loads_ok(p: &Program, k: &Kernel, role: StageRole, space: &[usize], w: &Written) -> bool {
    let c = *space.last().expect("rank >= 1");
    let rows: usize = space[..space.len() - 1].iter().product();
    // Which loads each expression uses, and the width of that expression's space.
    let mut uses: Vec<(usize, usize)> = Vec::new(); // (load, width)
    let push = |e: &crate::program::Expr, width: usize, uses: &mut Vec<(usize, usize)>| {
        for n in &e.nodes {
            if let crate::program::EOp::Load(i) = n.op {
                uses.push((i, width));
            }
        }
    };
    let epilogue_free = match &k.kind {
        KernelKind::Reduce {
            prologue, epilogue, ..
        } => {
            push(prologue, c, &mut uses);
            match role {
                StageRole::RowReduce => {
                    push(epilogue, 1, &mut uses);
                    true
                }
                // A column reduction's epilogue runs after every block: it may read
                // anything the group wrote.
                _ => true,
            }
        }
        KernelKind::Elementwise { expr, .. } => {
            push(expr, role.width(c), &mut uses);
            true
        }
        _ => false,
    };
    if !epilogue_free {
        return false;
    }
    for (li, width) in uses {
        let l = &k.loads[li];
        let Some(wb) = w.width[l.buf] else { continue };
        if wb == 0 || (width == 1 && wb != 1) {
            return false;
        }
        let Some(bd) = statics(p.buffers[l.buf].shape.dims()) else {
            return false;
        };
        let Some(v) = bind_load(&bd, &l.steps, &DimBinding::new()) else {
            return false;
        };
        if v.numel() != rows * width || bd.iter().product::<usize>() != rows * wb {
            return false;
        }
        if !row_aligned(&v, width, wb) {
            return false;
        }
    }
    true
}

/// The row groups of `p`'s kernels: each a list of kernel indices in program order.
/// This is the fusion decision (see the module docs); [`row_groups`] applies it.
pub fn plan_row_groups(p: &Program) -> Vec<Vec<usize>> {
    let n = p.kernels.len();
    let mut groups = Vec::new();
    let mut i = 0;
    while i < n {
        let seed = i;
        i += 1;
        let space: Vec<Dim> = match &p.kernels[seed].kind {
            KernelKind::Reduce { in_space, .. } => in_space.clone(),
            KernelKind::Elementwise { space, .. } => space.clone(),
            _ => continue,
        };
        let Some(sdims) = statics(&space) else {
            continue;
        };
        if sdims.last().is_none_or(|&c| c < 2) {
            continue;
        }
        let c = *sdims.last().unwrap();
        if !matches!(
            stage_role(&p.kernels[seed], &space),
            Some(StageRole::RowReduce | StageRole::ColReduce | StageRole::Wide)
        ) {
            continue;
        }
        let mut w = Written {
            width: vec![None; p.buffers.len()],
        };
        let mut members: Vec<usize> = Vec::new();
        let mut last = seed;
        let mut j = seed;
        while j < n && j <= last + MAX_LOOKAHEAD {
            let k = &p.kernels[j];
            let reads_group = k.reads().any(|b| w.width[b].is_some());
            match stage_role(k, &space) {
                Some(role) if loads_ok(p, k, role, &sdims, &w) => {
                    let wb = match role {
                        StageRole::ColReduce => 0,
                        StageRole::RowReduce | StageRole::Narrow => 1,
                        StageRole::Wide => c,
                    };
                    for b in k.writes() {
                        w.width[b] = Some(wb);
                    }
                    members.push(j);
                    last = j;
                }
                _ if reads_group => break,
                _ => {}
            }
            j += 1;
        }
        let has_row = members
            .iter()
            .any(|&m| stage_role(&p.kernels[m], &space) == Some(StageRole::RowReduce));
        if members.len() >= 2 && has_row {
            // The next group starts after this one's last stage: a group seeded among
            // the kernels this one skipped could read what this one writes (which is
            // only written where its last stage was).
            i = last + 1;
            groups.push(members);
        }
    }
    groups
}

/// Replace every group of [`plan_row_groups`] by one [`KernelKind::RowGroup`] kernel,
/// placed where its last stage was (the kernels it skipped over read nothing it writes,
/// so they run before it).
pub fn row_groups(p: &mut Program) {
    let groups = plan_row_groups(p);
    if groups.is_empty() {
        return;
    }
    let mut at_last: Vec<Option<usize>> = vec![None; p.kernels.len()];
    let mut member = vec![false; p.kernels.len()];
    for (gi, g) in groups.iter().enumerate() {
        at_last[*g.last().expect("non-empty")] = Some(gi);
        g.iter().for_each(|&m| member[m] = true);
    }
    let mut old: Vec<Option<Kernel>> = std::mem::take(&mut p.kernels)
        .into_iter()
        .map(Some)
        .collect();
    let mut out = Vec::with_capacity(old.len());
    for k in 0..old.len() {
        if let Some(gi) = at_last[k] {
            let stages: Vec<Kernel> = groups[gi].iter().map(|&m| old[m].take().unwrap()).collect();
            out.push(group_kernel(stages));
        } else if !member[k] {
            out.push(old[k].take().unwrap());
        }
    }
    p.kernels = out;
}

/// One kernel of `stages`: its loads are the stages' reads of buffers from outside the
/// group, its stores every stage's stores, so scheduling and liveness see what the
/// group reads and writes (a buffer written and read back inside is live only there).
fn group_kernel(stages: Vec<Kernel>) -> Kernel {
    let space = match &stages[0].kind {
        KernelKind::Reduce { in_space, .. } => in_space.clone(),
        KernelKind::Elementwise { space, .. } => space.clone(),
        _ => unreachable!("groups start with a reduction or a wide elementwise kernel"),
    };
    let mut loads = Vec::new();
    let mut stores = Vec::new();
    let mut fused = Vec::new();
    let mut fused_names = Vec::new();
    let written = group_writes(&stages);
    for s in &stages {
        // Buffers the group writes and reads back are internal: listing them as reads
        // would make the kernel depend on itself.
        for l in &s.loads {
            if !written.contains(&l.buf) && !loads.contains(l) {
                loads.push(l.clone());
            }
        }
        stores.extend(s.stores.iter().copied());
        fused.extend(s.fused.iter().copied());
        fused_names.extend(s.fused_names.iter().cloned());
    }
    Kernel {
        kind: KernelKind::RowGroup { space, stages },
        loads,
        stores,
        fused,
        fused_names,
    }
}

/// A short description of a group's stages for `explain`: `row reduce_sum`, `col
/// reduce_sum`, `elementwise`, `row elementwise`, joined by ` → `.
pub fn describe_stages(space: &[Dim], stages: &[Kernel]) -> String {
    stages
        .iter()
        .map(|s| match stage_role(s, space) {
            Some(StageRole::RowReduce) => format!("row {}", s.label()),
            Some(StageRole::ColReduce) => format!("col {}", s.label()),
            Some(StageRole::Wide) => "elementwise".to_string(),
            Some(StageRole::Narrow) => "row elementwise".to_string(),
            None => s.label(),
        })
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Buffers the stages of a group write (for backends that check their plans).
pub fn group_writes(stages: &[Kernel]) -> Vec<BufId> {
    stages.iter().flat_map(|s| s.writes()).collect()
}

#[cfg(test)]
#[path = "rowgroup_tests.rs"]
mod tests;
