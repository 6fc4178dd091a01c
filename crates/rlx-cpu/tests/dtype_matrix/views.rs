//! The opaque data-movement kernels on views: `concat`, `pad`, `scatter_add` and
//! `softmax_cross_entropy_with_logits` whose operands are transposed, narrowed,
//! broadcast or reshaped views (read in place by strided copies), compared with the
//! oracle for every dtype — byte for byte where the op only moves or adds elements.

use super::cases::random;
use super::rng::Rng;
use rlx_cpu::CpuBackend;
use rlx_ir::{DType, Graph, NodeId, Op, Shape, TensorData, interp};
use rlx_runtime::{Backend, Device, arg_order};

/// The oracle's outputs (or its error).
fn oracle(g: &Graph, args: &[TensorData]) -> Result<Vec<TensorData>, String> {
    let names: Vec<String> = arg_order(g)
        .into_iter()
        .map(|id| match &g.node(id).op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        })
        .collect();
    let named: Vec<(&str, &TensorData)> = names.iter().map(|s| s.as_str()).zip(args).collect();
    interp::run_refs(g, &named).map_err(|e| e.to_string())
}

/// The compiled CPU program's outputs (or its error).
fn compiled(g: &Graph, args: &[TensorData]) -> Result<Vec<TensorData>, String> {
    let exe = CpuBackend
        .compile(Device::Cpu, g)
        .map_err(|e| e.to_string())?;
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    exe.run(&views).map_err(|e| e.to_string())
}

/// An oracle error's message without the node it names (the compiled error names its
/// kernel instead).
fn strip(e: &str) -> &str {
    e.split(" (at node").next().unwrap_or(e)
}

/// Compiled and oracle results are the same dtype, dims and bytes.
fn assert_bytes_match(g: &Graph, args: &[TensorData], what: &str) {
    let want = oracle(g, args).unwrap_or_else(|e| panic!("{what}: oracle failed: {e}\n{g}"));
    let got = compiled(g, args).unwrap_or_else(|e| panic!("{what}: compiled failed: {e}\n{g}"));
    for (a, b) in got.iter().zip(&want) {
        assert_eq!((a.dtype, &a.dims), (b.dtype, &b.dims), "{what}");
        assert!(
            a.bytes == b.bytes,
            "{what}: bytes differ\n got {:?}\nwant {:?}",
            a.to_f64_vec(),
            b.to_f64_vec()
        );
    }
}

fn input(
    g: &mut Graph,
    args: &mut Vec<TensorData>,
    rng: &mut Rng,
    dims: &[usize],
    dt: DType,
) -> NodeId {
    let d = random(rng, dims, dt);
    let id = g.input(format!("x{}", args.len()), d.shape());
    args.push(d);
    id
}

fn add(g: &mut Graph, op: Op, ins: Vec<NodeId>) -> NodeId {
    g.add_op(op, ins).expect("valid op")
}

/// Three views with dims `dims` except `n_i` on `axis`: a transposed input, a narrow of a
/// larger input, and a broadcast of a size-1 input.
fn three_views(
    g: &mut Graph,
    args: &mut Vec<TensorData>,
    rng: &mut Rng,
    dims: &[usize],
    axis: usize,
    ns: [usize; 3],
    dt: DType,
) -> Vec<NodeId> {
    let r = dims.len();
    let with = |n: usize| {
        let mut d = dims.to_vec();
        d[axis] = n;
        d
    };
    // Transposed: stored reversed, read back with the reversing permutation.
    let d0 = with(ns[0]);
    let rev: Vec<usize> = d0.iter().rev().copied().collect();
    let x0 = input(g, args, rng, &rev, dt);
    let perm: Vec<usize> = (0..r).rev().collect();
    let v0 = add(g, Op::Transpose { perm }, vec![x0]);
    // Narrowed: elements 1..1+n of a larger axis 0 (or of `axis` itself).
    let d1 = with(ns[1]);
    let mut big = d1.clone();
    big[0] += 2;
    let x1 = input(g, args, rng, &big, dt);
    let v1 = add(
        g,
        Op::Narrow {
            axis: 0,
            start: 1,
            len: d1[0],
        },
        vec![x1],
    );
    // Broadcast: a [1, .., 1, last] input expanded.
    let d2 = with(ns[2]);
    let mut small = vec![1; r];
    small[r - 1] = d2[r - 1];
    let x2 = input(g, args, rng, &small, dt);
    let v2 = add(
        g,
        Op::Expand {
            target_shape: d2.iter().map(|&x| x as i64).collect(),
        },
        vec![x2],
    );
    vec![v0, v1, v2]
}

