//! Contractions `[.., M, K] × [.., K, N]` with an epilogue.
//!
//! The launcher picks one of three routes per call (see `crate::exec::plan`):
//! - cuBLASLt with a fused epilogue (bias, ReLU or tanh-GELU, plus bias) when the
//!   epilogue has that shape;
//! - cuBLAS (`GemmStridedBatchedEx` / `GemmBatchedEx`) into the output or a scratch
//!   product, then the epilogue kernel generated here (operands without a BLAS layout
//!   are first copied by the pack kernels);
//! - the generic fused kernel generated here (integer and other dtypes, or no cuBLAS):
//!   one thread per output element, `f64`/wrapping `i64` accumulation like the CPU.

use super::expr::{self, ctype};
use super::{KGen, meta::Ptr};
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
            let off = self.load_fn(l);
            let mut args = String::from("f");
            for i in &idx {
                args.push_str(", ");
                args.push_str(i);
            }
            s.push_str(&format!(
                "    (({w}*){dst})[f] = ((const {w}*){src})[{off}(p, {args})];\n  }}\n"
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
            ctype(dtype),
            expr::dt_name(dtype)
        );
        s.push_str(&self.epilogue("    ", epilogue, out_space, "f", "core", dtype)?);
        s.push_str("  }\n");
        self.entries
            .push_str(&format!("{} {{\n{s}}}\n", self.entry_header(&epi)));

        // Generic fused kernel.
        let generic = format!("k{kid}_gm");
        let int = compute_class(dtype) == Some(DType::I64);
        let (acc_t, acc_dt) = if int {
            ("i64", DType::I64)
        } else {
            ("double", DType::F64)
        };
        let (m, nn, kdim) = (
            self.dim(out_space[r - 2]),
            self.dim(out_space[r - 1]),
            self.dim(ad[ad.len() - 1]),
        );
        let mut s = format!(
            "  const I n = {n}, M = {m}, N = {nn}, K = {kdim};\n  (void)M; (void)N;\n  for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < n; f += (I)gridDim.x * blockDim.x) {{\n"
        );
        let o = self.unravel_stmts(&mut s, "    ", "f", out_space, "o");
        let nb = r - 2;
        let operand_idx = |g: &mut Self, dims: &[Dim], last2: [&str; 2]| -> Vec<String> {
            let rb = dims.len() - 2;
            let mut idx = Vec::with_capacity(dims.len());
            for (j, d) in dims[..rb].iter().enumerate() {
                let pos = j + nb - rb.min(nb);
                let x = o.get(pos).cloned().unwrap_or_else(|| "0".into());
                idx.push(match d {
                    Dim::Static(1) => "0".to_string(),
                    Dim::Static(_) => x,
                    d => format!("({} == 1 ? (I)0 : {x})", g.dim(*d)),
                });
            }
            idx.push(last2[0].to_string());
            idx.push(last2[1].to_string());
            idx
        };
        let ai = operand_idx(self, &ad, [&o[r - 2], "t"]);
        let bi = operand_idx(self, &bd, ["t", &o[r - 1]]);
        let af = self.ravel(&ai, &ad);
        let bf = self.ravel(&bi, &bd);
        let adt = self.p.buffers[self.k.loads[la].buf].shape.dtype();
        let bdt = self.p.buffers[self.k.loads[lb].buf].shape.dtype();
        let ar = self.read(la, "af", &ai);
        let br = self.read(lb, "bf", &bi);
        let (x, y) = (expr::cast(&ar, adt, acc_dt), expr::cast(&br, bdt, acc_dt));
        let step = if int {
            "acc = i_add(acc, i_mul(xa, yb));"
        } else {
            "acc += xa * yb;"
        };
        s.push_str(&format!(
            "    {acc_t} acc = 0;\n    for (I t = 0; t < K; t++) {{\n      I af = {af};\n      I bf = {bf};\n      {acc_t} xa = {x};\n      {acc_t} yb = {y};\n      {step}\n    }}\n    {} core = {};\n",
            ctype(dtype),
            expr::cast("acc", acc_dt, dtype)
        ));
        s.push_str(&self.epilogue("    ", epilogue, out_space, "f", "core", dtype)?);
        s.push_str("  }\n");
        self.entries
            .push_str(&format!("{} {{\n{s}}}\n", self.entry_header(&generic)));

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
            a: la,
            b: lb,
            dtype,
            out_space: out_space.clone(),
            trivial,
            lt: lt_pattern(epilogue, st.value, dtype, out_dt),
        })
    }
}
