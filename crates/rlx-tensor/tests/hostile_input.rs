//! Hostile input through the public API (issue 15): each reproduction read out of
//! bounds, wrapped a size, aborted on allocation or never terminated before the fix.
//! Every case must now be an `Err` (or a panic from a panicking twin) whose message
//! names the op, the sizes and the fix.

use rlx_ir::{Dim, DimBinding, DimGuards, Shape, TensorData};
use rlx_tensor::{Func, Model, Tensor, graph, ix, rg, s, shape};

fn err_text<T: std::fmt::Debug>(r: rlx_tensor::Result<T>) -> String {
    r.expect_err("expected an error").to_string()
}

fn contains_all(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "missing {p:?} in: {msg}");
    }
}

/// A `[?, 3]` input sliced to rows `0..rows`.
fn dynamic_row_slice(rows: i64) -> Func {
    Func::new("s", move |s| {
        s.input("x", shape![?, 3]).slice(s![rg(0, rows)])
    })
}

#[test]
fn slice_of_a_dynamic_axis_past_the_bound_size_is_an_error_not_heap_garbage() {
    let f = dynamic_row_slice(5);
    let msg = err_text(f.try_run(&[("x", &[1.0; 6])]));
    contains_all(
        &msg,
        &["narrow", "?0 = 2", "start 0 + len 5", "axis 0 of size 2"],
    );
    // Large enough data runs and reads exactly the rows asked for.
    let x: Vec<f32> = (0..18).map(|i| i as f32).collect();
    assert_eq!(f.run(&[("x", &x)]), vec![x[..15].to_vec()]);
}

#[test]
fn huge_slice_of_a_dynamic_axis_errors_instead_of_segfaulting() {
    let f = Func::new("s", |s| {
        s.input("x", shape![?, 3])
            .slice(s![rg(0, 4_000_000)])
            .sum_all()
    });
    let msg = err_text(f.try_run(&[("x", &[1.0; 6])]));
    contains_all(&msg, &["narrow", "len 4000000", "size 2"]);
}

#[test]
fn narrow_and_select_on_a_dynamic_axis_are_guarded() {
    let narrow = Func::new("n", |s| s.input("x", shape![?, 2]).narrow(0, 3, 2));
    let msg = err_text(narrow.try_run(&[("x", &[0.0; 8])]));
    contains_all(&msg, &["narrow", "?0 = 4", "start 3 + len 2", "size 4"]);
    assert_eq!(
        narrow.run(&[("x", &[0., 1., 2., 3., 4., 5., 6., 7., 8., 9.])]),
        vec![vec![6., 7., 8., 9.]]
    );
    let select = Func::new("sel", |s| s.input("x", shape![?, 2]).select(0, 2));
    let msg = err_text(select.try_run(&[("x", &[0.0; 4])]));
    contains_all(&msg, &["narrow", "?0 = 2", "start 2 + len 1", "size 2"]);
    assert_eq!(
        select.run(&[("x", &[0., 1., 2., 3., 4., 5.])]),
        vec![vec![4., 5.]]
    );
}

#[test]
fn zero_rows_bound_to_a_dynamic_axis_fail_the_guard() {
    let f = dynamic_row_slice(1);
    let msg = err_text(f.try_run(&[("x", &[])]));
    contains_all(&msg, &["?0 = 0", "size 0"]);
}

#[test]
fn a_model_with_a_dynamic_slice_is_guarded() {
    let g = graph("m", |s| {
        let x = s.input("x", shape![?, 2]);
        let w = s.param("w", shape![2]);
        &x.slice(s![rg(1, 4)]) * &w
    });
    let mut m = Model::new(g);
    m.load([("w", &[1.0f32, 10.0][..])]);
    let msg = err_text(m.try_run(&[("x", &[1.0; 6])]));
    contains_all(&msg, &["narrow", "?0 = 3", "start 1 + len 3", "size 3"]);
    assert_eq!(
        m.run(&[("x", &[0., 1., 2., 3., 4., 5., 6., 7.])]),
        vec![vec![2., 30., 4., 50., 6., 70.]]
    );
}

