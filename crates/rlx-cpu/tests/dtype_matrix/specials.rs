//! Argmax/argmin (fused reduction kernels) and casts against the oracle, bit for bit,
//! on the values where the rules matter: ties, NaN (the first NaN wins), −0/+0,
//! infinities, all-equal rows, length-1 axes, every reduction path of the executor
//! (short rows, long rows split into blocks, kept trailing axes), fused prologues and
//! epilogues, and casts of every real dtype pair over NaN, ±∞, out-of-range values and
//! −0, through tiles long enough for the vector paths.

use super::rng::Rng;
use rlx_compile::program::KernelKind;
use rlx_compile::{CompileOptions, compile};
use rlx_cpu::CpuBackend;
use rlx_ir::{BinaryOp, DType, Dim, Graph, Op, Shape, TensorData, interp};
use rlx_runtime::{Backend, Device};

fn run(g: &Graph, args: &[TensorData]) -> Result<TensorData, String> {
    let exe = CpuBackend
        .compile(Device::Cpu, g)
        .map_err(|e| e.to_string())?;
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views)
        .map(|mut v| v.remove(0))
        .map_err(|e| e.to_string())
}

fn oracle(g: &Graph, args: &[TensorData]) -> Result<TensorData, String> {
    let named: Vec<(&str, &TensorData)> = ["x", "y"].into_iter().zip(args).collect();
    interp::run_refs(g, &named)
        .map(|mut v| v.remove(0))
        .map_err(|e| e.to_string())
}

