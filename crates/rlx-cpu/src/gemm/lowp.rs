//! Half-precision GEMM: `C (+)= A·B` with bf16 or f16 operands and f32 accumulation, on
//! the best unit the CPU has, chosen at run time.
//!
//! | path | operands | needs | how |
//! |---|---|---|---|
//! | [`LowpPath::Amx`] | bf16 | AMX-TILE + AMX-BF16, Linux | `tdpbf16ps` on 16×16 f32 tiles |
//! | [`LowpPath::Avx512Bf16`] | bf16 | AVX512_BF16 | `vdpbf16ps` on zmm registers |
//! | [`LowpPath::Avx512F32`] | bf16, f16 | AVX-512 F/BW | converted to f32 while packing, the own f32 kernel |
//! | [`LowpPath::CastF32`] | bf16, f16 | nothing | both operands copied to f32, then [`sgemm`] |
//!
//! The default is the first available path of [`LowpPath::preference`]: the order above,
//! except that on Intel CPUs `Avx512F32` comes before `Avx512Bf16` — on Sapphire Rapids
//! `vdpbf16ps` retires one instruction per ~2 cycles (56 GFLOP/s per core measured against
//! 115 for `vfmadd231ps`; on an Emerald Rapids core, 85 against 173 in a loop of 20
//! independent chains), so widening to f32 is twice as fast there; AMD's Zen 4/5 run it
//! at the f32 FMA rate or better (not measured here). f16 starts at `Avx512F32`: no unit
//! on these CPUs multiplies f16 with f32 accumulation (AMX-FP16 is absent on Sapphire
//! Rapids; AVX512_FP16 accumulates in f16), see `bf16_avx512.rs`. The choice is fixed per
//! process and per CPU, never timed, so results are reproducible run to run. The environment
//! variables `RLX_GEMM_BF16` and `RLX_GEMM_F16` (`amx`, `avx512bf16`, `avx512f32`, `f32`)
//! force a path for testing and benchmarking; an unknown or unavailable value is reported
//! once on stderr and the default is used.
//!
//! Exactness: every path multiplies the exact (bf16/f16-valued) inputs and accumulates in
//! f32, so results agree with an f64 reference over the same inputs to about
//! `K · 2⁻²⁴ · Σ|aᵢ·bᵢ|` (the sum's order differs between paths). AMX and `vdpbf16ps`
//! treat bf16 denormals (below 2⁻¹²⁶) as zero. Each path's result is deterministic and does
//! not depend on the thread count.
//!
//! `Avx512F32` widens the operands exactly into the packed layouts of rlx's own f32 AVX-512
//! kernel (`f32_avx512::sgemm_half`), which then runs as for an f32 product: its sums are
//! that kernel's (blocks of `KC` sums, each a chain of fused multiply-adds from zero, added
//! to C), so the result has the bits of [`super::sgemm_with`] on `F32Path::Avx512` over
//! f32 copies of A and B (the cast path's bits whenever its `sgemm` picks that kernel).
//! Until issue #17 it ran a kernel of its own (12 × 32 FMA tile on the shared
//! low-precision driver, chains continued from the stored partial sum at each block),
//! removed once the own f32 kernel measured faster at every size. Measured on the 2-vCPU Sapphire
//! Rapids VM (2026-12-03, `gemm_lowp --only=avx512f32`, best of each run, medians of four
//! runs alternated with the old kernel and with torch 2.15, each in its own autogroup at
//! nice -20): f16 1024³ 175 → 188 GFLOP/s on one thread and 362 → 369 on two, 2048³
//! 166 → 186 and 347 → 363; the f32 kernel itself read 181–204 on one thread. torch's
//! f16 `matmul` (best of 41 calls, `OMP_NUM_THREADS=2`) read ~190 and ~372 at both
//! sizes: rlx/torch 0.97–0.99× by best against best (above 1 against torch's medians).
//! With B transposed (`--tb`, a linear layer's weight), f16 1024³ went 158 → 177 on one
//! thread and 275 → 335 on two (medians of three alternated runs).
//!
//! [`sgemm`]: super::sgemm

use super::checks::{self, or_panic};
use super::{GemmError, MatMut, MatRef, sgemm};
use std::sync::OnceLock;

pub use half::{bf16, f16};

/// Which unit computes a half-precision product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LowpPath {
    /// Intel AMX tiles (`tdpbf16ps`); bf16 only.
    Amx,
    /// AVX512_BF16 `vdpbf16ps`; bf16 only.
    Avx512Bf16,
    /// Operands widened to f32 while packed, f32 FMA on AVX-512.
    Avx512F32,
    /// Whole operands copied to f32, then the f32 GEMM (any CPU).
    CastF32,
}

