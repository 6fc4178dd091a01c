//! Shape/view ops, slicing, `cat`/`stack` and the `s!`/`shape!` macros: values against
//! hand-computed results or naive index loops, the IR each op appends, and the errors of
//! the `try_` twins.
#![cfg(feature = "eval")]

use rlx_ir::{DimBinding, Node, Op, TensorData};
use rlx_tensor::{
    DType, Dim, GraphScope, Shape, SliceAxis, Tensor, ax, cat, ix, rg, s, shape, stack, tail,
    try_cat, try_stack,
};

/// `0, 1, …, n-1` as an f32 tensor of `dims`.
fn iota(dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    Tensor::from_vec((0..n).map(|v| v as f32).collect::<Vec<_>>(), dims)
}

fn f(v: &[i32]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// The node `t` refers to.
fn node(t: &Tensor) -> Node {
    t.to_graph().node(t.id()).clone()
}

fn ops(t: &Tensor) -> Vec<Op> {
    t.to_graph().nodes().iter().map(|n| n.op.clone()).collect()
}

fn count(t: &Tensor, pred: impl Fn(&Op) -> bool) -> usize {
    ops(t).iter().filter(|o| pred(o)).count()
}

/// Run a one-output graph built in a scope on concrete inputs with the oracle.
fn run_scope(t: &Tensor, inputs: &[(&str, TensorData)]) -> TensorData {
    let g = t.to_graph();
    rlx_ir::interp::run(&g, inputs)
        .expect("graph runs")
        .remove(0)
}

// ---- reshape / transpose / narrow ----

#[test]
fn reshape_keeps_row_major_order_and_infers_the_minus_one() {
    let x = iota(&[2, 3]).reshape([3, -1]);
    assert_eq!(x.dims(), vec![3, 2]);
    assert_eq!(x.to_vec(), f(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(
        node(&x).op,
        Op::Reshape {
            new_shape: vec![3, -1]
        }
    );
    assert_eq!(iota(&[4]).reshape(vec![2, 2]).dims(), vec![2, 2]);
}

#[test]
fn try_reshape_reports_both_element_counts() {
    let err = iota(&[2, 3]).try_reshape([4, 2]).unwrap_err().to_string();
    assert!(err.starts_with("reshape:"), "{err}");
    assert!(err.contains("[2, 3] f32 (6 elements)"), "{err}");
    assert!(err.contains("[4, 2] (8 elements)"), "{err}");
}

#[test]
#[should_panic(expected = "reshape: cannot reshape [2, 3] f32 (6 elements) to [5]")]
fn reshape_panics_with_the_try_twins_message() {
    iota(&[2, 3]).reshape([5]);
}

#[test]
#[should_panic(expected = "empty range 1..1")]
fn slice_panics_on_an_empty_range() {
    iota(&[2, 3]).slice(s![rg(1, 1)]);
}

#[test]
fn reshape_of_a_dynamic_input_keeps_the_symbol_and_runs_at_any_size() {
    let mut s = GraphScope::new("dyn");
    let x = s.input("x", shape![?, 4]);
    let y = x.reshape([-1, 2, 2]);
    assert_eq!(
        y.shape().dims(),
        &[Dim::Dynamic(0), Dim::Static(2), Dim::Static(2)]
    );
    let out = run_scope(
        &y,
        &[(
            "x",
            TensorData::from_f32(&[3, 4], &f(&(0..12).collect::<Vec<_>>())),
        )],
    );
    assert_eq!(out.dims, vec![3, 2, 2]);
    let err = x.try_reshape([8, -1]).unwrap_err().to_string();
    assert!(err.contains("dynamic"), "{err}");
}

#[test]
fn transpose_moves_elements_like_a_naive_permutation() {
    let x = iota(&[2, 3, 4]);
    let y = x.transpose([2, 0, 1]);
    assert_eq!(y.dims(), vec![4, 2, 3]);
    let mut want = vec![];
    for k in 0..4 {
        for i in 0..2 {
            for j in 0..3 {
                want.push((i * 12 + j * 4 + k) as f32);
            }
        }
    }
    assert_eq!(y.to_vec(), want);
    let err = x.try_transpose([0, 0, 1]).unwrap_err().to_string();
    assert!(err.contains("not a permutation"), "{err}");
}

#[test]
fn t_swaps_only_the_last_two_axes() {
    let x = iota(&[2, 2, 3]);
    let y = x.t();
    assert_eq!(y.dims(), vec![2, 3, 2]);
    assert_eq!(
        node(&y).op,
        Op::Transpose {
            perm: vec![0, 2, 1]
        }
    );
    assert_eq!(y.to_vec(), f(&[0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]));
    let err = iota(&[3]).try_t().unwrap_err().to_string();
    assert!(
        err.contains("t: swaps the last two axes") && err.contains("rank 1"),
        "{err}"
    );
}

#[test]
fn narrow_takes_a_window_and_rejects_overruns() {
    let x = iota(&[3, 4]);
    assert_eq!(x.narrow(1, 1, 2).to_vec(), f(&[1, 2, 5, 6, 9, 10]));
    assert_eq!(x.narrow(0, 2, 1).to_vec(), f(&[8, 9, 10, 11]));
    let err = x.try_narrow(1, 3, 2).unwrap_err().to_string();
    assert!(
        err.starts_with("narrow:") && err.contains("exceeds axis 1 of size 4"),
        "{err}"
    );
}

// ---- slicing ----

#[test]
fn slice_resolves_negative_bounds_against_static_dims() {
    let x = iota(&[2, 3, 4]);
    let y = x.slice(s![ix(-1), rg(-2, 3), tail(-3)]);
    assert_eq!(y.dims(), vec![1, 2, 3]);
    let mut want = vec![];
    for j in 1..3 {
        for k in 1..4 {
            want.push((12 + j * 4 + k) as f32);
        }
    }
    assert_eq!(y.to_vec(), want);
    assert_eq!(x.slice(s![ax(), ax(), rg(0, -1)]).dims(), vec![2, 3, 3]);
}

#[test]
fn slice_emits_one_narrow_per_sliced_axis_and_nothing_for_all() {
    let x = iota(&[4, 6, 2]);
    let y = x.slice(s![ax(), rg(1, 5)]);
    assert_eq!(count(&y, |o| matches!(o, Op::Narrow { .. })), 1);
    assert_eq!(
        node(&y).op,
        Op::Narrow {
            axis: 1,
            start: 1,
            len: 4
        }
    );
    let whole = x.slice(s![]);
    assert_eq!(whole.id(), x.id());
    let z = iota(&[4, 6, 2]).slice(s![ix(2), tail(3), ix(-1)]);
    assert_eq!(count(&z, |o| matches!(o, Op::Narrow { .. })), 3);
    assert_eq!(z.dims(), vec![1, 3, 1]);
    assert_eq!(
        z.to_vec(),
        f(&[2 * 12 + 3 * 2 + 1, 2 * 12 + 4 * 2 + 1, 2 * 12 + 5 * 2 + 1])
    );
}

#[test]
fn slice_errors_name_the_axis_and_the_resolved_range() {
    let x = iota(&[2, 3]);
    let too_many = x.try_slice(s![ax(), ax(), ax()]).unwrap_err().to_string();
    assert!(
        too_many.contains("3 axis entries for the rank-2 tensor"),
        "{too_many}"
    );
    let empty = x.try_slice(s![ax(), rg(2, 1)]).unwrap_err().to_string();
    assert!(empty.contains("empty range 2..1"), "{empty}");
    let out = x.try_slice(s![rg(0, 5)]).unwrap_err().to_string();
    assert!(out.contains("resolves to 0..5, outside 0..2"), "{out}");
    let idx = x.try_slice(s![ax(), ix(-4)]).unwrap_err().to_string();
    assert!(idx.contains("axis 1"), "{idx}");
}

#[test]
fn slice_of_a_dynamic_axis_needs_non_negative_bounds() {
    let mut s = GraphScope::new("dyn");
    let x = s.input("x", shape![?, 8]);
    let y = x.slice(s![rg(1, 3), rg(0, 4)]);
    assert_eq!(y.shape().dims(), &[Dim::Static(2), Dim::Static(4)]);
    let neg = x.try_slice(s![rg(0, -1)]).unwrap_err().to_string();
    assert!(neg.contains("dynamic axis"), "{neg}");
    let t = x.try_slice(s![tail(1)]).unwrap_err().to_string();
    assert!(t.contains("dynamic") && t.contains("rg(start, end)"), "{t}");
    let data: Vec<f32> = (0..32).map(|v| v as f32).collect();
    let out = run_scope(&y, &[("x", TensorData::from_f32(&[4, 8], &data))]);
    assert_eq!(out.to_f32_vec(), f(&[8, 9, 10, 11, 16, 17, 18, 19]));
}

#[test]
fn select_drops_the_axis_and_counts_negative_indices_from_the_end() {
    let x = iota(&[2, 3, 2]);
    let y = iota(&[2, 3, 2]).select(1, -1);
    assert_eq!(y.dims(), vec![2, 2]);
    assert_eq!(y.to_vec(), f(&[4, 5, 10, 11]));
    assert_eq!(x.select(0, 1).to_vec(), f(&[6, 7, 8, 9, 10, 11]));
    assert_eq!(count(&y, |o| matches!(o, Op::Narrow { .. })), 1);
    assert!(matches!(node(&y).op, Op::Reshape { .. }));
    let err = x.try_select(1, 3).unwrap_err().to_string();
    assert!(err.contains("select: index 3 is out of range"), "{err}");
    assert!(x.try_select(1, -4).is_err());
    assert!(
        x.try_select(3, 0)
            .unwrap_err()
            .to_string()
            .contains("axis 3 is out of range")
    );
}

// ---- broadcast / squeeze / unsqueeze / flatten ----

#[test]
fn broadcast_to_stretches_size_one_axes_and_adds_leading_ones() {
    let x = Tensor::from_vec(vec![1.0, 2.0], [2, 1]);
    let y = x.broadcast_to([2, 2, 3]);
    assert_eq!(y.to_vec(), f(&[1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2]));
    assert_eq!(
        node(&y).op,
        Op::Expand {
            target_shape: vec![2, 2, 3]
        }
    );
    let err = x.try_broadcast_to([3, 3]).unwrap_err().to_string();
    assert!(
        err.starts_with("broadcast_to:") && err.contains("[2, 1] f32"),
        "{err}"
    );
}

#[test]
fn flatten_unsqueeze_squeeze_and_squeeze_all_only_change_dims() {
    let x = iota(&[2, 1, 3]);
    assert_eq!(x.flatten().dims(), vec![6]);
    assert_eq!(x.flatten().to_vec(), f(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(x.squeeze(1).dims(), vec![2, 3]);
    assert_eq!(x.squeeze(1).to_vec(), f(&[0, 1, 2, 3, 4, 5]));
    assert_eq!(x.unsqueeze(0).dims(), vec![1, 2, 1, 3]);
    assert_eq!(x.unsqueeze(3).dims(), vec![2, 1, 3, 1]);
    assert_eq!(iota(&[1, 3, 1, 1]).squeeze_all().dims(), vec![3]);
    assert_eq!(iota(&[1, 1]).squeeze_all().dims(), Vec::<usize>::new());
    for t in [x.flatten(), x.squeeze(1), x.unsqueeze(2), x.squeeze_all()] {
        assert!(matches!(node(&t).op, Op::Reshape { .. }));
    }
    let err = x.try_squeeze(2).unwrap_err().to_string();
    assert!(
        err.contains("squeeze: axis 2 of [2, 1, 3] f32 has size 3, not 1"),
        "{err}"
    );
    let err = x.try_unsqueeze(4).unwrap_err().to_string();
    assert!(err.contains("0..=3"), "{err}");
}

#[test]
fn squeeze_and_unsqueeze_turn_a_dynamic_dim_into_minus_one() {
    let mut s = GraphScope::new("dyn");
    let x = s.input("x", shape![?, 1, 3]);
    let y = x.squeeze(1);
    assert_eq!(
        node(&y).op,
        Op::Reshape {
            new_shape: vec![-1, 3]
        }
    );
    assert_eq!(y.shape().dims(), &[Dim::Dynamic(0), Dim::Static(3)]);
    let z = y.unsqueeze(2);
    assert_eq!(
        node(&z).op,
        Op::Reshape {
            new_shape: vec![-1, 3, 1]
        }
    );
    let a = x.squeeze_all();
    assert_eq!(a.shape().dims(), &[Dim::Dynamic(0), Dim::Static(3)]);
    let data: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let out = run_scope(&z, &[("x", TensorData::from_f32(&[2, 1, 3], &data))]);
    assert_eq!(out.dims, vec![2, 3, 1]);
    assert_eq!(out.to_f32_vec(), data);
}

#[test]
fn squeeze_and_unsqueeze_work_with_two_dynamic_dims() {
    let mut s = GraphScope::new("dyn2");
    let x = s.input("x", shape![?, 1, ?1]);
    let y = x.squeeze(1);
    assert_eq!(y.shape().dims(), &[Dim::Dynamic(0), Dim::Dynamic(1)]);
    let z = y.unsqueeze(1);
    assert_eq!(
        z.shape().dims(),
        &[Dim::Dynamic(0), Dim::Static(1), Dim::Dynamic(1)]
    );
    let all = x.squeeze_all();
    assert_eq!(all.shape().dims(), &[Dim::Dynamic(0), Dim::Dynamic(1)]);
    let data: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let inputs = [("x", TensorData::from_f32(&[3, 1, 2], &data))];
    let out = run_scope(&y, &inputs);
    assert_eq!(
        (out.dims.clone(), out.to_f32_vec()),
        (vec![3, 2], data.clone())
    );
    let out = run_scope(&z, &inputs);
    assert_eq!(
        (out.dims.clone(), out.to_f32_vec()),
        (vec![3, 1, 2], data.clone())
    );
    let out = run_scope(&all, &inputs);
    assert_eq!(out.dims, vec![3, 2]);
    // The shapes bind consistently.
    let mut b = DimBinding::new();
    b.set(0, 3);
    b.set(1, 2);
    assert_eq!(z.shape().bind(&b), Shape::new(&[3, 1, 2], DType::F32));
}

// ---- split / chunk / tile / flip / roll / pad ----

#[test]
fn split_returns_consecutive_pieces_that_add_up() {
    let x = iota(&[5, 2]);
    let parts = x.split(0, &[1, 3, 1]);
    assert_eq!(parts.len(), 3);
    assert_eq!(parts[0].to_vec(), f(&[0, 1]));
    assert_eq!(parts[1].to_vec(), f(&[2, 3, 4, 5, 6, 7]));
    assert_eq!(parts[2].to_vec(), f(&[8, 9]));
    let err = x.try_split(0, &[2, 2]).unwrap_err().to_string();
    assert!(
        err.contains("sizes [2, 2] add up to 4 but axis 0 of [5, 2] f32 has 5"),
        "{err}"
    );
}

#[test]
fn chunk_gives_the_first_len_mod_n_chunks_one_extra() {
    let x = iota(&[2, 8]);
    let c = x.chunk(1, 3);
    let sizes: Vec<usize> = c.iter().map(|t| t.dims()[1]).collect();
    assert_eq!(sizes, vec![3, 3, 2]);
    assert_eq!(c[2].to_vec(), f(&[6, 7, 14, 15]));
    let even = x.chunk(1, 4);
    assert!(even.iter().all(|t| t.dims() == vec![2, 2]));
    // More chunks than elements: the trailing chunks are empty.
    let sparse = iota(&[2]).chunk(0, 3);
    assert_eq!(sparse[1].to_vec(), vec![1.0]);
    assert_eq!(sparse[2].dims(), vec![0]);
    assert!(sparse[2].to_vec().is_empty());
    let err = x.try_chunk(1, 0).unwrap_err().to_string();
    assert!(err.contains("0 chunks"), "{err}");
}

#[test]
fn tile_concatenates_copies_along_the_axis() {
    let x = iota(&[2, 2]);
    let y = x.tile(1, 3);
    assert_eq!(y.dims(), vec![2, 6]);
    assert_eq!(y.to_vec(), f(&[0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3]));
    let n = node(&y);
    assert_eq!(n.op, Op::Concat { axis: 1 });
    assert_eq!(n.inputs, vec![x.id(); 3]);
    assert!(
        x.try_tile(0, 0)
            .unwrap_err()
            .to_string()
            .contains("reps must be at least 1")
    );
}

#[test]
fn flip_is_a_gather_with_a_reversed_i64_index_in_the_same_graph() {
    let x = iota(&[2, 3]);
    let y = x.flip(1);
    assert_eq!(y.to_vec(), f(&[2, 1, 0, 5, 4, 3]));
    assert_eq!(x.flip(0).to_vec(), f(&[3, 4, 5, 0, 1, 2]));
    let g = y.to_graph();
    let n = g.node(y.id());
    assert_eq!(n.op, Op::Gather { axis: 1 });
    let idx = g.node(n.inputs[1]);
    assert_eq!(idx.shape, Shape::new(&[3], DType::I64));
    let Op::Constant { data } = &idx.op else {
        panic!("index is {:?}", idx.op)
    };
    let v = TensorData::new(DType::I64, &[3], data.clone()).unwrap();
    assert_eq!(v.to_i64_vec(), vec![2, 1, 0]);
    assert!(y.shares_graph(&x));
}

#[test]
fn roll_shifts_toward_the_end_and_wraps_like_numpy() {
    let x = iota(&[5]);
    let naive =
        |shift: usize| -> Vec<f32> { (0..5).map(|i| ((i + 5 - shift % 5) % 5) as f32).collect() };
    for shift in [1, 2, 4, 7] {
        assert_eq!(x.roll(0, shift).to_vec(), naive(shift), "shift {shift}");
    }
    assert_eq!(x.roll(0, 5).id(), x.id());
    let y = iota(&[2, 3]).roll(1, 1);
    assert_eq!(y.to_vec(), f(&[2, 0, 1, 5, 3, 4]));
    assert_eq!(node(&y).op, Op::Concat { axis: 1 });
}

#[test]
fn pad_fills_before_and_after_with_the_value_in_the_same_dtype() {
    let x = iota(&[2, 2]);
    let y = x.pad(1, 1, 2, -1.0);
    assert_eq!(y.dims(), vec![2, 5]);
    assert_eq!(y.to_vec(), f(&[-1, 0, 1, -1, -1, -1, 2, 3, -1, -1]));
    assert_eq!(
        x.pad(0, 0, 1, 7.5).to_vec(),
        vec![0.0, 1.0, 2.0, 3.0, 7.5, 7.5]
    );
    let d = Tensor::from_f64([1.0, 2.0], [2]).pad(0, 1, 0, 0.5);
    assert_eq!(d.dtype(), DType::F64);
    assert_eq!(d.to_vec_f64(), vec![0.5, 1.0, 2.0]);
    assert!(y.shares_graph(&x));
    assert!(x.try_pad(2, 1, 1, 0.0).is_err());
}

// ---- gather / index_select ----

#[test]
fn gather_places_the_index_shape_at_the_axis() {
    let table = iota(&[3, 4]);
    let idx = Tensor::from_i64([3, 0, -1, 1], [2, 2]);
    let y = table.gather(&idx, 1);
    assert_eq!(y.dims(), vec![3, 2, 2]);
    let raw = [3usize, 0, 3, 1];
    let mut want = vec![];
    for r in 0..3 {
        for &c in &raw {
            want.push((r * 4 + c) as f32);
        }
    }
    assert_eq!(y.to_vec(), want);
    assert_eq!(node(&y).op, Op::Gather { axis: 1 });
    let rows = table.index_select(0, &Tensor::index_vec([2, 2, 0]));
    assert_eq!(rows.to_vec(), f(&[8, 9, 10, 11, 8, 9, 10, 11, 0, 1, 2, 3]));
    assert_eq!(
        table
            .try_index_select(0, &Tensor::index_vec([1]))
            .unwrap()
            .to_vec(),
        f(&[4, 5, 6, 7])
    );
}

#[test]
fn gather_rejects_bool_indices_and_out_of_range_axes() {
    let table = iota(&[3, 4]);
    let mask = Tensor::from_data(TensorData::from_bool(&[2], &[true, false]));
    let err = table.try_gather(&mask, 0).unwrap_err().to_string();
    assert!(
        err.starts_with("gather:") && err.contains(".cast(DType::I64)"),
        "{err}"
    );
    let err = table
        .try_gather(&Tensor::index_vec([0]), 2)
        .unwrap_err()
        .to_string();
    assert!(err.contains("axis 2 is out of range"), "{err}");
}

// ---- cat / stack ----

#[test]
fn cat_merges_graphs_into_the_first_tensor() {
    let a = iota(&[1, 2]);
    let b = Tensor::from_vec(vec![5.0, 6.0, 7.0, 8.0], [2, 2]);
    let c = cat(&[&a, &b], 0);
    assert!(c.shares_graph(&a));
    assert!(!c.shares_graph(&b));
    assert_eq!(c.to_vec(), f(&[0, 1, 5, 6, 7, 8]));
    let d = cat(&[&a, &a, &a], 1);
    assert_eq!(d.to_vec(), f(&[0, 1, 0, 1, 0, 1]));
    let err = try_cat(&[], 0).unwrap_err().to_string();
    assert!(err.contains("at least one tensor"), "{err}");
    let err = try_cat(&[&a, &iota(&[2, 3])], 0).unwrap_err().to_string();
    assert!(
        err.starts_with("concat:") && err.contains("axis 1 differs"),
        "{err}"
    );
}

#[test]
fn stack_adds_a_new_axis_then_concatenates() {
    let a = Tensor::from_vec(vec![1.0, 2.0, 3.0], [3]);
    let b = Tensor::from_vec(vec![4.0, 5.0, 6.0], [3]);
    let s0 = stack(&[&a, &b], 0);
    assert_eq!(s0.dims(), vec![2, 3]);
    assert_eq!(s0.to_vec(), f(&[1, 2, 3, 4, 5, 6]));
    let s1 = stack(&[&a, &b], 1);
    assert_eq!(s1.dims(), vec![3, 2]);
    assert_eq!(s1.to_vec(), f(&[1, 4, 2, 5, 3, 6]));
    let err = try_stack(&[&a, &iota(&[4])], 0).unwrap_err().to_string();
    assert!(
        err.contains("tensor 1 is [4] f32 but tensor 0 is [3] f32"),
        "{err}"
    );
    assert!(
        try_stack(&[&a], 2)
            .unwrap_err()
            .to_string()
            .contains("unsqueeze")
    );
}

// ---- macros ----

struct Cfg {
    width: usize,
}

#[test]
fn shape_macro_accepts_question_marks_symbols_dtypes_and_expressions() {
    assert_eq!(shape![2, 3], Shape::new(&[2, 3], DType::F32));
    assert_eq!(shape![7], Shape::new(&[7], DType::F32));
    assert_eq!(shape![2, 3,], Shape::new(&[2, 3], DType::F32));
    assert_eq!(shape![?, 4].dims(), &[Dim::Dynamic(0), Dim::Static(4)]);
    assert_eq!(shape![?, ?].dims(), &[Dim::Dynamic(0), Dim::Dynamic(0)]);
    assert_eq!(
        shape![?1, ?, 2].dims(),
        &[Dim::Dynamic(1), Dim::Dynamic(0), Dim::Static(2)]
    );
    let bf = shape![BF16; 2, ?];
    assert_eq!(bf.dtype(), DType::BF16);
    assert_eq!(bf.dims(), &[Dim::Static(2), Dim::Dynamic(0)]);
    assert_eq!(shape![I64; 5].dtype(), DType::I64);
    assert_eq!(shape![Bool; ?3,].dims(), &[Dim::Dynamic(3)]);
    let w = 8usize;
    let cfg = Cfg { width: 3 };
    assert_eq!(
        shape![w / 2, cfg.width * 2, w].dims(),
        &[Dim::Static(4), Dim::Static(6), Dim::Static(8)]
    );
    assert_eq!(
        shape![F64; ?, w + 1, (w - 2) * 2].dims(),
        &[Dim::Dynamic(0), Dim::Static(9), Dim::Static(12)]
    );
    // The hidden helpers are reachable by path, as `shape!` expands through them.
    assert_eq!(rlx_tensor::__dim!(?2), Dim::Dynamic(2));
    assert_eq!(
        rlx_tensor::__shape_dims!([] 1, ?),
        [Dim::Static(1), Dim::Dynamic(0)]
    );
}

#[test]
fn s_macro_collects_axis_expressions() {
    assert!(s![].axes().is_empty());
    let lo = 2i64;
    let spec = s![ax(), rg(lo, lo * 3), ix(-1), tail(1),];
    assert_eq!(
        spec.axes(),
        &[
            SliceAxis::All,
            SliceAxis::Range { start: 2, end: 6 },
            SliceAxis::Index(-1),
            SliceAxis::From(1),
        ]
    );
    let direct = s![SliceAxis::Range { start: 0, end: 1 }];
    assert_eq!(direct.axes().len(), 1);
    assert_eq!(rlx_tensor::SliceSpec::default().axes(), &[]);
}
