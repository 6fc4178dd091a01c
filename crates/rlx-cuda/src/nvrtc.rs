//! Compiling generated CUDA C with NVRTC, and the compile cache.
//!
//! One program's kernels form one translation unit, compiled once per target and kept
//! in a process-wide cache keyed by the source text and the target, so a graph that
//! recompiles (a new `Func`, a cleared runtime cache) does not pay NVRTC again.

use crate::loader;
use cudarc::nvrtc::sys;
use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};

/// What NVRTC produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    /// PTX text for a virtual architecture (`compute_XY`), JIT-compiled by the driver.
    Ptx,
    /// A CUBIN for a real architecture (`sm_XY`): no driver JIT, so it also loads under
    /// a driver older than this NVRTC.
    Cubin,
}

/// A compiled image: PTX text (NUL-terminated) or CUBIN bytes.
#[derive(Debug, Clone)]
pub struct Image {
    /// Which kind.
    pub kind: Output,
    /// The bytes (PTX includes its trailing NUL, as `cuModuleLoadData` wants).
    pub bytes: Vec<u8>,
    /// The NVRTC log (warnings), possibly empty.
    pub log: String,
}

impl Image {
    /// The PTX text (for PTX images).
    pub fn ptx_text(&self) -> Option<&str> {
        match self.kind {
            Output::Ptx => CStr::from_bytes_until_nul(&self.bytes)
                .ok()
                .and_then(|c| c.to_str().ok()),
            Output::Cubin => None,
        }
    }
}

/// `(major, minor)` of the loaded NVRTC.
pub fn version() -> Result<(i32, i32), String> {
    if !loader::nvrtc_present() {
        return Err(loader::describe());
    }
    let (mut a, mut b) = (0, 0);
    // SAFETY: NVRTC is loaded (nvrtc_present checked above, so cudarc's lazy binding will not
    // panic) and both out-pointers are live local i32s.
    let r = unsafe { sys::nvrtcVersion(&mut a, &mut b) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcVersion failed: {r:?}"));
    }
    Ok((a, b))
}

/// The compute capabilities (as `major·10 + minor`) this NVRTC can target.
pub fn supported_archs() -> Result<Vec<i32>, String> {
    if !loader::nvrtc_present() {
        return Err(loader::describe());
    }
    let mut n = 0;
    // SAFETY: NVRTC is loaded (checked above); `n` is a live local.
    let r = unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcGetNumSupportedArchs failed: {r:?}"));
    }
    let mut v = vec![0i32; n.max(0) as usize];
    // SAFETY: NVRTC writes exactly the `n` architectures it just reported, and `v` holds `n`.
    let r = unsafe { sys::nvrtcGetSupportedArchs(v.as_mut_ptr()) };
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(format!("nvrtcGetSupportedArchs failed: {r:?}"));
    }
    Ok(v)
}

type Cache = Mutex<HashMap<u64, Arc<Image>>>;

fn cache() -> &'static Cache {
    static C: OnceLock<Cache> = OnceLock::new();
    C.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Number of NVRTC compilations this process ran (cache misses), for tests and `explain`.
pub fn compilations() -> usize {
    COMPILES.load(std::sync::atomic::Ordering::Relaxed)
}

static COMPILES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Compile `src` for compute capability `cc` (e.g. `90`) to `out`, through the cache.
///
/// Errors carry NVRTC's log with line numbers, and the target.
pub fn compile(src: &str, cc: i32, out: Output) -> Result<Arc<Image>, String> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    src.hash(&mut h);
    cc.hash(&mut h);
    out.hash(&mut h);
    let key = h.finish();
    if let Some(img) = cache().lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(img.clone());
    }
    let img = Arc::new(compile_uncached(src, cc, out)?);
    cache()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, img.clone());
    Ok(img)
}

fn check(r: sys::nvrtcResult, what: &str) -> Result<(), String> {
    if r == sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        // SAFETY: check() runs only on results of NVRTC calls, so NVRTC is loaded;
        // nvrtcGetErrorString returns a pointer to a static NUL-terminated string for any
        // result code.
        let msg = unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(r)) };
        Err(format!("{what} failed: {}", msg.to_string_lossy()))
    }
}

/// Owns an `nvrtcProgram` and destroys it on every exit path.
struct Prog(sys::nvrtcProgram);

impl Drop for Prog {
    fn drop(&mut self) {
        // SAFETY: `self.0` is the program nvrtcCreateProgram created (a Prog exists only after
        // it succeeded), destroyed once here.
        unsafe {
            sys::nvrtcDestroyProgram(&mut self.0);
        }
    }
}

