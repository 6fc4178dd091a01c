//! `--kernels`: throughput of the vectorized math kernels of `rlx_cpu::math`, per activation
//! and instruction-set path, on one thread with data in cache (16 K elements), so that
//! kernel changes can be measured apart from the executor.

use rlx_cpu::math::{self, Isa};
use rlx_tensor::Activation;
use std::time::Instant;

/// Prints Gelem/s per activation and path.
pub fn print() {
    const N: usize = 1 << 14;
    let x: Vec<f32> = (0..N).map(|i| (i as f32 / N as f32) * 16.0 - 8.0).collect();
    let mut out = vec![0f32; N];
    let isas: Vec<Isa> = [Isa::Avx512, Isa::Avx2Fma, Isa::Portable]
        .into_iter()
        .filter(|i| i.is_available())
        .collect();
    println!();
    print!("{:<14}", "math kernel");
    for isa in &isas {
        print!(" {:>10}", format!("{isa:?}"));
    }
    println!("   (Gelem/s, 1 thread, {N} elements in cache, inputs in [-8, 8))");
    for act in Activation::ALL {
        print!("{:<14}", act.name());
        for &isa in &isas {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let t = Instant::now();
                for _ in 0..20 {
                    math::unary_f32_with(isa, act, &x, &mut out);
                    std::hint::black_box(&mut out);
                }
                best = best.min(t.elapsed().as_secs_f64() / 20.0);
            }
            print!(" {:>10.2}", N as f64 / best / 1e9);
        }
        println!();
    }
}
