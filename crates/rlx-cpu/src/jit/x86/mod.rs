//! A minimal x86-64 assembler: the handful of general-purpose and AVX-512 (EVEX)
//! instructions the elementwise JIT emits, each encoded by hand. Operands are typed:
//! vector registers are [`Zmm`], write masks [`Kreg`] under a [`Mask`] (merge, zero or
//! none), general-purpose registers [`Gpr`], and memory operands [`Mem`] —
//! `[base + index]` or `[base + disp32]` (no scaled or compressed displacements, so
//! every encoding stays simple to check against a disassembler; the unit tests do).
//! Each EVEX instruction is one [`Opcode`] row (map, prefix, W, opcode byte).

/// A general-purpose register (its hardware number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Gpr(pub(crate) u8);

pub(crate) const RAX: Gpr = Gpr(0);
pub(crate) const RCX: Gpr = Gpr(1);
pub(crate) const RDX: Gpr = Gpr(2);
pub(crate) const RSI: Gpr = Gpr(6);
pub(crate) const RDI: Gpr = Gpr(7);
pub(crate) const R11: Gpr = Gpr(11);

/// A memory operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mem {
    /// `[base + index]`.
    BaseIndex(Gpr, Gpr),
    /// `[base + disp]`.
    BaseDisp(Gpr, i32),
    /// `[base + 2·index + disp]` (f64 data at an f32 lane offset).
    BaseIndex2(Gpr, Gpr, i32),
}

/// A 512-bit vector register, `zmm0..zmm31` (the low halves are the `ymm` registers
/// of the same number, which the conversions between widths name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Zmm(u8);

impl Zmm {
    /// Vector registers of AVX-512.
    pub(crate) const COUNT: u8 = 32;

    /// `zmm{n}`; panics unless `n < 32`.
    pub(crate) const fn new(n: u8) -> Zmm {
        assert!(n < Zmm::COUNT, "zmm registers are numbered 0..32");
        Zmm(n)
    }

    /// The register's number, `0..32` (an index into per-register tables).
    pub(crate) const fn index(self) -> usize {
        self.0 as usize
    }
}

/// An opmask register usable as a write mask, `k1..k7` (`k0` in a mask field means "no
/// mask", which [`Mask::None`] spells out instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kreg(u8);

impl Kreg {
    /// `k{n}`; panics unless `1 <= n < 8`.
    pub(crate) const fn new(n: u8) -> Kreg {
        assert!(n >= 1 && n < 8, "write masks are k1..k7");
        Kreg(n)
    }
}

/// The loop tail's lane mask (f32 lanes, or f64 lanes 0–7).
pub(crate) const K1: Kreg = Kreg::new(1);
/// Scratch mask of comparisons and blends.
pub(crate) const K2: Kreg = Kreg::new(2);
/// Scratch mask kept across an activation's steps (log's tiny lanes, σ's sign).
pub(crate) const K3: Kreg = Kreg::new(3);
/// The loop tail's mask of f64 lanes 8–15.
pub(crate) const K4: Kreg = Kreg::new(4);
/// Scratch mask of the erf kernels.
pub(crate) const K6: Kreg = Kreg::new(6);
/// Exact GELU's lanes below its table (kept across its out-of-line tail kernel).
pub(crate) const K7: Kreg = Kreg::new(7);

/// The write mask of an EVEX instruction (its `{k}` / `{k}{z}` decoration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mask {
    /// Every lane written.
    None,
    /// Only the lanes set in the mask are written; the others keep their value
    /// (the only masking a store to memory may use).
    Merge(Kreg),
    /// Lanes outside the mask are zeroed (`{z}`; registers only).
    Zero(Kreg),
}

impl Mask {
    /// Zero-masking under `k`, or no mask when `k` is `None`.
    pub(crate) fn zeroing(k: Option<Kreg>) -> Mask {
        k.map_or(Mask::None, Mask::Zero)
    }

    /// Merge-masking under `k`, or no mask when `k` is `None`.
    pub(crate) fn merging(k: Option<Kreg>) -> Mask {
        k.map_or(Mask::None, Mask::Merge)
    }

    /// The EVEX `z` bit and `aaa` field.
    fn bits(self) -> (bool, u8) {
        match self {
            Mask::None => (false, 0),
            Mask::Merge(k) => (false, k.0),
            Mask::Zero(k) => (true, k.0),
        }
    }
}