#[test]
fn concat_of_transposed_narrowed_and_broadcast_views_is_the_oracles_bytes_for_every_dtype() {
    let mut rng = Rng::new(11);
    for dt in DType::ALL {
        for axis in 0..3 {
            for ns in [[2, 3, 1], [1, 0, 2]] {
                let mut g = Graph::new("concat_views");
                let mut args = Vec::new();
                let vs = three_views(&mut g, &mut args, &mut rng, &[3, 4, 5], axis, ns, dt);
                let y = add(&mut g, Op::Concat { axis }, vs);
                g.set_outputs(vec![y]);
                assert_bytes_match(&g, &args, &format!("concat {dt} axis {axis} {ns:?}"));
            }
        }
    }
}

#[test]
fn concat_of_head_split_transposes_reads_runs_of_the_head_dim_exactly() {
    // The backward of W11's q/k/v split: three [B, H, T, hd] → [B, T, H·hd] views.
    let (b, h, t, hd) = (2, 4, 6, 8);
    let mut rng = Rng::new(5);
    for dt in [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I64,
        DType::U8,
        DType::C64,
    ] {
        let mut g = Graph::new("qkv_bwd");
        let mut args = Vec::new();
        let mut parts = Vec::new();
        for _ in 0..3 {
            let x = input(&mut g, &mut args, &mut rng, &[b, h, t, hd], dt);
            let tr = add(
                &mut g,
                Op::Transpose {
                    perm: vec![0, 2, 1, 3],
                },
                vec![x],
            );
            parts.push(add(
                &mut g,
                Op::Reshape {
                    new_shape: vec![b as i64, t as i64, (h * hd) as i64],
                },
                vec![tr],
            ));
        }
        let y = add(&mut g, Op::Concat { axis: 2 }, parts);
        g.set_outputs(vec![y]);
        assert_bytes_match(&g, &args, &format!("qkv concat {dt}"));
    }
}

#[test]
fn concat_with_size_one_axes_and_empty_results_matches_the_oracle() {
    let mut rng = Rng::new(3);
    for dims in [vec![1, 1, 7], vec![0, 3, 2], vec![2, 1, 1]] {
        for axis in 0..3 {
            let mut g = Graph::new("edges");
            let mut args = Vec::new();
            let vs = three_views(
                &mut g,
                &mut args,
                &mut rng,
                &dims,
                axis,
                [1, 1, 2],
                DType::F32,
            );
            let y = add(&mut g, Op::Concat { axis }, vs);
            g.set_outputs(vec![y]);
            assert_bytes_match(&g, &args, &format!("concat {dims:?} axis {axis}"));
        }
    }
}

#[test]
fn pad_of_a_transposed_view_along_every_axis_fills_like_the_oracle_for_every_dtype() {
    let mut rng = Rng::new(17);
    for dt in DType::ALL {
        for axis in 0..3 {
            for (before, after, value) in [(2, 1, 1.5), (0, 3, 0.0), (1, 0, -2.0), (0, 0, 7.0)] {
                let mut g = Graph::new("pad_views");
                let mut args = Vec::new();
                let x = input(&mut g, &mut args, &mut rng, &[5, 4, 3], dt);
                let v = add(
                    &mut g,
                    Op::Transpose {
                        perm: vec![2, 1, 0],
                    },
                    vec![x],
                );
                let y = add(
                    &mut g,
                    Op::Pad {
                        axis,
                        before,
                        after,
                        value,
                    },
                    vec![v],
                );
                g.set_outputs(vec![y]);
                assert_bytes_match(&g, &args, &format!("pad {dt} axis {axis} {before}/{after}"));
            }
        }
    }
}