impl LowpPath {
    /// Every path, in declaration order.
    pub const ALL: [LowpPath; 4] = [
        LowpPath::Amx,
        LowpPath::Avx512Bf16,
        LowpPath::Avx512F32,
        LowpPath::CastF32,
    ];

    /// The name used by `RLX_GEMM_BF16` / `RLX_GEMM_F16`.
    pub fn name(self) -> &'static str {
        match self {
            LowpPath::Amx => "amx",
            LowpPath::Avx512Bf16 => "avx512bf16",
            LowpPath::Avx512F32 => "avx512f32",
            LowpPath::CastF32 => "f32",
        }
    }

    /// The path named `s` (as [`LowpPath::name`] spells it).
    pub fn parse(s: &str) -> Option<LowpPath> {
        LowpPath::ALL.into_iter().find(|p| p.name() == s.trim())
    }

    /// Whether this path can multiply operands of type `T` on this CPU and OS.
    pub fn available<T: HalfFloat>(self) -> bool {
        let bf = T::IS_BF16;
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                LowpPath::Amx => bf && super::amx::available(),
                LowpPath::Avx512Bf16 => bf && super::bf16_avx512::avx512bf16_available(),
                LowpPath::Avx512F32 => super::avx512::avx512bw(),
                LowpPath::CastF32 => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = bf;
            self == LowpPath::CastF32
        }
    }

    /// Every path in the order the default tries them on this CPU (see the module docs).
    pub fn preference() -> [LowpPath; 4] {
        use LowpPath::*;
        if cpu_is_intel() {
            [Amx, Avx512F32, Avx512Bf16, CastF32]
        } else {
            [Amx, Avx512Bf16, Avx512F32, CastF32]
        }
    }

    /// The path used for `T` when none is given: the environment's choice (see the module
    /// docs) if available, else the fastest available one. Decided once per process.
    pub fn default_for<T: HalfFloat>() -> LowpPath {
        static BF16: OnceLock<LowpPath> = OnceLock::new();
        static F16: OnceLock<LowpPath> = OnceLock::new();
        let (cell, var) = if T::IS_BF16 {
            (&BF16, "RLX_GEMM_BF16")
        } else {
            (&F16, "RLX_GEMM_F16")
        };
        *cell.get_or_init(|| {
            let best = LowpPath::preference()
                .into_iter()
                .find(|p| p.available::<T>())
                .unwrap_or(LowpPath::CastF32);
            let Ok(v) = std::env::var(var) else {
                return best;
            };
            match LowpPath::parse(&v) {
                Some(p) if p.available::<T>() => p,
                Some(p) => {
                    tracing::warn!(
                        target: "rlx::gemm",
                        "{var}={v}: the {} path is not available for {} on this CPU; using {}",
                        p.name(),
                        T::NAME,
                        best.name()
                    );
                    best
                }
                None => {
                    tracing::warn!(
                        target: "rlx::gemm",
                        "{var}={v} is not a GEMM path (expected amx, avx512bf16, avx512f32 \
                         or f32); using {}",
                        best.name()
                    );
                    best
                }
            }
        })
    }
}

