//! The generated CUDA programs, run by the host emulator, against the oracle: random
//! graphs over every kernel kind, fused attention, both matmul routes (cuBLAS calls and
//! the generic kernel), split reductions, dynamic dims, device-side errors, fp8 scaled
//! matmuls and host-run opaque ops.
//!
//! The emulator compiles the same CUDA C with the system C++ compiler; these tests skip
//! (printing why) when none is installed.

mod common;

use common::cases::{self, Target};
use common::check;
use proptest::prelude::*;
use rlx_cuda::{Routing, compile_emulated, compile_emulated_with};
use rlx_testkit::{Rng, build_attention_graph, build_random_graph};

/// Whether the emulator can run here (prints the reason when not).
fn emulator_ok() -> bool {
    match rlx_cuda::emulator() {
        Ok(_) => true,
        Err(e) => {
            println!("skipping: {e}");
            false
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, rng_seed: rlx_testkit::proptest_seed(), ..ProptestConfig::default() })]

    #[test]
    fn random_graphs_match_the_oracle_on_the_emulator(seed in any::<u64>()) {
        if emulator_ok() {
            let mut rng = Rng::new(seed);
            let (g, args) = build_random_graph(&mut rng, false);
            check(&g, &args, &|g| compile_emulated(g));
        }
    }

    #[test]
    fn random_graphs_match_without_blas_and_with_split_reductions(seed in any::<u64>()) {
        if emulator_ok() {
            let mut rng = Rng::new(seed ^ 0xabcd);
            let (g, args) = build_random_graph(&mut rng, true);
            let o = Routing { blas: false, fp8: false, ..Routing::default() };
            check(&g, &args, &|g| compile_emulated_with(g, o));
        }
    }

    #[test]
    fn fused_attention_matches_the_oracle_on_the_emulator(seed in any::<u64>()) {
        if emulator_ok() {
            let mut rng = Rng::new(seed);
            let (g, args) = build_attention_graph(&mut rng);
            check(&g, &args, &|g| compile_emulated(g));
        }
    }
}

/// Replays one random graph (`RLX_SEED`, `RLX_LARGE=1`, `RLX_ATTN=1`) with its source.
#[test]
#[ignore]
fn replay_seed() {
    let seed: u64 = std::env::var("RLX_SEED")
        .expect("set RLX_SEED")
        .parse()
        .unwrap();
    let mut rng = Rng::new(seed);
    let (g, args) = if std::env::var("RLX_ATTN").is_ok() {
        build_attention_graph(&mut rng)
    } else {
        build_random_graph(&mut rng, std::env::var("RLX_LARGE").is_ok())
    };
    eprintln!("{g}\n{}", rlx_cuda::generated_source(&g).unwrap());
    check(&g, &args, &|g| compile_emulated(g));
}

/// The emulator as a target, or `None` (printing why) without a C++ compiler.
fn target() -> Option<Target> {
    match rlx_cuda::emulator() {
        Ok(e) => Some(Target { gpu: e }),
        Err(e) => {
            println!("skipping: {e}");
            None
        }
    }
}

#[test]
fn argmax_and_argmin_run_as_device_reductions() {
    if let Some(t) = target() {
        cases::argmax_and_argmin_run_as_device_reductions(&t);
    }
}

#[test]
fn matmul_operand_layouts_map_onto_blas_calls() {
    if let Some(t) = target() {
        cases::matmul_operand_layouts_map_onto_blas_calls(&t);
    }
}

#[test]
fn linear_layers_use_fused_blas_epilogues() {
    if let Some(t) = target() {
        cases::linear_layers_use_fused_blas_epilogues(&t);
    }
}

#[test]
fn integer_matmul_uses_the_generic_kernel() {
    if let Some(t) = target() {
        cases::integer_matmul_uses_the_generic_kernel(&t);
    }
}

#[test]
fn dynamic_dims_are_kernel_arguments() {
    if let Some(t) = target() {
        cases::dynamic_dims_are_kernel_arguments(&t);
    }
}

#[test]
fn integer_division_by_zero_is_a_run_error() {
    if let Some(t) = target() {
        cases::integer_division_by_zero_is_a_run_error(&t);
    }
}

#[test]
fn cross_entropy_with_labels_matches_the_oracle_and_rejects_bad_labels() {
    if let Some(t) = target() {
        cases::cross_entropy_with_labels_matches_the_oracle_and_rejects_bad_labels(&t);
    }
}

#[test]
fn scaled_fp8_matmul_matches_the_oracle() {
    if let Some(t) = target() {
        cases::scaled_fp8_matmul_matches_the_oracle(&t);
    }
}

#[test]
fn block_scaled_formats_run_on_the_device_bit_for_bit() {
    if let Some(t) = target() {
        cases::block_scaled_formats_run_on_the_device_bit_for_bit(&t);
    }
}

#[test]
fn lowered_opaque_ops_run_on_the_device() {
    if let Some(t) = target() {
        cases::lowered_opaque_ops_run_on_the_device(&t);
    }
}

