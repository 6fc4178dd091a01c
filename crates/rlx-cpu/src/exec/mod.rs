//! The compiled executor: runs a [`Program`] kernel by kernel over one pooled arena,
//! reading arguments in place and writing each output once.

mod attention;
mod bind;
mod contract;
mod conv;
mod conv_grad;
mod copy;
mod cumsum;
mod ew;
mod gemv;
mod loads;
mod movement;
mod nn_ops;
mod opaque;
mod operand;
mod ops;
mod order;
pub(crate) mod par;
mod pool;
mod reduce;
mod rope;
mod row;
mod rowgroup;
mod scaled;
mod scaled_lut;
mod scaled_quant;
mod scatter;
mod small;
pub(crate) mod value;
pub(crate) mod vm;

use bind::{BKernel, Bound, bind, binding_from_args};
use rlx_compile::program::{BufKind, Program};
use rlx_ir::{TensorData, TensorView};
use rlx_runtime::{Donation, Executable, HostOutput, RuntimeError, RuntimeResult, check_donations};
use small::small_program;
use std::sync::{Arc, Mutex};

/// One cache line: the unit of arena and constant storage (so every buffer is aligned
/// for every dtype and for vector loads).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Zeroed, 64-byte-aligned storage of at least `bytes` bytes, or an error naming
/// `what` and the bytes when the allocator refuses (never an abort).
fn lines(bytes: usize, what: &str) -> RuntimeResult<Vec<Line>> {
    let n = bytes.div_ceil(64);
    let mut v: Vec<Line> = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| out_of_memory(bytes, what))?;
    v.resize(n, Line([0; 64]));
    Ok(v)
}

fn out_of_memory(bytes: usize, what: &str) -> RuntimeError {
    RuntimeError::out_of_memory(format!(
        "cpu: out of memory: cannot allocate {bytes} bytes ({}) for {what}; use smaller inputs or shapes",
        rlx_ir::human_bytes(bytes)
    ))
}

/// Ask for transparent huge pages on a large fresh allocation: its first touch then
/// faults once per 2 MiB instead of once per 4 KiB (a 64 MiB output otherwise spends
/// more time in page faults than in the kernel writing it).
fn huge_pages(p: *mut u8, n: usize) {
    const HUGE: usize = 2 << 20;
    if n < 2 * HUGE {
        return;
    }
    let start = (p as usize).next_multiple_of(HUGE);
    let end = (p as usize + n) / HUGE * HUGE;
    if end > start {
        #[cfg(target_os = "linux")]
        // SAFETY: [start, end) is rounded inward to whole 2 MiB pages of the caller's
        // allocation [p, p + n); MADV_HUGEPAGE is only a hint and changes no contents or
        // protections, so the allocation stays valid whatever the kernel does with it.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

/// Keep large freed blocks in the malloc heap (glibc): a call's fresh output (and the
/// front end's copies of it) then reuses the pages of the previous call's instead of
/// mapping, faulting in and zeroing new ones — which costs as much as the kernel itself
/// on bandwidth-bound work. Set `RLX_NO_MALLOC_TUNING` to leave malloc alone.
fn tune_malloc() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("RLX_NO_MALLOC_TUNING").is_some() {
            return;
        }
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt only changes glibc's allocation thresholds (valid parameter
        // constants and values); it runs once (`ONCE`) and touches no existing block.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
        }
    });
}

