//! Finding the CUDA libraries at run time.
//!
//! `cudarc` (with `dynamic-loading`) opens each library by *name* (`libnvrtc.so.12`,
//! `libcuda.so.1`, …), so it only finds libraries on the loader's search path, which is
//! fixed when the process starts. Libraries elsewhere — a pip wheel such as
//! `nvidia-cuda-nvrtc-cu12`, a toolkit outside `LD_LIBRARY_PATH` — are found here and
//! opened by *path* first (and never closed): the dynamic loader then answers cudarc's
//! by-name request with the already loaded object, whose `SONAME` matches.
//!
//! Where it looks, in order:
//! - `RLX_NVRTC_LIB`: the NVRTC library file, or a directory holding it;
//! - `RLX_CUDA_LIB_DIR`: a `:`-separated list of directories searched for NVRTC, cuBLAS
//!   and cuBLASLt;
//! - `$CUDA_PATH/lib64`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`;
//! - the pip wheel layouts (`nvidia/cuda_nvrtc/lib`, `nvidia/cublas/lib` for CUDA 12,
//!   `nvidia/cu13/lib` for CUDA 13) under every `site-packages` directory listed in
//!   `RLX_PYTHON_PATH` or `PYTHONPATH`;
//! - finally the loader's own search path (`LD_LIBRARY_PATH`, the ldconfig cache).
//!
//! Every check happens *before* cudarc touches a library, because cudarc panics
//! (rather than returning an error) when a library it needs cannot be opened.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Directories to search for CUDA libraries, most specific first.
fn search_dirs(wheel_subdir: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(list) = std::env::var("RLX_CUDA_LIB_DIR") {
        dirs.extend(std::env::split_paths(&list));
    }
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Ok(root) = std::env::var(var) {
            dirs.push(Path::new(&root).join("lib64"));
            dirs.push(Path::new(&root).join("lib"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for var in ["RLX_PYTHON_PATH", "PYTHONPATH"] {
        if let Ok(list) = std::env::var(var) {
            for p in std::env::split_paths(&list) {
                // CUDA 12 wheels: nvidia/<package>/lib; CUDA 13 wheels: nvidia/cu13/lib.
                for sub in [wheel_subdir, "cu13", "cu12"] {
                    dirs.push(p.join("nvidia").join(sub).join("lib"));
                }
            }
        }
    }
    dirs
}

/// The first file in `dir` whose name is `lib<stem>.so` or `lib<stem>.so.<digits…>`.
fn find_in(dir: &Path, stem: &str) -> Option<PathBuf> {
    let prefix = format!("lib{stem}.so");
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n == prefix
                    || n.strip_prefix(&prefix).is_some_and(|rest| {
                        rest.starts_with('.')
                            && rest[1..].split('.').all(|d| d.parse::<u32>().is_ok())
                    })
            })
        })
        .collect();
    // Prefer the shortest name (`libnvrtc.so.12` over `libnvrtc.so.12.9.86`): same object.
    found.sort_by_key(|p| p.as_os_str().len());
    found.into_iter().next()
}

/// Open `path` for the rest of the process with its symbols global (so libraries that
/// depend on it by `SONAME` resolve to it).
fn open_forever(path: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
        // SAFETY: opening a shared library runs its initialisers; the file is a CUDA library
        // (libnvrtc/libcublas…) that the user pointed at or that sits in a CUDA install or
        // wheel directory, i.e. the same object cudarc would load by name, and this runs once
        // per library (OnceLock callers) before any other thread uses it. The handle is leaked,
        // so the code is never unloaded while symbols from it are in use.
        let lib = unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::mem::forget(lib);
        Ok(())
    }
    #[cfg(not(unix))]
    {
        // SAFETY: as in the Unix branch: a CUDA library from the user's configuration or a CUDA
        // install, opened once and never unloaded.
        let lib = unsafe { libloading::Library::new(path) }
            .map_err(|e| format!("{}: {e}", path.display()))?;
        std::mem::forget(lib);
        Ok(())
    }
}

/// What the search found for one library.
#[derive(Debug, Clone)]
pub struct Located {
    /// The file opened by path, if one was found outside the loader's search path.
    pub path: Option<PathBuf>,
    /// Why a file that was found could not be opened.
    pub error: Option<String>,
}

