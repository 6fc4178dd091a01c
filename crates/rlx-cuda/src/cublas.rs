//! cuBLAS and cuBLASLt calls for [`GemmCall`] and [`Fp8Call`].
//!
//! - plain GEMMs: `cublasGemmStridedBatchedEx` / `cublasGemmBatchedEx`; f16/bf16
//!   operands accumulate in f32 on tensor cores; f32 is exact FP32 unless
//!   `RLX_CUDA_TF32=1` allows TF32 tensor cores; f64 is FP64;
//! - fused epilogues: `cublasLtMatmul` with `BIAS`, `RELU(_BIAS)`, `GELU(_BIAS)`;
//! - fp8: `cublasLtMatmul` "TN" with per-tensor scale pointers, f32 output.

use crate::device::{Batching, DPtr, Fp8Call, GemmCall};
use cudarc::cublas::sys as cb;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys as ds;
use rlx_ir::{Activation, DType};
use std::ffi::c_void;

fn ok_cb(s: cb::cublasStatus_t, what: &str) -> Result<(), String> {
    if s == cb::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {s:?}"))
    }
}

fn ok_lt(s: lt::cublasStatus_t, what: &str) -> Result<(), String> {
    if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(format!("{what} failed: {s:?}"))
    }
}

fn tf32() -> bool {
    std::env::var("RLX_CUDA_TF32").is_ok_and(|v| v == "1")
}

/// `(data type, compute type)` for cuBLAS.
fn cb_types(dt: DType) -> Result<(cb::cudaDataType, cb::cublasComputeType_t), String> {
    use cb::cublasComputeType_t as C;
    use cb::cudaDataType as D;
    Ok(match dt {
        DType::F32 if tf32() => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F_FAST_TF32),
        DType::F32 => (D::CUDA_R_32F, C::CUBLAS_COMPUTE_32F),
        DType::F64 => (D::CUDA_R_64F, C::CUBLAS_COMPUTE_64F),
        DType::F16 => (D::CUDA_R_16F, C::CUBLAS_COMPUTE_32F),
        DType::BF16 => (D::CUDA_R_16BF, C::CUBLAS_COMPUTE_32F),
        other => return Err(format!("cuBLAS has no {other} GEMM")),
    })
}

fn op(t: bool) -> cb::cublasOperation_t {
    if t {
        cb::cublasOperation_t::CUBLAS_OP_T
    } else {
        cb::cublasOperation_t::CUBLAS_OP_N
    }
}

/// One (batched) GEMM through cuBLAS.
pub(crate) fn gemm(h: cb::cublasHandle_t, c: &GemmCall) -> Result<(), String> {
    let (dt, ct) = cb_types(c.dtype)?;
    let (one32, zero32, one64, zero64) = (1f32, 0f32, 1f64, 0f64);
    let (alpha, beta): (*const c_void, *const c_void) = if c.dtype == DType::F64 {
        (&one64 as *const f64 as _, &zero64 as *const f64 as _)
    } else {
        (&one32 as *const f32 as _, &zero32 as *const f32 as _)
    };
    let (m, n, k) = (c.m as i32, c.n as i32, c.k as i32);
    let (lda, ldb, ldc) = (c.lda as i32, c.ldb as i32, c.ldc as i32);
    let algo = cb::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    // SAFETY: `h` is a live cuBLAS handle used under the Blas mutex on the bound context;
    // `alpha` and `beta` point at locals of the GEMM's dtype, read by cuBLAS (host pointer
    // mode) before the call returns; every other pointer is a device address (operands, or for
    // pointer batching device arrays of device pointers) that cuBLAS only dereferences on the
    // device; the plan sized the operands for m, n, k, the leading dimensions and batch
    // strides.
    let s = unsafe {
        match &c.batching {
            Batching::Strided { a, b, c: sc } => cb::cublasGemmStridedBatchedEx(
                h,
                op(c.transa),
                op(c.transb),
                m,
                n,
                k,
                alpha,
                c.a as *const c_void,
                dt,
                lda,
                *a,
                c.b as *const c_void,
                dt,
                ldb,
                *b,
                beta,
                c.c as *mut c_void,
                dt,
                ldc,
                *sc,
                c.batch as i32,
                ct,
                algo,
            ),
            Batching::Pointers { a, b, c: pc } => cb::cublasGemmBatchedEx(
                h,
                op(c.transa),
                op(c.transb),
                m,
                n,
                k,
                alpha,
                *a as *const *const c_void,
                dt,
                lda,
                *b as *const *const c_void,
                dt,
                ldb,
                beta,
                *pc as *const *mut c_void,
                dt,
                ldc,
                c.batch as i32,
                ct,
                algo,
            ),
        }
    };
    ok_cb(s, "cublasGemmEx")
}