thread_local! {
    /// The output stores of the previous run on this thread, by buffer (all `None`
    /// between runs): reused so that a run of a small program allocates only its results.
    static RUN_OUTPUTS: std::cell::Cell<Vec<Option<OutStore>>> =
        const { std::cell::Cell::new(Vec::new()) };
    /// The buffer base pointers of the previous run on this thread (reused likewise).
    static RUN_BASES: std::cell::Cell<Vec<*mut u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Bound plans cached per binding of the dynamic dims.
type BindCache = Mutex<Vec<(Vec<(u32, usize)>, Arc<Bound>)>>;

/// A program compiled for the CPU.
///
/// Runs from several threads at once are truly concurrent: no lock is held across a
/// run. Each run takes an arena from `pool` (allocating one when all are in use) and
/// hands it back afterwards; the bound plans, constants and compiled JIT code are only
/// read (JIT code is compiled once per program, under the short lock of its
/// [`crate::jit::JitCache`], then held by each plan behind a `OnceLock`); the
/// per-thread tile scratch is thread-local; profiling counters are updated under a
/// short lock per kernel. The kernels of concurrent runs share the CPU worker pool.
pub(crate) struct CpuExecutable {
    program: Program,
    /// The plan for static programs (bound once at compile time).
    fixed: Option<Arc<Bound>>,
    cache: BindCache,
    /// Machine code of the tile programs, shared by the plans of every binding.
    jit: Arc<crate::jit::JitCache>,
    /// Arenas handed back after runs (reused: no allocation per call).
    pool: Mutex<Vec<Vec<Line>>>,
    /// Aligned copies of the baked constants, per buffer.
    consts: Vec<Option<Vec<Line>>>,
    /// Per-kernel `(total seconds, runs)` when `RLX_PROFILE` is set.
    profile: Option<Mutex<Vec<(f64, u64)>>>,
    /// The argument types of a program whose runs without donations take
    /// [`CpuExecutable::run_small`] (see [`small_program`]).
    small: Option<small::SmallArgs>,
}

// Compiled CPU programs are shared between threads (`Arc<CompiledGraph>`): fail the
// build, not a user's, if a field stops being `Send + Sync`.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<CpuExecutable>();
};

/// Whether `RLX_PROFILE` asks for per-kernel timings (read once per process).
fn profiling() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RLX_PROFILE").is_some_and(|v| v != "0"))
}

impl CpuExecutable {
    /// The per-kernel timings so far, slowest kernel first (`None` without
    /// `RLX_PROFILE` or before the first run).
    fn profile_data(&self) -> Option<rlx_runtime::Profile> {
        let prof = self.profile.as_ref()?;
        let prof = prof.lock().unwrap_or_else(|e| e.into_inner());
        let runs = prof.iter().map(|&(_, n)| n).max().unwrap_or(0);
        if runs == 0 {
            return None;
        }
        let mut kernels: Vec<rlx_runtime::KernelProfile> = prof
            .iter()
            .zip(&self.program.kernels)
            .enumerate()
            .map(
                |(index, (&(total_s, calls), kernel))| rlx_runtime::KernelProfile {
                    index,
                    kind: kernel.label(),
                    ops: kernel.fused_names.clone(),
                    calls,
                    total_s,
                },
            )
            .collect();
        kernels.sort_by(|a, b| b.total_s.total_cmp(&a.total_s));
        Some(rlx_runtime::Profile {
            program: self.program.name.clone(),
            runs,
            kernels,
        })
    }

    /// The per-kernel timings so far as the printed table.
    fn profile_report(&self) -> Option<String> {
        self.profile_data().map(|p| p.to_string())
    }
}

impl Drop for CpuExecutable {
    fn drop(&mut self) {
        if let Some(r) = self.profile_report() {
            eprint!("{r}");
        }
    }
}

