//! Tile program → AVX-512 machine code.
//!
//! Layout of the generated function (`ins` in rdi, `outs` in rsi, full-vector bytes in
//! rdx, tail lanes in rcx, constants in r8):
//! ```text
//!   broadcast scalar inputs and constants into their registers (once)
//!   r11 = 0
//! loop: if r11 >= rdx goto tail
//!   body over [ptr + r11] for 16 lanes; r11 += 64; goto loop
//! tail: k1 = (1 << rcx) − 1; body with k1-masked loads and stores
//!   vzeroupper; ret
//! ```
//! The body loads each vector input (`mov rax, [rdi + 8j]; vmovups zmm, [rax + r11]`),
//! computes every instruction in registers (a value's register is reused after its last
//! reader), and stores each export through `outs`. Every arithmetic step mirrors the
//! interpreter's (see the lane kernels in `math`), so the bits agree — except exact GELU's
//! reverse-mode chain `Φ(x) + x·φ(x)`, which one table polynomial computes instead of its
//! erf and exp (`dgelu::dgelu_chains`; within its bound of the f64 derivative, and
//! `RLX_GELU_GRAD=0` at compile time keeps the interpreter's bits).

mod dgelu;
mod erf;
mod rules;
mod special;

use super::JitKernel;
use super::mem::ExecMem;
use super::x86::{
    Asm, Cmp, Gpr, JAE, K1, K2, K4, Kreg, Mask, Mem, R11, RAX, RDI, RDX, RSI, Src, Zmm,
};
use crate::exec::value::Ty;
use crate::exec::vm::{InstrOp, TileProg};
use rlx_ir::{CmpOp, DType};
use special::load_const;

const R8: Gpr = Gpr(8);

/// Vector registers.
const NZMM: u8 = Zmm::COUNT;

/// Whether instruction `ins` can be compiled: f32 (and bf16/f16 held as f32) values with
/// the activations and binary ops that have a row in [`rules`], comparisons, selects and
/// casts; f64 values with loads, constants, the ops with an f64 row in [`rules`], and
/// casts between f32 and f64.
fn supported(prog: &TileProg, ins: &crate::exec::vm::Instr) -> bool {
    // f32 values, and bf16 / f16 values held as f32 (rounded to their format after
    // every op, as the interpreter's `post` does).
    let is_f32 = |x: &crate::exec::vm::Instr| {
        x.ty == Ty::F32 && matches!(x.dtype, DType::F32 | DType::BF16 | DType::F16)
    };
    let f32 = is_f32(ins);
    let f64 = ins.dtype == DType::F64 && ins.ty == Ty::F64;
    let arg = |k: usize| &prog.instrs[ins.args[k] as usize];
    // A mask the code computes itself (kept as 1.0 / 0.0 in a register).
    let is_mask = |x: &crate::exec::vm::Instr| matches!(x.op, InstrOp::Compare(_, Ty::F32));
    match &ins.op {
        // f32 comparisons give a bool mask; a select on such a mask and a cast of it
        // to f32 (1 or 0) use it.
        InstrOp::Compare(_, cty) => {
            *cty == Ty::F32 && ins.dtype == DType::Bool && is_f32(arg(0)) && is_f32(arg(1))
        }
        InstrOp::Where => f32 && is_mask(arg(0)) && is_f32(arg(1)) && is_f32(arg(2)),
        InstrOp::Cast(DType::Bool) => f32 && is_mask(arg(0)),
        InstrOp::Load(_) | InstrOp::Core | InstrOp::Const(_) => f32 || f64,
        // Activations and binary ops: compiled exactly when the lowering table has a row.
        InstrOp::Unary(a) if f64 => rules::unary_f64_opcode(*a).is_some(),
        InstrOp::Unary(a) => f32 && rules::unary(*a).is_some(),
        InstrOp::Binary(b) if f64 => rules::binary_f64_opcode(*b).is_some(),
        InstrOp::Binary(b) => f32 && rules::binary(*b).is_some(),
        // Widening is exact; narrowing rounds once (f64 → bf16 / f16 would round twice
        // through f32, so it stays interpreted).
        InstrOp::Cast(from) if f64 => matches!(from, DType::F32 | DType::F64) || is_half(*from),
        InstrOp::Cast(from) => {
            f32 && (matches!(from, DType::F32) || is_half(*from))
                || (ins.dtype == DType::F32 && *from == DType::F64)
        }
        _ => false,
    }
}

