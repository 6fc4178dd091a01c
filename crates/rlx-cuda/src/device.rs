//! What the executor needs from a device: memory, modules of generated kernels,
//! launches, and BLAS calls with cuBLAS semantics.
//!
//! The executor above this trait is shared by every device programmed in a C++ dialect
//! (CUDA and HIP, see [`Gpu::dialect`]): it generates the program in the device's
//! dialect and plans it with the device's BLAS routes, so one planner and one argument
//! marshalling serve NVIDIA and AMD GPUs. Implementations: the CUDA driver (the private
//! `cuda` module, through cudarc), the HIP runtime (crate `rlx-rocm`, whose BLAS is
//! rocBLAS), and the host emulator ([`crate::emu`]), which runs the generated source of
//! either dialect compiled by the system C++ compiler and implements the BLAS calls
//! literally — so everything above this trait (planning, argument marshalling, the
//! BLAS operand mapping) is tested on machines without a GPU.

pub use rlx_compile::loops::Dialect;
use rlx_ir::{Activation, DType};
use std::sync::Arc;

/// A device address (a host address under the emulator).
pub type DPtr = u64;

/// A loaded module: the generated program's entry points.
pub trait Module: Send + Sync {
    /// Launch entry `entry` with a parameter block of `params` bytes.
    ///
    /// `sync` says the kernel uses `__syncthreads` (the emulator schedules such blocks
    /// cooperatively).
    fn launch(
        &self,
        entry: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        params: &[u8],
        sync: bool,
    ) -> Result<(), String>;
}

/// One cuBLAS-style GEMM (column-major): `C = op(A)·op(B)` for every batch.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmCall {
    /// Element type of A, B and C (f32/f64 compute in their own type, f16/bf16 in f32).
    pub dtype: DType,
    /// `op(A) = Aᵀ` when set.
    pub transa: bool,
    /// `op(B) = Bᵀ` when set.
    pub transb: bool,
    /// Rows of `op(A)` and C.
    pub m: usize,
    /// Columns of `op(B)` and C.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    pub a: DPtr,
    pub lda: usize,
    pub b: DPtr,
    pub ldb: usize,
    pub c: DPtr,
    pub ldc: usize,
    /// Batches.
    pub batch: usize,
    /// How batches are addressed.
    pub batching: Batching,
    /// A fused cuBLASLt epilogue (bias over the rows of C, then an activation).
    pub epilogue: Option<Epilogue>,
}

/// How the batches of a [`GemmCall`] find their matrices.
#[derive(Debug, Clone, PartialEq)]
pub enum Batching {
    /// Element strides between consecutive batches of A, B and C.
    Strided { a: i64, b: i64, c: i64 },
    /// Device arrays of `batch` pointers each (A, B, C).
    Pointers { a: DPtr, b: DPtr, c: DPtr },
}

/// A cuBLASLt epilogue.
#[derive(Debug, Clone, PartialEq)]
pub struct Epilogue {
    /// A bias vector of `m` elements (C's rows), of the call's dtype.
    pub bias: Option<DPtr>,
    /// `Relu` or `GeluApprox` (cuBLASLt's GELU is the tanh form).
    pub act: Option<Activation>,
}

/// A scaled fp8 GEMM (cuBLASLt, "TN"): `D[m×n] = sa·sb·Aᵀ·B` with A stored `k×m` and B
/// `k×n` column-major (ld = k), D f32 column-major (ld = m).
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8Call {
    /// `true` for E4M3, `false` for E5M2.
    pub a_e4m3: bool,
    pub b_e4m3: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: DPtr,
    pub b: DPtr,
    /// Device pointers to one f32 scale each.
    pub a_scale: DPtr,
    pub b_scale: DPtr,
    pub d: DPtr,
}

/// The key under which a device caches the module built from `source` with `entries`
/// (the same text and entry points build the same module).
pub fn module_key(source: &str, entries: &[String]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    source.hash(&mut h);
    entries.hash(&mut h);
    h.finish()
}

/// A device that runs generated programs.
pub trait Gpu: Send + Sync {
    /// A short description (`"NVIDIA H200 (sm_90)"`, `"host emulator"`).
    fn describe(&self) -> String;
    /// Multiprocessors (sizes grids and reduction splits).
    fn sm_count(&self) -> u32;
    /// Allocate `bytes` (256-byte aligned).
    fn alloc(&self, bytes: usize) -> Result<DPtr, String>;
    /// Free an allocation.
    fn free(&self, p: DPtr);
    /// Copy host bytes to the device.
    fn upload(&self, dst: DPtr, src: &[u8]) -> Result<(), String>;
    /// Copy device bytes to the host (waits for queued work).
    fn download(&self, dst: &mut [u8], src: DPtr) -> Result<(), String>;
    /// Zero `bytes` at `dst`.
    fn zero(&self, dst: DPtr, bytes: usize) -> Result<(), String>;
    /// Compile (cached) and load `source`, resolving `entries` in order.
    fn load(&self, source: &str, entries: &[String]) -> Result<Arc<dyn Module>, String>;
    /// The C++ dialect whose source [`Gpu::load`] compiles (NVRTC takes CUDA, hiprtc
    /// HIP); the executor generates its program in it.
    fn dialect(&self) -> Dialect {
        Dialect::Cuda
    }
    /// Whether [`Gpu::gemm`] is available (cuBLAS or rocBLAS loaded).
    fn has_blas(&self) -> bool;
    /// Whether [`Gpu::gemm`] takes a [`GemmCall::epilogue`] (cuBLASLt does; rocBLAS has
    /// no fused epilogue, so the planner runs bias and activation as a generated kernel).
    fn has_blas_epilogue(&self) -> bool {
        self.has_blas()
    }
    /// Run a GEMM; an `epilogue` needs [`Gpu::has_blas_epilogue`].
    fn gemm(&self, call: &GemmCall) -> Result<(), String>;
    /// Whether [`Gpu::fp8_gemm`] is available (fp8 tensor cores and cuBLASLt).
    fn has_fp8(&self) -> bool;
    /// Run a scaled fp8 GEMM.
    fn fp8_gemm(&self, call: &Fp8Call) -> Result<(), String>;
    /// Wait for all queued work.
    fn synchronize(&self) -> Result<(), String>;
}
