//! Throughput of the f32 GEMM (`rlx_cpu::gemm::sgemm`) alone at the shapes of the W6
//! training step (including its narrow products with N or K = 10) and at 1024³: on 1
//! and 2 threads, with the operands transposed, and as two explicit single-threaded
//! halves side by side (the split `sgemm` itself uses on two threads; faer's own
//! two-thread matmul reached only 337–435 GFLOP/s on these shapes). Best of 30 warm
//! calls. Compare with the per-kernel times `RLX_PROFILE=1` reports for the same GEMMs
//! inside a program.
//!
//! `cargo run --release -p rlx-cpu --example gemm_shapes`

use rlx_cpu::gemm::{MatMut, MatRef, sgemm};
fn bench(m: usize, k: usize, n: usize, threads: usize, trans: bool) -> f64 {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; m * n];
    let mut best = f64::MAX;
    for _ in 0..30 {
        let t = std::time::Instant::now();
        if trans {
            // Cᵀ (n×m, col-major view of row-major C) = Bᵀ·Aᵀ
            let bt = MatRef::row_major(&b, k, n).t();
            let at = MatRef::row_major(&a, m, k).t();
            let mut ct = MatMut::row_major(&mut c, m, n);
            (ct.rows, ct.cols, ct.row_stride, ct.col_stride) = (n, m, 1, n as isize);
            sgemm(1.0, bt, at, 0.0, ct, threads);
        } else {
            sgemm(
                1.0,
                MatRef::row_major(&a, m, k),
                MatRef::row_major(&b, k, n),
                0.0,
                MatMut::row_major(&mut c, m, n),
                threads,
            );
        }
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * (m * n * k) as f64 / best / 1e9
}

/// Two single-threaded GEMMs side by side, each over half of C's rows.
fn bench_split(m: usize, k: usize, n: usize) -> f64 {
    let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 * 0.1).collect();
    let mut c = vec![0f32; m * n];
    let h = m / 2;
    let mut best = f64::MAX;
    for _ in 0..30 {
        let t = std::time::Instant::now();
        let (c0, c1) = c.split_at_mut(h * n);
        let (a0, a1) = a.split_at(h * k);
        rayon::join(
            || {
                sgemm(
                    1.0,
                    MatRef::row_major(a0, h, k),
                    MatRef::row_major(&b, k, n),
                    0.0,
                    MatMut::row_major(c0, h, n),
                    1,
                )
            },
            || {
                sgemm(
                    1.0,
                    MatRef::row_major(a1, m - h, k),
                    MatRef::row_major(&b, k, n),
                    0.0,
                    MatMut::row_major(c1, m - h, n),
                    1,
                )
            },
        );
        best = best.min(t.elapsed().as_secs_f64());
    }
    2.0 * (m * n * k) as f64 / best / 1e9
}
fn main() {
    for &(m, k, n) in &[
        (256, 784, 512),
        (256, 512, 512),
        (784, 256, 512),
        (512, 256, 512),
        (256, 512, 10),
        (512, 256, 10),
        (256, 10, 512),
        (1024, 1024, 1024),
    ] {
        println!(
            "{m}x{k}x{n}: 1t {:.0}  2t {:.0}  2t-trans {:.0}  2x1t rows {:.0} GFLOP/s",
            bench(m, k, n, 1, false),
            bench(m, k, n, 2, false),
            bench(m, k, n, 2, true),
            bench_split(m, k, n)
        );
    }
}
