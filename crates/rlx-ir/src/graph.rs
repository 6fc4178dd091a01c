//! Graphs of nodes.

use crate::{Op, Shape};
use std::fmt;

/// Stable identifier of a node: its dense insertion index in the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index into [`Graph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Where a node was created in user code (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NodeOrigin {
    pub file: &'static str,
    pub line: u32,
    pub column: u32,
}

impl NodeOrigin {
    /// The caller's location (through `#[track_caller]` frames).
    #[track_caller]
    pub fn caller() -> NodeOrigin {
        let loc = std::panic::Location::caller();
        NodeOrigin {
            file: loc.file(),
            line: loc.line(),
            column: loc.column(),
        }
    }
}

impl fmt::Display for NodeOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// One node: an op applied to earlier nodes, with its result type.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub id: NodeId,
    pub op: Op,
    pub inputs: Vec<NodeId>,
    pub shape: Shape,
    pub name: Option<String>,
    pub origin: Option<NodeOrigin>,
}

/// A computation graph: nodes in topological (insertion) order plus the output list.
///
/// ```
/// use rlx_ir::{BinaryOp, DType, Graph, Op, Shape};
/// let mut g = Graph::new("add");
/// let a = g.input("a", Shape::new(&[3], DType::F32));
/// let b = g.input("b", Shape::new(&[3], DType::F32));
/// let c = g.add_op(Op::Binary(BinaryOp::Add), vec![a, b]).unwrap();
/// g.set_outputs(vec![c]);
/// assert_eq!(g.len(), 3);
/// assert!(g.to_string().contains("%2 = add(%0, %1)"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub outputs: Vec<NodeId>,
    nodes: Vec<Node>,
}

