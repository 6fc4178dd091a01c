//! Hostile and mistaken input through the public API: every case is an error (or, for the
//! panicking twins, a panic) that names the problem, the names or shapes involved and the
//! fix — never a silent wrong result, a crash deep inside, or a huge allocation.

use rlx_tensor::{Func, GraphScope, shape};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// The message of the panic `f` raises (panics if it does not).
fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("expected a panic");
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else {
        panic!("non-string panic payload")
    }
}

fn assert_mentions(message: &str, parts: &[&str]) {
    for p in parts {
        assert!(message.contains(p), "`{p}` missing from: {message}");
    }
}

// ---------------------------------------------------------------------------------------
// Reserved names and empty functions, at declaration (no features needed).

#[test]
fn declaring_an_input_named_like_a_lifted_constant_panics_at_declaration() {
    let msg = panic_message(|| {
        let mut s = GraphScope::new("g");
        let _ = s.input("__arg0", shape![2]);
    });
    assert_mentions(&msg, &["`__arg0`", "reserved", "`__`", "rename"]);
}

#[test]
fn declaring_a_param_with_a_double_underscore_name_panics_at_declaration() {
    let msg = panic_message(|| {
        let _ = Func::new("f", |s| s.param("__opt.lr", shape![1]).sum_all());
    });
    assert_mentions(&msg, &["param", "`__opt.lr`", "reserved"]);
}

#[test]
fn names_with_one_leading_underscore_stay_allowed() {
    let f = Func::new("f", |s| {
        let x = s.input("_x", shape![2]);
        let w = s.param("_w", shape![2]);
        &x * &w
    });
    assert_eq!(f.input_names(), ["_x"]);
    assert_eq!(f.param_names(), ["_w"]);
}

#[test]
fn an_input_and_a_param_sharing_a_name_panic_at_declaration() {
    // Both are bound by name at run time, so one value would feed both.
    let msg = panic_message(|| {
        let _ = Func::new("f", |s| {
            let x = s.input("w", shape![2]);
            let w = s.param("w", shape![2]);
            &x * &w
        });
    });
    assert_mentions(&msg, &["`w`", "already declared", "unique name"]);
}

#[test]
fn a_multi_output_func_with_no_outputs_panics_when_built() {
    let msg = panic_message(|| {
        let _ = Func::multi("empty", |s| {
            let _ = s.input("x", shape![2]);
            Vec::new()
        });
    });
    assert_mentions(&msg, &["Func `empty`", "no outputs", "return at least one"]);
}

#[test]
fn try_multi_and_try_from_graph_report_a_func_without_outputs() {
    let err = Func::try_multi("empty", |_| Vec::new())
        .unwrap_err()
        .to_string();
    assert_mentions(&err, &["Func `empty`", "no outputs"]);
    let mut s = GraphScope::new("bare");
    let _ = s.input("x", shape![2]);
    let err = Func::try_from_graph(s.finish()).unwrap_err().to_string();
    assert_mentions(&err, &["Func `bare`", "no outputs", "set_outputs"]);
}

#[test]
fn from_graph_rejects_a_hand_built_graph_declaring_a_reserved_name() {
    let mut g = rlx_tensor::Graph::new("hand");
    let x = g.input(
        "__arg0",
        rlx_tensor::Shape::new(&[2], rlx_tensor::DType::F32),
    );
    g.set_outputs(vec![x]);
    let err = Func::try_from_graph(g).unwrap_err().to_string();
    assert_mentions(&err, &["`__arg0`", "reserved"]);
}

// ---------------------------------------------------------------------------------------
// Running: duplicated input names.

#[cfg(feature = "eval")]
mod run {
    use super::*;
    use rlx_tensor::{Model, graph};

    fn double() -> Func {
        Func::new("double", |s| {
            let x = s.input("x", shape![2]);
            &x * 2.0
        })
    }

