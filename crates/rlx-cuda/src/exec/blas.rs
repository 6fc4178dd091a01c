//! Planning contractions onto cuBLAS/cuBLASLt (or the generic kernel), and scaled fp8
//! matmuls onto cuBLASLt.
//!
//! A row-major product `C[M×N] = A[M×K]·B[K×N]` is the column-major product
//! `Cᵀ[N×M] = Bᵀ·Aᵀ`, so the BLAS call's first operand is our `B` and its second our
//! `A`. An operand with element `(i, j)` at `i·rs + j·cs` is, in column-major terms,
//! either its own transpose with `ld = rs` (unit column stride: no BLAS transpose) or
//! itself with `ld = cs` (unit row stride: BLAS transpose). Anything else is packed
//! into a dense scratch copy first. Batches use one stride when the batch axes collapse
//! to it, else arrays of pointers.

use super::plan::{KernelBind, Step, align};
use crate::codegen::contract::{ContractCode, S_PACK_A, S_PACK_B, S_PRODUCT};
use crate::device::{Batching, Epilogue, Fp8Call, GemmCall};
use rlx_compile::program::{KernelKind, bind_load};
use rlx_ir::{DType, Op, ScaleLayout, ScaledFormat};

/// An operand as BLAS sees it.
#[derive(Debug, Clone)]
struct Operand {
    /// Arena byte offset of element 0.
    base: usize,
    /// Element offset of batch 0, matrix element (0, 0).
    off: usize,
    /// BLAS transpose flag and leading dimension.
    trans: bool,
    ld: usize,
    /// Element stride per output batch axis (0 where broadcast).
    bstrides: Vec<usize>,
}

/// `(trans, ld)` describing `Sᵀ` for a stored `R×C` matrix with strides `(rs, cs)`.
pub(crate) fn blas_layout(r: usize, c: usize, rs: usize, cs: usize) -> Option<(bool, usize)> {
    if (cs == 1 || c == 1) && (r == 1 || rs >= c.max(1)) {
        return Some((false, if r == 1 { c.max(1) } else { rs }));
    }
    if (rs == 1 || r == 1) && (c == 1 || cs >= r.max(1)) {
        return Some((true, if c == 1 { r.max(1) } else { cs }));
    }
    None
}

/// The single element stride addressing flat batch `bi` of `ob`, if one exists.
pub(crate) fn single_stride(ob: &[usize], st: &[usize]) -> Option<usize> {
    let mut s = None;
    let mut p = 1usize;
    for j in (0..ob.len()).rev() {
        if ob[j] > 1 {
            let want = *s.get_or_insert(st[j] / p.max(1));
            if st[j] != want * p {
                return None;
            }
        }
        p *= ob[j];
    }
    Some(s.unwrap_or(0))
}

/// Element offset of flat batch `bi` over batch dims `ob` with per-axis strides `st`.
fn batch_offset(bi: usize, ob: &[usize], st: &[usize]) -> usize {
    let mut rest = bi;
    let mut off = 0;
    for j in (0..ob.len()).rev() {
        off += (rest % ob[j]) * st[j];
        rest /= ob[j];
    }
    off
}

impl KernelBind<'_> {
    /// The BLAS view of kernel load `l` (view dims `vd`) against output batch dims `ob`,
    /// or `None` when it must be packed.
    fn operand(&self, l: usize, vd: &[usize], ob: &[usize]) -> Option<Operand> {
        let load = &self.k.loads[l];
        let st = bind_load(&self.buf_dims[load.buf], &load.steps, self.binding)?;
        let r = vd.len();
        let (trans, ld) = blas_layout(
            vd[r - 2],
            vd[r - 1],
            st.strides[r - 2] as usize,
            st.strides[r - 1] as usize,
        )?;
        Some(Operand {
            base: self.buf_off[load.buf],
            off: st.offset,
            trans,
            ld,
            bstrides: batch_strides(vd, &st.strides, ob),
        })
    }
}