impl PartialEq for Graph {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.nodes.len() == other.nodes.len()
            && self.outputs == other.outputs
    }
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph {
            name: name.into(),
            outputs: Vec::new(),
            nodes: Vec::new(),
        }
    }

    /// Remove every node and the output list, keeping the name and the node storage: a
    /// graph reused for a new expression (eager code builds one per constant) allocates
    /// nothing for its first nodes.
    ///
    /// ```
    /// use rlx_ir::{DType, Graph, Shape};
    /// let mut g = Graph::new("reused");
    /// let x = g.input("x", Shape::new(&[2], DType::F32));
    /// g.set_outputs(vec![x]);
    /// g.clear();
    /// assert!(g.is_empty() && g.outputs.is_empty() && g.name == "reused");
    /// ```
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.outputs.clear();
    }

    /// [`Graph::clear`] that lets `reuse` take storage out of each node first, in
    /// insertion order: a caller that rebuilds graphs at a high rate (eager code) keeps
    /// the nodes' input lists and constant payloads (`std::mem::take`) for its next
    /// nodes instead of freeing them. The nodes are visited in place (a node is large;
    /// moving each out would copy it).
    ///
    /// ```
    /// use rlx_ir::{DType, Graph, Op, Shape};
    /// let mut g = Graph::new("reused");
    /// g.add_node(Op::Constant { data: vec![0; 8] }, vec![], Shape::new(&[2], DType::F32));
    /// let mut kept = Vec::new();
    /// g.clear_with(|n| {
    ///     if let Op::Constant { data } = &mut n.op {
    ///         kept.push(std::mem::take(data));
    ///     }
    /// });
    /// assert!(g.is_empty() && kept[0].capacity() >= 8);
    /// ```
    pub fn clear_with(&mut self, reuse: impl FnMut(&mut Node)) {
        self.outputs.clear();
        self.nodes.iter_mut().for_each(reuse);
        self.nodes.clear();
    }

    /// Number of nodes.
    #[inline]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// True when the graph has no node.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// All nodes in topological order.
    #[inline]
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Node `id`; panics if it is not in this graph.
    // `#[inline]` on this and the other small accessors and appenders: they are called
    // from other crates on every eager op and read, where a call (and, for the
    // appenders, a copy of the node per call level) cost more than the work.
    #[inline]
    #[track_caller]
    pub fn node(&self, id: NodeId) -> &Node {
        match self.nodes.get(id.index()) {
            Some(n) => n,
            None => self.no_such_node(id),
        }
    }

    /// The panic of [`Graph::node`], out of line (the inlined fast path stays small).
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn no_such_node(&self, id: NodeId) -> ! {
        panic!(
            "Graph `{}`: node {id} does not exist (the graph has {} nodes) — was this id taken from another graph?",
            self.name,
            self.nodes.len()
        )
    }

    /// Node `id`, or `None` when out of range.
    #[inline]
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// Mutable node `id`.
    #[track_caller]
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        // The name is read only on the panic path (cloning it up front cost every call).
        let len = self.nodes.len();
        match self.nodes.get_mut(id.index()) {
            Some(n) => n,
            None => panic!(
                "Graph `{}`: node {id} does not exist (the graph has {len} nodes)",
                self.name
            ),
        }
    }

    /// Result type of node `id`.
    #[inline]
    #[track_caller]
    pub fn shape(&self, id: NodeId) -> &Shape {
        &self.node(id).shape
    }

    /// Replace the output list.
    pub fn set_outputs(&mut self, outputs: Vec<NodeId>) {
        self.outputs = outputs;
    }

    /// Append a node with an explicit result type (no checking; see [`Graph::add_op`]).
    #[inline]
    pub fn add_node(&mut self, op: Op, inputs: Vec<NodeId>, shape: Shape) -> NodeId {
        self.append_node(op, inputs, shape, None)
    }

    /// Append a node with an explicit result type and an optional name.
    #[inline]
    pub fn append_node(
        &mut self,
        op: Op,
        inputs: Vec<NodeId>,
        shape: Shape,
        name: Option<String>,
    ) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(Node {
            id,
            op,
            inputs,
            shape,
            name,
            origin: None,
        });
        id
    }

    /// Append an `Op::Input` named `name`.
    pub fn input(&mut self, name: impl Into<String>, shape: Shape) -> NodeId {
        let name = name.into();
        self.append_node(Op::Input { name: name.clone() }, vec![], shape, Some(name))
    }

    /// Append an `Op::Param` named `name`.
    pub fn param(&mut self, name: impl Into<String>, shape: Shape) -> NodeId {
        let name = name.into();
        self.append_node(Op::Param { name: name.clone() }, vec![], shape, Some(name))
    }

    /// Ids of the nodes that read `id`, in node order; a node that reads `id` in
    /// several operand slots is listed once (see [`Graph::use_count`] for slots).
    pub fn users(&self, id: NodeId) -> Vec<NodeId> {
        self.nodes
            .iter()
            .filter(|n| n.inputs.contains(&id))
            .map(|n| n.id)
            .collect()
    }

    /// How many input slots (plus graph outputs) read `id`.
    pub fn use_count(&self, id: NodeId) -> usize {
        let in_nodes: usize = self
            .nodes
            .iter()
            .map(|n| n.inputs.iter().filter(|&&i| i == id).count())
            .sum();
        in_nodes + self.outputs.iter().filter(|&&o| o == id).count()
    }

    /// The `Op::Input` named `name`.
    pub fn input_id(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|n| matches!(&n.op, Op::Input { name: m } if m == name))
            .map(|n| n.id)
    }

    /// The `Op::Param` named `name`.
    pub fn param_id(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|n| matches!(&n.op, Op::Param { name: m } if m == name))
            .map(|n| n.id)
    }

    /// The first node whose `name` is `name`.
    pub fn node_id_by_name(&self, name: &str) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|n| n.name.as_deref() == Some(name))
            .map(|n| n.id)
    }

    /// Names of every `Op::Input`, in node order.
    pub fn input_names(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::Input { name } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Names of every `Op::Param`, in node order.
    pub fn param_names(&self) -> Vec<&str> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::Param { name } => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Set the user-code origin of a node.
    #[inline]
    pub fn set_origin(&mut self, id: NodeId, origin: NodeOrigin) {
        self.node_mut(id).origin = Some(origin);
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "graph {} {{", self.name)?;
        for n in &self.nodes {
            write!(f, "  {} = {}", n.id, n.op.name())?;
            let args: Vec<String> = n.inputs.iter().map(|i| i.to_string()).collect();
            write!(f, "({})", args.join(", "))?;
            let attrs = crate::display::op_attributes(&n.op);
            if !attrs.is_empty() {
                write!(f, " {{{attrs}}}")?;
            }
            write!(f, " : {}", n.shape)?;
            if let Some(name) = &n.name {
                write!(f, "  // {name}")?;
            }
            writeln!(f)?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|o| o.to_string()).collect();
        writeln!(f, "  return {}", outs.join(", "))?;
        write!(f, "}}")
    }
}

#[cfg(test)]
mod tests {
    use crate::{Activation, BinaryOp, DType, Graph, NodeId, Op, Shape};

    /// A cleared graph holds nothing of its earlier nodes or outputs: new nodes are
    /// numbered from 0, ids past them are absent, and lookups by name find only the
    /// new inputs.
    #[test]
    fn a_cleared_graph_has_no_stale_nodes_or_outputs() {
        let mut g = Graph::new("g");
        let a = g.input("a", Shape::new(&[2, 3], DType::F32));
        let b = g.input("b", Shape::new(&[2, 3], DType::F32));
        let c = g.add_op(Op::Binary(BinaryOp::Mul), vec![a, b]).unwrap();
        let d = g.add_op(Op::Activation(Activation::Relu), vec![c]).unwrap();
        g.set_outputs(vec![c, d]);
        g.clear();
        assert_eq!((g.len(), g.outputs.len(), g.name.as_str()), (0, 0, "g"));
        let x = g.input("x", Shape::new(&[4], DType::F64));
        assert_eq!(x, NodeId(0));
        assert!(g.get(NodeId(1)).is_none() && g.input_id("a").is_none());
        assert_eq!(g.input_names(), vec!["x"]);
        assert_eq!(g.shape(x), &Shape::new(&[4], DType::F64));
        assert!(g.users(x).is_empty());
        // Printed exactly as a fresh graph with the same one input.
        let mut fresh = Graph::new("g");
        fresh.input("x", Shape::new(&[4], DType::F64));
        assert_eq!(g.to_string(), fresh.to_string());
    }
}
