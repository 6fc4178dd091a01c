//! Reductions and row ops whose work-group trees finish with `subgroupShuffleXor` on an
//! adapter with fixed-size subgroups (lavapipe: 8 lanes): each graph matches the oracle,
//! and its results equal the shared-memory path's bit for bit (item 0's shuffle operands
//! are the tree's); the shaders call the subgroup built-in only when shuffles are on.

use super::{data, support};
use rlx_ir::{DType, Graph, Op, ReduceOp, Shape, TensorData};
use rlx_runtime::Device;

/// Runs `g` with subgroup shuffles on and off: both against the oracle, every kernel on
/// the GPU, and the two results identical byte for byte.
fn on_and_off(g: &Graph, args: &[TensorData], what: &str) {
    support::register_cpu();
    let views: Vec<_> = args.iter().map(|a| a.view()).collect();
    let mut outs = Vec::new();
    for subgroups in [true, false] {
        let (exe, placement) = rlx_wgpu::compile_with_subgroups(Device::Gpu, g, subgroups)
            .unwrap_or_else(|e| panic!("{what}: compile failed: {e}"));
        assert!(
            placement.iter().all(|&p| p),
            "{what} (subgroups {subgroups}): a kernel fell back: {}",
            exe.explain()
        );
        rlx_testkit::check_executable(g, args, "wgpu", exe.as_ref());
        outs.push(exe.run(&views).unwrap_or_else(|e| panic!("{what}: {e}")));
    }
    for (a, b) in outs[0].iter().zip(&outs[1]) {
        assert!(
            a.bytes == b.bytes,
            "{what}: the subgroup path differs from the shared-memory path"
        );
    }
}

fn reduce_graph(op: ReduceOp, rows: usize, cols: usize, dt: DType) -> (Graph, Vec<TensorData>) {
    let mut g = Graph::new("subgroup_reduce");
    let s = Shape::new(&[rows, cols], dt);
    let args = vec![data(&s, cols as u64 + 11)];
    let x = g.input("x", s);
    let r = g
        .add_op(
            Op::Reduce {
                op,
                axes: vec![1],
                keep_dim: false,
            },
            vec![x],
        )
        .unwrap();
    g.set_outputs(vec![r]);
    (g, args)
}

/// The adapter's fixed subgroup size, or `None` with the reason printed.
fn subgroups_or_skip(test: &str) -> Option<u32> {
    if !support::gpu_or_skip(test) {
        return None;
    }
    let n = rlx_wgpu::subgroup_size(Device::Gpu);
    if n.is_none() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipping {test}: the adapter ({}) has no fixed subgroup size (or RLX_WGPU_SUBGROUPS=0)",
            rlx_wgpu::adapter_info(Device::Gpu).unwrap_or_default()
        );
    }
    n
}

#[test]
fn subgroup_shuffled_reductions_equal_the_oracle_and_the_shared_memory_path_bit_for_bit() {
    if subgroups_or_skip("subgroup reductions").is_none() {
        return;
    }
    let cases = [
        (ReduceOp::Sum, DType::F32),
        (ReduceOp::Max, DType::F32),
        (ReduceOp::Min, DType::F32),
        (ReduceOp::Mean, DType::F32),
        (ReduceOp::Sum, DType::I32),
    ];
    for (op, dt) in cases {
        for cols in [1usize, 7, 8, 9, 200, 1000, 100_000] {
            let (g, args) = reduce_graph(op, 3, cols, dt);
            on_and_off(
                &g,
                &args,
                &format!("{} {dt:?} over rows of {cols}", op.name()),
            );
        }
    }
}

#[test]
fn subgroup_shuffled_softmax_and_layer_norm_rows_equal_the_oracle_and_the_shared_memory_path() {
    if subgroups_or_skip("subgroup row ops").is_none() {
        return;
    }
    for cols in [1usize, 7, 8, 9, 200, 1000, 100_000] {
        for ln in [false, true] {
            let mut g = Graph::new("subgroup_rows");
            let s = Shape::new(&[3, cols], DType::F32);
            let mut args = vec![data(&s, cols as u64 + 3)];
            let x = g.input("x", s);
            let mut ins = vec![x];
            let op = if ln {
                for i in 0..2 {
                    let w = Shape::new(&[cols], DType::F32);
                    args.push(data(&w, cols as u64 + 5 + i));
                    ins.push(g.input(format!("w{i}"), w));
                }
                Op::LayerNorm {
                    axis: -1,
                    eps: 1e-5,
                }
            } else {
                Op::Softmax { axis: -1 }
            };
            let y = g.add_op(op.clone(), ins).unwrap();
            g.set_outputs(vec![y]);
            on_and_off(&g, &args, &format!("{op:?} over rows of {cols}"));
        }
    }
}

