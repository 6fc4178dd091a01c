//! The HIP runtime (`libamdhip64`), opened with `dlopen` when first used: device
//! discovery, memory, code-object modules and launches.
//!
//! Only the entry points whose C signatures have not changed across ROCm 5 and 6 are
//! called. The one value taken from a struct whose layout did change between releases,
//! the device's `gcnArchName` in `hipDeviceProp_t`, is found by its content (see
//! [`arch_in_props`]); `RLX_HIP_ARCH` overrides it.

use libloading::Library;
use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

/// A HIP error code (`hipError_t`; 0 is success).
type Status = c_int;
type InitFn = unsafe extern "C" fn(c_uint) -> Status;
type CountFn = unsafe extern "C" fn(*mut c_int) -> Status;
type SetDeviceFn = unsafe extern "C" fn(c_int) -> Status;
type AttrFn = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> Status;
type NameFn = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> Status;
type PropsFn = unsafe extern "C" fn(*mut c_void, c_int) -> Status;
type MallocFn = unsafe extern "C" fn(*mut *mut c_void, usize) -> Status;
type FreeFn = unsafe extern "C" fn(*mut c_void) -> Status;
type HtoDFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> Status;
type DtoHFn = unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> Status;
type MemsetFn = unsafe extern "C" fn(*mut c_void, c_int, usize) -> Status;
type LoadDataFn = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> Status;
type GetFunctionFn = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> Status;
type UnloadFn = unsafe extern "C" fn(*mut c_void) -> Status;
type LaunchFn = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> Status;
type SyncFn = unsafe extern "C" fn() -> Status;
type ErrorStringFn = unsafe extern "C" fn(Status) -> *const c_char;

/// `hipDeviceAttributeMultiprocessorCount` (the same value in ROCm 5 and 6).
const ATTR_MULTIPROCESSOR_COUNT: c_int = 63;
/// `hipModuleLaunchKernel`'s `extra` markers: the argument buffer, its size, the end.
const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
const LAUNCH_PARAM_END: usize = 3;

/// The HIP runtime's entry points.
pub(crate) struct Hip {
    _lib: Library,
    init: InitFn,
    count: CountFn,
    set_device: SetDeviceFn,
    attr: AttrFn,
    name: NameFn,
    props: PropsFn,
    malloc: MallocFn,
    free: FreeFn,
    htod: HtoDFn,
    dtoh: DtoHFn,
    memset: MemsetFn,
    load_data: LoadDataFn,
    get_function: GetFunctionFn,
    unload: UnloadFn,
    launch: LaunchFn,
    sync: SyncFn,
    error_string: ErrorStringFn,
}

/// The library names tried, newest first.
const NAMES: [&str; 3] = ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"];

/// The HIP runtime, or why it cannot be opened (decided once per process).
pub(crate) fn runtime() -> Result<&'static Hip, String> {
    static HIP: OnceLock<Result<Hip, String>> = OnceLock::new();
    HIP.get_or_init(open).as_ref().map_err(Clone::clone)
}

fn open() -> Result<Hip, String> {
    let mut tried = Vec::new();
    for c in crate::dl::candidates("RLX_HIP_LIB", &NAMES) {
        // SAFETY: opening the HIP runtime runs its initializers, which do not touch a GPU
        // until hipInit.
        match unsafe { Library::new(&c) } {
            Ok(lib) => return bind(lib).map_err(|e| format!("{}: {e}", c.display())),
            Err(_) => tried.push(c.display().to_string()),
        }
    }
    Err(format!(
        "the HIP runtime library cannot be opened (tried {}); install ROCm's HIP runtime \
         (Debian: `apt-get install libamdhip64-5`) or set RLX_HIP_LIB",
        tried.join(", ")
    ))
}

fn bind(lib: Library) -> Result<Hip, String> {
    fn get<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
        let z = format!("{name}\0");
        // SAFETY: every symbol below is looked up with the type of its C declaration in
        // hip_runtime_api.h; the copied function pointer is used only while `Hip::_lib`
        // keeps the library loaded.
        unsafe { lib.get::<T>(z.as_bytes()).map(|s| *s) }
            .map_err(|e| format!("{name} is missing ({e})"))
    }
    // ROCm 6 versions the property query (hipGetDeviceProperties is a macro for the
    // R0600 symbol there); the older symbol is still exported with the older layout.
    let props = get::<PropsFn>(&lib, "hipGetDevicePropertiesR0600")
        .or_else(|_| get::<PropsFn>(&lib, "hipGetDeviceProperties"))?;
    Ok(Hip {
        init: get(&lib, "hipInit")?,
        count: get(&lib, "hipGetDeviceCount")?,
        set_device: get(&lib, "hipSetDevice")?,
        attr: get(&lib, "hipDeviceGetAttribute")?,
        name: get(&lib, "hipDeviceGetName")?,
        props,
        malloc: get(&lib, "hipMalloc")?,
        free: get(&lib, "hipFree")?,
        htod: get(&lib, "hipMemcpyHtoD")?,
        dtoh: get(&lib, "hipMemcpyDtoH")?,
        memset: get(&lib, "hipMemset")?,
        load_data: get(&lib, "hipModuleLoadData")?,
        get_function: get(&lib, "hipModuleGetFunction")?,
        unload: get(&lib, "hipModuleUnload")?,
        launch: get(&lib, "hipModuleLaunchKernel")?,
        sync: get(&lib, "hipDeviceSynchronize")?,
        error_string: get(&lib, "hipGetErrorString")?,
        _lib: lib,
    })
}

