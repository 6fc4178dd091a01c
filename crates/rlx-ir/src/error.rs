//! Errors raised while building, checking, or interpreting graphs.

use crate::NodeId;
use std::fmt;

/// A malformed graph or a bad op application: names the op, the shapes, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrError {
    /// The op's name (`"matmul"`), or the phase (`"verify"`, `"interp"`).
    pub op: String,
    /// The node concerned, when known.
    pub node: Option<NodeId>,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl IrError {
    /// An error about `op`.
    pub fn new(op: impl Into<String>, message: impl Into<String>) -> IrError {
        IrError {
            op: op.into(),
            node: None,
            message: message.into(),
        }
    }

    /// The same error, attached to node `id`.
    pub fn at(mut self, id: NodeId) -> IrError {
        self.node = Some(id);
        self
    }
}

impl fmt::Display for IrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.message)?;
        if let Some(n) = self.node {
            write!(f, " (at node {n})")?;
        }
        Ok(())
    }
}

impl std::error::Error for IrError {}

/// Shorthand for results in this crate.
pub type IrResult<T> = Result<T, IrError>;
