//! `RLX_PROFILE=1` timings read back as data through `Tensor::profile`. Its own test
//! binary: the variable is read once per process, before the first compile.
#![cfg(feature = "eval")]

use rlx_tensor::{Model, Tensor, graph, shape};

#[test]
fn profiled_runs_fill_the_profile_with_each_kernels_calls_and_time() {
    // SAFETY: the only test of this binary sets the variable before any thread reads it.
    unsafe { std::env::set_var("RLX_PROFILE", "1") };
    // Small enough to stay on the CPU, whose backend collects the profile. A matmul
    // and a reduction: more than one kernel.
    let a = Tensor::from_vec(
        (0..64 * 32).map(|i| (i % 7) as f32).collect::<Vec<_>>(),
        [64, 32],
    );
    let b = Tensor::from_vec(
        (0..32 * 16).map(|i| (i % 5) as f32).collect::<Vec<_>>(),
        [32, 16],
    );
    let y = a.matmul(&b).relu().sum_all();
    assert!(
        y.profile().is_none(),
        "nothing ran yet, so nothing was timed"
    );
    // A tensor is computed once; later reads return the realized value.
    let first = y.to_vec();
    assert_eq!(y.to_vec(), first);
    // sum over i, j of sum_k a[i,k]·b[k,j]: checked against f64 on the host.
    let mut want = 0f64;
    for i in 0..64 {
        for j in 0..16 {
            for k in 0..32 {
                want += ((i * 32 + k) % 7) as f64 * ((k * 16 + j) % 5) as f64;
            }
        }
    }
    assert_eq!(first, vec![want as f32]);
    let p = y.profile().expect("RLX_PROFILE=1 and a run: a profile");
    assert_eq!(p.runs, 1);
    assert!(!p.kernels.is_empty());
    assert!(p.kernels.iter().all(|k| k.calls == 1), "{p}");
    assert!(p.kernels.iter().any(|k| k.kind == "matmul"), "{p}");
    assert!(
        p.kernels
            .iter()
            .all(|k| k.total_s >= 0.0 && !k.ops.is_empty()),
        "{p}"
    );
    // Slowest first, and the table is the same data.
    assert!(p.kernels.windows(2).all(|w| w[0].total_s >= w[1].total_s));
    assert!(p.total_s() > 0.0);
    assert!(p.to_string().contains("1 run(s)"), "{p}");

    // A Model's program profiles the same way, over all its runs.
    let mut m = Model::new(graph("scaled_sum", |s| {
        let x = s.input("x", shape![256]);
        let w = s.param("w", shape![256]);
        (&x * &w).exp().sum_all()
    }));
    m.set("w", &[0.5; 256]);
    assert!(m.profile().is_none(), "the model has not run yet");
    for _ in 0..2 {
        assert_eq!(m.run(&[("x", &[0.0; 256])]), vec![vec![256.0]]);
    }
    let p = m.profile().expect("RLX_PROFILE=1 and two runs: a profile");
    assert_eq!(p.runs, 2);
    assert!(p.kernels.iter().all(|k| k.calls == 2), "{p}");
    let text = m.explain();
    assert!(
        text.contains("µs/run"),
        "explain() ends with the profile table:\n{text}"
    );
}
