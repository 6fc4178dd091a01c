//! Row programs: a row group's stage evaluated one row at a time, in vector loops over
//! the row, with every per-row statistic (`[R, 1]` broadcast along the row) a scalar.
//!
//! The generic stage path evaluates tiles of several short rows: each tile pays the
//! tile program's fixed cost, and a statistic broadcast along the rows is copied out
//! row segment by row segment so the tile sees a vector (a LayerNorm backward over
//! `[1024, 256]` spent most of its time there and ran at a sixth of the bandwidth
//! bound). A row program reads each row where it lies (`x`, `gy`, a gain `[C]` are
//! pointers), keeps each statistic a scalar, and folds a row's sum in 32 f64 lanes.
//!
//! It takes f32 stages whose expressions use only loads, f32 literals and `+ − · ÷`,
//! and whose loads are strided with stride 0 or 1 along the row (any row stride): the
//! normalizations' backwards. Anything else keeps the generic path (stage by stage).
//! Each operation is the IEEE f32 operation of the expression (no contraction into
//! fused multiply-adds), so results stay within the oracle's tolerances; a row's sum
//! does not depend on the block or thread that computes it.

use super::super::loads::LoadPlan;
use super::super::loads::{BindCtx, plan_load};
use super::super::vm::{InstrOp, TileProg};
use crate::math;
use rlx_compile::program::{EOp, Expr, Kernel, Scalar};
use rlx_ir::{BinaryOp, DType};
use std::sync::Arc;

/// Whether row programs run (`RLX_ROW_PROGRAMS=0` keeps every stage on the generic
/// path: for A/B measurements in one process, read when a program is bound).
pub(super) fn enabled() -> bool {
    std::env::var_os("RLX_ROW_PROGRAMS").is_none_or(|v| v != "0")
}

/// Where a load's elements lie for row `r`: element `off + r·sr` of buffer `buf`,
/// then along the row with stride 1 (`vec`) or 0 (a scalar per row).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Src {
    pub(super) buf: usize,
    pub(super) off: isize,
    pub(super) sr: isize,
    pub(super) vec: bool,
}

/// The arithmetic a row program runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Bop {
    Add,
    Sub,
    Mul,
    Div,
}

/// One instruction (an expression node).
#[derive(Clone, Copy, Debug)]
enum Ins {
    Load(usize),
    Const(f32),
    Bin(Bop, u32, u32),
}

/// A value of a node for one row: a run of `c` floats or a scalar.
#[derive(Clone, Copy)]
pub(super) enum V {
    P(*const f32),
    S(f32),
}

/// A stage's expression as a row program.
pub(super) struct RowProg {
    srcs: Vec<Src>,
    ins: Vec<Ins>,
    /// Dense f32 stores of the space: (node, buffer).
    stores: Vec<(u32, usize)>,
    /// The expression as machine code (see [`crate::jit`]), one call per row: the whole
    /// row in vector registers, only the exported values written.
    jit: Option<RowJit>,
}

/// A row program's machine code: its inputs (the expression's loads in node order, as
/// sources) and exported nodes.
struct RowJit {
    code: Arc<crate::jit::JitKernel>,
    inputs: Vec<usize>,
}

