//! Per-element cost of the error-function kernels (exact GELU, erf) on each path:
//! `cargo run --release -p rlx-cpu --example gelu_timing`. Prints the median and best of
//! interleaved runs in ns per element; the slice rows and the `graph` rows (a one-op
//! graph, JIT on and off) run 1 thread on 2¹⁶ elements, the `row` rows the OPS bench's
//! [1024, 1024] GELU forward and its backward `g·GELU'(u)` (the reverse-mode graph) on 1
//! and 2 threads, in ns per element of wall time (`jit=true phi=0`: compiled with
//! `RLX_GELU_PHI=0`, exact GELU without its Φ table; `jit=true grad=0`: compiled with
//! `RLX_GELU_GRAD=0`, the backward's erf/exp chain without its fused `GELU′` table).
//! `ONLY=<substring>` picks cases, `REPS` sets the number of interleaved runs (41).

use rlx_cpu::CpuBackend;
use rlx_cpu::math::{self, Isa};
use rlx_ir::{Activation, DType, Graph, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device, Executable};
use std::sync::Arc;
use std::time::Instant;

const N: usize = 1 << 16;
/// The OPS bench's MLP hidden [1024, 1024].
const ROW: usize = 1 << 20;

type Case = (String, usize, usize, Box<dyn FnMut()>);

/// Inputs spread over [−4, 4) (GELU's interesting range) by a low-discrepancy sequence.
/// (Below −4 exact GELU takes its tail kernel: the `row` cases use [`normal`] inputs.)
fn spread(n: usize, seed: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((i as f32 * 0.618_034 + seed).fract() - 0.5) * 8.0)
        .collect()
}

/// `n` samples of N(0, σ²) (Box–Muller on a 64-bit LCG): the OPS bench's GELU input is
/// N(0, 1.5²), of which 0.4 % lies below −4, where exact GELU runs its tail kernel.
fn normal(n: usize, sigma: f32, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut unit = || {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((s >> 40) as f64 + 0.5) / (1u64 << 24) as f64
    };
    (0..n)
        .map(|_| {
            let (a, b) = (unit(), unit());
            ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32 * sigma
        })
        .collect()
}

/// `u ↦ gelu(u)` over `[n]`, and its reverse-mode graph `(u, d_output) ↦ d_output·gelu'(u)`.
fn gelu_graphs(n: usize) -> (Graph, Graph) {
    let mut g = Graph::new("gelu");
    let a = g.input("u", Shape::new(&[n], DType::F32));
    let r = g.add_op(Op::Activation(Activation::Gelu), vec![a]).unwrap();
    g.set_outputs(vec![r]);
    let bwd = rlx_compile::autodiff::vjp_graph(&g, &[a]).expect("gelu differentiates");
    (g, bwd)
}

fn compile(g: &Graph, jit: bool) -> Arc<dyn Executable> {
    rlx_cpu::set_jit(jit);
    CpuBackend.compile(Device::Cpu, g).unwrap()
}

fn main() {
    let x = spread(N, 0.0);
    let mut out = vec![0f32; N];
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(41);
    let mut cases: Vec<Case> = Vec::new();
    let isas = [Isa::Avx512, Isa::Avx2Fma];
    for act in [Activation::Gelu, Activation::Erf, Activation::Exp] {
        for isa in isas.into_iter().filter(|i| i.is_available()) {
            let (xr, or) = (x.clone(), &mut out as *mut Vec<f32>);
            cases.push((
                format!("{} {isa:?}", act.name()),
                1,
                N,
                Box::new(move || {
                    // SAFETY: `out` outlives every case and the cases run one at a time.
                    let o = unsafe { &mut *or };
                    math::unary_f32_with(isa, act, &xr, o);
                    std::hint::black_box(&o);
                }),
            ));
        }
        for jit in [true, false] {
            let mut g = Graph::new("act");
            let a = g.input("x", Shape::new(&[N], DType::F32));
            let r = g.add_op(Op::Activation(act), vec![a]).unwrap();
            g.set_outputs(vec![r]);
            let exe = compile(&g, jit);
            let data = TensorData::from_f32(&[N], &x);
            cases.push((
                format!("{} graph jit={jit}", act.name()),
                1,
                N,
                Box::new(move || {
                    rlx_cpu::set_jit(jit);
                    std::hint::black_box(exe.run(&[data.view()]).unwrap());
                }),
            ));
        }
    }
    let (fwd, bwd) = gelu_graphs(ROW);
    let u = TensorData::from_f32(&[ROW], &normal(ROW, 1.5, 1));
    let gy = TensorData::from_f32(&[ROW], &normal(ROW, 1.0, 2));
    for threads in [1, 2] {
        // The JIT with and without GELU's Φ table (RLX_GELU_PHI=0 at compile time: the
        // tail kernel on every lane) and the backward's fused GELU′ table (RLX_GELU_GRAD=0:
        // the rule's erf/exp chain), and the interpreter.
        for (jit, switch) in [
            (true, None),
            (true, Some("RLX_GELU_PHI")),
            (true, Some("RLX_GELU_GRAD")),
            (false, None),
        ] {
            if let Some(var) = switch {
                // SAFETY: no other thread reads the environment while the example compiles.
                unsafe { std::env::set_var(var, "0") };
            }
            let (ef, eb) = (compile(&fwd, jit), compile(&bwd, jit));
            // The machine code is compiled at a kernel's first run: run both once while
            // the switch is set.
            rlx_cpu::set_jit(jit);
            ef.run(&[u.view()]).unwrap();
            eb.run(&[u.view(), gy.view()]).unwrap();
            if let Some(var) = switch {
                // SAFETY: as above.
                unsafe { std::env::remove_var(var) };
            }
            let u1 = u.clone();
            let jit = match switch {
                None => format!("{jit}"),
                Some(var) => format!("{jit} {}=0", var["RLX_GELU_".len()..].to_lowercase()),
            };
            let jit_on = !jit.starts_with("false");
            cases.push((
                format!("row gelu fwd jit={jit} t={threads}"),
                threads,
                ROW,
                Box::new(move || {
                    rlx_cpu::set_jit(jit_on);
                    std::hint::black_box(ef.run(&[u1.view()]).unwrap());
                }),
            ));
            let (u2, g2) = (u.clone(), gy.clone());
            cases.push((
                format!("row gelu bwd jit={jit} t={threads}"),
                threads,
                ROW,
                Box::new(move || {
                    rlx_cpu::set_jit(jit_on);
                    std::hint::black_box(eb.run(&[u2.view(), g2.view()]).unwrap());
                }),
            ));
        }
    }
    let only = std::env::var("ONLY").unwrap_or_default();
    cases.retain(|(n, ..)| n.contains(&only));
    // One thread count at a time within each round (changing it starts a pool).
    cases.sort_by_key(|c| c.1);
    let mut t = vec![Vec::new(); cases.len()];
    let mut pool = 0;
    for _ in 0..reps {
        for (k, (_, threads, n, f)) in cases.iter_mut().enumerate() {
            if *threads != pool {
                // The first run on a new thread count had read 2-8x slower than the same
                // kernel's next runs (the pool starting): untimed.
                rlx_cpu::set_num_threads(*threads);
                pool = *threads;
                f();
            }
            let s = Instant::now();
            f();
            t[k].push(s.elapsed().as_secs_f64() * 1e9 / *n as f64);
        }
    }
    for (k, (name, ..)) in cases.iter().enumerate() {
        let v = &mut t[k];
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{name:<32} median {:>7.3} ns/elem   best {:>7.3}",
            v[v.len() / 2],
            v[0]
        );
    }
}