/// Preload library `stem` (e.g. `nvrtc`) from an explicit `file_or_dir`, or from the
/// search directories, together with companion libraries in the same directory that it
/// opens itself (`nvrtc-builtins`).
fn preload(stem: &str, explicit: Option<PathBuf>, wheel: &str, companions: &[&str]) -> Located {
    let mut candidates = Vec::new();
    if let Some(p) = explicit {
        if p.is_dir() {
            candidates.extend(find_in(&p, stem));
        } else {
            candidates.push(p);
        }
    }
    for d in search_dirs(wheel) {
        candidates.extend(find_in(&d, stem));
    }
    for c in candidates {
        if !c.is_file() {
            continue;
        }
        if let Some(dir) = c.parent() {
            for comp in companions {
                // The builtins library is named with the full version; any match will do.
                if let Some(f) = find_prefix(dir, &format!("lib{comp}.so")) {
                    let _ = open_forever(&f);
                }
            }
        }
        return match open_forever(&c) {
            Ok(()) => Located {
                path: Some(c),
                error: None,
            },
            Err(e) => Located {
                path: Some(c),
                error: Some(e),
            },
        };
    }
    Located {
        path: None,
        error: None,
    }
}

/// A file in `dir` whose name starts with `prefix` (and is not an `.alt` variant).
fn find_prefix(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix) && !n.contains(".alt."))
        })
        .collect();
    v.sort();
    v.into_iter().next()
}

/// The result of looking for NVRTC (done once per process).
pub fn nvrtc_location() -> &'static Located {
    static NVRTC: OnceLock<Located> = OnceLock::new();
    NVRTC.get_or_init(|| {
        let explicit = std::env::var_os("RLX_NVRTC_LIB").map(PathBuf::from);
        preload("nvrtc", explicit, "cuda_nvrtc", &["nvrtc-builtins"])
    })
}

/// Whether NVRTC can be opened (after preloading it from the places above).
pub fn nvrtc_present() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let _ = nvrtc_location();
        // SAFETY: is_culib_present only tries to load NVRTC (the library preloaded above or
        // found by name), running its initialisers once; no NVRTC function is called here.
        unsafe { cudarc::nvrtc::sys::is_culib_present() }
    })
}

/// Whether cuBLAS and cuBLASLt can both be opened.
pub fn cublas_present() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // cuBLAS needs cuBLASLt by SONAME: load that first.
        let _ = preload("cublasLt", None, "cublas", &[]);
        let _ = preload("cublas", None, "cublas", &[]);
        // SAFETY: as for NVRTC: only tries to load cuBLASLt and cuBLAS (preloaded above), once
        // per process (OnceLock), calling no function of them.
        unsafe {
            cudarc::cublaslt::sys::is_culib_present() && cudarc::cublas::sys::is_culib_present()
        }
    })
}

/// Whether the driver library (`libcuda`) can be opened.
pub fn driver_present() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to load the driver library (libcuda) once per process, calling
    // nothing.
    *OK.get_or_init(|| unsafe { cudarc::driver::sys::is_culib_present() })
}

/// A one-line account of what was found, for error messages and `explain`.
pub fn describe() -> String {
    let nv = nvrtc_location();
    let nvrtc = match (&nv.path, &nv.error, nvrtc_present()) {
        (_, Some(e), _) => format!("NVRTC found but not loadable ({e})"),
        (Some(p), None, true) => format!("NVRTC {}", p.display()),
        (None, None, true) => "NVRTC on the loader path".to_string(),
        _ => "NVRTC not found (set RLX_NVRTC_LIB to libnvrtc.so or its directory, e.g. from `pip install nvidia-cuda-nvrtc-cu12`)".to_string(),
    };
    let driver = if driver_present() {
        "driver library present"
    } else {
        "no CUDA driver library (libcuda.so.1)"
    };
    format!("{nvrtc}; {driver}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names_match_versioned_files_only() {
        let dir = std::env::temp_dir().join(format!("rlx-cuda-loader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in [
            "libnvrtc.so.12.9.86",
            "libnvrtc.so.12",
            "libnvrtc-builtins.so.12.9",
            "libnvrtc.alt.so.12",
        ] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        assert_eq!(
            find_in(&dir, "nvrtc").unwrap().file_name().unwrap(),
            "libnvrtc.so.12"
        );
        assert_eq!(
            find_prefix(&dir, "libnvrtc-builtins.so")
                .unwrap()
                .file_name()
                .unwrap(),
            "libnvrtc-builtins.so.12.9"
        );
        assert!(find_in(&dir, "cublas").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
