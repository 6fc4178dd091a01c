//! Program kernels → loop kernels.
//!
//! Most kernels become independent work items: one per element of an elementwise
//! kernel's space, one per result element of a short reduction (a serial loop over the
//! reduced positions inside), one per row of a short row op (serial passes over the
//! row). Each item's coordinates are unravelled from the item index, every
//! load's view chain is walked backwards to a buffer offset ([`Cx::view_offset`]), and
//! expressions are spelled in scalar operations with the oracle's dtype rules
//! (`expr.rs`, where every activation's formula lives — the one place GPU backends take
//! it from). Reductions over long axes run a work-group per output instead, and row ops
//! over long or dynamic rows a work-group per row: the items fold strided positions,
//! then combine through a shared array in a fixed tree order (`reduce.rs`), so the
//! result never depends on the launch. A contraction runs a work-group per output tile:
//! A and B slices staged in shared arrays between barriers, a register block of outputs
//! per item, each output folded over K in index order (`matmul.rs`).
//!
//! Attention runs a work-group per block of queries of one (batch, head), key and value
//! tiles staged in shared arrays, an online softmax per query (`attention.rs`); concat, pad and cumsum an item per output element (`opaque.rs`);
//! gather and scatter-add an item per output element, softmax cross-entropy with
//! labels an item per row (`gather.rs`); convolution and pooling an item per output
//! element (`window.rs`); the scaled low-precision ops (fp8/fp6/fp4 codes, their
//! scales, the scaled matmul) an item per output in exact f64 (`scaled.rs`).
//!
//! What is not lowered yet (the other opaque ops, row groups, a few casts) is a
//! [`LowerError::Unsupported`] naming the kernel and the construct, never a guess.

mod attention;
mod attention_tc;
#[cfg(test)]
mod attention_tc_tests;
#[cfg(test)]
mod attention_tests;
mod expr;
mod gather;
#[cfg(test)]
mod gather_tests;
mod kinds;
mod matmul;
#[cfg(test)]
mod matmul_tests;
mod opaque;
#[cfg(test)]
mod opaque_tests;
mod reduce;
mod scaled;
#[cfg(test)]
mod shuffle_tests;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tile_tests;
mod window;
#[cfg(test)]
mod window_tests;

pub use attention::QUERIES as ATTENTION_QUERIES;
pub use matmul::matmul_tile;

use super::build::{Builder, add, bin, div, int, mul, rem, select};
use super::{Access, Bin, Ex, KernelBuf, LoopKernel, SharedArray, Stmt, Ty};
use crate::program::{BufId, Load, Program, ViewStep, chain_dims};
use rlx_ir::Dim;
use std::fmt;

/// Why a kernel could not be lowered.
#[derive(Debug, Clone, PartialEq)]
pub enum LowerError {
    /// The kernel uses something the loop IR does not lower yet.
    Unsupported {
        /// Index of the kernel in the program.
        kernel: usize,
        /// Its label (`elementwise`, `matmul`, …).
        label: String,
        /// The construct.
        what: String,
    },
}

impl fmt::Display for LowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LowerError::Unsupported {
                kernel,
                label,
                what,
            } => write!(
                f,
                "loop lowering: kernel {kernel} ({label}): {what} is not lowered to the loop IR yet; \
                 the backend must run this kernel another way"
            ),
        }
    }
}

impl std::error::Error for LowerError {}

/// Lower kernel `k` of `p`.
pub fn lower_kernel(p: &Program, k: usize) -> Result<LoopKernel, LowerError> {
    lower_kernel_with(p, k, LowerOptions::default())
}

