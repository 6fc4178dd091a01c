//! Tiled contractions lowered to the loop IR, run by its reference interpreter (each
//! work-group simulated item by item between barriers, with race checks), against the
//! `rlx-ir` oracle and against a serial fold in the compute type.
//!
//! The oracle accumulates floats in f64 and rounds once; the lowering folds in f32 for
//! f32/f16/bf16 (in index order, whatever the tile). So: f64 and integer results equal
//! the oracle bit for bit; f32 results equal a host fold `acc = fma(a, b, acc)` in f32
//! bit for bit and the oracle within the fold's error bound `K · 2⁻²⁴ · Σ|a·b|`; f16/bf16
//! results equal the f32 fold rounded once to the dtype bit for bit.

use super::tests::run_loops;
use crate::loops::{self, LoopKernel};
use crate::program::{KernelKind, Program};
use crate::{CompileOptions, compile};
use rlx_ir::{
    Activation, BinaryOp, DType, Dim, DimBinding, Graph, NodeId, Op, Shape, TensorData, interp,
};

fn op(g: &mut Graph, o: Op, inputs: Vec<NodeId>) -> NodeId {
    g.add_op(o, inputs).unwrap_or_else(|e| panic!("{e}"))
}

/// Values in about [−2, 2] with many significant bits (so f32 sums round), in `dt`.
fn values(dt: DType, n: usize, seed: u64) -> TensorData {
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) % 40_001) as f32 / 10_000.0 - 2.0
        })
        .collect();
    match dt {
        DType::F32 => TensorData::from_f32(&[n], &v),
        DType::F16 | DType::BF16 => {
            let w: Vec<f64> = v.iter().map(|&x| x as f64).collect();
            TensorData::from_f64_as(dt, &[n], &w)
        }
        DType::F64 => TensorData::from_f64(&[n], &v.iter().map(|&x| x as f64).collect::<Vec<_>>()),
        _ => {
            let i: Vec<i64> = v.iter().map(|&x| (x * 60.0) as i64).collect();
            TensorData::from_i64_as(dt, &[n], &i)
        }
    }
}

fn shaped(d: TensorData, dims: &[usize]) -> TensorData {
    TensorData::new(d.dtype, dims, d.bytes).unwrap()
}

/// The only contraction of `p`, lowered.
fn matmul_kernel(p: &Program) -> LoopKernel {
    let k = p
        .kernels
        .iter()
        .position(|k| matches!(k.kind, KernelKind::Contraction { .. }))
        .expect("a contraction kernel");
    loops::lower_kernel(p, k).expect("lowered")
}

/// `a · b` (`[.., M, K] × [.., K, N]`, dense, batch axes equal) folded serially in f32,
/// one fused multiply-add per product.
fn f32_fold(a: &[f32], b: &[f32], batch: usize, m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(batch * m * n);
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let mut acc = 0f32;
                for t in 0..k {
                    acc = a[(z * m + i) * k + t].mul_add(b[(z * k + t) * n + j], acc);
                }
                out.push(acc);
            }
        }
    }
    out
}

/// A graph `a · b` over dense `[batch?, M, K]` and `[batch?, K, N]` inputs (`ta`/`tb`:
/// the operand is stored transposed and transposed back in the graph).
fn product(
    dt: DType,
    batch: Option<usize>,
    (m, k, n): (usize, usize, usize),
    ta: bool,
    tb: bool,
) -> Graph {
    let mut g = Graph::new("mm");
    let dims = |rows: usize, cols: usize, t: bool| {
        let (r, c) = if t { (cols, rows) } else { (rows, cols) };
        let mut d: Vec<usize> = batch.into_iter().collect();
        d.extend([r, c]);
        d
    };
    let (ad, bd) = (dims(m, k, ta), dims(k, n, tb));
    let mut a = g.input("a", Shape::new(&ad, dt));
    let mut b = g.input("b", Shape::new(&bd, dt));
    let swap = |r: usize| {
        let mut p: Vec<usize> = (0..r).collect();
        p.swap(r - 2, r - 1);
        Op::Transpose { perm: p }
    };
    if ta {
        a = op(&mut g, swap(ad.len()), vec![a]);
    }
    if tb {
        b = op(&mut g, swap(bd.len()), vec![b]);
    }
    let y = op(&mut g, Op::MatMul, vec![a, b]);
    g.set_outputs(vec![y]);
    g
}

