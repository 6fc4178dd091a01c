//! One shader per kernel kind: elementwise kernels, reductions, row ops and contractions
//! lowered whole to the loop IR (`lowered.rs`; a reduction runs one thread per output
//! when short, one workgroup with a fixed-order tree per output when long; a row op one
//! thread or workgroup per row; a contraction one workgroup per output tile with A and B
//! slices in workgroup memory and a register block per invocation), and attention (one
//! thread per query row, online softmax), still written here. Every reduction order is
//! fixed, so results are bit-identical from run to run.

use super::{Cls, Env, Gen, Launch, Shader, Space, WG, cls, post};
use crate::host::view_dims_sym;
use rlx_compile::program::Kernel;
use rlx_compile::program::{KernelKind, Program};
use rlx_ir::{DType, Dim, MaskKind, Op};

/// Generate the shader for kernel `k`, or say why the GPU does not run it.
pub(crate) fn generate(p: &Program, k: &Kernel, fixed: Option<&Env<'_>>) -> Result<Shader, String> {
    for s in &k.stores {
        cls(p.buffers[s.buf].shape.dtype())?;
    }
    for l in &k.loads {
        cls(p.buffers[l.buf].shape.dtype())?;
    }
    let g = Gen::new(p, k, fixed)?;
    match &k.kind {
        // Lowered to the loop IR and rendered whole (`lowered.rs`); what the renderer
        // refuses (f64, i64/u32, integer `/`, `%` and shifts that can raise) runs on the host.
        // A reduction's integer mean (an exact sum wider than i32) runs on the host too.
        // A contraction runs a workgroup per output tile (A and B slices staged in
        // workgroup memory, a register block per invocation).
        KernelKind::Elementwise { .. }
        | KernelKind::Reduce { .. }
        | KernelKind::Row { .. }
        | KernelKind::Contraction { .. } => g.lowered(),
        KernelKind::Attention { .. } => attention(g, k),
        KernelKind::Opaque { .. } => super::opaque::opaque(g, k),
        KernelKind::RowGroup { .. } => Err(
            "row_group kernels are not lowered to WGSL (compile with row_groups off, as \
             rlx_wgpu::compile_options does)"
                .to_string(),
        ),
    }
}

/// Largest value head width the attention kernel keeps in registers.
const MAX_DV: usize = 256;

fn attention(g: Gen<'_>, k: &Kernel) -> Result<Shader, String> {
    match &k.kind {
        KernelKind::Attention {
            op,
            inputs,
            out_space,
            dtype,
            epilogue,
        } => attention_with(g, k, op, inputs, out_space, *dtype, Some(epilogue)),
        KernelKind::Opaque { op, inputs, out } => {
            attention_with(g, k, op, inputs, out.dims(), out.dtype(), None)
        }
        _ => unreachable!(),
    }
}