/// Choices a backend makes when lowering; the defaults are what every backend runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LowerOptions {
    /// Finish the work-group trees of reductions (of at least [`SHUFFLE_WIDTH`] items,
    /// no bool states) with [`Stmt::ShuffleXor`] levels instead of shared memory: one
    /// barrier per level fewer below the width, the same result bit for bit. For CUDA
    /// and HIP; WGSL refuses shuffles.
    ///
    /// [`SHUFFLE_WIDTH`]: crate::loops::SHUFFLE_WIDTH
    /// [`Stmt::ShuffleXor`]: crate::loops::Stmt::ShuffleXor
    pub shuffles: bool,
    /// The segment width of the shuffles ([`Stmt::ShuffleXor`]'s `width`): 0 (the
    /// default) for [`SHUFFLE_WIDTH`] (CUDA warps, HIP's explicit width); a WGSL backend
    /// passes its adapter's fixed subgroup size. A power of two ≥ 2; others are refused.
    ///
    /// [`SHUFFLE_WIDTH`]: crate::loops::SHUFFLE_WIDTH
    /// [`Stmt::ShuffleXor`]: crate::loops::Stmt::ShuffleXor
    pub shuffle_width: u32,
    /// `n` ≥ 1: lower f16/bf16 attention (no mask or causal, no softcap, head widths
    /// multiples of 16) through [`Stmt::TileMma`] tile products (tensor cores on CUDA
    /// sm_80+) in work-groups of up to `n` warps (1: the 32 items of the scalar
    /// lowering's groups, so a backend can switch between the two in one entry): scores
    /// and the probability-weighted values within the statement's stated tolerance, the
    /// probabilities rounded to the input dtype. 0 (the default): the scalar lowering.
    /// WGSL refuses tile products.
    ///
    /// [`Stmt::TileMma`]: crate::loops::Stmt::TileMma
    pub tile_warps: u32,
    /// The widest query/key and value heads the scalar attention lowering takes (it keeps
    /// a query row and the output accumulators in variables per item); 0 (the default)
    /// for 256 (the lowering's `MAX_HEAD`, WGSL's limit). CUDA/HIP pass more: wider rows
    /// spill to local memory, correct but slower. Heads over 256 never take tile products.
    pub max_head: usize,
}

impl LowerOptions {
    /// The shuffle width these options ask for ([`SHUFFLE_WIDTH`] for 0), or a refusal
    /// naming kernel `k` of `p` when it is not a power of two ≥ 2.
    ///
    /// [`SHUFFLE_WIDTH`]: crate::loops::SHUFFLE_WIDTH
    fn checked_width(&self, p: &Program, k: usize) -> Result<u32, LowerError> {
        match self.shuffle_width {
            0 => Ok(crate::loops::SHUFFLE_WIDTH),
            w if w >= 2 && w.is_power_of_two() => Ok(w),
            w => Err(Cx::new(p, k).fail(format!(
                "shuffle width {w} (LowerOptions::shuffle_width must be 0 or a power of two >= 2)"
            ))),
        }
    }
}

/// Lower kernel `k` of `p` with `opts`.
pub fn lower_kernel_with(
    p: &Program,
    k: usize,
    opts: LowerOptions,
) -> Result<LoopKernel, LowerError> {
    let mut cx = Cx::new(p, k);
    cx.shuffles = opts.shuffles;
    cx.shuffle_width = opts.checked_width(p, k)?;
    cx.tile_warps = opts.tile_warps;
    cx.max_head = opts.max_head;
    let items = cx.kind()?;
    Ok(cx.into_kernel("", items))
}

/// Reduction kernel `k` of `p` split in two kernels, for reductions too long for one
/// work-group per output: the first runs a work-group per (output, part) — `parts`
/// contiguous chunks of `⌈count / parts⌉` reduced positions, each folded by its group's
/// fixed tree — and stores each part's state at `output · parts + part` of a scratch
/// buffer; the second runs an item per output folding its `parts` states in part order,
/// then the result, epilogue and stores of the unsplit kernel. The result depends on
/// `parts` (a property of the program the backend picks) but never on the launch.
///
/// The scratch buffer is the slot whose [`KernelBuf::buf`] is `p.buffers.len()` (one
/// past the program's buffers; written by the first kernel, read by the second) of
/// `outputs · parts` elements of that slot's dtype: the backend allocates it. Integer
/// means and argmax/argmin (two accumulators) are not split.
pub fn lower_split_reduction(
    p: &Program,
    k: usize,
    parts: u32,
) -> Result<[LoopKernel; 2], LowerError> {
    lower_split_reduction_with(p, k, parts, LowerOptions::default())
}

