//! Binding a program to concrete dims: buffer sizes, arena offsets, and every
//! kernel's loads, tile programs and iteration spaces. Done once for static
//! programs and once per distinct binding of the dynamic dims (then cached).

use super::contract::ContractPlan;
use super::ew::EwPlan;
use super::loads::BindCtx;
use super::opaque::OpaquePlan;
use super::reduce::ReducePlan;
use super::row::RowPlan;
use rlx_compile::memplan;
use rlx_compile::program::{KernelKind, Program, concrete};
use rlx_ir::{DimBinding, IrError, IrResult};

/// One kernel, bound.
pub(crate) enum BKernel {
    Ew(EwPlan),
    Reduce(ReducePlan),
    Row(RowPlan),
    Contract(ContractPlan),
    Opaque(OpaquePlan),
    Attn(super::attention::AttnPlan),
    RowGroup(super::rowgroup::RowGroupPlan),
}

/// A program bound to concrete dims.
pub(crate) struct Bound {
    pub(crate) buf_dims: Vec<Vec<usize>>,
    pub(crate) buf_bytes: Vec<usize>,
    pub(crate) offsets: Vec<usize>,
    pub(crate) arena: usize,
    pub(crate) kernels: Vec<BKernel>,
}

/// Bind `p` under `binding`; the kernels' machine code comes from (and goes to) `jit`,
/// the program's cache shared by all its bindings.
pub(crate) fn bind(
    p: &Program,
    binding: &DimBinding,
    jit: &std::sync::Arc<crate::jit::JitCache>,
) -> IrResult<Bound> {
    p.guards.check(binding)?;
    let (buf_dims, buf_bytes) = p.bound_buffers(binding)?;
    let (offsets, arena) = memplan::plan_offsets(p, &buf_bytes);
    let mut kernels = Vec::with_capacity(p.kernels.len());
    let cx = BindCtx {
        program: p,
        buffer_dims: &buf_dims,
        binding,
        jit,
    };
    for k in &p.kernels {
        let bk = match &k.kind {
            KernelKind::Elementwise { space, expr } => {
                let dims = concrete(space, binding).expect("bound");
                BKernel::Ew(EwPlan::new(cx, k, expr, &dims)?)
            }
            KernelKind::Reduce { .. } => BKernel::Reduce(ReducePlan::new(cx, k)?),
            KernelKind::Row { .. } => BKernel::Row(RowPlan::new(cx, k)?),
            KernelKind::Contraction { .. } => BKernel::Contract(ContractPlan::new(cx, k)?),
            KernelKind::Attention { .. } => match super::attention::AttnPlan::new(cx, k)? {
                Some(a) => BKernel::Attn(a),
                None => BKernel::Opaque(OpaquePlan::new(cx, k)?),
            },
            KernelKind::Opaque { .. } => BKernel::Opaque(OpaquePlan::new(cx, k)?),
            KernelKind::RowGroup { .. } => {
                BKernel::RowGroup(super::rowgroup::RowGroupPlan::new(cx, k)?)
            }
        };
        kernels.push(bk);
    }
    Ok(Bound {
        buf_dims,
        buf_bytes,
        offsets,
        arena,
        kernels,
    })
}

/// The binding of the dynamic dims from the argument dims; errors name the argument.
pub(crate) fn binding_from_args(p: &Program, dims: &[&[usize]]) -> IrResult<DimBinding> {
    let mut b = DimBinding::new();
    for ((name, shape), d) in p.args.iter().zip(dims) {
        if shape.rank() != d.len() {
            return Err(IrError::new(
                "cpu",
                format!("argument `{name}` is declared {shape} but got dims {d:?}"),
            ));
        }
        for (dim, &n) in shape.dims().iter().zip(d.iter()) {
            match dim {
                rlx_ir::Dim::Static(s) if *s != n => {
                    return Err(IrError::new(
                        "cpu",
                        format!("argument `{name}` is declared {shape} but got dims {d:?}"),
                    ));
                }
                rlx_ir::Dim::Dynamic(s) => match b.get(*s) {
                    Some(prev) if prev != n => {
                        return Err(IrError::new(
                            "cpu",
                            format!(
                                "dynamic dim ?{s} is {prev} elsewhere but `{name}` gives it {n} (dims {d:?})"
                            ),
                        ));
                    }
                    _ => b.set(*s, n),
                },
                _ => {}
            }
        }
    }
    Ok(b)
}
