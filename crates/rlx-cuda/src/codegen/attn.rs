//! Fused attention, lowered once to the loop IR (`rlx_compile::loops`, shared with the
//! WGSL and HIP backends) and rendered into this backend's parameter-block convention:
//! a block of [`ATTENTION_QUERIES`] threads per (batch, head, block of queries), one
//! thread per query, key and value tiles staged in shared memory and an online softmax
//! per query (running maximum, rescaled sum and output accumulator), so the score
//! matrix never exists in memory. Causal and sliding-window masks skip the key tiles
//! outside the block's window; grouped-query heads read kv head `h / (H / Hk)`.
//! Semantics (and the fused multiply-adds of the dot products and sums) are the
//! lowering's, bit for bit the loop IR's reference interpreter.
//!
//! f16/bf16 attention that the tile lowering takes (unmasked or causal, no softcap,
//! head widths multiples of 16) also carries a tensor-core body: the same entry, the same
//! 32-thread blocks, lowered with `LowerOptions::tile_warps = 1` (one warp per 16
//! queries, `Q·Kᵀ` and `P·V` as `wmma` tile products, probabilities rounded to the
//! dtype), selected at compile time on sm_80+ (`__CUDA_ARCH__ >= 800`, where bf16 `wmma`
//! exists) and by the host emulator; older devices compile the scalar body. Its results
//! agree with the oracle within the tile lowering's tolerance, not bit for bit with the
//! scalar body.

use super::KGen;
use rlx_compile::loops::{
    ATTENTION_QUERIES, Dialect, LowerOptions, Stmt, lower_kernel, lower_kernel_with, render_c_loop,
};
use rlx_compile::program::KernelKind;
use rlx_ir::{Dim, MaskKind, Op};

/// The entry point of an attention kernel and its launch geometry.
#[derive(Debug, Clone)]
pub(crate) struct AttnCode {
    pub entry: String,
    /// Query length and batch, and the number of heads: the kernel runs
    /// `batch · heads · ⌈sq / group⌉` blocks (a grid-stride loop, any grid is correct).
    pub sq: Dim,
    pub batch: Dim,
    pub heads: usize,
    /// Threads per block (launched with exactly this many).
    pub group: u32,
}

impl KGen<'_> {
    pub(crate) fn gen_attention(&mut self) -> Result<AttnCode, String> {
        let KernelKind::Attention { op, inputs, .. } = &self.k.kind else {
            unreachable!()
        };
        let Op::Attention { num_heads, .. } = op else {
            unreachable!()
        };
        let qd = self.view_dims(inputs[0]);
        if qd.len() < 2 {
            return Err(format!(
                "attention q has rank {}; it must be [B, S, H, D] or [B, S, H·D]",
                qd.len()
            ));
        }
        let lk = lower_kernel(self.p, self.kid).map_err(|e| e.to_string())?;
        let group = lk.group.ok_or("attention lowered without work-groups")?;
        debug_assert_eq!(group, ATTENTION_QUERIES);
        let host = self.loop_host(&lk, "v");
        let mut body = host.with(|e| render_c_loop(&lk, e));
        if let Some(tc) = self.tensor_core_body(group)? {
            body = format!("#if {TENSOR_CORES}\n{tc}#else\n{body}#endif\n");
        }
        let entry = format!("k{}", self.kid);
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&entry)));
        Ok(AttnCode {
            entry,
            sq: qd[1],
            batch: qd[0],
            heads: *num_heads,
            group,
        })
    }
}

/// The preprocessor condition under which an attention entry runs its tensor-core body.
pub(crate) const TENSOR_CORES: &str =
    "defined(RLX_EMU) || (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800)";

impl KGen<'_> {
    /// The attention kernel lowered through tile products, rendered, when the tile
    /// lowering takes it and it runs in blocks of `group` threads like the scalar body.
    fn tensor_core_body(&mut self, group: u32) -> Result<Option<String>, String> {
        if self.dialect != Dialect::Cuda {
            return Ok(None);
        }
        let opts = LowerOptions {
            tile_warps: 1,
            ..LowerOptions::default()
        };
        let lk = lower_kernel_with(self.p, self.kid, opts).map_err(|e| e.to_string())?;
        fn tiled(body: &[Stmt]) -> bool {
            body.iter().any(|s| match s {
                Stmt::TileMma(_) => true,
                Stmt::Loop { body, .. } | Stmt::If { body, .. } => tiled(body),
                _ => false,
            })
        }
        if !tiled(&lk.body) || lk.group != Some(group) {
            return Ok(None);
        }
        let host = self.loop_host(&lk, "t");
        Ok(Some(host.with(|e| render_c_loop(&lk, e))))
    }
}

