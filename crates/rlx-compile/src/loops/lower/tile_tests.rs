//! [`Stmt::TileMma`]: the interpreter against an f64 reference (within the bound the
//! statement documents, and bit for bit its documented summation order), its rules, and
//! its CUDA / HIP / WGSL renderings.

use crate::loops::eval::{self, HostBuf};
use crate::loops::{
    Access, Bin, Dialect, Ex, KernelBuf, Lit, LoopKernel, SHUFFLE_WIDTH, SharedArray, Stmt, TILE,
    TileMma, TileOperand, Ty, Var, render_c,
};
use rlx_ir::{DType, DimBinding};

fn idx(v: i64) -> Ex {
    Ex::Lit(Lit::Index(v))
}

fn bin(op: Bin, a: Ex, b: Ex) -> Ex {
    Ex::Bin(op, Box::new(a), Box::new(b))
}

/// Random values of `dt` in about ±4 (every 9th a negative zero, some exact zeros).
fn values(dt: DType, n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            if i % 9 == 4 {
                return -0.0;
            }
            if i % 13 == 7 {
                return 0.0;
            }
            let x = ((s >> 11) % 80_001) as f32 / 10_000.0 - 4.0;
            match dt {
                DType::F16 => half::f16::from_f32(x).to_f64(),
                DType::BF16 => half::bf16::from_f32(x).to_f64(),
                _ => x as f64,
            }
        })
        .collect()
}

/// The shapes of one test kernel: `warps` warps per group, `groups` groups, `k_steps`.
#[derive(Clone, Copy)]
struct Shape {
    elem: DType,
    warps: u32,
    groups: i64,
    k_steps: u32,
    b_transposed: bool,
}

impl Shape {
    fn kk(self) -> u32 {
        TILE * self.k_steps
    }
    /// Elements of one warp's A, B (a 16-row window with padding columns: strides are
    /// `K + 8`) and C (stride 20) windows.
    fn lda(self) -> u32 {
        self.kk() + 8
    }
    fn ldb(self) -> u32 {
        if self.b_transposed {
            self.kk() + 8
        } else {
            TILE + 8
        }
    }
    fn a_len(self) -> u32 {
        TILE * self.lda()
    }
    fn b_len(self) -> u32 {
        if self.b_transposed {
            TILE * self.ldb()
        } else {
            self.kk() * self.ldb()
        }
    }
    const LDC: u32 = 20;
    fn c_len(self) -> u32 {
        TILE * Self::LDC
    }
}

/// A kernel whose groups stage per-warp A, B, C windows from buffers 0, 1, 2 (group-major,
/// warp-major), run one tile product, and store every C window element to buffer 3.
fn kernel(sh: Shape) -> LoopKernel {
    let size = sh.warps * SHUFFLE_WIDTH;
    let lens = [
        sh.a_len() * sh.warps,
        sh.b_len() * sh.warps,
        sh.c_len() * sh.warps,
    ];
    let mut body = Vec::new();
    let r = Var(0);
    for (arr, &len) in lens.iter().enumerate() {
        // element e = r·size + local of the group's array, from buffer `arr`.
        let e = bin(
            Bin::Add,
            bin(Bin::Mul, Ex::Var(r), idx(size as i64)),
            Ex::Local,
        );
        let src = bin(
            Bin::Add,
            bin(Bin::Mul, Ex::Group, idx(len as i64)),
            e.clone(),
        );
        body.push(Stmt::Loop {
            var: r,
            start: idx(0),
            end: idx(len.div_ceil(size) as i64),
            body: vec![Stmt::If {
                cond: bin(Bin::Lt, e.clone(), idx(len as i64)),
                body: vec![Stmt::SharedStore {
                    arr,
                    index: e,
                    value: Ex::Load {
                        buf: arr,
                        index: Box::new(src),
                    },
                }],
            }],
        });
    }
    let warp = bin(Bin::Div, Ex::Local, idx(SHUFFLE_WIDTH as i64));
    let at = |len: u32| bin(Bin::Mul, warp.clone(), idx(len as i64));
    body.push(Stmt::TileMma(Box::new(TileMma {
        elem: sh.elem,
        a: TileOperand {
            arr: 0,
            offset: at(sh.a_len()),
            stride: sh.lda(),
        },
        b: TileOperand {
            arr: 1,
            offset: at(sh.b_len()),
            stride: sh.ldb(),
        },
        b_transposed: sh.b_transposed,
        c: TileOperand {
            arr: 2,
            offset: at(sh.c_len()),
            stride: Shape::LDC,
        },
        k_steps: sh.k_steps,
    })));
    let e = bin(
        Bin::Add,
        bin(Bin::Mul, Ex::Var(r), idx(size as i64)),
        Ex::Local,
    );
    body.push(Stmt::Loop {
        var: r,
        start: idx(0),
        end: idx(lens[2].div_ceil(size) as i64),
        body: vec![Stmt::If {
            cond: bin(Bin::Lt, e.clone(), idx(lens[2] as i64)),
            body: vec![Stmt::Store {
                buf: 3,
                index: bin(
                    Bin::Add,
                    bin(Bin::Mul, Ex::Group, idx(lens[2] as i64)),
                    e.clone(),
                ),
                value: Ex::Shared {
                    arr: 2,
                    index: Box::new(e),
                },
            }],
        }],
    });
    let buf = |buf: usize, dtype: DType, access: Access| KernelBuf { buf, dtype, access };
    LoopKernel {
        name: "tile".into(),
        bufs: vec![
            buf(0, sh.elem, Access::Read),
            buf(1, sh.elem, Access::Read),
            buf(2, DType::F32, Access::Read),
            buf(3, DType::F32, Access::Write),
        ],
        dims: vec![],
        items: idx(sh.groups),
        group: Some(size),
        shared: lens
            .iter()
            .map(|&len| SharedArray { ty: Ty::F32, len })
            .collect(),
        vars: vec![Ty::Index],
        body,
    }
}

