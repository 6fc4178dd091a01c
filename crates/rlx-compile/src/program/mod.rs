//! The backend-neutral [`Program`]: kernels over buffers in one arena.
//!
//! A program is what [`crate::compile`] hands to a backend. It names every buffer the
//! computation touches (arguments, small baked constants, arena temporaries, outputs),
//! lists the kernels in execution order, and carries the static part of the memory
//! plan. Shapes may hold dynamic dims: a backend binds them per call
//! ([`view::bind_load`], `memplan::plan_offsets`) without recompiling.

pub mod host_graph;
pub(crate) mod sharing;
pub mod view;

use rlx_ir::{
    Activation, BinaryOp, CmpOp, DType, Dim, DimBinding, IrError, IrResult, NodeId, Op, ReduceOp,
    Shape,
};
use sharing::SharedValue;
pub use view::{Strided, ViewStep, bind_load, chain_dims};

/// Index of a buffer in [`Program::buffers`].
pub type BufId = usize;

/// Where a buffer's bytes live.
#[derive(Debug, Clone, PartialEq)]
pub enum BufKind {
    /// Positional argument `i` (in `rlx_runtime::arg_order` order), read in place.
    Arg(usize),
    /// A small constant baked into the program (little-endian bytes of its dtype).
    Const(Vec<u8>),
    /// An intermediate placed in the arena by the memory plan.
    Temp,
    /// The result for graph output `i`, allocated per run and written once.
    Output(usize),
}

/// One buffer: its kind, type and the IR node whose value it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Buffer {
    /// Where its bytes live.
    pub kind: BufKind,
    /// Element type and (possibly dynamic) dims; always dense row-major.
    pub shape: Shape,
    /// The IR node (of the compiled graph) whose value it holds.
    pub node: NodeId,
}

/// A scalar literal of an expression.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// Any real float value (f16/bf16/f32 values are exact in f64).
    F(f64),
    /// Any integer or bool value (bool is 0/1).
    I(i64),
}

/// A read of a buffer through a chain of views, evaluated in the space of the
/// expression that uses it (the chain always ends with that space's dims).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Load {
    /// The buffer read.
    pub buf: BufId,
    /// Views applied to the buffer's dense layout, in order.
    pub steps: Vec<ViewStep>,
}

/// The operation of one expression node.
#[derive(Debug, Clone, PartialEq)]
pub enum EOp {
    /// Load `i` of the kernel ([`Kernel::loads`]).
    Load(usize),
    /// A literal, broadcast.
    Const(Scalar),
    /// The result of the kernel's core (reduction, row op, contraction, attention),
    /// available in epilogues only.
    Core,
    /// An activation.
    Unary(Activation),
    /// A binary op; both operands already have the node's dtype.
    Binary(BinaryOp),
    /// A comparison of the exact values of two operands (any real dtypes); bool result.
    Compare(CmpOp),
    /// `[mask (bool), on_true, on_false]`, branches in the node's dtype.
    Where,
    /// Conversion from the operand's dtype to the node's dtype (oracle `Cast` rules).
    Cast,
    /// Round to an emulated float format (see `rlx_ir::FloatFormat`).
    RoundToFormat {
        /// Exponent bits.
        exp_bits: u32,
        /// Mantissa bits.
        man_bits: u32,
        /// Saturation bound.
        max_normal: f32,
    },
}

/// One node of an [`Expr`]: an op over earlier nodes, with its result dtype.
#[derive(Debug, Clone, PartialEq)]
pub struct ENode {
    /// What it computes.
    pub op: EOp,
    /// Operand node indices (earlier in the same expression).
    pub args: Vec<u32>,
    /// Result dtype (the IR node's dtype).
    pub dtype: DType,
}

/// An elementwise expression DAG in SSA form (operands precede users).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Expr {
    /// The nodes, in evaluation order.
    pub nodes: Vec<ENode>,
}

impl Expr {
    /// Append a node, returning its index.
    pub fn push(&mut self, op: EOp, args: Vec<u32>, dtype: DType) -> u32 {
        self.nodes.push(ENode { op, args, dtype });
        (self.nodes.len() - 1) as u32
    }

    /// True when the expression does no arithmetic (only loads, literals, the core).
    pub fn is_trivial(&self) -> bool {
        self.nodes
            .iter()
            .all(|n| matches!(n.op, EOp::Load(_) | EOp::Const(_) | EOp::Core))
    }

