//! safetensors I/O: round trips, dtype conversion, sharded checkpoints, checking a file
//! against a graph's params, and hostile files (each generated here) that must be errors.
#![cfg(feature = "safetensors")]

use rlx_ir::TensorData;
use rlx_tensor::{DType, SafeTensors, graph, save_safetensors_data, shape};
use std::path::PathBuf;

/// A fresh scratch directory for one test.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rlx_st_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Raw safetensors bytes: an 8-byte little-endian header length, the header, the data.
fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut v = (header.len() as u64).to_le_bytes().to_vec();
    v.extend_from_slice(header.as_bytes());
    v.extend_from_slice(data);
    v
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The error text of opening `bytes` both ways: from memory and memory-mapped.
fn open_err(tag: &str, bytes: &[u8]) -> String {
    let from_mem = SafeTensors::from_bytes(bytes.to_vec())
        .expect_err("from_bytes must reject it")
        .to_string();
    let path = scratch(tag).join("bad.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let mapped = SafeTensors::open(&path)
        .expect_err("open must reject it")
        .to_string();
    assert!(mapped.contains("bad.safetensors"), "{mapped}");
    from_mem
}

#[test]
fn saved_tensors_round_trip_with_their_dtypes_shapes_and_values() {
    let dir = scratch("roundtrip");
    let path = dir.join("m.safetensors");
    let w = TensorData::from_f32(&[2, 3], &[1.0, -2.0, 3.5, 0.0, 1e-3, 7.0]);
    let ids = TensorData::from_i64(&[2], &[5, -9]);
    let h = TensorData::from_f64_as(DType::BF16, &[2], &[1.5, -0.25]);
    save_safetensors_data(&path, &[("w", &w), ("ids", &ids), ("h", &h)]).unwrap();
    let st = SafeTensors::open(&path).unwrap();
    assert_eq!(st.names(), ["h", "ids", "w"]);
    assert_eq!(st.shape("w"), Some(&[2, 3][..]));
    assert_eq!(st.dtype("h").unwrap().name(), "BF16");
    assert_eq!(st.load_data("w", DType::F32).unwrap(), w);
    assert_eq!(st.load_data("ids", DType::I64).unwrap(), ids);
    assert_eq!(st.load_data("h", DType::BF16).unwrap(), h);
    assert_eq!(st.load_f32("h").unwrap(), [1.5, -0.25]);
    // No temporary file is left beside the checkpoint.
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(left.len(), 1);
}

#[test]
fn loads_convert_between_float_types_rounding_to_nearest_even() {
    // 1 + 2^-9 is below the midpoint of bf16's 1 and 1 + 2^-7 → 1; 1 + 3·2^-9 above → 1 + 2^-7.
    let vals = [
        1.0 + 2f32.powi(-9),
        1.0 + 3.0 * 2f32.powi(-9),
        65504.0,
        -0.5,
    ];
    let st = SafeTensors::from_bytes(raw(
        r#"{"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
        &f32_bytes(&vals),
    ))
    .unwrap();
    let b = st.load_data("x", DType::BF16).unwrap().to_f32_vec();
    assert_eq!(b, [1.0, 1.0 + 2f32.powi(-7), 65536.0, -0.5]);
    // f16 keeps 10 mantissa bits: these values are exact there.
    let h = st.load_data("x", DType::F16).unwrap().to_f32_vec();
    assert_eq!(h, vals);
    assert_eq!(
        st.load_data("x", DType::F64).unwrap().to_f64_vec(),
        vals.map(f64::from)
    );
    let e = st.load_data("x", DType::I32).unwrap_err().to_string();
    assert!(
        e.contains("`x`") && e.contains("F32") && e.contains("i32"),
        "{e}"
    );
}

#[test]
fn fp8_tensors_load_as_any_float_type() {
    // e4m3fn codes: 0x38 = 1, 0x40 = 2, 0xc4 = −3, 0x7e = 448; e5m2: 0x3c = 1, 0xc0 = −2.
    let st = SafeTensors::from_bytes(raw(
        r#"{"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"F8_E5M2","shape":[2],"data_offsets":[4,6]}}"#,
        &[0x38, 0x40, 0xc4, 0x7e, 0x3c, 0xc0],
    ))
    .unwrap();
    assert_eq!(st.dtype("a").unwrap().to_dtype(), None);
    assert_eq!(st.load_f32("a").unwrap(), [1.0, 2.0, -3.0, 448.0]);
    let bf = st.load_data("b", DType::BF16).unwrap();
    assert_eq!(bf.to_f32_vec(), [1.0, -2.0]);
}

#[test]
fn unknown_names_are_errors_that_suggest_similar_ones() {
    let st = SafeTensors::from_bytes(raw(
        r#"{"model.norm.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#,
        &f32_bytes(&[1.0]),
    ))
    .unwrap();
    let e = st.load_f32("model.norm.weights").unwrap_err().to_string();
    assert!(
        e.contains("no tensor named `model.norm.weights`") && e.contains("model.norm.weight"),
        "{e}"
    );
}

#[test]
fn check_params_lists_missing_unexpected_and_misshaped_tensors_by_name() {
    let st = SafeTensors::from_bytes(raw(
        concat!(
            r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"#,
            r#""b":{"dtype":"F32","shape":[3],"data_offsets":[16,28]},"#,
            r#""junk":{"dtype":"F32","shape":[1],"data_offsets":[28,32]},"#,
            r#""skip.me":{"dtype":"F32","shape":[1],"data_offsets":[32,36]}}"#
        ),
        &[0u8; 36],
    ))
    .unwrap();
    let g = graph("g", |s| {
        let x = s.input("x", shape![2]);
        let w = s.param("w", shape![2, 3]);
        let b = s.param("b", shape![3]);
        let g2 = s.param("gain", shape![3]);
        &(&x.unsqueeze(0).matmul(&w) + &b) * &g2
    });
    let rename = |n: &str| (!n.starts_with("skip.")).then(|| n.to_string());
    let m = st.check_params(&g, rename);
    assert_eq!(m.missing, ["gain"]);
    assert_eq!(m.unexpected, [("junk".to_string(), "junk".to_string())]);
    assert_eq!(m.misshaped.len(), 1);
    assert_eq!(m.misshaped[0].0, "w");
    assert_eq!(m.misshaped[0].1, [2, 2]);
    let e = st.params_for(&g, rename).unwrap_err().to_string();
    for part in [
        "missing params `gain`",
        "unexpected tensors `junk`",
        "`w` stored [2, 2] but declared [2, 3]",
    ] {
        assert!(e.contains(part), "missing {part:?} in {e}");
    }
}

#[test]
fn params_for_loads_every_param_in_graph_order_through_the_rename() {
    let st = SafeTensors::from_bytes(raw(
        concat!(
            r#"{"m.a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"#,
            r#""m.b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#
        ),
        &[
            half::bf16::from_f32(0.5).to_le_bytes(),
            half::bf16::from_f32(-4.0).to_le_bytes(),
        ]
        .concat()
        .into_iter()
        .chain(f32_bytes(&[3.0]))
        .collect::<Vec<u8>>(),
    ))
    .unwrap();
    let g = graph("g", |s| {
        let b = s.param("b", shape![1]);
        let a = s.param("a", shape![2]);
        &a + &b
    });
    let p = st
        .params_for(&g, |n| n.strip_prefix("m.").map(String::from))
        .unwrap();
    assert_eq!(
        p,
        [
            ("b".to_string(), vec![3.0]),
            ("a".to_string(), vec![0.5, -4.0])
        ]
    );
}

#[cfg(feature = "eval")]
#[test]
fn a_func_bound_from_a_checkpoint_computes_with_its_values() {
    let f = rlx_tensor::Func::new("aff", |s| {
        let x = s.input("x", shape![2]);
        &x * &s.param("w", shape![2])
    });
    let st = SafeTensors::from_bytes(raw(
        r#"{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}"#,
        &[
            half::f16::from_f32(2.0).to_le_bytes(),
            half::f16::from_f32(-1.0).to_le_bytes(),
        ]
        .concat(),
    ))
    .unwrap();
    let f = st.load_into_func(&f, |n| Some(n.to_string())).unwrap();
    assert_eq!(f.run(&[("x", &[3.0, 5.0])]), vec![vec![6.0, -5.0]]);
}

#[test]
fn sharded_checkpoints_open_through_their_index_or_directory() {
    let dir = scratch("sharded");
    let a = TensorData::from_f32(&[2], &[1.0, 2.0]);
    let b = TensorData::from_f32(&[1], &[3.0]);
    save_safetensors_data(dir.join("model-00001-of-00002.safetensors"), &[("a", &a)]).unwrap();
    save_safetensors_data(dir.join("model-00002-of-00002.safetensors"), &[("b", &b)]).unwrap();
    let index = r#"{"metadata":{"total_size":12},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}"#;
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    for st in [
        SafeTensors::open_sharded(&dir).unwrap(),
        SafeTensors::open_sharded(dir.join("model.safetensors.index.json")).unwrap(),
    ] {
        assert_eq!(st.names(), ["a", "b"]);
        assert_eq!(st.files().len(), 2);
        assert_eq!(st.load_f32("b").unwrap(), [3.0]);
        assert_eq!(st.load_f32("a").unwrap(), [1.0, 2.0]);
    }
    // A directory without an index falls back to model.safetensors.
    let single = scratch("single");
    save_safetensors_data(single.join("model.safetensors"), &[("a", &a)]).unwrap();
    assert_eq!(SafeTensors::open_sharded(&single).unwrap().names(), ["a"]);
    let e = SafeTensors::open_sharded(scratch("empty"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("neither model.safetensors.index.json nor model.safetensors"),
        "{e}"
    );
}

#[test]
fn an_index_that_lies_about_its_shards_is_an_error() {
    let dir = scratch("lying_index");
    let a = TensorData::from_f32(&[1], &[1.0]);
    save_safetensors_data(dir.join("s1.safetensors"), &[("a", &a)]).unwrap();
    save_safetensors_data(dir.join("s2.safetensors"), &[("a", &a)]).unwrap();
    let write = |json: &str| {
        let p = dir.join("model.safetensors.index.json");
        std::fs::write(&p, json).unwrap();
        SafeTensors::open_sharded(&p).unwrap_err().to_string()
    };
    let e = write(r#"{"weight_map":{"a":"s1.safetensors","zz":"s1.safetensors"}}"#);
    assert!(e.contains("`zz` is in no shard"), "{e}");
    let e = write(r#"{"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}}"#);
    assert!(e.contains("tensor `a` is stored twice"), "{e}");
    let e = write(r#"{"weight_map":{"a":"../s1.safetensors"}}"#);
    assert!(
        e.contains("not a file name inside the index's directory"),
        "{e}"
    );
    let e = write(r#"{"weight_map":{"a":"/etc/passwd"}}"#);
    assert!(
        e.contains("not a file name inside the index's directory"),
        "{e}"
    );
    let e = write(r#"{"weight_map":{"a":"missing.safetensors"}}"#);
    assert!(
        e.contains("cannot open") && e.contains("missing.safetensors"),
        "{e}"
    );
    let e = write(r#"{"weight_map": 7}"#);
    assert!(e.contains("no \"weight_map\" object"), "{e}");
    let e = write("{not json");
    assert!(e.contains("invalid JSON"), "{e}");
}

// ---- hostile files: every one is an error, never a crash or a huge allocation ----

#[test]
fn a_file_shorter_than_the_length_prefix_is_an_error() {
    let e = open_err("short", &[1, 2, 3]);
    assert!(e.contains("not a valid safetensors file"), "{e}");
    let path = scratch("empty_file").join("e.safetensors");
    std::fs::write(&path, b"").unwrap();
    let e = SafeTensors::open(&path).unwrap_err().to_string();
    assert!(e.contains("0 bytes long"), "{e}");
}

#[test]
fn a_header_length_claiming_terabytes_is_an_error_without_allocating_it() {
    let mut bytes = (1u64 << 42).to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let e = open_err("tera_header", &bytes);
    assert!(e.contains("header too large"), "{e}");
    let mut bytes = u64::MAX.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    open_err("max_header", &bytes);
}

#[test]
fn a_header_length_past_the_end_of_the_file_is_an_error() {
    let mut bytes = 1000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let e = open_err("past_end", &bytes);
    assert!(e.contains("invalid header length"), "{e}");
}

#[test]
fn invalid_json_or_non_utf8_headers_are_errors() {
    let e = open_err("bad_json", &raw(r#"{"a": {"dtype": "F32", "#, &[]));
    assert!(e.contains("not a valid safetensors file"), "{e}");
    let mut bytes = 2u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(&[0xff, 0xfe]);
    open_err("not_utf8", &bytes);
    let e = open_err(
        "unknown_dtype",
        &raw(
            r#"{"a":{"dtype":"Q4_K","shape":[1],"data_offsets":[0,1]}}"#,
            &[0],
        ),
    );
    assert!(e.contains("not a valid safetensors file"), "{e}");
}

#[test]
fn a_truncated_data_section_is_an_error() {
    let full = raw(
        r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
        &[0u8; 16],
    );
    assert!(SafeTensors::from_bytes(full.clone()).is_ok());
    for cut in [1, 4, 15] {
        let e = open_err("truncated", &full[..full.len() - cut]);
        assert!(e.contains("not a valid safetensors file"), "{e}");
    }
    // Trailing bytes beyond the declared data are rejected as well.
    let mut long = full.clone();
    long.push(0);
    open_err("trailing", &long);
}

#[test]
fn overlapping_or_out_of_range_offsets_are_errors() {
    let e = open_err(
        "overlap",
        &raw(
            r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}"#,
            &[0u8; 24],
        ),
    );
    assert!(e.contains("invalid offset"), "{e}");
    let e = open_err(
        "gap",
        &raw(
            r#"{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#,
            &[0u8; 8],
        ),
    );
    assert!(e.contains("invalid offset"), "{e}");
    let e = open_err(
        "out_of_range",
        &raw(
            r#"{"a":{"dtype":"U8","shape":[1125899906842624],"data_offsets":[0,1125899906842624]}}"#,
            &[0u8; 8],
        ),
    );
    assert!(e.contains("not a valid safetensors file"), "{e}");
    let e = open_err(
        "reversed",
        &raw(
            r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}}"#,
            &[0u8; 8],
        ),
    );
    assert!(e.contains("invalid offset"), "{e}");
}

#[test]
fn a_size_that_disagrees_with_dtype_and_shape_is_an_error() {
    let e = open_err(
        "size_mismatch",
        &raw(
            r#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}}"#,
            &[0u8; 12],
        ),
    );
    assert!(e.contains("not a valid safetensors file"), "{e}");
    // A shape whose element count overflows usize.
    let e = open_err(
        "overflow",
        &raw(
            r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}"#,
            &[0u8; 4],
        ),
    );
    assert!(e.contains("not a valid safetensors file"), "{e}");
}
