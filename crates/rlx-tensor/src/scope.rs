//! Graph building with named inputs and params: [`GraphScope`], [`graph`], [`graph_with`].

use crate::tensor::{GraphCell, Tensor};
use rlx_ir::{DType, Dim, Graph, NodeId, Op, Shape, TensorData};
use std::sync::Arc;

/// Owns a graph while you build symbolic tensors in it.
///
/// `Send + Sync`, like the tensors built in it: a scope and its tensors may be moved into
/// another thread to finish the graph there.
///
/// ```
/// use rlx_tensor::{shape, GraphScope};
/// let mut s = GraphScope::new("affine");
/// let x = s.input("x", shape![2, 3]);
/// let w = s.param("w", shape![3, 4]);
/// let y = x.matmul(&w);
/// s.set_outputs([&y]);
/// let g = s.finish();
/// assert_eq!(g.outputs.len(), 1);
/// ```
pub struct GraphScope {
    pub(crate) cell: Arc<GraphCell>,
    next_symbol: u32,
}

impl GraphScope {
    /// A scope over a new, empty graph.
    pub fn new(name: impl Into<String>) -> GraphScope {
        GraphScope {
            cell: GraphCell::new(Graph::new(name)),
            next_symbol: 0,
        }
    }

    /// A copy of the graph built so far.
    pub fn graph(&self) -> Graph {
        self.cell.state().graph.clone()
    }

    /// A fresh dynamic-dim symbol (0, 1, 2, … per scope).
    pub fn fresh_symbol(&mut self) -> u32 {
        let s = self.next_symbol;
        self.next_symbol += 1;
        s
    }

    fn leaf(&mut self, op: Op, shape: Shape) -> Tensor {
        for d in shape.dims() {
            if let Dim::Dynamic(s) = d {
                self.next_symbol = self.next_symbol.max(s + 1);
            }
        }
        let name = match &op {
            Op::Input { name } | Op::Param { name } => name.clone(),
            _ => unreachable!(),
        };
        let kind = match op {
            Op::Input { .. } => "input",
            _ => "param",
        };
        if let Err(why) = crate::func::check_declared_name(kind, &name) {
            panic!("GraphScope: {why}");
        }
        if let Err(why) = shape.check_size() {
            panic!(
                "GraphScope: {} `{name}`: {why}; declare a smaller shape",
                op.name()
            );
        }
        let mut st = self.cell.state_mut();
        // Inputs and params share one namespace: both are bound by name at run time.
        let existing = st
            .graph
            .input_id(&name)
            .or_else(|| st.graph.param_id(&name));
        if let Some(id) = existing {
            drop(st);
            panic!(
                "GraphScope: {} `{name}` is already declared (node {id}); every input and param needs a unique name",
                op.name()
            );
        }
        let id = st.graph.append_node(op, vec![], shape, Some(name));
        drop(st);
        Tensor::from_parts(self.cell.clone(), id)
    }

    /// Declare a runtime input.
    #[track_caller]
    pub fn input(&mut self, name: impl Into<String>, shape: impl Into<Shape>) -> Tensor {
        self.leaf(Op::Input { name: name.into() }, shape.into())
    }

    /// Declare a trainable parameter.
    #[track_caller]
    pub fn param(&mut self, name: impl Into<String>, shape: impl Into<Shape>) -> Tensor {
        self.leaf(Op::Param { name: name.into() }, shape.into())
    }

    /// Declare an input with explicit (possibly dynamic) dims and dtype.
    #[track_caller]
    pub fn input_dyn(&mut self, name: impl Into<String>, dims: &[Dim], dtype: DType) -> Tensor {
        self.input(name, Shape::from_dims(dims, dtype))
    }

    /// A rank-0 f32 constant.
    pub fn scalar(&mut self, value: f64) -> Tensor {
        self.constant(value, DType::F32)
    }

    /// A rank-0 constant of `dtype`.
    pub fn constant(&mut self, value: f64, dtype: DType) -> Tensor {
        let data = TensorData::from_f64_as(dtype, &[], &[value]);
        self.push_constant(data)
    }

    /// An n-d constant of `dtype` from f64 values (rounded/truncated into the dtype).
    /// Panics when `data.len()` is not the product of `dims`.
    #[track_caller]
    pub fn constant_nd(&mut self, data: Vec<f64>, dims: Vec<usize>, dtype: DType) -> Tensor {
        let n: usize = dims.iter().product();
        assert_eq!(
            n,
            data.len(),
            "GraphScope::constant_nd: {} values do not fill dims {dims:?} ({n} elements)",
            data.len()
        );
        self.push_constant(TensorData::from_f64_as(dtype, &dims, &data))
    }