impl CpuExecutable {
    pub(crate) fn new(program: Program) -> RuntimeResult<CpuExecutable> {
        tune_malloc();
        let consts = program
            .buffers
            .iter()
            .map(|b| match &b.kind {
                BufKind::Const(bytes) => {
                    let mut l = lines(bytes.len(), "a constant")?;
                    // SAFETY: `l` is a fresh allocation of at least `bytes.len()` bytes
                    // (`lines` rounds up to whole lines), so the copy stays inside both
                    // and the two cannot overlap.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            bytes.as_ptr(),
                            l.as_mut_ptr() as *mut u8,
                            bytes.len(),
                        )
                    };
                    Ok(Some(l))
                }
                _ => Ok(None),
            })
            .collect::<RuntimeResult<Vec<_>>>()?;
        let program_kernels = program.kernels.len();
        let jit = crate::jit::JitCache::for_kernels(program_kernels);
        let fixed = if program.is_dynamic() {
            None
        } else {
            Some(Arc::new(bind(&program, &rlx_ir::DimBinding::new(), &jit)?))
        };
        let profile = profiling().then(|| Mutex::new(vec![(0.0, 0); program_kernels]));
        let small = small_program(&program, fixed.as_deref(), profile.is_some());
        Ok(CpuExecutable {
            program,
            fixed,
            cache: Mutex::new(Vec::new()),
            jit,
            pool: Mutex::new(Vec::new()),
            consts,
            profile,
            small,
        })
    }

    fn bound_for(&self, args: &[TensorView<'_>]) -> RuntimeResult<Arc<Bound>> {
        if let Some(b) = &self.fixed {
            return Ok(b.clone());
        }
        let dims: Vec<&[usize]> = args.iter().map(|a| a.dims).collect();
        let binding = binding_from_args(&self.program, &dims)?;
        let key = binding.sorted();
        let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, b)) = c.iter().find(|(k, _)| *k == key) {
            return Ok(b.clone());
        }
        let b = Arc::new(bind(&self.program, &binding, &self.jit)?);
        if c.len() >= 64 {
            c.remove(0);
        }
        c.push((key, b.clone()));
        Ok(b)
    }

    /// The planned arena for static programs.
    pub(crate) fn arena_bytes(&self) -> Option<usize> {
        self.fixed.as_ref().map(|b| b.arena)
    }
}

/// What one run reads: its arguments, whether f32 results come back as `Vec<f32>`
/// (`f32_host`), and the storage of its donated arguments (their views carry no bytes).
#[derive(Clone, Copy)]
struct RunInputs<'r, 'a> {
    args: &'r [TensorView<'a>],
    f32_host: bool,
    donated: &'r [DonatedBuf],
}

/// Where one run's results go: `stores` holds, per output buffer written over a
/// donation, the donated vector (moved into the results on success); `out` receives the
/// results; the first result's dims reuse `spare`'s vector when it holds one (see
/// [`spare_dims`]).
struct RunResults<'r> {
    stores: &'r mut Vec<(usize, Vec<f32>)>,
    out: &'r mut Vec<HostOutput>,
    spare: &'r mut Option<Vec<usize>>,
}

/// A donated argument's storage during a run.
struct DonatedBuf {
    arg: usize,
    ptr: *mut u8,
    bytes: usize,
    /// The output buffer computed over it, if the program allows one.
    into: Option<usize>,
}

// SAFETY: `ptr` is the storage of a caller's donated vector, alive (and used by nothing
// else) for the whole run, whose caller waits for it; a run may move to a pool worker
// (`ThreadPool::install`), and its kernels read or write that storage exactly as they
// do the arena's: inputs read, outputs written in disjoint chunks.
unsafe impl Send for DonatedBuf {}
// SAFETY: as for Send: shared references only read the pointer value.
unsafe impl Sync for DonatedBuf {}

/// Storage of one output buffer: bytes, or (for a host caller reading f32 results)
/// a `Vec<f32>` handed over as is.
#[derive(Clone)]
enum OutStore {
    Bytes(Vec<u8>),
    F32(Vec<f32>),
}

impl OutStore {
    /// Uninitialized storage of `n` bytes (every kernel writes every element of its
    /// outputs before they are read).
    fn new(n: usize, f32_host: bool) -> RuntimeResult<(OutStore, *mut u8)> {
        Ok(if f32_host {
            let len = n / 4;
            let mut v: Vec<f32> = Vec::new();
            v.try_reserve_exact(len.max(2))
                .map_err(|_| out_of_memory(n, "an output"))?;
            huge_pages(v.as_mut_ptr() as *mut u8, n);
            // SAFETY: capacity is at least `len` (reserved above). The f32s are not
            // initialized yet: this relies on every kernel writing each element of its
            // output buffers before anything reads them (the program reads a buffer
            // only after the kernel producing it has run).
            unsafe { v.set_len(len) };
            let ptr = v.as_mut_ptr() as *mut u8;
            (OutStore::F32(v), ptr)
        } else {
            let mut v: Vec<u8> = Vec::new();
            v.try_reserve_exact(n.max(8))
                .map_err(|_| out_of_memory(n, "an output"))?;
            huge_pages(v.as_mut_ptr(), n);
            // SAFETY: capacity is at least `n` (reserved above); as for the f32 case the
            // bytes are written by the kernel producing this output before being read.
            unsafe { v.set_len(n) };
            let ptr = v.as_mut_ptr();
            (OutStore::Bytes(v), ptr)
        })
    }

