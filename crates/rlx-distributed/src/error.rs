//! The error type of this crate.

use std::fmt;

/// An error of a distributed operation: the message names the operation, the rank and,
/// where one is involved, the param, and says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistError {
    message: String,
}

impl DistError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> DistError {
        DistError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DistError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DistError {}

impl From<rlx_tensor::Error> for DistError {
    fn from(e: rlx_tensor::Error) -> DistError {
        DistError::new(e.to_string())
    }
}

/// `Result` with [`DistError`].
pub type Result<T> = std::result::Result<T, DistError>;