#[test]
fn a_gradient_function_of_a_dynamic_slice_is_guarded() {
    let f = Func::new("g", |s| {
        let x = s.input("x", shape![?, 2]);
        let w = s.param("w", shape![2]);
        (&x.slice(s![rg(0, 3)]) * &w).sum_all()
    })
    .with_param("w", vec![1.0, 2.0]);
    let g = f.grad(&["w"]);
    let msg = err_text(g.try_run(&[("x", &[1.0; 4])]));
    contains_all(&msg, &["narrow", "?0 = 2", "size 2"]);
    // d/dw Σ x[0..3]·w = column sums of the first three rows.
    let out = g.run(&[("x", &[1., 2., 3., 4., 5., 6., 7., 8.])]);
    assert_eq!(out, vec![vec![9.0, 12.0]]);
}

#[test]
fn the_oracle_reports_the_guard_instead_of_panicking() {
    let f = dynamic_row_slice(5);
    let data = TensorData::from_f32(&[2, 3], &[1.0; 6]);
    let e = rlx_ir::interp::run(f.graph(), &[("x", data)]).unwrap_err();
    assert_eq!(e.op, "narrow");
    contains_all(&e.message, &["?0 = 2", "start 0 + len 5"]);
}

#[test]
fn guards_of_a_traced_graph_are_checked_per_binding() {
    let f = dynamic_row_slice(4);
    let guards = DimGuards::from_graph(f.graph());
    assert_eq!(guards.len(), 1);
    let b = |n| [(0u32, n)].into_iter().collect::<DimBinding>();
    assert!(guards.check(&b(4)).is_ok());
    assert!(guards.check(&b(3)).is_err());
    let _ = Shape::from_dims(&[Dim::Dynamic(0)], rlx_ir::DType::F32);
}

#[test]
fn from_vec_of_a_shape_whose_count_wraps_is_an_error() {
    let msg = err_text(Tensor::try_from_vec(vec![], [1 << 32, 1 << 32]));
    contains_all(&msg, &["from_vec", "[4294967296, 4294967296]", "too large"]);
    let msg = err_text(Tensor::try_from_vec(vec![], [usize::MAX, 2, 0]));
    contains_all(&msg, &["from_vec", "too large"]);
}

#[test]
fn pad_whose_size_overflows_is_an_error() {
    let msg = err_text(Tensor::ones([3]).try_pad(0, 0, usize::MAX, 0.0));
    contains_all(&msg, &["pad", "overflows", "[3] f32"]);
    let msg = err_text(Tensor::ones([3]).try_pad(0, isize::MAX as usize, 0, 0.0));
    contains_all(&msg, &["pad", "too large"]);
}

#[test]
fn split_sizes_whose_sum_wraps_are_an_error() {
    let msg = err_text(Tensor::ones([4]).try_split(0, &[usize::MAX, 5]));
    contains_all(&msg, &["split", "more than usize holds"]);
}

#[test]
fn conv_and_pool_spans_that_overflow_are_errors() {
    let x = Tensor::ones([1, 1, 4, 4]);
    let w = Tensor::ones([1, 1, 2, 2]);
    // Padding whose doubled size overflows usize, and a dilation whose span does.
    let msg = err_text(x.try_conv2d(&w, [2, 2], [1, 1], [usize::MAX / 2 + 1, 0], [1, 1], 1));
    contains_all(&msg, &["conv", "spatial axis 0"]);
    let msg = err_text(x.try_conv2d(&w, [2, 2], [1, 1], [0, 0], [usize::MAX, 1], 1));
    contains_all(&msg, &["conv", "smaller than the dilated kernel"]);
    // Still right where nothing overflows.
    assert_eq!(
        x.conv2d(&w, [2, 2], [1, 1], [0, 0], [1, 1], 1).dims(),
        vec![1, 1, 3, 3]
    );
}

#[test]
fn a_product_too_large_to_allocate_is_an_error_not_an_abort() {
    let a = Tensor::zeros([1 << 20, 1]);
    let b = Tensor::zeros([1, 1 << 20]);
    let msg = err_text(a.matmul(&b).try_to_vec());
    contains_all(&msg, &["out of memory", "4398046511104 bytes"]);
}

