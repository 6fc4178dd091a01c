//! Register-level evaluation of f32 elementwise tile programs: on x86-64 CPUs with
//! AVX-512, a [`TileProg`](crate::exec::vm::TileProg) whose instructions are all f32 loads, constants and the
//! arithmetic below is compiled to machine code that evaluates the whole expression 16
//! lanes at a time in vector registers — one pass over the tile instead of one pass per
//! instruction through the L1 scratch.
//!
//! The generated code performs, per lane, exactly the floating-point operations of the
//! tile interpreter (the same IEEE additions, products, quotients, square roots and
//! fused multiply-adds, in the same order, as the `math` lane kernels compiled for FMA
//! hardware), so results are bit-identical to the interpreter's; the tests pin that.
//! Supported: f32 loads (vectors or broadcast scalars), constants, the product value of
//! an epilogue, `+ − · ÷ max min`, `neg abs sqrt relu exp log tanh sigmoid silu erf
//! gelu gelu_approx`; f64 loads, constants, `+ − · ÷ sqrt` (an f64 value lives in two registers, lanes 0–7 and
//! 8–15); casts between f32 and f64; f32 comparisons as masks (held as 1.0 / 0.0), the
//! selects on them and their casts to f32; and bf16 / f16 values held as f32 like the
//! interpreter holds them: every f32 op above on them, each result rounded to its
//! format (to nearest, ties to even, in registers), casts into and between the formats
//! and out of them to f32 and f64. Anything else leaves the program to the
//! interpreter. Debugging aids: a `tracing` debug event of target `rlx::jit` (e.g.
//! `RLX_LOG=rlx::jit=debug` through rlx-tensor) names the instruction that kept a
//! program interpreted, `RLX_JIT_DUMP=<dir>` writes each compiled function for
//! `objdump -D -b binary -m i386:x86-64`.

mod cache;
mod lower;
mod mem;
mod x86;

use std::sync::atomic::{AtomicU8, Ordering};

pub(crate) use cache::JitCache;
pub(crate) use lower::{compile, unsupported};

/// Compiled code for one tile program (and one pattern of scalar inputs).
pub(crate) struct JitKernel {
    code: mem::ExecMem,
    /// Constants the code reads (broadcast once per call).
    consts: Vec<u32>,
    /// Number of inputs (the loads and the product value, in instruction order).
    pub(crate) inputs: usize,
    /// Bit `j` set: input `j` is a scalar (broadcast) rather than a run of values.
    pub(crate) scalar_mask: u64,
    /// Instruction indices whose values the code writes out, in order.
    pub(crate) exports: Vec<usize>,
}

// Compiled programs (and so their kernels) are run from several threads at once:
// running only reads the code pages (a read + execute `memmap2::Mmap`) and `consts`.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<JitKernel>();
};

type KernelFn = unsafe extern "sysv64" fn(
    ins: *const *const f32,
    outs: *const *mut f32,
    full_bytes: usize,
    tail: usize,
    consts: *const u32,
);

impl JitKernel {
    /// Evaluate `n` lanes: `ins[j]` points at `n` values (or one, for a scalar input),
    /// `outs[k]` receives `n` values of export `k`.
    ///
    /// # Safety
    /// Every pointer must be valid for the stated lengths; outputs must not overlap
    /// inputs except at the same lane (read before written).
    pub(crate) unsafe fn run(&self, ins: &[*const f32], outs: &[*mut f32], n: usize) {
        // The code indexes `ins` and `outs` by the counts it was compiled for: shorter
        // slices would make it read pointers past their ends.
        assert_eq!(ins.len(), self.inputs, "JIT kernel: input count");
        assert_eq!(outs.len(), self.exports.len(), "JIT kernel: output count");
        // SAFETY: `code` holds a complete function emitted by `lower::compile` for the
        // sysv64 signature of `KernelFn` (it touches only caller-saved registers: rax,
        // rcx, rdx, rsi, rdi, r8, r11, zmm and k, and ends with vzeroupper; ret), mapped
        // read + execute by ExecMem and alive as long as `self`.
        let f: KernelFn = unsafe { std::mem::transmute(self.code.ptr()) };
        // SAFETY: `ins`/`outs` have the compiled counts (asserted above) and the caller
        // guarantees each pointer covers `n` lanes (a scalar input: one value, as the
        // scalar mask the code was compiled for says); `consts` is the table the code
        // was compiled to read, alive with `self`. The code needs AVX-512F, which
        // `enabled()` checked before anything was compiled.
        unsafe {
            f(
                ins.as_ptr(),
                outs.as_ptr(),
                (n / 16) * 64,
                n % 16,
                self.consts.as_ptr(),
            )
        };
    }
}

/// Whether the JIT is used: the CPU has AVX-512F, `RLX_JIT` is not `0`, and
/// [`set_enabled`] has not turned it off.
pub(crate) fn enabled() -> bool {
    // 0 = unknown, 1 = off, 2 = on.
    static STATE: AtomicU8 = AtomicU8::new(0);
    match STATE.load(Ordering::Relaxed) {
        1 => return false,
        2 => return !DISABLED.load(Ordering::Relaxed),
        _ => {}
    }
    #[cfg(target_arch = "x86_64")]
    let hw = std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let hw = false;
    let env_off = std::env::var_os("RLX_JIT").is_some_and(|v| v == "0");
    let on = hw && !env_off;
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
    on && !DISABLED.load(Ordering::Relaxed)
}

/// Tile programs compiled so far in this process (tests check that the JIT ran).
static COMPILED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many tile programs have been compiled to machine code in this process (0 where
/// the CPU lacks AVX-512 or the JIT is off).
///
/// A compiled program compiles each of its tile programs once, on its first run, and
/// reuses that code for every later binding of its dynamic dims (the code reads the
/// element count at run time), so a decode loop whose cache length grows each token
/// stops adding to this count after its first steps. Compiling a graph again gives a
/// new program that compiles its own code.
pub fn compiled_count() -> usize {
    COMPILED.load(Ordering::Relaxed)
}

pub(crate) fn note_compiled() {
    COMPILED.fetch_add(1, Ordering::Relaxed);
}

static DISABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turn the elementwise JIT off (or back on) for tile programs run from now on in this
/// process. The interpreter gives the same bits, so this changes speed only; tests use
/// it to compare the two.
///
/// ```
/// rlx_cpu::set_jit(false); // interpret every tile program
/// rlx_cpu::set_jit(true);
/// ```
pub fn set_enabled(on: bool) {
    DISABLED.store(!on, Ordering::Relaxed);
}