/// Buffers for `sh`: A, B in `elem`, C in f32, and the output.
fn buffers(sh: Shape, seed: u64) -> Vec<HostBuf> {
    let n = |len: u32| (len * sh.warps) as usize * sh.groups as usize;
    let c: Vec<f64> = values(DType::F32, n(sh.c_len()), seed + 2);
    vec![
        HostBuf::Float(values(sh.elem, n(sh.a_len()), seed)),
        HostBuf::Float(values(sh.elem, n(sh.b_len()), seed + 1)),
        HostBuf::Float(c.iter().map(|&x| x as f32 as f64).collect()),
        HostBuf::zeros(DType::F32, n(sh.c_len())),
    ]
}

fn floats(b: &HostBuf) -> &[f64] {
    match b {
        HostBuf::Float(v) => v,
        HostBuf::Int(_) => panic!("float buffer expected"),
    }
}

/// Check the interpreter's outputs of `sh` against the f64 sum (within
/// `(K + 1)·2⁻²³·(|C| + Σ|a·b|)`) and against the documented f32 order bit for bit; the
/// padding of the C windows must pass through unchanged.
fn check(sh: Shape, seed: u64) {
    let k = kernel(sh);
    let mut bufs = buffers(sh, seed);
    eval::run(&k, &mut bufs, &DimBinding::new()).unwrap();
    let (a, b, c, out) = (
        floats(&bufs[0]),
        floats(&bufs[1]),
        floats(&bufs[2]),
        floats(&bufs[3]),
    );
    let kk = sh.kk() as usize;
    let mut worst = 0.0f64;
    for w in 0..(sh.warps as usize * sh.groups as usize) {
        let (ao, bo, co) = (
            w * sh.a_len() as usize,
            w * sh.b_len() as usize,
            w * sh.c_len() as usize,
        );
        for i in 0..16 {
            for j in 0..Shape::LDC as usize {
                let ci = co + i * Shape::LDC as usize + j;
                if j >= 16 {
                    assert_eq!(out[ci].to_bits(), c[ci].to_bits(), "padding of C changed");
                    continue;
                }
                let (mut exact, mut mag, mut ordered) = (c[ci], c[ci].abs(), c[ci] as f32);
                for q in 0..kk {
                    let av = a[ao + i * sh.lda() as usize + q];
                    let bv = if sh.b_transposed {
                        b[bo + j * sh.ldb() as usize + q]
                    } else {
                        b[bo + q * sh.ldb() as usize + j]
                    };
                    exact += av * bv;
                    mag += (av * bv).abs();
                    ordered = (av as f32).mul_add(bv as f32, ordered);
                }
                let bound = (kk as f64 + 1.0) * 2f64.powi(-23) * mag;
                let err = (out[ci] - exact).abs();
                assert!(
                    err <= bound,
                    "{:?} warp {w} C[{i}][{j}] = {} vs exact {exact} (bound {bound})",
                    sh.elem,
                    out[ci]
                );
                assert_eq!(
                    out[ci].to_bits(),
                    (ordered as f64).to_bits(),
                    "{:?} warp {w} C[{i}][{j}]: not the documented order",
                    sh.elem
                );
                worst = worst.max(err / bound.max(f64::MIN_POSITIVE));
            }
        }
    }
    assert!(worst <= 1.0);
}

