//! The tile interpreter: an expression compiled to instructions that each process a
//! whole tile with one tight loop (vectorizable; transcendental functions go through
//! the vectorized `math` kernels). Intermediates live in a few registers of
//! [`TILE`] elements — a per-thread scratch that stays in L1.

use super::loads::{LoadPlan, TilePos, fetch};
use super::ops;
use super::value::{TileValue, Ty};
use rlx_compile::program::{EOp, Expr, Scalar};
use rlx_ir::{DType, FloatFormat};

thread_local! {
    /// This thread's tile scratch, reused by every kernel chunk it runs.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::new());
}

/// Run `f` with this thread's tile scratch.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|s| f(&mut s.borrow_mut()))
}

/// Elements per tile.
pub(crate) const TILE: usize = 1024;

/// What one instruction does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum InstrOp {
    Load(usize),
    Const(u64),
    Core,
    Unary(rlx_ir::Activation),
    Binary(rlx_ir::BinaryOp),
    /// Compare in the given compute type (operands converted to it first).
    Compare(rlx_ir::CmpOp, Ty),
    Where,
    Cast(DType),
    Round(FloatFormat),
}

/// One instruction: `dst = op(args)` with result dtype `dtype`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Instr {
    pub(crate) op: InstrOp,
    pub(crate) args: [u32; 3],
    pub(crate) dtype: DType,
    pub(crate) ty: Ty,
    /// Register for a vector result.
    pub(crate) reg: u32,
}

/// A compiled expression.
#[derive(Debug, Clone, Default)]
pub(crate) struct TileProg {
    pub(crate) instrs: Vec<Instr>,
    pub(crate) nregs: usize,
}

/// Scalar bits of a literal in compute type `ty`.
fn const_bits(s: Scalar, dt: DType, ty: Ty) -> u64 {
    match (s, ty) {
        (Scalar::F(v), Ty::F32) => super::value::round_f32(dt, v as f32).to_bits() as u64,
        (Scalar::F(v), Ty::F64) => v.to_bits(),
        (Scalar::F(v), Ty::I64) => v as i64 as u64,
        (Scalar::I(v), Ty::F32) => (v as f32).to_bits() as u64,
        (Scalar::I(v), Ty::F64) => (v as f64).to_bits(),
        (Scalar::I(v), Ty::I64) => v as u64,
    }
}

/// The compute type a comparison of `a` and `b` runs in (exact for both operands).
pub(crate) fn compare_ty(a: DType, b: DType) -> Ty {
    let (ta, tb) = (Ty::of(a).unwrap(), Ty::of(b).unwrap());
    match (ta, tb) {
        (Ty::I64, Ty::I64) => Ty::I64,
        (Ty::F32, Ty::F32) => Ty::F32,
        _ => Ty::F64,
    }
}

