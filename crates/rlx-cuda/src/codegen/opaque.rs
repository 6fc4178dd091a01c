//! Ops the backend runs whole: every op the loop IR lowers (`rlx_compile::loops`: concat,
//! pad, cumsum, gather, scatter-add, softmax cross-entropy with integer labels,
//! convolutions and pooling, …) is rendered by the shared C renderer, attention of every
//! float dtype as an attention entry ([`super::attn`]); every other opaque
//! op (FFT, solves, scans, …) runs on the host through the shared host fallback
//! (`rlx_runtime::HostKernel`: the registered CPU backend, else the oracle), with its
//! operands copied down and its result copied back (reported by `explain`).
//! Scaled matmuls go to cuBLASLt on GPUs with fp8 tensor cores where the formats and
//! shapes fit it, else run their lowering on the device (as the scaled quantization does).

use super::{KCode, KGen};
use rlx_compile::loops::{lower_kernel_with, render_c_loop};
use rlx_compile::program::KernelKind;
use rlx_ir::{DType, Dim, Op, norm_axis};

/// An opaque kernel: a native entry point over `threads` (one thread per element), or
/// the host.
#[derive(Debug, Clone)]
pub(crate) struct OpaqueCode {
    pub op: Op,
    pub entry: Option<String>,
    pub threads: Vec<Dim>,
    /// For a scaled matmul with a bias: the kernel adding it after an fp8 cuBLASLt call
    /// (`entry` is then the lowered kernel, bias included, for when cuBLASLt is not used).
    pub fp8_bias: Option<String>,
}

impl KGen<'_> {
    pub(crate) fn gen_opaque(&mut self, op: &Op) -> Result<KCode, String> {
        let kk = self.k;
        let KernelKind::Opaque { inputs, out, .. } = &kk.kind else {
            unreachable!()
        };
        let out_dt = out.dtype();
        let in_dts: Vec<DType> = inputs
            .iter()
            .map(|&l| self.p.buffers[self.k.loads[l].buf].shape.dtype())
            .collect();
        let mut host = OpaqueCode {
            op: op.clone(),
            entry: None,
            threads: vec![],
            fp8_bias: None,
        };
        if out_dt.is_complex() || in_dts.iter().any(|d| d.is_complex()) {
            return Ok(KCode::Opaque(host));
        }
        let name = format!("k{}", self.kid);
        let od = out.dims().to_vec();
        // A scaled matmul with a bias also gets the kernel adding the bias after an fp8
        // cuBLASLt call (the executor takes that route when the device has fp8 GEMMs and
        // the operands fit it, else launches the lowered kernel, which adds the bias
        // itself).
        let fp8_bias = match op {
            Op::ScaledMatMul { has_bias: true, .. }
                if od.len() == 2 && out_dt == DType::F32 && inputs.len() == 5 =>
            {
                let lb = inputs[4];
                let bname = format!("k{}_bias", self.kid);
                let mut s = self.grid_loop(&od);
                let o = self.unravel_stmts(&mut s, "    ", "f", &od, "o");
                let (stmts, bias) = self.load_at(lb, &od[1..], &o[1], &o[1..], true)?;
                let ob = self.buf(self.k.stores[0].buf);
                s.push_str(&format!(
                    "{stmts}    ((float*){ob})[f] = ((float*){ob})[f] + (float)({bias});\n  }}\n"
                ));
                self.entries
                    .push_str(&format!("{} {{\n{s}}}\n", self.entry_header(&bname)));
                Some(bname)
            }
            _ => None,
        };
        host.fp8_bias = fp8_bias.clone();
        // Lowered once to the loop IR (shared with the WGSL and HIP backends) and run as
        // independent items: the rendered body is a grid-stride loop over the lowering's
        // own item count, so launching one thread per output element (per line for
        // cumsum) covers it whatever that count is. An opaque attention (f16/bf16/f64:
        // the fuser fuses only f32 attention, which the CPU runs as a kernel of its own)
        // is launched like a fused one, tensor-core body included. What the lowering
        // refuses (mixed dtypes, heads over `attn::MAX_HEAD`, FFT, solves) runs on the host.
        let Ok(lk) = lower_kernel_with(self.p, self.kid, super::attn::options(0)) else {
            return Ok(KCode::Opaque(host));
        };
        if lk.group.is_some() {
            return match op {
                Op::Attention { .. } => self.gen_attention(&lk).map(KCode::Attention),
                _ => Ok(KCode::Opaque(host)),
            };
        }
        let threads = match op {
            Op::Cumsum { axis, .. } => {
                let ax = norm_axis("cumsum", *axis as i64, od.len()).map_err(|e| e.to_string())?;
                let mut lines = od.clone();
                lines.remove(ax);
                lines
            }
            _ => od.clone(),
        };
        let loop_host = self.loop_host(&lk, "v");
        let body = loop_host.with(|e| render_c_loop(&lk, e));
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&name)));
        Ok(KCode::Opaque(OpaqueCode {
            op: op.clone(),
            entry: Some(name),
            threads,
            fp8_bias,
        }))
    }

    /// The opening of a grid-stride loop over `dims` (`f` is the flat index).
    fn grid_loop(&mut self, dims: &[Dim]) -> String {
        let n = self.numel(dims);
        format!(
            "  const I n = {n};\n  for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < n; f += (I)gridDim.x * blockDim.x) {{\n"
        )
    }
}
