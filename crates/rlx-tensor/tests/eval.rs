//! Readback, the compile cache, Func/Jitted/Model execution, dynamic dims, and errors.
#![cfg(feature = "eval")]

use rlx_tensor::{Device, Func, Model, Tensor, cache_stats, clear_cache, graph, shape};

#[test]
fn quickstart_add_relu_reads_back() {
    let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    let b = Tensor::ones([3]);
    let c = (&a + &b).relu();
    assert_eq!(c.to_vec(), vec![2.0, 3.0, 4.0]);
    assert_eq!(c.on(Device::Cpu).to_vec(), vec![2.0, 3.0, 4.0]);
}

#[test]
fn three_runs_of_one_func_are_one_miss_and_two_hits() {
    clear_cache();
    let f = Func::new("sq", |s| {
        let x = s.input("x", shape![3]);
        &x * &x
    });
    for _ in 0..3 {
        assert_eq!(f.run(&[("x", &[1.0, 2.0, 3.0])]), vec![vec![1.0, 4.0, 9.0]]);
    }
    assert_eq!(cache_stats(), (2, 1));
}

#[test]
fn identical_rebuilt_expressions_hit_the_cache() {
    clear_cache();
    for _ in 0..5 {
        let a = Tensor::from_vec(vec![1.0, 2.0], [2]);
        let c = &a + &Tensor::ones([2]);
        assert_eq!(c.to_vec(), vec![2.0, 3.0]);
    }
    assert_eq!(cache_stats(), (4, 1));
}

#[test]
fn reading_one_tensor_five_times_is_one_miss() {
    clear_cache();
    let c = Tensor::from_vec(vec![-1.0, 2.0], [2]).relu();
    for _ in 0..5 {
        assert_eq!(c.to_vec(), vec![0.0, 2.0]);
    }
    assert_eq!(cache_stats(), (4, 1));
}

#[test]
fn small_constants_are_part_of_the_key_and_large_ones_are_not() {
    clear_cache();
    assert_eq!(
        Tensor::from_vec(vec![-1.0, 1.0], [2]).relu().to_vec(),
        vec![0.0, 1.0]
    );
    assert_eq!(
        Tensor::from_vec(vec![-2.0, 2.0], [2]).relu().to_vec(),
        vec![0.0, 2.0]
    );
    assert_eq!(cache_stats(), (0, 2));
    clear_cache();
    for k in 0..4 {
        let v: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * k as f32).collect();
        let out = Tensor::from_vec(v.clone(), [1000]).relu().to_vec();
        assert_eq!(out, v.iter().map(|x| x.max(0.0)).collect::<Vec<_>>());
    }
    assert_eq!(
        cache_stats(),
        (3, 1),
        "new data of the same shape must not recompile"
    );
}

#[test]
fn a_realized_tensor_is_not_recomputed_by_later_expressions() {
    let x = Tensor::from_vec(vec![1.0, -2.0, 3.0], [3]);
    let c = x.relu();
    assert!(!c.is_realized());
    c.to_vec();
    assert!(c.is_realized());
    let d: Tensor = &c * 2.0;
    assert!(
        !d.explain().contains("relu"),
        "relu must not be recompiled:\n{}",
        d.explain()
    );
    assert_eq!(d.to_vec(), vec![2.0, 0.0, 6.0]);
}

#[test]
fn dynamic_batch_runs_every_size_with_one_compile() {
    clear_cache();
    let f = Func::new("rowsum", |s| {
        let x = s.input("x", shape![?, 4]);
        x.sum([1], false)
    });
    assert_eq!(f.run(&[("x", &[1.0; 8])]), vec![vec![4.0, 4.0]]);
    assert_eq!(f.run(&[("x", &[2.0; 12])]), vec![vec![8.0, 8.0, 8.0]]);
    assert_eq!(f.run(&[("x", &[])]), vec![Vec::<f32>::new()]);
    assert_eq!(cache_stats(), (2, 1));
}

#[test]
fn jitted_runs_without_cache_lookups_and_clones_share_it() {
    clear_cache();
    let f = Func::new("double", |s| {
        let x = s.input("x", shape![2]);
        &x + &x
    });
    let j = f.jit();
    let j2 = j.clone();
    let before = cache_stats();
    assert_eq!(j.run(&[("x", &[1.0, 2.0])]), vec![vec![2.0, 4.0]]);
    assert_eq!(j2.run(&[("x", &[3.0, 4.0])]), vec![vec![6.0, 8.0]]);
    assert_eq!(cache_stats(), before);
}