impl TileProg {
    /// Compile `e`. Returns `None` if a node has no tile implementation (complex data).
    pub(crate) fn build(e: &Expr) -> Option<TileProg> {
        let n = e.nodes.len();
        // Values nobody reads (the stored ones) live to the end.
        let mut last_use = vec![usize::MAX; n];
        for (i, node) in e.nodes.iter().enumerate() {
            for &a in &node.args {
                let l = &mut last_use[a as usize];
                *l = if *l == usize::MAX { i } else { (*l).max(i) };
            }
        }
        // Casts and selects may return an operand's tile as their own: such an
        // operand's register must live as long as the result does.
        for i in (0..n).rev() {
            if matches!(e.nodes[i].op, EOp::Cast | EOp::Where) {
                for &a in &e.nodes[i].args {
                    let a = a as usize;
                    last_use[a] = last_use[a].max(last_use[i]);
                }
            }
        }
        let mut free: Vec<u32> = Vec::new();
        let mut nregs = 0u32;
        let mut instrs = Vec::with_capacity(n);
        for (i, node) in e.nodes.iter().enumerate() {
            let ty = Ty::of(node.dtype)?;
            for a in &node.args {
                Ty::of(e.nodes[*a as usize].dtype)?;
            }
            let op = match &node.op {
                EOp::Load(l) => InstrOp::Load(*l),
                EOp::Const(s) => InstrOp::Const(const_bits(*s, node.dtype, ty)),
                EOp::Core => InstrOp::Core,
                EOp::Unary(a) => InstrOp::Unary(*a),
                EOp::Binary(b) => InstrOp::Binary(*b),
                EOp::Compare(c) => InstrOp::Compare(
                    *c,
                    compare_ty(
                        e.nodes[node.args[0] as usize].dtype,
                        e.nodes[node.args[1] as usize].dtype,
                    ),
                ),
                EOp::Where => InstrOp::Where,
                EOp::Cast => InstrOp::Cast(e.nodes[node.args[0] as usize].dtype),
                EOp::RoundToFormat {
                    exp_bits,
                    man_bits,
                    max_normal,
                } => InstrOp::Round(FloatFormat::ieee(*exp_bits, *man_bits, *max_normal)),
            };
            // The result register is taken before the operands' registers are freed,
            // so no instruction writes over a register it reads.
            let reg = free.pop().unwrap_or_else(|| {
                nregs += 1;
                nregs - 1
            });
            let mut args = [0u32; 3];
            for (k, &a) in node.args.iter().enumerate() {
                args[k] = a;
            }
            instrs.push(Instr {
                op,
                args,
                dtype: node.dtype,
                ty,
                reg,
            });
            let mut dead: Vec<u32> = node
                .args
                .iter()
                .filter(|&&a| last_use[a as usize] == i)
                .map(|&a| instrs[a as usize].reg)
                .collect();
            dead.sort_unstable();
            dead.dedup();
            free.extend(dead);
        }
        Some(TileProg {
            instrs,
            nregs: nregs as usize,
        })
    }
}

/// Per-thread scratch: registers and slot values.
pub(crate) struct Scratch {
    regs: Vec<u64>,
    pub(crate) slots: Vec<TileValue>,
}

impl Scratch {
    pub(crate) fn new() -> Scratch {
        Scratch {
            regs: Vec::new(),
            slots: Vec::new(),
        }
    }

    pub(crate) fn ensure(&mut self, nregs: usize, nslots: usize) {
        if self.regs.len() < nregs * TILE {
            self.regs.resize(nregs * TILE, 0);
        }
        if self.slots.len() < nslots {
            self.slots.resize(nslots, TileValue::Scalar(0));
        }
    }

    /// Register `r`: `TILE` 8-byte slots. Panics if `r` is beyond what [`ensure`]
    /// sized (the callers write `TILE` elements through the pointer, so an unchecked
    /// offset here would be an out-of-bounds write).
    ///
    /// [`ensure`]: Scratch::ensure
    pub(crate) fn reg(&mut self, r: u32) -> *mut u8 {
        let at = r as usize * TILE;
        self.regs[at..at + TILE].as_mut_ptr() as *mut u8
    }
}

/// Everything a tile evaluation reads.
pub(crate) struct TileEnv<'a> {
    pub(crate) loads: &'a [LoadPlan],
    pub(crate) bases: &'a [*mut u8],
    pub(crate) core: Option<TileValue>,
    /// Per instruction, an output buffer to compute its value into (at the tile's flat
    /// offset) instead of a scratch register; null or absent: the scratch.
    pub(crate) direct: &'a [*mut u8],
    /// Prefetch each contiguous load's next tile when it is fetched (all at once).
    pub(crate) prefetch: bool,
    /// Runs of a later tile (start, bytes) of which a share is prefetched before each
    /// instruction, so the loads from memory overlap the whole tile's compute instead
    /// of stalling its first passes. Streaming kernels use this instead of `prefetch`
    /// (whose burst of a tile's lines at once fills the miss buffers): W1 at 16M
    /// elements went from 7.7–8.1 ms (bursts: 8.3–9.2) to 5.0–6.5 ms.
    pub(crate) spread: &'a [(*const u8, usize)],
}

