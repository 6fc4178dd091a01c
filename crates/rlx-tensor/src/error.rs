//! The error type of the `try_` methods.

use std::fmt;

/// What went wrong, in words that name the op, the shapes or names involved, and the fix.
///
/// Returned by every `try_` method; the panicking twins panic with the same text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Error {
        Error {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<rlx_ir::IrError> for Error {
    fn from(e: rlx_ir::IrError) -> Error {
        Error::new(e.to_string())
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
