//! hiprtc, the HIP run-time compiler, loaded when first used.
//!
//! Nothing is needed to build: the library is opened with `dlopen` the first time a
//! kernel is compiled. hiprtc ships inside the HIP runtime (`libamdhip64.so`, which
//! exports the `hiprtc*` functions; Debian's `libamdhip64-5` with `libhiprtc-builtins5`)
//! or as a library of its own (`libhiprtc.so`) in newer ROCm releases; both are tried,
//! `RLX_HIPRTC_LIB` (a file, or a directory holding one of them) first. Compiling needs
//! no GPU.

use libloading::{Library, Symbol};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

type Program = *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;

/// The library names tried on the loader's search path, newest layout first.
const NAMES: [&str; 4] = [
    "libhiprtc.so",
    "libhiprtc.so.6",
    "libamdhip64.so",
    "libamdhip64.so.5",
];

/// The opened library, or why it could not be opened (decided once per process).
fn library() -> Result<&'static Library, String> {
    static LIB: OnceLock<Result<Library, String>> = OnceLock::new();
    LIB.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<Library, String> {
    let mut tried = Vec::new();
    for c in crate::dl::candidates("RLX_HIPRTC_LIB", &NAMES) {
        // SAFETY: opening a shared library runs its initializers; the HIP runtime's are
        // safe to run in any process (they do not touch a GPU until asked).
        match unsafe { Library::new(&c) } {
            Ok(lib) => {
                // SAFETY: only checks that the symbol exists.
                if unsafe { lib.get::<CreateFn>(b"hiprtcCreateProgram\0") }.is_ok() {
                    return Ok(lib);
                }
                tried.push(format!("{} (no hiprtcCreateProgram)", c.display()));
            }
            Err(_) => tried.push(c.display().to_string()),
        }
    }
    Err(format!(
        "hiprtc cannot be loaded (tried {}); install the HIP runtime (Debian: `apt-get install \
         libamdhip64-5 libhiprtc-builtins5`) or set RLX_HIPRTC_LIB",
        tried.join(", ")
    ))
}

/// The GPU architectures (`gfx90a`, `gfx1030`, …) the loaded HIP runtime's code-object
/// manager (comgr) can target, or why they cannot be listed.
///
/// An older comgr crashes (rather than failing) when asked to compile for a target it
/// predates — Debian's HIP 5.2 on `gfx1100` — so [`compile`] checks this list first.
pub fn supported_archs() -> Result<Vec<String>, String> {
    static ARCHS: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    ARCHS.get_or_init(list_archs).clone()
}

type IsaCountFn = unsafe extern "C" fn(*mut usize) -> c_int;
type IsaNameFn = unsafe extern "C" fn(usize, *mut *const c_char) -> c_int;

fn list_archs() -> Result<Vec<String>, String> {
    library()?;
    let mut errors = Vec::new();
    for name in ["libamd_comgr.so", "libamd_comgr.so.3", "libamd_comgr.so.2"] {
        // SAFETY: comgr is already loaded as a dependency of hiprtc; this takes a second
        // reference to it (its initializers have run).
        let lib = match unsafe { Library::new(name) } {
            Ok(l) => l,
            Err(e) => {
                errors.push(format!("{name}: {e}"));
                continue;
            }
        };
        let count: Symbol<IsaCountFn> = sym(&lib, b"amd_comgr_get_isa_count\0")?;
        let isa: Symbol<IsaNameFn> = sym(&lib, b"amd_comgr_get_isa_name\0")?;
        let mut n = 0usize;
        // SAFETY: `n` is a valid out-pointer; names are static strings owned by comgr.
        let archs = unsafe {
            if count(&mut n) != 0 {
                return Err("comgr: amd_comgr_get_isa_count failed".into());
            }
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let mut p: *const c_char = std::ptr::null();
                if isa(i, &mut p) == 0 && !p.is_null() {
                    // `amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-` → `gfx90a`.
                    let full = CStr::from_ptr(p).to_string_lossy();
                    let arch = full.rsplit("--").next().unwrap_or(&full);
                    let arch = arch.split(':').next().unwrap_or(arch).to_string();
                    if !out.contains(&arch) {
                        out.push(arch);
                    }
                }
            }
            out
        };
        // Keep comgr loaded for the life of the process, like hiprtc itself.
        std::mem::forget(lib);
        return Ok(archs);
    }
    Err(format!(
        "the code-object manager (comgr) cannot be opened: {}",
        errors.join("; ")
    ))
}

