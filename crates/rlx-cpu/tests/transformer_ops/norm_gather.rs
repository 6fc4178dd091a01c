//! LayerNorm / RMSNorm forward rows (statistics in 32 lanes) and the embedding gather's
//! row copies (split over the threads) against the oracle: rows of 1, 7, 256 and 1000
//! elements, a dynamic row count, NaN and ∞ in a row; gathers bit for bit, including
//! negative ids, a gather along an inner axis, and out-of-range ids still refused.

use super::{bits, oracle, run};
use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Dim, Graph, NodeId, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device};
use rlx_testkit::{Rng, close, op};

/// `norm(x; γ, β)` over the last axis of `x_shape` (`c` long).
fn norm_graph(x_shape: Shape, c: usize, rms: bool) -> Graph {
    let mut g = Graph::new("norm_fwd");
    let x = g.input("x", x_shape);
    let gamma = g.input("gamma", Shape::new(&[c], DType::F32));
    let beta = g.input("beta", Shape::new(&[c], DType::F32));
    let (axis, eps) = (-1, 1e-5);
    let o = if rms {
        Op::RmsNorm { axis, eps }
    } else {
        Op::LayerNorm { axis, eps }
    };
    let y = op(&mut g, o, vec![x, gamma, beta]);
    g.set_outputs(vec![y]);
    g
}

/// x (values spread around a shifted mean, so a one-pass variance would cancel), γ, β.
fn norm_args(r: usize, c: usize, seed: u64) -> Vec<TensorData> {
    let mut rng = Rng::new(seed);
    let mut v = |n: usize, scale: f64, shift: f64| -> Vec<f32> {
        (0..n)
            .map(|_| ((rng.uniform() * 2.0 - 1.0) * scale + shift) as f32)
            .collect()
    };
    vec![
        TensorData::from_f32(&[r, c], &v(r * c, 3.0, 40.0)),
        TensorData::from_f32(&[c], &v(c, 0.2, 1.0)),
        TensorData::from_f32(&[c], &v(c, 0.2, 0.0)),
    ]
}

#[test]
fn norm_forward_rows_of_1_7_256_and_1000_match_the_oracle() {
    for c in [1usize, 7, 256, 1000] {
        for r in [1usize, 3, 64] {
            for rms in [false, true] {
                let g = norm_graph(Shape::new(&[r, c], DType::F32), c, rms);
                let a = norm_args(r, c, (r * 31 + c) as u64);
                let (got, want) = (run(&g, &a), oracle(&g, &a));
                // One f32 rounding of the statistics and a few of the normalization.
                close(&got[0], &want[0], 2e-6);
            }
        }
    }
}

#[test]
fn norm_forward_over_a_dynamic_row_count_matches_the_oracle_at_each_size() {
    for rms in [false, true] {
        let shape = Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(256)], DType::F32);
        let g = norm_graph(shape, 256, rms);
        let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
        for r in [1usize, 1000, 7, 1] {
            let a = norm_args(r, 256, r as u64);
            let views: Vec<_> = a.iter().map(|t| t.view()).collect();
            let got = exe.run(&views).unwrap();
            close(&got[0], &oracle(&g, &a)[0], 2e-6);
        }
    }
}

#[test]
fn norm_forward_rows_holding_nan_or_infinity_become_nan_as_in_the_oracle() {
    for c in [7usize, 256, 1000] {
        for rms in [false, true] {
            let g = norm_graph(Shape::new(&[4, c], DType::F32), c, rms);
            let mut a = norm_args(4, c, 5);
            let mut x = a[0].to_f32_vec();
            x[c + c / 2] = f32::NAN; // row 1
            x[2 * c] = f32::INFINITY; // row 2
            x[3 * c + c - 1] = 3e38; // row 3: finite, its square overflows f32
            a[0] = TensorData::from_f32(&[4, c], &x);
            let (got, want) = (run(&g, &a), oracle(&g, &a));
            let (y, w) = (got[0].to_f32_vec(), want[0].to_f32_vec());
            for row in 0..4 {
                let (ys, ws) = (&y[row * c..(row + 1) * c], &w[row * c..(row + 1) * c]);
                for (j, (p, q)) in ys.iter().zip(ws).enumerate() {
                    assert_eq!(p.is_nan(), q.is_nan(), "c={c} rms={rms} row {row} el {j}");
                    if !q.is_nan() {
                        assert!(
                            (p - q).abs() <= 2e-6 * (1.0 + q.abs()),
                            "c={c} rms={rms} row {row} el {j}: {p} vs {q}"
                        );
                    }
                }
            }
            assert!(
                y[c..2 * c].iter().all(|v| v.is_nan()),
                "a NaN row stays NaN"
            );
            // The rows without NaN or ∞ are finite.
            assert!(y[..c].iter().chain(&y[3 * c..]).all(|v| v.is_finite()));
        }
    }
}

/// `table.gather(ids, axis)`.
fn gather_graph(table: Shape, ids: Shape, axis: usize) -> (Graph, NodeId) {
    let mut g = Graph::new("gather");
    let t = g.input("table", table);
    let i = g.input("ids", ids);
    let y = op(&mut g, Op::Gather { axis }, vec![t, i]);
    g.set_outputs(vec![y]);
    (g, y)
}

#[test]
fn embedding_gathers_split_over_threads_copy_the_oracles_rows_exactly() {
    let mut rng = Rng::new(3);
    // (table dims, ids count, axis): W11's [512, 256] by 1024 ids (1 MiB: several
    // chunks), rows of one element, a gather along an inner axis, a single id.
    let cases: [(&[usize], usize, usize); 5] = [
        (&[512, 256], 1024, 0),
        (&[300, 1], 5000, 0),
        (&[6, 50, 300], 700, 1),
        (&[4, 9], 1, 0),
        (&[2000, 600], 2048, 0),
    ];
    for (dims, k, axis) in cases {
        let n = dims[axis] as i64;
        // Negative ids count from the end.
        let ids: Vec<i64> = (0..k)
            .map(|_| rng.below(2 * n as usize) as i64 - n)
            .collect();
        let (g, _) = gather_graph(
            Shape::new(dims, DType::F32),
            Shape::new(&[k], DType::I32),
            axis,
        );
        let numel: usize = dims.iter().product();
        let table: Vec<f32> = (0..numel).map(|i| i as f32 * 0.5 - 7.0).collect();
        let a = vec![
            TensorData::from_f32(dims, &table),
            TensorData::from_i64_as(DType::I32, &[k], &ids),
        ];
        let (got, want) = (run(&g, &a), oracle(&g, &a));
        assert_eq!(got[0].dims, want[0].dims, "{dims:?} axis {axis}");
        assert_eq!(bits(&got[0]), bits(&want[0]), "{dims:?} axis {axis}");
    }
}

#[test]
fn a_gathers_out_of_range_id_is_refused_by_name() {
    let (g, _) = gather_graph(
        Shape::new(&[512, 256], DType::F32),
        Shape::new(&[1024], DType::I32),
        0,
    );
    let mut ids = vec![1i64; 1024];
    ids[900] = 512;
    let a = [
        TensorData::from_f32(&[512, 256], &vec![0.0; 512 * 256]),
        TensorData::from_i64_as(DType::I32, &[1024], &ids),
    ];
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let views: Vec<_> = a.iter().map(|t| t.view()).collect();
    let err = exe.run(&views).unwrap_err().to_string();
    assert!(
        err.contains("gather") && err.contains("512") && err.contains("out of range"),
        "{err}"
    );
}
