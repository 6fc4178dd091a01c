//! Kernels and fragments lowered once to the loop IR (`rlx_compile::loops`) and rendered
//! by its WGSL renderer: elementwise kernels, reductions, row ops and contractions whole
//! (a reduction's fixed-order workgroup tree and a contraction's staged tiles included)
//! and attention, so the activation formulas, dtype rules and view index math this
//! backend runs are the ones every GPU backend shares. This module only binds the
//! renderer to the shader's parameters (buffer offsets and dynamic dims as
//! [`Slot`](super::Slot)s).

use super::{Gen, Launch, Shader, WG};
use crate::host::view_dims_sym;
use rlx_compile::loops::{self, Fault, LoopKernel, WgslEmbedding, WgslError, WgslHelpers};
use rlx_compile::program::KernelKind;
use rlx_ir::Dim;
use std::collections::HashMap;

/// The WGSL of a lowered kernel's parameters in this shader.
struct Host {
    bases: Vec<String>,
    dims: HashMap<u32, String>,
}

impl Gen<'_> {
    /// The index of this kernel in its program (the lowering addresses kernels by index).
    fn kid(&self) -> usize {
        self.p
            .kernels
            .iter()
            .position(|k| std::ptr::eq(k, self.k))
            .expect("a kernel of its own program")
    }

    /// Registers the slots of `lk`'s buffers and dims, then renders with `f`.
    fn render<R>(
        &mut self,
        lk: &LoopKernel,
        prefix: &str,
        f: impl FnOnce(&WgslEmbedding<'_>, &mut WgslHelpers) -> Result<R, WgslError>,
    ) -> Result<R, String> {
        let mut host = Host {
            bases: Vec::with_capacity(lk.bufs.len()),
            dims: HashMap::new(),
        };
        for b in &lk.bufs {
            host.bases.push(self.base(b.buf)?);
        }
        for &s in &lk.dims {
            let v = self.dim(Dim::Dynamic(s))?;
            host.dims.insert(s, v);
        }
        let base = |i: usize| host.bases[i].clone();
        let dim = |s: u32| host.dims[&s].clone();
        // No error channel: kernels that can raise (integer division, shifts) are refused
        // and run on the host, which reports the oracle's error. The one exception is a
        // reduction's empty-axis error: `layout::grid` runs every reduction over an empty
        // axis on the host, so the shader never reaches it.
        let empty_only = |_: Fault| "// empty axes run on the host (layout::grid)".to_string();
        let fail: Option<&dyn Fn(Fault) -> String> =
            if !lk.faults().is_empty() && lk.faults().iter().all(|f| *f == Fault::EmptyReduction) {
                Some(&empty_only)
            } else {
                None
            };
        let embed = WgslEmbedding {
            base: &base,
            dim: &dim,
            fail,
            var_prefix: prefix,
            subgroup_size: self.subgroup,
        };
        f(&embed, &mut self.helpers).map_err(|e| e.to_string())
    }

    /// A kernel lowered whole: an elementwise kernel (one invocation per element), a
    /// reduction (one invocation per output, or one workgroup of the lowering's size per
    /// output), a row op (one invocation or workgroup per row), a contraction (one
    /// workgroup per output tile) or attention (one workgroup per block of queries).
    pub(crate) fn lowered(mut self) -> Result<Shader, String> {
        // With fixed-size subgroups, work-group trees finish in registers through
        // `subgroupShuffleXor` (item 0's result bit-identical to the shared tree's).
        let opts = loops::LowerOptions {
            shuffles: self.subgroup.is_some(),
            shuffle_width: self.subgroup.unwrap_or(0),
            ..Default::default()
        };
        let lk = loops::lower_kernel_with(self.p, self.kid(), opts).map_err(|e| e.to_string())?;
        let space = match &self.k.kind {
            KernelKind::Elementwise { space, .. } => space.clone(),
            KernelKind::Reduce { out_space, .. } => out_space.clone(),
            // One item or workgroup per row.
            KernelKind::Row { space, .. } if !space.is_empty() => space[..space.len() - 1].to_vec(),
            // One workgroup per output tile.
            KernelKind::Contraction { out_space, .. } if out_space.len() >= 2 => {
                let r = out_space.len();
                let (m, n) = (out_space[r - 2], out_space[r - 1]);
                let launch = Launch::Tiles {
                    m,
                    n,
                    batch: out_space[..r - 2].to_vec(),
                    tile: loops::matmul_tile(m, n),
                };
                let body = self.render(&lk, "v", |e, h| loops::render_wgsl_loop(&lk, e, h))?;
                self.body.push_str(&body);
                self.decls.push_str(&loops::wgsl_workgroup_decls(&lk, "v"));
                let n = lk
                    .group
                    .ok_or("a contraction lowered without work-groups")?;
                return Ok(self.finish(&n.to_string(), launch));
            }
            // One workgroup per (batch, head, block of queries): `B · H · ⌈Sq/QUERIES⌉`
            // workgroups, counted as tiles of a `[B, H, Sq, 1]` result.
            KernelKind::Attention { op, inputs, .. }
            | KernelKind::Opaque {
                op: op @ rlx_ir::Op::Attention { .. },
                inputs,
                ..
            } => {
                let rlx_ir::Op::Attention { num_heads, .. } = op else {
                    unreachable!()
                };
                let l = &self.k.loads[inputs[0]];
                let qd = view_dims_sym(self.p.buffers[l.buf].shape.dims(), &l.steps);
                let n = lk.group.ok_or("attention lowered without work-groups")?;
                let launch = Launch::Tiles {
                    m: qd[1],
                    n: Dim::Static(1),
                    batch: vec![qd[0], Dim::Static(*num_heads)],
                    tile: n,
                };
                let body = self.render(&lk, "v", |e, h| loops::render_wgsl_loop(&lk, e, h))?;
                self.body.push_str(&body);
                self.decls.push_str(&loops::wgsl_workgroup_decls(&lk, "v"));
                return Ok(self.finish(&n.to_string(), launch));
            }
            // Concat, pad, cumsum: one item per output element.
            KernelKind::Opaque { out, .. } => out.dims().to_vec(),
            _ => return Err(format!("a {} kernel rendered whole", self.k.label())),
        };
        let body = self.render(&lk, "v", |e, h| loops::render_wgsl_loop(&lk, e, h))?;
        self.body.push_str(&body);
        self.decls.push_str(&loops::wgsl_workgroup_decls(&lk, "v"));
        Ok(match lk.group {
            // One workgroup per output (the loop's group index is the workgroup's).
            Some(n) => self.finish(&n.to_string(), Launch::Groups(space)),
            // `render_wgsl_loop` numbers items in workgroups of `WGSL_WORKGROUP`.
            None => self.finish(&WG.to_string(), Launch::Threads(space)),
        })
    }
}
