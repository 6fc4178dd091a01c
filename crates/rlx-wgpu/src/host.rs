//! Kernels the GPU does not run, handed to the shared host fallback
//! ([`rlx_runtime::HostKernel`]: compiled once per binding by the registered CPU backend,
//! or evaluated by the oracle where none is registered), and the view-dims helper the
//! WGSL generator shares.

use rlx_compile::program::{BufId, BufKind, Program, ViewStep};
use rlx_ir::{Dim, DimBinding, TensorData, TensorView};
use rlx_runtime::{HostKernel, RuntimeResult};
use std::sync::Arc;

/// Symbolic dims of the view `steps` over a buffer of `buf` dims.
pub(crate) fn view_dims_sym(buf: &[Dim], steps: &[ViewStep]) -> Vec<Dim> {
    rlx_compile::program::chain_dims(buf, steps)
        .pop()
        .expect("the chain starts with the buffer's dims")
}

/// A host kernel for every kernel that runs on the host under `binding` (`on_host[k]`).
pub(crate) fn host_kernels(
    p: &Program,
    on_host: impl Fn(usize) -> bool,
    binding: &DimBinding,
) -> RuntimeResult<Vec<Option<Arc<HostKernel>>>> {
    (0..p.kernels.len())
        .map(|k| {
            if !on_host(k) {
                return Ok(None);
            }
            Ok(Some(Arc::new(HostKernel::new(p, &p.kernels[k], binding)?)))
        })
        .collect()
}

/// Run `hk` on the host copies: `args` are the program's arguments, `host[b]` the value
/// of every buffer written so far. Returns the value of every buffer the kernel writes.
pub(crate) fn run(
    hk: &HostKernel,
    p: &Program,
    args: &[TensorView<'_>],
    host: &[Option<TensorData>],
) -> RuntimeResult<Vec<(BufId, TensorData)>> {
    let views: Vec<TensorView<'_>> = hk
        .inputs()
        .iter()
        .map(|&b| match &p.buffers[b].kind {
            BufKind::Arg(a) => args[*a],
            _ => host[b]
                .as_ref()
                .expect("a buffer is written before it is read")
                .view(),
        })
        .collect();
    let outs = hk.run(&views)?;
    Ok(hk.outputs().iter().copied().zip(outs).collect())
}
