//! Opaque ops without a native kernel, run by the shared host fallback
//! ([`rlx_runtime::HostKernel`]: the registered CPU backend, else the oracle): the
//! buffers the op reads are copied down whole, the kernel runs on the host, and what it
//! writes is copied back.

use crate::device::{DPtr, Gpu};
use rlx_compile::program::{Kernel, KernelKind, Program};
use rlx_ir::{DType, DimBinding, TensorView};
use rlx_runtime::HostKernel;
use std::sync::Arc;

/// A buffer in the arena: byte offset, byte size, dtype, dims.
#[derive(Debug, Clone)]
struct Region {
    off: usize,
    bytes: usize,
    dtype: DType,
    dims: Vec<usize>,
}

/// A bound host op.
#[derive(Debug, Clone)]
pub(crate) struct HostOp {
    name: String,
    kernel: Arc<HostKernel>,
    inputs: Vec<Region>,
    outputs: Vec<Region>,
}

impl HostOp {
    pub(crate) fn new(
        p: &Program,
        k: &Kernel,
        buf_dims: &[Vec<usize>],
        buf_off: &[usize],
        binding: &DimBinding,
    ) -> Result<HostOp, String> {
        let KernelKind::Opaque { op, .. } = &k.kind else {
            unreachable!("host ops are opaque kernels")
        };
        let kernel = HostKernel::new(p, k, binding).map_err(|e| e.to_string())?;
        let region = |b: usize| {
            let dtype = p.buffers[b].shape.dtype();
            Region {
                off: buf_off[b],
                bytes: buf_dims[b].iter().product::<usize>() * dtype.size_bytes(),
                dtype,
                dims: buf_dims[b].clone(),
            }
        };
        Ok(HostOp {
            name: op.name(),
            inputs: kernel.inputs().iter().map(|&b| region(b)).collect(),
            outputs: kernel.outputs().iter().map(|&b| region(b)).collect(),
            kernel: Arc::new(kernel),
        })
    }

    /// The op's name.
    pub(crate) fn name(&self) -> String {
        self.name.clone()
    }

    /// What runs it on the host (`cpu`, or `oracle` without a registered CPU backend).
    pub(crate) fn engine(&self) -> String {
        self.kernel.engine().to_string()
    }

    /// Run with the arena at `base`.
    pub(crate) fn run(&self, gpu: &dyn Gpu, base: DPtr) -> Result<(), String> {
        gpu.synchronize()?;
        let mut raw = Vec::with_capacity(self.inputs.len());
        for i in &self.inputs {
            let mut b = vec![0u8; i.bytes];
            gpu.download(&mut b, base + i.off as u64)?;
            raw.push(b);
        }
        let views = self
            .inputs
            .iter()
            .zip(&raw)
            .map(|(i, b)| TensorView::new(i.dtype, &i.dims, b))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let outs = self.kernel.run(&views).map_err(|e| e.to_string())?;
        for (o, v) in self.outputs.iter().zip(&outs) {
            if v.bytes.len() != o.bytes {
                return Err(format!(
                    "{} produced {} bytes, expected {} for {:?} {}",
                    self.name,
                    v.bytes.len(),
                    o.bytes,
                    o.dims,
                    o.dtype
                ));
            }
            if o.bytes > 0 {
                gpu.upload(base + o.off as u64, &v.bytes)?;
            }
        }
        Ok(())
    }
}
