//! rocBLAS, opened with `dlopen` when present: the executor's GEMM calls (cuBLAS's
//! column-major semantics, which rocBLAS shares) on `rocblas_gemm_strided_batched_ex`
//! and `rocblas_gemm_batched_ex`. Without rocBLAS the executor plans its generated
//! GEMM kernels instead.
//!
//! rocBLAS has no fused epilogue and no fp8 GEMM with per-tensor scales in the API used
//! here, so the device reports neither and the planner never asks for them.

use libloading::Library;
use rlx_cuda::device::{Batching, GemmCall};
use rlx_ir::DType;
use std::ffi::{c_int, c_void};
use std::sync::Mutex;

type Handle = *mut c_void;
type Status = c_int;
type CreateFn = unsafe extern "C" fn(*mut Handle) -> Status;
type StridedFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    i64,
    *const c_void,
    c_int,
    c_int,
    i64,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    i64,
    *mut c_void,
    c_int,
    c_int,
    i64,
    c_int,
    c_int,
    c_int,
    i32,
    u32,
) -> Status;
type BatchedFn = unsafe extern "C" fn(
    Handle,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    c_int,
    c_int,
    *const c_void,
    *const c_void,
    c_int,
    c_int,
    *mut c_void,
    c_int,
    c_int,
    c_int,
    c_int,
    c_int,
    i32,
    u32,
) -> Status;

/// `rocblas_operation_none` / `_transpose`.
const OP_N: c_int = 111;
const OP_T: c_int = 112;
/// `rocblas_gemm_algo_standard`.
const ALGO_STANDARD: c_int = 0;

/// rocBLAS's `rocblas_datatype` of a GEMM element type, and the compute type (f32 for
/// the 16-bit floats, like cuBLAS's path).
fn types(dt: DType) -> Option<(c_int, c_int)> {
    match dt {
        DType::F16 => Some((150, 151)),
        DType::F32 => Some((151, 151)),
        DType::F64 => Some((152, 152)),
        DType::BF16 => Some((168, 151)),
        _ => None,
    }
}

/// A raw rocBLAS handle; used only under the [`RocBlas`] mutex.
struct RawHandle(Handle);
// SAFETY: the handle is an opaque rocBLAS object; rocBLAS handles may move between
// threads, and every use is serialized by the mutex that owns it.
unsafe impl Send for RawHandle {}

/// A loaded rocBLAS with one handle (on the null stream, like the executor's launches).
pub(crate) struct RocBlas {
    _lib: Library,
    strided: StridedFn,
    batched: BatchedFn,
    handle: Mutex<RawHandle>,
}