    #[test]
    fn func_run_with_an_input_given_twice_is_an_error_naming_it() {
        let err = double()
            .try_run(&[("x", &[1.0, 2.0]), ("x", &[3.0, 4.0])])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["Func `double`", "`x`", "twice"]);
        let msg = panic_message(|| {
            double().run(&[("x", &[1.0, 2.0]), ("x", &[3.0, 4.0])]);
        });
        assert_eq!(msg, err, "the panicking twin panics with the same message");
    }

    #[test]
    fn jitted_and_model_run_with_an_input_given_twice_are_errors() {
        let j = double().jit();
        let err = j
            .try_run(&[("x", &[1.0, 2.0]), ("x", &[3.0, 4.0])])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["`x`", "twice"]);
        let mut m = Model::new(double().graph().clone());
        let err = m
            .try_run(&[("x", &[1.0, 2.0]), ("x", &[1.0, 2.0])])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["Model `double`", "`x`", "twice"]);
    }

    #[test]
    fn run_data_with_an_input_given_twice_is_an_error() {
        use rlx_ir::TensorData;
        let a = TensorData::from_f32(&[2], &[1.0, 2.0]);
        let err = double()
            .run_data(&[("x", a.clone()), ("x", a)])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["`x`", "twice"]);
    }

    #[test]
    fn a_param_passed_in_the_inputs_twice_is_an_error() {
        let f = Func::new("scale", |s| {
            let x = s.input("x", shape![2]);
            let w = s.param("w", shape![2]);
            &x * &w
        })
        .with_param("w", vec![1.0, 1.0]);
        let err = f
            .try_run(&[("x", &[1.0, 2.0]), ("w", &[2.0, 2.0]), ("w", &[3.0, 3.0])])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["`w`", "twice"]);
    }

    #[test]
    fn run_data_with_bytes_that_do_not_fill_the_dims_is_an_error_not_a_panic() {
        use rlx_ir::{DType, TensorData};
        let short = TensorData {
            dtype: DType::F32,
            dims: vec![2],
            bytes: vec![0; 3],
        };
        let err = double().run_data(&[("x", short)]).unwrap_err().to_string();
        assert_mentions(&err, &["`x`", "[2]", "3 bytes", "8 bytes"]);
        // A dtype conversion of inconsistent data used to assert inside TensorData.
        let short64 = TensorData {
            dtype: DType::F64,
            dims: vec![2],
            bytes: vec![0; 9],
        };
        let err = double()
            .run_data(&[("x", short64)])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["`x`", "9 bytes", "16 bytes"]);
    }

    #[test]
    fn a_repeated_dynamic_dim_without_an_integer_root_is_an_error_not_an_overflow() {
        // Every bare `?` is one symbol, so `[?, ?, ?, ?]` needs a perfect fourth power;
        // the old search for the root overflowed 65536⁴ on the way to 100000.
        let f = Func::new("hyper", |s| s.input("x", shape![?, ?, ?, ?]).sum_all());
        let err = f
            .try_run(&[("x", &vec![1.0; 100_000])])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["`x`", "100000 values do not fit"]);
        assert_eq!(f.run(&[("x", &[1.0; 16])]), vec![vec![16.0]]);
    }

    #[test]
    fn running_a_graph_without_outputs_through_model_says_so() {
        let (g, ()) = rlx_tensor::graph_with("none", |s| {
            let _ = s.input("x", shape![2]);
        });
        let err = Model::try_on(g, rlx_tensor::Device::Cpu)
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["Model `none`", "no outputs"]);
        // A well-formed graph still runs.
        let g = graph("ok", |s| s.input("x", shape![1]) + 1.0);
        assert_eq!(Model::new(g).run(&[("x", &[1.0])]), vec![vec![2.0]]);
    }
}

// ---------------------------------------------------------------------------------------
// Training: one optimizer reused for params of another size.

#[cfg(feature = "optim")]
mod train {
    use super::*;
    use rlx_tensor::{Adam, AdamW, Lion, Muon, Optimizer, Sgd, Unfused};

    /// Σ w² over a `[n]` param `w` of ones.
    fn sized(n: usize) -> Func {
        Func::new("sized", |s| {
            let w = s.param("w", shape![n]);
            (&w * &w).sum_all()
        })
        .with_param("w", vec![1.0; n])
    }

    fn reuse_error(opt: &mut dyn Optimizer) -> String {
        let (_, loss) = sized(2).train_step(opt, &["w"], &[]);
        assert_eq!(loss, vec![2.0]);
        let before = opt.state_dict();
        let err = sized(3)
            .try_train_step(opt, &["w"], &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            opt.state_dict(),
            before,
            "a failed step leaves the state alone"
        );
        err
    }

