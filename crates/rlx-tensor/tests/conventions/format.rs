//! How tensors print: the `{:?}` summary (no evaluation), and `{}` / `show()` with
//! NumPy-style summarizing, precision, width, dtypes, scalars and empty axes.

use rlx_tensor::Tensor;

#[test]
fn debug_is_a_summary_counting_the_ops_that_feed_the_tensor() {
    let x = Tensor::ones([64, 64]);
    assert_eq!(format!("{x:?}"), "Tensor[dims [64, 64]; f32; lazy, 1 op]");
    let mut y = x.clone();
    for _ in 0..50 {
        y = (&y + 1.0).relu();
    }
    // x, then per step one scalar constant, one add and one relu.
    assert_eq!(
        format!("{y:?}"),
        "Tensor[dims [64, 64]; f32; lazy, 151 ops]"
    );
    // Nodes of the same graph that do not feed the tensor are not counted.
    let unrelated = x.exp();
    assert_eq!(
        format!("{unrelated:?}"),
        "Tensor[dims [64, 64]; f32; lazy, 2 ops]"
    );
}

#[test]
fn debug_shows_dynamic_dims_and_other_dtypes() {
    let g = rlx_tensor::graph("g", |s| {
        let x = s.input("x", rlx_tensor::shape![I64; ?, 3]);
        assert_eq!(format!("{x:?}"), "Tensor[dims [?0, 3]; i64; lazy, 1 op]");
        x
    });
    assert_eq!(g.outputs.len(), 1);
}

#[cfg(feature = "eval")]
mod eval {
    use super::*;

    #[test]
    fn debug_says_realized_once_computed() {
        let y = Tensor::ones([2]).exp();
        assert!(format!("{y:?}").ends_with("lazy, 2 ops]"));
        y.to_vec();
        assert_eq!(format!("{y:?}"), "Tensor[dims [2]; f32; realized]");
    }

    #[test]
    fn small_tensors_print_exactly_as_the_published_show() {
        let t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
        assert_eq!(t.show(), "Tensor[2, 2] F32\n[[1, 2], [3, 4]]");
        assert_eq!(format!("{t}"), t.show());
        assert_eq!(
            Tensor::from_i64([7, -1], [2]).show(),
            "Tensor[2] I64\n[7, -1]"
        );
        assert_eq!(
            Tensor::from_f64([0.1, 2.5], [2]).show(),
            "Tensor[2] F64\n[0.1, 2.5]"
        );
    }

    #[test]
    fn scalars_bools_and_empty_axes() {
        let s = Tensor::from_vec(vec![3.5], [1]).reshape([0i64; 0]);
        assert_eq!(format!("{s}"), "Tensor[] F32\n3.5");
        let b = Tensor::from([true, false]);
        assert_eq!(format!("{b}"), "Tensor[2] Bool\n[true, false]");
        assert_eq!(format!("{}", Tensor::zeros([0])), "Tensor[0] F32\n[]");
        assert_eq!(
            format!("{}", Tensor::zeros([2, 0])),
            "Tensor[2, 0] F32\n[[], []]"
        );
    }

    #[test]
    fn complex_values_print_as_real_and_imaginary_parts() {
        let parts: [f32; 4] = [1.0, 2.0, 0.5, -3.0];
        let bytes: Vec<u8> = parts.iter().flat_map(|v| v.to_le_bytes()).collect();
        let data = rlx_tensor::TensorData::new(rlx_tensor::DType::C64, &[2], bytes).unwrap();
        let t = Tensor::from_data(data);
        assert_eq!(format!("{t}"), "Tensor[2] C64\n[1+2j, 0.5-3j]");
        assert_eq!(format!("{t:.1}"), "Tensor[2] C64\n[1.0+2.0j, 0.5-3.0j]");
    }

