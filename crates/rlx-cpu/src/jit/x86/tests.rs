//! Every encoding of the assembler checked against `objdump` (skipped where none is
//! installed).
use super::*;
use std::process::Command;

fn z(n: u8) -> Zmm {
    Zmm::new(n)
}

fn k(n: u8) -> Kreg {
    Kreg::new(n)
}

/// `objdump`'s rendering of `code` (Intel syntax), one instruction per line, or
/// `None` where no objdump is installed.
fn disassemble(code: &[u8]) -> Option<Vec<String>> {
    let dir = std::env::temp_dir().join(format!("rlx-jit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).ok()?;
    let path = dir.join(format!("code-{}.bin", code.len()));
    std::fs::write(&path, code).ok()?;
    let out = Command::new("objdump")
        .args(["-D", "-b", "binary", "-m", "i386:x86-64", "-M", "intel"])
        .arg(&path)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lines = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, '\t');
            let addr = parts.next()?;
            addr.trim().strip_suffix(':')?;
            let _bytes = parts.next()?;
            Some(
                parts
                    .next()?
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })
        .collect();
    Some(lines)
}

#[test]
fn encodings_disassemble_to_the_intended_instructions() {
    let mut a = Asm::default();
    let mut want: Vec<&str> = Vec::new();
    let mut add = |a: &mut Asm, f: &dyn Fn(&mut Asm), s: &'static str| {
        f(a);
        want.push(s);
    };
    add(
        &mut a,
        &|a| a.vaddps(z(0), z(1), z(2)),
        "vaddps zmm0,zmm1,zmm2",
    );
    add(
        &mut a,
        &|a| a.vmulps(z(31), z(17), z(9)),
        "vmulps zmm31,zmm17,zmm9",
    );
    add(
        &mut a,
        &|a| a.vsubps(z(8), z(24), z(31)),
        "vsubps zmm8,zmm24,zmm31",
    );
    add(
        &mut a,
        &|a| a.vdivps(z(16), z(15), z(7)),
        "vdivps zmm16,zmm15,zmm7",
    );
    add(
        &mut a,
        &|a| a.vandps(z(3), z(4), z(5)),
        "vandps zmm3,zmm4,zmm5",
    );
    add(
        &mut a,
        &|a| a.vorps(z(3), z(20), z(5)),
        "vorps zmm3,zmm20,zmm5",
    );
    add(
        &mut a,
        &|a| a.vxorps(z(30), z(4), z(25)),
        "vxorps zmm30,zmm4,zmm25",
    );
    add(&mut a, &|a| a.vsqrtps(z(12), z(28)), "vsqrtps zmm12,zmm28");
    add(
        &mut a,
        &|a| a.vaddps(z(17), z(3), Src::Pool(8)),
        "vaddps zmm17,zmm3,DWORD BCST [r8+0x8]",
    );
    add(
        &mut a,
        &|a| a.vfmadd213ps(z(30), z(21), Src::Pool(0x40)),
        "vfmadd213ps zmm30,zmm21,DWORD BCST [r8+0x40]",
    );
    add(
        &mut a,
        &|a| a.vcmpps(k(2), z(9), Src::Pool(4), Cmp::GtOq),
        "vcmpgt_oqps k2,zmm9,DWORD BCST [r8+0x4]",
    );
    add(
        &mut a,
        &|a| a.vpsubd(z(1), z(2), Src::Pool(12)),
        "vpsubd zmm1,zmm2,DWORD BCST [r8+0xc]",
    );
    add(
        &mut a,
        &|a| a.vpermps(z(20), z(9), Mem::BaseDisp(Gpr(8), 0x1c4)),
        "vpermps zmm20,zmm9,ZMMWORD PTR [r8+0x1c4]",
    );
    add(
        &mut a,
        &|a| a.vpermps(z(3), z(27), Mem::BaseDisp(Gpr(8), 0x40)),
        "vpermps zmm3,zmm27,ZMMWORD PTR [r8+0x40]",
    );
    add(
        &mut a,
        &|a| a.vfmadd213ps(z(1), z(18), z(27)),
        "vfmadd213ps zmm1,zmm18,zmm27",
    );
    add(
        &mut a,
        &|a| a.vfnmadd231ps(z(19), z(2), z(11)),
        "vfnmadd231ps zmm19,zmm2,zmm11",
    );
    add(
        &mut a,
        &|a| a.vfmadd231ps(z(4), z(20), z(13)),
        "vfmadd231ps zmm4,zmm20,zmm13",
    );
    add(
        &mut a,
        &|a| a.vfmsub213ps(z(22), z(5), z(30)),
        "vfmsub213ps zmm22,zmm5,zmm30",
    );
    add(
        &mut a,
        &|a| a.vpaddd(z(5), z(6), z(21)),
        "vpaddd zmm5,zmm6,zmm21",
    );
    add(
        &mut a,
        &|a| a.vpandd(z(7), z(16), Src::Pool(4)),
        "vpandd zmm7,zmm16,DWORD BCST [r8+0x4]",
    );
    add(
        &mut a,
        &|a| a.vcvtdq2ps(z(24), z(9)),
        "vcvtdq2ps zmm24,zmm9",
    );
    add(
        &mut a,
        &|a| a.vpsubd(z(22), z(6), z(1)),
        "vpsubd zmm22,zmm6,zmm1",
    );
    add(
        &mut a,
        &|a| a.vpsrad(z(9), z(26), 1),
        "vpsrad zmm9,zmm26,0x1",
    );
    add(
        &mut a,
        &|a| a.vpslld(z(17), z(3), 23),
        "vpslld zmm17,zmm3,0x17",
    );
    add(
        &mut a,
        &|a| a.vpsrld(z(4), z(29), 16),
        "vpsrld zmm4,zmm29,0x10",
    );
    add(
        &mut a,
        &|a| a.vpord(z(19), z(2), z(30)),
        "vpord zmm19,zmm2,zmm30",
    );
    add(
        &mut a,
        &|a| a.vpord(z(1), z(12), Src::Pool(0x10)),
        "vpord zmm1,zmm12,DWORD BCST [r8+0x10]",
    );
    add(
        &mut a,
        &|a| a.vcvtps2ph(z(5), z(27)),
        "vcvtps2ph ymm5,zmm27,0x0",
    );
    add(
        &mut a,
        &|a| a.vcvtps2ph(z(20), z(3)),
        "vcvtps2ph ymm20,zmm3,0x0",
    );
    add(
        &mut a,
        &|a| a.vcvtph2ps(z(26), z(5)),
        "vcvtph2ps zmm26,ymm5",
    );
    add(
        &mut a,
        &|a| a.vcvtph2ps(z(2), z(18)),
        "vcvtph2ps zmm2,ymm18",
    );
    add(
        &mut a,
        &|a| a.vcmpps(k(1), z(2), z(29), Cmp::LtOq),
        "vcmplt_oqps k1,zmm2,zmm29",
    );
    add(
        &mut a,
        &|a| a.vcmpps(k(3), z(20), z(4), Cmp::NleUq),
        "vcmpnle_uqps k3,zmm20,zmm4",
    );
    add(
        &mut a,
        &|a| a.vblendmps(z(7), k(2), z(8), z(25)),
        "vblendmps zmm7{k2},zmm8,zmm25",
    );
    add(
        &mut a,
        &|a| a.vmovaps_z(z(14), k(1), z(18)),
        "vmovaps zmm14{k1}{z},zmm18",
    );
    add(&mut a, &|a| a.vmovaps(z(18), z(14)), "vmovaps zmm18,zmm14");
    add(
        &mut a,
        &|a| a.vmovups_load(z(20), Mem::BaseIndex(RAX, R11), Mask::None),
        "vmovups zmm20,ZMMWORD PTR [rax+r11*1]",
    );
    add(
        &mut a,
        &|a| a.vmovups_load(z(2), Mem::BaseIndex(Gpr(13), R11), Mask::Zero(k(1))),
        "vmovups zmm2{k1}{z},ZMMWORD PTR [r13+r11*1+0x0]",
    );
    add(
        &mut a,
        &|a| a.vmovups_store(Mem::BaseIndex(RAX, R11), z(27), Mask::None),
        "vmovups ZMMWORD PTR [rax+r11*1],zmm27",
    );
    add(
        &mut a,
        &|a| a.vmovups_store(Mem::BaseIndex(RDX, RCX), z(3), Mask::Merge(k(1))),
        "vmovups ZMMWORD PTR [rdx+rcx*1]{k1},zmm3",
    );
    add(
        &mut a,
        &|a| a.vmovntps(Mem::BaseIndex(RAX, R11), z(18)),
        "vmovntps ZMMWORD PTR [rax+r11*1],zmm18",
    );
    add(
        &mut a,
        &|a| a.vbroadcastss(z(25), Mem::BaseDisp(RAX, 0)),
        "vbroadcastss zmm25,DWORD PTR [rax+0x0]",
    );
    add(&mut a, &|a| a.kmovw_from(k(1), RAX), "kmovw k1,eax");
    add(
        &mut a,
        &|a| a.op3(VADDPD, z(3), z(17), z(30)),
        "vaddpd zmm3,zmm17,zmm30",
    );
    add(
        &mut a,
        &|a| a.op3(VDIVPD, z(20), z(2), Src::Pool(16)),
        "vdivpd zmm20,zmm2,QWORD BCST [r8+0x10]",
    );
    add(
        &mut a,
        &|a| a.op2(VSQRTPD, z(9), z(25)),
        "vsqrtpd zmm9,zmm25",
    );
    add(
        &mut a,
        &|a| a.vcvtps2pd(z(5), z(21)),
        "vcvtps2pd zmm5,ymm21",
    );
    add(
        &mut a,
        &|a| a.vcvtpd2ps(z(22), z(6)),
        "vcvtpd2ps ymm22,zmm6",
    );
    add(
        &mut a,
        &|a| a.vextract_hi(z(7), z(19)),
        "vextractf32x8 ymm7,zmm19,0x1",
    );
    add(
        &mut a,
        &|a| a.vinsert_hi(z(8), z(26), z(4)),
        "vinsertf32x8 zmm8,zmm26,ymm4,0x1",
    );
    add(
        &mut a,
        &|a| a.vmovupd_load(z(10), Mem::BaseIndex2(RAX, R11, 64), Mask::Zero(k(4))),
        "vmovupd zmm10{k4}{z},ZMMWORD PTR [rax+r11*2+0x40]",
    );
    add(
        &mut a,
        &|a| a.vmovupd_store(Mem::BaseIndex2(RAX, R11, 0), z(18), Mask::None),
        "vmovupd ZMMWORD PTR [rax+r11*2+0x0],zmm18",
    );
    add(
        &mut a,
        &|a| a.vbroadcastsd(z(11), Mem::BaseDisp(Gpr(8), 8)),
        "vbroadcastsd zmm11,QWORD PTR [r8+0x8]",
    );
    add(&mut a, &|a| a.kshiftrw(k(4), k(1), 8), "kshiftrw k4,k1,0x8");
    add(&mut a, &|a| a.kortestw(k(7), k(7)), "kortestw k7,k7");
    add(
        &mut a,
        &|a| a.vminps(z(17), z(3), Src::Pool(0x24)),
        "vminps zmm17,zmm3,DWORD BCST [r8+0x24]",
    );
    add(
        &mut a,
        &|a| a.prefetcht0(RAX, R11, 2048),
        "prefetcht0 BYTE PTR [rax+r11*1+0x800]",
    );
    add(
        &mut a,
        &|a| a.mov_load(RAX, RDI, 0x28),
        "mov rax,QWORD PTR [rdi+0x28]",
    );
    add(
        &mut a,
        &|a| a.mov_load(R11, RSI, 8),
        "mov r11,QWORD PTR [rsi+0x8]",
    );
    add(&mut a, &|a| a.mov_imm32(RAX, 7), "mov eax,0x7");
    add(&mut a, &|a| a.add_imm(R11, 64), "add r11,0x40");
    add(&mut a, &|a| a.zero(R11), "xor r11,r11");
    add(&mut a, &|a| a.cmp(R11, RDX), "cmp r11,rdx");
    add(&mut a, &|a| a.vzeroupper(), "vzeroupper");
    add(&mut a, &|a| a.ret(), "ret");
    let Some(got) = disassemble(&a.code) else {
        eprintln!("objdump not found: encodings not checked");
        return;
    };
    assert_eq!(got, want);
}

