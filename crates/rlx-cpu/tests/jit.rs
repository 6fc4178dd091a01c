//! The elementwise JIT (`rlx_cpu::set_jit`) against the tile interpreter: every
//! supported op, on values that exercise each branch of the lane kernels (NaN, ±0, ±∞,
//! subnormals, the clamps of exp and sigmoid), over lengths with partial vectors, with
//! scalar and broadcast operands, multiple outputs and matmul epilogues — the same bits.

use proptest::prelude::*;
use rlx_cpu::CpuBackend;
use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device};
use rlx_testkit::{Rng, build_random_graph, op, scalar};
use std::sync::Mutex;

/// Tests here switch the JIT for the whole process: one at a time.
static SWITCH: Mutex<()> = Mutex::new(());

/// Values covering the special cases, cycled to `n`.
fn values(n: usize, salt: u32) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-40,
        -1e-40,
        88.7,
        89.5,
        -87.3,
        -103.9,
        -119.9,
        -125.0,
        30.0,
        -30.0,
        1e30,
        -1e30,
        std::f32::consts::LN_2,
        f32::MIN_POSITIVE,
        3.4e38,
    ];
    (0..n)
        .map(|i| {
            let k = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(salt);
            if k.is_multiple_of(5) {
                special[(k as usize / 5) % special.len()]
            } else {
                ((k >> 8) % 20_001) as f32 / 1000.0 - 10.0
            }
        })
        .collect()
}

/// Runs `g` with the JIT off and on and asserts identical bits (or the same error);
/// returns how many tile programs the JIT compiled for it.
fn same_bits(g: &Graph, args: &[TensorData]) -> usize {
    same_bits_with(g, args, None)
}

/// [`same_bits`] with environment variable `var = "0"` while the kernels compile (the
/// JIT reads its switches then; set under the lock, so no other test compiles with it).
fn same_bits_with(g: &Graph, args: &[TensorData], var: Option<&str>) -> usize {
    let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let _unset = var.map(EnvZero::set);
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let Ok(exe) = CpuBackend.compile(Device::Cpu, g) else {
        return 0; // nothing to run (the differential suite checks the compile error)
    };
    rlx_cpu::set_jit(false);
    let want = exe.run(&views);
    rlx_cpu::set_jit(true);
    let before = rlx_cpu::jit_compiled_count();
    let got = exe.run(&views);
    let compiled = rlx_cpu::jit_compiled_count() - before;
    let (got, want) = match (got, want) {
        (Ok(g), Ok(w)) => (g, w),
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "the same error either way");
            return compiled;
        }
        (a, b) => panic!("graph `{}`: jit {a:?} vs interpreter {b:?}\n{g}", g.name),
    };
    assert_eq!(got.len(), want.len());
    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
        assert_eq!((a.dtype, &a.dims), (b.dtype, &b.dims), "output {k}");
        if a.bytes == b.bytes {
            continue;
        }
        let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
        let i = (0..a.len())
            .find(|&i| a[i].to_bits() != b[i].to_bits())
            .unwrap_or(0);
        panic!(
            "graph `{}` output {k} element {i}: jit {:e} ({:#x}) vs interpreter {:e} ({:#x})\n{g}",
            g.name,
            a[i],
            a[i].to_bits(),
            b[i],
            b[i].to_bits()
        );
    }
    compiled
}

/// An environment variable set to "0" until dropped.
struct EnvZero(&'static str);

impl EnvZero {
    fn set(var: &str) -> EnvZero {
        let var: &'static str = match var {
            "RLX_GELU_GRAD" => "RLX_GELU_GRAD",
            other => panic!("no switch {other}"),
        };
        // SAFETY: set and removed under SWITCH; the JIT reads it while compiling.
        unsafe { std::env::set_var(var, "0") };
        EnvZero(var)
    }
}

impl Drop for EnvZero {
    fn drop(&mut self) {
        // SAFETY: as in `set`.
        unsafe { std::env::remove_var(self.0) };
    }
}

/// The JIT runs on AVX-512 machines unless `RLX_JIT=0` switches it off (as scripts/asan.sh
/// does for its second pass).
fn jit_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::env::var_os("RLX_JIT").is_none_or(|v| v != "0")
}

#[test]
fn every_supported_unary_op_gives_the_interpreters_bits() {
    for act in [
        Activation::Relu,
        Activation::Neg,
        Activation::Abs,
        Activation::Sqrt,
        Activation::Exp,
        Activation::Sigmoid,
        Activation::Silu,
        Activation::GeluApprox,
        Activation::Tanh,
        Activation::Log,
        Activation::Erf,
        Activation::Gelu,
    ] {
        for n in [5, 16, 1000, 3 * 1024 + 7] {
            let mut g = Graph::new(format!("{act:?}_{n}"));
            let x = g.input("x", Shape::new(&[n], DType::F32));
            let y = op(&mut g, Op::Activation(act), vec![x]);
            g.set_outputs(vec![y]);
            let compiled = same_bits(&g, &[TensorData::from_f32(&[n], &values(n, 7))]);
            if jit_available() {
                assert!(compiled > 0, "{act:?} was compiled");
            }
        }
    }
}

