//! The executor: one arena buffer per run (from a per-device pool), one pipeline per
//! kernel, kernels the GPU does not run evaluated on the host in program order.
//!
//! Buffers: one arena, not one wgpu buffer per program buffer. Layout (byte offsets,
//! every region 256-aligned): the baked constants, then the memory plan's temporaries
//! (offsets from `memplan::plan_offsets`, so buffers with disjoint lifetimes share
//! bytes and in-place kernels write over their dead input), then the arguments, then
//! the outputs. Why: a single storage binding keeps every kernel under baseline
//! WebGPU's 8 storage buffers per shader stage whatever its load count, lets the
//! memory plan's byte sharing carry over unchanged, and makes a bind group per run
//! trivial. The cost: the whole arena must fit one binding
//! (`max_storage_buffer_binding_size`: 128 MiB on baseline WebGPU; the device is
//! opened with the adapter's own maximum); a binding of the dims whose arena is
//! larger runs on the host, and `explain` says so.
//!
//! Mixed programs: GPU kernels are encoded in order into one command encoder; before a
//! host kernel the pending work is submitted and only the buffers it reads are copied
//! back; what it writes is uploaded only when a GPU kernel reads it. Buffers are
//! written once, so host copies never go stale.

use crate::context::Gpu;
use crate::host;
use crate::layout::{REGION_ALIGN, align, binding_from_args, grid, layout, write_padded};
use crate::wgsl::{self, Env, Launch, PARAM_BYTES, Shader};
use rlx_compile::program::{BufId, BufKind, Program};
use rlx_ir::{DimBinding, TensorData, TensorView};
use rlx_runtime::{Executable, RuntimeError, RuntimeResult};
use std::sync::{Arc, Mutex};

/// Where a kernel runs.
pub(crate) enum Plan {
    Gpu {
        shader: Shader,
        pipeline: Arc<wgpu::ComputePipeline>,
    },
    Host {
        reason: String,
    },
}

/// A program bound to concrete dims.
struct Bound {
    buf_dims: Vec<Vec<usize>>,
    /// Byte offset of every buffer in the arena.
    offsets: Vec<u64>,
    /// Byte size of every buffer (unpadded).
    sizes: Vec<u64>,
    arena: u64,
    /// Per kernel: the dispatch grid, or why this binding runs it on the host
    /// (`Ok(None)`: nothing to compute).
    launch: Vec<Result<Option<[u32; 3]>, String>>,
    /// Per kernel: byte offset of its parameters in `uniform`.
    param_offset: Vec<u32>,
    uniform: Option<wgpu::Buffer>,
    /// Per kernel that runs on the host under this binding: the shared host fallback,
    /// compiled for this binding.
    host: Vec<Option<Arc<rlx_runtime::HostKernel>>>,
}

/// The sorted `(symbol, size)` pairs of a binding of the dynamic dims.
type BindingKey = Vec<(u32, usize)>;

/// A program compiled for a wgpu device.
///
/// `Send + Sync`, so one compiled program may be run from several threads: each run
/// takes its own device arena from the device's pool (a `Mutex` held only while taking
/// or returning one) and submits to the device's queue, which wgpu serializes
/// internally; the pipeline and plan caches sit behind short-lived `Mutex`es.
pub(crate) struct WgpuExecutable {
    gpu: Arc<Gpu>,
    program: Program,
    plans: Vec<Plan>,
    fixed: Option<Arc<Bound>>,
    cache: Mutex<Vec<(BindingKey, Arc<Bound>)>>,
    consts_bytes: u64,
    /// Per buffer: read by some GPU kernel.
    gpu_reads: Vec<bool>,
}

// Compiled programs are shared between threads: fail the build here if a field stops
// being `Send + Sync`.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<WgpuExecutable>();
};

/// Report a kernel's fallback to the host once per process, as an info event of target
/// `rlx::wgpu` (`RLX_LOG=info` shows it through rlx-tensor).
fn log_fallback(what: &str) {
    static SEEN: Mutex<Vec<String>> = Mutex::new(Vec::new());
    if !tracing::enabled!(target: "rlx::wgpu", tracing::Level::INFO) {
        return;
    }
    let mut s = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if !s.iter().any(|x| x == what) {
        tracing::info!(target: "rlx::wgpu", "{what}");
        s.push(what.to_string());
    }
}

