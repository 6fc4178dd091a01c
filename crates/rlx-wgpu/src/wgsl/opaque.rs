//! Opaque ops with a WGSL kernel: concat, pad and cumsum (one thread per output
//! element, operands read through their views). Every other opaque op runs on the host.

use super::{Cls, Gen, Launch, Shader, Space, WG, cls, post, ty};
use crate::host::view_dims_sym;
use rlx_compile::program::{Kernel, KernelKind};
use rlx_ir::{DType, Op};

/// `value` converted to `dt` as the oracle's cast does, as a WGSL literal.
fn fill(value: f64, dt: DType) -> Result<String, String> {
    Ok(match cls(dt)? {
        Cls::F => {
            let v = match dt {
                DType::F16 => half::f16::from_f64(value).to_f32(),
                DType::BF16 => half::bf16::from_f64(value).to_f32(),
                _ => value as f32,
            };
            format!("bitcast<f32>({:#x}u)", v.to_bits())
        }
        Cls::I => {
            let v: i32 = match dt {
                DType::I8 => value as i8 as i32,
                DType::U8 => value as u8 as i32,
                DType::I16 => value as i16 as i32,
                DType::Bool => (value != 0.0) as i32,
                _ => value as i32,
            };
            format!("bitcast<i32>({:#x}u)", v as u32)
        }
    })
}

/// The shader of an opaque kernel, or why it runs on the host.
pub(crate) fn opaque(mut g: Gen<'_>, k: &Kernel) -> Result<Shader, String> {
    let KernelKind::Opaque { op, inputs, out } = &k.kind else {
        unreachable!()
    };
    if matches!(op, Op::Attention { .. }) {
        // Lowered once to the loop IR, like fused attention.
        return g.lowered();
    }
    if !matches!(op, Op::Concat { .. } | Op::Pad { .. } | Op::Cumsum { .. }) {
        return Err(format!(
            "{} has no WGSL kernel yet; it runs whole on the CPU",
            op.name()
        ));
    }
    let dt = out.dtype();
    let c = cls(dt)?;
    let dims = out.dims().to_vec();
    let view = |g: &Gen<'_>, i: usize| {
        let l = &g.k.loads[inputs[i]];
        (
            view_dims_sym(g.p.buffers[l.buf].shape.dims(), &l.steps),
            g.p.buffers[l.buf].shape.dtype(),
        )
    };
    for i in 0..inputs.len() {
        let (_, idt) = view(&g, i);
        if idt != dt {
            return Err(format!("{} of {idt} into {dt}", op.name()));
        }
    }
    let n = g.numel(&dims)?;
    g.line("let t = (wid.y * nwg.x + wid.x) * 64u + lid;");
    g.line(&format!("if (t >= {n}) {{ return; }}"));
    let mut sp = Space::flat(dims.clone(), "t".into());
    let idx = g.space_idx(&mut sp)?;
    g.line(&format!("var v: {};", ty(c)));
    let read_at = |g: &mut Gen<'_>, i: usize, idx: &[String]| -> Result<String, String> {
        let e = g.load_elem_at(inputs[i], idx)?;
        g.read(g.k.loads[inputs[i]].buf, &e)
    };
    match op {
        Op::Concat { axis } => {
            let mut lo = "0u".to_string();
            for i in 0..inputs.len() {
                let (vd, _) = view(&g, i);
                let len = g.dim(vd[*axis])?;
                let hi = g.bind("hi", &format!("{lo} + {len}"));
                g.line(&format!(
                    "if ({a} >= {lo} && {a} < {hi}) {{",
                    a = idx[*axis]
                ));
                let mut at = idx.clone();
                at[*axis] = format!("({} - {lo})", idx[*axis]);
                let x = read_at(&mut g, i, &at)?;
                g.line(&format!("v = {x};"));
                g.line("}");
                lo = hi;
            }
        }
        Op::Pad {
            axis,
            before,
            value,
            ..
        } => {
            let (vd, _) = view(&g, 0);
            let len = g.dim(vd[*axis])?;
            g.line(&format!("v = {};", fill(*value, dt)?));
            g.line(&format!(
                "if ({a} >= {before}u && {a} < {before}u + {len}) {{",
                a = idx[*axis]
            ));
            let mut at = idx.clone();
            at[*axis] = format!("({} - {before}u)", idx[*axis]);
            let x = read_at(&mut g, 0, &at)?;
            g.line(&format!("v = {x};"));
            g.line("}");
        }
        Op::Cumsum { axis, exclusive } => {
            if dt == DType::Bool {
                return Err("cumsum of bool runs on the CPU".into());
            }
            let r = dims.len() as i32;
            let ax = if *axis < 0 { axis + r } else { *axis };
            if ax < 0 || ax >= r {
                return Err("cumsum axis out of range (the CPU reports it)".into());
            }
            let ax = ax as usize;
            let zero = if c == Cls::F { "0.0" } else { "0i" };
            g.line(&format!("var acc = {zero};"));
            let end = if *exclusive {
                idx[ax].clone()
            } else {
                format!("{} + 1u", idx[ax])
            };
            g.line(&format!("for (var j = 0u; j < {end}; j = j + 1u) {{"));
            let mut at = idx.clone();
            at[ax] = "j".into();
            let x = read_at(&mut g, 0, &at)?;
            g.line(&format!("acc = acc + {x};"));
            g.line("}");
            let p = post(&mut g, dt, "acc");
            g.line(&format!("v = {p};"));
        }
        other => {
            return Err(format!(
                "{} has no WGSL kernel yet; it runs whole on the CPU",
                other.name()
            ));
        }
    }
    let buf = k.stores[0].buf;
    g.write(buf, "t", "v")?;
    Ok(g.finish(&WG.to_string(), Launch::Threads(dims)))
}