/// EVEX opcode maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Map {
    M0F = 1,
    M0F38 = 2,
    M0F3A = 3,
}

/// EVEX implied prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pp {
    None = 0,
    P66 = 1,
}

/// An EVEX instruction's opcode: map, implied prefix, the W bit and the opcode byte.
/// Every instruction the assembler emits is one `const` row below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opcode {
    map: Map,
    pp: Pp,
    w: bool,
    op: u8,
}

impl Opcode {
    const fn new(map: Map, pp: Pp, w: bool, op: u8) -> Opcode {
        Opcode { map, pp, w, op }
    }
}

use Map::{M0F, M0F3A, M0F38};
use Pp::P66;

// Packed single (map 0F, no prefix, W0).
pub(crate) const VADDPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x58);
pub(crate) const VMULPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x59);
pub(crate) const VSUBPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x5C);
pub(crate) const VDIVPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x5E);
pub(crate) const VMINPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x5D);
pub(crate) const VANDPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x54);
pub(crate) const VORPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x56);
pub(crate) const VXORPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x57);
pub(crate) const VSQRTPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x51);
pub(crate) const VCVTDQ2PS: Opcode = Opcode::new(M0F, Pp::None, false, 0x5B);
pub(crate) const VCMPPS: Opcode = Opcode::new(M0F, Pp::None, false, 0xC2);
pub(crate) const VMOVAPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x28);
pub(crate) const VMOVUPS_LOAD: Opcode = Opcode::new(M0F, Pp::None, false, 0x10);
pub(crate) const VMOVUPS_STORE: Opcode = Opcode::new(M0F, Pp::None, false, 0x11);
pub(crate) const VMOVNTPS: Opcode = Opcode::new(M0F, Pp::None, false, 0x2B);
pub(crate) const VCVTPS2PD: Opcode = Opcode::new(M0F, Pp::None, false, 0x5A);
// Packed double (map 0F, 66, W1): the packed-single opcodes on 8 doubles.
pub(crate) const VADDPD: Opcode = Opcode::new(M0F, P66, true, 0x58);
pub(crate) const VMULPD: Opcode = Opcode::new(M0F, P66, true, 0x59);
pub(crate) const VSUBPD: Opcode = Opcode::new(M0F, P66, true, 0x5C);
pub(crate) const VDIVPD: Opcode = Opcode::new(M0F, P66, true, 0x5E);
pub(crate) const VSQRTPD: Opcode = Opcode::new(M0F, P66, true, 0x51);
pub(crate) const VCVTPD2PS: Opcode = Opcode::new(M0F, P66, true, 0x5A);
pub(crate) const VMOVUPD_LOAD: Opcode = Opcode::new(M0F, P66, true, 0x10);
pub(crate) const VMOVUPD_STORE: Opcode = Opcode::new(M0F, P66, true, 0x11);
// 32-bit integer lanes (map 0F, 66, W0); the shifts by an immediate are 72 /digit.
pub(crate) const VPADDD: Opcode = Opcode::new(M0F, P66, false, 0xFE);
pub(crate) const VPSUBD: Opcode = Opcode::new(M0F, P66, false, 0xFA);
pub(crate) const VPANDD: Opcode = Opcode::new(M0F, P66, false, 0xDB);
pub(crate) const VPORD: Opcode = Opcode::new(M0F, P66, false, 0xEB);
pub(crate) const VPSHIFTD_IMM: Opcode = Opcode::new(M0F, P66, false, 0x72);
// Map 0F38.
pub(crate) const VFMADD213PS: Opcode = Opcode::new(M0F38, P66, false, 0xA8);
pub(crate) const VFMADD231PS: Opcode = Opcode::new(M0F38, P66, false, 0xB8);
pub(crate) const VFMSUB213PS: Opcode = Opcode::new(M0F38, P66, false, 0xAA);
pub(crate) const VFNMADD231PS: Opcode = Opcode::new(M0F38, P66, false, 0xBC);
pub(crate) const VCVTPH2PS: Opcode = Opcode::new(M0F38, P66, false, 0x13);
pub(crate) const VBLENDMPS: Opcode = Opcode::new(M0F38, P66, false, 0x65);
pub(crate) const VBROADCASTSS: Opcode = Opcode::new(M0F38, P66, false, 0x18);
pub(crate) const VBROADCASTSD: Opcode = Opcode::new(M0F38, P66, true, 0x19);
/// `vpermps`: the 16-entry table lookups of the erf and GELU kernels.
pub(crate) const VPERMPS: Opcode = Opcode::new(M0F38, P66, false, 0x16);
// Map 0F3A (each takes an imm8).
pub(crate) const VCVTPS2PH: Opcode = Opcode::new(M0F3A, P66, false, 0x1D);
pub(crate) const VEXTRACTF32X8: Opcode = Opcode::new(M0F3A, P66, false, 0x1B);
pub(crate) const VINSERTF32X8: Opcode = Opcode::new(M0F3A, P66, false, 0x1A);

