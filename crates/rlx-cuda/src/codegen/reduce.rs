//! Reductions: the prologue folded over the reduced axes, then the epilogue.
//!
//! The iteration space is split into three groups of axes: kept axes before the reduced
//! ones (*outer*), the reduced axes, and kept axes after the last reduced one (*inner*).
//! - When the last axis is reduced (*row mode*), `tpr` threads (a power of two) fold one
//!   output's elements with a stride of `tpr`, then combine in a shared-memory tree.
//! - Otherwise (*column mode*) one thread folds one output, so neighbouring threads
//!   read neighbouring elements of the inner axes.
//!
//! Either mode can split the reduced extent into `nsplit` chunks (grid `y`); the chunk
//! results go to a scratch array and a finalize kernel combines them in chunk order.
//! Accumulators: `float` for f32/f16/bf16 inputs, `double` for f64, wrapping `i64` for
//! integers and bool.

use super::expr::{self, ctype};
use super::{KGen, meta::Ptr};
use rlx_compile::program::{KernelKind, compute_class};
use rlx_ir::{DType, Dim, ReduceOp};

/// Launch value slots of reductions.
pub(crate) const L_TPR: usize = 0;
pub(crate) const L_NSPLIT: usize = 1;
pub(crate) const L_CHUNK: usize = 2;

/// The entry points of a reduction and what the launcher decides from.
#[derive(Debug, Clone)]
pub(crate) struct ReduceCode {
    pub main: String,
    pub fin: String,
    /// The last axis is reduced: segmented block tree.
    pub row_mode: bool,
    pub outer: Vec<Dim>,
    pub reduced: Vec<Dim>,
    pub inner: Vec<Dim>,
    /// Bytes per accumulator (partials scratch).
    pub acc_bytes: usize,
    pub op: ReduceOp,
    /// Compute class of the reduced values.
    pub in_class: DType,
}

/// The accumulator's identity.
fn init(op: ReduceOp, cls: DType) -> &'static str {
    match (cls, op) {
        (DType::F32, ReduceOp::Prod) => "1.0f",
        (DType::F32, ReduceOp::Max) => "-f_inf()",
        (DType::F32, ReduceOp::Min) => "f_inf()",
        (DType::F32, _) => "0.0f",
        (DType::F64, ReduceOp::Prod) => "1.0",
        (DType::F64, ReduceOp::Max) => "-d_inf()",
        (DType::F64, ReduceOp::Min) => "d_inf()",
        (DType::F64, _) => "0.0",
        (_, ReduceOp::Prod) => "1ll",
        (_, ReduceOp::Max) => "(-9223372036854775807ll - 1)",
        (_, ReduceOp::Min) => "9223372036854775807ll",
        _ => "0ll",
    }
}

/// Statement folding value `v` into accumulator `a` (also combines two partials). Max and
/// min propagate NaN, as the oracle does.
pub(crate) fn fold(op: ReduceOp, cls: DType, a: &str, v: &str) -> String {
    let float = cls != DType::I64;
    match (op, float) {
        (ReduceOp::Sum | ReduceOp::Mean, true) => format!("{a} += {v};"),
        (ReduceOp::Prod, true) => format!("{a} *= {v};"),
        (ReduceOp::Max, true) => {
            format!("if ({v} != {v} || {v} > {a}) {{ if ({a} == {a}) {a} = {v}; }}")
        }
        (ReduceOp::Min, true) => {
            format!("if ({v} != {v} || {v} < {a}) {{ if ({a} == {a}) {a} = {v}; }}")
        }
        (ReduceOp::Sum | ReduceOp::Mean, false) => format!("{a} = i_add({a}, {v});"),
        (ReduceOp::Prod, false) => format!("{a} = i_mul({a}, {v});"),
        (ReduceOp::Max, false) => format!("{a} = i_max({a}, {v});"),
        (ReduceOp::Min, false) => format!("{a} = i_min({a}, {v});"),
    }
}

