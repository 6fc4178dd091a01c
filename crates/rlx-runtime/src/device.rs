//! Device selectors.

use std::fmt;

/// A target device for graph execution.
///
/// Whether a device can be used in this build and on this host is answered by
/// [`crate::is_available`].
///
/// ```
/// use rlx_runtime::Device;
/// assert_eq!(Device::all()[0], Device::Cpu);
/// assert_eq!(Device::Cuda.to_string(), "CUDA");
/// assert_eq!("cuda".parse::<Device>().unwrap(), Device::Cuda);
/// ```
///
/// New devices are added as backends land, so the enum is `#[non_exhaustive]`: match it
/// with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Device {
    Cpu,
    Metal,
    Mlx,
    Ane,
    Cuda,
    Rocm,
    Xdna,
    Egpu,
    OneApi,
    Tpu,
    Hexagon,
    Gpu,
    Vulkan,
    OpenGl,
    DirectX,
    WebGpu,
}

const ALL: [Device; 16] = [
    Device::Cpu,
    Device::Metal,
    Device::Mlx,
    Device::Ane,
    Device::Cuda,
    Device::Rocm,
    Device::Xdna,
    Device::Egpu,
    Device::OneApi,
    Device::Tpu,
    Device::Hexagon,
    Device::Gpu,
    Device::Vulkan,
    Device::OpenGl,
    Device::DirectX,
    Device::WebGpu,
];

impl Device {
    /// Every device, in declaration order.
    pub fn all() -> &'static [Device] {
        &ALL
    }

    /// Display name (`"CPU"`, `"CUDA"`, …).
    pub fn name(self) -> &'static str {
        match self {
            Device::Cpu => "CPU",
            Device::Metal => "Metal",
            Device::Mlx => "MLX",
            Device::Ane => "ANE",
            Device::Cuda => "CUDA",
            Device::Rocm => "ROCm",
            Device::Xdna => "XDNA",
            Device::Egpu => "eGPU",
            Device::OneApi => "oneAPI",
            Device::Tpu => "TPU",
            Device::Hexagon => "Hexagon",
            Device::Gpu => "GPU",
            Device::Vulkan => "Vulkan",
            Device::OpenGl => "OpenGL",
            Device::DirectX => "DirectX",
            Device::WebGpu => "WebGPU",
        }
    }

    /// Priority order used by [`crate::fastest_device`]: accelerators first, CPU near the end.
    pub fn priority_order() -> &'static [Device] {
        &[
            Device::Tpu,
            Device::Cuda,
            Device::Rocm,
            Device::OneApi,
            Device::Mlx,
            Device::Metal,
            Device::Ane,
            Device::Hexagon,
            Device::Egpu,
            Device::Gpu,
            Device::Vulkan,
            Device::DirectX,
            Device::OpenGl,
            Device::WebGpu,
            Device::Cpu,
            Device::Xdna,
        ]
    }
}

/// What rlx can do with a kind of device, whatever this build and host are.
///
/// ```
/// use rlx_runtime::{Device, Support};
/// assert_eq!(Device::Cuda.support(), Support::Runs);
/// assert_eq!(Device::Rocm.support(), Support::Runs);
/// assert_eq!(Device::Mlx.support(), Support::NotImplemented);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Support {
    /// A backend runs graphs on it where the hardware and its driver are present.
    Runs,
    /// rlx generates and compiles its kernels (tested in CI), but nothing launches them
    /// yet: it is never available.
    CompileTested,
    /// No backend exists: it is never available, and asking for it is an error that says so.
    NotImplemented,
}

impl Device {
    /// What rlx can do with this device (see [`Support`]); [`crate::is_available`] says
    /// whether it can be used in this build on this host.
    pub fn support(self) -> Support {
        match self {
            Device::Cpu
            | Device::Cuda
            | Device::Gpu
            | Device::Vulkan
            | Device::Metal
            | Device::DirectX
            | Device::Rocm => Support::Runs,
            Device::Mlx
            | Device::Ane
            | Device::Xdna
            | Device::Egpu
            | Device::OneApi
            | Device::Tpu
            | Device::Hexagon
            | Device::OpenGl
            | Device::WebGpu => Support::NotImplemented,
        }
    }

    /// How to get this device, or why it cannot be had: the sentence error messages use.
    pub fn how_to_enable(self) -> &'static str {
        match self {
            Device::Cpu => "the CPU backend is always built with `eval`",
            Device::Cuda => {
                "build with the `eval-cuda` feature on a host with an NVIDIA GPU, its driver \
                 and NVRTC"
            }
            Device::Gpu | Device::Vulkan | Device::DirectX => {
                "build with the `eval-gpu` feature on a host with a GPU adapter of that API \
                 (wgpu)"
            }
            Device::Metal => {
                "build with the `eval-metal` (or `eval-gpu`) feature on a Mac: it runs through \
                 wgpu's Metal adapter"
            }
            Device::Rocm => {
                "build with the `eval-rocm` feature on a host with an AMD GPU, its amdgpu \
                 driver and the HIP runtime with hiprtc (Debian: libamdhip64-5 and \
                 libhiprtc-builtins5); rocBLAS is used when present"
            }
            Device::Mlx => {
                "rlx has no MLX backend (not implemented; the `eval-mlx` feature enables no \
                 device); on a Mac use Device::Metal"
            }
            Device::Ane => {
                "rlx has no Apple Neural Engine / Core ML backend (not implemented; the \
                 `eval-coreml` feature enables no device)"
            }
            Device::WebGpu => {
                "rlx has no WebGPU (browser) backend: wgpu's browser backend is not built and \
                 rlx has no wasm build (not implemented)"
            }
            Device::OpenGl => "rlx has no OpenGL backend (not implemented); use Device::Vulkan",
            Device::Tpu | Device::Xdna | Device::Egpu | Device::OneApi | Device::Hexagon => {
                "rlx has no backend for this device (not implemented)"
            }
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Device {
    type Err = String;
    fn from_str(s: &str) -> Result<Device, String> {
        let want = s.trim().to_ascii_lowercase();
        ALL.iter()
            .copied()
            .find(|d| {
                d.name().to_ascii_lowercase() == want
                    || format!("{d:?}").to_ascii_lowercase() == want
            })
            .ok_or_else(|| {
                let names: Vec<&str> = ALL.iter().map(|d| d.name()).collect();
                format!("unknown device `{s}`; expected one of {}", names.join(", "))
            })
    }
}