/// Owns cuBLASLt descriptors and destroys them on every path.
#[derive(Default)]
struct LtDescs {
    desc: Option<lt::cublasLtMatmulDesc_t>,
    layouts: Vec<lt::cublasLtMatrixLayout_t>,
    pref: Option<lt::cublasLtMatmulPreference_t>,
}

impl Drop for LtDescs {
    fn drop(&mut self) {
        // SAFETY: each descriptor was created by cuBLASLt (only successful creations are
        // recorded) and is destroyed exactly once here.
        unsafe {
            if let Some(d) = self.desc {
                lt::cublasLtMatmulDescDestroy(d);
            }
            for &l in &self.layouts {
                lt::cublasLtMatrixLayoutDestroy(l);
            }
            if let Some(p) = self.pref {
                lt::cublasLtMatmulPreferenceDestroy(p);
            }
        }
    }
}

fn set_desc<T>(
    d: lt::cublasLtMatmulDesc_t,
    a: lt::cublasLtMatmulDescAttributes_t,
    v: &T,
) -> Result<(), String> {
    ok_lt(
        // SAFETY: `d` is a live descriptor and `v` points at a `T` of `size_of::<T>()` bytes,
        // the attribute's type at each call site (i32 flags, the epilogue enum, i8, pointers);
        // cuBLASLt copies the value before returning.
        unsafe {
            lt::cublasLtMatmulDescSetAttribute(
                d,
                a,
                v as *const T as *const c_void,
                std::mem::size_of::<T>(),
            )
        },
        "cublasLtMatmulDescSetAttribute",
    )
}

impl LtDescs {
    fn layout(
        &mut self,
        dt: lt::cudaDataType,
        rows: usize,
        cols: usize,
        ld: usize,
        batch: usize,
        stride: i64,
    ) -> Result<lt::cublasLtMatrixLayout_t, String> {
        let mut l: lt::cublasLtMatrixLayout_t = std::ptr::null_mut();
        ok_lt(
            // SAFETY: `l` is a live out-pointer; the sizes are plain values.
            unsafe {
                lt::cublasLtMatrixLayoutCreate(&mut l, dt, rows as u64, cols as u64, ld as i64)
            },
            "cublasLtMatrixLayoutCreate",
        )?;
        self.layouts.push(l);
        if batch > 1 {
            let count = batch as i32;
            for (attr, p, n) in [
                (
                    lt::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                    &count as *const i32 as *const c_void,
                    4,
                ),
                (
                    lt::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                    &stride as *const i64 as *const c_void,
                    8,
                ),
            ] {
                ok_lt(
                    // SAFETY: `l` was just created; `p` points at a live local of exactly `n`
                    // bytes (an i32 batch count or an i64 stride), copied by cuBLASLt before
                    // returning.
                    unsafe { lt::cublasLtMatrixLayoutSetAttribute(l, attr, p, n) },
                    "cublasLtMatrixLayoutSetAttribute",
                )?;
            }
        }
        Ok(l)
    }