#[test]
fn every_supported_binary_op_with_vectors_and_scalars_gives_the_interpreters_bits() {
    for b in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ] {
        let n = 2 * 1024 + 33;
        let mut g = Graph::new(format!("{b:?}"));
        let x = g.input("x", Shape::new(&[n], DType::F32));
        let y = g.input("y", Shape::new(&[n], DType::F32));
        let s = g.input("s", Shape::new(&[], DType::F32));
        let v = op(&mut g, Op::Binary(b), vec![x, y]);
        // A scalar operand on either side, and equal operands (±0 ordering of max/min).
        let l = op(&mut g, Op::Binary(b), vec![s, v]);
        let r = op(&mut g, Op::Binary(b), vec![v, s]);
        let e = op(&mut g, Op::Binary(b), vec![x, x]);
        g.set_outputs(vec![l, r, e]);
        let args = [
            TensorData::from_f32(&[n], &values(n, 1)),
            TensorData::from_f32(&[n], &values(n, 2)),
            TensorData::from_f32(&[], &[-0.0]),
        ];
        let compiled = same_bits(&g, &args);
        if jit_available() {
            assert!(compiled > 0, "{b:?} was compiled");
        }
    }
}

#[test]
fn chains_with_broadcasts_casts_and_several_outputs_give_the_interpreters_bits() {
    // W1's chain, an AdamW-shaped update with three outputs, and a row-broadcast bias
    // feeding a sigmoid-form GELU derivative (W6's backward epilogue, unfused here).
    let (m, n) = (37, 300);
    let mut g = Graph::new("chains");
    let a = g.input("a", Shape::new(&[m, n], DType::F32));
    let b = g.input("b", Shape::new(&[m, n], DType::F32));
    let bias = g.input("bias", Shape::new(&[n], DType::F32));
    let half = scalar(&mut g, 0.5);
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![a, b]);
    let p = op(&mut g, Op::Binary(BinaryOp::Mul), vec![s, b]);
    let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![p, half]);
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![d]);
    let w1 = op(&mut g, Op::Activation(Activation::Exp), vec![r]);
    let h = op(&mut g, Op::Binary(BinaryOp::Add), vec![a, bias]);
    let k = scalar(&mut g, 1.702);
    let hk = op(&mut g, Op::Binary(BinaryOp::Mul), vec![h, k]);
    let sg = op(&mut g, Op::Activation(Activation::Sigmoid), vec![hk]);
    let one = scalar(&mut g, 1.0);
    let om = op(&mut g, Op::Binary(BinaryOp::Sub), vec![one, sg]);
    let t = op(&mut g, Op::Binary(BinaryOp::Mul), vec![hk, om]);
    let t1 = op(&mut g, Op::Binary(BinaryOp::Add), vec![t, one]);
    let gd = op(&mut g, Op::Binary(BinaryOp::Mul), vec![sg, t1]);
    let c = op(&mut g, Op::Cast { to: DType::F32 }, vec![gd]);
    let v2 = op(&mut g, Op::Binary(BinaryOp::Mul), vec![b, b]);
    let root = op(&mut g, Op::Activation(Activation::Sqrt), vec![v2]);
    let q = op(&mut g, Op::Binary(BinaryOp::Div), vec![s, root]);
    g.set_outputs(vec![w1, c, q, v2]);
    let args = [
        TensorData::from_f32(&[m, n], &values(m * n, 3)),
        TensorData::from_f32(&[m, n], &values(m * n, 4)),
        TensorData::from_f32(&[n], &values(n, 5)),
    ];
    let compiled = same_bits(&g, &args);
    if jit_available() {
        assert!(compiled > 0);
    }
}

