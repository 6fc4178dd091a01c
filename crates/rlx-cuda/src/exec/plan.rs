//! Binding a generated program to concrete dims: the arena layout and every step of a
//! run (kernel launches with their parameter values, BLAS calls, host ops). Done once
//! for static programs and once per distinct binding of the dynamic dims (cached).
//!
//! Arena layout (one device allocation, offsets 256-byte aligned):
//! `[constants][temporaries (memory plan)][arguments][outputs][scratch][error word]`.
//! Constants come first so their bytes stay valid across bindings.

use super::blas::{blas_plan, fp8_plan};
use super::host::HostOp;
use crate::codegen::meta::{self, Ptr};
use crate::codegen::{Generated, KCode, reduce};
use crate::device::{Fp8Call, GemmCall};
use rlx_compile::memplan;
use rlx_compile::program::{BufKind, Program, concrete};
use rlx_ir::{DimBinding, ReduceOp, Shape, infer_shape};
use std::collections::HashMap;

/// Alignment of every arena region.
pub(crate) const ALIGN: usize = 256;

pub(crate) fn align(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Sizing knobs that depend on the device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tuning {
    pub sm_count: u32,
    /// Reductions whose reduced extent is at least this long are split across blocks
    /// when their outputs are too few to fill the device (fewer than two per SM) and
    /// the program carries a split form (see `codegen::reduce`): `RLX_CUDA_SPLIT_MIN`,
    /// default [`SPLIT_MIN`]. A split folds in a different (equally fixed) order, so
    /// changing the knob may change a float sum's last bits; it never makes a result
    /// depend on the device.
    pub split_min: usize,
    /// Whether cuBLAS may be used.
    pub blas: bool,
    /// Whether fp8 cuBLASLt may be used.
    pub fp8: bool,
    /// Whether a GEMM may carry a fused bias/activation epilogue (cuBLASLt).
    pub epilogue: bool,
    /// Whether reduction and row-op trees finish with warp shuffles
    /// ([`crate::codegen::CodegenOptions::shuffles`]; `RLX_CUDA_SHUFFLES=0` turns them
    /// off). The results are the same bit for bit either way.
    pub shuffles: bool,
}

/// The default of [`Tuning::split_min`]: below it one block per output is about as fast
/// as two launches.
pub(crate) const SPLIT_MIN: usize = 8192;

impl Tuning {
    pub(super) fn grid_cap(&self) -> u64 {
        (self.sm_count as u64 * 32).max(1)
    }
}

/// A kernel launch.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub entry: usize,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    /// Arena offsets of the pointer slots (`None`: a null pointer).
    pub ptrs: Vec<Option<usize>>,
    pub meta: Vec<i64>,
    pub sync: bool,
}

/// One step of a run.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    Launch(Launch),
    /// A GEMM whose pointers are arena offsets; `table` holds per-batch `(a, b, c)` offsets
    /// uploaded (rebased) at the arena offset in `Batching::Pointers` before the call.
    Gemm {
        call: GemmCall,
        table: Option<Vec<[usize; 3]>>,
    },
    Fp8(Fp8Call),
    Host(Box<HostOp>),
}

/// A program bound to concrete dims.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub buf_dims: Vec<Vec<usize>>,
    pub buf_bytes: Vec<usize>,
    pub buf_off: Vec<usize>,
    pub err_off: usize,
    pub arena: usize,
    /// Steps per program kernel.
    pub steps: Vec<Vec<Step>>,
}

/// The binding of the dynamic dims from argument dims; errors name the argument.
pub(crate) fn binding_from_args(p: &Program, dims: &[&[usize]]) -> Result<DimBinding, String> {
    let mut b = DimBinding::new();
    for ((name, shape), d) in p.args.iter().zip(dims) {
        if shape.rank() != d.len() {
            return Err(format!(
                "argument `{name}` is declared {shape} but got dims {d:?}"
            ));
        }
        for (dim, &n) in shape.dims().iter().zip(d.iter()) {
            match dim {
                rlx_ir::Dim::Static(s) if *s != n => {
                    return Err(format!(
                        "argument `{name}` is declared {shape} but got dims {d:?}"
                    ));
                }
                rlx_ir::Dim::Dynamic(s) => match b.get(*s) {
                    Some(prev) if prev != n => {
                        return Err(format!(
                            "dynamic dim ?{s} is {prev} elsewhere but `{name}` gives it {n} (dims {d:?})"
                        ));
                    }
                    _ => b.set(*s, n),
                },
                _ => {}
            }
        }
    }
    Ok(b)
}

