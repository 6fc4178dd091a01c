//! Rebuilding a graph node by node with an old → new id map (shared by the passes).

use rlx_ir::{Graph, NodeId};

/// A graph under construction from a source graph.
pub(crate) struct Rebuild<'a> {
    src: &'a Graph,
    /// The new graph.
    pub(crate) g: Graph,
    map: Vec<Option<NodeId>>,
}

impl<'a> Rebuild<'a> {
    pub(crate) fn new(src: &'a Graph) -> Rebuild<'a> {
        Rebuild {
            src,
            g: Graph::new(src.name.clone()),
            map: vec![None; src.len()],
        }
    }

    /// The new id of source node `old` (which must have been mapped).
    pub(crate) fn map(&self, old: NodeId) -> NodeId {
        self.map[old.index()].expect("operands are rebuilt before their users")
    }

    /// Record that source node `old` is now `new`.
    pub(crate) fn set(&mut self, old: NodeId, new: NodeId) {
        self.map[old.index()] = Some(new);
    }

    /// The finished graph with the source's outputs mapped.
    pub(crate) fn finish(mut self) -> Graph {
        let outs = self.src.outputs.iter().map(|&o| self.map(o)).collect();
        self.g.set_outputs(outs);
        self.g
    }
}