#[test]
fn tile_products_of_f16_and_bf16_match_the_f64_sum_within_the_stated_bound() {
    for elem in [DType::F16, DType::BF16] {
        for (warps, groups, k_steps, b_transposed) in [
            (1, 1, 1, false),
            (2, 3, 1, true),
            (3, 2, 3, false),
            (4, 1, 2, true),
        ] {
            let sh = Shape {
                elem,
                warps,
                groups,
                k_steps,
                b_transposed,
            };
            check(sh, 7 + warps as u64 * 31 + k_steps as u64);
        }
    }
}

fn base() -> Shape {
    Shape {
        elem: DType::BF16,
        warps: 2,
        groups: 1,
        k_steps: 1,
        b_transposed: false,
    }
}

fn tile_mut(k: &mut LoopKernel) -> &mut TileMma {
    k.body
        .iter_mut()
        .find_map(|s| match s {
            Stmt::TileMma(t) => Some(&mut **t),
            _ => None,
        })
        .expect("a tile product")
}

fn run_err(k: &LoopKernel, sh: Shape) -> String {
    let mut bufs = buffers(sh, 3);
    eval::run(k, &mut bufs, &DimBinding::new()).unwrap_err()
}

#[test]
fn the_interpreter_refuses_misaligned_overlapping_or_divergent_tiles_and_unrounded_operands() {
    let sh = base();
    // A C offset that is not a multiple of 8 (the wmma alignment).
    let mut k = kernel(sh);
    tile_mut(&mut k).c.offset = idx(4);
    assert!(
        run_err(&k, sh).contains("multiples of 8"),
        "{}",
        run_err(&k, sh)
    );
    // Both warps on one C tile.
    let mut k = kernel(sh);
    tile_mut(&mut k).c.offset = idx(0);
    assert!(run_err(&k, sh).contains("two warps' C tiles"));
    // An offset that differs inside a warp.
    let mut k = kernel(sh);
    tile_mut(&mut k).a.offset = bin(Bin::Mul, Ex::Local, idx(16));
    assert!(run_err(&k, sh).contains("one per warp"));
    // A window past the end of its array.
    let mut k = kernel(sh);
    tile_mut(&mut k).k_steps = 4;
    assert!(run_err(&k, sh).contains("runs past"));
    // A group that is not whole warps.
    let mut k = kernel(sh);
    k.group = Some(48);
    assert!(run_err(&k, sh).contains("whole warps"));
    // A value that is no bf16 stored into an operand array.
    let mut k = kernel(sh);
    k.body.insert(
        0,
        Stmt::SharedStore {
            arr: 1,
            index: idx(0),
            value: Ex::Lit(Lit::F32(1.0 + 1.0 / 1024.0)),
        },
    );
    assert!(run_err(&k, sh).contains("round it first"));
    // Under a condition that differs across the group.
    let mut k = kernel(sh);
    let t = k.body.remove(3);
    k.body.insert(
        3,
        Stmt::If {
            cond: bin(Bin::Lt, Ex::Local, idx(32)),
            body: vec![t],
        },
    );
    assert!(run_err(&k, sh).contains("uniform control flow"));
}

#[test]
fn cuda_renders_tile_products_as_wmma_over_16_bit_shared_arrays_and_hip_as_the_scalar_order() {
    let mut sh = base();
    sh.b_transposed = true;
    let k = kernel(sh);
    let cuda = render_c(&k, Dialect::Cuda);
    for want in [
        "__shared__ __align__(32) unsigned short vsh0[",
        "__shared__ __align__(32) unsigned short vsh1[",
        "__shared__ __align__(32) float vsh2[",
        "rlx_tile_mma_bf16_c((unsigned int)(local & 31), vsh0 + (",
        "vsh0[((v0 * 64) + local)] = (unsigned short)(rlx_bits_f32(",
        "wmma.mma.sync.aligned.row.\" bl \".m16n16k16.f32.bf16.bf16.f32",
    ] {
        assert!(cuda.contains(want), "missing {want:?} in\n{cuda}");
    }
    let mut f16 = base();
    f16.elem = DType::F16;
    let cuda = render_c(&kernel(f16), Dialect::Cuda);
    assert!(cuda.contains("rlx_tile_mma_f16_r("), "{cuda}");
    assert!(cuda.contains("= rlx_f32_to_f16("), "{cuda}");
    let hip = render_c(&k, Dialect::Hip);
    assert!(!hip.contains("rlx_tile_mma_bf16_c((unsigned"), "{hip}");
    assert!(hip.contains("__shared__ float vsh0["), "{hip}");
    assert!(
        hip.contains("tm_c = fmaf(vsh0[(") && hip.contains("tm_j * 24 + tm_k"),
        "{hip}"
    );
    let e = crate::loops::render_wgsl(&k).unwrap_err();
    assert!(
        matches!(e, crate::loops::WgslError::TileProduct { ref kernel } if kernel == "tile"),
        "{e:?}"
    );
}
