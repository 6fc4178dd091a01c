//! Where the ROCm libraries opened at run time are looked for: one search order for the
//! HIP runtime, hiprtc and rocBLAS.

use std::path::{Path, PathBuf};

/// The paths tried for a library with file names `names` (newest first): the path in
/// environment variable `env` (a file, or a directory searched for `names`), then ROCm's
/// install directories, then the bare names on the loader's search path.
pub(crate) fn candidates(env: &str, names: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        if p.is_dir() {
            out.extend(names.iter().map(|n| p.join(n)));
        } else {
            out.push(p);
        }
    }
    for dir in ["/opt/rocm/lib", "/opt/rocm/lib64"] {
        out.extend(names.iter().map(|n| Path::new(dir).join(n)));
    }
    out.extend(names.iter().map(PathBuf::from));
    out
}

#[cfg(test)]
mod tests {
    use super::candidates;
    use std::path::PathBuf;

    #[test]
    fn search_order_is_rocm_directories_then_the_loader_path() {
        let c = candidates("RLX_TEST_UNSET_LIBRARY_VARIABLE", &["liba.so", "liba.so.1"]);
        let want: Vec<PathBuf> = [
            "/opt/rocm/lib/liba.so",
            "/opt/rocm/lib/liba.so.1",
            "/opt/rocm/lib64/liba.so",
            "/opt/rocm/lib64/liba.so.1",
            "liba.so",
            "liba.so.1",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(c, want);
    }
}