/// Whether `dt` is a 16-bit float format whose values the JIT holds as f32.
fn is_half(dt: DType) -> bool {
    matches!(dt, DType::BF16 | DType::F16)
}

/// Pooled constants of the bf16 rounding sequence ([`Lower::round_half`]).
const BF16_ROUND_CONSTS: [u32; 4] = [1, 0x7FFF, 0xFFFF_0000, 0x0040_0000];

/// The first instruction of `prog` the JIT cannot compile, described (`None`: all can).
pub(crate) fn unsupported(prog: &TileProg) -> Option<String> {
    let ins = prog.instrs.iter().find(|i| !supported(prog, i))?;
    let what = match &ins.op {
        InstrOp::Unary(a) => a.name().to_string(),
        InstrOp::Binary(b) => b.name().to_string(),
        InstrOp::Compare(c, _) => c.name().to_string(),
        InstrOp::Load(_) => "load".into(),
        InstrOp::Const(_) => "constant".into(),
        InstrOp::Core => "product".into(),
        InstrOp::Where => "where".into(),
        InstrOp::Cast(from) => format!("cast from {from}"),
        InstrOp::Round(_) => "round_to_format".into(),
    };
    Some(format!("{what} on {}", ins.dtype))
}

/// Compile `prog` for inputs whose scalar pattern is `scalar_mask` (bit `j` for the
/// `j`-th load/core instruction), writing out the values of `exports`. `None` when an
/// instruction is not supported or the registers do not suffice.
///
/// With `streaming`, the full vectors of every export are written with non-temporal
/// stores (the caller must then pass 64-byte aligned output pointers and fence after
/// its last tile); the tail always uses ordinary masked stores.
pub(crate) fn compile(
    prog: &TileProg,
    exports: &[usize],
    scalar_mask: u64,
    streaming: bool,
) -> Option<JitKernel> {
    if !super::enabled() || prog.instrs.is_empty() || exports.is_empty() {
        return None;
    }
    match lower(prog, exports, scalar_mask, streaming) {
        Ok(k) => {
            tracing::trace!(
                target: "rlx::jit",
                instrs = prog.instrs.len(),
                exports = exports.len(),
                "tile program compiled to machine code"
            );
            Some(k)
        }
        Err(reason) => {
            // The interpreter gives the same bits, only slower: a diagnostic, not an error.
            tracing::debug!(
                target: "rlx::jit",
                instrs = prog.instrs.len(),
                exports = exports.len(),
                "tile program falls back to the interpreter: {reason}"
            );
            None
        }
    }
}

