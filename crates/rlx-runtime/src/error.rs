//! Runtime errors.

use std::fmt;

/// A failure to compile or run a graph: names the device, the op or input, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeError {
    message: String,
}

impl RuntimeError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> RuntimeError {
        RuntimeError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
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
        RuntimeError::new(e.to_string())
    }
}

/// `Result` with [`RuntimeError`].
pub type RuntimeResult<T> = Result<T, RuntimeError>;