/// Whether CPUID names the vendor "GenuineIntel".
fn cpu_is_intel() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let id = std::arch::x86_64::__cpuid(0);
        // The vendor string is EBX, EDX, ECX: "Genu" "ineI" "ntel".
        (id.ebx, id.edx, id.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A 16-bit float type the half-precision GEMM accepts (`bf16`, `f16`).
pub trait HalfFloat: Copy + Send + Sync + 'static + sealed::Sealed {
    /// The type's name in messages.
    const NAME: &'static str;
    /// Whether it is bf16 (else f16).
    #[doc(hidden)]
    const IS_BF16: bool;
    /// Round an f32 to this type (to nearest, ties to even).
    fn from_f32_rne(v: f32) -> Self;
    /// The exact f32 value.
    fn to_f32_exact(self) -> f32;
    /// `out[i] = src[i]` as f32 (exact), for equal lengths.
    #[doc(hidden)]
    fn widen_slice(src: &[Self], out: &mut [f32]);
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

impl HalfFloat for bf16 {
    const NAME: &'static str = "bf16";
    const IS_BF16: bool = true;
    fn from_f32_rne(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn to_f32_exact(self) -> f32 {
        self.to_f32()
    }
    fn widen_slice(src: &[Self], out: &mut [f32]) {
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, out)
    }
}

impl HalfFloat for f16 {
    const NAME: &'static str = "f16";
    const IS_BF16: bool = false;
    fn from_f32_rne(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f32_exact(self) -> f32 {
        self.to_f32()
    }
    fn widen_slice(src: &[Self], out: &mut [f32]) {
        half::slice::HalfFloatSliceExt::convert_to_f32_slice(src, out)
    }
}

/// The packing kernels' name for `T`'s storage.
#[cfg(target_arch = "x86_64")]
fn kind<T: HalfFloat>() -> super::lowp_drive::Half {
    if T::IS_BF16 {
        super::lowp_drive::Half::Bf16
    } else {
        super::lowp_drive::Half::F16
    }
}

/// `C = A·B` (or `C += A·B` with `accumulate`) with half-precision `A` (m×k) and `B`
/// (k×n), any strides, f32 `C`, on the default path for `T`
/// ([`LowpPath::default_for`]) and at most `threads` threads of the current rayon pool.
///
/// Panics (naming the shapes or the view) if the shapes do not chain, a view reaches
/// outside its slice, or C's strides make two elements share storage; [`try_gemm_half`]
/// returns those as a [`GemmError`] instead.
#[track_caller]
pub fn gemm_half<T: HalfFloat>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, f32>,
    accumulate: bool,
    threads: usize,
) {
    or_panic(try_gemm_half(a, b, c, accumulate, threads));
}

/// [`gemm_half`] returning a [`GemmError`] (and writing nothing) where it would panic.
pub fn try_gemm_half<T: HalfFloat>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, f32>,
    accumulate: bool,
    threads: usize,
) -> Result<(), GemmError> {
    let path = LowpPath::default_for::<T>();
    try_gemm_half_with(path, a, b, c, accumulate, threads)
}

/// [`gemm_half`] on a given path. Panics if the path is not available for `T` here
/// (see [`LowpPath::available`]); [`try_gemm_half_with`] returns the error instead.
#[track_caller]
pub fn gemm_half_with<T: HalfFloat>(
    path: LowpPath,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, f32>,
    accumulate: bool,
    threads: usize,
) {
    or_panic(try_gemm_half_with(path, a, b, c, accumulate, threads));
}

/// The error of a path that cannot multiply `T` operands here.
fn unavailable<T: HalfFloat>(op: &'static str, path: LowpPath) -> GemmError {
    GemmError::PathUnavailable {
        op,
        path: path.name(),
        operands: T::NAME,
        needs: "AMX needs AMX-BF16 and Linux, avx512bf16 needs AVX512_BF16, avx512f32 needs \
                AVX-512 F/BW",
        fix: "use LowpPath::default_for or check LowpPath::available first",
    }
}

/// [`gemm_half_with`] returning a [`GemmError`] (and writing nothing) where it would
/// panic.
pub fn try_gemm_half_with<T: HalfFloat>(
    path: LowpPath,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, f32>,
    accumulate: bool,
    threads: usize,
) -> Result<(), GemmError> {
    let op = "gemm_half";
    if !path.available::<T>() {
        return Err(unavailable::<T>(op, path));
    }
    checks::views(op, &a, &b, &c)?;
    run_half(path, a, b, c, accumulate, threads);
    Ok(())
}

/// The product of [`try_gemm_half_with`] once its checks have passed (`path` available
/// for `T`, the views chaining, in bounds, C's elements distinct).
fn run_half<T: HalfFloat>(
    path: LowpPath,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, f32>,
    accumulate: bool,
    threads: usize,
) {
    let (m, n, k) = (c.rows, c.cols, a.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            let mut c = c;
            super::scale(&mut c, 0.0);
        }
        return;
    }
    match path {
        LowpPath::CastF32 => cast_path(a, b, c, accumulate, threads),
        #[cfg(target_arch = "x86_64")]
        _ => packed_path(path, a, b, c, accumulate, threads),
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("only the cast path is available off x86-64"),
    }
}

/// [`gemm_half_with`] writing `C = A·B` rounded once (to nearest, ties to even) from the
/// f32 accumulator into a half-precision `C`. Panics as [`gemm_half_with`] does;
/// [`try_gemm_half_rounded_with`] returns the error instead.
#[track_caller]
pub fn gemm_half_rounded_with<T: HalfFloat>(
    path: LowpPath,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, T>,
    threads: usize,
) {
    or_panic(try_gemm_half_rounded_with(path, a, b, c, threads));
}