#[test]
fn func_bad_inputs_have_clear_errors() {
    let f = Func::new("f", |s| {
        let x = s.input("x", shape![3]);
        let w = s.param("w", shape![3]);
        &x * &w
    });
    let err = f
        .try_run(&[("y", &[1.0, 2.0, 3.0])])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no input or param named `y`") && err.contains("\"x\""),
        "{err}"
    );
    let err = f
        .try_run(&[("x", &[1.0, 2.0]), ("w", &[1.0; 3])])
        .unwrap_err()
        .to_string();
    assert!(err.contains("needs 3 values, got 2"), "{err}");
    let err = f.try_run(&[("x", &[1.0; 3])]).unwrap_err().to_string();
    assert!(
        err.contains("param `w`") && err.contains("not bound"),
        "{err}"
    );
    let err = f
        .clone()
        .try_with_param("q", vec![1.0])
        .unwrap_err()
        .to_string();
    assert!(err.contains("no param named `q`"), "{err}");
    let g = f.with_param("w", vec![2.0; 3]);
    assert_eq!(g.run(&[("x", &[1.0, 2.0, 3.0])]), vec![vec![2.0, 4.0, 6.0]]);
}

#[test]
fn an_unavailable_device_is_a_clear_error() {
    let t = Tensor::from_vec(vec![1.0], [1]).relu();
    let err = t.try_to_vec_on(Device::Tpu).unwrap_err().to_string();
    assert!(
        err.contains("TPU is not supported by rlx") && err.contains("available here: CPU"),
        "{err}"
    );
    // Devices rlx cannot run on are never available, whatever features this build has
    // (`--all-features` turns on eval-mlx, eval-coreml, eval-rocm, eval-apple): asking for
    // one is an error naming it, never a silent CPU run.
    for d in [Device::Mlx, Device::Ane, Device::Tpu, Device::WebGpu] {
        assert!(!rlx_tensor::is_available(d), "{d}");
        let err = t.try_to_vec_on(d).unwrap_err().to_string();
        assert!(
            err.contains(d.name()) && err.contains(d.how_to_enable()),
            "{err}"
        );
    }
    // ROCm runs where an AMD GPU and the HIP libraries are; elsewhere (or without
    // eval-rocm) asking for it is an error that names it and what is missing.
    if !rlx_tensor::is_available(Device::Rocm) {
        let err = t.try_to_vec_on(Device::Rocm).unwrap_err().to_string();
        assert!(
            err.contains("ROCm") && err.contains(Device::Rocm.how_to_enable()),
            "{err}"
        );
        #[cfg(feature = "eval-rocm")]
        assert!(
            err.contains(&rlx_rocm::unavailable_reason().unwrap_or_default()),
            "the error should carry the probe's reason: {err}"
        );
    }
    assert!(rlx_tensor::is_available(Device::Cpu));
    assert_eq!(rlx_tensor::available_devices()[0], Device::Cpu);
}

#[test]
fn show_and_display_print_dims_dtype_and_nested_values() {
    let t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.5], [2, 2]);
    assert_eq!(t.show(), "Tensor[2, 2] F32\n[[1, 2], [3, 4.5]]");
    assert_eq!(format!("{t}"), t.show());
    assert_eq!(
        Tensor::from_i64([7, -1], [2]).show(),
        "Tensor[2] I64\n[7, -1]"
    );
}

#[test]
fn item_and_typed_readers() {
    assert_eq!(Tensor::from_vec(vec![2.5], [1]).item(), 2.5);
    let err = Tensor::ones([2]).try_item().unwrap_err().to_string();
    assert!(err.contains("2 elements"), "{err}");
    assert_eq!(
        Tensor::from_f64([1.5, 2.0], [2]).to_vec_f64(),
        vec![1.5, 2.0]
    );
    assert_eq!(
        Tensor::from_i64([1 << 40, -3], [2]).to_vec_i64(),
        vec![1 << 40, -3]
    );
    assert_eq!(Tensor::index_vec([4, 5]).to_vec_i32(), vec![4, 5]);
}