/// `scatter_add(base, indices, updates)` along `axis` with a broadcast base and
/// transposed updates.
fn scatter_graph(
    rng: &mut Rng,
    dt: DType,
    axis: usize,
    dims: &[usize],
    idx: TensorData,
) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("scatter_views");
    let mut args = Vec::new();
    // Base: a [1, last] row broadcast (or a plain input when axis is the last).
    let base = if axis == 0 {
        let row = input(&mut g, &mut args, rng, &[1, dims[1]], dt);
        add(
            &mut g,
            Op::Expand {
                target_shape: dims.iter().map(|&x| x as i64).collect(),
            },
            vec![row],
        )
    } else {
        input(&mut g, &mut args, rng, dims, dt)
    };
    let m = idx.numel();
    let ix = g.input(format!("x{}", args.len()), idx.shape());
    args.push(idx);
    let mut ud = dims.to_vec();
    ud[axis] = m;
    let rev: Vec<usize> = ud.iter().rev().copied().collect();
    let u = input(&mut g, &mut args, rng, &rev, dt);
    let ut = add(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![u]);
    let y = add(&mut g, Op::ScatterAdd { axis }, vec![base, ix, ut]);
    g.set_outputs(vec![y]);
    (g, args)
}

#[test]
fn scatter_add_with_repeated_and_negative_indices_is_the_oracles_bytes_for_every_dtype() {
    let mut rng = Rng::new(23);
    for dt in DType::ALL {
        for axis in 0..2 {
            let n = [7, 5][axis];
            let idx = TensorData::from_i64(&[6], &[3, 0, 3, -1, 3, 1]);
            let (g, args) = scatter_graph(&mut rng, dt, axis, &[7, 5], idx);
            match oracle(&g, &args) {
                Err(e) => {
                    let got = compiled(&g, &args).expect_err("the oracle refused");
                    assert!(got.contains(strip(&e)), "{dt}: {got} vs {e}");
                }
                Ok(_) => {
                    assert_bytes_match(&g, &args, &format!("scatter_add {dt} axis {axis} n {n}"))
                }
            }
        }
    }
}

#[test]
fn scatter_add_out_of_range_or_fractional_indices_give_the_oracles_error() {
    let mut rng = Rng::new(29);
    for idx in [
        TensorData::from_i64(&[3], &[0, 7, 1]),
        TensorData::from_i64(&[2], &[-8, 0]),
        TensorData::from_i64_as(DType::I32, &[2], &[1, 100]),
        TensorData::from_f32(&[2], &[1.0, 2.5]),
    ] {
        let (g, args) = scatter_graph(&mut rng, DType::F32, 0, &[7, 5], idx);
        let want = oracle(&g, &args).expect_err("invalid indices");
        let got = compiled(&g, &args).expect_err("invalid indices must fail");
        assert!(
            got.contains(strip(&want)),
            "compiled: {got}\noracle: {want}"
        );
    }
}

#[test]
fn scatter_add_of_many_updates_per_row_is_deterministic_and_exact() {
    // 4096 updates into 64 rows (64 per row on average): f64 accumulation per row in
    // index order, like the oracle, whatever task owns the row.
    let mut rng = Rng::new(31);
    let ids: Vec<i64> = (0..4096).map(|i| (i * 7919 % 64) as i64).collect();
    let idx = TensorData::from_i64(&[4096], &ids);
    let (g, args) = scatter_graph(&mut rng, DType::F32, 0, &[64, 48], idx);
    assert_bytes_match(&g, &args, "many updates");
    let a = compiled(&g, &args).unwrap();
    for _ in 0..3 {
        assert_eq!(compiled(&g, &args).unwrap()[0].bytes, a[0].bytes);
    }
}

/// Cross-entropy of `[rows, c]` logits given transposed (stored `[c, rows]`) or dense.
fn ce_graph(logits: &TensorData, labels: TensorData, transposed: bool) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("ce");
    let (rows, c) = (labels.numel(), logits.numel() / labels.numel().max(1));
    let l = if transposed {
        let mut t = vec![0f32; rows * c];
        let v = logits.to_f32_vec();
        for r in 0..rows {
            for k in 0..c {
                t[k * rows + r] = v[r * c + k];
            }
        }
        let x = g.input("x0", Shape::new(&[c, rows], DType::F32));
        (
            add(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]),
            TensorData::from_f32(&[c, rows], &t),
        )
    } else {
        (g.input("x0", logits.shape()), logits.clone())
    };
    let y_in = g.input("x1", labels.shape());
    let y = add(&mut g, Op::SoftmaxCrossEntropyWithLogits, vec![l.0, y_in]);
    g.set_outputs(vec![y]);
    (g, vec![l.1, labels])
}

fn assert_ce_close(g: &Graph, args: &[TensorData], what: &str) {
    let want = oracle(g, args).unwrap()[0].to_f64_vec();
    let got = compiled(g, args).unwrap()[0].to_f64_vec();
    assert_eq!(got.len(), want.len());
    for (r, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 4e-6 * b.abs().max(1.0),
            "{what} row {r}: {a} vs oracle {b}"
        );
    }
}

