//! Runtime errors.

use rlx_ir::IrErrorKind;
use std::fmt;

/// What kind of failure a [`RuntimeError`] reports.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RuntimeErrorKind {
    /// The graph could not be compiled for the device (the default).
    Compile,
    /// A compiled program failed while running.
    Run,
    /// The device is not built in, has no driver, or was not found.
    DeviceUnavailable,
    /// An allocation failed.
    OutOfMemory,
    /// An input or param name the graph does not declare.
    UnknownName,
    /// Data of the wrong shape or length, or a dynamic dim bound to a size that does not fit.
    Shape,
    /// Data of the wrong element type.
    DType,
    /// Something valid that this backend does not implement.
    Unsupported,
}

/// A failure to compile or run a graph: names the device, the op or input, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeError {
    message: String,
    kind: RuntimeErrorKind,
}

impl RuntimeError {
    /// An error with this message, of kind [`RuntimeErrorKind::Compile`].
    pub fn new(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::Compile, message)
    }

    /// An error of the given kind.
    pub fn of_kind(kind: RuntimeErrorKind, message: impl Into<String>) -> RuntimeError {
        RuntimeError {
            message: message.into(),
            kind,
        }
    }

    /// A failure while running a compiled program.
    pub fn run(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::Run, message)
    }

    /// A device that is not built in, has no driver, or was not found.
    pub fn device_unavailable(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::DeviceUnavailable, message)
    }

    /// An allocation that failed.
    pub fn out_of_memory(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::OutOfMemory, message)
    }

    /// An input or param name the graph does not declare.
    pub fn unknown_name(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::UnknownName, message)
    }

    /// Data of the wrong shape or length.
    pub fn shape(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::Shape, message)
    }

    /// Data of the wrong element type.
    pub fn dtype(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::DType, message)
    }

    /// Something valid that this backend does not implement.
    pub fn unsupported(message: impl Into<String>) -> RuntimeError {
        RuntimeError::of_kind(RuntimeErrorKind::Unsupported, message)
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> RuntimeErrorKind {
        self.kind
    }
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RuntimeError {}

impl From<rlx_ir::IrError> for RuntimeError {
    fn from(e: rlx_ir::IrError) -> Self {
        let kind = match e.kind {
            IrErrorKind::DType => RuntimeErrorKind::DType,
            IrErrorKind::OutOfMemory => RuntimeErrorKind::OutOfMemory,
            IrErrorKind::Unsupported => RuntimeErrorKind::Unsupported,
            IrErrorKind::Graph => RuntimeErrorKind::Compile,
            // Shape errors and any kind added later.
            _ => RuntimeErrorKind::Shape,
        };
        RuntimeError::of_kind(kind, e.to_string())
    }
}

/// `Result` with [`RuntimeError`].
pub type RuntimeResult<T> = Result<T, RuntimeError>;