impl WgpuExecutable {
    pub(crate) fn new(gpu: Arc<Gpu>, program: Program) -> RuntimeResult<WgpuExecutable> {
        let subgroup = gpu.subgroup_size;
        WgpuExecutable::with_subgroups(gpu, program, subgroup)
    }

    /// [`WgpuExecutable::new`] with work-group trees finished by shuffles of `subgroup`
    /// lanes (which must be the device's fixed subgroup size, `Gpu::subgroup_size`) or,
    /// for `None`, in shared memory.
    pub(crate) fn with_subgroups(
        gpu: Arc<Gpu>,
        program: Program,
        subgroup: Option<u32>,
    ) -> RuntimeResult<WgpuExecutable> {
        // Release the buffers of executables dropped since (see `Gpu::graveyard`).
        drop(std::mem::take(
            &mut *gpu.graveyard.lock().unwrap_or_else(|e| e.into_inner()),
        ));
        let consts_bytes = consts_bytes(&program);
        let shaders = shaders(&program, consts_bytes, subgroup)?;
        let mut plans = Vec::with_capacity(program.kernels.len());
        for (i, (k, shader)) in program.kernels.iter().zip(shaders).enumerate() {
            let plan = match shader.and_then(|s| gpu.pipeline(&s.wgsl).map(|p| (s, p))) {
                Ok((shader, pipeline)) => Plan::Gpu { shader, pipeline },
                Err(reason) => {
                    log_fallback(&format!(
                        "`{}` kernel {i} ({}) runs on the CPU: {reason}",
                        program.name,
                        k.label()
                    ));
                    Plan::Host { reason }
                }
            };
            plans.push(plan);
        }
        let mut gpu_reads = vec![false; program.buffers.len()];
        for (k, p) in program.kernels.iter().zip(&plans) {
            if matches!(p, Plan::Gpu { .. }) {
                for b in k.reads() {
                    gpu_reads[b] = true;
                }
            }
        }
        let mut exe = WgpuExecutable {
            gpu,
            program,
            plans,
            fixed: None,
            cache: Mutex::new(Vec::new()),
            consts_bytes,
            gpu_reads,
        };
        if !exe.program.is_dynamic() {
            exe.fixed = Some(Arc::new(exe.bind(&DimBinding::new())?));
        }
        Ok(exe)
    }

    /// Bind the program to `binding`: layout, launches, parameters.
    fn bind(&self, binding: &DimBinding) -> RuntimeResult<Bound> {
        let p = &self.program;
        p.guards.check(binding)?;
        let (buf_dims, offsets, sizes, arena) = layout(p, binding, self.consts_bytes)?;
        let lim = &self.gpu.limits;
        let too_big = arena > lim.max_storage_buffer_binding_size.min(lim.max_buffer_size)
            || arena / 4 > u32::MAX as u64;
        let bases: Vec<u64> = offsets.iter().map(|o| o / 4).collect();
        let ualign = (lim.min_uniform_buffer_offset_alignment as u64).max(REGION_ALIGN);
        let mut params: Vec<u8> = Vec::new();
        let mut param_offset = Vec::with_capacity(p.kernels.len());
        let mut launch = Vec::with_capacity(p.kernels.len());
        for (k, plan) in p.kernels.iter().zip(&self.plans) {
            let off = params.len() as u64;
            param_offset.push(off as u32);
            let Plan::Gpu { shader, .. } = plan else {
                launch.push(Err(String::new()));
                continue;
            };
            if too_big {
                launch.push(Err(format!(
                    "the arena ({arena} bytes) exceeds the device's largest storage binding ({} bytes)",
                    lim.max_storage_buffer_binding_size.min(lim.max_buffer_size)
                )));
                continue;
            }
            let env = Env {
                binding,
                bases: &bases,
            };
            let mut vals = Vec::with_capacity(shader.slots.len());
            let mut bad = None;
            for s in &shader.slots {
                match env.resolve(s) {
                    Some(v) => vals.push(v),
                    None => bad = Some(format!("parameter {s:?} does not fit 32 bits")),
                }
            }
            if let Some(b) = bad {
                launch.push(Err(b));
                continue;
            }
            for v in vals {
                params.extend_from_slice(&v.to_le_bytes());
            }
            params.resize(align(params.len() as u64, ualign) as usize, 0);
            launch.push(grid(
                k,
                &shader.launch,
                binding,
                lim.max_compute_workgroups_per_dimension,
            ));
        }
        let uniform = if self.plans.iter().any(|p| matches!(p, Plan::Gpu { .. })) {
            params.resize(params.len() + PARAM_BYTES as usize, 0);
            let buf = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("rlx params"),
                size: params.len() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.gpu.queue.write_buffer(&buf, 0, &params);
            Some(buf)
        } else {
            None
        };
        for (i, l) in launch.iter().enumerate() {
            if let Err(r) = l
                && !r.is_empty()
            {
                log_fallback(&format!(
                    "`{}` kernel {i} ({}) runs on the CPU for this binding: {r}",
                    p.name,
                    p.kernels[i].label()
                ));
            }
        }
        let host = host::host_kernels(p, |k| launch[k].is_err(), binding)?;
        Ok(Bound {
            host,
            buf_dims,
            offsets,
            sizes,
            arena,
            launch,
            param_offset,
            uniform,
        })
    }

