//! The compiler pipeline: simplify → decompose → simplify → fuse → schedule → memplan.

use crate::program::Program;
use crate::{decompose, fuse, memplan, schedule, simplify};
use rlx_ir::{Graph, IrError, Op};
use std::time::Instant;

/// What the backend tells the compiler.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileOptions {
    /// Names (as `Op::name`) of high-level ops the backend implements whole, so
    /// `decompose` leaves them (e.g. `"softmax"`, `"layer_norm"`, `"attention"`).
    pub keep_whole: Vec<String>,
    /// Fuse elementwise chains into their consumers (off: one kernel per node, useful
    /// for debugging a backend).
    pub fuse: bool,
    /// Let one elementwise kernel store several results: a graph output whose value
    /// flows only into one other kernel of its own space is computed and stored by that
    /// kernel (e.g. an optimizer's new moments and new param in one pass over the
    /// gradient), and a contraction may absorb such a kernel as a multi-store epilogue.
    /// Off by default: only backends whose elementwise and contraction kernels honour
    /// every entry of [`crate::program::Kernel::stores`] turn it on.
    pub multi_store: bool,
    /// Fuse kernels that work row by row over one space (a normalization's backward)
    /// into one [`crate::program::KernelKind::RowGroup`] kernel (see
    /// [`crate::fuse::rowgroup`]). Off by default: only backends that run row groups
    /// turn it on.
    pub row_groups: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            keep_whole: Vec::new(),
            fuse: true,
            multi_store: false,
            row_groups: false,
        }
    }
}

/// Compile `graph` into a backend-neutral [`Program`].
///
/// The program's arguments are the graph's `Input`/`Param` nodes in node order (the
/// order of `rlx_runtime::arg_order`), whether or not the outputs use them.
///
/// ```
/// use rlx_compile::{compile, CompileOptions};
/// use rlx_ir::{Activation, BinaryOp, DType, Graph, Op, Shape};
/// let mut g = Graph::new("w1");
/// let a = g.input("a", Shape::new(&[1024], DType::F32));
/// let b = g.input("b", Shape::new(&[1024], DType::F32));
/// let s = g.add_op(Op::Binary(BinaryOp::Add), vec![a, b]).unwrap();
/// let r = g.add_op(Op::Activation(Activation::Relu), vec![s]).unwrap();
/// let e = g.add_op(Op::Activation(Activation::Exp), vec![r]).unwrap();
/// g.set_outputs(vec![e]);
/// let p = compile(&g, &CompileOptions::default()).unwrap();
/// assert_eq!(p.kernels.len(), 1, "one fused kernel, no intermediate buffers");
/// ```
pub fn compile(graph: &Graph, opts: &CompileOptions) -> Result<Program, IrError> {
    let args = graph
        .nodes()
        .iter()
        .filter_map(|n| match &n.op {
            Op::Input { name } | Op::Param { name } => Some((name.clone(), n.shape.clone())),
            _ => None,
        })
        .collect::<Vec<_>>();
    let _compile = tracing::debug_span!(
        target: "rlx::compile",
        "compile",
        graph = %graph.name,
        nodes = graph.len()
    )
    .entered();
    let start = Instant::now();
    let g = phase("simplify", || simplify::simplify(graph));
    let g = phase("decompose", || decompose::decompose(&g, &opts.keep_whole))?;
    let g = phase("simplify", || simplify::simplify(&g));
    let mut p = phase("fuse", || fuse::fuse(&g, &args, opts))?;
    phase("schedule", || schedule::schedule(&mut p));
    p.liveness = phase("memplan", || memplan::liveness(&p));
    // From the graph as the user traced it: a narrow that simplification folds away
    // still promised to read rows the run-time data must have.
    p.guards = rlx_ir::DimGuards::from_graph(graph);
    tracing::debug!(
        target: "rlx::compile",
        kernels = p.kernels.len(),
        buffers = p.buffers.len(),
        elapsed_us = start.elapsed().as_micros() as u64,
        "compiled {} nodes into {} kernels",
        graph.len(),
        p.kernels.len()
    );
    Ok(p)
}

/// Runs one compiler phase inside a debug span of target `rlx::compile` and reports its
/// duration as an event when it ends, so a subscriber that does not time spans (the
/// default fmt layer) still shows where compile time goes.
fn phase<T>(name: &'static str, f: impl FnOnce() -> T) -> T {
    let span = tracing::debug_span!(target: "rlx::compile", "phase", name);
    let _entered = span.enter();
    let start = Instant::now();
    let out = f();
    tracing::debug!(
        target: "rlx::compile",
        phase = name,
        elapsed_us = start.elapsed().as_micros() as u64,
        "{name} took {:?}",
        start.elapsed()
    );
    out
}
