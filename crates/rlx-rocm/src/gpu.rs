//! The HIP implementation of the executor's device contract ([`rlx_cuda::device::Gpu`]):
//! device memory and copies through the HIP runtime, programs generated in the HIP
//! dialect and compiled by hiprtc for the device's `gfx` architecture, launches on the
//! null stream, and GEMMs on rocBLAS when it loads (else the planner's generated GEMM).

use crate::hip::{Hip, runtime};
use crate::hiprtc;
use crate::rocblas::RocBlas;
use rlx_cuda::device::{DPtr, Dialect, Fp8Call, GemmCall, Gpu, Module};
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::{Arc, Mutex};

/// An AMD GPU driven through the HIP runtime.
pub struct HipGpu {
    hip: &'static Hip,
    dev: c_int,
    name: String,
    arch: String,
    sms: u32,
    blas: Option<RocBlas>,
    /// Why rocBLAS is not used (for [`HipGpu::blas_status`]).
    blas_note: String,
    /// Live allocations and their sizes: the safe [`Gpu`] copies are checked against them.
    allocs: Mutex<HashMap<u64, usize>>,
    modules: Mutex<HashMap<u64, Arc<HipModule>>>,
}

/// A loaded code object and its resolved entry points.
struct HipModule {
    hip: &'static Hip,
    dev: c_int,
    module: u64,
    funcs: Vec<u64>,
}

impl Drop for HipModule {
    fn drop(&mut self) {
        let _ = self.hip.set_device(self.dev);
        self.hip.unload(self.module);
    }
}

impl Module for HipModule {
    fn launch(
        &self,
        entry: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        params: &[u8],
        _sync: bool,
    ) -> Result<(), String> {
        self.hip.set_device(self.dev)?;
        let f = *self
            .funcs
            .get(entry)
            .ok_or_else(|| format!("HIP: no entry point {entry} in this module"))?;
        // SAFETY: `f` belongs to this live module; the executor builds `params` as the
        // kernel's one `P{kid}` struct (the layout the generated source declares), whose
        // pointers are arena addresses of this device.
        unsafe { self.hip.launch(f, grid, block, params) }
    }
}

impl HipGpu {
    /// Open device `dev` (the HIP runtime must load and report it); rocBLAS is opened
    /// when present. `RLX_HIP_ARCH` overrides the architecture the device reports.
    pub fn new(dev: usize) -> Result<HipGpu, String> {
        let hip = runtime()?;
        let n = hip.device_count()?;
        if dev >= n {
            return Err(format!(
                "HIP device {dev} requested, the HIP runtime reports {n} device(s)"
            ));
        }
        let dev = dev as c_int;
        hip.set_device(dev)?;
        let (name, sms, arch) = hip.describe(dev)?;
        let arch = match std::env::var("RLX_HIP_ARCH") {
            Ok(a) if !a.is_empty() => a,
            _ => arch.ok_or_else(|| {
                format!(
                    "HIP device {dev} ({name}): its gfx architecture could not be read from \
                     hipDeviceProp_t; set RLX_HIP_ARCH (e.g. gfx90a)"
                )
            })?,
        };
        let (blas, blas_note) = match RocBlas::open() {
            Ok(b) => (Some(b), "rocBLAS".to_string()),
            Err(e) => (None, e),
        };
        Ok(HipGpu {
            hip,
            dev,
            name,
            arch,
            sms,
            blas,
            blas_note,
            allocs: Mutex::new(HashMap::new()),
            modules: Mutex::new(HashMap::new()),
        })
    }

    /// The architecture kernels are compiled for (`gfx90a`, `gfx1100`, …).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// `"rocBLAS"`, or why GEMMs run as generated kernels.
    pub fn blas_status(&self) -> &str {
        &self.blas_note
    }