/// The `/digit` opcode extensions of [`VPSHIFTD_IMM`] (ModRM.reg).
const SRLD: u8 = 2;
const SRAD: u8 = 4;
const SLLD: u8 = 6;

/// Comparison predicates of `vcmpps`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    EqOq = 0x00,
    /// `a ≠ b`, true when unordered.
    NeqUq = 0x04,
    LtOq = 0x11,
    LeOq = 0x12,
    GeOq = 0x1D,
    UnordQ = 0x03,
    /// Not (a ≤ b), true when unordered: `a > b || isnan`.
    NleUq = 0x16,
    GtOq = 0x1E,
}

/// What the ModRM.reg field of an EVEX instruction holds.
#[derive(Clone, Copy)]
enum Reg {
    Zmm(Zmm),
    /// The opmask a comparison writes.
    K(Kreg),
    /// An opcode extension (`/digit`).
    Ext(u8),
}

impl Reg {
    fn bits(self) -> u8 {
        match self {
            Reg::Zmm(z) => z.0,
            Reg::K(k) => k.0,
            Reg::Ext(e) => e,
        }
    }
}

impl From<Zmm> for Reg {
    fn from(z: Zmm) -> Reg {
        Reg::Zmm(z)
    }
}

/// The second operand of an EVEX instruction: a register or memory.
#[derive(Clone, Copy)]
enum Rm {
    Reg(Zmm),
    Mem(Mem),
    /// One 32-bit value at `[base + disp]` broadcast to every lane (`{1to16}`).
    Bcst(Gpr, i32),
}

/// The last source of an arithmetic instruction: a vector register, or a 32-bit
/// constant broadcast from `[r8 + disp]` (the constant pool), which costs no register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    R(Zmm),
    Pool(i32),
}

impl From<Zmm> for Src {
    fn from(r: Zmm) -> Src {
        Src::R(r)
    }
}

impl From<Zmm> for Rm {
    fn from(r: Zmm) -> Rm {
        Rm::Reg(r)
    }
}

impl From<Src> for Rm {
    fn from(s: Src) -> Rm {
        match s {
            Src::R(r) => Rm::Reg(r),
            Src::Pool(d) => Rm::Bcst(Gpr(8), d),
        }
    }
}

/// Machine code being assembled.
#[derive(Default)]
pub(crate) struct Asm {
    pub(crate) code: Vec<u8>,
}

impl Asm {
    fn byte(&mut self, b: u8) {
        self.code.push(b);
    }

    fn bytes(&mut self, b: &[u8]) {
        self.code.extend_from_slice(b);
    }

    /// ModRM (+ SIB, + disp32) for `reg` (low 3 bits used) and `rm`.
    fn modrm(&mut self, reg: u8, rm: Rm) {
        match rm {
            Rm::Reg(r) => self.byte(0xC0 | (reg & 7) << 3 | (r.0 & 7)),
            Rm::Mem(Mem::BaseIndex(b, i)) => {
                assert!(i.0 & 7 != 4, "rsp/r12 cannot be an index");
                // mod 00 with base rbp/r13 would mean disp32: use mod 01 with disp8 0.
                let needs_disp = b.0 & 7 == 5;
                let md = if needs_disp { 0x40 } else { 0x00 };
                self.byte(md | (reg & 7) << 3 | 4);
                self.byte((i.0 & 7) << 3 | (b.0 & 7));
                if needs_disp {
                    self.byte(0);
                }
            }
            Rm::Mem(Mem::BaseIndex2(b, i, d)) => {
                assert!(i.0 & 7 != 4, "rsp/r12 cannot be an index");
                self.byte(0x80 | (reg & 7) << 3 | 4);
                self.byte(0x40 | (i.0 & 7) << 3 | (b.0 & 7));
                self.bytes(&d.to_le_bytes());
            }
            Rm::Mem(Mem::BaseDisp(b, d)) | Rm::Bcst(b, d) => {
                self.byte(0x80 | (reg & 7) << 3 | (b.0 & 7));
                if b.0 & 7 == 4 {
                    self.byte(0x24); // SIB: no index, base rsp/r12
                }
                self.bytes(&d.to_le_bytes());
            }
        }
    }