    #[allow(clippy::too_many_arguments)]
    fn run(
        &mut self,
        h: lt::cublasLtHandle_t,
        ws: DPtr,
        ws_bytes: usize,
        stream: ds::CUstream,
        alpha: *const c_void,
        beta: *const c_void,
        ptrs: [DPtr; 3],
        lays: [lt::cublasLtMatrixLayout_t; 3],
    ) -> Result<(), String> {
        let desc = self.desc.unwrap();
        let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
        ok_lt(
            // SAFETY: `pref` is a live out-pointer.
            unsafe { lt::cublasLtMatmulPreferenceCreate(&mut pref) },
            "cublasLtMatmulPreferenceCreate",
        )?;
        self.pref = Some(pref);
        let wsb = ws_bytes as u64;
        ok_lt(
            // SAFETY: `pref` was just created; the value is a live u64 of the 8 bytes passed.
            unsafe {
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref,
                    lt::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    &wsb as *const u64 as *const c_void,
                    8,
                )
            },
            "cublasLtMatmulPreferenceSetAttribute",
        )?;
        // SAFETY: the heuristic result is a plain C struct of integers, floats and byte arrays,
        // for which all-zero bytes are a valid value (cuBLASLt overwrites it).
        let mut heur: lt::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        let mut found = 0i32;
        ok_lt(
            // SAFETY: `h`, `desc`, the three layouts and `pref` are live; `heur` and `found`
            // are live out-pointers for one result (requested count 1).
            unsafe {
                lt::cublasLtMatmulAlgoGetHeuristic(
                    h, desc, lays[0], lays[1], lays[2], lays[2], pref, 1, &mut heur, &mut found,
                )
            },
            "cublasLtMatmulAlgoGetHeuristic",
        )?;
        if found == 0 {
            return Err("cuBLASLt found no algorithm for this matmul".into());
        }
        ok_lt(
            // SAFETY: `h` is used under the Blas mutex; `alpha`/`beta` point at the caller's
            // f32 locals (read before return, host pointer mode); operand, output and workspace
            // pointers are device addresses sized by the plan (workspace `ws_bytes`), used on
            // the device only; `heur.algo` is the algorithm just returned for these
            // descriptors.
            unsafe {
                lt::cublasLtMatmul(
                    h,
                    desc,
                    alpha,
                    ptrs[0] as *const c_void,
                    lays[0],
                    ptrs[1] as *const c_void,
                    lays[1],
                    beta,
                    ptrs[2] as *const c_void,
                    lays[2],
                    ptrs[2] as *mut c_void,
                    lays[2],
                    &heur.algo,
                    ws as *mut c_void,
                    ws_bytes,
                    stream as lt::cudaStream_t,
                )
            },
            "cublasLtMatmul",
        )
    }
}

fn lt_type(dt: DType) -> Result<lt::cudaDataType, String> {
    Ok(match dt {
        DType::F32 => lt::cudaDataType::CUDA_R_32F,
        DType::F16 => lt::cudaDataType::CUDA_R_16F,
        DType::BF16 => lt::cudaDataType::CUDA_R_16BF,
        other => return Err(format!("cuBLASLt epilogues are not used for {other}")),
    })
}

