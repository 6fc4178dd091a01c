//! The CUDA device through cudarc: driver memory and launches on one stream, NVRTC
//! modules (CUBIN for the device's own architecture when NVRTC knows it, else PTX that
//! the driver JIT-compiles), and GEMMs on cuBLAS / cuBLASLt.
//!
//! Every entry point binds the context to the calling thread first, so executables can
//! be run from any thread. Nothing here is called unless [`crate::probe`] found the
//! driver, NVRTC and a device.

use crate::device::{DPtr, Fp8Call, GemmCall, Gpu, Module};
use crate::{loader, nvrtc};
use cudarc::driver::{CudaContext, result as dr, sys as ds};
use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Arc, Mutex, Weak};

/// A raw handle that is only used under a mutex or from the owning device.
#[derive(Clone, Copy)]
struct Raw<T>(T);
// SAFETY: Raw wraps CUDA driver/cuBLAS handles (stream, module, function, library
// handles: opaque pointers owned by the driver, not Rust memory). The driver API is
// thread-safe once the context is current, which every entry point ensures
// (`Core::bind`); the cuBLAS/cuBLASLt handles, which are not, are only used under the
// `Blas` mutex.
unsafe impl<T> Send for Raw<T> {}
// SAFETY: as for Send: shared use goes through the thread-safe driver API with the
// context bound, or through the Blas mutex.
unsafe impl<T> Sync for Raw<T> {}

/// The CUDA device state shared by modules.
pub(crate) struct Core {
    ctx: Arc<CudaContext>,
    stream: Raw<ds::CUstream>,
}

impl Core {
    fn bind(&self) -> Result<(), String> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| format!("binding the CUDA context: {e:?}"))
    }
}

/// A loaded CUDA module and its resolved entry points.
struct CudaModule {
    core: Arc<Core>,
    module: Raw<ds::CUmodule>,
    funcs: Vec<Raw<ds::CUfunction>>,
    names: Vec<String>,
}

impl Module for CudaModule {
    fn launch(
        &self,
        entry: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        params: &[u8],
        _sync: bool,
    ) -> Result<(), String> {
        self.core.bind()?;
        // The kernel takes one struct by value: one parameter pointer, to its bytes.
        let mut words: Vec<u64> = params
            .chunks(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect();
        let mut args = [words.as_mut_ptr() as *mut c_void];
        // SAFETY: the function handle belongs to this module (loaded on this context, which is
        // bound above) and stays valid until the module is dropped; the kernel takes one struct
        // `P{kid} { char* b[np]; long long m[nm]; }` by value, and `words` holds the `(np +
        // nm)·8`-byte block exec::step builds for exactly that struct (same `max(1)` counts as
        // codegen), alive until the call returns (the driver copies kernel parameters at
        // launch). Device pointers inside are only dereferenced on the device.
        unsafe {
            dr::launch_kernel(
                self.funcs[entry].0,
                grid,
                block,
                0,
                self.core.stream.0,
                &mut args,
            )
        }
        .map_err(|e| format!("launching {}: {e:?}", self.names[entry]))
    }
}

impl Drop for CudaModule {
    fn drop(&mut self) {
        if self.core.bind().is_ok() {
            // SAFETY: the context is bound; synchronizing first guarantees no launch still uses
            // the module, which this (its only owner) unloads once.
            unsafe {
                let _ = dr::stream::synchronize(self.core.stream.0);
                let _ = dr::module::unload(self.module.0);
            }
        }
    }
}

/// cuBLAS and cuBLASLt handles plus the cuBLASLt workspace.
struct Blas {
    cublas: Raw<cudarc::cublas::sys::cublasHandle_t>,
    lt: Raw<cudarc::cublaslt::sys::cublasLtHandle_t>,
    workspace: DPtr,
    ws_bytes: usize,
}

/// A CUDA device.
pub struct CudaGpu {
    core: Arc<Core>,
    name: String,
    cc: (i32, i32),
    sms: u32,
    blas: Option<Mutex<Blas>>,
    /// Loaded modules by source, while some executable holds them.
    modules: Mutex<HashMap<u64, Weak<CudaModule>>>,
}

/// cuBLASLt workspace (what NVIDIA recommends for Hopper).
const WORKSPACE: usize = 32 << 20;

impl CudaGpu {
    /// Open device `ordinal` (the caller has checked the libraries and the device).
    pub fn new(ordinal: usize) -> Result<CudaGpu, String> {
        let ctx = CudaContext::new(ordinal).map_err(|e| format!("CUDA context: {e:?}"))?;
        ctx.bind_to_thread().map_err(|e| format!("{e:?}"))?;
        let stream = dr::stream::create(dr::stream::StreamKind::NonBlocking)
            .map_err(|e| format!("creating a CUDA stream: {e:?}"))?;
        let cc = ctx
            .compute_capability()
            .map_err(|e| format!("compute capability: {e:?}"))?;
        let sms = ctx
            .attribute(ds::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| format!("{e:?}"))? as u32;
        let name = ctx.name().unwrap_or_else(|_| "CUDA device".into());
        let core = Arc::new(Core {
            ctx,
            stream: Raw(stream),
        });
        let blas = if loader::cublas_present() {
            Some(Mutex::new(Self::open_blas(&core)?))
        } else {
            None
        };
        Ok(CudaGpu {
            core,
            name,
            cc,
            sms,
            blas,
            modules: Mutex::new(HashMap::new()),
        })
    }

