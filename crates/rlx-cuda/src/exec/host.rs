//! Opaque ops without a native kernel, run on the host through the oracle: operands
//! are copied down (whole buffers, then gathered through their views), the op is
//! evaluated by [`rlx_ir::interp::eval_op`], and the result is copied back.

use crate::device::{DPtr, Gpu};
use rlx_compile::program::{Kernel, KernelKind, Program, view::gather_map};
use rlx_ir::{DType, DimBinding, Op, Shape, TensorData, interp};

/// One operand: where its buffer is and how its view reads it.
#[derive(Debug, Clone)]
pub(crate) struct HostIn {
    off: usize,
    bytes: usize,
    dtype: DType,
    dims: Vec<usize>,
    /// Buffer element per view element (row-major); `None` for the identity view.
    map: Option<Vec<usize>>,
}

/// A bound host op.
#[derive(Debug, Clone)]
pub(crate) struct HostOp {
    op: Op,
    inputs: Vec<HostIn>,
    out_off: usize,
    out: Shape,
}

impl HostOp {
    pub(crate) fn new(
        p: &Program,
        k: &Kernel,
        buf_dims: &[Vec<usize>],
        buf_off: &[usize],
        binding: &DimBinding,
    ) -> Result<HostOp, String> {
        let (op, inputs, out) = match &k.kind {
            KernelKind::Opaque { op, inputs, out } => (op.clone(), inputs.clone(), out.clone()),
            _ => unreachable!("host ops are opaque kernels"),
        };
        let inputs = inputs
            .iter()
            .map(|&l| {
                let load = &k.loads[l];
                let bd = &buf_dims[load.buf];
                let dtype = p.buffers[load.buf].shape.dtype();
                let dims =
                    crate::codegen::load::chain_dims(p.buffers[load.buf].shape.dims(), &load.steps)
                        .pop()
                        .unwrap();
                let dims = rlx_compile::program::concrete(&dims, binding)
                    .ok_or("unbound dynamic dim in an operand view")?;
                let map = if load.steps.is_empty() {
                    None
                } else {
                    Some(
                        gather_map(bd, &load.steps, binding)
                            .ok_or("unbound dynamic dim in an operand view")?,
                    )
                };
                Ok(HostIn {
                    off: buf_off[load.buf],
                    bytes: bd.iter().product::<usize>() * dtype.size_bytes(),
                    dtype,
                    dims,
                    map,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(HostOp {
            op,
            inputs,
            out_off: buf_off[k.stores[0].buf],
            out: out.bind(binding),
        })
    }

    /// The op's name.
    pub(crate) fn name(&self) -> String {
        self.op.name()
    }

    /// Run with the arena at `base`.
    pub(crate) fn run(&self, gpu: &dyn Gpu, base: DPtr) -> Result<(), String> {
        gpu.synchronize()?;
        let mut datas = Vec::with_capacity(self.inputs.len());
        for i in &self.inputs {
            let mut raw = vec![0u8; i.bytes];
            gpu.download(&mut raw, base + i.off as u64)?;
            let w = i.dtype.size_bytes();
            let bytes = match &i.map {
                None => raw,
                Some(map) => {
                    let mut b = Vec::with_capacity(map.len() * w);
                    for &e in map {
                        b.extend_from_slice(&raw[e * w..(e + 1) * w]);
                    }
                    b
                }
            };
            datas.push(TensorData::new(i.dtype, &i.dims, bytes).map_err(|e| e.to_string())?);
        }
        let refs: Vec<&TensorData> = datas.iter().collect();
        let r = interp::eval_op(&self.op, &refs, &self.out).map_err(|e| e.to_string())?;
        let want = self.out.size_bytes().unwrap_or(0);
        if r.bytes.len() != want {
            return Err(format!(
                "{} produced {} bytes, expected {want} for {}",
                self.op.name(),
                r.bytes.len(),
                self.out
            ));
        }
        if want > 0 {
            gpu.upload(base + self.out_off as u64, &r.bytes)?;
        }
        Ok(())
    }
}