    #[test]
    fn precision_and_width_apply_to_every_element() {
        let t = Tensor::from([[1.0, -2.26], [1.0 / 3.0, 100.0]]);
        assert_eq!(
            format!("{t:.3}"),
            "Tensor[2, 2] F32\n[[1.000, -2.260], [0.333, 100.000]]"
        );
        assert_eq!(
            format!("{t:7.1}"),
            "Tensor[2, 2] F32\n[[    1.0,    -2.3], [    0.3,   100.0]]"
        );
        assert_eq!(
            format!("{t:<5}"),
            "Tensor[2, 2] F32\n[[1    , -2.26], [0.33333334, 100  ]]"
        );
        // Precision does not apply to integers.
        assert_eq!(
            format!("{:.2}", Tensor::from([1i64, 20])),
            "Tensor[2] I64\n[1, 20]"
        );
    }

    #[test]
    fn alternate_puts_rows_on_lines_with_blank_lines_between_blocks() {
        let t = Tensor::arange(8).reshape([2, 2, 2]);
        assert_eq!(
            format!("{t:#}"),
            "Tensor[2, 2, 2] F32\n[[[0, 1],\n  [2, 3]],\n\n [[4, 5],\n  [6, 7]]]"
        );
    }

    #[test]
    fn more_than_1000_elements_are_summarized_with_three_edge_items() {
        let t = Tensor::arange(1001);
        assert_eq!(
            format!("{t}"),
            "Tensor[1001] F32\n[0, 1, 2, ..., 998, 999, 1000]"
        );
        // Exactly 1000 elements: printed in full.
        let full = format!("{}", Tensor::arange(1000));
        assert!(!full.contains("..."));
        assert!(full.ends_with("998, 999]"));

        let m = Tensor::arange(2000).reshape([40, 50]);
        let text = format!("{m}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "Tensor[40, 50] F32",
                "[[0, 1, 2, ..., 47, 48, 49],",
                " [50, 51, 52, ..., 97, 98, 99],",
                " [100, 101, 102, ..., 147, 148, 149],",
                " ...,",
                " [1850, 1851, 1852, ..., 1897, 1898, 1899],",
                " [1900, 1901, 1902, ..., 1947, 1948, 1949],",
                " [1950, 1951, 1952, ..., 1997, 1998, 1999]]",
            ]
        );
        // A short axis is never elided even when the tensor is summarized.
        let wide = Tensor::arange(2000).reshape([2, 1000]);
        let text = format!("{wide}");
        assert_eq!(text.lines().count(), 3);
        assert!(text.ends_with("[1000, 1001, 1002, ..., 1997, 1998, 1999]]"));
    }

    #[test]
    fn summarized_3d_tensor_elides_blocks_rows_and_columns() {
        let t = Tensor::arange(8 * 8 * 20).reshape([8, 8, 20]);
        let text = format!("{t}");
        // 7 blocks shown (3 + 3 around "..."), each of 7 row lines.
        assert_eq!(text.matches("...").count(), 6 * 7 + 1);
        assert!(text.contains("[[[0, 1, 2, ..., 17, 18, 19],"));
        assert!(text.ends_with("1277, 1278, 1279]]]"));
    }

    #[test]
    fn uncomputable_tensors_print_their_type_and_the_reason() {
        let x = rlx_tensor::GraphScope::new("h").input("x", rlx_tensor::shape![2]);
        let text = format!("{x}");
        assert!(text.starts_with("Tensor[2] f32 (not computable:"), "{text}");
    }
}

#[test]
fn func_and_scope_debug_are_one_line_without_data() {
    let f = rlx_tensor::Func::new("big", |s| {
        let w = s.param("w", rlx_tensor::shape![1000]);
        (&w * 2.0).sum_all()
    })
    .with_param("w", vec![0.123_456_79; 1000]);
    let d = format!("{f:?}");
    assert!(!d.contains('\n'), "{d}");
    assert!(!d.contains("0.1234"), "no param data in Debug: {d}");
    assert!(
        d.starts_with("Func(\"big\"; inputs []; params [w: [1000] f32 (bound)]"),
        "{d}"
    );
    let mut scope = rlx_tensor::GraphScope::new("g");
    let _x = scope.input("x", rlx_tensor::shape![2]);
    assert_eq!(format!("{scope:?}"), "GraphScope(\"g\"; 1 node)");
}
