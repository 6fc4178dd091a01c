//! The host emulator: runs generated programs without a GPU, for testing.
//!
//! The generated CUDA C is compiled by the system C++ compiler (`$CXX`, else `c++`)
//! together with [`shim::SHIM`], which supplies thread indices, barriers (cooperative
//! fibers), shared memory and atomics; device memory is host memory; BLAS calls are
//! evaluated literally with cuBLAS's column-major semantics. The executor above the
//! [`Gpu`] trait is the same code that drives a real device, so its planning, argument
//! marshalling and BLAS operand mapping are exercised by ordinary `cargo test`.
//!
//! Numerics differ from a GPU only by the math library (glibc instead of CUDA's).
//!
//! The emulator takes either dialect ([`EmuGpu::with_dialect`]): the HIP device of
//! `rlx-rocm` is tested through it as an emulator that generates HIP source and, like
//! rocBLAS, offers no fused GEMM epilogue and no fp8 GEMM.

pub mod shim;

use crate::device::{Batching, DPtr, Dialect, Fp8Call, GemmCall, Gpu, Module};
use rlx_ir::{Activation, DType, ScaledFormat};
use std::alloc::Layout;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// The emulator's globals (thread indices, fibers) are shared by every module: one
/// launch at a time per process.
static LAUNCH: Mutex<()> = Mutex::new(());

type RunFn = unsafe extern "C" fn(
    unsafe extern "C" fn(*const u8),
    *const u8,
    u32,
    u32,
    u32,
    u32,
    u32,
    u32,
    i32,
) -> i32;

/// A compiled emulator module.
struct EmuModule {
    _lib: libloading::Library,
    run: RunFn,
    tramps: Vec<unsafe extern "C" fn(*const u8)>,
    names: Vec<String>,
}