/// [`compile`] past the cheap checks; `Err` says why the program stays interpreted.
fn lower(
    prog: &TileProg,
    exports: &[usize],
    scalar_mask: u64,
    streaming: bool,
) -> Result<JitKernel, String> {
    if exports.len() > 32 {
        return Err(format!("{} exports (at most 32)", exports.len()));
    }
    let exports_ok = exports.iter().all(|&x| {
        let ins = &prog.instrs[x];
        matches!(
            (ins.dtype, ins.ty),
            (DType::F32 | DType::BF16 | DType::F16, Ty::F32) | (DType::F64, Ty::F64)
        )
    });
    if !exports_ok {
        return Err("an export is neither f32 (bf16, f16) nor f64".to_string());
    }
    if let Some(what) = unsupported(prog) {
        return Err(format!("no machine code for {what}"));
    }
    let inputs: Vec<usize> = (0..prog.instrs.len())
        .filter(|&i| matches!(prog.instrs[i].op, InstrOp::Load(_) | InstrOp::Core))
        .collect();
    if inputs.len() > 64 {
        return Err(format!("{} inputs (at most 64)", inputs.len()));
    }
    let no_regs = || "the vector registers do not suffice".to_string();
    let mut l = Lower::new(prog, &inputs, exports, scalar_mask);
    l.streaming = streaming;
    let mut a = Asm::default();
    l.prologue(&mut a).ok_or_else(no_regs)?;
    a.zero(R11);
    let top = a.code.len();
    a.cmp(R11, RDX);
    let to_tail = a.jump(Some(JAE));
    l.body(&mut a, false).ok_or_else(no_regs)?;
    a.add_imm(R11, 64);
    let back = a.jump(None);
    a.patch(back, top);
    a.patch(to_tail, a.code.len());
    a.low_mask_cl(RAX);
    a.kmovw_from(K1, RAX);
    a.kshiftrw(K4, K1, 8); // the mask of f64 lanes 8–15
    l.body(&mut a, true).ok_or_else(no_regs)?;
    a.vzeroupper();
    a.ret();
    super::note_compiled();
    if let Some(dir) = std::env::var_os("RLX_JIT_DUMP") {
        // Debugging aid: `objdump -D -b binary -m i386:x86-64 -M intel <file>`.
        let path =
            std::path::Path::new(&dir).join(format!("rlx-jit-{}.bin", super::compiled_count()));
        let _ = std::fs::write(path, &a.code);
    }
    let code =
        ExecMem::new(&a.code).ok_or_else(|| "executable memory could not be mapped".to_string())?;
    Ok(JitKernel {
        code,
        consts: l.consts,
        inputs: inputs.len(),
        scalar_mask,
        exports: exports.to_vec(),
    })
}

/// Lowering state.
struct Lower<'a> {
    prog: &'a TileProg,
    inputs: &'a [usize],
    exports: &'a [usize],
    mask: u64,
    /// Constant pool (f32 bits), broadcast in the prologue.
    consts: Vec<u32>,
    /// Export full vectors with non-temporal stores.
    streaming: bool,
    /// Instruction constants held in registers: `(bits, f64?, register)`.
    hoisted: Vec<(u64, bool, Zmm)>,
    /// Register of each scalar input (by input position).
    scalar_reg: Vec<Option<Zmm>>,
    /// Registers holding constants and scalars for the whole call (by register index).
    fixed: Vec<bool>,
    /// For each instruction, the instruction whose register holds its value (itself,
    /// or what an identity cast forwards).
    root: Vec<usize>,
    /// For each root, the last instruction reading it (`usize::MAX`: an export, live to
    /// the end of the body; `None`: never read).
    last_use: Vec<Option<usize>>,
    /// Exact-GELU derivative chains computed by one fused kernel (`dgelu::dgelu_chains`).
    dgelu: Vec<dgelu::DgeluChain>,
    /// Instructions a fused chain computes instead (not emitted on their own).
    fused_away: Vec<bool>,
}

impl<'a> Lower<'a> {
    fn new(prog: &'a TileProg, inputs: &'a [usize], exports: &'a [usize], mask: u64) -> Self {
        let n = prog.instrs.len();
        let mut root: Vec<usize> = (0..n).collect();
        for (i, ins) in prog.instrs.iter().enumerate() {
            // Identity casts, bool → f32 of a mask (held as 1.0 / 0.0 already), and
            // bf16 / f16 → f32 (their f32 values are exact already).
            if let InstrOp::Cast(from) = ins.op
                && (from == ins.dtype
                    || from == DType::Bool
                    || (ins.dtype == DType::F32 && is_half(from)))
            {
                root[i] = root[ins.args[0] as usize];
            }
            // A second load of the same load plan reads the same values: it shares the
            // first one's register (GELU's reverse-mode chain loaded its input four times).
            if let InstrOp::Load(l) = ins.op
                && let Some(first) = prog.instrs[..i]
                    .iter()
                    .position(|e| e.op == InstrOp::Load(l) && e.dtype == ins.dtype)
            {
                root[i] = first;
            }
        }
        let dgelu = dgelu::dgelu_chains(prog, &root, exports);
        let mut fused_away = vec![false; n];
        for c in &dgelu {
            for &k in &c.inner {
                fused_away[k] = true;
            }
        }
        let mut l = Lower {
            prog,
            inputs,
            exports,
            mask,
            consts: Vec::new(),
            hoisted: Vec::new(),
            streaming: false,
            scalar_reg: vec![None; inputs.len()],
            fixed: vec![false; NZMM as usize],
            root,
            last_use: vec![None; n],
            dgelu,
            fused_away,
        };
        for i in 0..n {
            for r in l.reads(i) {
                l.last_use[r] = Some(l.last_use[r].map_or(i, |u| u.max(i)));
            }
        }
        for &e in exports {
            l.last_use[l.root[e]] = Some(usize::MAX);
        }
        l
    }

