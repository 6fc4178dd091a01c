//! `explain`: a human-readable account of a [`Program`].

use crate::program::{BufKind, KernelKind, Program};
use std::fmt::Write;

/// Describe `p` as run on `device`: every kernel with the IR ops fused into it, and
/// the memory plan (`arena_bytes` is the planned arena for the current binding, when
/// known) against the bytes every intermediate would take if materialized.
pub fn explain(p: &Program, device: &str, arena_bytes: Option<usize>) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "program `{}` on {device}: {} kernel(s) from {} graph node(s)",
        p.name,
        p.kernels.len(),
        p.graph_nodes
    );
    for (k, kernel) in p.kernels.iter().enumerate() {
        let space = match &kernel.kind {
            KernelKind::Elementwise { space, .. } | KernelKind::Row { space, .. } => dims(space),
            KernelKind::Reduce {
                in_space,
                out_space,
                ..
            } => format!("{} -> {}", dims(in_space), dims(out_space)),
            KernelKind::Contraction { out_space, .. } | KernelKind::Attention { out_space, .. } => {
                dims(out_space)
            }
            KernelKind::Opaque { out, .. } => dims(out.dims()),
            // One pass over blocks of rows; the stages say what each block goes through.
            KernelKind::RowGroup { space, stages } => format!(
                "{} in blocks of rows, {} stage(s): {}",
                dims(space),
                stages.len(),
                crate::fuse::rowgroup::describe_stages(space, stages)
            ),
        };
        let outs: Vec<String> = kernel
            .stores
            .iter()
            .map(|st| {
                let b = &p.buffers[st.buf];
                let place = match b.kind {
                    BufKind::Output(j) => format!("output {j}"),
                    _ => "arena".to_string(),
                };
                format!("buf{} ({place}, {})", st.buf, b.shape)
            })
            .collect();
        let _ = writeln!(
            s,
            "  kernel {k}: {} over {space}; fuses {} op(s) [{}]; {} load(s); writes {}",
            kernel.label(),
            kernel.fused.len(),
            kernel.fused_names.join(", "),
            kernel.loads.len(),
            outs.join(", ")
        );
    }
    if !p.sharing.is_empty() {
        let stored = p.sharing.iter().filter(|v| v.sharing.stored()).count();
        let _ = writeln!(
            s,
            "shared values: {} read by several kernels, {stored} stored once, {} recomputed by each reader",
            p.sharing.len(),
            p.sharing.len() - stored
        );
        for v in &p.sharing {
            let _ = writeln!(s, "  {v}");
        }
    }
    let temps = p.buffers.iter().filter(|b| b.kind == BufKind::Temp).count();
    let _ = write!(
        s,
        "memory plan: {temps} arena temporar{}",
        if temps == 1 { "y" } else { "ies" }
    );
    if !p.liveness.in_place.is_empty() {
        let _ = write!(s, " ({} written in place)", p.liveness.in_place.len());
    }
    match (arena_bytes, p.naive_bytes) {
        (Some(a), Some(n)) => {
            let _ = write!(
                s,
                "; peak arena {a} bytes vs {n} bytes if every intermediate were materialized"
            );
        }
        (Some(a), None) => {
            let _ = write!(
                s,
                "; peak arena {a} bytes for the current binding (dims are dynamic)"
            );
        }
        _ => {
            let _ = write!(s, "; arena sized per binding of the dynamic dims");
        }
    }
    s
}

fn dims(d: &[rlx_ir::Dim]) -> String {
    let v: Vec<String> = d.iter().map(|x| x.to_string()).collect();
    format!("[{}]", v.join(", "))
}
