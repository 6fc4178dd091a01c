//! Every encoding of the assembler checked against `objdump` (skipped where none is
//! installed).
use super::*;
use std::process::Command;

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
    add(&mut a, &|a| a.vaddps(0, 1, 2), "vaddps zmm0,zmm1,zmm2");
    add(&mut a, &|a| a.vmulps(31, 17, 9), "vmulps zmm31,zmm17,zmm9");
    add(&mut a, &|a| a.vsubps(8, 24, 31), "vsubps zmm8,zmm24,zmm31");
    add(&mut a, &|a| a.vdivps(16, 15, 7), "vdivps zmm16,zmm15,zmm7");
    add(&mut a, &|a| a.vandps(3, 4, 5), "vandps zmm3,zmm4,zmm5");
    add(&mut a, &|a| a.vorps(3, 20, 5), "vorps zmm3,zmm20,zmm5");
    add(&mut a, &|a| a.vxorps(30, 4, 25), "vxorps zmm30,zmm4,zmm25");
    add(&mut a, &|a| a.vsqrtps(12, 28), "vsqrtps zmm12,zmm28");
    add(
        &mut a,
        &|a| a.vaddps(17, 3, Src::Pool(8)),
        "vaddps zmm17,zmm3,DWORD BCST [r8+0x8]",
    );
    add(
        &mut a,
        &|a| a.vfmadd213ps(30, 21, Src::Pool(0x40)),
        "vfmadd213ps zmm30,zmm21,DWORD BCST [r8+0x40]",
    );
    add(
        &mut a,
        &|a| a.vcmpps(2, 9, Src::Pool(4), Cmp::GtOq),
        "vcmpgt_oqps k2,zmm9,DWORD BCST [r8+0x4]",
    );
    add(
        &mut a,
        &|a| a.vpsubd(1, 2, Src::Pool(12)),
        "vpsubd zmm1,zmm2,DWORD BCST [r8+0xc]",
    );
    add(
        &mut a,
        &|a| a.vfmadd213ps(1, 18, 27),
        "vfmadd213ps zmm1,zmm18,zmm27",
    );
    add(
        &mut a,
        &|a| a.vfnmadd231ps(19, 2, 11),
        "vfnmadd231ps zmm19,zmm2,zmm11",
    );
    add(
        &mut a,
        &|a| a.vfmadd231ps(4, 20, 13),
        "vfmadd231ps zmm4,zmm20,zmm13",
    );
    add(
        &mut a,
        &|a| a.vfmsub213ps(22, 5, 30),
        "vfmsub213ps zmm22,zmm5,zmm30",
    );
    add(&mut a, &|a| a.vpaddd(5, 6, 21), "vpaddd zmm5,zmm6,zmm21");
    add(
        &mut a,
        &|a| a.vpandd(7, 16, Src::Pool(4)),
        "vpandd zmm7,zmm16,DWORD BCST [r8+0x4]",
    );
    add(&mut a, &|a| a.vcvtdq2ps(24, 9), "vcvtdq2ps zmm24,zmm9");
    add(&mut a, &|a| a.vpsubd(22, 6, 1), "vpsubd zmm22,zmm6,zmm1");
    add(&mut a, &|a| a.vpsrad(9, 26, 1), "vpsrad zmm9,zmm26,0x1");
    add(&mut a, &|a| a.vpslld(17, 3, 23), "vpslld zmm17,zmm3,0x17");
    add(&mut a, &|a| a.vpsrld(4, 29, 16), "vpsrld zmm4,zmm29,0x10");
    add(&mut a, &|a| a.vpord(19, 2, 30), "vpord zmm19,zmm2,zmm30");
    add(
        &mut a,
        &|a| a.vpord(1, 12, Src::Pool(0x10)),
        "vpord zmm1,zmm12,DWORD BCST [r8+0x10]",
    );
    add(&mut a, &|a| a.vcvtps2ph(5, 27), "vcvtps2ph ymm5,zmm27,0x0");
    add(&mut a, &|a| a.vcvtps2ph(20, 3), "vcvtps2ph ymm20,zmm3,0x0");
    add(&mut a, &|a| a.vcvtph2ps(26, 5), "vcvtph2ps zmm26,ymm5");
    add(&mut a, &|a| a.vcvtph2ps(2, 18), "vcvtph2ps zmm2,ymm18");
    add(
        &mut a,
        &|a| a.vcmpps(1, 2, 29, Cmp::LtOq),
        "vcmplt_oqps k1,zmm2,zmm29",
    );
    add(
        &mut a,
        &|a| a.vcmpps(3, 20, 4, Cmp::NleUq),
        "vcmpnle_uqps k3,zmm20,zmm4",
    );
    add(
        &mut a,
        &|a| a.vblendmps(7, 2, 8, 25),
        "vblendmps zmm7{k2},zmm8,zmm25",
    );
    add(
        &mut a,
        &|a| a.vmovaps_z(14, 1, 18),
        "vmovaps zmm14{k1}{z},zmm18",
    );
    add(&mut a, &|a| a.vmovaps(18, 14), "vmovaps zmm18,zmm14");
    add(
        &mut a,
        &|a| a.vmovups_load(20, Mem::BaseIndex(RAX, R11), 0),
        "vmovups zmm20,ZMMWORD PTR [rax+r11*1]",
    );
    add(
        &mut a,
        &|a| a.vmovups_load(2, Mem::BaseIndex(Gpr(13), R11), 1),
        "vmovups zmm2{k1}{z},ZMMWORD PTR [r13+r11*1+0x0]",
    );
    add(
        &mut a,
        &|a| a.vmovups_store(Mem::BaseIndex(RAX, R11), 27, 0),
        "vmovups ZMMWORD PTR [rax+r11*1],zmm27",
    );
    add(
        &mut a,
        &|a| a.vmovups_store(Mem::BaseIndex(RDX, RCX), 3, 1),
        "vmovups ZMMWORD PTR [rdx+rcx*1]{k1},zmm3",
    );
    add(
        &mut a,
        &|a| a.vmovntps(Mem::BaseIndex(RAX, R11), 18),
        "vmovntps ZMMWORD PTR [rax+r11*1],zmm18",
    );
    add(
        &mut a,
        &|a| a.vbroadcastss(25, Mem::BaseDisp(RAX, 0)),
        "vbroadcastss zmm25,DWORD PTR [rax+0x0]",
    );
    add(&mut a, &|a| a.kmovw_from(1, RAX), "kmovw k1,eax");
    add(
        &mut a,
        &|a| a.pd(0x58, 3, 17, 30),
        "vaddpd zmm3,zmm17,zmm30",
    );
    add(
        &mut a,
        &|a| a.pd(0x5E, 20, 2, Src::Pool(16)),
        "vdivpd zmm20,zmm2,QWORD BCST [r8+0x10]",
    );
    add(&mut a, &|a| a.pd(0x51, 9, 0, 25), "vsqrtpd zmm9,zmm25");
    add(
        &mut a,
        &|a| a.vfmadd213pd(7, 19, Src::Pool(24)),
        "vfmadd213pd zmm7,zmm19,QWORD BCST [r8+0x18]",
    );
    add(&mut a, &|a| a.vcvtps2pd(5, 21), "vcvtps2pd zmm5,ymm21");
    add(&mut a, &|a| a.vcvtpd2ps(22, 6), "vcvtpd2ps ymm22,zmm6");
    add(
        &mut a,
        &|a| a.vextract_hi(7, 19),
        "vextractf32x8 ymm7,zmm19,0x1",
    );
    add(
        &mut a,
        &|a| a.vinsert_hi(8, 26, 4),
        "vinsertf32x8 zmm8,zmm26,ymm4,0x1",
    );
    add(
        &mut a,
        &|a| a.vmovupd_load(10, Mem::BaseIndex2(RAX, R11, 64), 4),
        "vmovupd zmm10{k4}{z},ZMMWORD PTR [rax+r11*2+0x40]",
    );
    add(
        &mut a,
        &|a| a.vmovupd_store(Mem::BaseIndex2(RAX, R11, 0), 18, 0),
        "vmovupd ZMMWORD PTR [rax+r11*2+0x0],zmm18",
    );
    add(
        &mut a,
        &|a| a.vbroadcastsd(11, Mem::BaseDisp(Gpr(8), 8)),
        "vbroadcastsd zmm11,QWORD PTR [r8+0x8]",
    );
    add(&mut a, &|a| a.kshiftrw(4, 1, 8), "kshiftrw k4,k1,0x8");
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