/// Prefetch share `k` of `parts` of the runs in `spread`.
#[inline(always)]
fn prefetch_share(spread: &[(*const u8, usize)], k: usize, parts: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: _mm_prefetch is SSE (every x86-64 CPU) and is only a hint: it never faults or
    // reads memory architecturally, so any address (computed with wrapping_add) is allowed.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        for &(p, bytes) in spread {
            let lines = bytes.div_ceil(64);
            let (a, b) = (lines * k / parts, lines * (k + 1) / parts);
            for l in a..b {
                _mm_prefetch(p.wrapping_add(l * 64) as *const i8, _MM_HINT_T0);
            }
        }
    }
}

/// A tile's inputs for compiled code: per load (and product value) instruction, in
/// instruction order, a pointer to its run of values, or its scalar bits.
pub(crate) struct TileInputs {
    ptrs: [*const f32; 64],
    /// Scalar inputs' bits (an f32 in the low half: little-endian, read in place).
    scal: [u64; 64],
    n: usize,
    /// Bit `j` set: input `j` is a scalar.
    pub(crate) mask: u64,
}

impl TileInputs {
    /// No inputs yet (filled by [`fetch_inputs_into`]).
    pub(crate) fn new() -> TileInputs {
        TileInputs {
            ptrs: [std::ptr::null(); 64],
            scal: [0; 64],
            n: 0,
            mask: 0,
        }
    }
}

/// Fetch the inputs of `prog` for tile `t` exactly as [`run_tile`] fetches them (into
/// `s.slots` too), into scratch registers past those the interpreter and `exports`
/// outputs use; `None` beyond 64 inputs.
///
/// # Safety
/// As [`run_tile`].
pub(crate) unsafe fn fetch_inputs(
    prog: &TileProg,
    env: &TileEnv<'_>,
    t: &TilePos<'_>,
    s: &mut Scratch,
    exports: usize,
) -> Option<TileInputs> {
    let mut x = TileInputs::new();
    // SAFETY: this function's contract is fetch_inputs_into's.
    unsafe { fetch_inputs_into(prog, env, t, s, exports, &mut x) }.then_some(x)
}

/// [`fetch_inputs`] into the caller's `x` (a kilobyte: filled in place instead of
/// moved out through an `Option`, which cost two copies per tile of a small eager
/// call); `false` beyond 64 inputs.
///
/// # Safety
/// As [`run_tile`].
pub(crate) unsafe fn fetch_inputs_into(
    prog: &TileProg,
    env: &TileEnv<'_>,
    t: &TilePos<'_>,
    s: &mut Scratch,
    exports: usize,
    x: &mut TileInputs,
) -> bool {
    let inputs = prog
        .instrs
        .iter()
        .enumerate()
        .filter(|(_, ins)| matches!(ins.op, InstrOp::Load(_) | InstrOp::Core));
    let n = inputs.clone().count();
    if n > 64 {
        return false;
    }
    // Sized once, before any register pointer is taken.
    s.ensure(prog.nregs + n + exports, prog.instrs.len());
    x.n = n;
    x.mask = 0;
    for (j, (i, ins)) in inputs.enumerate() {
        let v = match &ins.op {
            InstrOp::Load(l) => {
                let p = &env.loads[*l];
                let reg = s.reg((prog.nregs + j) as u32);
                // No burst prefetch: the compiled loop streams its inputs in order,
                // which the hardware prefetcher follows.
                // SAFETY: `fetch_inputs_into` has run_tile's contract (every load plan in bounds of
                // its buffer for this tile, `t.len <= TILE`), which is fetch's; `reg` is
                // scratch register `prog.nregs + j`, sized by `ensure` above for `TILE >=
                // t.len` elements.
                unsafe { fetch(p, env.bases[p.buf], t, ins.ty, reg, false) }
            }
            _ => env.core.expect("core value supplied to epilogues"),
        };
        match v {
            TileValue::Vector(p) => x.ptrs[j] = p as *const f32,
            TileValue::Scalar(b) => {
                x.scal[j] = b;
                x.mask |= 1 << j;
            }
        }
        s.slots[i] = v;
    }
    true
}

