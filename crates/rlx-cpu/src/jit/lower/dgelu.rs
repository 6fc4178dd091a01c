//! The fused exact-GELU derivative.
//!
//! Exact GELU's reverse-mode chain `Φ(x) + x·φ(x)` (the autodiff rule's erf, exp and
//! eight products and sums) is the one place the JIT does not compute the interpreter's
//! bits: [`dgelu_chains`] finds it and [`Lower::dgelu`] evaluates `GELU′` from one
//! 16-interval table (`math::erf_tables::GELU_D`) — 37 instructions per 16 lanes on the
//! loop's common path where the chain took 78 — within 0.95 units of max(ulp, 2⁻²⁴) of
//! the f64 derivative (the chain: 1.07). Lanes below −6.875 run the chain itself;
//! `RLX_GELU_GRAD=0` at compile time keeps the chain everywhere.
//!
//! The table is evaluated as `erf.rs` evaluates erf's and GELU's ([`Lower::table_poly`]);
//! the out-of-line branch emits the chain's own instructions by their rows in the
//! lowering table (`rules.rs`).

use super::special::load_const;
use super::{Lower, Temps};
use crate::exec::value::Ty;
use crate::exec::vm::{InstrOp, TileProg};
use crate::jit::x86::{Asm, Cmp, JE, K7, Zmm};
use crate::math::erf_tables::{DGELU_HI, DGELU_LO, DGELU_SCALE, DGELU_SHIFT, DGELU_STEP, GELU_D};
use rlx_ir::{Activation, BinaryOp, DType};

/// Scratch registers of the fused GELU-derivative chain ([`Lower::dgelu`]): the rule's own
/// chain on its out-of-line branch holds at most four of its values at once besides exp's
/// eight registers.
pub(super) const DGELU_TEMPS: usize = 14;
// 32 vector registers: the body also holds x, the result, the cotangent and the chain's
// five hoisted constants.
const _: () = assert!(DGELU_TEMPS <= 16);

/// The switch that keeps the rule's erf/exp chain (`RLX_GELU_GRAD=0`, read when a kernel
/// is compiled: same-process A/B and the interpreter's bits).
fn dgelu_enabled() -> bool {
    std::env::var_os("RLX_GELU_GRAD").is_none_or(|v| v != "0")
}

/// One reverse-mode exact-GELU derivative `Φ(x) + x·φ(x)` in a tile program, spelt as the
/// autodiff rule spells it: `(erf(x·√½) + 1)·½ + x·((e^((x·x)·(−½)))·(1/√(2π)))`, f32
/// throughout, each product and sum with its operands in either order.
pub(super) struct DgeluChain {
    /// The final sum, whose value the fused code computes.
    pub add: usize,
    /// The root of `x`.
    pub x: usize,
    /// The chain's other instructions in program order, each read only by the chain: the
    /// fused code skips them (its out-of-line branch runs them as the unfused code does).
    pub inner: Vec<usize>,
}

