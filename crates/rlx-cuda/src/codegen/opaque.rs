//! Ops the backend runs whole: native kernels for concat, pad, cumsum and softmax
//! cross-entropy with integer labels; every other opaque op (FFT, solve, gather,
//! convolutions, scans, …) runs on the host through the shared host fallback
//! (`rlx_runtime::HostKernel`: the registered CPU backend, else the oracle), with its
//! operands copied down and its result copied back (reported by `explain`).
//! Scaled (fp8) matmuls go to cuBLASLt on GPUs with fp8 tensor cores, else the host.

use super::expr::{self, ctype};
use super::{KGen, meta::lit};
use rlx_compile::program::{KernelKind, Scalar, compute_class};
use rlx_ir::{DType, Dim, Op, TensorData, norm_axis};

/// Error code of an out-of-range cross-entropy label.
pub(crate) const ERR_LABEL: u64 = 3;

/// An opaque kernel: a native entry point over `threads` (one thread per element), or
/// the host.
#[derive(Debug, Clone)]
pub(crate) struct OpaqueCode {
    pub op: Op,
    pub entry: Option<String>,
    pub threads: Vec<Dim>,
    /// For a scaled matmul with a bias: the kernel adding it after an fp8 cuBLASLt call.
    pub fp8_bias: Option<String>,
}

