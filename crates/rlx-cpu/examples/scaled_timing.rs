//! Time the pieces of a scaled (low-precision) matmul on the CPU executor: the
//! quantization of one operand, the matmul from codes, the whole path in one graph,
//! and the f32 matmul it replaces (best of 15 runs each: the least disturbed on a
//! shared machine).
//!
//! `cargo run --release -p rlx-cpu --example scaled_timing -- [n] [format] [layout] [--rows m]`
//! (defaults: 1024, f8e4m3, mx; `--rows` times the matmul from codes with only the first
//! `m` rows of the left operand, e.g. `--rows 1` for a quantized model's decoding step).

use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, Op, ScaleLayout, ScaledFormat, Shape, TensorData};
use rlx_runtime::{Backend, Device, Executable};
use std::sync::Arc;
use std::time::Instant;

fn best_ms(exe: &Arc<dyn Executable>, args: &[TensorData]) -> f64 {
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).unwrap();
    let mut t: Vec<f64> = (0..15)
        .map(|_| {
            let s = Instant::now();
            exe.run(&views).unwrap();
            s.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    // The fastest run: the least disturbed by other processes on a shared machine.
    t.sort_by(f64::total_cmp);
    t[0]
}

/// `x [n, n]` quantized to `fmt`: outputs the codes and the scales.
fn quant_graph(n: usize, fmt: ScaledFormat, layout: ScaleLayout) -> Graph {
    let mut g = Graph::new("quant");
    let xi = g.input("x", Shape::new(&[n, n], DType::F32));
    let s = g
        .add_op(
            Op::ScaledQuantScale {
                format: fmt,
                scale_layout: layout,
            },
            vec![xi],
        )
        .unwrap();
    let q = g
        .add_op(
            Op::ScaledQuantize {
                format: fmt,
                scale_layout: layout,
            },
            vec![xi, s],
        )
        .unwrap();
    g.set_outputs(vec![q, s]);
    g
}

/// The scaled matmul of `args` (`lq, rq, ls, rs`, shapes taken from them) alone.
fn from_codes(args: &[TensorData; 4], fmt: ScaledFormat, layout: ScaleLayout) -> Graph {
    let mut g = Graph::new("from_codes");
    let ins = ["lq", "rq", "ls", "rs"]
        .iter()
        .zip(args)
        .map(|(&name, t)| g.input(name, t.shape()))
        .collect();
    let op = Op::ScaledMatMul {
        lhs_format: fmt,
        rhs_format: fmt,
        scale_layout: layout,
        has_bias: false,
    };
    let y = g.add_op(op, ins).unwrap();
    g.set_outputs(vec![y]);
    g
}

/// `rows × cols` values in [-3, 3), the same pattern for every shape.
fn x_rows(rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 3.0)
        .collect()
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map_or(1024, |s| s.parse().unwrap());
    let fmt: ScaledFormat = a.get(2).map_or("f8e4m3", |s| s.as_str()).parse().unwrap();
    let layout: ScaleLayout = a.get(3).map_or("mx", |s| s.as_str()).parse().unwrap();
    let x = x_rows(n, n);
    let xd = TensorData::from_f32(&[n, n], &x);

    // Quantization of one operand.
    let exe = CpuBackend
        .compile(Device::Cpu, &quant_graph(n, fmt, layout))
        .unwrap();
    let tq = best_ms(&exe, std::slice::from_ref(&xd));
    let views = [xd.view()];
    let out = exe.run(&views).unwrap();
    let (codes, scales) = (out[0].clone(), out[1].clone());

    let rows = a
        .iter()
        .position(|s| s == "--rows")
        .map(|i| a[i + 1].parse::<usize>().unwrap());
    if let Some(m) = rows {
        let head = |t: &TensorData| {
            let row = t.bytes.len() / n;
            let mut dims = t.dims.clone();
            dims[0] = m;
            TensorData {
                dtype: t.dtype,
                dims,
                bytes: t.bytes[..m * row].to_vec(),
            }
        };
        // Block scales are per row; a per-tensor scale serves any number of rows.
        let lhs_scales = match layout.block() {
            Some(_) => head(&scales),
            None => scales.clone(),
        };
        let scaled_args = [head(&codes), codes.clone(), lhs_scales, scales.clone()];
        let scaled = CpuBackend
            .compile(Device::Cpu, &from_codes(&scaled_args, fmt, layout))
            .unwrap();
        // The f32 product of the same shape.
        let mut g = Graph::new("mm_rows");
        let x = g.input("a", Shape::new(&[m, n], DType::F32));
        let w = g.input("b", Shape::new(&[n, n], DType::F32));
        let y = g.add_op(Op::MatMul, vec![x, w]).unwrap();
        g.set_outputs(vec![y]);
        let f32_mm = CpuBackend.compile(Device::Cpu, &g).unwrap();
        let f32_args = [TensorData::from_f32(&[m, n], &x_rows(m, n)), xd.clone()];
        // Alternated one call each per round, so that both see the same machine; the
        // median of the rounds' ratios is the least sensitive to load that changes.
        let once = |exe: &Arc<dyn Executable>, args: &[TensorData]| {
            let views: Vec<_> = args.iter().map(|a| a.view()).collect();
            let s = Instant::now();
            exe.run(&views).unwrap();
            s.elapsed().as_secs_f64() * 1e3
        };
        once(&scaled, &scaled_args);
        once(&f32_mm, &f32_args);
        let mut rounds: Vec<(f64, f64)> = (0..31)
            .map(|_| (once(&scaled, &scaled_args), once(&f32_mm, &f32_args)))
            .collect();
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let mut ratios: Vec<f64> = rounds.iter().map(|(a, b)| a / b).collect();
        let (mut ts, mut tf): (Vec<f64>, Vec<f64>) = rounds.drain(..).unzip();
        println!(
            "{m} × {n} × {n}, {fmt} {layout}: scaled matmul from codes {:.3} ms, f32 matmul {:.3} ms (medians of 31 alternated rounds; paired ratio {:.2}× its time)",
            median(&mut ts),
            median(&mut tf),
            median(&mut ratios)
        );
        return;
    }

    // The matmul from codes.
    let args = [codes.clone(), codes.clone(), scales.clone(), scales.clone()];
    let exe = CpuBackend
        .compile(Device::Cpu, &from_codes(&args, fmt, layout))
        .unwrap();
    let tm = best_ms(&exe, &args);
    // The whole path in one graph (as `Tensor::scaled_matmul` builds it).
    let mut g = Graph::new("full");
    let xs = [
        g.input("a", Shape::new(&[n, n], DType::F32)),
        g.input("bt", Shape::new(&[n, n], DType::F32)),
    ];
    let mut qs = Vec::new();
    let mut ss = Vec::new();
    for &x in &xs {
        let s = g
            .add_op(
                Op::ScaledQuantScale {
                    format: fmt,
                    scale_layout: layout,
                },
                vec![x],
            )
            .unwrap();
        qs.push(
            g.add_op(
                Op::ScaledQuantize {
                    format: fmt,
                    scale_layout: layout,
                },
                vec![x, s],
            )
            .unwrap(),
        );
        ss.push(s);
    }
    let y = g
        .add_op(
            Op::ScaledMatMul {
                lhs_format: fmt,
                rhs_format: fmt,
                scale_layout: layout,
                has_bias: false,
            },
            vec![qs[0], qs[1], ss[0], ss[1]],
        )
        .unwrap();
    g.set_outputs(vec![y]);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let tfull = best_ms(&exe, &[xd.clone(), xd.clone()]);
    if a.iter().any(|s| s == "--explain") {
        println!("{}", exe.explain());
    }

    // The f32 matmul.
    let mut g = Graph::new("mm");
    let a = g.input("a", Shape::new(&[n, n], DType::F32));
    let b = g.input("b", Shape::new(&[n, n], DType::F32));
    let y = g.add_op(Op::MatMul, vec![a, b]).unwrap();
    g.set_outputs(vec![y]);
    let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
    let tf = best_ms(&exe, &[xd.clone(), xd.clone()]);
    // Quantization again, now that GEMMs have run on these threads (their AVX-512
    // kernels leave the upper vector state dirty; see `clean_upper`).
    let exe = CpuBackend
        .compile(Device::Cpu, &quant_graph(n, fmt, layout))
        .unwrap();
    let tq2 = best_ms(&exe, std::slice::from_ref(&xd));

    println!(
        "n = {n}, {fmt} {layout}: quantize one operand {tq:.2} ms ({tq2:.2} ms after GEMMs), scaled matmul from codes {tm:.2} ms, \
         f32 matmul {tf:.2} ms; the whole scaled path in one graph {tfull:.2} ms = {:.2}× the f32 matmul",
        tfull / tf
    );
}
