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