/// [`gemm_half_rounded_with`] returning a [`GemmError`] (and writing nothing) where it
/// would panic.
pub fn try_gemm_half_rounded_with<T: HalfFloat>(
    path: LowpPath,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, T>,
    threads: usize,
) -> Result<(), GemmError> {
    let op = "gemm_half_rounded";
    if !path.available::<T>() {
        return Err(unavailable::<T>(op, path));
    }
    checks::views(op, &a, &b, &c)?;
    let (m, n) = (c.rows, c.cols);
    let mut acc = vec![0f32; m * n];
    // The checks above cover A, B and the dense accumulator's product.
    let acc_view = MatMut::row_major(&mut acc, m, n);
    run_half(path, a, b, acc_view, false, threads);
    for i in 0..m {
        for j in 0..n {
            c.data[super::at(c.offset, c.row_stride, c.col_stride, i, j)] =
                T::from_f32_rne(acc[i * n + j]);
        }
    }
    Ok(())
}

/// The portable path: dense f32 copies of both operands and the f32 GEMM.
fn cast_path<T: HalfFloat>(
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, f32>,
    accumulate: bool,
    threads: usize,
) {
    let dense = |v: &MatRef<'_, T>| -> Vec<f32> {
        let mut out = vec![0f32; v.rows * v.cols];
        for (i, row) in out.chunks_exact_mut(v.cols.max(1)).enumerate() {
            if v.col_stride == 1 {
                // A contiguous row: the slice conversion (vectorized where the CPU can).
                let at = super::at(v.offset, v.row_stride, 1, i, 0);
                T::widen_slice(&v.data[at..at + v.cols], row);
                continue;
            }
            for (j, o) in row.iter_mut().enumerate() {
                *o = v.data[super::at(v.offset, v.row_stride, v.col_stride, i, j)].to_f32_exact();
            }
        }
        out
    };
    let (af, bf) = (dense(&a), dense(&b));
    let beta = if accumulate { 1.0 } else { 0.0 };
    sgemm(
        1.0,
        MatRef::row_major(&af, a.rows, a.cols),
        MatRef::row_major(&bf, b.rows, b.cols),
        beta,
        c,
        threads,
    );
}

/// Multiply-adds per worker thread below which extra threads are not used.
const PAR_MNK_PER_THREAD: usize = 1 << 21;

#[cfg(target_arch = "x86_64")]
fn packed_path<T: HalfFloat>(
    path: LowpPath,
    a: MatRef<'_, T>,
    b: MatRef<'_, T>,
    c: MatMut<'_, f32>,
    accumulate: bool,
    threads: usize,
) {
    use super::bf16_avx512::DpBf16;
    use super::lowp_drive::{Dst, Src};
    let (m, n, k) = (c.rows, c.cols, a.cols);
    let src = |v: &MatRef<'_, T>| Src {
        // SAFETY: the view was checked in bounds of its slice, so its (0, 0) element is
        // inside it; `T` is a 16-bit float, read as its bits.
        ptr: unsafe { (v.data.as_ptr() as *const u16).add(v.offset) },
        rs: v.row_stride,
        cs: v.col_stride,
    };
    let (sa, sb) = (src(&a), src(&b));
    let dst = Dst {
        // SAFETY: C's (0, 0) element is inside its slice (checked in bounds).
        ptr: unsafe { c.data.as_mut_ptr().add(c.offset) },
        rs: c.row_stride,
        cs: c.col_stride,
    };
    let threads = threads.min((m * n * k / PAR_MNK_PER_THREAD).max(1)).max(1);
    let job = super::lowp_drive::Job {
        a: sa,
        b: sb,
        c: dst,
        mnk: (m, n, k),
        accumulate,
        threads,
    };
    // SAFETY: the views are in bounds (checked above), C's elements are pairwise distinct
    // (no_self_overlap) and C is an exclusive borrow, so it overlaps neither A nor B; each
    // kernel was built only where its CPU features (and AMX permission) exist.
    unsafe {
        match path {
            LowpPath::Amx => job.run(&super::amx::Amx::new().expect("AMX checked available")),
            LowpPath::Avx512Bf16 => job.run(&DpBf16::new().expect("AVX512_BF16 checked")),
            LowpPath::Avx512F32 => super::f32_avx512::sgemm_half(
                kind::<T>(),
                sa,
                sb,
                dst,
                (m, n, k),
                accumulate,
                threads,
            ),
            LowpPath::CastF32 => unreachable!("handled by the caller"),
        }
    }
}