    fn open_blas(core: &Core) -> Result<Blas, String> {
        use cudarc::{cublas, cublaslt};
        let h = cublas::result::create_handle().map_err(|e| format!("cublasCreate: {e:?}"))?;
        // SAFETY: `h` is the handle just created and `core.stream` a live stream of the bound
        // context; the cast only changes the handle's nominal type (both are CUstream).
        unsafe { cublas::result::set_stream(h, core.stream.0 as cublas::sys::cudaStream_t) }
            .map_err(|e| format!("cublasSetStream: {e:?}"))?;
        let lt = cublaslt::result::create_handle().map_err(|e| format!("cublasLtCreate: {e:?}"))?;
        // SAFETY: a plain device allocation on the bound context (the result is checked); it is
        // freed once, in CudaGpu's drop.
        let workspace = unsafe { dr::malloc_sync(WORKSPACE) }
            .map_err(|e| format!("allocating the cuBLASLt workspace: {e:?}"))?;
        Ok(Blas {
            cublas: Raw(h),
            lt: Raw(lt),
            workspace,
            ws_bytes: WORKSPACE,
        })
    }

    /// `(major, minor)` compute capability.
    pub fn compute_capability(&self) -> (i32, i32) {
        self.cc
    }

    /// The NVRTC image for this device: a CUBIN for its architecture when NVRTC targets
    /// it, else PTX for the newest architecture NVRTC knows that the device can run.
    fn image(&self, source: &str) -> Result<Arc<nvrtc::Image>, String> {
        let cc = self.cc.0 * 10 + self.cc.1;
        let archs = nvrtc::supported_archs()?;
        if archs.contains(&cc) {
            return nvrtc::compile(source, cc, nvrtc::Output::Cubin);
        }
        let best = archs
            .iter()
            .copied()
            .filter(|&a| a <= cc)
            .max()
            .ok_or_else(|| format!("this NVRTC cannot target compute capability {cc}"))?;
        nvrtc::compile(source, best, nvrtc::Output::Ptx)
    }
}

impl Drop for CudaGpu {
    fn drop(&mut self) {
        let _ = self.core.bind();
        if let Some(b) = &self.blas {
            let b = b.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the context is bound; the handles and workspace were created by open_blas
            // and are destroyed exactly once here, while the Blas mutex is held (no GEMM in
            // flight).
            unsafe {
                let _ = cudarc::cublas::result::destroy_handle(b.cublas.0);
                let _ = cudarc::cublaslt::result::destroy_handle(b.lt.0);
                let _ = dr::free_sync(b.workspace);
            }
        }
    }
}

impl Gpu for CudaGpu {
    fn describe(&self) -> String {
        format!("{} (sm_{}{})", self.name, self.cc.0, self.cc.1)
    }
    fn sm_count(&self) -> u32 {
        self.sms
    }
    fn alloc(&self, bytes: usize) -> Result<DPtr, String> {
        self.core.bind()?;
        // SAFETY: a plain device allocation on the bound context; the result is checked.
        unsafe { dr::malloc_sync(bytes.max(256)) }
            .map_err(|e| format!("cuMemAlloc of {bytes} bytes: {e:?}"))
    }
    fn free(&self, p: DPtr) {
        if self.core.bind().is_ok() {
            // SAFETY: the context is bound; the stream is synchronized first, so no queued work
            // still uses `p`, a pointer from `alloc` that the caller frees once.
            unsafe {
                let _ = dr::stream::synchronize(self.core.stream.0);
                let _ = dr::free_sync(p);
            }
        }
    }
    fn upload(&self, dst: DPtr, src: &[u8]) -> Result<(), String> {
        self.core.bind()?;
        // SAFETY: `src` is pageable host memory (a Rust slice never registered with the
        // driver), for which cuMemcpyHtoDAsync returns only after staging it, so it may be
        // freed after the call; `dst` is a device pointer of the caller's allocation (a bad one
        // is a CUDA error on the device, not a host memory access).
        unsafe { dr::memcpy_htod_async(dst, src, self.core.stream.0) }
            .map_err(|e| format!("copying {} bytes to the device: {e:?}", src.len()))
    }
    fn download(&self, dst: &mut [u8], src: DPtr) -> Result<(), String> {
        self.core.bind()?;
        // SAFETY: `dst` is an exclusive host slice of the copy's length, and the stream is
        // synchronized before returning, so the copy has finished writing it before the borrow
        // ends.
        unsafe {
            dr::memcpy_dtoh_async(dst, src, self.core.stream.0)
                .map_err(|e| format!("copying {} bytes from the device: {e:?}", dst.len()))?;
            dr::stream::synchronize(self.core.stream.0).map_err(|e| format!("{e:?}"))
        }
    }
    fn zero(&self, dst: DPtr, bytes: usize) -> Result<(), String> {
        self.core.bind()?;
        // SAFETY: writes device memory only (`bytes` from `dst`, within the caller's
        // allocation); no host memory is touched.
        unsafe { dr::memset_d8_async(dst, 0, bytes, self.core.stream.0) }
            .map_err(|e| format!("{e:?}"))
    }
    fn load(&self, source: &str, entries: &[String]) -> Result<Arc<dyn Module>, String> {
        let key = crate::device::module_key(source, entries);
        if let Some(m) = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .and_then(Weak::upgrade)
        {
            return Ok(m);
        }
        let img = self.image(source)?;
        self.core.bind()?;
        // SAFETY: `img.bytes` is a complete CUBIN/PTX image from NVRTC (PTX NUL-terminated, as
        // nvrtc::compile returns it), alive for the call; the context is bound.
        let module = unsafe { dr::module::load_data(img.bytes.as_ptr() as *const c_void) }
            .map_err(|e| format!("loading the compiled kernels ({:?}): {e:?}", img.kind))?;
        let mut funcs = Vec::with_capacity(entries.len());
        for e in entries {
            // SAFETY: `module` was just loaded on the bound context and the name is a valid C
            // string.
            let f = unsafe { dr::module::get_function(module, CString::new(e.as_str()).unwrap()) }
                .map_err(|x| format!("kernel {e} missing from the module: {x:?}"))?;
            funcs.push(Raw(f));
        }
        let m = Arc::new(CudaModule {
            core: self.core.clone(),
            module: Raw(module),
            funcs,
            names: entries.to_vec(),
        });
        let mut cache = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        cache.retain(|_, w| w.strong_count() > 0);
        cache.insert(key, Arc::downgrade(&m));
        Ok(m)
    }
    fn has_blas(&self) -> bool {
        self.blas.is_some()
    }
    fn gemm(&self, call: &GemmCall) -> Result<(), String> {
        let b = self.blas.as_ref().ok_or("cuBLAS is not loaded")?;
        let b = b.lock().unwrap_or_else(|e| e.into_inner());
        self.core.bind()?;
        if call.epilogue.is_some() {
            crate::cublas::lt_gemm(b.lt.0, b.workspace, b.ws_bytes, self.core.stream.0, call)
        } else {
            crate::cublas::gemm(b.cublas.0, call)
        }
    }
    fn has_fp8(&self) -> bool {
        // fp8 tensor cores: Ada (8.9) and Hopper (9.0) onwards.
        self.blas.is_some() && (self.cc.0 * 10 + self.cc.1) >= 89
    }
    fn fp8_gemm(&self, call: &Fp8Call) -> Result<(), String> {
        let b = self.blas.as_ref().ok_or("cuBLASLt is not loaded")?;
        let b = b.lock().unwrap_or_else(|e| e.into_inner());
        self.core.bind()?;
        crate::cublas::fp8_gemm(b.lt.0, b.workspace, b.ws_bytes, self.core.stream.0, call)
    }
    fn synchronize(&self) -> Result<(), String> {
        self.core.bind()?;
        // SAFETY: the stream is a live stream of the context, bound above.
        unsafe { dr::stream::synchronize(self.core.stream.0) }
            .map_err(|e| format!("CUDA error: {e:?}"))
    }
}