/// Whether hiprtc can be loaded here; the error says what was tried and how to fix it.
pub fn available() -> Result<(), String> {
    library().map(|_| ())
}

fn sym<'l, T>(lib: &'l Library, name: &[u8]) -> Result<Symbol<'l, T>, String> {
    // SAFETY: every symbol is looked up with the type of its C declaration in hiprtc.h.
    unsafe { lib.get::<T>(name) }.map_err(|e| {
        format!(
            "hiprtc: {} missing: {e}",
            String::from_utf8_lossy(&name[..name.len() - 1])
        )
    })
}

/// Compile HIP C++ `source` for the GPU architecture `arch` (e.g. `gfx90a`, `gfx1100`)
/// to a code object (an AMDGPU ELF). A rejected source is an error carrying the
/// compiler's log; a target the loaded runtime does not know is refused by name.
/// Compilations are serialized (hiprtc is not safe to call from two threads at once).
pub fn compile(source: &str, name: &str, arch: &str) -> Result<Vec<u8>, String> {
    let lib = library()?;
    // hiprtc (HIP 5.2 at least) crashes when two programs compile at once.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Ok(archs) = supported_archs()
        && !archs.iter().any(|a| a == arch)
    {
        return Err(format!(
            "hiprtc: this HIP runtime cannot target {arch} (it knows {}); install a ROCm \
             release that supports {arch}",
            archs.join(", ")
        ));
    }
    let create: Symbol<CreateFn> = sym(lib, b"hiprtcCreateProgram\0")?;
    let comp: Symbol<CompileFn> = sym(lib, b"hiprtcCompileProgram\0")?;
    let log_size: Symbol<SizeFn> = sym(lib, b"hiprtcGetProgramLogSize\0")?;
    let log: Symbol<GetFn> = sym(lib, b"hiprtcGetProgramLog\0")?;
    let code_size: Symbol<SizeFn> = sym(lib, b"hiprtcGetCodeSize\0")?;
    let code: Symbol<GetFn> = sym(lib, b"hiprtcGetCode\0")?;
    let destroy: Symbol<DestroyFn> = sym(lib, b"hiprtcDestroyProgram\0")?;
    let err_str: Symbol<ErrorStringFn> = sym(lib, b"hiprtcGetErrorString\0")?;
    let describe = |what: &str, r: c_int| {
        // SAFETY: hiprtcGetErrorString returns a static string for any result code.
        let s = unsafe { CStr::from_ptr(err_str(r)) }.to_string_lossy();
        format!("hiprtc: {what} failed: {s} ({r})")
    };
    let src = CString::new(source).map_err(|_| "hiprtc: the source contains a NUL byte")?;
    let cname = CString::new(name).map_err(|_| "hiprtc: the name contains a NUL byte")?;
    let opt = CString::new(format!("--offload-arch={arch}"))
        .map_err(|_| "hiprtc: the architecture contains a NUL byte")?;
    let opts = [opt.as_ptr()];
    let mut prog: Program = std::ptr::null_mut();
    // SAFETY: the pointers are valid NUL-terminated strings for the call; no headers.
    let r = unsafe {
        create(
            &mut prog,
            src.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(describe("hiprtcCreateProgram", r));
    }
    // SAFETY: `prog` was created above; every buffer passed below is sized by the size
    // query that precedes it; the program is destroyed on every path.
    let out = unsafe {
        let r = comp(prog, opts.len() as c_int, opts.as_ptr());
        if r != 0 {
            let mut n = 0usize;
            let mut text = String::new();
            if log_size(prog, &mut n) == 0 && n > 0 {
                let mut buf = vec![0u8; n];
                if log(prog, buf.as_mut_ptr() as *mut c_char) == 0 {
                    text = String::from_utf8_lossy(&buf[..n - 1]).into_owned();
                }
            }
            Err(format!(
                "{} for {arch}:\n{text}",
                describe("hiprtcCompileProgram", r)
            ))
        } else {
            let mut n = 0usize;
            let r = code_size(prog, &mut n);
            if r != 0 {
                Err(describe("hiprtcGetCodeSize", r))
            } else {
                let mut buf = vec![0u8; n];
                let r = code(prog, buf.as_mut_ptr() as *mut c_char);
                if r != 0 {
                    Err(describe("hiprtcGetCode", r))
                } else {
                    Ok(buf)
                }
            }
        }
    };
    // SAFETY: `prog` is a live program created above.
    unsafe {
        destroy(&mut prog);
    }
    out
}