impl RowProg {
    /// The row program of `expr` (with `k`'s loads, evaluated over the group's space
    /// `dims`), its dense f32 `stores` and the nodes its machine code exports (a
    /// reduction's input, or the stored nodes), or `None` when the stage needs the generic
    /// path (another dtype or op, a load with another stride along the row, a table).
    pub(super) fn new(
        cx: BindCtx<'_>,
        k: &Kernel,
        expr: &Expr,
        dims: &[usize],
        stores: &[(u32, usize)],
        exports: &[u32],
    ) -> Option<RowProg> {
        let (p, bd, b) = (cx.program, cx.buffer_dims, cx.binding);
        let mut srcs = Vec::with_capacity(k.loads.len());
        let mut planned: Vec<Option<usize>> = vec![None; k.loads.len()];
        let mut ins = Vec::with_capacity(expr.nodes.len());
        for n in &expr.nodes {
            if n.dtype != DType::F32 {
                return None;
            }
            ins.push(match n.op {
                EOp::Load(i) => {
                    let j = match planned.get(i)? {
                        Some(j) => *j,
                        None => {
                            let pl = plan_load(p, bd, &k.loads[i], dims, b).ok()?;
                            srcs.push(classify(&pl, dims)?);
                            planned[i] = Some(srcs.len() - 1);
                            srcs.len() - 1
                        }
                    };
                    Ins::Load(j)
                }
                EOp::Const(Scalar::F(v)) => Ins::Const(v as f32),
                EOp::Binary(op) => {
                    let op = match op {
                        BinaryOp::Add => Bop::Add,
                        BinaryOp::Sub => Bop::Sub,
                        BinaryOp::Mul => Bop::Mul,
                        BinaryOp::Div => Bop::Div,
                        _ => return None,
                    };
                    let [a, c] = n.args[..] else { return None };
                    Ins::Bin(op, a, c)
                }
                _ => return None,
            });
        }
        for &(_, buf) in stores {
            let sb = &p.buffers[buf];
            let numel: usize = bd[buf].iter().product();
            if sb.shape.dtype() != DType::F32 || numel != dims.iter().product::<usize>() {
                return None;
            }
        }
        let mut prog = RowProg {
            srcs,
            ins,
            stores: stores.to_vec(),
            jit: None,
        };
        prog.jit = prog.compile(cx, expr, &planned, exports);
        Some(prog)
    }

    /// The machine code for `expr` exporting `exports` (one pointer per row each), when
    /// the JIT is on and takes the expression.
    fn compile(
        &self,
        cx: BindCtx<'_>,
        expr: &Expr,
        planned: &[Option<usize>],
        exports: &[u32],
    ) -> Option<RowJit> {
        // Nothing computed (a sum of an input's rows): node by node reads the rows where
        // they lie, where machine code would copy them out first.
        if !crate::jit::enabled() || expr.is_trivial() {
            return None;
        }
        let tp = TileProg::build(expr)?;
        let mut inputs = Vec::new();
        for i in &tp.instrs {
            match i.op {
                InstrOp::Load(l) => inputs.push((*planned.get(l)?)?),
                InstrOp::Core => return None,
                _ => {}
            }
        }
        if inputs.len() > 64 || exports.is_empty() || exports.len() > 32 {
            return None;
        }
        let mask = inputs
            .iter()
            .enumerate()
            .filter(|(_, j)| !self.srcs[**j].vec)
            .fold(0u64, |m, (k, _)| m | 1 << k);
        let ex: Vec<usize> = exports.iter().map(|&x| x as usize).collect();
        let code = cx.jit.get_or_compile(&tp, &ex, mask, false)?;
        (code.scalar_mask == mask && code.inputs == inputs.len() && code.exports == ex)
            .then_some(RowJit { code, inputs })
    }

    /// Run row `r` as machine code, writing export `k` to `outs[k]` (`c` floats each);
    /// `false` (nothing done) when there is no code or the JIT is off.
    ///
    /// # Safety
    /// As [`Self::eval`]; each `outs[k]` holds `c` floats and overlaps an input only at
    /// the same element (a row stored over itself).
    pub(super) unsafe fn run_jit(
        &self,
        bases: &[*mut u8],
        r: usize,
        c: usize,
        outs: &[*mut f32],
    ) -> bool {
        let Some(j) = &self.jit else { return false };
        if !crate::jit::enabled() {
            return false;
        }
        let mut ins = [std::ptr::null::<f32>(); 64];
        for (k, &si) in j.inputs.iter().enumerate() {
            let s = self.srcs[si];
            // SAFETY: as in eval: element `off + r·sr` (and the row after it, for a vector)
            // lies inside buffer `s.buf`; a scalar input is read as one value.
            ins[k] = unsafe { (bases[s.buf] as *const f32).offset(s.off + r as isize * s.sr) };
        }
        // SAFETY: each input covers `c` lanes (or is one scalar, as the mask the code was
        // compiled for says) and each output `c` lanes (caller).
        unsafe { j.code.run(&ins[..j.inputs.len()], outs, c) };
        true
    }