#[test]
fn matmul_epilogues_give_the_interpreters_bits() {
    let (m, k, n) = (70, 48, 90);
    let mut g = Graph::new("epilogue");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let w = g.input("w", Shape::new(&[k, n], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let y = op(&mut g, Op::MatMul, vec![x, w]);
    let yb = op(&mut g, Op::Binary(BinaryOp::Add), vec![y, b]);
    let sg = op(&mut g, Op::Activation(Activation::Sigmoid), vec![yb]);
    let out = op(&mut g, Op::Binary(BinaryOp::Mul), vec![yb, sg]);
    g.set_outputs(vec![out]);
    let small = |n: usize, s: u32| -> Vec<f32> {
        values(n, s)
            .iter()
            .map(|v| {
                if v.is_finite() {
                    v.clamp(-3.0, 3.0)
                } else {
                    0.5
                }
            })
            .collect()
    };
    let args = [
        TensorData::from_f32(&[m, k], &small(m * k, 8)),
        TensorData::from_f32(&[k, n], &small(k * n, 9)),
        TensorData::from_f32(&[n], &values(n, 10)),
    ];
    let compiled = same_bits(&g, &args);
    if jit_available() {
        assert!(compiled > 0);
    }
}

#[test]
fn streamed_outputs_written_with_non_temporal_stores_give_the_interpreters_bits() {
    // Outputs past 8 MiB are streamed: the compiled loop stores whole aligned tiles
    // with non-temporal stores (tiles are cut to the output's 64-byte boundaries), the
    // rest through the scratch. An odd length leaves a partial last vector.
    let n = (9 << 20) / 4 + 13;
    let mut g = Graph::new("stream");
    let a = g.input("a", Shape::new(&[n], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let half = scalar(&mut g, 0.5);
    let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![a, b]);
    let d = op(&mut g, Op::Binary(BinaryOp::Sub), vec![s, half]);
    let r = op(&mut g, Op::Activation(Activation::Relu), vec![d]);
    let e = op(&mut g, Op::Activation(Activation::Exp), vec![r]);
    g.set_outputs(vec![e]);
    let args = [
        TensorData::from_f32(&[n], &values(n, 11)),
        TensorData::from_f32(&[n], &values(n, 12)),
    ];
    let compiled = same_bits(&g, &args);
    if jit_available() {
        assert!(compiled > 0);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 800, failure_persistence: None, rng_seed: rlx_testkit::proptest_seed(), ..ProptestConfig::default() })]

    /// The differential suite's random graphs (every dtype, views, broadcasts, fused
    /// epilogues), run with the JIT off and on: the same bits wherever it compiles
    /// (about one graph in eight has an all-f32 kernel it compiles).
    #[test]
    fn random_graphs_give_the_same_bits_with_and_without_the_jit(seed in any::<u64>()) {
        let mut rng = Rng::new(seed);
        let (g, args) = build_random_graph(&mut rng, seed % 4 == 0);
        same_bits(&g, &args);
    }
}

#[test]
fn f64_arithmetic_and_casts_between_f32_and_f64_give_the_interpreters_bits() {
    // The shape of the default (f64-math) optimizer update: f32 state widened to f64,
    // updated, rounded back; plus f64 inputs and outputs, √ and a scalar, over lengths
    // with partial vectors. (f64 neg/abs are not compiled: the interpreter keeps a NaN's
    // sign there, unlike f32's.)
    for n in [7, 16, 1000, 2 * 1024 + 9] {
        let mut g = Graph::new(format!("f64_{n}"));
        let p = g.input("p", Shape::new(&[n], DType::F32));
        let m = g.input("m", Shape::new(&[n], DType::F32));
        let w = g.input("w", Shape::new(&[n], DType::F64));
        let lr = g.input("lr", Shape::new(&[], DType::F64));
        let to64 = |g: &mut Graph, x| op(g, Op::Cast { to: DType::F64 }, vec![x]);
        let (p64, m64) = (to64(&mut g, p), to64(&mut g, m));
        let mm = op(&mut g, Op::Binary(BinaryOp::Mul), vec![m64, m64]);
        let sum = op(&mut g, Op::Binary(BinaryOp::Add), vec![mm, w]);
        let root = op(&mut g, Op::Activation(Activation::Sqrt), vec![sum]);
        let q = op(&mut g, Op::Binary(BinaryOp::Div), vec![m64, root]);
        let step = op(&mut g, Op::Binary(BinaryOp::Mul), vec![q, lr]);
        let p2 = op(&mut g, Op::Binary(BinaryOp::Sub), vec![p64, step]);
        let p32 = op(&mut g, Op::Cast { to: DType::F32 }, vec![p2]);
        g.set_outputs(vec![p32, sum]);
        let wide: Vec<f64> = values(n, 13)
            .iter()
            .map(|&v| v as f64 * 1.000_000_1)
            .collect();
        let args = [
            TensorData::from_f32(&[n], &values(n, 11)),
            TensorData::from_f32(&[n], &values(n, 12)),
            TensorData::from_f64(&[n], &wide),
            TensorData::from_f64(&[], &[1e-3]),
        ];
        let compiled = same_bits(&g, &args);
        if jit_available() {
            assert!(compiled > 0, "n = {n}: the f64 chain was compiled");
        }
    }
}

#[test]
fn comparisons_selects_and_masks_cast_to_f32_give_the_interpreters_bits() {
    // Every predicate on values with NaN, ±0 and ±∞, used as a select's mask (ReLU's
    // backward `where(x > 0, g, 0)`) and cast to 1.0 / 0.0 (`g · (x ≥ y)`).
    use rlx_ir::CmpOp::*;
    for c in [Eq, Ne, Lt, Le, Gt, Ge] {
        let n = 1000 + 3;
        let mut g = Graph::new(format!("{c:?}"));
        let x = g.input("x", Shape::new(&[n], DType::F32));
        let y = g.input("y", Shape::new(&[n], DType::F32));
        let gr = g.input("g", Shape::new(&[n], DType::F32));
        let m = op(&mut g, Op::Compare(c), vec![x, y]);
        let zero = scalar(&mut g, 0.0);
        let sel = op(&mut g, Op::Where, vec![m, gr, zero]);
        let mf = op(&mut g, Op::Cast { to: DType::F32 }, vec![m]);
        let prod = op(&mut g, Op::Binary(BinaryOp::Mul), vec![gr, mf]);
        g.set_outputs(vec![sel, prod]);
        let mut ys = values(n, 22);
        let xs = values(n, 21);
        // Equal pairs (incl. ±0 against ∓0) so every predicate sees both outcomes.
        for i in (0..n).step_by(7) {
            ys[i] = if xs[i] == 0.0 { -xs[i] } else { xs[i] };
        }
        let args = [
            TensorData::from_f32(&[n], &xs),
            TensorData::from_f32(&[n], &ys),
            TensorData::from_f32(&[n], &values(n, 23)),
        ];
        let compiled = same_bits(&g, &args);
        if jit_available() {
            assert!(compiled > 0, "{c:?} was compiled");
        }
    }
}

#[test]
fn explain_says_which_kernels_run_as_machine_code_and_why_others_do_not() {
    let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    rlx_cpu::set_jit(true);
    let n = 4096;
    let build = |act: Activation| {
        let mut g = Graph::new("explained");
        let x = g.input("x", Shape::new(&[n], DType::F32));
        let h = scalar(&mut g, 0.5);
        let s = op(&mut g, Op::Binary(BinaryOp::Mul), vec![x, h]);
        let y = op(&mut g, Op::Activation(act), vec![s]);
        g.set_outputs(vec![y]);
        CpuBackend.compile(Device::Cpu, &g).unwrap()
    };
    let data = TensorData::from_f32(&[n], &values(n, 3));
    let exe = build(Activation::Exp);
    let before = exe.explain();
    exe.run(&[data.view()]).unwrap();
    let after = exe.explain();
    let atan = build(Activation::Atan).explain();
    if jit_available() {
        assert!(
            before.contains("kernel 0: machine code from its first run"),
            "{before}"
        );
        assert!(after.contains("kernel 0: machine code\n"), "{after}");
        assert!(
            atan.contains("kernel 0: interpreted (atan on f32 not compiled)"),
            "{atan}"
        );
    } else {
        assert!(
            after.contains("interpreted (JIT off or no AVX-512)"),
            "{after}"
        );
    }
}

/// Inputs at every branch point of erf and exact GELU (the erf polynomial's 0.75, the
/// ±16 clamp of the tail, the exponential's −120 clamp at √120 for erf and √240 for GELU,
/// the earlier formulations' 0.5 and 10.5, the edges of the table intervals — erf's
/// 1, 1.25, …, 4.75 and its 4.7 clamp, GELU's 0.5, 1.5, …, 15.5 and its 15.49 clamp,
/// the Φ table's edges 0.3125 + 0.625m, its −4 branch and 5.875 clamp — each with its
/// neighbours), ±0, subnormals, huge values, ±∞, NaNs of both signs, and a
/// dense sweep of [−20, 20].
fn erf_values() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1e-45,
        -1e-45,
        1e-40,
        -1e-40,
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        1e-20,
        -1e-20,
        1e30,
        -1e30,
        3.4e38,
        -3.4e38,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
    ];
    for b in [
        0.5f32,
        0.75,
        0.5 * std::f32::consts::SQRT_2,
        10.5,
        10.5 * std::f32::consts::SQRT_2,
        16.0,
        120f32.sqrt(),
        240f32.sqrt(),
        4.7,
        15.49,
    ]
    .into_iter()
    .chain((4..=19).map(|k| k as f32 / 4.0))
    .chain((0..16).map(|k| k as f32 + 0.5))
    // GELU's Φ table: its interval edges 0.625·(m + ½) (both signs below), the tail
    // branch at −4, the clamp at 5.875 and the table's end 5.9375.
    .chain((0..10).map(|m| 0.625 * (m as f32 + 0.5)))
    .chain([4.0, 5.875, 5.9375])
    // The fused GELU′ table: its interval edges 0.8125·(m + ½), the branch at −6.875 to
    // the rule's chain and the clamp at 6.
    .chain((0..8).map(|m| 0.8125 * (m as f32 + 0.5)))
    .chain([6.875, 6.0])
    {
        for x in [
            b,
            f32::from_bits(b.to_bits() - 1),
            f32::from_bits(b.to_bits() + 1),
        ] {
            v.extend([x, -x]);
        }
    }
    v.extend((0..4001).map(|i| -20.0 + i as f32 * 0.01));
    v
}

