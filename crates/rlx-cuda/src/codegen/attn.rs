//! Fused attention, lowered once to the loop IR (`rlx_compile::loops`, shared with the
//! WGSL and HIP backends) and rendered into this backend's parameter-block convention:
//! a block of [`ATTENTION_QUERIES`] threads per (batch, head, block of queries), one
//! thread per query, key and value tiles staged in shared memory and an online softmax
//! per query (running maximum, rescaled sum and output accumulator), so the score
//! matrix never exists in memory. Causal and sliding-window masks skip the key tiles
//! outside the block's window; grouped-query heads read kv head `h / (H / Hk)`.
//! Semantics (and the fused multiply-adds of the dot products and sums) are the
//! lowering's, bit for bit the loop IR's reference interpreter.

use super::KGen;
use rlx_compile::loops::{ATTENTION_QUERIES, lower_kernel, render_c_loop};
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
        let body = host.with(|e| render_c_loop(&lk, e));
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
