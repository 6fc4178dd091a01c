//! GPU contexts: one wgpu device per [`Device`] selector, created on first use and
//! kept for the life of the process (device creation costs tens of milliseconds).

use rlx_runtime::Device;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// An open wgpu device with the shared bind-group layout every kernel uses.
pub(crate) struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) info: wgpu::AdapterInfo,
    pub(crate) limits: wgpu::Limits,
    /// The adapter's subgroup size when it is fixed (`subgroup_min_size ==
    /// subgroup_max_size`, a power of two >= 2) and the device was opened with
    /// `Features::SUBGROUP`; `None` otherwise or when `RLX_WGPU_SUBGROUPS=0`. Shuffles of
    /// this width are exact segments of consecutive local invocations.
    pub(crate) subgroup_size: Option<u32>,
    /// Binding 0: the arena (read-write storage); binding 1: kernel params (uniform,
    /// dynamic offset).
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) pipeline_layout: wgpu::PipelineLayout,
    /// Pipelines by WGSL source: identical kernels share one pipeline.
    pub(crate) pipelines: Mutex<HashMap<String, Result<Arc<wgpu::ComputePipeline>, String>>>,
    /// Arenas handed back after runs, shared by every program on this device.
    pub(crate) arenas: Mutex<Vec<(u64, wgpu::Buffer)>>,
    /// Buffers of dropped executables, released at the next compile. Executables live
    /// in per-thread caches and may be dropped during thread-local destruction, where
    /// wgpu cannot release a buffer; the context itself is never dropped.
    pub(crate) graveyard: Mutex<Vec<wgpu::Buffer>>,
}

impl Gpu {
    /// `"llvmpipe (Vulkan, Cpu)"`, with `", subgroups of 8"` when reductions shuffle.
    pub(crate) fn describe(&self) -> String {
        let sub = self
            .subgroup_size
            .map(|n| format!(", subgroups of {n}"))
            .unwrap_or_default();
        format!(
            "{} ({:?}, {:?}{sub})",
            self.info.name, self.info.backend, self.info.device_type
        )
    }

    /// Whether the adapter is a real GPU (not a CPU emulation such as lavapipe).
    pub(crate) fn is_hardware(&self) -> bool {
        !matches!(
            self.info.device_type,
            wgpu::DeviceType::Cpu | wgpu::DeviceType::Other
        )
    }

    /// The pipeline for `wgsl`, compiled once per device; shader errors come back as
    /// text so the caller can run that kernel elsewhere.
    pub(crate) fn pipeline(&self, wgsl: &str) -> Result<Arc<wgpu::ComputePipeline>, String> {
        if let Some(p) = self
            .pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(wgsl)
        {
            return p.clone();
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("rlx kernel"),
                source: wgpu::ShaderSource::Wgsl(wgsl.into()),
            });
        let pipeline = self
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("rlx kernel"),
                layout: Some(&self.pipeline_layout),
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        let r = match pollster::block_on(scope.pop()) {
            None => Ok(Arc::new(pipeline)),
            Some(e) => {
                tracing::debug!(target: "rlx::wgpu", "rejected shader:\n{wgsl}");
                Err(format!("shader rejected by the wgpu device: {e}"))
            }
        };
        self.pipelines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(wgsl.to_string(), r.clone());
        r
    }
}

/// The wgpu backends a device selector may use.
fn backends_for(device: Device) -> Option<wgpu::Backends> {
    Some(match device {
        Device::Gpu => wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12,
        Device::Vulkan => wgpu::Backends::VULKAN,
        Device::Metal => wgpu::Backends::METAL,
        Device::DirectX => wgpu::Backends::DX12,
        Device::WebGpu => wgpu::Backends::BROWSER_WEBGPU,
        _ => return None,
    })
}

/// Preference among adapters: discrete, integrated, virtual, then software.
fn rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// The adapter's subgroup size if shuffles may rely on it: `Features::SUBGROUP`, one
/// size (`subgroup_min_size == subgroup_max_size`, so every subgroup of a workgroup is
/// that many consecutive invocations), a power of two >= 2, and not turned off by
/// `RLX_WGPU_SUBGROUPS=0` (for A/B runs).
fn fixed_subgroup(info: &wgpu::AdapterInfo, features: wgpu::Features) -> Option<u32> {
    if std::env::var("RLX_WGPU_SUBGROUPS").is_ok_and(|v| v == "0") {
        return None;
    }
    let n = info.subgroup_min_size;
    (features.contains(wgpu::Features::SUBGROUP)
        && n == info.subgroup_max_size
        && n >= 2
        && n.is_power_of_two())
    .then_some(n)
}

fn open(device: Device) -> Result<Gpu, String> {
    let backends = backends_for(device).ok_or_else(|| format!("{device} is not a wgpu device"))?;
    if !wgpu::Instance::enabled_backend_features().intersects(backends) {
        return Err(format!(
            "this build of wgpu has no backend for {device} on this platform"
        ));
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = backends;
    let instance = wgpu::Instance::new(desc);
    let mut adapters = pollster::block_on(instance.enumerate_adapters(backends));
    adapters.sort_by_key(|a| rank(a.get_info().device_type));
    let adapter = adapters.into_iter().next().ok_or_else(|| {
        format!(
            "no {device} adapter found (for a software Vulkan driver: apt-get install -y libvulkan1 mesa-vulkan-drivers)"
        )
    })?;
    let info = adapter.get_info();
    // Ask for everything the adapter offers: large arenas need large bindings.
    let limits = adapter.limits();
    let subgroup_size = fixed_subgroup(&info, adapter.features());
    let required_features = if subgroup_size.is_some() {
        wgpu::Features::SUBGROUP
    } else {
        wgpu::Features::empty()
    };
    let (dev, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("rlx"),
        required_features,
        required_limits: limits.clone(),
        experimental_features: Default::default(),
        memory_hints: wgpu::MemoryHints::Performance,
        trace: Default::default(),
    }))
    .map_err(|e| format!("{} refused a device: {e}", info.name))?;
    let layout = dev.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("rlx arena + params"),
        entries: &[
            wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            },
            wgpu::BindGroupLayoutEntry {
                binding: 1,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: true,
                    min_binding_size: None,
                },
                count: None,
            },
        ],
    });
    let pipeline_layout = dev.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("rlx kernels"),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    Ok(Gpu {
        device: dev,
        queue,
        info,
        limits,
        subgroup_size,
        layout,
        pipeline_layout,
        pipelines: Mutex::new(HashMap::new()),
        arenas: Mutex::new(Vec::new()),
        graveyard: Mutex::new(Vec::new()),
    })
}

type Contexts = Mutex<HashMap<Device, Result<Arc<Gpu>, String>>>;

/// The context for `device`, opened on first use (the probe result, success or the
/// reason for failure, is remembered).
pub(crate) fn gpu(device: Device) -> Result<Arc<Gpu>, String> {
    static CONTEXTS: OnceLock<Contexts> = OnceLock::new();
    let map = CONTEXTS.get_or_init(|| Mutex::new(HashMap::new()));
    let mut m = map.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(device)
        .or_insert_with(|| {
            // wgpu panics on some broken driver installations: treat as absent.
            std::panic::catch_unwind(|| open(device))
                .unwrap_or_else(|_| Err(format!("opening a {device} adapter panicked")))
                .map(Arc::new)
        })
        .clone()
}