    fn check_range(&self, p: DPtr, bytes: usize, what: &str) -> Result<(), String> {
        let allocs = self.allocs.lock().unwrap_or_else(|e| e.into_inner());
        let inside = allocs.iter().any(|(&base, &size)| {
            p >= base
                && (p - base)
                    .checked_add(bytes as u64)
                    .is_some_and(|end| end <= size as u64)
        });
        if inside {
            Ok(())
        } else {
            Err(format!(
                "HIP: {what} of {bytes} bytes at {p:#x} is outside every allocation"
            ))
        }
    }
}

impl Gpu for HipGpu {
    fn describe(&self) -> String {
        format!("{} ({}, HIP)", self.name, self.arch)
    }
    fn sm_count(&self) -> u32 {
        self.sms
    }
    fn dialect(&self) -> Dialect {
        Dialect::Hip
    }
    fn alloc(&self, bytes: usize) -> Result<DPtr, String> {
        self.hip.set_device(self.dev)?;
        let p = self.hip.malloc(bytes.max(1))?;
        self.allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p, bytes.max(1));
        Ok(p)
    }
    fn free(&self, p: DPtr) {
        let known = self
            .allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&p)
            .is_some();
        if known && self.hip.set_device(self.dev).is_ok() {
            self.hip.free(p);
        }
    }
    fn upload(&self, dst: DPtr, src: &[u8]) -> Result<(), String> {
        self.check_range(dst, src.len(), "upload")?;
        self.hip.set_device(self.dev)?;
        // SAFETY: the range lies inside a live allocation of this device (checked above).
        unsafe { self.hip.htod(dst, src) }
    }
    fn download(&self, dst: &mut [u8], src: DPtr) -> Result<(), String> {
        self.check_range(src, dst.len(), "download")?;
        self.hip.set_device(self.dev)?;
        self.hip.synchronize()?;
        // SAFETY: the range lies inside a live allocation of this device (checked above).
        unsafe { self.hip.dtoh(dst, src) }
    }
    fn zero(&self, dst: DPtr, bytes: usize) -> Result<(), String> {
        self.check_range(dst, bytes, "zero")?;
        self.hip.set_device(self.dev)?;
        // SAFETY: the range lies inside a live allocation of this device (checked above).
        unsafe { self.hip.zero(dst, bytes) }
    }
    fn load(&self, source: &str, entries: &[String]) -> Result<Arc<dyn Module>, String> {
        let key = rlx_cuda::device::module_key(source, entries);
        if let Some(m) = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(m.clone());
        }
        let image = hiprtc::compile(source, "rlx_program.hip", &self.arch)
            .map_err(|e| format!("{e}\n--- source ---\n{}", rlx_cuda::nvrtc::numbered(source)))?;
        self.hip.set_device(self.dev)?;
        let (module, funcs) = self.hip.load(&image, entries)?;
        let m = Arc::new(HipModule {
            hip: self.hip,
            dev: self.dev,
            module,
            funcs,
        });
        self.modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, m.clone());
        Ok(m)
    }
    fn has_blas(&self) -> bool {
        self.blas.is_some()
    }
    fn has_blas_epilogue(&self) -> bool {
        false
    }
    fn gemm(&self, call: &GemmCall) -> Result<(), String> {
        let blas = self
            .blas
            .as_ref()
            .ok_or_else(|| format!("a GEMM was planned without rocBLAS: {}", self.blas_note))?;
        self.hip.set_device(self.dev)?;
        // SAFETY: the executor plans every operand inside this device's arena with the
        // dims and leading dimensions of `call` (pointer tables uploaded before the call).
        unsafe { blas.gemm(call) }
    }
    fn has_fp8(&self) -> bool {
        false
    }
    fn fp8_gemm(&self, _: &Fp8Call) -> Result<(), String> {
        Err(
            "HIP: scaled fp8 GEMMs are not routed to rocBLAS (has_fp8 is false); they run \
             as generated or host kernels"
                .into(),
        )
    }
    fn synchronize(&self) -> Result<(), String> {
        self.hip.set_device(self.dev)?;
        self.hip.synchronize()
    }
}