    #[test]
    fn reusing_a_fused_optimizer_for_a_larger_param_is_an_error_naming_both_sizes() {
        for (name, mut opt) in [
            ("adam", Box::new(Adam::new(0.1)) as Box<dyn Optimizer>),
            ("adamw", Box::new(AdamW::new(0.1))),
            ("lion", Box::new(Lion::new(0.1))),
            (
                "sgd+momentum",
                Box::new(Sgd::new(0.1).with_momentum(0.9, false)),
            ),
        ] {
            let err = reuse_error(opt.as_mut());
            assert_mentions(
                &err,
                &[
                    "`w`",
                    "state of 2 values",
                    "3 values",
                    "fresh optimizer",
                    "reset_state",
                ],
            );
            assert!(err.starts_with("train_step"), "{name}: {err}");
        }
    }

    #[test]
    fn reusing_a_host_path_optimizer_for_a_smaller_param_is_an_error_not_a_panic() {
        for mut opt in [
            Box::new(Unfused(Adam::new(0.1))) as Box<dyn Optimizer>,
            Box::new(Muon::new(0.1)),
            Box::new(Unfused(Sgd::new(0.1).with_momentum(0.5, true))),
        ] {
            let _ = sized(4).train_step(opt.as_mut(), &["w"], &[]);
            let err = sized(3)
                .try_train_step(opt.as_mut(), &["w"], &[])
                .unwrap_err()
                .to_string();
            assert_mentions(
                &err,
                &["`w`", "state of 4 values", "3 values", "fresh optimizer"],
            );
        }
    }

    #[test]
    fn the_panicking_train_step_panics_with_the_try_message() {
        let mut a = Adam::new(0.1);
        let _ = sized(2).train_step(&mut a, &["w"], &[]);
        let err = sized(5)
            .try_train_step(&mut a, &["w"], &[])
            .unwrap_err()
            .to_string();
        let msg = panic_message(|| {
            let _ = sized(5).train_step(&mut a, &["w"], &[]);
        });
        assert_eq!(msg, err);
        let msg = panic_message(|| {
            let _ = sized(5).train_step_all(&mut a, &[]);
        });
        assert_eq!(msg, err);
    }

    #[test]
    fn reset_state_lets_an_optimizer_train_a_new_func() {
        let mut opt = Adam::new(0.1);
        let _ = sized(2).train_step(&mut opt, &["w"], &[]);
        assert!(opt.reset_state());
        assert_eq!(opt.current_step(), 0);
        let (g, _) = sized(3).train_step(&mut opt, &["w"], &[]);
        // The first Adam step moves every entry by lr (m̂/√v̂ = 1): 1 − 0.1.
        for v in g.param_binding("w").unwrap() {
            assert!((v - 0.9).abs() < 1e-6, "{v}");
        }
    }

    #[test]
    fn a_new_param_name_gets_fresh_state_beside_the_old() {
        // Other names are not a conflict: each name has its own state.
        let mut opt = Adam::new(0.1);
        let _ = sized(2).train_step(&mut opt, &["w"], &[]);
        let other = Func::new("other", |s| {
            let v = s.param("v", shape![3]);
            (&v * &v).sum_all()
        })
        .with_param("v", vec![1.0; 3]);
        let (g, _) = other.try_train_step(&mut opt, &["v"], &[]).unwrap();
        assert_eq!(g.param_binding("v").unwrap().len(), 3);
        let s = opt.state_dict().unwrap();
        assert_eq!(s.buffer("m/w").map(<[f32]>::len), Some(2));
        assert_eq!(s.buffer("m/v").map(<[f32]>::len), Some(3));
    }

    #[test]
    fn a_param_listed_twice_in_wrt_is_an_error_not_a_debug_assertion() {
        for mut opt in [
            Box::new(Adam::new(0.1)) as Box<dyn Optimizer>,
            Box::new(Unfused(Sgd::new(0.1))),
        ] {
            let err = sized(2)
                .try_train_step(opt.as_mut(), &["w", "w"], &[])
                .unwrap_err()
                .to_string();
            assert_mentions(&err, &["train_step", "`w`", "listed twice"]);
        }
    }