    fn bound_for(&self, args: &[TensorView<'_>]) -> RuntimeResult<Arc<Bound>> {
        if let Some(b) = &self.fixed {
            return Ok(b.clone());
        }
        let binding = binding_from_args(&self.program, args)?;
        let key = binding.sorted();
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = c.iter().find(|(k, _)| *k == key) {
            return Ok(b.clone());
        }
        let b = Arc::new(self.bind(&binding)?);
        if c.len() >= 64 {
            c.remove(0);
        }
        c.push((key, b.clone()));
        Ok(b)
    }

    /// Whether kernel `k` runs on the GPU under `bound`.
    fn on_gpu(&self, bound: &Bound, k: usize) -> bool {
        matches!(self.plans[k], Plan::Gpu { .. }) && bound.launch[k].is_ok()
    }

    /// An arena of at least `bytes` (from the device's pool) with the constants uploaded.
    fn take_arena(&self, bytes: u64) -> (u64, wgpu::Buffer) {
        let reused = {
            let mut pool = self.gpu.arenas.lock().unwrap_or_else(|e| e.into_inner());
            pool.iter()
                .position(|(s, _)| *s >= bytes)
                .map(|i| pool.swap_remove(i))
        };
        let (size, buf) = reused.unwrap_or_else(|| {
            let size = align(bytes.max(4), REGION_ALIGN);
            let buf = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("rlx arena"),
                size,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_DST
                    | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            (size, buf)
        });
        // Another program may have used this arena: the (small) constants go up per run.
        let mut off = 0u64;
        for b in &self.program.buffers {
            if let BufKind::Const(bytes) = &b.kind {
                write_padded(&self.gpu.queue, &buf, off, bytes);
                off += align(bytes.len() as u64, REGION_ALIGN);
            }
        }
        (size, buf)
    }

    /// Hand an arena back to the device's pool (the largest few are kept).
    fn give_arena(&self, size: u64, buf: wgpu::Buffer) {
        let mut pool = self.gpu.arenas.lock().unwrap_or_else(|e| e.into_inner());
        pool.push((size, buf));
        if pool.len() > 8 {
            pool.sort_by_key(|(s, _)| std::cmp::Reverse(*s));
            pool.truncate(8);
        }
    }

    /// Copy byte ranges of the arena back to the host (submits pending work first).
    fn download(
        &self,
        arena: &wgpu::Buffer,
        enc: &mut Option<wgpu::CommandEncoder>,
        ranges: &[(u64, u64)],
    ) -> RuntimeResult<Vec<Vec<u8>>> {
        let total: u64 = ranges.iter().map(|(_, n)| align(*n, 4)).sum();
        if total == 0 {
            return Ok(ranges.iter().map(|_| Vec::new()).collect());
        }
        let staging = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("rlx readback"),
            size: total,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut e = enc.take().unwrap_or_else(|| self.encoder());
        let mut at = 0;
        for &(off, n) in ranges {
            if n > 0 {
                e.copy_buffer_to_buffer(arena, off, &staging, at, align(n, 4));
            }
            at += align(n, 4);
        }
        self.gpu.queue.submit([e.finish()]);
        let (tx, rx) = std::sync::mpsc::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        self.gpu
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| RuntimeError::new(format!("wgpu device lost while reading back: {e}")))?;
        rx.recv()
            .map_err(|_| RuntimeError::new("wgpu readback never completed"))?
            .map_err(|e| RuntimeError::new(format!("wgpu readback failed: {e}")))?;
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| RuntimeError::new(format!("wgpu readback failed: {e}")))?;
        let mut out = Vec::with_capacity(ranges.len());
        let mut at = 0usize;
        for &(_, n) in ranges {
            out.push(view[at..at + n as usize].to_vec());
            at += align(n, 4) as usize;
        }
        drop(view);
        staging.unmap();
        Ok(out)
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        self.gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("rlx run"),
            })
    }

    /// Run every kernel on the host (no kernel of this binding runs on the GPU).
    fn run_host(&self, bound: &Bound, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let p = &self.program;
        let mut host: Vec<Option<TensorData>> = vec![None; p.buffers.len()];
        for (k, kernel) in p.kernels.iter().enumerate() {
            self.host_kernel(bound, k, kernel, args, &mut host)?;
        }
        Ok(self.collect(bound, &mut host))
    }

    fn host_kernel(
        &self,
        bound: &Bound,
        k: usize,
        kernel: &rlx_compile::program::Kernel,
        args: &[TensorView<'_>],
        host: &mut [Option<TensorData>],
    ) -> RuntimeResult<Vec<BufId>> {
        let p = &self.program;
        let hk = bound.host[k]
            .as_ref()
            .expect("a kernel run on the host has a host kernel for its binding");
        let outs = host::run(hk, p, args, host).map_err(|e| {
            RuntimeError::of_kind(
                e.kind(),
                format!(
                    "graph `{}`, kernel {k} ({} of [{}]): {}",
                    p.name,
                    kernel.label(),
                    kernel.fused_names.join(", "),
                    e.message()
                ),
            )
        })?;
        let mut written = Vec::new();
        for (b, v) in outs {
            written.push(b);
            host[b] = Some(v);
        }
        Ok(written)
    }

    /// The results, in output order, from the host copies.
    fn collect(&self, bound: &Bound, host: &mut [Option<TensorData>]) -> Vec<TensorData> {
        self.program
            .outputs
            .iter()
            .map(|&b| {
                host[b].clone().unwrap_or_else(|| TensorData {
                    dtype: self.program.buffers[b].shape.dtype(),
                    dims: bound.buf_dims[b].clone(),
                    bytes: Vec::new(),
                })
            })
            .collect()
    }
}