#[test]
fn f16_and_bf16_attention_takes_the_tensor_core_lowering() {
    if let Some(t) = target() {
        common::tensor_cores::f16_and_bf16_attention_takes_the_tensor_core_lowering(&t, true, true);
    }
    // HIP renders no tensor-core body: the same programs run the scalar lowering.
    if let Some(t) = hip_target() {
        common::tensor_cores::f16_and_bf16_attention_takes_the_tensor_core_lowering(
            &t, false, false,
        );
    }
}

#[test]
fn f16_and_bf16_attention_backward_runs_on_the_device() {
    if let Some(t) = target() {
        common::register_cpu();
        common::attention_backward::f16_and_bf16_attention_backward_runs_on_the_device(&t, true);
    }
    if let Some(t) = hip_target() {
        common::attention_backward::f16_and_bf16_attention_backward_runs_on_the_device(&t, false);
    }
}

#[test]
fn wide_attention_heads_run_on_the_device_up_to_1024() {
    if let Some(t) = target() {
        common::register_cpu();
        common::attention_backward::wide_heads_run_on_the_device_up_to_1024(&t);
    }
    if let Some(t) = hip_target() {
        common::attention_backward::wide_heads_run_on_the_device_up_to_1024(&t);
    }
}

#[test]
fn work_group_reductions_match_the_oracle() {
    if let Some(t) = target() {
        cases::work_group_reductions_match_the_oracle(&t);
    }
}

#[test]
fn generic_tiled_matmuls_match_the_oracle() {
    if let Some(t) = target() {
        cases::generic_tiled_matmuls_match_the_oracle(&t);
    }
}

#[test]
fn sums_are_bit_identical_to_the_loop_ir_reference_in_its_fixed_tree_order() {
    if !emulator_ok() {
        return;
    }
    rlx_testkit::check_sums_follow_loop_ir_order(
        &rlx_cuda::compile_options(),
        "device",
        &|g, x| {
            let exe = compile_emulated(g).unwrap();
            exe.run(&[x.view()]).unwrap()[0].to_f32_vec()
        },
    );
}

/// The generic kernel (no cuBLAS) is the loop IR's tiled lowering: the emulator, which
/// compiles the same CUDA C with the host compiler (no contraction of `a·b + acc` into
/// an FMA on x86-64), gives its bits. A GPU's NVRTC contracts by default and may differ
/// in the last bits; the GPU tests compare with the oracle instead.
#[test]
fn generic_matmuls_are_bit_identical_to_the_loop_ir_reference_in_its_fixed_order() {
    if !emulator_ok() {
        return;
    }
    let o = Routing {
        blas: false,
        fp8: false,
        ..Routing::default()
    };
    rlx_testkit::check_matmuls_follow_loop_ir_order(
        &rlx_cuda::compile_options(),
        "emulated device",
        &|g, args| {
            let exe = compile_emulated_with(g, o).unwrap();
            let views: Vec<_> = args.iter().map(|a| a.view()).collect();
            exe.run(&views).unwrap()[0].to_f32_vec()
        },
    );
}

#[test]
fn huge_reductions_split_match_the_oracle() {
    if let Some(t) = target() {
        common::split::huge_reductions_split_match_the_oracle(&t);
    }
}

#[test]
fn dynamic_huge_reductions_split_match_the_oracle() {
    if let Some(t) = target() {
        common::split::dynamic_huge_reductions_split_match_the_oracle(&t);
    }
}

#[test]
fn integer_means_are_never_split() {
    if let Some(t) = target() {
        common::split::integer_means_are_never_split(&t);
    }
}

/// The same split, in the HIP dialect (what `rlx-rocm` runs through this executor).
#[test]
fn huge_reductions_split_match_the_oracle_as_hip() {
    if !emulator_ok() {
        return;
    }
    let gpu = rlx_cuda::emu::EmuGpu::new()
        .unwrap()
        .with_dialect(rlx_cuda::device::Dialect::Hip);
    let t = Target {
        gpu: std::sync::Arc::new(gpu),
    };
    common::split::huge_reductions_split_match_the_oracle(&t);
}

/// The emulator in the HIP dialect, as a target.
fn hip_target() -> Option<Target> {
    target().map(|_| Target {
        gpu: std::sync::Arc::new(
            rlx_cuda::emu::EmuGpu::new()
                .unwrap()
                .with_dialect(rlx_cuda::device::Dialect::Hip),
        ),
    })
}

#[test]
fn shuffled_reductions_match_unshuffled_and_the_oracle() {
    if let Some(t) = target() {
        common::shuffle::shuffled_reductions_match_unshuffled_and_the_oracle(&t);
    }
}

#[test]
fn shuffled_reductions_match_unshuffled_and_the_oracle_as_hip() {
    if let Some(t) = hip_target() {
        common::shuffle::shuffled_reductions_match_unshuffled_and_the_oracle(&t);
    }
}

#[test]
fn shuffled_row_ops_match_unshuffled_and_the_oracle() {
    if let Some(t) = target() {
        common::shuffle::shuffled_row_ops_match_unshuffled_and_the_oracle(&t);
    }
    if let Some(t) = hip_target() {
        common::shuffle::shuffled_row_ops_match_unshuffled_and_the_oracle(&t);
    }
}