    fn push_constant(&mut self, data: TensorData) -> Tensor {
        let shape = data.shape();
        let id =
            self.cell
                .state_mut()
                .graph
                .add_node(Op::Constant { data: data.bytes }, vec![], shape);
        Tensor::from_parts(self.cell.clone(), id)
    }

    /// Trace `body` once into a standalone graph and emit one `Op::Scan` that applies it
    /// `length` times: `carry ← body(carry, bcasts)`. The result has `init`'s type.
    #[track_caller]
    pub fn scan_block(
        &mut self,
        init: &Tensor,
        bcasts: &[&Tensor],
        length: u32,
        body: impl FnOnce(&Tensor, &[Tensor]) -> Tensor,
    ) -> Tensor {
        let mut inner = GraphScope::new(format!("{}_scan_body", self.cell.state().graph.name));
        let carry = inner.input("carry", init.shape());
        let bs: Vec<Tensor> = bcasts
            .iter()
            .enumerate()
            .map(|(i, b)| inner.input(format!("bcast_{i}"), b.shape()))
            .collect();
        let out = body(&carry, &bs);
        let adopted = inner.adopt_output(&out);
        inner.set_outputs([adopted]);
        let body_graph = inner.finish();
        let allowed: Vec<String> = std::iter::once("carry".to_string())
            .chain((0..bcasts.len()).map(|i| format!("bcast_{i}")))
            .collect();
        for name in body_graph
            .input_names()
            .into_iter()
            .chain(body_graph.param_names())
        {
            assert!(
                allowed.iter().any(|a| a == name),
                "scan_block: the body reads `{name}` from the enclosing graph; pass it through `bcasts` instead"
            );
        }
        let anchor = Tensor::from_parts(self.cell.clone(), self.own(init));
        let mut inputs: Vec<&Tensor> = vec![init];
        inputs.extend_from_slice(bcasts);
        anchor.apply(
            Op::Scan {
                body: Box::new(body_graph),
                length,
                save_trajectory: false,
                num_bcast: bcasts.len() as u32,
                num_xs: 0,
                num_checkpoints: 0,
            },
            &inputs,
        )
    }

    fn adopt_output(&self, t: &Tensor) -> NodeId {
        let anchor = Tensor::from_parts(self.cell.clone(), NodeId(0));
        match anchor.adopt(t) {
            Ok(id) => id,
            Err(e) => panic!("{e}"),
        }
    }

    /// Concatenate tensors of this scope's graph along `axis` (no adoption: the ids are
    /// used as they are, so every tensor must already live in this scope's graph).
    #[track_caller]
    pub fn cat(&mut self, tensors: &[&Tensor], axis: usize) -> Tensor {
        for (i, t) in tensors.iter().enumerate() {
            assert!(
                Arc::ptr_eq(&t.cell, &self.cell),
                "GraphScope::cat: tensor {i} lives in another graph; use rlx_tensor::cat, which merges graphs"
            );
        }
        let Some(first) = tensors.first() else {
            panic!("GraphScope::cat: needs at least one tensor");
        };
        first.apply(Op::Concat { axis }, tensors)
    }

    /// Set the graph outputs (tensors or node ids).
    pub fn set_outputs(&mut self, outputs: impl IntoIterator<Item = impl Into<NodeId>>) {
        let outs = outputs.into_iter().map(Into::into).collect();
        self.cell.state_mut().graph.set_outputs(outs);
    }

    /// A copy of the finished graph.
    pub fn finish(self) -> Graph {
        self.graph()
    }

    /// Make `t` a node of this scope's graph (copying its history in if it lives elsewhere).
    pub(crate) fn own(&self, t: &Tensor) -> NodeId {
        self.adopt_output(t)
    }
}

/// Build a single-output graph from a closure.
///
/// ```
/// use rlx_tensor::{graph, shape};
/// let g = graph("mlp", |g| {
///     let x = g.input("x", shape![2, 4]);
///     let w = g.param("w", shape![4, 3]);
///     x.matmul(&w).gelu()
/// });
/// assert_eq!(g.outputs.len(), 1);
/// ```
pub fn graph<F: FnOnce(&mut GraphScope) -> Tensor>(name: impl Into<String>, build: F) -> Graph {
    let mut s = GraphScope::new(name);
    let out = build(&mut s);
    let id = s.own(&out);
    s.set_outputs([id]);
    s.finish()
}

/// Build a graph and return extra data from the closure; the closure sets the outputs.
pub fn graph_with<F: FnOnce(&mut GraphScope) -> R, R>(
    name: impl Into<String>,
    build: F,
) -> (Graph, R) {
    let mut s = GraphScope::new(name);
    let r = build(&mut s);
    (s.finish(), r)
}
