//! The differential suite on a real CUDA device (`Device::Cuda` through the backend):
//! random graphs, fused attention, the targeted cases shared with the emulator, and
//! sizes large enough for split reductions, multi-block rows and tensor-core GEMMs.
//!
//! Every test skips, printing why, when no CUDA device is usable (no driver, no NVRTC,
//! no GPU). `RLX_GPU_CASES` sets the number of random graphs per property (default 64).

mod common;

use common::cases::{self, Target};
use common::check;
use proptest::prelude::*;
use rlx_cuda::{CudaBackend, Routing};
use rlx_ir::{Activation, DType, Graph, MaskKind, NodeId, Op, ReduceOp, Shape};
use rlx_runtime::{Backend, Device};
use rlx_testkit::{Rng, build_attention_graph, build_random_graph, op, random_data, reduce};

fn target() -> Option<Target> {
    match rlx_cuda::device() {
        Ok(d) => Some(Target { gpu: d }),
        Err(e) => {
            println!("skipping: no usable CUDA device ({e})");
            None
        }
    }
}

fn cases_count() -> u32 {
    std::env::var("RLX_GPU_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

#[test]
fn the_backend_reports_cuda_availability_consistently() {
    let avail = CudaBackend.is_available(Device::Cuda);
    assert_eq!(avail, rlx_cuda::unavailable_reason().is_none());
    assert_eq!(
        CudaBackend.unavailable_reason(Device::Cuda),
        rlx_cuda::unavailable_reason()
    );
    assert!(!CudaBackend.is_available(Device::Cpu));
    if !avail {
        println!(
            "CUDA unavailable: {}",
            rlx_cuda::unavailable_reason().unwrap()
        );
        let mut g = Graph::new("x");
        let x = g.input("x", Shape::new(&[2], DType::F32));
        g.set_outputs(vec![x]);
        let e = CudaBackend
            .compile(Device::Cuda, &g)
            .err()
            .expect("no device, no executable");
        assert!(e.to_string().contains("CUDA is not available"), "{e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases_count(), failure_persistence: None, rng_seed: rlx_testkit::proptest_seed(), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_match_the_oracle_on_cuda(seed in any::<u64>()) {
        if target().is_some() {
            let mut rng = Rng::new(seed);
            let (g, args) = build_random_graph(&mut rng, false);
            check(&g, &args, &|g| CudaBackend.compile(Device::Cuda, g));
        }
    }

    #[test]
    fn large_random_graphs_match_the_oracle_on_cuda(seed in any::<u64>()) {
        if let Some(t) = target() {
            let mut rng = Rng::new(seed ^ 0x5eed);
            let (g, args) = build_random_graph(&mut rng, true);
            check(&g, &args, &|g| t.compile(g));
            let o = Routing { blas: false, fp8: false, ..Routing::default() };
            check(&g, &args, &|g| t.routed(g, o));
        }
    }

    #[test]
    fn fused_attention_matches_the_oracle_on_cuda(seed in any::<u64>()) {
        if let Some(t) = target() {
            let mut rng = Rng::new(seed);
            let (g, args) = build_attention_graph(&mut rng);
            check(&g, &args, &|g| t.compile(g));
        }
    }
}

macro_rules! shared {
    ($($name:ident),*) => {$(
        #[test]
        fn $name() {
            if let Some(t) = target() {
                cases::$name(&t);
            }
        }
    )*};
}

shared!(
    argmax_and_argmin_run_as_device_reductions,
    matmul_operand_layouts_map_onto_blas_calls,
    linear_layers_use_fused_blas_epilogues,
    integer_matmul_uses_the_generic_kernel,
    dynamic_dims_are_kernel_arguments,
    integer_division_by_zero_is_a_run_error,
    cross_entropy_with_labels_matches_the_oracle_and_rejects_bad_labels,
    scaled_fp8_matmul_matches_the_oracle,
    block_scaled_formats_run_on_the_device_bit_for_bit,
    lowered_opaque_ops_run_on_the_device,
    work_group_reductions_match_the_oracle,
    generic_tiled_matmuls_match_the_oracle
);

/// On the GPU the `wmma` products sum in the hardware's order: the oracle's tolerance
/// only, not the interpreter's bits.
#[test]
fn f16_and_bf16_attention_takes_the_tensor_core_lowering() {
    if let Some(t) = target() {
        common::tensor_cores::f16_and_bf16_attention_takes_the_tensor_core_lowering(
            &t, true, false,
        );
    }
}

/// Sizes that need many blocks: a split full reduction, long rows, a 384³ GEMM in f32
/// and bf16, and causal attention with several key tiles per block.
#[test]
fn large_kernels_match_the_oracle_on_cuda() {
    let Some(t) = target() else {
        return;
    };
    let mut rng = Rng::new(99);
    // Reductions: everything (split), rows of 5000, columns of 3000.
    let mut g = Graph::new("big_reduce");
    let x = g.input("x", Shape::new(&[600, 5000], DType::F32));
    let all = reduce(&mut g, ReduceOp::Sum, vec![0, 1], false, x);
    let rows = reduce(&mut g, ReduceOp::Max, vec![1], false, x);
    let cols = reduce(&mut g, ReduceOp::Mean, vec![0], true, x);
    let sm = op(&mut g, Op::Softmax { axis: -1 }, vec![x]);
    g.set_outputs(vec![all, rows, cols, sm]);
    let args = vec![random_data(&mut rng, &Shape::new(&[600, 5000], DType::F32))];
    check(&g, &args, &|g| t.compile(g));
    // GEMMs on tensor cores, with a fused bias + GELU epilogue.
    for dt in [DType::F32, DType::BF16] {
        let n = 384;
        let mut g = Graph::new("big_mm");
        let shapes = [
            Shape::new(&[n, n], dt),
            Shape::new(&[n, n], dt),
            Shape::new(&[n], dt),
        ];
        let args: Vec<_> = shapes.iter().map(|s| random_data(&mut rng, s)).collect();
        let ids: Vec<NodeId> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| g.input(format!("x{i}"), s.clone()))
            .collect();
        let y = op(
            &mut g,
            Op::FusedMatMulBiasAct {
                activation: Some(Activation::GeluApprox),
            },
            ids,
        );
        g.set_outputs(vec![y]);
        check(&g, &args, &|g| t.compile(g));
    }
    // Causal attention, [B, S, H, D].
    let (b, s, h, d) = (2, 300, 4, 64);
    let mut g = Graph::new("big_attn");
    let sh = Shape::new(&[b, s, h, d], DType::F32);
    let ins: Vec<NodeId> = (0..3)
        .map(|i| g.input(format!("x{i}"), sh.clone()))
        .collect();
    let a = op(
        &mut g,
        Op::Attention {
            num_heads: h,
            head_dim: d,
            v_head_dim: None,
            mask_kind: MaskKind::Causal,
            score_scale: None,
            attn_logit_softcap: None,
        },
        ins,
    );
    g.set_outputs(vec![a]);
    let args: Vec<_> = (0..3).map(|_| random_data(&mut rng, &sh)).collect();
    check(&g, &args, &|g| t.compile(g));
}