#[test]
fn erf_and_exact_gelu_give_the_interpreters_bits_at_every_branch_point() {
    let xs = erf_values();
    let n = xs.len();
    for act in [Activation::Erf, Activation::Gelu] {
        let mut g = Graph::new(format!("{act:?}_edges"));
        let x = g.input("x", Shape::new(&[n], DType::F32));
        let y = op(&mut g, Op::Activation(act), vec![x]);
        g.set_outputs(vec![y]);
        let compiled = same_bits(&g, &[TensorData::from_f32(&[n], &xs)]);
        if jit_available() {
            assert!(compiled > 0, "{act:?} was compiled");
        }
    }
}

#[test]
fn exact_gelu_backward_chain_on_bf16_and_f32_is_compiled_with_the_interpreters_bits() {
    // The autodiff rule's g·(Φ(u) + u·φ(u)) with Φ(u) = ½(1 + erf(u/√2)) and
    // φ(u) = e^(−u²/2)/√(2π), as one elementwise kernel in each format: erf and exp both
    // compiled (the OPS `gelu_erf rlx_bwd` row), every node rounded as the interpreter
    // rounds it, over erf's branch points and the dense sweep of [−20, 20]. In f32 the
    // JIT computes the chain from one table by default (checked against the f64
    // derivative below): RLX_GELU_GRAD=0 compiles the chain itself, and so does an f32
    // chain with a value read elsewhere (Φ exported as a second output).
    let xs = erf_values();
    let n = xs.len();
    let gs: Vec<f32> = (0..n).map(|i| 1.0 - (i % 7) as f32 * 0.375).collect();
    for (dt, export_cdf) in [
        (DType::F32, false),
        (DType::F32, true),
        (DType::BF16, false),
    ] {
        let mut g = Graph::new(format!("gelu_bwd_{dt}"));
        let u0 = g.input("u", Shape::new(&[n], DType::F32));
        let g0 = g.input("g", Shape::new(&[n], DType::F32));
        let u = op(&mut g, Op::Cast { to: dt }, vec![u0]);
        let gy = op(&mut g, Op::Cast { to: dt }, vec![g0]);
        let mul = |g: &mut Graph, a, b| op(g, Op::Binary(BinaryOp::Mul), vec![a, b]);
        let add = |g: &mut Graph, a, b| op(g, Op::Binary(BinaryOp::Add), vec![a, b]);
        let sc = |g: &mut Graph, v: f64| {
            let c = scalar(g, v as f32);
            if dt == DType::F32 {
                c
            } else {
                op(g, Op::Cast { to: dt }, vec![c])
            }
        };
        let k = sc(&mut g, std::f64::consts::FRAC_1_SQRT_2);
        let us = mul(&mut g, u, k);
        let e = op(&mut g, Op::Activation(Activation::Erf), vec![us]);
        let one = sc(&mut g, 1.0);
        let e1 = add(&mut g, e, one);
        let half = sc(&mut g, 0.5);
        let cdf = mul(&mut g, e1, half);
        let uu = mul(&mut g, u, u);
        let mhalf = sc(&mut g, -0.5);
        let hh = mul(&mut g, uu, mhalf);
        let ex = op(&mut g, Op::Activation(Activation::Exp), vec![hh]);
        let c = sc(&mut g, 1.0 / (2.0 * std::f64::consts::PI).sqrt());
        let pdf = mul(&mut g, ex, c);
        let up = mul(&mut g, u, pdf);
        let d = add(&mut g, cdf, up);
        let du = mul(&mut g, gy, d);
        g.set_outputs(if export_cdf { vec![du, cdf] } else { vec![du] });
        let args = [
            TensorData::from_f32(&[n], &xs),
            TensorData::from_f32(&[n], &gs),
        ];
        let unfused = dt == DType::F32 && !export_cdf;
        let compiled = same_bits_with(&g, &args, unfused.then_some("RLX_GELU_GRAD"));
        if jit_available() {
            assert!(compiled > 0, "{dt}: the backward chain was compiled");
        }
    }
}

