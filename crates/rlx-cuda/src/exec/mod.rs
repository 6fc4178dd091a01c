//! The executable: a generated program loaded on a device, run step by step over one
//! device arena that is kept (and grown) across runs.
//!
//! One executor for every C++-dialect GPU: the program is generated in the device's
//! [`Gpu::dialect`] (CUDA for NVRTC, HIP for hiprtc) and planned with its BLAS routes
//! ([`Gpu::has_blas`], [`Gpu::has_blas_epilogue`], [`Gpu::has_fp8`]), so the HIP device
//! of `rlx-rocm` runs through this same code rather than a copy of it.

pub(crate) mod blas;
pub(crate) mod host;
pub(crate) mod plan;

use crate::codegen::{CodegenOptions, Generated, KCode, generate_with};
use crate::device::{Batching, DPtr, Dialect, GemmCall, Gpu, Module};
use plan::{Plan, Step, Tuning, bind, binding_from_args, finish_ptrs};
use rlx_compile::program::{BufKind, Program};
use rlx_ir::{DimBinding, TensorData, TensorView};
use rlx_runtime::{Executable, RuntimeError, RuntimeResult};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Bound plans cached per binding of the dynamic dims.
type PlanCache = Mutex<Vec<(Vec<(u32, usize)>, Arc<Plan>)>>;

/// The device arena of an executable.
struct Arena {
    ptr: DPtr,
    bytes: usize,
}

/// A program compiled for a C++-dialect GPU: a CUDA device, a HIP device (`rlx-rocm`)
/// or the host emulator.
///
/// `Send + Sync`, so one compiled program may be run from several threads; the device
/// arena sits behind an internal `Mutex` held from the upload of the arguments to the
/// download of the results, so concurrent runs of one executable are serialized (runs
/// of different executables only share the device's stream).
pub(crate) struct GpuExecutable {
    program: Program,
    generated: Generated,
    module: Arc<dyn Module>,
    gpu: Arc<dyn Gpu>,
    entries: HashMap<String, usize>,
    tuning: Tuning,
    fixed: Option<Arc<Plan>>,
    cache: PlanCache,
    arena: Mutex<Arena>,
}

// Compiled programs are shared between threads: fail the build here if a field stops
// being `Send + Sync`.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<GpuExecutable>();
};

impl Drop for GpuExecutable {
    fn drop(&mut self) {
        let a = self.arena.get_mut().unwrap_or_else(|e| e.into_inner());
        if a.bytes > 0 {
            self.gpu.free(a.ptr);
        }
    }
}

/// Tuning for `gpu`, with the environment overrides `RLX_CUDA_NO_BLAS=1`,
/// `RLX_CUDA_SPLIT_MIN=<n>` ([`Tuning::split_min`]; a value that is not a number is
/// ignored) and `RLX_CUDA_SHUFFLES=0` ([`Tuning::shuffles`]).
pub(crate) fn tuning_for(gpu: &dyn Gpu) -> Tuning {
    let no_blas = std::env::var("RLX_CUDA_NO_BLAS").is_ok_and(|v| v == "1");
    let split_min = std::env::var("RLX_CUDA_SPLIT_MIN")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(plan::SPLIT_MIN);
    Tuning {
        sm_count: gpu.sm_count(),
        split_min,
        blas: gpu.has_blas() && !no_blas,
        fp8: gpu.has_fp8() && !no_blas,
        epilogue: gpu.has_blas_epilogue() && !no_blas,
        shuffles: shuffles_from_env(),
    }
}

/// Whether warp shuffles are on: unless `RLX_CUDA_SHUFFLES=0`.
pub(crate) fn shuffles_from_env() -> bool {
    !std::env::var("RLX_CUDA_SHUFFLES").is_ok_and(|v| v.trim() == "0")
}