    /// The roots instruction `i` reads: its operands', none for an instruction a fused
    /// chain computes instead, and `x` for the chain's sum.
    fn reads(&self, i: usize) -> Vec<usize> {
        if self.fused_away[i] {
            return Vec::new();
        }
        if let Some(c) = self.dgelu.iter().find(|c| c.add == i) {
            return vec![c.x];
        }
        let ins = &self.prog.instrs[i];
        (0..arity(&ins.op))
            .map(|k| self.root[ins.args[k] as usize])
            .collect()
    }

    fn is_scalar_input(&self, i: usize) -> Option<usize> {
        let j = self.inputs.iter().position(|&x| x == i)?;
        (self.mask >> j & 1 == 1).then_some(j)
    }

    /// The pool slot of constant `bits` (added on first use).
    fn pool(&mut self, bits: u32) -> Src {
        let k = match self.consts.iter().position(|&c| c == bits) {
            Some(k) => k,
            None => {
                self.consts.push(bits);
                self.consts.len() - 1
            }
        };
        Src::Pool(4 * k as i32)
    }

    /// The pool slot of 64-bit constant `bits` (two adjacent 32-bit entries, low first).
    fn pool64(&mut self, bits: u64) -> Src {
        let (lo, hi) = (bits as u32, (bits >> 32) as u32);
        let k = match (0..self.consts.len().saturating_sub(1))
            .find(|&k| self.consts[k] == lo && self.consts[k + 1] == hi)
        {
            Some(k) => k,
            None => {
                self.consts.extend([lo, hi]);
                self.consts.len() - 2
            }
        };
        Src::Pool(4 * k as i32)
    }

    /// A register reserved for the whole call (scalars and instruction constants).
    fn take_fixed(&mut self) -> Option<Zmm> {
        let r = (0..NZMM)
            .rev()
            .map(Zmm::new)
            .find(|r| !self.fixed[r.index()])?;
        self.fixed[r.index()] = true;
        Some(r)
    }

    /// A register holding instruction constant `bits` (f32 bits, or f64 bits when
    /// `wide`) broadcast for the whole call: any operand position may read it.
    fn hoist(&mut self, a: &mut Asm, bits: u64, wide: bool) -> Option<Zmm> {
        if let Some(&(_, _, r)) = self.hoisted.iter().find(|h| (h.0, h.1) == (bits, wide)) {
            return Some(r);
        }
        let r = self.take_fixed()?;
        if wide {
            let Src::Pool(d) = self.pool64(bits) else {
                unreachable!()
            };
            a.vbroadcastsd(r, Mem::BaseDisp(R8, d));
        } else {
            let Src::Pool(d) = self.pool(bits as u32) else {
                unreachable!()
            };
            a.vbroadcastss(r, Mem::BaseDisp(R8, d));
        }
        self.hoisted.push((bits, wide, r));
        Some(r)
    }

    /// The register of a hoisted instruction constant.
    fn hoisted_reg(&self, bits: u64, wide: bool) -> Zmm {
        let h = self.hoisted.iter().find(|h| (h.0, h.1) == (bits, wide));
        h.expect("hoisted by the prologue").2
    }