/// `GELU'(u) = Φ(u) + u·φ(u)` in f64 (Φ through erfc: no cancellation for negative u).
fn gelu_derivative_f64(u: f64) -> f64 {
    let phi = (-0.5 * u * u).exp() / (2.0 * std::f64::consts::PI).sqrt();
    0.5 * libm::erfc(-u / std::f64::consts::SQRT_2) + u * phi
}

#[test]
fn exact_gelu_gradient_matches_the_f64_derivative_with_and_without_the_jit() {
    // The reference is the derivative: central differences of the oracle's f64 GELU
    // (x·½erfc(−x/√2)) agree with it.
    for u in [-6.0f64, -2.5, -0.7, 0.0, 0.3, 1.9, 4.2] {
        let f = |x: f64| x * 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
        let h = 1e-5;
        let fd = (f(u + h) - f(u - h)) / (2.0 * h);
        assert!((fd - gelu_derivative_f64(u)).abs() < 1e-9, "GELU'({u})");
    }
    // Reverse mode of the compiled GELU, cotangent 1, over erf's, GELU's and the fused
    // GELU′ table's branch points, [−20, 20] by 0.01 and [−8, 8] by 2⁻¹⁵. The rule
    // evaluates Φ as ½(1 + erf(u/√2)) in f32, so its error is absolute near Φ's
    // saturation (the rounding of 1 + erf); the JIT's fused table (the default) is fitted
    // in absolute error below ½ (GELU′ crosses zero at −0.7518): both measured in units
    // of max(ulp(GELU′), 2⁻²⁴). 2-vCPU Xeon with the Sapphire Rapids feature set,
    // 2026-12-03: the rule 1.07 at u = 0.7832 (interpreter, and JIT with
    // RLX_GELU_GRAD=0), the fused table 0.94 at u = 3.249.
    let mut xs: Vec<f32> = erf_values().into_iter().filter(|x| x.is_finite()).collect();
    xs.extend((0..=1 << 19).map(|i| -8.0 + i as f32 / 32768.0));
    let finite = xs.len();
    xs.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN]);
    let n = xs.len();
    let mut g = Graph::new("gelu");
    let u = g.input("u", Shape::new(&[n], DType::F32));
    let y = op(&mut g, Op::Activation(Activation::Gelu), vec![u]);
    g.set_outputs(vec![y]);
    let bwd = rlx_compile::autodiff::vjp_graph(&g, &[u]).expect("GELU differentiates");
    let args = [
        TensorData::from_f32(&[n], &xs),
        TensorData::from_f32(&[n], &vec![1.0; n]),
    ];
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    let mut outs = Vec::new();
    for (name, jit, switch) in [
        ("interpreter", false, None),
        ("jit RLX_GELU_GRAD=0", true, Some("RLX_GELU_GRAD")),
        ("jit", true, None),
    ] {
        // A program of its own for each (the JIT compiles at a kernel's first run,
        // reading the switch then, and caches the code per program).
        let exe = CpuBackend.compile(Device::Cpu, &bwd).unwrap();
        rlx_cpu::set_jit(jit);
        let unset = switch.map(EnvZero::set);
        let got = exe.run(&views).unwrap()[0].to_f64_vec();
        drop(unset);
        let mut worst = (0.0f64, 0.0f32);
        for (&x, &v) in xs[..finite].iter().zip(&got) {
            let want = gelu_derivative_f64(x as f64);
            let ulp = f64::from((want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON);
            // in units of max(ulp(want), 2⁻²⁴)
            let e = (v - want).abs() / ulp.max(2f64.powi(-24));
            if e > worst.0 {
                worst = (e, x);
            }
        }
        println!(
            "{name}: GELU' within {:.2} units at u = {:e}",
            worst.0, worst.1
        );
        assert!(
            worst.0 <= 1.5,
            "{name}: GELU'({:e}) off by {:.2} units of max(ulp, 2^-24)",
            worst.1,
            worst.0
        );
        // ±∞ and NaN: NaN, as the rule's ∞·0 gives
        for (x, v) in xs[finite..].iter().zip(&got[finite..]) {
            assert!(v.is_nan(), "{name}: GELU'({x}) = {v}, not NaN");
        }
        outs.push(got);
    }
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&outs[0]) == bits(&outs[1]),
        "RLX_GELU_GRAD=0 keeps the interpreter's bits"
    );
    if jit_available() {
        assert!(
            outs[2].iter().zip(&outs[0]).any(|(a, b)| a != b),
            "the JIT's default computes GELU' from its table (other bits than the rule)"
        );
    }
}