    /// An EVEX instruction on 512-bit vectors: `reg` (ModRM.reg), `vvvv` (`None`: the
    /// field unused, encoded as 1111 with V' set), `rm`, under write mask `mask`.
    fn evex(&mut self, o: Opcode, reg: impl Into<Reg>, vvvv: Option<Zmm>, rm: Rm, mask: Mask) {
        let reg = reg.into().bits();
        let vvvv = vvvv.map_or(0, |v| v.0);
        let (zero, aaa) = mask.bits();
        let (x_bit, b_bit) = match rm {
            Rm::Reg(r) => (r.0 & 16 != 0, r.0 & 8 != 0),
            Rm::Mem(Mem::BaseIndex(b, i)) | Rm::Mem(Mem::BaseIndex2(b, i, _)) => {
                (i.0 & 8 != 0, b.0 & 8 != 0)
            }
            Rm::Mem(Mem::BaseDisp(b, _)) | Rm::Bcst(b, _) => (false, b.0 & 8 != 0),
        };
        let bcst = matches!(rm, Rm::Bcst(..));
        let r = reg & 8 != 0;
        let r2 = reg & 16 != 0;
        let p0 = (!r as u8) << 7
            | (!x_bit as u8) << 6
            | (!b_bit as u8) << 5
            | (!r2 as u8) << 4
            | o.map as u8;
        let p1 = (o.w as u8) << 7 | ((!vvvv) & 15) << 3 | 0x04 | o.pp as u8;
        let p2 =
            (zero as u8) << 7 | 0b10 << 5 | (bcst as u8) << 4 | ((vvvv & 16 == 0) as u8) << 3 | aaa;
        self.bytes(&[0x62, p0, p1, p2, o.op]);
        self.modrm(reg, rm);
    }

    /// `dst = a op b` for any two-source opcode row (`b` a register or a pooled
    /// constant broadcast), unmasked.
    pub(crate) fn op3(&mut self, o: Opcode, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.evex(o, dst, Some(a), Rm::from(b.into()), Mask::None);
    }

    /// `dst = op src` for a one-source opcode row (the vvvv field unused), unmasked.
    pub(crate) fn op2(&mut self, o: Opcode, dst: Zmm, src: Zmm) {
        self.evex(o, dst, None, Rm::Reg(src), Mask::None);
    }