    #[test]
    fn wrt_naming_an_input_or_nothing_says_which() {
        let f = Func::new("fit", |s| {
            let x = s.input("x", shape![2]);
            let w = s.param("w", shape![2]);
            (&x * &w).sum_all()
        })
        .with_param("w", vec![1.0, 1.0]);
        let mut opt = Sgd::new(0.1);
        let x: &[f32] = &[1.0, 2.0];
        let err = f
            .try_train_step(&mut opt, &["x"], &[("x", x)])
            .unwrap_err()
            .to_string();
        assert_mentions(
            &err,
            &["`x` is an input", "not a param", "declared params: [\"w\"]"],
        );
        let err = f
            .try_train_step(&mut opt, &["W"], &[("x", x)])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["no param named `W`", "declared params"]);
    }

    #[test]
    fn muon_trains_a_param_with_a_dynamic_axis_as_the_matrix_its_data_fills() {
        // `[?, 2]` bound to 4 values is a 2×2 matrix; the step used to hand Muon the
        // shape [0, 2] and panic on the element count.
        let w0 = vec![1.0f32, 2.0, -1.0, 0.5];
        let f = Func::new("dyn", |s| {
            let w = s.param("w", shape![?, 2]);
            (&w * &w).sum_all()
        })
        .with_param("w", w0.clone());
        let mut opt = Muon::new(0.1);
        let (g, _) = f.try_train_step(&mut opt, &["w"], &[]).unwrap();
        let mut want = w0.clone();
        let grad: Vec<f32> = w0.iter().map(|v| 2.0 * v).collect();
        Muon::new(0.1).step("w", &[2, 2], &mut want, &grad);
        let got = g.param_binding("w").unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() < 1e-6, "{got:?} vs {want:?}");
        }
    }

    #[test]
    fn stepping_a_name_with_another_size_directly_panics_with_the_same_advice() {
        let mut opt = Lion::new(0.1);
        opt.step("w", &[2], &mut [0.0, 0.0], &[1.0, 1.0]);
        let msg = panic_message(|| opt.step("w", &[3], &mut [0.0; 3], &[1.0; 3]));
        assert_mentions(
            &msg,
            &["`w`", "state of 2 values", "3 values", "fresh optimizer"],
        );
    }
}

// ---------------------------------------------------------------------------------------
// Checkpoints: missing, unexpected and mis-shaped params; malformed files.

#[cfg(feature = "optim")]
mod checkpoint {
    use super::*;
    use rlx_tensor::{Adam, DType, Optimizer};
    use std::path::PathBuf;

    /// A fresh path in the temp dir, removed on drop.
    struct TempFile(PathBuf);
    impl TempFile {
        fn new(tag: &str) -> TempFile {
            TempFile(std::env::temp_dir().join(format!(
                "rlx_misuse_{}_{tag}.safetensors",
                std::process::id()
            )))
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            std::fs::remove_file(&self.0).ok();
        }
    }

    fn with_params(name: &str, params: &[(&str, &[usize])]) -> Func {
        let params: Vec<(String, Vec<usize>)> = params
            .iter()
            .map(|(n, d)| (n.to_string(), d.to_vec()))
            .collect();
        let decl = params.clone();
        let mut f = Func::new(name, move |s| {
            let mut total = s.scalar(0.0);
            for (n, d) in &decl {
                total = &total
                    + &s.param(n.as_str(), rlx_tensor::Shape::new(d, DType::F32))
                        .sum_all();
            }
            total
        });
        for (i, (n, d)) in params.iter().enumerate() {
            let len: usize = d.iter().product();
            f = f.with_param(n.as_str(), vec![i as f32 + 1.0; len]);
        }
        f
    }

    #[test]
    fn loading_a_checkpoint_that_lacks_params_lists_every_missing_one() {
        let file = TempFile::new("missing");
        with_params("small", &[("w", &[2])])
            .save_checkpoint(&file.0, None)
            .unwrap();
        // `b` is bound to an old value that loading must not silently keep.
        let big = with_params("big", &[("w", &[2]), ("b", &[1]), ("c", &[3])]);
        let err = big.load_checkpoint(&file.0, None).unwrap_err().to_string();
        assert_mentions(&err, &["missing", "`b`", "`c`", "load_checkpoint_partial"]);
        assert!(!err.contains("`w`"), "{err}");
        // The lenient twin binds what the file holds and keeps the rest.
        let g = big.load_checkpoint_partial(&file.0, None).unwrap();
        assert_eq!(g.param_binding("w"), Some(&[1.0f32, 1.0][..]));
        assert_eq!(g.param_binding("b"), Some(&[2.0f32][..]));
    }