#[test]
fn gelu_derivative_chain_with_swapped_operands_is_fused_within_the_bound() {
    // Every product and sum of the chain with its operands the other way round, on a
    // vector u: fused (other bits than RLX_GELU_GRAD=0's) and within the fused table's
    // bound of the f64 derivative; and (second output) on a one-element s broadcast
    // against u, which must come out right whichever way it is compiled.
    let xs: Vec<f32> = (0..3001).map(|i| -7.5 + i as f32 * 0.005).collect();
    let n = xs.len();
    let mut g = Graph::new("gelu_grad_swapped");
    let u = g.input("u", Shape::new(&[n], DType::F32));
    let s0 = g.input("s", Shape::new(&[1], DType::F32));
    let chain = |g: &mut Graph, x| {
        let mul = |g: &mut Graph, a, b| op(g, Op::Binary(BinaryOp::Mul), vec![a, b]);
        let add = |g: &mut Graph, a, b| op(g, Op::Binary(BinaryOp::Add), vec![a, b]);
        let k = scalar(g, std::f32::consts::FRAC_1_SQRT_2);
        let us = mul(g, k, x);
        let e = op(g, Op::Activation(Activation::Erf), vec![us]);
        let one = scalar(g, 1.0);
        let e1 = add(g, one, e);
        let half = scalar(g, 0.5);
        let cdf = mul(g, half, e1);
        let uu = mul(g, x, x);
        let mhalf = scalar(g, -0.5);
        let hh = mul(g, mhalf, uu);
        let ex = op(g, Op::Activation(Activation::Exp), vec![hh]);
        let c = scalar(g, (1.0 / (2.0 * std::f64::consts::PI).sqrt()) as f32);
        let pdf = mul(g, c, ex);
        let up = mul(g, pdf, x);
        add(g, up, cdf)
    };
    let du = chain(&mut g, u);
    let ds = chain(&mut g, s0);
    let ds_u = op(&mut g, Op::Binary(BinaryOp::Add), vec![ds, u]);
    g.set_outputs(vec![du, ds_u]);
    let sval = -0.3f32;
    let args = [
        TensorData::from_f32(&[n], &xs),
        TensorData::from_f32(&[1], &[sval]),
    ];
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    rlx_cpu::set_jit(true);
    let mut outs = Vec::new();
    for switch in [None, Some("RLX_GELU_GRAD")] {
        let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
        let unset = switch.map(EnvZero::set);
        outs.push(exe.run(&views).unwrap());
        drop(unset);
    }
    let unit = |want: f64| {
        let ulp = f64::from((want as f32).abs() * f32::EPSILON);
        ulp.max(2f64.powi(-24))
    };
    let fused = outs[0][0].to_f64_vec();
    for (&x, &v) in xs.iter().zip(&fused) {
        let want = gelu_derivative_f64(f64::from(x));
        let e = (v - want).abs() / unit(want);
        assert!(e <= 1.5, "GELU'({x:e}) = {v:e}, off by {e:.2} units");
    }
    // The scalar chain plus u: GELU'(s) + u (rounded once more).
    let want = gelu_derivative_f64(f64::from(sval));
    let got = outs[0][1].to_f64_vec()[0] - f64::from(xs[0]);
    assert!(
        (got - want).abs() <= 4.0 * unit(7.5),
        "GELU'({sval}) = {got:e}"
    );
    if jit_available() {
        assert!(
            fused != outs[1][0].to_f64_vec(),
            "the vector chain was fused (its bits differ from the chain's)"
        );
    }
}

