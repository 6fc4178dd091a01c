//! Every kernel of a representative set of model graphs (the W1–W11 workloads' building
//! blocks: MLP, convolution, layer norm, attention, softmax cross-entropy with integer
//! labels, an embedding gather and its scatter-add backward, an fp8 scaled matmul with a
//! bias, an AdamW update, casts) is lowered to the loop IR, or is on the short list of
//! kernels a backend runs another way, each with its reason (today: none — the scaled
//! quantization and the scaled matmul with its bias lower too).

mod graphs;

use rlx_compile::loops::{self, LowerError};
use rlx_compile::{CompileOptions, compile};

/// Kernels (by label prefix) that are not lowered, and why: a backend runs them on the
/// host fallback (CUDA, wgpu) or a library call. Empty: every kernel of these graphs lowers.
const NOT_LOWERED: &[(&str, &str)] = &[];

#[test]
fn every_kernel_of_the_model_graphs_lowers_or_is_listed_with_a_reason() {
    let mut missing = Vec::new();
    for (name, g) in graphs::all() {
        let p = compile(&g, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{name}: compile: {e}"));
        for k in 0..p.kernels.len() {
            let label = p.kernels[k].label();
            match loops::lower_kernel(&p, k) {
                Ok(_) => {}
                Err(LowerError::Unsupported { what, .. }) => {
                    if !NOT_LOWERED.iter().any(|(l, _)| label.starts_with(l)) {
                        missing.push(format!("{name}: kernel {k} `{label}`: {what}"));
                    }
                }
            }
        }
    }
    assert!(missing.is_empty(), "not lowered:\n{}", missing.join("\n"));
}