/// The device's GPU architecture in a `hipDeviceProp_t` image: the first NUL-terminated
/// `gfx…` string after the 256-byte device name (`gcnArchName`, e.g.
/// `gfx90a:sramecc+:xnack-`), reduced to the target name hiprtc takes (`gfx90a`).
///
/// Found by content because the field's offset differs between the ROCm 5 and 6
/// layouts of the struct; no other field of it holds text starting with `gfx`.
pub fn arch_in_props(props: &[u8]) -> Option<String> {
    let from = 256.min(props.len());
    let at = props[from..].windows(3).position(|w| w == b"gfx")? + from;
    let end = props[at..].iter().position(|&b| b == 0)? + at;
    let full = std::str::from_utf8(&props[at..end]).ok()?;
    let arch = full.split(':').next()?;
    (arch.len() > 3 && arch[3..].bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| arch.to_string())
}

impl Hip {
    /// `Err` naming `what` and HIP's message unless `r` is success.
    pub(crate) fn check(&self, r: Status, what: &str) -> Result<(), String> {
        if r == 0 {
            return Ok(());
        }
        // SAFETY: hipGetErrorString returns a static string for any code.
        let msg = unsafe {
            let p = (self.error_string)(r);
            if p.is_null() {
                "unknown error".into()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Err(format!("HIP: {what} failed: {msg} ({r})"))
    }

    /// `hipInit`, then the number of devices.
    pub(crate) fn device_count(&self) -> Result<usize, String> {
        // SAFETY: plain calls with valid out-pointers.
        unsafe {
            self.check((self.init)(0), "hipInit")?;
            let mut n: c_int = 0;
            self.check((self.count)(&mut n), "hipGetDeviceCount")?;
            Ok(n.max(0) as usize)
        }
    }

    /// Make `dev` the calling thread's device (HIP's current device is per thread).
    pub(crate) fn set_device(&self, dev: c_int) -> Result<(), String> {
        // SAFETY: a plain call; an invalid ordinal is an error code.
        self.check(unsafe { (self.set_device)(dev) }, "hipSetDevice")
    }

    /// Name, multiprocessor count and architecture of `dev`.
    pub(crate) fn describe(&self, dev: c_int) -> Result<(String, u32, Option<String>), String> {
        let mut name = [0 as c_char; 256];
        let mut sms: c_int = 0;
        // Larger than either layout of hipDeviceProp_t (about 1.1 KiB in ROCm 6).
        let mut props = vec![0u8; 8192];
        // SAFETY: each out-buffer is valid and sized as the call documents (the property
        // struct is smaller than `props`).
        unsafe {
            self.check(
                (self.name)(name.as_mut_ptr(), name.len() as c_int, dev),
                "hipDeviceGetName",
            )?;
            self.check(
                (self.attr)(&mut sms, ATTR_MULTIPROCESSOR_COUNT, dev),
                "hipDeviceGetAttribute(multiprocessor count)",
            )?;
            self.check(
                (self.props)(props.as_mut_ptr() as *mut c_void, dev),
                "hipGetDeviceProperties",
            )?;
        }
        // SAFETY: hipDeviceGetName wrote a NUL-terminated string into `name`.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Ok((name, sms.max(1) as u32, arch_in_props(&props)))
    }

    pub(crate) fn malloc(&self, bytes: usize) -> Result<u64, String> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        self.check(unsafe { (self.malloc)(&mut p, bytes) }, "hipMalloc")
            .map_err(|e| format!("{e} ({bytes} bytes)"))?;
        Ok(p as u64)
    }

    pub(crate) fn free(&self, p: u64) {
        // SAFETY: `p` came from hipMalloc and is freed once (the executor owns it).
        unsafe { (self.free)(p as *mut c_void) };
    }

    /// Copy `src` to device address `dst`.
    ///
    /// # Safety
    /// `dst..dst + src.len()` must lie inside one live device allocation.
    pub(crate) unsafe fn htod(&self, dst: u64, src: &[u8]) -> Result<(), String> {
        // SAFETY: the caller guarantees the device range; `src` is a live host slice.
        self.check(
            unsafe { (self.htod)(dst as *mut c_void, src.as_ptr() as *const c_void, src.len()) },
            "hipMemcpyHtoD",
        )
    }

    /// Copy device address `src` into `dst`.
    ///
    /// # Safety
    /// `src..src + dst.len()` must lie inside one live device allocation.
    pub(crate) unsafe fn dtoh(&self, dst: &mut [u8], src: u64) -> Result<(), String> {
        // SAFETY: the caller guarantees the device range; `dst` is an exclusive host slice.
        self.check(
            unsafe {
                (self.dtoh)(
                    dst.as_mut_ptr() as *mut c_void,
                    src as *mut c_void,
                    dst.len(),
                )
            },
            "hipMemcpyDtoH",
        )
    }

    /// Zero `bytes` at device address `dst`.
    ///
    /// # Safety
    /// `dst..dst + bytes` must lie inside one live device allocation.
    pub(crate) unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), String> {
        // SAFETY: the caller guarantees the device range.
        self.check(
            unsafe { (self.memset)(dst as *mut c_void, 0, bytes) },
            "hipMemset",
        )
    }

