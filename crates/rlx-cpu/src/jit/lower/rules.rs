//! The JIT's lowering table: for every element-wise op it compiles, one row saying how —
//! the scratch registers its code borrows, the constants the code reads from the pool,
//! and the code itself. `supported` (what compiles), the prologue (what is pooled) and
//! `body` (what is emitted) all read these rows, so an op compiles exactly when it has a
//! row and a new op is one row here plus its emitter.

use super::erf::{erf_consts, erf_consts64};
use super::special::{GELU_CONSTS, exp_consts, exp_parts, minmax, tanh_log_consts};
use super::{Lower, Temps};
use crate::jit::x86::{Asm, Cmp, K2, K3, Opcode, VADDPD, VDIVPD, VMULPD, VSQRTPD, VSUBPD, Zmm};
use rlx_ir::{Activation, BinaryOp};

/// How an f32 activation is compiled.
pub(super) struct UnaryRule {
    /// Scratch registers its code borrows.
    pub temps: usize,
    /// Pushes the 32-bit pool constants its code reads (through `creg`) and its 64-bit
    /// entries: table rows of 16 floats, eight entries each, pooled contiguously.
    pub consts: fn(&mut Vec<u32>, &mut Vec<u64>),
    /// Emits `dst = act(x)` (16 f32 lanes).
    pub emit: fn(&Lower<'_>, &mut Asm, &mut Temps, Zmm, Zmm),
}

/// How an f32 binary op is compiled.
pub(super) struct BinaryRule {
    /// Scratch registers its code borrows.
    pub temps: usize,
    /// Emits `dst = x op y` (16 f32 lanes).
    pub emit: fn(&mut Asm, &mut Temps, Zmm, Zmm, Zmm),
}

/// The constants of the exp-based activations (exp, sigmoid, silu, tanh-GELU, tanh, log).
fn transcendental_consts(p: &mut Vec<u32>, _: &mut Vec<u64>) {
    p.extend(exp_consts());
    p.extend([0x8000_0000, 1f32.to_bits(), f32::NEG_INFINITY.to_bits()]);
    p.extend(GELU_CONSTS.map(f32::to_bits));
    p.extend(tanh_log_consts());
}

/// The constants of erf and exact GELU.
fn erf_family_consts(p: &mut Vec<u32>, p64: &mut Vec<u64>) {
    p.extend(exp_consts());
    p.extend(erf_consts());
    p64.extend(erf_consts64());
}

/// The row of f32 activation `act`; `None`: not compiled (the tile is interpreted).
pub(super) fn unary(act: Activation) -> Option<UnaryRule> {
    use Activation as A;
    let rule = match act {
        A::Relu => UnaryRule {
            temps: 0,
            consts: |p, _| p.push(0),
            emit: |l, a, _, d, x| {
                a.vcmpps(K2, x, l.creg(0), Cmp::NleUq);
                a.vmovaps_z(d, K2, x);
            },
        },
        A::Neg => UnaryRule {
            temps: 0,
            consts: |p, _| p.push(0x8000_0000),
            emit: |l, a, _, d, x| a.vxorps(d, x, l.creg(0x8000_0000)),
        },
        A::Abs => UnaryRule {
            temps: 0,
            consts: |p, _| p.push(0x7FFF_FFFF),
            emit: |l, a, _, d, x| a.vandps(d, x, l.creg(0x7FFF_FFFF)),
        },
        A::Sqrt => UnaryRule {
            temps: 0,
            consts: |_, _| {},
            emit: |_, a, _, d, x| a.vsqrtps(d, x),
        },
        A::Exp => UnaryRule {
            temps: 7,
            consts: transcendental_consts,
            emit: |l, a, t, d, x| {
                let c = l.exp_regs();
                let (p, s1, s2) = exp_parts(a, &c, t, x, None);
                a.vmulps(d, p, s1);
                a.vmulps(d, d, s2);
            },
        },
        A::Sigmoid => UnaryRule {
            temps: 11,
            consts: transcendental_consts,
            emit: |l, a, t, d, x| l.sigmoid_dd_mul(a, t, d, x, None, None),
        },
        A::Silu => UnaryRule {
            temps: 11,
            consts: transcendental_consts,
            emit: |l, a, t, d, x| {
                // x·σ(x) with x as the multiplier (`math::special::silu`); that is
                // ∞·0 = NaN at −∞, where silu is −0.
                l.sigmoid_dd_mul(a, t, d, x, None, Some(x));
                a.vcmpps(K3, x, l.creg(f32::NEG_INFINITY.to_bits()), Cmp::EqOq);
                a.vblendmps(d, K3, d, l.creg(0x8000_0000));
            },
        },
        A::GeluApprox => UnaryRule {
            temps: 15,
            consts: transcendental_consts,
            emit: |l, a, t, d, x| l.gelu_tanh(a, t, d, x),
        },
        A::Tanh => UnaryRule {
            temps: 10,
            consts: transcendental_consts,
            emit: |l, a, t, d, x| l.tanh(a, t, d, x),
        },
        A::Log => UnaryRule {
            temps: 10,
            consts: transcendental_consts,
            emit: |l, a, t, d, x| l.log(a, t, d, x),
        },
        A::Erf => UnaryRule {
            temps: 5,
            consts: erf_family_consts,
            emit: |l, a, t, d, x| l.erf(a, t, d, x),
        },
        A::Gelu => UnaryRule {
            temps: 11,
            consts: erf_family_consts,
            emit: |l, a, t, d, x| l.gelu_erf(a, t, d, x),
        },
        _ => return None,
    };
    Some(rule)
}

/// The row of f32 binary op `op`; `None`: not compiled.
pub(super) fn binary(op: BinaryOp) -> Option<BinaryRule> {
    let rule = match op {
        BinaryOp::Add => BinaryRule {
            temps: 0,
            emit: |a, _, d, x, y| a.vaddps(d, x, y),
        },
        BinaryOp::Sub => BinaryRule {
            temps: 0,
            emit: |a, _, d, x, y| a.vsubps(d, x, y),
        },
        BinaryOp::Mul => BinaryRule {
            temps: 0,
            emit: |a, _, d, x, y| a.vmulps(d, x, y),
        },
        BinaryOp::Div => BinaryRule {
            temps: 0,
            emit: |a, _, d, x, y| a.vdivps(d, x, y),
        },
        BinaryOp::Max => BinaryRule {
            temps: 1,
            emit: |a, t, d, x, y| minmax(a, true, d, t.get(), x, y),
        },
        BinaryOp::Min => BinaryRule {
            temps: 1,
            emit: |a, t, d, x, y| minmax(a, false, d, t.get(), x, y),
        },
        _ => return None,
    };
    Some(rule)
}

/// The packed-double opcode of an f64 binary op; `None`: not compiled.
pub(super) fn binary_f64_opcode(op: BinaryOp) -> Option<Opcode> {
    match op {
        BinaryOp::Add => Some(VADDPD),
        BinaryOp::Mul => Some(VMULPD),
        BinaryOp::Sub => Some(VSUBPD),
        BinaryOp::Div => Some(VDIVPD),
        _ => None,
    }
}

/// The packed-double opcode of an f64 activation; `None`: not compiled (f64 neg/abs keep
/// NaN as is in the interpreter, unlike f32's).
pub(super) fn unary_f64_opcode(act: Activation) -> Option<Opcode> {
    match act {
        Activation::Sqrt => Some(VSQRTPD),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every activation and binary op, listed by the IR's name tables.
    fn every_activation() -> impl Iterator<Item = Activation> {
        Activation::ALL.iter().copied()
    }

    #[test]
    fn rows_reserve_scratch_registers_within_the_register_file() {
        // 32 vector registers; the body also holds the destination and operands.
        for act in every_activation() {
            if let Some(r) = unary(act) {
                assert!(
                    r.temps <= 16,
                    "{act:?} borrows {} scratch registers",
                    r.temps
                );
            }
        }
    }

    #[test]
    fn the_exp_family_pools_the_constants_its_code_reads() {
        for act in [Activation::Exp, Activation::Tanh, Activation::Erf] {
            let (mut p, mut p64) = (Vec::new(), Vec::new());
            (unary(act).expect("compiled").consts)(&mut p, &mut p64);
            for c in exp_consts() {
                assert!(p.contains(&c), "{act:?} lacks exp constant {c:#x}");
            }
        }
        let (mut p, mut p64) = (Vec::new(), Vec::new());
        (unary(Activation::Gelu).unwrap().consts)(&mut p, &mut p64);
        assert_eq!(p64, erf_consts64());
    }

    #[test]
    fn f64_rows_cover_only_ops_with_the_interpreters_bits() {
        assert_eq!(unary_f64_opcode(Activation::Sqrt), Some(VSQRTPD));
        assert_eq!(unary_f64_opcode(Activation::Neg), None);
        assert_eq!(unary_f64_opcode(Activation::Abs), None);
        assert_eq!(binary_f64_opcode(BinaryOp::Max), None);
    }
}