#[test]
fn jumps_and_mask_setup_disassemble_as_written() {
    let mut a = Asm::default();
    a.low_mask_cl(RAX);
    let top = a.code.len();
    let j = a.jump(Some(JAE));
    let k = a.jump(None);
    a.patch(k, top);
    a.patch(j, a.code.len());
    a.ret();
    let Some(got) = disassemble(&a.code) else {
        return;
    };
    assert_eq!(
        got,
        [
            "mov eax,0x1",
            "shl eax,cl",
            "sub eax,0x1",
            "jae 0x15",
            "jmp 0xa",
            "ret"
        ]
    );
}

#[test]
fn typed_operands_encode_the_bytes_gnu_as_assembles() {
    // Checked without objdump: the bytes GNU as 2.x emits for the same instructions
    // (register and index forms, where its displacement choice matches ours).
    let mut a = Asm::default();
    a.vmovups_load(z(2), Mem::BaseIndex(Gpr(13), R11), Mask::Zero(K1));
    a.vblendmps(z(7), K2, z(8), z(25));
    a.vpsrad(z(9), z(26), 1);
    a.op2(VSQRTPD, z(9), z(25));
    a.vcmpps(K3, z(20), z(4), Cmp::NleUq);
    assert_eq!(
        a.code,
        [
            0x62, 0x91, 0x7c, 0xc9, 0x10, 0x54, 0x1d, 0x00, // vmovups zmm2{k1}{z},[r13+r11]
            0x62, 0x92, 0x3d, 0x4a, 0x65, 0xf9, // vblendmps zmm7{k2},zmm8,zmm25
            0x62, 0x91, 0x35, 0x48, 0x72, 0xe2, 0x01, // vpsrad zmm9,zmm26,1
            0x62, 0x11, 0xfd, 0x48, 0x51, 0xc9, // vsqrtpd zmm9,zmm25
            0x62, 0xf1, 0x5c, 0x40, 0xc2, 0xdc, 0x16, // vcmpnle_uqps k3,zmm20,zmm4
        ]
    );
}

#[test]
fn mask_helpers_give_no_mask_outside_the_loop_tail() {
    assert_eq!(Mask::zeroing(None), Mask::None);
    assert_eq!(Mask::merging(None), Mask::None);
    assert_eq!(Mask::zeroing(Some(K4)), Mask::Zero(K4));
    assert_eq!(Mask::merging(Some(K1)), Mask::Merge(K1));
    assert_eq!(Zmm::new(31).index(), 31);
}

#[test]
#[should_panic(expected = "zmm registers are numbered 0..32")]
fn zmm32_does_not_exist() {
    let _ = Zmm::new(32);
}

#[test]
#[should_panic(expected = "write masks are k1..k7")]
fn k0_is_not_a_write_mask() {
    let _ = Kreg::new(0);
}

#[test]
#[should_panic(expected = "a store cannot zero-mask")]
fn stores_refuse_zero_masking() {
    Asm::default().vmovups_store(Mem::BaseIndex(RAX, R11), z(3), Mask::Zero(K1));
}