    /// Number of arithmetic nodes.
    pub fn op_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| !matches!(n.op, EOp::Load(_) | EOp::Const(_) | EOp::Core))
            .count()
    }
}

/// A value of an expression written to a buffer (dense, in the expression's space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store {
    /// Expression node stored.
    pub value: u32,
    /// Destination buffer.
    pub buf: BufId,
}

/// The row-wise ops a backend may implement whole (over the last axis).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RowOp {
    /// `exp(x − max) / Σ exp(x − max)`.
    Softmax,
    /// `x − max − ln Σ exp(x − max)`.
    LogSoftmax,
    /// `(x − mean)/√(var + eps)·γ + β`.
    LayerNorm {
        /// Added to the variance.
        eps: f32,
    },
    /// `x/√(mean(x²) + eps)·γ + β`.
    RmsNorm {
        /// Added to the mean square.
        eps: f32,
    },
}

impl RowOp {
    /// Short name.
    pub fn name(&self) -> &'static str {
        match self {
            RowOp::Softmax => "softmax",
            RowOp::LogSoftmax => "log_softmax",
            RowOp::LayerNorm { .. } => "layer_norm",
            RowOp::RmsNorm { .. } => "rms_norm",
        }
    }
}

/// What a kernel computes.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelKind {
    /// `expr` evaluated at every index of `space`; `stores` write results.
    Elementwise {
        /// Iteration space (the stored values' dims).
        space: Vec<Dim>,
        /// The expression.
        expr: Expr,
    },
    /// An axis reduction of `prologue[input]` (evaluated over `in_space`), then
    /// `epilogue` (over `out_space`, [`EOp::Core`] = the reduced value).
    Reduce {
        /// Sum, mean, max, min or prod.
        op: ReduceOp,
        /// `ArgMax` (op `Max`) / `ArgMin` (op `Min`): the result is the position along
        /// the one reduced axis of the first extremum (a NaN counts as the extremum, so
        /// the first NaN wins), encoded in `dtype` (the input's) as the oracle's
        /// `from_i64_as` does, instead of the extremum itself.
        arg: bool,
        /// Dims of the reduced tensor.
        in_space: Vec<Dim>,
        /// Reduced axes (sorted, non-empty).
        axes: Vec<usize>,
        /// Whether reduced axes stay as size 1 in `out_space`.
        keep_dim: bool,
        /// Expression of the reduced tensor.
        prologue: Expr,
        /// The prologue node that is reduced.
        input: u32,
        /// Dims of the result.
        out_space: Vec<Dim>,
        /// Dtype of the reduction's result (before the epilogue).
        dtype: DType,
        /// Expression over the result.
        epilogue: Expr,
    },
    /// A row op over the last axis of `space`.
    Row {
        /// Which op.
        op: RowOp,
        /// Dims of input and output.
        space: Vec<Dim>,
        /// Expression of the input.
        prologue: Expr,
        /// The prologue node that is the row op's input.
        input: u32,
        /// Loads of γ and β (in the `[C]` space) for the norms.
        params: Option<(usize, usize)>,
        /// Dtype of the row op's result.
        dtype: DType,
        /// Expression over the result.
        epilogue: Expr,
    },
    /// `[.., M, K] × [.., K, N]` with broadcast batch axes, then `epilogue`.
    Contraction {
        /// Load of the left operand (its view's dims are the operand's).
        a: usize,
        /// Load of the right operand.
        b: usize,
        /// Result dims `[batch.., M, N]`.
        out_space: Vec<Dim>,
        /// Dtype of the product.
        dtype: DType,
        /// Expression over the product.
        epilogue: Expr,
    },
    /// Fused attention (`Op::Attention`; inputs are loads of q, k, v (+ mask/bias)) or
    /// its fused backward (`Op::AttentionVjp`; the cotangent's load comes last).
    Attention {
        /// The op with its attributes.
        op: Op,
        /// Loads of q, k, v and the extra operand.
        inputs: Vec<usize>,
        /// Result dims.
        out_space: Vec<Dim>,
        /// Result dtype.
        dtype: DType,
        /// Expression over the result.
        epilogue: Expr,
    },
    /// Kernels that all work row by row over one `[R.., C]` space (row and column
    /// reductions, elementwise kernels over the space or its rows), run together a block
    /// of rows at a time so the operands are read once (see `fuse::rowgroup`).
    /// The stages run in order; the outer kernel's loads and stores list theirs.
    RowGroup {
        /// The `[R.., C]` space.
        space: Vec<Dim>,
        /// The stages (each a `Reduce` or `Elementwise` kernel with its own loads and
        /// stores), in dependency order.
        stages: Vec<Kernel>,
    },
    /// An op the backend runs whole on materialized operands.
    Opaque {
        /// The op.
        op: Op,
        /// Loads of the operands, in op order.
        inputs: Vec<usize>,
        /// Result type (possibly dynamic).
        out: Shape,
    },
}

