//! `Op::Cumsum` on the CPU backend (exec/cumsum.rs) against the oracle, byte for byte:
//! every rank 1-4 axis (positive and negative), inclusive and exclusive, float and
//! integer dtypes, empty/one/odd/long axes, NaN/±inf/-0, sums that an f32 running sum
//! would round differently (so the f64 accumulation is proved), integer wrap-around, and
//! the same bytes for one, two and three threads.

use super::{oracle, run};
use rlx_ir::{DType, Graph, Op, Shape, TensorData};
use rlx_testkit::{Rng, op};

const DTYPES: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I8,
    DType::U8,
    DType::I16,
    DType::I32,
    DType::U32,
    DType::I64,
];

fn cumsum_graph(dims: &[usize], dt: DType, axis: i32, exclusive: bool) -> Graph {
    let mut g = Graph::new("cumsum");
    let x = g.input("x", Shape::new(dims, dt));
    let y = op(&mut g, Op::Cumsum { axis, exclusive }, vec![x]);
    g.set_outputs(vec![y]);
    g
}

/// Random values of `dt`: floats mix small values, large ones, NaN (one with a
/// payload), ±inf and -0; integers are random bytes (full range, so sums wrap).
fn data(rng: &mut Rng, dims: &[usize], dt: DType, specials: bool) -> TensorData {
    let n: usize = dims.iter().product();
    if dt.is_int() {
        let bytes = (0..n * dt.size_bytes())
            .map(|_| rng.below(256) as u8)
            .collect();
        return TensorData::new(dt, dims, bytes).unwrap();
    }
    let pool = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        -0.0,
        1e8,
        3e38,
        1e-8,
    ];
    let v: Vec<f64> = (0..n)
        .map(|_| {
            if specials && rng.chance(0.1) {
                pool[rng.below(pool.len())]
            } else {
                (rng.uniform() * 2.0 - 1.0) * 100.0
            }
        })
        .collect();
    let mut t = TensorData::from_f64_as(dt, dims, &v);
    if dt == DType::F32 && n > 0 && specials {
        t.bytes[..4].copy_from_slice(&0x7fc0_1234u32.to_le_bytes());
    }
    t
}

fn check(dims: &[usize], dt: DType, axis: i32, exclusive: bool, x: &TensorData) {
    let g = cumsum_graph(dims, dt, axis, exclusive);
    let args = [x.clone()];
    let got = run(&g, &args);
    let want = oracle(&g, &args);
    assert_eq!(got[0].dtype, want[0].dtype);
    assert_eq!(got[0].dims, want[0].dims);
    assert!(
        got[0].bytes == want[0].bytes,
        "cumsum {dt} dims {dims:?} axis {axis} exclusive {exclusive}: bytes differ from the oracle"
    );
}

#[test]
fn cumsum_matches_the_oracles_bytes_for_every_rank_axis_dtype_and_mode() {
    let mut rng = Rng::new(71);
    let mut cases = 0;
    for rank in 1..=4usize {
        for &dt in &DTYPES {
            for rep in 0..3 {
                // Axis lengths 0..=5 plus an occasional odd, longer one.
                let dims: Vec<usize> = (0..rank)
                    .map(|_| match rng.below(8) {
                        0 if rep > 0 => 0,
                        1 => 1,
                        2 => 9,
                        _ => 2 + rng.below(4),
                    })
                    .collect();
                let x = data(&mut rng, &dims, dt, rep != 1);
                for a in 0..rank as i32 {
                    for axis in [a, a - rank as i32] {
                        for exclusive in [false, true] {
                            check(&dims, dt, axis, exclusive, &x);
                            cases += 1;
                        }
                    }
                }
            }
        }
    }
    assert_eq!(cases, 3 * 10 * 2 * 2 * (1 + 2 + 3 + 4));
}

#[test]
fn cumsum_along_a_10000_long_axis_keeps_an_f64_running_sum() {
    // 1e8 then ones: an f32 running sum stays at 1e8 (its ulp there is 8), the f64 one
    // reaches 1e8 + k, rounded once per output.
    let n = 10_000;
    let mut v = vec![1.0f32; n];
    v[0] = 1e8;
    for (dims, axis) in [(vec![n], 0), (vec![2, n], 1), (vec![n, 1], 0)] {
        let mut vals = v.clone();
        if dims[0] == 2 {
            vals.extend(v.iter().map(|x| -x));
        }
        let x = TensorData::from_f32(&dims, &vals);
        for exclusive in [false, true] {
            check(&dims, DType::F32, axis, exclusive, &x);
        }
        let g = cumsum_graph(&dims, DType::F32, axis, false);
        let got = run(&g, &[x])[0].to_f32_vec();
        assert_eq!(got[n - 1], (1e8f64 + (n - 1) as f64) as f32);
        assert_ne!(got[n - 1], 1e8f32, "an f32 running sum would give 1e8");
    }
    // Half precision: the f64 prefix is rounded to f16/bf16 once per output.
    for dt in [DType::F16, DType::BF16, DType::F64] {
        let mut rng = Rng::new(5);
        let x = data(&mut rng, &[3, n], dt, true);
        check(&[3, n], dt, -1, false, &x);
        check(&[3, n], dt, 1, true, &x);
    }
    // Integers wrap: 10_000 × 100 in i8 (and i32 past 2³¹).
    let x = TensorData::from_i64_as(DType::I8, &[n], &vec![100; n]);
    check(&[n], DType::I8, 0, false, &x);
    let g = cumsum_graph(&[n], DType::I8, 0, false);
    let got = run(&g, &[x])[0].to_i64_vec();
    assert_eq!(got[n - 1], (100i64 * n as i64) as i8 as i64);
    let x = TensorData::from_i64_as(DType::I32, &[n], &vec![1 << 20; n]);
    check(&[n], DType::I32, 0, true, &x);
}

#[test]
fn cumsum_has_the_same_bytes_for_one_two_and_three_threads() {
    let mut rng = Rng::new(9);
    // Large enough to be split into parallel tasks (several blocks each).
    let cases: [(&[usize], i32); 4] = [
        (&[64, 3001], 1),
        (&[9, 1001, 7], 1),
        (&[40_000], 0),
        (&[300, 5, 40], -3),
    ];
    for (dims, axis) in cases {
        for dt in [DType::F32, DType::BF16, DType::I32] {
            let x = data(&mut rng, dims, dt, true);
            let g = cumsum_graph(dims, dt, axis, false);
            let args = [x.clone()];
            let on = |threads: usize| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| run(&g, &args))
            };
            let one = on(1);
            for threads in [2, 3] {
                assert!(
                    one[0].bytes == on(threads)[0].bytes,
                    "cumsum {dt} {dims:?}: 1 vs {threads} threads"
                );
            }
            assert!(one[0].bytes == oracle(&g, &args)[0].bytes, "{dt} {dims:?}");
        }
    }
}

/// Rough timing for the report: `cargo test ... cumsum_timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn cumsum_timing_native_vs_oracle() {
    let dims = [1024, 1024];
    let mut rng = Rng::new(1);
    let x = data(&mut rng, &dims, DType::F32, false);
    let g = cumsum_graph(&dims, DType::F32, -1, false);
    let args = [x];
    let _ = run(&g, &args);
    let t = std::time::Instant::now();
    let got = run(&g, &args);
    let native = t.elapsed();
    let t = std::time::Instant::now();
    let want = oracle(&g, &args);
    let slow = t.elapsed();
    assert!(got[0].bytes == want[0].bytes);
    println!("cumsum [1024, 1024] f32 last axis: native {native:?}, oracle {slow:?}");
}
