//! Tensors, scopes, Funcs, Jitted programs and Models cross threads and are used from
//! several threads at once, with the results of serial use.
#![cfg(feature = "eval")]

use rlx_tensor::{Func, GraphScope, Model, Tensor, graph, shape};
use std::sync::{Arc, Barrier};

#[test]
fn a_tensor_built_in_one_thread_evaluates_in_another() {
    let t = std::thread::spawn(|| {
        let a = Tensor::from_vec(vec![1.0, -2.0, 3.0], [3]);
        (&a + &Tensor::ones([3])).relu()
    })
    .join()
    .unwrap();
    assert_eq!(t.to_vec(), vec![2.0, 0.0, 4.0]);
}

#[test]
fn a_value_realized_in_one_thread_is_reused_in_another() {
    let a = Tensor::from_vec(vec![1.0, 2.0], [2]) * 3.0;
    assert_eq!(a.realize(), vec![3.0, 6.0]);
    let b = std::thread::spawn(move || {
        assert!(a.is_realized());
        (&a + 1.0).to_vec()
    })
    .join()
    .unwrap();
    assert_eq!(b, vec![4.0, 7.0]);
}

#[test]
fn threads_building_on_clones_of_one_tensor_all_get_their_own_results() {
    let base = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [4]);
    let handles: Vec<_> = (0..4)
        .map(|k| {
            let base = base.clone();
            std::thread::spawn(move || {
                // Every thread appends nodes to the same shared graph, interleaved.
                let mut x = base.clone();
                for _ in 0..50 {
                    x = &x + 1.0;
                }
                (&x * (k as f64 + 1.0)).to_vec()
            })
        })
        .collect();
    for (k, h) in handles.into_iter().enumerate() {
        let m = k as f32 + 1.0;
        let want: Vec<f32> = [51.0, 52.0, 53.0, 54.0].iter().map(|v| v * m).collect();
        assert_eq!(h.join().unwrap(), want, "thread {k}");
    }
    assert_eq!(base.to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn adopting_in_opposite_directions_from_two_threads_does_not_deadlock() {
    // Each `+` locks both graphs; the lock order must not depend on the operand order.
    let a = Tensor::from_vec(vec![1.0, 2.0], [2]);
    let b = Tensor::from_vec(vec![10.0, 20.0], [2]);
    let (a2, b2) = (a.clone(), b.clone());
    let t1 = std::thread::spawn(move || {
        let mut last = None;
        for _ in 0..2000 {
            last = Some(&a2 + &b2);
        }
        last.unwrap().to_vec()
    });
    let t2 = std::thread::spawn(move || {
        let mut last = None;
        for _ in 0..2000 {
            last = Some(&b + &a);
        }
        last.unwrap().to_vec()
    });
    assert_eq!(t1.join().unwrap(), vec![11.0, 22.0]);
    assert_eq!(t2.join().unwrap(), vec![11.0, 22.0]);
}

#[test]
fn a_graph_scope_moves_into_a_thread() {
    let mut s = GraphScope::new("moved");
    let x = s.input("x", shape![2]);
    let g = std::thread::spawn(move || {
        let y = &x * 2.0;
        s.set_outputs([&y]);
        s.finish()
    })
    .join()
    .unwrap();
    assert_eq!(
        Func::from_graph(g).run(&[("x", &[1.5, -1.0])]),
        vec![vec![3.0, -2.0]]
    );
}

fn affine() -> Func {
    Func::new("affine", |s| {
        let x = s.input("x", shape![?, 3]);
        let w = s.param("w", shape![3, 2]);
        x.matmul(&w).tanh()
    })
    .with_param("w", vec![0.5, -1.0, 0.25, 2.0, -0.75, 0.1])
}

/// Input `k` of the concurrent-run tests: 4 rows of 3 values, different for every k.
fn input(k: usize) -> Vec<f32> {
    (0..12)
        .map(|i| ((i * 7 + k * 13) % 11) as f32 * 0.1 - 0.5)
        .collect()
}

#[test]
fn a_func_moves_into_a_thread_and_runs_there() {
    let f = affine();
    let here = f.run(&[("x", &input(0))]);
    let there = std::thread::spawn(move || f.run(&[("x", &input(0))]))
        .join()
        .unwrap();
    assert_eq!(here, there);
    assert_eq!(there[0].len(), 8);
}

#[test]
fn one_func_runs_from_four_threads_at_once_each_compiling_into_its_own_cache() {
    let f = affine();
    let serial: Vec<Vec<Vec<f32>>> = (0..4).map(|k| f.run(&[("x", &input(k))])).collect();
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for k in 0..4 {
            let (f, barrier, serial) = (&f, &barrier, &serial);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..20 {
                    assert_eq!(f.run(&[("x", &input(k))]), serial[k], "thread {k}");
                }
            });
        }
    });
}

#[test]
fn one_jitted_runs_from_four_threads_at_once_with_the_serial_results() {
    let j = affine().jit();
    let serial: Vec<Vec<Vec<f32>>> = (0..4).map(|k| j.run(&[("x", &input(k))])).collect();
    // The serial results are what tanh(x·w) gives (checked against f64 once).
    let w = [0.5f64, -1.0, 0.25, 2.0, -0.75, 0.1];
    let x = input(1);
    for r in 0..4 {
        for c in 0..2 {
            let dot: f64 = (0..3).map(|i| x[r * 3 + i] as f64 * w[i * 2 + c]).sum();
            assert!((serial[1][0][r * 2 + c] as f64 - dot.tanh()).abs() < 1e-6);
        }
    }
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for k in 0..4 {
            let (j, barrier, serial) = (&j, &barrier, &serial);
            s.spawn(move || {
                let x = input(k);
                barrier.wait();
                for _ in 0..100 {
                    assert_eq!(j.run(&[("x", &x)]), serial[k], "thread {k}");
                }
            });
        }
    });
}

#[test]
fn clones_of_a_jitted_run_in_spawned_threads() {
    let j = Arc::new(affine().jit());
    let want = j.run(&[("x", &input(2))]);
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let j = j.clone();
            std::thread::spawn(move || j.run(&[("x", &input(2))]))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), want);
    }
}

#[test]
fn a_model_moves_into_a_thread_and_runs_there() {
    let mut m = Model::new(graph("scale", |s| {
        let x = s.input("x", shape![3]);
        &x * &s.param("w", shape![3])
    }));
    m.set("w", &[1.0, 2.0, 3.0]);
    let out = std::thread::spawn(move || m.run(&[("x", &[2.0, 2.0, 2.0])]))
        .join()
        .unwrap();
    assert_eq!(out, vec![vec![2.0, 4.0, 6.0]]);
}

#[test]
fn a_model_is_shared_by_reference_across_scoped_threads() {
    let mut m = Model::new(graph("shift", |s| {
        let x = s.input("x", shape![2]);
        &x + &s.param("b", shape![2])
    }));
    m.set("b", &[0.5, -0.5]);
    let m = &m;
    std::thread::scope(|s| {
        for _ in 0..3 {
            // Model::run takes &mut self; a shared Model is still readable from several
            // threads (its roster and bindings).
            s.spawn(move || {
                assert!(m.unbound().is_empty());
                assert_eq!(m.param_names().collect::<Vec<_>>(), vec!["b"]);
            });
        }
    });
}
