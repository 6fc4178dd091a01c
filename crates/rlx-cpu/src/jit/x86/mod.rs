//! A minimal x86-64 assembler: the handful of general-purpose and AVX-512 (EVEX)
//! instructions the elementwise JIT emits, each encoded by hand. Vector registers are
//! `zmm0..zmm31` (numbers `0..32`), opmask registers `k1..k7`, and memory operands are
//! `[base + index]` or `[base + disp32]` (no scaled or compressed displacements, so
//! every encoding stays simple to check against a disassembler; the unit tests do).

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

/// EVEX opcode maps.
#[derive(Clone, Copy)]
pub(crate) enum Map {
    M0F = 1,
    M0F38 = 2,
    M0F3A = 3,
}

/// EVEX implied prefixes.
#[derive(Clone, Copy)]
pub(crate) enum Pp {
    None = 0,
    P66 = 1,
}

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

/// The second operand of an EVEX instruction: a register or memory.
#[derive(Clone, Copy)]
enum Rm {
    Reg(u8),
    Mem(Mem),
    /// One 32-bit value at `[base + disp]` broadcast to every lane (`{1to16}`).
    Bcst(Gpr, i32),
}

/// The last source of an arithmetic instruction: a vector register, or a 32-bit
/// constant broadcast from `[r8 + disp]` (the constant pool), which costs no register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Src {
    R(u8),
    Pool(i32),
}

