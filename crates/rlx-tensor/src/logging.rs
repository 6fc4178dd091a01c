//! Diagnostics through `tracing`.