#[test]
fn compiled_erf_and_exact_gelu_match_reference_values() {
    // erf and Φ from tables (f64), to a few ulp; −0 of GELU at −∞; NaN through.
    let cases: [(Activation, f32, f64); 10] = [
        (Activation::Erf, 0.5, 0.520_499_877_813_046_5),
        (Activation::Erf, -1.0, -0.842_700_792_949_714_9),
        (Activation::Erf, 2.0, 0.995_322_265_018_952_7),
        (Activation::Erf, 1e-20, 1.128_379_167_095_512_6e-20),
        (Activation::Erf, -30.0, -1.0),
        (Activation::Gelu, 1.0, 0.841_344_746_068_542_9),
        (Activation::Gelu, -1.0, -0.158_655_253_931_457_05),
        (Activation::Gelu, -3.0, -0.004_049_694_048_799_875),
        (Activation::Gelu, 0.25, 0.149_676_581_420_492_6),
        (Activation::Gelu, 50.0, 50.0),
    ];
    let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
    rlx_cpu::set_jit(true);
    for act in [Activation::Erf, Activation::Gelu] {
        let mine: Vec<_> = cases.iter().filter(|c| c.0 == act).collect();
        let mut xs: Vec<f32> = mine.iter().map(|c| c.1).collect();
        xs.extend([f32::NEG_INFINITY, f32::NAN]);
        let n = xs.len();
        let mut g = Graph::new(format!("{act:?}_reference"));
        let x = g.input("x", Shape::new(&[n], DType::F32));
        let y = op(&mut g, Op::Activation(act), vec![x]);
        g.set_outputs(vec![y]);
        let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
        let before = rlx_cpu::jit_compiled_count();
        let out = exe.run(&[TensorData::from_f32(&[n], &xs).view()]).unwrap();
        if jit_available() {
            assert!(
                rlx_cpu::jit_compiled_count() > before,
                "{act:?} was compiled"
            );
        }
        let got = out[0].to_f64_vec();
        for (c, &v) in mine.iter().zip(&got) {
            let ulp = (c.2 as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
            assert!(
                (v - c.2).abs() <= 4.0 * ulp as f64,
                "{act:?}({}) = {v:e}, want {:e}",
                c.1,
                c.2
            );
        }
        let at_neg_inf = got[n - 2];
        match act {
            Activation::Gelu => assert!(at_neg_inf == 0.0 && at_neg_inf.is_sign_negative()),
            _ => assert_eq!(at_neg_inf, -1.0),
        }
        assert!(got[n - 1].is_nan(), "{act:?}(NaN) is NaN");
    }
}

#[test]
fn gelu_forward_and_backward_matmul_epilogues_are_compiled_with_the_interpreters_bits() {
    // The MLP's forward `gelu(x·W1 + b)`, and its backward `(dy·W2ᵀ)·gelu′(h)` with
    // gelu′(h) = ½(1 + erf(h/√2)) + h·e^(−h²/2)/√(2π), as autodiff writes it: the bits
    // with RLX_GELU_GRAD=0 (the chain as written); by default the JIT computes gelu′ from
    // its table (exact_gelu_gradient_matches_the_f64_derivative_… checks it), still as
    // machine code (checked last).
    let (m, k, n) = (70, 48, 90);
    let mut g = Graph::new("gelu_mlp");
    let x = g.input("x", Shape::new(&[m, k], DType::F32));
    let w = g.input("w", Shape::new(&[k, n], DType::F32));
    let b = g.input("b", Shape::new(&[n], DType::F32));
    let w2 = g.input("w2", Shape::new(&[k, n], DType::F32));
    let h = g.input("h", Shape::new(&[m, n], DType::F32));
    let y = op(&mut g, Op::MatMul, vec![x, w]);
    let yb = op(&mut g, Op::Binary(BinaryOp::Add), vec![y, b]);
    let fwd = op(&mut g, Op::Activation(Activation::Gelu), vec![yb]);
    let dh = op(&mut g, Op::MatMul, vec![x, w2]);
    let mul_s = |g: &mut Graph, v, c: f32| {
        let c = scalar(g, c);
        op(g, Op::Binary(BinaryOp::Mul), vec![v, c])
    };
    let u = mul_s(&mut g, h, std::f32::consts::FRAC_1_SQRT_2);
    let e = op(&mut g, Op::Activation(Activation::Erf), vec![u]);
    let one = scalar(&mut g, 1.0);
    let e1 = op(&mut g, Op::Binary(BinaryOp::Add), vec![e, one]);
    let cdf = mul_s(&mut g, e1, 0.5);
    let hh = op(&mut g, Op::Binary(BinaryOp::Mul), vec![h, h]);
    let q = mul_s(&mut g, hh, -0.5);
    let ex = op(&mut g, Op::Activation(Activation::Exp), vec![q]);
    let pdf = mul_s(&mut g, ex, 1.0 / (2.0 * std::f32::consts::PI).sqrt());
    let hp = op(&mut g, Op::Binary(BinaryOp::Mul), vec![h, pdf]);
    let d = op(&mut g, Op::Binary(BinaryOp::Add), vec![cdf, hp]);
    let bwd = op(&mut g, Op::Binary(BinaryOp::Mul), vec![dh, d]);
    g.set_outputs(vec![fwd, bwd]);
    let small = |n: usize, s: u32| -> Vec<f32> {
        values(n, s)
            .iter()
            .map(|v| {
                if v.is_finite() {
                    v.clamp(-3.0, 3.0)
                } else {
                    0.5
                }
            })
            .collect()
    };
    let args = [
        TensorData::from_f32(&[m, k], &small(m * k, 31)),
        TensorData::from_f32(&[k, n], &small(k * n, 32)),
        TensorData::from_f32(&[n], &values(n, 33)),
        TensorData::from_f32(&[k, n], &small(k * n, 35)),
        TensorData::from_f32(&[m, n], &values(m * n, 34)),
    ];
    let compiled = same_bits_with(&g, &args, Some("RLX_GELU_GRAD"));
    if jit_available() {
        assert!(compiled > 0);
        let _one = SWITCH.lock().unwrap_or_else(|e| e.into_inner());
        rlx_cpu::set_jit(true);
        let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        exe.run(&views).unwrap();
        let why = exe.explain();
        assert!(!why.contains("not compiled"), "{why}");
        assert!(why.contains("machine code"), "{why}");
    }
}

/// [`values`] plus the cases of rounding to bf16 and f16: exact ties (which round to
/// even), values just off a tie, f16's overflow to ∞ and its subnormals, and NaNs whose
/// payload sits in the bits the rounding drops.
fn half_values(n: usize, salt: u32) -> Vec<f32> {
    let ties = [
        f32::from_bits(0x3F80_8000), // bf16 tie: 1 + 2⁻⁸ → 1
        f32::from_bits(0x3F81_8000), // bf16 tie → 1 + 2⁻⁶ (even)
        f32::from_bits(0x3F80_8001), // just above a bf16 tie → up
        f32::from_bits(0xBF80_7FFF), // just below a bf16 tie → down
        f32::from_bits(0x7F7F_FFFF), // f32::MAX: rounds to bf16 ∞
        f32::from_bits(0x7FC0_1234), // NaN with low payload bits
        f32::from_bits(0xFF80_0001), // signalling NaN
        1.0 + 2f32.powi(-11),        // f16 tie → 1
        1.0 + 3.0 * 2f32.powi(-11),  // f16 tie → even
        65520.0,                     // f16 overflow → ∞
        6.0e-8,                      // f16 subnormal
        -3.0e-5,
        1.0e-8, // below f16's smallest subnormal → 0
    ];
    values(n, salt)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            if (i as u32 ^ salt).is_multiple_of(3) {
                ties[(i / 3 + salt as usize) % ties.len()]
            } else {
                v
            }
        })
        .collect()
}

