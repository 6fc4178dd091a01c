//! Row ops over the last axis: softmax, log-softmax, layer norm, RMS norm.
//!
//! `tpr` threads (a power of two, chosen per call from the row length) share a row; the
//! prologue is re-evaluated in each pass (it is elementwise over cached loads) rather
//! than stored. Softmax keeps a running maximum and a rescaled sum per thread over the
//! finite values and combines them in a shared-memory tree; a NaN or `+∞` anywhere, or
//! a row of only `−∞`, gives a NaN row, as the oracle's max-shifted formula does.
//! The norms take two passes for the statistics (mean, then the centred sum of squares).

use super::KGen;
use super::expr::{self, ctype};
use rlx_compile::program::{KernelKind, RowOp, compute_class};
use rlx_ir::{DType, Dim};

/// Launch value slot: threads per row.
pub(crate) const L_TPR: usize = 0;

/// The entry point of a row kernel.
#[derive(Debug, Clone)]
pub(crate) struct RowCode {
    pub entry: String,
    pub space: Vec<Dim>,
}

impl KGen<'_> {
    pub(crate) fn gen_row(&mut self) -> Result<RowCode, String> {
        let kk = self.k;
        let KernelKind::Row {
            op,
            space,
            prologue,
            input,
            params,
            dtype,
            epilogue,
        } = &kk.kind
        else {
            unreachable!()
        };
        let in_dt = prologue.nodes[*input as usize].dtype;
        let cls = compute_class(in_dt).ok_or("a row op over complex values")?;
        if cls == DType::I64 {
            return Err(format!(
                "{} over integer values; cast to a float type first",
                op.name()
            ));
        }
        let acc = ctype(in_dt);
        let r = space.len();
        let c = self.dim(space[r - 1]);
        let rows = self.numel(&space[..r - 1]);
        let tpr = self.launch(L_TPR);
        let (ninf, pinf, nan) = if cls == DType::F32 {
            ("-f_inf()", "f_inf()", "f_nan()")
        } else {
            ("-d_inf()", "d_inf()", "(double)f_nan()")
        };
        let name = format!("k{}", self.kid);
        let mut b = String::new();
        b.push_str(&format!(
            "  __shared__ {acc} sh[1024];\n  __shared__ {acc} sh2[1024];\n  const I C = {c}, R = {rows};\n  const I tpr = {tpr};\n  const I seg = threadIdx.x / tpr, lane = threadIdx.x % tpr;\n  const I row = (I)blockIdx.x * (blockDim.x / tpr) + seg;\n  const bool live = row < R;\n  (void)sh2;\n"
        ));
        // Row index variables (valid when live).
        b.push_str("  const I rr = live ? row : 0;\n");
        let mut ridx = self.unravel_stmts(&mut b, "  ", "rr", &space[..r - 1], "z");
        ridx.push("j".to_string());
        // The prologue value at column j, as `x`.
        let value = |g: &mut Self| -> Result<String, String> {
            let mut s = String::from("      I jf = rr * C + j;\n");
            let at = super::Point {
                space,
                flat: "jf",
                coords: &ridx,
            };
            let x = g.value(&mut s, "      ", prologue, *input, at)?;
            s.push_str(&format!("      {acc} x = {x};\n"));
            Ok(s)
        };
        let tree_sum = |b: &mut String, var: &str, out: &str| {
            b.push_str(&format!(
                "  sh[threadIdx.x] = {var};\n  __syncthreads();\n  for (I st = tpr >> 1; st > 0; st >>= 1) {{\n    if (lane < st) sh[threadIdx.x] += sh[threadIdx.x + st];\n    __syncthreads();\n  }}\n  const {acc} {out} = sh[seg * tpr];\n  __syncthreads();\n"
            ));
        };
        let out_line = |g: &mut Self, y: &str| -> Result<String, String> {
            let core = expr::cast(y, cls, *dtype);
            let mut s = format!("      {} core = {core};\n", ctype(*dtype));
            s.push_str(&g.epilogue("      ", epilogue, space, "jf", "core", *dtype)?);
            Ok(s)
        };
        match op {
            RowOp::Softmax | RowOp::LogSoftmax => {
                b.push_str(&format!("  {acc} m = {ninf}, s = 0;\n"));
                b.push_str("  if (live) for (I j = lane; j < C; j += tpr) {\n    {\n");
                b.push_str(&value(self)?);
                b.push_str(&format!(
                    "      if (x != x || x == {pinf}) s = {nan};\n      else if (x == {ninf}) {{}}\n      else if (x > m) {{ s = s * m_exp(m - x) + 1; m = x; }}\n      else s += m_exp(x - m);\n    }}\n  }}\n"
                ));
                b.push_str(&format!(
                    "  sh[threadIdx.x] = m; sh2[threadIdx.x] = s;\n  __syncthreads();\n  for (I st = tpr >> 1; st > 0; st >>= 1) {{\n    if (lane < st) {{\n      {acc} m1 = sh[threadIdx.x], s1 = sh2[threadIdx.x];\n      {acc} m2 = sh[threadIdx.x + st], s2 = sh2[threadIdx.x + st];\n      {acc} mm = m1 > m2 ? m1 : m2;\n      sh[threadIdx.x] = mm;\n      sh2[threadIdx.x] = (s1 != 0 ? s1 * m_exp(m1 - mm) : 0) + (s2 != 0 ? s2 * m_exp(m2 - mm) : 0);\n    }}\n    __syncthreads();\n  }}\n  const {acc} M = sh[seg * tpr];\n  {acc} S = sh2[seg * tpr];\n  if (M == {ninf}) S = {nan};\n"
                ));
                b.push_str("  if (live) for (I j = lane; j < C; j += tpr) {\n    {\n");
                b.push_str(&value(self)?);
                let y = if *op == RowOp::Softmax {
                    format!("      {acc} y = m_exp(x - M) / S;\n")
                } else {
                    format!("      {acc} y = x - M - m_log(S);\n")
                };
                b.push_str(&y);
                b.push_str(&out_line(self, "y")?);
                b.push_str("    }\n  }\n");
            }
            RowOp::LayerNorm { eps } | RowOp::RmsNorm { eps } => {
                let rms = matches!(op, RowOp::RmsNorm { .. });
                let (gl, bl) = params.ok_or("a norm without gamma/beta loads")?;
                if rms {
                    b.push_str(&format!("  const {acc} mean = 0;\n"));
                } else {
                    b.push_str(&format!("  {acc} s1 = 0;\n"));
                    b.push_str("  if (live) for (I j = lane; j < C; j += tpr) {\n    {\n");
                    b.push_str(&value(self)?);
                    b.push_str("      s1 += x;\n    }\n  }\n");
                    tree_sum(&mut b, "s1", "sum1");
                    b.push_str(&format!("  const {acc} mean = sum1 / ({acc})C;\n"));
                }
                b.push_str(&format!("  {acc} s2 = 0;\n"));
                b.push_str("  if (live) for (I j = lane; j < C; j += tpr) {\n    {\n");
                b.push_str(&value(self)?);
                b.push_str(&format!(
                    "      {acc} d = x - mean;\n      s2 += d * d;\n    }}\n  }}\n"
                ));
                tree_sum(&mut b, "s2", "sum2");
                let eps_lit = format!("f64_of(0x{:016x}ull)", (*eps as f64).to_bits());
                if cls == DType::F32 {
                    b.push_str(&format!(
                        "  const float inv = (float)(1.0 / sqrt((double)sum2 / (double)C + {eps_lit}));\n"
                    ));
                } else {
                    b.push_str(&format!(
                        "  const double dev = sqrt(sum2 / (double)C + {eps_lit});\n"
                    ));
                }
                b.push_str("  if (live) for (I j = lane; j < C; j += tpr) {\n    {\n");
                b.push_str(&value(self)?);
                let j = vec!["j".to_string()];
                let gv = self.read(gl, "j", &j);
                let bv = self.read(bl, "j", &j);
                let gdt = self.p.buffers[self.k.loads[gl].buf].shape.dtype();
                let bdt = self.p.buffers[self.k.loads[bl].buf].shape.dtype();
                let g = expr::cast(&gv, gdt, cls);
                let be = expr::cast(&bv, bdt, cls);
                if cls == DType::F32 {
                    b.push_str(&format!(
                        "      float y = (x - mean) * inv * ({g}) + ({be});\n"
                    ));
                } else {
                    b.push_str(&format!(
                        "      double y = (x - mean) / dev * ({g}) + ({be});\n"
                    ));
                }
                b.push_str(&out_line(self, "y")?);
                b.push_str("    }\n  }\n");
            }
        }
        self.entries
            .push_str(&format!("{} {{\n{b}}}\n", self.entry_header(&name)));
        Ok(RowCode {
            entry: name,
            space: space.clone(),
        })
    }
}