impl From<u8> for Src {
    fn from(r: u8) -> Src {
        Src::R(r)
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
            Rm::Reg(r) => self.byte(0xC0 | (reg & 7) << 3 | (r & 7)),
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

    /// An EVEX instruction on 512-bit vectors: `reg` (ModRM.reg), `vvvv`, `rm`.
    #[allow(clippy::too_many_arguments)]
    fn evex(
        &mut self,
        map: Map,
        pp: Pp,
        w: bool,
        op: u8,
        reg: u8,
        vvvv: u8,
        rm: Rm,
        mask: u8,
        zero: bool,
    ) {
        let (x_bit, b_bit) = match rm {
            Rm::Reg(r) => (r & 16 != 0, r & 8 != 0),
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
            | map as u8;
        let p1 = (w as u8) << 7 | ((!vvvv) & 15) << 3 | 0x04 | pp as u8;
        let p2 = (zero as u8) << 7
            | 0b10 << 5
            | (bcst as u8) << 4
            | ((vvvv & 16 == 0) as u8) << 3
            | (mask & 7);
        self.bytes(&[0x62, p0, p1, p2, op]);
        self.modrm(reg, rm);
    }

    /// An unmasked EVEX instruction on registers `reg`, `vvvv` and `rm` (a register or a
    /// pooled constant broadcast).
    #[allow(clippy::too_many_arguments)]
    fn op3(&mut self, map: Map, pp: Pp, w: bool, op: u8, reg: u8, vvvv: u8, rm: impl Into<Src>) {
        self.evex(map, pp, w, op, reg, vvvv, Rm::from(rm.into()), 0, false);
    }

    /// An EVEX instruction with memory operand `m`, under mask `k` (zeroing the masked
    /// lanes when `zero`).
    #[allow(clippy::too_many_arguments)]
    fn op_mem(&mut self, map: Map, pp: Pp, w: bool, op: u8, reg: u8, m: Mem, k: u8, zero: bool) {
        self.evex(map, pp, w, op, reg, 0, Rm::Mem(m), k, zero);
    }

    /// `dst = a op b` for a packed-single arithmetic opcode of map 0F (add 58, mul 59,
    /// sub 5C, div 5E, and 54, xor 57, sqrt 51 with `a` ignored).
    pub(crate) fn ps(&mut self, op: u8, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F, Pp::None, false, op, dst, a, b);
    }

    pub(crate) fn vaddps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.ps(0x58, dst, a, b)
    }
    pub(crate) fn vmulps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.ps(0x59, dst, a, b)
    }
    pub(crate) fn vsubps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.ps(0x5C, dst, a, b)
    }
    pub(crate) fn vdivps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.ps(0x5E, dst, a, b)
    }
    pub(crate) fn vandps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.ps(0x54, dst, a, b)
    }
    pub(crate) fn vorps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.ps(0x56, dst, a, b)
    }
    pub(crate) fn vxorps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.ps(0x57, dst, a, b)
    }
    pub(crate) fn vsqrtps(&mut self, dst: u8, src: u8) {
        self.op3(Map::M0F, Pp::None, false, 0x51, dst, 0, src);
    }

    /// `dst = a·dst + b` (`vfmadd213ps`).
    pub(crate) fn vfmadd213ps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F38, Pp::P66, false, 0xA8, dst, a, b);
    }

    /// `dst = a·dst + b` on 8 doubles (`vfmadd213pd`).
    pub(crate) fn vfmadd213pd(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F38, Pp::P66, true, 0xA8, dst, a, b);
    }

    /// `dst = a·b + dst` (`vfmadd231ps`).
    pub(crate) fn vfmadd231ps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F38, Pp::P66, false, 0xB8, dst, a, b);
    }

    /// `dst = a·dst − b` (`vfmsub213ps`).
    pub(crate) fn vfmsub213ps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F38, Pp::P66, false, 0xAA, dst, a, b);
    }

    /// `dst = −(a·b) + dst` (`vfnmadd231ps`).
    pub(crate) fn vfnmadd231ps(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F38, Pp::P66, false, 0xBC, dst, a, b);
    }

    /// `dst = a + b` on 32-bit integer lanes.
    pub(crate) fn vpaddd(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F, Pp::P66, false, 0xFE, dst, a, b);
    }

    /// `dst = a & b` on 32-bit integer lanes.
    pub(crate) fn vpandd(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F, Pp::P66, false, 0xDB, dst, a, b);
    }

    /// 32-bit integers to floats (`vcvtdq2ps`).
    pub(crate) fn vcvtdq2ps(&mut self, dst: u8, src: u8) {
        self.op3(Map::M0F, Pp::None, false, 0x5B, dst, 0, src);
    }

    /// `dst = a − b` on 32-bit integer lanes.
    pub(crate) fn vpsubd(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F, Pp::P66, false, 0xFA, dst, a, b);
    }

    /// `dst = src >> imm` (arithmetic) on 32-bit lanes.
    pub(crate) fn vpsrad(&mut self, dst: u8, src: u8, imm: u8) {
        // 66 0F 72 /4 ib: the destination is vvvv, the ModRM.reg field is the extension.
        self.op3(Map::M0F, Pp::P66, false, 0x72, 4, dst, src);
        self.byte(imm);
    }

    /// `dst = src << imm` on 32-bit lanes.
    pub(crate) fn vpslld(&mut self, dst: u8, src: u8, imm: u8) {
        self.op3(Map::M0F, Pp::P66, false, 0x72, 6, dst, src);
        self.byte(imm);
    }

    /// `dst = src >> imm` (logical) on 32-bit lanes.
    pub(crate) fn vpsrld(&mut self, dst: u8, src: u8, imm: u8) {
        // 66 0F 72 /2 ib: the destination is vvvv, the ModRM.reg field is the extension.
        self.op3(Map::M0F, Pp::P66, false, 0x72, 2, dst, src);
        self.byte(imm);
    }

    /// `dst = a | b` on 32-bit integer lanes.
    pub(crate) fn vpord(&mut self, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F, Pp::P66, false, 0xEB, dst, a, b);
    }

    /// 16 floats rounded to binary16, to nearest even, into ymm `dst` (a zmm register's
    /// low half): `vcvtps2ph ymm, zmm, 0`.
    pub(crate) fn vcvtps2ph(&mut self, dst: u8, src: u8) {
        // 66 0F3A 1D /r ib: the source is ModRM.reg, the destination ModRM.rm; imm8 0 =
        // round to nearest even (not MXCSR's mode).
        self.op3(Map::M0F3A, Pp::P66, false, 0x1D, src, 0, dst);
        self.byte(0);
    }

    /// The 16 binary16 values of ymm `src` widened to floats: `vcvtph2ps zmm, ymm`.
    pub(crate) fn vcvtph2ps(&mut self, dst: u8, src: u8) {
        self.op3(Map::M0F38, Pp::P66, false, 0x13, dst, 0, src);
    }

    /// `k = a <pred> b` per lane.
    pub(crate) fn vcmpps(&mut self, k: u8, a: u8, b: impl Into<Src>, pred: Cmp) {
        self.op3(Map::M0F, Pp::None, false, 0xC2, k, a, b);
        self.byte(pred as u8);
    }

    /// `dst = k ? b : a` per lane (`vblendmps`).
    pub(crate) fn vblendmps(&mut self, dst: u8, k: u8, a: u8, b: impl Into<Src>) {
        self.evex(
            Map::M0F38,
            Pp::P66,
            false,
            0x65,
            dst,
            a,
            Rm::from(b.into()),
            k,
            false,
        );
    }

    /// `dst = k ? src : 0` per lane (`vmovaps` with zero-masking).
    pub(crate) fn vmovaps_z(&mut self, dst: u8, k: u8, src: u8) {
        self.evex(
            Map::M0F,
            Pp::None,
            false,
            0x28,
            dst,
            0,
            Rm::Reg(src),
            k,
            true,
        );
    }

    /// `dst = src`.
    pub(crate) fn vmovaps(&mut self, dst: u8, src: u8) {
        self.op3(Map::M0F, Pp::None, false, 0x28, dst, 0, src);
    }

    /// Load 16 floats (lanes outside mask `k` are zeroed when `k != 0`).
    pub(crate) fn vmovups_load(&mut self, dst: u8, m: Mem, k: u8) {
        self.op_mem(Map::M0F, Pp::None, false, 0x10, dst, m, k, k != 0);
    }

    /// Store 16 floats (only the lanes of mask `k` when `k != 0`).
    pub(crate) fn vmovups_store(&mut self, m: Mem, src: u8, k: u8) {
        self.op_mem(Map::M0F, Pp::None, false, 0x11, src, m, k, false);
    }

    /// Store 16 floats with a non-temporal hint (the address must be 64-byte aligned).
    pub(crate) fn vmovntps(&mut self, m: Mem, src: u8) {
        self.op_mem(Map::M0F, Pp::None, false, 0x2B, src, m, 0, false);
    }

    /// `dst = a op b` on 8 doubles for a packed-double opcode of map 0F (the `ps`
    /// opcodes with the 66 prefix and W1: add 58, mul 59, sub 5C, div 5E, and 54,
    /// xor 57, sqrt 51 with `a` ignored).
    pub(crate) fn pd(&mut self, op: u8, dst: u8, a: u8, b: impl Into<Src>) {
        self.op3(Map::M0F, Pp::P66, true, op, dst, a, b);
    }

    /// The 8 floats of ymm `src` (a zmm register's low half) widened to 8 doubles:
    /// `vcvtps2pd zmm, ymm`.
    pub(crate) fn vcvtps2pd(&mut self, dst: u8, src: u8) {
        self.op3(Map::M0F, Pp::None, false, 0x5A, dst, 0, src);
    }

    /// 8 doubles rounded to 8 floats: `vcvtpd2ps ymm, zmm`.
    pub(crate) fn vcvtpd2ps(&mut self, dst: u8, src: u8) {
        self.op3(Map::M0F, Pp::P66, true, 0x5A, dst, 0, src);
    }

    /// The upper 256 bits of `src` into ymm `dst`: `vextractf32x8 ymm, zmm, 1`.
    pub(crate) fn vextract_hi(&mut self, dst: u8, src: u8) {
        self.op3(Map::M0F3A, Pp::P66, false, 0x1B, src, 0, dst);
        self.byte(1);
    }

    /// `dst = a` with its upper 256 bits replaced by ymm `b`: `vinsertf32x8 zmm, zmm,
    /// ymm, 1`.
    pub(crate) fn vinsert_hi(&mut self, dst: u8, a: u8, b: u8) {
        self.op3(Map::M0F3A, Pp::P66, false, 0x1A, dst, a, b);
        self.byte(1);
    }

    /// Load 8 doubles (lanes outside mask `k` zeroed when `k != 0`).
    pub(crate) fn vmovupd_load(&mut self, dst: u8, m: Mem, k: u8) {
        self.op_mem(Map::M0F, Pp::P66, true, 0x10, dst, m, k, k != 0);
    }

    /// Store 8 doubles (only the lanes of mask `k` when `k != 0`).
    pub(crate) fn vmovupd_store(&mut self, m: Mem, src: u8, k: u8) {
        self.op_mem(Map::M0F, Pp::P66, true, 0x11, src, m, k, false);
    }

    /// Broadcast one double from memory to every lane.
    pub(crate) fn vbroadcastsd(&mut self, dst: u8, m: Mem) {
        self.op_mem(Map::M0F38, Pp::P66, true, 0x19, dst, m, 0, false);
    }

    /// `k = src >> imm` (16-bit masks; `kshiftrw`, VEX-encoded).
    pub(crate) fn kshiftrw(&mut self, k: u8, src: u8, imm: u8) {
        self.bytes(&[0xC4, 0xE3, 0xF9, 0x30, 0xC0 | (k & 7) << 3 | (src & 7), imm]);
    }

    /// Broadcast one float from memory to every lane.
    pub(crate) fn vbroadcastss(&mut self, dst: u8, m: Mem) {
        self.op_mem(Map::M0F38, Pp::P66, false, 0x18, dst, m, 0, false);
    }

    /// `k = low 16 bits of gpr` (`kmovw k, r32`, VEX-encoded).
    pub(crate) fn kmovw_from(&mut self, k: u8, r: Gpr) {
        assert!(r.0 < 8, "kmovw from a low register");
        self.bytes(&[0xC5, 0xF8, 0x92, 0xC0 | (k & 7) << 3 | r.0]);
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

#[cfg(test)]
mod tests;
