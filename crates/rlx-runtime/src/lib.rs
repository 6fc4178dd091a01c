//! # rlx-runtime
//!
//! Devices ([`Device`]), the [`Backend`] trait that execution backends implement (the
//! contract is a type: a backend names its [`rlx_compile::CompileOptions`] and loads the
//! [`rlx_compile::Program`] the runtime compiled with them, see [`compile_program`]),
//! the backend registry and detection ([`is_available`], [`available_devices`],
//! [`fastest_device`], [`fastest_device_for`]), compiled graphs ([`CompiledGraph`]),
//! graph preparation for compilation ([`prepare`]), the host fallback GPU backends run
//! kernels they cannot execute on ([`HostKernel`]: one program kernel compiled by the
//! registered CPU backend), and the per-thread compile
//! cache, least recently used entries evicted beyond [`cache_capacity`] (512 unless
//! `RLX_CACHE_CAPACITY` or [`set_cache_capacity`] says otherwise; [`cache_stats`],
//! [`clear_cache`]; misses and evictions are `tracing` debug events, target
//! `rlx::cache`).
//!
//! The runtime never names a backend crate: `rlx-tensor` registers the backends its
//! Cargo features enable with [`register_backend`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod backend;
mod cache;
mod compiled;
mod device;
mod error;
mod host_kernel;
mod prepare;
mod profile;

pub use backend::{
    Backend, Donation, Executable, HostOutput, arg_order, available_devices, backend_for,
    check_donations, compile, compile_program, donated_views, fastest_device, fastest_device_for,
    is_available, register_backend, registered_backends, unavailable,
};
pub use cache::{
    CACHE_CAPACITY, CachedGraph, cache_capacity, cache_compile_count, cache_contains,
    cache_get_keys, cache_get_or_compile, cache_get_or_compile_graph, cache_get_or_compile_keys,
    cache_get_or_compile_prepared, cache_has_program, cache_last_miss, cache_len, cache_stats,
    clear_cache, set_cache_capacity,
};
pub use compiled::{ArgSlot, CompiledGraph};
pub use device::{Device, Support};
pub use error::{RuntimeError, RuntimeErrorKind, RuntimeResult};
pub use host_kernel::{HostEngine, HostKernel};
pub use prepare::{
    BAKE_MAX_ELEMENTS, LIFT_THRESHOLD_ELEMENTS, Lifted, Prepared, PreparedKeys, graph_key,
    lifted_arg_name, prepare, prepare_keys, prepare_keys_into,
};
pub use profile::{KernelProfile, Profile};