/// The GELU-derivative chains of `prog` that the fused code can replace (none with
/// `RLX_GELU_GRAD=0`). `root` maps each instruction to the one whose value it forwards;
/// a chain whose values are exported or read outside it is left unfused.
pub(super) fn dgelu_chains(prog: &TileProg, root: &[usize], exports: &[usize]) -> Vec<DgeluChain> {
    if !dgelu_enabled() {
        return Vec::new();
    }
    let f32_op = |k: usize| {
        let i = &prog.instrs[k];
        i.dtype == DType::F32 && i.ty == Ty::F32
    };
    let arg = |k: usize, n: usize| root[prog.instrs[k].args[n] as usize];
    let bin = |k: usize, op: BinaryOp| {
        (f32_op(k) && prog.instrs[k].op == InstrOp::Binary(op)).then(|| (arg(k, 0), arg(k, 1)))
    };
    let konst =
        |k: usize, v: f32| f32_op(k) && prog.instrs[k].op == InstrOp::Const(u64::from(v.to_bits()));
    // `k = y · v` (either order): y
    let times = |k: usize, v: f32| {
        let (a, b) = bin(k, BinaryOp::Mul)?;
        if konst(b, v) {
            Some(a)
        } else if konst(a, v) {
            Some(b)
        } else {
            None
        }
    };
    let unary = |k: usize, act: Activation| {
        (f32_op(k) && prog.instrs[k].op == InstrOp::Unary(act)).then(|| arg(k, 0))
    };
    // Φ(x) = (erf(x·√½) + 1)·½: its instructions and x
    let cdf = |k: usize| -> Option<(Vec<usize>, usize)> {
        let e1 = times(k, 0.5)?;
        let (a, b) = bin(e1, BinaryOp::Add)?;
        let e = if konst(b, 1.0) {
            a
        } else if konst(a, 1.0) {
            b
        } else {
            return None;
        };
        let s = unary(e, Activation::Erf)?;
        let x = times(s, std::f32::consts::FRAC_1_SQRT_2)?;
        Some((vec![k, e1, e, s], x))
    };
    // x·φ(x) = x·(e^((x·x)·(−½))·(1/√(2π))): its instructions, given x
    let xpdf = |k: usize, x: usize| -> Option<Vec<usize>> {
        let (a, b) = bin(k, BinaryOp::Mul)?;
        let pdf = if a == x {
            b
        } else if b == x {
            a
        } else {
            return None;
        };
        let ex = times(pdf, (1.0 / (2.0 * std::f64::consts::PI).sqrt()) as f32)?;
        let h = unary(ex, Activation::Exp)?;
        let xx = times(h, -0.5)?;
        (bin(xx, BinaryOp::Mul)? == (x, x)).then(|| vec![k, pdf, ex, h, xx])
    };
    // Readers of each root (identity casts and repeated loads forward their operand).
    let mut readers = vec![0usize; prog.instrs.len()];
    for (i, ins) in prog.instrs.iter().enumerate() {
        if root[i] == i {
            for n in 0..super::arity(&ins.op) {
                readers[arg(i, n)] += 1;
            }
        }
    }
    let mut chains = Vec::new();
    for add in 0..prog.instrs.len() {
        let Some((a, b)) = bin(add, BinaryOp::Add) else {
            continue;
        };
        let found = [(a, b), (b, a)].into_iter().find_map(|(p, q)| {
            let (mut inner, x) = cdf(p)?;
            inner.extend(xpdf(q, x)?);
            Some((inner, x))
        });
        let Some((mut inner, x)) = found else {
            continue;
        };
        // Each inner value is read once, by the chain (x·x reads x twice, not an inner).
        let private = inner
            .iter()
            .all(|&k| readers[k] == 1 && !exports.iter().any(|&e| root[e] == k));
        if private && inner.iter().all(|&k| root[k] == k) {
            inner.sort_unstable();
            chains.push(DgeluChain { add, x, inner });
        }
    }
    chains
}

/// The constants the fused GELU-derivative code reads from the pool (its 32-bit
/// constants, and [`GELU_D`]'s rows as 64-bit entries, eight to a row).
pub(super) fn dgelu_consts(p: &mut Vec<u32>, p64: &mut Vec<u64>) {
    p.extend(
        [
            DGELU_SCALE,
            DGELU_SHIFT,
            DGELU_STEP,
            DGELU_HI,
            DGELU_LO,
            0.0,
        ]
        .map(f32::to_bits),
    );
    p64.extend(GELU_D.iter().flat_map(|row| {
        row.chunks(2)
            .map(|p| u64::from(p[0].to_bits()) | u64::from(p[1].to_bits()) << 32)
    }));
}

