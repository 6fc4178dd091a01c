//! Fused attention: one thread per query row, `BQ` queries per block, key and value
//! tiles staged in shared memory, an online softmax per query (running maximum, rescaled
//! sum and output accumulator), so the score matrix never exists in memory.
//!
//! Semantics follow the oracle: scale, softcap, additive bias, then the mask selects
//! keys; a query with no allowed key gives zeros, a NaN or `+∞` score (or only `−∞`
//! scores) gives NaN. Causal and sliding-window masks skip whole key tiles outside the
//! block's window. Grouped-query heads read kv head `h / (H / Hk)`.

use super::expr::{self, ctype};
use super::{KGen, meta::lit};
use rlx_compile::program::KernelKind;
use rlx_ir::{DType, Dim, MaskKind, Op};

/// Queries (threads) per block.
pub(crate) const BQ: u32 = 64;

/// The entry point of an attention kernel and its launch geometry.
#[derive(Debug, Clone)]
pub(crate) struct AttnCode {
    pub entry: String,
    /// Query length and batch (grid x and z), heads (grid y).
    pub sq: Dim,
    pub batch: Dim,
    pub heads: usize,
}

/// Index expressions of a `[B, S, H, D]` / `[B, S, H·D]` operand at `(b, s, h, d)`.
fn bshd(rank: usize, b: &str, s: &str, h: &str, d: &str, width: usize) -> Vec<String> {
    if rank == 4 {
        vec![b.into(), s.into(), h.into(), d.into()]
    } else {
        vec![b.into(), s.into(), format!("{h} * {width} + {d}")]
    }
}