    /// Broadcast scalar inputs and instruction constants; pool the constants the ops
    /// read from memory.
    fn prologue(&mut self, a: &mut Asm) -> Option<()> {
        for j in 0..self.inputs.len() {
            if self.mask >> j & 1 == 1 {
                let r = self.take_fixed()?;
                a.mov_load(RAX, RDI, 8 * j as i32);
                if self.prog.instrs[self.inputs[j]].ty == Ty::F64 {
                    a.vbroadcastsd(r, Mem::BaseDisp(RAX, 0));
                } else {
                    a.vbroadcastss(r, Mem::BaseDisp(RAX, 0));
                }
                self.scalar_reg[j] = Some(r);
            }
        }
        let mut pooled: Vec<u32> = Vec::new();
        let mut pooled64: Vec<u64> = Vec::new();
        for ins in &self.prog.instrs {
            if ins.ty == Ty::F64 {
                if let InstrOp::Const(b) = &ins.op {
                    self.hoist(a, *b, true)?;
                }
                continue;
            }
            if ins.dtype == DType::BF16
                && matches!(
                    ins.op,
                    InstrOp::Unary(_) | InstrOp::Binary(_) | InstrOp::Cast(_)
                )
            {
                pooled.extend(BF16_ROUND_CONSTS);
            }
            match &ins.op {
                InstrOp::Const(b) => {
                    self.hoist(a, *b as u32 as u64, false)?;
                }
                InstrOp::Compare(..) => pooled.push(1f32.to_bits()),
                InstrOp::Where => pooled.push(0),
                InstrOp::Unary(act) => {
                    if let Some(rule) = rules::unary(*act) {
                        (rule.consts)(&mut pooled, &mut pooled64);
                    }
                }
                _ => {}
            }
        }
        if !self.dgelu.is_empty() {
            dgelu::dgelu_consts(&mut pooled, &mut pooled64);
        }
        for b in pooled {
            self.pool(b);
        }
        // The 64-bit entries are table rows, eight to a row of 16 floats that `vpermps`
        // reads whole: each row is pooled as one contiguous run (pair by pair, a pair
        // already pooled elsewhere, such as two zeros, would split it).
        for row in pooled64.chunks(8) {
            let bits: Vec<u32> = row
                .iter()
                .flat_map(|&b| [b as u32, (b >> 32) as u32])
                .collect();
            if !self.consts.windows(bits.len()).any(|w| w == bits) {
                self.consts.extend(bits);
            }
        }
        Some(())
    }

    /// The pool slot of a constant pooled by the prologue.
    fn creg(&self, bits: u32) -> Src {
        let k = self.consts.iter().position(|&c| c == bits).expect("pooled");
        Src::Pool(4 * k as i32)
    }