#[test]
fn shaders_call_subgroup_shuffles_only_when_the_device_has_fixed_subgroups() {
    let (g, _) = reduce_graph(ReduceOp::Sum, 3, 1000, DType::F32);
    let with = rlx_wgpu::generated_wgsl_with_subgroups(&g, Some(8)).unwrap();
    let without = rlx_wgpu::generated_wgsl(&g).unwrap();
    let calls = |v: &[Result<String, String>]| {
        v.iter()
            .map(|s| s.as_ref().unwrap().matches("subgroupShuffleXor(").count())
            .sum::<usize>()
    };
    // Three levels (masks 4, 2, 1) below the 8-lane segments.
    assert_eq!(calls(&with), 3, "{with:?}");
    assert_eq!(calls(&without), 0, "{without:?}");
    // A short reduction (one invocation per output) needs none.
    let (g, _) = reduce_graph(ReduceOp::Sum, 3, 7, DType::F32);
    assert_eq!(
        calls(&rlx_wgpu::generated_wgsl_with_subgroups(&g, Some(8)).unwrap()),
        0
    );
    // What the device reports, when it has an adapter.
    if support::gpu_or_skip("subgroup shader sources")
        && let Some(n) = rlx_wgpu::subgroup_size(Device::Gpu)
    {
        assert!(n >= 2 && n.is_power_of_two(), "{n}");
        assert!(
            rlx_wgpu::adapter_info(Device::Gpu)
                .unwrap()
                .contains(&format!("subgroups of {n}"))
        );
    }
}

/// On Metal (SIMD groups of 32) the subgroup shaders translate to MSL's
/// `simd_shuffle_xor` with naga, as wgpu's Metal backend does.
#[test]
fn subgroup_shuffled_shaders_translate_to_msl_simd_shuffles() {
    let mut g = Graph::new("subgroup_msl");
    let s = Shape::new(&[3, 1000], DType::F32);
    let x = g.input("x", s);
    let r = g
        .add_op(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dim: false,
            },
            vec![x],
        )
        .unwrap();
    let y = g.add_op(Op::Softmax { axis: -1 }, vec![x]).unwrap();
    g.set_outputs(vec![r, y]);
    let mut shuffled = 0;
    for src in rlx_wgpu::generated_wgsl_with_subgroups(&g, Some(32)).unwrap() {
        let wgsl = src.unwrap();
        let module = naga::front::wgsl::parse_str(&wgsl).unwrap_or_else(|e| panic!("{e}\n{wgsl}"));
        let info = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::all(),
        )
        .validate(&module)
        .unwrap_or_else(|e| panic!("{e:?}\n{wgsl}"));
        let options = naga::back::msl::Options {
            lang_version: (2, 4),
            ..Default::default()
        };
        let (msl, _) = naga::back::msl::write_string(
            &module,
            &info,
            &options,
            &naga::back::msl::PipelineOptions::default(),
        )
        .unwrap_or_else(|e| panic!("MSL: {e:?}\n{wgsl}"));
        if wgsl.contains("subgroupShuffleXor(") {
            assert!(msl.contains("simd_shuffle_xor"), "{msl}");
            shuffled += 1;
        }
    }
    assert!(shuffled >= 2, "{shuffled} shuffled shaders");
}

#[test]
fn subgroup_sizes_that_are_not_powers_of_two_are_refused_by_name() {
    let (g, _) = reduce_graph(ReduceOp::Sum, 3, 1000, DType::F32);
    for bad in [0u32, 1, 3, 12] {
        let shaders = rlx_wgpu::generated_wgsl_with_subgroups(&g, Some(bad));
        let errors: Vec<String> = match shaders {
            Err(e) => vec![e.to_string()],
            Ok(v) => v.into_iter().filter_map(|s| s.err()).collect(),
        };
        assert!(
            errors
                .iter()
                .any(|e| e.contains("width") || e.contains("subgroup")),
            "subgroup size {bad}: {errors:?}"
        );
    }
}