impl KGen<'_> {
    pub(crate) fn gen_reduce(&mut self) -> Result<ReduceCode, String> {
        let kk = self.k;
        let KernelKind::Reduce {
            op,
            in_space,
            axes,
            prologue,
            input,
            out_space,
            dtype,
            epilogue,
            ..
        } = &kk.kind
        else {
            unreachable!()
        };
        let (op, dtype) = (*op, *dtype);
        let rank = in_space.len();
        let last_reduced = axes.contains(&(rank - 1));
        let mut inner_start = rank;
        if !last_reduced {
            while inner_start > 0 && !axes.contains(&(inner_start - 1)) {
                inner_start -= 1;
            }
        }
        let outer_axes: Vec<usize> = (0..inner_start).filter(|a| !axes.contains(a)).collect();
        let inner_axes: Vec<usize> = (inner_start..rank).collect();
        let pick = |ax: &[usize]| ax.iter().map(|&a| in_space[a]).collect::<Vec<Dim>>();
        let (outer, reduced, inner) = (pick(&outer_axes), pick(axes), pick(&inner_axes));
        let in_dt = prologue.nodes[*input as usize].dtype;
        let cls = compute_class(in_dt).ok_or("a reduction of complex values")?;
        let acc = ctype(in_dt);
        let acc_bytes = if cls == DType::F32 { 4 } else { 8 };
        let part = self.ptr(Ptr::Scratch(0));
        let on = self.numel(&outer);
        let ln = self.numel(&reduced);
        let inn = self.numel(&inner);
        let (tpr, nsplit, chunk) = (
            self.launch(L_TPR),
            self.launch(L_NSPLIT),
            self.launch(L_CHUNK),
        );
        let ident = init(op, cls);

        // The in-space index variables x<axis> from the three group indices.
        let index = |g: &mut Self, s: &mut String, ind: &str, o: &str, r: &str, i: &str| {
            let on = g.unravel_stmts(s, ind, o, &outer, "go");
            let rn = g.unravel_stmts(s, ind, r, &reduced, "gr");
            let inn = g.unravel_stmts(s, ind, i, &inner, "gi");
            let mut names = vec![String::new(); rank];
            for (j, &a) in outer_axes.iter().enumerate() {
                names[a] = on[j].clone();
            }
            for (j, &a) in axes.iter().enumerate() {
                names[a] = rn[j].clone();
            }
            for (j, &a) in inner_axes.iter().enumerate() {
                names[a] = inn[j].clone();
            }
            let xf = g.ravel(&names, in_space);
            s.push_str(&format!("{ind}I xf = {xf};\n"));
            names
        };
        let finish = |g: &mut Self, ind: &str, flat: &str| -> Result<String, String> {
            let mut s = String::new();
            if op == ReduceOp::Mean {
                if cls == DType::I64 {
                    s.push_str(&format!("{ind}tot = tot / (i64)L;\n"));
                } else {
                    s.push_str(&format!("{ind}tot = tot / ({acc})L;\n"));
                }
            }
            let core = expr::cast("tot", cls, dtype);
            s.push_str(&format!("{ind}{} core = {core};\n", ctype(dtype)));
            s.push_str(&g.epilogue(ind, epilogue, out_space, flat, "core", dtype)?);
            Ok(s)
        };

        let main = format!("k{}", self.kid);
        let fin = format!("k{}_fin", self.kid);
        let mut b = String::new();
        b.push_str(&format!(
            "  const I O = {on}, L = {ln}, IN = {inn};\n  const I tpr = {tpr}, nsplit = {nsplit}, chunk = {chunk};\n  (void)IN; (void)tpr;\n"
        ));
        b.push_str("  const I r0 = (I)blockIdx.y * chunk;\n  const I r1 = imin(L, r0 + chunk);\n");
        let mut pro = String::new();
        let env_idx = if last_reduced {
            b.push_str(&format!(
                "  __shared__ {acc} sh[1024];\n  const I seg = threadIdx.x / tpr, lane = threadIdx.x % tpr;\n  const I o = (I)blockIdx.x * (blockDim.x / tpr) + seg;\n  {acc} acc = {ident};\n  if (o < O) {{\n    for (I r = r0 + lane; r < r1; r += tpr) {{\n"
            ));
            index(self, &mut pro, "      ", "o", "r", "0")
        } else {
            b.push_str(&format!(
                "  const I nout = O * IN;\n  for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < nout; f += (I)gridDim.x * blockDim.x) {{\n    const I o = f / IN, i = f % IN;\n    {acc} acc = {ident};\n    for (I r = r0; r < r1; r++) {{\n"
            ));
            index(self, &mut pro, "      ", "o", "r", "i")
        };
        let at = super::Point {
            space: in_space,
            flat: "xf",
            coords: &env_idx,
        };
        let x = self.value(&mut pro, "      ", prologue, *input, at)?;
        b.push_str(&pro);
        b.push_str(&format!("      {}\n    }}\n", fold(op, cls, "acc", &x)));
        if last_reduced {
            b.push_str("  }\n  sh[threadIdx.x] = acc;\n  __syncthreads();\n");
            b.push_str(&format!(
                "  for (I st = tpr >> 1; st > 0; st >>= 1) {{\n    if (lane < st) {{ {acc} a = sh[threadIdx.x]; {acc} w = sh[threadIdx.x + st]; {} sh[threadIdx.x] = a; }}\n    __syncthreads();\n  }}\n",
                fold(op, cls, "a", "w")
            ));
            b.push_str(&format!(
                "  if (lane == 0 && o < O) {{\n    {acc} tot = sh[threadIdx.x];\n    if (nsplit > 1) {{\n      (({acc}*){part})[(I)blockIdx.y * O + o] = tot;\n    }} else {{\n"
            ));
            b.push_str(&finish(self, "      ", "o")?);
            b.push_str("    }\n  }\n");
        } else {
            b.push_str(&format!(
                "    if (nsplit > 1) {{\n      (({acc}*){part})[(I)blockIdx.y * nout + f] = acc;\n    }} else {{\n      {acc} tot = acc;\n"
            ));
            b.push_str(&finish(self, "      ", "f")?);
            b.push_str("    }\n  }\n");
        }
        self.entries
            .push_str(&format!("{} {{\n{b}}}\n", self.entry_header(&main)));

        // Finalize: combine the partials of every output in chunk order.
        let mut f = String::new();
        f.push_str(&format!(
            "  const I O = {on}, L = {ln}, IN = {inn};\n  const I nsplit = {nsplit};\n  const I nout = O * IN;\n  (void)L;\n"
        ));
        f.push_str(&format!(
            "  for (I g = (I)blockIdx.x * blockDim.x + threadIdx.x; g < nout; g += (I)gridDim.x * blockDim.x) {{\n    {acc} tot = (({acc}*){part})[g];\n    for (I s = 1; s < nsplit; s++) {{ {acc} w = (({acc}*){part})[s * nout + g]; {} }}\n",
            fold(op, cls, "tot", "w")
        ));
        f.push_str(&finish(self, "    ", "g")?);
        f.push_str("  }\n");
        self.entries
            .push_str(&format!("{} {{\n{f}}}\n", self.entry_header(&fin)));
        Ok(ReduceCode {
            main,
            fin,
            row_mode: last_reduced,
            outer,
            reduced,
            inner,
            acc_bytes,
            op,
            in_class: cls,
        })
    }
}