    /// Emit the body (16 lanes at offset r11; masked by k1 when `masked`).
    fn body(&self, a: &mut Asm, masked: bool) -> Option<()> {
        // Popped from the end: the lowest free register first.
        let mut free: Vec<Zmm> = (0..NZMM)
            .rev()
            .map(Zmm::new)
            .filter(|r| !self.fixed[r.index()])
            .collect();
        let mut reg: Vec<Option<Zmm>> = vec![None; self.prog.instrs.len()];
        // f64 values take two registers: lanes 0–7 in `reg`, lanes 8–15 in `hi`.
        let mut hi: Vec<Option<Zmm>> = vec![None; self.prog.instrs.len()];
        // The tail's lane masks (f32 lanes / f64 lanes 0–7, and f64 lanes 8–15).
        let k = masked.then_some(K1);
        let k_hi = masked.then_some(K4);
        for (i, ins) in self.prog.instrs.iter().enumerate() {
            if self.root[i] != i || self.fused_away[i] {
                // An identity cast (its value is its operand's register), or computed by
                // a fused chain.
                continue;
            }
            if let Some(c) = self.dgelu.iter().find(|c| c.add == i) {
                let x = reg[c.x].expect("computed earlier");
                let d = free.pop()?;
                let mut t = Temps::take(&mut free, dgelu::DGELU_TEMPS)?;
                self.dgelu(a, &mut t, d, x, c)?;
                t.give_back(&mut free);
                reg[i] = Some(d);
                self.release(i, &reg, &hi, &mut free);
                continue;
            }
            let arg = |n: usize| reg[self.root[ins.args[n] as usize]].expect("computed earlier");
            let arg_hi = |n: usize| {
                hi[self.root[ins.args[n] as usize]].expect("an f64 value computed earlier")
            };
            let wide_src = ins.args[..arity(&ins.op)]
                .iter()
                .any(|&x| self.prog.instrs[x as usize].ty == Ty::F64);
            if ins.ty == Ty::F64 || wide_src {
                let (d, e) = self.wide(a, (ins, i), &mut free, (k, k_hi), (arg, arg_hi))?;
                reg[i] = Some(d);
                hi[i] = e;
                self.release(i, &reg, &hi, &mut free);
                continue;
            }
            let dst = match &ins.op {
                InstrOp::Load(_) | InstrOp::Core => match self.is_scalar_input(i) {
                    Some(j) => self.scalar_reg[j].expect("broadcast"),
                    None => {
                        let j = self.inputs.iter().position(|&x| x == i).expect("an input");
                        let d = free.pop()?;
                        a.mov_load(RAX, RDI, 8 * j as i32);
                        a.vmovups_load(d, Mem::BaseIndex(RAX, R11), Mask::zeroing(k));
                        if !masked && let Some(dist) = prefetch_distance() {
                            // More lines in flight than the hardware prefetcher keeps
                            // (reads past the tile reach the next one; a prefetch
                            // never faults).
                            a.prefetcht0(RAX, R11, dist);
                        }
                        d
                    }
                },
                InstrOp::Const(b) => self.hoisted_reg(*b as u32 as u64, false),
                InstrOp::Binary(op) => {
                    let rule = rules::binary(*op)?;
                    let (x, y) = (arg(0), arg(1));
                    let d = free.pop()?;
                    let mut t = Temps::take(&mut free, rule.temps)?;
                    (rule.emit)(a, &mut t, d, x, y);
                    t.give_back(&mut free);
                    d
                }
                InstrOp::Unary(act) => {
                    let rule = rules::unary(*act)?;
                    let x = arg(0);
                    let d = free.pop()?;
                    let mut t = Temps::take(&mut free, rule.temps)?;
                    (rule.emit)(self, a, &mut t, d, x);
                    t.give_back(&mut free);
                    d
                }
                InstrOp::Compare(c, _) => {
                    // mask = (x c y) ? 1.0 : 0.0, with the interpreter's NaN rules
                    // (ordered predicates; ≠ is true on NaN).
                    let pred = match c {
                        CmpOp::Eq => Cmp::EqOq,
                        CmpOp::Ne => Cmp::NeqUq,
                        CmpOp::Lt => Cmp::LtOq,
                        CmpOp::Le => Cmp::LeOq,
                        CmpOp::Gt => Cmp::GtOq,
                        CmpOp::Ge => Cmp::GeOq,
                    };
                    let d = free.pop()?;
                    a.vcmpps(K2, arg(0), arg(1), pred);
                    load_const(a, d, self.creg(1f32.to_bits()));
                    a.vmovaps_z(d, K2, d);
                    d
                }
                InstrOp::Where => {
                    let d = free.pop()?;
                    a.vcmpps(K2, arg(0), self.creg(0), Cmp::NeqUq);
                    a.vblendmps(d, K2, arg(2), arg(1));
                    d
                }
                InstrOp::Cast(_) if is_half(ins.dtype) => {
                    let d = free.pop()?;
                    self.round_half(a, &mut free, ins.dtype, d, arg(0))?;
                    d
                }
                InstrOp::Cast(_) => unreachable!("identity casts forward their operand"),
                _ => return None,
            };
            if is_half(ins.dtype) && matches!(ins.op, InstrOp::Unary(_) | InstrOp::Binary(_)) {
                // The interpreter rounds every op's f32 result to the node's format.
                self.round_half(a, &mut free, ins.dtype, dst, dst)?;
            }
            reg[i] = Some(dst);
            self.release(i, &reg, &hi, &mut free);
        }
        for (e, &x) in self.exports.iter().enumerate() {
            a.mov_load(RAX, RSI, 8 * e as i32);
            let r = self.root[x];
            let lo = reg[r].expect("an export is computed");
            if self.prog.instrs[r].ty == Ty::F64 {
                let e = hi[r].expect("an f64 export has a high half");
                a.vmovupd_store(Mem::BaseIndex2(RAX, R11, 0), lo, Mask::merging(k));
                a.vmovupd_store(Mem::BaseIndex2(RAX, R11, 64), e, Mask::merging(k_hi));
            } else if self.streaming && !masked {
                a.vmovntps(Mem::BaseIndex(RAX, R11), lo);
            } else {
                a.vmovups_store(Mem::BaseIndex(RAX, R11), lo, Mask::merging(k));
            }
        }
        Some(())
    }