#[test]
fn model_binds_strictly_and_runs() {
    let g = graph("scale", |s| {
        let x = s.input("x", shape![3]);
        let w = s.param("w", shape![3]);
        &x * &w
    });
    let mut m = Model::new(g);
    assert_eq!(m.unbound(), vec!["w"]);
    let err = m.try_set("W", &[1.0; 3]).unwrap_err().to_string();
    assert!(
        err.contains("no param named `W`") && err.contains("\"w\""),
        "{err}"
    );
    let err = m.try_set("w", &[1.0; 2]).unwrap_err().to_string();
    assert!(err.contains("needs 3 values, got 2"), "{err}");
    m.load([("w", &[1.0f32, 2.0, 3.0][..])]);
    assert!(m.unbound().is_empty());
    assert_eq!(m.run(&[("x", &[2.0, 2.0, 2.0])]), vec![vec![2.0, 4.0, 6.0]]);
    assert_eq!(m.param_names().collect::<Vec<_>>(), vec!["w"]);
}

#[test]
#[should_panic(expected = "no param named `typo`")]
fn model_set_panics_on_an_undeclared_name() {
    let g = graph("g", |s| {
        let x = s.input("x", shape![1]);
        let w = s.param("w", shape![1]);
        &x + &w
    });
    Model::new(g).set("typo", &[0.0]);
}

#[test]
fn func_multi_params_and_initialisers() {
    let f = Func::multi("two", |s| {
        let x = s.input("x", shape![2]);
        let b = s.param("b", shape![2]);
        let w = s.param("w", shape![2, 3]);
        vec![&x + &b, x.unsqueeze(0).matmul(&w)]
    });
    assert_eq!(f.output_count(), 2);
    assert_eq!(f.param_names(), vec!["b", "w"]);
    assert_eq!(f.param_shape_of("w"), Some(vec![2, 3]));
    let f1 = f.clone().init_randn(7, 0.1);
    let f2 = f.clone().init_randn(7, 0.1);
    assert_eq!(f1.param_binding("w"), f2.param_binding("w"));
    assert_eq!(f1.param_binding("w").unwrap().len(), 6);
    let f3 = f
        .init_params(|name, dims| vec![if name == "b" { 1.0 } else { 0.5 }; dims.iter().product()]);
    let out = f3.run(&[("x", &[1.0, 2.0])]);
    assert_eq!(out, vec![vec![2.0, 3.0], vec![1.5, 1.5, 1.5]]);
}

#[test]
fn func_moves_into_another_thread() {
    let f = Func::new("inc", |s| {
        let x = s.input("x", shape![1]);
        &x + 1.0
    });
    let h = std::thread::spawn(move || f.run(&[("x", &[1.0])]));
    assert_eq!(h.join().unwrap(), vec![vec![2.0]]);
}

#[test]
fn cache_misses_are_explained() {
    clear_cache();
    let t = Tensor::from_vec(vec![-1.0, 1.0], [2]).relu();
    t.to_vec();
    let first = rlx_tensor::cache_last_miss().unwrap();
    assert!(first.contains("had not been compiled"), "{first}");
    Tensor::from_vec(vec![-1.0, 1.0], [2]).exp().to_vec();
    let why = rlx_tensor::cache_last_miss().unwrap();
    assert!(
        why.contains("node %1") && why.contains("Exp") && why.contains("Relu"),
        "{why}"
    );
    Tensor::from_vec(vec![-2.0, 2.0], [2]).exp().to_vec();
    let why = rlx_tensor::cache_last_miss().unwrap();
    assert!(
        why.contains("small constants") && why.contains("no recompile"),
        "{why}"
    );
}

#[test]
fn eager_calls_with_new_small_data_miss_by_key_but_never_recompile() {
    clear_cache();
    let before = rlx_tensor::cache_compile_count();
    for i in 0..20 {
        let a = Tensor::from_vec(vec![i as f32, -1.0, 2.0], [3]);
        let b = Tensor::from_vec(vec![1.0, i as f32, -5.0], [3]);
        let got = (&a + &b).relu().to_vec();
        assert_eq!(got, vec![i as f32 + 1.0, (i as f32 - 1.0).max(0.0), 0.0]);
    }
    assert_eq!(
        rlx_tensor::cache_compile_count() - before,
        1,
        "one program serves every call"
    );
    // API.md §6.2: the key still holds small constants by value
    assert_eq!(cache_stats(), (0, 20));
    // a different shape is a different program
    (&Tensor::from_vec(vec![1.0; 4], [4]) + 1.0).to_vec();
    assert_eq!(rlx_tensor::cache_compile_count() - before, 2);
}