    fn into_host(self, dtype: rlx_ir::DType, dims: Vec<usize>) -> HostOutput {
        match self {
            OutStore::F32(v) => HostOutput::F32(v, dims),
            OutStore::Bytes(bytes) => HostOutput::Data(TensorData { dtype, dims, bytes }),
        }
    }
}

impl Executable for CpuExecutable {
    fn run(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<TensorData>> {
        Ok(self
            .run_impl(args, false)?
            .into_iter()
            .map(HostOutput::into_data)
            .collect())
    }

    fn run_host(&self, args: &[TensorView<'_>]) -> RuntimeResult<Vec<HostOutput>> {
        self.run_impl(args, true)
    }

    fn run_host_into(
        &self,
        args: &[TensorView<'_>],
        out: &mut Vec<HostOutput>,
    ) -> RuntimeResult<()> {
        self.run_with_donated(args, true, &[], &mut Vec::new(), out)
    }

    fn run_host_donating(
        &self,
        args: &[TensorView<'_>],
        donations: &mut [Donation<'_>],
    ) -> RuntimeResult<Vec<HostOutput>> {
        check_donations(args, donations)?;
        self.run_donating(args, donations)
    }

    fn profile(&self) -> Option<rlx_runtime::Profile> {
        self.profile_data()
    }

    fn explain(&self) -> String {
        let mut s = rlx_compile::explain(&self.program, "cpu", self.arena_bytes());
        if let Some(b) = &self.fixed {
            let notes: Vec<String> = b
                .kernels
                .iter()
                .enumerate()
                .filter_map(|(k, bk)| {
                    let note = match bk {
                        BKernel::Ew(e) => Some(e.jit_note()),
                        BKernel::Contract(c) => c.jit_note().map(|n| format!("epilogue: {n}")),
                        BKernel::RowGroup(g) => g.fused_note().map(str::to_string),
                        _ => None,
                    }?;
                    Some(format!("  kernel {k}: {note}\n"))
                })
                .collect();
            if !notes.is_empty() {
                if !s.ends_with('\n') {
                    s.push('\n');
                }
                s.push_str("elementwise kernels, matmul epilogues and row groups run as:\n");
                s.extend(notes);
            }
        }
        if let Some(r) = self.profile_report() {
            if !s.ends_with('\n') {
                s.push('\n');
            }
            s.push_str(&r);
        }
        s
    }
}

impl CpuExecutable {
    /// Run once; with `f32_host`, f32 outputs are allocated as `Vec<f32>` and returned
    /// without a copy.
    fn run_impl(&self, args: &[TensorView<'_>], f32_host: bool) -> RuntimeResult<Vec<HostOutput>> {
        let mut out = Vec::new();
        self.run_with_donated(args, f32_host, &[], &mut Vec::new(), &mut out)?;
        Ok(out)
    }

    /// A host run with donated arguments (their views in `args` carry no bytes): each
    /// output the program may write over its donation is computed into the donated
    /// storage and returned in it; the other donations are only read.
    fn run_donating(
        &self,
        args: &[TensorView<'_>],
        donations: &mut [Donation<'_>],
    ) -> RuntimeResult<Vec<HostOutput>> {
        let p = &self.program;
        let mut own: Vec<DonatedBuf> = Vec::with_capacity(donations.len());
        let mut stores: Vec<(usize, Vec<f32>)> = Vec::new();
        for d in donations.iter_mut() {
            let into =
                rlx_compile::memplan::donatable(p, d.arg, d.output).then(|| p.outputs[d.output]);
            own.push(DonatedBuf {
                arg: d.arg,
                ptr: d.data.as_mut_ptr() as *mut u8,
                bytes: d.data.len() * 4,
                into,
            });
            if let Some(b) = into {
                // The storage moves; the pointer into it stays valid.
                stores.push((b, std::mem::take(d.data)));
            }
        }
        let mut out = Vec::new();
        let r = self
            .run_with_donated(args, true, &own, &mut stores, &mut out)
            .map(|()| out);
        // On error the donated vectors are handed back (their values may have changed).
        for (b, v) in stores {
            let i = own
                .iter()
                .position(|o| o.into == Some(b))
                .expect("a donated store");
            *donations[i].data = v;
        }
        r
    }

    /// Run once. `donated` gives the storage of donated arguments (their views carry
    /// no bytes); `stores` holds, per output buffer written over a donation, the
    /// donated vector: moved into the results on success, left there on error. The
    /// results go into `out` (cleared first; a caller may keep it between runs).
    fn run_with_donated(
        &self,
        args: &[TensorView<'_>],
        f32_host: bool,
        donated: &[DonatedBuf],
        stores: &mut Vec<(usize, Vec<f32>)>,
        out: &mut Vec<HostOutput>,
    ) -> RuntimeResult<()> {
        let mut spare = spare_dims(out);
        if self.small.is_some()
            && donated.is_empty()
            && stores.is_empty()
            && let Some(bound) = &self.fixed
            && self.run_small(bound, args, f32_host, out, &mut spare)?
        {
            return Ok(());
        }
        let inputs = RunInputs {
            args,
            f32_host,
            donated,
        };
        let results = RunResults {
            stores,
            out,
            spare: &mut spare,
        };
        // With a thread count set, the whole run happens in that pool, so every
        // parallel loop of every kernel is forked on its workers (a loop started
        // outside it would go to rayon's global pool).
        if let Some(pool) = crate::threads::run_pool()
            && pool.current_thread_index().is_none()
        {
            return pool.install(|| self.run_here(inputs, true, results));
        }
        let top = rayon::current_thread_index().is_none();
        self.run_here(inputs, top, results)
    }

    /// [`CpuExecutable::run_with_donated`] on the current thread; `top`: this run
    /// started the pool's work itself (it did not come from inside a parallel loop),
    /// so it may keep the other workers warm between its kernels.
    fn run_here(
        &self,
        inputs: RunInputs<'_, '_>,
        top: bool,
        results: RunResults<'_>,
    ) -> RuntimeResult<()> {
        let RunInputs {
            args,
            f32_host,
            donated,
        } = inputs;
        let RunResults { stores, out, spare } = results;
        let p = &self.program;
        self.check_args(args, donated)?;
        let bound = self.bound_for(args)?;
        if self.fixed.is_some() {
            check_static_dims(p, args)?;
        }
        // Fully fused programs need no arena: skip the pool (and its lock) entirely.
        let pooled = bound.arena > 0;
        let mut arena = if pooled {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            pool.pop().unwrap_or_default()
        } else {
            Vec::new()
        };
        if arena.len() * 64 < bound.arena {
            drop(std::mem::take(&mut arena)); // free the smaller one before asking for more
            arena = lines(bound.arena, "the arena of intermediate buffers")?;
        }
        // Arguments whose bytes are not aligned for their dtype are copied once.
        let mut realigned: Vec<Vec<Line>> = Vec::new();
        // The per-buffer tables come from this thread's previous run (no allocation per
        // run once they have grown); a nested run on this thread finds them taken and
        // allocates its own.
        let mut outputs = RUN_OUTPUTS.take();
        outputs.clear();
        outputs.resize_with(p.buffers.len(), || None);
        let mut bases = RUN_BASES.take();
        bases.clear();
        for (i, b) in p.buffers.iter().enumerate() {
            // A donated argument, and the output written over it, use its storage.
            let donor = donated
                .iter()
                .find(|d| b.kind == BufKind::Arg(d.arg) || d.into == Some(i));
            let ptr = match &b.kind {
                _ if donor.is_some() => donor.unwrap().ptr,
                BufKind::Arg(a) => {
                    let bytes = args[*a].bytes;
                    let align = b.shape.dtype().size_bytes().min(8);
                    if !(bytes.as_ptr() as usize).is_multiple_of(align) {
                        let mut l = lines(bytes.len(), "an aligned copy of an argument")?;
                        // SAFETY: `l` is a fresh allocation of at least `bytes.len()`
                        // bytes, distinct from the argument's, so the copy is in bounds
                        // of both and cannot overlap.
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                bytes.as_ptr(),
                                l.as_mut_ptr() as *mut u8,
                                bytes.len(),
                            )
                        };
                        let ptr = l.as_mut_ptr() as *mut u8;
                        realigned.push(l);
                        ptr
                    } else {
                        bytes.as_ptr() as *mut u8
                    }
                }
                BufKind::Const(_) => self.consts[i].as_ref().unwrap().as_ptr() as *mut u8,
                // SAFETY: the arena holds at least `bound.arena` bytes (reallocated above
                // when smaller) and memplan::plan_offsets places every temporary at
                // `offsets[i]` with `offsets[i] + buf_bytes[i] <= arena`.
                BufKind::Temp => unsafe { (arena.as_mut_ptr() as *mut u8).add(bound.offsets[i]) },
                BufKind::Output(_) => {
                    let f32_out = f32_host && b.shape.dtype() == rlx_ir::DType::F32;
                    let (store, ptr) = OutStore::new(bound.buf_bytes[i], f32_out)?;
                    outputs[i] = Some(store);
                    ptr
                }
            };
            bases.push(ptr);
        }
        let shared = par::Bases(&bases);
        let run_kernels = || -> RuntimeResult<()> {
            let bases = shared.get();
            let order = order::locality_order(p, bases, &bound.buf_bytes);
            let seq = (0..bound.kernels.len()).map(|i| order.as_ref().map_or(i, |o| o[i]));
            for (k, bk) in seq.map(|k| (k, &bound.kernels[k])) {
                let t0 = self.profile.as_ref().map(|_| std::time::Instant::now());
                let r = match bk {
                    BKernel::Ew(e) => e.run(bases),
                    BKernel::Reduce(r) => r.run(bases),
                    BKernel::Row(r) => r.run(bases),
                    BKernel::Contract(c) => c.run(bases),
                    BKernel::Opaque(o) => o.run(bases),
                    BKernel::Attn(a) => a.run(bases),
                    BKernel::RowGroup(g) => g.run(bases),
                };
                if let (Some(prof), Some(t0)) = (&self.profile, t0) {
                    let mut prof = prof.lock().unwrap_or_else(|e| e.into_inner());
                    prof[k].0 += t0.elapsed().as_secs_f64();
                    prof[k].1 += 1;
                }
                if let Err(e) = r {
                    return Err(kernel_error(p, k, e));
                }
            }
            Ok(())
        };
        // The whole program runs on a pool thread: each kernel's parallel loop is then
        // forked from inside the pool instead of injected from outside, which would
        // park this thread and wake it again once per kernel (microseconds each).
        let result = if bound.kernels.len() > 1 && top {
            // The other workers stay awake between kernels (taking each kernel's chunks
            // as soon as they are forked) instead of falling asleep during the serial
            // stretches and being woken through the OS per kernel.
            let done = std::sync::atomic::AtomicBool::new(false);
            let done = &done;
            rayon::scope(|s| {
                let home = rayon::current_thread_index();
                if rayon::current_num_threads() > 1 {
                    s.spawn_broadcast(move |_, _| {
                        if rayon::current_thread_index() != home {
                            par::keep_warm(done);
                        }
                    });
                }
                let _stop = par::SetOnDrop(done);
                par::as_program(run_kernels)
            })
        } else {
            run_kernels()
        };
        drop(realigned);
        if pooled {
            self.pool
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(arena);
        }
        result?;
        for (b, v) in stores.drain(..) {
            outputs[b] = Some(OutStore::F32(v));
        }
        push_outputs(p, &bound, &mut outputs, out, spare);
        RUN_OUTPUTS.set(outputs);
        RUN_BASES.set(bases);
        Ok(())
    }
}

impl CpuExecutable {
    /// The argument count, and each argument's dtype and byte length (a donated
    /// argument's storage stands for its bytes), against the program's declarations.
    fn check_args(&self, args: &[TensorView<'_>], donated: &[DonatedBuf]) -> RuntimeResult<()> {
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
        for (i, (a, (name, shape))) in args.iter().zip(&p.args).enumerate() {
            let bytes = donated
                .iter()
                .find(|d| d.arg == i)
                .map_or(a.bytes.len(), |d| d.bytes);
            if a.dtype != shape.dtype() || bytes != a.numel() * a.dtype.size_bytes() {
                let error = if a.dtype != shape.dtype() {
                    RuntimeError::dtype
                } else {
                    RuntimeError::shape
                };
                return Err(error(format!(
                    "graph `{}`: argument `{name}` is declared {shape} but got {:?} {} ({} bytes)",
                    p.name,
                    a.dims,
                    a.dtype,
                    a.bytes.len()
                )));
            }
        }
        Ok(())
    }
}

/// Each argument's dims against its declared static shape (static programs).
fn check_static_dims(p: &Program, args: &[TensorView<'_>]) -> RuntimeResult<()> {
    for (a, (name, shape)) in args.iter().zip(&p.args) {
        // Compared in place (collecting the static dims allocated per argument).
        let same = shape.rank() == a.dims.len()
            && shape
                .dims()
                .iter()
                .zip(a.dims)
                .all(|(d, &n)| d.as_static() == Some(n));
        if !same {
            return Err(RuntimeError::shape(format!(
                "graph `{}`: argument `{name}` is declared {shape} but got {:?} {}",
                p.name, a.dims, a.dtype
            )));
        }
    }
    Ok(())
}

/// The error of kernel `k` of `p` failing with `e`.
fn kernel_error(p: &Program, k: usize, e: String) -> RuntimeError {
    let kernel = &p.kernels[k];
    RuntimeError::run(format!(
        "graph `{}`, kernel {k} ({} of [{}]): {e}",
        p.name,
        kernel.label(),
        kernel.fused_names.join(", ")
    ))
}

/// Clear a caller's kept result list, returning the dims vector of its last result: the
/// next result's dims are written into it instead of a new allocation (an eager read
/// hands its result's dims back this way, see `run_host_into`).
fn spare_dims(out: &mut Vec<HostOutput>) -> Option<Vec<usize>> {
    let last = out.pop();
    out.clear();
    match last? {
        HostOutput::F32(_, dims) => Some(dims),
        HostOutput::Data(d) => Some(d.dims),
        _ => None,
    }
}

/// Move the output stores of a finished run into `out`, in the program's output
/// order; an output listed more than once is moved into its first position and cloned
/// into the later ones. The first result's dims reuse `spare`'s allocation.
fn push_outputs(
    p: &Program,
    bound: &Bound,
    outputs: &mut [Option<OutStore>],
    out: &mut Vec<HostOutput>,
    spare: &mut Option<Vec<usize>>,
) {
    out.reserve(p.outputs.len());
    for (j, &b) in p.outputs.iter().enumerate() {
        if let Some(first) = p.outputs[..j].iter().position(|&x| x == b) {
            let copy = out[first].clone();
            out.push(copy);
            continue;
        }
        let store = outputs[b].take().expect("output written");
        let dims = match spare.take() {
            Some(mut d) => {
                d.clear();
                d.extend_from_slice(&bound.buf_dims[b]);
                d
            }
            None => bound.buf_dims[b].clone(),
        };
        out.push(store.into_host(p.buffers[b].shape.dtype(), dims));
    }
}
