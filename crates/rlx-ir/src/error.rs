//! Errors raised while building, checking, or interpreting graphs.

use crate::NodeId;
use std::fmt;

/// What kind of mistake an [`IrError`] reports, for code that reacts differently to each.
///
/// ```
/// use rlx_ir::{DType, IrErrorKind, Op, Shape, infer_shape};
/// let a = Shape::new(&[2, 3], DType::F32);
/// let b = Shape::new(&[3, 4], DType::I64);
/// let e = infer_shape(&Op::MatMul, &[&a, &b]).unwrap_err();
/// assert_eq!(e.kind, IrErrorKind::DType);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IrErrorKind {
    /// An op applied to operands whose shapes, axes or arity do not fit it (the default).
    Shape,
    /// An operand of the wrong element type.
    DType,
    /// A value too large to allocate.
    OutOfMemory,
    /// A malformed graph: a dangling input, a cycle, a recorded shape that disagrees with the op.
    Graph,
    /// Something valid that this crate does not implement yet.
    Unsupported,
}

/// A malformed graph or a bad op application: names the op, the shapes, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrError {
    /// The op's name (`"matmul"`), or the phase (`"verify"`, `"interp"`).
    pub op: String,
    /// The node concerned, when known.
    pub node: Option<NodeId>,
    /// What is wrong and how to fix it.
    pub message: String,
    /// What kind of mistake it is.
    pub kind: IrErrorKind,
}

impl IrError {
    /// An error about `op` of kind [`IrErrorKind::Shape`].
    pub fn new(op: impl Into<String>, message: impl Into<String>) -> IrError {
        IrError::of_kind(IrErrorKind::Shape, op, message)
    }

    /// An error about `op` of the given kind.
    pub fn of_kind(
        kind: IrErrorKind,
        op: impl Into<String>,
        message: impl Into<String>,
    ) -> IrError {
        IrError {
            op: op.into(),
            node: None,
            message: message.into(),
            kind,
        }
    }

    /// An operand of the wrong element type.
    pub fn dtype(op: impl Into<String>, message: impl Into<String>) -> IrError {
        IrError::of_kind(IrErrorKind::DType, op, message)
    }

    /// A value too large to allocate.
    pub fn out_of_memory(op: impl Into<String>, message: impl Into<String>) -> IrError {
        IrError::of_kind(IrErrorKind::OutOfMemory, op, message)
    }

    /// A malformed graph.
    pub fn graph(op: impl Into<String>, message: impl Into<String>) -> IrError {
        IrError::of_kind(IrErrorKind::Graph, op, message)
    }

    /// Something this crate does not implement yet.
    pub fn unsupported(op: impl Into<String>, message: impl Into<String>) -> IrError {
        IrError::of_kind(IrErrorKind::Unsupported, op, message)
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