impl GpuExecutable {
    pub(crate) fn new(
        program: Program,
        gpu: Arc<dyn Gpu>,
        tuning: Tuning,
    ) -> Result<GpuExecutable, String> {
        let opts = CodegenOptions {
            shuffles: tuning.shuffles,
        };
        let generated = generate_with(&program, gpu.dialect(), opts)?;
        let names = generated.entry_names();
        let module = gpu.load(&generated.source, &names)?;
        let entries = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let mut e = GpuExecutable {
            program,
            generated,
            module,
            gpu,
            entries,
            tuning,
            fixed: None,
            cache: Mutex::new(Vec::new()),
            arena: Mutex::new(Arena { ptr: 0, bytes: 0 }),
        };
        if !e.program.is_dynamic() {
            e.fixed = Some(Arc::new(e.bind(&DimBinding::new())?));
        }
        Ok(e)
    }

    fn bind(&self, b: &DimBinding) -> Result<Plan, String> {
        let mut plan = bind(
            &self.program,
            &self.generated,
            &self.entries,
            b,
            &self.tuning,
        )?;
        finish_ptrs(&mut plan);
        Ok(plan)
    }

    fn plan_for(&self, args: &[TensorView<'_>]) -> Result<Arc<Plan>, String> {
        if let Some(p) = &self.fixed {
            return Ok(p.clone());
        }
        let dims: Vec<&[usize]> = args.iter().map(|a| a.dims).collect();
        let binding = binding_from_args(&self.program, &dims)?;
        let key = binding.sorted();
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = c.iter().find(|(k, _)| *k == key) {
            return Ok(p.clone());
        }
        let p = Arc::new(self.bind(&binding)?);
        if c.len() >= 64 {
            c.remove(0);
        }
        c.push((key, p.clone()));
        Ok(p)
    }

    /// The arena (grown to `bytes`, constants uploaded after every reallocation).
    fn ensure_arena(&self, a: &mut Arena, plan: &Plan) -> Result<DPtr, String> {
        if a.bytes < plan.arena {
            if a.bytes > 0 {
                self.gpu.free(a.ptr);
                a.bytes = 0;
            }
            a.ptr = self.gpu.alloc(plan.arena)?;
            a.bytes = plan.arena;
            for (i, b) in self.program.buffers.iter().enumerate() {
                if let BufKind::Const(bytes) = &b.kind
                    && !bytes.is_empty()
                {
                    self.gpu.upload(a.ptr + plan.buf_off[i] as u64, bytes)?;
                }
            }
        }
        Ok(a.ptr)
    }

    fn run_steps(&self, plan: &Plan, base: DPtr) -> Result<(), (usize, String)> {
        for (kid, steps) in plan.steps.iter().enumerate() {
            for s in steps {
                self.step(s, base).map_err(|e| (kid, e))?;
            }
        }
        Ok(())
    }

    fn step(&self, s: &Step, base: DPtr) -> Result<(), String> {
        match s {
            Step::Launch(l) => {
                let np = l.ptrs.len().max(1);
                let nm = l.meta.len().max(1);
                let mut params = vec![0u8; (np + nm) * 8];
                for (i, p) in l.ptrs.iter().enumerate() {
                    let v = p.map_or(0, |o| base + o as u64);
                    params[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
                }
                for (i, m) in l.meta.iter().enumerate() {
                    let at = (np + i) * 8;
                    params[at..at + 8].copy_from_slice(&m.to_le_bytes());
                }
                self.module
                    .launch(l.entry, l.grid, l.block, &params, l.sync)
            }
            Step::Gemm { call, table } => {
                let call = rebase(call, base);
                if let (Some(rows), Batching::Pointers { a, b, c }) = (table, &call.batching) {
                    let col = |j: usize| -> Vec<u8> {
                        rows.iter()
                            .flat_map(|r| (base + r[j] as u64).to_le_bytes())
                            .collect()
                    };
                    self.gpu.upload(*a, &col(0))?;
                    self.gpu.upload(*b, &col(1))?;
                    self.gpu.upload(*c, &col(2))?;
                }
                self.gpu.gemm(&call)
            }
            Step::Fp8(c) => {
                let mut c = c.clone();
                for p in [&mut c.a, &mut c.b, &mut c.a_scale, &mut c.b_scale, &mut c.d] {
                    *p += base;
                }
                self.gpu.fp8_gemm(&c)
            }
            Step::Host(h) => h.run(self.gpu.as_ref(), base),
        }
    }

    fn error_of(&self, word: u64) -> String {
        let kid = (word >> 8) as usize - 1;
        // Every device kernel is rendered from the loop IR, whose faults carry the
        // oracle's codes and messages.
        let what = match rlx_compile::loops::Fault::from_code(word & 0xff) {
            Some(f) => f.message().to_string(),
            None => format!("device error code {}", word & 0xff),
        };
        self.kernel_error(kid, &what)
    }

    fn kernel_error(&self, kid: usize, what: &str) -> String {
        match self.program.kernels.get(kid) {
            Some(k) => format!(
                "graph `{}`, kernel {kid} ({} of [{}]) on {}: {what}",
                self.program.name,
                k.label(),
                k.fused_names.join(", "),
                self.gpu.describe()
            ),
            None => format!(
                "graph `{}` on {}: {what}",
                self.program.name,
                self.gpu.describe()
            ),
        }
    }

    /// Upload `args` once, then run the kernels `iters` times back to back: seconds per
    /// run on the device (no transfers), after a final synchronize.
    pub(crate) fn time_kernels(
        &self,
        args: &[TensorView<'_>],
        iters: usize,
    ) -> Result<f64, String> {
        let plan = self.plan_for(args)?;
        let mut arena = self.arena.lock().unwrap_or_else(|e| e.into_inner());
        let base = self.ensure_arena(&mut arena, &plan)?;
        for (i, b) in self.program.buffers.iter().enumerate() {
            if let BufKind::Arg(a) = b.kind
                && !args[a].bytes.is_empty()
            {
                self.gpu
                    .upload(base + plan.buf_off[i] as u64, args[a].bytes)?;
            }
        }
        self.gpu.zero(base + plan.err_off as u64, 8)?;
        self.run_steps(&plan, base)
            .map_err(|(k, e)| self.kernel_error(k, &e))?;
        self.gpu.synchronize()?;
        let t = std::time::Instant::now();
        for _ in 0..iters {
            self.run_steps(&plan, base)
                .map_err(|(k, e)| self.kernel_error(k, &e))?;
        }
        self.gpu.synchronize()?;
        Ok(t.elapsed().as_secs_f64() / iters.max(1) as f64)
    }

    fn run_inner(&self, args: &[TensorView<'_>]) -> Result<Vec<TensorData>, String> {
        let p = &self.program;
        if args.len() != p.args.len() {
            let names: Vec<&str> = p.args.iter().map(|(n, _)| n.as_str()).collect();
            return Err(format!(
                "graph `{}` takes {} arguments ({names:?}), got {}",
                p.name,
                p.args.len(),
                args.len()
            ));
        }
        for (a, (name, shape)) in args.iter().zip(&p.args) {
            if a.dtype != shape.dtype() {
                return Err(format!(
                    "graph `{}`: argument `{name}` is declared {shape} but got {:?} {}",
                    p.name, a.dims, a.dtype
                ));
            }
        }
        let plan = self.plan_for(args)?;
        let mut arena = self.arena.lock().unwrap_or_else(|e| e.into_inner());
        let base = self.ensure_arena(&mut arena, &plan)?;
        for (i, b) in p.buffers.iter().enumerate() {
            if let BufKind::Arg(a) = b.kind {
                let bytes = args[a].bytes;
                if bytes.len() != plan.buf_bytes[i] {
                    return Err(format!(
                        "graph `{}`: argument `{}` has {} bytes, its type needs {}",
                        p.name,
                        p.args[a].0,
                        bytes.len(),
                        plan.buf_bytes[i]
                    ));
                }
                if !bytes.is_empty() {
                    self.gpu.upload(base + plan.buf_off[i] as u64, bytes)?;
                }
            }
        }
        self.gpu.zero(base + plan.err_off as u64, 8)?;
        if let Err((kid, e)) = self.run_steps(&plan, base) {
            let _ = self.gpu.synchronize();
            return Err(self.kernel_error(kid, &e));
        }
        let mut word = [0u8; 8];
        self.gpu.download(&mut word, base + plan.err_off as u64)?;
        let word = u64::from_le_bytes(word);
        if word != 0 {
            return Err(self.error_of(word));
        }
        let mut out: Vec<TensorData> = Vec::with_capacity(p.outputs.len());
        for (j, &b) in p.outputs.iter().enumerate() {
            if let Some(prev) = p.outputs[..j].iter().position(|&x| x == b) {
                let d = out[prev].clone();
                out.push(d);
                continue;
            }
            let mut bytes = vec![0u8; plan.buf_bytes[b]];
            if !bytes.is_empty() {
                self.gpu
                    .download(&mut bytes, base + plan.buf_off[b] as u64)?;
            }
            out.push(TensorData {
                dtype: p.buffers[b].shape.dtype(),
                dims: plan.buf_dims[b].clone(),
                bytes,
            });
        }
        Ok(out)
    }
}

/// `call` with arena offsets turned into addresses.
fn rebase(call: &GemmCall, base: DPtr) -> GemmCall {
    let mut c = call.clone();
    c.a += base;
    c.b += base;
    c.c += base;
    if let Batching::Pointers { a, b, c: cc } = &mut c.batching {
        *a += base;
        *b += base;
        *cc += base;
    }
    if let Some(e) = &mut c.epilogue
        && let Some(bias) = &mut e.bias
    {
        *bias += base;
    }
    c
}

impl Executable for GpuExecutable {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        self.run_inner(args).map_err(RuntimeError::new)
    }

    fn explain(&self) -> String {
        let arena = self.fixed.as_ref().map(|p| p.arena);
        // The backend, run-time compiler and BLAS library of the device's dialect.
        let (backend, rtc, blas) = match self.gpu.dialect() {
            Dialect::Cuda => ("cuda", "NVRTC", "cublas"),
            Dialect::Hip => ("rocm", "hiprtc", "rocblas"),
        };
        let mut s = rlx_compile::explain(&self.program, backend, arena);
        let mut host = Vec::new();
        if let Some(plan) = &self.fixed {
            let names: Vec<&String> = {
                let mut v: Vec<(&String, &usize)> = self.entries.iter().collect();
                v.sort_by_key(|(_, i)| **i);
                v.into_iter().map(|(n, _)| n).collect()
            };
            for (kid, steps) in plan.steps.iter().enumerate() {
                let route: Vec<String> = steps
                    .iter()
                    .map(|st| match st {
                        Step::Launch(l) => match &self.generated.kernels[kid].kind {
                            KCode::Attention(a) if a.tensor_cores => {
                                format!("{}[tensor cores: wmma on sm_80+]", names[l.entry])
                            }
                            _ => names[l.entry].clone(),
                        },
                        Step::Gemm { call, .. } => {
                            let mut r = match (&call.epilogue, &call.batching) {
                                (Some(e), _) => format!(
                                    "cublasLt{}{}",
                                    if e.bias.is_some() { "+bias" } else { "" },
                                    e.act.map(|a| format!("+{}", a.name())).unwrap_or_default()
                                ),
                                (None, Batching::Pointers { .. }) => {
                                    format!("{blas}(pointer batches)")
                                }
                                (None, Batching::Strided { .. }) => blas.to_string(),
                            };
                            r.push_str(&format!("[{}]", call.dtype));
                            r
                        }
                        Step::Fp8(_) => "cublasLt(fp8)".into(),
                        Step::Host(h) => {
                            host.push(format!("{} by {}", h.name(), h.engine()));
                            format!("host({})", h.name())
                        }
                    })
                    .collect();
                if !route.is_empty() {
                    s.push_str(&format!("\n  kernel {kid}: {}", route.join(" → ")));
                }
            }
        }
        s.push_str(&format!(
            "\n{backend}: {} ({} entry points in one {rtc} module",
            self.gpu.describe(),
            self.entries.len()
        ));
        if !host.is_empty() {
            s.push_str(&format!("; on the host: {}", host.join(", ")));
        }
        s.push_str(")\n");
        s
    }
}