/// One kernel: a core computation with its fused expressions, loads and stores.
#[derive(Debug, Clone, PartialEq)]
pub struct Kernel {
    /// What it computes.
    pub kind: KernelKind,
    /// Buffer reads (views of buffers), referenced by index.
    pub loads: Vec<Load>,
    /// Buffer writes (for `Opaque`, the single result buffer with `value` 0).
    pub stores: Vec<Store>,
    /// IR nodes of the compiled graph fused into this kernel (for `explain`).
    pub fused: Vec<NodeId>,
    /// Display names of the fused ops, in node order.
    pub fused_names: Vec<String>,
}

impl Kernel {
    /// A short label: `elementwise`, `reduce_sum`, `matmul`, `softmax`, `opaque(fft)`.
    pub fn label(&self) -> String {
        match &self.kind {
            KernelKind::Elementwise { .. } => "elementwise".into(),
            KernelKind::Reduce { op, arg: false, .. } => format!("reduce_{}", op.name()),
            KernelKind::Reduce { op, arg: true, .. } => format!("reduce_arg{}", op.name()),
            KernelKind::Row { op, .. } => op.name().into(),
            KernelKind::Contraction { .. } => "matmul".into(),
            KernelKind::Attention { op, .. } => op.name(),
            KernelKind::Opaque { op, .. } => format!("opaque({})", op.name()),
            KernelKind::RowGroup { .. } => "row_group".into(),
        }
    }

    /// Buffers read by this kernel.
    pub fn reads(&self) -> impl Iterator<Item = BufId> + '_ {
        self.loads.iter().map(|l| l.buf)
    }

    /// Buffers written by this kernel.
    pub fn writes(&self) -> impl Iterator<Item = BufId> + '_ {
        self.stores.iter().map(|s| s.buf)
    }
}

/// Static liveness of the arena buffers and the in-place decisions of the memory plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Liveness {
    /// Per buffer: `(first kernel writing it, last kernel reading it)`; `None` for
    /// buffers that are not arena temporaries.
    pub intervals: Vec<Option<(usize, usize)>>,
    /// `(temp, reused)`: `temp` is written in place over `reused`, which dies in the
    /// kernel that writes `temp` (an elementwise kernel reading it with an identity view).
    pub in_place: Vec<(BufId, BufId)>,
}

/// A compiled, backend-neutral program.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    /// The graph's name.
    pub name: String,
    /// Every buffer.
    pub buffers: Vec<Buffer>,
    /// Kernels in execution order.
    pub kernels: Vec<Kernel>,
    /// Per positional argument: its name and declared type.
    pub args: Vec<(String, Shape)>,
    /// Per graph output: the buffer holding it (outputs of the same node share one).
    pub outputs: Vec<BufId>,
    /// Liveness intervals and in-place decisions (sizes are bound per call).
    pub liveness: Liveness,
    /// Nodes of the compiled graph after simplification and decomposition.
    pub graph_nodes: usize,
    /// Bytes every intermediate node would take if each were materialized (static
    /// shapes only; `None` with dynamic dims).
    pub naive_bytes: Option<usize>,
    /// Run-time checks of the source graph's fixed-size requests against its dynamic
    /// dims (slice ranges, reshape counts, …). Backends call
    /// [`DimGuards::check`](rlx_ir::DimGuards::check) once per distinct binding,
    /// before any kernel runs.
    pub guards: rlx_ir::DimGuards,
    /// Fusion's decision about every elementwise value that several kernels read:
    /// recomputed in each or stored once, and why (see [`ShareCost`](sharing::ShareCost)).
    pub sharing: Vec<SharedValue>,
}

impl Program {
    /// True when some buffer has a dynamic dim.
    pub fn is_dynamic(&self) -> bool {
        self.buffers.iter().any(|b| !b.shape.is_static())
            || self.args.iter().any(|(_, s)| !s.is_static())
    }

