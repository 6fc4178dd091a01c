//! The fused multiply-add of the loop IR: one rounding in the interpreter, the fused
//! instruction in every renderer, and unfused float arithmetic everywhere else.

use super::eval::{self, HostBuf};
use super::*;
use crate::program::BufId;

/// `out[0] = fma(a[0], b[0], c[0])` and `out[1] = a[0]·b[0] + c[0]` over f32 (or f64)
/// buffers.
fn kernel(dt: DType) -> LoopKernel {
    let buf = |i: BufId, access| KernelBuf {
        buf: i,
        dtype: dt,
        access,
    };
    let ld = |b: usize| Ex::Load {
        buf: b,
        index: Box::new(Ex::Lit(Lit::Index(0))),
    };
    let fused = Ex::MulAdd(Box::new(ld(0)), Box::new(ld(1)), Box::new(ld(2)));
    let prod = Ex::Bin(Bin::Mul, Box::new(ld(0)), Box::new(ld(1)));
    let plain = Ex::Bin(Bin::Add, Box::new(prod), Box::new(ld(2)));
    LoopKernel {
        name: "fma".into(),
        bufs: vec![
            buf(0, Access::Read),
            buf(1, Access::Read),
            buf(2, Access::Read),
            buf(3, Access::Write),
        ],
        dims: vec![],
        items: Ex::Lit(Lit::Index(1)),
        group: None,
        shared: vec![],
        vars: vec![],
        body: vec![
            Stmt::Store {
                buf: 3,
                index: Ex::Lit(Lit::Index(0)),
                value: fused,
            },
            Stmt::Store {
                buf: 3,
                index: Ex::Lit(Lit::Index(1)),
                value: plain,
            },
        ],
    }
}

#[test]
fn mul_add_rounds_once_where_a_product_then_a_sum_rounds_twice() {
    // (1 + 2⁻¹³)² = 1 + 2⁻¹² + 2⁻²⁶: the rounded f32 product drops the 2⁻²⁶, the fused
    // sum with −(1 + 2⁻¹²) keeps it.
    let a = 1.0 + 2f64.powi(-13);
    let c = -(1.0 + 2f64.powi(-12));
    let k = kernel(DType::F32);
    let mut bufs = vec![
        HostBuf::Float(vec![a]),
        HostBuf::Float(vec![a]),
        HostBuf::Float(vec![c]),
        HostBuf::zeros(DType::F32, 2),
    ];
    let mut separate = bufs.clone();
    eval::run(&k, &mut bufs, &rlx_ir::DimBinding::new()).unwrap();
    assert_eq!(bufs[3], HostBuf::Float(vec![2f64.powi(-26), 0.0]));
    // A device that evaluates WGSL's `fma` unfused has its own reference.
    let mode = eval::MulAddMode::Separate;
    eval::run_with(&k, &mut separate, &rlx_ir::DimBinding::new(), mode).unwrap();
    assert_eq!(separate[3], HostBuf::Float(vec![0.0, 0.0]));
    // In f64 the same operands are exact either way; a wider pair shows the rounding.
    let a = 1.0 + 2f64.powi(-30);
    let c = -(1.0 + 2f64.powi(-29));
    let k = kernel(DType::F64);
    let mut bufs = vec![
        HostBuf::Float(vec![a]),
        HostBuf::Float(vec![a]),
        HostBuf::Float(vec![c]),
        HostBuf::zeros(DType::F64, 2),
    ];
    eval::run(&k, &mut bufs, &rlx_ir::DimBinding::new()).unwrap();
    assert_eq!(bufs[3], HostBuf::Float(vec![2f64.powi(-60), 0.0]));
}

#[test]
fn mul_add_of_integers_is_an_interpreter_error_naming_the_operands() {
    let mut k = kernel(DType::F32);
    k.bufs[2].dtype = DType::I32;
    let mut bufs = vec![
        HostBuf::Float(vec![1.0]),
        HostBuf::Float(vec![1.0]),
        HostBuf::Int(vec![1]),
        HostBuf::zeros(DType::F32, 2),
    ];
    let e = eval::run(&k, &mut bufs, &rlx_ir::DimBinding::new()).unwrap_err();
    assert!(e.contains("mul_add(F32(1.0), F32(1.0), I64(1))"), "{e}");
}

#[test]
fn renderers_fuse_only_the_ir_mul_add() {
    let cuda = render_c(&kernel(DType::F32), Dialect::Cuda);
    assert!(cuda.contains("fmaf("), "{cuda}");
    // NVRTC fuses `a * b + c` under --fmad=true: the plain product and sum are spelled
    // with intrinsics it never contracts.
    assert!(cuda.contains("__fadd_rn(__fmul_rn("), "{cuda}");
    let cuda64 = render_c(&kernel(DType::F64), Dialect::Cuda);
    assert!(
        cuda64.contains("fma(") && cuda64.contains("__dadd_rn(__dmul_rn("),
        "{cuda64}"
    );
    let hip = render_c(&kernel(DType::F32), Dialect::Hip);
    assert!(hip.contains("#pragma clang fp contract(off)"), "{hip}");
    assert!(
        hip.contains("fmaf(") && !hip.contains("__fadd_rn(__fmul_rn("),
        "{hip}"
    );
    assert!(
        hip.contains("((((const float*)b0)[0] * ((const float*)b1)[0]) + "),
        "{hip}"
    );
    let wgsl = render_wgsl(&kernel(DType::F32)).unwrap();
    assert!(wgsl.contains("fma("), "{wgsl}");
    let module = naga::front::wgsl::parse_str(&wgsl).unwrap();
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{e:?}\n{wgsl}"));
    assert!(matches!(
        render_wgsl(&kernel(DType::F64)),
        Err(WgslError::F64 { .. })
    ));
}

#[test]
fn f32_products_are_fused_and_f64_ones_keep_the_oracles_rounding() {
    use crate::{CompileOptions, compile};
    use rlx_ir::{Graph, Op, Shape};
    fn count(body: &[Stmt]) -> usize {
        fn ex(e: &Ex) -> usize {
            match e {
                Ex::MulAdd(a, b, c) => 1 + ex(a) + ex(b) + ex(c),
                Ex::Un(_, a) | Ex::Convert(_, a) => ex(a),
                Ex::Bin(_, a, b) => ex(a) + ex(b),
                Ex::Select(c, a, b) => ex(c) + ex(a) + ex(b),
                Ex::Load { index, .. } | Ex::Shared { index, .. } => ex(index),
                _ => 0,
            }
        }
        body.iter()
            .map(|s| match s {
                Stmt::Let { value, .. } | Stmt::Assign { value, .. } => ex(value),
                Stmt::Store { value, index, .. } | Stmt::SharedStore { value, index, .. } => {
                    ex(value) + ex(index)
                }
                Stmt::Loop { body, .. } | Stmt::If { body, .. } => count(body),
                _ => 0,
            })
            .sum()
    }
    for (dt, want) in [(DType::F32, 16), (DType::BF16, 16), (DType::F64, 0)] {
        let mut g = Graph::new("mm");
        let a = g.input("a", Shape::new(&[70, 9], dt));
        let b = g.input("b", Shape::new(&[9, 66], dt));
        let y = g.add_op(Op::MatMul, vec![a, b]).unwrap();
        g.set_outputs(vec![y]);
        let p = compile(&g, &CompileOptions::default()).unwrap();
        let lk = lower_kernel(&p, 0).unwrap();
        // A 4 × 4 register block: one fused step per output.
        assert_eq!(count(&lk.body), want, "{dt:?}");
    }
}