    /// Load a code object and resolve `entries` in order.
    pub(crate) fn load(&self, image: &[u8], entries: &[String]) -> Result<(u64, Vec<u64>), String> {
        let mut m: *mut c_void = std::ptr::null_mut();
        // SAFETY: `image` is a complete AMDGPU code object from hiprtc, alive for the call.
        let r = unsafe { (self.load_data)(&mut m, image.as_ptr() as *const c_void) };
        self.check(r, "hipModuleLoadData")?;
        let mut funcs = Vec::with_capacity(entries.len());
        for e in entries {
            let name = CString::new(e.as_str()).map_err(|_| "entry name with a NUL")?;
            let mut f: *mut c_void = std::ptr::null_mut();
            // SAFETY: `m` is the module loaded above; `name` is NUL-terminated.
            let r = unsafe { (self.get_function)(&mut f, m, name.as_ptr()) };
            if let Err(err) = self.check(r, &format!("hipModuleGetFunction({e})")) {
                self.unload(m as u64);
                return Err(err);
            }
            funcs.push(f as u64);
        }
        Ok((m as u64, funcs))
    }

    pub(crate) fn unload(&self, m: u64) {
        // SAFETY: `m` is a loaded module, unloaded once by its owner.
        unsafe { (self.unload)(m as *mut c_void) };
    }

    /// Launch `func` on the null stream with `params` as its whole argument block.
    ///
    /// # Safety
    /// `func` must be a live function whose kernel takes exactly the `params.len()`-byte
    /// argument block given (device pointers inside it valid for the kernel's accesses).
    pub(crate) unsafe fn launch(
        &self,
        func: u64,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        params: &[u8],
    ) -> Result<(), String> {
        // The argument block is passed whole through `extra`, the launch form that takes
        // a kernel's arguments as bytes (the kernel's one by-value struct, 8-aligned).
        let mut words: Vec<u64> = params
            .chunks(8)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..c.len()].copy_from_slice(c);
                u64::from_le_bytes(b)
            })
            .collect();
        let mut size = words.len() * 8;
        let mut extra = [
            LAUNCH_PARAM_BUFFER_POINTER as *mut c_void,
            words.as_mut_ptr() as *mut c_void,
            LAUNCH_PARAM_BUFFER_SIZE as *mut c_void,
            &mut size as *mut usize as *mut c_void,
            LAUNCH_PARAM_END as *mut c_void,
        ];
        // SAFETY: the caller guarantees the function and its argument block; `words`,
        // `size` and `extra` outlive the call (HIP copies the arguments at launch).
        let r = unsafe {
            (self.launch)(
                func as *mut c_void,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                extra.as_mut_ptr(),
            )
        };
        self.check(r, "hipModuleLaunchKernel")
    }

    pub(crate) fn synchronize(&self) -> Result<(), String> {
        // SAFETY: a plain call.
        self.check(unsafe { (self.sync)() }, "hipDeviceSynchronize")
    }
}

#[cfg(test)]
mod tests {
    use super::arch_in_props;

    #[test]
    fn arch_is_read_from_the_gfx_string_after_the_name() {
        let mut p = vec![0u8; 1024];
        // A device name that itself mentions gfx must not be taken for the arch.
        p[..10].copy_from_slice(b"gfx-marked");
        p[400..422].copy_from_slice(b"gfx90a:sramecc+:xnack-");
        assert_eq!(arch_in_props(&p).as_deref(), Some("gfx90a"));
        let mut q = vec![0u8; 1024];
        q[600..607].copy_from_slice(b"gfx1100");
        assert_eq!(arch_in_props(&q).as_deref(), Some("gfx1100"));
        assert_eq!(arch_in_props(&[0u8; 1024]), None);
    }
}