    /// Concrete dims and byte sizes of every buffer under `binding`, checked: an
    /// unbound symbol, a byte size past [`rlx_ir::MAX_TENSOR_BYTES`], or buffers whose
    /// sizes (each rounded up to 64 bytes) add up past it are errors naming the
    /// buffer, its type and the sizes — so no arena offset computed from them can
    /// overflow. Backends call this after [`rlx_ir::DimGuards::check`].
    pub fn bound_buffers(&self, binding: &DimBinding) -> IrResult<(Vec<Vec<usize>>, Vec<usize>)> {
        let mut dims = Vec::with_capacity(self.buffers.len());
        let mut bytes = Vec::with_capacity(self.buffers.len());
        let mut total = 0usize;
        for (i, b) in self.buffers.iter().enumerate() {
            let d = concrete(b.shape.dims(), binding).ok_or_else(|| {
                IrError::new(
                    "bind",
                    format!(
                        "graph `{}`: buffer {i} of type {} has a dynamic dim that no argument binds",
                        self.name, b.shape
                    ),
                )
            })?;
            let n = rlx_ir::checked_bytes(d.iter().copied(), b.shape.dtype());
            let sum = n.and_then(|n| total.checked_add(n.div_ceil(64).saturating_mul(64)));
            let (Some(n), Some(sum)) = (n, sum.filter(|&t| t <= rlx_ir::MAX_TENSOR_BYTES)) else {
                return Err(IrError::new(
                    "bind",
                    format!(
                        "graph `{}`: buffer {i} of type {} is {d:?} with {}, and the program's buffers would take more than {} bytes; use smaller inputs",
                        self.name,
                        b.shape,
                        binding,
                        rlx_ir::MAX_TENSOR_BYTES
                    ),
                ));
            };
            total = sum;
            bytes.push(n);
            dims.push(d);
        }
        Ok((dims, bytes))
    }

    /// Concrete dims of buffer `b` under `binding`, or `None` when a symbol is unbound.
    pub fn buffer_dims(&self, b: BufId, binding: &DimBinding) -> Option<Vec<usize>> {
        concrete(self.buffers[b].shape.dims(), binding)
    }
}

/// Concrete sizes of `dims` under `binding`.
pub fn concrete(dims: &[Dim], binding: &DimBinding) -> Option<Vec<usize>> {
    dims.iter().map(|d| d.resolve(binding)).collect()
}

/// The compute class a dtype is evaluated in by elementwise kernels: `F32` for
/// f32/f16/bf16, `F64` for f64, `I64` for integers and bool. `None` for complex.
pub fn compute_class(dt: DType) -> Option<DType> {
    match dt {
        DType::F32 | DType::F16 | DType::BF16 => Some(DType::F32),
        DType::F64 => Some(DType::F64),
        DType::C64 | DType::C128 => None,
        _ => Some(DType::I64),
    }
}

#[cfg(test)]
mod tests {
    use crate::{CompileOptions, compile};
    use rlx_ir::{Activation, DType, Dim, DimBinding, Graph, Op, Shape};

    /// `relu` of a `[?0, 2^40]` f32 input: fine to trace, too large for most bindings.
    fn wide_dynamic_program() -> super::Program {
        let mut g = Graph::new("wide");
        let x = g.input(
            "x",
            Shape::from_dims(&[Dim::Dynamic(0), Dim::Static(1 << 40)], DType::F32),
        );
        let y = g.add_op(Op::Activation(Activation::Relu), vec![x]).unwrap();
        g.set_outputs(vec![y]);
        compile(&g, &CompileOptions::default()).unwrap()
    }

    #[test]
    fn bound_buffers_rejects_sizes_that_overflow_and_unbound_symbols() {
        let p = wide_dynamic_program();
        let (dims, bytes) = p.bound_buffers(&[(0, 2)].into_iter().collect()).unwrap();
        assert!(dims.iter().all(|d| d == &vec![2, 1 << 40]), "{dims:?}");
        assert!(bytes.iter().all(|&b| b == 8 << 40), "{bytes:?}");
        // 2^30 rows of 2^42 bytes overflow the byte count.
        let e = p
            .bound_buffers(&[(0, 1 << 30)].into_iter().collect())
            .unwrap_err();
        assert!(e.message.contains("?0 = 1073741824"), "{e}");
        assert!(e.message.contains("more than"), "{e}");
        // Two buffers of 2^62 bytes each fit alone but not together.
        let e = p
            .bound_buffers(&[(0, 1 << 20)].into_iter().collect())
            .unwrap_err();
        assert!(e.message.contains("more than"), "{e}");
        let e = p.bound_buffers(&DimBinding::new()).unwrap_err();
        assert!(e.message.contains("no argument binds"), "{e}");
    }
}
