//! The error type of the `try_` methods.
//!
//! Every variant carries the full message (the op, the shapes or names involved, and the
//! fix), so printing an [`Error`] says everything; the variant says what kind of mistake it
//! is, for code that reacts differently to each, and [`std::error::Error::source`] reaches
//! the underlying I/O or format error where there is one.

use std::sync::Arc;

/// The cause of an [`Error`] that came from outside rlx (a file system call, a JSON or
/// safetensors parser).
pub type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong, in words that name the op, the shapes or names involved, and the fix.
///
/// Returned by every `try_` method; the panicking twins panic with the same text. New
/// kinds may be added, so a `match` needs a wildcard arm.
///
/// ```
/// use rlx_tensor::{Error, Tensor};
/// let a = Tensor::ones([2, 3]);
/// let b = Tensor::ones([4, 5]);
/// match a.try_matmul(&b) {
///     Err(Error::Shape { message }) => assert!(message.contains("matmul"), "{message}"),
///     other => panic!("expected a shape error, got {other:?}"),
/// }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone)]
pub enum Error {
    /// Operands whose shapes, axes or lengths do not fit the op (also a dynamic dim bound
    /// at run time to a size that does not fit).
    Shape {
        /// The full message.
        message: String,
    },
    /// An operand or input of the wrong element type.
    DType {
        /// The full message.
        message: String,
    },
    /// An input, param or tensor name that is not declared.
    UnknownName {
        /// The full message.
        message: String,
    },
    /// A device that is not built in, has no driver, or was not found.
    DeviceUnavailable {
        /// The full message.
        message: String,
    },
    /// A file could not be read or written.
    Io {
        /// The full message, naming the file.
        message: String,
        /// The operating system's error.
        source: Arc<std::io::Error>,
    },
    /// A checkpoint or weights file that is malformed or does not match the model.
    Checkpoint {
        /// The full message, naming the file and tensors.
        message: String,
        /// The parser's error, when one caused it.
        source: Option<Cause>,
    },
    /// The graph could not be compiled (a malformed graph, a backend's compiler failing).
    Compile {
        /// The full message.
        message: String,
    },
    /// A compiled program failed while running.
    Runtime {
        /// The full message.
        message: String,
    },
    /// An allocation failed.
    OutOfMemory {
        /// The full message, with the byte count.
        message: String,
    },
    /// Something valid that rlx (or the chosen device) does not implement.
    Unsupported {
        /// The full message.
        message: String,
    },
    /// Any other bad argument (a wrong option value, an empty list where one is needed).
    InvalidArgument {
        /// The full message.
        message: String,
    },
}

/// `$body` with `$m` bound to the message of any variant (by reference or by mutable
/// reference, following `$e`), so each accessor lists the variants once.
macro_rules! with_message {
    ($e:expr, $m:ident => $body:expr) => {
        match $e {
            Error::Shape { message: $m }
            | Error::DType { message: $m }
            | Error::UnknownName { message: $m }
            | Error::DeviceUnavailable { message: $m }
            | Error::Io { message: $m, .. }
            | Error::Checkpoint { message: $m, .. }
            | Error::Compile { message: $m }
            | Error::Runtime { message: $m }
            | Error::OutOfMemory { message: $m }
            | Error::Unsupported { message: $m }
            | Error::InvalidArgument { message: $m } => $body,
        }
    };
}

impl Error {
    /// An [`Error::InvalidArgument`] with this message.
    pub fn new(message: impl Into<String>) -> Error {
        Error::InvalidArgument {
            message: message.into(),
        }
    }

    /// An [`Error::Shape`].
    pub fn shape(message: impl Into<String>) -> Error {
        Error::Shape {
            message: message.into(),
        }
    }

    /// An [`Error::DType`].
    pub fn dtype(message: impl Into<String>) -> Error {
        Error::DType {
            message: message.into(),
        }
    }

    /// An [`Error::UnknownName`].
    pub fn unknown_name(message: impl Into<String>) -> Error {
        Error::UnknownName {
            message: message.into(),
        }
    }

    /// An [`Error::Io`]: `message` names the file and what was being done; `source` is the
    /// operating system's error.
    pub fn io(message: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            message: message.into(),
            source: Arc::new(source),
        }
    }

    /// An [`Error::Checkpoint`] without an underlying cause.
    pub fn checkpoint(message: impl Into<String>) -> Error {
        Error::Checkpoint {
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Checkpoint`] caused by `source` (a parser's error).
    pub fn checkpoint_caused_by(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Error {
        Error::Checkpoint {
            message: message.into(),
            source: Some(Arc::new(source)),
        }
    }

    /// An [`Error::OutOfMemory`].
    pub fn out_of_memory(message: impl Into<String>) -> Error {
        Error::OutOfMemory {
            message: message.into(),
        }
    }

    /// An [`Error::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Error {
        Error::Unsupported {
            message: message.into(),
        }
    }

    /// The full message (the same text `Display` prints).
    pub fn message(&self) -> &str {
        with_message!(self, message => message)
    }

    /// The same kind of error with `context: ` put before the message (the cause is kept).
    pub fn context(self, context: impl std::fmt::Display) -> Error {
        let mut e = self;
        with_message!(&mut e, m => *m = format!("{context}: {m}"));
        e
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

// Written by hand rather than derived: the causes sit behind an `Arc` (so `Error` stays
// `Clone`), and `source()` must hand out the cause itself, not the `Arc`, for
// `downcast_ref::<std::io::Error>()` to work.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source.as_ref()),
            Error::Checkpoint {
                source: Some(cause),
                ..
            } => Some(cause.as_ref()),
            _ => None,
        }
    }
}