#[test]
fn bf16_and_f16_arithmetic_held_as_f32_gives_the_interpreters_bits() {
    // Casts into the format, every compiled op on values of the format (each result
    // rounded to it, as the interpreter rounds every node), comparisons and selects on
    // them, inputs stored in the format, casts between the two formats, and outputs in
    // the format and widened to f32 and f64.
    for dt in [DType::BF16, DType::F16] {
        let other = if dt == DType::BF16 {
            DType::F16
        } else {
            DType::BF16
        };
        for n in [5, 16, 1000, 3 * 1024 + 7] {
            let mut g = Graph::new(format!("{dt}_{n}"));
            let x = g.input("x", Shape::new(&[n], DType::F32));
            let y = g.input("y", Shape::new(&[n], DType::F32));
            let z = g.input("z", Shape::new(&[n], dt));
            let cast = |g: &mut Graph, to, v| op(g, Op::Cast { to }, vec![v]);
            let (xh, yh) = (cast(&mut g, dt, x), cast(&mut g, dt, y));
            let s = op(&mut g, Op::Binary(BinaryOp::Add), vec![xh, yh]);
            let m = op(&mut g, Op::Binary(BinaryOp::Mul), vec![s, z]);
            let d = op(&mut g, Op::Binary(BinaryOp::Div), vec![m, yh]);
            let mx = op(&mut g, Op::Binary(BinaryOp::Max), vec![d, xh]);
            let e = op(&mut g, Op::Activation(Activation::Exp), vec![xh]);
            let ge = op(&mut g, Op::Activation(Activation::Gelu), vec![yh]);
            let th = op(&mut g, Op::Activation(Activation::Tanh), vec![z]);
            let gt = op(&mut g, Op::Compare(rlx_ir::CmpOp::Gt), vec![xh, yh]);
            let sel = op(&mut g, Op::Where, vec![gt, e, ge]);
            let sum = op(&mut g, Op::Binary(BinaryOp::Sub), vec![sel, th]);
            let cross = cast(&mut g, other, sum);
            let back = cast(&mut g, dt, cross);
            let wide = cast(&mut g, DType::F32, mx);
            let wider = cast(&mut g, DType::F64, back);
            g.set_outputs(vec![sum, back, wide, wider, cross]);
            let zh: Vec<f64> = half_values(n, 5).iter().map(|&v| v as f64).collect();
            let args = [
                TensorData::from_f32(&[n], &half_values(n, 3)),
                TensorData::from_f32(&[n], &half_values(n, 4)),
                TensorData::from_f64_as(dt, &[n], &zh),
            ];
            let compiled = same_bits(&g, &args);
            if jit_available() {
                assert!(compiled > 0, "{dt}, n = {n}: the chain was compiled");
            }
        }
    }
}

#[test]
fn a_half_precision_matmul_with_the_swiglu_epilogue_is_compiled_with_the_interpreters_bits() {
    // A Llama MLP's up projection: silu(gate) · (x · Wᵀ), all in the format (the
    // epilogue ran interpreted before silu was compiled: 0.8 ms of a 1.0 ms product).
    for dt in [DType::BF16, DType::F16] {
        let (m, k, n) = (37, 64, 80);
        let mut g = Graph::new(format!("swiglu_{dt}"));
        let x = g.input("x", Shape::new(&[m, k], dt));
        let w = g.input("w", Shape::new(&[n, k], dt));
        let gate = g.input("gate", Shape::new(&[m, n], dt));
        let wt = op(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![w]);
        let up = op(&mut g, Op::MatMul, vec![x, wt]);
        let act = op(&mut g, Op::Activation(Activation::Silu), vec![gate]);
        let out = op(&mut g, Op::Binary(BinaryOp::Mul), vec![act, up]);
        g.set_outputs(vec![out]);
        let half = |len: usize, salt: u32, scale: f32| -> Vec<f64> {
            half_values(len, salt)
                .iter()
                .map(|&v| {
                    if v.is_finite() {
                        (v * scale).clamp(-60.0, 60.0) as f64
                    } else {
                        v as f64
                    }
                })
                .collect()
        };
        let args = [
            TensorData::from_f64_as(dt, &[m, k], &half(m * k, 11, 0.1)),
            TensorData::from_f64_as(dt, &[n, k], &half(n * k, 12, 0.1)),
            // The gate with every special value (±0, ±∞, NaN, overflow of exp).
            TensorData::from_f64_as(
                dt,
                &[m, n],
                &values(m * n, 13)
                    .iter()
                    .map(|&v| v as f64)
                    .collect::<Vec<_>>(),
            ),
        ];
        let compiled = same_bits(&g, &args);
        if jit_available() {
            assert!(
                compiled > 0,
                "{dt}: the silu · product epilogue was compiled"
            );
        }
    }
}

#[test]
fn a_cast_from_f32_to_bf16_or_f16_alone_is_compiled_with_the_interpreters_bits() {
    // The kernel a mixed-precision program runs most: one rounding pass over a tensor.
    for dt in [DType::BF16, DType::F16] {
        for n in [3, 16, 4099] {
            let mut g = Graph::new(format!("cast_{dt}_{n}"));
            let x = g.input("x", Shape::new(&[n], DType::F32));
            let y = op(&mut g, Op::Cast { to: dt }, vec![x]);
            g.set_outputs(vec![y]);
            let compiled = same_bits(&g, &[TensorData::from_f32(&[n], &half_values(n, 9))]);
            if jit_available() {
                assert!(compiled > 0, "{dt}, n = {n}: the cast was compiled");
            }
        }
    }
}