impl Lower<'_> {
    /// `GELU′(x) = Φ(x) + x·φ(x)` of `chain` into `d` ([`DGELU_TEMPS`] temps): the table
    /// polynomial [`GELU_D`] of interval `round(1.23c) + 8` at `c − 0.8125·round(1.23c)`,
    /// `c = min(x, 6)`, plus `x·0` (NaN and +∞ give the chain's NaN); where a lane lies
    /// below −6.875 (k7), a branch (not taken for most vectors) runs the chain's own
    /// instructions on all 16 lanes and blends those lanes in. `None`: the registers did
    /// not suffice.
    pub(super) fn dgelu(
        &self,
        a: &mut Asm,
        t: &mut Temps,
        d: Zmm,
        x: Zmm,
        chain: &DgeluChain,
    ) -> Option<()> {
        // Done with before the branch takes the same registers.
        let [c, j, q] = t.peek::<3>();
        a.vminps(c, x, self.cf(DGELU_HI));
        // j = c·(16/13) + (SHIFTER + 8); t = c − 0.8125·(j − SHIFTER − 8), exact (into c)
        load_const(a, j, self.cf(DGELU_SCALE));
        a.vfmadd213ps(j, c, self.cf(DGELU_SHIFT));
        a.vsubps(q, j, self.cf(DGELU_SHIFT));
        a.vfmadd231ps(c, q, self.cf(DGELU_STEP));
        self.table_poly(a, (d, q), &GELU_D, j, c);
        // d += x·0: NaN where x is NaN or +∞ (the chain's ∞·0 there), else d itself
        a.vfmadd231ps(d, x, self.cf(0.0));
        // Lanes below DGELU_LO (k7; never NaN): the chain, jumped over when none.
        a.vcmpps(K7, x, self.cf(DGELU_LO), Cmp::LtOq);
        a.kortestw(K7, K7);
        let skip = a.jump(Some(JE));
        let v = self.dgelu_unfused(a, t, x, chain)?;
        a.vblendmps(d, K7, d, v);
        a.patch(skip, a.code.len());
        Some(())
    }

    /// The chain's instructions as the unfused code computes them (each by its lowering
    /// row, the interpreter's bits), into a temp that it returns.
    fn dgelu_unfused(&self, a: &mut Asm, t: &mut Temps, x: Zmm, chain: &DgeluChain) -> Option<Zmm> {
        let mut free: Vec<Zmm> = t.regs[t.next..].iter().rev().copied().collect();
        let mut held: Vec<(usize, Zmm)> = Vec::new();
        for &k in chain.inner.iter().chain([&chain.add]) {
            let ins = &self.prog.instrs[k];
            let operand = |n: usize, held: &[(usize, Zmm)]| {
                let r = self.root[ins.args[n] as usize];
                if r == chain.x {
                    Some(x)
                } else if let InstrOp::Const(b) = self.prog.instrs[r].op {
                    Some(self.hoisted_reg(b as u32 as u64, false))
                } else {
                    held.iter().find(|h| h.0 == r).map(|h| h.1)
                }
            };
            let dst = free.pop()?;
            match ins.op {
                InstrOp::Binary(op) => {
                    let rule = super::rules::binary(op)?;
                    let (p, q) = (operand(0, &held)?, operand(1, &held)?);
                    let mut tt = Temps::take(&mut free, rule.temps)?;
                    (rule.emit)(a, &mut tt, dst, p, q);
                    tt.give_back(&mut free);
                }
                InstrOp::Unary(act) => {
                    let rule = super::rules::unary(act)?;
                    let p = operand(0, &held)?;
                    let mut tt = Temps::take(&mut free, rule.temps)?;
                    (rule.emit)(self, a, &mut tt, dst, p);
                    tt.give_back(&mut free);
                }
                _ => return None,
            }
            // Each inner value is read once: its register is free after its reader.
            for n in 0..super::arity(&ins.op) {
                let r = self.root[ins.args[n] as usize];
                if let Some(h) = held.iter().position(|h| h.0 == r) {
                    free.push(held.swap_remove(h).1);
                }
            }
            held.push((k, dst));
        }
        held.pop().map(|h| h.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`Lower::dgelu`]'s table path in scalar f32 with the same roundings (FMA steps).
    fn dgelu_table(x: f32) -> f32 {
        let c = x.min(DGELU_HI);
        let j = c.mul_add(DGELU_SCALE, DGELU_SHIFT);
        let t = (j - DGELU_SHIFT).mul_add(DGELU_STEP, c);
        let k = (j.to_bits() & 15) as usize;
        let mut p = GELU_D[7][k];
        for r in (0..7).rev() {
            p = p.mul_add(t, GELU_D[r][k]);
        }
        x.mul_add(0.0, p)
    }

    fn dgelu_f64(x: f64) -> f64 {
        let phi = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
        0.5 * libm::erfc(-x / std::f64::consts::SQRT_2) + x * phi
    }

    #[test]
    fn the_gelu_derivative_table_is_within_its_bound_over_its_whole_range() {
        // Every 2⁻¹⁶ from the branch point −6.875 to 8 (clamped at 6), and each interval
        // edge 0.8125(m + ½) with its f32 neighbours: in units of max(ulp(GELU′), 2⁻²⁴),
        // the JIT test's unit. Measured 0.945 (2-vCPU Sapphire Rapids Xeon, 2026-12-03).
        let edges = (-8..8).flat_map(|m| {
            let b = 0.8125 * (m as f32 + 0.5);
            [
                b,
                f32::from_bits(b.to_bits() + 1),
                f32::from_bits(b.to_bits() - 1),
            ]
        });
        let sweep = (0..=(14.875 * 65536.0) as i32).map(|i| DGELU_LO + i as f32 / 65536.0);
        let mut worst = (0.0f64, 0.0f32);
        for x in sweep.chain(edges).filter(|&x| x >= DGELU_LO) {
            let want = dgelu_f64(f64::from(x));
            let ulp = f64::from((want as f32).abs() * f32::EPSILON).max(2f64.powi(-24));
            let e = (f64::from(dgelu_table(x)) - want).abs() / ulp;
            if e > worst.0 {
                worst = (e, x);
            }
        }
        println!("GELU' table within {:.3} units at {:e}", worst.0, worst.1);
        assert!(
            worst.0 <= 1.25,
            "GELU'({:e}) off by {:.3}",
            worst.1,
            worst.0
        );
        // The rule's NaN at +∞ and NaN; the interval index of the clamp is the last.
        assert!(dgelu_table(f32::INFINITY).is_nan() && dgelu_table(f32::NAN).is_nan());
        assert_eq!(dgelu_table(1e30), dgelu_table(DGELU_HI));
    }
}