/// Two errors are equal when they are the same kind with the same message (causes are not
/// compared).
impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.message() == other.message()
    }
}

impl Eq for Error {}

impl From<rlx_ir::IrError> for Error {
    fn from(e: rlx_ir::IrError) -> Error {
        Error::from_ir_kind(e.kind, e.to_string())
    }
}

impl Error {
    /// The surface kind of an IR error of kind `kind`, with `message`.
    pub(crate) fn from_ir_kind(kind: rlx_ir::IrErrorKind, message: String) -> Error {
        use rlx_ir::IrErrorKind as K;
        match kind {
            K::DType => Error::DType { message },
            K::OutOfMemory => Error::OutOfMemory { message },
            K::Graph => Error::Compile { message },
            K::Unsupported => Error::Unsupported { message },
            // Shape errors, and kinds added later.
            _ => Error::Shape { message },
        }
    }
}

#[cfg(feature = "eval")]
impl From<rlx_runtime::RuntimeError> for Error {
    fn from(e: rlx_runtime::RuntimeError) -> Error {
        use rlx_runtime::RuntimeErrorKind as K;
        let message = e.message().to_string();
        match e.kind() {
            K::Run => Error::Runtime { message },
            K::DeviceUnavailable => Error::DeviceUnavailable { message },
            K::OutOfMemory => Error::OutOfMemory { message },
            K::UnknownName => Error::UnknownName { message },
            K::Shape => Error::Shape { message },
            K::DType => Error::DType { message },
            K::Unsupported => Error::Unsupported { message },
            // Compile errors, and kinds added later.
            _ => Error::Compile { message },
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn ir_dtype_errors_become_the_dtype_kind_with_the_same_text() {
        let ir = rlx_ir::IrError::dtype("matmul", "a f32 and b i64 differ; cast one");
        let text = ir.to_string();
        let e = Error::from(ir);
        assert!(matches!(e, Error::DType { .. }), "{e:?}");
        assert_eq!(e.to_string(), text);
    }

    #[test]
    fn ir_kinds_map_to_their_surface_kinds() {
        use rlx_ir::IrError as I;
        assert!(matches!(
            Error::from(I::new("pad", "x")),
            Error::Shape { .. }
        ));
        assert!(matches!(
            Error::from(I::out_of_memory("alloc", "x")),
            Error::OutOfMemory { .. }
        ));
        assert!(matches!(
            Error::from(I::graph("verify", "x")),
            Error::Compile { .. }
        ));
        assert!(matches!(
            Error::from(I::unsupported("pool", "x")),
            Error::Unsupported { .. }
        ));
    }

    #[cfg(feature = "eval")]
    #[test]
    fn runtime_kinds_map_to_their_surface_kinds() {
        use rlx_runtime::RuntimeError as R;
        assert!(matches!(
            Error::from(R::unknown_name("x")),
            Error::UnknownName { .. }
        ));
        assert!(matches!(
            Error::from(R::device_unavailable("x")),
            Error::DeviceUnavailable { .. }
        ));
        assert!(matches!(Error::from(R::run("x")), Error::Runtime { .. }));
        assert!(matches!(Error::from(R::new("x")), Error::Compile { .. }));
        assert!(matches!(Error::from(R::shape("x")), Error::Shape { .. }));
    }

    #[test]
    fn io_errors_keep_the_os_error_as_their_source() {
        let os = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let e = Error::io(
            "load_checkpoint: cannot read w.safetensors: no such file",
            os,
        );
        let src = e.source().expect("an io error has a source");
        let io = src
            .downcast_ref::<std::io::Error>()
            .expect("the source is the io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().starts_with("load_checkpoint: cannot read"));
    }

    #[test]
    fn checkpoint_errors_chain_their_parser_error() {
        let parse = serde_like_error();
        let e = Error::checkpoint_caused_by("model.safetensors: bad header", parse);
        assert_eq!(
            e.source().map(|s| s.to_string()),
            Some("expected `}` at 3".into())
        );
        assert!(Error::checkpoint("missing tensor").source().is_none());
    }

    fn serde_like_error() -> std::io::Error {
        std::io::Error::other("expected `}` at 3")
    }

    #[test]
    fn equality_compares_kind_and_message() {
        assert_eq!(Error::shape("a"), Error::shape("a"));
        assert_ne!(Error::shape("a"), Error::dtype("a"));
        assert_ne!(Error::shape("a"), Error::shape("b"));
    }

    #[test]
    fn context_prefixes_the_message_and_keeps_the_kind_and_cause() {
        let os = std::io::Error::other("disk full");
        let e = Error::io("write failed", os).context("save_checkpoint");
        assert_eq!(e.to_string(), "save_checkpoint: write failed");
        assert!(matches!(e, Error::Io { .. }));
        assert!(e.source().is_some());
    }

    #[test]
    fn errors_cross_threads() {
        fn assert_send_sync<T: Send + Sync + 'static>() {}
        assert_send_sync::<Error>();
    }
}
