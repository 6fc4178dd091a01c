//! Executable memory for generated code: mapped writable, filled, then switched to
//! read + execute (never writable and executable at once), unmapped on drop.

/// A read-only, executable copy of some machine code.
pub(crate) struct ExecMem {
    ptr: *mut u8,
    len: usize,
}

impl ExecMem {
    /// Map `code` as executable; `None` if the OS refuses (or is not Unix-like).
    #[cfg(not(unix))]
    pub(crate) fn new(_code: &[u8]) -> Option<ExecMem> {
        None
    }

    /// Map `code` as executable; `None` if the OS refuses.
    #[cfg(unix)]
    pub(crate) fn new(code: &[u8]) -> Option<ExecMem> {
        let len = code.len().max(1).next_multiple_of(4096);
        // SAFETY: mmap with a null hint and MAP_PRIVATE | MAP_ANONYMOUS creates a fresh
        // mapping of `len >= code.len()` bytes that aliases nothing (failure checked);
        // the copy writes `code.len()` bytes inside it while it is still writable; the
        // mprotect to read + execute covers exactly this mapping, after which it is
        // never writable again (W^X); on failure it is unmapped before returning.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return None;
            }
            std::ptr::copy_nonoverlapping(code.as_ptr(), p as *mut u8, code.len());
            if libc::mprotect(p, len, libc::PROT_READ | libc::PROT_EXEC) != 0 {
                libc::munmap(p, len);
                return None;
            }
            Some(ExecMem {
                ptr: p as *mut u8,
                len,
            })
        }
    }

    /// The start of the code.
    pub(crate) fn ptr(&self) -> *const u8 {
        self.ptr
    }
}

impl Drop for ExecMem {
    #[cfg(not(unix))]
    fn drop(&mut self) {
        let _ = (self.ptr, self.len);
    }

    #[cfg(unix)]
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new` (an ExecMem exists
        // only when that succeeded), unmapped once here; no JitKernel code can run after
        // the drop because running it borrows the owning JitKernel.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}