/// Values from a small pool (ties everywhere), with NaN, ±0 and ±∞ for floats.
fn tied(rng: &mut Rng, dims: &[usize], dt: DType, nan: bool) -> TensorData {
    let n: usize = dims.iter().product();
    if dt.is_int() {
        let v: Vec<i64> = (0..n).map(|_| rng.below(9) as i64 - 4).collect();
        return TensorData::from_i64_as(dt, dims, &v);
    }
    let pool = [
        0.0,
        -0.0,
        0.25,
        -2.5,
        7.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let k = if nan { pool.len() } else { pool.len() - 1 };
    let v: Vec<f64> = (0..n).map(|_| pool[rng.below(k)]).collect();
    TensorData::from_f64_as(dt, dims, &v)
}

fn arg_graph(
    max: bool,
    dims: &[usize],
    axis: usize,
    keep_dim: bool,
    dt: DType,
    fused: bool,
) -> Graph {
    let mut g = Graph::new("arg");
    let x = g.input("x", Shape::new(dims, dt));
    let mut v = x;
    if fused {
        // A prologue (x · y) and an epilogue (index²).
        let y = g.input("y", Shape::new(dims, dt));
        v = g.add_op(Op::Binary(BinaryOp::Mul), vec![x, y]).unwrap();
    }
    let o = if max {
        Op::ArgMax { axis, keep_dim }
    } else {
        Op::ArgMin { axis, keep_dim }
    };
    let mut r = g.add_op(o, vec![v]).unwrap();
    if fused {
        r = g.add_op(Op::Binary(BinaryOp::Mul), vec![r, r]).unwrap();
    }
    g.set_outputs(vec![r]);
    g
}

#[test]
fn argmax_and_argmin_run_as_reduction_kernels_with_the_oracles_indices() {
    let mut rng = Rng::new(97);
    // Short rows, length-1 axes, a middle axis, kept trailing axes (vector accumulators),
    // long rows of few outputs (split into blocks combined in order), long columns.
    let shapes: Vec<(Vec<usize>, usize)> = vec![
        (vec![6, 5], 1),
        (vec![6, 5], 0),
        (vec![4, 1], 1),
        (vec![1, 7], 0),
        (vec![1], 0),
        (vec![3, 9, 4], 1),
        (vec![2, 3, 300], 2),
        (vec![2, 40_000], 1),
        (vec![1, 70_000], 1),
        (vec![3000, 3], 0),
        (vec![5, 700, 33], 1),
    ];
    for (dims, axis) in &shapes {
        for dt in [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I8,
            DType::U8,
            DType::I32,
            DType::U32,
            DType::I64,
        ] {
            for (max, keep_dim, fused) in [
                (true, false, false),
                (false, true, false),
                (true, true, true),
                (false, false, true),
            ] {
                for nan in [true, false] {
                    let g = arg_graph(max, dims, *axis, keep_dim, dt, fused);
                    let mut args = vec![tied(&mut rng, dims, dt, nan)];
                    if fused {
                        args.push(tied(&mut rng, dims, dt, false));
                    }
                    let want = oracle(&g, &args).unwrap();
                    let got = run(&g, &args).unwrap();
                    let what = format!(
                        "arg{} {dt} {dims:?} axis {axis} keep {keep_dim} fused {fused} nan {nan}",
                        if max { "max" } else { "min" }
                    );
                    assert_eq!((&got.dims, got.dtype), (&want.dims, want.dtype), "{what}");
                    assert_eq!(got.to_f64_vec(), want.to_f64_vec(), "{what}");
                    assert_eq!(got.bytes, want.bytes, "{what}");
                }
            }
        }
    }
}

#[test]
fn argmax_compiles_to_one_fused_reduction_kernel_not_an_opaque_op() {
    let g = arg_graph(true, &[4, 8], 1, false, DType::F32, true);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{:?}", p.kernels);
    let k = &p.kernels[0];
    assert!(
        matches!(k.kind, KernelKind::Reduce { arg: true, .. }),
        "{}",
        k.label()
    );
    assert_eq!(k.label(), "reduce_argmax");
}

#[test]
fn all_equal_rows_nan_first_and_signed_zeros_pick_the_first_position() {
    // Rows: all equal; a NaN after a larger number; two NaNs; −0 before +0; +0 before −0;
    // −∞ only.
    let inf = f32::INFINITY;
    let rows: [[f32; 4]; 6] = [
        [2.0, 2.0, 2.0, 2.0],
        [9.0, 1.0, f32::NAN, 3.0],
        [1.0, f32::NAN, 5.0, f32::NAN],
        [-0.0, 0.0, -1.0, 0.0],
        [0.0, -0.0, -1.0, -0.0],
        [-inf, -inf, -inf, -inf],
    ];
    let flat: Vec<f32> = rows.iter().flatten().copied().collect();
    let x = TensorData::from_f32(&[6, 4], &flat);
    for max in [true, false] {
        let g = arg_graph(max, &[6, 4], 1, false, DType::F32, false);
        let got = run(&g, std::slice::from_ref(&x)).unwrap().to_f32_vec();
        let want: [f32; 6] = if max {
            [0.0, 2.0, 1.0, 0.0, 0.0, 0.0]
        } else {
            [0.0, 2.0, 1.0, 2.0, 2.0, 0.0]
        };
        assert_eq!(got, want, "max {max}");
        let oracle = oracle(&g, std::slice::from_ref(&x)).unwrap().to_f32_vec();
        assert_eq!(got, oracle, "max {max}");
    }
}

#[test]
fn argmax_over_an_empty_dynamic_axis_fails_like_the_oracle_and_bool_is_rejected() {
    let mut g = Graph::new("empty");
    let x = g.input(
        "x",
        Shape::from_dims(&[Dim::Static(2), Dim::Dynamic(0)], DType::F32),
    );
    let r = g
        .add_op(
            Op::ArgMax {
                axis: 1,
                keep_dim: false,
            },
            vec![x],
        )
        .unwrap();
    g.set_outputs(vec![r]);
    let x = TensorData::from_f32(&[2, 0], &[]);
    let want = oracle(&g, std::slice::from_ref(&x)).unwrap_err();
    let got = run(&g, std::slice::from_ref(&x)).unwrap_err();
    assert!(want.contains("argmax"), "{want}");
    assert!(got.contains("argmax") && got.contains("empty"), "{got}");
    // Bool input: shape inference rejects it, naming the op and a fix.
    let mut g = Graph::new("bool");
    let x = g.input("x", Shape::new(&[2, 3], DType::Bool));
    let e = g
        .add_op(
            Op::ArgMin {
                axis: 0,
                keep_dim: false,
            },
            vec![x],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("argmin") && e.contains("cast"), "{e}");
}

/// Cast sources of `dt`: NaN, ±∞, ±0, ties, range edges of every dtype and one past
/// them, f16/bf16/f32 overflow and underflow, i64 values beyond 2⁵³; repeated past one
/// tile so the executor's vector paths run too.
fn cast_sources(dt: DType) -> TensorData {
    let p = |e: i32| 2f64.powi(e);
    let mut f: Vec<f64> = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        -2.5,
        127.5,
        128.0,
        -129.0,
        255.9,
        256.0,
        -32769.0,
        65504.0,
        65520.0,
        p(31),
        -p(31) - 1.0,
        p(32),
        p(63),
        -p(63),
        p(64),
        3.5e38,
        -1e300,
        1e-8,
        1e-40,
        1.0 + p(-9),
        1.0 + p(-24),
        // Just above a bf16 / f16 tie by a bit in the f64's low 32 (f64 sources).
        1.0 + p(-8) + p(-40),
        1.0 + p(-11) + p(-40),
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    if dt.is_float() {
        let n = f.len();
        for i in 0..2000 {
            f.push(f[i % n] * (1.0 + i as f64 / 4096.0));
        }
        return TensorData::from_f64_as(dt, &[f.len()], &f);
    }
    let mut i: Vec<i64> = f
        .iter()
        .filter(|x| x.is_finite())
        .map(|&x| x as i64)
        .collect();
    i.extend([
        i64::MAX,
        i64::MIN,
        (1 << 60) + (1 << 36) + 1,
        (1 << 53) + 1,
        (1 << 24) + 1,
        2049,
        -1,
    ]);
    let n = i.len();
    for k in 0..2000 {
        i.push(i[k % n].wrapping_mul(k as i64 + 1));
    }
    if dt == DType::Bool {
        let b: Vec<bool> = i.iter().map(|&v| v % 3 == 0).collect();
        return TensorData::from_bool(&[b.len()], &b);
    }
    TensorData::from_i64_as(dt, &[i.len()], &i)
}

#[test]
fn casts_between_every_real_dtype_pair_match_the_oracle_bit_for_bit() {
    let real: Vec<DType> = DType::ALL.into_iter().filter(|d| !d.is_complex()).collect();
    for &from in &real {
        let x = cast_sources(from);
        for &to in &real {
            let mut g = Graph::new("cast");
            let xi = g.input("x", x.shape());
            let c = g.add_op(Op::Cast { to }, vec![xi]).unwrap();
            g.set_outputs(vec![c]);
            let want = oracle(&g, std::slice::from_ref(&x)).unwrap();
            let got = run(&g, std::slice::from_ref(&x)).unwrap();
            let w = to.size_bytes();
            for i in 0..x.dims[0] {
                assert_eq!(
                    got.bytes[i * w..(i + 1) * w],
                    want.bytes[i * w..(i + 1) * w],
                    "cast {from} -> {to}, element {i}"
                );
            }
        }
    }
}

/// The cast sources hold f32s just above a bf16 tie by their low 3 mantissa bits (the
/// f64's low 32 bits once widened) and f64s just above bf16 and f16 ties by a bit in
/// their low 32: there `half`'s `from_f64` rounds down, where the oracle and the CPU
/// round up. Without such elements the bit-for-bit cast test above would not see that
/// difference.
#[test]
fn cast_sources_hold_values_just_above_half_precision_ties() {
    // Of the f64 bits below the kept `man_bits`: the round bit alone above bit 32, and
    // something in the low 32.
    let above_tie_by_low_bits = |v: f64, man_bits: u32| {
        let shift = 52 - man_bits;
        let rest = v.to_bits() & ((1 << shift) - 1);
        rest >> 32 == 1 << (shift - 33) && rest & 0xffff_ffff != 0
    };
    let f32s = cast_sources(DType::F32).to_f64_vec();
    let n = f32s
        .iter()
        .filter(|&&v| above_tie_by_low_bits(v, 7))
        .count();
    let f64s = cast_sources(DType::F64).to_f64_vec();
    let bf = f64s
        .iter()
        .filter(|&&v| above_tie_by_low_bits(v, 7))
        .count();
    let h = f64s
        .iter()
        .filter(|&&v| above_tie_by_low_bits(v, 10))
        .count();
    assert!(
        n > 0 && bf > 0 && h > 0,
        "sources just above a tie: f32 → bf16 {n}, f64 → bf16 {bf}, f64 → f16 {h}"
    );
}