    /// `dst = x` rounded to `dt` (bf16 or f16: to nearest, ties to even) and held as
    /// f32 again — bit for bit what `value::round_f32_slice` computes. bf16 is the
    /// integer rounding of the f32 bits (`u + 0x7FFF + bit 16`, low half cleared; a NaN
    /// is quieted and truncated instead); f16 goes through the hardware conversion with
    /// an explicit round-to-nearest-even, as `half`'s slice conversion does. `dst` may be
    /// `x`.
    fn round_half(
        &self,
        a: &mut Asm,
        free: &mut Vec<Zmm>,
        dt: DType,
        dst: Zmm,
        x: Zmm,
    ) -> Option<()> {
        let t = free.pop()?;
        if dt == DType::F16 {
            a.vcvtps2ph(t, x);
            a.vcvtph2ps(dst, t);
            free.push(t);
            return Some(());
        }
        debug_assert_eq!(dt, DType::BF16);
        let Some(q) = free.pop() else {
            free.push(t);
            return None;
        };
        let [one, half_ulp, high, quiet] = BF16_ROUND_CONSTS.map(|c| self.creg(c));
        a.vpsrld(t, x, 16);
        a.vpandd(t, t, one);
        a.vpaddd(t, t, half_ulp);
        a.vpaddd(t, t, x);
        a.vpandd(t, t, high);
        a.vcmpps(K2, x, x, Cmp::UnordQ);
        a.vpord(q, x, quiet);
        a.vpandd(q, q, high);
        a.vblendmps(dst, K2, t, q);
        free.push(q);
        free.push(t);
        Some(())
    }

    /// After instruction `i`: operands read for the last time give their registers back
    /// (scalars and constants keep theirs), and so does a value nobody reads.
    fn release(&self, i: usize, reg: &[Option<Zmm>], hi: &[Option<Zmm>], free: &mut Vec<Zmm>) {
        let give = |r: usize, free: &mut Vec<Zmm>| {
            for x in [reg[r], hi[r]].into_iter().flatten() {
                if !self.fixed[x.index()] && !free.contains(&x) {
                    free.push(x);
                }
            }
        };
        let mut seen: Vec<usize> = Vec::new();
        for r in self.reads(i) {
            if self.last_use[r] == Some(i) && !seen.contains(&r) {
                seen.push(r);
                give(r, free);
            }
        }
        if self.last_use[i].is_none() {
            give(i, free); // never read nor exported
        }
    }