/// The dense `[batch, rows, cols]` values of an input stored transposed when `t`.
fn logical(d: &TensorData, batch: usize, rows: usize, cols: usize, t: bool) -> Vec<f32> {
    let v = d.to_f32_vec();
    if !t {
        return v;
    }
    let mut out = Vec::with_capacity(v.len());
    for z in 0..batch {
        for i in 0..rows {
            for j in 0..cols {
                out.push(v[(z * cols + j) * rows + i]);
            }
        }
    }
    out
}

const SHAPES: [(usize, usize, usize); 10] = [
    (4, 0, 5),
    (1, 1, 1),
    (1, 70, 33),
    (70, 1, 5),
    (67, 65, 17),
    (64, 64, 16),
    (3, 130, 1),
    (130, 3, 40),
    (17, 19, 0),
    (5, 7, 3),
];

#[test]
fn f32_products_fold_in_index_order_whatever_the_tile_edges_and_transposes() {
    for (s, &(m, k, n)) in SHAPES.iter().enumerate() {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            for batch in [None, Some(2)] {
                let g = product(DType::F32, batch, (m, k, n), ta, tb);
                let p = compile(&g, &CompileOptions::default()).unwrap();
                let lk = matmul_kernel(&p);
                let big = m >= 64 && n >= 64;
                assert_eq!(lk.group, Some(256), "{m}x{k}x{n}");
                assert_eq!(lk.shared[0].len, if big { 64 * 16 } else { 16 * 16 });
                let z = batch.unwrap_or(1);
                let (ar, ac) = if ta { (k, m) } else { (m, k) };
                let (br, bc) = if tb { (n, k) } else { (k, n) };
                let mut ad: Vec<usize> = batch.into_iter().collect();
                ad.extend([ar, ac]);
                let mut bd: Vec<usize> = batch.into_iter().collect();
                bd.extend([br, bc]);
                let a = shaped(values(DType::F32, z * m * k, 2 * s as u64 + 1), &ad);
                let b = shaped(values(DType::F32, z * k * n, 2 * s as u64 + 2), &bd);
                let what = format!("{batch:?} {m}x{k}x{n} ta={ta} tb={tb}");
                let fold = f32_fold(
                    &logical(&a, z, m, k, ta),
                    &logical(&b, z, k, n, tb),
                    z,
                    m,
                    k,
                    n,
                );
                let inputs = [("a", a.clone()), ("b", b.clone())];
                let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap()[0].to_f32_vec();
                let want = interp::run(&g, &inputs).unwrap()[0].to_f64_vec();
                assert_eq!(got.len(), fold.len(), "{what}");
                for (i, ((g, f), w)) in got.iter().zip(&fold).zip(&want).enumerate() {
                    assert_eq!(
                        g.to_bits(),
                        f.to_bits(),
                        "{what}: element {i} vs the f32 fold"
                    );
                    // |a·b| ≤ 4 per term.
                    let bound = (k as f64) * (k as f64) * 4.0 * 2f64.powi(-24) + 1e-30;
                    assert!(
                        (*g as f64 - w).abs() <= bound,
                        "{what}: element {i}: {g} vs oracle {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn half_precision_products_accumulate_in_f32_and_round_once() {
    for dt in [DType::F16, DType::BF16] {
        for (s, &(m, k, n)) in SHAPES.iter().enumerate() {
            let g = product(dt, None, (m, k, n), false, s % 2 == 1);
            let p = compile(&g, &CompileOptions::default()).unwrap();
            let bd = if s % 2 == 1 { [n, k] } else { [k, n] };
            let a = shaped(values(dt, m * k, s as u64 + 11), &[m, k]);
            let b = shaped(values(dt, k * n, s as u64 + 12), &bd);
            let fold = f32_fold(
                &a.to_f32_vec(),
                &logical(&b, 1, k, n, s % 2 == 1),
                1,
                m,
                k,
                n,
            );
            let inputs = [("a", a), ("b", b)];
            let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap()[0].clone();
            assert_eq!(got.dtype, dt);
            let want = interp::run(&g, &inputs).unwrap()[0].to_f64_vec();
            for (i, ((g, f), w)) in got.to_f32_vec().iter().zip(&fold).zip(&want).enumerate() {
                let once = match dt {
                    DType::F16 => half::f16::from_f32(*f).to_f32(),
                    _ => half::bf16::from_f32(*f).to_f32(),
                };
                let what = format!("{dt:?} {m}x{k}x{n} element {i}");
                assert_eq!(
                    g.to_bits(),
                    once.to_bits(),
                    "{what}: vs the f32 fold rounded once"
                );
                // One dtype ulp plus the f32 fold's error.
                let ulp = if dt == DType::F16 {
                    2f64.powi(-10)
                } else {
                    2f64.powi(-7)
                };
                let tol = w.abs().max(2f64.powi(-14)) * ulp + (k * k) as f64 * 4.0 * 2f64.powi(-24);
                assert!((*g as f64 - w).abs() <= tol, "{what}: {g} vs oracle {w}");
            }
        }
    }
}

#[test]
fn f64_and_integer_products_equal_the_oracle_bit_for_bit() {
    for dt in [DType::F64, DType::I32, DType::I8, DType::I64] {
        for (s, &(m, k, n)) in SHAPES.iter().enumerate() {
            let g = product(dt, Some(3), (m, k, n), s % 3 == 0, s % 2 == 0);
            let p = compile(&g, &CompileOptions::default()).unwrap();
            let ad = if s % 3 == 0 { [3, k, m] } else { [3, m, k] };
            let bd = if s % 2 == 0 { [3, n, k] } else { [3, k, n] };
            let inputs = [
                ("a", shaped(values(dt, 3 * m * k, s as u64 + 21), &ad)),
                ("b", shaped(values(dt, 3 * k * n, s as u64 + 22), &bd)),
            ];
            let got = run_loops(&p, &inputs, &DimBinding::new()).unwrap();
            let want = interp::run(&g, &inputs).unwrap();
            assert_eq!(got[0].dims, want[0].dims);
            assert_eq!(got[0].bytes, want[0].bytes, "{dt:?} {m}x{k}x{n}");
        }
    }
}

#[test]
fn broadcast_batches_dynamic_dims_and_fused_epilogues_at_tile_edges_match_the_oracle() {
    // [?0, 3, M, K] · [3, K, N] (broadcast batch), + bias, tanh-GELU, over dynamic rows.
    let d = Dim::Dynamic(0);
    for (m, k, n) in [(65, 9, 70), (5, 30, 3)] {
        let mut g = Graph::new("mm_epi");
        let a = g.input(
            "a",
            Shape::from_dims(
                &[d, Dim::Static(3), Dim::Static(m), Dim::Static(k)],
                DType::F64,
            ),
        );
        let b = g.input("b", Shape::new(&[3, k, n], DType::F64));
        let bias = g.input("bias", Shape::new(&[n], DType::F64));
        let y = op(&mut g, Op::MatMul, vec![a, b]);
        let y = op(&mut g, Op::Binary(BinaryOp::Add), vec![y, bias]);
        let y = op(&mut g, Op::Activation(Activation::Relu), vec![y]);
        g.set_outputs(vec![y]);
        let p = compile(&g, &CompileOptions::default()).unwrap();
        let lk = matmul_kernel(&p);
        assert_eq!(lk.dims, vec![0], "the batch is a kernel parameter");
        for z in [0usize, 1, 2] {
            let binding: DimBinding = [(0, z)].into_iter().collect();
            let inputs = [
                (
                    "a",
                    shaped(values(DType::F64, z * 3 * m * k, 31), &[z, 3, m, k]),
                ),
                ("b", shaped(values(DType::F64, 3 * k * n, 32), &[3, k, n])),
                ("bias", shaped(values(DType::F64, n, 33), &[n])),
            ];
            let got = run_loops(&p, &inputs, &binding).unwrap();
            let want = interp::run(&g, &inputs).unwrap();
            assert_eq!(got[0].dims, want[0].dims);
            assert_eq!(got[0].bytes, want[0].bytes, "{m}x{k}x{n} batch {z}");
        }
    }
}

#[test]
fn skinny_products_use_one_output_per_item_and_square_ones_four_by_four_blocks() {
    assert_eq!(loops::matmul_tile(Dim::Static(1), Dim::Static(4096)), 16);
    assert_eq!(loops::matmul_tile(Dim::Static(64), Dim::Static(64)), 64);
    assert_eq!(loops::matmul_tile(Dim::Dynamic(0), Dim::Static(128)), 64);
    let g = product(DType::F32, None, (128, 8, 96), false, false);
    let p = compile(&g, &CompileOptions::default()).unwrap();
    let lk = matmul_kernel(&p);
    // 2 × 2 tiles of 64, 16 accumulators per item, A and B slices in shared memory.
    assert_eq!(lk.items, crate::loops::build::int(4));
    assert_eq!(lk.shared.len(), 2);
    assert_eq!((lk.shared[0].len, lk.shared[1].len), (64 * 16, 16 * 64));
    let wgsl = loops::render_wgsl(&lk).expect("renders");
    assert!(wgsl.contains("workgroupBarrier()"), "{wgsl}");
    let c = loops::render_c(&lk, loops::Dialect::Cuda);
    assert!(
        c.contains("__syncthreads()") && c.contains("__shared__"),
        "{c}"
    );
}