fn compile_uncached(src: &str, cc: i32, out: Output) -> Result<Image, String> {
    if !loader::nvrtc_present() {
        return Err(format!(
            "cannot compile CUDA kernels: {}",
            loader::describe()
        ));
    }
    COMPILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let csrc = CString::new(src).map_err(|_| "generated source contains a NUL byte".to_string())?;
    let name = CString::new("rlx_program.cu").unwrap();
    let mut raw: sys::nvrtcProgram = std::ptr::null_mut();
    check(
        // SAFETY: NVRTC is loaded (nvrtc_present above); `raw` is a live out-pointer; the
        // source and name are NUL-terminated CStrings alive for the call; zero headers with
        // null arrays.
        unsafe {
            sys::nvrtcCreateProgram(
                &mut raw,
                csrc.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            )
        },
        "nvrtcCreateProgram",
    )?;
    let prog = Prog(raw);
    let arch = match out {
        Output::Ptx => format!("--gpu-architecture=compute_{cc}"),
        Output::Cubin => format!("--gpu-architecture=sm_{cc}"),
    };
    // Precise division and square root, no flush-to-zero: the numerics the oracle defines.
    let opts: Vec<CString> = [
        arch.as_str(),
        "--std=c++17",
        "--fmad=true",
        "--prec-div=true",
        "--prec-sqrt=true",
        "--ftz=false",
        "-default-device",
    ]
    .iter()
    .map(|s| CString::new(*s).unwrap())
    .collect();
    let ptrs: Vec<*const c_char> = opts.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: `prog.0` is a live program; `ptrs` holds `ptrs.len()` pointers to NUL-terminated
    // options owned by `opts`, alive for the call.
    let r = unsafe { sys::nvrtcCompileProgram(prog.0, ptrs.len() as i32, ptrs.as_ptr()) };
    let log = program_log(&prog);
    if r != sys::nvrtcResult::NVRTC_SUCCESS {
        // SAFETY: NVRTC is loaded; nvrtcGetErrorString returns a static NUL-terminated string.
        let msg = unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(r)) };
        return Err(format!(
            "NVRTC failed to compile the generated kernels for {arch} ({}):\n{log}\n--- source ---\n{}",
            msg.to_string_lossy(),
            numbered(src)
        ));
    }
    let bytes = match out {
        Output::Ptx => {
            let mut n = 0usize;
            check(
                // SAFETY: `prog.0` is a compiled live program; `n` is a live local.
                unsafe { sys::nvrtcGetPTXSize(prog.0, &mut n) },
                "nvrtcGetPTXSize",
            )?;
            let mut b = vec![0u8; n];
            check(
                // SAFETY: NVRTC writes exactly the size it reported (PTX with its NUL) and `b`
                // holds `n` bytes.
                unsafe { sys::nvrtcGetPTX(prog.0, b.as_mut_ptr() as *mut c_char) },
                "nvrtcGetPTX",
            )?;
            b
        }
        Output::Cubin => {
            let mut n = 0usize;
            check(
                // SAFETY: `prog.0` is a compiled live program; `n` is a live local.
                unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut n) },
                "nvrtcGetCUBINSize",
            )?;
            let mut b = vec![0u8; n];
            check(
                // SAFETY: NVRTC writes exactly the size it reported and `b` holds `n` bytes.
                unsafe { sys::nvrtcGetCUBIN(prog.0, b.as_mut_ptr() as *mut c_char) },
                "nvrtcGetCUBIN",
            )?;
            b
        }
    };
    Ok(Image {
        kind: out,
        bytes,
        log,
    })
}

fn program_log(prog: &Prog) -> String {
    let mut n = 0usize;
    // SAFETY: `prog.0` is a live program; `n` is a live local.
    if unsafe { sys::nvrtcGetProgramLogSize(prog.0, &mut n) } != sys::nvrtcResult::NVRTC_SUCCESS {
        return String::new();
    }
    let mut b = vec![0u8; n.max(1)];
    // SAFETY: NVRTC writes the `n`-byte log (NUL included) it reported; `b` holds `max(n, 1)`.
    if unsafe { sys::nvrtcGetProgramLog(prog.0, b.as_mut_ptr() as *mut c_char) }
        != sys::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    CStr::from_bytes_until_nul(&b)
        .map(|c| c.to_string_lossy().trim().to_string())
        .unwrap_or_default()
}

/// The source with line numbers (NVRTC's log refers to them).
pub fn numbered(src: &str) -> String {
    src.lines()
        .enumerate()
        .map(|(i, l)| format!("{:5} {l}\n", i + 1))
        .collect()
}