impl RocBlas {
    /// Open rocBLAS (`RLX_ROCBLAS_LIB`, then ROCm's and the loader's paths) and create a
    /// handle; the error says what was tried.
    pub(crate) fn open() -> Result<RocBlas, String> {
        let names = crate::dl::candidates(
            "RLX_ROCBLAS_LIB",
            &[
                "librocblas.so",
                "librocblas.so.4",
                "librocblas.so.3",
                "librocblas.so.0",
            ],
        );
        for n in &names {
            // SAFETY: opening rocBLAS runs its initializers (it needs the HIP runtime,
            // already loaded and initialised by the device).
            let Ok(lib) = (unsafe { Library::new(n) }) else {
                continue;
            };
            // SAFETY: the symbols are looked up with their C signatures from rocblas.h
            // and used only while `_lib` keeps the library loaded.
            let found = unsafe {
                (
                    lib.get::<CreateFn>(b"rocblas_create_handle\0").map(|s| *s),
                    lib.get::<StridedFn>(b"rocblas_gemm_strided_batched_ex\0")
                        .map(|s| *s),
                    lib.get::<BatchedFn>(b"rocblas_gemm_batched_ex\0")
                        .map(|s| *s),
                )
            };
            let (Ok(create), Ok(strided), Ok(batched)) = found else {
                return Err(format!(
                    "{}: a rocBLAS GEMM entry point is missing",
                    n.display()
                ));
            };
            let mut h: Handle = std::ptr::null_mut();
            // SAFETY: `h` is a valid out-pointer.
            let r = unsafe { create(&mut h) };
            if r != 0 {
                return Err(format!(
                    "{}: rocblas_create_handle failed ({r})",
                    n.display()
                ));
            }
            return Ok(RocBlas {
                _lib: lib,
                strided,
                batched,
                handle: Mutex::new(RawHandle(h)),
            });
        }
        Err(format!(
            "rocBLAS cannot be opened (tried {}); GEMMs run as generated kernels",
            names
                .iter()
                .map(|n| n.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// Run `c` (no epilogue: the device reports none).
    ///
    /// # Safety
    /// Every pointer of `c` must be a device address of the sizes its dims, leading
    /// dimensions and batching imply (pointer arrays included).
    pub(crate) unsafe fn gemm(&self, c: &GemmCall) -> Result<(), String> {
        if c.epilogue.is_some() {
            return Err("rocBLAS: a GEMM epilogue was planned, but rocBLAS has none".into());
        }
        let (ty, compute) =
            types(c.dtype).ok_or_else(|| format!("rocBLAS: no GEMM for {}", c.dtype))?;
        let int = |v: usize, what: &str| {
            c_int::try_from(v)
                .map_err(|_| format!("rocBLAS: GEMM {what} = {v} exceeds rocBLAS's 32-bit sizes"))
        };
        let (m, n, k) = (int(c.m, "m")?, int(c.n, "n")?, int(c.k, "k")?);
        let (lda, ldb, ldc) = (int(c.lda, "lda")?, int(c.ldb, "ldb")?, int(c.ldc, "ldc")?);
        let batch = int(c.batch, "batch")?;
        let ta = if c.transa { OP_T } else { OP_N };
        let tb = if c.transb { OP_T } else { OP_N };
        // Host scalars of the compute type.
        let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
        let (alpha, beta) = if compute == 152 {
            (
                &one64 as *const f64 as *const c_void,
                &zero64 as *const f64 as *const c_void,
            )
        } else {
            (
                &one32 as *const f32 as *const c_void,
                &zero32 as *const f32 as *const c_void,
            )
        };
        let h = self.handle.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b, cc) = (
            c.a as *const c_void,
            c.b as *const c_void,
            c.c as *mut c_void,
        );
        // SAFETY: the caller guarantees the device operands; alpha/beta point at host
        // scalars of the compute type (rocBLAS's default host pointer mode) alive for the
        // call; C is passed as both C and D (beta = 0, so C is only written).
        let r = unsafe {
            match &c.batching {
                Batching::Strided {
                    a: sa,
                    b: sb,
                    c: sc,
                } => (self.strided)(
                    h.0,
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    alpha,
                    a,
                    ty,
                    lda,
                    *sa,
                    b,
                    ty,
                    ldb,
                    *sb,
                    beta,
                    cc,
                    ty,
                    ldc,
                    *sc,
                    cc,
                    ty,
                    ldc,
                    *sc,
                    batch,
                    compute,
                    ALGO_STANDARD,
                    0,
                    0,
                ),
                Batching::Pointers {
                    a: pa,
                    b: pb,
                    c: pc,
                } => (self.batched)(
                    h.0,
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    alpha,
                    *pa as *const c_void,
                    ty,
                    lda,
                    *pb as *const c_void,
                    ty,
                    ldb,
                    beta,
                    *pc as *const c_void,
                    ty,
                    ldc,
                    *pc as *mut c_void,
                    ty,
                    ldc,
                    batch,
                    compute,
                    ALGO_STANDARD,
                    0,
                    0,
                ),
            }
        };
        if r != 0 {
            return Err(format!(
                "rocBLAS: GEMM [{}] m={} n={} k={} batch={} failed with status {r}",
                c.dtype, c.m, c.n, c.k, c.batch
            ));
        }
        Ok(())
    }
}
