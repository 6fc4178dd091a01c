//! Per-element cost of the error-function kernels (exact GELU, erf) on each path:
//! `cargo run --release -p rlx-cpu --example gelu_timing`. Prints the median and best of
//! interleaved runs in ns per element, 1 thread; the JIT rows run a one-op graph.

use rlx_cpu::CpuBackend;
use rlx_cpu::math::{self, Isa};
use rlx_ir::{Activation, DType, Graph, Op, Shape, TensorData};
use rlx_runtime::{Backend, Device};
use std::time::Instant;

const N: usize = 1 << 16;

fn main() {
    rlx_cpu::set_num_threads(1);
    let x: Vec<f32> = (0..N)
        .map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 8.0)
        .collect();
    let mut out = vec![0f32; N];
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(41);
    let mut cases: Vec<(String, Box<dyn FnMut()>)> = Vec::new();
    let isas = [Isa::Avx512, Isa::Avx2Fma];
    for act in [Activation::Gelu, Activation::Erf, Activation::Exp] {
        for isa in isas.into_iter().filter(|i| i.is_available()) {
            let (xr, or) = (x.clone(), &mut out as *mut Vec<f32>);
            cases.push((
                format!("{} {isa:?}", act.name()),
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
            rlx_cpu::set_jit(jit);
            let exe = CpuBackend.compile(Device::Cpu, &g).unwrap();
            let data = TensorData::from_f32(&[N], &x);
            cases.push((
                format!("{} graph jit={jit}", act.name()),
                Box::new(move || {
                    rlx_cpu::set_jit(jit);
                    std::hint::black_box(exe.run(&[data.view()]).unwrap());
                }),
            ));
        }
    }
    let only = std::env::var("ONLY").unwrap_or_default();
    cases.retain(|(n, _)| n.contains(&only));
    let mut t = vec![Vec::new(); cases.len()];
    for _ in 0..reps {
        for (k, (_, f)) in cases.iter_mut().enumerate() {
            let s = Instant::now();
            f();
            t[k].push(s.elapsed().as_secs_f64() * 1e9 / N as f64);
        }
    }
    for (k, (name, _)) in cases.iter().enumerate() {
        let v = &mut t[k];
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{name:<28} median {:>7.3} ns/elem   best {:>7.3}",
            v[v.len() / 2],
            v[0]
        );
    }
}