impl Drop for WgpuExecutable {
    fn drop(&mut self) {
        // Keep the parameter buffers alive in the device context (see `Gpu::graveyard`).
        let mut keep: Vec<wgpu::Buffer> = Vec::new();
        let cached = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        for b in self.fixed.iter().chain(cached.iter().map(|(_, b)| b)) {
            keep.extend(b.uniform.iter().cloned());
        }
        self.gpu
            .graveyard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(keep);
    }
}

impl Executable for WgpuExecutable {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let p = &self.program;
        if args.len() != p.args.len() {
            let names: Vec<&str> = p.args.iter().map(|(n, _)| n.as_str()).collect();
            return Err(RuntimeError::new(format!(
                "graph `{}` takes {} arguments ({names:?}), got {}",
                p.name,
                p.args.len(),
                args.len()
            )));
        }
        for (a, (name, shape)) in args.iter().zip(&p.args) {
            if a.dtype != shape.dtype() {
                return Err(RuntimeError::new(format!(
                    "graph `{}`: argument `{name}` is declared {shape} but got {:?} {}",
                    p.name, a.dims, a.dtype
                )));
            }
        }
        let bound = self.bound_for(args)?;
        if self.fixed.is_some() {
            for (a, (name, shape)) in args.iter().zip(&p.args) {
                if shape.static_dims().as_deref() != Some(a.dims) {
                    return Err(RuntimeError::new(format!(
                        "graph `{}`: argument `{name}` is declared {shape} but got {:?} {}",
                        p.name, a.dims, a.dtype
                    )));
                }
            }
        }
        if !(0..p.kernels.len()).any(|k| self.on_gpu(&bound, k)) {
            return self.run_host(&bound, args);
        }
        self.run_mixed(&bound, args)
    }

    fn explain(&self) -> String {
        let arena = self.fixed.as_ref().map(|b| b.arena as usize);
        let mut s = rlx_compile::explain(
            &self.program,
            &format!("wgpu {}", self.gpu.describe()),
            arena,
        );
        s.push_str("\nwhere each kernel runs:");
        for (k, kernel) in self.program.kernels.iter().enumerate() {
            // Which engine runs a host kernel is known once the dims are bound.
            let by = match self.fixed.as_ref().and_then(|b| b.host[k].as_ref()) {
                Some(h) => format!(", run by {}", h.engine()),
                None => String::new(),
            };
            let place = match (&self.plans[k], self.fixed.as_ref().map(|b| &b.launch[k])) {
                (Plan::Host { reason }, _) => format!("CPU fallback ({reason}){by}"),
                (Plan::Gpu { .. }, Some(Err(r))) => format!("CPU fallback ({r}){by}"),
                (Plan::Gpu { shader, .. }, _) => format!(
                    "GPU (WGSL, {}{})",
                    match shader.launch {
                        Launch::Threads(_) => "thread per element".to_string(),
                        Launch::Groups(_) => "workgroup per output".to_string(),
                        Launch::Tiles { tile, .. } => format!("workgroup per {tile}x{tile} tile"),
                    },
                    if shader.slots.is_empty() {
                        String::new()
                    } else {
                        format!(", {} dynamic parameters", shader.slots.len())
                    }
                ),
            };
            s.push_str(&format!("\n  kernel {k} ({}): {place}", kernel.label()));
        }
        s
    }
}