    /// Instruction `i` with an f64 result or operand: returns its (low, high) registers
    /// (high = `None` for an f32 result). `k` and `k_hi` are the tail's lane masks.
    /// `(arg, arg_hi)` give operand `n`'s low register and (for an f64 operand) its high one.
    fn wide(
        &self,
        a: &mut Asm,
        (ins, i): (&crate::exec::vm::Instr, usize),
        free: &mut Vec<Zmm>,
        (k, k_hi): (Option<Kreg>, Option<Kreg>),
        (arg, arg_hi): (impl Fn(usize) -> Zmm, impl Fn(usize) -> Zmm),
    ) -> Option<(Zmm, Option<Zmm>)> {
        Some(match &ins.op {
            InstrOp::Load(_) | InstrOp::Core => match self.is_scalar_input(i) {
                Some(j) => {
                    let r = self.scalar_reg[j].expect("broadcast");
                    (r, Some(r))
                }
                None => {
                    let j = self.inputs.iter().position(|&x| x == i).expect("an input");
                    let (d, e) = (free.pop()?, free.pop()?);
                    a.mov_load(RAX, RDI, 8 * j as i32);
                    a.vmovupd_load(d, Mem::BaseIndex2(RAX, R11, 0), Mask::zeroing(k));
                    a.vmovupd_load(e, Mem::BaseIndex2(RAX, R11, 64), Mask::zeroing(k_hi));
                    (d, Some(e))
                }
            },
            InstrOp::Const(b) => {
                let r = self.hoisted_reg(*b, true);
                (r, Some(r))
            }
            InstrOp::Binary(b) => {
                let op = rules::binary_f64_opcode(*b)?;
                let (d, e) = (free.pop()?, free.pop()?);
                a.op3(op, d, arg(0), arg(1));
                a.op3(op, e, arg_hi(0), arg_hi(1));
                (d, Some(e))
            }
            InstrOp::Unary(act) => {
                // A unary packed-double op (sqrt): the first source is unused.
                let op = rules::unary_f64_opcode(*act)?;
                let (d, e) = (free.pop()?, free.pop()?);
                a.op2(op, d, arg(0));
                a.op2(op, e, arg_hi(0));
                (d, Some(e))
            }
            InstrOp::Cast(DType::F32 | DType::BF16 | DType::F16) => {
                // f32 (or an exact bf16 / f16 value held as f32) → f64: each half of the
                // 16 floats widened.
                let (d, e, t) = (free.pop()?, free.pop()?, free.pop()?);
                let x = arg(0);
                a.vcvtps2pd(d, x);
                a.vextract_hi(t, x);
                a.vcvtps2pd(e, t);
                free.push(t);
                (d, Some(e))
            }
            InstrOp::Cast(DType::F64) => {
                // f64 → f32: both halves rounded, then joined.
                let (d, t) = (free.pop()?, free.pop()?);
                a.vcvtpd2ps(d, arg(0));
                a.vcvtpd2ps(t, arg_hi(0));
                a.vinsert_hi(d, d, t);
                free.push(t);
                (d, None)
            }
            _ => return None,
        })
    }
}

/// Scratch registers borrowed for one instruction.
struct Temps {
    regs: Vec<Zmm>,
    next: usize,
}

impl Temps {
    fn take(free: &mut Vec<Zmm>, n: usize) -> Option<Temps> {
        if free.len() < n {
            return None;
        }
        Some(Temps {
            regs: free.split_off(free.len() - n),
            next: 0,
        })
    }

    /// The next `N` scratch registers.
    fn many<const N: usize>(&mut self) -> [Zmm; N] {
        std::array::from_fn(|_| self.get())
    }

    /// The next `N` scratch registers without taking them: for code that is done with
    /// them before the code that takes them runs (GELU's table path before its tail).
    fn peek<const N: usize>(&self) -> [Zmm; N] {
        std::array::from_fn(|i| self.regs[self.next + i])
    }

    fn get(&mut self) -> Zmm {
        let r = self.regs[self.next];
        self.next += 1;
        r
    }

    fn give_back(self, free: &mut Vec<Zmm>) {
        free.extend(self.regs);
    }
}

/// Bytes ahead of each vector input the loop prefetches (`RLX_JIT_PREFETCH`, bytes; 0
/// turns it off).
fn prefetch_distance() -> Option<i32> {
    static D: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    let d = *D.get_or_init(|| {
        std::env::var("RLX_JIT_PREFETCH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2048)
    });
    (d > 0).then_some(d)
}

/// Operands an op reads.
fn arity(op: &InstrOp) -> usize {
    match op {
        InstrOp::Load(_) | InstrOp::Const(_) | InstrOp::Core => 0,
        InstrOp::Unary(_) | InstrOp::Cast(_) | InstrOp::Round(_) => 1,
        InstrOp::Binary(_) | InstrOp::Compare(..) => 2,
        InstrOp::Where => 3,
    }
}