    /// The dense stores' rows `r` as JIT outputs (one per exported node, in order), when
    /// every stored node is stored once.
    ///
    /// # Safety
    /// The store buffers hold the dense f32 space and `r` is a row of it.
    pub(super) unsafe fn store_rows(&self, bases: &[*mut u8], r: usize, c: usize) -> [*mut f32; 4] {
        let mut o = [std::ptr::null_mut(); 4];
        for (k, &(_, buf)) in self.stores.iter().enumerate().take(4) {
            // SAFETY: row `r` of the dense space starts at element `r·c` (caller).
            o[k] = unsafe { (bases[buf] as *mut f32).add(r * c) };
        }
        o
    }

    /// The program's loads, in the order of their first use.
    pub(super) fn srcs(&self) -> &[Src] {
        &self.srcs
    }

    /// Node `node` of the expression evaluated on one element in f64, with each load's
    /// value `load(src)` (a probe: the LayerNorm-backward detector, `lnbwd.rs`, checks
    /// what a stage computes by evaluating it at a few points).
    pub(super) fn probe(&self, node: u32, load: &dyn Fn(&Src) -> f64) -> f64 {
        let mut v = Vec::with_capacity(self.ins.len());
        for ins in &self.ins {
            v.push(match *ins {
                Ins::Load(j) => load(&self.srcs[j]),
                Ins::Const(c) => c as f64,
                Ins::Bin(op, a, b) => {
                    let (x, y) = (v[a as usize], v[b as usize]);
                    match op {
                        Bop::Add => x + y,
                        Bop::Sub => x - y,
                        Bop::Mul => x * y,
                        Bop::Div => x / y,
                    }
                }
            });
        }
        v.get(node as usize).copied().unwrap_or(f64::NAN)
    }

    /// The stored nodes and their buffers.
    pub(super) fn stores(&self) -> &[(u32, usize)] {
        &self.stores
    }

    /// Number of dense stores.
    pub(super) fn n_stores(&self) -> usize {
        self.stores.len()
    }

    /// Scratch floats a row of `c` needs (one run per node).
    pub(super) fn scratch_len(&self, c: usize) -> usize {
        self.ins.len() * c
    }

    /// Evaluate every node on row `r` (`c` long) into `vals`; runs in `scratch`.
    ///
    /// # Safety
    /// `bases` are the buffers the program was planned for and `r` is a row of its space.
    pub(super) unsafe fn eval(
        &self,
        bases: &[*mut u8],
        r: usize,
        c: usize,
        scratch: &mut [f32],
        vals: &mut Vec<V>,
    ) {
        vals.clear();
        for (i, ins) in self.ins.iter().enumerate() {
            let v = match *ins {
                Ins::Load(j) => {
                    let s = self.srcs[j];
                    // SAFETY: `s` was planned from a strided load over the space, so element
                    // `off + r·sr` (+ the row for a vector) lies inside buffer `s.buf`.
                    let p =
                        unsafe { (bases[s.buf] as *const f32).offset(s.off + r as isize * s.sr) };
                    if s.vec {
                        V::P(p)
                    } else {
                        // SAFETY: as above (one element).
                        V::S(unsafe { *p })
                    }
                }
                Ins::Const(v) => V::S(v),
                Ins::Bin(op, a, b) => {
                    let out = &mut scratch[i * c..(i + 1) * c];
                    match (vals[a as usize], vals[b as usize]) {
                        (V::S(x), V::S(y)) => V::S(scalar(op, x, y)),
                        (x, y) => {
                            // SAFETY: a vector value holds `c` floats (a row of a buffer or a
                            // scratch run of an earlier node, never `out`).
                            unsafe { bin(op, x, y, out) };
                            V::P(out.as_ptr())
                        }
                    }
                }
            };
            vals.push(v);
        }
    }