impl KGen<'_> {
    pub(crate) fn gen_opaque(&mut self, op: &Op) -> Result<OpaqueCode, String> {
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
            return Ok(host);
        }
        let name = format!("k{}", self.kid);
        let od = out.dims().to_vec();
        let (body, threads) = match op {
            Op::Concat { axis } => {
                if in_dts.iter().any(|&d| d != out_dt) {
                    return Ok(host);
                }
                let mut s = self.grid_loop(&od);
                let o = self.unravel_stmts(&mut s, "    ", "f", &od, "o");
                s.push_str(&format!(
                    "    {} v;\n    I a = {};\n",
                    ctype(out_dt),
                    o[*axis]
                ));
                let mut start = "0".to_string();
                for (t, &l) in inputs.iter().enumerate() {
                    let vd = self.view_dims(l);
                    let n = self.dim(vd[*axis]);
                    let end = format!("({start} + {n})");
                    let mut idx = o.clone();
                    idx[*axis] = format!("(a - {start})");
                    let vf = self.ravel(&idx, &vd);
                    let rd = self.read(l, "vf", &idx);
                    let cond = if t + 1 == inputs.len() {
                        String::new()
                    } else {
                        format!("if (a < {end}) ")
                    };
                    let els = if t == 0 { "" } else { "else " };
                    s.push_str(&format!("    {els}{cond}{{ I vf = {vf}; v = {rd}; }}\n"));
                    start = end;
                }
                let st = self.store("v", out_dt, "f");
                s.push_str(&format!("    {st}\n  }}\n"));
                (s, od.clone())
            }
            Op::Pad {
                axis,
                before,
                value,
                ..
            } => {
                let l = inputs[0];
                let vd = self.view_dims(l);
                let fill = TensorData::from_f64(&[], &[*value]);
                let fill = rlx_ir::interp::eval_op(
                    &Op::Cast { to: out_dt },
                    &[&fill],
                    &rlx_ir::Shape::new(&[], out_dt),
                )
                .map_err(|e| e.to_string())?;
                let fill = if out_dt.is_float() {
                    Scalar::F(fill.to_f64_vec()[0])
                } else {
                    Scalar::I(fill.to_i64_vec()[0])
                };
                let mut s = self.grid_loop(&od);
                let o = self.unravel_stmts(&mut s, "    ", "f", &od, "o");
                let n = self.dim(vd[*axis]);
                let bl = lit(*before as i64);
                let mut idx = o.clone();
                idx[*axis] = format!("(a - {bl})");
                let vf = self.ravel(&idx, &vd);
                let rd = self.read(l, "vf", &idx);
                s.push_str(&format!(
                    "    I a = {};\n    {} v = {};\n    if (a >= {bl} && a < {bl} + {n}) {{ I vf = {vf}; v = {}; }}\n",
                    o[*axis],
                    ctype(out_dt),
                    expr::literal(fill, out_dt),
                    expr::cast(&rd, in_dts[0], out_dt),
                ));
                let st = self.store("v", out_dt, "f");
                s.push_str(&format!("    {st}\n  }}\n"));
                (s, od.clone())
            }
            Op::Cumsum { axis, exclusive } => {
                if out_dt == DType::Bool || in_dts[0] != out_dt {
                    return Ok(host);
                }
                let l = inputs[0];
                let vd = self.view_dims(l);
                let ax = norm_axis("cumsum", *axis as i64, vd.len()).map_err(|e| e.to_string())?;
                let mut lines = vd.clone();
                lines.remove(ax);
                let int = compute_class(out_dt) == Some(DType::I64);
                let (acc_t, acc_dt) = if int {
                    ("i64", DType::I64)
                } else {
                    ("double", DType::F64)
                };
                let mut s = self.grid_loop(&lines);
                let mut z = self.unravel_stmts(&mut s, "    ", "f", &lines, "z");
                z.insert(ax, "k".into());
                let n = self.dim(vd[ax]);
                let xf = self.ravel(&z, &vd);
                let rd = self.read(l, "xf", &z);
                let x = expr::cast(&rd, in_dts[0], acc_dt);
                let add = if int {
                    "acc = i_add(acc, x);"
                } else {
                    "acc += x;"
                };
                let line = if *exclusive {
                    format!("r = acc; {add}")
                } else {
                    format!("{add} r = acc;")
                };
                let st = self.store(&expr::cast("r", acc_dt, out_dt), out_dt, "xf");
                s.push_str(&format!(
                    "    {acc_t} acc = 0;\n    for (I k = 0; k < {n}; k++) {{\n      I xf = {xf};\n      {acc_t} x = {x};\n      {acc_t} r;\n      {line}\n      {st}\n    }}\n  }}\n"
                ));
                (s, lines)
            }
            Op::SoftmaxCrossEntropyWithLogits => {
                let (ll, ly) = (inputs[0], inputs[1]);
                let (ld, yd) = (self.view_dims(ll), self.view_dims(ly));
                if ld.is_empty() || yd.len() + 1 != ld.len() || !out_dt.is_float() {
                    return Ok(host);
                }
                let c = self.dim(*ld.last().unwrap());
                let mut s = self.grid_loop(&yd);
                let z = self.unravel_stmts(&mut s, "    ", "f", &yd, "z");
                let mut li = z.clone();
                li.push("j".into());
                let lf = self.ravel(&li, &ld);
                let lr = self.read(ll, "lf", &li);
                let x = expr::cast(&lr, in_dts[0], DType::F64);
                let yf = self.ravel(&z, &yd);
                let yr = self.read(ly, "yf", &z);
                let y = expr::cast(&yr, in_dts[1], DType::F64);
                let errp = self.err_ptr();
                let code = (((self.kid as u64) + 1) << 8) | ERR_LABEL;
                let st = self.store(&expr::cast("loss", DType::F64, out_dt), out_dt, "f");
                s.push_str(&format!(
                    "    const I C = {c};\n    double m = -d_inf(); bool nan = false;\n    for (I j = 0; j < C; j++) {{ I lf = {lf}; double x = {x}; if (x != x) nan = true; else if (x > m) m = x; }}\n    if (nan) m = (double)f_nan();\n    double s = 0;\n    for (I j = 0; j < C; j++) {{ I lf = {lf}; double x = {x}; s += exp(x - m); }}\n    I yf = {yf};\n    double lab = {y};\n    double loss = 0;\n    if (!(lab == floor(lab) && lab >= 0.0 && lab < (double)C)) {{ rlx_fail({errp}, {code}ull); }}\n    else {{ I j = (I)lab; I lf = {lf}; double x = {x}; loss = m + log(s) - x; }}\n    {st}\n  }}\n"
                ));
                (s, yd.clone())
            }
            Op::ScaledMatMul { has_bias: true, .. }
                if od.len() == 2 && out_dt == DType::F32 && inputs.len() == 5 =>
            {
                // Added after the fp8 GEMM has written the product into the output.
                let lb = inputs[4];
                let bname = format!("k{}_bias", self.kid);
                let mut s = self.grid_loop(&od);
                let o = self.unravel_stmts(&mut s, "    ", "f", &od, "o");
                let j = vec![o[1].clone()];
                let rd = self.read(lb, &o[1], &j);
                let ob = self.buf(self.k.stores[0].buf);
                s.push_str(&format!(
                    "    float v = ld_f32({ob}, f) + {};\n    st_f32({ob}, f, v);\n  }}\n",
                    expr::cast(&rd, in_dts[4], DType::F32)
                ));
                self.entries
                    .push_str(&format!("{} {{\n{s}}}\n", self.entry_header(&bname)));
                host.fp8_bias = Some(bname);
                return Ok(host);
            }
            _ => return Ok(host),
        };
        self.entries
            .push_str(&format!("{} {{\n{body}}}\n", self.entry_header(&name)));
        Ok(OpaqueCode {
            op: op.clone(),
            entry: Some(name),
            threads,
            fp8_bias: None,
        })
    }

    /// The opening of a grid-stride loop over `dims` (`f` is the flat index).
    fn grid_loop(&mut self, dims: &[Dim]) -> String {
        let n = self.numel(dims);
        format!(
            "  const I n = {n};\n  for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < n; f += (I)gridDim.x * blockDim.x) {{\n"
        )
    }
}