/// A strided-batched GEMM with a fused epilogue through cuBLASLt.
pub(crate) fn lt_gemm(
    h: lt::cublasLtHandle_t,
    ws: DPtr,
    ws_bytes: usize,
    stream: ds::CUstream,
    c: &GemmCall,
) -> Result<(), String> {
    let Batching::Strided {
        a: sa,
        b: sb,
        c: sc,
    } = c.batching
    else {
        return Err("cuBLASLt epilogues need strided batches".into());
    };
    let e = c.epilogue.as_ref().unwrap();
    let dt = lt_type(c.dtype)?;
    let ct = if c.dtype == DType::F32 && tf32() {
        lt::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32
    } else {
        lt::cublasComputeType_t::CUBLAS_COMPUTE_32F
    };
    let mut d = LtDescs::default();
    let mut desc: lt::cublasLtMatmulDesc_t = std::ptr::null_mut();
    ok_lt(
        // SAFETY: `desc` is a live out-pointer; the types are valid enum values.
        unsafe { lt::cublasLtMatmulDescCreate(&mut desc, ct, lt::cudaDataType::CUDA_R_32F) },
        "cublasLtMatmulDescCreate",
    )?;
    d.desc = Some(desc);
    use lt::cublasLtMatmulDescAttributes_t as A;
    let (ta, tb) = (c.transa as i32, c.transb as i32);
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &ta)?;
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_TRANSB, &tb)?;
    use lt::cublasLtEpilogue_t as E;
    let epi = match (e.bias.is_some(), e.act) {
        (false, None) => E::CUBLASLT_EPILOGUE_DEFAULT,
        (true, None) => E::CUBLASLT_EPILOGUE_BIAS,
        (false, Some(Activation::Relu)) => E::CUBLASLT_EPILOGUE_RELU,
        (true, Some(Activation::Relu)) => E::CUBLASLT_EPILOGUE_RELU_BIAS,
        (false, Some(Activation::GeluApprox)) => E::CUBLASLT_EPILOGUE_GELU,
        (true, Some(Activation::GeluApprox)) => E::CUBLASLT_EPILOGUE_GELU_BIAS,
        (_, Some(a)) => return Err(format!("cuBLASLt has no {} epilogue", a.name())),
    };
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_EPILOGUE, &epi)?;
    if let Some(bias) = e.bias {
        let p = bias as *const c_void;
        set_desc(desc, A::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p)?;
    }
    // Stored shapes: op(A) is m×k, op(B) is k×n.
    let (ar, ac) = if c.transa { (c.k, c.m) } else { (c.m, c.k) };
    let (br, bc) = if c.transb { (c.n, c.k) } else { (c.k, c.n) };
    let la = d.layout(dt, ar, ac, c.lda, c.batch, sa)?;
    let lb = d.layout(dt, br, bc, c.ldb, c.batch, sb)?;
    let lc = d.layout(dt, c.m, c.n, c.ldc, c.batch, sc)?;
    let (one, zero) = (1f32, 0f32);
    d.run(
        h,
        ws,
        ws_bytes,
        stream,
        &one as *const f32 as _,
        &zero as *const f32 as _,
        [c.a, c.b, c.c],
        [la, lb, lc],
    )
}

/// A scaled fp8 GEMM ("TN", per-tensor scales, f32 output) through cuBLASLt.
pub(crate) fn fp8_gemm(
    h: lt::cublasLtHandle_t,
    ws: DPtr,
    ws_bytes: usize,
    stream: ds::CUstream,
    c: &Fp8Call,
) -> Result<(), String> {
    let mut d = LtDescs::default();
    let mut desc: lt::cublasLtMatmulDesc_t = std::ptr::null_mut();
    ok_lt(
        // SAFETY: `desc` is a live out-pointer; the types are valid enum values.
        unsafe {
            lt::cublasLtMatmulDescCreate(
                &mut desc,
                lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                lt::cudaDataType::CUDA_R_32F,
            )
        },
        "cublasLtMatmulDescCreate",
    )?;
    d.desc = Some(desc);
    use lt::cublasLtMatmulDescAttributes_t as A;
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_TRANSA, &1i32)?;
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_TRANSB, &0i32)?;
    let (pa, pb) = (c.a_scale as *const c_void, c.b_scale as *const c_void);
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &pa)?;
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &pb)?;
    // Full-precision accumulation (no fast fp8 accumulation).
    set_desc(desc, A::CUBLASLT_MATMUL_DESC_FAST_ACCUM, &0i8)?;
    let f8 = |e4m3: bool| {
        if e4m3 {
            lt::cudaDataType::CUDA_R_8F_E4M3
        } else {
            lt::cudaDataType::CUDA_R_8F_E5M2
        }
    };
    let la = d.layout(f8(c.a_e4m3), c.k, c.m, c.k, 1, 0)?;
    let lb = d.layout(f8(c.b_e4m3), c.k, c.n, c.k, 1, 0)?;
    let lc = d.layout(lt::cudaDataType::CUDA_R_32F, c.m, c.n, c.m, 1, 0)?;
    let (one, zero) = (1f32, 0f32);
    d.run(
        h,
        ws,
        ws_bytes,
        stream,
        &one as *const f32 as _,
        &zero as *const f32 as _,
        [c.a, c.b, c.d],
        [la, lb, lc],
    )
}