/// Evaluate `prog` on tile `t` with `jit` (see [`crate::jit`]), compiled for the scalar
/// pattern of `inputs` (fetched by [`fetch_inputs`]): the whole expression runs in
/// vector registers and each export is written to `targets` (when given: the output
/// pointers at this tile, checked by the caller), else to its direct output target or a
/// scratch register; `s.slots` then holds the exports too (all a tile's stores read).
///
/// # Safety
/// As [`run_tile`].
pub(crate) unsafe fn run_tile_jit(
    prog: &TileProg,
    jit: &crate::jit::JitKernel,
    inputs: &mut TileInputs,
    env: &TileEnv<'_>,
    t: &TilePos<'_>,
    s: &mut Scratch,
    targets: Option<&[*mut f32]>,
) {
    // The code reads a run of `t.len` values behind every input not in its scalar mask:
    // a scalar input (one u64 below) read that way would be an out-of-bounds read.
    assert_eq!(
        inputs.mask, jit.scalar_mask,
        "JIT kernel run with another scalar pattern"
    );
    let (nin, nout) = (inputs.n, jit.exports.len());
    for j in 0..nin {
        if inputs.mask >> j & 1 == 1 {
            inputs.ptrs[j] = &inputs.scal[j] as *const u64 as *const f32;
        }
    }
    let mut outs = [std::ptr::null_mut::<f32>(); 32];
    for (k, &x) in jit.exports.iter().enumerate() {
        outs[k] = match (targets, env.direct.get(x)) {
            (Some(tg), _) => tg[k],
            // SAFETY: a non-null direct target is the base of an output buffer whose dtype is
            // this instruction's compute type (EwPlan::direct_targets only sets native stores)
            // and which holds the kernel's whole space, so `t.flat + t.len` elements of it are
            // in bounds.
            (None, Some(&d)) if !d.is_null() => unsafe {
                d.add(t.flat * prog.instrs[x].ty.size()) as *mut f32
            },
            _ => s.reg((prog.nregs + nin + k) as u32) as *mut f32,
        };
    }
    // SAFETY: the scalar pattern matches the compiled one (asserted above), so each non-scalar
    // input points at `t.len` values from `fetch` and each scalar one at its u64 in
    // `inputs.scal`; each output is a caller-checked target, a direct output buffer in bounds
    // for this tile, or a scratch register of TILE slots; outputs overlap inputs only at the
    // same lane (an in-place plan reads its dense input where it writes; a direct target
    // never overlaps a loaded buffer), which `run`'s contract allows.
    unsafe { jit.run(&inputs.ptrs[..nin], &outs[..nout], t.len) };
    for (k, &x) in jit.exports.iter().enumerate() {
        s.slots[x] = TileValue::Vector(outs[k] as *mut u8);
    }
}

/// Evaluate `prog` on tile `t` into `s.slots`. Errors (integer division by zero,
/// negative shifts) are messages naming the op.
///
/// # Safety
/// Every load plan must be in bounds of its buffer for this tile, and `t.len ≤ TILE`.
pub(crate) unsafe fn run_tile(
    prog: &TileProg,
    env: &TileEnv<'_>,
    t: &TilePos<'_>,
    s: &mut Scratch,
) -> Result<(), String> {
    // The same loops compiled for the widest vectors the CPU has (checked once).
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::atomic::{AtomicU8, Ordering};
        static LEVEL: AtomicU8 = AtomicU8::new(0);
        let mut level = LEVEL.load(Ordering::Relaxed);
        if level == 0 {
            // Every feature `run_tile_avx512` is compiled with (AVX-512F alone, as on
            // Knights Landing, lacks VL/BW/DQ, which that code may use).
            level = if std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512dq")
                && std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                3
            } else if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                2
            } else {
                1
            };
            LEVEL.store(level, Ordering::Relaxed);
        }
        match level {
            // SAFETY: level 3 is stored only when avx512f/vl/bw/dq, avx2 and fma were all
            // detected (run_tile_avx512's features); the caller's contract (loads in
            // bounds, t.len <= TILE) is passed through unchanged.
            3 => return unsafe { run_tile_avx512(prog, env, t, s) },
            // SAFETY: level 2 is stored only when avx2 and fma were detected; contract passed
            // through.
            2 => return unsafe { run_tile_avx2(prog, env, t, s) },
            _ => {}
        }
    }
    // SAFETY: the caller upholds run_tile's contract, which is run_tile_body's.
    unsafe { run_tile_body(prog, env, t, s) }
}

