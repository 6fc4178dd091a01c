//! f16/bf16 attention of real programs. The fuser leaves it an opaque `Op::Attention`
//! (it fuses only f32 attention, which the CPU runs as a kernel of its own); this backend
//! launches it through the loop IR's attention lowering: the tensor-core tile lowering
//! (one warp per 16 queries, `wmma` on sm_80+, the emulator's scalar tile products)
//! where it applies — unmasked or causal, no softcap, head widths multiples of 16 — and
//! the scalar lowering on the device otherwise. Never on the host.

use super::cases::Target;
use super::check;
use rlx_compile::loops::eval::{self, HostBuf};
use rlx_compile::loops::{LowerOptions, lower_kernel_with};
use rlx_compile::program::BufKind;
use rlx_ir::{DType, Graph, MaskKind, TensorData, interp};

/// The documented bound of the tile lowering (rlx-compile's `attention_tc`) against the
/// oracle's f64 softmax, for an oracle value `w` and values of at most 2 in magnitude:
/// two units in the last place of the dtype plus three times the probabilities' rounding
/// to the dtype (2⁻¹¹ for f16, 2⁻⁸ for bf16) times the largest |v|.
pub fn tolerance(dt: DType, w: f64) -> f64 {
    let (ulp, p) = if dt == DType::F16 {
        (2f64.powi(-10), 2f64.powi(-11))
    } else {
        (2f64.powi(-7), 2f64.powi(-8))
    };
    2.0 * ulp * w.abs().max(0.25) + 3.0 * p * 2.0
}

/// One attention graph: dtype, mask, four-axis layout, (heads, kv heads), length, head
/// width, and whether the tile lowering takes it.
type Case = (DType, MaskKind, bool, (usize, usize), usize, usize, bool);

/// Tensor-core eligible cases first, then two the tile lowering leaves to the scalar one.
fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for dt in [DType::F16, DType::BF16] {
        for (mask, four, heads, s, d) in [
            (MaskKind::Causal, true, (2, 1), 21, 32),
            (MaskKind::None, false, (2, 2), 7, 64),
            (MaskKind::Causal, false, (1, 1), 37, 128),
        ] {
            v.push((dt, mask, four, heads, s, d, true));
        }
    }
    v.push((
        DType::F16,
        MaskKind::SlidingWindow(4),
        true,
        (2, 1),
        19,
        32,
        false,
    ));
    v.push((DType::BF16, MaskKind::Causal, true, (2, 2), 11, 24, false));
    v
}

/// f16/bf16 attention compiled from real graphs runs on the device, through the
/// tensor-core lowering where it applies and the target has it (`tensor_cores`: the CUDA
/// dialect; HIP runs the scalar lowering), the plan naming it, within [`tolerance`] of
/// the oracle; with `bitwise` (the CUDA emulator, which runs the tile products in the
/// loop IR's documented order) also bit for bit the loop IR interpreter of the tile
/// lowering.
pub fn f16_and_bf16_attention_takes_the_tensor_core_lowering(
    t: &Target,
    tensor_cores: bool,
    bitwise: bool,
) {
    for (dt, mask, four, heads, s, d, eligible) in cases() {
        let tiled = eligible && tensor_cores;
        let (g, args) = rlx_testkit::attention_case(dt, mask, four, heads, s, d);
        let exe = t.compile(&g).unwrap_or_else(|e| panic!("{}: {e}", g.name));
        let plan = exe.explain();
        assert!(
            !plan.contains("host("),
            "{}: ran on the host\n{plan}",
            g.name
        );
        assert_eq!(
            plan.contains("[tensor cores"),
            tiled,
            "{}: tensor cores expected {tiled}\n{plan}",
            g.name
        );
        let views: Vec<_> = args.iter().map(|a| a.view()).collect();
        let got = exe
            .run(&views)
            .unwrap_or_else(|e| panic!("{}: {e}", g.name))[0]
            .to_f64_vec();
        let named: Vec<(&str, TensorData)> =
            ["q", "k", "v"].into_iter().zip(args.clone()).collect();
        let want = interp::run(&g, &named).unwrap()[0].to_f64_vec();
        assert_eq!(got.len(), want.len(), "{}", g.name);
        let mut worst = 0.0f64;
        for (i, (x, w)) in got.iter().zip(&want).enumerate() {
            let tol = tolerance(dt, *w);
            assert!(
                (x - w).abs() <= tol,
                "{}: element {i}: device {x}, oracle {w}",
                g.name
            );
            worst = worst.max((x - w).abs());
        }
        // The tile lowering rounds the probabilities to the dtype; the scalar lowering
        // computes in f32 and rounds once, so it often matches the oracle exactly.
        assert!(
            worst > 0.0 || !tiled,
            "{}: exact everywhere is suspicious for tile products",
            g.name
        );
        if bitwise && tiled {
            let tile = interpret_tiled(&g, &args);
            assert!(
                got.iter()
                    .zip(&tile)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{}: the device differs from the tile lowering's interpreter",
                g.name
            );
        }
    }
    // Through the shared oracle comparison too (its own dtype tolerances).
    let (g, args) =
        rlx_testkit::attention_case(DType::BF16, MaskKind::Causal, true, (2, 1), 16, 16);
    check(&g, &args, &|g| t.compile(g));
}

/// The output of `g` (one attention kernel over args q, k, v) run by the loop IR's
/// interpreter, lowered with one-warp tile products (the entry the device runs).
fn interpret_tiled(g: &Graph, args: &[TensorData]) -> Vec<f64> {
    let p = rlx_compile::compile(g, &rlx_cuda::compile_options()).unwrap();
    assert_eq!(p.kernels.len(), 1, "{}: one attention kernel", g.name);
    let opts = LowerOptions {
        tile_warps: 1,
        ..LowerOptions::default()
    };
    let lk = lower_kernel_with(&p, 0, opts).unwrap();
    let mut bufs: Vec<HostBuf> = lk
        .bufs
        .iter()
        .map(|b| match p.buffers[b.buf].kind {
            BufKind::Arg(i) => HostBuf::Float(args[i].to_f64_vec()),
            _ => HostBuf::zeros(b.dtype, p.buffers[b.buf].shape.num_elements().unwrap()),
        })
        .collect();
    eval::run(&lk, &mut bufs, &rlx_ir::DimBinding::new()).unwrap();
    let out = lk.bufs.iter().position(|b| b.buf == p.outputs[0]).unwrap();
    match &bufs[out] {
        HostBuf::Float(v) => v.clone(),
        HostBuf::Int(_) => unreachable!("a float output"),
    }
}