/// Blocks for `n` threads of 256, capped (grid-stride loops cover the rest).
fn blocks(n: usize, t: &Tuning) -> u32 {
    (n.div_ceil(256) as u64).clamp(1, t.grid_cap()) as u32
}

/// Bind `p` (generated as `g`) under `binding`.
pub(crate) fn bind(
    p: &Program,
    g: &Generated,
    entries: &HashMap<String, usize>,
    binding: &DimBinding,
    t: &Tuning,
) -> Result<Plan, String> {
    p.guards.check(binding).map_err(|e| e.to_string())?;
    let (buf_dims, buf_bytes) = p.bound_buffers(binding).map_err(|e| e.to_string())?;
    // Arena layout.
    let mut buf_off = vec![0usize; p.buffers.len()];
    let mut at = 0usize;
    for (i, b) in p.buffers.iter().enumerate() {
        if let BufKind::Const(bytes) = &b.kind {
            buf_off[i] = at;
            at += align(bytes.len().max(1));
        }
    }
    let (temp_off, temp_size) = memplan::plan_offsets(p, &buf_bytes);
    let temp_base = at;
    at += align(temp_size);
    for (i, b) in p.buffers.iter().enumerate() {
        match b.kind {
            BufKind::Temp => buf_off[i] = temp_base + temp_off[i],
            BufKind::Arg(_) | BufKind::Output(_) => {
                buf_off[i] = at;
                at += align(buf_bytes[i].max(1));
            }
            BufKind::Const(_) => {}
        }
    }
    let scratch_base = at;
    let mut scratch_max = 0usize;
    let mut steps = Vec::with_capacity(p.kernels.len());
    for (k, code) in p.kernels.iter().zip(&g.kernels) {
        let mut ks = KernelBind {
            p,
            k,
            code,
            entries,
            binding,
            t,
            buf_dims: &buf_dims,
            buf_off: &buf_off,
            scratch_base,
            scratch: Vec::new(),
            redirect: HashMap::new(),
            steps: Vec::new(),
        };
        ks.bind()?;
        let used: usize = ks.scratch.iter().map(|&s| align(s)).sum();
        scratch_max = scratch_max.max(used);
        steps.push(ks.steps);
    }
    at = scratch_base + scratch_max;
    let err_off = at;
    at += ALIGN;
    Ok(Plan {
        buf_dims,
        buf_bytes,
        buf_off,
        err_off,
        arena: at,
        steps,
    })
}

/// Binding state of one kernel.
pub(crate) struct KernelBind<'a> {
    pub p: &'a Program,
    pub k: &'a rlx_compile::program::Kernel,
    pub code: &'a crate::codegen::KernelCode,
    pub entries: &'a HashMap<String, usize>,
    pub binding: &'a DimBinding,
    pub t: &'a Tuning,
    pub buf_dims: &'a [Vec<usize>],
    pub buf_off: &'a [usize],
    pub scratch_base: usize,
    /// Bytes of each scratch region of this kernel, by slot.
    pub scratch: Vec<usize>,
    /// Scratch slots that point at a program buffer instead (a product written in place).
    pub redirect: HashMap<usize, usize>,
    pub steps: Vec<Step>,
}