/// The oracle's operand checks of attention, on bound view dims `[q, k, v, extra?]`.
pub(crate) fn check(op: &Op, dims: &[Vec<usize>]) -> Result<(), String> {
    let Op::Attention {
        num_heads,
        head_dim,
        v_head_dim,
        mask_kind,
        attn_logit_softcap,
        ..
    } = op
    else {
        unreachable!()
    };
    let (h, d) = (*num_heads, *head_dim);
    let dv = v_head_dim.unwrap_or(d);
    let bsh = |t: &[usize], w: usize, what: &str| -> Result<(usize, usize, usize), String> {
        match *t {
            [b, s, hh, dd] if dd == w => Ok((b, s, hh)),
            [b, s, hidden] if w > 0 && hidden % w == 0 => Ok((b, s, hidden / w)),
            _ => Err(format!(
                "attention: {what} has dims {t:?}; it must be [B, S, H, {w}] or [B, S, H·{w}]"
            )),
        }
    };
    let (b, sq, qh) = bsh(&dims[0], d, "q")?;
    let (kb, sk, hk) = bsh(&dims[1], d, "k")?;
    let (vb, vs, vh) = bsh(&dims[2], dv, "v")?;
    if qh != h || hk != vh || hk == 0 || h % hk != 0 {
        return Err(format!(
            "attention: q has {qh} heads (num_heads {h}), k {hk} and v {vh}: q must have num_heads heads and k/v an equal head count dividing it"
        ));
    }
    if kb != b
        || vb != b
        || vs != sk
        || dims[0].len() != dims[1].len()
        || dims[1].len() != dims[2].len()
    {
        return Err(format!(
            "attention: q {:?}, k {:?}, v {:?} must share the layout and batch size, and k/v the sequence length",
            dims[0], dims[1], dims[2]
        ));
    }
    if let Some(c) = attn_logit_softcap
        && !(c.is_finite() && *c > 0.0)
    {
        return Err(format!(
            "attention: attn_logit_softcap must be finite and > 0, got {c}"
        ));
    }
    match mask_kind {
        MaskKind::Custom if dims[3] != [b, sk] => Err(format!(
            "attention: custom mask must be [batch, key_len] = [{b}, {sk}], got {:?}",
            dims[3]
        )),
        MaskKind::Bias => {
            let full = [b, h, sq, sk];
            let g = &dims[3];
            let ok = g.len() <= 4
                && g.iter()
                    .rev()
                    .zip(full.iter().rev())
                    .all(|(&a, &f)| a == f || a == 1);
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "attention: bias must broadcast to [B, H, Sq, Sk] = {full:?}, got {g:?}"
                ))
            }
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    //! The tensor-core body of f16/bf16 attention: NVRTC compiles it for sm_80 and sm_90
    //! (the PTX holds `wmma.mma` instructions; sm_75 gets the scalar body), and the host
    //! emulator runs it against the oracle within the tile lowering's tolerance.
    use super::TENSOR_CORES;
    use crate::nvrtc::{Output, compile};
    use rlx_compile::program::{KernelKind, Program};
    use rlx_ir::{Activation, DType, Dim, Graph, MaskKind, Op, Shape, TensorData, interp};
    use rlx_runtime::Executable as _;

    /// Attention over `[2, s, h, d]` (`four`) or `[2, s, h·d]` inputs of `dt`, kv heads
    /// `hk`, then tanh; and its inputs in about ±1.5 (some −0.0).
    fn graph(
        dt: DType,
        causal: bool,
        four: bool,
        (h, hk): (usize, usize),
        s: usize,
        d: usize,
    ) -> (Graph, Vec<TensorData>) {
        let dims = |heads: usize| -> Vec<usize> {
            if four {
                vec![2, s, heads, d]
            } else {
                vec![2, s, heads * d]
            }
        };
        let mut g = Graph::new(format!("tc_attn_{dt}_{causal}_{s}_{d}"));
        let mut args = Vec::new();
        let mut ins = Vec::new();
        for (i, (name, heads)) in [("q", h), ("k", hk), ("v", hk)].into_iter().enumerate() {
            let shape = dims(heads);
            let dd: Vec<Dim> = shape.iter().map(|&n| Dim::Static(n)).collect();
            ins.push(g.input(name, Shape::from_dims(&dd, dt)));
            let n: usize = shape.iter().product();
            let mut x = (i as u64 + 1).wrapping_mul(0x9e3779b97f4a7c15) | 1;
            let v: Vec<f64> = (0..n)
                .map(|j| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if j % 11 == 3 {
                        -0.0
                    } else {
                        (((x >> 11) % 30_001) as f32 / 10_000.0 - 1.5) as f64
                    }
                })
                .collect();
            args.push(TensorData::from_f64_as(dt, &shape, &v));
        }
        let mask_kind = if causal {
            MaskKind::Causal
        } else {
            MaskKind::None
        };
        let a = g
            .add_op(
                Op::Attention {
                    num_heads: h,
                    head_dim: d,
                    v_head_dim: None,
                    mask_kind,
                    score_scale: None,
                    attn_logit_softcap: None,
                },
                ins,
            )
            .unwrap();
        // An epilogue makes it a fused attention kernel (alone it is an opaque op, which
        // this backend runs on the host).
        let t = g.add_op(Op::Activation(Activation::Tanh), vec![a]).unwrap();
        g.set_outputs(vec![t]);
        (g, args)
    }

    /// The program of attention-then-tanh over `dt`. The fuser only fuses f32 attention
    /// (f16/bf16 attention stays an opaque op, which this backend runs on the host), so
    /// the f32 graph's program has its buffers and kernel retyped: the fused kernel an
    /// f16/bf16 attention would be.
    fn program(
        dt: DType,
        causal: bool,
        four: bool,
        heads: (usize, usize),
        s: usize,
        d: usize,
    ) -> Program {
        let (g, _) = graph(DType::F32, causal, four, heads, s, d);
        let mut p = rlx_compile::compile(&g, &crate::compile_options()).unwrap();
        for b in &mut p.buffers {
            if b.shape.dtype() == DType::F32 {
                b.shape = Shape::from_dims(b.shape.dims(), dt);
            }
        }
        for (_, shape) in &mut p.args {
            *shape = Shape::from_dims(shape.dims(), dt);
        }
        assert_eq!(p.kernels.len(), 1, "one fused attention kernel");
        let KernelKind::Attention {
            dtype, epilogue, ..
        } = &mut p.kernels[0].kind
        else {
            panic!("a fused attention kernel: {}", p.kernels[0].label());
        };
        *dtype = dt;
        for n in &mut epilogue.nodes {
            if n.dtype == DType::F32 {
                n.dtype = dt;
            }
        }
        p
    }

    /// The output of program `p` (one fused attention kernel over args q, k, v) run by the
    /// loop IR's interpreter, lowered with one-warp tile products.
    fn interpret_tiled(p: &Program, args: &[TensorData]) -> Vec<f64> {
        use rlx_compile::loops::eval::{self, HostBuf};
        use rlx_compile::loops::{LowerOptions, lower_kernel_with};
        use rlx_compile::program::BufKind;
        let opts = LowerOptions {
            tile_warps: 1,
            ..LowerOptions::default()
        };
        let lk = lower_kernel_with(p, 0, opts).unwrap();
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
            HostBuf::Int(_) => unreachable!(),
        }
    }

    #[test]
    fn tensor_core_attention_compiles_with_nvrtc_to_wmma_for_sm80_and_sm90() {
        if !crate::loader::nvrtc_present() {
            println!(
                "skipping: NVRTC cannot be loaded ({}); set RLX_NVRTC_LIB",
                crate::loader::describe()
            );
            return;
        }
        for (dt, elem) in [(DType::F16, "f32.f32"), (DType::BF16, "f32.bf16.bf16.f32")] {
            for (causal, d) in [(true, 32), (false, 64), (true, 128)] {
                let p = program(dt, causal, true, (2, 1), 19, d);
                let src = crate::codegen::generate(&p).unwrap().source;
                let name = format!("{dt:?} causal={causal} d={d}");
                assert!(src.contains(TENSOR_CORES), "{name}: no tensor-core body");
                for cc in [80, 90] {
                    let img = compile(&src, cc, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
                    let ptx = img.ptx_text().expect("PTX text");
                    let mma = format!(".m16n16k16.{elem}");
                    assert!(
                        ptx.contains("wmma.mma.sync.aligned") && ptx.contains(&mma),
                        "{name} sm_{cc}: no {mma} wmma in the PTX"
                    );
                }
                // ptxas accepts the wmma code for a real sm_90 image; sm_75 (no bf16
                // wmma) compiles the scalar body.
                compile(&src, 90, Output::Cubin).unwrap_or_else(|e| panic!("{e}"));
                let old = compile(&src, 75, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
                assert!(!old.ptx_text().unwrap().contains("wmma"), "{name}");
            }
        }
    }

    #[test]
    fn multi_warp_tile_attention_renders_as_standalone_cuda_that_nvrtc_compiles() {
        if !crate::loader::nvrtc_present() {
            println!(
                "skipping: NVRTC cannot be loaded ({}); set RLX_NVRTC_LIB",
                crate::loader::describe()
            );
            return;
        }
        use rlx_compile::loops::{Dialect, LowerOptions, lower_kernel_with, render_c};
        for dt in [DType::F16, DType::BF16] {
            let p = program(dt, false, true, (2, 1), 40, 64);
            let opts = LowerOptions {
                tile_warps: 4,
                ..LowerOptions::default()
            };
            let lk = lower_kernel_with(&p, 0, opts).unwrap();
            assert_eq!(lk.group, Some(128), "{dt:?}: four warps");
            let src = render_c(&lk, Dialect::Cuda);
            let img = compile(&src, 80, Output::Ptx).unwrap_or_else(|e| panic!("{e}"));
            let ptx = img.ptx_text().expect("PTX text");
            assert!(ptx.contains("wmma.mma.sync.aligned"), "{dt:?}: no wmma");
        }
    }

    #[test]
    fn tensor_core_attention_runs_on_the_emulator_within_the_tile_tolerance() {
        let emu = match crate::emulator() {
            Ok(e) => e,
            Err(e) => {
                println!("skipping: {e}");
                return;
            }
        };
        for dt in [DType::F16, DType::BF16] {
            for (causal, four, heads, s, d) in [
                (true, true, (2, 1), 21, 32),
                (false, false, (2, 2), 7, 64),
                (true, false, (1, 1), 37, 128),
            ] {
                let (g, args) = graph(dt, causal, four, heads, s, d);
                let p = program(dt, causal, four, heads, s, d);
                let p2 = p.clone();
                let gpu: std::sync::Arc<dyn crate::device::Gpu> = emu.clone();
                let tuning = crate::exec::tuning_for(gpu.as_ref());
                let exe = crate::exec::GpuExecutable::new(p, gpu, tuning).unwrap();
                let views: Vec<_> = args.iter().map(|a| a.view()).collect();
                let got = exe
                    .run(&views)
                    .unwrap_or_else(|e| panic!("{}: {e}", g.name));
                let named: Vec<(&str, TensorData)> = ["q", "k", "v"]
                    .into_iter()
                    .zip(args.iter().cloned())
                    .collect();
                let want = interp::run(&g, &named).unwrap();
                // Two ulps of the dtype plus three times the probabilities' rounding
                // times the largest |v| (see rlx_compile's attention_tc).
                let (ulp, p) = if dt == DType::F16 {
                    (2f64.powi(-10), 2f64.powi(-11))
                } else {
                    (2f64.powi(-7), 2f64.powi(-8))
                };
                let (x, w) = (got[0].to_f64_vec(), want[0].to_f64_vec());
                assert_eq!(x.len(), w.len());
                for (i, (x, w)) in x.iter().zip(&w).enumerate() {
                    let tol = 2.0 * ulp * w.abs().max(0.25) + 3.0 * p * 1.5;
                    assert!(
                        (x - w).abs() <= tol,
                        "{}: element {i}: emulator {x}, oracle {w}",
                        g.name
                    );
                }
                // The emulator runs the tile body in the loop IR's documented order: bit for
                // bit the interpreter of the tile lowering.
                let tiled = interpret_tiled(&p2, &args);
                assert!(
                    x.iter()
                        .zip(&tiled)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{}: the emulator differs from the tile lowering's interpreter",
                    g.name
                );
            }
        }
    }
}