impl WgpuExecutable {
    /// Where each kernel runs for static programs: `true` for the GPU (for tests).
    pub(crate) fn placement(&self) -> Vec<bool> {
        match &self.fixed {
            Some(b) => (0..self.plans.len()).map(|k| self.on_gpu(b, k)).collect(),
            None => self
                .plans
                .iter()
                .map(|p| matches!(p, Plan::Gpu { .. }))
                .collect(),
        }
    }

    fn run_mixed(&self, bound: &Bound, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        let p = &self.program;
        let (size, arena) = self.take_arena(bound.arena);
        let uniform = bound.uniform.as_ref().expect("a GPU kernel has parameters");
        let bg = self
            .gpu
            .device
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("rlx arena"),
                layout: &self.gpu.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: &arena,
                            offset: 0,
                            size: None,
                        }),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: uniform,
                            offset: 0,
                            size: std::num::NonZeroU64::new(PARAM_BYTES),
                        }),
                    },
                ],
            });
        // Arguments some GPU kernel reads go up once.
        for (i, b) in p.buffers.iter().enumerate() {
            if let BufKind::Arg(a) = b.kind
                && self.gpu_reads[i]
            {
                write_padded(&self.gpu.queue, &arena, bound.offsets[i], args[a].bytes);
            }
        }
        let mut host: Vec<Option<TensorData>> = vec![None; p.buffers.len()];
        let mut enc: Option<wgpu::CommandEncoder> = None;
        let result = (|| -> RuntimeResult<()> {
            for (k, kernel) in p.kernels.iter().enumerate() {
                if self.on_gpu(bound, k) {
                    let Plan::Gpu { pipeline, .. } = &self.plans[k] else {
                        unreachable!()
                    };
                    let Ok(Some(g)) = bound.launch[k] else {
                        continue;
                    };
                    let e = enc.get_or_insert_with(|| self.encoder());
                    let mut pass = e.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: None,
                    });
                    pass.set_pipeline(pipeline);
                    pass.set_bind_group(0, &bg, &[bound.param_offset[k]]);
                    pass.dispatch_workgroups(g[0], g[1], g[2]);
                    continue;
                }
                // Host kernel: fetch what the GPU wrote, run, push back what the GPU reads.
                let need: Vec<BufId> = kernel
                    .reads()
                    .filter(|&b| {
                        matches!(p.buffers[b].kind, BufKind::Temp | BufKind::Output(_))
                            && host[b].is_none()
                    })
                    .fold(Vec::new(), |mut v, b| {
                        if !v.contains(&b) {
                            v.push(b);
                        }
                        v
                    });
                if !need.is_empty() {
                    let ranges: Vec<(u64, u64)> = need
                        .iter()
                        .map(|&b| (bound.offsets[b], bound.sizes[b]))
                        .collect();
                    let data = self.download(&arena, &mut enc, &ranges)?;
                    for (b, bytes) in need.into_iter().zip(data) {
                        host[b] = Some(TensorData {
                            dtype: p.buffers[b].shape.dtype(),
                            dims: bound.buf_dims[b].clone(),
                            bytes,
                        });
                    }
                } else if let Some(e) = enc.take() {
                    self.gpu.queue.submit([e.finish()]);
                }
                for b in self.host_kernel(bound, k, kernel, args, &mut host)? {
                    if self.gpu_reads[b] {
                        write_padded(
                            &self.gpu.queue,
                            &arena,
                            bound.offsets[b],
                            &host[b].as_ref().unwrap().bytes,
                        );
                    }
                }
            }
            Ok(())
        })();
        // GPU-written buffers become stale on the host when a later kernel rewrites
        // them; outputs are written once, so their host copies stay valid.
        let out = result.and_then(|()| {
            let need: Vec<BufId> = p
                .outputs
                .iter()
                .copied()
                .filter(|&b| host[b].is_none())
                .fold(Vec::new(), |mut v, b| {
                    if !v.contains(&b) {
                        v.push(b);
                    }
                    v
                });
            let ranges: Vec<(u64, u64)> = need
                .iter()
                .map(|&b| (bound.offsets[b], bound.sizes[b]))
                .collect();
            let data = self.download(&arena, &mut enc, &ranges)?;
            for (b, bytes) in need.into_iter().zip(data) {
                host[b] = Some(TensorData {
                    dtype: p.buffers[b].shape.dtype(),
                    dims: bound.buf_dims[b].clone(),
                    bytes,
                });
            }
            Ok(self.collect(bound, &mut host))
        });
        if let Some(e) = enc.take() {
            self.gpu.queue.submit([e.finish()]);
        }
        self.give_arena(size, arena);
        out
    }
}