/// Strides per output batch axis of an operand with view dims `vd` and strides `st`.
fn batch_strides(vd: &[usize], st: &[isize], ob: &[usize]) -> Vec<usize> {
    let rb = vd.len() - 2;
    let off = ob.len() - rb.min(ob.len());
    (0..ob.len())
        .map(|j| {
            if j < off || vd[j - off] == 1 {
                0
            } else {
                st[j - off] as usize
            }
        })
        .collect()
}

/// Plan contraction `c`.
pub(crate) fn blas_plan(kb: &mut KernelBind<'_>, c: &ContractCode) -> Result<(), String> {
    let out = rlx_compile::program::concrete(&c.out_space, kb.binding)
        .ok_or("unbound dynamic dim in a matmul")?;
    let r = out.len();
    let (m, n) = (out[r - 2], out[r - 1]);
    let ob = out[..r - 2].to_vec();
    let nb: usize = ob.iter().product();
    let ad = kb.view_dims(c.a)?;
    let bd = kb.view_dims(c.b)?;
    let k = ad[ad.len() - 1];
    let total = nb * m * n;
    if total == 0 {
        return Ok(());
    }
    let dt_of = |l: usize| kb.p.buffers[kb.k.loads[l].buf].shape.dtype();
    let (adt, bdt) = (dt_of(c.a), dt_of(c.b));
    let store = kb.k.stores[0].buf;
    let out_dt = kb.p.buffers[store].shape.dtype();
    let fits = |x: usize| x <= i32::MAX as usize;
    let blas = kb.t.blas
        && matches!(c.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
        && adt == c.dtype
        && bdt == c.dtype
        && k > 0
        && fits(m)
        && fits(n)
        && fits(k)
        && fits(nb);
    let grid = ((total.div_ceil(256) as u64).clamp(1, kb.t.grid_cap())) as u32;
    if !blas {
        // One block of exactly the lowering's threads per output tile (the kernel strides
        // over tiles when the grid is capped).
        let tile = c.tile as usize;
        let tiles = (nb * m.div_ceil(tile) * n.div_ceil(tile)) as u64;
        let blocks = tiles.clamp(1, kb.t.grid_cap() * 8) as u32;
        return kb.launch(&c.generic, (blocks, 1, 1), c.group, true);
    }
    let w = c.dtype.size_bytes();
    let dense = |vd: &[usize], base: usize| -> Operand {
        let st = rlx_compile::program::Strided::dense(vd).strides;
        let r = vd.len();
        Operand {
            base,
            off: 0,
            trans: false,
            ld: vd[r - 1].max(1),
            bstrides: batch_strides(vd, &st, &ob),
        }
    };
    // Reserve every scratch region before any launch captures pointers.
    let mut opa = kb.operand(c.a, &ad, &ob);
    let mut opb = kb.operand(c.b, &bd, &ob);
    let pack_a = opa.is_none();
    let pack_b = opb.is_none();
    if pack_a {
        let off = kb.scratch(S_PACK_A, ad.iter().product::<usize>() * w);
        opa = Some(dense(&ad, off));
    }
    if pack_b {
        let off = kb.scratch(S_PACK_B, bd.iter().product::<usize>() * w);
        opb = Some(dense(&bd, off));
    }
    let (opa, opb) = (opa.unwrap(), opb.unwrap());
    let sa = single_stride(&ob, &opa.bstrides);
    let sb = single_stride(&ob, &opb.bstrides);
    let direct = out_dt == c.dtype;
    // A cuBLASLt epilogue: bias broadcast along rows, then ReLU / tanh-GELU.
    let mut lt_epi = None;
    if let Some(pat) = &c.lt
        && kb.t.epilogue
        && (pat.bias.is_some() || pat.act.is_some())
        && direct
        && sa.is_some()
        && sb.is_some()
        && matches!(c.dtype, DType::F32 | DType::F16 | DType::BF16)
    {
        let bias = match pat.bias {
            None => Some(None),
            Some(l) => {
                let load = &kb.k.loads[l];
                let bst = bind_load(&kb.buf_dims[load.buf], &load.steps, kb.binding);
                match bst {
                    Some(s)
                        if dt_of(l) == c.dtype
                            && (n == 1 || s.strides[r - 1] == 1)
                            && s.strides[..r - 1]
                                .iter()
                                .zip(&out[..r - 1])
                                .all(|(&x, &d)| x == 0 || d == 1) =>
                    {
                        Some(Some(kb.buf_off[load.buf] + s.offset * w))
                    }
                    _ => None,
                }
            }
        };
        if let Some(bias) = bias {
            lt_epi = Some(Epilogue {
                bias: bias.map(|b| b as u64),
                act: pat.act,
            });
        }
    }
    let needs_epi_kernel = lt_epi.is_none() && !(c.trivial && direct);
    let prod = if direct {
        kb.redirect.insert(S_PRODUCT, store);
        kb.buf_off[store]
    } else {
        kb.scratch(S_PRODUCT, total * w)
    };
    let table_off = if sa.is_none() || sb.is_none() {
        Some(kb.scratch(3, nb * 3 * 8))
    } else {
        None
    };
    if pack_a {
        let na: usize = ad.iter().product();
        kb.launch(&c.pack_a, (blocks_for(na, kb), 1, 1), 256, false)?;
    }
    if pack_b {
        let nbb: usize = bd.iter().product();
        kb.launch(&c.pack_b, (blocks_for(nbb, kb), 1, 1), 256, false)?;
    }
    // Cᵀ[N×M] = op(B')·op(A') with B' our B and A' our A.
    let (batching, table) = match (sa, sb, table_off) {
        (Some(sa), Some(sb), _) => (
            Batching::Strided {
                a: sb as i64,
                b: sa as i64,
                c: (m * n) as i64,
            },
            None,
        ),
        (_, _, Some(t)) => {
            let rows = (0..nb)
                .map(|bi| {
                    [
                        opb.base + (opb.off + batch_offset(bi, &ob, &opb.bstrides)) * w,
                        opa.base + (opa.off + batch_offset(bi, &ob, &opa.bstrides)) * w,
                        prod + bi * m * n * w,
                    ]
                })
                .collect();
            (
                Batching::Pointers {
                    a: t as u64,
                    b: (t + nb * 8) as u64,
                    c: (t + 2 * nb * 8) as u64,
                },
                Some(rows),
            )
        }
        _ => unreachable!(),
    };
    let call = GemmCall {
        dtype: c.dtype,
        transa: opb.trans,
        transb: opa.trans,
        m: n,
        n: m,
        k,
        a: (opb.base + opb.off * w) as u64,
        lda: opb.ld,
        b: (opa.base + opa.off * w) as u64,
        ldb: opa.ld,
        c: prod as u64,
        ldc: n.max(1),
        batch: nb,
        batching,
        epilogue: lt_epi,
    };
    kb.steps.push(Step::Gemm { call, table });
    if needs_epi_kernel {
        kb.launch(&c.epi, (grid, 1, 1), 256, false)?;
    }
    let _ = align;
    Ok(())
}

fn blocks_for(n: usize, kb: &KernelBind<'_>) -> u32 {
    ((n.div_ceil(256) as u64).clamp(1, (kb.t.sm_count as u64 * 32).max(1))) as u32
}

/// Plan a scaled fp8 matmul on cuBLASLt; `false` when it must run on the host.
pub(crate) fn fp8_plan(kb: &mut KernelBind<'_>, op: &Op) -> Result<bool, String> {
    let Op::ScaledMatMul {
        lhs_format,
        rhs_format,
        scale_layout,
        has_bias,
    } = op
    else {
        return Ok(false);
    };
    let ocp = |f: &ScaledFormat| matches!(f, ScaledFormat::F8E4M3 | ScaledFormat::F8E5M2);
    if !kb.t.fp8
        || *scale_layout != ScaleLayout::PerTensor
        || !ocp(lhs_format)
        || !ocp(rhs_format)
        || (*lhs_format == ScaledFormat::F8E5M2 && *rhs_format == ScaledFormat::F8E5M2)
    {
        return Ok(false);
    }
    let KernelKind::Opaque { inputs, .. } = &kb.k.kind else {
        return Ok(false);
    };
    let crate::codegen::KCode::Opaque(code) = &kb.code.kind else {
        return Ok(false);
    };
    let dims: Vec<Vec<usize>> = inputs
        .iter()
        .map(|&l| kb.view_dims(l))
        .collect::<Result<_, _>>()?;
    let (lq, rq) = (&dims[0], &dims[1]);
    if lq.len() != 2 || rq.len() != 2 || lq[1] != rq[1] {
        return Ok(false);
    }
    let (m, k, n) = (lq[0], lq[1], rq[0]);
    if m % 16 != 0 || n % 16 != 0 || k % 16 != 0 || m == 0 || n == 0 || k == 0 {
        return Ok(false);
    }
    // Operands must be dense row-major (the TN layout), scales plain f32 scalars.
    let mut addr = Vec::new();
    for (j, &l) in inputs.iter().enumerate().take(4) {
        let load = &kb.k.loads[l];
        let Some(s) = bind_load(&kb.buf_dims[load.buf], &load.steps, kb.binding) else {
            return Ok(false);
        };
        let dt = kb.p.buffers[load.buf].shape.dtype();
        let want = if j < 2 { DType::U8 } else { DType::F32 };
        if dt != want || (j < 2 && !s.is_dense()) {
            return Ok(false);
        }
        addr.push(kb.buf_off[load.buf] + s.offset * dt.size_bytes());
    }
    if *has_bias && code.fp8_bias.is_none() {
        return Ok(false);
    }
    let out = kb.buf_off[kb.k.stores[0].buf];
    kb.steps.push(Step::Fp8(Fp8Call {
        a_e4m3: *rhs_format == ScaledFormat::F8E4M3,
        b_e4m3: *lhs_format == ScaledFormat::F8E4M3,
        m: n,
        n: m,
        k,
        a: addr[1] as u64,
        b: addr[0] as u64,
        a_scale: addr[3] as u64,
        b_scale: addr[2] as u64,
        d: out as u64,
    }));
    if *has_bias {
        let entry = code.fp8_bias.clone().unwrap();
        kb.launch(&entry, (blocks_for(m * n, kb), 1, 1), 256, false)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_major_operands_map_to_blas_transposes() {
        // Dense [R, C]: element (i, j) at i*C + j is column-major Sᵀ with ld = C.
        assert_eq!(blas_layout(3, 4, 4, 1), Some((false, 4)));
        // A transposed view of a dense [C, R]: (i, j) at j*R + i is S itself, ld = R.
        assert_eq!(blas_layout(3, 4, 1, 3), Some((true, 3)));
        // Broadcast rows (stride 0 with several rows) have no BLAS layout.
        assert_eq!(blas_layout(3, 4, 0, 1), None);
        // A single row: any row stride works, ld ≥ C.
        assert_eq!(blas_layout(1, 4, 0, 1), Some((false, 4)));
    }

    #[test]
    fn batch_axes_collapse_to_one_stride_only_when_contiguous() {
        assert_eq!(single_stride(&[2, 3], &[36, 12]), Some(12));
        assert_eq!(single_stride(&[2, 3], &[0, 0]), Some(0));
        assert_eq!(single_stride(&[2, 3], &[12, 0]), None);
        assert_eq!(single_stride(&[1, 3], &[99, 5]), Some(5));
        assert_eq!(batch_offset(4, &[2, 3], &[12, 0]), 12);
    }
}