    /// Write row `r`'s stored values (after [`Self::eval`]).
    ///
    /// # Safety
    /// As [`Self::eval`]; the store buffers hold the dense f32 space.
    pub(super) unsafe fn store(&self, bases: &[*mut u8], r: usize, c: usize, vals: &[V]) {
        for &(node, buf) in &self.stores {
            // SAFETY: the store buffer holds the space densely (checked in new): row `r` is
            // `c` floats from element `r·c`.
            let dst =
                unsafe { std::slice::from_raw_parts_mut((bases[buf] as *mut f32).add(r * c), c) };
            match vals[node as usize] {
                // SAFETY: a vector value holds `c` floats; it may be this very row (an
                // in-place store of the same row), which copy handles (`ptr::copy`).
                V::P(p) => unsafe { std::ptr::copy(p, dst.as_mut_ptr(), c) },
                V::S(s) => dst.fill(s),
            }
        }
    }
}

/// A load's row source, if its stride along the row is 0 or 1 and its row offsets are
/// one stride times the flat row index.
fn classify(pl: &LoadPlan, dims: &[usize]) -> Option<Src> {
    if pl.table.is_some() || pl.dtype != DType::F32 || dims.is_empty() {
        return None;
    }
    let last = dims.len() - 1;
    let sc = pl.strides[last];
    if sc != 0 && sc != 1 {
        return None;
    }
    // Rows counted from the innermost leading axis out: axis `i` steps `prod` rows.
    let (mut sr, mut prod) = (None::<isize>, 1isize);
    for i in (0..last).rev() {
        if dims[i] > 1 {
            let s = pl.strides[i];
            match sr {
                None if prod == 1 => sr = Some(s),
                None => {
                    if s % prod != 0 {
                        return None;
                    }
                    sr = Some(s / prod);
                }
                Some(q) if q * prod == s => {}
                Some(_) => return None,
            }
        }
        prod *= dims[i] as isize;
    }
    Some(Src {
        buf: pl.buf,
        off: pl.offset as isize,
        sr: sr.unwrap_or(0),
        vec: sc == 1,
    })
}

fn scalar(op: Bop, x: f32, y: f32) -> f32 {
    match op {
        Bop::Add => x + y,
        Bop::Sub => x - y,
        Bop::Mul => x * y,
        Bop::Div => x / y,
    }
}

/// `out = x op y` over a row, one operand possibly a scalar.
///
/// # Safety
/// A vector operand holds `out.len()` floats and does not overlap `out`.
unsafe fn bin(op: Bop, x: V, y: V, out: &mut [f32]) {
    let n = out.len();
    // SAFETY: the caller guarantees each vector operand holds `n` floats.
    let sl = |p: *const f32| unsafe { std::slice::from_raw_parts(p, n) };
    match (x, y) {
        (V::P(a), V::P(b)) => bin_vv(op, sl(a), sl(b), out),
        (V::P(a), V::S(s)) => bin_vs(op, sl(a), s, out, false),
        (V::S(s), V::P(b)) => bin_vs(op, sl(b), s, out, true),
        (V::S(a), V::S(b)) => out.fill(scalar(op, a, b)),
    }
}

/// One loop per op, cut to one length (no bounds checks: LLVM vectorizes them).
macro_rules! each_op {
    ($op:expr, |$a:ident, $b:ident| $body:ident) => {
        match $op {
            Bop::Add => $body!(|$a, $b| $a + $b),
            Bop::Sub => $body!(|$a, $b| $a - $b),
            Bop::Mul => $body!(|$a, $b| $a * $b),
            Bop::Div => $body!(|$a, $b| $a / $b),
        }
    };
}

math::wide_fn! {
    baseline = bin_vv_base;
    /// `out[i] = a[i] op b[i]`, compiled for the CPU's widest vectors.
    fn bin_vv(op: Bop, a: &[f32], b: &[f32], out: &mut [f32]) {
        let n = out.len();
        let (a, b) = (&a[..n], &b[..n]);
        macro_rules! lp {
            (|$x:ident, $y:ident| $e:expr) => {
                for ((o, &$x), &$y) in out.iter_mut().zip(a).zip(b) {
                    *o = $e;
                }
            };
        }
        each_op!(op, |x, y| lp)
    }
}

