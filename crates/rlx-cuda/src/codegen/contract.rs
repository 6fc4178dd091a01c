//! Contractions `[.., M, K] × [.., K, N]` with an epilogue.
//!
//! The launcher picks one of three routes per call (see `crate::exec::plan`):
//! - cuBLASLt with a fused epilogue (bias, ReLU or tanh-GELU, plus bias) when the
//!   epilogue has that shape;
//! - cuBLAS (`GemmStridedBatchedEx` / `GemmBatchedEx`) into the output or a scratch
//!   product, then the epilogue kernel generated here (operands without a BLAS layout
//!   are first copied by the pack kernels);
//! - the generic fused kernel (integer dtypes, operands of mixed dtypes, or no cuBLAS):
//!   lowered once to the loop IR (`rlx_compile::loops`, shared with the WGSL and HIP
//!   backends) — a block per output tile, A and B slices staged in shared memory, a
//!   register block per thread, each output folded in index order over K (f32 for
//!   f32/f16/bf16, f64 for f64, wrapping i64 for integers) — and rendered by the shared C
//!   renderer.

use super::{KGen, meta::Ptr};
use rlx_compile::loops::{lower_kernel, matmul_tile, render_c_loop};
use rlx_compile::program::{EOp, Expr, KernelKind, compute_class};
use rlx_ir::{Activation, BinaryOp, DType, Dim};

/// Scratch pointer slots of contractions.
pub(crate) const S_PACK_A: usize = 0;
pub(crate) const S_PACK_B: usize = 1;
pub(crate) const S_PRODUCT: usize = 2;

/// An epilogue cuBLASLt can fuse: optional bias (a load broadcast along rows) then an
/// optional activation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LtPattern {
    pub bias: Option<usize>,
    pub act: Option<Activation>,
}

/// Entry points of a contraction and what the launcher decides from.
#[derive(Debug, Clone)]
pub(crate) struct ContractCode {
    pub pack_a: String,
    pub pack_b: String,
    pub epi: String,
    pub generic: String,
    /// Threads per block of the generic kernel (it must be launched with exactly this
    /// many).
    pub group: u32,
    /// Side of the generic kernel's square output tile (one block per tile).
    pub tile: u32,
    /// Loads of the operands.
    pub a: usize,
    pub b: usize,
    pub dtype: DType,
    pub out_space: Vec<Dim>,
    /// The epilogue only stores the product (same dtype).
    pub trivial: bool,
    /// The epilogue as cuBLASLt can fuse it, if it can.
    pub lt: Option<LtPattern>,
}

impl ContractCode {
    pub(crate) fn entries(&self) -> Vec<String> {
        vec![
            self.pack_a.clone(),
            self.pack_b.clone(),
            self.epi.clone(),
            self.generic.clone(),
        ]
    }
}

/// The cuBLASLt-fusable shape of `epi` (stored value `store`), if it has one.
fn lt_pattern(epi: &Expr, store: u32, dtype: DType, out_dt: DType) -> Option<LtPattern> {
    if out_dt != dtype || epi.nodes.iter().any(|n| n.dtype != dtype) {
        return None;
    }
    let nodes = &epi.nodes;
    let mut v = store as usize;
    let act = match &nodes[v].op {
        EOp::Unary(a @ (Activation::Relu | Activation::GeluApprox)) => {
            let a = *a;
            v = nodes[v].args[0] as usize;
            Some(a)
        }
        _ => None,
    };
    let bias = match &nodes[v].op {
        EOp::Core => None,
        EOp::Binary(BinaryOp::Add) => {
            let (x, y) = (nodes[v].args[0] as usize, nodes[v].args[1] as usize);
            match (&nodes[x].op, &nodes[y].op) {
                (EOp::Core, EOp::Load(l)) | (EOp::Load(l), EOp::Core) => Some(*l),
                _ => return None,
            }
        }
        _ => return None,
    };
    // Every node must be part of the pattern (no other computation hides in the epilogue).
    let used = 1 + act.is_some() as usize + if bias.is_some() { 2 } else { 0 };
    (used == nodes.len()).then_some(LtPattern { bias, act })
}