    #[test]
    fn loading_a_checkpoint_with_undeclared_params_lists_every_unexpected_one() {
        let file = TempFile::new("unexpected");
        with_params("big", &[("w", &[2]), ("x", &[1]), ("y", &[1])])
            .save_checkpoint(&file.0, None)
            .unwrap();
        let small = with_params("small", &[("w", &[2])]);
        for err in [
            small
                .load_checkpoint(&file.0, None)
                .unwrap_err()
                .to_string(),
            small
                .load_checkpoint_partial(&file.0, None)
                .unwrap_err()
                .to_string(),
        ] {
            assert_mentions(
                &err,
                &["unexpected", "`x`", "`y`", "declared params: [\"w\"]"],
            );
        }
    }

    #[test]
    fn a_transposed_param_does_not_load_and_every_mis_shaped_one_is_listed() {
        let file = TempFile::new("shape");
        with_params("a", &[("w", &[3, 2]), ("v", &[4]), ("ok", &[1])])
            .save_checkpoint(&file.0, None)
            .unwrap();
        let b = with_params("b", &[("w", &[2, 3]), ("v", &[2, 2]), ("ok", &[1])]);
        let err = b.load_checkpoint(&file.0, None).unwrap_err().to_string();
        assert_mentions(&err, &["`w`", "[3, 2]", "[2, 3]", "`v`", "[4]", "[2, 2]"]);
        assert!(!err.contains("`ok`"), "{err}");
    }

    #[test]
    fn a_param_saved_with_another_dtype_does_not_load() {
        let file = TempFile::new("dtype");
        let f = Func::new("f", |s| s.param("w", shape![BF16; 2]).sum_all())
            .with_param("w", vec![1.0, 2.0]);
        f.save_checkpoint(&file.0, None).unwrap();
        let g = Func::new("g", |s| s.param("w", shape![2]).sum_all());
        let err = g.load_checkpoint(&file.0, None).unwrap_err().to_string();
        assert_mentions(&err, &["`w`", "bf16", "f32"]);
        // Same dtype loads.
        let back = f.load_checkpoint(&file.0, None).unwrap();
        assert_eq!(back.param_binding("w"), Some(&[1.0f32, 2.0][..]));
    }