impl KGen<'_> {
    pub(crate) fn gen_attention(&mut self) -> Result<AttnCode, String> {
        let kk = self.k;
        let KernelKind::Attention {
            op,
            inputs,
            out_space,
            dtype,
            epilogue,
        } = &kk.kind
        else {
            unreachable!()
        };
        let Op::Attention {
            num_heads,
            head_dim,
            v_head_dim,
            mask_kind,
            score_scale,
            attn_logit_softcap,
        } = op
        else {
            unreachable!()
        };
        if *dtype != DType::F32 {
            return Err(format!("fused attention in {dtype}; only f32 is fused"));
        }
        let (h, d) = (*num_heads, *head_dim);
        let dv = v_head_dim.unwrap_or(d);
        let (lq, lk, lv) = (inputs[0], inputs[1], inputs[2]);
        let (qd, kd, vd) = (self.view_dims(lq), self.view_dims(lk), self.view_dims(lv));
        for (name, v) in [("q", &qd), ("k", &kd), ("v", &vd)] {
            if v.len() != 3 && v.len() != 4 {
                return Err(format!(
                    "attention {name} has rank {}; it must be [B, S, H, D] or [B, S, H·D]",
                    v.len()
                ));
            }
        }
        // Key/value tile: at most ~40 KiB of shared memory.
        let bk = (10240 / (d + dv).max(1)).clamp(1, 64);
        let name = format!("k{}", self.kid);
        let sq = self.dim(qd[1]);
        let sk = self.dim(kd[1]);
        let hk = if kd.len() == 4 {
            self.dim(kd[2])
        } else {
            format!("({} / {d})", self.dim(kd[2]))
        };
        let scale = score_scale.unwrap_or((1.0 / (d as f64).sqrt()) as f32);
        let f32lit = |v: f32| format!("f32_of(0x{:08x}u)", v.to_bits());
        let mut b = String::new();
        b.push_str(&format!(
            "  __shared__ float ks[{ksz}];\n  __shared__ float vs[{vsz}];\n  const I Sq = {sq}, Sk = {sk}, Hk = {hk};\n  const I H = {h}, D = {d}, DV = {dv}, BK = {bk};\n  const I group = H / Hk;\n  const I qi = (I)blockIdx.x * {bq} + threadIdx.x;\n  const I h = blockIdx.y, b = blockIdx.z, kh = h / group;\n  const bool live = qi < Sq;\n  float q[{d}];\n  float acc[{dvm}];\n  float m = -f_inf(), l = 0.f;\n  int bad = 0;\n  I cnt = 0;\n  (void)D; (void)DV;\n",
            ksz = (bk * d).max(1),
            vsz = (bk * dv).max(1),
            bq = BQ,
            dvm = dv.max(1),
        ));
        // q row (pre-loaded into registers).
        let qdt = self.p.buffers[self.k.loads[lq].buf].shape.dtype();
        let qidx = bshd(qd.len(), "b", "qi", "h", "dd", d);
        let qf = self.ravel(&qidx, &qd);
        let qr = self.read(lq, "qf", &qidx);
        b.push_str(&format!(
            "  #pragma unroll\n  for (I dd = 0; dd < {d}; dd++) {{\n    I qf = live ? {qf} : 0;\n    q[dd] = live ? {} : 0.f;\n  }}\n  #pragma unroll\n  for (I dd = 0; dd < {dv}; dd++) acc[dd] = 0.f;\n",
            expr::cast(&qr, qdt, DType::F32)
        ));
        b.push_str(&format!(
            "  const I qlo = (I)blockIdx.x * {BQ};\n  const I qhi = imin(Sq, qlo + {BQ});\n  I kbeg = 0, kend = Sk;\n  (void)qhi;\n"
        ));
        match mask_kind {
            MaskKind::Causal => b.push_str("  kend = imin(Sk, qhi);\n"),
            MaskKind::SlidingWindow(w) => b.push_str(&format!(
                "  kend = imin(Sk, qhi);\n  kbeg = qlo > {w} ? qlo - {w} : 0;\n",
                w = lit(*w as i64)
            )),
            _ => {}
        }
        // Tiles.
        let kdt = self.p.buffers[self.k.loads[lk].buf].shape.dtype();
        let vdt = self.p.buffers[self.k.loads[lv].buf].shape.dtype();
        let kidx = bshd(kd.len(), "b", "ki", "kh", "dd", d);
        let kf = self.ravel(&kidx, &kd);
        let kr = self.read(lk, "kf", &kidx);
        let vidx = bshd(vd.len(), "b", "ki", "kh", "dd", dv);
        let vf = self.ravel(&vidx, &vd);
        let vr = self.read(lv, "vf", &vidx);
        b.push_str(&format!(
            "  for (I k0 = kbeg; k0 < kend; k0 += BK) {{\n    __syncthreads();\n    for (I t = threadIdx.x; t < BK * {d}; t += {BQ}) {{\n      I jj = t / {d}, dd = t % {d}, ki = k0 + jj;\n      I kf = ki < kend ? {kf} : 0;\n      ks[t] = ki < kend ? {} : 0.f;\n    }}\n    for (I t = threadIdx.x; t < BK * {dv}; t += {BQ}) {{\n      I jj = t / {dv}, dd = t % {dv}, ki = k0 + jj;\n      I vf = ki < kend ? {vf} : 0;\n      vs[t] = ki < kend ? {} : 0.f;\n    }}\n    __syncthreads();\n",
            expr::cast(&kr, kdt, DType::F32),
            expr::cast(&vr, vdt, DType::F32),
        ));
        b.push_str(
            "    if (live) {\n      const I nk = imin(BK, kend - k0);\n      for (I j = 0; j < nk; j++) {\n        const I ki = k0 + j;\n",
        );
        match mask_kind {
            MaskKind::Causal => b.push_str("        if (ki > qi) continue;\n"),
            MaskKind::SlidingWindow(w) => b.push_str(&format!(
                "        if (ki > qi || qi - ki > {}) continue;\n",
                lit(*w as i64)
            )),
            MaskKind::Custom => {
                let lm = inputs[3];
                let md = self.view_dims(lm);
                if md.len() != 2 {
                    return Err(format!(
                        "custom attention mask has rank {}; it must be [batch, key_len]",
                        md.len()
                    ));
                }
                let midx = vec!["b".to_string(), "ki".to_string()];
                let mf = self.ravel(&midx, &md);
                let mr = self.read(lm, "mf", &midx);
                let mdt = self.p.buffers[self.k.loads[lm].buf].shape.dtype();
                b.push_str(&format!(
                    "        {{ I mf = {mf}; if (!({} >= 0.5)) continue; }}\n",
                    expr::cast(&mr, mdt, DType::F64)
                ));
            }
            MaskKind::None | MaskKind::Bias => {}
        }
        b.push_str(&format!(
            "        cnt++;\n        float sc = 0.f;\n        #pragma unroll\n        for (I dd = 0; dd < {d}; dd++) sc += q[dd] * ks[j * {d} + dd];\n        sc *= {};\n",
            f32lit(scale)
        ));
        if let Some(cap) = attn_logit_softcap {
            b.push_str(&format!(
                "        sc = {c} * m_tanh(sc / {c});\n",
                c = f32lit(*cap)
            ));
        }
        if *mask_kind == MaskKind::Bias {
            let lb = inputs[3];
            let bd = self.view_dims(lb);
            if bd.len() > 4 {
                return Err(format!(
                    "attention bias has rank {}; it must broadcast to [B, H, Sq, Sk]",
                    bd.len()
                ));
            }
            let full = ["b", "h", "qi", "ki"];
            let off = 4 - bd.len();
            let mut bidx = Vec::new();
            for (j, dim) in bd.iter().enumerate() {
                let x = full[off + j];
                bidx.push(match dim {
                    Dim::Static(1) => "0".to_string(),
                    Dim::Static(_) => x.to_string(),
                    d => format!("({} == 1 ? (I)0 : {x})", self.dim(*d)),
                });
            }
            let bf = self.ravel(&bidx, &bd);
            let br = self.read(lb, "bf", &bidx);
            let bdt = self.p.buffers[self.k.loads[lb].buf].shape.dtype();
            b.push_str(&format!(
                "        {{ I bf = {bf}; sc += {}; }}\n",
                expr::cast(&br, bdt, DType::F32)
            ));
        }
        b.push_str(&format!(
            "        if (sc != sc || sc == f_inf()) bad = 1;\n        else if (sc == -f_inf()) {{}}\n        else if (sc > m) {{\n          float corr = m_exp(m - sc);\n          #pragma unroll\n          for (I dd = 0; dd < {dv}; dd++) acc[dd] = acc[dd] * corr + vs[j * {dv} + dd];\n          l = l * corr + 1.f;\n          m = sc;\n        }} else {{\n          float pe = m_exp(sc - m);\n          #pragma unroll\n          for (I dd = 0; dd < {dv}; dd++) acc[dd] += pe * vs[j * {dv} + dd];\n          l += pe;\n        }}\n      }}\n    }}\n  }}\n"
        ));
        b.push_str(&format!(
            "  if (live) {{\n    #pragma unroll\n    for (I dd = 0; dd < {dv}; dd++) {{\n      float y = cnt == 0 ? 0.f : ((bad || m == -f_inf()) ? f_nan() : acc[dd] / l);\n      I of = ((b * Sq + qi) * H + h) * {dv} + dd;\n      {} core = y;\n",
            ctype(*dtype)
        ));
        b.push_str(&self.epilogue("      ", epilogue, out_space, "of", "core", *dtype)?);
        b.push_str("    }\n  }\n");
        self.entries
            .push_str(&format!("{} {{\n{b}}}\n", self.entry_header(&name)));
        Ok(AttnCode {
            entry: name,
            sq: qd[1],
            batch: qd[0],
            heads: h,
        })
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