/// [`lower_split_reduction`] with `opts` (shuffles finish the part kernel's trees).
pub fn lower_split_reduction_with(
    p: &Program,
    k: usize,
    parts: u32,
    opts: LowerOptions,
) -> Result<[LoopKernel; 2], LowerError> {
    let crate::program::KernelKind::Reduce {
        op,
        arg,
        in_space,
        axes,
        keep_dim,
        prologue,
        input,
        out_space,
        dtype,
        epilogue,
    } = &p.kernels[k].kind
    else {
        return Err(Cx::new(p, k).fail("a split of a kernel that is not a reduction".into()));
    };
    if parts == 0 {
        return Err(Cx::new(p, k).fail("a split reduction of 0 parts".into()));
    }
    let r = reduce::Reduction {
        op: *op,
        arg: *arg,
        in_space,
        axes,
        keep_dim: *keep_dim,
        prologue,
        input: *input,
        out_space,
        dtype: *dtype,
        epilogue,
    };
    let mut first = Cx::new(p, k);
    first.shuffles = opts.shuffles;
    first.shuffle_width = opts.checked_width(p, k)?;
    let items = first.reduce(&r, Some(parts))?;
    let first = first.into_kernel("_part", items);
    let mut second = Cx::new(p, k);
    let items = second.reduce_combine(&r, parts)?;
    Ok([first, second.into_kernel("_combine", items)])
}

/// An epilogue of kernel `k` as a fragment for a backend that writes the rest of the
/// kernel itself: `epilogue` evaluated at the point of `space` whose flat row-major index
/// is the host variable `flat` (an index), with the kernel core's value in the host
/// variable `core` (of dtype `core_dtype`'s compute type), then every store of the kernel
/// at `flat`. The returned kernel's `body` is the fragment (render it with
/// [`crate::loops::render_c_statements`]); its `items` is unused.
pub fn lower_epilogue(
    p: &Program,
    k: usize,
    epilogue: &crate::program::Expr,
    space: &[Dim],
    flat: &str,
    core: &str,
    core_dtype: rlx_ir::DType,
) -> Result<LoopKernel, LowerError> {
    let mut cx = Cx::new(p, k);
    let Some(core_ty) = Ty::of(core_dtype) else {
        return Err(cx.fail(format!("an epilogue over {core_dtype:?} values")));
    };
    let flat = Ex::External {
        name: flat.to_string(),
        ty: Ty::Index,
    };
    cx.epilogue_fragment(
        epilogue,
        space,
        flat,
        Ex::External {
            name: core.to_string(),
            ty: core_ty,
        },
    )?;
    Ok(cx.into_kernel("_epilogue", int(0)))
}

/// Node `node` of expression `e` (a prologue of kernel `k`) as a fragment for a backend
/// that writes the rest of the kernel: evaluated at the point of `space` whose flat
/// row-major index is the host variable `flat` and whose coordinates are the host
/// variables `coords` (all indices). Returns the fragment (its `body` computes the value;
/// `items` is unused) and the value (render it with [`crate::loops::render_c_value`]).
pub fn lower_value(
    p: &Program,
    k: usize,
    e: &crate::program::Expr,
    node: u32,
    space: &[Dim],
    flat: &str,
    coords: &[String],
) -> Result<(LoopKernel, Ex), LowerError> {
    let mut cx = Cx::new(p, k);
    let host = |name: &str| Ex::External {
        name: name.to_string(),
        ty: Ty::Index,
    };
    let mut env = expr::Env {
        space,
        flat: host(flat),
        coords: Some(coords.iter().map(|c| host(c)).collect()),
        core: None,
    };
    let values = cx.expr(e, &mut env)?;
    let value = values[node as usize].clone();
    Ok((cx.into_kernel("_value", int(0)), value))
}