/// # Safety
/// As [`run_tile`], and the CPU must have AVX-512F/VL/BW/DQ, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")]
unsafe fn run_tile_avx512(
    prog: &TileProg,
    env: &TileEnv<'_>,
    t: &TilePos<'_>,
    s: &mut Scratch,
) -> Result<(), String> {
    // SAFETY: the caller guarantees run_tile's contract and the target features this function
    // was compiled for.
    unsafe { run_tile_body(prog, env, t, s) }
}

/// # Safety
/// As [`run_tile`], and the CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_tile_avx2(
    prog: &TileProg,
    env: &TileEnv<'_>,
    t: &TilePos<'_>,
    s: &mut Scratch,
) -> Result<(), String> {
    // SAFETY: the caller guarantees run_tile's contract and the AVX2/FMA features.
    unsafe { run_tile_body(prog, env, t, s) }
}

/// # Safety
/// As [`run_tile`] (inlined into each target-feature variant).
#[inline(always)]
unsafe fn run_tile_body(
    prog: &TileProg,
    env: &TileEnv<'_>,
    t: &TilePos<'_>,
    s: &mut Scratch,
) -> Result<(), String> {
    s.ensure(prog.nregs, prog.instrs.len());
    let n = t.len;
    let parts = prog.instrs.len().max(1);
    for (i, ins) in prog.instrs.iter().enumerate() {
        if !env.spread.is_empty() {
            prefetch_share(env.spread, i, parts);
        }
        let reg = match env.direct.get(i) {
            // SAFETY: a non-null direct target is the base of a native-dtype output buffer
            // holding the whole space (EwPlan::direct_targets), so offset `t.flat` is in
            // bounds.
            Some(&d) if !d.is_null() => unsafe { d.add(t.flat * ins.ty.size()) },
            _ => s.reg(ins.reg),
        };
        let a = |k: usize| s.slots[ins.args[k] as usize];
        let v = match &ins.op {
            InstrOp::Load(l) => {
                let p = &env.loads[*l];
                // SAFETY: the caller guarantees every load plan is in bounds for this tile;
                // `reg` is a register of TILE slots (`ensure` above) or a direct target with
                // `t.len` elements.
                unsafe { fetch(p, env.bases[p.buf], t, ins.ty, reg, env.prefetch) }
            }
            InstrOp::Const(b) => TileValue::Scalar(*b),
            InstrOp::Core => env.core.expect("core value supplied to epilogues"),
            // SAFETY: operand values are tile values of `n = t.len <= TILE` elements
            // (registers, direct targets or in-place runs covered by fetch's contract) and
            // `reg` holds `n` elements.
            InstrOp::Unary(act) => unsafe { ops::unary(*act, ins.ty, ins.dtype, a(0), reg, n)? },
            // SAFETY: as for Unary: both operands hold `n` elements (or are scalars), `reg`
            // holds `n`.
            InstrOp::Binary(b) => unsafe {
                ops::binary(*b, ins.ty, ins.dtype, a(0), a(1), reg, n)?
            },
            InstrOp::Compare(c, cty) => {
                let (da, db) = (
                    prog.instrs[ins.args[0] as usize].dtype,
                    prog.instrs[ins.args[1] as usize].dtype,
                );
                // SAFETY: both operands hold `n` elements of their dtypes (or are scalars);
                // `reg` holds `n`.
                unsafe { ops::compare(*c, *cty, (a(0), da), (a(1), db), reg, n) }
            }
            // SAFETY: all three operands hold `n` elements (or are scalars); `reg` holds `n`.
            InstrOp::Where => unsafe { ops::select(ins.ty, a(0), a(1), a(2), reg, n) },
            // SAFETY: the operand holds `n` elements of `from`'s compute type; `reg` holds `n`.
            InstrOp::Cast(from) => unsafe { ops::cast(*from, ins.dtype, a(0), reg, n) },
            // SAFETY: the operand holds `n` elements of `ins.ty`; `reg` holds `n`.
            InstrOp::Round(f) => unsafe { ops::round_format(f, ins.ty, ins.dtype, a(0), reg, n) },
        };
        s.slots[i] = v;
    }
    Ok(())
}