    #[test]
    fn optimizer_state_of_another_size_is_rejected_at_load() {
        let file = TempFile::new("optim_size");
        let f = with_params("f", &[("w", &[2])]);
        let mut opt = Adam::new(0.1);
        let f = f.train_step(&mut opt, &["w"], &[]).0;
        f.save_checkpoint(&file.0, Some(&opt)).unwrap();
        // Hand-edit: a Func whose `w` is [2] but whose saved optimizer state for `w` has 3.
        let mut state = opt.state_dict().unwrap();
        for (_, b) in state.buffers.iter_mut() {
            b.push(0.0);
        }
        let mut bad = Adam::new(0.1);
        assert!(bad.load_state_dict(&state));
        f.save_checkpoint(&file.0, Some(&bad)).unwrap();
        let mut fresh = Adam::new(0.1);
        let err = f
            .load_checkpoint(&file.0, Some(&mut fresh))
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["optim.m/w", "3 values", "`w`", "2 values"]);
        assert_eq!(
            fresh.state_dict().unwrap().buffers.len(),
            0,
            "optimizer untouched"
        );
    }

    /// A safetensors file from a header JSON and a data section.
    fn raw(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = (header.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    const META: &str = r#""__metadata__":{"rlx.format":"checkpoint/1"}"#;

    fn load_bytes(tag: &str, bytes: &[u8]) -> String {
        let file = TempFile::new(tag);
        std::fs::write(&file.0, bytes).unwrap();
        let f = Func::new("f", |s| s.param("w", shape![2]).sum_all());
        f.load_checkpoint(&file.0, None).unwrap_err().to_string()
    }

    #[test]
    fn malformed_checkpoint_bytes_are_errors_never_panics_or_huge_allocations() {
        let good = {
            let file = TempFile::new("good");
            with_params("f", &[("w", &[2])])
                .save_checkpoint(&file.0, None)
                .unwrap();
            std::fs::read(&file.0).unwrap()
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("short_length", vec![1, 0, 0]),
            ("truncated_header", good[..good.len() / 2].to_vec()),
            ("truncated_data", good[..good.len() - 3].to_vec()),
            ("terabyte_header", {
                let mut b = (1u64 << 40).to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                b
            }),
            ("max_header", {
                let mut b = u64::MAX.to_le_bytes().to_vec();
                b.extend_from_slice(b"{}");
                b
            }),
            (
                "offset_past_end",
                raw(
                    &format!(
                        r#"{{{META},"param.w":{{"dtype":"F32","shape":[2],"data_offsets":[0,800]}}}}"#
                    ),
                    &[0; 8],
                ),
            ),
            (
                "overlapping",
                raw(
                    &format!(
                        r#"{{{META},"param.w":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}},"param.v":{{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}}}"#
                    ),
                    &[0; 12],
                ),
            ),
            (
                "overflowing_count",
                raw(
                    &format!(
                        r#"{{{META},"param.w":{{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}}}}"#
                    ),
                    &[0; 8],
                ),
            ),
            (
                "reversed_offsets",
                raw(
                    &format!(
                        r#"{{{META},"param.w":{{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}}}"#
                    ),
                    &[0; 8],
                ),
            ),
            ("bad_json", raw("{not json", &[])),
            ("not_utf8", raw("\u{0}\u{1}", &[0xff, 0xfe])),
        ];
        for (tag, bytes) in cases {
            let err = load_bytes(tag, &bytes);
            assert_mentions(&err, &["load_checkpoint"]);
            assert!(
                err.contains("not a valid safetensors") || err.contains("not written by"),
                "{tag}: {err}"
            );
        }
    }

    #[test]
    fn a_valid_file_with_a_non_f32_tensor_names_it() {
        let header =
            format!(r#"{{{META},"param.w":{{"dtype":"F64","shape":[2],"data_offsets":[0,16]}}}}"#);
        let err = load_bytes("f64", &raw(&header, &[0; 16]));
        assert_mentions(&err, &["`param.w`", "F64", "F32"]);
    }
}

// ---------------------------------------------------------------------------------------
// Model: strict loading.

#[cfg(feature = "eval")]
mod model {
    use super::*;
    use rlx_tensor::{Model, graph};

    fn two_params() -> Model {
        Model::new(graph("m", |s| {
            let x = s.input("x", shape![2]);
            let a = s.param("a", shape![2]);
            let b = s.param("b", shape![2]);
            &(&x * &a) + &b
        }))
    }

    #[test]
    fn try_load_lists_every_bad_name_and_binds_nothing_on_error() {
        let mut m = two_params();
        let err = m
            .try_load([
                ("a", &[1.0f32, 1.0][..]),
                ("zz", &[1.0][..]),
                ("b", &[1.0, 2.0, 3.0][..]),
                ("yy", &[1.0][..]),
            ])
            .unwrap_err()
            .to_string();
        assert_mentions(
            &err,
            &[
                "`zz`",
                "`yy`",
                "`b`",
                "needs 2 values, got 3",
                "declared params",
            ],
        );
        let mut unbound = m.unbound();
        unbound.sort_unstable();
        assert_eq!(unbound, ["a", "b"], "nothing was bound");
    }

    #[test]
    fn try_load_exact_requires_every_declared_param_once() {
        let mut m = two_params();
        let err = m
            .try_load_exact([("a", &[1.0f32, 1.0][..])])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["missing", "`b`"]);
        let err = m
            .try_load_exact([
                ("a", &[1.0f32, 1.0][..]),
                ("b", &[0.0, 0.0][..]),
                ("a", &[2.0, 2.0][..]),
            ])
            .unwrap_err()
            .to_string();
        assert_mentions(&err, &["`a`", "twice"]);
        m.try_load_exact([("a", &[2.0f32, 3.0][..]), ("b", &[1.0, 1.0][..])])
            .unwrap();
        assert_eq!(m.run(&[("x", &[1.0, 1.0])]), vec![vec![3.0, 4.0]]);
    }
}