impl KernelBind<'_> {
    /// Reserve `bytes` for scratch slot `slot`; returns its arena offset.
    pub(crate) fn scratch(&mut self, slot: usize, bytes: usize) -> usize {
        if self.scratch.len() <= slot {
            self.scratch.resize(slot + 1, 0);
        }
        self.scratch[slot] = self.scratch[slot].max(bytes);
        self.scratch_off(slot)
    }

    fn scratch_off(&self, slot: usize) -> usize {
        self.scratch_base
            + self.scratch[..slot]
                .iter()
                .map(|&s| align(s))
                .sum::<usize>()
    }

    /// The arena offsets of the kernel's pointer slots.
    fn ptr_offsets(&self, err_off_marker: usize) -> Vec<Option<usize>> {
        self.code
            .ptrs
            .iter()
            .map(|x| match *x {
                Ptr::Buf(b) => Some(self.buf_off[b]),
                Ptr::Scratch(s) => match self.redirect.get(&s) {
                    Some(&b) => Some(self.buf_off[b]),
                    None if s < self.scratch.len() && self.scratch[s] > 0 => {
                        Some(self.scratch_off(s))
                    }
                    None => None,
                },
                Ptr::Err => Some(err_off_marker),
            })
            .collect()
    }

    /// The kernel's run-time integers under this binding.
    fn meta(&self) -> Result<Vec<i64>, String> {
        self.code
            .meta
            .iter()
            .map(|&d| meta::eval(self.binding, d))
            .collect()
    }

    /// Queue a launch of `entry`.
    pub(crate) fn launch(
        &mut self,
        entry: &str,
        grid: (u32, u32, u32),
        block: u32,
        sync: bool,
    ) -> Result<(), String> {
        let e = *self
            .entries
            .get(entry)
            .ok_or_else(|| format!("internal: entry {entry} missing"))?;
        let meta = self.meta()?;
        self.steps.push(Step::Launch(Launch {
            entry: e,
            grid,
            block: (block, 1, 1),
            // The error word's offset is only known at the end: usize::MAX marks it.
            ptrs: self.ptr_offsets(usize::MAX),
            meta,
            sync,
        }));
        Ok(())
    }

    fn resolve(&self, dims: &[rlx_ir::Dim]) -> Result<Vec<usize>, String> {
        concrete(dims, self.binding).ok_or_else(|| "unbound dynamic dim".to_string())
    }

    fn bind(&mut self) -> Result<(), String> {
        let code = self.code.kind.clone();
        match code {
            KCode::Ew { entry, space } => {
                let n: usize = self.resolve(&space)?.iter().product();
                if n > 0 {
                    self.launch(&entry, (blocks(n, self.t), 1, 1), 256, false)?;
                }
            }
            KCode::Reduce(r) => self.bind_reduce(&r)?,
            KCode::Row(r) => {
                let rows: usize = self.resolve(&r.rows)?.iter().product();
                if rows > 0 {
                    match r.group {
                        // One block per row, with exactly the lowering's threads.
                        Some(n) => {
                            let gx = (rows as u64).clamp(1, self.t.grid_cap() * 8) as u32;
                            self.launch(&r.entry, (gx, 1, 1), n, true)?;
                        }
                        None => self.launch(&r.entry, (blocks(rows, self.t), 1, 1), 256, false)?,
                    }
                }
            }
            KCode::Attention(a) => {
                let (op, inputs) =
                    crate::codegen::attn::parts(self.k).expect("an attention kernel");
                // The operands bound, checked by the op's shape inference (dynamic dims
                // may be bound inconsistently): the oracle's errors before any launch.
                let shapes: Vec<Shape> = inputs
                    .iter()
                    .map(|&l| {
                        let dt = self.p.buffers[self.k.loads[l].buf].shape.dtype();
                        self.view_dims(l).map(|d| Shape::new(&d, dt))
                    })
                    .collect::<Result<_, _>>()?;
                let shapes: Vec<&Shape> = shapes.iter().collect();
                infer_shape(op, &shapes).map_err(|e| e.to_string())?;
                let sq = a.sq.resolve(self.binding).unwrap_or(0);
                let b = a.batch.resolve(self.binding).unwrap_or(0);
                if sq > 0 && b > 0 {
                    // The lowered kernel loops over its blocks: any grid is correct.
                    let groups = b * a.heads * sq.div_ceil(a.group as usize);
                    let gx = (groups as u64).clamp(1, self.t.grid_cap() * 8) as u32;
                    self.launch(&a.entry, (gx, 1, 1), a.group, true)?;
                }
            }
            KCode::Contract(c) => blas_plan(self, &c)?,
            KCode::Opaque(o) => {
                // A scaled matmul the loop IR lowers still takes cuBLASLt's fp8 route
                // where the device has one.
                if fp8_plan(self, &o.op)? {
                } else if let Some(entry) = &o.entry {
                    let n: usize = self.resolve(&o.threads)?.iter().product();
                    if n > 0 {
                        self.launch(entry, (blocks(n, self.t), 1, 1), 256, false)?;
                    }
                } else {
                    let h = HostOp::new(self.p, self.k, self.buf_dims, self.buf_off, self.binding)?;
                    self.steps.push(Step::Host(Box::new(h)));
                }
            }
        }
        Ok(())
    }

    /// Bound dims of kernel load `l`'s view.
    pub(crate) fn view_dims(&self, l: usize) -> Result<Vec<usize>, String> {
        let load = &self.k.loads[l];
        let dims =
            crate::codegen::load::chain_dims(self.p.buffers[load.buf].shape.dims(), &load.steps);
        concrete(dims.last().unwrap(), self.binding)
            .ok_or_else(|| "unbound dynamic dim in a view".to_string())
    }

    fn bind_reduce(&mut self, r: &reduce::ReduceCode) -> Result<(), String> {
        let nout: usize = self.resolve(&r.out)?.iter().product();
        let l: usize = self.resolve(&r.reduced)?.iter().product();
        if nout == 0 {
            return Ok(());
        }
        // The oracle's errors, before any launch (the kernel's own guard never fires).
        if l == 0 && matches!(r.op, ReduceOp::Max | ReduceOp::Min) {
            return Err(format!(
                "reduce_{} of an empty axis: max/min have no identity element; slice or pad the input so every group is non-empty",
                r.op.name()
            ));
        }
        if l == 0 && r.op == ReduceOp::Mean && r.int_values {
            return Err(
                "reduce_mean of an empty axis: an integer mean of nothing has no value".into(),
            );
        }
        // Too few outputs to fill the device (two blocks per SM): split each long
        // reduction into parts, a block each, then combine the parts per output.
        let fill = 2 * self.t.sm_count.max(1) as usize;
        if let Some(s) = &r.split
            && l >= self.t.split_min
            && nout < fill
        {
            let parts = s.parts as usize;
            self.scratch(reduce::SPLIT_SCRATCH, nout * parts * s.partial_bytes);
            self.launch_lowered(&s.part_entry, Some(s.group), nout * parts)?;
            return self.launch_lowered(&s.combine_entry, s.combine_group, nout);
        }
        self.launch_lowered(&r.entry, r.group, nout)
    }

    /// Launch a kernel lowered to the loop IR over `items` items, or work-groups of
    /// `group` threads (grid-stride over the work-groups beyond the cap, with exactly
    /// the lowering's threads: its trees need every one of them).
    fn launch_lowered(
        &mut self,
        entry: &str,
        group: Option<u32>,
        items: usize,
    ) -> Result<(), String> {
        match group {
            Some(n) => {
                let gx = (items as u64).clamp(1, self.t.grid_cap() * 8) as u32;
                self.launch(entry, (gx, 1, 1), n, true)
            }
            None => self.launch(entry, (blocks(items, self.t), 1, 1), 256, false),
        }
    }
}

/// Patch the error-word marker of every launch to the arena offset.
pub(crate) fn finish_ptrs(plan: &mut Plan) {
    let e = plan.err_off;
    for ks in &mut plan.steps {
        for s in ks {
            if let Step::Launch(l) = s {
                for x in l.ptrs.iter_mut().flatten() {
                    if *x == usize::MAX {
                        *x = e;
                    }
                }
            }
        }
    }
}