/// `name` as an identifier (letters, digits and `_`, not starting with a digit).
fn ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, "p_");
    }
    s
}

/// The state of one kernel's lowering.
struct Cx<'a> {
    p: &'a Program,
    /// The kernel's index in the program.
    k: usize,
    b: Builder,
    slots: Vec<KernelBuf>,
    dims: Vec<u32>,
    /// Work-group size, for kernels lowered to cooperating groups.
    group: Option<u32>,
    shared: Vec<SharedArray>,
    /// See [`LowerOptions::shuffles`].
    shuffles: bool,
    /// See [`LowerOptions::shuffle_width`] (0 resolved to the default).
    shuffle_width: u32,
    /// See [`LowerOptions::tile_warps`].
    tile_warps: u32,
    /// See [`LowerOptions::max_head`] (0: the default).
    max_head: usize,
}

impl<'a> Cx<'a> {
    /// The lowering state of kernel `k` (buffers get slots as the lowering reads or
    /// writes them, so a fragment binds only what it uses).
    fn new(p: &'a Program, k: usize) -> Cx<'a> {
        Cx {
            p,
            k,
            b: Builder::default(),
            slots: Vec::new(),
            dims: Vec::new(),
            group: None,
            shared: Vec::new(),
            shuffles: false,
            shuffle_width: crate::loops::SHUFFLE_WIDTH,
            tile_warps: 0,
            max_head: 0,
        }
    }

    /// The buffer slot of kernel load `l`.
    fn load_slot(&mut self, l: usize) -> Result<usize, LowerError> {
        let buf = self.p.kernels[self.k].loads[l].buf;
        self.slot(buf, Access::Read)
    }

    /// The lowered kernel (`suffix` distinguishes fragments in its name).
    fn into_kernel(self, suffix: &str, items: Ex) -> LoopKernel {
        LoopKernel {
            name: format!("{}_k{}{suffix}", ident(&self.p.name), self.k),
            bufs: self.slots,
            dims: self.dims,
            items,
            group: self.group,
            shared: self.shared,
            vars: self.b.vars,
            body: self.b.body,
        }
    }

    fn slot(&mut self, buf: BufId, access: Access) -> Result<usize, LowerError> {
        if let Some(i) = self.slots.iter().position(|s| s.buf == buf) {
            if self.slots[i].access != access {
                return Err(self.fail(format!("buffer {buf} both read and written by one kernel")));
            }
            return Ok(i);
        }
        let dtype = self.p.buffers[buf].shape.dtype();
        self.slots.push(KernelBuf { buf, dtype, access });
        Ok(self.slots.len() - 1)
    }

    fn dim(&mut self, d: Dim) -> Ex {
        match d {
            Dim::Static(n) => int(n as i64),
            Dim::Dynamic(s) => {
                if !self.dims.contains(&s) {
                    self.dims.push(s);
                }
                Ex::Dim(s)
            }
        }
    }

    /// Row-major coordinates of flat index `f` over `dims`, each bound to a variable.
    fn unravel(&mut self, f: Ex, dims: &[Dim]) -> Vec<Ex> {
        let r = dims.len();
        let mut idx = vec![int(0); r];
        let mut rest = f;
        for d in (0..r).rev() {
            if d == 0 {
                idx[0] = rest.clone();
                break;
            }
            let n = self.dim(dims[d]);
            idx[d] = self.b.bind(Ty::Index, rem(rest.clone(), n.clone()));
            rest = self.b.bind(Ty::Index, div(rest, n));
        }
        idx
    }

    /// `((i0·d1 + i1)·d2 + i2)…`.
    fn ravel(&mut self, idx: &[Ex], dims: &[Dim]) -> Ex {
        let mut e = idx.first().cloned().unwrap_or(int(0));
        for (i, &d) in idx.iter().zip(dims).skip(1) {
            let n = self.dim(d);
            e = add(mul(e, n), i.clone());
        }
        e
    }

    /// The buffer offset load `l` reads at `coords` of its space: its view steps walked
    /// backwards, each mapping indices of its output to indices of its input.
    fn view_offset(&mut self, l: &Load, coords: &[Ex]) -> Ex {
        let dims = chain_dims(self.p.buffers[l.buf].shape.dims(), &l.steps);
        let mut cur: Vec<Ex> = coords.to_vec();
        for k in (1..=l.steps.len()).rev() {
            let (din, dout) = (&dims[k - 1], &dims[k]);
            cur = match &l.steps[k - 1] {
                ViewStep::Reshape(_) => {
                    let f = self.ravel(&cur, dout);
                    let f = self.b.bind(Ty::Index, f);
                    self.unravel(f, din)
                }
                ViewStep::Transpose(perm) => {
                    let mut next = vec![int(0); perm.len()];
                    for (i, &pi) in perm.iter().enumerate() {
                        next[pi] = cur[i].clone();
                    }
                    next
                }
                ViewStep::Narrow { axis, start, .. } => {
                    let mut next = cur.clone();
                    next[*axis] = add(cur[*axis].clone(), int(*start as i64));
                    next
                }
                ViewStep::Expand(_) => {
                    let off = dout.len() - din.len();
                    (0..din.len())
                        .map(|j| match din[j] {
                            Dim::Static(1) => int(0),
                            Dim::Static(_) => cur[j + off].clone(),
                            d => {
                                // A dynamic axis broadcasts when it is bound to 1.
                                let n = self.dim(d);
                                let one = bin(Bin::Eq, n, int(1));
                                select(one, int(0), cur[j + off].clone())
                            }
                        })
                        .collect()
                }
            };
        }
        let f = self.ravel(&cur, &dims[0]);
        self.b.bind(Ty::Index, f)
    }

    /// The error for something this kernel uses that is not lowered.
    fn fail(&self, what: String) -> LowerError {
        LowerError::Unsupported {
            kernel: self.k,
            label: self.p.kernels[self.k].label(),
            what,
        }
    }

    /// `Π dims` as an index expression.
    fn numel(&mut self, dims: &[Dim]) -> Ex {
        let mut n = int(1);
        for &d in dims {
            let v = self.dim(d);
            n = mul(n, v);
        }
        n
    }

    /// The statements `f` appends, taken out of the body (a loop's or a branch's body).
    fn nested<R>(
        &mut self,
        f: impl FnOnce(&mut Self) -> Result<R, LowerError>,
    ) -> Result<(Vec<Stmt>, R), LowerError> {
        let outer = std::mem::take(&mut self.b.body);
        let r = f(self);
        let inner = std::mem::replace(&mut self.b.body, outer);
        Ok((inner, r?))
    }

    /// `for var in 0..end { body }` where `body` is built by `f` from the counter.
    fn counted(
        &mut self,
        end: Ex,
        f: impl FnOnce(&mut Self, Ex) -> Result<(), LowerError>,
    ) -> Result<(), LowerError> {
        let var = self.b.var(Ty::Index);
        let (body, ()) = self.nested(|cx| f(cx, Ex::Var(var)))?;
        self.b.push(Stmt::Loop {
            var,
            start: int(0),
            end,
            body,
        });
        Ok(())
    }

    /// A variable initialised to `init`, to be updated with [`Cx::assign`].
    fn accumulator(&mut self, ty: Ty, init: Ex) -> super::Var {
        let var = self.b.var(ty);
        self.b.push(Stmt::Let { var, value: init });
        var
    }

    fn assign(&mut self, var: super::Var, value: Ex) {
        self.b.push(Stmt::Assign { var, value });
    }
}