/// Bytes the baked constants take at the start of the arena.
fn consts_bytes(program: &Program) -> u64 {
    program
        .buffers
        .iter()
        .map(|b| match &b.kind {
            BufKind::Const(bytes) => align(bytes.len() as u64, REGION_ALIGN),
            _ => 0,
        })
        .sum()
}

/// The shader of every kernel (static programs with their offsets and strides baked in),
/// or why the GPU does not run it.
pub(crate) fn shaders(
    program: &Program,
    consts_bytes: u64,
    subgroup: Option<u32>,
) -> RuntimeResult<Vec<Result<wgsl::Shader, String>>> {
    let static_layout = if program.is_dynamic() {
        None
    } else {
        Some(layout(program, &DimBinding::new(), consts_bytes)?)
    };
    Ok(program
        .kernels
        .iter()
        .map(|k| match &static_layout {
            Some((_, offsets, _, _)) => {
                let bases: Vec<u64> = offsets.iter().map(|o| o / 4).collect();
                let env = Env {
                    binding: &DimBinding::new(),
                    bases: &bases,
                };
                wgsl::kernels::generate(program, k, Some(&env), subgroup)
            }
            None => wgsl::kernels::generate(program, k, None, subgroup),
        })
        .collect())
}

/// The WGSL of every kernel of `program` (`Err`: why that kernel runs on the host), for
/// a device with fixed subgroups of `subgroup` lanes or none.
pub(crate) fn wgsl_sources(
    program: &Program,
    subgroup: Option<u32>,
) -> RuntimeResult<Vec<Result<String, String>>> {
    Ok(shaders(program, consts_bytes(program), subgroup)?
        .into_iter()
        .map(|s| s.map(|s| s.wgsl))
        .collect())
}
