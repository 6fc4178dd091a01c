//! Executable memory for generated code: an anonymous mapping made writable, filled,
//! then switched to read + execute (never writable and executable at once, W^X), and
//! unmapped on drop — all through `memmap2`.

use memmap2::{Mmap, MmapMut};

/// A read-only, executable copy of some machine code.
pub(crate) struct ExecMem {
    /// Read + execute pages holding the code at offset 0; never writable again.
    map: Mmap,
}

impl ExecMem {
    /// Map `code` as executable; `None` if the OS refuses (the refusal is logged at
    /// debug level, target `rlx::jit`, and the caller falls back to the interpreter).
    pub(crate) fn new(code: &[u8]) -> Option<ExecMem> {
        let fill = || -> std::io::Result<Mmap> {
            // A fresh private anonymous mapping (read + write), rounded up to whole
            // pages by the OS; `max(1)`: an empty mapping is an error on some systems.
            let mut map = MmapMut::map_anon(code.len().max(1))?;
            map[..code.len()].copy_from_slice(code);
            // Consumes the writable mapping: from here on the pages are read +
            // execute only, and no writable alias of them exists.
            map.make_exec()
        };
        match fill() {
            Ok(map) => Some(ExecMem { map }),
            Err(e) => {
                tracing::debug!(
                    target: "rlx::jit",
                    bytes = code.len(),
                    error = %e,
                    "executable memory could not be mapped; interpreting instead"
                );
                None
            }
        }
    }

    /// The start of the code.
    pub(crate) fn ptr(&self) -> *const u8 {
        self.map.as_ptr()
    }
}
