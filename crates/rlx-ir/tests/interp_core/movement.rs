//! Reshape, transpose, narrow, concat, expand, pad, gather and scatter-add.

use super::*;

fn iota(dims: &[usize]) -> TensorData {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|i| i as f32).collect();
    f32s(dims, &v)
}

#[test]
fn reshape_keeps_row_major_order_and_infers_minus_one() {
    let x = iota(&[2, 3]);
    let y = eval(
        Op::Reshape {
            new_shape: vec![3, -1],
        },
        std::slice::from_ref(&x),
    );
    assert_eq!(y.dims, [3, 2]);
    assert_eq!(y.bytes, x.bytes);
    let s = eval(Op::Reshape { new_shape: vec![] }, &[f32s(&[1, 1], &[4.0])]);
    assert!(s.dims.is_empty());
    assert_same(&s.to_f64_vec(), &[4.0]);
}

#[test]
fn transpose_maps_output_axis_i_to_input_axis_perm_i() {
    let dims = [2, 3, 4];
    let x = iota(&dims);
    let perm = [2, 0, 1];
    let y = eval(
        Op::Transpose {
            perm: perm.to_vec(),
        },
        &[x],
    );
    assert_eq!(y.dims, [4, 2, 3]);
    let got = y.to_f64_vec();
    for a in 0..4 {
        for b in 0..2 {
            for c in 0..3 {
                // out[a, b, c] = in[b, c, a]
                let want = (b * 12 + c * 4 + a) as f64;
                assert_eq!(got[a * 6 + b * 3 + c], want, "out[{a},{b},{c}]");
            }
        }
    }
    let m = eval(Op::Transpose { perm: vec![1, 0] }, &[iota(&[2, 3])]);
    assert_same(&m.to_f64_vec(), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
}

#[test]
fn transpose_moves_bytes_of_any_dtype() {
    let b = TensorData::from_bool(&[2, 2], &[true, false, false, false]);
    assert_eq!(
        eval(Op::Transpose { perm: vec![1, 0] }, &[b]).bytes,
        [1, 0, 0, 0]
    );
    let h = real(DType::F16, &[1, 3], &[0.5, 1.5, -2.0]);
    let t = eval(Op::Transpose { perm: vec![1, 0] }, &[h]);
    assert_eq!((t.dtype, t.dims.clone()), (DType::F16, vec![3, 1]));
    assert_same(&t.to_f64_vec(), &[0.5, 1.5, -2.0]);
    // Complex: each (re, im) pair moves as one element.
    let c = TensorData::from_f64_as(DType::C64, &[2, 1], &[1.0, 2.0, 3.0, 4.0]);
    let t = eval(Op::Transpose { perm: vec![1, 0] }, &[c]);
    assert_eq!(t.dims, [1, 2]);
    assert_same(&t.to_f64_vec(), &[1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn narrow_takes_a_range_of_one_axis() {
    let y = eval(
        Op::Narrow {
            axis: 1,
            start: 1,
            len: 2,
        },
        &[iota(&[2, 4])],
    );
    assert_eq!(y.dims, [2, 2]);
    assert_same(&y.to_f64_vec(), &[1.0, 2.0, 5.0, 6.0]);
    let e = eval(
        Op::Narrow {
            axis: 0,
            start: 2,
            len: 0,
        },
        &[iota(&[2, 4])],
    );
    assert_eq!(e.dims, [0, 4]);
    assert!(e.bytes.is_empty());
}

#[test]
fn concat_lays_inputs_end_to_end() {
    let a = iota(&[2, 2]);
    let b = f32s(&[2, 1], &[10.0, 11.0]);
    let c = f32s(&[2, 3], &[20.0, 21.0, 22.0, 23.0, 24.0, 25.0]);
    let y = eval(Op::Concat { axis: 1 }, &[a.clone(), b, c]);
    assert_eq!(y.dims, [2, 6]);
    assert_same(
        &y.to_f64_vec(),
        &[
            0.0, 1.0, 10.0, 20.0, 21.0, 22.0, 2.0, 3.0, 11.0, 23.0, 24.0, 25.0,
        ],
    );
    let y = eval(Op::Concat { axis: 0 }, &[a, f32s(&[1, 2], &[7.0, 8.0])]);
    assert_eq!(y.dims, [3, 2]);
    assert_same(&y.to_f64_vec(), &[0.0, 1.0, 2.0, 3.0, 7.0, 8.0]);
    let i = eval(
        Op::Concat { axis: 0 },
        &[
            ints(DType::I64, &[1], &[i64::MIN]),
            ints(DType::I64, &[2], &[1, -1]),
        ],
    );
    assert_eq!(i.to_i64_vec(), [i64::MIN, 1, -1]);
}

#[test]
fn expand_broadcasts_and_minus_one_keeps_the_dim() {
    let x = f32s(&[3, 1], &[1.0, 2.0, 3.0]);
    let y = eval(
        Op::Expand {
            target_shape: vec![2, -1, 2],
        },
        &[x],
    );
    assert_eq!(y.dims, [2, 3, 2]);
    assert_same(
        &y.to_f64_vec(),
        &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0],
    );
    let s = eval(
        Op::Expand {
            target_shape: vec![2, 2],
        },
        &[ints(DType::I32, &[], &[-7])],
    );
    assert_eq!(s.to_i64_vec(), [-7, -7, -7, -7]);
}

#[test]
fn pad_fills_before_and_after_with_the_value_in_the_dtype() {
    let x = iota(&[2, 2]);
    let y = eval(
        Op::Pad {
            axis: 1,
            before: 1,
            after: 2,
            value: -1.5,
        },
        std::slice::from_ref(&x),
    );
    assert_eq!(y.dims, [2, 5]);
    assert_same(
        &y.to_f64_vec(),
        &[-1.5, 0.0, 1.0, -1.5, -1.5, -1.5, 2.0, 3.0, -1.5, -1.5],
    );
    let y = eval(
        Op::Pad {
            axis: 0,
            before: 0,
            after: 1,
            value: 9.0,
        },
        &[x],
    );
    assert_same(&y.to_f64_vec(), &[0.0, 1.0, 2.0, 3.0, 9.0, 9.0]);
    // Integer dtype: the value converts like a cast (truncation).
    let y = eval(
        Op::Pad {
            axis: 0,
            before: 2,
            after: 0,
            value: 2.9,
        },
        &[ints(DType::I32, &[1], &[5])],
    );
    assert_eq!(y.to_i64_vec(), [2, 2, 5]);
    // bf16: the value is rounded to bf16.
    let y = eval(
        Op::Pad {
            axis: 0,
            before: 1,
            after: 0,
            value: 0.1,
        },
        &[real(DType::BF16, &[1], &[1.0])],
    );
    assert_same(&y.to_f64_vec(), &[rounded(DType::BF16, &[0.1])[0], 1.0]);
}

#[test]
fn gather_output_shape_is_table_prefix_indices_table_suffix() {
    let table = iota(&[3, 2, 2]);
    let idx = ints(DType::I64, &[2, 2], &[2, 0, -1, 1]);
    let y = eval(Op::Gather { axis: 0 }, &[table.clone(), idx]);
    assert_eq!(y.dims, [2, 2, 2, 2]);
    // Rows 2, 0, 2 (−1 from the end), 1, each a 2×2 block.
    let block = |r: usize| (0..4).map(move |i| (r * 4 + i) as f64);
    let want: Vec<f64> = [2, 0, 2, 1].into_iter().flat_map(block).collect();
    assert_same(&y.to_f64_vec(), &want);
    let y = eval(
        Op::Gather { axis: 1 },
        &[table, ints(DType::I32, &[3], &[1, 1, -2])],
    );
    assert_eq!(y.dims, [3, 3, 2]);
    let got = y.to_f64_vec();
    for a in 0..3 {
        for (j, k) in [1usize, 1, 0].into_iter().enumerate() {
            for c in 0..2 {
                assert_eq!(got[a * 6 + j * 2 + c], (a * 4 + k * 2 + c) as f64);
            }
        }
    }
}

#[test]
fn gather_accepts_unsigned_scalar_and_integer_valued_float_indices() {
    let table = f32s(&[4], &[10.0, 11.0, 12.0, 13.0]);
    let y = eval(
        Op::Gather { axis: 0 },
        &[table.clone(), ints(DType::U8, &[2], &[3, 0])],
    );
    assert_same(&y.to_f64_vec(), &[13.0, 10.0]);
    let y = eval(
        Op::Gather { axis: 0 },
        &[table.clone(), ints(DType::I64, &[], &[2])],
    );
    assert!(y.dims.is_empty());
    assert_same(&y.to_f64_vec(), &[12.0]);
    let y = eval(
        Op::Gather { axis: 0 },
        &[table.clone(), f32s(&[3], &[1.0, -4.0, 3.0])],
    );
    assert_same(&y.to_f64_vec(), &[11.0, 10.0, 13.0]);
    let msg = eval_err(Op::Gather { axis: 0 }, &[table, f32s(&[1], &[1.5])]);
    assert!(
        msg.contains("gather") && msg.contains("1.5") && msg.contains("not an integer"),
        "{msg}"
    );
}

#[test]
fn gather_out_of_range_index_is_an_error_naming_index_axis_and_size() {
    let table = iota(&[2, 3]);
    for bad in [3i64, -4] {
        let msg = eval_err(
            Op::Gather { axis: 1 },
            &[table.clone(), ints(DType::I64, &[2], &[0, bad])],
        );
        assert!(msg.starts_with("gather"), "{msg}");
        assert!(msg.contains(&format!("index {bad}")), "{msg}");
        assert!(msg.contains("axis 1") && msg.contains("size 3"), "{msg}");
    }
}

#[test]
fn scatter_add_accumulates_duplicates_into_the_base() {
    let base = f32s(&[4], &[1.0, 1.0, 1.0, 1.0]);
    let idx = ints(DType::I64, &[4], &[0, 2, 0, -1]);
    let upd = f32s(&[4], &[10.0, 20.0, 30.0, 40.0]);
    let y = eval(Op::ScatterAdd { axis: 0 }, &[base, idx, upd]);
    assert_same(&y.to_f64_vec(), &[41.0, 1.0, 21.0, 41.0]);
    // Axis 1 of a matrix, 2-D indices: updates have the gather shape [2, 2, 2].
    let base = TensorData::from_f32(&[2, 3], &[0.0; 6]);
    let idx = ints(DType::I32, &[2, 2], &[0, 2, 2, 2]);
    let upd = f32s(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    let y = eval(Op::ScatterAdd { axis: 1 }, &[base, idx, upd]);
    // Row 0 receives 1 at col 0 and 2 + 3 + 4 at col 2; row 1: 5 at col 0, 6 + 7 + 8 at col 2.
    assert_same(&y.to_f64_vec(), &[1.0, 0.0, 9.0, 5.0, 0.0, 21.0]);
}

#[test]
fn scatter_add_is_the_adjoint_of_gather() {
    // ⟨gather(t, i), u⟩ = ⟨t, scatter_add(0, i, u)⟩ for any t, u.
    let t: Vec<f64> = (0..12).map(|i| (i as f64 * 0.37).sin()).collect();
    let table = f64s(&[4, 3], &t);
    let idx = ints(DType::I64, &[5], &[3, 0, 3, -2, 1]);
    let u: Vec<f64> = (0..15).map(|i| (i as f64 * 0.91).cos()).collect();
    let g = eval(Op::Gather { axis: 0 }, &[table, idx.clone()]).to_f64_vec();
    let lhs: f64 = g.iter().zip(&u).map(|(a, b)| a * b).sum();
    let s = eval(
        Op::ScatterAdd { axis: 0 },
        &[f64s(&[4, 3], &[0.0; 12]), idx, f64s(&[5, 3], &u)],
    );
    let rhs: f64 = s.to_f64_vec().iter().zip(&t).map(|(a, b)| a * b).sum();
    assert!((lhs - rhs).abs() < 1e-12, "{lhs} vs {rhs}");
}

#[test]
fn scatter_add_integer_wraps_and_f16_rounds_once() {
    let y = eval(
        Op::ScatterAdd { axis: 0 },
        &[
            ints(DType::U8, &[2], &[250, 0]),
            ints(DType::I64, &[2], &[0, 0]),
            ints(DType::U8, &[2], &[3, 4]),
        ],
    );
    assert_eq!(y.to_i64_vec(), [1, 0]);
    // f16: 2048 + 1 + 1 summed in f64 is 2050 (exact in f16); adding one at a
    // time in f16 would tie back to 2048 twice.
    let y = eval(
        Op::ScatterAdd { axis: 0 },
        &[
            real(DType::F16, &[1], &[2048.0]),
            ints(DType::I64, &[2], &[0, 0]),
            real(DType::F16, &[2], &[1.0, 1.0]),
        ],
    );
    assert_same(&y.to_f64_vec(), &[2050.0]);
    let msg = eval_err(
        Op::ScatterAdd { axis: 0 },
        &[
            f32s(&[2], &[0.0, 0.0]),
            ints(DType::I64, &[1], &[2]),
            f32s(&[1], &[1.0]),
        ],
    );
    assert!(
        msg.starts_with("scatter_add") && msg.contains("index 2"),
        "{msg}"
    );
}