#[test]
fn tile_and_chunk_with_trillions_of_elements_are_errors() {
    let t = Tensor::ones([4]);
    let msg = err_text(t.try_tile(0, 1 << 61));
    contains_all(&msg, &["tile", "too large"]);
    // Within the address space but 2^40 operands do not fit in memory.
    let msg = err_text(t.try_tile(0, 1 << 40));
    contains_all(&msg, &["tile", "out of memory", "1099511627776 pieces"]);
    // A broadcast view merged into an axis reads through an index table; one that
    // cannot be allocated is an error when the result is read.
    let view = Tensor::ones([4, 1])
        .broadcast_to([4, 1 << 40])
        .reshape([-1]);
    assert!(
        view.try_to_vec()
            .unwrap_err()
            .to_string()
            .contains("does not fit in memory")
    );
    let msg = err_text(t.try_chunk(0, 1 << 61));
    contains_all(&msg, &["chunk", "out of memory"]);
}

#[test]
fn tile_repeats_the_values_along_the_axis() {
    let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    assert_eq!(
        x.tile(0, 2).to_vec(),
        vec![1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0]
    );
    assert_eq!(
        x.tile(1, 3).to_vec(),
        vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 4.0, 3.0, 4.0]
    );
}

#[test]
fn arange_step_near_i64_max_terminates_with_the_exact_length() {
    let t = Tensor::arange_step(0, i64::MAX, 1 << 62);
    assert_eq!(t.to_vec(), vec![0.0, (1u64 << 62) as f32]);
    let t = Tensor::arange_step(i64::MAX, i64::MIN, i64::MIN);
    assert_eq!(t.dims(), vec![2]);
    assert_eq!(Tensor::arange_step(5, 0, -2).to_vec(), vec![5.0, 3.0, 1.0]);
    let msg = err_text(Tensor::try_arange_step(0, i64::MAX, 1));
    contains_all(&msg, &["arange_step", "too large"]);
}

#[test]
fn an_integer_scalar_beyond_2_pow_53_is_exact_on_i64_and_an_error_where_it_does_not_fit() {
    let big = (1i64 << 60) + 1;
    let t = Tensor::from_i64([1, 2], [2]);
    let sum = t.try_add(big).expect("an i64 tensor takes any i64 scalar");
    assert_eq!(sum.to_vec_i64(), vec![big + 1, big + 2]);
    let small = Tensor::from_i64([1, 2], [2]).cast(rlx_ir::DType::I32);
    let msg = err_text(small.try_add(big));
    contains_all(&msg, &["1152921504606846977", "i32", "wider"]);
    // A float tensor takes it rounded to its dtype, as any float arithmetic does.
    let f = Tensor::from_vec(vec![0.0], [1]).try_add(big).unwrap();
    assert_eq!(f.to_vec(), vec![(1u64 << 60) as f32]);
}

#[test]
fn eye_and_full_name_the_size_that_is_too_large() {
    let msg = err_text(Tensor::try_eye(1 << 32));
    contains_all(&msg, &["eye", "[4294967296, 4294967296]", "too large"]);
    let msg = err_text(Tensor::try_full([usize::MAX], 1.0));
    contains_all(&msg, &["full", "too large"]);
    let panic = std::panic::catch_unwind(|| Tensor::full([usize::MAX], 1.0)).unwrap_err();
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    contains_all(&text, &["full", "too large"]);
    // Representable but not allocatable: an error naming the bytes.
    let msg = err_text(Tensor::try_zeros([1 << 50]));
    contains_all(&msg, &["out of memory", "4503599627370496 bytes"]);
}

#[test]
fn ix_at_i64_max_reports_the_position_not_a_wrapped_range() {
    let msg = err_text(Tensor::ones([3]).try_slice(s![ix(i64::MAX)]));
    contains_all(
        &msg,
        &["9223372036854775807..9223372036854775808", "outside 0..3"],
    );
    let msg = err_text(Tensor::ones([3]).try_slice(s![ix(i64::MIN)]));
    assert!(msg.contains("outside 0..3"), "{msg}");
}