impl KGen<'_> {
    pub(crate) fn gen_contract(&mut self) -> Result<ContractCode, String> {
        let kk = self.k;
        let KernelKind::Contraction {
            a,
            b,
            out_space,
            dtype,
            epilogue,
        } = &kk.kind
        else {
            unreachable!()
        };
        let (la, lb, dtype) = (*a, *b, *dtype);
        if compute_class(dtype).is_none() {
            return Err("a contraction of complex values".into());
        }
        let kid = self.kid;
        let (ad, bd) = (self.view_dims(la), self.view_dims(lb));
        let r = out_space.len();
        if r < 2 || ad.len() < 2 || bd.len() < 2 {
            return Err(format!(
                "matmul operands of ranks {} and {} (result rank {r}); both need at least 2 axes",
                ad.len(),
                bd.len()
            ));
        }
        // Pack kernels: copy an operand's view into a dense scratch array.
        let pack_a = format!("k{kid}_pa");
        let pack_b = format!("k{kid}_pb");
        for (name, l, dims, slot) in [(&pack_a, la, &ad, S_PACK_A), (&pack_b, lb, &bd, S_PACK_B)] {
            let dst = self.ptr(Ptr::Scratch(slot));
            let buf = self.k.loads[l].buf;
            let src = self.buf(buf);
            let w = match self.p.buffers[buf].shape.dtype().size_bytes() {
                1 => "u8",
                2 => "u16",
                4 => "u32",
                _ => "u64",
            };
            let n = self.numel(dims);
            let mut s = format!(
                "  const I n = {n};\n  for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < n; f += (I)gridDim.x * blockDim.x) {{\n"
            );
            let idx = self.unravel_stmts(&mut s, "    ", "f", dims, "x");
            let (stmts, off) = self.load_at(l, dims, "f", &idx, false)?;
            s.push_str(&stmts);
            s.push_str(&format!(
                "    (({w}*){dst})[f] = ((const {w}*){src})[{off}];\n  }}\n"
            ));
            self.entries
                .push_str(&format!("{} {{\n{s}}}\n", self.entry_header(name)));
        }

        // Epilogue kernel over a dense product.
        let epi = format!("k{kid}_ep");
        let prod = self.ptr(Ptr::Scratch(S_PRODUCT));
        let n = self.numel(out_space);
        let mut s = format!(
            "  const I n = {n};\n  for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < n; f += (I)gridDim.x * blockDim.x) {{\n    {} core = ld_{}({prod}, f);\n",
            match compute_class(dtype) {
                Some(DType::F32) => "float",
                Some(DType::F64) => "double",
                _ => "i64",
            },
            dtype.name()
        );
        s.push_str(&self.epilogue("    ", epilogue, out_space, "f", "core", dtype)?);
        s.push_str("  }\n");
        self.entries
            .push_str(&format!("{} {{\n{s}}}\n", self.entry_header(&epi)));

        // The generic fused kernel: lowered once to the loop IR (a block per output tile,
        // A and B slices staged in shared memory, a register block per thread).
        let generic = format!("k{kid}_gm");
        let lk = lower_kernel(self.p, self.kid).map_err(|e| e.to_string())?;
        let group = lk
            .group
            .ok_or("a contraction lowered without work-groups")?;
        let host = self.loop_host(&lk, "v");
        let body = host.with(|e| render_c_loop(&lk, e));
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&generic)));
        let tile = matmul_tile(out_space[r - 2], out_space[r - 1]);

        let st = self.k.stores[0];
        let out_dt = self.p.buffers[st.buf].shape.dtype();
        let trivial = epilogue.nodes.len() == 1
            && matches!(epilogue.nodes[0].op, EOp::Core)
            && out_dt == dtype;
        Ok(ContractCode {
            pack_a,
            pack_b,
            epi,
            generic,
            group,
            tile,
            a: la,
            b: lb,
            dtype,
            out_space: out_space.clone(),
            trivial,
            lt: lt_pattern(epilogue, st.value, dtype, out_dt),
        })
    }
}