/// Attention of `op` over loads `inputs`; the result goes through `epilogue` (fused
/// kernels) or straight to the kernel's store (opaque attention).
pub(crate) fn attention_with(
    mut g: Gen<'_>,
    k: &Kernel,
    op: &Op,
    inputs: &[usize],
    out_space: &[Dim],
    dtype: DType,
    epilogue: Option<&rlx_compile::program::Expr>,
) -> Result<Shader, String> {
    let dtype = &dtype;
    let Op::Attention {
        num_heads,
        head_dim,
        v_head_dim,
        mask_kind,
        score_scale,
        attn_logit_softcap,
    } = op
    else {
        return Err("attention kernel without an attention op".into());
    };
    let (h, d) = (*num_heads, *head_dim);
    let dv = v_head_dim.unwrap_or(d);
    if dv > MAX_DV || dv == 0 || d == 0 {
        return Err(format!(
            "attention with value heads of {dv} (GPU kernel keeps ≤ {MAX_DV})"
        ));
    }
    if cls(*dtype)? != Cls::F {
        return Err("attention of non-float data".into());
    }
    if let Some(c) = attn_logit_softcap
        && !(c.is_finite() && *c > 0.0)
    {
        return Err("invalid softcap (the CPU reports it)".into());
    }
    let dims = |g: &Gen<'_>, l: usize| {
        let ld = &g.k.loads[inputs[l]];
        view_dims_sym(g.p.buffers[ld.buf].shape.dims(), &ld.steps)
    };
    let (qd, kd, vd) = (dims(&g, 0), dims(&g, 1), dims(&g, 2));
    for (l, vdims) in [&qd, &kd, &vd].iter().enumerate() {
        if cls(g.p.buffers[g.k.loads[inputs[l]].buf].shape.dtype())? != Cls::F {
            return Err("attention of non-float operands".into());
        }
        if !matches!(vdims.len(), 3 | 4) {
            return Err(format!("attention operand of rank {}", vdims.len()));
        }
    }
    let four = qd.len() == 4;
    let hk = match (&kd[..], four) {
        ([_, _, Dim::Static(hh), _], true) => *hh,
        ([_, _, Dim::Static(hid)], false) if hid % d == 0 => hid / d,
        _ => return Err("attention with dynamic head counts".into()),
    };
    if hk == 0 || h % hk != 0 {
        return Err("attention head counts that do not divide (the CPU reports it)".into());
    }
    let group = h / hk;
    let (bsz, sq, sk) = (qd[0], qd[1], kd[1]);
    let (bs, sqs, sks) = (g.dim(bsz)?, g.dim(sq)?, g.dim(sk)?);
    let scale = score_scale
        .map(|s| s as f64)
        .unwrap_or(1.0 / (d as f64).sqrt()) as f32;
    // Index of (b, s, head, j) in an operand of this layout.
    let at = |b: &str, s: &str, hh: &str, j: &str, width: usize| -> Vec<String> {
        if four {
            vec![b.into(), s.into(), hh.into(), j.into()]
        } else {
            vec![b.into(), s.into(), format!("({hh} * {width}u + {j})")]
        }
    };
    g.line("let t = (wid.y * nwg.x + wid.x) * 64u + lid;");
    g.line(&format!("if (t >= {bs} * {sqs} * {h}u) {{ return; }}"));
    g.line(&format!("let hh = t % {h}u;"));
    g.line(&format!("let qi = (t / {h}u) % {sqs};"));
    g.line(&format!("let bi = t / ({h}u * {sqs});"));
    g.line(&format!("let kh = hh / {group}u;"));
    g.line(&format!("var q: array<f32, {d}>;"));
    g.line(&format!("for (var j = 0u; j < {d}u; j = j + 1u) {{"));
    let qi = at("bi", "qi", "hh", "j", d);
    let eq = g.load_elem_at(inputs[0], &qi)?;
    let xq = g.read(g.k.loads[inputs[0]].buf, &eq)?;
    g.line(&format!("  q[j] = {xq};"));
    g.line("}");
    g.line("var mx = bitcast<f32>(0xff800000u);");
    g.line("var den = 0.0;");
    g.line(&format!("var acc: array<f32, {dv}>;"));
    g.line(&format!("for (var ki = 0u; ki < {sks}; ki = ki + 1u) {{"));
    match mask_kind {
        MaskKind::Causal => g.line("  if (ki > qi) { break; }"),
        MaskKind::SlidingWindow(w) => {
            g.line("  if (ki > qi) { break; }");
            g.line(&format!("  if (qi - ki > {w}u) {{ continue; }}"));
        }
        MaskKind::Custom => {
            let ml = inputs.get(3).ok_or("custom mask without its operand")?;
            let e = g.load_elem_at(*ml, &["bi".into(), "ki".into()])?;
            let mv = g.read(g.k.loads[*ml].buf, &e)?;
            g.line(&format!("  if (!(f32({mv}) >= 0.5)) {{ continue; }}"));
        }
        MaskKind::None | MaskKind::Bias => {}
    }
    g.line("  var dot = 0.0;");
    g.line(&format!("  for (var j = 0u; j < {d}u; j = j + 1u) {{"));
    let ki = at("bi", "ki", "kh", "j", d);
    let ek = g.load_elem_at(inputs[1], &ki)?;
    let xk = g.read(g.k.loads[inputs[1]].buf, &ek)?;
    g.line(&format!("    dot = fma(q[j], {xk}, dot);"));
    g.line("  }");
    g.line(&format!(
        "  var sc = dot * bitcast<f32>({:#x}u);",
        scale.to_bits()
    ));
    if let Some(c) = attn_logit_softcap {
        g.need("tanh_");
        g.line(&format!("  sc = {c:?} * tanh_(sc / {c:?});", c = *c as f64));
    }
    if *mask_kind == MaskKind::Bias {
        let bl = *inputs.get(3).ok_or("bias mask without its operand")?;
        let ld = &g.k.loads[bl];
        let bdims = view_dims_sym(g.p.buffers[ld.buf].shape.dims(), &ld.steps);
        if bdims.len() > 4 {
            return Err("attention bias of rank > 4".into());
        }
        let full = ["bi", "hh", "qi", "ki"];
        let off = 4 - bdims.len();
        let mut idx = Vec::new();
        for (j, dd) in bdims.iter().enumerate() {
            idx.push(match dd {
                Dim::Static(1) => "0u".to_string(),
                Dim::Static(_) => full[j + off].to_string(),
                _ => {
                    let ds = g.dim(*dd)?;
                    format!("select({}, 0u, {ds} == 1u)", full[j + off])
                }
            });
        }
        let e = g.load_elem_at(bl, &idx)?;
        let bv = g.read(ld.buf, &e)?;
        g.line(&format!("  sc = sc + f32({bv});"));
    }
    // Online softmax: rescale the running sum and accumulator when the max grows.
    g.line("  let nm = max(mx, sc);");
    g.line("  let corr = exp(mx - nm);");
    g.line("  let pk = exp(sc - nm);");
    g.line("  den = den * corr + pk;");
    g.line(&format!("  for (var j = 0u; j < {dv}u; j = j + 1u) {{"));
    let vi = at("bi", "ki", "kh", "j", dv);
    let ev = g.load_elem_at(inputs[2], &vi)?;
    let xv = g.read(g.k.loads[inputs[2]].buf, &ev)?;
    g.line(&format!("    acc[j] = acc[j] * corr + pk * {xv};"));
    g.line("  }");
    g.line("  mx = nm;");
    g.line("}");
    let out_idx = at("bi", "qi", "hh", "j", dv);
    g.line(&format!("for (var j = 0u; j < {dv}u; j = j + 1u) {{"));
    g.line("  let o = select(acc[j] / den, 0.0, den == 0.0);");
    let y = post(&mut g, *dtype, "o");
    let core = g.bind("core", &y);
    let mut sp = Space::multi(out_space.to_vec(), out_idx);
    let flat = g.space_flat(&mut sp)?;
    match epilogue {
        Some(e) => g.epilogue(e, out_space, &flat, &core, *dtype)?,
        None => g.write(k.stores[0].buf, &flat, &core)?,
    }
    g.line("}");
    Ok(g.finish(
        &WG.to_string(),
        Launch::Threads(vec![bsz, sq, Dim::Static(h)]),
    ))
}