math::wide_fn! {
    baseline = bin_vs_base;
    /// `out[i] = a[i] op s` (or `s op a[i]` when `swap`), compiled for the widest vectors.
    fn bin_vs(op: Bop, a: &[f32], s: f32, out: &mut [f32], swap: bool) {
        let n = out.len();
        let a = &a[..n];
        macro_rules! lp {
            (|$x:ident, $y:ident| $e:expr) => {
                if swap {
                    for (o, &v) in out.iter_mut().zip(a) {
                        let ($x, $y) = (s, v);
                        *o = $e;
                    }
                } else {
                    for (o, &v) in out.iter_mut().zip(a) {
                        let ($x, $y) = (v, s);
                        *o = $e;
                    }
                }
            };
        }
        each_op!(op, |x, y| lp)
    }
}

math::wide_fn! {
    baseline = row_sum_base;
    /// Σ `xs` in f64: 32 lanes (four vector accumulators, so the additions overlap),
    /// the lanes then added as a fixed tree, then the remainder in order.
    pub(super) fn row_sum(xs: &[f32]) -> f64 {
        let mut lanes = [0f64; 32];
        let mut it = xs.chunks_exact(32);
        for ch in &mut it {
            // A fixed-size array: no bounds checks, the lanes stay in vector registers.
            let ch: &[f32; 32] = ch.try_into().expect("chunks of 32");
            for k in 0..32 {
                lanes[k] += ch[k] as f64;
            }
        }
        // The lanes folded as a fixed tree (halves added lane by lane): a few vector
        // additions, where adding 32 lanes one after another cost a row 32 latencies.
        // Through a black box: seen together with the tree, the loop's lanes were split
        // into 2-lane registers (LLVM's SLP vectorizer).
        let lanes = std::hint::black_box(lanes);
        let mut h = [0f64; 16];
        for k in 0..16 {
            h[k] = lanes[k] + lanes[k + 16];
        }
        let mut q = [0f64; 8];
        for k in 0..8 {
            q[k] = h[k] + h[k + 8];
        }
        let (a, b) = ((q[0] + q[4]) + (q[2] + q[6]), (q[1] + q[5]) + (q[3] + q[7]));
        let mut s = a + b;
        for &x in it.remainder() {
            s += x as f64;
        }
        s
    }
}

/// Σ of a node's row value in f64 (a scalar counts `c` times, added one by one as the
/// generic fold does).
///
/// # Safety
/// A vector value holds `c` floats.
pub(super) unsafe fn sum_value(v: V, c: usize) -> f64 {
    match v {
        // SAFETY: the caller guarantees `c` floats.
        V::P(p) => row_sum(unsafe { std::slice::from_raw_parts(p, c) }),
        V::S(s) => (0..c).fold(0f64, |a, _| a + s as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_loops_compiled_wide_have_the_baseline_bits() {
        for n in [1usize, 7, 16, 31, 32, 33, 256, 300] {
            let a: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 0.37)
                .collect();
            let b: Vec<f32> = (0..n)
                .map(|i| ((i * 104_729 % 997) as f32 + 1.0) * 0.013)
                .collect();
            for op in [Bop::Add, Bop::Sub, Bop::Mul, Bop::Div] {
                let (mut o1, mut o2) = (vec![0f32; n], vec![0f32; n]);
                bin_vv_base(op, &a, &b, &mut o1);
                bin_vv(op, &a, &b, &mut o2);
                assert_eq!(o1, o2, "{op:?} n = {n}");
                for (i, (x, y)) in a.iter().zip(&b).enumerate() {
                    assert_eq!(o1[i].to_bits(), scalar(op, *x, *y).to_bits());
                }
                for swap in [false, true] {
                    bin_vs_base(op, &a, 1.7, &mut o1, swap);
                    bin_vs(op, &a, 1.7, &mut o2, swap);
                    assert_eq!(o1, o2, "{op:?} swap={swap} n = {n}");
                }
            }
            assert_eq!(row_sum_base(&a).to_bits(), row_sum(&a).to_bits(), "n = {n}");
            let exact: f64 = a.iter().map(|&v| v as f64).sum();
            assert!((row_sum(&a) - exact).abs() <= 1e-9 * exact.abs().max(1.0));
        }
    }
}