impl Module for EmuModule {
    fn launch(
        &self,
        entry: usize,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        params: &[u8],
        sync: bool,
    ) -> Result<(), String> {
        // The parameter block as 8-byte words (the struct's alignment).
        let words: Vec<u64> = params
            .chunks(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect();
        let _g = LAUNCH.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `run` and the trampoline were resolved from this module's library, which
        // `_lib` keeps loaded; the trampoline reads one `P{kid}` struct from the parameter
        // block, and `words` holds the `(np + nm)·8` bytes exec::step builds for exactly that
        // struct (8-byte aligned, alive for the call); the pointers inside are emulator
        // allocations sized by the plan; LAUNCH serialises launches, since the shim's globals
        // are shared.
        let r = unsafe {
            (self.run)(
                self.tramps[entry],
                words.as_ptr() as *const u8,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                sync as i32,
            )
        };
        let name = &self.names[entry];
        match r {
            0 => {}
            1 => {
                return Err(format!(
                    "emulator: some threads of {name} finished while others waited at a barrier"
                ));
            }
            2 => {
                return Err(format!(
                    "emulator: a warp shuffle of {name} cannot complete: threads of its warp \
                     (segment) exited, wait at a barrier or at another shuffle, or the block of \
                     {block:?} threads ends inside the warp"
                ));
            }
            3 => {
                return Err(format!(
                    "emulator: {name} shuffles in a launch without cooperating threads \
                     (launch it as a block kernel: sync = true)"
                ));
            }
            4 => {
                return Err(format!(
                    "emulator: {name} shuffles with a partial warp mask (only 0xffffffff is \
                     emulated)"
                ));
            }
            r => return Err(format!("emulator: {name} failed with code {r}")),
        }
        Ok(())
    }
}

/// The host emulator device.
pub struct EmuGpu {
    cxx: String,
    dir: PathBuf,
    allocs: Mutex<HashMap<u64, Layout>>,
    modules: Mutex<HashMap<u64, Arc<EmuModule>>>,
    fp8: bool,
    dialect: Dialect,
    epilogue: bool,
}

impl EmuGpu {
    /// An emulator using `$CXX` (default `c++`); errors when no compiler runs.
    pub fn new() -> Result<EmuGpu, String> {
        let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
        let ok = std::process::Command::new(&cxx)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(format!(
                "the emulator needs a C++ compiler: `{cxx} --version` failed (set CXX)"
            ));
        }
        // Compiled programs are cached by content across processes; entries unused for a
        // day are removed.
        let dir = std::env::var_os("RLX_CUDA_EMU_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("rlx-cuda-emu-cache"));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let day = std::time::Duration::from_secs(24 * 3600);
            for e in entries.flatten() {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > day);
                if old {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(EmuGpu {
            cxx,
            dir,
            allocs: Mutex::new(HashMap::new()),
            modules: Mutex::new(HashMap::new()),
            fp8: true,
            dialect: Dialect::Cuda,
            epilogue: true,
        })
    }

    /// The dialect the executor generates for this emulator (CUDA by default; HIP to run
    /// the source the ROCm device compiles).
    pub fn with_dialect(mut self, dialect: Dialect) -> EmuGpu {
        self.dialect = dialect;
        self
    }

    /// Whether GEMMs take a fused epilogue (cuBLASLt's; off to plan like rocBLAS).
    pub fn with_blas_epilogue(mut self, on: bool) -> EmuGpu {
        self.epilogue = on;
        self
    }

    /// Whether the emulated device claims fp8 cuBLASLt support (tests both routes).
    pub fn with_fp8(mut self, on: bool) -> EmuGpu {
        self.fp8 = on;
        self
    }

    fn build(&self, source: &str, entries: &[String]) -> Result<EmuModule, String> {
        let mut full = String::with_capacity(source.len() + 4096);
        full.push_str(shim::SHIM);
        full.push_str(source);
        for e in entries {
            let kid: String = e[1..].chars().take_while(|c| c.is_ascii_digit()).collect();
            full.push_str(&format!(
                "extern \"C\" void rlx_t_{e}(const void* a) {{ {e}(*(const P{kid}*)a); }}\n"
            ));
        }
        let mut h = std::collections::hash_map::DefaultHasher::new();
        full.hash(&mut h);
        let key = h.finish();
        let so = self.dir.join(format!("{key:016x}.so"));
        if !so.exists() {
            // Unique scratch names: other threads and processes may build the same program.
            let tag = format!("{}-{:?}", std::process::id(), std::thread::current().id())
                .replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "");
            let cpp = self.dir.join(format!("{key:016x}.{tag}.cpp"));
            std::fs::write(&cpp, &full).map_err(|e| format!("{}: {e}", cpp.display()))?;
            let tmp = self.dir.join(format!("{key:016x}.{tag}.so"));
            let out = std::process::Command::new(&self.cxx)
                .args(["-O1", "-std=c++17", "-shared", "-fPIC", "-w", "-o"])
                .arg(&tmp)
                .arg(&cpp)
                .output()
                .map_err(|e| format!("{}: {e}", self.cxx))?;
            if !out.status.success() {
                return Err(format!(
                    "the host compiler rejected the generated program:\n{}\n--- source ---\n{}",
                    String::from_utf8_lossy(&out.stderr),
                    crate::nvrtc::numbered(&full)
                ));
            }
            let _ = std::fs::remove_file(&cpp);
            std::fs::rename(&tmp, &so).map_err(|e| e.to_string())?;
        }
        // SAFETY: the library is the shim plus generated source this emulator just compiled (or
        // its content-addressed cached build), whose initialisers only set up the shim's
        // statics.
        let lib = unsafe { libloading::Library::new(&so) }.map_err(|e| e.to_string())?;
        // SAFETY: `rlx_emu_run` is defined by the shim with exactly RunFn's C signature; the
        // copied function pointer is used only while `_lib` keeps the library loaded.
        let run: RunFn = unsafe {
            *lib.get::<RunFn>(b"rlx_emu_run\0")
                .map_err(|e| e.to_string())?
        };
        let mut tramps = Vec::with_capacity(entries.len());
        for e in entries {
            let sym = format!("rlx_t_{e}\0");
            // SAFETY: every `rlx_t_<entry>` is the `extern "C" void(const void*)` trampoline
            // written above for that entry; used only while `_lib` keeps the library loaded.
            let f: unsafe extern "C" fn(*const u8) = unsafe {
                *lib.get::<unsafe extern "C" fn(*const u8)>(sym.as_bytes())
                    .map_err(|x| x.to_string())?
            };
            tramps.push(f);
        }
        Ok(EmuModule {
            _lib: lib,
            run,
            tramps,
            names: entries.to_vec(),
        })
    }
}

impl EmuGpu {
    /// `Err` unless `p..p + bytes` lies inside one live allocation: device addresses
    /// are host addresses here, and the safe [`Gpu`] methods must not write elsewhere.
    fn check_range(&self, p: DPtr, bytes: usize, what: &str) -> Result<(), String> {
        let allocs = self.allocs.lock().unwrap_or_else(|e| e.into_inner());
        let inside = allocs.iter().any(|(&base, l)| {
            p >= base
                && (p - base)
                    .checked_add(bytes as u64)
                    .is_some_and(|end| end <= l.size() as u64)
        });
        if inside {
            Ok(())
        } else {
            Err(format!(
                "emulator: {what} of {bytes} bytes at {p:#x} is outside every allocation"
            ))
        }
    }
}

/// Read element `i` of a `dt` matrix at `p` as f64.
///
/// # Safety
/// `p` must hold element `i` of `dt` (a BLAS dtype), aligned.
unsafe fn rd(dt: DType, p: u64, i: usize) -> f64 {
    // SAFETY: the caller guarantees element `i` of `dt` at `p`, aligned (emulator allocations
    // are 256-byte aligned and the plan's offsets are whole elements).
    unsafe {
        match dt {
            DType::F32 => *(p as *const f32).add(i) as f64,
            DType::F64 => *(p as *const f64).add(i),
            DType::F16 => half::f16::from_bits(*(p as *const u16).add(i)).to_f64(),
            DType::BF16 => half::bf16::from_bits(*(p as *const u16).add(i)).to_f64(),
            _ => unreachable!("BLAS dtypes only"),
        }
    }
}

/// Write element `i` of a `dt` matrix at `p`.
///
/// # Safety
/// `p` must hold element `i` of `dt` (a BLAS dtype), aligned, not accessed meanwhile.
unsafe fn wr(dt: DType, p: u64, i: usize, v: f64) {
    // SAFETY: the caller guarantees element `i` of `dt` at `p`, aligned and not accessed by
    // anyone else during the write.
    unsafe {
        match dt {
            DType::F32 => *(p as *mut f32).add(i) = v as f32,
            DType::F64 => *(p as *mut f64).add(i) = v,
            DType::F16 => *(p as *mut u16).add(i) = rlx_ir::f16_from_f64(v).to_bits(),
            DType::BF16 => *(p as *mut u16).add(i) = rlx_ir::bf16_from_f64(v).to_bits(),
            _ => unreachable!("BLAS dtypes only"),
        }
    }
}

impl Gpu for EmuGpu {
    fn describe(&self) -> String {
        match self.dialect {
            Dialect::Cuda => format!("host emulator ({})", self.cxx),
            Dialect::Hip => format!("host emulator of HIP ({})", self.cxx),
        }
    }
    fn dialect(&self) -> Dialect {
        self.dialect
    }
    fn has_blas_epilogue(&self) -> bool {
        self.epilogue
    }
    fn sm_count(&self) -> u32 {
        4
    }
    fn alloc(&self, bytes: usize) -> Result<DPtr, String> {
        let layout = Layout::from_size_align(bytes.max(1), 256).map_err(|e| e.to_string())?;
        // SAFETY: `layout` has a non-zero size (`bytes.max(1)`) and a valid power-of-two
        // alignment (from_size_align checked it); a null result is handled below.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(format!("emulator: out of memory allocating {bytes} bytes"));
        }
        self.allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p as u64, layout);
        Ok(p as u64)
    }
    fn free(&self, p: DPtr) {
        if let Some(l) = self
            .allocs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&p)
        {
            // SAFETY: `p` was returned by alloc_zeroed with exactly layout `l` (recorded at
            // allocation and removed here, so each block is freed once).
            unsafe { std::alloc::dealloc(p as *mut u8, l) };
        }
    }
    fn upload(&self, dst: DPtr, src: &[u8]) -> Result<(), String> {
        self.check_range(dst, src.len(), "upload")?;
        // SAFETY: `dst..dst + len` lies inside one live allocation of this emulator
        // (checked above), a heap block distinct from the caller's `src` slice.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }
    fn download(&self, dst: &mut [u8], src: DPtr) -> Result<(), String> {
        self.check_range(src, dst.len(), "download")?;
        // SAFETY: `src..src + len` lies inside one live allocation (checked above), which
        // the exclusive `dst` slice cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
    fn zero(&self, dst: DPtr, bytes: usize) -> Result<(), String> {
        self.check_range(dst, bytes, "zero")?;
        // SAFETY: `dst..dst + bytes` lies inside one live allocation (checked above).
        unsafe { std::ptr::write_bytes(dst as *mut u8, 0, bytes) };
        Ok(())
    }
    fn load(&self, source: &str, entries: &[String]) -> Result<Arc<dyn Module>, String> {
        let key = crate::device::module_key(source, entries);
        if let Some(m) = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(m.clone());
        }
        let m = Arc::new(self.build(source, entries)?);
        self.modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, m.clone());
        Ok(m)
    }
    fn has_blas(&self) -> bool {
        true
    }
    fn gemm(&self, c: &GemmCall) -> Result<(), String> {
        let w = c.dtype.size_bytes() as u64;
        for bi in 0..c.batch {
            let (a, b, cc) = match &c.batching {
                Batching::Strided { a, b, c: sc } => (
                    c.a + (bi as i64 * a) as u64 * w,
                    c.b + (bi as i64 * b) as u64 * w,
                    c.c + (bi as i64 * sc) as u64 * w,
                ),
                // SAFETY: for pointer batching the plan uploads three arrays of `batch` device
                // (here: host) addresses into emulator allocations, and `bi < batch`.
                Batching::Pointers { a, b, c: pc } => unsafe {
                    (
                        *(*a as *const u64).add(bi),
                        *(*b as *const u64).add(bi),
                        *(*pc as *const u64).add(bi),
                    )
                },
            };
            for j in 0..c.n {
                for i in 0..c.m {
                    let mut acc = 0f64;
                    for l in 0..c.k {
                        let x = if c.transa {
                            l + i * c.lda
                        } else {
                            i + l * c.lda
                        };
                        let y = if c.transb {
                            j + l * c.ldb
                        } else {
                            l + j * c.ldb
                        };
                        // SAFETY: `x` and `y` index op(A)(i, l) and op(B)(l, j) of column-major
                        // operands with leading dimensions lda/ldb, for `i < m`, `j < n`, `l <
                        // k`: inside the matrices the plan allocated for this call.
                        unsafe { acc += rd(c.dtype, a, x) * rd(c.dtype, b, y) };
                    }
                    if let Some(e) = &c.epilogue {
                        if !self.epilogue {
                            return Err("emulator: a GEMM epilogue was planned for a device \
                                        without one (has_blas_epilogue is false)"
                                .into());
                        }
                        if let Some(bias) = e.bias {
                            // SAFETY: the bias holds `m` elements of the call's dtype and `i <
                            // m`.
                            acc += unsafe { rd(c.dtype, bias, i) };
                        }
                        acc = match e.act {
                            Some(Activation::Relu) => acc.max(0.0),
                            Some(Activation::GeluApprox) => {
                                let u = (2.0 / std::f64::consts::PI).sqrt()
                                    * (acc + 0.044715 * acc * acc * acc);
                                0.5 * acc * (1.0 + u.tanh())
                            }
                            Some(a) => {
                                return Err(format!("cuBLASLt has no {} epilogue", a.name()));
                            }
                            None => acc,
                        };
                    }
                    // SAFETY: `(i, j)` with `i < m`, `j < n` is an element of C (leading
                    // dimension ldc) in the allocation the plan made for it; the emulator runs
                    // one GEMM at a time.
                    unsafe { wr(c.dtype, cc, i + j * c.ldc, acc) };
                }
            }
        }
        Ok(())
    }
    fn has_fp8(&self) -> bool {
        self.fp8
    }
    fn fp8_gemm(&self, c: &Fp8Call) -> Result<(), String> {
        let fa = if c.a_e4m3 {
            ScaledFormat::F8E4M3
        } else {
            ScaledFormat::F8E5M2
        };
        let fb = if c.b_e4m3 {
            ScaledFormat::F8E4M3
        } else {
            ScaledFormat::F8E5M2
        };
        // SAFETY: the scales are one f32 each; A and B hold `k·m` and `k·n` bytes (ld = k) and
        // D `m·n` f32s (ld = m), as Fp8Call documents and the plan allocates; every index below
        // stays under those sizes; D does not overlap the inputs.
        unsafe {
            let (sa, sb) = (
                *(c.a_scale as *const f32) as f64,
                *(c.b_scale as *const f32) as f64,
            );
            for j in 0..c.n {
                for i in 0..c.m {
                    let mut acc = 0f64;
                    for l in 0..c.k {
                        let x = fa.decode(*(c.a as *const u8).add(l + i * c.k)) as f64 * sa;
                        let y = fb.decode(*(c.b as *const u8).add(l + j * c.k)) as f64 * sb;
                        acc += x * y;
                    }
                    *(c.d as *mut f32).add(i + j * c.m) = acc as f32;
                }
            }
        }
        Ok(())
    }
    fn synchronize(&self) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(test)]
#[path = "shuffle_tests.rs"]
mod shuffle_tests;