#[test]
fn cross_entropy_on_transposed_and_dense_logits_matches_the_oracle_for_every_label_dtype() {
    let (rows, c) = (37, 129);
    let l: Vec<f32> = (0..rows * c)
        .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 30.0)
        .collect();
    let logits = TensorData::from_f32(&[rows, c], &l);
    let ids: Vec<i64> = (0..rows as i64).map(|r| (r * 31) % c as i64).collect();
    for dt in [DType::I64, DType::I32, DType::U8, DType::F32, DType::F64] {
        let labels = TensorData::from_i64_as(dt, &[rows], &ids);
        for tr in [false, true] {
            let (g, args) = ce_graph(&logits, labels.clone(), tr);
            assert_ce_close(&g, &args, &format!("labels {dt} transposed {tr}"));
        }
    }
}

#[test]
fn cross_entropy_of_huge_tiny_infinite_and_nan_logits_behaves_like_the_oracle() {
    let big = 3e38f32;
    let l = [
        big,
        -big,
        0.0,
        1.0, // huge spread: finite
        1e-30,
        -1e-30,
        0.0,
        1e-38, // tiny
        f32::INFINITY,
        0.0,
        1.0,
        2.0, // +inf max: NaN
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY, // all −inf
        f32::NEG_INFINITY,
        5.0,
        1.0,
        2.0, // one −inf: finite
        0.0,
        f32::NAN,
        1.0,
        2.0, // NaN
    ];
    let logits = TensorData::from_f32(&[6, 4], &l);
    let labels = TensorData::from_i64(&[6], &[1, 3, 1, 0, 0, 2]);
    for tr in [false, true] {
        let (g, args) = ce_graph(&logits, labels.clone(), tr);
        assert_ce_close(&g, &args, &format!("extremes transposed {tr}"));
    }
}

#[test]
fn cross_entropy_with_a_label_outside_the_classes_is_a_clear_error() {
    let logits = TensorData::from_f32(&[3, 4], &[0.5; 12]);
    for labels in [
        TensorData::from_i64(&[3], &[0, 4, 1]),
        TensorData::from_i64_as(DType::I32, &[3], &[-1, 0, 1]),
        TensorData::from_f32(&[3], &[0.0, 1.5, 2.0]),
    ] {
        let (g, args) = ce_graph(&logits, labels, false);
        let want = oracle(&g, &args).expect_err("bad label");
        let got = compiled(&g, &args).expect_err("bad label must fail");
        assert!(
            got.contains(strip(&want)),
            "compiled: {got}\noracle: {want}"
        );
        assert!(got.contains("is not a class index in 0..4"), "{got}");
    }
}

#[test]
fn cross_entropy_of_no_rows_is_empty() {
    let logits = TensorData::from_f32(&[0, 4], &[]);
    let labels = TensorData::from_i64(&[0], &[]);
    let (g, args) = ce_graph(&logits, labels, false);
    assert_eq!(compiled(&g, &args).unwrap()[0].numel(), 0);
    assert_eq!(oracle(&g, &args).unwrap()[0].numel(), 0);
}

#[test]
fn concat_of_a_view_only_an_index_table_expresses_matches_the_oracle() {
    // [2, 3]ᵀ read as [2, 3] again: no strides, not even split into factors.
    let mut rng = Rng::new(37);
    for dt in [DType::F32, DType::I32, DType::BF16] {
        let mut g = Graph::new("table_view");
        let mut args = Vec::new();
        let x = input(&mut g, &mut args, &mut rng, &[2, 3], dt);
        let t = add(&mut g, Op::Transpose { perm: vec![1, 0] }, vec![x]);
        let r = add(
            &mut g,
            Op::Reshape {
                new_shape: vec![2, 3],
            },
            vec![t],
        );
        let y0 = input(&mut g, &mut args, &mut rng, &[2, 4], dt);
        let y = add(&mut g, Op::Concat { axis: 1 }, vec![r, y0]);
        let p = add(
            &mut g,
            Op::Pad {
                axis: 0,
                before: 1,
                after: 0,
                value: 3.0,
            },
            vec![r],
        );
        g.set_outputs(vec![y, p]);
        assert_bytes_match(&g, &args, &format!("table view {dt}"));
    }
}