    pub(crate) fn vaddps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VADDPS, dst, a, b)
    }
    pub(crate) fn vmulps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VMULPS, dst, a, b)
    }
    pub(crate) fn vsubps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VSUBPS, dst, a, b)
    }
    pub(crate) fn vdivps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VDIVPS, dst, a, b)
    }
    /// `dst = a < b ? a : b` lane-wise (`vminps`: `b` where either is NaN).
    pub(crate) fn vminps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VMINPS, dst, a, b)
    }
    pub(crate) fn vandps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VANDPS, dst, a, b)
    }
    pub(crate) fn vorps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VORPS, dst, a, b)
    }
    pub(crate) fn vxorps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VXORPS, dst, a, b)
    }
    pub(crate) fn vsqrtps(&mut self, dst: Zmm, src: Zmm) {
        self.op2(VSQRTPS, dst, src);
    }

    /// `dst = a·dst + b` (`vfmadd213ps`).
    pub(crate) fn vfmadd213ps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VFMADD213PS, dst, a, b);
    }

    /// `dst = a·b + dst` (`vfmadd231ps`).
    pub(crate) fn vfmadd231ps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VFMADD231PS, dst, a, b);
    }

    /// `dst = a·dst − b` (`vfmsub213ps`).
    pub(crate) fn vfmsub213ps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VFMSUB213PS, dst, a, b);
    }

    /// `dst = −(a·b) + dst` (`vfnmadd231ps`).
    pub(crate) fn vfnmadd231ps(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VFNMADD231PS, dst, a, b);
    }

    /// `dst = a + b` on 32-bit integer lanes.
    pub(crate) fn vpaddd(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VPADDD, dst, a, b);
    }

    /// `dst = a & b` on 32-bit integer lanes.
    pub(crate) fn vpandd(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VPANDD, dst, a, b);
    }

    /// 32-bit integers to floats (`vcvtdq2ps`).
    pub(crate) fn vcvtdq2ps(&mut self, dst: Zmm, src: Zmm) {
        self.op2(VCVTDQ2PS, dst, src);
    }

    /// `dst = a − b` on 32-bit integer lanes.
    pub(crate) fn vpsubd(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VPSUBD, dst, a, b);
    }

    /// A shift of 32-bit lanes by `imm` (66 0F 72 /digit ib): the destination is vvvv,
    /// ModRM.reg holds the extension.
    fn shift_imm(&mut self, ext: u8, dst: Zmm, src: Zmm, imm: u8) {
        self.evex(
            VPSHIFTD_IMM,
            Reg::Ext(ext),
            Some(dst),
            Rm::Reg(src),
            Mask::None,
        );
        self.byte(imm);
    }

    /// `dst = src >> imm` (arithmetic) on 32-bit lanes.
    pub(crate) fn vpsrad(&mut self, dst: Zmm, src: Zmm, imm: u8) {
        self.shift_imm(SRAD, dst, src, imm);
    }

    /// `dst = src << imm` on 32-bit lanes.
    pub(crate) fn vpslld(&mut self, dst: Zmm, src: Zmm, imm: u8) {
        self.shift_imm(SLLD, dst, src, imm);
    }

    /// `dst = src >> imm` (logical) on 32-bit lanes.
    pub(crate) fn vpsrld(&mut self, dst: Zmm, src: Zmm, imm: u8) {
        self.shift_imm(SRLD, dst, src, imm);
    }

    /// `dst = a | b` on 32-bit integer lanes.
    pub(crate) fn vpord(&mut self, dst: Zmm, a: Zmm, b: impl Into<Src>) {
        self.op3(VPORD, dst, a, b);
    }

    /// 16 floats rounded to binary16, to nearest even, into ymm `dst` (a zmm register's
    /// low half): `vcvtps2ph ymm, zmm, 0`.
    pub(crate) fn vcvtps2ph(&mut self, dst: Zmm, src: Zmm) {
        // The source is ModRM.reg, the destination ModRM.rm; imm8 0 = round to nearest
        // even (not MXCSR's mode).
        self.op2(VCVTPS2PH, src, dst);
        self.byte(0);
    }

    /// The 16 binary16 values of ymm `src` widened to floats: `vcvtph2ps zmm, ymm`.
    pub(crate) fn vcvtph2ps(&mut self, dst: Zmm, src: Zmm) {
        self.op2(VCVTPH2PS, dst, src);
    }

    /// `k = a <pred> b` per lane.
    pub(crate) fn vcmpps(&mut self, k: Kreg, a: Zmm, b: impl Into<Src>, pred: Cmp) {
        self.evex(VCMPPS, Reg::K(k), Some(a), Rm::from(b.into()), Mask::None);
        self.byte(pred as u8);
    }

    /// `dst = k ? b : a` per lane (`vblendmps`).
    pub(crate) fn vblendmps(&mut self, dst: Zmm, k: Kreg, a: Zmm, b: impl Into<Src>) {
        self.evex(VBLENDMPS, dst, Some(a), Rm::from(b.into()), Mask::Merge(k));
    }

    /// `dst = k ? src : 0` per lane (`vmovaps` with zero-masking).
    pub(crate) fn vmovaps_z(&mut self, dst: Zmm, k: Kreg, src: Zmm) {
        self.evex(VMOVAPS, dst, None, Rm::Reg(src), Mask::Zero(k));
    }

    /// `dst = src`.
    pub(crate) fn vmovaps(&mut self, dst: Zmm, src: Zmm) {
        self.op2(VMOVAPS, dst, src);
    }

    /// Load 16 floats under `mask` ([`Mask::Zero`] for the loop tail).
    pub(crate) fn vmovups_load(&mut self, dst: Zmm, m: Mem, mask: Mask) {
        self.evex(VMOVUPS_LOAD, dst, None, Rm::Mem(m), mask);
    }

    /// Store 16 floats (only the lanes of a [`Mask::Merge`] mask).
    pub(crate) fn vmovups_store(&mut self, m: Mem, src: Zmm, mask: Mask) {
        assert!(!matches!(mask, Mask::Zero(_)), "a store cannot zero-mask");
        self.evex(VMOVUPS_STORE, src, None, Rm::Mem(m), mask);
    }

    /// Store 16 floats with a non-temporal hint (the address must be 64-byte aligned).
    pub(crate) fn vmovntps(&mut self, m: Mem, src: Zmm) {
        self.evex(VMOVNTPS, src, None, Rm::Mem(m), Mask::None);
    }

    /// The 8 floats of ymm `src` (a zmm register's low half) widened to 8 doubles:
    /// `vcvtps2pd zmm, ymm`.
    pub(crate) fn vcvtps2pd(&mut self, dst: Zmm, src: Zmm) {
        self.op2(VCVTPS2PD, dst, src);
    }

    /// 8 doubles rounded to 8 floats: `vcvtpd2ps ymm, zmm`.
    pub(crate) fn vcvtpd2ps(&mut self, dst: Zmm, src: Zmm) {
        self.op2(VCVTPD2PS, dst, src);
    }

    /// The upper 256 bits of `src` into ymm `dst`: `vextractf32x8 ymm, zmm, 1`.
    pub(crate) fn vextract_hi(&mut self, dst: Zmm, src: Zmm) {
        self.op2(VEXTRACTF32X8, src, dst);
        self.byte(1);
    }

    /// `dst = a` with its upper 256 bits replaced by ymm `b`: `vinsertf32x8 zmm, zmm,
    /// ymm, 1`.
    pub(crate) fn vinsert_hi(&mut self, dst: Zmm, a: Zmm, b: Zmm) {
        self.op3(VINSERTF32X8, dst, a, b);
        self.byte(1);
    }

    /// Load 8 doubles under `mask`.
    pub(crate) fn vmovupd_load(&mut self, dst: Zmm, m: Mem, mask: Mask) {
        self.evex(VMOVUPD_LOAD, dst, None, Rm::Mem(m), mask);
    }

    /// Store 8 doubles (only the lanes of a [`Mask::Merge`] mask).
    pub(crate) fn vmovupd_store(&mut self, m: Mem, src: Zmm, mask: Mask) {
        assert!(!matches!(mask, Mask::Zero(_)), "a store cannot zero-mask");
        self.evex(VMOVUPD_STORE, src, None, Rm::Mem(m), mask);
    }

    /// Broadcast one double from memory to every lane.
    pub(crate) fn vbroadcastsd(&mut self, dst: Zmm, m: Mem) {
        self.evex(VBROADCASTSD, dst, None, Rm::Mem(m), Mask::None);
    }

    /// `dst[i] = table[idx[i] & 15]`: a lane-wise lookup in the 16 floats at `table`
    /// (`vpermps`, a full 64-byte memory operand, no alignment required).
    pub(crate) fn vpermps(&mut self, dst: Zmm, idx: Zmm, table: Mem) {
        self.evex(VPERMPS, dst, Some(idx), Rm::Mem(table), Mask::None);
    }

    /// `k = src >> imm` (16-bit masks; `kshiftrw`, VEX-encoded).
    pub(crate) fn kshiftrw(&mut self, k: Kreg, src: Kreg, imm: u8) {
        self.bytes(&[0xC4, 0xE3, 0xF9, 0x30, 0xC0 | k.0 << 3 | src.0, imm]);
    }

    /// Set ZF when `k | k2` has no bit set (`kortestw`, VEX-encoded): a branch on "no
    /// lane of the mask" follows as `jump(Some(JE))`.
    pub(crate) fn kortestw(&mut self, k: Kreg, k2: Kreg) {
        self.bytes(&[0xC5, 0xF8, 0x98, 0xC0 | k.0 << 3 | k2.0]);
    }

    /// Broadcast one float from memory to every lane.
    pub(crate) fn vbroadcastss(&mut self, dst: Zmm, m: Mem) {
        self.evex(VBROADCASTSS, dst, None, Rm::Mem(m), Mask::None);
    }

    /// `k = low 16 bits of gpr` (`kmovw k, r32`, VEX-encoded).
    pub(crate) fn kmovw_from(&mut self, k: Kreg, r: Gpr) {
        assert!(r.0 < 8, "kmovw from a low register");
        self.bytes(&[0xC5, 0xF8, 0x92, 0xC0 | k.0 << 3 | r.0]);
    }

    /// `prefetcht0 [base + index + disp]`.
    pub(crate) fn prefetcht0(&mut self, base: Gpr, index: Gpr, disp: i32) {
        let rex = 0x40 | ((index.0 >> 3) & 1) << 1 | ((base.0 >> 3) & 1);
        if rex != 0x40 {
            self.byte(rex);
        }
        self.bytes(&[
            0x0F,
            0x18,
            0x80 | 1 << 3 | 4,
            (index.0 & 7) << 3 | (base.0 & 7),
        ]);
        self.bytes(&disp.to_le_bytes());
    }

    /// `vzeroupper`.
    pub(crate) fn vzeroupper(&mut self) {
        self.bytes(&[0xC5, 0xF8, 0x77]);
    }

    /// REX prefix for a 64-bit op with `reg` in ModRM.reg and `rm` in ModRM.rm.
    fn rex_w(&mut self, reg: u8, rm: u8) {
        self.byte(0x48 | ((reg >> 3) & 1) << 2 | ((rm >> 3) & 1));
    }

    /// `dst = [base + disp]` (64-bit load).
    pub(crate) fn mov_load(&mut self, dst: Gpr, base: Gpr, disp: i32) {
        self.rex_w(dst.0, base.0);
        self.byte(0x8B);
        self.modrm(dst.0, Rm::Mem(Mem::BaseDisp(base, disp)));
    }

    /// `dst = imm` (32-bit move, zero-extended).
    pub(crate) fn mov_imm32(&mut self, dst: Gpr, imm: u32) {
        if dst.0 >= 8 {
            self.byte(0x41);
        }
        self.byte(0xB8 | (dst.0 & 7));
        self.bytes(&imm.to_le_bytes());
    }

    /// `dst += imm` (64-bit).
    pub(crate) fn add_imm(&mut self, dst: Gpr, imm: i32) {
        self.rex_w(0, dst.0);
        self.byte(0x81);
        self.byte(0xC0 | (dst.0 & 7));
        self.bytes(&imm.to_le_bytes());
    }

    /// `dst ^= dst` (64-bit; zeroes it).
    pub(crate) fn zero(&mut self, dst: Gpr) {
        self.rex_w(dst.0, dst.0);
        self.bytes(&[0x31, 0xC0 | (dst.0 & 7) << 3 | (dst.0 & 7)]);
    }

    /// Compare `a` with `b` (64-bit; sets the flags for `a − b`).
    pub(crate) fn cmp(&mut self, a: Gpr, b: Gpr) {
        self.rex_w(b.0, a.0);
        self.bytes(&[0x39, 0xC0 | (b.0 & 7) << 3 | (a.0 & 7)]);
    }

    /// `dst = (1 << cl) − 1` for `cl ∈ 0..16`, via `dst = 1; dst <<= cl; dst −= 1`
    /// (32-bit ops; `dst` must not be `rcx`).
    pub(crate) fn low_mask_cl(&mut self, dst: Gpr) {
        assert!(dst != RCX && dst.0 < 8);
        self.mov_imm32(dst, 1);
        self.bytes(&[0xD3, 0xE0 | dst.0]); // shl r32, cl
        self.bytes(&[0x83, 0xE8 | dst.0, 0x01]); // sub r32, 1
    }

    /// A forward or backward jump placeholder (`jcc rel32` / `jmp rel32`); returns the
    /// offset of its displacement for [`Asm::patch`].
    pub(crate) fn jump(&mut self, cond: Option<u8>) -> usize {
        match cond {
            Some(cc) => self.bytes(&[0x0F, 0x80 | cc]),
            None => self.byte(0xE9),
        }
        self.bytes(&[0; 4]);
        self.code.len() - 4
    }

    /// Point the jump whose displacement is at `at` to `target`.
    pub(crate) fn patch(&mut self, at: usize, target: usize) {
        let rel = target as i64 - (at as i64 + 4);
        self.code[at..at + 4].copy_from_slice(&(rel as i32).to_le_bytes());
    }

    /// `ret`.
    pub(crate) fn ret(&mut self) {
        self.byte(0xC3);
    }
}

/// Condition codes for [`Asm::jump`].
pub(crate) const JAE: u8 = 0x3;
/// Jump if ZF (equal; after [`Asm::kortestw`]: no lane set).
pub(crate) const JE: u8 = 0x4;

#[cfg(test)]
mod tests;
